/* kernels_attention.h - fused attention on the CPU: ATTENTION, ATTENTION_STATS and
 * ATTENTION_GRAD (their layouts are in redco.h). Included by kernels_real.c, so it is
 * compiled over `real` twice (f32, f64); 16-bit nodes come through kernels_half.c's
 * widening to f32.
 *
 * Every kernel works on tiles: ATT_BQ query rows against ATT_BK keys of one (batch, head),
 * scores computed into a tile on the stack (att_scores) and never kept, so no [Tq, Tk]
 * tensor exists; a tile's products (Q K^T, dO V^T, P V, dS K, dS^T Q, P^T dO) are BLAS calls.
 * The forward pass keeps, per row, the running maximum m, the running sum l
 * of exp(s - m) and the output row rescaled as m grows (the online softmax of
 * FlashAttention-2); the output row is the accumulator, and each row's log-sum-exp goes
 * into the node's kept block (rci_kept_bytes). The stats are then no pass over the keys:
 * each row's log-sum-exp as kept and delta = dO . o of the unrounded output (for a 16-bit
 * node the f32 output it keeps). The backward recomputes each
 * probability from the row's log-sum-exp: p = exp(s - lse), dP = dO . v_j,
 * dS = p (dP - delta), then dq = scale dS k, dk = scale dS^T q,
 * dv = p^T dO, dbias = dS summed over the bias's broadcast axes.
 *
 * Attention dropout (fparam[1] = p > 0) multiplies each probability by its factor z, 0 or
 * 1 / (1 - p), drawn as k_dropout draws element ((b H + h) Tq + i) Tk + j of the [B, H,
 * Tq, Tk] probabilities (att_keep): the forward sums the row's softmax from the undropped
 * probabilities and multiplies V by Z = z p; the backward takes dv = Z^T dO,
 * dP = z (dO . v_j) and dS = p (dP - delta), delta = dO . o = sum_j Z_j (dO . v_j). Without
 * dropout no pass draws anything.
 *
 * Threads (par_range) take whole units that write disjoint rows of the output: the forward
 * and dq take (batch, head, query tile), the stats rows; dk and dv take (batch, key/value head,
 * key tile) and loop over the query heads of its group and every query tile; dbias takes
 * the bias's own rows (its non-broadcast axes among batch, head, query) and loops over the
 * broadcast ones. The packed gradient (iparam[1] 4, what rc_backward builds) takes (batch,
 * key/value head) and makes dq, dk and dv in one pass: 5 tile products for the whole
 * backward (S, dP, dv, dk, dq) instead of 3 + 3 + 2 with a node each. */

/* query rows and keys of a tile: a tile of scores and one of dP on a kernel's stack, 32 KB
 * each in f64 */
enum { ATT_BQ = 64, ATT_BK = 64 };

typedef struct {
    const rc_tensor *node;
    const real *q, *k, *v, *bias;
    const real *dout;            /* GRAD: the upstream gradient [B, H, Tq, Dv] */
    const real *stats;           /* GRAD: [B, H, Tq, 2] (lse, delta) */
    real *out;
    int64_t B, H, KV, G, Tq, Tk, D, Dv;
    int64_t bst[4];              /* the bias's strides along [B, H, Tq, Tk] (0: broadcast) */
    real scale;
    int causal;
    double drop;                 /* the dropout probability (0: none) */
    real keep;                   /* a kept probability's factor 1 / (1 - drop) */
    uint64_t key;                /* the node's key mixed with the run key, as k_dropout's */
    uint64_t thresh;             /* ceil(drop 2^32) (rci_drop_thresh) */
    real *lse;                   /* ATTENTION: [B, H, Tq], in its kept block */
} att_ctx;

/* the dropout factor of probability (row, j), row = (b H + h) Tq + i: keep or 0, as
 * k_dropout keeps the flat element row Tk + j (c->drop > 0) */
static real att_keep(const att_ctx *c, int64_t row, int64_t j)
{
    return rci_drop_kept(c->key, (uint64_t)(row * c->Tk + j), c->thresh) ? c->keep : 0;
}

/* sr[jj] *= the dropout factor of probability (row, j0 + jj), jj < nj: att_keep's in a
 * loop of its own, with the key and threshold in locals, so that it vectorizes */
