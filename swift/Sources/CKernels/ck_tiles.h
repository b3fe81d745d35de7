/* ck_tiles.h — the loop around register tiles, shared by the SIMD kernel files.
 *
 * A kernel file defines TILE(type, R, C, len, w, ws, a, as, pf, y, ldy): an always-inline
 * function computing y[j*ldy + i] for R weight rows (w, stride ws) and C <= 4 activation
 * rows (a, stride as) over `len` blocks or elements; with pf it prefetches the next R rows. */
#ifndef CK_TILES_H
#define CK_TILES_H

#define ACT_CHUNK_BYTES (256 * 1024)

/* Software prefetch distance, in row tiles: the hardware prefetcher does not keep up with
 * several short rows read side by side, and decode is bound by memory bandwidth. */
#define PF_TILES 2

/* Activation rows per chunk, so a chunk stays in L2 while the weight rows stream past it. */
static inline int64_t chunk_rows(size_t row_bytes) {
    int64_t c = (int64_t)(ACT_CHUNK_BYTES / (row_bytes ? row_bytes : 1)) & ~(int64_t)3;
    return c < 4 ? 4 : c;
}

/* C as a compile-time constant, so each tile shape is its own fully unrolled code. */
#define TILE_SWITCH(TILE, type, R, C, len, w, ws, a, as, pf, y, ldy)   \
    switch (C) {                                                       \
    case 4: TILE(type, R, 4, len, w, ws, a, as, pf, y, ldy); break;    \
    case 3: TILE(type, R, 3, len, w, ws, a, as, pf, y, ldy); break;    \
    case 2: TILE(type, R, 2, len, w, ws, a, as, pf, y, ldy); break;    \
    default: TILE(type, R, 1, len, w, ws, a, as, pf, y, ldy); break;   \
    }

/* Rows [r0,r1) x activation rows [m0,m1) (`a` points at row m0): RT weight rows at a time,
 * then single rows; up to 4 activation rows per tile. The first activation tile of each row
 * tile prefetches the next row tile. */
#define RUN_TILES(TILE, TYPE, RT, len, w, ws, r0, r1, a, as, m0, m1, y, ldy)                           \
    do {                                                                                               \
        int64_t r_ = r0;                                                                               \
        for (; r_ + RT <= r1; r_ += RT)                                                                \
            for (int64_t m_ = m0; m_ < m1; m_ += 4) {                                                  \
                const int64_t c_ = m1 - m_ < 4 ? m1 - m_ : 4;                                          \
                TILE_SWITCH(TILE, TYPE, RT, c_, len, w + r_ * ws, ws, a + (m_ - m0) * as, as, m_ == m0, \
                            y + m_ * ldy + r_, ldy)                                                    \
            }                                                                                          \
        for (; r_ < r1; r_++)                                                                          \
            for (int64_t m_ = m0; m_ < m1; m_ += 4) {                                                  \
                const int64_t c_ = m1 - m_ < 4 ? m1 - m_ : 4;                                          \
                TILE_SWITCH(TILE, TYPE, 1, c_, len, w + r_ * ws, ws, a + (m_ - m0) * as, as, m_ == m0,  \
                            y + m_ * ldy + r_, ldy)                                                    \
            }                                                                                          \
    } while (0)

/* The ck_matmul_fn of a type whose tiles read the activations in place. */
#define DEFINE_MATMUL(ATTR, NAME, TILE, TYPE, RT, LEN)                                                  \
    ATTR static void NAME(int64_t n, const void *vw, size_t ws, int64_t r0, int64_t r1, const void *va, \
                          size_t as, int64_t M, float *y, int64_t ldy) {                              \
        const uint8_t *w = vw, *a = va;                                                                 \
        const int64_t len = LEN, chunk = chunk_rows(as);                                                \
        for (int64_t m0 = 0; m0 < M; m0 += chunk) {                                                     \
            const int64_t m1 = m0 + chunk < M ? m0 + chunk : M;                                         \
            RUN_TILES(TILE, TYPE, RT, len, w, ws, r0, r1, a + m0 * as, as, m0, m1, y, ldy);             \
        }                                                                                               \
    }

/* The same for tiles that read activations repacked per call: PACK(type, nblocks, row, out)
 * repacks one row into PACKED_ROW_BYTES(nblocks) bytes; rows are repacked a chunk at a time
 * into per-thread scratch. Out of memory, it falls back to the scalar kernel. */
#define DEFINE_MATMUL_PACKED(ATTR, NAME, TILE, TYPE, RT, BLOCK, PACK, PACKED_ROW_BYTES)                 \
    ATTR static void NAME(int64_t n, const void *vw, size_t ws, int64_t r0, int64_t r1, const void *va, \
                          size_t as, int64_t M, float *y, int64_t ldy) {                              \
        const uint8_t *w = vw, *a = va;                                                                 \
        const int64_t nb = n / (BLOCK);                                                                 \
        const size_t ps = PACKED_ROW_BYTES(nb);                                                         \
        const int64_t chunk = chunk_rows(ps), rows = M < chunk ? M : chunk;                             \
        uint8_t *pk = ck_scratch(ps * (size_t)rows);                                                    \
        if (!pk) {                                                                                      \
            ck_matmul_scalar[TYPE](n, vw, ws, r0, r1, va, as, M, y, ldy);                               \
            return;                                                                                     \
        }                                                                                               \
        for (int64_t m0 = 0; m0 < M; m0 += chunk) {                                                     \
            const int64_t m1 = m0 + chunk < M ? m0 + chunk : M;                                         \
            for (int64_t m = m0; m < m1; m++) PACK(TYPE, nb, a + m * as, pk + (m - m0) * ps);           \
            RUN_TILES(TILE, TYPE, RT, nb, w, ws, r0, r1, pk, ps, m0, m1, y, ldy);                       \
        }                                                                                               \
    }

#endif
