#version 450
// matmul_coop_batch_T — matmul_coop_T's contract for decode batches (any rows; the host sends 17-32),
// Vulkan only, Q4_0 and Q8_0: Y[m*yStride + r] = sum_k W[r][k] X[m*xStride + k], r < N, m < M,
// X float16 rows (to_f16's), split-K as matmul_coop_T (workgroup z takes units [z*splitUnits,
// (z+1)*splitUnits) of K, 16 values a unit, and writes Y + z*plane).
//
// Why a second kernel: at decode sizes each weight value is used by at most 64 rows, so a
// product is as fast as its weights arrive. matmul_coop_T (and a first version of this one)
// read each block through quants.glsl's unit loads: five 16-bit loads a lane a unit, each
// instruction touching eight rows, so the load unit's transactions, not the memory, set the
// pace (8B Q4_0 at 32 rows: gate/up 158 µs for 66 MB on an H200; 118 µs here, and O and down
// 42 µs against 78). Here every subgroup works
// alone on 32 weight rows and every NSG-th chunk of 64 values of K:
//   - the chunk's raw blocks (36 or 68 bytes a row) come in as 32-bit words, consecutive lanes
//     reading consecutive words, one chunk ahead in registers;
//   - they go to the subgroup's part of shared memory, and each lane decodes its row's 64
//     values into float16 (16 stores of 8 bytes, in an order rotated by the lane so the stores
//     hit distinct banks);
//   - the chunk's activations (64 values of each of the 16 MT rows) are copied beside them;
//   - tensor-core products, float16 operands and float32 sums, 16 x 16 x 16 a step.
// Subgroup barriers only; at the end the NSG subgroups' partial tiles are added through shared
// memory one subgroup at a time and written with guards.
//
// Needs K a multiple of 64 (the host checks; then rows and chunks sit on 4-byte boundaries), X
// readable for 16 MT rows (rows past M give result rows that are not stored) with a row stride
// that is a multiple of 4 (to_f16's), and the device's 16x16x16 float16 -> float32 subgroup
// products with subgroups of 32. Weight rows past N are read as row N - 1: they only reach
// result columns that are not stored.
//
// Constants: 0 workgroup size (32 NSG), 1 MT (16-row tiles of activations a workgroup;
// workgroup y takes rows 16 MT y ..).
// Shared memory, bytes: NSG (32 CW 4 + 32 144 + 16 MT 144) + 2048 MT
// (GPUKernels.coopBatchShared). Dispatch (ceil(N / 32), ceil(M / (16 MT)), splits).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint MT = 1u;

layout(std430, binding = 0) readonly buffer WBuf { uint W[]; };
layout(std430, binding = 1) readonly buffer XBuf { f16vec4 X4[]; };
layout(std430, binding = 2) writeonly buffer YBuf { float Y[]; };
layout(std140, binding = 3) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride;
    uint splitUnits, plane;
} p;

#if defined(WTYPE_Q4_0)
const uint BLOCK_HALVES = 9u;   // f16 d, 16 bytes of nibbles
#elif defined(WTYPE_Q8_0)
const uint BLOCK_HALVES = 17u;  // f16 d, 32 signed bytes
#endif
const uint CW = BLOCK_HALVES;   // 32-bit words of a row's chunk (two blocks)
const uint NSG = gl_WorkGroupSize.x / 32u;
const uint BK = 64u, UPC = 4u;  // values and units of a chunk
const uint S4 = 18u;            // shared row stride in f16vec4: 16 bytes of padding
const uint AR = 16u * MT;       // activation rows a tile
const uint AL = AR * 16u / 32u; // f16vec4 of the chunk's activations, a lane

shared uint Rs[NSG * 32u * CW];          // [subgroup][weight row][word]: raw blocks
shared f16vec4 Ws[NSG * 32u * S4];       // [subgroup][weight row][k / 4]
shared f16vec4 As[NSG * AR * S4];        // [subgroup][activation row][k / 4]
shared float Cs[MT * 2u * 256u];         // partial tiles, summed subgroup by subgroup

uint raw[CW];

void fetch(uint c, uint n0, uint rowWords, uint lane) {
    [[unroll]] for (uint i = 0u; i < CW; i++) {
        const uint e = lane + 32u * i, row = min(n0 + e / CW, p.N - 1u);
        raw[i] = W[row * rowWords + c * CW + e % CW];
    }
}

// 16 or 32 bits at half-word h of the row starting at word r of Rs
uint rs16(uint r, uint h) { return (Rs[r + (h >> 1)] >> ((h & 1u) << 4)) & 0xFFFFu; }
uint rs32(uint r, uint h) {
    const uint lo = Rs[r + (h >> 1)];
    return (h & 1u) == 0u ? lo : (lo >> 16) | (Rs[r + (h >> 1) + 1u] << 16);
}