static void att_drop_row(const att_ctx *c, int64_t row, int64_t j0, int64_t nj, real *restrict sr)
{
    uint64_t key = c->key, thresh = c->thresh, first = (uint64_t)(row * c->Tk + j0);
    real keep = c->keep;
    for (int64_t jj = 0; jj < nj; jj++)
        sr[jj] *= rci_drop_kept(key, first + (uint64_t)jj, thresh) ? keep : 0;
}

static int64_t att_visible(const att_ctx *c, int64_t i)
{
    if (!c->causal)
        return c->Tk;
    int64_t n = i + (c->Tk - c->Tq) + 1; /* keys j <= i + Tk - Tq */
    return n < 0 ? 0 : n > c->Tk ? c->Tk : n;
}

/* s[r * ATT_BK + jj] = q_i . k_j * scale + bias for rows i = i0 + r (r < ni) and keys
 * j = j0 + jj (jj < nj) of batch b, query head h; -INFINITY where the causal mask hides the
 * key. One product of the query tile by the key tile. */
static void att_scores(const att_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t ni, int64_t j0,
                       int64_t nj, real *s)
{
    int64_t D = c->D;
    const real *qb = c->q + (b * c->H + h) * c->Tq * D;
    const real *kb = c->k + (b * c->KV + h / c->G) * c->Tk * D;
    blas_gemm(0, 1, ni, nj, D, c->scale, qb + i0 * D, D, kb + j0 * D, D, 0, s, ATT_BK);
    for (int64_t r = 0; r < ni; r++) {
        int64_t i = i0 + r, vis = att_visible(c, i);
        real *restrict sr = s + r * ATT_BK;
        const real *br = c->bias ? c->bias + b * c->bst[0] + h * c->bst[1] + i * c->bst[2] : NULL;
        int64_t st = c->bst[3];
        for (int64_t jj = 0; br && jj < nj && j0 + jj < vis; jj++)
            sr[jj] += br[(j0 + jj) * st];
        for (int64_t jj = vis - j0 < 0 ? 0 : vis - j0; jj < nj; jj++)
            sr[jj] = -INFINITY;
    }
}

static real att_dot(const real *restrict a, const real *restrict b, int64_t n)
{
    real acc = 0;
    for (int64_t d = 0; d < n; d++)
        acc += a[d] * b[d];
    return acc;
}

/* dp[r * ATT_BK + jj] = dO_i . v_j for the same tile (dout, v of batch b, query head h) */
static void att_dp(const att_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t ni, int64_t j0, int64_t nj, real *dp)
{
    int64_t Dv = c->Dv;
    const real *dob = c->dout + (b * c->H + h) * c->Tq * Dv;
    const real *vb = c->v + (b * c->KV + h / c->G) * c->Tk * Dv;
    blas_gemm(0, 1, ni, nj, Dv, 1, dob + i0 * Dv, Dv, vb + j0 * Dv, Dv, 0, dp, ATT_BK);
}

/* p = exp(s - lse) in place over the tile, and with dp: dp = p (dp - delta) * scale (dS
 * scaled, the factor both dq and dk take); stats rows from row0, keys from j0. With
 * dropout: s = z p (what multiplies dO into dv) and dp = p (z dp - delta) * scale. */
static void att_probs(const att_ctx *c, int64_t row0, int64_t ni, int64_t j0, int64_t nj, real *s, real *dp)
{
    for (int64_t r = 0; r < ni; r++) {
        real lse = c->stats[(row0 + r) * 2], delta = c->stats[(row0 + r) * 2 + 1];
        real *restrict sr = s + r * ATT_BK;
        if (lse == -INFINITY) /* a row that sees no key */
            lse = 0;
        for (int64_t jj = 0; jj < nj; jj++)
            sr[jj] = rci_fexp(sr[jj] - lse); /* exp(-inf) = 0 (rci_fexp_f32 too) */
        if (c->drop > 0) {
            real z[ATT_BK];
            for (int64_t jj = 0; jj < nj; jj++)
                z[jj] = 1;
            att_drop_row(c, row0 + r, j0, nj, z);
            real *restrict dr = dp ? dp + r * ATT_BK : NULL;
            for (int64_t jj = 0; dr && jj < nj; jj++)
                dr[jj] = sr[jj] * (z[jj] * dr[jj] - delta) * c->scale;
            for (int64_t jj = 0; jj < nj; jj++)
                sr[jj] *= z[jj];
            continue;
        }
        if (!dp)
            continue;
        real *restrict dr = dp + r * ATT_BK;
        for (int64_t jj = 0; jj < nj; jj++)
            dr[jj] = sr[jj] * (dr[jj] - delta) * c->scale;
    }
}

