/* One direction of one LSTM or GRU layer, for inference: the input projections of every time
   step come precomputed (one GEMM over all steps, b_ih added), so what is left per step is the
   recurrent product h · W_hhᵀ (sr_gemm on W_hh packed once) and the gate arithmetic, with no
   call back into Python between steps. Gates in PyTorch's order and formulas: GRU r, z, n
   (n = tanh(x_n + r ⊙ (W_hn h + b_hn)), h = (1 − z) ⊙ n + z ⊙ h); LSTM i, f, g, o. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "act.h"

void sr_gemm(const float *a, int64_t lda, const float *packed, const float *bias, float *c,
             int64_t ldc, int64_t m, int64_t k, int64_t n, int act);

static inline v16 load(const float *p, int64_t n) {
    v16 v = {0};
    memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}

static inline void store(float *p, v16 v, int64_t n) { memcpy(p, &v, (size_t)n * sizeof(float)); }

/* xp: the projection of step t, batch row b at xp + t * xs_t + b * xs_b (G·H floats);
   h: (B, H) state, in and out; c: (B, H) cell state (LSTM) or NULL (GRU); out: step t, row b
   at out + t * os_t + b * os_b (H floats). Returns 0, or -1 without memory (nothing done). */
int sr_recurrent_layer(const float *xp, int64_t xs_t, int64_t xs_b, const float *whh,
                       const float *bhh, float *h, float *c, float *out, int64_t os_t,
                       int64_t os_b, int64_t steps, int64_t batch, int64_t hidden, int reverse) {
    const int lstm = c != 0;
    const int64_t g = (lstm ? 4 : 3) * hidden;
    float *gh = malloc((size_t)(batch * g) * sizeof(float));
    if (!gh) return -1;
    for (int64_t s = 0; s < steps; s++) {
        const int64_t t = reverse ? steps - 1 - s : s;
        sr_gemm(h, hidden, whh, bhh, gh, g, batch, hidden, g, 0);
        for (int64_t b = 0; b < batch; b++) {
            const float *x = xp + t * xs_t + b * xs_b, *r = gh + b * g;
            float *hb = h + b * hidden, *o = out + t * os_t + b * os_b;
            for (int64_t j = 0; j < hidden; j += 16) {
                const int64_t n = hidden - j < 16 ? hidden - j : 16;
                v16 hn;
                if (lstm) {
                    float *cb = c + b * hidden;
                    v16 i = sr_act16_sigmoid(load(x + j, n) + load(r + j, n));
                    v16 f = sr_act16_sigmoid(load(x + hidden + j, n) + load(r + hidden + j, n));
                    v16 gg = sr_act16_tanh(load(x + 2 * hidden + j, n)
                                           + load(r + 2 * hidden + j, n));
                    v16 og = sr_act16_sigmoid(load(x + 3 * hidden + j, n)
                                              + load(r + 3 * hidden + j, n));
                    v16 cn = f * load(cb + j, n) + i * gg;
                    store(cb + j, cn, n);
                    hn = og * sr_act16_tanh(cn);
                } else {
                    v16 rg = sr_act16_sigmoid(load(x + j, n) + load(r + j, n));
                    v16 z = sr_act16_sigmoid(load(x + hidden + j, n) + load(r + hidden + j, n));
                    v16 nn = sr_act16_tanh(load(x + 2 * hidden + j, n)
                                           + rg * load(r + 2 * hidden + j, n));
                    v16 hp = load(hb + j, n);
                    hn = nn + z * (hp - nn);
                }
                store(hb + j, hn, n);
                store(o + j, hn, n);
            }
        }
    }
    free(gh);
    return 0;
}
