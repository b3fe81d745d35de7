#version 450
// matmul_cm2_T — matmul_coop_T on NVIDIA's second cooperative-matrix extension
// (GL_NV_cooperative_matrix2), Vulkan only: the same buffers (W, X as float16 rows, Y),
// parameters and split-K contract, Y[m*yStride + r] = sum_k W[r][k] X[m*xStride + k].
//
// The whole workgroup owns one TW x TX tile of the product (weight rows x activation rows) as a
// workgroup-scope accumulator. Each step of BK values (whole weight blocks) loads the weight
// tile through tensor addressing with a decode callback (dequant_w: one weight block's value as
// float16, the driver choosing which threads decode what and staging it for the tensor cores),
// the activation tile transposed from X, and multiplies; tiles wholly inside W take unchecked
// layouts and UNROLL steps at a time. X's rows are read unchecked up to the tile's end: the host
// pads its float16 copy to whole tiles (GPUKernels.f16Bytes), and the rows past M only reach
// outputs the store leaves out. A last tile with at most TX/2 or TX/4 rows left multiplies that
// many. Elsewhere weight rows past N and values past the split's end read as zero (clamped
// layouts). The result tile is stored transposed into Y, the parts past M or N left out.
// Workgroup z takes units [z*splitUnits, (z+1)*splitUnits) of K (16 values a unit; a multiple
// of 4 units, so whole blocks) and writes Y + z*plane.
//
// K-quants (Q4_K, Q5_K, Q6_K: blocks of 256 values) step a whole block at a time. Q4_K's and
// Q5_K's 6-bit sub-block scales and mins are unpacked once a block into shared memory, the next
// block's header loaded while this one multiplies (a callback that unpacked them for every value
// ran at half the speed); Q6_K's scales are whole bytes, read in the callback.
//
// Built with -DACC_F16 (matmul_cm2h_T), the tile's sums are float16, as llama.cpp's Vulkan
// backend keeps them for default-precision products: half the accumulator registers, so large
// tiles fit; converted to float32 only at the store.
//
// Needs: VK_NV_cooperative_matrix2 (workgroup scope, flexible dimensions, tensor addressing,
// block loads), shaderFloat16, 16-bit storage, bufferDeviceAddress (the callback's block is a
// buffer reference). Dispatch (ceil(N / TW), ceil(M / TX), splits), constant 0 the threads.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_buffer_reference : require

