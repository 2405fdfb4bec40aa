/* glia/layer.h — the layer plugin interface: creation from a section, shape inference,
 * forward and backward. Not the graph: the core wires layers and runs them in order. */
#ifndef GLIA_LAYER_H
#define GLIA_LAYER_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include "config.h"
#include "tensor.h"
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Gradient contract (layer-level autograd)
 * ----------------------------------------
 * The core runs `backward` of each layer in reverse topological order.
 *  - Input gradients: a layer WRITES (=) din[i] unless din_accumulate[i] is true, in which
 *    case it ADDS (+=). The core asks for accumulation when the same tensor feeds several
 *    layers and another consumer already wrote its gradient. din[i] == NULL means that input
 *    needs no gradient (the data batch, labels): skip it.
 *  - Parameter gradients: a layer ADDS (+=) into params[i].grad unless params[i].grad_unset
 *    is true, in which case it WRITES (=). After the step the core marks every gradient unset
 *    again instead of zeroing it ("set to none": no memset; the first writer writes).
 *    glia_param_beta(p) gives the GEMM beta (0 or 1) that honours this.
 *  - Forward in eval mode (train == false) must not keep anything for backward.
 *  - Lifetimes: the inputs and the output of a training forward are left untouched until that
 *    layer's backward has run (it may read them there), except what its kernel's GLIA_KERNEL_BWD_NO_INPUT /
 *    _NO_OUTPUT flags say backward does not read. Everything else lives only during the
 *    call: the output gradient and the input gradients of a backward, and the tensors of an
 *    eval-mode forward, share memory with other layers' tensors at other moments (the core
 *    plans that memory), so a layer keeps no pointer to them.
 *  - Recomputation: with activation checkpointing the core may run a layer's training
 *    forward a second time, with `recompute` set, during backward (before the backward of the
 *    last layer of its segment, and so before its own), on the same input values and seed; the
 *    output must come out the same (what backward reads is what this second forward kept). A
 *    layer whose training forward changes lasting state (buffers such as running statistics)
 *    leaves it alone when `recompute` is set.
 */

/* How the core initializes a parameter (from the seeded RNG). */
enum glia_init_kind {
    GLIA_INIT_ZEROS = 0,
    GLIA_INIT_CONST,      /* every element = a */
    GLIA_INIT_UNIFORM,    /* U(-a, a) */
    GLIA_INIT_NORMAL      /* N(0, a^2) */
};

struct glia_param_init {
    enum glia_init_kind kind;
    double a;
};

struct glia_param {
    const char *name;             /* "weight" (owned by the core) */
    struct glia_shape shape;
    struct glia_param_init init;
    bool decay;                   /* weight decay applies (default true) */
    struct glia_tensor *value;    /* view into the weight arena (owned by the core) */
    struct glia_tensor *grad;     /* view into the gradient arena (owned by the core) */
    bool grad_unset;              /* see the contract above */
};

static inline float glia_param_beta(const struct glia_param *p) { return p->grad_unset ? 0.0f : 1.0f; }

struct glia_layer_type;
struct glia_kernel;
struct glia_comm;

/* A layer instance. The core owns it; its type owns `attrs`, its kernel owns `state`. The core
 * may move this struct after `create` (graph passes drop layers and the others move up): every
 * call gets it anew, and a plugin keeps no pointer to it, only to what attrs and state hold. */
struct glia_layer {
    const char *name;                    /* section name (borrowed) */
    const struct glia_layer_type *type;  /* what it computes (borrowed) */
    const struct glia_kernel *kernel;    /* how, on which device (borrowed) */
    struct glia_context *ctx;            /* (borrowed) */
    struct glia_backend *backend;        /* device it runs on (borrowed) */
    void *attrs;                         /* the type's: type->attrs_size zeroed bytes the core
                                            allocates before create and frees after destroy;
                                            what create read from the section. Kernels read it
                                            (glia's own types: the headers in glia/types) and never write it */
    void *state;                         /* the kernel's: kernel->state_size zeroed bytes the core
                                            allocates before prepare and frees after the kernel's
                                            destroy (NULL when state_size is 0) */
    int n_params;
    struct glia_param *params;           /* declared with glia_layer_add_param (owned by core) */
    int n_buffers;
    struct glia_param *buffers;          /* state that is not trained (BatchNorm's running
                                            statistics): glia_layer_add_buffer; grad is NULL */
    struct glia_comm *comm;              /* the ranks this layer's batch is split over when the
                                            model trains data-parallel (SyncBatchNorm exchanges
                                            statistics through it); NULL otherwise (borrowed) */
};

