/* C = act(A · B + bias) for float32 row-major A (M × K, row stride lda) and a B packed once
   into panels of NR columns (sr_gemm_pack), written into row-major C (row stride ldc).

   The loop nest is the classic one (Goto & van de Geijn, "Anatomy of high-performance matrix
   multiplication", TOMS 2008): K in blocks of KC, so that a panel's KC × NR block stays in
   the L1 cache while every block of MR rows of A streams past it; MR × NR sums held in vector
   registers, each step one row of the panel times MR broadcast elements of A. GCC's vector
   extensions keep it portable: a 16-float vector is one AVX-512 register, two AVX ones, four
   NEON ones. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "act.h"

#define NR 32
#define KC 256
#if defined(__AVX512F__)
#define MR 8
#else
#define MR 4
#endif

/* Writes a tile's ROWS × HALVES vectors of sums, activated by act (all at once: see
   sr_act16_many), to rows of c (row stride ldc), width columns. */
static inline __attribute__((always_inline)) void
store_tile(int ROWS, int HALVES, v16 s[][2], float *c, int64_t ldc, int64_t width, int act) {
    if (act) {
        v16 t[MR * 2];
        for (int r = 0; r < ROWS; r++)
            for (int h = 0; h < HALVES; h++)
                t[r * HALVES + h] = s[r][h];
        sr_act16_many(t, ROWS * HALVES, act);
        for (int r = 0; r < ROWS; r++)
            for (int h = 0; h < HALVES; h++)
                s[r][h] = t[r * HALVES + h];
    }
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < HALVES; h++)
            sr_store16(c + r * ldc + 16 * h, s[r][h], width - 16 * h);
}

/* Packs B (K × N, element (k, n) at b[k * ldb + n]) into ceil(N / NR) panels of K × NR,
   columns past N zero. out holds ceil(N / NR) * NR * K floats. */
void sr_gemm_pack(const float *b, int64_t ldb, int64_t k, int64_t n, float *out) {
    for (int64_t p = 0; p * NR < n; p++) {
        float *panel = out + p * NR * k;
        int64_t width = n - p * NR < NR ? n - p * NR : NR;
        for (int64_t i = 0; i < k; i++) {
            memcpy(panel + i * NR, b + i * ldb + p * NR, width * sizeof(float));
            memset(panel + i * NR + width, 0, (NR - width) * sizeof(float));
        }
    }
}

int64_t sr_gemm_nr(void) { return NR; }

/* ROWS rows of A times one panel, k in [k0, k1), into ROWS × width of C: sums start from
   the bias (first block; zero without one) — plus the residual's rows at res (row stride
   ldr) where first is 2 (sr_gemm_res_rows) —, else from C; the last block applies the
   activation. A panel's second half is skipped where width <= 16 (N's last panel). */
static inline __attribute__((always_inline)) void
tile(int ROWS, int HALVES, const float *a, int64_t lda, const float *panel, const float *bias,
     float *c, int64_t ldc, int64_t k0, int64_t k1, int first, int last, int64_t width,
     int act, float *gated, int64_t ldg, int64_t gated_width, const float *res, int64_t ldr) {
    v16 s[MR][2];
    for (int r = 0; r < ROWS; r++) {
        for (int h = 0; h < HALVES; h++) {
            if (!first) {
                s[r][h] = sr_load16(c + r * ldc + 16 * h, width - 16 * h);
            } else if (first == 2) {
                s[r][h] = sr_load16(res + r * ldr + 16 * h, width - 16 * h);
                if (bias) {
                    v16 bv;
                    memcpy(&bv, bias + 16 * h, 64);
                    s[r][h] += bv;
                }
            } else if (bias) {
                memcpy(&s[r][h], bias + 16 * h, 64);
            } else {
                s[r][h] = (v16){0};
            }
        }
    }
    const float *bp = panel + k0 * NR;
    for (int64_t i = k0; i < k1; i++, bp += NR) {
        v16 b[2];
        for (int h = 0; h < HALVES; h++)
            memcpy(&b[h], bp + 16 * h, 64);
        for (int r = 0; r < ROWS; r++) {
            float av = a[r * lda + i];
            for (int h = 0; h < HALVES; h++)
                s[r][h] += av * b[h];
        }
    }
    if (HALVES == 2 && last && gated) {  /* silu(gate) · up: the halves (sr_gemm_gated) */
        for (int r = 0; r < ROWS; r++)
            sr_store16(gated + r * ldg, s[r][0] * sr_act16_sigmoid(s[r][0]) * s[r][1],
                       gated_width);
        return;
    }
    store_tile(ROWS, HALVES, s, c, ldc, width, last ? act : 0);
}