layout(local_size_x = 256, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TW = 128u; // weight rows a tile
layout(constant_id = 2) const uint TX = 128u; // activation rows a tile
layout(constant_id = 3) const uint BK = 32u;  // values a step: whole weight blocks (32 or 64)
layout(constant_id = 4) const uint UNROLL = 4u; // steps unrolled in the tiles wholly inside W
const uint TX2 = TX / 2u, TX4 = TX / 4u;        // a last tile's narrower widths

#if defined(WTYPE_Q4_0)
#define QK 32
// ggml's Q4_0 block: f16 scale, 16 bytes (value j < 16 the low nibble of byte j, j + 16 its high
// nibble), minus 8
struct Block { float16_t d; uint16_t qs[8]; };
const uint BLOCK_BYTES = 18u;
layout(buffer_reference, std430, buffer_reference_align = 2) buffer BlockRef { Block b; };
float16_t dequant_w(const in BlockRef r, const in uint blockCoords[2], const in uint coordInBlock[2]) {
    const uint j = coordInBlock[1];
    const uint byte = (uint(r.b.qs[(j & 15u) >> 1]) >> (8u * (j & 1u))) & 0xFFu;
    const uint q = j < 16u ? byte & 0xFu : byte >> 4;
    return (float16_t(q) - float16_t(8.0)) * r.b.d;
}
#define dequant_w_direct dequant_w
#elif defined(WTYPE_Q8_0)
#define QK 32
// ggml's Q8_0 block: f16 scale, 32 int8
struct Block { float16_t d; uint16_t qs[16]; };
const uint BLOCK_BYTES = 34u;
layout(buffer_reference, std430, buffer_reference_align = 2) buffer BlockRef { Block b; };
float16_t dequant_w(const in BlockRef r, const in uint blockCoords[2], const in uint coordInBlock[2]) {
    const uint j = coordInBlock[1];
    const int q = int(uint(r.b.qs[j >> 1]) << (24u - 8u * (j & 1u))) >> 24; // sign-extended byte j
    return float16_t(q) * r.b.d;
}
#define dequant_w_direct dequant_w
#elif defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
// ggml's Q4_K block: f16 d, dmin; 12 bytes of 6-bit scales and mins (8 sub-blocks of 32);
// 128 bytes of nibbles, chunk c of 64 values in qs[32c ..]: value 64c + l the low nibble of byte
// 32c + l (l < 32), value 64c + 32 + l its high nibble. x = d sc q - dmin m.
// Q5_K: the same with 32 bytes qh before qs, value j's fifth bit being bit j/32 of qh[j % 32].
#define QK 256
#define SCALE_TABLE
#if defined(WTYPE_Q4_K)
struct Block { uvec4 head; uint16_t qs[64]; };
const uint BLOCK_BYTES = 144u;
#else
struct Block { uvec4 head; uint16_t qh[16]; uint16_t qs[64]; };
const uint BLOCK_BYTES = 176u;
#endif
layout(buffer_reference, std430, buffer_reference_align = 16) buffer BlockRef { Block b; };
// sub-block j's (d sc, dmin m) from a block's first 16 bytes (ggml's get_scale_min_k4)
vec2 subScale(const uvec4 h, const uint j) {
    const uint sh = 8u * (j & 3u);
    const uint sc = j < 4u ? h.y >> sh : ((h.w >> sh) & 0xFu) | (((h.y >> sh) >> 2) & 0x30u);
    const uint mn = j < 4u ? h.z >> sh : ((h.w >> sh) >> 4 & 0xFu) | (((h.z >> sh) >> 2) & 0x30u);
    const vec2 dm = unpackHalf2x16(h.x);
    return vec2(dm.x * float(sc & 63u), dm.y * float(mn & 63u));
}
// value j's quant (0..15, or 0..31 for Q5_K)
float quant(const in BlockRef r, const uint j) {
    const uint w = uint(r.b.qs[((j >> 6) << 4) + ((j & 31u) >> 1)]);
    uint q = (w >> (8u * (j & 1u) + 4u * ((j >> 5) & 1u))) & 0xFu;
#if defined(WTYPE_Q5_K)
    q |= ((uint(r.b.qh[(j & 31u) >> 1]) >> (8u * (j & 1u) + (j >> 5))) & 1u) << 4;
#endif
    return float(q);
}
// the tile's scales for this block: (d sc, dmin m) of sub-block j of tile row i at [j][i]
shared vec2 tileScales[8][TW];
float16_t dequant_w(const in BlockRef r, const in uint blockCoords[2], const in uint coordInBlock[2]) {
    const uint j = coordInBlock[1];
    const vec2 s = tileScales[j >> 5][blockCoords[0] % TW];
    return float16_t(s.x * quant(r, j) - s.y);
}
// the edges' callback: scales from the block itself
float16_t dequant_w_direct(const in BlockRef r, const in uint blockCoords[2], const in uint coordInBlock[2]) {
    const uint j = coordInBlock[1];
    const vec2 s = subScale(r.b.head, j >> 5);
    return float16_t(s.x * quant(r, j) - s.y);
}
#elif defined(WTYPE_Q6_K)
// ggml's Q6_K block: ql[128], qh[64], int8 scales[16], f16 d. Half h of 128 values, in it
// quarter q (32 values, l < 32): low 4 bits from ql[64h + 32(q & 1) + l] (high nibble when
// q >= 2), top 2 bits from qh[32h + l] >> 2q; scale scales[8h + 2q + l/16]; x = d sc (q6 - 32).
#define QK 256
struct Block { uint16_t ql[64]; uint16_t qh[32]; uint16_t sc[8]; float16_t d; };
const uint BLOCK_BYTES = 210u;
layout(buffer_reference, std430, buffer_reference_align = 2) buffer BlockRef { Block b; };
float16_t dequant_w(const in BlockRef r, const in uint blockCoords[2], const in uint coordInBlock[2]) {
    const uint j = coordInBlock[1], h = j >> 7, q = (j >> 5) & 3u, l = j & 31u;
    const uint lb = 64u * h + 32u * (q & 1u) + l, hb = 32u * h + l, sb = 8u * h + 2u * q + (l >> 4);
    const uint lo = (uint(r.b.ql[lb >> 1]) >> (8u * (lb & 1u) + 4u * (q >> 1))) & 0xFu;
    const uint hi = (uint(r.b.qh[hb >> 1]) >> (8u * (hb & 1u) + 2u * q)) & 3u;
    const int sc = int(uint(r.b.sc[sb >> 1]) << (24u - 8u * (sb & 1u))) >> 24; // sign-extended byte sb
    return r.b.d * float16_t(sc) * float16_t(int(lo | (hi << 4)) - 32);
}
#define dequant_w_direct dequant_w
#else
#error "matmul_cm2: Q4_0, Q8_0, Q4_K, Q5_K or Q6_K weights"
#endif

layout(std430, binding = 0) readonly buffer WBuf { Block W[]; };
layout(std430, binding = 1) readonly buffer XBuf { float16_t X[]; };
layout(std430, binding = 2) writeonly buffer YBuf { float Y[]; };
layout(std140, binding = 3) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride;
    uint splitUnits, plane;
} p;

