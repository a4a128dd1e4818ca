/*
 * normalize.cpp - descriptastorus' RDKit2DNormalized (Chemprop v1's
 * rdkit_2d_normalized): every raw descriptor through the cumulative
 * distribution function of a distribution fitted to a large set of
 * molecules, y = clip(F(clip(x, min, max)), 0, 1).
 *
 * The table (family, parameters, min, max per descriptor) is descriptastorus'
 * fit, a fact: data/rdkit2d_normalization.tsv, embedded into the library at
 * build time (norm_table.c) and parsed once.  Parameters follow scipy.stats:
 * shape parameters, then loc and scale; F(x) = F0((x - loc) / scale), 0 at
 * and below the support, 1 at and above it, NaN for NaN or parameters scipy
 * rejects.  Each F0 is scipy 1.10's formula for that family, evaluated with
 * Boost.Math's special functions and distributions (incomplete gamma and
 * beta, the normal integral, the noncentral t, F and chi-squared, numerical
 * quadrature for gausshyper, whose CDF has no closed form); tukeylambda, whose
 * CDF is the inverse of its quantile function, by bisection.
 */
#include "featurize/desc2d.h"

#include <boost/math/distributions/non_central_chi_squared.hpp>
#include <boost/math/distributions/non_central_f.hpp>
#include <boost/math/distributions/non_central_t.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <boost/math/distributions/beta.hpp>
#include <boost/math/quadrature/tanh_sinh.hpp>
#include <boost/math/special_functions/beta.hpp>
#include <boost/math/special_functions/erf.hpp>
#include <boost/math/special_functions/gamma.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

extern "C" const char mp_d2_norm_tsv[];   /* norm_table.c */

namespace bm = boost::math;
namespace pol = boost::math::policies;

/* As scipy's Boost wrappers: no promotion to long double, errors give NaN /
 * inf instead of exceptions. */
typedef pol::policy<pol::promote_float<false>, pol::promote_double<false>,
                    pol::domain_error<pol::ignore_error>, pol::pole_error<pol::ignore_error>,
                    pol::overflow_error<pol::ignore_error>,
                    pol::evaluation_error<pol::ignore_error>,
                    pol::max_root_iterations<400>>
    policy;

static const double NaN = std::numeric_limits<double>::quiet_NaN();
static const double INF = std::numeric_limits<double>::infinity();

/* ===================================================================== */
/* Special functions as scipy.special names them                          */
/* ===================================================================== */

static double ndtr(double x)
{
    return 0.5 * bm::erfc(-x / std::sqrt(2.0), policy());
}

/* log of the normal integral, without underflow far in the left tail. */
static double log_ndtr(double x)
{
    if (x > -20)
        return std::log(ndtr(x));
    /* asymptotic series of erfc: Phi(x) ~ phi(x)/|x| (1 - 1/x^2 + 3/x^4 - ...) */
    double x2 = x * x, term = 1, sum = 1;
    for (int k = 1; k < 10; k++) {
        term *= -(2.0 * k - 1) / x2;
        sum += term;
    }
    return -0.5 * x2 - std::log(-x) - 0.5 * std::log(2 * M_PI) + std::log(sum);
}

static double gammainc(double a, double x) { return bm::gamma_p(a, x, policy()); }
static double gammaincc(double a, double x) { return bm::gamma_q(a, x, policy()); }
static double betainc(double a, double b, double x) { return bm::ibeta(a, b, x, policy()); }

/* ===================================================================== */
/* The families                                                           */
/* ===================================================================== */

/* F0 inside the support, shapes s[0..). */
typedef double (*cdf0_fn)(double x, const double *s);
/* The support (a, b) for shapes s. */
typedef void (*support_fn)(const double *s, double *a, double *b);
/* scipy's _argcheck. */
typedef bool (*argcheck_fn)(const double *s, int n);

