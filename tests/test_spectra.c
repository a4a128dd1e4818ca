/*
 * test_spectra.c - the spectral task (Chemprop v1.6.1's --dataset_type
 * spectra, v2.3.1's spectral): the sid and wasserstein losses against a
 * plain reference written here (and two values by hand), their gradients
 * by finite differences, the targets' normalization and its refusals, the
 * spectrum metrics, and a small training on synthetic spectra through the
 * CLI (the loss falls; the predicted spectra are non-negative and sum to 1;
 * bad input named by file and line).  The cuda backend's loss is checked
 * against the cpu's by the op table (gpu_ops_train_table_*), and the
 * whole training by gpu_spectral_train_matches_cpu (make test-gpu).
 */
#define _GNU_SOURCE
#include "test.h"
#include "internal.h"   /* every module header */
#include "gpu_test.h"

#include "data/spectra.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static char out[65536];

static const char *tmp(const char *name) { return mp_test_tmp("", name); }

/* 1 when file `path` holds `needle` (binary-safe: a model file's header
 * follows its magic bytes). */
static int file_has(const char *path, const char *needle)
{
    size_t n = 0;
    char *t = mp_test_slurp(path, &n);
    int ok = t && memmem(t, n, needle, strlen(needle)) != NULL;
    mp_free(t);
    return ok;
}

/* ===================================================================== */
/* The reference: Chemprop's definitions, spelled out                     */
/* ===================================================================== */

/* The batch loss of n spectra of T positions, as Chemprop v1's train loop
 * reduces sid_loss / wasserstein_loss: sum of the weighted per-position
 * terms over the labelled positions, over their number. */
static double ref_loss(int wass, int softplus, double floor, const double *y, const double *q,
                       const uint8_t *m, const double *w, const double *tw, int n, int T)
{
    double total = 0;
    int labelled = 0;
    for (int i = 0; i < n * T; i++)
        labelled += m[i] != 0;
    for (int i = 0; i < n; i++) {
        double c[64], S = 0;
        for (int j = 0; j < T; j++) {
            double x = y[i * T + j];
            double a = softplus ? log(1 + exp(x)) : exp(x);
            c[j] = a < floor ? floor : a;        /* torch.where(a < floor, floor, a) */
            S += m[i * T + j] ? c[j] : 0;        /* excluded positions set to 0 */
        }
        double cum_p = 0, cum_q = 0;
        for (int j = 0; j < T; j++) {
            if (!m[i * T + j])
                continue;
            double p = c[j] / S, t = q[i * T + j];
            double wt = (w ? w[i] : 1) * (tw ? tw[j] : 1);
            cum_p += p;
            cum_q += t;
            total += wt * (wass ? fabs(cum_q - cum_p) : p * log(p / t) + t * log(t / p));
        }
    }
    return labelled ? total / labelled : 0;
}

/* Random spectra: intensities in [0.05, 1.05), normalized over the
 * labelled positions (each row has one at least); y raw outputs in
 * [-2, 2), one of them far below the floor's log. */
static void random_batch(mp_rng *r, int n, int T, double *y, double *q, uint8_t *m)
{
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < T; j++) {
            int k = i * T + j;
            m[k] = j == i % T || mp_rng_uniform(r) < 0.75;
            q[k] = 0.05 + mp_rng_uniform(r);
            y[k] = 4 * mp_rng_uniform(r) - 2;
            s += m[k] ? q[k] : 0;
        }
        for (int j = 0; j < T; j++)
            q[i * T + j] /= s;
    }
    y[1] = -40;   /* exp(-40) < 1e-8: the floor holds it (no gradient) */
}

static mp_backend *open_backend(const char *name)
{
    mp_backend *b = NULL;
    return mp_backend_open(&b, name) == MP_OK ? b : NULL;
}

/* ===================================================================== */
/* Loss values and gradients                                              */
/* ===================================================================== */