#define TILE(R) \
static void tile##R(const float *a, int64_t lda, const float *panel, const float *bias, \
                    float *c, int64_t ldc, int64_t k0, int64_t k1, int first, int last, \
                    int64_t width, int act, float *gated, int64_t ldg, int64_t gated_width, \
                    const float *res, int64_t ldr) { \
    if (width > 16) tile(R, 2, a, lda, panel, bias, c, ldc, k0, k1, first, last, width, act, \
                         gated, ldg, gated_width, res, ldr); \
    else tile(R, 1, a, lda, panel, bias, c, ldc, k0, k1, first, last, width, act, gated, ldg, \
              gated_width, res, ldr); }
TILE(1) TILE(2) TILE(3) TILE(4)
#if MR == 8
TILE(5) TILE(6) TILE(7) TILE(8)
#endif

typedef void (*tile_fn)(const float *, int64_t, const float *, const float *, float *, int64_t,
                        int64_t, int64_t, int, int, int64_t, int, float *, int64_t, int64_t,
                        const float *, int64_t);
static const tile_fn TILES[MR + 1] = {0, tile1, tile2, tile3, tile4,
#if MR == 8
                                      tile5, tile6, tile7, tile8
#endif
};

/* C = act(A · B + bias), or with a residual R (row stride ldr; may be C itself)
   act(A · B + bias + R). bias: NULL or ceil(N / NR) * NR floats (zero past N). */
static void gemm(const float *a, int64_t lda, const float *packed, const float *bias, float *c,
                 int64_t ldc, int64_t m, int64_t k, int64_t n, int act, const float *res,
                 int64_t ldr) {
    if (k == 0) {  /* an empty sum: the bias (or zero; plus the residual), activated */
        for (int64_t r = 0; r < m; r++)
            for (int64_t p = 0; p * NR < n; p++) {
                int64_t width = n - p * NR < NR ? n - p * NR : NR;
                TILES[1](a, lda, packed, bias ? bias + p * NR : 0, c + r * ldc + p * NR, ldc,
                         0, 0, res ? 2 : 1, 1, width, act, 0, 0, 0,
                         res ? res + r * ldr + p * NR : 0, ldr);
            }
        return;
    }
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
        int64_t k1 = k0 + KC < k ? k0 + KC : k;
        int first = k0 == 0 ? (res ? 2 : 1) : 0, last = k1 == k;
        for (int64_t p = 0; p * NR < n; p++) {
            const float *panel = packed + p * NR * k;
            const float *bp = bias ? bias + p * NR : 0;
            int64_t width = n - p * NR < NR ? n - p * NR : NR;
            int64_t r = 0;
            for (; r + MR <= m; r += MR)
                TILES[MR](a + r * lda, lda, panel, bp, c + r * ldc + p * NR, ldc, k0, k1, first,
                          last, width, act, 0, 0, 0, res ? res + r * ldr + p * NR : 0, ldr);
            if (r < m)
                TILES[m - r](a + r * lda, lda, panel, bp, c + r * ldc + p * NR, ldc, k0, k1,
                             first, last, width, act, 0, 0, 0,
                             res ? res + r * ldr + p * NR : 0, ldr);
        }
    }
}

/* C = act(A · B + bias) (the recurrent kernels call it too). */
void sr_gemm(const float *a, int64_t lda, const float *packed, const float *bias, float *c,
             int64_t ldc, int64_t m, int64_t k, int64_t n, int act) {
    gemm(a, lda, packed, bias, c, ldc, m, k, n, act, 0, 0);
}

/* A kernel's constant arguments in one block (lda, packed, bias, ldc, k, n, act): a call from
   Python through ctypes costs ~0.07 µs an argument, so what does not change between calls is
   made once and passed as one pointer. The row count is an argument of its own: one block
   serves every row count (traffic of every size brings a new one on most calls, and a block
   made per row count cost a new size's first call ~6 µs a GEMM node). */

