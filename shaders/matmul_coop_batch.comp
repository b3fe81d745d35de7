#version 450
// matmul_coop_batch_T — matmul_coop_T's contract for decode batches (any rows; the host sends 9-32),
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
//   - they go to the subgroup's part of shared memory; each lane reads its row's words back
//     and decodes the 64 values into float16 in registers (decodeRow), then stores them;
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
// workgroup y takes rows 16 MT y ..), 2 PF (a subgroup's chunks of weights in flight, in
// registers: PF CW words a lane).
// Shared memory, bytes: NSG (32 CW 4 + 32 144 + 16 MT 144) + 2048 MT
// (GPUKernels.coopBatchShared). Dispatch (ceil(N / 32), ceil(M / (16 MT)), splits); with
// splits > 1, Y holds the planes (row stride yStride, plane floats apart), the sums go to Out
// (row stride outStride), and Done has a zero counter for each of the grid's tiles.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint MT = 1u;
layout(constant_id = 2) const uint PF = 1u;

layout(std430, binding = 0) readonly buffer WBuf { uint W[]; };
layout(std430, binding = 1) readonly buffer XBuf { f16vec4 X4[]; };
// Y: the result, or with splits > 1 the splits' planes (coherent: the tile's last split reads
// the others' through YR); Out and Done serve split-K only
layout(std430, binding = 2) coherent writeonly buffer YBuf { float Y[]; };
layout(std430, binding = 2) coherent readonly buffer YBufR { float YR[]; };
layout(std430, binding = 3) writeonly buffer OutBuf { float Out[]; };
layout(std430, binding = 4) coherent buffer DoneBuf { uint done[]; }; // a counter a tile, zero between dispatches
layout(std140, binding = 5) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride;
    uint splitUnits, plane, outStride, splits;
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

// coopMatLoad/Store read Ws, As and Cs as rows of 16-byte units. Laid out in declaration order,
// they start 16-byte aligned, since Rs's size is a multiple of 128 bytes. Declare no shared
// scalar before them: a 4-byte flag declared first is the suspected cause of a tried change's
// non-finite results (bench/RESULTS.md, tenth session; not confirmed on a device).
shared uint Rs[NSG * 32u * CW];          // [subgroup][weight row][word]: raw blocks
shared f16vec4 Ws[NSG * 32u * S4];       // [subgroup][weight row][k / 4]
shared f16vec4 As[NSG * AR * S4];        // [subgroup][activation row][k / 4]
shared float Cs[MT * 2u * 256u];         // partial tiles, summed subgroup by subgroup

uint raw[PF][CW]; // chunks in flight: slot s holds the subgroup's chunk s, s + PF, s + 2 PF ..

void fetch(uint s, uint c, uint n0, uint rowWords, uint lane) {
    [[unroll]] for (uint i = 0u; i < CW; i++) {
        const uint e = lane + 32u * i, row = min(n0 + e / CW, p.N - 1u);
        raw[s][i] = W[row * rowWords + c * CW + e % CW];
    }
}