static double f_alpha(double x, const double *s) { return ndtr(s[0] - 1.0 / x) / ndtr(s[0]); }
static double f_beta(double x, const double *s) { return betainc(s[0], s[1], x); }
static double f_betaprime(double x, const double *s) { return betainc(s[0], s[1], x / (1. + x)); }
static double f_burr(double x, const double *s) { return std::pow(1 + std::pow(x, -s[0]), -s[1]); }
static double f_cauchy(double x, const double *) { return 0.5 + 1.0 / M_PI * std::atan(x); }
static double f_chi(double x, const double *s) { return gammainc(.5 * s[0], .5 * x * x); }
static double f_dgamma(double x, const double *s)
{
    double fac = 0.5 * gammainc(s[0], std::fabs(x));
    return x > 0 ? 0.5 + fac : 0.5 - fac;
}
static double f_dweibull(double x, const double *s)
{
    double cx1 = 0.5 * std::exp(-std::pow(std::fabs(x), s[0]));
    return x > 0 ? 1 - cx1 : cx1;
}
static double f_exponnorm(double x, const double *s)
{
    double invk = 1.0 / s[0];
    double expval = invk * (0.5 * invk - x);
    double logprod = expval + log_ndtr(x - invk);
    return ndtr(x) - std::exp(logprod);
}
static double f_exponpow(double x, const double *s) { return -std::expm1(-std::expm1(std::pow(x, s[0]))); }
static double f_exponweib(double x, const double *s)
{
    return std::pow(-std::expm1(-std::pow(x, s[1])), s[0]);
}
static double f_fisk(double x, const double *s) { return std::pow(1 + std::pow(x, -s[0]), -1.0); }
static double f_foldcauchy(double x, const double *s)
{
    return 1.0 / M_PI * (std::atan(x - s[0]) + std::atan(x + s[0]));
}
static double f_foldnorm(double x, const double *s) { return ndtr(x - s[0]) + ndtr(x + s[0]) - 1.0; }
static double f_genexpon(double x, const double *s)
{
    double a = s[0], b = s[1], c = s[2];
    return -std::expm1((-a - b) * x + b * (-std::expm1(-c * x)) / c);
}
static double f_gengamma(double x, const double *s)
{
    double xc = std::pow(x, s[1]);
    return s[1] > 0 ? gammainc(s[0], xc) : gammaincc(s[0], xc);
}
static double f_genhalflogistic(double x, const double *s)
{
    double tmp2 = std::pow(1 - s[0] * x, 1.0 / s[0]);
    return (1.0 - tmp2) / (1 + tmp2);
}
static double f_genlogistic(double x, const double *s) { return std::pow(1 + std::exp(-x), -s[0]); }
static double f_gennorm(double x, const double *s)
{
    double c = 0.5 * (x > 0 ? 1 : x < 0 ? -1 : 0);
    return (0.5 + c) - c * gammaincc(1.0 / s[0], std::pow(std::fabs(x), s[0]));
}
/* scipy: -inv_boxcox1p(-x, -c) */
static double f_genpareto(double x, const double *s)
{
    double c = s[0];
    if (c == 0)
        return -std::expm1(-x);
    return -std::expm1(std::log1p(c * x) / -c);
}
static double f_gibrat(double x, const double *) { return ndtr(std::log(x)); }
static double f_gompertz(double x, const double *s) { return -std::expm1(-s[0] * std::expm1(x)); }
static double f_halfgennorm(double x, const double *s) { return gammainc(1.0 / s[0], std::pow(x, s[0])); }
static double f_halflogistic(double x, const double *) { return std::tanh(x / 2.0); }
static double f_halfnorm(double x, const double *) { return ndtr(x) * 2 - 1.0; }
static double f_hypsecant(double x, const double *) { return 2.0 / M_PI * std::atan(std::exp(x)); }
static double f_invgamma(double x, const double *s) { return gammaincc(s[0], 1.0 / x); }
static double f_invweibull(double x, const double *s) { return std::exp(-std::pow(x, -s[0])); }
static double f_johnsonsb(double x, const double *s) { return ndtr(s[0] + s[1] * std::log(x / (1.0 - x))); }
static double f_johnsonsu(double x, const double *s)
{
    return ndtr(s[0] + s[1] * std::log(x + std::sqrt(x * x + 1)));
}
static double f_laplace(double x, const double *) { return x > 0 ? 1.0 - 0.5 * std::exp(-x) : 0.5 * std::exp(x); }
static double f_loggamma(double x, const double *s) { return gammainc(s[0], std::exp(x)); }
static double f_logistic(double x, const double *) { return 1.0 / (1.0 + std::exp(-x)); }
static double f_lognorm(double x, const double *s) { return ndtr(std::log(x) / s[0]); }
static double f_lomax(double x, const double *s) { return -std::expm1(-s[0] * std::log1p(x)); }
static double f_mielke(double x, const double *s)
{
    return std::pow(x, s[0]) / std::pow(1.0 + std::pow(x, s[1]), s[0] * 1.0 / s[1]);
}
static double f_ncf(double x, const double *s)
{
    return bm::cdf(bm::non_central_f_distribution<double, policy>(s[0], s[1], s[2]), x);
}
static double f_nct(double x, const double *s)
{
    double p = bm::cdf(bm::non_central_t_distribution<double, policy>(s[0], s[1]), x);
    return p < 0 ? 0 : p > 1 ? 1 : p;
}
static double f_ncx2(double x, const double *s)
{
    if (s[1] == 0)
        return gammainc(s[0] / 2, x / 2);
    return bm::cdf(bm::non_central_chi_squared_distribution<double, policy>(s[0], s[1]), x);
}
static double f_pareto(double x, const double *s) { return 1 - std::pow(x, -s[0]); }
static double f_pearson3(double x, const double *s)
{
    double skew = s[0];
    if (std::fabs(skew) < 0.000016)
        return ndtr(x);
    double beta = 2.0 / skew, alpha = beta * beta, zeta = -alpha / beta;
    double tx = beta * (x - zeta);
    if (skew > 0)   /* gamma.cdf: 0 at and below the support */
        return tx <= 0 ? 0.0 : gammainc(alpha, tx);
    return tx <= 0 ? 1.0 : gammaincc(alpha, tx);   /* gamma.sf */
}
static double f_powerlaw(double x, const double *s) { return std::pow(x, s[0] * 1.0); }
static double f_recipinvgauss(double x, const double *s)
{
    double mu = s[0], trm1 = 1.0 / mu - x, trm2 = 1.0 / mu + x, isqx = 1.0 / std::sqrt(x);
    return ndtr(-isqx * trm1) - std::exp(2.0 / mu) * ndtr(-isqx * trm2);
}
static double f_t(double x, const double *s)
{
    return bm::cdf(bm::students_t_distribution<double, policy>(s[0]), x);
}
/* The quantile function Q(p) = (p^l - (1-p)^l) / l is increasing: bisect
 * for Q(p) = x. */
