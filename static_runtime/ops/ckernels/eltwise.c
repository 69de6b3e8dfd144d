/* An activation over a contiguous buffer: out = act(x) for n floats (out may be x), by the
   same vector functions our GEMM applies in its epilogue (act.h); the tail is one partial
   vector, so every element gets the same arithmetic whatever its position. PyTorch's exact
   GELU pays ~5 µs a call before its first element, and its tanh runs at ~2 ns an element
   here. */
#include <stdint.h>
#include <string.h>

#include "act.h"

void sr_activation(const float *x, float *out, int64_t n, int act) {
    /* in blocks of vectors, each activated as one batch (sr_act16_many) */
    enum { BLOCK = 16 };
    v16 v[BLOCK];
    int64_t i = 0;
    for (; i + 16 * BLOCK <= n; i += 16 * BLOCK) {
        memcpy(v, x + i, sizeof(v));
        sr_act16_many(v, BLOCK, act);
        memcpy(out + i, v, sizeof(v));
    }
    if (i < n) {
        int64_t rest = n - i, vectors = (rest + 15) / 16;
        memset(v, 0, (size_t)vectors * 64);
        memcpy(v, x + i, (size_t)rest * sizeof(float));
        sr_act16_many(v, vectors, act);
        memcpy(out + i, v, (size_t)rest * sizeof(float));
    }
}

/* self[index[i]] += src[i] for the n rows of len floats of src (index_add_ along the first
   dimension of a contiguous tensor of rows rows), in the order of index, as ATen adds them
   (an index named twice accumulates both rows). Returns -1, writing nothing, if an index is
   outside [0, rows): the caller lets ATen raise its error. */
int sr_index_add_rows(float *self, int64_t rows, int64_t len, const int64_t *index, int64_t n,
                      const float *src) {
    for (int64_t i = 0; i < n; i++)
        if (index[i] < 0 || index[i] >= rows) return -1;
    for (int64_t i = 0; i < n; i++) {
        float *dst = self + index[i] * len;
        const float *s = src + i * len;
        int64_t j = 0;
        for (; j + 16 <= len; j += 16) {
            v16 a, b;
            memcpy(&a, dst + j, 64);
            memcpy(&b, s + j, 64);
            a += b;
            memcpy(dst + j, &a, 64);
        }
        if (j < len) sr_store16(dst + j, sr_load16(dst + j, len - j) + sr_load16(s + j, len - j),
                                len - j);
    }
    return 0;
}

/* sr_index_add_rows with source row i multiplied by scale[i] first: self[index[i]] +=
   src[i] * scale[i], the product rounded before the sum as a separate multiply gives it
   (no fused multiply-add: the same bits as ``index_add_(0, index, src * scale[:, None])``). */
__attribute__((optimize("fp-contract=off")))
int sr_index_add_rows_scaled(float *self, int64_t rows, int64_t len, const int64_t *index,
                             int64_t n, const float *src, const float *scale) {
    for (int64_t i = 0; i < n; i++)
        if (index[i] < 0 || index[i] >= rows) return -1;
    for (int64_t i = 0; i < n; i++) {
        float *dst = self + index[i] * len;
        const float *s = src + i * len;
        const float w = scale[i];
        int64_t j = 0;
        for (; j + 16 <= len; j += 16) {
            v16 a, b;
            memcpy(&a, dst + j, 64);
            memcpy(&b, s + j, 64);
            b = b * w;
            a += b;
            memcpy(dst + j, &a, 64);
        }
        for (; j < len; j++) {
            float t = s[j] * w;
            dst[j] += t;
        }
    }
    return 0;
}

/* The rotary half of rotary position embeddings, added in place: for each row of ``d``
   elements (up to four dimensions, ``block``: sizes[4], then the strides of ``out``, ``x``
   and ``sin`` in elements for the first three — 0 where ``sin`` broadcasts — then d and
   half), out[j] += rot[j] * sin[j] with rot = cat(-x[half:], x[:half]); each product
   rounded before the sum, as the separate operators give it. ``out`` holds x * cos. */
__attribute__((optimize("fp-contract=off")))
void sr_rotary_add(float *out, const float *x, const float *sin, const int64_t *block) {
    const int64_t *size = block, *so = block + 4, *sx = block + 7, *ss = block + 10;
    const int64_t d = block[13], half = block[14], rest = d - half;
    for (int64_t a = 0; a < size[0]; a++)
        for (int64_t b = 0; b < size[1]; b++)
            for (int64_t c = 0; c < size[2]; c++) {
                float *o = out + a * so[0] + b * so[1] + c * so[2];
                const float *xr = x + a * sx[0] + b * sx[1] + c * sx[2];
                const float *s = sin + a * ss[0] + b * ss[1] + c * ss[2];
                for (int64_t j = 0; j < rest; j++) {
                    float t = -xr[half + j] * s[j];
                    o[j] += t;
                }
                for (int64_t j = rest; j < d; j++) {
                    float t = xr[j - rest] * s[j];
                    o[j] += t;
                }
            }
}
