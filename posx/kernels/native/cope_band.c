/* CoPE's attention (Golovneva et al. 2024) on the CPU without gradients, fused per query.
 *
 * For query i over its n nearest keys j = i, i-1, .., i-n+1, in one pass over them:
 *   c_j = scale q_i.k_j                        content score
 *   p_j = sum of sigmoid(c_t), t = j..i        position (with gaps: sec. "Gaps" below)
 *   z_j = c_j + interp(L_i, min(p_j, top))     L_i[m] = q_i.e_m, read linearly between integers
 * then the softmax over the z_j and the weighted sum of the values, with its log-sum-exp. Eager
 * PyTorch makes a dozen passes over a [queries, keys] block for the same thing (posx/kernels/
 * cope.py); here the keys' numbers stay in two arrays of the thread's cache.
 *
 * Which keys: the caller passes `width`. A query with more keys than that takes its `width`
 * nearest ones if its position has reached `top` within them (gates are non-negative, so every
 * key further back is clamped at the top too: the caller takes those through the flash kernel and
 * merges by log-sum-exp); otherwise, and with position gaps, it takes all of its keys. `full`
 * says which: 1 where the row took every key (no far part to merge).
 *
 * Layout (made by posx/kernels/cope/native.py): keys and values last to first, so a query's
 * nearest keys are consecutive and ascending in memory; keys transposed, with 32 zero columns
 * after the last key so that whole vectors may be read past it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4))); /* unaligned loads and stores */
typedef int32_t v8i __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4iu __attribute__((vector_size(16), aligned(4)));
typedef float v4fu __attribute__((vector_size(16), aligned(4)));

enum { SPARE = 64 }; /* zero columns after the keys (kt) and slack in the per-thread buffers */

static inline v8 max8(v8 a, v8 b) {
    const v8i a_more = a > b;
    return (v8)((a_more & (v8i)a) | (~a_more & (v8i)b));
}

static inline v4f min4f(v4f a, v4f b) {
    const v4i a_less = a < b;
    return (v4f)((a_less & (v4i)a) | (~a_less & (v4i)b));
}

/* running sums of four doubles (lane l: x[0] + .. + x[l]) */
static inline v4d running_sum4(v4d x) {
    const v4d zero = {0};
    x += __builtin_shufflevector(zero, x, 0, 4, 5, 6);
    x += __builtin_shufflevector(zero, x, 0, 1, 4, 5);
    return x;
}

/* e^x within 2 ulp of expf for x in [-87, 88] (clamped there): Cody-Waite reduction and a
 * degree-6 polynomial, written so that the compiler vectorises the loops it sits in. */
static inline float exp_poly(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float k = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    const float r = x - k * 0.693359375f + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const union { int32_t i; float f; } two_k = {.i = ((int32_t)k + 127) << 23};
    return p * two_k.f;
}

/* e^x as PyTorch's CPU sigmoid computes it (SLEEF's 1-ulp expf, the same operations and fused
 * multiply-adds): round(x / ln 2) = k, r = x - k ln 2 in two parts, a degree-6 polynomial, times
 * 2^k. */
static inline float exp_sleef(float x) {
    /* beyond +-105 the result is 0 or inf either way; clamped, 2^k's halves stay in range */
    const float y = x < -105.0f ? -105.0f : (x > 105.0f ? 105.0f : x);
    const float k = __builtin_rintf(y * 1.44269504088896341f);
    float r = __builtin_fmaf(k, -0.693145751953125f, y);
    r = __builtin_fmaf(k, -1.428606765330187045e-06f, r);
    float u = 0.000198527617612853646278381f;
    u = __builtin_fmaf(u, r, 0.00139304355252534151077271f);
    u = __builtin_fmaf(u, r, 0.00833336077630519866943359f);
    u = __builtin_fmaf(u, r, 0.0416664853692054748535156f);
    u = __builtin_fmaf(u, r, 0.166666671633720397949219f);
    u = __builtin_fmaf(u, r, 0.5f);
    u = 1.0f + __builtin_fmaf(r * r, u, r);
    /* 2^k in two halves (either alone may be out of range) */
    const int32_t q = (int32_t)k, h = q >> 1;
    const union { int32_t i; float f; } a = {.i = (h + 127) << 23}, b = {.i = (q - h + 127) << 23};
    u = u * a.f * b.f;
    return x < -104.0f ? 0.0f : u;
}

