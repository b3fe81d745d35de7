/* One thread's prefill product at each kernel level the CPU has from AVX-512 up (avx512-vnni,
 * avx512-amx): N weight rows of K values of TYPE (a ggml type id: 2 Q4_0, 8 Q8_0, 11 Q3_K,
 * 3 Q4_1, 7 Q5_1, 10 Q2_K, 12 Q4_K, 13 Q5_K, 14 Q6_K, 20 IQ4_NL, 23 IQ4_XS) times M activation rows, through ck_matmul. The levels alternate, REPS
 * calls each after a warm-up; the median gives int8 GOPS (2 N K M / time). Also the largest
 * difference between the levels' outputs. Build and run from the repository root: */
//   scripts/toolchain.sh run /usr/libexec/swift/bin/clang -O2 -Iswift/Sources/CKernels/include \
//     bench/cpu/prefill-gemm.c swift/Sources/CKernels/*.c -o bench/out/prefill-gemm -lm -lpthread
//   bench/out/prefill-gemm 2 2304 3584 512 7      (Qwen2.5-7B's Q|K|V, one thread's half)
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ckernels.h"
#include "timing.h"

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: prefill-gemm TYPE N K M REPS\n"); return 2; }
    const int type = atoi(argv[1]), reps = atoi(argv[5]);
    const int64_t N = atoll(argv[2]), K = atoll(argv[3]), M = atoll(argv[4]);
    const int atype = ck_vec_dot_type(type);
    const size_t ws = ck_row_size(type, K), as = ck_row_size(atype, K);
    if (atype < 0 || !ws || !as || N < 1 || M < 1 || reps < 1 || reps > 99) {
        fprintf(stderr, "prefill-gemm: bad arguments (K a multiple of the type's block)\n");
        return 2;
    }
    uint8_t *w = malloc(ws * N), *a = malloc(as * M);
    float *x = malloc(sizeof(float) * K), *y[2] = {malloc(sizeof(float) * N * M), malloc(sizeof(float) * N * M)};
    if (!w || !a || !x || !y[0] || !y[1]) { fprintf(stderr, "prefill-gemm: out of memory\n"); return 2; }
    srand(1);
    for (int64_t r = 0; r < N; r++) {
        for (int64_t k = 0; k < K; k++) x[k] = (float)((double)rand() / RAND_MAX) - 0.5f;
        ck_quantize_row(type, x, w + r * ws, K);
    }
    for (int64_t m = 0; m < M; m++) {
        for (int64_t k = 0; k < K; k++) x[k] = 3 * ((float)((double)rand() / RAND_MAX) - 0.5f);
        ck_quantize_row(atype, x, a + m * as, K);
    }
    const int levels[2] = {CK_ISA_AVX512, CK_ISA_BEST};
    const char *names[2];
    double t[2][100];
    for (int i = 0; i < 2; i++) {
        ck_set_isa_limit(levels[i]);
        names[i] = ck_isa_name();
        ck_matmul(type, K, w, ws, 0, N, a, as, M, y[i], N); /* warm-up */
    }
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < 2; i++) {
            ck_set_isa_limit(levels[i]);
            const double t0 = now();
            ck_matmul(type, K, w, ws, 0, N, a, as, M, y[i], N);
            t[i][r] = now() - t0;
        }
    double diff = 0, top = 0;
    for (int64_t i = 0; i < N * M; i++) {
        diff = fmax(diff, fabs((double)y[0][i] - y[1][i]));
        top = fmax(top, fabs((double)y[0][i]));
    }
    double med[2];
    for (int i = 0; i < 2; i++) {
        qsort(t[i], reps, sizeof(double), by_value);
        med[i] = t[i][reps / 2];
        printf("%-12s %8.2f ms %7.1f GOPS\n", names[i], med[i] * 1e3, 2.0 * N * K * M / med[i] / 1e9);
    }
    printf("ratio %.2fx, max |difference| %.3g (largest output %.3g)\n", med[0] / med[1], diff, top);
    return 0;
}