MP_TEST(spectra_loss_values_by_hand)
{
    mp_backend *b = open_backend("ref64");
    CHECK(b);
    /* p = (1/4, 3/4) from exp(0), exp(ln 3); q = (1/2, 1/2) */
    double y[2] = { 0, log(3.0) }, q[2] = { 0.5, 0.5 }, loss[1], dy[2];
    uint8_t m[2] = { 1, 1 };
    mp_loss_spec sp = { MP_LOSS_SID, 2, 0, 0, 0, 0, NULL, NULL, NULL, MP_SPECTRA_EXP, 1e-8 };
    b->loss(b, loss, dy, y, q, m, 1, &sp);
    /* (p - q) ln(p / q) summed: 1/4 ln 2 + 1/4 ln 3/2 = ln(3) / 4, over 2 positions */
    CHECK_NEAR(loss[0], log(3.0) / 8, 1e-14, 1e-12);
    sp.kind = MP_LOSS_WASSERSTEIN;
    b->loss(b, loss, dy, y, q, m, 1, &sp);
    /* cumulative (1/4, 1) against (1/2, 1): 1/4, over 2 positions */
    CHECK_NEAR(loss[0], 0.125, 1e-14, 1e-12);
    /* a left-out position changes neither the sum nor the loss */
    double y3[3] = { 0, 5, log(3.0) }, q3[3] = { 0.5, NAN, 0.5 };
    uint8_t m3[3] = { 1, 0, 1 };
    mp_loss_spec s3 = sp;
    s3.n_tasks = 3;
    double d3[3];
    b->loss(b, loss, d3, y3, q3, m3, 1, &s3);
    CHECK_NEAR(loss[0], 0.125, 1e-14, 1e-12);
    CHECK(d3[1] == 0);
    mp_backend_close(b);
}

MP_TEST(spectra_loss_values_match_reference)
{
    static const char *const names[] = { "ref64", "ref", "cpu" };
    mp_rng r;
    mp_rng_seed(&r, 11, 0);
    enum { N = 9, T = 13 };
    double y[N * T], q[N * T], w[N], tw[T];
    uint8_t m[N * T];
    random_batch(&r, N, T, y, q, m);
    for (int i = 0; i < N; i++)
        w[i] = 0.3 + mp_rng_uniform(&r);
    for (int j = 0; j < T; j++)
        tw[j] = 0.5 + mp_rng_uniform(&r);
    for (size_t bi = 0; bi < sizeof names / sizeof names[0]; bi++) {
        mp_backend *b = open_backend(names[bi]);
        CHECK(b);
        int dbl = b->esize == sizeof(double);
        for (int kind = 0; kind < 2; kind++)
            for (int act = 0; act < 2; act++)
                for (int weighted = 0; weighted < 2; weighted++) {
                    float yf[N * T], qf[N * T], wf[N], twf[T], dyf[N * T], lf[1];
                    double dyd[N * T], ld[1];
                    for (int k = 0; k < N * T; k++) {
                        yf[k] = (float)y[k];
                        qf[k] = (float)q[k];
                    }
                    for (int i = 0; i < N; i++)
                        wf[i] = (float)w[i];
                    for (int j = 0; j < T; j++)
                        twf[j] = (float)tw[j];
                    mp_loss_spec sp = { kind ? MP_LOSS_WASSERSTEIN : MP_LOSS_SID, T, 0, 0, 0, 0,
                                        NULL, NULL, NULL, act ? MP_SPECTRA_SOFTPLUS
                                                              : MP_SPECTRA_EXP, 1e-8 };
                    if (weighted) {
                        sp.task_weight = dbl ? (const void *)tw : (const void *)twf;
                        sp.sample_weight = dbl ? (const void *)w : (const void *)wf;
                    }
                    double got;
                    if (dbl) {
                        b->loss(b, ld, dyd, y, q, m, N, &sp);
                        got = ld[0];
                    } else {
                        b->loss(b, lf, dyf, yf, qf, m, N, &sp);
                        got = lf[0];
                    }
                    double want = ref_loss(kind, act, 1e-8, y, q, m, weighted ? w : NULL,
                                           weighted ? tw : NULL, N, T);
                    double tol = dbl ? 1e-12 : 2e-5;
                    CHECK_MSG(fabs(got - want) <= tol * fabs(want) + 1e-12,
                              "%s %s %s%s: %.12g, the reference %.12g", names[bi],
                              kind ? "wasserstein" : "sid", act ? "softplus" : "exp",
                              weighted ? " weighted" : "", got, want);
                }
        mp_backend_close(b);
    }
}

