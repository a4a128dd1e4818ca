/*
 * test_hpopt.c - hyperparameter search: the space file and its errors, the
 * proposals (reproducible, inside the space, TPE better than random on a
 * known function), and `molprop hpopt` end to end (trials file, resume,
 * extension, a cut last line, another search refused, best.ini reproducing
 * the best trial, --jobs, --keep).
 */
#include "test.h"
#include "internal.h"   /* every module header */
#include "hpopt/hpopt.h"
#include "api/api.h"     /* mp_train_shared */

#include <stdlib.h>

static const char *write_file(const char *name, const char *text)
{
    static char path[8][1024];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 1024, "%s/%s", mp_test_tmpdir(), name);
    FILE *fp = fopen(p, "w");
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
    return p;
}

MP_TEST(hpopt_space_file_reads_every_kind)
{
    const char *p = write_file("space_ok.ini",
                               "; a comment\n[space]\n"
                               "hidden = int 300 2400 100\n"
                               "depth = int 2 6\n"
                               "dropout = real 0 0.4 0.05\n"
                               "init-lr = real 1e-5 1e-3\n"
                               "max-lr = log 1e-4 1e-2\n"
                               "aggregation = choice mean sum norm\n");
    mp_hp_space s;
    CHECK_OK(mp_hp_space_read(&s, p));
    CHECK_EQ_INT(s.n, 6);
    CHECK_EQ_STR(s.dims[0].key, "hidden");
    CHECK_EQ_INT(s.dims[0].kind, MP_HP_INT);
    CHECK(s.dims[0].lo == 300 && s.dims[0].hi == 2400 && s.dims[0].step == 100);
    CHECK(s.dims[1].kind == MP_HP_INT && s.dims[1].step == 1);
    CHECK(s.dims[2].kind == MP_HP_REAL && s.dims[2].step == 0.05);
    CHECK(s.dims[3].kind == MP_HP_REAL && s.dims[3].step == 0);
    CHECK(s.dims[4].kind == MP_HP_LOG && s.dims[4].lo == 1e-4);
    CHECK_EQ_INT(s.dims[5].kind, MP_HP_CHOICE);
    CHECK_EQ_INT(s.dims[5].n_choices, 3);
    CHECK_EQ_STR(s.dims[5].choices[2], "norm");
    double v;
    char text[64];
    mp_hp_value_text(&s.dims[2], 0.15000000000000002, text, sizeof text);
    CHECK_EQ_STR(text, "0.15");
    CHECK_OK(mp_hp_value_parse(&s.dims[5], "sum", &v));
    CHECK(v == 1);
    CHECK(mp_hp_value_parse(&s.dims[0], "2500", &v) != MP_OK);
    CHECK(mp_hp_value_parse(&s.dims[5], "max", &v) != MP_OK);
    mp_hp_space_free(&s);
}

MP_TEST(hpopt_space_file_errors_name_the_line)
{
    static const struct {
        const char *body, *want;
    } bad[] = {
        { "[space]\nhidden = int 300 2400 100\nhiddn = int 1 2\n", ":3:" },
        { "[space]\nhidden = float 1 2\n", "unknown kind" },
        { "[space]\nhidden = int 40 20\n", "below" },
        { "[space]\nmax-lr = log 0 0.1\n", "LO > 0" },
        { "[space]\naggregation = choice mean median\n", "median" },
        { "[space]\naggregation = choice mean mean\n", "twice" },
        { "hidden = int 1 2\n", "not in a [space]" },
        { "[space]\ndata = choice a.csv b.csv\n", "cannot be searched" },
        { "[space]\nhidden = int 0 10\n", ":2:" },        /* train refuses hidden 0 */
        { "[space]\ndropout = real 0 0.4 x\n", "numbers" },
        { "[space]\nhidden = int 1.5 10\n", "whole" },
        { "[space]\nhidden = int 1 2\nhidden = int 3 4\n", "twice" },
        { "[space]\n", "no dimensions" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "space_bad%zu.ini", i);
        const char *p = write_file(name, bad[i].body);
        mp_hp_space s;
        mp_status st = mp_hp_space_read(&s, p);
        CHECK_MSG(st != MP_OK, "case %zu accepted", i);
        CHECK_MSG(strstr(mp_error_message(), bad[i].want) != NULL, "case %zu: '%s' lacks '%s'",
                  i, mp_error_message(), bad[i].want);
        if (i < 6)
            CHECK_MSG(strstr(mp_error_message(), name) != NULL, "case %zu: no file name in '%s'",
                      i, mp_error_message());
    }
}

