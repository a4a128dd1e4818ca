/*
 * lt_search.cu - how fast can cuBLASLt run the D-MPNN's product shapes?  For
 * each shape and type combination: every algorithm id cuBLASLt lists, every
 * tile and stage count it reports, nine cluster shapes, each configuration
 * checked with cublasLtMatmulAlgoCheck and timed (median of 3), the 8 fastest
 * printed beside the heuristic's first choice.  A measurement tool, not
 * product code (bench/RESULTS.md, "Why the products stop there").
 *   make build/lt_search && build/lt_search [E=228172]
 *   build/lt_search small [E=2502 [ATOMS=1179]]   the batch-50 shapes,
 *                   split-K counts and reduction schemes searched too
 *   build/lt_search conc K [E=2502 [ATOMS=1179]]   the batch-50 shapes as K
 *                   ensemble members see them: each configuration also
 *                   timed as K streams of back-to-back products on K
 *                   buffer sets (throughput, us per round of K), beside the
 *                   heuristic's choice with SM_COUNT_TARGET = 2/K of the SMs
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include <algorithm>
#include <string>
#include <string.h>
#define CK(x) do { auto e_ = (x); if ((int)e_ != 0) { printf("ERR %s:%d %d\n", __FILE__, __LINE__, (int)e_); exit(1);} } while (0)
static cublasLtHandle_t lt; static void *ws; static size_t WS = 32u << 20; static cudaStream_t st;
struct R { float us; std::string cfg; };
static int g_splitk;   /* search split-K counts and reduction schemes too */
static int g_conc;     /* > 0: also time K streams side by side (conc mode) */
#define CONC_MAX 8
static cudaStream_t cst[CONC_MAX];
/* K streams, R back-to-back products each on its own buffers (A[i], B[i],
 * C[i]): us per round of K products, median of 3 */