#ifdef ACC_F16
#define ACC float16_t
#else
#define ACC float
#endif

void main() {
    const uint n0 = gl_WorkGroupID.x * TW, m0 = gl_WorkGroupID.y * TX, z = gl_WorkGroupID.z;
    // this split's values [k0, k1)
    const uint k0 = z * p.splitUnits * 16u;
    const uint k1 = p.splitUnits == 0xFFFFFFFFu ? p.K : min(p.K, k0 + p.splitUnits * 16u);
    const uint wStride = p.rowBytes / BLOCK_BYTES; // a weight row, in blocks

    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ly = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    ly = setTensorLayoutDimensionNV(ly, p.M, p.N);
    ly = setTensorLayoutStrideNV(ly, p.yStride, 1);
    tensorViewNV<2, false, 1, 0> transpose = createTensorViewNV(2, false, 1, 0);
    // X's rows as the host pads them (to whole TX tiles), unchecked
    tensorLayoutNV<2> lx = createTensorLayoutNV(2);
    lx = setTensorLayoutDimensionNV(lx, m0 + TX, k1);
    lx = setTensorLayoutStrideNV(lx, p.xStride & ~7u, 1);
    // the clamped layouts of the edges (weight rows past N, a last step past k1): zero outside
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> cw = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    cw = setTensorLayoutBlockSizeNV(cw, 1, QK);
    cw = setTensorLayoutDimensionNV(cw, p.N, k1);
    cw = setTensorLayoutStrideNV(cw, wStride, 1);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> cx = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    cx = setTensorLayoutDimensionNV(cx, m0 + TX, k1);
    cx = setTensorLayoutStrideNV(cx, p.xStride, 1);

    // TILE(WX): the tile at WX activation rows (TX, or TX/2 or TX/4 for a last tile with that
    // few rows left, so that it multiplies little padding)
#define STEP(WX, LW, LX, DEC) { \
        coopmat<float16_t, gl_ScopeWorkgroup, TW, BK, gl_MatrixUseA> a; \
        coopmat<float16_t, gl_ScopeWorkgroup, BK, WX, gl_MatrixUseB> b; \
        coopMatLoadTensorNV(a, W, 0, sliceTensorLayoutNV(LW, n0, TW, k, BK), DEC); \
        coopMatLoadTensorNV(b, X, 0, sliceTensorLayoutNV(LX, m0, WX, k, BK), transpose); \
        acc = coopMatMulAdd(a, b, acc); \
        k += BK; }