/* A space of three dimensions the proposals are tested on. */
static void toy_space(mp_hp_space *s)
{
    memset(s, 0, sizeof *s);
    s->n = 4;
    s->dims[0] = (mp_hp_dim){ .key = "x", .kind = MP_HP_REAL, .lo = 0, .hi = 1 };
    s->dims[1] = (mp_hp_dim){ .key = "n", .kind = MP_HP_INT, .lo = 1, .hi = 40, .step = 1 };
    s->dims[2] = (mp_hp_dim){ .key = "lr", .kind = MP_HP_LOG, .lo = 1e-5, .hi = 1e-1 };
    s->dims[3] = (mp_hp_dim){ .key = "c", .kind = MP_HP_CHOICE, .n_choices = 3 };
    static char a[] = "a", b[] = "b", c[] = "c";
    s->dims[3].choices[0] = a;
    s->dims[3].choices[1] = b;
    s->dims[3].choices[2] = c;
}

/* The known function: best at x 0.73, n 29, lr 1e-3, choice 1. */
static double toy_loss(const double *x)
{
    double lr = log10(x[2]) + 3;
    return (x[0] - 0.73) * (x[0] - 0.73) + (x[1] - 29) * (x[1] - 29) / 400.0 + lr * lr / 16 +
           (x[3] != 1) * 0.2;
}

/* n trials of a search on the toy function: points in xs, losses in ls. */
static void toy_search(mp_hp_method m, uint64_t seed, int n, double *xs, double *ls)
{
    mp_hp_space s;
    toy_space(&s);
    mp_hp_proposer p = { m, seed, 10, 24 };
    for (int i = 0; i < n; i++) {
        mp_hp_propose(&p, &s, xs, ls, i, i, xs + 4 * i);
        ls[i] = toy_loss(xs + 4 * i);
    }
}

MP_TEST(hpopt_proposals_are_reproducible_and_inside_the_space)
{
    enum { N = 40 };
    double xa[4 * N], la[N], xb[4 * N], lb[N];
    mp_hp_space s;
    toy_space(&s);
    for (int m = 0; m < 2; m++) {
        toy_search((mp_hp_method)m, 5, N, xa, la);
        toy_search((mp_hp_method)m, 5, N, xb, lb);
        CHECK_MSG(!memcmp(xa, xb, sizeof xa), "method %d: the same seed proposed differently", m);
        toy_search((mp_hp_method)m, 6, N, xb, lb);
        CHECK_MSG(memcmp(xa, xb, sizeof xa) != 0, "method %d: another seed, the same points", m);
        for (int i = 0; i < N; i++) {
            const double *x = xa + 4 * i;
            CHECK(x[0] >= 0 && x[0] <= 1);
            CHECK(x[1] >= 1 && x[1] <= 40 && x[1] == floor(x[1]));
            CHECK(x[2] >= 1e-5 && x[2] <= 1e-1);
            CHECK(x[3] == 0 || x[3] == 1 || x[3] == 2);
        }
    }
    /* a failed trial (NaN) is ignored, not taken as a loss */
    toy_search(MP_HP_TPE, 5, 20, xa, la);
    for (int i = 0; i < 20; i += 3)
        la[i] = NAN;
    mp_hp_proposer p = { MP_HP_TPE, 5, 10, 24 };
    double y[4];
    mp_hp_propose(&p, &s, xa, la, 20, 20, y);
    CHECK(y[0] >= 0 && y[0] <= 1 && !isnan(y[0]));
}

MP_TEST(hpopt_tpe_finds_better_points_than_random_search)
{
    enum { N = 60, SEEDS = 6 };
    double x[4 * N], l[N], best[2] = { 0, 0 }, late[2] = { 0, 0 };
    for (int m = 0; m < 2; m++)
        for (uint64_t seed = 0; seed < SEEDS; seed++) {
            toy_search((mp_hp_method)m, seed, N, x, l);
            double b = INFINITY, sum = 0;
            for (int i = 0; i < N; i++) {
                b = l[i] < b ? l[i] : b;
                if (i >= N / 2)
                    sum += l[i];
            }
            best[m] += b / SEEDS;
            late[m] += sum / (N / 2) / SEEDS;
        }
    printf("    best of %d: random %.4f, tpe %.4f; mean loss of the last %d: random %.4f, "
           "tpe %.4f\n", N, best[0], best[1], N / 2, late[0], late[1]);
    /* TPE's later proposals concentrate where the loss is low */
    CHECK_MSG(late[1] < 0.6 * late[0], "tpe %.4f vs random %.4f", late[1], late[0]);
    CHECK_MSG(best[1] < best[0], "tpe %.4f vs random %.4f", best[1], best[0]);
}