/* The online softmax over rows [i0, i0 + ni) of (b, h): the output rows and each row's
 * log-sum-exp (-INFINITY for a row that sees no key, whose output is zeros). Per key tile:
 * S = Q K^T (one product), the rows' maxima and sums updated, then O = O * corr + P V (one
 * product). */
static void att_rows(const att_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t ni, real *out, real *lse)
{
    real s[ATT_BQ * ATT_BK], m[ATT_BQ], l[ATT_BQ];
    int64_t Dv = c->Dv, jend = att_visible(c, i0 + ni - 1); /* the last row sees the most */
    int64_t row0 = (b * c->H + h) * c->Tq + i0;
    const real *vb = c->v + (b * c->KV + h / c->G) * c->Tk * Dv;
    for (int64_t r = 0; r < ni; r++) {
        m[r] = -INFINITY;
        l[r] = 0;
        for (int64_t d = 0; d < Dv; d++)
            out[r * Dv + d] = 0;
    }
    for (int64_t j0 = 0; j0 < jend; j0 += ATT_BK) {
        int64_t nj = min64(ATT_BK, jend - j0);
        att_scores(c, b, h, i0, ni, j0, nj, s);
        for (int64_t r = 0; r < ni; r++) {
            real *restrict sr = s + r * ATT_BK;
            real mx = m[r];
            for (int64_t jj = 0; jj < nj; jj++)
                mx = sr[jj] > mx ? sr[jj] : mx;
            if (mx == -INFINITY) { /* nothing visible yet: zero weights for the product */
                for (int64_t jj = 0; jj < nj; jj++)
                    sr[jj] = 0;
                continue;
            }
            real corr = rci_fexp(m[r] - mx); /* 0 for the first visible tile */
            for (int64_t jj = 0; jj < nj; jj++)
                sr[jj] = rci_fexp(sr[jj] - mx);
            l[r] = l[r] * corr + (real)dsum(sr, nj);
            m[r] = mx;
            if (c->drop > 0) /* l sums the softmax; V takes z p */
                att_drop_row(c, row0 + r, j0, nj, sr);
            for (int64_t d = 0; corr != 1 && d < Dv; d++)
                out[r * Dv + d] *= corr;
        }
        blas_gemm(0, 0, ni, Dv, nj, 1, s, ATT_BK, vb + j0 * Dv, Dv, 1, out, Dv);
    }
    for (int64_t r = 0; r < ni; r++) {
        real inv = l[r] > 0 ? 1 / l[r] : 0;
        for (int64_t d = 0; d < Dv; d++)
            out[r * Dv + d] *= inv;
        lse[r] = l[r] > 0 ? m[r] + log(l[r]) : -INFINITY;
    }
}

/* units (b, h, query tile) [u0, u1) of the forward: the output and the log-sum-exps */
static void att_query_range(void *ctx, int64_t u0, int64_t u1, int part)
{
    const att_ctx *c = ctx;
    int64_t nt = (c->Tq + ATT_BQ - 1) / ATT_BQ, Dv = c->Dv;
    (void)part;
    for (int64_t u = u0; u < u1; u++) {
        int64_t bh = u / nt, i0 = u % nt * ATT_BQ, ni = min64(ATT_BQ, c->Tq - i0);
        int64_t b = bh / c->H, h = bh % c->H, row0 = bh * c->Tq + i0;
        att_rows(c, b, h, i0, ni, c->out + row0 * Dv, c->lse + row0);
    }
}

/* ATTENTION_STATS: rows [r0, r1) of [B H Tq, 2], each row's log-sum-exp as the forward kept
 * it and delta = dO . o, o the unrounded output (an f32 or f64 node's values; for a 16-bit
 * one the f32 output it keeps, which kernels_half.c hands this kernel as src0) */
