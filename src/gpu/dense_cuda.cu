/*
 * dense_cuda.cu - the cuda backend's products (ops.h gemm, gemm_res_relu):
 * cuBLAS GemmEx for gemm, one cuBLASLt call with the residual as C and a
 * ReLU epilogue for gemm_res_relu; bf16 products of few rows go to the
 * tile kernel of tiles_cuda.cu instead.
 *
 * Storage and precision.  An operand stored as bf16 (ops.h mp_stype) is
 * passed to cuBLAS as CUDA_R_16BF, an element-type one as CUDA_R_32F; a
 * product with bf16 A and B computes with CUBLAS_COMPUTE_32F (the tensor
 * cores' bf16 path, fp32 accumulation), one with fp32 operands with the
 * backend's precision: CUBLAS_COMPUTE_32F (fp32), _FAST_TF32 (tf32) or
 * _FAST_16BF (bf16: the FFN head's products, which stay on fp32 buffers).
 * A bf16 C is rounded once, at the end.
 *
 * Row-major C = op(A) op(B) is the column-major product C^T = op(B)^T
 * op(A)^T: the row-major buffers read as column-major are the transposes, so
 * the operands swap and keep their own transpose flags.  k == 0 is our own
 * kernel (C = beta C).  cuBLAS runs on a fixed workspace per handle, so its
 * choices, hence its bits, are fixed, and capture needs no allocation.
 */
#include "gpu/cuda_ctx.cuh"

#include <string.h>

/* C[i, j] = beta == 0 ? 0 : beta * C[i, j] (C float or bf16): gemm with k == 0. */
template <typename T>
__global__ void k_scale_rows(T *c, int ldc, int m, int n, float beta)
{
    pdl_enter();
    for (int64_t i = warp_id(); i < m; i += warp_count()) {
        T *row = c + (size_t)i * ldc;
        for (int j = lane_id(); j < n; j += 32) {
            if constexpr (sizeof(T) == sizeof(float))
                row[j] = beta == 0.0f ? 0.0f : beta * row[j];
            else
                row[j] = __float2bfloat16_rn(beta == 0.0f ? 0.0f : beta * __bfloat162float(row[j]));
        }
    }
}

static cublasComputeType_t compute_type(mp_precision p, mp_stype ab)
{
    if (ab == MP_ST_BF16)
        return CUBLAS_COMPUTE_32F;
    switch (p) {
    case MP_PREC_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case MP_PREC_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    default:           return CUBLAS_COMPUTE_32F;
    }
}

/* ===================================================================== */
/* gemm                                                                   */
/* ===================================================================== */

/* One product on `lane` (0: the backend's stream and cuBLAS handle, 1: the
 * side stream a batch runs every other product on, with its own handle and
 * workspace, so each product's result is the same whichever lane runs it). */
