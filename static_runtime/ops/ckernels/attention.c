/* Scaled dot-product attention for inference, as torch.nn.functional.scaled_dot_product_attention
   computes it without dropout: per (batch, head), softmax(scale · Q Kᵀ + mask) V, with an
   additive float mask, a boolean one (true: attend), or the causal (top-left) one.

   Written for the sizes a transformer serves at small batch, where PyTorch's kernels pay more
   around each head's few thousand multiply-adds than for them: per (batch, head) the key is
   transposed once into a (D, Lk) block, so the scores of one query against 16 keys are D
   broadcast multiply-adds into one vector (no horizontal sums), the row's softmax is
   vectorised, and the output row is the weighted sum of value rows. Nothing is allocated but
   one scratch block per call. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "act.h"

#define MAX_D 256
#define ROWS 4  /* query rows a tile: independent sums, each broadcast key vector used 4 times */

/* How many vectors of 16 keys a step of the scores makes: ROWS × QK_VECS independent sums,
   each key vector loaded once for ROWS query rows (as PV_VECS). */
#if defined(__AVX512F__)
#define QK_VECS 4
#else
#define QK_VECS 2
#endif

/* The scores of ROWS query rows (qr) against keys j0 .. j0 + 16·NK of the transposed key kt
   (D rows of lkp), scaled, masked (keys ≥ last[r] and the mask's, as sr_attention says), into
   rows of s (row stride lkp), and each row's running maximum vmax[r]. Each score sums over d
   in order, whatever NK is. */
static inline __attribute__((always_inline)) void
scores(int NK, const float *const *qr, const float *kt, int64_t lkp, int64_t j0, int64_t D,
       float scale, const float *fmask, const uint8_t *bmask, const int64_t *mrow, int64_t mj,
       uint8_t invert, const int64_t *last, int64_t Lk, float *s, v16 *vmax) {
    const v16 zero = {0}, ninf = zero - __builtin_inff();
    const vi16 iota = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    v16 a[ROWS][QK_VECS > 2 ? QK_VECS : 2];
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < NK; h++) a[r][h] = zero;
    const float *kd = kt + j0;
    for (int64_t d = 0; d < D; d++, kd += lkp) {
        v16 kv[QK_VECS > 2 ? QK_VECS : 2];
        for (int h = 0; h < NK; h++) memcpy(&kv[h], kd + 16 * h, 64);
        for (int r = 0; r < ROWS; r++) {
            const float x = qr[r][d];
            for (int h = 0; h < NK; h++) a[r][h] += x * kv[h];
        }
    }
    for (int r = 0; r < ROWS; r++) {
        for (int h = 0; h < NK; h++) {
            const int64_t j = j0 + 16 * h;
            v16 acc = a[r][h] * scale;
            const int64_t n = Lk - j < 0 ? 0 : Lk - j < 16 ? Lk - j : 16;
            if (fmask && n > 0) {
                if (mj == 1) {
                    acc += sr_load16(fmask + mrow[r] + j, n);
                } else {
                    float tmp[16] = {0};
                    for (int64_t c = 0; c < n; c++)
                        tmp[c] = fmask[mrow[r] + (j + c) * mj];
                    acc += sr_load16(tmp, 16);
                }
            } else if (bmask && n > 0) {
                int32_t keep[16] = {0};
                for (int64_t c = 0; c < n; c++)
                    keep[c] = (bmask[mrow[r] + (j + c) * mj] != 0) ^ invert;
                vi16 kv;
                memcpy(&kv, keep, 64);
                acc = sr_act16_sel(kv != 0, acc, ninf);
            }
            acc = sr_act16_sel(iota + (int32_t)j < (int32_t)last[r], acc, ninf);
            memcpy(s + r * lkp + j, &acc, 64);
            vmax[r] = sr_act16_sel(acc > vmax[r], acc, vmax[r]);
        }
    }
}

