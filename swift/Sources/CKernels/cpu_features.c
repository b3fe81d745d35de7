/* cpu_features.c — what the CPU can do, and which kernel table is in use. */
#include "ck_internal.h"
#include <pthread.h>
#include <stdatomic.h>

#if CK_X86
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return 0;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 6) != 6) return 0; /* the OS does not save YMM state */
    if (__get_cpuid_max(0, 0) < 7) return 0;
    __get_cpuid_count(7, 0, &a, &b, &c, &d);
    const unsigned max_sub = a;
    int f = 0;
    if (((b >> 5) & 1) && fma && f16c) f |= CK_CPU_AVX2;
    /* AVX-512 needs opmask and both ZMM halves saved by the OS (XCR0 bits 5-7). */
    const int zmm_os = (xcr0 & 0xe6) == 0xe6;
    const int f512 = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    if ((f & CK_CPU_AVX2) && zmm_os && f512 && dq && bw && vl) f |= CK_CPU_AVX512;
    if ((f & CK_CPU_AVX512) && ((c >> 11) & 1)) f |= CK_CPU_AVX512_VNNI;
#if CK_AMX
    /* AMX-TILE and AMX-INT8, tile state saved by the OS (XCR0 bits 17-18), granted to us */
    const int amx = ((d >> 24) & 1) && ((d >> 25) & 1) && (xcr0 & 0x60000) == 0x60000;
    if ((f & CK_CPU_AVX512_VNNI) && amx && ck_amx_request()) f |= CK_CPU_AMX_INT8;
#endif
    if (max_sub >= 1) {
        __get_cpuid_count(7, 1, &a, &b, &c, &d);
        if ((f & CK_CPU_AVX2) && ((a >> 4) & 1)) f |= CK_CPU_AVX_VNNI;
    }
    return f;
}
#elif CK_ARM64
#if defined(__APPLE__)
#include <sys/sysctl.h>
#elif defined(__linux__)
#include <sys/auxv.h>
#endif
static int detect(void) {
#if defined(__ARM_FEATURE_DOTPROD)
    return CK_CPU_NEON_DOTPROD;
#elif defined(__APPLE__)
    int v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0) == 0 && v) return CK_CPU_NEON_DOTPROD;
    return 0;
#elif defined(__linux__)
    return (getauxval(AT_HWCAP) & (1UL << 20)) ? CK_CPU_NEON_DOTPROD : 0; /* HWCAP_ASIMDDP */
#else
    return 0;
#endif
}
#else
static int detect(void) { return 0; }
#endif

static int g_features;
static ck_table g_tables[CK_ISA_BEST + 1]; /* by ISA limit */
static atomic_int g_limit = CK_ISA_BEST;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Layers an ISA's kernels over `t`: entries the ISA leaves NULL keep the lower table's. */
static void overlay(ck_table *t, const char *name, const ck_matmul_fn *mm, const ck_quant_fn *q,
                    const ck_f32_ops *f) {
    t->name = name;
    for (int i = 0; i < CK_NTYPES; i++) {
        if (mm && mm[i]) t->matmul[i] = mm[i];
        if (q && q[i]) t->quantize[i] = q[i];
    }
    if (!f) return;
#define TAKE(op) if (f->op) t->f32.op = f->op
    TAKE(dot); TAKE(axpy); TAKE(sumsq); TAKE(scale_mul); TAKE(swiglu); TAKE(max);
    TAKE(exp_sum); TAKE(scale); TAKE(add); TAKE(f16_to_f32); TAKE(f32_to_f16);
#undef TAKE
}

static void init(void) {
    g_features = detect();
    ck_table base = {0};
    overlay(&base, "scalar", ck_matmul_scalar, ck_quant_scalar, &ck_f32_scalar);
    g_tables[0] = base;
    ck_table t1 = base, t2, t3;
#if CK_X86
    if (g_features & CK_CPU_AVX2) overlay(&t1, "avx2", ck_matmul_avx2, ck_quant_avx2, &ck_f32_avx2);
    t2 = t1;
    /* The AVX-512 kernels are written around VNNI; without it the AVX2 ones are as good. */
    if ((g_features & CK_CPU_AVX512) && (g_features & CK_CPU_AVX512_VNNI))
        overlay(&t2, "avx512-vnni", ck_matmul_avx512, NULL, &ck_f32_avx512); /* AVX2 quantizers */
    t3 = t2;
#if CK_AMX
    if (g_features & CK_CPU_AMX_INT8) overlay(&t3, "avx512-amx", ck_matmul_amx, NULL, NULL);
#endif
#elif CK_ARM64
    if (g_features & CK_CPU_NEON_DOTPROD) overlay(&t1, "neon-dotprod", ck_matmul_neon, NULL, &ck_f32_neon);
    t3 = t2 = t1;
#else
    t3 = t2 = t1;
#endif
    g_tables[CK_ISA_SIMD] = t1;
    g_tables[CK_ISA_AVX512] = t2;
    g_tables[CK_ISA_BEST] = t3;
}

const ck_table *ck_active(void) {
    pthread_once(&g_once, init);
    return &g_tables[atomic_load_explicit(&g_limit, memory_order_relaxed)];
}

const ck_table *ck_table_at(int level) {
    pthread_once(&g_once, init);
    return &g_tables[level < 0 ? 0 : level > CK_ISA_BEST ? CK_ISA_BEST : level];
}

int ck_cpu_features(void) {
    pthread_once(&g_once, init);
    return g_features;
}

void ck_set_isa_limit(int level) {
    atomic_store(&g_limit, level < 0 ? 0 : level > CK_ISA_BEST ? CK_ISA_BEST : level);
}

const char *ck_isa_name(void) { return ck_active()->name; }
