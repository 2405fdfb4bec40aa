/* core/node.c — a layer of the graph: the type and kernel its section names, its inputs, its creation with its
 * input shapes and its output shape. Not the graph passes (core/graph.c) and not the plugins' create. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"

/* ---- resolving features ---- */

/* The feature a layer's type, [train] optimizer or [distributed] transport value names: the value,
 * or for a plugin file the plugin's name (its file name without ".so"), into buf. */
const char *glia__feature_of(const char *v, char *buf, size_t n)
{
    if (!v || !glia__plugin_is_file(v)) return v;
    glia__plugin_base_name(v, buf, n);
    return buf;
}

/* The tail of the error line for an unknown feature `name` (a layer type or an optimizer: what):
 * the nearest known name, and where its plugin was looked for. Nothing is loaded for the hint:
 * it comes from the registered features, else from the .so file names in the search folders. */
void glia__unknown_why(struct glia_context *ctx, int kind, const char *what, const char *name, char *buf, size_t n)
{
    const char *names[256], *from = glia__plugin_path(ctx, name);
    char near[256] = "";
    const char *hit = glia__did_you_mean(name, names, glia__feature_names(ctx, kind, names, 256));
    if (hit) snprintf(near, sizeof near, "%s", hit);
    else if (!glia__plugin_file_near(ctx, name, near, sizeof near) || !strcmp(near, name)) near[0] = '\0';
    /* the hint first: a long folder list may be cut at the message's end */
    int k = near[0] ? snprintf(buf, n, "; did you mean '%s'?", near) : 0;
    if (k < 0 || (size_t)k >= n) return;
    if (from) {
        snprintf(buf + k, n - (size_t)k, " (plugin %s registers no %s '%s')", from, what, name);
    } else {
        char dirs[GLIA__ERRMSG_MAX];
        glia__plugin_searched(ctx, dirs, sizeof dirs);
        if (snprintf(buf + k, n - (size_t)k, " (no loaded plugin registers it, and there is no %s.so in %s)", name,
                     dirs) >= (int)(n - (size_t)k))
            glia_log(ctx, GLIA_LOG_DEBUG, "searched for %s.so in %s", name, dirs);  /* the whole list, cut above */
    }
}

/* The type and kernel a layer section names (its type =, its impl = or the model's device), loading the plugin
 * named like the type unless a loaded one registers the type already. */
glia_status glia__resolve_layer(struct glia_model *m, const struct glia_section *s, struct glia_layer *l)
{
    char fb[256];
    const char *type = glia__feature_of(glia_section_str(s, "type"), fb, sizeof fb);
    const char *impl = glia_section_str(s, "impl");
    if (!glia__find_type(m->ctx, type)) {
        glia_status ls = glia_plugin_load(m->ctx, type);
        if (ls && ls != GLIA_ENOTFOUND) return glia_section_error_wrap(s, "type", ls);  /* refused: say why */
    }
    const struct glia_layer_type *t = glia__find_type(m->ctx, type);
    if (!t) {
        char why[GLIA__ERRMSG_MAX];
        glia__unknown_why(m->ctx, GLIA__FEAT_TYPE, "layer type", type, why, sizeof why);
        return glia_section_error(s, "type", GLIA_ECONFIG, "unknown layer type '%s'%s", type, why);
    }
    const struct glia_kernel *k =
        strcmp(impl, "auto") ? glia__find_kernel(m->ctx, type, impl) : glia__find_kernel_for(m->ctx, type, m->device.type);
    char have[256], dev[32];
    glia__layer_impls(m->ctx, type, have, sizeof have);
    if (!k)
        return glia_section_error(s, "impl", GLIA_ECONFIG, "no impl '%s' of layer type '%s' for device %s (available: %s)",
                                  impl, type, glia_device_str(m->device, dev, sizeof dev), have[0] ? have : "none");
    if (k->device_type != m->device.type)
        return glia_section_error(s, "impl", GLIA_ECONFIG, "impl '%s' of '%s' does not run on device %s",
                                  impl, type, glia_device_str(m->device, dev, sizeof dev));
    l->type = t;
    l->kernel = k;
    return GLIA_OK;
}


static int node_index(const struct glia_model *m, const char *name)
{
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (!strcmp(m->graph.nodes[i].layer.name, name)) return i;
    return -1;
}

