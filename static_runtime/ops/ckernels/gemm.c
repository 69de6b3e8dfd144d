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

/* Writes the first min(cols, 16) of 16 sums, activated by act, to c. */
static inline __attribute__((always_inline)) void store_sums(float *c, v16 sums, int64_t cols,
                                                             int act) {
    sums = sr_act16(sums, act);
    if (cols >= 16) {
        memcpy(c, &sums, 64);
    } else {
        float tmp[16];
        memcpy(tmp, &sums, 64);
        memcpy(c, tmp, (size_t)cols * sizeof(float));
    }
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
   the bias (first block; zero without one), else from C; the last block applies the
   activation. A panel's second half is skipped where width <= 16 (N's last panel). */
static inline __attribute__((always_inline)) void
tile(int ROWS, int HALVES, const float *a, int64_t lda, const float *panel, const float *bias,
     float *c, int64_t ldc, int64_t k0, int64_t k1, int first, int last, int64_t width,
     int act) {
    v16 s[MR][2];
    for (int r = 0; r < ROWS; r++) {
        for (int h = 0; h < HALVES; h++) {
            int64_t cols = width - 16 * h < 16 ? width - 16 * h : 16;
            if (!first && cols == 16) {
                memcpy(&s[r][h], c + r * ldc + 16 * h, 64);
            } else if (!first) {
                float tmp[16] = {0};
                memcpy(tmp, c + r * ldc + 16 * h, cols * sizeof(float));
                memcpy(&s[r][h], tmp, 64);
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
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < HALVES; h++)
            store_sums(c + r * ldc + 16 * h, s[r][h], width - 16 * h, last ? act : 0);
}

#define TILE(R) \
static void tile##R(const float *a, int64_t lda, const float *panel, const float *bias, \
                    float *c, int64_t ldc, int64_t k0, int64_t k1, int first, int last, \
                    int64_t width, int act) { \
    if (width > 16) tile(R, 2, a, lda, panel, bias, c, ldc, k0, k1, first, last, width, act); \
    else tile(R, 1, a, lda, panel, bias, c, ldc, k0, k1, first, last, width, act); }
TILE(1) TILE(2) TILE(3) TILE(4)
#if MR == 8
TILE(5) TILE(6) TILE(7) TILE(8)
#endif

typedef void (*tile_fn)(const float *, int64_t, const float *, const float *, float *, int64_t,
                        int64_t, int64_t, int, int, int64_t, int);
static const tile_fn TILES[MR + 1] = {0, tile1, tile2, tile3, tile4,
#if MR == 8
                                      tile5, tile6, tile7, tile8
#endif
};

/* bias: NULL or ceil(N / NR) * NR floats (zero past N). */
void sr_gemm(const float *a, int64_t lda, const float *packed, const float *bias, float *c,
             int64_t ldc, int64_t m, int64_t k, int64_t n, int act) {
    if (k == 0) {  /* an empty sum: the bias (or zero), activated */
        for (int64_t r = 0; r < m; r++)
            for (int64_t p = 0; p * NR < n; p++) {
                int64_t width = n - p * NR < NR ? n - p * NR : NR;
                TILES[1](a, lda, packed, bias ? bias + p * NR : 0, c + r * ldc + p * NR, ldc,
                         0, 0, 1, 1, width, act);
            }
        return;
    }
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
        int64_t k1 = k0 + KC < k ? k0 + KC : k;
        int first = k0 == 0, last = k1 == k;
        for (int64_t p = 0; p * NR < n; p++) {
            const float *panel = packed + p * NR * k;
            const float *bp = bias ? bias + p * NR : 0;
            int64_t width = n - p * NR < NR ? n - p * NR : NR;
            int64_t r = 0;
            for (; r + MR <= m; r += MR)
                TILES[MR](a + r * lda, lda, panel, bp, c + r * ldc + p * NR, ldc, k0, k1, first,
                          last, width, act);
            if (r < m)
                TILES[m - r](a + r * lda, lda, panel, bp, c + r * ldc + p * NR, ldc, k0, k1,
                             first, last, width, act);
        }
    }
}

/* sr_gemm with its sizes and constant pointers in one block (lda, packed, bias, ldc, m, k, n,
   act): a call from Python through ctypes costs ~0.07 µs an argument, so the per-shape part
   is made once and passed as one pointer. */
void sr_gemm_block(const float *a, float *c, const int64_t *p) {
    sr_gemm(a, p[0], (const float *)(intptr_t)p[1], (const float *)(intptr_t)p[2], c, p[3],
            p[4], p[5], p[6], (int)p[7]);
}

/* ---- Convolution as an implicit GEMM --------------------------------------------------
   A convolution (one group) of a channels-last input is a product whose rows are the output
   pixels and whose K runs over (tap, input channel): the indirect convolution algorithm
   (Dukhan, "The Indirect Convolution Algorithm", 2019) gives each row, for each tap, a pointer
   to the input pixel the tap reads — or to zeros where it falls in the padding — so no
   im2col buffer is written. The weight is packed as for sr_gemm from its (KH·KW·Cin, Cout)
   matrix, element (tap · Cin + ci, co) = w[co, ci, i, j]. */