/* Mean distance between the round's points (x, n and lr scaled to [0, 1],
 * the choice 0 or 1 apart). */
static double round_spread(const double *x, int n)
{
    double sum = 0;
    int pairs = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++, pairs++) {
            const double *a = x + 4 * i, *b = x + 4 * j;
            double d0 = a[0] - b[0], d1 = (a[1] - b[1]) / 39,
                   d2 = (log10(a[2]) - log10(b[2])) / 4, d3 = a[3] != b[3];
            sum += sqrt(d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3);
        }
    return pairs ? sum / pairs : 0;
}

/* A round of 8 side by side after 20 finished trials: with the constant
 * liar (mp_hp_propose_in_round) TPE's proposals spread out, where from the
 * finished trials alone they crowd the best region; its first proposal is
 * the plain one, the pending trials' losses become the worst finished
 * one, and random search is unchanged. */
MP_TEST(hpopt_tpe_round_proposals_spread_with_the_constant_liar)
{
    enum { H = 20, R = 8, SEEDS = 5 };
    mp_hp_space s;
    toy_space(&s);
    double spread[2] = { 0, 0 };
    for (uint64_t seed = 0; seed < SEEDS; seed++) {
        double xs[4 * (H + R)], ls[H + R], plain[4 * R];
        toy_search(MP_HP_TPE, seed, H, xs, ls);
        double worst = -INFINITY;
        for (int i = 0; i < H; i++)
            worst = fmax(worst, ls[i]);
        mp_hp_proposer p = { MP_HP_TPE, seed, 10, 24 };
        for (int i = 0; i < R; i++)
            mp_hp_propose(&p, &s, xs, ls, H, H + i, plain + 4 * i);
        for (int i = 0; i < R; i++)
            mp_hp_propose_in_round(&p, &s, xs, ls, H, H + i, xs + 4 * (H + i));
        CHECK(!memcmp(plain, xs + 4 * H, sizeof(double) * 4));
        for (int i = H; i < H + R - 1; i++)
            CHECK(ls[i] == worst);
        double again[4];
        mp_hp_propose_in_round(&p, &s, xs, ls, H, H + R - 1, again);
        CHECK(!memcmp(again, xs + 4 * (H + R - 1), sizeof again));
        spread[0] += round_spread(plain, R) / SEEDS;
        spread[1] += round_spread(xs + 4 * H, R) / SEEDS;
        mp_hp_proposer q = { MP_HP_RANDOM, seed, 10, 24 };
        mp_hp_propose(&q, &s, xs, ls, H, H + 3, plain);
        mp_hp_propose_in_round(&q, &s, xs, ls, H, H + 3, again);
        CHECK(!memcmp(plain, again, sizeof again));
    }
    printf("    mean distance within a round of %d: from the finished trials %.3f, with the "
           "liar %.3f\n", R, spread[0], spread[1]);
    CHECK_MSG(spread[1] > 1.2 * spread[0], "liar %.3f vs plain %.3f", spread[1], spread[0]);
}

/* ===================================================================== */
/* molprop hpopt                                                          */
/* ===================================================================== */

/* The first 150 rows of esol, so that a trial takes a second. */
static const char *small_esol(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/esol150.csv", mp_test_tmpdir());
    mp_dataset *d;
    mp_column_spec spec = { 0 };
    if (mp_dataset_load(&d, mp_test_shared("datasets/esol.csv.gz"), &spec) != MP_OK)
        return NULL;
    FILE *fp = fopen(path, "w");
    if (!fp) {
        mp_dataset_free(d);
        return NULL;
    }
    fprintf(fp, "smiles,logS\n");
    for (size_t i = 0; i < 150 && i < d->n_rows; i++)
        fprintf(fp, "%s,%.6f\n", d->smiles[i], d->targets[i * d->n_tasks]);
    fclose(fp);
    mp_dataset_free(d);
    return path;
}

