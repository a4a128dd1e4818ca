/*
 * graph_cuda.cu - capturing a sequence of the cuda backend's ops into a CUDA
 * graph and replaying it (gpu.h: mp_cuda_graph_*).  Capture is thread-local
 * on the backend's stream; ops that cannot be captured (uploads, downloads,
 * syncs) fail the capture with a message instead of breaking it.
 */
#include "gpu/cuda_ctx.cuh"

/* ===================================================================== */
/* CUDA graphs                                                            */
/* ===================================================================== */

struct mp_cuda_graph {
    cudaGraph_t     graph;
    cudaGraphExec_t exec;
};

extern "C" mp_status mp_cuda_graph_begin(mp_backend *b)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c)
        return mp_error_set(MP_ERR_ARG, "mp_cuda_graph_begin: not a cuda backend");
    if (c->capturing)
        return mp_error_set(MP_ERR_ARG, "mp_cuda_graph_begin: a capture is already running");
    if (!usable(c))
        return report(c);
    /* Thread-local mode: other threads' stream work does not break our
     * capture, ours that cannot be captured does; the gate keeps other
     * threads' device-synchronizing calls (cudaFree ...) out until the end. */
    mp_cu_gate_enter();
    if (!CUDA_OK(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal))) {
        mp_cu_gate_leave();
        return report(c);
    }
    c->capturing = 1;
    return MP_OK;
}

extern "C" mp_status mp_cuda_graph_end(mp_backend *b, mp_cuda_graph **out)
{
    *out = NULL;
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c)
        return mp_error_set(MP_ERR_ARG, "mp_cuda_graph_end: not a cuda backend");
    if (!c->capturing)
        return mp_error_set(MP_ERR_ARG, "mp_cuda_graph_end: no capture is running");
    c->capturing = 0;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    mp_cu_gate_leave();
    if (e != cudaSuccess || c->err != MP_OK) {
        if (graph)
            cudaGraphDestroy(graph);
        cuda_ok(c, e, "cudaStreamEndCapture", __FILE__, __LINE__);
        return report(c);
    }
    cudaGraphExec_t exec = NULL;
    if (!CUDA_OK(c, cudaGraphInstantiate(&exec, graph, 0))) {
        cudaGraphDestroy(graph);
        return report(c);
    }
    mp_cuda_graph *g = (mp_cuda_graph *)mp_malloc(sizeof *g);
    if (!g) {
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        return mp_error_set(MP_ERR_NOMEM, "mp_cuda_graph_end: out of host memory");
    }
    g->graph = graph;
    g->exec = exec;
    *out = g;
    return MP_OK;
}

extern "C" mp_status mp_cuda_graph_launch(mp_backend *b, mp_cuda_graph *g)
{
    gpu_ctx *c = mp_cu_ctx(b);
    if (!c || !g)
        return mp_error_set(MP_ERR_ARG, "mp_cuda_graph_launch: not a cuda backend or no graph");
    if (c->capturing)
        return mp_error_set(MP_ERR_ARG, "mp_cuda_graph_launch: a capture is running");
    if (!usable(c))
        return report(c);
    CUDA_OK(c, cudaGraphLaunch(g->exec, c->stream));
    return report(c);
}

extern "C" void mp_cuda_graph_free(mp_cuda_graph *g)
{
    if (!g)
        return;
    mp_cu_gate_enter();
    (void)cudaGraphExecDestroy(g->exec);
    (void)cudaGraphDestroy(g->graph);
    (void)cudaGetLastError();
    mp_cu_gate_leave();
    mp_free(g);
}

/* The seam's capture ops (ops.h) are these; an mp_capture is an
 * mp_cuda_graph. */
static mp_status cu_capture_end(mp_backend *b, mp_capture **out)
{
    return mp_cuda_graph_end(b, (mp_cuda_graph **)out);
}

static mp_status cu_replay(mp_backend *b, mp_capture *g)
{
    return mp_cuda_graph_launch(b, (mp_cuda_graph *)g);
}

static void cu_capture_free(mp_backend *b, mp_capture *g)
{
    (void)b;
    mp_cuda_graph_free((mp_cuda_graph *)g);
}

void mp_cu_capture_ops(mp_backend *b)
{
    b->capture_begin = mp_cuda_graph_begin;
    b->capture_end = cu_capture_end;
    b->replay = cu_replay;
    b->capture_free = cu_capture_free;
}
