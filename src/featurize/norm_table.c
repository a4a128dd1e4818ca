/*
 * norm_table.c - descriptastorus' fitted normalization table
 * (data/rdkit2d_normalization.tsv: per descriptor the scipy family, its
 * parameters and the clipping range), embedded into the library as one
 * NUL-terminated string so that normalization needs no file at run time.
 * normalize.cpp parses it.  The assembler reads the file relative to the
 * directory make runs in (the checkout); the Makefile rebuilds this object
 * when the table changes.
 */
__asm__(".section .rodata\n"
        ".global mp_d2_norm_tsv\n"
        ".type mp_d2_norm_tsv, @object\n"
        ".balign 8\n"
        "mp_d2_norm_tsv:\n"
        ".incbin \"data/rdkit2d_normalization.tsv\"\n"
        ".byte 0\n"
        ".size mp_d2_norm_tsv, . - mp_d2_norm_tsv\n"
        ".previous\n");