static int count_lines(const char *path)
{
    char *b = mp_test_slurp(path, NULL);
    int n = 0;
    for (char *s = b; s && *s; s++)
        n += *s == '\n';
    mp_free(b);
    return n;
}

/* Each line of a trials file without its "seconds". */
static char *without_seconds(const char *path)
{
    char *b = mp_test_slurp(path, NULL);
    for (char *s = b ? strstr(b, ",\"seconds\":") : NULL; s; s = strstr(s, ",\"seconds\":")) {
        char *e = strchr(s, '}');
        if (!e)
            break;
        memmove(s, e, strlen(e) + 1);
    }
    return b;
}

MP_TEST(hpopt_cli_searches_resumes_and_writes_the_best_config)
{
    const char *data = small_esol();
    CHECK_MSG(data != NULL, "cannot make the small esol file");
    const char *space = write_file("space_small.ini", "[space]\nhidden = int 8 32 8\n"
                                                      "depth = int 2 3\n"
                                                      "dropout = real 0 0.2 0.1\n"
                                                      "aggregation = choice mean sum\n");
    char out[8192], dir[1024], trials[1100], common[3000];
    snprintf(dir, sizeof dir, "%s/hp", mp_test_tmpdir());
    snprintf(trials, sizeof trials, "%s/trials.jsonl", dir);
    snprintf(common, sizeof common, "hpopt --data '%s' --epochs 2 --batch-size 25 --threads 1 "
             "--split scaffold_balanced --space '%s' --method random --search-seed 3 --out '%s'",
             data, space, dir);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "%s --trials 2", common), 0);
    CHECK_MSG(strstr(out, "best: trial") != NULL, "%s", out);
    CHECK_MSG(strstr(out, "hpopt: trial 1/2") != NULL, "%s", out);
    CHECK_EQ_INT(count_lines(trials), 2);
    char *first = mp_test_slurp(trials, NULL);
    CHECK(first != NULL);

    /* the same command again: nothing to do, nothing changed */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "%s --trials 2", common), 0);
    CHECK_MSG(strstr(out, "hpopt: trial") == NULL, "a finished trial ran again:\n%s", out);
    char *again = mp_test_slurp(trials, NULL);
    CHECK(again && !strcmp(first, again));
    mp_free(again);

    /* more trials: the first two kept, a third appended */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "%s --trials 3", common), 0);
    CHECK_EQ_INT(count_lines(trials), 3);
    char *three = mp_test_slurp(trials, NULL);
    CHECK(three && !strncmp(three, first, strlen(first)));
    mp_free(three);
    mp_free(first);

    /* a write cut short: the partial line is dropped and the trial rerun */
    FILE *fp = fopen(trials, "a");
    CHECK(fp != NULL);
    fputs("{\"trial\":3,\"params\":{\"hid", fp);
    fclose(fp);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "%s --trials 4", common), 0);
    CHECK_EQ_INT(count_lines(trials), 4);
    char *four = mp_test_slurp(trials, NULL);
    CHECK(four && strstr(four, "\"hid\"") == NULL && strstr(four, "{\"trial\":3,") != NULL);
    mp_free(four);

    /* another search in the same directory is refused */
    CHECK(mp_test_cli(out, sizeof out, "hpopt --data '%s' --epochs 2 --batch-size 25 "
                      "--threads 1 --split scaffold_balanced --space '%s' --method tpe "
                      "--search-seed 3 --out '%s' --trials 4", data, space, dir) != 0);
    CHECK_MSG(strstr(out, "records another search") != NULL, "%s", out);
    /* an edited line is refused with its line */
    char *b = mp_test_slurp(trials, NULL);
    CHECK(b != NULL);
    char *nl = strchr(b, '\n');
    fp = fopen(trials, "w");
    fprintf(fp, "not json\n%s", nl + 1);
    fclose(fp);
    CHECK(mp_test_cli(out, sizeof out, "%s --trials 4", common) != 0);
    CHECK_MSG(strstr(out, "trials.jsonl:1:") != NULL, "%s", out);
    fp = fopen(trials, "w");
    fputs(b, fp);
    fclose(fp);
    mp_free(b);

    /* --keep best: only the best trial's model stays */
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "%s --trials 4", common), 0);
    const char *bt = strstr(out, "best: trial ");
    CHECK(bt != NULL);
    int best = atoi(bt + strlen("best: trial "));
    char path[1200];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/trials/%03d/model.mpm", dir, i);
        FILE *m = fopen(path, "rb");
        CHECK_MSG((m != NULL) == (i == best), "trial %d's model %s (best %d)", i,
                  m ? "kept" : "missing", best);
        if (m)
            fclose(m);
    }

    /* best.ini trains the best trial's model again: the same val score */
    char cfg[1200], save[1200];
    snprintf(cfg, sizeof cfg, "%s/best.ini", dir);
    snprintf(save, sizeof save, "%s/retrain", mp_test_tmpdir());
    const char *val_at = strstr(bt, "val rmse = ");
    CHECK(val_at != NULL);
    double best_val = atof(val_at + strlen("val rmse = "));
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "train --config '%s' --save-dir '%s' --quiet", cfg,
                             save), 0);
    const char *v = strstr(out, "(val ");
    CHECK_MSG(v != NULL, "%s", out);
    CHECK_NEAR(atof(v + 5), best_val, 0, 1e-5);
}

