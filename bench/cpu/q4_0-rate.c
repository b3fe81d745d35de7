/* How fast the CPU's one-row Q4_0 product (decode's) runs over a matrix that stays in L2, and
 * over one that streams from memory: single-threaded ck_matmul, K = 4096, best of 5 passes of
 * REPS calls each. When the in-L2 rate is near the memory rate, the arithmetic is not hidden
 * behind the reads (bench/RESULTS.md). Build and run from the repository root: */
//   scripts/toolchain.sh run /usr/libexec/swift/bin/clang -O2 -Iswift/Sources/CKernels/include \
//     -Iswift/Sources/CKernels bench/cpu/q4_0-rate.c swift/Sources/CKernels/*.c -o bench/out/q4_0-rate -lm -lpthread
//   bench/out/q4_0-rate 512 1000      (1.2 MB: in L2)
//   bench/out/q4_0-rate 200000 3      (461 MB: from memory)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ckernels.h"
#include "timing.h"

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: q4_0-rate ROWS REPS\n"); return 2; }
    const int64_t n = 4096, rows = atoll(argv[1]);
    const int reps = atoi(argv[2]);
    const size_t ws = (size_t)n / 32 * 18;
    uint8_t *w = malloc(ws * (size_t)rows);
    float *x = malloc(n * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
    if (!w || !x || !y || rows < 1 || reps < 1) { fprintf(stderr, "q4_0-rate: bad arguments or out of memory\n"); return 2; }
    for (size_t i = 0; i < ws * (size_t)rows; i++) w[i] = (uint8_t)rand();
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < n / 32; b++) { const uint16_t h = 0x2000; memcpy(w + r * ws + b * 18, &h, 2); } /* finite scales */
    for (int64_t i = 0; i < n; i++) x[i] = (float)(rand() % 1000) / 1000.0f - 0.5f;
    uint8_t a[4096 * 2];
    ck_quantize_row(ck_vec_dot_type(CK_TYPE_Q4_0), x, a, n);
    ck_matmul(CK_TYPE_Q4_0, n, w, ws, 0, rows, a, 0, 1, y, rows);
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        const double t0 = now();
        for (int r = 0; r < reps; r++) ck_matmul(CK_TYPE_Q4_0, n, w, ws, 0, rows, a, 0, 1, y, rows);
        const double t = (now() - t0) / reps;
        if (t < best) best = t;
    }
    printf("rows %lld, %.1f MB: %.2f GB/s (%.1f us a product)\n", (long long)rows, ws * rows / 1e6, ws * rows / best / 1e9, best * 1e6);
    return 0;
}
