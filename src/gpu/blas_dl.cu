/*
 * blas_dl.cu - cuBLAS and cuBLASLt, loaded when the first GPU backend opens
 * rather than linked.  Linking them runs their static initializers in every
 * process at start: ~45 ms and ~210 MB resident on this project's CPU runs,
 * which never touch them (a program that only links the two and returns
 * takes 0.05 s and 217 MB; without them 0.00 s and 1 MB).  cudart and NCCL
 * stay linked: they cost nothing until used.
 *
 * mp_blas holds every cuBLAS function the backend calls, each member of
 * the library's own type and name (cuda_ctx.cuh); mp_blas_load fills it
 * once per process from libcublas.so.N and libcublasLt.so.N, N the major
 * version of the headers built against, found the way the linker would
 * have found them (the program's run path, then the system's).
 */
#include "gpu/cuda_ctx.cuh"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

mp_blas_api mp_blas;

#define MP_STR_(x) #x
#define MP_STR(x)  MP_STR_(x)

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static int blas_loaded;
static char blas_err[512];

static void blas_load_once(void)
{
    static const char *const names[2] = { "libcublasLt.so." MP_STR(CUBLAS_VER_MAJOR),
                                          "libcublas.so." MP_STR(CUBLAS_VER_MAJOR) };
    void *h[2] = { NULL, NULL };
    for (int i = 0; i < 2; i++) {
        h[i] = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h[i]) {
            const char *why = dlerror();
            snprintf(blas_err, sizeof blas_err, "cannot load %s: %s", names[i],
                     why ? why : "unknown reason");
            return;
        }
    }
    /* cublas* from libcublas, cublasLt* from libcublasLt: each looked up in
     * both, cublas first; the names are the headers' (cublasCreate is
     * cublasCreate_v2 by cublas_v2.h, on both sides) */
#define MP_BLAS_RESOLVE(f)                                                     \
    if (!(mp_blas.f = (decltype(mp_blas.f))dlsym(h[1], MP_STR(f))) &&          \
        !(mp_blas.f = (decltype(mp_blas.f))dlsym(h[0], MP_STR(f)))) {          \
        snprintf(blas_err, sizeof blas_err, "%s has no %s", names[1], MP_STR(f)); \
        return;                                                                \
    }
    MP_BLAS_FUNCTIONS(MP_BLAS_RESOLVE)
    MP_BLAS_RESOLVE(cublasGemmEx)
#undef MP_BLAS_RESOLVE
    blas_loaded = 1;   /* the handles stay open until the process ends */
}

int mp_blas_load(char *err, size_t cap)
{
    pthread_once(&blas_once, blas_load_once);
    if (!blas_loaded && err && cap)
        snprintf(err, cap, "%s", blas_err);
    return blas_loaded;
}

extern "C" int mp_backend_cuda_blas_loaded(void)
{
    return blas_loaded;
}

extern "C" int mp_backend_cuda_blas_load(char *why, size_t n)
{
    if (!mp_blas_load(why, n))
        return 0;
    /* a question that needs no device: the name of a status */
    const char *name = mp_blas.cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED);
    if (!name || !strstr(name, "NOT_INITIALIZED")) {
        if (why && n)
            snprintf(why, n, "cuBLAS loaded but names CUBLAS_STATUS_NOT_INITIALIZED \"%s\"",
                     name ? name : "(null)");
        return 0;
    }
    return 1;
}