/* The data a search's trials share (api.h mp_train_shared_open): a trial
 * on them is the run it would be alone, model file byte for byte, and reads
 * nothing (featurize_seconds 0); a trial whose inputs differ (a scaffold
 * split needs scaffolds the base's random split did not featurize; another
 * file) reads its own. */
MP_TEST(hpopt_trials_share_the_data_read_once)
{
    const char *data = small_esol();
    CHECK_MSG(data != NULL, "cannot make the small esol file");
    mp_options *base;
    CHECK_OK(mp_options_create(&base, "train"));
    CHECK_OK(mp_options_set(base, "data", data));
    CHECK_OK(mp_options_set(base, "epochs", "2"));
    CHECK_OK(mp_options_set(base, "batch-size", "25"));
    CHECK_OK(mp_options_set(base, "hidden", "16"));
    CHECK_OK(mp_options_set(base, "threads", "1"));
    CHECK_OK(mp_options_set(base, "quiet", NULL));
    mp_train_shared *sh = NULL;
    CHECK_OK(mp_train_shared_open(&sh, base));
    CHECK(sh != NULL);

    const char *runs[4] = { "shared", "alone", "scaffold", "other" };
    char dir[4][1100], model[2][1200];
    mp_summary *s[4] = { NULL };
    for (int k = 0; k < 4; k++) {
        mp_options *o = NULL;
        snprintf(dir[k], sizeof dir[k], "%s/share_%s", mp_test_tmpdir(), runs[k]);
        CHECK_OK(mp_options_copy(&o, base));
        CHECK_OK(mp_options_set(o, "save-dir", dir[k]));
        CHECK_OK(mp_options_set(o, "depth", "2"));   /* as a trial's dimension would */
        if (k == 2)
            CHECK_OK(mp_options_set(o, "split", "scaffold_balanced"));
        if (k == 3)
            CHECK_OK(mp_options_set(o, "data", mp_test_shared("datasets/esol.csv.gz")));
        mp_status st = k == 1 ? mp_run_train(o, &s[k]) : mp_run_train_shared(o, sh, &s[k]);
        mp_options_free(o);
        CHECK_MSG(st == MP_OK, "%s: %s", runs[k], mp_error_message());
    }
    CHECK_EQ_INT(mp_summary_number(s[0], "featurize_seconds") == 0.0, 1);
    for (int k = 1; k < 4; k++)
        CHECK_MSG(mp_summary_number(s[k], "featurize_seconds") > 0.0, "%s read nothing",
                  runs[k]);
    CHECK_EQ_INT((int)mp_summary_number(s[0], "n_train"), (int)mp_summary_number(s[1], "n_train"));
    CHECK(mp_summary_number(s[0], "val") == mp_summary_number(s[1], "val"));
    CHECK((int)mp_summary_number(s[3], "n_train") > (int)mp_summary_number(s[0], "n_train"));
    size_t n[2];
    char *bytes[2];
    for (int k = 0; k < 2; k++) {
        snprintf(model[k], sizeof model[k], "%s/model.mpm", dir[k]);
        bytes[k] = mp_test_slurp(model[k], &n[k]);
        CHECK(bytes[k] != NULL);
    }
    CHECK_MSG(n[0] == n[1] && !memcmp(bytes[0], bytes[1], n[0]),
              "the model trained on shared data differs from the one alone");
    for (int k = 0; k < 2; k++)
        mp_free(bytes[k]);
    for (int k = 0; k < 4; k++)
        mp_summary_free(s[k]);
    mp_train_shared_free(sh);

    /* a missing file: the open names it, and shares nothing */
    CHECK_OK(mp_options_set(base, "data", "/nonexistent/x.csv"));
    CHECK(mp_train_shared_open(&sh, base) != MP_OK && sh == NULL);
    CHECK_MSG(strstr(mp_error_message(), "/nonexistent/x.csv") != NULL, "%s", mp_error_message());
    mp_options_free(base);
}