/* How many vectors of 16 output columns a pass of the weighted sum makes: each probability is
   broadcast once for all of them, and ROWS × PV_VECS independent sums hide the multiply-add's
   latency (with one vector, 4 sums a step: half of AVX-512's two units). AVX-512 has the 32
   registers for 16 sums; elsewhere a 16-float vector takes 2 (AVX) or 4 (NEON) registers. */
#if defined(__AVX512F__)
#define PV_VECS 4
#else
#define PV_VECS 1
#endif

/* rows r < nr of out (row stride ol) at columns 16·t .. 16·(t + NV), times inv[r]: the sums
   over keys j < upto of p[r][j] · v[j] (row stride vl), Dv columns in all; FULL: all NV
   vectors are whole (no masked loads in the loop). Each sum adds in the order of j, whatever
   NV is: the same bits as one vector a pass. (The sums are named scalars of the loop, not an
   array it indexes, so that GCC keeps them in registers.) */
static inline __attribute__((always_inline)) void
weighted_sum(int NV, int FULL, const float *const *p, const float *v, int64_t vl,
             int64_t upto, int64_t t, int64_t Dv, float *out, int64_t ol, int64_t nr,
             const float *inv) {
    v16 acc[ROWS][PV_VECS];
    int64_t n[PV_VECS];
    for (int c = 0; c < NV; c++) {
        const int64_t left = Dv - 16 * (t + c);
        n[c] = left < 16 ? left : 16;
        for (int r = 0; r < ROWS; r++) acc[r][c] = (v16){0};
    }
    const float *vt = v + 16 * t;
    for (int64_t j = 0; j < upto; j++, vt += vl) {
        v16 vv[PV_VECS];
        for (int c = 0; c < NV; c++) {
            if (FULL) memcpy(&vv[c], vt + 16 * c, 64);
            else vv[c] = sr_load16(vt + 16 * c, n[c]);
        }
        for (int r = 0; r < ROWS; r++) {
            const float x = p[r][j];
            for (int c = 0; c < NV; c++) acc[r][c] += x * vv[c];
        }
    }
    for (int r = 0; r < ROWS; r++) {
        if (r >= nr) break;
        for (int c = 0; c < NV; c++) {
            const v16 y = acc[r][c] * inv[r];
            if (FULL) memcpy(out + r * ol + 16 * (t + c), &y, 64);
            else sr_store16(out + r * ol + 16 * (t + c), y, n[c]);
        }
    }
}

/* p: B, H, Lq, Lk, D, Dv, heads per key head (grouped-query: 1 otherwise), causal,
   then strides (in elements) of batch, head, row for q, k, v and out (their last dimension
   contiguous), and batch, head, row, column of the mask (0 where it broadcasts), and 1 if
   a boolean mask says which scores to drop (masked_fill's) rather than keep. Returns 0;
   1 if a query row is masked entirely (the caller asks PyTorch, whose kernels disagree on
   such rows); -1 without memory or for a head larger than MAX_D. */