/* The gate as PyTorch computes it, 1 / (1 + e^-x) with exp_sleef: positions sum dozens of gates
 * and are rounded to float32, so a gate 1 ulp away from PyTorch's moved some positions by an ulp
 * and the logits of 8-64 positions by 2-5e-6 from the paper's code and x-transformers. */
static inline float gate(float x) { return 1.0f / (1.0f + exp_sleef(-x)); }

typedef struct {
    const float *q;       /* [bh, s, d] queries */
    const float *kt;      /* [bh, d, s + SPARE] keys last to first, transposed, zeros after */
    const float *v;       /* [bh, s, d] values last to first */
    const float *weights; /* [d, weights_stride]: e_0 .. e_top, zeros after */
    const float *gaps;    /* [gap_rows, s] gap into each key, last to first; NULL: all 1 */
    float *out;           /* [bh, s, d] */
    float *lse;           /* [bh, s] */
    uint8_t *full;        /* [bh, s] */
    int64_t heads, s, width, top, gap_rows, weights_stride;
    float scale; /* 1/sqrt(d), rounded to float32 as PyTorch's scalar product rounds it */
} cope_args;

/* What the backward of a training block keeps per key (cope.py's _scores): the gate, the
 * clamped position's integer part and fraction, and the step at the integer part; n of each. */
typedef struct {
    float *gates, *frac, *steps;
    int32_t *below;
} kept;

static inline __attribute__((always_inline)) void
keep_key(const kept *k, int64_t t, float gate, int32_t m, float f, const float *S) {
    k->gates[t] = gate;
    k->below[t] = m;
    k->frac[t] = f;
    k->steps[t] = S[m];
}

/* z = c + L[M] + F S[M] over n keys (gathers, which the compiler vectorises with the pointers
 * declared apart), and with k what the backward keeps: the gates (z before), M, F and S[M]. */
static inline __attribute__((always_inline)) void
interpolate(int64_t n, const float *restrict c, const int32_t *restrict M,
            const float *restrict F, const float *restrict L, const float *restrict S,
            float *restrict z, const kept *k) {
    if (k == NULL) {
        for (int64_t t = 0; t < n; t++) z[t] = c[t] + L[M[t]] + F[t] * S[M[t]];
        return;
    }
    float *restrict gates = k->gates, *restrict frac = k->frac, *restrict steps = k->steps;
    int32_t *restrict below = k->below;
    for (int64_t t = 0; t < n; t++) {
        const int32_t m = M[t];
        const float step = S[m];
        gates[t] = z[t], below[t] = m, frac[t] = F[t], steps[t] = step;
        z[t] = c[t] + L[m] + F[t] * step;
    }
}

/* The logits z[0..n) of query row r against its n nearest keys, the nearest first; returns the
 * position reached at the n-th key (unclamped). c and z have room for n + SPARE floats; L and S
 * hold the query's logit at each integer position and the step to the next (0 at the top).
 * With `k`, what the backward needs of each key is written there too.
 *
 * Positions are sums of up to s gates, added in double and rounded to float32, as PyTorch's cumsum
 * adds and hands them over on the CPU (a float32 running sum drifts with the number of keys: at
 * 1-2k positions its error against the formula in float64 was 7-15x the PyTorch route's). Taking
 * the integer part and fraction from the double instead is more accurate at thousands of
 * positions, but at 8-64 positions it moved the logits by up to an ulp of the position times the
 * step from the paper's code and x-transformers, which round (2.6e-6 on the outputs where the
 * PyTorch route is within 1.5e-6). */