/* C = act(A · B + bias) for m rows. */
void sr_gemm_rows(const float *a, float *c, int64_t m, const int64_t *p) {
    sr_gemm(a, p[0], (const float *)(intptr_t)p[1], (const float *)(intptr_t)p[2], c, p[3],
            m, p[4], p[5], (int)p[6]);
}

/* sr_gemm_rows with the row count at the block's end (p[7]), for a caller whose every call
   has the same one (a 1 × 1 convolution's per-shape call). */
void sr_gemm_block(const float *a, float *c, const int64_t *p) {
    sr_gemm_rows(a, c, p[7], p);
}

/* C = act(A · B + bias + R) for m rows and a residual R of C's shape, row stride N (C itself
   allowed), added before the activation. */
void sr_gemm_res_rows(const float *a, float *c, const float *res, int64_t m,
                      const int64_t *p) {
    gemm(a, p[0], (const float *)(intptr_t)p[1], (const float *)(intptr_t)p[2], c, p[3], m,
         p[4], p[5], (int)p[6], res, p[5]);
}

/* A gated product, silu(A · G + g) ⊙ (A · U + u) for (K × H) G and U (a SwiGLU MLP's gate and
   up projections): B packed from their columns interleaved in blocks of 16 — panel p holds
   G's columns 16p .. 16p + 15 then U's (zero past H) —, so a tile's two halves are the gate
   and the up product of the same 16 output columns, and its epilogue writes their gated
   product: out (M × H, row stride ldo) is written once, with no M × 2H intermediate and no
   pass over it for the activation and the product. K past KC keeps a panel's partial sums
   in a scratch of M × NR. Returns 0, or -1 without memory for it (nothing written). */
int sr_gemm_gated(const float *a, int64_t lda, const float *packed, const float *bias,
                  float *out, int64_t ldo, int64_t m, int64_t k, int64_t h) {
    float *scratch = 0;
    if (k > KC) {
        scratch = malloc((size_t)(m * NR) * sizeof(float));
        if (!scratch) return -1;
    }
    for (int64_t p = 0; p * 16 < h; p++) {
        const float *panel = packed + p * NR * k;
        const float *bp = bias ? bias + p * NR : 0;
        const int64_t width = h - 16 * p < 16 ? h - 16 * p : 16;
        int64_t k0 = 0;
        do {
            const int64_t k1 = k0 + KC < k ? k0 + KC : k;
            const int first = k0 == 0, last = k1 == k;
            for (int64_t r = 0; r < m; r += MR) {
                const int rows = m - r < MR ? (int)(m - r) : MR;
                TILES[rows](a + r * lda, lda, panel, bp, scratch ? scratch + r * NR : 0, NR,
                            k0, k1, first, last, NR, 0, out + r * ldo + 16 * p, ldo, width,
                            0, 0);
            }
            k0 = k1;
        } while (k0 < k);
    }
    free(scratch);
    return 0;
}

/* sr_gemm_gated with its sizes and constant pointers in one block (lda, packed, bias, ldo, m,
   k, h). */
int sr_gemm_gated_block(const float *a, float *out, const int64_t *p) {
    return sr_gemm_gated(a, p[0], (const float *)(intptr_t)p[1], (const float *)(intptr_t)p[2],
                         out, p[3], p[4], p[5], p[6]);
}

/* ---- Convolution as an implicit GEMM --------------------------------------------------
   A convolution (one group) is a product whose rows are the output pixels and whose K runs
   over (kernel row i, kernel column j, input channel ci), the weight packed as for sr_gemm
   from its (KH·KW·Cin, Cout) matrix, element ((i · KW + j) · Cin + ci, co) = w[co, ci, i, j]
   (for a channels-first input ((i · Cin + ci) · KW + j, co)).
   No im2col matrix is written (the indirect convolution of Dukhan, "The Indirect Convolution
   Algorithm", 2019, its pointers computed rather than stored: a table of one pointer per
   pixel and tap cost more than the products on a network's first convolution). The input is
   read from a zero-padded copy in its own layout (the input itself where it is unpadded), so
   every tap of every pixel is inside it: a pixel's taps of kernel row i start at its corner's
   address plus a fixed offset, and with a dilation of 1 they are KW · Cin consecutive floats
   of a channels-last input, one run of the K loop. A channels-first input is read as it is
   (KW floats of one channel a run, the weight packed in that order), so a network's first
   convolution (3 channels, straight from an image) needs no conversion. */

