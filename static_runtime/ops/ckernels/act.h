/* The activations our kernels apply in their epilogue, for a 16- and an 8-float vector and a
   float: 0 none, 1 relu, 2 relu6 (hardtanh 0..6), 3 hardswish (x · relu6(x + 3) / 6),
   4 sigmoid, 5 silu (x · sigmoid(x)), 6 gelu (x · Φ(x), the exact one, by erf), 7 tanh
   (a series to x⁹ below |x| = 0.3, where its truncation is < 6e-8 of the value), 8 gelu's
   tanh approximation (x / 2 · (1 + tanh(√(2/π) · (x + 0.044715 x³))), GPT-2's).

   exp is computed as 2^n · e^r with n = round(x / ln 2) and |r| <= ln 2 / 2, e^r by its
   Taylor polynomial of degree 7 (truncation < 2e-9 there): within a few units in the last
   place of float32. Reciprocals (sigmoid's 1 / (1 + e^-x), tanh's, erfc's) take an estimate
   refined by a Newton step where AVX-512 has one (a division otherwise). erfc is the Chebyshev fit of Numerical Recipes (§6.2, "erfcc"),
   fractional error below 1.2e-7 everywhere. */
#ifndef SR_ACT_H
#define SR_ACT_H
#include <stdint.h>
#include <string.h>

typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef int32_t vi16 __attribute__((vector_size(64), aligned(4)));
typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef int32_t vi8 __attribute__((vector_size(32), aligned(4)));

#if defined(__AVX512F__)
#include <immintrin.h>
/* 1 / d: the 14-bit estimate and one Newton step (to ~1 unit in the last place), a few
   operations where a division of 16 floats takes a divider's many cycles */
static inline __attribute__((always_inline)) v16 sr_act16_recip(v16 d) {
    v16 r = (v16)_mm512_rcp14_ps((__m512)d);
    return r * (2.0f - d * r);
}
#else
static inline __attribute__((always_inline)) v16 sr_act16_recip(v16 d) { return 1.0f / d; }
#endif
static inline __attribute__((always_inline)) v8 sr_act8_recip(v8 d) { return 1.0f / d; }

/* The first n (1..16) floats at p as a vector (the rest zero), and the first n lanes of v
   stored at p. A whole vector is one load or store; a part of one a masked load or store
   where AVX-512 has them — a copy of a size known only at run time is a call to memcpy or a
   microcoded string copy, which cost an LSTM step's gates, and a product with 8 columns past
   a multiple of 16 its every row, more than the arithmetic. */
static inline __attribute__((always_inline)) v16 sr_load16(const float *p, int64_t n) {
    v16 v = {0};
    if (n >= 16) {
        memcpy(&v, p, 64);
        return v;
    }
#if defined(__AVX512F__)
    return (v16)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
#else
    memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
#endif
}

static inline __attribute__((always_inline)) void sr_store16(float *p, v16 v, int64_t n) {
    if (n >= 16) {
        memcpy(p, &v, 64);
        return;
    }
#if defined(__AVX512F__)
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
#else
    memcpy(p, &v, (size_t)n * sizeof(float));
#endif
}

/* exp of 16 floats where AVX-512 has min/max, rounding and scaling by a power of two as one
   instruction each: the same clamps, reduction and polynomial as the generic form below, with
   n found by rounding x / ln 2 and 2^n · e^r made by scalef — half the operations of bit
   selects, the 1.5 · 2^23 rounding trick and an exponent built in integer lanes (a SiLU of
   16 floats took 5.1 ns against PyTorch's 3.7). */
#if defined(__AVX512F__)
#define SR_EXP16 sr_exp16_scalef
static inline __attribute__((always_inline)) v16 sr_exp16_scalef(v16 x) {
    /* (min and max return their second operand where either is NaN: a NaN stays NaN) */
    __m512 v = _mm512_max_ps(_mm512_set1_ps(-87.0f), _mm512_min_ps(_mm512_set1_ps(88.0f),
                                                                    (__m512)x));
    __m512 nf = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v16 n = (v16)nf;
    v16 r = (v16)v - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    v16 p = r * (1.0f / 5040) + 1.0f / 720;
    p = p * r + 1.0f / 120; p = p * r + 1.0f / 24; p = p * r + 1.0f / 6; p = p * r + 0.5f;
    p = p * r + 1.0f; p = p * r + 1.0f;
    return (v16)_mm512_scalef_ps((__m512)p, nf);
}
#else
#define SR_EXP16 sr_act16_exp_generic
#endif

#define SR_ACT(V, VI, NAME, EXP) \
static inline __attribute__((always_inline)) V NAME##_sel(VI m, V a, V b) { return (V)(((VI)a & m) | ((VI)b & ~m)); } \
static inline __attribute__((always_inline)) V NAME##_exp_generic(V x) { \
    const V zero = {0}; \
    x = NAME##_sel(x > zero + 88.0f, zero + 88.0f, x);  /* (a NaN stays NaN) */ \
    x = NAME##_sel(x < zero - 87.0f, zero - 87.0f, x); \
    /* round(x / ln 2): added to 1.5 · 2^23, a float's last bit is the units, so the sum's \
       bits minus those of 1.5 · 2^23 are the integer */ \
    V t = x * 1.44269504088896341f + 12582912.0f; \
    VI n = (VI)t - 0x4B400000; \
    V nf = t - 12582912.0f; \
    V r = x - nf * 0.693145751953125f - nf * 1.428606765330187e-06f; \
    V p = zero + 1.0f / 5040; \
    p = p * r + 1.0f / 720; p = p * r + 1.0f / 120; p = p * r + 1.0f / 24; \
    p = p * r + 1.0f / 6; p = p * r + 0.5f; p = p * r + 1.0f; p = p * r + 1.0f; \
    V scale = (V)((n + 127) << 23); \
    return p * scale; } \
