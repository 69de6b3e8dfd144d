/* One direction of one LSTM or GRU layer, for inference: the input projections of every time
   step come precomputed (one GEMM over all steps, b_ih added), so what is left per step is the
   recurrent product h · W_hhᵀ (sr_gemm on W_hh packed once) and the gate arithmetic, with no
   call back into Python between steps. A cell (one step, sr_rnn_cell) makes both products
   itself. Gates in PyTorch's order and formulas: GRU r, z, n
   (n = tanh(x_n + r ⊙ (W_hn h + b_hn)), h = (1 − z) ⊙ n + z ⊙ h); LSTM i, f, g, o. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "act.h"

void sr_gemm(const float *a, int64_t lda, const float *packed, const float *bias, float *c,
             int64_t ldc, int64_t m, int64_t k, int64_t n, int act);

/* The gate arithmetic of one batch row: x the row's input projection (b_ih added), r its
   recurrent product (b_hh added), hp / cp the previous states; writes the new h to hn (and to
   out unless NULL) and, for an LSTM, the new c to cn. hn may be hp and cn cp: each element is
   read before it is written. */
static inline void gates_row(const float *x, const float *r, const float *hp, const float *cp,
                             float *hn, float *cn, float *out, int64_t hidden, int lstm) {
    for (int64_t j = 0; j < hidden; j += 16) {
        const int64_t n = hidden - j < 16 ? hidden - j : 16;
        v16 h;
        if (lstm) {
            v16 i = sr_act16_sigmoid(sr_load16(x + j, n) + sr_load16(r + j, n));
            v16 f = sr_act16_sigmoid(sr_load16(x + hidden + j, n) + sr_load16(r + hidden + j, n));
            v16 gg = sr_act16_tanh(sr_load16(x + 2 * hidden + j, n) + sr_load16(r + 2 * hidden + j, n));
            v16 og = sr_act16_sigmoid(sr_load16(x + 3 * hidden + j, n)
                                      + sr_load16(r + 3 * hidden + j, n));
            v16 c = f * sr_load16(cp + j, n) + i * gg;
            sr_store16(cn + j, c, n);
            h = og * sr_act16_tanh(c);
        } else {
            v16 rg = sr_act16_sigmoid(sr_load16(x + j, n) + sr_load16(r + j, n));
            v16 z = sr_act16_sigmoid(sr_load16(x + hidden + j, n) + sr_load16(r + hidden + j, n));
            v16 nn = sr_act16_tanh(sr_load16(x + 2 * hidden + j, n)
                                   + rg * sr_load16(r + 2 * hidden + j, n));
            h = nn + z * (sr_load16(hp + j, n) - nn);
        }
        sr_store16(hn + j, h, n);
        if (out) sr_store16(out + j, h, n);
    }
}

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
            float *hb = h + b * hidden, *cb = lstm ? c + b * hidden : 0;
            gates_row(xp + t * xs_t + b * xs_b, gh + b * g, hb, cb, hb, cb,
                      out + t * os_t + b * os_b, hidden, lstm);
        }
    }
    free(gh);
    return 0;
}

/* One step of an LSTM cell (c and cn not NULL) or a GRU cell (torch.lstm_cell /
   torch.gru_cell in inference) for contiguous (B, I) x and (B, H) states: both products by
   sr_gemm on weights packed once, then the gates. hn / cn may be h / c. p: batch, input size,
   hidden size, then the addresses of the packed W_ih, its padded bias (0: none), the packed
   W_hh and its padded bias. Returns 0, or -1 without memory (nothing written). */
int sr_rnn_cell(const float *x, const float *h, const float *c, float *hn, float *cn,
                const int64_t *p) {
    const int64_t batch = p[0], in = p[1], hidden = p[2];
    const int lstm = c != 0;
    const int64_t g = (lstm ? 4 : 3) * hidden;
    float *gx = malloc((size_t)(2 * batch * g) * sizeof(float));
    if (!gx) return -1;
    float *gh = gx + batch * g;
    sr_gemm(x, in, (const float *)(intptr_t)p[3], (const float *)(intptr_t)p[4], gx, g, batch,
            in, g, 0);
    sr_gemm(h, hidden, (const float *)(intptr_t)p[5], (const float *)(intptr_t)p[6], gh, g,
            batch, hidden, g, 0);
    for (int64_t b = 0; b < batch; b++)
        gates_row(gx + b * g, gh + b * g, h + b * hidden, lstm ? c + b * hidden : 0,
                  hn + b * hidden, lstm ? cn + b * hidden : 0, 0, hidden, lstm);
    free(gx);
    return 0;
}
