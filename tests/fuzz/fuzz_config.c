/*
 * fuzz_config.c - the INI configuration reader (api/config.c over libinih)
 * and the option table behind it (api/options.c): the first byte picks the
 * verb whose [section] is read, the rest is the file.  A file that reads
 * must give options that convert into the verb's struct, print as JSON and
 * read back from that JSON's values; one that does not must say why.
 */
#include "fuzz.h"
#include "api/options.h"
#include "molprop.h"

static const char *const fuzz_verbs[] = { "train", "predict", "eval", "featurize",
                                          "split", "bench", "data", "hpopt" };
#define N_FUZZ_VERBS (sizeof fuzz_verbs / sizeof fuzz_verbs[0])

/* Converts o into a zeroed block as large as any verb's struct. */
static void fuzz_apply(const mp_options *o)
{
    static _Alignas(64) unsigned char target[1 << 16];
    memset(target, 0, sizeof target);
    mp_status st = mp_options_apply(o, target);
    MP_FUZZ_CHECK(st == MP_OK || mp_error_message()[0], "apply failed without a message");
    mp_error_clear();
}

/* Every key set in o, set again into a fresh handle of the same verb from
 * its text: what the table accepted once it accepts again. */
static void fuzz_roundtrip(const mp_options *o)
{
    mp_options *b = NULL;
    MP_FUZZ_CHECK(mp_options_create(&b, mp_options_verb(o)) == MP_OK, "%s", mp_error_message());
    size_t n;
    const mp_option_def *defs = mp_option_table(mp_options_verb(o), &n);
    for (size_t i = 0; i < n; i++) {
        const char *key = defs[i].key;
        if (!key || !mp_options_is_set(o, key))
            continue;
        const char *v = mp_options_get(o, key);
        MP_FUZZ_CHECK(mp_options_set(b, key, v) == MP_OK, "--%s '%s' accepted once, refused "
                      "again: %s", key, v, mp_error_message());
        MP_FUZZ_CHECK(!strcmp(mp_options_get(b, key), v), "--%s changed", key);
    }
    mp_options_free(b);
}

int mp_fuzz_config(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *verb = fuzz_verbs[data[0] % N_FUZZ_VERBS];
    char path[512];
    mp_fuzz_path("in.ini", path, sizeof path);
    long live = mp_alloc_live();
    if (mp_fuzz_write(path, data + 1, size - 1)) {
        mp_options *o = NULL;
        MP_FUZZ_CHECK(mp_options_create(&o, verb) == MP_OK, "%s", mp_error_message());
        mp_error_clear();
        if (mp_options_read_config(o, path) == MP_OK) {
            char *json = mp_options_json(o);
            MP_FUZZ_CHECK(json != NULL, "no JSON for options that read");
            mp_free(json);
            char *help = mp_options_help(o);
            mp_free(help);
            (void)mp_options_missing(o);
            fuzz_apply(o);
            fuzz_roundtrip(o);
        } else {
            MP_FUZZ_CHECK(mp_error_message()[0], "a refused file without a message");
        }
        mp_options_free(o);
        unlink(path);
    }
    mp_error_clear();
    MP_FUZZ_CHECK(mp_alloc_live() == live, "%ld blocks leaked", mp_alloc_live() - live);
    return 0;
}

MP_FUZZ_ENTRY(mp_fuzz_config)