MP_TEST(spectra_loss_gradients_finite_difference)
{
    mp_backend *b = open_backend("ref64");
    CHECK(b);
    mp_rng r;
    mp_rng_seed(&r, 5, 0);
    enum { N = 5, T = 7 };
    double y[N * T], q[N * T], w[N], tw[T], dy[N * T], scratch[N * T], loss[1], l2[1];
    uint8_t m[N * T];
    for (int kind = 0; kind < 2; kind++)
        for (int act = 0; act < 2; act++)
            for (int weighted = 0; weighted < 2; weighted++) {
                random_batch(&r, N, T, y, q, m);
                for (int i = 0; i < N; i++)
                    w[i] = 0.3 + mp_rng_uniform(&r);
                for (int j = 0; j < T; j++)
                    tw[j] = 0.5 + mp_rng_uniform(&r);
                mp_loss_spec sp = { kind ? MP_LOSS_WASSERSTEIN : MP_LOSS_SID, T, 0, 0, 0, 0,
                                    weighted ? tw : NULL, weighted ? w : NULL, NULL,
                                    act ? MP_SPECTRA_SOFTPLUS : MP_SPECTRA_EXP, 1e-8 };
                b->loss(b, loss, dy, y, q, m, N, &sp);
                CHECK(isfinite(loss[0]) && loss[0] > 0);
                int nonzero = 0;
                for (int k = 0; k < N * T; k++) {
                    double keep = y[k], e = 1e-6, f[2];
                    for (int s = 0; s < 2; s++) {
                        y[k] = keep + (s ? -e : e);
                        b->loss(b, l2, scratch, y, q, m, N, &sp);
                        f[s] = l2[0];
                    }
                    y[k] = keep;
                    double num = (f[0] - f[1]) / (2 * e);
                    nonzero += dy[k] != 0;
                    if (!(fabs(num - dy[k]) <= 1e-8 + 1e-5 * fabs(num)))
                        MP_FAIL("%s %s%s: d/dy[%d]: analytic %.12g, finite difference %.12g",
                                kind ? "wasserstein" : "sid", act ? "softplus" : "exp",
                                weighted ? " weighted" : "", k, dy[k], num);
                    if (!m[k] || (k == 1 && !act))
                        CHECK_MSG(dy[k] == 0, "position %d: gradient %g where none flows", k,
                                  dy[k]);
                }
                CHECK(nonzero > N);
            }
    mp_backend_close(b);
}

/* ===================================================================== */
/* Targets and metrics                                                    */
/* ===================================================================== */

MP_TEST(spectra_normalize_and_its_refusals)
{
    static const char *const names[3] = { "a", "b", "c" };
    const size_t line[2] = { 2, 3 };
    double t[6] = { 1, 3, NAN, 0, 2, 1e-12 };
    CHECK_OK(mp_spectra_normalize(t, 2, 3, 1e-8, "s.csv", line, names));
    CHECK_NEAR(t[0], 0.25, 1e-15, 0);
    CHECK_NEAR(t[1], 0.75, 1e-15, 0);
    CHECK(isnan(t[2]));
    /* 0 and 1e-12 are floored to 1e-8 before the division */
    double s = 2 + 2e-8;
    CHECK_NEAR(t[3], 1e-8 / s, 1e-22, 1e-12);
    CHECK_NEAR(t[4], 2 / s, 1e-15, 1e-12);
    CHECK_NEAR(t[5], 1e-8 / s, 1e-22, 1e-12);
    double neg[6] = { 1, 1, 1, 1, -0.5, 1 };
    CHECK(mp_spectra_normalize(neg, 2, 3, 1e-8, "s.csv", line, names) == MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "s.csv:3") && strstr(mp_error_message(), "'b'"), "%s",
              mp_error_message());
    double inf[3] = { 1, INFINITY, 1 };
    CHECK(mp_spectra_normalize(inf, 1, 3, 1e-8, "s.csv", line, names) == MP_ERR_FORMAT);
    double none[6] = { 1, 2, 3, NAN, NAN, NAN };
    CHECK(mp_spectra_normalize(none, 2, 3, 1e-8, "s.csv", line, names) == MP_ERR_FORMAT);
    CHECK_MSG(strstr(mp_error_message(), "s.csv:3") && strstr(mp_error_message(), "no value"),
              "%s", mp_error_message());
    CHECK(mp_spectra_normalize(t, 2, 3, 0, "s.csv", line, names) == MP_ERR_ARG);
}