int sr_attention(const float *q, const float *k, const float *v, const float *fmask,
                 const uint8_t *bmask, float *out, float scale, const int64_t *p) {
    const int64_t B = p[0], H = p[1], Lq = p[2], Lk = p[3], D = p[4], Dv = p[5];
    const int64_t group = p[6], causal = p[7];
    const int64_t qb = p[8], qh = p[9], ql = p[10];
    const int64_t kb = p[11], kh = p[12], kl = p[13];
    const int64_t vb = p[14], vh = p[15], vl = p[16];
    const int64_t ob = p[17], oh = p[18], ol = p[19];
    const int64_t mb = p[20], mh = p[21], mi = p[22], mj = p[23];
    const uint8_t invert = (uint8_t)p[24];
    if (D > MAX_D || Dv > MAX_D) return -1;
    const int64_t lkp = (Lk + 31) / 32 * 32;  /* keys padded to pairs of vectors */
    float *kt = malloc((size_t)(lkp * D + ROWS * lkp) * sizeof(float));
    if (!kt) return -1;
    float *s = kt + lkp * D;
    const v16 zero = {0}, ninf = zero - __builtin_inff();
    const int64_t nv = (Dv + 15) / 16;
    int status = 0;
    for (int64_t b = 0; b < B && !status; b++) {
        for (int64_t h = 0; h < H && !status; h++) {
            const float *kbh = k + b * kb + (h / group) * kh;
            const float *vbh = v + b * vb + (h / group) * vh;
            for (int64_t d = 0; d < D; d++) {
                float *row = kt + d * lkp;
                for (int64_t j = 0; j < Lk; j++) row[j] = kbh[j * kl + d];
                for (int64_t j = Lk; j < lkp; j++) row[j] = 0;
            }
            for (int64_t i0 = 0; i0 < Lq; i0 += ROWS) {
                const int64_t nr = Lq - i0 < ROWS ? Lq - i0 : ROWS;
                const float *qr[ROWS];
                int64_t last[ROWS], mrow[ROWS], upto = 0;
                for (int r = 0; r < ROWS; r++) {
                    const int64_t i = i0 + (r < nr ? r : nr - 1);  /* a tail tile repeats */
                    qr[r] = q + b * qb + h * qh + i * ql;
                    last[r] = causal ? (i < Lk ? i + 1 : Lk) : Lk;  /* keys < last */
                    mrow[r] = b * mb + h * mh + i * mi;
                    upto = last[r] > upto ? last[r] : upto;
                }
                /* scores, masked, and each row's maximum */
                v16 vmax[ROWS];
                for (int r = 0; r < ROWS; r++) vmax[r] = ninf;
                int64_t j0 = 0;
                for (; j0 + 16 * QK_VECS <= lkp; j0 += 16 * QK_VECS)
                    scores(QK_VECS, qr, kt, lkp, j0, D, scale, fmask, bmask, mrow, mj, invert,
                           last, Lk, s, vmax);
                for (; j0 < lkp; j0 += 32)  /* (lkp: whole pairs of vectors) */
                    scores(2, qr, kt, lkp, j0, D, scale, fmask, bmask, mrow, mj, invert, last,
                           Lk, s, vmax);
                /* softmax numerators in place, and each row's 1 / sum */
                float inv[ROWS];
                for (int r = 0; r < ROWS; r++) {
                    float m = vmax[r][0];
                    for (int c = 1; c < 16; c++) m = vmax[r][c] > m ? vmax[r][c] : m;
                    if (m == -__builtin_inff()) {
                        status = 1;  /* a row masked entirely */
                        break;
                    }
                    v16 vsum = zero;
                    float *sr = s + r * lkp;
                    for (int64_t j0 = 0; j0 < lkp; j0 += 16) {
                        v16 x;
                        memcpy(&x, sr + j0, 64);
                        v16 e = sr_act16_exp(x - m);
                        e = sr_act16_sel(x == ninf, zero, e);
                        memcpy(sr + j0, &e, 64);
                        vsum += e;
                    }
                    float sum = 0;
                    for (int c = 0; c < 16; c++) sum += vsum[c];
                    inv[r] = 1.0f / sum;
                }
                if (status) break;
                /* the weighted sums of value rows, PV_VECS vectors of 16 columns at a time */
                const float *pr[ROWS];
                for (int r = 0; r < ROWS; r++) pr[r] = s + r * lkp;
                float *const orow = out + b * ob + h * oh + i0 * ol;
                int64_t t = 0;
                for (; 16 * (t + PV_VECS) <= Dv; t += PV_VECS)
                    weighted_sum(PV_VECS, 1, pr, vbh, vl, upto, t, Dv, orow, ol, nr, inv);
#if PV_VECS > 2
                for (; 16 * (t + 2) <= Dv; t += 2)  /* (a head of 32: 8 sums, not 4) */
                    weighted_sum(2, 1, pr, vbh, vl, upto, t, Dv, orow, ol, nr, inv);
#endif
                for (; t < nv; t++)
                    weighted_sum(1, 0, pr, vbh, vl, upto, t, Dv, orow, ol, nr, inv);
            }
        }
    }
    free(kt);
    return status;
}