static float timeit_conc(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                         cublasLtMatrixLayout_t lc, void **A, void **B, void **C, float beta,
                         const cublasLtMatmulAlgo_t *algo, int R)
{
    float alpha = 1; cudaEvent_t e0, e1, ej[CONC_MAX];
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int i = 0; i < g_conc; i++) cudaEventCreateWithFlags(&ej[i], cudaEventDisableTiming);
    std::vector<float> t; int bad = 0;
    for (int trial = 0; trial < 3 && !bad; trial++) {
        cudaEventRecord(e0, st);
        for (int i = 0; i < g_conc; i++) cudaStreamWaitEvent(cst[i], e0, 0);
        for (int r = 0; r < R; r++)
            for (int i = 0; i < g_conc; i++)
                if (cublasLtMatmul(lt, op, &alpha, B[i], la, A[i], lb, &beta, C[i], lc, C[i], lc, algo,
                                   (char *)ws + (size_t)i * (WS / CONC_MAX), WS / CONC_MAX, cst[i]))
                    bad = 1;
        for (int i = 0; i < g_conc; i++) { cudaEventRecord(ej[i], cst[i]); cudaStreamWaitEvent(st, ej[i], 0); }
        cudaEventRecord(e1, st); cudaEventSynchronize(e1);
        if (cudaGetLastError()) bad = 1;
        float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms * 1000 / R);
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    for (int i = 0; i < g_conc; i++) cudaEventDestroy(ej[i]);
    if (bad) return -1;
    std::sort(t.begin(), t.end()); return t[t.size() / 2];
}
static float timeit(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                    const void *A, const void *B, void *C, float beta, const cublasLtMatmulAlgo_t *algo, int reps)
{
    float alpha = 1; cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(e0, st);
        cublasStatus_t x = cublasLtMatmul(lt, op, &alpha, B, la, A, lb, &beta, C, lc, C, lc, algo, ws, WS, st);
        cudaEventRecord(e1, st); cudaEventSynchronize(e1);
        if (x || cudaGetLastError()) { cudaEventDestroy(e0); cudaEventDestroy(e1); return -1; }
        float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms * 1000);
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    std::sort(t.begin(), t.end()); return t[t.size() / 2];
}
static void search(const char *name, int ta, int tb, int M, int N, int K, cudaDataType tab, int lda, int ldb,
                   cudaDataType tc, int ldc, cublasComputeType_t ct, int relu, float beta)
{
    size_t ea = tab == CUDA_R_32F ? 4 : 2, ec = tc == CUDA_R_32F ? 4 : 2;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    void *A, *B, *C; CK(cudaMalloc(&A, na * ea)); CK(cudaMalloc(&B, nb * ea)); CK(cudaMalloc(&C, nc * ec));
    CK(cudaMemset(A, 0, na * ea)); CK(cudaMemset(B, 0, nb * ea)); CK(cudaMemset(C, 0, nc * ec));
    cublasLtMatmulDesc_t op; CK(cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F));
    cublasOperation_t oa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    cublasLtEpilogue_t ep = relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, tab, tb ? K : N, tb ? N : K, ldb));
    CK(cublasLtMatrixLayoutCreate(&lb, tab, ta ? M : K, ta ? K : M, lda));
    CK(cublasLtMatrixLayoutCreate(&lc, tc, N, M, ldc));
    // heuristic #0 for reference
    cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
    size_t wsmax = g_conc ? WS / CONC_MAX : WS;
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax, sizeof wsmax));
    cublasLtMatmulHeuristicResult_t h0; int got = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &h0, &got);
    float href = got ? timeit(op, la, lb, lc, A, B, C, beta, &h0.algo, 9) : -1;
    /* conc: K buffer sets; the heuristic as a member asks it (SM count
     * target 2/K of the SMs, set_share), timed side by side */
    void *CA[CONC_MAX], *CB[CONC_MAX], *CC[CONC_MAX];
    cublasLtMatmulDesc_t opt = NULL;
    float href_conc = -1, htgt_conc = -1;
    if (g_conc) {
        for (int i = 0; i < g_conc; i++) {
            CK(cudaMalloc(&CA[i], na * ea)); CK(cudaMalloc(&CB[i], nb * ea)); CK(cudaMalloc(&CC[i], nc * ec));
            CK(cudaMemset(CA[i], 0, na * ea)); CK(cudaMemset(CB[i], 0, nb * ea)); CK(cudaMemset(CC[i], 0, nc * ec));
        }
        if (got) href_conc = timeit_conc(op, la, lb, lc, CA, CB, CC, beta, &h0.algo, 20);
        int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        int32_t tgt = g_conc > 2 ? 2 * sms / g_conc : 0;
        CK(cublasLtMatmulDescCreate(&opt, ct, CUDA_R_32F));
        CK(cublasLtMatmulDescSetAttribute(opt, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
        CK(cublasLtMatmulDescSetAttribute(opt, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
        CK(cublasLtMatmulDescSetAttribute(opt, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
        if (tgt) CK(cublasLtMatmulDescSetAttribute(opt, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &tgt, sizeof tgt));
        cublasLtMatmulHeuristicResult_t ht; int gt = 0;
        cublasLtMatmulAlgoGetHeuristic(lt, opt, la, lb, lc, lc, pref, 1, &ht, &gt);
        if (gt) htgt_conc = timeit_conc(opt, la, lb, lc, CA, CB, CC, beta, &ht.algo, 20);
        printf("%-40s side by side x%d: heuristic#0 %.1f us a round, with SM target %d: %.1f us a round\n",
               name, g_conc, href_conc, tgt, htgt_conc);
    }
    int ids[128], nid = 0;
    CK(cublasLtMatmulAlgoGetIds(lt, ct, CUDA_R_32F, tab, tab, tc, tc, 128, ids, &nid));
    std::vector<R> all; int tried = 0, valid = 0;
    for (int ii = 0; ii < nid; ii++) {
        cublasLtMatmulAlgo_t algo;
        if (cublasLtMatmulAlgoInit(lt, ct, CUDA_R_32F, tab, tab, tc, tc, ids[ii], &algo)) continue;
        size_t sz = 0;
        int tiles[256], ntile = 0, stages[256], nstage = 0;
        sz = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, sizeof tiles, &sz)) sz = 0;
        ntile = (int)(sz / sizeof(int)); if (ntile > 256) ntile = 256;
        if (!ntile) { tiles[0] = 0; ntile = 1; }
        sz = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, sizeof stages, &sz)) sz = 0;
        nstage = (int)(sz / sizeof(int)); if (nstage > 256) nstage = 256;
        if (!nstage) { stages[0] = 0; nstage = 1; }
        printf("  [%s] id %d: %d tiles, %d stages\n", name, ids[ii], ntile, nstage); fflush(stdout);
        int clusters[] = {0, 2, 3, 4, 5, 6, 8, 11, 12};
        int ncl = sizeof clusters / sizeof clusters[0];
        int has_cluster = 0;
        { uint16_t c0; size_t w; has_cluster = cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c0, sizeof c0, &w) == 0; }
        int splitk_ok = 0, red_mask = 0;
        sz = 0;
        if (g_splitk) {
            cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok, sizeof splitk_ok, &sz);
            cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &red_mask, sizeof red_mask, &sz);
        }
        /* (split-K count, reduction scheme) pairs: (1, none) always */
        int sk[64][2], nsk = 0;
        sk[nsk][0] = 1; sk[nsk][1] = 0; nsk++;
        if (splitk_ok) {
            int counts[] = {2, 3, 4, 6, 8, 12, 16, 24, 32};
            for (int q = 0; q < 9; q++) for (int rs = 1; rs <= 4; rs <<= 1)
                if (red_mask & rs) { sk[nsk][0] = counts[q]; sk[nsk][1] = rs; nsk++; }
        }
        for (int ti = 0; ti < ntile; ti++) for (int si = 0; si < nstage; si++) for (int ci = 0; ci < (has_cluster ? ncl : 1); ci++) for (int ki = 0; ki < nsk; ki++) {
            cublasLtMatmulAlgo_t a = algo;
            if (splitk_ok) {
                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk[ki][0], sizeof(int));
                uint32_t rs = (uint32_t)sk[ki][1];
                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &rs, sizeof rs);
            }
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[ti], sizeof(int));
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[si], sizeof(int));
            if (has_cluster) { uint16_t c = (uint16_t)clusters[ci]; cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c, sizeof c); }
            cublasLtMatmulHeuristicResult_t chk;
            tried++;
            if (cublasLtMatmulAlgoCheck(lt, op, la, lb, lc, lc, &a, &chk)) continue;
            if (chk.workspaceSize > wsmax) continue;
            valid++;
            float us = g_conc ? timeit_conc(op, la, lb, lc, CA, CB, CC, beta, &a, 4)
                              : timeit(op, la, lb, lc, A, B, C, beta, &a, 3);
            if (us < 0) continue;
            char buf[160]; snprintf(buf, sizeof buf, "id %d tile %d stages %d cluster %d splitk %d red %d", ids[ii], tiles[ti], stages[si], has_cluster ? clusters[ci] : -1, sk[ki][0], sk[ki][1]);
            all.push_back({us, buf});
        }
    }
    std::sort(all.begin(), all.end(), [](const R &x, const R &y) { return x.us < y.us; });
    double flop = 2.0 * M * N * K;
    if (g_conc) {
        printf("%-40s side by side x%d: tried %d, valid %d, timed %zu; fastest rounds (4 reps a stream):\n", name, g_conc, tried, valid, all.size());
        for (size_t i = 0; i < all.size() && i < 8; i++) printf("   %8.1f us a round %6.1f TF  %s\n", all[i].us, flop * g_conc / all[i].us * 1e-6, all[i].cfg.c_str());
        for (int i = 0; i < g_conc; i++) { cudaFree(CA[i]); cudaFree(CB[i]); cudaFree(CC[i]); }
        cublasLtMatmulDescDestroy(opt);
        cudaFree(A); cudaFree(B); cudaFree(C);
        return;
    }
    printf("%-40s heuristic#0 %.1f us; tried %d, valid %d, timed %zu; fastest (re-timed, 9 reps):\n", name, href, tried, valid, all.size());
    // re-time the top 8
    for (size_t i = 0; i < all.size() && i < 8; i++) printf("   %8.1f us (3-rep %.1f) %6.1f TF  %s\n", all[i].us, all[i].us, flop / all[i].us * 1e-6, all[i].cfg.c_str());
    fflush(stdout);
    cudaFree(A); cudaFree(B); cudaFree(C);
}
/* The batch-50 bf16 products: E edges, A atoms; bf16 operands as the bf16
 * model stores them (dense rows, ld 300), the weight gradients in fp32. */