MP_TEST(spectra_metrics_match_reference)
{
    mp_rng r;
    mp_rng_seed(&r, 3, 0);
    enum { N = 6, T = 5 };
    double p[N * T], q[N * T];
    uint8_t m[N * T];
    double y[N * T];
    random_batch(&r, N, T, y, q, m);
    for (int k = 0; k < N * T; k++) {
        p[k] = 0.01 + mp_rng_uniform(&r);   /* not normalized: the metric does it */
        if (!m[k])
            q[k] = NAN;
    }
    p[2 * T + 1] = q[2 * T + 1] = NAN;   /* a left-out position with no prediction */
    for (int kind = 0; kind < 2; kind++) {
        double want = 0;
        for (int i = 0; i < N; i++) {
            double s = 0, cp = 0, cq = 0, row = 0;
            for (int j = 0; j < T; j++)
                s += isnan(q[i * T + j]) ? 0 : p[i * T + j];
            for (int j = 0; j < T; j++) {
                if (isnan(q[i * T + j]))
                    continue;
                double a = p[i * T + j] / s, c = q[i * T + j];
                cp += a;
                cq += c;
                row += kind ? fabs(cq - cp) : a * log(a / c) + c * log(c / a);
            }
            want += row / N;
        }
        mp_metric mk = kind ? MP_METRIC_WASSERSTEIN : MP_METRIC_SID;
        double per[T], mean;
        size_t skipped = 9;
        CHECK_OK(mp_metric_tasks(mk, 0, p, q, N, T, per, NULL, &mean, &skipped));
        CHECK_NEAR(mean, want, 1e-13, 1e-12);
        CHECK_EQ_INT((int)skipped, 0);
        double sum = 0;
        for (int j = 0; j < T; j++)
            sum += per[j];
        CHECK_NEAR(sum, want, 1e-13, 1e-12);   /* every row scored: the terms add up */
    }
    mp_metric mm;
    CHECK_OK(mp_metric_parse("wasserstein", &mm));
    CHECK(mm == MP_METRIC_WASSERSTEIN && !mp_metric_higher_is_better(mm));
}

/* ===================================================================== */
/* Through the CLI                                                        */
/* ===================================================================== */

enum { SPEC_T = 10 };

/* n ESOL molecules with a synthetic spectrum each: two bumps whose places
 * follow the molecule's carbons and heteroatoms, a cell left empty now and
 * then.  extra: a line spliced in after data row `at` (NULL: none). */
