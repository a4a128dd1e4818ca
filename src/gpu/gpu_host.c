/*
 * gpu_host.c - the host-only part of the GPU backend's API, built with and
 * without CUDA: precision names and backend names ("cuda", "cuda:tf32", ...).
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

mp_status mp_backend_cuda_open_name(mp_backend **out, const char *name)
{
    *out = NULL;
    if (!name || strncmp(name, "cuda", 4) != 0 || (name[4] != '\0' && name[4] != ':'))
        return mp_error_set(MP_ERR_ARG, "'%s' is not a cuda backend name (expected cuda, "
                            "cuda:fp32, cuda:tf32 or cuda:bf16)", name ? name : "(null)");
    mp_precision p = MP_PREC_FP32;
    if (name[4] == ':' && mp_precision_parse(name + 5, &p) != MP_OK)
        return mp_error_set(MP_ERR_ARG, "backend '%s': unknown precision '%s' (expected "
                            "cuda, cuda:fp32, cuda:tf32 or cuda:bf16)", name, name + 5);
    mp_status st = mp_backend_cuda_open(out, p);
    if (st == MP_OK)
        mp_backend_cuda_train_ops(*out);
    return st;
}
