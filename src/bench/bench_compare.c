/*
 * bench_compare.c - `molprop bench compare OURS THEIRS`: two results files
 * (molprop's and another tool's, bench/chemprop/ writes Chemprop's in the
 * same columns) aligned by dataset, model and seed.  Per dataset and model:
 * each tool's mean ± std over the seeds both ran, the difference (relative
 * for errors, where lower is better; absolute for AUCs), the paired t-test
 * over those seeds and a verdict; then wins, ties and losses.  The split
 * checksums say whether both really trained and tested on the same sets.
 */
#include "bench/bench.h"

#include "api/api.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

/* A results file, or the results.tsv of a bench --out folder. */
mp_status mp_bench_results_resolve(const char *path, char *out, size_t n)
{
    struct stat sb;
    int len = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)
                  ? snprintf(out, n, "%s/results.tsv", path) : snprintf(out, n, "%s", path);
    if (len < 0 || (size_t)len >= n)
        return mp_error_set(MP_ERR_ARG, "path too long: %s", path);
    return MP_OK;
}

static const mp_bench_row *find_row(const mp_bench_row *rows, size_t n, const char *ds,
                                    const char *model, long seed)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(rows[i].dataset, ds) && !strcmp(rows[i].model, model) && rows[i].seed == seed)
            return &rows[i];
    return NULL;
}

/* One (dataset, model) pair of both files. */
typedef struct {
    const char *dataset, *model, *metric;
    double      ours[MP_BENCH_MAX_LIST], theirs[MP_BENCH_MAX_LIST];
    int         n, mismatch;
} pair;

/* The verdict for ours: 1 win, 0 tie, -1 loss. */
int mp_bench_verdict(const char *metric, double mean_ours, double mean_theirs, double p,
                     double alpha)
{
    if (!(p < alpha) || !isfinite(mean_ours) || !isfinite(mean_theirs))
        return 0;
    int ours_better = mp_bench_higher_is_better(metric) ? mean_ours > mean_theirs
                                                         : mean_ours < mean_theirs;
    return ours_better ? 1 : -1;
}

static void format_diff(const char *metric, double mo, double mt, char *buf, size_t n)
{
    if (!isfinite(mo) || !isfinite(mt))
        snprintf(buf, n, "-");
    else if (mp_bench_higher_is_better(metric))
        snprintf(buf, n, "%+.4f", mo - mt);
    else
        snprintf(buf, n, "%+.1f%%", mt != 0 ? 100.0 * (mo - mt) / fabs(mt) : NAN);
}