static inline __attribute__((always_inline)) double
logits(const cope_args *a, int64_t r, int64_t n, float *c, float *z, const float *L,
       const float *S, const kept *k, int64_t D) {
    const int64_t s = a->s, bh = r / s, i = r % s, own = s - 1 - i; /* its key, last to first */
    const float *q = a->q + r * D, *kt = a->kt + bh * D * (s + SPARE) + own;
    const double top = (double)a->top;
    /* the positions' integer parts and fractions, in the two arrays after c (buffers) */
    int32_t *M = (int32_t *)(c + s + SPARE);
    float *F = c + 2 * (s + SPARE);
    for (int64_t t = 0; t < n; t += 64) { /* 64 keys a step: eight independent sums */
        v8 sum[8] = {{0}};
        for (int64_t e = 0; e < D; e++) {
            const float qe = q[e], *row = kt + e * (s + SPARE) + t;
            for (int j = 0; j < 8; j++) sum[j] += qe * *(const v8u *)(row + 8 * j);
        }
        for (int j = 0; j < 8; j++) *(v8u *)(c + t + 8 * j) = sum[j] * a->scale;
    }
    const int64_t n8 = (n + 7) & ~(int64_t)7; /* whole vectors: the keys past n are finite */
    for (int64_t t = 0; t < n8; t++) z[t] = gate(c[t]);
    double reached = 0.0;
    if (a->gaps == NULL) {
        v4d carry = {0}; /* the sum so far, in every lane */
        for (int64_t t = 0; t < n; t += 8) { /* eight keys a step, as two vectors of doubles */
            const v8 g = *(const v8u *)(z + t);
            const v4d lo_own = running_sum4(
                __builtin_convertvector(__builtin_shufflevector(g, g, 0, 1, 2, 3), v4d));
            const v4d hi_own = running_sum4(
                __builtin_convertvector(__builtin_shufflevector(g, g, 4, 5, 6, 7), v4d));
            /* the step's own sums first: one addition a step waits on the one before */
            const v4d lo = lo_own + carry;
            const v4d hi = (hi_own + __builtin_shufflevector(lo_own, lo_own, 3, 3, 3, 3)) + carry;
            carry = __builtin_shufflevector(hi, hi, 3, 3, 3, 3);
            if (t + 8 >= n) reached = n - t > 4 ? hi[n - 5 - t] : lo[n - 1 - t];
            /* integer parts and fractions of the clamped positions, four at a time, from the
             * sums rounded to float32 first, as PyTorch's cumsum hands them over */
            const v4f top4 = (v4f){0} + (float)top;
            const v4f lo_p = min4f(__builtin_convertvector(lo, v4f), top4);
            const v4f hi_p = min4f(__builtin_convertvector(hi, v4f), top4);
            const v4i lo_m = __builtin_convertvector(lo_p, v4i);
            const v4i hi_m = __builtin_convertvector(hi_p, v4i);
            const v4f lo_f = lo_p - __builtin_convertvector(lo_m, v4f);
            const v4f hi_f = hi_p - __builtin_convertvector(hi_m, v4f);
            *(v4iu *)(M + t) = lo_m, *(v4iu *)(M + t + 4) = hi_m;
            *(v4fu *)(F + t) = lo_f, *(v4fu *)(F + t + 4) = hi_f;
        }
        interpolate(n, c, M, F, L, S, z, k);
        return reached;
    }
    /* Gaps: p_ij = g_ij + sum over the keys t after j of g_it * gap_t, clamped to [0, top]
     * (negative gaps can take it below 0), in PyTorch's steps: cumsum(g gap) - g gap + g, the
     * cumulative sum added in double and rounded to float32. */
    const float *gap = a->gaps + (a->gap_rows > 1 ? bh / a->heads * s : 0) + own;
    const float topf = (float)top;
    double upto = 0.0; /* gaps can be large and of both signs: a float sum drifts */
    for (int64_t t = 0; t < n; t++) {
        const float weighted = z[t] * gap[t];
        upto += weighted;
        const float p = ((float)upto - weighted) + z[t];
        reached = p;
        const float pc = p < 0.0f ? 0.0f : (p < topf ? p : topf);
        const int32_t m = (int32_t)pc;
        const float f = pc - (float)m;
        if (k != NULL) keep_key(k, t, z[t], m, f, S);
        z[t] = c[t] + L[m] + f * S[m];
    }
    return reached;
}

/* L = q E (64 positions a step, in registers) and S[m] = L[m + 1] - L[m], 0 at the top */
static inline __attribute__((always_inline)) void
tables(const cope_args *a, const float *q, float *L, float *S, int64_t D) {
    const int64_t npos = a->top + 1;
    for (int64_t m0 = 0; m0 < npos; m0 += 64) {
        v8 l[8] = {{0}};
        const int64_t width = npos - m0 < 64 ? npos - m0 : 64;
        for (int64_t e = 0; e < D; e++) {
            const float qe = q[e], *w = a->weights + e * a->weights_stride + m0;
            for (int j = 0; j < 8; j++) l[j] += qe * *(const v8u *)(w + 8 * j);
        }
        for (int j = 0; j < 8 && 8 * j < width; j++) *(v8u *)(L + m0 + 8 * j) = l[j];
    }
    for (int64_t m = 0; m + 1 < npos; m++) S[m] = L[m + 1] - L[m];
    S[npos - 1] = 0.f;
}

/* softmax of z[0..n) in place, out = its weighted sum of the n values v[0..n) (rows of D, the
 * nearest first); returns the log-sum-exp */
