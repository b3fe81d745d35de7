/* What one AMX int8 tile operation costs on this CPU, in ns (best of 5 passes): the product of
 * a 16 x 32 and a 32 x 16 int8 tile (one sub-block of gemm_amx.c), the store of its 16 x 16
 * int32 sums, both in sequence, and a 512-byte tile load from buffers of growing size (L1, L2,
 * L3, memory), without and with software prefetch. Linux only (asks for the tile state).
 * Build and run from the repository root: */
//   scripts/toolchain.sh run /usr/libexec/swift/bin/clang -O2 -mamx-tile -mamx-int8 bench/cpu/amx-ops.c \
//     -o bench/out/amx-ops && bench/out/amx-ops
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "timing.h"

typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } tile_config;

static int32_t sums[2][256] __attribute__((aligned(64)));

#define N 1000000L
#define BEST(expr_loop, per, out)                               \
    do {                                                        \
        double best_ = 1e9;                                     \
        for (int p_ = 0; p_ < 5; p_++) {                        \
            const double t0_ = now();                           \
            expr_loop;                                          \
            const double t_ = now() - t0_;                      \
            if (t_ < best_) best_ = t_;                         \
        }                                                       \
        out = best_ * 1e9 / (per);                              \
    } while (0)

int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) { fprintf(stderr, "amx-ops: no AMX tile state granted\n"); return 2; }
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 2; t++) { c.rows[t] = 16; c.colsb[t] = 64; } /* sums */
    for (int t = 2; t < 4; t++) { c.rows[t] = 16; c.colsb[t] = 32; } /* A */
    for (int t = 4; t < 6; t++) { c.rows[t] = 8; c.colsb[t] = 64; }  /* B */
    _tile_loadconfig(&c);
    double dp, st, both;
    BEST(for (long i = 0; i < N; i++) { _tile_dpbssd(0, 2, 4); _tile_dpbssd(1, 3, 5); }, 2 * N, dp);
    BEST(for (long i = 0; i < N; i++) { _tile_stored(0, sums[0], 64); _tile_stored(1, sums[1], 64); }, 2 * N, st);
    BEST(for (long i = 0; i < N; i++) {
            _tile_zero(0); _tile_dpbssd(0, 2, 4); _tile_stored(0, sums[0], 64);
            _tile_zero(1); _tile_dpbssd(1, 3, 5); _tile_stored(1, sums[1], 64);
         }, 2 * N, both);
    printf("product %.1f ns (%.2f T int8 ops/s), store %.1f ns, zero + product + store %.1f ns\n", dp,
           16.0 * 16 * 32 * 2 / dp / 1e3, st, both);
    for (long size = 16 << 10; size <= 64L << 20; size *= 4) {
        int8_t *buf = aligned_alloc(64, size + 65536);
        memset(buf, 1, size + 65536);
        double plain, pf;
        BEST(for (long i = 0, o = 0; i < N / 4; i++) {
                _tile_loadd(2, buf + o, 32); _tile_loadd(3, buf + o + 512, 32);
                _tile_loadd(4, buf + o + 1024, 64); _tile_loadd(5, buf + o + 1536, 64);
                o = o + 2048 < size ? o + 2048 : 0;
             }, N, plain);
        BEST(for (long i = 0, o = 0; i < N / 4; i++) {
                for (int q = 0; q < 2048; q += 64) _mm_prefetch((const char *)buf + o + 2048 + q, _MM_HINT_T0);
                _tile_loadd(2, buf + o, 32); _tile_loadd(3, buf + o + 512, 32);
                _tile_loadd(4, buf + o + 1024, 64); _tile_loadd(5, buf + o + 1536, 64);
                o = o + 2048 < size ? o + 2048 : 0;
             }, N, pf);
        printf("512-byte tile load from %6ld KiB: %5.1f ns, %5.1f ns with prefetch 2 KiB ahead\n", size >> 10, plain, pf);
        free(buf);
    }
    _tile_release();
    return 0;
}
