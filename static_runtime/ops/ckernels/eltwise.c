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
