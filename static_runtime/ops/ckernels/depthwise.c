/* Depthwise 2-D convolution of a channels-last float32 tensor: one filter per channel, each
   output pixel a sum over the kernel's taps of input pixel × weight, vectorised across
   channels (the innermost dimension of channels-last memory, and of the (KH, KW, C) weight).
   Interior pixels are computed eight (or four) at a time, independent sums that hide the
   multiply-add latency; pixels whose taps cross the border one at a time, up to four channel
   vectors at once. */
#include <stdint.h>
#include <string.h>

#include "act.h"

/* Interior pixels x .. x + P - 1 (every tap inside the input) of one output row, channels
   [c0, c0 + L): P independent sums, enough of them to cover a multiply-add's latency (eight
   for 16-float vectors: with four, each sum's chain of dependent multiply-adds left half the
   units idle on a 7 × 7 kernel). */
#define RUN(V, P, NAME, ACTF) \
static inline void NAME(const float *in, const float *w, const float *bias, float *o, \
                        int64_t c0, int64_t wd, int64_t c, int64_t kw, int64_t sw, int64_t pw, \
                        int64_t dw, int64_t i0, int64_t i1, int64_t iy0, int64_t dh, int64_t x, \
                        int act) { \
    V b; if (bias) memcpy(&b, bias + c0, sizeof(V)); else memset(&b, 0, sizeof(V)); \
    V a[P]; \
    for (int q = 0; q < P; q++) a[q] = b; \
    for (int64_t i = i0; i < i1; i++) { \
        const float *p = in + ((iy0 + i * dh) * wd + x * sw - pw) * c + c0; \
        const float *wr = w + i * kw * c + c0; \
        for (int64_t j = 0; j < kw; j++, p += dw * c) { \
            V wv; memcpy(&wv, wr + j * c, sizeof(V)); \
            for (int q = 0; q < P; q++) { \
                V pv; memcpy(&pv, p + q * sw * c, sizeof(V)); \
                a[q] += pv * wv; } \
        } \
    } \
    ACTF##_many(a, P, act); \
    for (int q = 0; q < P; q++) memcpy(o + (x + q) * c + c0, &a[q], sizeof(V)); \
}
RUN(v16, 8, oct16, sr_act16)
RUN(v16, 4, quad16, sr_act16)
RUN(v8, 4, quad8, sr_act8)
RUN(float, 4, quad1, sr_act1)

/* One pixel x of one output row, channels [c0, c0 + K * L) with K sums of L channels,
   taps outside the input skipped. */
#define PIXEL(V, K, NAME, ACTF) \
static inline void NAME(const float *in, const float *w, const float *bias, float *o, \
                        int64_t c0, int64_t wd, int64_t c, int64_t kw, int64_t sw, int64_t pw, \
                        int64_t dw, int64_t i0, int64_t i1, int64_t iy0, int64_t dh, int64_t x, \
                        int act) { \
    V a[K]; \
    for (int k = 0; k < K; k++) { \
        if (bias) memcpy(&a[k], bias + c0 + k * (int64_t)(sizeof(V) / 4), sizeof(V)); \
        else memset(&a[k], 0, sizeof(V)); } \
    for (int64_t i = i0; i < i1; i++) { \
        const float *row = in + (iy0 + i * dh) * wd * c + c0; \
        const float *wr = w + i * kw * c + c0; \
        for (int64_t j = 0; j < kw; j++) { \
            int64_t ix = x * sw - pw + j * dw; \
            if (ix < 0 || ix >= wd) continue; \
            for (int k = 0; k < K; k++) { \
                V wv, pv; \
                memcpy(&wv, wr + j * c + k * (int64_t)(sizeof(V) / 4), sizeof(V)); \
                memcpy(&pv, row + ix * c + k * (int64_t)(sizeof(V) / 4), sizeof(V)); \
                a[k] += pv * wv; } \
        } \
    } \
    ACTF##_many(a, K, act); \
    for (int k = 0; k < K; k++) \
        memcpy(o + x * c + c0 + k * (int64_t)(sizeof(V) / 4), &a[k], sizeof(V)); \
}
PIXEL(v16, 4, pixel64, sr_act16)
PIXEL(v16, 3, pixel48, sr_act16)
PIXEL(v16, 2, pixel32, sr_act16)
PIXEL(v16, 1, pixel16, sr_act16)
PIXEL(v8, 1, pixel8, sr_act8)
PIXEL(float, 1, pixel1, sr_act1)