static inline __attribute__((always_inline)) void
conv_tile(int ROWS, int HALVES, const float *const *rows, int64_t taps, int64_t cin,
          const float *panel, const float *bias, float *c, int64_t ldc, int64_t width,
          int act) {
    v16 s[MR][2];
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < HALVES; h++) {
            if (bias) memcpy(&s[r][h], bias + 16 * h, 64);
            else s[r][h] = (v16){0};
        }
    const float *bp = panel;
    for (int64_t t = 0; t < taps; t++) {
        const float *a[MR];
        for (int r = 0; r < ROWS; r++)
            a[r] = rows[r * taps + t];
        for (int64_t i = 0; i < cin; i++, bp += NR) {
            v16 b[2];
            for (int h = 0; h < HALVES; h++)
                memcpy(&b[h], bp + 16 * h, 64);
            for (int r = 0; r < ROWS; r++) {
                float av = a[r][i];
                for (int h = 0; h < HALVES; h++)
                    s[r][h] += av * b[h];
            }
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < HALVES; h++)
            store_sums(c + r * ldc + 16 * h, s[r][h], width - 16 * h, act);
}

#define CONV_TILE(R) \
static void conv_tile##R(const float *const *rows, int64_t taps, int64_t cin, \
                         const float *panel, const float *bias, float *c, int64_t ldc, \
                         int64_t width, int act) { \
    if (width > 16) conv_tile(R, 2, rows, taps, cin, panel, bias, c, ldc, width, act); \
    else conv_tile(R, 1, rows, taps, cin, panel, bias, c, ldc, width, act); }
CONV_TILE(1) CONV_TILE(2) CONV_TILE(3) CONV_TILE(4)
#if MR == 8
CONV_TILE(5) CONV_TILE(6) CONV_TILE(7) CONV_TILE(8)
#endif

typedef void (*conv_tile_fn)(const float *const *, int64_t, int64_t, const float *,
                             const float *, float *, int64_t, int64_t, int);
static const conv_tile_fn CONV_TILES[MR + 1] = {0, conv_tile1, conv_tile2, conv_tile3, conv_tile4,
#if MR == 8
                                                conv_tile5, conv_tile6, conv_tile7, conv_tile8
#endif
};

/* in (N, H, W, Cin) → out (N, OH, OW, Cout); bias NULL or padded as for sr_gemm. Returns 0,
   or -1 when the row pointers could not be allocated (nothing written). */
int sr_conv2d_nhwc(const float *in, const float *packed, const float *bias, float *out,
                   int64_t n, int64_t h, int64_t w, int64_t cin, int64_t kh, int64_t kw,
                   int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                   int64_t oh, int64_t ow, int64_t cout, int act) {
    const int64_t taps = kh * kw, m = n * oh * ow;
    const float **rows = malloc((size_t)(m * taps) * sizeof(*rows));
    float *zeros = calloc((size_t)(cin > 0 ? cin : 1), sizeof(float));
    if (!rows || !zeros) {
        free(rows);
        free(zeros);
        return -1;
    }
    for (int64_t b = 0, p = 0; b < n; b++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++, p++)
                for (int64_t i = 0; i < kh; i++)
                    for (int64_t j = 0; j < kw; j++) {
                        int64_t iy = y * sh - ph + i * dh, ix = x * sw - pw + j * dw;
                        rows[p * taps + i * kw + j] =
                            iy < 0 || iy >= h || ix < 0 || ix >= w
                                ? zeros : in + ((b * h + iy) * w + ix) * cin;
                    }
    const int64_t k = taps * cin;
    for (int64_t p = 0; p * NR < cout; p++) {
        const float *panel = packed + p * NR * k;
        const float *bp = bias ? bias + p * NR : 0;
        int64_t width = cout - p * NR < NR ? cout - p * NR : NR;
        int64_t r = 0;
        for (; r + MR <= m; r += MR)
            CONV_TILES[MR](rows + r * taps, taps, cin, panel, bp, out + r * cout + p * NR, cout,
                           width, act);
        if (r < m)
            CONV_TILES[m - r](rows + r * taps, taps, cin, panel, bp, out + r * cout + p * NR,
                              cout, width, act);
    }
    free(rows);
    free(zeros);
    return 0;
}

/* sr_conv2d_nhwc with its constants and sizes in one block (packed, bias, n, h, w, cin, kh,
   kw, sh, sw, ph, pw, dh, dw, oh, ow, cout, act). */
int sr_conv2d_block(const float *in, float *out, const int64_t *p) {
    return sr_conv2d_nhwc(in, (const float *)(intptr_t)p[0], (const float *)(intptr_t)p[1], out,
                          p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12],
                          p[13], p[14], p[15], p[16], (int)p[17]);
}