// values 4 q .. 4 q + 3 of the chunk (q < 16) of the row at word r
f16vec4 decode(uint r, uint q) {
    const uint b = q >> 3, g = q & 7u, h = b * BLOCK_HALVES;
    const float16_t d = unpackFloat2x16(rs16(r, h)).x;
#if defined(WTYPE_Q4_0)
    // nibbles of bytes 4 (g & 3).., low for g < 4; a nibble n in a float16 with bits 0x6400 is
    // 1024 + n, so (1024 + n) - 1032 = n - 8 exactly (matmul_coop's decoding)
    const uint w = rs32(r, h + 1u + 2u * (g & 3u)) >> ((g >> 2) << 2);
    const f16vec2 lo = (unpackFloat2x16((w & 0x000F000Fu) | 0x64006400u) - float16_t(1032.0)) * d;
    const f16vec2 hi = (unpackFloat2x16(((w >> 8) & 0x000F000Fu) | 0x64006400u) - float16_t(1032.0)) * d;
    return f16vec4(lo.x, hi.x, lo.y, hi.y);
#else
    const int w = int(rs32(r, h + 1u + 2u * g));
    return f16vec4(bitfieldExtract(w, 0, 8), bitfieldExtract(w, 8, 8), bitfieldExtract(w, 16, 8), bitfieldExtract(w, 24, 8)) * d;
#endif
}

void main() {
    const uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    const uint n0 = gl_WorkGroupID.x * 32u, m0 = gl_WorkGroupID.y * AR, rowWords = p.rowBytes >> 2;
    const uint z = gl_WorkGroupID.z, chunks = p.K / BK;
    const uint c0 = z * (p.splitUnits / UPC), c1 = min(chunks, c0 + min(p.splitUnits / UPC, chunks));
    const uint rbase = sg * 32u * CW, wbase = sg * 32u * S4, abase = sg * AR * S4;

    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[MT * 2u];
    [[unroll]] for (uint t = 0u; t < MT * 2u; t++)
        acc[t] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);

    uint c = c0 + sg;
    if (c < c1) fetch(c, n0, rowWords, lane);
    for (; c < c1; c += NSG) {
        [[unroll]] for (uint i = 0u; i < CW; i++) Rs[rbase + lane + 32u * i] = raw[i];
        if (c + NSG < c1) fetch(c + NSG, n0, rowWords, lane); // in flight until the next chunk
        f16vec4 xa[AL];
        [[unroll]] for (uint i = 0u; i < AL; i++) {
            const uint e = lane + 32u * i;
            xa[i] = X4[((m0 + (e >> 4)) * p.xStride + c * BK) / 4u + (e & 15u)];
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint s = 0u; s < 16u; s++) {
            const uint q = (s + lane) & 15u;
            Ws[wbase + lane * S4 + q] = decode(rbase + lane * CW, q);
        }
        [[unroll]] for (uint i = 0u; i < AL; i++) {
            const uint e = lane + 32u * i;
            As[abase + (e >> 4) * S4 + (e & 15u)] = xa[i];
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[MT];
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> w[2];
            [[unroll]] for (uint i = 0u; i < MT; i++)
                coopMatLoad(a[i], As, abase + i * 16u * S4 + kk / 4u, S4, gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint j = 0u; j < 2u; j++)
                coopMatLoad(w[j], Ws, wbase + j * 16u * S4 + kk / 4u, S4, gl_CooperativeMatrixLayoutColumnMajor);
            [[unroll]] for (uint i = 0u; i < MT; i++)
                [[unroll]] for (uint j = 0u; j < 2u; j++)
                    acc[i * 2u + j] = coopMatMulAdd(a[i], w[j], acc[i * 2u + j]);
        }
        subgroupBarrier(); // every lane's fragments are read before the next chunk's stores
    }

    // the subgroups' partial tiles summed in Cs, one subgroup after another
    for (uint r = 0u; r < NSG; r++) {
        if (sg == r) {
            [[unroll]] for (uint t = 0u; t < MT * 2u; t++) {
                if (r > 0u) {
                    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> s;
                    coopMatLoad(s, Cs, t * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
                    acc[t] = acc[t] + s;
                }
                coopMatStore(acc[t], Cs, t * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
            }
        }
        barrier();
    }
    // tile t = 2 i + j holds activation rows 16 i.. and weight rows n0 + 16 j..
    const uint yOff = z * p.plane;
    for (uint e = gl_LocalInvocationID.x; e < MT * 512u; e += gl_WorkGroupSize.x) {
        const uint t = e / 256u, m = m0 + 16u * (t >> 1) + (e % 256u) / 16u, n = n0 + 16u * (t & 1u) + e % 16u;
        if (m < p.M && n < p.N) Y[yOff + m * p.yStride + n] = Cs[e];
    }
}
