/* An activation over a contiguous buffer: out = act(x) for n floats (out may be x), by the
   same vector functions our GEMM applies in its epilogue (act.h); the tail is one partial
   vector, so every element gets the same arithmetic whatever its position. PyTorch's exact
   GELU pays ~5 µs a call before its first element, and its tanh runs at ~2 ns an element
   here. */
#include <stdint.h>
#include <string.h>

#include "act.h"

void sr_activation(const float *x, float *out, int64_t n, int act) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16 v;
        memcpy(&v, x + i, 64);
        v = sr_act16(v, act);
        memcpy(out + i, &v, 64);
    }
    if (i < n) {
        v16 v = {0};
        memcpy(&v, x + i, (size_t)(n - i) * sizeof(float));
        v = sr_act16(v, act);
        memcpy(out + i, &v, (size_t)(n - i) * sizeof(float));
    }
}