static double f_tukeylambda(double x, const double *s)
{
    double lam = s[0];
    if (lam == 0)
        return f_logistic(x, s);
    if (lam > 0) {
        if (x <= -1.0 / lam)
            return 0.0;
        if (x >= 1.0 / lam)
            return 1.0;
    }
    double lo = 0, hi = 1;
    for (int it = 0; it < 200; it++) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi)
            break;
        double q = (std::pow(mid, lam) - std::pow(1.0 - mid, lam)) / lam;
        if (q == x)
            return mid;
        if (q > x)
            hi = mid;
        else
            lo = mid;
    }
    return 0.5 * (lo + hi);
}
/* wald = invgauss(mu = 1): exp of scipy's logcdf. */
static double f_wald(double x, const double *)
{
    double mu = 1.0, fac = 1 / std::sqrt(x);
    double a = log_ndtr(fac * ((x / mu) - 1));
    double b = 2 / mu + log_ndtr(-fac * ((x / mu) + 1));
    return std::exp(a + std::log1p(std::exp(b - a)));
}

/* gausshyper: C x^(a-1) (1-x)^(b-1) (1+zx)^-c on (0, 1); scipy integrates
 * its pdf with QUADPACK.  Here both the integral up to x and the normalizing
 * one are tanh-sinh quadratures (they handle the x^(a-1) singularity). */
static double f_gausshyper(double x, const double *s)
{
    double a = s[0], b = s[1], c = s[2], z = s[3];
    auto g = [=](double t) {
        return std::pow(t, a - 1.0) * std::pow(1.0 - t, b - 1.0) / std::pow(1.0 + z * t, c);
    };
    static thread_local bm::quadrature::tanh_sinh<double> q;
    static thread_local double norm_key[4] = { NaN, NaN, NaN, NaN }, norm = NaN;
    if (std::memcmp(norm_key, s, sizeof norm_key) != 0) {
        norm = q.integrate(g, 0.0, 1.0);
        std::memcpy(norm_key, s, sizeof norm_key);
    }
    return q.integrate(g, 0.0, x) / norm;
}

static void sup_real(const double *, double *a, double *b) { *a = -INF; *b = INF; }
static void sup_pos(const double *, double *a, double *b) { *a = 0; *b = INF; }
static void sup_unit(const double *, double *a, double *b) { *a = 0; *b = 1; }
static void sup_pareto(const double *, double *a, double *b) { *a = 1; *b = INF; }
static void sup_genhalflogistic(const double *s, double *a, double *b) { *a = 0; *b = 1.0 / s[0]; }
static void sup_genpareto(const double *s, double *a, double *b)
{
    *a = 0;
    *b = s[0] < 0 ? -1.0 / s[0] : INF;
}

