/*
 * model.h - the two model families of molprop, exactly as Chemprop v1
 * computes them (../shared/REFERENCE.md section 2), on any backend (ops.h):
 *
 *   MP_MODEL_DMPNN  directed message passing over a batch of molecular graphs
 *                   (W_i, depth-1 updates with W_h, W_o readout, mean / sum /
 *                   norm pooling), optional extra molecule features
 *                   concatenated to the readout, then the FFN head;
 *   MP_MODEL_FFN    the FFN head alone on a dense [n_mols x extra_dim] matrix
 *                   of molecule features (Morgan, RDKit 2D, ...): Chemprop's
 *                   "features only" baselines.
 *
 * A training step:
 *
 *     mp_model_zero_grad(m);
 *     mp_model_forward(m, &batch, extra, batch.n_mols, 1, NULL);
 *     mp_model_loss_backward(m, targets, &loss);   // loss + full backward
 *     mp_model_adam_step(m, lr);
 *
 * Prediction: mp_model_forward(m, &batch, extra, n, 0, out) fills out with
 * raw outputs (logits for classification: the caller applies the sigmoid;
 * standardized values for regression: the caller un-scales; the other
 * heads as heads.h says: mp_head_values turns them into predictions).
 *
 * Parameters, gradients and the two Adam moments each live in one backend
 * allocation of mp_model_n_params(m) elements; mp_model_views names the
 * tensors inside the parameter block (a model file is a header plus that one
 * block).  Every weight matrix is stored [fan_in x fan_out] row-major, i.e.
 * the transpose of torch.nn.Linear.weight, so that one-hot inputs select
 * contiguous rows.
 */
#ifndef MP_MODEL_H
#define MP_MODEL_H

#include "core/core.h"
#include "backend/ops.h"
#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MP_MODEL_DMPNN = 0, MP_MODEL_FFN = 1 } mp_model_kind;

/* The head: what the outputs mean and which losses fit them (heads.h has
 * the output conventions of each).  Chemprop v2.3.1's task types. */
typedef enum {
    MP_MODEL_REGRESSION = 0, MP_MODEL_CLASSIFICATION = 1, MP_MODEL_REGRESSION_MVE,
    MP_MODEL_REGRESSION_EVIDENTIAL, MP_MODEL_REGRESSION_QUANTILE,
    MP_MODEL_CLASSIFICATION_DIRICHLET, MP_MODEL_MULTICLASS, MP_MODEL_MULTICLASS_DIRICHLET,
    MP_MODEL_SPECTRAL, MP_MODEL_TASK_COUNT
} mp_model_task;

typedef struct {
    mp_model_kind  kind;        /* MP_MODEL_DMPNN                                 */
    mp_model_task  task;        /* MP_MODEL_REGRESSION                            */
    int            n_tasks;     /* outputs per molecule (>= 1)                    */
    int            atom_fdim;   /* dmpnn: atom vector length, mass slot included
                                 * (133 for the v1 layout); edge input is +14     */
    int            hidden;      /* 300: message size                              */
    int            depth;       /* 3: message steps (depth-1 W_h updates), >= 1   */
    double         dropout;     /* 0: Chemprop's one dropout probability          */
    int            ffn_layers;  /* 2: Linear layers in the head (>= 1)            */
    int            ffn_hidden;  /* 0 = hidden                                     */
    int            extra_dim;   /* dmpnn: molecule features joined to the readout
                                 * (0 = none); ffn: the input size (>= 1)         */
    mp_aggregation aggregation; /* MP_AGG_MEAN (MP_AGG_ATTENTIVE: a learned score
                                 * per atom, softmax over the molecule)           */
    double         agg_norm;    /* 100: divisor for MP_AGG_NORM                   */
    /* the task and loss (heads.h) */
    int            n_classes;   /* multiclass heads: classes per task (2 .. 64);
                                 * 0 for the others                               */
    mp_loss_kind   loss;        /* MP_LOSS_MSE: the task's default loss
                                 * (mp_model_loss); any other must fit the task
                                 * (mp_head_loss_fits)                            */
    double         loss_lambda; /* 0: evidential / dirichlet regularization       */
    double         loss_eps;    /* 1e-8: evidential                               */
    double         loss_alpha;  /* 0.1: quantile interval                         */
    int            spectra_act; /* MP_SPECTRA_EXP: the spectral head's activation  */
    double         spectra_floor; /* 1e-8: the least intensity (spectral head)   */
    /* the layers (Chemprop's options; the defaults are v1's model) */
    mp_act_kind    activation;  /* MP_ACT_RELU: in the D-MPNN and the FFN         */
    int            atom_messages; /* 0; 1: v1's --atom_messages (dmpnn)           */
    int            undirected;  /* 0; 1: v1's --undirected (dmpnn, bond messages) */
    int            batch_norm;  /* 0; 1: v2's BatchNorm1d on the readout (dmpnn)  */
    /* User-supplied atom and bond columns (dmpnn; the batch's graph store
     * holds them: graph.h atom_x / bond_x).  Chemprop v1.6.1's
     * --atom_descriptors feature: atom_extra_dim columns appended to every
     * atom vector x_v (so to W_i's and W_o's inputs); --atom_descriptors
     * descriptor: atom_desc_dim columns d_v appended to the atom hiddens,
     * h_v <- Dropout(W_ad [h_v ; d_v] + b_ad), W_ad (h+d) x (h+d), so the
     * readout is h + d wide; --bond_features_path: bond_extra_dim columns
     * appended to every bond vector b_uv.  At most one of the two atom
     * modes.  0: none (the model is exactly the one without them). */
    int            atom_extra_dim;
    int            atom_desc_dim;
    int            bond_extra_dim;
} mp_model_config;

