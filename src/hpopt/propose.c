/*
 * propose.c - the next point of a hyperparameter search (hpopt.h): random
 * search, and the tree-structured Parzen estimator (TPE) of Bergstra,
 * Bardenet, Bengio and Kegl, "Algorithms for Hyper-Parameter Optimization"
 * (NIPS 2011), written from the paper's description:
 *
 *   The finished trials are split by their loss into the best n_good
 *   ("good", l) and the others ("bad", g), n_good = min(ceil(0.1 n), 25),
 *   at least 1.  Each dimension is modelled on its own: for numbers, l and g
 *   are Parzen estimators, one normal per observation plus a prior normal
 *   at the middle of the range with the range as its width, each truncated
 *   to the range; an observation's width is the larger of the gaps to its
 *   neighbours (the prior counted among them), clipped to [range /
 *   min(100, m + 1), range] for m observations.  Log dimensions are modelled
 *   in log space; stepped ones as the mass of each grid cell.  For choices,
 *   l and g are the counts plus one.  `candidates` points are drawn from l
 *   and the one with the highest log l(x) - log g(x) is proposed.
 *
 * Every random number comes from the trial's own stream (seed, trial), so a
 * proposal depends only on the history it is given.
 */
#include "hpopt/hpopt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== */
/* Random                                                                 */
/* ===================================================================== */

/* Grid cells of a stepped dimension: lo + k*step for k in 0..cells-1. */
static uint64_t grid_cells(const mp_hp_dim *d)
{
    return (uint64_t)floor((d->hi - d->lo) / d->step + 1e-9) + 1;
}

static double on_grid(const mp_hp_dim *d, uint64_t k)
{
    double v = d->lo + (double)k * d->step;
    if (d->kind == MP_HP_REAL)   /* 0.15, not 0.15000000000000002 */
        v = round(v / d->step) * d->step;
    return v > d->hi ? d->hi : v;
}

static double random_value(const mp_hp_dim *d, mp_rng *r)
{
    switch (d->kind) {
    case MP_HP_CHOICE:
        return (double)mp_rng_below(r, (uint64_t)d->n_choices);
    case MP_HP_INT:
        return on_grid(d, mp_rng_below(r, grid_cells(d)));
    case MP_HP_REAL:
        if (d->step > 0)
            return on_grid(d, mp_rng_below(r, grid_cells(d)));
        return d->lo + mp_rng_uniform(r) * (d->hi - d->lo);
    case MP_HP_LOG:
        return exp(log(d->lo) + mp_rng_uniform(r) * (log(d->hi) - log(d->lo)));
    }
    return d->lo;
}

/* ===================================================================== */
/* Parzen estimators                                                      */
/* ===================================================================== */

typedef struct {
    int     n;           /* components, the prior included */
    double *mu, *sigma;
    double  lo, hi;      /* truncation, in model space */
    double  q;           /* grid step in model space, 0: continuous */
} parzen;

static double cdf(double z) { return 0.5 * erfc(-z / sqrt(2.0)); }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The estimator of the m observations obs (model space) on [L, H]; mu and
 * sigma hold m + 1. */
static void parzen_make(parzen *p, const double *obs, int m, double L, double H, double q,
                        double *mu, double *sigma)
{
    double range = H - L, prior = 0.5 * (L + H);
    p->mu = mu;
    p->sigma = sigma;
    p->n = m + 1;
    p->q = q;
    p->lo = q > 0 ? L - 0.5 * q : L;
    p->hi = q > 0 ? H + 0.5 * q : H;
    for (int i = 0; i < m; i++)
        mu[i] = obs[i];
    mu[m] = prior;
    qsort(mu, (size_t)p->n, sizeof *mu, cmp_double);
    double min_s = range / (m + 1 < 100 ? m + 1 : 100);
    int prior_done = 0;
    for (int i = 0; i < p->n; i++) {
        if (!prior_done && mu[i] == prior) {   /* the prior keeps the range as width */
            sigma[i] = range;
            prior_done = 1;
            continue;
        }
        double left = i > 0 ? mu[i] - mu[i - 1] : 0, right = i + 1 < p->n ? mu[i + 1] - mu[i] : 0;
        double s = left > right ? left : right;
        sigma[i] = s < min_s ? min_s : s > range ? range : s;
    }
}

