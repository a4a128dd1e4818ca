/*
 * model_impl.h - the inside of mp_model, shared by model.c (life cycle,
 * parameters, loss, Adam), dmpnn.c (the message-passing encoder), ffn.c (the
 * head) and batch.c (checking and uploading a graph batch).  Not part of the
 * public API.
 */
#ifndef MP_MODEL_IMPL_H
#define MP_MODEL_IMPL_H

#include "models/model.h"

#define MP_MAX_DEPTH      32
#define MP_MAX_FFN_LAYERS 16
#define MP_MAX_VIEWS      (17 + 2 * MP_MAX_FFN_LAYERS)
#define MP_MAX_DROP       (MP_MAX_DEPTH + MP_MAX_FFN_LAYERS + 1)

/* A graph batch on the device (pointers into the model's arena). */
typedef struct {
    int32_t  n_mols, n_atoms, n_edges;
    int16_t *atom_hot;
    float   *atom_mass;
    int8_t  *bond_hot;
    int32_t *edge_src, *edge_dst, *in_start, *in_edge, *mol_atom;
} mp_dev_graph;

/* Activation buffers, all views into one backend allocation sized by
 * mp_model_reserve.  Shapes: E = edges, A = atoms, B = molecules, h = hidden,
 * F = ffn_hidden, I = head input, W = max(I, F, n_tasks). */
typedef struct {
    /* encoder, edges [E x h] */
    void *h0;                       /* W_i input, pre-activation           */
    void *m[MP_MAX_DEPTH];          /* messages after each step            */
    void *msg[MP_MAX_DEPTH];        /* msg[t], t >= 1: input of W_h        */
    void *dh0, *dm, *dmsg;          /* their gradients                     */
    /* encoder, atoms [A x h] */
    void *as;                       /* W_i atom part, then message sums    */
    void *a;                        /* incoming messages, input of W_o     */
    void *ho;                       /* atom hiddens after ReLU / dropout   */
    void *dho, *da;
    /* The operands of the products in st_op storage (model.c's layout):
     * msg[t], a and dmsg are allocated so; where st_op is not the element
     * type the products also read copies written beside the element-type
     * values: dz_op (dZ_t, written by the backward gathers; NULL: the
     * products read dh0 / dm themselves), dho_op (dho, or dho itself), and
     * wh_op / wo_op (W_h and W_o's message rows: the parameters themselves,
     * or a copy converted at the start of every forward, whcopy) */
    void *dz_op, *dho_op, *wh_op, *wo_op, *whcopy;
    /* The unfused encoder (encoder.c; every buffer of the element type):
     * pre-activations of the steps and of the atom hiddens, dZ, a scratch
     * of [E x h] (undirected: the symmetrized messages; atom messages: the
     * bond part per edge) and the atom messages' residual H0 + bond part */
    void *z[MP_MAX_DEPTH], *hop, *dz, *etmp, *r;
    /* readout (readout.c): the pooled vectors before batch norm [B x h] and
     * their gradient, the batch statistics [2 x h]; attentive: the score,
     * the weights and the score's gradient per atom [A] */
    void *xp, *dxp, *bn_save, *score, *alpha, *dscore;
    /* the user atom / bond columns (graph.h; element type): xa [A x da]
     * (either mode), xb [E x db] (the bond's row on both its edges);
     * descriptor mode: hd = [h_v ; d_v] and hdo = its W_ad output after
     * dropout [A x hr], their gradients dhd, dhdo.  ro / dro: the atom
     * matrix the readout pools (ho, or hdo) and its gradient (dho, dhdo),
     * hr columns wide */
    void *xa, *xb, *hd, *hdo, *dhd, *dhdo, *ro, *dro;
    /* head, molecules */
    void *hp[MP_MAX_FFN_LAYERS];    /* [B x F] hidden pre-activations (not ReLU) */
    void *x0;                       /* [B x I] readout ++ extra features   */
    void *xd0;                      /* [B x I] after the input dropout     */
    void *hl[MP_MAX_FFN_LAYERS];    /* [B x F] hidden layers, post ReLU    */
    void *out;                      /* [B x n_tasks]                       */
    void *g0, *g1;                  /* [B x W] gradient ping-pong          */
    void *target;                   /* [B x n_tasks]                       */
    void *extra;                    /* [B x extra_dim] staging (dmpnn)     */
    void *loss;                     /* 1 element                           */
    uint8_t *mask;                  /* [B x n_tasks]                       */
    void *wbuf;                     /* [B] sample weights (host path)      */
    uint8_t *ibuf;                  /* [B x n_tasks] inequality flags      */
    void *weight;                   /* the step's sample weights, or NULL  */
    uint8_t *ineq;                  /* the step's inequality flags, or NULL */
    mp_dev_graph g;
} mp_acts;