void mp_cu_gemm_on(gpu_ctx *c, int lane, const mp_gemm *g)
{
    const int ta = g->ta, tb = g->tb, m = g->m, n = g->n, k = g->k;
    if (m <= 0 || n <= 0 || !usable(c))
        return;
    if (k <= 0) {
        /* No products: C = beta C (cuBLAS's treatment of k == 0 is not
         * documented for every path, so do it ourselves). */
        if (g->ldc < n) {
            record(c, MP_ERR_ARG, __FILE__, __LINE__, "cuda gemm: ldc %d < n %d", g->ldc, n);
            return;
        }
        unsigned grid = grid_for(c, (size_t)m, ROWS_PER_BLOCK);
        WITH_T(g->c_st, T,
            launch(c, c->lane_stream[lane], k_scale_rows<T>, grid, THREADS, 0, (T *)g->c, g->ldc, m, n,
                                                                        (float)g->beta));
        LAUNCHED(c, "k_scale_rows");
        return;
    }
    if (g->a_st != g->b_st) {
        record(c, MP_ERR_ARG, __FILE__, __LINE__, "cuda gemm: A (%s) and B (%s) of one product "
               "must have one storage type", st_name(g->a_st), st_name(g->b_st));
        return;
    }
    if (mp_cu_tile_gemm(c, lane, g))
        return;
    const float al = (float)g->alpha, be = (float)g->beta;
    cublasStatus_t s = mp_blas.cublasGemmEx(c->lane_blas[lane], tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &al, g->b,
                                    cuda_type(g->b_st), g->ldb, g->a, cuda_type(g->a_st), g->lda,
                                    &be, g->c, cuda_type(g->c_st), g->ldc,
                                    compute_type(c->prec, g->a_st), CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        record(c, s == CUBLAS_STATUS_ALLOC_FAILED ? MP_ERR_NOMEM : MP_ERR_INTERNAL, __FILE__,
               __LINE__, "cuBLAS error: %s (%s) in gemm ta=%d tb=%d m=%d n=%d k=%d lda=%d "
               "ldb=%d ldc=%d, %s operands, %s C, %s", mp_blas.cublasGetStatusString(s),
               mp_blas.cublasGetStatusName(s), ta, tb, m, n, k, g->lda, g->ldb, g->ldc,
               st_name(g->a_st), st_name(g->c_st), mp_precision_name(c->prec));
}

/*
 * Independent products (ops.h): the even ones on the backend's stream, the
 * odd ones on the side stream, forked from and joined back into the main
 * stream by events, so two products share the GPU when neither fills it (the
 * two of each backward step at small batches).  Both lanes are ordered after
 * everything queued before and everything queued after waits for both, so to
 * the caller this is one op on the one stream; under graph capture the fork
 * and join become two parallel branches of the graph.  One product runs on
 * the main stream alone.
 */
static void cu_gemm(mp_backend *b, int count, const mp_gemm *g)
{
    gpu_ctx *c = CTX(b);
    if (count <= 0 || !usable(c))
        return;
    if (count == 1) {
        mp_cu_gemm_on(c, 0, g);
        return;
    }
    if (!CUDA_OK(c, cudaEventRecord(c->ev_fork, c->stream)) ||
        !CUDA_OK(c, cudaStreamWaitEvent(c->side, c->ev_fork, 0)))
        return;
    for (int i = 0; i < count; i++)
        mp_cu_gemm_on(c, i & 1, &g[i]);
    /* Join even after a failed product: a capture must not end with the side
     * stream still forked. */
    if (CUDA_OK(c, cudaEventRecord(c->ev_join, c->side)))
        CUDA_OK(c, cudaStreamWaitEvent(c->stream, c->ev_join, 0));
}

/* ===================================================================== */
/* cuBLASLt: c = ReLU(r + a w) in one product                             */
/* ===================================================================== */

/* cublasLtMatmulAlgoGetHeuristic's first answer for these descriptors,
 * remembered under key (every number the descriptors were made from, so
 * that the heuristic, tens of microseconds of host time, more than a small
 * batch's product, is asked once per shape): 1 with *res filled, 0 when Lt
 * offers no algorithm.  The heuristic's answer is a function of its inputs,
 * so the bits do not change. */
static int lt_heuristic(gpu_ctx *c, const int key[LT_KEY], cublasLtMatmulDesc_t op,
                        cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                        cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                        cublasLtMatmulPreference_t pref, cublasLtMatmulHeuristicResult_t *res)
{
    uint32_t hsh = 2166136261u;                /* FNV-1a over the key */
    for (int i = 0; i < LT_KEY; i++) {
        hsh ^= (uint32_t)key[i];
        hsh *= 16777619u;
    }
    lt_cached *e = &c->lt_cache[hsh % LT_CACHE];
    if (e->valid && !memcmp(e->key, key, sizeof e->key)) {
        *res = e->res;
        return e->found;
    }
    int found = 0;
    if (mp_blas.cublasLtMatmulAlgoGetHeuristic(c->lt, op, la, lb, lc, ld, pref, 1, res, &found) !=
        CUBLAS_STATUS_SUCCESS)
        return 0;                              /* not remembered: may be transient */
    e->valid = 1;
    e->found = found > 0;
    memcpy(e->key, key, sizeof e->key);
    e->res = *res;
    return e->found;
}

/* The alignment of p in bytes, as Lt's preferences take it (2 .. 256). */
static uint32_t align_of(const void *p)
{
    uint32_t al = 256;
    while (al > 2 && ((uintptr_t)p & (al - 1)))
        al >>= 1;
    return al;
}

/*
 * c = ReLU(r + a w) as one cuBLASLt product with the residual as its C
 * operand (beta 1) and the ReLU epilogue: one pass over the output instead
 * of a copy, a product reading C, and a ReLU pass.  Row-major over
 * column-major as in gemm: C^T = W^T A^T + R^T, so Lt's A is w (n x k), its
 * B is a (k x m).  a and w are of type ab, r and c of type cd (fp32 or
 * bf16 each).  The
 * algorithm is the heuristic's first for the shape and the fixed workspace,
 * so the same on every call (same bits).  Returns 0 when Lt offers no
 * algorithm or refuses the layout (the caller composes the unfused ops), 1
 * when the product was queued or its failure kept.
 */
static int lt_res_relu(gpu_ctx *c, cudaDataType_t ab, cudaDataType_t cd, cublasComputeType_t ct,
                       int m, int n, int k, const void *a, int lda, const void *w, int ldw,
                       const void *r, int ldr, void *cm, int ldc)
{
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int done = 0;
    const cublasOperation_t no = CUBLAS_OP_N;
    const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_RELU;
    const size_t ws = BLAS_WORKSPACE_BYTES;
    /* Lt assumes 256-byte aligned operands unless told: a sub-block of the
     * parameter block is not, so state what each pointer really has. */
    const uint32_t al_a = align_of(w), al_b = align_of(a), al_c = align_of(r),
                   al_d = align_of(cm);
    /* the heuristic's answer, remembered per shape (lt_heuristic):
     * the operand and output types are part of the key */
    const int key[LT_KEY] = { m, n, k, lda, ldw, ldr, ldc, (int)al_a, (int)al_b, (int)al_c,
                              (int)al_d,
                              (int)c->prec | (ab == CUDA_R_16BF) << 4 | (cd == CUDA_R_16BF) << 5,
                              c->sm_target };
    const int32_t sm_target = c->sm_target;
    memset(&res, 0, sizeof res);
    if (mp_blas.cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &no, sizeof no) ==
            CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &no, sizeof no) ==
            CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) ==
            CUBLAS_STATUS_SUCCESS &&
        (!sm_target ||
         mp_blas.cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sm_target,
                                        sizeof sm_target) == CUBLAS_STATUS_SUCCESS) &&
        mp_blas.cublasLtMatrixLayoutCreate(&la, ab, (uint64_t)n, (uint64_t)k, ldw) ==
            CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatrixLayoutCreate(&lb, ab, (uint64_t)k, (uint64_t)m, lda) ==
            CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatrixLayoutCreate(&lc, cd, (uint64_t)n, (uint64_t)m, ldr) ==
            CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatrixLayoutCreate(&ld, cd, (uint64_t)n, (uint64_t)m, ldc) ==
            CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws) == CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &al_a, sizeof al_a) == CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &al_b, sizeof al_b) == CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &al_c, sizeof al_c) == CUBLAS_STATUS_SUCCESS &&
        mp_blas.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &al_d, sizeof al_d) == CUBLAS_STATUS_SUCCESS &&
        lt_heuristic(c, key, op, la, lb, lc, ld, pref, &res)) {
        const float one = 1.0f;
        cublasStatus_t st = mp_blas.cublasLtMatmul(c->lt, op, &one, w, la, a, lb, &one, r, lc, cm, ld,
                                           &res.algo, c->blas_ws, ws, c->stream);
        if (st != CUBLAS_STATUS_SUCCESS)
            record(c, st == CUBLAS_STATUS_ALLOC_FAILED ? MP_ERR_NOMEM : MP_ERR_INTERNAL,
                   __FILE__, __LINE__, "cuBLASLt error: %s (%s) in gemm_res_relu m=%d n=%d k=%d "
                   "lda=%d ldw=%d ldr=%d ldc=%d, %s operands, %s C/D, %s",
                   mp_blas.cublasGetStatusString(st), mp_blas.cublasGetStatusName(st), m, n, k, lda, ldw, ldr, ldc,
                   ab == CUDA_R_16BF ? "bf16" : "fp32", cd == CUDA_R_16BF ? "bf16" : "fp32",
                   mp_precision_name(c->prec));
        done = 1;
    }
    if (pref)
        (void)mp_blas.cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayout_t layouts[4] = { ld, lc, lb, la };
    for (int i = 0; i < 4; i++)
        if (layouts[i])
            (void)mp_blas.cublasLtMatrixLayoutDestroy(layouts[i]);
    if (op)
        (void)mp_blas.cublasLtMatmulDescDestroy(op);
    return done;
}