/* The line of trial i in a trials file (NULL: none). */
static const char *trial_line(const char *text, int i)
{
    char key[32];
    int n = snprintf(key, sizeof key, "{\"trial\":%d,", i);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, key, (size_t)n))
            return l;
    return NULL;
}

/* Random search with --jobs 2 runs its trials as a queue: with trial 0
 * long (1000 epochs) and trials 1 and 2 short (1 epoch), the worker that
 * finished trial 1 trains trial 2 while trial 0 still runs, so trial 2's
 * line comes before trial 0's (in rounds of two, trial 2 would wait for
 * trial 0).  A rerun has nothing left to do; --trials 4 trains trial 3. */
/* l[i]: trial i's line in text, for i < 3; 1 when each is there with
 * epochs[i] epochs. */
static int three_lines(const char *text, const char *l[3], const char *const epochs[3])
{
    char want[64];
    for (int i = 0; i < 3; i++) {
        l[i] = trial_line(text, i);
        snprintf(want, sizeof want, "\"epochs\":\"%s\"", epochs[i]);
        if (!l[i] || !strstr(l[i], want))
            return 0;
    }
    return 1;
}

MP_TEST(hpopt_cli_random_jobs_run_as_a_queue)
{
    const char *data = small_esol();
    CHECK(data != NULL);
    const char *space = write_file("space_queue.ini", "[space]\nepochs = choice 1 1000\n");
    char out[8192], dir[1024], t[1100], common[3000];
    snprintf(dir, sizeof dir, "%s/hp_queue", mp_test_tmpdir());
    snprintf(t, sizeof t, "%s/trials.jsonl", dir);
    snprintf(common, sizeof common, "hpopt --data '%s' --hidden 8 --threads 1 --space '%s' "
             "--method random --search-seed 2 --jobs 2 --out '%s' --keep none --quiet", data,
             space, dir);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "%s --trials 3", common), 0);
    char *text = mp_test_slurp(t, NULL);
    CHECK(text != NULL);
    const char *l[3];
    /* the premise, from the seed's proposals: trial 0 long, 1 and 2 short */
    CHECK_MSG(three_lines(text, l, (const char *const[3]){ "1000", "1", "1" }),
              "search seed 2 no longer proposes 1000, 1, 1 epochs (pick another):\n%s", text);
    CHECK_MSG(l[2] < l[0], "trial 2 waited for trial 0 (rounds, not a queue):\n%s", text);
    CHECK_EQ_INT(count_lines(t), 3);
    mp_free(text);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "%s --trials 3", common), 0);
    CHECK_EQ_INT(count_lines(t), 3);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "%s --trials 4", common), 0);
    CHECK_EQ_INT(count_lines(t), 4);
    text = mp_test_slurp(t, NULL);
    CHECK(text && trial_line(text, 3) != NULL);
    mp_free(text);
}

/* The queue hands out the costliest trials first: trials of 100, 1 and
 * 1000 epochs on two workers start as 2 and 0, then 1 when 0 ends, so 0's
 * line comes before 1's (in index order 1 would end first, then 2 start
 * last and run alone). */