static inline __attribute__((always_inline)) float
softmax_values(float *z, int64_t n, const float *v, float *out, int64_t D) {
    v8 most = (v8){0} + z[0];
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) most = max8(most, *(const v8u *)(z + t));
    float mx = most[0];
    for (int l = 1; l < 8; l++) mx = most[l] > mx ? most[l] : mx;
    for (; t < n; t++) mx = z[t] > mx ? z[t] : mx;
    for (t = 0; t < n; t++) z[t] = exp_poly(z[t] - mx);
    v8 sums = {0};
    for (t = 0; t + 8 <= n; t += 8) sums += *(const v8u *)(z + t);
    float sum = ((sums[0] + sums[4]) + (sums[1] + sums[5])) + ((sums[2] + sums[6]) + (sums[3] + sums[7]));
    for (; t < n; t++) sum += z[t];
    const float inv = 1.0f / sum;
    for (t = 0; t < n; t++) z[t] *= inv;
    /* SETS sets of sums (eight registers in all), so that consecutive keys' products do not
     * wait on each other */
    enum { MAX_SETS = 4 };
    const int SETS = D <= 16 ? 4 : (D <= 32 ? 2 : 1);
    v8 o[MAX_SETS][D / 8];
    for (int j = 0; j < SETS; j++)
        for (int64_t e = 0; e < D / 8; e++) o[j][e] = (v8){0};
    for (t = 0; t + SETS <= n; t += SETS)
        for (int j = 0; j < SETS; j++)
            for (int64_t e = 0; e < D / 8; e++)
                o[j][e] += z[t + j] * *(const v8u *)(v + (t + j) * D + 8 * e);
    for (; t < n; t++)
        for (int64_t e = 0; e < D / 8; e++) o[0][e] += z[t] * *(const v8u *)(v + t * D + 8 * e);
    for (int j = 1; j < SETS; j++)
        for (int64_t e = 0; e < D / 8; e++) o[0][e] += o[j][e];
    for (int64_t e = 0; e < D / 8; e++) *(v8u *)(out + 8 * e) = o[0][e];
    return mx + logf(sum);
}

/* Evaluation: query row r over its `width` nearest keys, or all of them (module comment) */
static inline __attribute__((always_inline)) void
query(const cope_args *a, int64_t r, float *c, float *z, float *L, float *S, int64_t D) {
    const int64_t s = a->s, bh = r / s, i = r % s;
    tables(a, a->q + r * D, L, S, D);
    int64_t n = i + 1 < a->width ? i + 1 : a->width;
    const double reached = logits(a, r, n, c, z, L, S, NULL, D);
    a->full[r] = n == i + 1;
    if (!a->full[r] && !(reached >= (double)a->top)) { /* keys further back not all clamped */
        n = i + 1;
        logits(a, r, n, c, z, L, S, NULL, D);
        a->full[r] = 1;
    }
    const float *v = a->v + (bh * s + s - 1 - i) * D;
    a->lse[r] = softmax_values(z, n, v, a->out + r * D, D);
}

/* A training block: queries [i0, i1) against keys [0, i1), laid out as cope.py's explicit route
 * lays them out ([bh, bq, i1], keys last to first: query r's own key at column bq - 1 - r, the
 * future keys before it), with the probabilities and what kept holds for its backward. */
typedef struct {
    int64_t i0, i1;
    float *out, *probs; /* [bh, bq, d], [bh, bq, i1] */
    kept k;             /* each [bh, bq, i1], from the query's own key on */
} block_args;

static inline __attribute__((always_inline)) void
block_query(const cope_args *a, const block_args *b, int64_t row, float *c, float *z, float *L,
            float *S, int64_t D) {
    const int64_t bq = b->i1 - b->i0, keys = b->i1, bh = row / bq, r = row % bq;
    const int64_t i = b->i0 + r, own = bq - 1 - r, n = i + 1, at = row * keys;
    tables(a, a->q + (bh * a->s + i) * D, L, S, D);
    /* future keys: probability 0; their gates, positions and steps are left unwritten (the
     * backward starts at the query's own key) */
    for (int64_t col = 0; col < own; col++) b->probs[at + col] = 0.f;
    const kept k = {b->k.gates + at + own, b->k.frac + at + own, b->k.steps + at + own,
                    b->k.below + at + own};
    logits(a, bh * a->s + i, n, c, z, L, S, &k, D);
    const float *v = a->v + (bh * a->s + a->s - 1 - i) * D;
    softmax_values(z, n, v, b->out + row * D, D);
    for (int64_t t = 0; t < n; t++) b->probs[at + own + t] = z[t];
}