static void search_small_bf16(int E, int A)
{
    auto BF = CUDA_R_16BF; auto F = CUDA_R_32F; auto C32 = CUBLAS_COMPUTE_32F;
    search("W_h bf16, bf16 C/D, relu (small)", 0, 0, E, 300, 300, BF, 300, 300, BF, 300, C32, 1, 1);
    search("dMsg bf16 -> bf16 (small)", 0, 1, E, 300, 300, BF, 300, 300, BF, 300, C32, 0, 0);
    search("dW_h bf16 -> fp32 (small)", 1, 0, 300, 300, E, BF, 300, 300, F, 300, C32, 0, 1);
    search("W_o bf16 relu (small)", 0, 0, A, 300, 433, BF, 433, 300, BF, 300, C32, 1, 1);
    search("dW_o bf16 -> fp32 (small)", 1, 0, 433, 300, A, BF, 433, 300, F, 300, C32, 0, 1);
    search("dA bf16 (small)", 0, 1, A, 433, 300, BF, 300, 300, BF, 433, C32, 0, 0);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    printf("start\n");
    CK(cublasLtCreate(&lt)); CK(cudaMalloc(&ws, WS)); CK(cudaStreamCreate(&st));
    auto BF = CUDA_R_16BF; auto F = CUDA_R_32F; auto C32 = CUBLAS_COMPUTE_32F, CT = CUBLAS_COMPUTE_32F_FAST_TF32;
    if (argc > 2 && !strcmp(argv[1], "conc")) {
        g_conc = atoi(argv[2]);
        if (g_conc < 1 || g_conc > CONC_MAX) { printf("conc K: K in 1..%d\n", CONC_MAX); return 2; }
        for (int i = 0; i < g_conc; i++) CK(cudaStreamCreateWithFlags(&cst[i], cudaStreamNonBlocking));
        int E = argc > 3 ? atoi(argv[3]) : 2502, A = argc > 4 ? atoi(argv[4]) : 1179;
        g_splitk = 1;
        search_small_bf16(E, A);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "small")) {
        int E = argc > 2 ? atoi(argv[2]) : 2502, A = argc > 3 ? atoi(argv[3]) : 1179;
        g_splitk = 1;
        search_small_bf16(E, A);
        search("dW_h tf32 (small)", 1, 0, 300, 300, E, F, 300, 300, F, 300, CT, 0, 1);
        /* the same bf16 products with rows padded to 16 bytes (ld 304) */
        search("W_h bf16, bf16 C/D, relu (small, ld 304)", 0, 0, E, 300, 300, BF, 304, 304, BF, 304, C32, 1, 1);
        search("dMsg bf16 -> bf16 (small, ld 304)", 0, 1, E, 300, 300, BF, 304, 304, BF, 304, C32, 0, 0);
        search("dW_h bf16 -> fp32 (small, ld 304)", 1, 0, 300, 300, E, BF, 304, 304, F, 300, C32, 0, 1);
        return 0;
    }
    int E = argc > 1 ? atoi(argv[1]) : 228172;
    search("W_h bf16 ops, fp32 C/D, relu", 0, 0, E, 300, 300, BF, 304, 304, F, 300, C32, 1, 1);
    search("W_h bf16 ops, bf16 C/D, relu", 0, 0, E, 300, 300, BF, 304, 304, BF, 304, C32, 1, 1);
    search("W_h tf32, relu", 0, 0, E, 300, 300, F, 300, 300, F, 300, CT, 1, 1);
    search("dMsg bf16 -> bf16", 0, 1, E, 300, 300, BF, 304, 304, BF, 304, C32, 0, 0);
    search("dMsg bf16 -> fp32", 0, 1, E, 300, 300, BF, 304, 304, F, 300, C32, 0, 0);
    search("dMsg tf32", 0, 1, E, 300, 300, F, 300, 300, F, 300, CT, 0, 0);
    search("dW_h bf16", 1, 0, 300, 300, E, BF, 304, 304, F, 300, C32, 0, 1);
    search("dW_h tf32", 1, 0, 300, 300, E, F, 300, 300, F, 300, CT, 0, 1);
    search("W_h tf32 relu E=2502", 0, 0, 2502, 300, 300, F, 300, 300, F, 300, CT, 1, 1);
    search("W_h bf16 relu E=2502", 0, 0, 2502, 300, 300, BF, 304, 304, F, 300, C32, 1, 1);
    return 0;
}