/* Chemprop v1's defaults: D-MPNN, regression (mse), 1 task, atom_fdim 133,
 * hidden 300, depth 3, dropout 0, 2 FFN layers of 300, no extra features,
 * mean readout, ReLU, bond messages, no batch norm. */
mp_model_config mp_model_config_default(void);

/* The loss a model of config c trains with: c->loss, or the task's default
 * (mp_head_default_loss: bce for classification, ...) when c->loss is
 * MP_LOSS_MSE on a task other than plain regression (the default config
 * stays valid for every task type). */
mp_loss_kind mp_model_loss(const mp_model_config *c);

/* Raw outputs per molecule: n_tasks times the head's outputs per task
 * (heads.h). */
int mp_model_n_outputs(const mp_model_config *c);

typedef struct mp_model mp_model;

/* One named tensor of the parameter block. */
typedef struct {
    const char *name;    /* "W_i", "W_h", "W_o", "b_o", "ffn0.W", "ffn0.b", ... */
    size_t      offset;  /* elements from the start of the block               */
    int         rows;    /* a matrix is rows x cols; a vector has rows == 1    */
    int         cols;
} mp_param_view;

/*
 * Builds a model on backend `b` (which must outlive it) with parameters drawn
 * from mp_rng(seed, MP_MODEL_STREAM_INIT): Xavier-normal weights (std =
 * sqrt(2 / (fan_in + fan_out))) in view order, zero biases; float values, so
 * the same seed gives the same numbers on every backend.  Dropout keys come
 * from mp_rng(seed, MP_MODEL_STREAM_DROPOUT).  Fails with MP_ERR_ARG naming
 * the bad field of a config that does not make sense, or MP_ERR_NOMEM.
 */
#define MP_MODEL_STREAM_INIT    101
#define MP_MODEL_STREAM_DROPOUT 102
mp_status mp_model_create(mp_model **out, const mp_model_config *cfg, mp_backend *b,
                          uint64_t seed);
void      mp_model_free(mp_model *m);
/*
 * Moves model m onto backend b, another instance of the one it was built on
 * (the same name: the same device, element and storage types), so that
 * threads each with their own backend (stream, handles) can train the
 * members of one ensemble side by side.  Its buffers stay where they are
 * (device memory of one process belongs to no instance); the caller syncs
 * the old backend first, so nothing queued there is pending.  MP_ERR_ARG
 * for a backend of another name.
 */
mp_status mp_model_rebind(mp_model *m, mp_backend *b);

/*
 * Sizes the activation buffers (one allocation) for batches of up to
 * max_mols molecules, max_atoms atoms and max_edges directed edges.
 * Optional: a forward pass that needs more grows them itself, but a trainer
 * should reserve once (mp_graphs_batch_bounds) so no step allocates.
 * Growing discards the saved forward state.  Size: about (2 depth + 3) h
 * elements per directed edge plus 5 h per atom (D-MPNN), i.e. ~11 KB per
 * edge at the defaults: ~18 MB for a batch of 50 ESOL molecules, so predict
 * in chunks of a few hundred molecules rather than all at once.
 */
mp_status mp_model_reserve(mp_model *m, int32_t max_mols, int32_t max_atoms,
                           int32_t max_edges);

/*
 * Forward pass over n_mols molecules.  batch: the graphs (dmpnn; must hold
 * exactly n_mols molecules, e.g. from mp_graphs_select; NULL for ffn).
 * extra: [n_mols x extra_dim] floats, row-major (required when extra_dim >
 * 0; the trainer standardizes them).  training: 1 applies dropout and keeps
 * what backward needs; 0 is inference.  out: [n_mols x n_outputs] raw outputs
 * (mp_model_n_outputs; may be NULL during training).  A batch whose graph does not add up (index
 * out of range, wrong atom_fdim, a hot slot outside the layout) is refused
 * with MP_ERR_FORMAT naming the molecule, before anything is computed.
 */