static int write_spectra(const char *path, int n, const char *extra, int at)
{
    gzFile gz = gzopen(mp_test_shared("datasets/esol.csv.gz"), "rb");
    FILE *f = fopen(path, "w");
    if (!f || !gz) {
        if (f)
            fclose(f);
        if (gz)
            gzclose(gz);
        return 0;
    }
    fprintf(f, "smiles");
    for (int j = 0; j < SPEC_T; j++)
        fprintf(f, ",s%d", j);
    fprintf(f, "\n");
    char line[4096];
    int row = 0;
    gzgets(gz, line, sizeof line);   /* the header */
    while (row < n && gzgets(gz, line, sizeof line)) {
        char *comma = strchr(line, ',');
        if (!comma)
            continue;
        *comma = '\0';
        int c = 0, het = 0;
        for (const char *s = line; *s; s++) {
            c += *s == 'c' || *s == 'C';
            het += *s == 'O' || *s == 'o' || *s == 'N' || *s == 'n' || *s == 'l';
        }
        double mu1 = (c > 9 ? 9 : c) * 0.9, mu2 = (het > 4 ? 4 : het) * 2.0;
        fprintf(f, "%s", line);
        for (int j = 0; j < SPEC_T; j++) {
            double v = exp(-(j - mu1) * (j - mu1) / 3) + 0.5 * exp(-(j - mu2) * (j - mu2)) + 0.01;
            if ((row * 7 + j) % 23 == 0)
                fprintf(f, ",");
            else
                fprintf(f, ",%.6g", v);
        }
        fprintf(f, "\n");
        row++;
        if (extra && row == at)
            fprintf(f, "%s\n", extra);
    }
    gzclose(gz);
    return fclose(f) == 0 && row == n;
}

/* The losses of "epoch k/N  loss X" lines of a training's output, in order. */
static int epoch_losses(const char *text, double *loss, int cap)
{
    int n = 0;
    for (const char *s = text; n < cap && (s = strstr(s, "  loss ")); s += 7)
        loss[n++] = atof(s + 7);
    return n;
}

MP_TEST(cli_spectral_train_predict_eval)
{
    const char *data = tmp("spectra.csv"), *dir = tmp("spec-model"), *pred = tmp("spec.csv");
    CHECK(write_spectra(data, 160, NULL, 0));
    for (int loss = 0; loss < 2; loss++) {
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --task spectral --loss %s "
                                 "--epochs 25 --hidden 64 --threads 1 --seed 1 --save-dir '%s'",
                                 data, loss ? "wasserstein" : "sid", dir), 0);
        double l[64];
        int n = epoch_losses(out, l, 64);
        CHECK_EQ_INT(n, 25);
        CHECK_MSG(n == 25 && l[24] < 0.7 * l[0], "%s loss %g -> %g:\n%s",
                  loss ? "wasserstein" : "sid", l[0], n ? l[n - 1] : 0, out);
        CHECK_MSG(strstr(out, "val sid") != NULL, "the validation metric is not sid:\n%s", out);
    }
    /* the model file keeps the task and its settings */
    char path[1300];
    snprintf(path, sizeof path, "%s/model.mpm", dir);
    CHECK(file_has(path, "task_type = spectral"));
    CHECK(file_has(path, "spectra_activation = exp"));
    CHECK(file_has(path, "loss = wasserstein"));
    /* predict writes the spectrum: one column per position, non-negative, summing to 1 */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "predict --model '%s' --data '%s' --out '%s' "
                             "--quiet", path, data, pred), 0);
    char *csv = mp_test_slurp(pred, NULL);
    CHECK(csv && !strncmp(csv, "smiles,s0,s1,s2", 15));
    int rows = 0;
    for (char *s = csv ? strchr(csv, '\n') : NULL; s && s[1]; s = strchr(s + 1, '\n')) {
        char *p = strchr(s + 1, ','), *end;
        double sum = 0, lo = 1;
        int cols = 0;
        while (p && *p == ',') {
            double v = strtod(p + 1, &end);
            sum += v;
            lo = v < lo ? v : lo;
            cols++;
            p = end;
        }
        CHECK_EQ_INT(cols, SPEC_T);
        CHECK_MSG(fabs(sum - 1) < 1e-6 && lo >= 0, "row %d: sum %.9g, least %g", rows, sum, lo);
        rows++;
    }
    CHECK_EQ_INT(rows, 160);
    mp_free(csv);
    /* eval scores the spectra */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s'", path, data), 0);
    CHECK_MSG(strstr(out, "sid") && strstr(out, "wasserstein"), "%s", out);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s' --metric rmse",
                             path, data), 1);
    /* softplus trains too and is kept */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --task spectral --epochs 2 "
                             "--hidden 16 --spectra-activation softplus --spectra-target-floor "
                             "1e-6 --quiet --save-dir '%s'", data, dir), 0);
    CHECK(file_has(path, "spectra_activation = softplus"));
    CHECK(file_has(path, "spectra_floor = 9.9999999999999995e-07"));
}