/* log of the estimator's density (continuous) or cell mass (stepped) at x. */
static double parzen_log(const parzen *p, double x)
{
    double sum = 0;
    for (int i = 0; i < p->n; i++) {
        double m = p->mu[i], s = p->sigma[i];
        double z = cdf((p->hi - m) / s) - cdf((p->lo - m) / s);
        if (!(z > 1e-300))
            continue;
        double v;
        if (p->q > 0)
            v = cdf((x + 0.5 * p->q - m) / s) - cdf((x - 0.5 * p->q - m) / s);
        else {
            double t = (x - m) / s;
            v = exp(-0.5 * t * t) / (s * sqrt(2 * M_PI));
        }
        sum += v / z;
    }
    sum /= p->n;
    return sum > 1e-300 ? log(sum) : -690.0;
}

/* A draw from the estimator, in model space (not yet on the grid). */
static double parzen_draw(const parzen *p, mp_rng *r)
{
    int i = (int)mp_rng_below(r, (uint64_t)p->n);
    for (int tries = 0; tries < 64; tries++) {
        double x = p->mu[i] + p->sigma[i] * mp_rng_normal(r);
        if (x >= p->lo && x <= p->hi)
            return x;
    }
    return p->lo + mp_rng_uniform(r) * (p->hi - p->lo);
}

/* ===================================================================== */
/* TPE                                                                    */
/* ===================================================================== */

typedef struct {
    int    i;
    double loss;
} ranked;

static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->loss != y->loss)
        return x->loss < y->loss ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);   /* ties: the earlier trial first */
}

/* Model space of a numeric dimension: log for log ones. */
static double to_model(const mp_hp_dim *d, double v) { return d->kind == MP_HP_LOG ? log(v) : v; }

static double from_model(const mp_hp_dim *d, double x)
{
    if (d->kind == MP_HP_LOG) {
        double v = exp(x);
        return v < d->lo ? d->lo : v > d->hi ? d->hi : v;
    }
    if (d->step > 0) {
        double k = round((x - d->lo) / d->step);
        double cells = (double)grid_cells(d);
        if (k < 0)
            k = 0;
        if (k > cells - 1)
            k = cells - 1;
        return on_grid(d, (uint64_t)k);
    }
    return x < d->lo ? d->lo : x > d->hi ? d->hi : x;
}

/* Dimension d of the TPE proposal: good/bad are the values of the split. */
static double tpe_value(const mp_hp_dim *d, const double *good, int n_good, const double *bad,
                        int n_bad, int candidates, mp_rng *r)
{
    if (d->kind == MP_HP_CHOICE) {
        double pl[MP_HP_MAX_CHOICES], pg[MP_HP_MAX_CHOICES], tl = 0, tg = 0;
        for (int c = 0; c < d->n_choices; c++)
            pl[c] = pg[c] = 1;
        for (int i = 0; i < n_good; i++)
            pl[(int)good[i]] += 1;
        for (int i = 0; i < n_bad; i++)
            pg[(int)bad[i]] += 1;
        for (int c = 0; c < d->n_choices; c++) {
            tl += pl[c];
            tg += pg[c];
        }
        int best = 0;
        double best_score = -INFINITY;
        for (int k = 0; k < candidates; k++) {
            double u = mp_rng_uniform(r) * tl, acc = 0;
            int c = 0;
            for (; c < d->n_choices - 1; c++)
                if ((acc += pl[c]) > u)
                    break;
            double score = log(pl[c] / tl) - log(pg[c] / tg);
            if (score > best_score) {
                best_score = score;
                best = c;
            }
        }
        return best;
    }
    double L = to_model(d, d->lo), H = to_model(d, d->hi);
    double q = d->kind == MP_HP_LOG ? 0 : d->step;
    int m = n_good > n_bad ? n_good : n_bad;
    double *buf = mp_malloc(sizeof(double) * (size_t)(6 * (m + 1)));
    if (!buf)
        return random_value(d, r);
    double *og = buf, *ob = buf + (m + 1), *mul = buf + 2 * (m + 1), *sl = buf + 3 * (m + 1),
           *mug = buf + 4 * (m + 1), *sg = buf + 5 * (m + 1);
    for (int i = 0; i < n_good; i++)
        og[i] = to_model(d, good[i]);
    for (int i = 0; i < n_bad; i++)
        ob[i] = to_model(d, bad[i]);
    parzen l, g;
    parzen_make(&l, og, n_good, L, H, q, mul, sl);
    parzen_make(&g, ob, n_bad, L, H, q, mug, sg);
    double best = from_model(d, parzen_draw(&l, r)), best_score = -INFINITY;
    for (int k = 0; k < candidates; k++) {
        double v = from_model(d, parzen_draw(&l, r)), x = to_model(d, v);
        double score = parzen_log(&l, x) - parzen_log(&g, x);
        if (score > best_score) {
            best_score = score;
            best = v;
        }
    }
    mp_free(buf);
    return best;
}