/* Declare a parameter during `create`. Storage is assigned later by the core, in a flat
 * arena; until then value/grad are NULL. Returns its index in l->params through *index. */
glia_status glia_layer_add_param(struct glia_layer *l, const char *name, const struct glia_shape *shape,
                                 struct glia_param_init init, int *index);

/* Declare a buffer during `create`: state the layer updates itself (running statistics),
 * initialized like a parameter, stored in its own arena, saved with the weights, never given
 * to the optimizer. value is assigned later by the core; grad stays NULL. */
glia_status glia_layer_add_buffer(struct glia_layer *l, const char *name, const struct glia_shape *shape,
                                  struct glia_param_init init, int *index);

struct glia_fwd {
    const struct glia_tensor *const *in;  /* n_in inputs (borrowed) */
    int n_in;
    struct glia_tensor *out;              /* preallocated, shape from infer_shape (borrowed) */
    const struct glia_tensor *labels;     /* loss layers only, else NULL: i32 of the logits' shape without
                                             its last dimension, (N) for (N, classes) logits, (N, T) for
                                             (N, T, classes) (a language model's next tokens) */
    bool train;                           /* training mode (keep what backward needs) */
    uint64_t seed;                        /* per-step seed for random layers:
                                             glia_seed(seed_key, step) */
    bool recompute;                       /* a training forward run again during backward
                                             ([graph] checkpoint_segments): same inputs, same seed;
                                             change no lasting state (running statistics) twice */
    uint64_t seed_key;                    /* the layer's key: seed == glia_seed(seed_key, step) */
    const int64_t *step_at;               /* NULL, or, while the step is being captured into a
                                             CUDA graph ([runtime] cuda_graph), the device address
                                             of the step that a replay runs: seed is only the
                                             captured step's, so random kernels compute
                                             glia_seed(seed_key, *step_at) on the device */
    /* ABI 2.3: a cached decode (glia_model_decode), only for a kernel with GLIA_KERNEL_DECODE and only in an eval
       forward: the input's dimension 1 holds positions pos .. pos + T - 1 of sequences whose positions 0 .. pos - 1
       the previous decode calls gave (pos 0 starts new ones). false: the input holds positions 0 .. T - 1, and a
       layer keeps no cache. */
    bool decode;
    int64_t pos;                          /* the input's first position when decode is set; 0 otherwise */
    /* ABI 2.3, a loss kernel with GLIA_KERNEL_GRAD_IN_FORWARD in a training forward: where to write the gradient of
       in[0] now, dLoss/dlogits times the 1-element dout that its backward would get; NULL: in backward, as usual.
       A model gives it only where that gradient takes the logits' own memory (GLIA_KERNEL_GRAD_IN_PLACE), so the
       kernel writes each logit's gradient over it once the logit is read (glia_layer_run gives its own gradient
       buffer). The backward still runs after it, with din[0] at the same address and nothing left to do; a backward
       asked for another din[0] or to accumulate after such a forward overwrote in[0] is refused (GLIA_EINVAL). */
    struct glia_tensor *din;
    const struct glia_tensor *dout;
    /* ABI 2.3: in a training forward of a kernel with saved_size, the memory it keeps for its backward (saved_size
       bytes, planned with the activations by the core); NULL otherwise, and in a training forward whose backward
       never runs (no parameter at or before the layer). */
    void *saved;
    /* ABI 2.4, an eval forward of a kernel with GLIA_KERNEL_EVAL_AFFINE: a normalization layer that alone reads this
       one evaluates as y = act((x - mean(c))*scale(c) + shift(c)) per channel c of dim 1 (glia_kernel.eval_affine),
       and this forward computes that of its own output instead, into out (the normalization layer's output; [graph]
       fuse_pointwise): out = act((f(in) - affine(0, c))*affine(1, c) + affine(2, c)) in f32, each operation rounded
       as written, affine a (3, C) f32 tensor on the layer's device, act a relu (v < 0 ? 0 : v) with affine_relu.
       NULL: none. */
    const struct glia_tensor *affine;
    bool affine_relu;
    /* ABI 2.5, a kernel with GLIA_KERNEL_RESIDUAL_IN: the layer's input is the sum of in[0] and residual (a layer with
       two inputs of in[0]'s shape, type and format whose elementwise meaning is x + y: a transformer's residual add),
       and this forward computes that sum too, each element rounded to the type as the add would, writes it to sum
       (the add's output, which other layers read) and then computes its own output from the sum as written ([graph]
       fuse_pointwise: llm.c's fused residual + layernorm). NULL (both): none. */
    const struct glia_tensor *residual;
    struct glia_tensor *sum;
};