/* per thread: c, then the integer parts and fractions of logits(), z (s + SPARE floats each),
 * L (npos rounded up to 64), S (npos) */
typedef struct {
    float *c, *z, *L, *S;
} buffers;

/* one copy of each loop per common head width, where the compiler knows D */
#define ROWS(D)                                                                                \
    static void rows_##D(const cope_args *a, const block_args *blk, int64_t r0, int64_t r1,   \
                         const buffers *b) {                                                   \
        for (int64_t r = r0; r < r1; r++)                                                      \
            if (blk == NULL)                                                                   \
                query(a, r, b->c, b->z, b->L, b->S, D);                                        \
            else                                                                               \
                block_query(a, blk, r, b->c, b->z, b->L, b->S, D);                             \
    }
ROWS(16)
ROWS(32)
ROWS(64)
ROWS(128)

static void rows_any(const cope_args *a, const block_args *blk, int64_t r0, int64_t r1,
                     const buffers *b, int64_t d) {
    for (int64_t r = r0; r < r1; r++)
        if (blk == NULL)
            query(a, r, b->c, b->z, b->L, b->S, d);
        else
            block_query(a, blk, r, b->c, b->z, b->L, b->S, d);
}

/* rows [0, rows) of query() (blk NULL) or block_query(), over `threads` threads (OpenMP: the
 * process's runtime, torch's); 0, or 1 if a thread could not allocate its buffers */
static int run_rows(const cope_args *a, const block_args *blk, int64_t rows, int64_t d,
                    int64_t threads) {
    const int64_t npos = a->top + 1, stride = a->weights_stride, s = a->s, chunk = 64;
    const size_t floats = 4 * ((size_t)s + SPARE) + (size_t)stride + (size_t)npos;
    int failed = 0;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        float *mem = malloc(floats * sizeof(float));
        const buffers b = {mem, mem + 3 * (s + SPARE), mem + 4 * (s + SPARE),
                           mem + 4 * (s + SPARE) + stride};
        failed = mem == NULL;
#pragma omp for schedule(dynamic, 1)
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
            if (mem == NULL) continue;
            switch (d) {
            case 16: rows_16(a, blk, r0, r1, &b); break;
            case 32: rows_32(a, blk, r0, r1, &b); break;
            case 64: rows_64(a, blk, r0, r1, &b); break;
            case 128: rows_128(a, blk, r0, r1, &b); break;
            default: rows_any(a, blk, r0, r1, &b, d);
            }
        }
        free(mem);
    }
    return failed;
}

/* Evaluation: every query row of bh * s (see the top of this file). d must be a multiple of
 * 8. Returns 0, or 1 if a thread could not allocate its buffers. */
int cope_band(const float *q, const float *kt, const float *v, const float *weights,
              const float *gaps, float *out, float *lse, uint8_t *full, int64_t bh,
              int64_t heads, int64_t s, int64_t d, int64_t width, int64_t top, int64_t gap_rows,
              int64_t threads) {
    const int64_t stride = (top + 1 + 63) / 64 * 64;
    const cope_args a = {q, kt, v, weights, gaps, out, lse, full, heads, s, width, top, gap_rows,
                         stride, (float)(1.0 / sqrt((double)d))};
    return run_rows(&a, NULL, bh * s, d, threads);
}

/* Training: the block of queries [i0, i1) with all of their keys, and what its backward keeps
 * (block_args). Inputs as cope_band's; returns as it does. */
int cope_block(const float *q, const float *kt, const float *v, const float *weights,
               const float *gaps, float *out, float *probs, float *gates, int32_t *below,
               float *frac, float *steps, int64_t bh, int64_t heads, int64_t s, int64_t d,
               int64_t i0, int64_t i1, int64_t top, int64_t gap_rows, int64_t threads) {
    const int64_t stride = (top + 1 + 63) / 64 * 64;
    const cope_args a = {q, kt, v, weights, gaps, NULL, NULL, NULL, heads, s, s, top, gap_rows,
                         stride, (float)(1.0 / sqrt((double)d))};
    const block_args blk = {i0, i1, out, probs, {gates, frac, steps, below}};
    return run_rows(&a, &blk, bh * (i1 - i0), d, threads);
}