mp_status mp_model_forward(mp_model *m, const mp_graphs *batch, const float *extra,
                           int32_t n_mols, int training, float *out);

/*
 * Loss and backward pass for the last forward: targets [n_mols x n_tasks]
 * with NaN for a missing label (a class index for the multiclass heads).
 * *loss = Chemprop's batch loss of the model's loss kind (ops.h
 * mp_loss_spec: sum(l * mask) / sum(mask) for the elementwise ones; 0 when
 * no label is present).  Gradients are ADDED to the gradient block; call
 * mp_model_zero_grad before each step.  Fails when no forward preceded it.
 */
mp_status mp_model_loss_backward(mp_model *m, const float *targets, double *loss);

/* The same with per-molecule sample weights (weights [n_mols], NULL: 1) and
 * inequality flags (ineq [n_mols x n_tasks] of MP_INEQ_*, NULL: none; read
 * by the bounded losses). */
mp_status mp_model_loss_backward_ex(mp_model *m, const float *targets, const float *weights,
                                    const uint8_t *ineq, double *loss);

/* Per-task loss weights (Chemprop's --task-weights: w [n_tasks], taken as
 * given; NULL: all 1).  MP_ERR_ARG for a negative or non-finite weight. */
mp_status mp_model_set_task_weights(mp_model *m, const float *w);

/* Gradient clipping before every Adam step (Chemprop's --grad-clip: the
 * global norm over all parameters, ops.h clip_norm); 0 turns it off. */
mp_status mp_model_set_grad_clip(mp_model *m, double max_norm);

/* Sets every gradient to 0. */
void      mp_model_zero_grad(mp_model *m);

/*
 * Transfer learning: freezes the encoder (D-MPNN: W_i, W_h, W_o, b_o) and /
 * or the first ffn_layers Linear layers of the head.  Their gradients are
 * zeroed after every backward (mp_model_loss_backward, the bound step), so
 * their Adam moments stay 0 and Adam leaves them bit for bit as they are.
 * They still compute as in training, dropout included (as Chemprop, whose
 * requires_grad(False) does not leave training mode).  MP_ERR_ARG for an
 * encoder of an FFN model or more layers than the head has.
 */
mp_status mp_model_set_frozen(mp_model *m, int encoder, int ffn_layers);

/* One Adam step (beta 0.9 / 0.999, eps 1e-8, no weight decay: Chemprop v1's
 * torch.optim.Adam) with learning rate lr; the step counter is the model's. */
mp_status mp_model_adam_step(mp_model *m, double lr);

/*
 * Device-resident steps (resident.c drives them).  A batch already on the
 * device, of FIXED sizes, in buffers the caller owns: the graph arrays of
 * n_mols molecules, n_atoms atoms and n_edges directed edges (the layout of
 * mp_graphs, without mol_edge), extra [n_mols x extra_dim] (model element
 * type; the FFN model's input), target [n_mols x n_tasks] (0 where missing)
 * and mask [n_mols x n_tasks] (1 = labelled).  Padding rows have mask 0 and
 * so add exactly nothing to the loss or the gradients.
 */
typedef struct {
    int32_t  n_mols, n_atoms, n_edges;
    int16_t *atom_hot;
    float   *atom_mass;
    int8_t  *bond_hot;
    int32_t *edge_src, *edge_dst, *in_start, *in_edge, *mol_atom;
    void    *extra, *target;
    uint8_t *mask;
    void    *weight;   /* [n_mols] sample weights (element type), or NULL     */
    uint8_t *ineq;     /* [n_mols x n_tasks] MP_INEQ_* flags, or NULL          */
    /* the user columns (model element type; required when the model takes
     * them, model.h atom_extra_dim ...): atom_x [n_atoms x (atom_extra_dim +
     * atom_desc_dim)], bond_x [n_edges x bond_extra_dim], the bond's row on
     * both of its edges */
    void    *atom_x, *bond_x;
} mp_dev_batch;

/* Points the model's inputs at `bt` (reserving activations for its sizes
 * first).  Stays bound until mp_model_forward or a reserve that grows the
 * activations (both unbind), or mp_model_unbind.  The batch is not checked:
 * the caller built it from checked graphs (mp_batch_check). */
mp_status mp_model_bind(mp_model *m, const mp_dev_batch *bt);
void      mp_model_unbind(mp_model *m);