MP_TEST(hpopt_cli_random_queue_starts_the_longest_first)
{
    const char *data = small_esol();
    CHECK(data != NULL);
    const char *space = write_file("space_lpt.ini", "[space]\nepochs = choice 1 100 1000\n");
    char out[8192], dir[1024], t[1100];
    snprintf(dir, sizeof dir, "%s/hp_lpt", mp_test_tmpdir());
    snprintf(t, sizeof t, "%s/trials.jsonl", dir);
    CHECK_EQ_INT(mp_test_cli(out, sizeof out, "hpopt --data '%s' --hidden 8 --threads 1 "
                             "--space '%s' --method random --search-seed 12 --jobs 2 "
                             "--trials 3 --out '%s' --keep none --quiet", data, space, dir), 0);
    char *text = mp_test_slurp(t, NULL);
    CHECK(text != NULL);
    const char *l[3];
    CHECK_MSG(three_lines(text, l, (const char *const[3]){ "100", "1", "1000" }),
              "search seed 12 no longer proposes 100, 1, 1000 epochs (pick another):\n%s", text);
    CHECK_MSG(l[0] < l[1] && l[1] < l[2],
              "not the longest first (trial 1 before 0, or 2 not last):\n%s", text);
    mp_free(text);
}

/* A trial that runs out of memory beside others is trained again alone
 * once they are done (on a GPU they share its memory), and filed as failed
 * only if it runs out alone too; without neighbours it fails at once.
 * Under a 4 GB address-space limit a hidden size of 20,000 (1.2 billion
 * parameters) cannot be allocated, beside others or alone: the second try
 * runs and fails, and the search goes on.  Both the queue (random) and
 * the rounds (tpe) take this path. */
MP_TEST(hpopt_cli_out_of_memory_beside_others_trained_again_alone)
{
#if defined(__SANITIZE_ADDRESS__)
    MP_SKIP("an address-space limit and AddressSanitizer's shadow memory do not mix");
#endif
    const char *data = small_esol(), *bin = getenv("MOLPROP_BIN");
    CHECK(data != NULL);
    if (!bin)
        MP_SKIP("MOLPROP_BIN is not set (run the tests through make test)");
    const char *space = write_file("space_oom.ini", "[space]\nhidden = choice 8 20000\n");
    static const char *const runs[3][2] = { { "random", "2" }, { "tpe", "2" }, { "random", "1" } };
    for (int k = 0; k < 3; k++) {
        char out[8192], dir[1024], t[1100];
        snprintf(dir, sizeof dir, "%s/hp_oom%d", mp_test_tmpdir(), k);
        snprintf(t, sizeof t, "%s/trials.jsonl", dir);
        CHECK_EQ_INT(mp_test_shell(out, sizeof out, "ulimit -v 4000000 && '%s' hpopt --data '%s' "
                                   "--epochs 2 --threads 1 --space '%s' --method %s --jobs %s "
                                   "--trials 4 --out '%s' --keep none", bin, data, space,
                                   runs[k][0], runs[k][1], dir), 0);
        char *text = mp_test_slurp(t, NULL);
        CHECK(text != NULL);
        const char *f = strstr(text, "\"status\":\"failed\"");
        int again = strstr(out, "ran out of memory beside other trials; training it again "
                                "alone") != NULL;
        CHECK_MSG(f && !strstr(f + 1, "\"status\":\"failed\"") &&
                      strstr(text, "\"hidden\":\"20000\"") && count_lines(t) == 4,
                  "%s --jobs %s: not one failed trial of hidden 20000 among 4 lines:\n%s",
                  runs[k][0], runs[k][1], text);
        CHECK_MSG(again == (runs[k][1][0] == '2'), "%s --jobs %s: %s trained again alone:\n%s",
                  runs[k][0], runs[k][1], again ? "a trial alone was" : "no trial was", out);
        mp_free(text);
    }
}

/* Trials side by side on the cpu each run on their share of the threads
 * (--jobs 2: half); one that ends hands its threads to one still running
 * (hpopt.c mp_hp_give_threads), in a round (tpe) and at the queue's end
 * (random).  Search seed 2 proposes a trial of 1 epoch and one of 60: the
 * short one's threads go to the long one, and the best trial's scores are
 * the same as with --jobs 1 (the cpu backend's sums do not depend on the
 * count). */