/* The seed of a random layer at a training step, from its key: a splitmix64-style
 * mix, written once as a macro body so that device code (CUDA, NVRTC text) computes the same
 * bits. U64 names the unsigned 64-bit type; key and step are in scope. */
#define GLIA_SEED_BODY(U64)                                                                  \
    U64 z = key ^ ((U64)step * 0xd6e8feb86659fd93ull);                                      \
    z = (z ^ (z >> 32)) * 0xd6e8feb86659fd93ull;                                              \
    z = (z ^ (z >> 32)) * 0xd6e8feb86659fd93ull;                                              \
    return z ^ (z >> 32);
#ifdef __CUDACC__
__host__ __device__
#endif
static inline uint64_t glia_seed(uint64_t key, int64_t step) { GLIA_SEED_BODY(uint64_t) }

struct glia_bwd {
    const struct glia_tensor *const *in;  /* the forward inputs (borrowed) */
    int n_in;
    const struct glia_tensor *out;        /* the forward output (borrowed) */
    const struct glia_tensor *dout;       /* dLoss/dout; for loss layers a 1-element scale */
    struct glia_tensor *const *din;       /* n_in gradients to produce; NULL entries: skip */
    const bool *din_accumulate;           /* n_in flags: += instead of = */
    const struct glia_tensor *labels;     /* loss layers only */
    void *saved;                          /* ABI 2.3: what the training forward kept there (glia_fwd.saved), or NULL */
    /* ABI 2.5, only where the kernel's din_act slot accepted it: the layer that produces in[0] computes it as
       act(pre), act the value of its `activation` key (din_act: "gelu_tanh") and pre its pre-activation (din_act_pre:
       in[0]'s shape, type and format, in device memory); this backward then writes din[0] as the gradient of pre,
       (dLoss/din[0]) * act'(pre), instead of dLoss/din[0] (din_accumulate[0] is false). NULL: none. */
    const char *din_act;
    const void *din_act_pre;
    /* ABI 2.5, only for a kernel with GLIA_KERNEL_DOUT_PREACT for this layer: dout already is the gradient of the
       pre-activation (the layer reading this one's output applied this one's activation's gradient, din_act above);
       backward skips the activation's gradient. */
    bool dout_preact;
};

/* Flags of a type (glia_layer_type.flags): what the layer is, whatever computes it. */
enum glia_type_flags {
    GLIA_TYPE_LOSS = 1u << 0,          /* output is a 1-element mean loss; input 0 are the logits */
    GLIA_TYPE_NORMALIZATION = 1u << 1, /* subtracts a per-channel mean: a bias before it is useless */
    /* reads the token batch of a [data] format = tokens set: an I32 tensor (N, L) of ids, 0 for
     * padding, L changing from batch to batch. The core refuses to feed that batch to a type
     * without this flag (it would read the ids as floats). */
    GLIA_TYPE_TOKEN_INPUT = 1u << 2,
    /* has an enum key `activation` whose choices other than "none" name layer types (batchnorm:
     * none|relu), applied to the output in the same pass. The graph pass of [graph] fuse_pointwise
     * folds a layer of such a type that alone reads this layer's output (and sets nothing but
     * type and inputs) into it by setting that key: the core names no type itself. A choice may also
     * name a type with the values of the enum keys it sets away from their defaults, each after a
     * '_' (ABI 2.3; linear: gelu_tanh is a gelu with approximate = tanh). */
    GLIA_TYPE_FUSIBLE_ACTIVATION = 1u << 3
};