struct mp_model {
    mp_model_config cfg;
    mp_backend *b;
    size_t esize;
    /* Storage of the D-MPNN's activations, decided once from the backend
     * (b->act_st): st_op for the operands of the big products, st_m for H0
     * and the messages M_t (st_op without dropout, else the element type:
     * a model with dropout keeps M_t as it was before bf16 storage, so its
     * bits did not move) */
    mp_stype st_op, st_m;
    int    h, ffn_hidden, in_dim, n_layers;
    int    hr;                      /* readout width: h + atom_desc_dim     */
    int    n_out;                   /* raw outputs per molecule (heads.h)  */
    /* 1: the encoder runs its unfused form (encoder.c: an activation other
     * than ReLU, undirected or atom messages; fp32 storage), the head its
     * own (an activation other than ReLU) */
    int    generic, ffn_generic;

    /* parameters: offsets in elements into each of the four blocks */
    size_t n_params;
    int    n_views;
    mp_param_view views[MP_MAX_VIEWS];
    char   view_names[MP_MAX_VIEWS][24];
    size_t off_wi, off_wh, off_wo, off_bo;
    size_t off_fw[MP_MAX_FFN_LAYERS], off_fb[MP_MAX_FFN_LAYERS];
    /* the optional views: attention weights [h x 1], batch norm's gamma,
     * beta, running mean and variance [1 x h] each (consecutive), the PReLU
     * slopes of the encoder and the head (1 x 1) */
    size_t off_attn, off_bn, off_prelu_enc, off_prelu_ffn;
    /* the user columns' weights (cfg atom_extra_dim ...; 0 when absent):
     * W_i's extra atom rows [da x h] and extra bond rows [db x h] (with atom
     * messages the bond rows are W_h's), W_o's extra atom rows [da x h],
     * the descriptor layer W_ad [hr x hr] and b_ad [1 x hr] */
    size_t off_wi_xa, off_wi_xb, off_wo_xa, off_wad, off_bad;
    /* Padded width (model_pad.c): a wide fused-path model whose hidden size is
     * not a multiple of the backend's row_align (ops.h) runs with h rounded
     * up, the
     * extra units' weights zero (so they stay zero: their outputs, hence
     * gradients, are exact zeros).  Then h, n_params, views and the off_*
     * are the padded layout the ops see, and h_log, n_log and lviews the
     * one the API shows (model files, transfer, get/set_params); view i's
     * padding rows sit at its logical row pad_at[i] (its end, or the
     * readout's end in ffn0.W, before the molecule features). */
    int    padded, h_log;
    size_t n_log;
    mp_param_view lviews[MP_MAX_VIEWS];
    int    pad_at[MP_MAX_VIEWS];
    void  *params, *grads, *adam_m, *adam_v;
    long   adam_t;
    /* Frozen parameters (mp_model_set_frozen): element ranges [lo, hi) of
     * the block whose gradients are zeroed before every Adam step */
    int    n_frozen;
    size_t frozen_lo[2], frozen_hi[2];
    mp_rng drop_rng;
    /* the loss's task weights (device, n_tasks; NULL: none), gradient
     * clipping (0: off) and the norm it measured (device, 1 element) */
    void  *task_w;
    double grad_clip;
    void  *gnorm;
    /* keys of the unfused forms' dropout layers, kept for their backward
     * (dropout.c numbering; 0 when keyed) */
    uint64_t drop_key[MP_MAX_DROP];
    /* Device key source of the dropout layers (set by resident.c around the
     * steps it issues; NULL: keys are drawn from drop_rng as ops are issued):
     * layer l of the step at device index k uses drop_keys[k * n + l],
     * n = mp_model_drop_layers, k = drop_k[0] (mp_model_step_bound sets it). */
    const uint64_t *drop_keys;
    const int32_t  *drop_k;

    /* activations */
    void  *arena;
    int32_t cap_mols, cap_atoms, cap_edges;
    mp_acts a;

    int    bound;                   /* inputs point at an mp_dev_batch     */
    void  *bound_extra;             /* its extra (the FFN model's input)   */

    /* the last forward */
    int32_t n_mols;
    int     have_forward;
    double  p;                      /* dropout applied (0 when not training) */
    uint64_t key_in;                /* key of the head's input dropout      */

    /* host staging for conversions and targets */
    void  *host;
    size_t host_bytes;
};

/* Element i of a device buffer of the model's type. */
#define MP_AT(m, p, i) ((void *)((char *)(p) + (size_t)(i) * (m)->esize))

/* batch.c */
mp_status mp_batch_check(const mp_graphs *g, int atom_fdim);
mp_status mp_batch_upload(mp_backend *b, mp_dev_graph *d, const mp_graphs *g);
/* The user columns of a host batch: its widths against the model's
 * (MP_ERR_ARG naming the option), and their upload into m->a.xa / xb in
 * the element type (xb: a row per directed edge); whether a device batch
 * carries the columns the model takes (1 also when it takes none). */