mp_status mp_run_bench_compare(const mp_options *o, FILE *out, mp_summary **summary)
{
    if (summary)
        *summary = NULL;
    mp_status st = mp_run_check(o, "bench-compare");
    if (st)
        return st;
    mp_bench_compare_args a;
    memset(&a, 0, sizeof a);
    if ((st = mp_options_apply(o, &a)))
        return st;
    char pa[4096], pb[4096];
    mp_bench_row *A = NULL, *B = NULL;
    size_t na = 0, nb = 0;
    pair *pairs = NULL;
    if ((st = mp_bench_results_resolve(a.ours, pa, sizeof pa)) ||
        (st = mp_bench_results_resolve(a.theirs, pb, sizeof pb)) ||
        (st = mp_bench_rows_read(pa, 0, &A, &na, NULL)) ||
        (st = mp_bench_rows_read(pb, 0, &B, &nb, NULL)))
        goto done;
    if (!(pairs = mp_calloc(na ? na : 1, sizeof *pairs))) {
        st = mp_error_set(MP_ERR_NOMEM, "out of memory");
        goto done;
    }
    size_t np = 0;
    int mismatch = 0;
    for (size_t i = 0; i < na; i++) {   /* pairs in OURS' order */
        const mp_bench_row *r = &A[i];
        const mp_bench_row *t = find_row(B, nb, r->dataset, r->model, r->seed);
        if (!t)
            continue;
        if (strcmp(r->metric, t->metric)) {
            st = mp_error_set(MP_ERR_FORMAT, "%s/%s: metric %s in %s but %s in %s", r->dataset,
                              r->model, r->metric, pa, t->metric, pb);
            goto done;
        }
        size_t k;
        for (k = 0; k < np; k++)
            if (!strcmp(pairs[k].dataset, r->dataset) && !strcmp(pairs[k].model, r->model))
                break;
        if (k == np)
            pairs[np++] = (pair){ .dataset = r->dataset, .model = r->model, .metric = r->metric };
        pair *q = &pairs[k];
        if (q->n < MP_BENCH_MAX_LIST) {
            q->ours[q->n] = r->test;
            q->theirs[q->n] = t->test;
            q->n++;
        }
        if (strcmp(r->split_sum, t->split_sum)) {
            q->mismatch++;
            mismatch++;
        }
    }
    if (np == 0) {
        st = mp_error_set(MP_ERR_ARG, "%s and %s share no (dataset, model, seed) run", pa, pb);
        goto done;
    }
    const char *tool_a = na ? A[0].tool : "ours", *tool_b = nb ? B[0].tool : "theirs";
    int wins = 0, ties = 0, losses = 0;
    if (out) {
        fprintf(out, "| dataset | model | metric | seeds | %s | %s | difference | p | verdict |\n"
                     "|---|---|---|---|---|---|---|---|---|\n", tool_a, tool_b);
    }
    for (size_t k = 0; k < np; k++) {
        pair *q = &pairs[k];
        double mo, so, mt, sd, t, p;
        mp_bench_mean_std(q->ours, (size_t)q->n, &mo, &so, NULL);
        mp_bench_mean_std(q->theirs, (size_t)q->n, &mt, &sd, NULL);
        mp_bench_paired_t(q->ours, q->theirs, (size_t)q->n, &t, &p);
        int v = mp_bench_verdict(q->metric, mo, mt, p, a.alpha);
        wins += v > 0;
        ties += v == 0;
        losses += v < 0;
        char diff[32], pv[32];
        format_diff(q->metric, mo, mt, diff, sizeof diff);
        snprintf(pv, sizeof pv, isnan(p) ? "-" : p < 0.001 ? "<0.001" : "%.3f", p);
        if (out)
            fprintf(out, "| %s | %s | %s | %d | %.4f ± %.4f | %.4f ± %.4f | %s | %s | %s%s |\n",
                    q->dataset, q->model, q->metric, q->n, mo, so, mt, sd, diff, pv,
                    v > 0 ? "win" : v < 0 ? "loss" : "tie",
                    q->mismatch ? " (splits differ!)" : "");
    }
    if (out) {
        fprintf(out, "\n%s vs %s: %d wins, %d ties, %d losses over %zu dataset/model pairs "
                     "(paired t-test over seeds, p < %g; difference: relative for errors, "
                     "absolute for AUCs, negative error = %s better)\n", tool_a, tool_b, wins,
                ties, losses, np, a.alpha, tool_a);
        if (mismatch)
            fprintf(out, "warning: %d runs were trained on different splits (their split "
                         "checksums differ)\n", mismatch);
    }
    mp_summary *s = NULL;
    if (!(st = mp_summary_new(&s)) && !(st = mp_summary_put_number(s, "n_compared", (double)np)) &&
        !(st = mp_summary_put_number(s, "wins", wins)) &&
        !(st = mp_summary_put_number(s, "ties", ties)) &&
        !(st = mp_summary_put_number(s, "losses", losses)) &&
        !(st = mp_summary_put_number(s, "n_split_mismatch", mismatch)))
        mp_summary_hand_over(s, summary);
    else
        mp_summary_free(s);
done:
    mp_free(pairs);
    mp_bench_rows_free(A, na);
    mp_bench_rows_free(B, nb);
    return st;
}
