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

/* Bags of one size in tables laid end to end (``static_runtime::embedding_bags``): for each
   of the block's ``batch`` rows b and ``n`` tables t, the sum (mode 0) or mean (mode 1) of the
   ``size`` rows of ``weight`` (``width`` floats each) named by x[b, t, 0..size) — indices into
   table t, whose rows start at row first[t] of ``weight`` — written to out[b, t * width ...]
   (out contiguous, batch × n·width). The rows are added in the order of the indices starting
   from zero, and a mean divides the sum by ``size``, as ``embedding_bag``'s CPU kernel does:
   the same bits. Returns -1, writing nothing, if an index is outside its own table
   [0, rows[t]): the caller runs the lookups one by one, which raise. ``x`` holds int64
   (``is32`` 0) or int32 indices, with strides (in elements) sb, st, ss. The sizes of a call
   are arguments, not a block made per size (traffic brings a new batch size on most calls).

   node: weight, first, rows (addresses), n, width, mode — one block a node. */
__attribute__((optimize("fp-contract=off")))
int sr_embedding_bags(const void *x, int is32, float *out, int64_t batch, int64_t sb,
                      int64_t st, int64_t ss, int64_t size, const int64_t *node) {
    const float *weight = (const float *)(intptr_t)node[0];
    const int64_t *first = (const int64_t *)(intptr_t)node[1];
    const int64_t *rows = (const int64_t *)(intptr_t)node[2];
    const int64_t n = node[3], width = node[4], mode = node[5];
    const int64_t *x64 = (const int64_t *)x;
    const int32_t *x32 = (const int32_t *)x;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < n; t++)
            for (int64_t s = 0; s < size; s++) {
                int64_t at = b * sb + t * st + s * ss;
                int64_t i = is32 ? (int64_t)x32[at] : x64[at];
                if (i < 0 || i >= rows[t]) return -1;
            }
    const float count = (float)size;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < n; t++) {
            float *o = out + (b * n + t) * width;
            int64_t j = 0;
            for (; j < width; j += 16) {
                int64_t left = width - j < 16 ? width - j : 16;
                v16 acc = {0};
                for (int64_t s = 0; s < size; s++) {
                    int64_t at = b * sb + t * st + s * ss;
                    int64_t i = is32 ? (int64_t)x32[at] : x64[at];
                    const float *row = weight + (first[t] + i) * width + j;
                    acc += sr_load16(row, left);
                }
                if (mode == 1) acc /= count;
                sr_store16(o + j, acc, left);
            }
        }
    return 0;
}

/* Bags by rows of flat indices with bag starts (``static_runtime::embedding_bag_rows``,
   DLRM's form): for each of ``n`` tables t, row t of ``idx`` holds ``length`` indices into
   table t (whose rows start at row first[t] of ``weight``) and row t of ``off`` the starts of
   its ``bags`` bags, each running to the next start (the last to ``length``). Writes the sum
   (mode 0) or mean (mode 1; 0 for an empty bag) of each bag's rows to out[b, t, :] (out
   contiguous, bags × n × width), the rows added from zero in the order of the indices, as
   ``embedding_bag`` adds them. Returns -1, writing nothing, unless every row's first start is
   0, its starts do not decrease and none is past ``length`` (end to end, a bag running past
   its row would take the next row's indices), and every index is inside its own table: the
   caller then runs the lookups one by one, which raise or compute what they do. Indices and
   starts are int64, or int32 where idx32 / off32; strides in elements.

   node: weight, first, rows (addresses), n, width, mode — one block a node. */
__attribute__((optimize("fp-contract=off")))
int sr_embedding_bag_rows(const void *idx, int idx32, int64_t si_t, int64_t si_j,
                          const void *off, int off32, int64_t so_t, int64_t so_b,
                          int64_t length, int64_t bags, float *out, const int64_t *node) {
    const float *weight = (const float *)(intptr_t)node[0];
    const int64_t *first = (const int64_t *)(intptr_t)node[1];
    const int64_t *rows = (const int64_t *)(intptr_t)node[2];
    const int64_t n = node[3], width = node[4], mode = node[5];
#define SR_AT(p, is32, k) ((is32) ? (int64_t)((const int32_t *)(p))[k] : ((const int64_t *)(p))[k])
    for (int64_t t = 0; t < n; t++) {
        if (SR_AT(off, off32, t * so_t) != 0) return -1;
        for (int64_t b = 0; b < bags; b++) {
            int64_t start = SR_AT(off, off32, t * so_t + b * so_b);
            int64_t end = b + 1 < bags ? SR_AT(off, off32, t * so_t + (b + 1) * so_b) : length;
            if (end < start || end > length) return -1;
        }
        for (int64_t j = 0; j < length; j++) {
            int64_t i = SR_AT(idx, idx32, t * si_t + j * si_j);
            if (i < 0 || i >= rows[t]) return -1;
        }
    }
    for (int64_t b = 0; b < bags; b++)
        for (int64_t t = 0; t < n; t++) {
            int64_t start = SR_AT(off, off32, t * so_t + b * so_b);
            int64_t end = b + 1 < bags ? SR_AT(off, off32, t * so_t + (b + 1) * so_b) : length;
            float *o = out + (b * n + t) * width;
            for (int64_t c = 0; c < width; c += 16) {
                int64_t left = width - c < 16 ? width - c : 16;
                v16 acc = {0};
                for (int64_t j = start; j < end; j++) {
                    int64_t i = SR_AT(idx, idx32, t * si_t + j * si_j);
                    acc += sr_load16(weight + (first[t] + i) * width + c, left);
                }
                if (mode == 1 && end > start) acc /= (float)(end - start);
                sr_store16(o + c, acc, left);
            }
        }
#undef SR_AT
    return 0;
}

/* Lookups in tables laid end to end (``static_runtime::embeddings``, a 2-D ``x``): for each
   of ``batch`` rows b and ``n`` tables t, row x[b, t] of table t (whose rows start at row
   first[t] of ``weight``) copied to out[b, t * width ...] (out contiguous, batch × n·width).
   Returns -1, writing nothing, if an index is outside its own table [0, rows[t]): the caller
   runs the lookups one by one, which raise. ``x`` int64, or int32 where ``is32``; strides
   in elements.

   node: weight, first, rows (addresses), n, width — one block a node. */
int sr_embeddings(const void *x, int is32, int64_t batch, int64_t sb, int64_t st, float *out,
                  const int64_t *node) {
    const float *weight = (const float *)(intptr_t)node[0];
    const int64_t *first = (const int64_t *)(intptr_t)node[1];
    const int64_t *rows = (const int64_t *)(intptr_t)node[2];
    const int64_t n = node[3], width = node[4];
    const int64_t *x64 = (const int64_t *)x;
    const int32_t *x32 = (const int32_t *)x;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < n; t++) {
            int64_t i = is32 ? (int64_t)x32[b * sb + t * st] : x64[b * sb + t * st];
            if (i < 0 || i >= rows[t]) return -1;
        }
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < n; t++) {
            int64_t i = is32 ? (int64_t)x32[b * sb + t * st] : x64[b * sb + t * st];
            memcpy(out + (b * n + t) * width, weight + (first[t] + i) * width,
                   (size_t)width * sizeof(float));
        }
    return 0;
}
