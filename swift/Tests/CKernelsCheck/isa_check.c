/* isa_check.c — the SIMD kernel table this build selects (NEON dotprod on arm64, AVX2/AVX-512
 * on x86-64) against the scalar one, through the public API of swift/Sources/CKernels.
 *
 * `make test-neon` (scripts/neon-check.sh) builds it with every CKernels source for aarch64
 * (clang --target=aarch64-linux-gnu, three -march/-mcpu settings) and runs it under
 * qemu-aarch64, so the NEON kernels are compiled and checked on x86-64 machines too; on an
 * arm64 or Apple machine it runs natively. Exit status 0 when every check passes.
 *
 * Checks: ck_matmul for every weight type (odd row counts, 1-7 activation rows: partial tiles)
 * at ISA level 0 (scalar) and 2 (the best table) against a float64 product of the dequantized
 * operands; the float helpers (dot, axpy, rms_norm, swiglu, softmax, f16 conversions, argmax)
 * on lengths that leave vector tails. */
#include "ckernels.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(float scale) { /* splitmix64 -> uniform in [-scale, scale) */
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return scale * (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void check(int ok, const char *what, double got, double want, double tol) {
    checks++;
    if (ok) return;
    if (failures++ < 20) fprintf(stderr, "FAIL %s: got %.9g, want %.9g (tolerance %.3g)\n", what, got, want, tol);
}

static float half(const uint8_t *p) {
    uint16_t h;
    float f;
    memcpy(&h, p, 2);
    ck_f16_to_f32(&h, &f, 1);
    return f;
}

/* Q4_1/Q5_1 x Q8_1: the kernels take each weight block's min m times the activation block's
 * s = d * sum(q), which Q8_1 stores as float16, so they differ from the product of the
 * dequantized rows by up to |m| |s| 2^-11 per block. */
static double min_term_rounding(const uint8_t *w, const uint8_t *a, int64_t n, size_t wblock) {
    double t = 0;
    for (int64_t b = 0; b < n / 32; b++) t += fabs(half(w + b * wblock + 2)) * fabs(half(a + b * 36 + 2)) / 2048.0;
    return t;
}

static void check_matmul(int type, const char *name) {
    const int64_t n = 512, rows = 7, maxM = 19; /* from 16 rows: the AMX kernels */
    const int atype = ck_vec_dot_type(type);
    const size_t wrow = ck_row_size(type, n), arow = ck_row_size(atype, n);
    float *wf = malloc(sizeof(float) * n * rows), *af = malloc(sizeof(float) * n * maxM);
    uint8_t *w = malloc(wrow * rows), *a = malloc(arow * maxM);
    float *wd = malloc(sizeof(float) * n * rows), *ad = malloc(sizeof(float) * n * maxM);
    float *y = malloc(sizeof(float) * rows * maxM);
    for (int64_t i = 0; i < n * rows; i++) wf[i] = frand(1.0f);
    for (int64_t i = 0; i < n * maxM; i++) af[i] = frand(2.0f);
    for (int level = 0; level <= CK_ISA_BEST; level += CK_ISA_BEST) {
        ck_set_isa_limit(level);
        /* quantize with the table under test too (quantizers are per ISA) */
        for (int64_t r = 0; r < rows; r++) ck_quantize_row(type, wf + r * n, w + r * wrow, n);
        for (int64_t m = 0; m < maxM; m++) ck_quantize_row(atype, af + m * n, a + m * arow, n);
        for (int64_t r = 0; r < rows; r++) ck_dequantize_row(type, w + r * wrow, wd + r * n, n);
        for (int64_t m = 0; m < maxM; m++) ck_dequantize_row(atype, a + m * arow, ad + m * n, n);
        for (int64_t M = 1; M <= maxM; M += 2) {
            for (int64_t i = 0; i < rows * M; i++) y[i] = NAN;
            /* rows [1, rows): a range that does not start at 0 */
            ck_matmul(type, n, w, wrow, 1, rows, a, arow, M, y, rows);
            for (int64_t m = 0; m < M; m++)
                for (int64_t r = 1; r < rows; r++) {
                    double s = 0, abs_sum = 0;
                    for (int64_t k = 0; k < n; k++) {
                        const double p = (double)wd[r * n + k] * ad[m * n + k];
                        s += p;
                        abs_sum += fabs(p);
                    }
                    double tol = 2e-5 * abs_sum + 1e-5;
                    if (atype == CK_TYPE_Q8_1) tol += min_term_rounding(w + r * wrow, a + m * arow, n, type == CK_TYPE_Q4_1 ? 20 : 24);
                    const double got = y[m * rows + r];
                    char what[96];
                    snprintf(what, sizeof what, "matmul %s (%s) M=%lld row %lld col %lld", name, ck_isa_name(), (long long)M,
                             (long long)r, (long long)m);
                    check(fabs(got - s) <= tol, what, got, s, tol);
                }
            for (int64_t m = 0; m < M; m++) check(isnan(y[m * rows]), "matmul wrote row 0 outside [r0, r1)", y[m * rows], NAN, 0);
        }
    }
    free(wf); free(af); free(w); free(a); free(wd); free(ad); free(y);
}

static void check_f32(int64_t n) {
    float *x = malloc(sizeof(float) * n), *z = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
    float *r0 = malloc(sizeof(float) * n), *r2 = malloc(sizeof(float) * n);
    uint16_t *h0 = malloc(2 * n), *h2 = malloc(2 * n);
    for (int64_t i = 0; i < n; i++) { x[i] = frand(4.0f); z[i] = frand(1.0f); w[i] = frand(1.0f); }
    double dot = 0, abs_dot = 0;
    for (int64_t i = 0; i < n; i++) { dot += (double)x[i] * z[i]; abs_dot += fabs((double)x[i] * z[i]); }
    char what[64];
    for (int level = 0; level <= CK_ISA_BEST; level += CK_ISA_BEST) {
        ck_set_isa_limit(level);
        snprintf(what, sizeof what, "dot n=%lld (%s)", (long long)n, ck_isa_name());
        const float d = ck_dot_f32(x, z, n);
        check(fabs(d - dot) <= 2e-5 * abs_dot + 1e-6, what, d, dot, 2e-5 * abs_dot + 1e-6);
    }
    /* each op at level 0 and level 2, compared elementwise */
    for (int op = 0; op < 6; op++) {
        for (int level = 0; level <= CK_ISA_BEST; level += CK_ISA_BEST) {
            ck_set_isa_limit(level);
            float *out = level ? r2 : r0;
            switch (op) {
            case 0: memcpy(out, z, sizeof(float) * n); ck_axpy_f32(0.75f, x, out, n); break;
            case 1: ck_rms_norm(x, w, out, n, 1e-5f); break;
            case 2: ck_swiglu(x, z, out, n); break;
            case 3: memcpy(out, x, sizeof(float) * n); ck_softmax(out, n); break;
            case 4: ck_add_f32(x, z, out, n); break;
            case 5: ck_f32_to_f16(x, level ? h2 : h0, n); ck_f16_to_f32(level ? h2 : h0, out, n); break;
            }
        }
        static const char *names[] = {"axpy", "rms_norm", "swiglu", "softmax", "add", "f16 round trip"};
        snprintf(what, sizeof what, "%s n=%lld", names[op], (long long)n);
        for (int64_t i = 0; i < n; i++) {
            const double tol = op == 5 ? 0 : 2e-6 * fabs(r0[i]) + (op == 3 ? 1e-9 : 1e-7);
            check(fabs((double)r2[i] - r0[i]) <= tol, what, r2[i], r0[i], tol);
        }
        if (op == 5) check(memcmp(h0, h2, 2 * n) == 0, "f32_to_f16 bits differ between levels", 0, 0, 0);
    }
    x[n / 3] = 100.0f;
    x[n - 1] = 100.0f;
    for (int level = 0; level <= CK_ISA_BEST; level += CK_ISA_BEST) {
        ck_set_isa_limit(level);
        check(ck_argmax_f32(x, n) == n / 3, "argmax: first index of the largest", (double)ck_argmax_f32(x, n), (double)(n / 3), 0);
    }
    free(x); free(z); free(w); free(r0); free(r2); free(h0); free(h2);
}

int main(void) {
    static const struct { int type; const char *name; } types[] = {
        {CK_TYPE_F32, "f32"},   {CK_TYPE_F16, "f16"},   {CK_TYPE_BF16, "bf16"}, {CK_TYPE_Q4_0, "q4_0"},
        {CK_TYPE_Q4_1, "q4_1"}, {CK_TYPE_Q5_0, "q5_0"}, {CK_TYPE_Q5_1, "q5_1"}, {CK_TYPE_Q8_0, "q8_0"},
        {CK_TYPE_Q4_K, "q4_K"}, {CK_TYPE_Q5_K, "q5_K"}, {CK_TYPE_Q6_K, "q6_K"}, {CK_TYPE_Q2_K, "q2_K"},
        {CK_TYPE_Q3_K, "q3_K"}, {CK_TYPE_IQ4_NL, "iq4_nl"}, {CK_TYPE_IQ4_XS, "iq4_xs"},
    };
    ck_set_isa_limit(CK_ISA_BEST);
    const char *best = ck_isa_name();
    printf("isa_check: CPU features 0x%x, best kernel table \"%s\"\n", ck_cpu_features(), best);
#if defined(__aarch64__)
    /* every arm64 machine Velo targets has dotprod (Apple M1 and later; qemu's default CPU) */
    check(strcmp(best, "neon-dotprod") == 0, "the NEON dotprod table is not selected", 0, 0, 0);
#endif
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) check_matmul(types[i].type, types[i].name);
    for (int64_t n = 1; n <= 67; n += 11) check_f32(n);
    check_f32(4099);
    printf("isa_check: %d checks, %d failed (%s against scalar)\n", checks, failures, best);
    return failures ? 1 : 0;
}