void mp_hp_propose(const mp_hp_proposer *p, const mp_hp_space *s, const double *xs,
                   const double *losses, int n_done, int trial, double *x)
{
    mp_rng r;
    mp_rng_seed(&r, p->seed, (uint64_t)trial);
    ranked *rk = n_done > 0 ? mp_malloc(sizeof(ranked) * (size_t)n_done) : NULL;
    int n_ok = 0;
    for (int i = 0; rk && i < n_done; i++)
        if (!isnan(losses[i]))
            rk[n_ok++] = (ranked){ i, losses[i] };
    int startup = p->startup > 0 ? p->startup : 1;
    if (p->method == MP_HP_RANDOM || n_ok < startup || !rk) {
        for (int k = 0; k < s->n; k++)
            x[k] = random_value(&s->dims[k], &r);
        mp_free(rk);
        return;
    }
    qsort(rk, (size_t)n_ok, sizeof *rk, cmp_ranked);
    int n_good = (int)ceil(0.1 * n_ok);
    if (n_good > 25)
        n_good = 25;
    if (n_good < 1)
        n_good = 1;
    double *good = mp_malloc(sizeof(double) * (size_t)n_ok), *bad = good ? good + n_good : NULL;
    double *col = mp_malloc(sizeof(double) * (size_t)n_ok);
    int candidates = p->candidates > 0 ? p->candidates : 24;
    for (int k = 0; k < s->n; k++) {
        if (!good || !col) {
            x[k] = random_value(&s->dims[k], &r);
            continue;
        }
        for (int i = 0; i < n_ok; i++)
            col[i] = xs[(size_t)rk[i].i * (size_t)s->n + (size_t)k];
        memcpy(good, col, sizeof(double) * (size_t)n_ok);   /* good then bad, in rank order */
        x[k] = tpe_value(&s->dims[k], good, n_good, bad, n_ok - n_good, candidates, &r);
    }
    mp_free(col);
    mp_free(good);
    mp_free(rk);
}

void mp_hp_propose_in_round(const mp_hp_proposer *p, const mp_hp_space *s, const double *xs,
                            double *losses, int r0, int trial, double *x)
{
    int n_ok = 0;
    double worst = -INFINITY;
    for (int i = 0; i < r0; i++)
        if (!isnan(losses[i])) {
            n_ok++;
            worst = losses[i] > worst ? losses[i] : worst;
        }
    int startup = p->startup > 0 ? p->startup : 1;
    if (p->method != MP_HP_TPE || n_ok < startup || trial == r0) {
        mp_hp_propose(p, s, xs, losses, r0, trial, x);
        return;
    }
    for (int i = r0; i < trial; i++)
        losses[i] = worst;
    mp_hp_propose(p, s, xs, losses, trial, trial, x);
}