/* Flags of a kernel (glia_kernel.flags): what this implementation can do. */
enum glia_kernel_flags {
    /* handles 4-D tensors in either memory format (it reads each tensor's format with
     * glia_tensor_memory_format). With [runtime] memory_format = channels_last the core then
     * hands it channels_last 4-D inputs, gradients and outputs. A kernel without this flag only
     * ever sees contiguous tensors: the core converts at its edges. */
    GLIA_KERNEL_CHANNELS_LAST = 1u << 0,
    /* What backward does not read. Without them the core keeps every input and the output of a
     * training forward until the layer's backward has run; with them it can give that memory to
     * other tensors as soon as the forwards that read it are done (as PyTorch's autograd frees
     * what no backward saved). Shapes and formats may still be read; only the values are gone.
     * The layer tests (glia_layer_gradcheck, glia_layer_run) hand such a backward NaN-filled
     * stand-ins, so a wrong flag fails them. */
    GLIA_KERNEL_BWD_NO_INPUT = 1u << 1,  /* backward reads no input's values (add, flatten, pooling by mean) */
    GLIA_KERNEL_BWD_NO_OUTPUT = 1u << 2, /* backward does not read the output's values (linear, conv2d) */
    /* a training forward and backward can be captured into a CUDA graph ([runtime] cuda_graph)
     * and replayed: they only queue work on the backend's queue (no host synchronization, no
     * reading results on the host), keep no host state that a later call needs and a replay
     * would not update, and a random kernel follows step_at. The core captures a model only when
     * every layer's kernel has it. */
    GLIA_KERNEL_CAPTURABLE = 1u << 3,
    /* ABI 2.1: takes its activations in the run's half type. With [runtime] precision = bf16 or fp16 the core may hand
     * it inputs, output and their gradients in that type (GLIA_BF16 or GLIA_F16: each tensor's dtype says which) instead
     * of f32; within one call they all have the same dtype, that of a->out (of a->dout for backward). Parameters, their
     * gradients and buffers stay f32. It still takes all-f32 calls (the gradient checker, a layer next to the loss).
     * Loads convert to f32, arithmetic and reductions are done in f32 (statistics too), stores round to nearest even;
     * a gradient accumulated (din_accumulate) is read, added in f32 and rounded once. A kernel without this flag only
     * ever sees f32 activations: the core converts at its edges ([graph] half_activations). A loss kernel
     * (GLIA_TYPE_LOSS) with it gets its logits in[0] and their gradient din[0] in the type their producer wrote, its
     * output (the loss) and dout (the loss scale) f32. */
    GLIA_KERNEL_HALF = 1u << 4,
    /* ABI 2.3: runs the eval forwards of a cached decode (glia_fwd.decode; glia_model_decode, what glia sample uses):
     * given positions pos .. pos + T - 1 of each sequence, it computes what a forward over positions 0 .. pos + T - 1
     * would give at those positions. A position-wise kernel (linear, layernorm, the activations) does so as it is; a
     * kernel that reads positions adds pos (position_embedding); one that mixes them keeps what later positions read
     * (attention keeps each layer's keys and values) and may refuse a configuration with GLIA_EUNSUPPORTED naming the
     * layer (attention with causal = off). The core decodes a model only when every kernel but the loss has it. */
    GLIA_KERNEL_DECODE = 1u << 5,
    /* ABI 2.3, loss kernels: backward may be handed din[0] at the address of in[0] (it reads each input value before
     * it writes the gradient in that place, and writes it with din_accumulate[0] false). The core then gives the
     * logits' gradient the logits' own memory in a training step, when the loss alone reads them, in their own type
     * and format, and their producer's backward does not read its output: a language model's (N, T, vocab) logits
     * are the largest activation, and their gradient no longer takes as much again. */
    GLIA_KERNEL_GRAD_IN_PLACE = 1u << 6,
    /* ABI 2.3, loss kernels with GLIA_KERNEL_GRAD_IN_PLACE: a training forward given glia_fwd.din writes the gradient
     * there at once (llm.c's fused classifier: the loss and its gradient in one pass over the logits, which stay hot
     * in cache between the two), and the backward then finds it written. */
    GLIA_KERNEL_GRAD_IN_FORWARD = 1u << 7,
    /* ABI 2.4: its eval forward takes glia_fwd.affine (a following normalization's evaluation, per channel of its
       output, applied before it writes: cuDNN's convolution + batchnorm-inference pattern) */
    GLIA_KERNEL_EVAL_AFFINE = 1u << 8,
    /* ABI 2.5: the layer applies an activation, its `activation` key's value, to a pre-activation that its saved memory
       (glia_kernel.saved_size, glia_fwd.saved) starts with, in the output's shape, type and format; its backward takes
       glia_bwd.dout_preact. With [graph] fuse_pointwise, the core lets the one layer that reads this output apply that
       activation's gradient where its kernel can (glia_kernel.din_act): cuBLASLt's DGELU epilogue on the GEMM that
       writes the gradient, instead of one more pass over it. Report it through layer_flags (only a layer with an
       activation has it). */
    GLIA_KERNEL_DOUT_PREACT = 1u << 9,
    /* ABI 2.5, one-input kernels: forward takes glia_fwd.residual and sum (its input computed in the same pass as the
       sum of two tensors, written too). Backward is unchanged: it reads the sum as its input. */
    GLIA_KERNEL_RESIDUAL_IN = 1u << 10
};