/*
 * Inference on a batch already on the device: the forward pass (no dropout)
 * over bt's graph arrays (edge_dst, target and mask are not read; extra as
 * the model takes it: [n_mols x extra_dim] of the model's element type),
 * queued on the backend and nothing else (no upload, download or sync), so
 * a caller can overlap it with the copies of the next batch.  The raw
 * outputs [n_mols x n_outputs] are at mp_model_block_ptr(m, MP_BLOCK_OUTPUT)
 * once the backend's queue reaches them.  Bitwise the outputs of
 * mp_model_forward(training 0) on the same graphs.  Leaves the model bound
 * to bt (not for backward).  Reserves activations first when bt is larger
 * than the reserve: reserve up front (mp_model_reserve) so that no call
 * allocates.  bt is not checked: the caller checked the graphs
 * (mp_batch_check's rules) before uploading them.
 */
mp_status mp_model_forward_dev(mp_model *m, const mp_dev_batch *bt);

/*
 * mp_model_forward_dev with every dropout layer of the model (message
 * steps, readout, the head's input and hidden layers) active at
 * probability p, whatever the model was trained with: one Monte Carlo
 * dropout pass (Gal & Ghahramani 2016; Chemprop's DropoutEstimator).  The
 * layers' keys come from mp_rng(seed, MP_MODEL_STREAM_DROPOUT), drawn in
 * layer order, so a pass is a pure function of (batch, p, seed) on every
 * backend.  Changes the model's dropout stream (training afterwards draws
 * from the reseeded stream).  MP_ERR_ARG for p outside [0, 1).
 */
mp_status mp_model_forward_dev_dropout(mp_model *m, const mp_dev_batch *bt, double p,
                                       uint64_t seed);

/*
 * One whole training step on the bound batch, queued on the backend and
 * nothing else (no upload, download, sync or allocation, so it can be
 * captured in a CUDA graph and replayed): zero the gradients, forward with
 * dropout, masked loss, backward, adam_sched with the scalars sched[2k],
 * sched[2k+1] (k = k_dev[0]), then losses[k] = the loss and k_dev[0] += 1.
 * Dropout keys are drawn on the host when the step is issued (a replayed
 * capture would reuse them), unless a device key source is set (resident.c,
 * model_impl.h: drop_keys), whose keys the step reads at index k.  The host
 * Adam counter is not advanced: call
 * mp_model_add_adam_steps with the number of steps run.
 */
void mp_model_step_bound(mp_model *m, const float *sched, int32_t *k_dev, void *losses);

/* The host Adam step counter (steps taken so far), and advancing it for
 * steps run on the device. */
long mp_model_adam_steps(const mp_model *m);
void mp_model_add_adam_steps(mp_model *m, long n);

/* The parameter block and its views. */
size_t               mp_model_n_params(const mp_model *m);
/* The parameters a model of cfg holds, without building it (0 for a config
 * mp_model_create refuses; the error is then set). */
uint64_t             mp_model_config_n_params(const mp_model_config *cfg);
const mp_param_view *mp_model_views(const mp_model *m, int *n_views);
const mp_model_config *mp_model_get_config(const mp_model *m);
/* Copies the n_params parameters (or gradients) into host floats. */
mp_status mp_model_get_params(const mp_model *m, float *dst);
mp_status mp_model_get_grads(const mp_model *m, float *dst);
/* Replaces the n_params gradients (data-parallel training: the ranks' sum). */
mp_status mp_model_set_grads(mp_model *m, const float *src);
/* Where the backend sums over MPI ranks on the device (ops.h rank_sum):
 * the gradients := sum over the ranks of w[r] * rank r's, *done = 1;
 * otherwise nothing and *done = 0 (the caller goes through the host). */
mp_status mp_model_rank_sum_grads(mp_model *m, const float *w, int *done);
/* Loads n_params parameters from host floats (e.g. read from a model file).
 * Leaves gradients and Adam state as they are. */
mp_status mp_model_set_params(mp_model *m, const float *src);

/*
 * The learned molecule vectors of the last forward (training 0), as host
 * floats [n_mols x *width]: layer 0 the encoding the head reads (D-MPNN
 * readout ++ molecule features; an FFN model's scaled input), layer 1 the
 * output of the head's last hidden layer (after its ReLU).  Chemprop v2's
 * `fingerprint --ffn-block-index 0 / -1`.  dst NULL: only *width.
 * MP_ERR_ARG when the head has no hidden layer (ffn_layers 1) or no
 * forward preceded.
 */
mp_status mp_model_get_encoding(mp_model *m, int layer, float *dst, int *width);

/* Test and backend hooks: the device buffers behind the model (host-readable
 * when b->host_memory), in the backend's element type. */
typedef enum {
    MP_BLOCK_PARAMS = 0, MP_BLOCK_GRADS, MP_BLOCK_ADAM_M, MP_BLOCK_ADAM_V,
    MP_BLOCK_OUTPUT      /* [n_mols x n_outputs] of the last forward */
} mp_model_block;
void *mp_model_block_ptr(mp_model *m, mp_model_block which);

#ifdef __cplusplus
}
#endif
#endif /* MP_MODEL_H */