MP_TEST(cli_spectral_bad_input_and_refusals)
{
    const char *data = tmp("spec-neg.csv"), *dir = tmp("spec-bad");
    /* data row 3 is file line 4; the spliced row is line 5 */
    CHECK(write_spectra(data, 30, "CCO,0.1,0.2,-0.3,0.1,0.1,0.1,0.1,0.1,0.1,0.1", 3));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --task spectral --epochs 1 "
                             "--quiet --save-dir '%s'", data, dir), 1);
    CHECK_MSG(strstr(out, "spec-neg.csv:5") && strstr(out, "column 's2'") &&
              strstr(out, "-0.3"), "%s", out);
    const char *empty = tmp("spec-empty.csv");
    CHECK(write_spectra(empty, 30, "CCO,,,,,,,,,,", 1));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --task spectral --epochs 1 "
                             "--quiet --save-dir '%s'", empty, dir), 1);
    CHECK_MSG(strstr(out, "spec-empty.csv:3") && strstr(out, "no value"), "%s", out);
    const char *good = tmp("spec-good.csv");
    CHECK(write_spectra(good, 30, NULL, 0));
    static const struct {
        const char *opts, *says;
    } refused[] = {
        { "--task spectral --spectra-phase-mask-path mask.csv", "not supported" },
        { "--task spectral --loss mse", "does not fit a spectral task" },
        { "--task spectral --metric auc", "does not fit" },
        { "--task regression --target-columns s0 --spectra-activation softplus",
          "for the spectral task" },
        { "--task regression --target-columns s0 --metric sid", "does not fit" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        int rc = mp_test_cli(out, sizeof out, "train --data '%s' %s --epochs 1 --quiet "
                             "--save-dir '%s'", good, refused[i].opts, dir);
        CHECK_MSG(rc == 1 && strstr(out, refused[i].says), "%s: exit %d: %s", refused[i].opts,
                  rc, out);
    }
    /* eval of a spectral model refuses a bad spectrum the same way */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --task spectral --epochs 1 "
                             "--hidden 16 --quiet --save-dir '%s'", good, dir), 0);
    char path[1300];
    snprintf(path, sizeof path, "%s/model.mpm", dir);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "eval --model '%s' --data '%s'", path, data), 1);
    CHECK_MSG(strstr(out, "spec-neg.csv:5"), "%s", out);
}

/* The cuda backend trains the spectral head as the cpu does (make
 * test-gpu): the same losses epoch by epoch within fp32 rounding. */
MP_TEST(gpu_spectral_train_matches_cpu)
{
    MP_NEED_GPU();
    const char *data = tmp("spec-gpu.csv"), *dir = tmp("spec-gpu");
    CHECK(write_spectra(data, 160, NULL, 0));
    double l[2][16];
    for (int g = 0; g < 2; g++) {
        for (int loss = 0; loss < 2; loss++) {
            CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --data '%s' --task spectral "
                                     "--loss %s --epochs 8 --hidden 64 --device %s "
                                     "--save-dir '%s'", data, loss ? "wasserstein" : "sid",
                                     g ? "gpu:fp32" : "cpu", dir), 0);
            CHECK_EQ_INT(epoch_losses(out, l[g] + 8 * loss, 8), 8);
        }
    }
    for (int k = 0; k < 16; k++)
        CHECK_MSG(fabs(l[0][k] - l[1][k]) <= 1e-3 * fabs(l[0][k]) + 1e-6,
                  "epoch loss %d: cpu %g, gpu %g", k, l[0][k], l[1][k]);
}