static glia_status wire_inputs(struct glia_model *m, struct glia__node *nd, const struct glia_section *s)
{
    const struct glia_layer_type *ops = nd->layer.type;
    const char **items;
    int n = glia_section_list(s, "inputs", &items);
    if (n == 0) {
        nd->n_in = 1;
        nd->in[0] = m->graph.n_nodes - 1;  /* the previous layer, or -1: the data */
    } else {
        if (n > GLIA__MAX_INPUTS)
            return glia_section_error(s, "inputs", GLIA_ECONFIG, "%d inputs; at most %d are supported", n, GLIA__MAX_INPUTS);
        for (int i = 0; i < n; i++) {
            if (!strcmp(items[i], "input")) {
                nd->in[i] = -1;
                continue;
            }
            int k = node_index(m, items[i]);
            if (k < 0) {
                const char **names = malloc(sizeof *names * (size_t)(m->graph.n_nodes + 1)), *near = NULL;
                int c = 0;
                for (int j = 0; names && j < m->graph.n_nodes; j++) names[c++] = m->graph.nodes[j].layer.name;
                if (names) names[c++] = "input";
                if (names) near = glia__did_you_mean(items[i], names, c);  /* points into the nodes' names */
                free(names);
                bool later = false;
                for (int j = 0; j < m->cfg->n_sections; j++)
                    later |= !strcmp(m->cfg->sections[j]->name, items[i]) && !glia__is_reserved(items[i]);
                if (later)
                    return glia_section_error(s, "inputs", GLIA_ECONFIG, "layer '%s' is defined later; inputs must name earlier layers", items[i]);
                if (near)
                    return glia_section_error(s, "inputs", GLIA_ECONFIG, "unknown layer '%s'; did you mean '%s'?", items[i], near);
                return glia_section_error(s, "inputs", GLIA_ECONFIG, "unknown layer '%s'", items[i]);
            }
            nd->in[i] = k;
        }
        nd->n_in = n;
    }
    if (nd->n_in < ops->min_inputs || (ops->max_inputs >= 0 && nd->n_in > ops->max_inputs)) {
        if (ops->max_inputs < 0)
            return glia_section_error(s, "inputs", GLIA_ECONFIG, "layer type '%s' takes at least %d inputs, got %d", ops->name, ops->min_inputs, nd->n_in);
        return glia_section_error(s, "inputs", GLIA_ECONFIG, "layer type '%s' takes %d..%d inputs, got %d",
                                  ops->name, ops->min_inputs, ops->max_inputs, nd->n_in);
    }
    return GLIA_OK;
}

struct glia_shape glia__in_shape_of(const struct glia_model *m, int producer, int64_t batch)
{
    if (producer < 0) return glia__data_shape(m, batch, m->data.train.cols);
    return m->graph.nodes[producer].out_shape;
}

