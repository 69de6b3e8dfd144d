/* The activations our kernels apply in their epilogue, for a 16- and an 8-float vector and a
   float: 0 none, 1 relu, 2 relu6 (hardtanh 0..6), 3 hardswish (x · relu6(x + 3) / 6). */
#ifndef SR_ACT_H
#define SR_ACT_H
#include <stdint.h>

typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef int32_t vi16 __attribute__((vector_size(64), aligned(4)));
typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef int32_t vi8 __attribute__((vector_size(32), aligned(4)));

#define SR_ACT(V, VI, NAME) \
static inline V NAME(V x, int act) { \
    const V zero = {0}; \
    if (act == 0) return x; \
    const V six = zero + 6.0f; \
    V y = act == 3 ? x + 3.0f : x; \
    y = (V)((VI)y & (y > zero)); \
    if (act != 1) { VI m = y < six; y = (V)(((VI)y & m) | ((VI)six & ~m)); } \
    return act == 3 ? x * y / 6.0f : y; }
SR_ACT(v16, vi16, sr_act16)
SR_ACT(v8, vi8, sr_act8)

static inline float sr_act1(float x, int act) {
    if (act == 0) return x;
    float y = act == 3 ? x + 3.0f : x;
    y = y > 0 ? y : 0;
    if (act != 1) y = y < 6 ? y : 6;
    return act == 3 ? x * y / 6.0f : y;
}
#endif