static bool ac_positive(const double *s, int n)
{
    for (int i = 0; i < n; i++)
        if (!(s[i] > 0))
            return false;
    return true;
}
static bool ac_finite(const double *s, int) { return std::isfinite(s[0]); }
static bool ac_nonneg(const double *s, int) { return s[0] >= 0; }
static bool ac_johnson(const double *s, int) { return s[1] > 0 && s[0] == s[0]; }
static bool ac_gengamma(const double *s, int) { return s[0] > 0 && s[1] != 0; }
static bool ac_gausshyper(const double *s, int)
{
    return s[0] > 0 && s[1] > 0 && s[2] == s[2] && s[3] > -1;
}
static bool ac_ncf(const double *s, int) { return s[0] > 0 && s[1] > 0 && s[2] >= 0; }
static bool ac_nct(const double *s, int) { return s[0] > 0 && s[1] == s[1]; }
static bool ac_ncx2(const double *s, int) { return s[0] > 0 && std::isfinite(s[0]) && s[1] >= 0; }

typedef struct {
    const char *name;
    int n_shapes;
    cdf0_fn cdf;
    support_fn support;
    argcheck_fn argcheck;
} family;

static const family families[] = {
    { "alpha", 1, f_alpha, sup_pos, ac_positive },
    { "beta", 2, f_beta, sup_unit, ac_positive },
    { "betaprime", 2, f_betaprime, sup_pos, ac_positive },
    { "burr", 2, f_burr, sup_pos, ac_positive },
    { "cauchy", 0, f_cauchy, sup_real, ac_positive },
    { "chi", 1, f_chi, sup_pos, ac_positive },
    { "dgamma", 1, f_dgamma, sup_real, ac_positive },
    { "dweibull", 1, f_dweibull, sup_real, ac_positive },
    { "exponnorm", 1, f_exponnorm, sup_real, ac_positive },
    { "exponpow", 1, f_exponpow, sup_pos, ac_positive },
    { "exponweib", 2, f_exponweib, sup_pos, ac_positive },
    { "fisk", 1, f_fisk, sup_pos, ac_positive },
    { "foldcauchy", 1, f_foldcauchy, sup_pos, ac_nonneg },
    { "foldnorm", 1, f_foldnorm, sup_pos, ac_nonneg },
    { "gausshyper", 4, f_gausshyper, sup_unit, ac_gausshyper },
    { "genexpon", 3, f_genexpon, sup_pos, ac_positive },
    { "gengamma", 2, f_gengamma, sup_pos, ac_gengamma },
    { "genhalflogistic", 1, f_genhalflogistic, sup_genhalflogistic, ac_positive },
    { "genlogistic", 1, f_genlogistic, sup_real, ac_positive },
    { "gennorm", 1, f_gennorm, sup_real, ac_positive },
    { "genpareto", 1, f_genpareto, sup_genpareto, ac_finite },
    { "gibrat", 0, f_gibrat, sup_pos, ac_positive },
    { "gompertz", 1, f_gompertz, sup_pos, ac_positive },
    { "halfgennorm", 1, f_halfgennorm, sup_pos, ac_positive },
    { "halflogistic", 0, f_halflogistic, sup_pos, ac_positive },
    { "halfnorm", 0, f_halfnorm, sup_pos, ac_positive },
    { "hypsecant", 0, f_hypsecant, sup_real, ac_positive },
    { "invgamma", 1, f_invgamma, sup_pos, ac_positive },
    { "invweibull", 1, f_invweibull, sup_pos, ac_positive },
    { "johnsonsb", 2, f_johnsonsb, sup_unit, ac_johnson },
    { "johnsonsu", 2, f_johnsonsu, sup_real, ac_johnson },
    { "laplace", 0, f_laplace, sup_real, ac_positive },
    { "loggamma", 1, f_loggamma, sup_real, ac_positive },
    { "logistic", 0, f_logistic, sup_real, ac_positive },
    { "lognorm", 1, f_lognorm, sup_pos, ac_positive },
    { "lomax", 1, f_lomax, sup_pos, ac_positive },
    { "mielke", 2, f_mielke, sup_pos, ac_positive },
    { "ncf", 3, f_ncf, sup_pos, ac_ncf },
    { "nct", 2, f_nct, sup_real, ac_nct },
    { "ncx2", 2, f_ncx2, sup_pos, ac_ncx2 },
    { "pareto", 1, f_pareto, sup_pareto, ac_positive },
    { "pearson3", 1, f_pearson3, sup_real, ac_finite },
    { "powerlaw", 1, f_powerlaw, sup_unit, ac_positive },
    { "recipinvgauss", 1, f_recipinvgauss, sup_pos, ac_positive },
    { "t", 1, f_t, sup_real, ac_positive },
    { "tukeylambda", 1, f_tukeylambda, sup_real, ac_finite },
    { "wald", 0, f_wald, sup_pos, ac_positive },
};
#define N_FAMILIES ((int)(sizeof families / sizeof *families))

