/* Normalisations over the last dimension: RMS (LLaMA's, T5's), L2, layer.

   RMS normalisation over the last dimension, as LLaMA's and T5's layers write it:
   out = w ⊙ (x · 1 / sqrt(mean(x²) + eps)), one pass to sum the squares (16 partial sums per
   row, vectorised) and one to scale, instead of five operators and four intermediate tensors. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "act.h"

/* The sum over h floats of x - shift, or of its square: 16 partial sums, vectorised, then
   the tail (shift and square constants where it is inlined). */
static inline __attribute__((always_inline)) float row_sum(const float *x, int64_t h,
                                                           float shift, int square) {
    v16 acc = {0};
    int64_t j = 0;
    for (; j + 16 <= h; j += 16) {
        v16 v;
        memcpy(&v, x + j, 64);
        v -= shift;
        acc += square ? v * v : v;
    }
    float s = 0;
    for (int k = 0; k < 16; k++) s += acc[k];
    for (; j < h; j++) {
        const float d = x[j] - shift;
        s += square ? d * d : d;
    }
    return s;
}

static inline float sum_squares(const float *x, int64_t h) { return row_sum(x, h, 0.0f, 1); }

void sr_rms_norm(const float *x, const float *w, float *out, int64_t rows, int64_t h,
                 float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        float *o = out + r * h;
        const float scale = 1.0f / sqrtf(sum_squares(xr, h) / (float)h + eps);
        int64_t j = 0;
        for (; j + 16 <= h; j += 16) {
            v16 v, wv;
            memcpy(&v, xr + j, 64);
            memcpy(&wv, w + j, 64);
            v = wv * (v * scale);
            memcpy(o + j, &v, 64);
        }
        for (; j < h; j++) o[j] = w[j] * (xr[j] * scale);
    }
}

/* L2 normalisation over the last dimension, as nn.functional.normalize writes it:
   out = x / clamp_min(sqrt(sum(x²)), eps), one pass for the squares and one to divide,
   instead of four operators (norm, clamp_min, expand_as, div). A NaN norm stays NaN, as
   clamp_min leaves it. */
void sr_l2_normalize(const float *x, float *out, int64_t rows, int64_t h, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        float *o = out + r * h;
        float d = sqrtf(sum_squares(xr, h));
        d = d < eps ? eps : d;
        int64_t j = 0;
        for (; j + 16 <= h; j += 16) {
            v16 v;
            memcpy(&v, xr + j, 64);
            v = v / d;
            memcpy(o + j, &v, 64);
        }
        for (; j < h; j++) o[j] = xr[j] / d;
    }
}

/* Layer normalisation over the last dimension (nn.LayerNorm, elementwise affine or not):
   out = (x - mean) · 1 / sqrt(var + eps) ⊙ w + b, var the biased variance. Two passes for the
   moments — the mean, then the squares of the deviations from it (a row is in the L1 cache
   by then), so a large mean cancels nothing — and one to scale and shift. w, b: NULL for
   none. */
void sr_layer_norm(const float *x, const float *w, const float *b, float *out, int64_t rows,
                   int64_t h, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        float *o = out + r * h;
        const float mean = row_sum(xr, h, 0.0f, 0) / (float)h;
        const float rstd = 1.0f / sqrtf(row_sum(xr, h, mean, 1) / (float)h + eps);
        int64_t j = 0;
        for (; j + 16 <= h; j += 16) {
            v16 v, wv = {0}, bv = {0};
            memcpy(&v, xr + j, 64);
            v = (v - mean) * rstd;
            if (w) {
                memcpy(&wv, w + j, 64);
                v *= wv;
            }
            if (b) {
                memcpy(&bv, b + j, 64);
                v += bv;
            }
            memcpy(o + j, &v, 64);
        }
        for (; j < h; j++) {
            float y = (xr[j] - mean) * rstd;
            if (w) y *= w[j];
            if (b) y += b[j];
            o[j] = y;
        }
    }
}
