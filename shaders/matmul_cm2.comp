#version 450
// matmul_cm2_T — matmul_coop_T on NVIDIA's second cooperative-matrix extension
// (GL_NV_cooperative_matrix2), Vulkan only: the same buffers (W, X as float16 rows, Y),
// parameters and split-K contract, Y[m*yStride + r] = sum_k W[r][k] X[m*xStride + k].
//
// The whole workgroup owns one TW x TX tile of the product (weight rows x activation rows) as a
// workgroup-scope accumulator. Each step of BK values (whole weight blocks) loads the weight
// tile through tensor addressing with a decode callback (dequant_w: one weight block's value as
// float16, the driver choosing which threads decode what and staging it for the tensor cores),
// the activation tile transposed from X, and multiplies; tiles wholly inside W and X take
// unchecked layouts and UNROLL steps at a time. Elsewhere rows past N or M and values past the
// split's end read as zero (clamped layouts). The result tile is stored transposed into Y, the
// parts past M or N left out. Workgroup z takes units [z*splitUnits, (z+1)*splitUnits) of K (16
// values a unit; a multiple of 2 units, so whole blocks) and writes Y + z*plane.
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
layout(constant_id = 4) const uint UNROLL = 4u; // steps unrolled in the tiles wholly inside W and X

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

    coopmat<float, gl_ScopeWorkgroup, TW, TX, gl_MatrixUseAccumulator> acc = coopmat<float, gl_ScopeWorkgroup, TW, TX, gl_MatrixUseAccumulator>(0.0);
#define STEP(LW, LX) { \
        coopmat<float16_t, gl_ScopeWorkgroup, TW, BK, gl_MatrixUseA> a; \
        coopmat<float16_t, gl_ScopeWorkgroup, BK, TX, gl_MatrixUseB> b; \
        coopMatLoadTensorNV(a, W, 0, sliceTensorLayoutNV(LW, n0, TW, k, BK), dequant_w); \
        coopMatLoadTensorNV(b, X, 0, sliceTensorLayoutNV(LX, m0, TX, k, BK), transpose); \
        acc = coopMatMulAdd(a, b, acc); \
        k += BK; }
    uint k = k0;
    if (n0 + TW <= p.N && m0 + TX <= p.M) {
        // the whole tile inside W and X: layouts without bounds checks, UNROLL steps at a time
        // (their loads can be in flight together)
        tensorLayoutNV<2> lw = createTensorLayoutNV(2);
        lw = setTensorLayoutBlockSizeNV(lw, 1, 32u);
        lw = setTensorLayoutDimensionNV(lw, p.N, k1);
        lw = setTensorLayoutStrideNV(lw, wStride, 1);
        tensorLayoutNV<2> lx = createTensorLayoutNV(2);
        lx = setTensorLayoutDimensionNV(lx, p.M, k1);
        lx = setTensorLayoutStrideNV(lx, p.xStride, 1);
        for (; k + UNROLL * BK <= k1;) {
            [[unroll]] for (uint u = 0u; u < UNROLL; u++) STEP(lw, lx)
        }
        for (; k + BK <= k1;) STEP(lw, lx)
    }
    // edges (rows past N or M, a last step past k1): loads that read zero out of bounds
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> cw = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    cw = setTensorLayoutBlockSizeNV(cw, 1, 32u);
    cw = setTensorLayoutDimensionNV(cw, p.N, k1);
    cw = setTensorLayoutStrideNV(cw, wStride, 1);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> cx = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    cx = setTensorLayoutDimensionNV(cx, p.M, k1);
    cx = setTensorLayoutStrideNV(cx, p.xStride, 1);
    for (; k < k1;) STEP(cw, cx)
    coopMatStoreTensorNV(acc, Y, z * p.plane, sliceTensorLayoutNV(ly, m0, TX, n0, TW), transpose);
}