typedef struct {
    const real *o, *dout, *lse;
    real *out;
    int64_t Dv;
} att_stats_ctx;

static void att_stats_range(void *ctx, int64_t r0, int64_t r1, int part)
{
    const att_stats_ctx *c = ctx;
    (void)part;
    for (int64_t r = r0; r < r1; r++) {
        const real *restrict d = c->dout + r * c->Dv, *restrict o = c->o + r * c->Dv;
        double delta = 0; /* summed in f64, as dsum sums the forward's rows */
        for (int64_t i = 0; i < c->Dv; i++)
            delta += (double)d[i] * (double)o[i];
        c->out[r * 2] = c->lse[r];
        c->out[r * 2 + 1] = (real)delta;
    }
}

static int k_attention_stats(const rci_cpu_args *io)
{
    const rc_tensor *att = io->node->src[0];
    att_stats_ctx c = {io->in[0], io->in[1], (const real *)((const char *)io->kept + rci_attention_lse_at(att)),
                       io->out, att->shape[3]};
    int64_t rows = rc_tensor_numel(io->node) / 2;
    par_range(att_stats_range, &c, rows, rows * (c.Dv + 1));
    return 0;
}

/* units (b, h, query tile) [u0, u1) of dq = scale dS K: per key tile S, dP = dO V^T, dS,
 * then dq += dS K (three products) */
static void att_dq_range(void *ctx, int64_t u0, int64_t u1, int part)
{
    const att_ctx *c = ctx;
    int64_t nt = (c->Tq + ATT_BQ - 1) / ATT_BQ, D = c->D;
    real s[ATT_BQ * ATT_BK], dp[ATT_BQ * ATT_BK];
    (void)part;
    for (int64_t u = u0; u < u1; u++) {
        int64_t bh = u / nt, i0 = u % nt * ATT_BQ, ni = min64(ATT_BQ, c->Tq - i0);
        int64_t b = bh / c->H, h = bh % c->H, row0 = bh * c->Tq + i0;
        int64_t jend = att_visible(c, i0 + ni - 1);
        const real *kb = c->k + (b * c->KV + h / c->G) * c->Tk * D;
        real *dq = c->out + row0 * D;
        for (int64_t x = 0; x < ni * D; x++)
            dq[x] = 0;
        for (int64_t j0 = 0; j0 < jend; j0 += ATT_BK) {
            int64_t nj = min64(ATT_BK, jend - j0);
            att_scores(c, b, h, i0, ni, j0, nj, s);
            att_dp(c, b, h, i0, ni, j0, nj, dp);
            att_probs(c, row0, ni, j0, nj, s, dp);
            blas_gemm(0, 0, ni, D, nj, 1, dp, ATT_BK, kb + j0 * D, D, 1, dq, D);
        }
    }
}

/* units (b, kv head, key tile) [u0, u1) of dk = scale dS^T Q (which 1) or dv = P^T dO
 * (which 2), summed over the query heads of the group and every query tile that sees a key
 * of the tile */
static void att_dkv_range(void *ctx, int64_t u0, int64_t u1, int part)
{
    const att_ctx *c = ctx;
    int which = c->node->iparam[1];
    int64_t nt = (c->Tk + ATT_BK - 1) / ATT_BK, D = c->D, Dv = c->Dv, w = which == 1 ? D : Dv;
    int64_t qt = (c->Tq + ATT_BQ - 1) / ATT_BQ;
    real s[ATT_BQ * ATT_BK], dp[ATT_BQ * ATT_BK];
    (void)part;
    for (int64_t u = u0; u < u1; u++) {
        int64_t bk = u / nt, j0 = u % nt * ATT_BK, nj = min64(ATT_BK, c->Tk - j0);
        int64_t b = bk / c->KV, kvh = bk % c->KV, key0 = bk * c->Tk + j0;
        real *o = c->out + key0 * w;
        for (int64_t x = 0; x < nj * w; x++)
            o[x] = 0;
        for (int64_t h = kvh * c->G; h < (kvh + 1) * c->G; h++)
            for (int64_t t = 0; t < qt; t++) {
                int64_t i0 = t * ATT_BQ, ni = min64(ATT_BQ, c->Tq - i0), row0 = (b * c->H + h) * c->Tq + i0;
                if (att_visible(c, i0 + ni - 1) <= j0)
                    continue; /* no row of the tile sees these keys */
                att_scores(c, b, h, i0, ni, j0, nj, s);
                if (which == 2) {
                    att_probs(c, row0, ni, j0, nj, s, NULL);
                    blas_gemm(1, 0, nj, Dv, ni, 1, s, ATT_BK, c->dout + row0 * Dv, Dv, 1, o, Dv);
                    continue;
                }
                att_dp(c, b, h, i0, ni, j0, nj, dp);
                att_probs(c, row0, ni, j0, nj, s, dp);
                blas_gemm(1, 0, nj, D, ni, 1, dp, ATT_BK, c->q + row0 * D, D, 1, o, D);
            }
    }
}

