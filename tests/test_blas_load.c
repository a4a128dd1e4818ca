/*
 * test_blas_load.c - cuBLAS and cuBLASLt are loaded when a GPU backend
 * first opens, not linked (src/gpu/blas_dl.cu): a process that has not
 * loaded them has no libcublasLt mapped, and loading them (no GPU needed)
 * maps them and gets an answer from one.  Runs without a GPU; skipped in a
 * build without CUDA.
 */
#include "test.h"

#include "gpu/gpu.h"

#include <stdio.h>
#include <string.h>

/* 1 when a mapping of this process names `lib`. */
static int mapped(const char *lib)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, lib) != NULL;
    fclose(f);
    return found;
}

MP_TEST(cuda_blas_loaded_on_demand)
{
    const int before = mp_backend_cuda_blas_loaded();
    const int was_mapped = mapped("libcublasLt");
    CHECK_MSG(was_mapped >= 0, "cannot read /proc/self/maps");
    /* only loading puts it in the process: the program does not link it */
    CHECK_MSG(before || !was_mapped,
              "libcublasLt is mapped although nothing loaded it (linked again?)");
    char why[512] = "";
    int ok = mp_backend_cuda_blas_load(why, sizeof why);
    if (!ok && strstr(why, "without CUDA"))
        MP_SKIP(why);
    CHECK_MSG(ok, "loading cuBLAS: %s", why);
    CHECK(mp_backend_cuda_blas_loaded());
    CHECK_MSG(mapped("libcublasLt") == 1, "loaded, but libcublasLt is not mapped");
    /* a second call is the same load */
    CHECK(mp_backend_cuda_blas_load(why, sizeof why));
}
