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
#elif defined(WTYPE_Q8_0)
// ggml's Q8_0 block: f16 scale, 32 int8
struct Block { float16_t d; uint16_t qs[16]; };
const uint BLOCK_BYTES = 34u;
layout(buffer_reference, std430, buffer_reference_align = 2) buffer BlockRef { Block b; };
float16_t dequant_w(const in BlockRef r, const in uint blockCoords[2], const in uint coordInBlock[2]) {
    const uint j = coordInBlock[1];
    const int q = int(uint(r.b.qs[j >> 1]) << (24u - 8u * (j & 1u))) >> 24; // sign-extended byte j
    return float16_t(q) * r.b.d;
}
#else
#error "matmul_cm2: Q4_0 or Q8_0 weights"
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
    cw = setTensorLayoutBlockSizeNV(cw, 1, 32u);
    cw = setTensorLayoutDimensionNV(cw, p.N, k1);
    cw = setTensorLayoutStrideNV(cw, wStride, 1);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> cx = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    cx = setTensorLayoutDimensionNV(cx, m0 + TX, k1);
    cx = setTensorLayoutStrideNV(cx, p.xStride, 1);

    // TILE(WX): the tile at WX activation rows (TX, or TX/2 or TX/4 for a last tile with that
    // few rows left, so that it multiplies little padding)
#define STEP(WX, LW, LX) { \
        coopmat<float16_t, gl_ScopeWorkgroup, TW, BK, gl_MatrixUseA> a; \
        coopmat<float16_t, gl_ScopeWorkgroup, BK, WX, gl_MatrixUseB> b; \
        coopMatLoadTensorNV(a, W, 0, sliceTensorLayoutNV(LW, n0, TW, k, BK), dequant_w); \
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
        if (n0 + TW <= p.N && (p.xStride & 7u) == 0u) { \
            k &= ~63u; \
            for (; k + UNROLL * BK <= k1;) { [[unroll]] for (uint u = 0u; u < UNROLL; u++) STEP(WX, lw, lx) } \
            for (; k + BK <= k1;) STEP(WX, lw, lx) \
        } \
        for (; k < k1;) STEP(WX, cw, cx) \
        STORE(WX) }

    // Weight tiles wholly inside W take an unchecked layout and UNROLL steps at a time (their
    // loads can be in flight together). The masks tell the compiler what the host guarantees (a
    // split starts at a multiple of 64 values; rows of X here are multiples of 8 halves), so X's
    // rows load 16 bytes at a time.
    tensorLayoutNV<2> lw = createTensorLayoutNV(2);
    lw = setTensorLayoutBlockSizeNV(lw, 1, 32u);
    lw = setTensorLayoutDimensionNV(lw, p.N, k1);
    lw = setTensorLayoutStrideNV(lw, wStride, 1);
    const uint left = p.M - m0;
    if (left <= TX4) TILE(TX4)
    else if (left <= TX2) TILE(TX2)
    else TILE(TX)
}