/* Register tiles of the convolution. With AVX-512's 32 vector registers a tile holds 24 sums:
   12 output pixels × one panel (32 channels), or 6 pixels × two neighbouring panels (64
   channels) — ROWS × VECS sums, each step VECS vector loads of the weight and ROWS
   broadcasts of the input. (Tiles of 8 pixels × one panel, 16 sums, read the whole input
   once more for every 32 output channels and the weight once more for every 8 pixels: the
   wider tiles take 0.74–0.90 × their time at 32–128 output channels, in alternation on a
   Cascade Lake Xeon, `benchmarks/conv_kernel.py`.) A panel's last 16 or fewer channels keep
   MR pixels (one vector: 12 gained nothing). Each output's sum adds its taps in the same
   order whatever the tile: the same bits. Other CPUs keep MR pixels × one panel. */
#if MR == 8
#define CONV_ROWS 12
#define CONV_WIDE_ROWS 6
#define CONV_VECS 4
#else
#define CONV_ROWS MR
#define CONV_WIDE_ROWS MR
#define CONV_VECS 2
#endif

/* ROWS pixels (their tap (0, 0) at corner[r]) × VECS vectors of output channels: vectors 0, 1
   from panel, 2, 3 from the next panel (panel2), each step a row of both. */
static inline __attribute__((always_inline)) void
conv_tile(int ROWS, int VECS, int RES, const float *const *corner, const int64_t *offsets,
          int64_t runs, int64_t run, const float *panel, const float *panel2,
          const float *bias, float *c, int64_t ldc, int64_t width, int act, const float *res) {
    v16 s[CONV_ROWS][CONV_VECS];
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < VECS; h++) {
            if (bias) memcpy(&s[r][h], bias + 16 * h, 64);
            else s[r][h] = (v16){0};
        }
    const float *bp = panel, *bq = panel2;
    for (int64_t t = 0; t < runs; t++) {
        const float *a[CONV_ROWS];
        for (int r = 0; r < ROWS; r++)
            a[r] = corner[r] + offsets[t];
        for (int64_t i = 0; i < run; i++, bp += NR, bq += NR) {
            v16 b[CONV_VECS];
            for (int h = 0; h < VECS; h++)
                memcpy(&b[h], (h < 2 ? bp : bq) + 16 * (h & 1), 64);
            for (int r = 0; r < ROWS; r++) {
                float av = a[r][i];
                for (int h = 0; h < VECS; h++)
                    s[r][h] += av * b[h];
            }
        }
    }
    if (RES)  /* the residual, added to the finished sum (as an add after the convolution) */
        for (int r = 0; r < ROWS; r++)
            for (int h = 0; h < VECS; h++)
                s[r][h] += sr_load16(res + r * ldc + 16 * h, width - 16 * h);
    if (act) {
        v16 all[CONV_ROWS * CONV_VECS];
        for (int r = 0; r < ROWS; r++)
            for (int h = 0; h < VECS; h++)
                all[r * VECS + h] = s[r][h];
        sr_act16_many(all, ROWS * VECS, act);
        for (int r = 0; r < ROWS; r++)
            for (int h = 0; h < VECS; h++)
                s[r][h] = all[r * VECS + h];
    }
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < VECS; h++)
            sr_store16(c + r * ldc + 16 * h, s[r][h], width - 16 * h);
}

/* conv_tileR: R pixels, as many vectors as width (1..64 channels; past 32 with panel2) needs
   (a caller gives more than 32 channels only to tiles of at most CONV_WIDE_ROWS pixels);
   conv_res_tileR adds a residual. (Two sets: the residual's code in every tile made the tiles
   without one 2–5 % slower at 16 output channels.) */
#define CONV_TILE_AS(NAME, R, RES) \
static void NAME(const float *const *corner, const int64_t *offsets, int64_t runs, \
                 int64_t run, const float *panel, const float *panel2, const float *bias, \
                 float *c, int64_t ldc, int64_t width, int act, const float *res) { \
    if (width > 48 && R <= CONV_WIDE_ROWS && CONV_VECS == 4) \
        conv_tile(R, CONV_VECS, RES, corner, offsets, runs, run, panel, panel2, bias, c, ldc, \
                  width, act, res); \
    else if (width > 32 && R <= CONV_WIDE_ROWS && CONV_VECS == 4) \
        conv_tile(R, 3, RES, corner, offsets, runs, run, panel, panel2, bias, c, ldc, width, \
                  act, res); \
    else if (width > 16) \
        conv_tile(R, 2, RES, corner, offsets, runs, run, panel, panel2, bias, c, ldc, width, \
                  act, res); \
    else \
        conv_tile(R, 1, RES, corner, offsets, runs, run, panel, panel2, bias, c, ldc, width, \
                  act, res); }
