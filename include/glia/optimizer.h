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

struct glia_optimizer_ops;

struct glia_optimizer {
    const struct glia_optimizer_ops *ops;  /* (borrowed) */
    struct glia_context *ctx;              /* (borrowed) */
    void *priv;                            /* the plugin's state */
};

/* The most state arrays an optimizer may have (glia_optimizer_ops.n_state). */
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
};

struct glia_optimizer_ops {
    uint32_t struct_size;          /* sizeof(struct glia_optimizer_ops) of the builder */
    const char *name;              /* "sgd": the `[train] optimizer =` that selects it; one impl
                                      per (name, device_type) */
    const char *doc;               /* one line */
    const struct glia_key *keys;   /* keys of the [optimizer] section; may be NULL */
    int n_state;                   /* state arrays per parameter element: 0 (plain SGD) to GLIA_OPTIMIZER_MAX_STATE */
    enum glia_device_type device_type;
    /* ABI 1.0 */
    /* Read keys into o->priv. Required. As a layer's create (glia/layer.h): a create that fails
     * frees what it allocated itself (no destroy follows; o->priv is NULL again), and a getter
     * that cannot answer fails it even when it returned GLIA_OK. */
    glia_status (*create)(struct glia_optimizer *o, const struct glia_section *cfg);
    /* Free o->priv. Optional: NULL means priv needs no freeing. Runs exactly once for every
     * create that returned GLIA_OK, never for a failed one. */
    void (*destroy)(struct glia_optimizer *o);
    /* Update w from g in place. Required. */
    glia_status (*step)(struct glia_optimizer *o, const struct glia_opt_step *s);
};

/* Creates optimizer `name` (loading its plugin) from the [optimizer] section of `ini`
 * (may be NULL or "" for defaults), for tests and programs that drive the step themselves.
 * *out is (owned): free with glia_optimizer_free. */
glia_status glia_optimizer_new(struct glia_context *ctx, const char *name, const char *ini,
                               struct glia_optimizer **out);
/* The same for the impl of `name` that runs on device type `device` (ABI 1.2). */
glia_status glia_optimizer_new_for(struct glia_context *ctx, const char *name, const char *ini,
                                   enum glia_device_type device, struct glia_optimizer **out);
void glia_optimizer_free(struct glia_optimizer *o);

#ifdef __cplusplus
}
#endif
#endif