/* A layer type: what a `type =` names. Registered once, by the plugin that owns it
 * (glia_register_layer_type). It reads the section and declares parameters; kernels compute. */
struct glia_layer_type {
    uint32_t struct_size;            /* sizeof(struct glia_layer_type) of the builder */
    const char *name;                /* "linear": the `type =` that selects it */
    const char *doc;                 /* one line */
    const struct glia_key *keys;     /* the layer's own keys (NULL-terminated); may be NULL */
    int min_inputs, max_inputs;      /* max_inputs < 0: unbounded */
    uint32_t flags;                  /* enum glia_type_flags */
    size_t attrs_size;               /* bytes of l->attrs (zeroed before create); 0: none */
    /* Read keys into l->attrs, check input shapes (dim 0 is the batch), declare parameters.
     * Required. Errors go through glia_section_error so they name file:line.
     * A create that fails frees what it allocated itself: destroy never runs after a failed
     * create. The core then frees l->attrs and the parameters and buffers it declared.
     * A getter that cannot answer (a key the schema does not declare: glia/config.h) fails the
     * create even when it returned GLIA_OK; destroy is then owed as after any successful create. */
    glia_status (*create)(struct glia_layer *l, const struct glia_section *cfg,
                          const struct glia_shape *in, int n_in);
    /* Free what l->attrs holds (not attrs itself: the core frees it). Optional: NULL means
     * nothing. Runs exactly once for every create that returned GLIA_OK, when the layer goes
     * (also when the core refuses the layer after its create, or a graph pass replaces it), and
     * never for a create that failed. */
    void (*destroy)(struct glia_layer *l);
    /* Output shape for these input shapes; pure, called whenever the batch size changes.
     * Required. */
    glia_status (*infer_shape)(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                               struct glia_shape *out);
    /* Forward multiply-adds x2 for these input shapes. Optional: NULL shows "-". */
    uint64_t (*flops)(const struct glia_layer *l, const struct glia_shape *in, int n_in);
    /* Adjusts the initial values of parameter params[index], as PyTorch's reset_parameters does
     * after drawing them: the core calls it once the parameter's declared init has been drawn into
     * values (host memory, its numel floats in logical order), before they reach the device and
     * before a checkpoint or rank 0's broadcast may replace them (a model, glia_layer_run_new; not
     * the gradient checker, which draws its own). Optional: NULL keeps the drawn values. embedding
     * zeroes its padding_idx row. */
    void (*init_param)(const struct glia_layer *l, int index, float *values);
    /* The type's elementwise meaning, for a layer whose output element i is a function of element
     * i of each input (all of the output's shape): writes into buf an expression of the
     * [pointwise] language (see the pointwise type) over x, y, z, w (inputs 0 to 3), the layer's
     * attributes written in as numbers: "relu(x)", "select(gt(x, 0), x, 0.01 * x)", "x + y".
     * Returns its length as snprintf does, or a negative value when this layer has none (an add
     * of five inputs). Optional: NULL means none. [graph] fuse_pointwise fuses chains of such
     * layers into one pointwise layer, and the activations' kernels evaluate their own. */
    int (*pointwise)(const struct glia_layer *l, int n_in, char *buf, size_t size);
};

/* A kernel: how a layer type is computed on one device. Registered for (type, impl) by any
 * plugin (glia_register_kernel), not only the type's own: cuda.so registers the CUDA kernels
 * of conv2d, batchnorm, linear. `impl =` in a layer's section picks one by name; without it the
 * first registered for the model's device runs. */