/* Training's backward through a block's logits (cope.py's _scores_backward), one query row per
 * step: for the gradient dz of the logits [bh, bq, keys] (keys last to first), written over dz,
 * the gradient of the content scores (before their scale),
 *   dp_t = dz_t step_t (0 where the position was clamped at 0 from below: `negatives` only),
 *   dsum_t = sum of dp_u over u >= t (with gaps: dp_t + gap_t (dsum_t - dp_t)), in double,
 *   dc_t = dsum_t g_t (1 - g_t) + dz_t,
 * and into d_int [bh, bq, cols] (zeroed here) the gradient of the integer-position logits,
 * dz_t (1 - frac_t) at below_t and dz_t frac_t at below_t + 1 (dropped past the last column,
 * where frac is 0). One pass where PyTorch takes a dozen over [bq, keys] tensors. */
int cope_block_backward(float *dz, const float *gates, const int32_t *below, const float *frac,
                        const float *steps, const float *gaps, float *d_int, int64_t bh,
                        int64_t heads, int64_t s, int64_t bq, int64_t keys, int64_t cols,
                        int64_t gap_rows, int64_t negatives, int64_t threads) {
    int failed = 0;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        /* the row's dp and suffix sums, each after 8 zeros (whole vectors from the end), and
         * four partial d_int rows of cols + 1 (the last column takes what falls past it) */
        const size_t width = (size_t)cols + 1;
        float *buf = malloc((2 * ((size_t)keys + 16) + 4 * width) * sizeof(float));
        failed = buf == NULL;
        float *dp = buf + 8, *dsum = buf + keys + 24, *part = buf + 2 * (keys + 16);
        if (buf != NULL)
            for (int l = 1; l <= 8; l++) dp[-l] = 0.f;
#pragma omp for schedule(static)
        for (int64_t row = 0; row < bh * bq; row++) {
            if (buf == NULL) continue;
            /* from the query's own key (column own) on: before it dz is 0 and so is dc */
            const int64_t own = bq - 1 - row % bq, n = keys - own, at = row * keys + own;
            float *dzr = dz + at, *di = d_int + row * cols;
            const float *g = gates + at, *fr = frac + at, *st = steps + at;
            const int32_t *m = below + at;
            const float *gap = gaps == NULL ? NULL
                                            : gaps + (gap_rows > 1 ? row / bq / heads * s : 0) +
                                                  (s - keys) + own;
            for (int64_t t = 0; t < n; t++)
                dp[t] = negatives && m[t] == 0 && fr[t] == 0.f ? 0.f : dzr[t] * st[t];
            /* suffix sums in double, eight keys a step from the last: each vector reversed,
             * its running sums, plus the sum so far */
            v4d carry = {0};
            for (int64_t t = n - 8; t > -8; t -= 8) {
                const v8 x = *(const v8u *)(dp + t);
                const v4d hi = running_sum4(__builtin_convertvector(
                                   __builtin_shufflevector(x, x, 7, 6, 5, 4), v4d)) + carry;
                const v4d lo = running_sum4(__builtin_convertvector(
                                   __builtin_shufflevector(x, x, 3, 2, 1, 0), v4d)) +
                               __builtin_shufflevector(hi, hi, 3, 3, 3, 3);
                carry = __builtin_shufflevector(lo, lo, 3, 3, 3, 3);
                const v4f hf = __builtin_convertvector(hi, v4f);
                const v4f lf = __builtin_convertvector(lo, v4f);
                *(v8u *)(dsum + t) = __builtin_shufflevector(lf, hf, 3, 2, 1, 0, 7, 6, 5, 4);
            }
            if (gap != NULL)
                for (int64_t t = 0; t < n; t++) dsum[t] = (dsum[t] - dp[t]) * gap[t] + dp[t];
            /* d_int: key t adds into partial row t % 4, so that neighbouring keys, which often
             * share an integer part, do not wait on each other's additions */
            for (size_t c = 0; c < 4 * width; c++) part[c] = 0.f;
            for (int64_t t = 0; t < n; t++) {
                const float z = dzr[t], zf = z * fr[t];
                float *p = part + (t & 3) * width + m[t];
                p[0] += z - zf;
                p[1] += zf;
            }
            for (int64_t c = 0; c < cols; c++)
                di[c] = (part[c] + part[width + c]) + (part[2 * width + c] + part[3 * width + c]);
            for (int64_t t = 0; t < n; t++) dzr[t] += dsum[t] * (1.f - g[t]) * g[t];
        }
        free(buf);
    }
    return failed;
}