/* units (b, kv head) [u0, u1) of the packed gradient (iparam[1] 4): dq, dk, dv in one pass,
 * the first half of FlashAttention-2's backward. Per key tile, for each query head of the
 * group and each query tile that sees a key of it: S and dP = dO V^T (two products), P and
 * dS from them once, then dv += P^T dO, dk += dS^T Q and dq += dS K (three products). A unit
 * owns its group's dq rows as well as its dk, dv rows, so no two threads write one row and
 * the sums run in a fixed order. */
static void att_dqkv_range(void *ctx, int64_t u0, int64_t u1, int part)
{
    const att_ctx *c = ctx;
    int64_t D = c->D, Dv = c->Dv, qt = (c->Tq + ATT_BQ - 1) / ATT_BQ;
    real *dq = c->out, *dk = dq + c->B * c->H * c->Tq * D, *dv = dk + c->B * c->KV * c->Tk * D;
    real s[ATT_BQ * ATT_BK], dp[ATT_BQ * ATT_BK];
    (void)part;
    for (int64_t u = u0; u < u1; u++) {
        int64_t b = u / c->KV, kvh = u % c->KV, key0 = u * c->Tk;
        const real *kb = c->k + key0 * D;
        real *dqg = dq + (b * c->H + kvh * c->G) * c->Tq * D;
        for (int64_t x = 0; x < c->G * c->Tq * D; x++)
            dqg[x] = 0;
        for (int64_t x = 0; x < c->Tk * D; x++)
            dk[key0 * D + x] = 0;
        for (int64_t x = 0; x < c->Tk * Dv; x++)
            dv[key0 * Dv + x] = 0;
        for (int64_t j0 = 0; j0 < c->Tk; j0 += ATT_BK) {
            int64_t nj = min64(ATT_BK, c->Tk - j0);
            for (int64_t h = kvh * c->G; h < (kvh + 1) * c->G; h++)
                for (int64_t t = 0; t < qt; t++) {
                    int64_t i0 = t * ATT_BQ, ni = min64(ATT_BQ, c->Tq - i0), row0 = (b * c->H + h) * c->Tq + i0;
                    if (att_visible(c, i0 + ni - 1) <= j0)
                        continue; /* no row of the tile sees these keys */
                    att_scores(c, b, h, i0, ni, j0, nj, s);
                    att_dp(c, b, h, i0, ni, j0, nj, dp);
                    att_probs(c, row0, ni, j0, nj, s, dp);
                    blas_gemm(1, 0, nj, Dv, ni, 1, s, ATT_BK, c->dout + row0 * Dv, Dv, 1, dv + (key0 + j0) * Dv, Dv);
                    blas_gemm(1, 0, nj, D, ni, 1, dp, ATT_BK, c->q + row0 * D, D, 1, dk + (key0 + j0) * D, D);
                    blas_gemm(0, 0, ni, D, nj, 1, dp, ATT_BK, kb + j0 * D, D, 1, dq + row0 * D, D);
                }
        }
    }
}

/* units [u0, u1): rows of the bias gradient (its non-broadcast axes among batch, head and
 * query), each the sum of dS over the broadcast ones */