struct glia_kernel {
    uint32_t struct_size;            /* sizeof(struct glia_kernel) of the builder */
    const char *type;                /* the type it computes ("conv2d") */
    const char *impl;                /* "cpu", "cudnn": the `impl =` that selects it */
    const char *doc;                 /* one line; may be NULL */
    enum glia_device_type device_type; /* where it runs */
    uint32_t flags;                  /* enum glia_kernel_flags */
    size_t state_size;               /* bytes of l->state (zeroed before prepare); 0: none */
    /* Set up l->state for a layer whose type's create succeeded (attrs and parameters are
     * there; their storage is not yet): in are the input shapes at creation. Optional: NULL means
     * nothing to set up. A prepare that fails frees what it allocated itself (no destroy
     * follows). Errors name the layer through glia_error. */
    glia_status (*prepare)(struct glia_layer *l, const struct glia_shape *in, int n_in);
    /* Free what l->state holds (not state itself). Optional: NULL means nothing. Runs once for
     * every prepare that succeeded (or, without prepare, for every layer it ran). */
    void (*destroy)(struct glia_layer *l);
    /* Compute a->out from a->in. Required. */
    glia_status (*forward)(struct glia_layer *l, const struct glia_fwd *a);
    /* Gradients per the contract above. Optional: NULL means the layer has no gradient
     * (the core refuses to train through it). */
    glia_status (*backward)(struct glia_layer *l, const struct glia_bwd *a);
    /* ABI 2.3: the bytes a training forward keeps for its backward besides its inputs and output (a fused
     * activation's input), for inputs of shapes in and activations of type act (the output's); 0: none. The core
     * plans them with the activations, alive from the training forward (or its recomputation, [graph]
     * checkpoint_segments) to the backward, so they count in the activation memory and are shared at other moments;
     * glia_fwd.saved and glia_bwd.saved point at them (the gradient checker and glia_layer_run give them too).
     * Optional: NULL means none. Read only when struct_size covers it. */
    size_t (*saved_size)(const struct glia_layer *l, const struct glia_shape *in, int n_in, enum glia_dtype act);
    /* ABI 2.4: the flags (enum glia_kernel_flags) this kernel has for layer l, where they depend on what the layer's
     * section set (conv2d with activation = relu reads its output in backward: it has no GLIA_KERNEL_BWD_NO_OUTPUT
     * then). Called after prepare; the answer must not change over the layer's life. Optional: NULL means flags. Read
     * only when struct_size covers it; the core reads a prepared layer's flags through glia_layer_kernel_flags (before
     * a layer exists, .flags say what the kernel can do at all). */
    uint32_t (*layer_flags)(const struct glia_layer *l);
    /* ABI 2.4, normalization kernels: what the layer's evaluation computes when it is y = act((x - mean(c))*scale(c) +
     * shift(c)) per channel c of dim 1, each operation rounded to f32 as written (batchnorm on its running
     * statistics): writes mean, scale and shift, a (3, C) f32 tensor in its device's memory, from the current
     * parameters and buffers, and *relu whether act is a relu (else none).
     * affine NULL only asks whether it can. GLIA_EUNSUPPORTED: the evaluation is no such affine (batch statistics);
     * the core then runs the layer's eval forward. Queued like a forward (a CUDA kernel may compute it). Optional:
     * NULL means none. Read only when struct_size covers it (glia_kernel_eval_affine). */
    glia_status (*eval_affine)(struct glia_layer *l, struct glia_tensor *affine, bool *relu);
    /* ABI 2.5: whether layer l's backward can apply the gradient of activation act (a producer's `activation` value
       with GLIA_KERNEL_DOUT_PREACT: "gelu", "gelu_tanh") to its input gradient din[0] (glia_bwd.din_act), at any shapes
       and types its calls take. Pure; called after prepare. Optional: NULL means none. Read only when struct_size
       covers it (glia_kernel_din_act). */
    bool (*din_act)(const struct glia_layer *l, const char *act);
};

/* Kernel k's din_act slot, or NULL when it has none (or a struct_size from before it). */
static inline bool (*glia_kernel_din_act(const struct glia_kernel *k))(const struct glia_layer *, const char *)
{
    size_t end = offsetof(struct glia_kernel, din_act) + sizeof k->din_act;
    return k->struct_size >= end ? k->din_act : NULL;
}

/* Kernel k's eval_affine slot, or NULL when it has none (or a struct_size from before it). */
static inline glia_status (*glia_kernel_eval_affine(const struct glia_kernel *k))(struct glia_layer *, struct glia_tensor *,
                                                                                  bool *)
{
    size_t end = offsetof(struct glia_kernel, eval_affine) + sizeof k->eval_affine;
    return k->struct_size >= end ? k->eval_affine : NULL;
}

/* The flags of layer l's kernel for this layer: kernel->layer_flags(l) where the kernel has that slot, else
 * kernel->flags. */
static inline uint32_t glia_layer_kernel_flags(const struct glia_layer *l)
{
    const struct glia_kernel *k = l->kernel;
    size_t end = offsetof(struct glia_kernel, layer_flags) + sizeof k->layer_flags;
    return k->struct_size >= end && k->layer_flags ? k->layer_flags(l) : k->flags;
}