/* Depthwise 2-D convolution (one filter per channel) of a channels-last float32 input:
   in (N, H, W, C), w (KH, KW, C), bias (C) or NULL, out (N, OH, OW, C); act as in act.h. */
void sr_depthwise_conv2d_nhwc(const float *in, const float *w, const float *bias, float *out,
                              int64_t n_, int64_t h, int64_t wd, int64_t c, int64_t kh, int64_t kw,
                              int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                              int64_t oh, int64_t ow, int act) {
    /* first output column whose taps are all inside, and one past the last */
    int64_t x0 = (pw + sw - 1) / sw;
    int64_t x1 = 0;
    if (wd - 1 - (kw - 1) * dw + pw >= 0) x1 = (wd - 1 - (kw - 1) * dw + pw) / sw + 1;
    if (x1 > ow) x1 = ow;
    if (x0 > x1) x0 = x1;
    for (int64_t n = 0; n < n_; n++) {
        const float *inb = in + n * h * wd * c;
        float *outb = out + n * oh * ow * c;
        for (int64_t y = 0; y < oh; y++) {
            int64_t iy0 = y * sh - ph;  /* input row of tap 0 */
            int64_t i0 = 0, i1 = kh;   /* taps inside the input */
            while (i0 < kh && iy0 + i0 * dh < 0) i0++;
            while (i1 > i0 && iy0 + (i1 - 1) * dh >= h) i1--;
            float *o = outb + y * ow * c;
            int64_t x = 0;
            while (x < ow) {
                if (x >= x0 && x + 8 <= x1 && c % 16 == 0) {
                    for (int64_t c0 = 0; c0 < c; c0 += 16)
                        oct16(inb, w, bias, o, c0, wd, c, kw, sw, pw, dw, i0, i1, iy0, dh, x, act);
                    x += 8;
                } else if (x >= x0 && x + 4 <= x1) {
                    int64_t c0 = 0;
                    for (; c0 + 16 <= c; c0 += 16)
                        quad16(inb, w, bias, o, c0, wd, c, kw, sw, pw, dw, i0, i1, iy0, dh, x, act);
                    for (; c0 + 8 <= c; c0 += 8)
                        quad8(inb, w, bias, o, c0, wd, c, kw, sw, pw, dw, i0, i1, iy0, dh, x, act);
                    for (; c0 < c; c0++)
                        quad1(inb, w, bias, o, c0, wd, c, kw, sw, pw, dw, i0, i1, iy0, dh, x, act);
                    x += 4;
                } else {
                    int64_t c0 = 0;
                    for (; c0 + 64 <= c; c0 += 64)
                        pixel64(inb, w, bias, o, c0, wd, c, kw, sw, pw, dw, i0, i1, iy0, dh, x, act);
                    if (c0 + 48 <= c) {
                        pixel48(inb, w, bias, o, c0, wd, c, kw, sw, pw, dw, i0, i1, iy0, dh, x, act);
                        c0 += 48;
                    } else if (c0 + 32 <= c) {
                        pixel32(inb, w, bias, o, c0, wd, c, kw, sw, pw, dw, i0, i1, iy0, dh, x, act);
                        c0 += 32;
                    }
                    for (; c0 + 16 <= c; c0 += 16)
                        pixel16(inb, w, bias, o, c0, wd, c, kw, sw, pw, dw, i0, i1, iy0, dh, x, act);
                    for (; c0 + 8 <= c; c0 += 8)
                        pixel8(inb, w, bias, o, c0, wd, c, kw, sw, pw, dw, i0, i1, iy0, dh, x, act);
                    for (; c0 < c; c0++)
                        pixel1(inb, w, bias, o, c0, wd, c, kw, sw, pw, dw, i0, i1, iy0, dh, x, act);
                    x += 1;
                }
            }
        }
    }
}

/* sr_depthwise_conv2d_nhwc with the weight, bias, sizes and activation in one block (w, bias,
   n, h, w, c, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, act), made once per input shape. */
void sr_depthwise_conv2d_block(const float *in, float *out, const int64_t *p) {
    sr_depthwise_conv2d_nhwc(in, (const float *)(intptr_t)p[0], (const float *)(intptr_t)p[1],
                             out, p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11],
                             p[12], p[13], p[14], p[15], (int)p[16]);
}