static void att_dbias_range(void *ctx, int64_t u0, int64_t u1, int part)
{
    const att_ctx *c = ctx;
    const int64_t *st = c->bst;
    int64_t eh = st[1] ? c->H : 1, ei = st[2] ? c->Tq : 1, Dv = c->Dv, nk = st[3] ? c->Tk : 1;
    real s[ATT_BK];
    (void)part;
    for (int64_t u = u0; u < u1; u++) {
        int64_t ub = u / (eh * ei), uh = u / ei % eh, ui = u % ei;
        real *o = c->out + ub * st[0] + uh * st[1] + ui * st[2];
        for (int64_t j = 0; j < nk; j++)
            o[j * st[3]] = 0;
        for (int64_t b = st[0] ? ub : 0; b < (st[0] ? ub + 1 : c->B); b++)
            for (int64_t h = st[1] ? uh : 0; h < (st[1] ? uh + 1 : c->H); h++)
                for (int64_t i = st[2] ? ui : 0; i < (st[2] ? ui + 1 : c->Tq); i++) {
                    int64_t row = (b * c->H + h) * c->Tq + i, kv0 = (b * c->KV + h / c->G) * c->Tk;
                    real lse = c->stats[row * 2], delta = c->stats[row * 2 + 1];
                    if (lse == -INFINITY)
                        continue;
                    int64_t vis = att_visible(c, i);
                    for (int64_t j0 = 0; j0 < vis; j0 += ATT_BK) {
                        int64_t nj = min64(ATT_BK, vis - j0);
                        att_scores(c, b, h, i, 1, j0, nj, s);
                        for (int64_t jj = 0; jj < nj; jj++) {
                            real p = rci_fexp(s[jj] - lse);
                            if (p == 0)
                                continue;
                            real dp = att_dot(c->dout + row * Dv, c->v + (kv0 + j0 + jj) * Dv, Dv);
                            if (c->drop > 0)
                                dp *= att_keep(c, row, j0 + jj);
                            o[(j0 + jj) * st[3]] += p * (dp - delta);
                        }
                    }
                }
    }
}

static int k_attention(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node, *q = node->src[0], *k = node->src[1], *v = node->src[2];
    att_ctx c = {node, io->in[0], io->in[1], io->in[2], node->src[3] ? io->in[3] : NULL,
                 NULL, NULL, io->out, q->shape[0], q->shape[1], k->shape[1], q->shape[1] / k->shape[1],
                 q->shape[2], k->shape[2], q->shape[3], v->shape[3], {0}, (real)node->fparam[0],
                 node->iparam[0] != 0, 0, 0, 0, 0, NULL};
    if (node->src[3]) {
        int64_t full[4] = {c.B, c.H, c.Tq, c.Tk};
        rci_bcast_strides(node->src[3], 4, full, c.bst);
    }
    c.drop = node->fparam[1];
    if (c.drop > 0) { /* k_dropout's key: the node's, mixed with the plan's run key */
        c.keep = (real)(1 / (1 - c.drop));
        c.key = rci_node_key(node, 2);
        c.key ^= rci_hash64(io->run_key);
        c.thresh = rci_drop_thresh(c.drop);
    }
    int64_t work = c.B * c.H * c.Tq * c.Tk * (c.D + c.Dv);
    int64_t qunits = c.B * c.H * ((c.Tq + ATT_BQ - 1) / ATT_BQ);
    if (node->op == RC_OP_ATTENTION) {
        c.lse = (real *)((char *)io->kept + rci_attention_lse_at(node));
        par_range(att_query_range, &c, qunits, work);
        return 0;
    }
    c.dout = io->in[4];
    c.stats = io->in[5];
    switch (node->iparam[1]) {
    case 0:
        par_range(att_dq_range, &c, qunits, work);
        break;
    case 1:
    case 2:
        par_range(att_dkv_range, &c, c.B * c.KV * ((c.Tk + ATT_BK - 1) / ATT_BK), work);
        break;
    case 4:
        par_range(att_dqkv_range, &c, c.B * c.KV, work);
        break;
    default: {
        const int64_t *st = c.bst;
        par_range(att_dbias_range, &c, (st[0] ? c.B : 1) * (st[1] ? c.H : 1) * (st[2] ? c.Tq : 1), work);
        break;
    }
    }
    return 0;
}