/* The saved bytes kernel k asks for (0 when it has no saved_size, or a struct_size from before it). */
static inline size_t glia_kernel_saved_size(const struct glia_kernel *k, const struct glia_layer *l,
                                            const struct glia_shape *in, int n_in, enum glia_dtype act)
{
    size_t end = offsetof(struct glia_kernel, saved_size) + sizeof k->saved_size;
    return k->struct_size >= end && k->saved_size ? k->saved_size(l, in, n_in, act) : 0;
}

/* ---- testing a layer plugin ---- */

struct glia_gradcheck_report {
    int n_checked;          /* gradient elements compared with finite differences */
    int n_skipped;          /* elements at a kink (one-sided slopes disagree), not compared */
    double max_err;         /* max |analytic - numeric| / max(1, |analytic|, |numeric|) */
    char worst[160];        /* where max_err occurred ("input 0 [12]", "param weight [3]") */
};

/* Builds the single layer described by `ini` (one section, e.g. "[l]\ntype = linear\n
 * outputs = 3\n", loading its plugin), feeds it seeded N(0,1) inputs of the given shapes
 * (loss layers also get random labels of the logits' shape without its last dimension: (N) or
 * (N, T)), and checks: (0) after every call, that the layer wrote
 * nothing just outside its output, input gradients, parameter gradients or buffers (guard
 * values on either side of each; a write there fails the check with GLIA_EPLUGIN, naming the
 * call, the tensor and how far it went, as [runtime] debug_checks does in training); (1) every
 * input and parameter gradient against central finite differences of L = sum(out * r) for a
 * fixed random r; (2) the
 * gradient contract: din written (=) when not accumulating even over NaN garbage, added (+=)
 * when accumulating; parameter gradients written when unset (NaN garbage), added when set.
 * Inputs named in the options' int_inputs are i32 ids instead, with no gradient (glia_layer_gradcheck_ex).
 * Returns GLIA_OK when every error is within tol, GLIA_ENUMERIC otherwise (the context error
 * says where); other errors for bad configurations. The report may be NULL. */
glia_status glia_layer_gradcheck(struct glia_context *ctx, const char *ini, const struct glia_shape *in,
                                 int n_in, uint64_t seed, double tol, struct glia_gradcheck_report *report);

/* Options of glia_layer_gradcheck_ex; zero-initialize, then set struct_size. */
struct glia_gradcheck_options {
    uint32_t struct_size;                   /* sizeof(struct glia_gradcheck_options) */
    enum glia_memory_format memory_format;  /* of the 4-D inputs, gradients and output; a
                                               channels_last check needs a kernel with GLIA_KERNEL_CHANNELS_LAST */
    uint32_t int_inputs;    /* bit k: input k is an I32 tensor of seeded uniform ids in [0, int_high)
                               (token batches): it gets no gradient (its din is NULL) and is not perturbed */
    int32_t int_high;       /* > 0 when int_inputs != 0 */
};

/* glia_layer_gradcheck with options (NULL: the defaults, which are glia_layer_gradcheck's). */
glia_status glia_layer_gradcheck_ex(struct glia_context *ctx, const char *ini, const struct glia_shape *in,
                                    int n_in, const struct glia_gradcheck_options *opt, uint64_t seed,
                                    double tol, struct glia_gradcheck_report *report);

struct glia_model;
/* ABI 2.3: glia_layer_gradcheck_ex on layer `layer` of model m as the model configures it (its section after the graph
 * passes, without inputs, tie_weight and weight_decay; its CPU kernel), on inputs of the shapes the model gives it at
 * batch `batch` (a layer reading the data's token ids gets ids in [0, vocab)). GLIA_EINVAL naming the layer when the
 * model has none of that name. What `glia gradcheck` runs. */
glia_status glia_model_gradcheck_layer(struct glia_model *m, const char *layer, int64_t batch, uint64_t seed,
                                       double tol, struct glia_gradcheck_report *report);

/* ---- running one layer alone on a device (benchmarks) ---- */

/* One layer built alone on a device with tensors of its own: inputs, output, output gradient,
 * input and parameter gradients. What `glia bench` times; not a model (no graph, no optimizer). */
struct glia_layer_run;

/* The backend of device dev, which layer runs on dev use, opened on first use (for a CUDA device
 * this loads plugin "cuda", whose probe refuses a machine without a usable GPU; the context error
 * says why). Set its runtime options with glia_backend_configure before glia_layer_run_new: a
 * layer may choose its algorithms from them when it first runs. */
glia_status glia_layer_run_backend_open(struct glia_context *ctx, struct glia_device dev,
                                        struct glia_backend **out /* (borrowed) */);