/* c = ReLU(r + a w): one Lt product; where Lt has no algorithm, the unfused
 * ops (copy the residual, the product with beta 1, the ReLU pass). */
static void cu_gemm_res_relu(mp_backend *b, int m, int n, int k, const void *a, int lda,
                             const void *w, int ldw, mp_stype aw_st, const void *r, int ldr,
                             void *cm, int ldc, mp_stype rc_st)
{
    gpu_ctx *c = CTX(b);
    if (m <= 0 || n <= 0 || !usable(c))
        return;
    if (cm == r && ldc != ldr) {
        record(c, MP_ERR_ARG, __FILE__, __LINE__,
               "cuda gemm_res_relu: c == r needs ldc == ldr (%d != %d)", ldc, ldr);
        return;
    }
    /* small bf16 products: the tile kernel (tiles_cuda.cu) */
    if (k > 0 && mp_cu_tile_res_relu(c, m, n, k, a, lda, w, ldw, aw_st, r, ldr, cm, ldc, rc_st))
        return;
    /* Lt needs k >= 1 (k == 0 is c = ReLU(r), composed below). */
    if (k > 0 && lt_res_relu(c, cuda_type(aw_st), cuda_type(rc_st), compute_type(c->prec, aw_st),
                             m, n, k, a, lda, w, ldw, r, ldr, cm, ldc))
        return;
    if (cm != r)
        b->copy2d(b, cm, rc_st, ldc, r, rc_st, ldr, m, n);
    mp_gemm g = { 0, 0, m, n, k, 1.0, 1.0, a, w, cm, lda, ldw, ldc, aw_st, aw_st, rc_st };
    mp_cu_gemm_on(c, 0, &g);
    const size_t es = rc_st == MP_ST_BF16 ? 2 : sizeof(float);
    for (int i = 0; i < m && usable(c); i += ldc == n ? m : 1) {
        void *row = (char *)cm + (size_t)i * ldc * es;
        b->relu_dropout(b, row, row, rc_st, ldc == n ? (size_t)m * n : (size_t)n, 0.0,
                        mp_key_host(0));
    }
}

void mp_cu_dense_ops(mp_backend *b)
{
    b->gemm = cu_gemm;
    b->gemm_res_relu = cu_gemm_res_relu;
}
