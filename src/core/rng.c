/*
 * rng.c - random number generators.
 *
 * mp_pyrandom reproduces CPython's random.Random (Modules/_randommodule.c and
 * Lib/random.py, as documented behaviour): MT19937 with init_by_array seeding
 * from the absolute value of an integer seed split into 32-bit words, least
 * significant first.  Chemprop's splits are drawn from it.
 *
 * mp_rng is xoshiro256** (Blackman & Vigna), seeded through splitmix64, used
 * for weight initialisation, batch order and dropout.
 */
#include "core.h"

#include <math.h>

/* ===================================================================== */
/* MT19937, Python-compatible                                             */
/* ===================================================================== */

#define MT_N 624
#define MT_M 397

static void mt_init_genrand(mp_pyrandom *r, uint32_t s)
{
    r->mt[0] = s;
    for (int i = 1; i < MT_N; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->index = MT_N;
}

static void mt_init_by_array(mp_pyrandom *r, const uint32_t *key, int key_len)
{
    mt_init_genrand(r, 19650218u);
    int i = 1, j = 0;
    int k = MT_N > key_len ? MT_N : key_len;
    for (; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1664525u))
                   + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= MT_N) { r->mt[0] = r->mt[MT_N - 1]; i = 1; }
        if (j >= key_len) j = 0;
    }
    for (k = MT_N - 1; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1566083941u))
                   - (uint32_t)i;
        i++;
        if (i >= MT_N) { r->mt[0] = r->mt[MT_N - 1]; i = 1; }
    }
    r->mt[0] = 0x80000000u;
    r->index = MT_N;
}

void mp_pyrandom_seed(mp_pyrandom *r, uint64_t seed)
{
    uint32_t key[2];
    int len = 0;
    key[len++] = (uint32_t)seed;
    if (seed >> 32)
        key[len++] = (uint32_t)(seed >> 32);
    mt_init_by_array(r, key, len);
}

uint32_t mp_pyrandom_u32(mp_pyrandom *r)
{
    static const uint32_t mag01[2] = { 0u, 0x9908b0dfu };
    if (r->index >= MT_N) {
        int kk;
        uint32_t y;
        for (kk = 0; kk < MT_N - MT_M; kk++) {
            y = (r->mt[kk] & 0x80000000u) | (r->mt[kk + 1] & 0x7fffffffu);
            r->mt[kk] = r->mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 1u];
        }
        for (; kk < MT_N - 1; kk++) {
            y = (r->mt[kk] & 0x80000000u) | (r->mt[kk + 1] & 0x7fffffffu);
            r->mt[kk] = r->mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 1u];
        }
        y = (r->mt[MT_N - 1] & 0x80000000u) | (r->mt[0] & 0x7fffffffu);
        r->mt[MT_N - 1] = r->mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1u];
        r->index = 0;
    }
    uint32_t y = r->mt[r->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

uint64_t mp_pyrandom_getrandbits(mp_pyrandom *r, int k)
{
    MP_ASSERT(k >= 1 && k <= 64);
    if (k <= 32)
        return mp_pyrandom_u32(r) >> (32 - k);
    /* Words are filled least significant first; the last is truncated from
     * the right, as CPython does. */
    uint64_t lo = mp_pyrandom_u32(r);
    uint64_t hi = mp_pyrandom_u32(r) >> (64 - k);
    return lo | (hi << 32);
}

uint64_t mp_pyrandom_randbelow(mp_pyrandom *r, uint64_t n)
{
    MP_ASSERT(n >= 1);
    int k = 64 - __builtin_clzll(n);   /* n.bit_length() */
    uint64_t v = mp_pyrandom_getrandbits(r, k);
    while (v >= n)
        v = mp_pyrandom_getrandbits(r, k);
    return v;
}

double mp_pyrandom_random(mp_pyrandom *r)
{
    uint32_t a = mp_pyrandom_u32(r) >> 5, b = mp_pyrandom_u32(r) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

void mp_pyrandom_shuffle(mp_pyrandom *r, size_t *x, size_t n)
{
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)mp_pyrandom_randbelow(r, (uint64_t)i + 1);
        size_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

/* ===================================================================== */
/* xoshiro256**                                                           */
/* ===================================================================== */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void mp_rng_seed(mp_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
    splitmix64(&x);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t mp_rng_u64(mp_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double mp_rng_uniform(mp_rng *r)
{
    return (double)(mp_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double mp_rng_normal(mp_rng *r)
{
    /* Box-Muller, one value per call (the partner is discarded so the stream
     * position depends only on the number of calls). */
    double u1 = mp_rng_uniform(r), u2 = mp_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t mp_rng_below(mp_rng *r, uint64_t n)
{
    MP_ASSERT(n >= 1);
    uint64_t lim = -n % n;   /* 2^64 mod n: reject the biased low range */
    uint64_t v;
    do
        v = mp_rng_u64(r);
    while (v < lim);
    return v % n;
}

void mp_rng_shuffle(mp_rng *r, size_t *x, size_t n)
{
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)mp_rng_below(r, (uint64_t)i + 1);
        size_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}
