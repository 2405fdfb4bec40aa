/* tests/layerutil.h — what the layer test programs share: shapes, one layer built by hand (as
 * the gradient checker builds it) for value tests, and the configuration-error check.
 * Not for training tests: those build whole models. */
#ifndef GLIA_LAYERUTIL_H
#define GLIA_LAYERUTIL_H

#include <string.h>
#include "internal.h"
#include "model_internal.h"
#include "testutil.h"

static inline struct glia_shape S(int n, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t dims[4] = {a, b, c, d};
    return glia_shape_make(n, dims);
}

struct built {
    struct glia_config *cfg;
    struct glia_backend *b;
    const struct glia_layer_ops *ops;
    struct glia_layer l;
};

/* Builds the one layer section of `ini` (its CPU impl, loading its plugin) in context c for
 * the given input shapes. Parameters and buffers get storage holding their declared init
 * (seed 0); parameter gradients are allocated, contents undefined. */
static inline void layer_build(struct glia_context *c, const char *ini, const struct glia_shape *in, int n_in,
                               struct built *B)
{
    memset(B, 0, sizeof *B);
    CU_ASSERT_FATAL(glia_config_parse_string(c, "layer.ini", ini, &B->cfg) == GLIA_OK);
    struct glia_section *s = B->cfg->sections[0];
    const char *type = glia__section_entry(s, "type")->value;
    CU_ASSERT_FATAL(glia_plugin_load(c, type) == GLIA_OK);
    B->ops = glia__find_layer(c, type, "cpu");
    CU_ASSERT_PTR_NOT_NULL_FATAL(B->ops);
    CU_ASSERT_EQUAL(B->ops->device_type, GLIA_DEVICE_CPU);
    const struct glia_key *sch[] = {glia__core_schema("layer"), B->ops->keys};
    CU_ASSERT_FATAL(glia__section_validate(s, sch, 2) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(c, (struct glia_device){GLIA_DEVICE_CPU, 0}, &B->b) == GLIA_OK);
    B->l = (struct glia_layer){.name = s->name, .ops = B->ops, .ctx = c, .backend = B->b};
    CU_ASSERT_FATAL(B->ops->create(&B->l, s, in, n_in) == GLIA_OK);
    for (int i = 0; i < B->l.n_params; i++) {
        struct glia_param *p = &B->l.params[i];
        CU_ASSERT_FATAL(glia_tensor_new(B->b, GLIA_F32, &p->shape, &p->value) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_new(B->b, GLIA_F32, &p->shape, &p->grad) == GLIA_OK);
        glia__init_values(glia_tensor_f32(p->value), glia_tensor_numel(p->value), p->init, 0);
    }
    for (int i = 0; i < B->l.n_buffers; i++) {
        struct glia_param *p = &B->l.buffers[i];
        CU_ASSERT_PTR_NULL(p->grad);
        CU_ASSERT_FATAL(glia_tensor_new(B->b, GLIA_F32, &p->shape, &p->value) == GLIA_OK);
        glia__init_values(glia_tensor_f32(p->value), glia_tensor_numel(p->value), p->init, 0);
    }
}

/* Destroys the layer and frees what layer_build made (not the context). */
static inline void layer_unbuild(struct built *B)
{
    if (B->ops->destroy) B->ops->destroy(&B->l);
    for (int i = 0; i < B->l.n_params; i++) {
        free((char *)B->l.params[i].name);
        glia_tensor_release(B->l.params[i].value);
        glia_tensor_release(B->l.params[i].grad);
    }
    free(B->l.params);
    for (int i = 0; i < B->l.n_buffers; i++) {
        free((char *)B->l.buffers[i].name);
        glia_tensor_release(B->l.buffers[i].value);
    }
    free(B->l.buffers);
    glia_config_free(B->cfg);
}

/* The layer of `ini` must be refused with status want and a message containing msg. */
static inline void expect_error(const char *ini, struct glia_shape in, glia_status want, const char *msg)
{
    struct glia_context *c;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(c, ini, &in, 1, 1, 1e-2, NULL);
    CU_ASSERT_EQUAL(st, want);
    if (st != want || !strstr(glia_context_error(c), msg))
        printf("\n  got %s: %s\n  want: %s\n", glia_status_name(st), glia_context_error(c), msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(c), msg));
    glia_context_free(c);
}

#endif