static inline __attribute__((always_inline)) V NAME##_exp(V x) { return EXP(x); } \
static inline __attribute__((always_inline)) V NAME##_sigmoid(V x) { \
    return NAME##_recip(1.0f + NAME##_exp(-x)); } \
static inline __attribute__((always_inline)) V NAME##_tanh(V x) { /* odd: a series near 0, else 1 - 2 / (e^2|x| + 1) */ \
    const V zero = {0}; \
    V ax = NAME##_sel(x < zero, -x, x); \
    V x2 = x * x; \
    V series = x + x * x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315 \
                                                              + x2 * (62.0f / 2835)))); \
    V far = 1.0f - 2.0f * NAME##_recip(NAME##_exp(2.0f * ax) + 1.0f); \
    far = NAME##_sel(x < zero, -far, far); \
    return NAME##_sel(ax < zero + 0.3f, series, far); } \
static inline __attribute__((always_inline)) V NAME##_gelu(V x) { \
    const V zero = {0}; \
    V z = x * -0.70710678118654752f; /* Φ(x) = erfc(-x / √2) / 2 */ \
    V az = NAME##_sel(z < zero, -z, z); \
    V t = NAME##_recip(1.0f + 0.5f * az); \
    V q = -0.82215223f + t * 0.17087277f; \
    q = 1.48851587f + t * q; q = -1.13520398f + t * q; q = 0.27886807f + t * q; \
    q = -0.18628806f + t * q; q = 0.09678418f + t * q; q = 0.37409196f + t * q; \
    q = 1.00002368f + t * q; q = -1.26551223f + t * q; \
    V erfc_abs = t * NAME##_exp(q - az * az); \
    V erfc = NAME##_sel(z < zero, 2.0f - erfc_abs, erfc_abs); \
    return 0.5f * x * erfc; } \
static inline __attribute__((always_inline)) V NAME##_gelu_tanh(V x) { \
    return 0.5f * x * (1.0f + NAME##_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))); } \
static inline __attribute__((always_inline)) V NAME##_clamp(V x, int act) { \
    const V zero = {0}, six = zero + 6.0f; \
    V y = act == 3 ? x + 3.0f : x; \
    y = NAME##_sel(y < zero, zero, y);  /* (a NaN stays NaN, as in PyTorch) */ \
    if (act != 1) y = NAME##_sel(y > six, six, y); \
    return act == 3 ? x * y / 6.0f : y; } \
static inline V NAME(V x, int act) { \
    if (act == 0) return x; \
    if (act == 4) return NAME##_sigmoid(x); \
    if (act == 5) return x * NAME##_sigmoid(x); \
    if (act == 6) return NAME##_gelu(x); \
    if (act == 7) return NAME##_tanh(x); \
    if (act == 8) return NAME##_gelu_tanh(x); \
    return NAME##_clamp(x, act); } \
/* act over n vectors in place: one dispatch, then a loop whose iterations are independent, so \
   the CPU overlaps them (one vector at a time, an exp's chain of dependent steps left the \
   units idle: a SiLU epilogue cost twice the convolution it ended). */ \
static __attribute__((unused)) void NAME##_many(V *x, int64_t n, int act) { \
    switch (act) { \
    case 0: return; \
    case 4: for (int64_t i = 0; i < n; i++) x[i] = NAME##_sigmoid(x[i]); return; \
    case 5: for (int64_t i = 0; i < n; i++) x[i] = x[i] * NAME##_sigmoid(x[i]); return; \
    case 6: for (int64_t i = 0; i < n; i++) x[i] = NAME##_gelu(x[i]); return; \
    case 7: for (int64_t i = 0; i < n; i++) x[i] = NAME##_tanh(x[i]); return; \
    case 8: for (int64_t i = 0; i < n; i++) x[i] = NAME##_gelu_tanh(x[i]); return; \
    default: for (int64_t i = 0; i < n; i++) x[i] = NAME##_clamp(x[i], act); } }
SR_ACT(v16, vi16, sr_act16, SR_EXP16)
SR_ACT(v8, vi8, sr_act8, sr_act8_exp_generic)

static inline float sr_act1(float x, int act) {
    if (act >= 4) {  /* through the vector form: the same numbers whatever the lane */
        v8 v = {x};
        return sr_act8(v, act)[0];
    }
    if (act == 0) return x;
    float y = act == 3 ? x + 3.0f : x;
    y = y < 0 ? 0 : y;
    if (act != 1) y = y > 6 ? 6 : y;
    return act == 3 ? x * y / 6.0f : y;
}

static __attribute__((unused)) void sr_act1_many(float *x, int64_t n, int act) {
    for (int64_t i = 0; i < n; i++) x[i] = sr_act1(x[i], act);
}
#endif