/* Builds the single layer described by `ini` (one section, e.g. "[l]\ntype = conv2d\nfilters
 * = 64\n", loading its plugin) on device dev: the kernel its `impl =` key names (which must run on
 * dev), else the first kernel of the type registered for dev's type. On the device it allocates n_in inputs of
 * the given shapes (NCHW order) holding seeded N(0,1) values, the output, the output gradient
 * (N(0,1); for a loss layer a 1-element scale of 1, plus random labels: glia_layer_run_labels),
 * the input gradients and
 * the parameter gradients. Parameters hold their declared init drawn as a model with
 * [runtime] seed = seed draws them (then adjusted by the type's init_param); buffers their init.
 * 4-D tensors are laid out in fmt (GLIA_CHANNELS_LAST needs a kernel with GLIA_KERNEL_CHANNELS_LAST).
 * Inputs are f32 only: a layer that takes i32 token ids (embedding, seq_pool) refuses them in its
 * forward (GLIA_EINVAL naming it).
 * *out is (owned): free with glia_layer_run_free. */
glia_status glia_layer_run_new(struct glia_context *ctx, const char *ini, struct glia_device dev,
                               const struct glia_shape *in, int n_in, enum glia_memory_format fmt,
                               uint64_t seed, struct glia_layer_run **out);
/* ABI 2.2: the same with activations (inputs, their gradients, the output and its gradient) of element type act:
 * GLIA_F32 as glia_layer_run_new, or GLIA_BF16 / GLIA_F16 as a model with [runtime] precision = bf16 / fp16 and
 * [graph] half_activations hands them to a kernel with GLIA_KERNEL_HALF (the values drawn in f32 and rounded once;
 * parameters and their gradients stay f32; a loss's output and its gradient, the loss scale, f32). GLIA_EUNSUPPORTED
 * naming the layer for a kernel without the flag, and naming the device where its backend has no convert. */
glia_status glia_layer_run_new_typed(struct glia_context *ctx, const char *ini, struct glia_device dev,
                                     const struct glia_shape *in, int n_in, enum glia_memory_format fmt,
                                     enum glia_dtype act, uint64_t seed, struct glia_layer_run **out);
/* Queues the layer's forward (train: training mode, keeping what backward needs). Does not wait
 * for the device. A loss kernel with GLIA_KERNEL_GRAD_IN_FORWARD writes its input gradient in a training forward,
 * as in a model, but into the run's input gradient (the input stays), with the output gradient as its scale. */
glia_status glia_layer_run_forward(struct glia_layer_run *r, bool train);
/* Queues the layer's backward; needs a training forward before it. Every input gradient and every
 * parameter gradient is written (=), never accumulated ("set to none" each time). Does not wait. */
glia_status glia_layer_run_backward(struct glia_layer_run *r);
/* ABI 2.2: input k becomes an I32 tensor of its shape holding ids[0 .. n) (token ids, for a layer that reads them:
 * embedding), with no gradient (glia_layer_run_input_grad then gives NULL); run a training forward again before a
 * backward. GLIA_EINVAL naming the input unless n is its element count. */
glia_status glia_layer_run_set_ids(struct glia_layer_run *r, int k, const int32_t *ids, size_t n);
/* Waits until the device has done the queued work. */
glia_status glia_layer_run_sync(struct glia_layer_run *r);

/* What a run holds (borrowed; valid until glia_layer_run_free). Tensors live on the run's device:
 * read them with glia_tensor_to_host. k out of range gives NULL. */
struct glia_layer *glia_layer_run_layer(struct glia_layer_run *r);
struct glia_backend *glia_layer_run_backend(struct glia_layer_run *r);
struct glia_tensor *glia_layer_run_input(struct glia_layer_run *r, int k);
struct glia_tensor *glia_layer_run_input_grad(struct glia_layer_run *r, int k);
struct glia_tensor *glia_layer_run_output(struct glia_layer_run *r);
struct glia_tensor *glia_layer_run_output_grad(struct glia_layer_run *r);
/* ABI 2.2: a loss layer's labels, i32 of the logits' shape without its last dimension ((N) or (N, T)), seeded
 * uniform on 0 .. classes-1; write other values (ignore_index) with glia_tensor_from_host before a forward. NULL for
 * other layers. */
struct glia_tensor *glia_layer_run_labels(struct glia_layer_run *r);
/* Forward multiply-adds x2 at the run's shapes (the layer's flops); 0 when the layer has none. */
uint64_t glia_layer_run_flops(const struct glia_layer_run *r);
void glia_layer_run_free(struct glia_layer_run *r);

#ifdef __cplusplus
}
#endif
#endif