// The lane's row of the chunk (CW words of Rs from word r) decoded into float16: v[q] holds
// values 4 q .. 4 q + 3. One pass over registers: each 32-bit word of quants gives 8 (Q4_0) or
// 4 (Q8_0) values in 16-bit pairs through the float16 bit trick below, with no per-value index
// arithmetic. (The version before decoded 4 values a call, each call reading its words and
// scale from shared memory again: most of the kernel's instructions went there.)
// A chunk's layout: block 0's d in half 0 and its quants from half 1 (2 bytes past a word
// boundary), block 1's d in half BLOCK_HALVES (odd: a word's high half), its quants aligned.
uint quant(uint R[CW], uint b, uint i) {
    return b == 0u ? (R[i] >> 16) | (R[i + 1u] << 16) : R[BLOCK_HALVES / 2u + 1u + i];
}
void decodeRow(uint r, out f16vec4 v[16]) {
    uint R[CW];
    [[unroll]] for (uint j = 0u; j < CW; j++) R[j] = Rs[r + j];
    [[unroll]] for (uint b = 0u; b < 2u; b++) {
        const float16_t d = b == 0u ? unpackFloat2x16(R[0]).x : unpackFloat2x16(R[BLOCK_HALVES / 2u]).y;
#if defined(WTYPE_Q4_0)
        // word i holds values 4 i .. 4 i + 3 (low nibbles) and 16 + 4 i .. (high); a nibble n
        // in a float16 with bits 0x6400 is 1024 + n, so (1024 + n) - 1032 = n - 8 exactly
        // (matmul_coop's decoding), then one rounding by d
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            const uint w = quant(R, b, i);
            const f16vec2 p0 = (unpackFloat2x16((w & 0x000F000Fu) | 0x64006400u) - float16_t(1032.0)) * d;         // 4i, 4i+2
            const f16vec2 p1 = (unpackFloat2x16(((w >> 8) & 0x000F000Fu) | 0x64006400u) - float16_t(1032.0)) * d;  // 4i+1, 4i+3
            const f16vec2 p2 = (unpackFloat2x16(((w >> 4) & 0x000F000Fu) | 0x64006400u) - float16_t(1032.0)) * d;  // 16+4i, 16+4i+2
            const f16vec2 p3 = (unpackFloat2x16(((w >> 12) & 0x000F000Fu) | 0x64006400u) - float16_t(1032.0)) * d; // 16+4i+1, 16+4i+3
            v[8u * b + i] = f16vec4(p0.x, p1.x, p0.y, p1.y);
            v[8u * b + 4u + i] = f16vec4(p2.x, p3.x, p2.y, p3.y);
        }
#else
        // a signed byte s read as unsigned s ^ 0x80 = s + 128 in a float16 with bits 0x6400 is
        // 1152 + s, so (1152 + s) - 1152 = s exactly
        [[unroll]] for (uint i = 0u; i < 8u; i++) {
            const uint w = quant(R, b, i) ^ 0x80808080u;
            const f16vec2 p0 = (unpackFloat2x16((w & 0x00FF00FFu) | 0x64006400u) - float16_t(1152.0)) * d;        // 4i, 4i+2
            const f16vec2 p1 = (unpackFloat2x16(((w >> 8) & 0x00FF00FFu) | 0x64006400u) - float16_t(1152.0)) * d; // 4i+1, 4i+3
            v[8u * b + i] = f16vec4(p0.x, p1.x, p0.y, p1.y);
        }
#endif
    }
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

    // the subgroup's chunks are c0 + sg, + NSG, ..: PF of them in flight, the loop unrolled by
    // PF so that each slot of raw is a register
    [[unroll]] for (uint s = 0u; s < PF; s++)
        if (c0 + sg + s * NSG < c1) fetch(s, c0 + sg + s * NSG, n0, rowWords, lane);
    for (uint cb = c0 + sg; cb < c1; cb += PF * NSG) [[unroll]] for (uint s = 0u; s < PF; s++) {
        const uint c = cb + s * NSG;
        if (c >= c1) break;
        [[unroll]] for (uint i = 0u; i < CW; i++) Rs[rbase + lane + 32u * i] = raw[s][i];
        if (c + PF * NSG < c1) fetch(s, c + PF * NSG, n0, rowWords, lane); // in flight for PF chunks
        // (activations fetched a chunk ahead too were no faster at 16 rows, slower at 32: the
        // registers cost more than their latency)
        f16vec4 xa[AL];
        [[unroll]] for (uint i = 0u; i < AL; i++) {
            const uint e = lane + 32u * i;
            xa[i] = X4[((m0 + (e >> 4)) * p.xStride + c * BK) / 4u + (e & 15u)];
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        {
            // rows are 36 words apart, so lanes l and l + 8 would store to the same banks: lanes
            // 8..15 and 24..31 swap each pair of stores (then 16 lanes cover the 32 banks)
            f16vec4 v[16];
            decodeRow(rbase + lane * CW, v);
            const bool sw = (lane & 8u) != 0u;
            [[unroll]] for (uint q = 0u; q < 16u; q++)
                Ws[wbase + lane * S4 + (sw ? q ^ 1u : q)] = sw ? v[q ^ 1u] : v[q];
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
    if (p.splits <= 1u) return;
    // split-K: each split counts itself done on its tile's counter, and the last one adds the
    // tile's planes into Out (no sum_splits dispatch after this one; attention_q8's scheme)
    memoryBarrierBuffer();
    barrier();
    const uint tile = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    // the flag in Rs[0] (free after the loop): a shared scalar of its own would sit before the
    // arrays and could take them off the 16-byte alignment coopMatLoad needs
    if (gl_LocalInvocationID.x == 0u) Rs[0] = atomicAdd(done[tile], 1u) == p.splits - 1u ? 1u : 0u;
    barrier();
    if (Rs[0] == 0u) return;
    memoryBarrierBuffer();
    if (gl_LocalInvocationID.x == 0u) done[tile] = 0u; // for the next dispatch
    for (uint e = gl_LocalInvocationID.x; e < MT * 512u; e += gl_WorkGroupSize.x) {
        const uint t = e / 256u, m = m0 + 16u * (t >> 1) + (e % 256u) / 16u, n = n0 + 16u * (t & 1u) + e % 16u;
        if (m < p.M && n < p.N) {
            float s = 0.0;
            for (uint zz = 0u; zz < p.splits; zz++) s += YR[zz * p.plane + m * p.yStride + n];
            Out[m * p.outStride + n] = s;
        }
    }
}
