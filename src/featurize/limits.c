/*
 * limits.c - the size checks a SMILES passes before RDKit sees it
 * (limits.h): a length and an atom count read off the string in one pass.
 */
#include "featurize/limits.h"

#include <string.h>

/* The characters that start an organic-subset atom, and '*': a table, not
 * two strchr calls per character (they showed in the featurization profile). */
static const unsigned char atom_char[256] = {
    ['*'] = 1, ['B'] = 1, ['C'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['S'] = 1, ['F'] = 1,
    ['I'] = 1, ['b'] = 1, ['c'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['s'] = 1,
};

size_t mp_smiles_count_atoms(const char *s)
{
    size_t n = 0;
    int in_bracket = 0;
    for (; *s; s++) {
        char c = *s;
        if (in_bracket) {
            in_bracket = c != ']';
            continue;
        }
        if (c == '[') {   /* one bracket atom, whatever it holds */
            in_bracket = 1;
            n++;
        } else if (atom_char[(unsigned char)c]) {
            n++;   /* "Cl" and "Br": the 'l' and 'r' are not counted */
        }
    }
    return n;
}

int mp_smiles_oversized(const char *s, char *why, size_t cap)
{
    size_t len = strnlen(s, MP_SMILES_MAX_CHARS + 1);
    if (len > MP_SMILES_MAX_CHARS) {
        snprintf(why, cap, "SMILES of %zu characters: more than molprop's limit of %d",
                 strlen(s), MP_SMILES_MAX_CHARS);
        return 1;
    }
    size_t atoms = mp_smiles_count_atoms(s);
    if (atoms > MP_SMILES_MAX_ATOMS) {
        snprintf(why, cap, "SMILES of %zu atoms: more than molprop's limit of %d (RDKit's "
                 "stereo perception takes time growing as the cube of the atoms)", atoms,
                 MP_SMILES_MAX_ATOMS);
        return 1;
    }
    return 0;
}
