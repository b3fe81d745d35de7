/* Does reading R rows side by side cost read bandwidth against one stream? CPU decode's 8-row
 * Q4_0 tile (dot_avx512.c: tile_q4_0_r8) walks 8 weight rows at once, 8 streams a thread;
 * llama.cpp repacks Q4_0 so that 8 rows interleave into one. THREADS threads each read their
 * share of a SIZE-MiB buffer (anonymous, huge pages as Velo's weights) as groups of R rows of
 * ROW bytes, 64 bytes from each row in turn, then the next 64 of each: R = 1 is one stream.
 * Each round runs every R given, in turn; the median pass of each R gives GB/s. Build and run
 * from the repository root:
 *   scripts/toolchain.sh run /usr/libexec/swift/bin/clang -O2 -mavx512f bench/cpu/streams.c -o bench/out/streams -lpthread
 *   bench/out/streams 2048 2 7 2304 1 8 4     (SIZE_MIB THREADS ROUNDS ROW R...; 2304: a 4096-wide Q4_0 row) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <immintrin.h>
#include "timing.h"

typedef struct { const uint8_t *p; size_t bytes, row; int r; long long sink; } job;

static void *reader(void *arg) {
    job *j = arg;
    const size_t group = j->row * (size_t)j->r;
    __m512i a = _mm512_setzero_si512(), b = a;
    for (size_t g = 0; g + group <= j->bytes; g += group) {
        const uint8_t *base = j->p + g;
        for (size_t c = 0; c + 128 <= j->row; c += 128)
            for (int i = 0; i < j->r; i++) {
                a = _mm512_xor_si512(a, _mm512_loadu_si512(base + i * j->row + c));
                b = _mm512_xor_si512(b, _mm512_loadu_si512(base + i * j->row + c + 64));
            }
    }
    j->sink = _mm_cvtsi128_si64(_mm512_castsi512_si128(_mm512_xor_si512(a, b)));
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: streams SIZE_MIB THREADS ROUNDS ROW R...\n"); return 2; }
    const size_t bytes = strtoull(argv[1], 0, 10) << 20, row = strtoull(argv[4], 0, 10);
    const int threads = atoi(argv[2]), rounds = atoi(argv[3]), nr = argc - 5;
    if (threads < 1 || threads > 64 || rounds < 1 || rounds > 64 || row < 128 || nr > 8) { fprintf(stderr, "streams: bad arguments\n"); return 2; }
    uint8_t *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) { fprintf(stderr, "cannot map %zu bytes\n", bytes); return 1; }
    madvise(buf, bytes, MADV_HUGEPAGE);
    memset(buf, 1, bytes);
    double gbs[8][64];
    long long sink = 0;
    for (int k = 0; k < rounds; k++)
        for (int v = 0; v < nr; v++) {
            const int r = atoi(argv[5 + v]);
            /* each thread's share: whole groups of r rows */
            const size_t group = row * (size_t)r, share = bytes / threads / group * group;
            pthread_t t[64];
            job jobs[64];
            const double t0 = now();
            for (int i = 0; i < threads; i++) {
                jobs[i] = (job){ buf + i * share, share, row, r, 0 };
                pthread_create(&t[i], NULL, reader, &jobs[i]);
            }
            for (int i = 0; i < threads; i++) { pthread_join(t[i], NULL); sink ^= jobs[i].sink; }
            gbs[v][k] = (double)(share / row * (row / 128 * 128)) * threads / (now() - t0) / 1e9;
        }
    for (int v = 0; v < nr; v++) {
        qsort(gbs[v], rounds, sizeof(double), cmp);
        printf("R=%s: median %.2f GB/s (min %.2f, max %.2f) over %d rounds, %d threads, rows of %zu bytes\n",
               argv[5 + v], gbs[v][rounds / 2], gbs[v][0], gbs[v][rounds - 1], rounds, threads, row);
    }
    return (int)(sink & 0) ;
}