static mp_status hpopt_in_process(const char *data, const char *space, const char *method,
                                  const char *jobs, const char *dir, double *best_val)
{
    mp_options *hp = NULL, *base = NULL;
    mp_summary *sum = NULL;
    mp_status st;
    (void)((st = mp_options_create(&hp, "hpopt")) || (st = mp_options_create(&base, "train")) ||
           (st = mp_options_set(base, "data", data)) ||
           (st = mp_options_set(base, "hidden", "8")) ||
           (st = mp_options_set(base, "quiet", NULL)) ||
           (st = mp_options_set(hp, "space", space)) ||
           (st = mp_options_set(hp, "method", method)) ||
           (st = mp_options_set(hp, "search-seed", "2")) ||
           (st = mp_options_set(hp, "trials", "2")) ||
           (st = mp_options_set(hp, "jobs", jobs)) ||
           (st = mp_options_set(hp, "keep", "none")) ||
           (st = mp_options_set(hp, "out", dir)) || (st = mp_run_hpopt(hp, base, &sum)));
    if (!st)
        *best_val = mp_summary_number(sum, "best_val");
    mp_summary_free(sum);
    mp_options_free(base);
    mp_options_free(hp);
    return st;
}

MP_TEST(hpopt_finished_trials_give_their_threads)
{
    const char *data = small_esol();
    CHECK(data != NULL);
    const char *space = write_file("space_give.ini", "[space]\nepochs = choice 1 60\n");
    static const char *const methods[2] = { "tpe", "random" };
    for (int m = 0; m < 2; m++) {
        char dir[2][1024], t[1100];
        double val[2] = { 0, 0 };
        long given = mp_hpopt_threads_given();
        for (int k = 0; k < 2; k++) {
            snprintf(dir[k], sizeof dir[k], "%s/hp_give_%s_%d", mp_test_tmpdir(), methods[m],
                     k + 1);
            mp_status st = hpopt_in_process(data, space, methods[m], k ? "2" : "1", dir[k],
                                            &val[k]);
            CHECK_MSG(st == MP_OK, "%s --jobs %d: %s", methods[m], k + 1, mp_error_message());
            if (k == 0)
                given = mp_hpopt_threads_given();   /* --jobs 1 gives nothing */
        }
        snprintf(t, sizeof t, "%s/trials.jsonl", dir[1]);
        char *text = mp_test_slurp(t, NULL);
        CHECK(text != NULL);
        CHECK_MSG(strstr(text, "\"epochs\":\"1\"") && strstr(text, "\"epochs\":\"60\""),
                  "search seed 2 no longer proposes a trial of 1 epoch and one of 60 (%s; "
                  "pick another):\n%s", methods[m], text);
        mp_free(text);
        CHECK_MSG(mp_hpopt_threads_given() > given,
                  "%s --jobs 2: the short trial's threads went to no trial", methods[m]);
        CHECK_MSG(val[1] == val[0], "%s: best val %.17g with --jobs 2, %.17g with --jobs 1",
                  methods[m], val[1], val[0]);
    }
}

MP_TEST(hpopt_cli_jobs_give_the_same_random_trials)
{
    const char *data = small_esol();
    CHECK(data != NULL);
    const char *space = write_file("space_jobs.ini", "[space]\nhidden = int 8 24 8\n"
                                                     "dropout = real 0 0.2 0.1\n");
    char out[8192], d1[1024], d2[1024], t[1100];
    snprintf(d1, sizeof d1, "%s/hp_j1", mp_test_tmpdir());
    snprintf(d2, sizeof d2, "%s/hp_j2", mp_test_tmpdir());
    for (int j = 1; j <= 2; j++)
        CHECK_EQ_INT(mp_test_cli(out, sizeof out, "hpopt --data '%s' --epochs 2 --threads 1 "
                                 "--space '%s' --method random --trials 2 --jobs %d --out '%s' "
                                 "--keep none", data, space, j, j == 1 ? d1 : d2), 0);
    snprintf(t, sizeof t, "%s/trials.jsonl", d1);
    char *a = without_seconds(t);
    snprintf(t, sizeof t, "%s/trials.jsonl", d2);
    char *b = without_seconds(t);
    CHECK(a && b);
    /* side by side the lines may come in either order: compare each */
    char *nl = strchr(a, '\n');
    CHECK(nl != NULL);
    *nl = 0;
    CHECK_MSG(strstr(b, a) != NULL, "trial 0 differs with --jobs 2:\n%s\n%s", a, b);
    CHECK_MSG(strstr(b, nl + 1) != NULL, "trial 1 differs with --jobs 2:\n%s\n%s", nl + 1, b);
    mp_free(a);
    mp_free(b);
    snprintf(t, sizeof t, "%s/trials/000", d2);
    FILE *fp = fopen(t, "r");
    CHECK_MSG(fp == NULL, "--keep none left %s", t);
}