mp_status mp_batch_check_columns(const mp_model *m, const mp_graphs *g);
mp_status mp_batch_upload_columns(mp_model *m, const mp_graphs *g);
int       mp_batch_has_columns(const mp_model *m, const mp_dev_batch *bt);

/* dmpnn.c: encoder over the uploaded batch m->a.g, writing m->a.x0[:, 0:h]
 * (row stride in_dim); backward from the head's gradient g (row stride
 * in_dim), adding into m->grads.  The unfused form (m->generic) is
 * encoder.c's, which these call. */
void mp_dmpnn_forward(mp_model *m, int training);
void mp_dmpnn_backward(mp_model *m, const void *dx0);
void mp_encoder_forward(mp_model *m, int training);
void mp_encoder_backward(mp_model *m, const void *dx0);

/* readout.c: the atom hiddens m->a.ho into the head's input x0 (pooling or
 * attention, batch norm, the extra features), and back: the gradient of
 * ho into m->a.dho from dx0 (row stride in_dim). */
void mp_readout_forward(mp_model *m, int training);
/* encoder.c: the atom descriptor layer (cfg atom_desc_dim > 0) from ho and
 * the batch's atom columns into hdo, and back from dhdo into dho. */
void mp_atomdesc_forward(mp_model *m);
void mp_atomdesc_backward(mp_model *m);
void mp_readout_backward(mp_model *m, const void *dx0);

/* ffn.c: the head over m->a.x0 (n_mols rows) into m->a.out; backward from
 * m->a.g0 holding d loss / d out, adding into m->grads.  Returns the
 * gradient of the head input's first `want_cols` columns (row stride
 * in_dim), or NULL when want_cols == 0. */
void        mp_ffn_forward(mp_model *m, int training);
const void *mp_ffn_backward(mp_model *m, int want_cols);

/* dropout.c: the model's dropout layers, numbered in forward order (D-MPNN:
 * message steps 0 .. depth-2, readout depth-1, the atom descriptor layer
 * depth when the model has one; then the head: its input,
 * then each hidden layer).  Eager (host-loop) steps draw each layer's key
 * from drop_rng as it is issued; a bound step with a device key source
 * (drop_keys) passes the ops device keys instead (ops.h mp_key), which the
 * host drew in the same order beforehand.  p == 0: a plain ReLU / nothing,
 * no draw.  x and y of storage st. */
int      mp_model_drop_layers(const mp_model *m);      /* keys per step (0: no dropout) */
/* The number of the head's input dropout: after the encoder's layers (the
 * message steps, the readout, the atom descriptor layer when there is one,
 * layer depth). */
static inline int mp_model_head_layer0(const mp_model *m)
{
    return m->cfg.kind == MP_MODEL_DMPNN ? m->cfg.depth + (m->cfg.atom_desc_dim > 0) : 0;
}
void     mp_model_relu_dropout(mp_model *m, void *y, const void *x, mp_stype st, size_t n,
                               double p, int layer);
/* Returns the key drawn (eager; 0 when keyed), for mp_model_dropout_backward. */
uint64_t mp_model_dropout(mp_model *m, void *y, const void *x, int32_t n_rows, int n_cols,
                          int ld, double p, int layer);
void     mp_model_dropout_backward(mp_model *m, void *dx, const void *dy, int32_t n_rows,
                                   int n_cols, int ld, double p, int layer, uint64_t key);

/* model.c: host staging buffer of at least `bytes`. */
void *mp_model_host(mp_model *m, size_t bytes);
/* model.c: n host floats to and from device elements of the model's type. */
mp_status mp_model_upload_floats(mp_model *m, void *dst, const float *src, size_t n);
mp_status mp_model_download_floats(mp_model *m, float *dst, const void *src, size_t n);
/* model.c: the parameter views at the model's shapes (m->h, m->hr, ...), in
 * block order; each view's initial kind in inits[], a fan-in in fans[] where
 * it is not the view's own rows (0). */
void mp_model_layout_params(mp_model *m, unsigned char *inits, int *fans);

/* model_pad.c: the padded width.  pad_width lays the views out again at the
 * width rounded up to b->row_align where the model is to be padded (sets
 * m->padded; nothing otherwise); pad_params writes logical parameters (lviews)
 * into the padded layout, zeros in the padding. */
void mp_model_pad_width(mp_model *m, const mp_backend *b);
void mp_model_pad_params(const mp_model *m, const float *lg, float *pd);
/* model_pad.c: a parameter-sized block of the model (params, grads, adam_m,
 * adam_v) to and from mp_model_n_params host floats in the API's layout
 * (a padded model's padding dropped / written as zeros). */
mp_status mp_model_block_get(const mp_model *m, const void *blk, float *dst);
mp_status mp_model_block_set(mp_model *m, void *blk, const float *src);

#endif /* MP_MODEL_IMPL_H */
