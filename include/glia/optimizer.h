/* glia/optimizer.h — the optimizer plugin interface: one step over the flat parameter arena.
 * Not the schedule: the core computes the learning rate and passes it in. */
#ifndef GLIA_OPTIMIZER_H
#define GLIA_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct glia_optimizer_type;
struct glia_optimizer_kernel;

struct glia_optimizer {
    const struct glia_optimizer_type *type;      /* its settings (borrowed) */
    const struct glia_optimizer_kernel *kernel;  /* its update on one device (borrowed) */
    struct glia_context *ctx;                    /* (borrowed) */
    void *attrs;                                 /* the type's: type->attrs_size zeroed bytes the core
                                                    allocates before create and frees last; what
                                                    create read from the section (glia's own
                                                    optimizers: glia/types/optimizers.h). Kernels only read it */
};

/* The most state arrays an optimizer may have (glia_optimizer_type.n_state). */
#define GLIA_OPTIMIZER_MAX_STATE 4

/* One step over n fp32 elements laid out flat: weights, gradients and n_state state
 * arrays of n elements each (zero before the first step; state[k] for n_state <= k <
 * GLIA_OPTIMIZER_MAX_STATE is NULL). */
struct glia_opt_step {
    float *w;
    const float *g;
    float *const *state;      /* n_state arrays (borrowed) */
    size_t n;
    const float *decay_mask;  /* n flags (1 or 0): weight decay applies; NULL: all */
    double lr;
    int64_t step;             /* 1 on the first step */
    struct glia_backend *backend;
    /* ABI 2.1: NULL, or device memory holding what the kernel's `scalars` wrote for this step: the kernel reads its
     * per-step scalars there, not from lr and step (the core captures the step into a CUDA graph and writes them
     * before each replay). Only given to a kernel with `scalars`. */
    const void *dev_scalars;
    /* ABI 2.1: NULL, or one int32 of device memory read when the step runs: nonzero leaves w and the state as they are
     * (fp16's skipped step inside a CUDA graph). Only given to a kernel whose flags have GLIA_OPT_KERNEL_SKIP. */
    const int32_t *dev_skip;
    /* ABI 2.2: the tensors of the arena, for kernels that work per tensor (norms, trust ratios): n_seg of them,
     * seg[2i] and seg[2i+1] the offset and the length in elements of tensor i (host memory, ascending, disjoint;
     * elements in no segment are padding, which such a kernel leaves as it is). The core always gives them; a
     * caller that has none gives 0 and NULL, and a kernel with GLIA_OPT_KERNEL_SEGMENTS then refuses the step. */
    int n_seg;
    const int64_t *seg;
    /* ABI 2.2: the same table in device memory on a device backend (2 n_seg int64, uploaded once with the arena);
     * NULL on the CPU. */
    const int64_t *dev_seg;
};

/* glia_optimizer_kernel.flags (ABI 2.1) */
enum {
    GLIA_OPT_KERNEL_SKIP = 1u << 0,     /* step honours s->dev_skip: precision = fp16 may capture it in a CUDA graph */
    GLIA_OPT_KERNEL_SEGMENTS = 1u << 1  /* ABI 2.2: step needs s->seg (and s->dev_seg on a device): the core refuses
                                           the kernel where it cannot give them */
};

/* The most bytes of per-step scalars an optimizer kernel's `scalars` may write (ABI 2.1). */
#define GLIA_OPT_SCALARS_MAX 248

/* An optimizer: what `[train] optimizer =` names. Registered once, by the plugin that owns it
 * (glia_register_optimizer_type): its keys and settings. Kernels do the update. */
struct glia_optimizer_type {
    uint32_t struct_size;          /* sizeof(struct glia_optimizer_type) of the builder */
    const char *name;              /* "sgd" */
    const char *doc;               /* one line */
    const struct glia_key *keys;   /* keys of the [optimizer] section; may be NULL */
    int n_state;                   /* state arrays per parameter element: 0 (plain SGD) to GLIA_OPTIMIZER_MAX_STATE */
    size_t attrs_size;             /* bytes of o->attrs (zeroed before create); 0: none */
    /* Read keys into o->attrs and check them. Required. As a layer type's create
     * (glia/layer.h): a getter that cannot answer fails it even when it returned GLIA_OK. */
    glia_status (*create)(struct glia_optimizer *o, const struct glia_section *cfg);
    /* Free what o->attrs holds (not attrs itself). Optional: NULL means nothing. Runs once for
     * every create that returned GLIA_OK, never for a failed one. */
    void (*destroy)(struct glia_optimizer *o);
};

/* An optimizer's update on one device, registered for (optimizer, device type) by any plugin
 * (glia_register_optimizer_kernel): cuda.so registers the fused CUDA updates of sgd and adam. */
struct glia_optimizer_kernel {
    uint32_t struct_size;          /* sizeof(struct glia_optimizer_kernel) of the builder */
    const char *type;              /* the optimizer it updates for ("sgd") */
    const char *doc;               /* one line; may be NULL */
    enum glia_device_type device_type; /* where it runs; one kernel per (type, device type) */
    /* Update w from g in place. Required. */
    glia_status (*step)(struct glia_optimizer *o, const struct glia_opt_step *s);
    /* ABI 2.1: the scalars that step s needs (learning rate, bias corrections, ...) as the bytes `step` reads from
     * s->dev_scalars: written into out when they fit in cap bytes; returns their size (0: this step cannot read
     * them from the device). Optional: with it, [runtime] cuda_graph captures the optimizer step with the forward
     * and backward and writes these bytes to the device before each replay; NULL: the step runs outside the graph. */
    size_t (*scalars)(struct glia_optimizer *o, const struct glia_opt_step *s, void *out, size_t cap);
    /* ABI 2.1: GLIA_OPT_KERNEL_* flags; 0 (or a smaller struct_size): none. Without GLIA_OPT_KERNEL_SKIP a
     * precision = fp16 run keeps the step outside the CUDA graph. */
    uint32_t flags;
};

/* Creates optimizer `name` (loading its plugin) from the [optimizer] section of `ini`
 * (may be NULL or "" for defaults), for tests and programs that drive the step themselves.
 * *out is (owned): free with glia_optimizer_free. */
glia_status glia_optimizer_new(struct glia_context *ctx, const char *name, const char *ini,
                               struct glia_optimizer **out);
/* The same with the kernel of `name` that runs on device type `device`. */
glia_status glia_optimizer_new_for(struct glia_context *ctx, const char *name, const char *ini,
                                   enum glia_device_type device, struct glia_optimizer **out);
void glia_optimizer_free(struct glia_optimizer *o);

#ifdef __cplusplus
}
#endif
#endif