#define CONV_TILE(R) CONV_TILE_AS(conv_tile##R, R, 0) CONV_TILE_AS(conv_res_tile##R, R, 1)
CONV_TILE(1) CONV_TILE(2) CONV_TILE(3) CONV_TILE(4)
#if MR == 8
CONV_TILE(5) CONV_TILE(6) CONV_TILE(7) CONV_TILE(8) CONV_TILE(9) CONV_TILE(10) CONV_TILE(11)
CONV_TILE(12)
#endif

typedef void (*conv_tile_fn)(const float *const *, const int64_t *, int64_t, int64_t,
                             const float *, const float *, const float *, float *, int64_t,
                             int64_t, int, const float *);
static const conv_tile_fn CONV_TILES[CONV_ROWS + 1] = {
    0, conv_tile1, conv_tile2, conv_tile3, conv_tile4,
#if MR == 8
    conv_tile5, conv_tile6, conv_tile7, conv_tile8, conv_tile9, conv_tile10, conv_tile11,
    conv_tile12
#endif
};
static const conv_tile_fn CONV_RES_TILES[CONV_ROWS + 1] = {
    0, conv_res_tile1, conv_res_tile2, conv_res_tile3, conv_res_tile4,
#if MR == 8
    conv_res_tile5, conv_res_tile6, conv_res_tile7, conv_res_tile8, conv_res_tile9,
    conv_res_tile10, conv_res_tile11, conv_res_tile12
#endif
};

/* A zero-padded copy of in (N, C, H, W) with the layout it had: channels-last (channels_first
   0: (N, H + 2·PH, W + 2·PW, C)) or contiguous (1: (N, C, H + 2·PH, W + 2·PW)); NULL if out of
   memory. Either way rows of the input are copied whole. */
static float *padded_copy(const float *in, int64_t n, int64_t h, int64_t w, int64_t cin,
                          int64_t ph, int64_t pw, int channels_first) {
    const int64_t hp = h + 2 * ph, wp = w + 2 * pw;
    /* planes of hp rows of wp pixels, each pixel `depth` floats */
    const int64_t planes = channels_first ? n * cin : n, depth = channels_first ? 1 : cin;
    float *out = malloc((size_t)(n * cin * hp * wp) * sizeof(float));
    if (!out) return 0;
    for (int64_t q = 0; q < planes; q++) {
        float *plane = out + q * hp * wp * depth;
        const float *from = in + q * h * w * depth;
        memset(plane, 0, (size_t)(ph * wp * depth) * sizeof(float));
        memset(plane + (ph + h) * wp * depth, 0, (size_t)(ph * wp * depth) * sizeof(float));
        for (int64_t y = 0; y < h; y++) {
            float *row = plane + (y + ph) * wp * depth;
            memset(row, 0, (size_t)(pw * depth) * sizeof(float));
            memcpy(row + pw * depth, from + y * w * depth, (size_t)(w * depth) * sizeof(float));
            memset(row + (pw + w) * depth, 0, (size_t)(pw * depth) * sizeof(float));
        }
    }
    return out;
}

/* in (N, Cin, H, W), channels-last (channels_first 0) or contiguous (1) → out (N, OH, OW,
   Cout) channels-last; bias NULL or padded as for sr_gemm; res NULL, or a residual of out's
   shape and layout (out itself allowed) added to each finished sum before the activation.
   The packed weight's K order is (i, j, ci) for a channels-last input, (i, ci, j) for a
   contiguous one: the order the input holds a pixel's taps in. Returns 0, or -1 when the
   padded copy could not be allocated (nothing written). */