#ifdef ACC_F16
#define STORE(WX) coopMatStoreTensorNV(coopmat<float, gl_ScopeWorkgroup, TW, WX, gl_MatrixUseAccumulator>(acc), Y, z * p.plane, sliceTensorLayoutNV(ly, m0, WX, n0, TW), transpose);
#else
#define STORE(WX) coopMatStoreTensorNV(acc, Y, z * p.plane, sliceTensorLayoutNV(ly, m0, WX, n0, TW), transpose);
#endif
#define TILE(WX) { \
        coopmat<ACC, gl_ScopeWorkgroup, TW, WX, gl_MatrixUseAccumulator> acc = coopmat<ACC, gl_ScopeWorkgroup, TW, WX, gl_MatrixUseAccumulator>(ACC(0.0)); \
        uint k = k0; \
        if (n0 + TW <= p.N && (p.xStride & 7u) == 0u) UNCHECKED(WX) \
        for (; k < k1;) STEP(WX, cw, cx, dequant_w_direct) \
        STORE(WX) }
#if QK == 32
    // UNROLL steps at a time, then single steps
#define UNCHECKED(WX) { \
            k &= ~63u; \
            for (; k + UNROLL * BK <= k1;) { [[unroll]] for (uint u = 0u; u < UNROLL; u++) STEP(WX, lw, lx, dequant_w) } \
            for (; k + BK <= k1;) STEP(WX, lw, lx, dequant_w) }
#elif defined(SCALE_TABLE)
    // a block at a time: its scales into the table (the header loaded a block ahead), then its steps
#define UNCHECKED(WX) { \
            k &= ~255u; \
            uvec4 head = W[(n0 + headRow) * wStride + k / QK].head; \
            for (; k + QK <= k1;) { \
                barrier(); \
                [[unroll]] for (uint j = headSub; j < headSub + 8u / HEAD_THREADS; j++) tileScales[j][headRow] = subScale(head, j); \
                barrier(); \
                if (k + QK < k1) head = W[(n0 + headRow) * wStride + k / QK + 1u].head; \
                [[unroll]] for (uint u = 0u; u < QK / BK; u++) STEP(WX, lw, lx, dequant_w) \
            } }
#else
#define UNCHECKED(WX) { \
            k &= ~255u; \
            for (; k + QK <= k1;) { [[unroll]] for (uint u = 0u; u < QK / BK; u++) STEP(WX, lw, lx, dequant_w) } }
#endif

    // Weight tiles wholly inside W take an unchecked layout and UNROLL steps at a time (their
    // loads can be in flight together). The masks tell the compiler what the host guarantees (a
    // split starts at a multiple of 64 values, of 256 for K-quants; rows of X here are multiples
    // of 8 halves), so X's rows load 16 bytes at a time.
#ifdef SCALE_TABLE
    // the scale table's loads: HEAD_THREADS threads a weight row, each unpacking 8 / HEAD_THREADS
    // sub-blocks of that row's block (the host keeps THREADS / TW one of 1, 2, 4, 8)
    const uint HEAD_THREADS = gl_WorkGroupSize.x / TW;
    const uint headRow = gl_LocalInvocationID.x / HEAD_THREADS, headSub = (gl_LocalInvocationID.x % HEAD_THREADS) * (8u / HEAD_THREADS);
#endif
    tensorLayoutNV<2> lw = createTensorLayoutNV(2);
    lw = setTensorLayoutBlockSizeNV(lw, 1, QK);
    lw = setTensorLayoutDimensionNV(lw, p.N, k1);
    lw = setTensorLayoutStrideNV(lw, wStride, 1);
    const uint left = p.M - m0;
    if (left <= TX4) TILE(TX4)
    else if (left <= TX2) TILE(TX2)
    else TILE(TX)
}
