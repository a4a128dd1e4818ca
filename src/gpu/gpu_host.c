/*
 * gpu_host.c - the host-only part of the GPU backend's API, built with and
 * without CUDA: precision names, backend names ("gpu", "cuda:tf32", ...) and
 * the module's entry in the backend registry (backend/backend.c).
 */
#include "gpu/gpu.h"

#include <string.h>

const char *mp_precision_name(mp_precision p)
{
    switch (p) {
    case MP_PREC_FP32: return "fp32";
    case MP_PREC_TF32: return "tf32";
    case MP_PREC_BF16: return "bf16";
    }
    return "?";
}

mp_status mp_precision_parse(const char *s, mp_precision *out)
{
    static const struct {
        const char  *name;
        mp_precision p;
    } names[] = {
        { "fp32", MP_PREC_FP32 }, { "float32", MP_PREC_FP32 }, { "f32", MP_PREC_FP32 },
        { "tf32", MP_PREC_TF32 },
        { "bf16", MP_PREC_BF16 }, { "bfloat16", MP_PREC_BF16 },
    };
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
        if (mp_strcaseeq(s, names[i].name)) {
            *out = names[i].p;
            return MP_OK;
        }
    return mp_error_set(MP_ERR_ARG, "unknown GPU precision '%s' (expected fp32, tf32 or bf16)",
                        s ? s : "(null)");
}

/* "gpu" or "cuda", optionally ":fp32", ":tf32" or ":bf16". */
mp_status mp_backend_cuda_open_name(mp_backend **out, const char *name)
{
    *out = NULL;
    size_t fam = !name ? 0 : strncmp(name, "cuda", 4) == 0 ? 4 : strncmp(name, "gpu", 3) == 0 ? 3 : 0;
    if (!fam || (name[fam] != '\0' && name[fam] != ':'))
        return mp_error_set(MP_ERR_ARG, "'%s' is not a GPU backend name (expected gpu or cuda, "
                            "optionally with :fp32, :tf32 or :bf16)", name ? name : "(null)");
    mp_precision p = MP_PREC_FP32;
    if (name[fam] == ':' && mp_precision_parse(name + fam + 1, &p) != MP_OK)
        return mp_error_set(MP_ERR_ARG, "backend '%s': unknown precision '%s' (expected fp32, "
                            "tf32 or bf16)", name, name + fam + 1);
    return mp_backend_cuda_open(out, p);
}

static int gpu_available(char *why, size_t n)
{
    return mp_backend_cuda_available(why, n);
}

const mp_backend_provider mp_backend_gpu_provider = {
    "gpu, cuda", "gpu[:fp32|tf32|bf16]", "NVIDIA GPUs: CUDA, cuBLAS(Lt) and our kernels",
    mp_backend_cuda_open_name, gpu_available, mp_backend_cuda_device_count,
};