static int conv2d(const float *in, const float *packed, const float *bias, float *out,
                  int64_t n, int64_t h, int64_t w, int64_t cin, int64_t kh, int64_t kw,
                  int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                  int64_t oh, int64_t ow, int64_t cout, int act, int channels_first,
                  const float *res) {
    float *copy = 0;
    const float *src = in;
    if (ph || pw) {
        copy = padded_copy(in, n, h, w, cin, ph, pw, channels_first);
        if (!copy) return -1;
        src = copy;
    }
    const int64_t hp = h + 2 * ph, wp = w + 2 * pw;
    /* The runs of K, as offsets from a pixel's corner (its tap (0, 0)). Channels-last: a
       kernel row's KW · Cin consecutive floats (dilation 1), else each tap's Cin.
       Channels-first: a kernel row's KW floats of one channel (dilation 1), else one. */
    const int merged = dw == 1;
    const int64_t runs = channels_first ? kh * cin * (merged ? 1 : kw) : kh * (merged ? 1 : kw);
    const int64_t run = channels_first ? (merged ? kw : 1) : (merged ? kw * cin : cin);
    const int64_t pixel = channels_first ? 1 : cin, plane = channels_first ? hp * wp : 0;
    int64_t stack_offsets[256];
    int64_t *offsets = runs <= 256 ? stack_offsets : malloc((size_t)runs * sizeof(int64_t));
    if (!offsets) {
        free(copy);
        return -1;
    }
    int64_t t = 0;
    for (int64_t i = 0; i < kh; i++)
        for (int64_t c = 0; c < (channels_first ? cin : 1); c++)
            for (int64_t j = 0; j < (merged ? 1 : kw); j++)
                offsets[t++] = c * plane + (i * dh * wp + j * dw) * pixel;
    const int64_t m = n * oh * ow, k = kh * kw * cin, image = hp * wp * cin;
    /* Output channels a panel, or two panels at once where two remain (on AVX-512) */
    for (int64_t p = 0; p * NR < cout; ) {
        const float *panel = packed + p * NR * k;
        const float *bp = bias ? bias + p * NR : 0;
        const int pair = CONV_VECS == 4 && cout - p * NR > NR;
        const int64_t cols = pair ? 2 * NR : NR;
        const int64_t width = cout - p * NR < cols ? cout - p * NR : cols;
        /* (12 pixels only where a run of K is long: a short one — a channels-first input's
           KW floats, or one with a dilation — sets up the tile's 12 pointers for a few
           steps each, 1.13–1.18 × the time of 8 pixels) */
        const int tile_rows = pair ? CONV_WIDE_ROWS : width > 16 && run >= 16 ? CONV_ROWS : MR;
        int64_t b = 0, y = 0, x = 0;  /* the next tile's first pixel */
        for (int64_t r = 0; r < m; r += tile_rows) {
            int rows = m - r < tile_rows ? (int)(m - r) : tile_rows;
            const float *corner[CONV_ROWS];
            for (int q = 0; q < rows; q++) {
                corner[q] = src + b * image + (y * sh * wp + x * sw) * pixel;
                if (++x == ow) {
                    x = 0;
                    if (++y == oh) {
                        y = 0;
                        b++;
                    }
                }
            }
            (res ? CONV_RES_TILES : CONV_TILES)[rows](corner, offsets, runs, run, panel,
                             pair ? panel + NR * k : panel, bp, out + r * cout + p * NR, cout,
                             width, act, res ? res + r * cout + p * NR : 0);
        }
        p += pair ? 2 : 1;
    }
    if (offsets != stack_offsets) free(offsets);
    free(copy);
    return 0;
}

/* conv2d with its constants and sizes in one block (packed, bias, n, h, w, cin, kh, kw,
   sh, sw, ph, pw, dh, dw, oh, ow, cout, act, channels_first). */
int sr_conv2d_block(const float *in, float *out, const int64_t *p) {
    return conv2d(in, (const float *)(intptr_t)p[0], (const float *)(intptr_t)p[1], out,
                  p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13],
                  p[14], p[15], p[16], (int)p[17], (int)p[18], 0);
}

/* sr_conv2d_block adding a residual res (out's shape, channels-last) before the activation:
   a residual block's act(conv(x) + r) in one pass. */
int sr_conv2d_res_block(const float *in, float *out, const float *res, const int64_t *p) {
    return conv2d(in, (const float *)(intptr_t)p[0], (const float *)(intptr_t)p[1], out,
                  p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13],
                  p[14], p[15], p[16], (int)p[17], (int)p[18], res);
}
