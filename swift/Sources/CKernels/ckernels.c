/* ckernels.c — the public entry points: type facts and dispatch to the active kernel table. */
#include "ck_internal.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct { int64_t block; size_t bytes; int dot_type; } type_info;

static const type_info k_types[CK_NTYPES] = {
    [CK_TYPE_F32] = {1, 4, CK_TYPE_F32},
    [CK_TYPE_F16] = {1, 2, CK_TYPE_F32},
    [CK_TYPE_BF16] = {1, 2, CK_TYPE_F32},
    [CK_TYPE_Q4_0] = {QK, sizeof(blk_q4_0), CK_TYPE_Q8_0},
    [CK_TYPE_Q4_1] = {QK, sizeof(blk_q4_1), CK_TYPE_Q8_1},
    [CK_TYPE_Q5_0] = {QK, sizeof(blk_q5_0), CK_TYPE_Q8_0},
    [CK_TYPE_Q5_1] = {QK, sizeof(blk_q5_1), CK_TYPE_Q8_1},
    [CK_TYPE_Q8_0] = {QK, sizeof(blk_q8_0), CK_TYPE_Q8_0},
    [CK_TYPE_Q8_1] = {QK, sizeof(blk_q8_1), -1},
    [CK_TYPE_Q4_K] = {QKK, sizeof(blk_q4_K), CK_TYPE_Q8_K},
    [CK_TYPE_Q5_K] = {QKK, sizeof(blk_q5_K), CK_TYPE_Q8_K},
    [CK_TYPE_Q6_K] = {QKK, sizeof(blk_q6_K), CK_TYPE_Q8_K},
    [CK_TYPE_Q8_K] = {QKK, sizeof(blk_q8_K), -1},
    [CK_TYPE_Q2_K] = {QKK, sizeof(blk_q2_K), CK_TYPE_Q8_K},
    [CK_TYPE_Q3_K] = {QKK, sizeof(blk_q3_K), CK_TYPE_Q8_K},
    [CK_TYPE_IQ4_NL] = {QK, sizeof(blk_iq4_nl), CK_TYPE_Q8_0},
    [CK_TYPE_IQ4_XS] = {QKK, sizeof(blk_iq4_xs), CK_TYPE_Q8_K},
    [CK_TYPE_MXFP4] = {QK, sizeof(blk_mxfp4), CK_TYPE_Q8_0},
};

static const type_info *info(int type) {
    return type >= 0 && type < CK_NTYPES && k_types[type].block ? &k_types[type] : NULL;
}

int ck_type_supported(int type) { return info(type) != NULL; }

int ck_vec_dot_type(int wtype) {
    const type_info *t = info(wtype);
    return t ? t->dot_type : -1;
}

int64_t ck_block_size(int type) {
    const type_info *t = info(type);
    return t ? t->block : 0;
}

size_t ck_row_size(int type, int64_t n) {
    const type_info *t = info(type);
    return t ? (size_t)(n / t->block) * t->bytes : 0;
}

void ck_quantize_row(int type, const float *x, void *y, int64_t n) {
    if (info(type) && ck_active()->quantize[type]) ck_active()->quantize[type](x, y, n);
}

void ck_matmul(int wtype, int64_t n, const void *w, size_t w_stride, int64_t r0, int64_t r1,
               const void *a, size_t a_stride, int64_t M, float *y, int64_t ldy) {
    if (r1 <= r0 || M <= 0 || n <= 0) return;
    const ck_matmul_fn f = info(wtype) ? ck_active()->matmul[wtype] : NULL;
    if (f) f(n, w, w_stride, r0, r1, a, a_stride, M, y, ldy);
}

float ck_vec_dot(int wtype, int64_t n, const void *w, const void *a) {
    float y = 0.0f;
    ck_matmul(wtype, n, w, 0, 0, 1, a, 0, 1, &y, 1);
    return y;
}

/* ---------------- per-thread scratch ---------------- */

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static void scratch_key_init(void) { pthread_key_create(&g_scratch_key, free); }

/* Blocks start with their capacity; the caller's memory begins 64 bytes in. */
void *ck_scratch(size_t bytes) {
    pthread_once(&g_scratch_once, scratch_key_init);
    size_t *b = pthread_getspecific(g_scratch_key);
    if (!b || *b < bytes) {
        free(b);
        const size_t cap = bytes + bytes / 2 + 4096;
        void *p = NULL;
        if (posix_memalign(&p, 64, cap + 64) != 0) p = NULL;
        b = p;
        if (b) *b = cap;
        pthread_setspecific(g_scratch_key, b);
        if (!b) return NULL;
    }
    return (char *)b + 64;
}

/* ---------------- f32 helpers ---------------- */

float ck_dot_f32(const float *x, const float *y, int64_t n) { return ck_active()->f32.dot(x, y, n); }

void ck_axpy_f32(float a, const float *x, float *y, int64_t n) { ck_active()->f32.axpy(a, x, y, n); }

void ck_rms_norm(const float *x, const float *w, float *y, int64_t n, float eps) {
    const ck_f32_ops *f = &ck_active()->f32;
    const float mean = f->sumsq(x, n) / (float)n;
    f->scale_mul(x, w, 1.0f / sqrtf(mean + eps), y, n);
}

void ck_swiglu(const float *gate, const float *up, float *y, int64_t n) { ck_active()->f32.swiglu(gate, up, y, n); }

/* tanh-approximated GELU (ggml_gelu's formula, computed in float rather than from its f16 table) */
void ck_swiglu_clamped(const float *gate, const float *up, float *y, int64_t n, float alpha, float limit) {
    for (int64_t i = 0; i < n; i++) {
        const float g = fminf(gate[i], limit), u = fminf(fmaxf(up[i], -limit), limit);
        y[i] = g / (1.0f + expf(alpha * -g)) * (u + 1.0f);
    }
}

void ck_geglu(const float *gate, const float *up, float *y, int64_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        const float x = gate[i];
        y[i] = 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x))) * up[i];
    }
}

void ck_softmax(float *x, int64_t n) {
    if (n <= 0) return;
    const ck_f32_ops *f = &ck_active()->f32;
    const float sum = f->exp_sum(x, f->max(x, n), n);
    f->scale(x, 1.0f / sum, n);
}

void ck_add_f32(const float *a, const float *b, float *y, int64_t n) { ck_active()->f32.add(a, b, y, n); }

void ck_f16_to_f32(const uint16_t *x, float *y, int64_t n) { ck_active()->f32.f16_to_f32(x, y, n); }

void ck_f32_to_f16(const float *x, uint16_t *y, int64_t n) { ck_active()->f32.f32_to_f16(x, y, n); }