/* ===================================================================== */
/* The table                                                              */
/* ===================================================================== */

typedef struct {
    const family *fam;
    int n_params;
    double p[8];        /* shapes..., loc, scale */
    double min, max;
} entry;

static std::once_flag g_once;
static entry g_table[MP_D2_V1];
static std::string *g_error;

static void parse_table()
{
    g_error = new std::string;
    const char *s = mp_d2_norm_tsv;
    auto fail = [&](int line, const std::string &why) {
        *g_error = "data/rdkit2d_normalization.tsv (embedded) line " + std::to_string(line) +
                   ": " + why;
    };
    const char *nl = std::strchr(s, '\n');
    if (!nl || std::strncmp(s, "name\tdistribution\tparams\tmin\tmax", 32) != 0)
        return fail(1, "not the normalization table (bad header)");
    s = nl + 1;
    for (int j = 0; j < MP_D2_V1; j++) {
        int line = j + 2;
        nl = std::strchr(s, '\n');
        std::string row(s, nl ? (size_t)(nl - s) : std::strlen(s));
        s = nl ? nl + 1 : s + row.size();
        std::vector<std::string> f;
        size_t a = 0;
        for (;;) {
            size_t t = row.find('\t', a);
            f.push_back(row.substr(a, t == std::string::npos ? std::string::npos : t - a));
            if (t == std::string::npos)
                break;
            a = t + 1;
        }
        if (f.size() != 5)
            return fail(line, "expected 5 tab-separated fields");
        if (f[0] != mp_d2_name(j))
            return fail(line, "descriptor '" + f[0] + "' where " + mp_d2_name(j) + " belongs");
        entry &e = g_table[j];
        e.fam = nullptr;
        for (int k = 0; k < N_FAMILIES; k++)
            if (f[1] == families[k].name)
                e.fam = &families[k];
        if (!e.fam)
            return fail(line, "unknown distribution '" + f[1] + "'");
        e.n_params = 0;
        const char *p = f[2].c_str();
        while (*p) {
            char *end;
            double x = std::strtod(p, &end);
            if (end == p || e.n_params == 8)
                return fail(line, "bad parameter list '" + f[2] + "'");
            e.p[e.n_params++] = x;
            p = *end == ',' ? end + 1 : end;
            if (*end && *end != ',')
                return fail(line, "bad parameter list '" + f[2] + "'");
        }
        if (e.n_params != e.fam->n_shapes + 2)
            return fail(line, f[1] + " takes " + std::to_string(e.fam->n_shapes + 2) +
                                  " parameters, the table gives " + std::to_string(e.n_params));
        char *end;
        e.min = std::strtod(f[3].c_str(), &end);
        if (*end)
            return fail(line, "bad min '" + f[3] + "'");
        e.max = std::strtod(f[4].c_str(), &end);
        if (*end)
            return fail(line, "bad max '" + f[4] + "'");
    }
}

extern "C" mp_status mp_d2_norm_init(void)
{
    std::call_once(g_once, parse_table);
    if (!g_error->empty())
        return mp_error_set(MP_ERR_FORMAT, "%s", g_error->c_str());
    return MP_OK;
}

extern "C" double mp_d2_norm_cdf(int j, double x)
{
    if (j < 0 || j >= MP_D2_V1 || mp_d2_norm_init() != MP_OK || std::isnan(x))
        return NaN;
    const entry &e = g_table[j];
    x = x < e.min ? e.min : x > e.max ? e.max : x;     /* np.clip */
    int ns = e.fam->n_shapes;
    double loc = e.p[ns], scale = e.p[ns + 1];
    if (!e.fam->argcheck(e.p, ns) || !(scale > 0))
        return NaN;
    double z = (x - loc) / scale, a, b;
    e.fam->support(e.p, &a, &b);
    double y;
    if (z >= b)
        y = 1.0;
    else if (!(z > a && z < b))
        y = 0.0;
    else
        y = e.fam->cdf(z, e.p);
    if (std::isnan(y))
        return y;
    return y < 0 ? 0.0 : y > 1 ? 1.0 : y;
}

extern "C" const char *mp_d2_norm_family(int j, int *n_params)
{
    if (j < 0 || j >= MP_D2_V1 || mp_d2_norm_init() != MP_OK)
        return nullptr;
    if (n_params)
        *n_params = g_table[j].n_params;
    return g_table[j].fam->name;
}