/* Phase 1: resolve the layer's type and impl, validate its keys, wire its inputs. */
glia_status glia__declare_layer(struct glia_model *m, struct glia_section *s)
{
    glia_status st;
    if (!strcmp(s->name, "input"))  /* inputs = input is the data batch: a layer so named would hide it */
        return glia_section_error(s, NULL, GLIA_ECONFIG, "'input' is reserved: `inputs = input` names the data batch; "
                                  "give this layer another name");
    if (!glia__section_entry(s, "type")) {
        const char *near = glia__did_you_mean(s->name, glia__reserved, (int)GLIA__N_RESERVED);
        if (near)
            return glia_section_error(s, NULL, GLIA_ECONFIG, "unknown section; did you mean [%s]?", near);
        return glia_section_error(s, NULL, GLIA_ECONFIG, "a layer section needs a type = key (or is it a misspelt section?)");
    }
    /* type and impl are strings: readable before full validation. */
    s->schemas[0] = glia__core_schema("layer");
    s->n_schemas = 1;
    struct glia_layer rl = {0};
    if ((st = glia__resolve_layer(m, s, &rl))) return st;
    const struct glia_key *sch[] = {glia__core_schema("layer"), rl.type->keys};
    if ((st = glia__section_validate(s, sch, 2))) return st;
    struct glia__node *nd = &m->graph.nodes[m->graph.n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->sec = s;
    nd->layer.name = s->name;
    nd->layer.type = rl.type;
    nd->layer.kernel = rl.kernel;
    nd->layer.ctx = m->ctx;
    nd->layer.backend = m->backend;
    if ((st = wire_inputs(m, nd, s))) return st;
    m->graph.decl[m->graph.n_decl++] = (struct glia__decl){.name = s->name, .type = rl.type->name, .node = m->graph.n_nodes};
    m->graph.n_nodes++;
    return GLIA_OK;
}

/* Refuses a parameter or buffer of the layer that has more elements than a tensor may have. */
static glia_status check_param_sizes(const struct glia__node *nd)
{
    const struct glia_layer *l = &nd->layer;
    glia_context_clear_error(l->ctx);
    for (int p = 0; p < l->n_params + l->n_buffers; p++) {
        const struct glia_param *pa = p < l->n_params ? &l->params[p] : &l->buffers[p - l->n_params];
        double n = glia__numel_d(&pa->shape);
        if (n <= (double)GLIA__MAX_ELEMENTS) continue;
        char shp[256];
        return glia__alloc_error(nd->sec, NULL, 4 * n, "%s '%s', %s, has %.4g elements, more than a tensor may have (%s); "
                                 "its values would", p < l->n_params ? "parameter" : "buffer", pa->name,
                                 glia_shape_str(&pa->shape, shp, sizeof shp), n, GLIA__MAX_ELEMENTS_TEXT);
    }
    return GLIA_OK;
}

/* Refuses an output s of node nd with more elements than a tensor may have, at the batch that [data] key sets. */
static glia_status check_output_size(struct glia_model *m, const struct glia__node *nd, const struct glia_shape *s,
                                     int64_t batch, const char *key)
{
    double n = glia__numel_d(s);
    if (n <= (double)GLIA__MAX_ELEMENTS) return GLIA_OK;
    glia_context_clear_error(m->ctx);
    char shp[256];
    glia_shape_str(s, shp, sizeof shp);
    return glia__alloc_error(nd->sec, NULL, 4 * n, "its output at batch %lld ([data] %s), %s, has %.4g elements, more "
                             "than a tensor may have (%s); it would", (long long)batch, key, shp, n,
                             GLIA__MAX_ELEMENTS_TEXT);
}

/* The outputs at the evaluation batch, where it is larger than the training batch (glia__create_layer checked those). */
glia_status glia__check_eval_sizes(struct glia_model *m)
{
    if (m->data.test_batch <= m->data.batch) return GLIA_OK;
    struct glia_shape *shapes = malloc(sizeof *shapes * (size_t)m->graph.n_nodes);
    if (!shapes) return GLIA_ENOMEM;
    glia_status st = glia__infer_all(m, m->data.test_batch, m->data.train.cols, shapes);
    for (int i = 0; i < m->graph.n_nodes && !st; i++) st = check_output_size(m, &m->graph.nodes[i], &shapes[i], m->data.test_batch, "test_batch_size");
    free(shapes);
    return st;
}

/* Phase 3: create the layer with its input shapes and infer its output shape. */
glia_status glia__create_layer(struct glia_model *m, struct glia__node *nd)
{
    const struct glia_layer_type *ops = nd->layer.type;
    struct glia_section *s = nd->sec;
    struct glia_shape in[GLIA__MAX_INPUTS];
    for (int i = 0; i < nd->n_in; i++) in[i] = glia__in_shape_of(m, nd->in[i], m->data.batch);
    for (int k = 0; k < nd->n_in && m->data.train.tokens; k++)  /* the token batch holds ids, not floats */
        if (nd->in[k] < 0 && !(ops->flags & GLIA_TYPE_TOKEN_INPUT))
            return glia_section_error(s, glia__section_entry(s, "inputs") ? "inputs" : NULL, GLIA_ECONFIG,
                                      "layer type '%s' cannot read the token batch of [data] format = tokens (I32 ids); "
                                      "start with an embedding layer", ops->name);
    if (m->data.train.tokens && (ops->flags & GLIA_TYPE_TOKEN_INPUT) && glia__section_entry(s, "vocab") &&
        glia_section_int(s, "vocab") < m->data.vocab)  /* a table too small for the data's ids */
        return glia_section_error(s, "vocab", GLIA_ECONFIG, "%lld is smaller than [data] vocab = %lld: ids up to %lld "
                                  "would be out of range", (long long)glia_section_int(s, "vocab"), (long long)m->data.vocab,
                                  (long long)m->data.vocab - 1);
    glia_context_clear_error(m->ctx);
    nd->layer.comm = m->dist.comm;  /* SyncBatchNorm's ranks */
    glia_status st = glia__layer_create(&nd->layer, s, in, nd->n_in, &nd->created);
    if (st) {
        if (!glia_context_error(m->ctx)[0])
            glia_section_error(s, NULL, st, "layer type '%s' refused this configuration (%s)", ops->name, glia_strerror(st));
        return st;
    }
    if ((st = check_param_sizes(nd))) return st;
    bool decay = glia_section_bool(s, "weight_decay");  /* off: a PyTorch param group with weight_decay 0 */
    for (int p = 0; p < nd->layer.n_params; p++)
        if (!decay || (!m->trainer.decay_1d && nd->layer.params[p].shape.ndim == 1)) nd->layer.params[p].decay = false;
    st = ops->infer_shape(&nd->layer, in, nd->n_in, &nd->out_shape);
    if (st) {
        if (!glia_context_error(m->ctx)[0])
            glia_section_error(s, NULL, st, "shape inference failed (%s)", glia_strerror(st));
        return st;
    }
    if ((st = check_output_size(m, nd, &nd->out_shape, m->data.batch, "batch_size"))) return st;
    nd->flops = ops->flops ? ops->flops(&nd->layer, in, nd->n_in) : 0;
    return GLIA_OK;
}


void glia__destroy_layer(struct glia__node *nd)
{
    glia__layer_release(&nd->layer, nd->created);
    nd->created = false;
    glia_tensor_release(nd->fold_affine);
    nd->fold_affine = NULL;
}
