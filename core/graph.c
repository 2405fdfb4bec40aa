/* core/graph.c — the graph passes of [graph]: drop_bias_before_norm, the checks of the graph as written,
 * fuse_pointwise (activations into their producers, chains of elementwise layers into one), checkpoint_segments
 * and the memory formats. Not the layers' creation (core/node.c). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"
#include "act.h"

/* Sets key = value in s on behalf of the core (a graph pass); origin names the pass. */
static glia_status override_key(struct glia_section *s, const char *key, const char *value, const char *origin)
{
    for (int i = 0; i < s->n_entries; i++) {
        struct glia__entry *e = &s->entries[i];
        if (strcmp(e->key, key)) continue;
        char *v = glia__strdup(value), *o = glia__strdup(origin);
        if (!v || !o) return free(v), free(o), GLIA_ENOMEM;
        free(e->value);
        free(e->origin);
        e->value = v;
        e->origin = o;
        return GLIA_OK;
    }
    if (glia__grow((void **)&s->entries, &s->cap_entries, s->n_entries + 1, sizeof *s->entries)) return GLIA_ENOMEM;
    struct glia__entry *e = &s->entries[s->n_entries];
    e->key = glia__strdup(key);
    e->value = glia__strdup(value);
    e->origin = glia__strdup(origin);
    e->line = 0;
    if (!e->key || !e->value || !e->origin) return free(e->key), free(e->value), free(e->origin), GLIA_ENOMEM;
    s->n_entries++;
    return GLIA_OK;
}

/* The key called name in keys, or NULL. */
static const struct glia_key *find_key(const struct glia_key *keys, const char *name)
{
    for (const struct glia_key *k = keys; k && k->name; k++)
        if (!strcmp(k->name, name)) return k;
    return NULL;
}

static bool has_bool_key(const struct glia_key *keys, const char *name)
{
    const struct glia_key *k = find_key(keys, name);
    return k && k->type == GLIA_KEY_BOOL;
}

/* Phase 2, pass drop_bias_before_norm: a layer with a `bias` key whose output goes only into
 * one normalization layer loses its bias (the normalization subtracts it again). */
glia_status glia__pass_drop_bias(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        if (!has_bool_key(nd->layer.type->keys, "bias") || !glia_section_bool(nd->sec, "bias")) continue;
        int consumer = -1, uses = 0;
        for (int j = i + 1; j < m->graph.n_nodes; j++)
            for (int k = 0; k < m->graph.nodes[j].n_in; k++)
                if (m->graph.nodes[j].in[k] == i) {
                    consumer = j;
                    uses++;
                }
        if (uses != 1 || !(m->graph.nodes[consumer].layer.type->flags & GLIA_TYPE_NORMALIZATION)) continue;
        glia_status st = override_key(nd->sec, "bias", "off", "[graph] drop_bias_before_norm");
        if (st) return st;
        nd->bias_dropped_for = consumer;
        nd->bias_dropped = true;
    }
    return GLIA_OK;
}

/* Each node's consumer count, and whether a gradient flows through it. */
static void link_nodes(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++) m->graph.nodes[i].n_consumers = 0;
    for (int i = 0; i < m->graph.n_nodes; i++) {  /* inputs come before their consumers */
        struct glia__node *nd = &m->graph.nodes[i];
        nd->needs_grad = nd->layer.n_params > 0;
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k] >= 0) {
                m->graph.nodes[nd->in[k]].n_consumers++;
                nd->needs_grad |= m->graph.nodes[nd->in[k]].needs_grad;
            }
    }
}

glia_status glia__check_graph(struct glia_model *m)
{
    if (m->graph.n_nodes == 0)
        return glia_error(m->ctx, GLIA_ECONFIG, "%s: the model has no layers (add sections with type = ...)", m->cfg->path);
    struct glia__node *last = &m->graph.nodes[m->graph.n_nodes - 1];
    if (!(last->layer.type->flags & GLIA_TYPE_LOSS))
        return glia_section_error(last->sec, "type", GLIA_ECONFIG,
                                  "the last layer must be a loss layer (for example type = softmax_cross_entropy), got '%s'",
                                  last->layer.type->name);
    link_nodes(m);
    for (int i = 0; i < m->graph.n_nodes - 1; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        if (nd->layer.type->flags & GLIA_TYPE_LOSS)
            return glia_section_error(nd->sec, "type", GLIA_ECONFIG, "a loss layer must be the last layer");
        if (nd->n_consumers == 0)
            return glia_section_error(nd->sec, NULL, GLIA_ECONFIG, "the output of this layer is not used by any later layer");
        if (!nd->layer.kernel->backward)
            return glia_section_error(nd->sec, "type", GLIA_EUNSUPPORTED, "layer type '%s' (kernel %s) has no backward; it "
                                      "cannot be trained through", nd->layer.type->name, nd->layer.kernel->impl);
    }
    const struct glia_shape *logits = &m->graph.nodes[last->in[0] >= 0 ? last->in[0] : 0].out_shape;
    if (m->data.lm && (last->in[0] < 0 || logits->ndim != 3 || logits->dim[1] != m->data.train.cols)) {
        char got[64] = "the data batch";
        if (last->in[0] >= 0) glia_shape_str(logits, got, sizeof got);
        return glia_section_error(last->sec, NULL, GLIA_ESHAPE, "a language model's loss expects (N, T, vocab) logits, T "
                                  "= [data] seq_len = %d (a label per position), got %s", m->data.train.cols, got);
    }
    if (!m->data.lm && (last->in[0] < 0 || logits->ndim != 2))
        return glia_section_error(last->sec, NULL, GLIA_ESHAPE, "the loss expects (N, classes) logits");
    if (logits->dim[logits->ndim - 1] < m->data.n_classes) {  /* name a label it cannot give */
        const struct glia__dataset *d = m->data.train.n_classes >= m->data.test.n_classes ? &m->data.train : &m->data.test;
        return glia_section_error(last->sec, NULL, GLIA_ESHAPE, "the model outputs %lld classes but the data has %d labels%s%s%s",
                                  (long long)logits->dim[logits->ndim - 1], m->data.n_classes, d->classes_why ? " (" : "",
                                  d->classes_why ? d->classes_why : "", d->classes_why ? ")" : "");
    }
    return GLIA_OK;
}

/* ---- pass fuse_pointwise ---------------------------------------------------------------- */

/* A chain of elementwise layers whose intermediate outputs feed only the next one becomes one
 * `pointwise` layer: its expression is the layers' own, nested. While it is built the text names
 * producers as {k} (node k; {-1}: the data batch); the layer gets them as x, y, z, w. */
#define FUSE_MAX_TEXT 2000   /* characters of a fused expression */
#define FUSE_MAX_DEPTH 60    /* its parentheses' nesting (the parser takes 200) */
#define FUSE_MAX_VARS 4      /* the pointwise layer's inputs */
static const char fuse_origin[] = "[graph] fuse_pointwise";
static const char fuse_vars[] = "xyzw";  /* the pointwise layer's inputs 1..4 */

/* The text written to f, a stream of open_memstream(text, ...) (f NULL: it could not be opened):
 * *text (owned), or NULL when out of memory. */
static char *fuse_close(FILE *f, char **text)
{
    if (!f) return NULL;
    bool bad = ferror(f);
    if (fclose(f) || bad) {
        free(*text);
        return NULL;
    }
    return *text;
}

/* Node i's function of its producers as text over {k}: its type's pointwise expression (glia/layer.h) with x, y,
 * z, w (inputs 0..3) replaced by its producers; NULL when it is not a layer the pass fuses (*st = GLIA_OK) or out of
 * memory (*st set). A layer with an impl chosen in its section keeps it, and one with parameters or buffers is more
 * than its expression. */
static char *fuse_text(const struct glia_model *m, int i, glia_status *st)
{
    const struct glia__node *nd = &m->graph.nodes[i];
    const struct glia_layer_type *t = nd->layer.type;
    *st = GLIA_OK;
    if (!t->pointwise || nd->n_in > (int)sizeof fuse_vars - 1 || nd->own_sec ||
        strcmp(glia_section_str(nd->sec, "impl"), "auto") || nd->layer.n_params || nd->layer.n_buffers)
        return NULL;
    int need = t->pointwise(&nd->layer, nd->n_in, NULL, 0);
    if (need < 0) return NULL;
    char *e = malloc((size_t)need + 1), *text = NULL;
    size_t len;
    FILE *f = e ? open_memstream(&text, &len) : NULL;
    if (f && t->pointwise(&nd->layer, nd->n_in, e, (size_t)need + 1) != need) {  /* not pure: the pass keeps it */
        fclose(f);
        free(text);
        free(e);
        return NULL;
    }
    for (const char *c = e; f && *c;) {  /* its variables x y z w become its producers */
        size_t w = 0;
        while (isalnum((unsigned char)c[w]) || c[w] == '_' || c[w] == '.') w++;
        const char *v = w == 1 ? strchr(fuse_vars, c[0]) : NULL;
        if (v && v - fuse_vars < nd->n_in) fprintf(f, "{%d}", nd->in[v - fuse_vars]);
        else fwrite(c, 1, w ? w : 1, f);
        c += w ? w : 1;
    }
    free(e);
    char *r = fuse_close(f, &text);
    if (!r) *st = GLIA_ENOMEM;
    return r;
}

/* Reads the token at t ("{k}"): its producer, and the text after it in *end. */
static int fuse_token(const char *t, const char **end)
{
    char *e;
    long k = strtol(t + 1, &e, 10);
    *end = e + 1;  /* past '}' */
    return (int)k;
}

/* with is a call f(...) or a token {k}: it needs no parentheses as an operand */
static bool fuse_atomic(const char *with)
{
    const char *t = with;
    if (*t == '{') return strchr(t, '}') && !strchr(t, '}')[1];
    while (isalpha((unsigned char)*t)) t++;
    if (t == with || *t != '(') return false;
    int depth = 0;
    for (; *t; t++) {
        depth += (*t == '(') - (*t == ')');
        if (depth == 0) return !t[1];
    }
    return false;
}

/* text with each {i} replaced by (with); NULL when out of memory. */
static char *fuse_subst(const char *text, int i, const char *with)
{
    char *out = NULL;
    size_t len;
    FILE *f = open_memstream(&out, &len);
    for (const char *t = text; f && *t;) {
        const char *end;
        if (*t == '{' && fuse_token(t, &end) == i) {
            /* a whole argument of a call needs no parentheses of its own */
            bool arg = t > text && (t[-1] == '(' || (t[-1] == ' ' && t - 1 > text && t[-2] == ',')) &&
                       (*end == ')' || *end == ',');
            arg |= fuse_atomic(with);
            fprintf(f, arg ? "%s" : "(%s)", with);
            t = end;
        } else {
            fputc(*t++, f);
        }
    }
    return fuse_close(f, &out);
}

/* The distinct producers named in text, in order of appearance (at most max; returns how many
 * there are, which may be more). */
static int fuse_producers(const char *text, int *prod, int max)
{
    int n = 0;
    for (const char *t = text; (t = strchr(t, '{'));) {
        int k = fuse_token(t, &t), seen = 0;
        for (int j = 0; j < n && j < max; j++) seen |= prod[j] == k;
        if (seen) continue;
        if (n < max) prod[n] = k;
        n++;
    }
    return n;
}

static bool fuse_fits(const char *text)
{
    int depth = 0, deepest = 0, prod[FUSE_MAX_VARS];
    for (const char *t = text; *t; t++) {
        depth += (*t == '(') - (*t == ')');
        if (depth > deepest) deepest = depth;
    }
    return strlen(text) <= FUSE_MAX_TEXT && deepest <= FUSE_MAX_DEPTH &&
           fuse_producers(text, prod, FUSE_MAX_VARS) <= FUSE_MAX_VARS;
}

/* Whether a chain's text calls dropout(), however spaced ("dropout (x, 0.5)" parses too). */
static bool fuse_has_dropout(const char *text)
{
    for (const char *t = text; (t = strstr(t, "dropout")); t += 7) {
        const char *e = t + 7;
        while (isspace((unsigned char)*e)) e++;
        bool word = t == text || !(isalnum((unsigned char)t[-1]) || t[-1] == '_');
        if (word && *e == '(') return true;
    }
    return false;
}

/* The one node that reads node i's output (possibly more than once), or -1. */
static int only_consumer(const struct glia_model *m, int i)
{
    int c = -1;
    for (int j = i + 1; j < m->graph.n_nodes; j++)
        for (int k = 0; k < m->graph.nodes[j].n_in; k++)
            if (m->graph.nodes[j].in[k] == i) {
                if (c >= 0 && c != j) return -1;
                c = j;
            }
    return c;
}

/* Node j becomes a pointwise layer computing text (over {k}), in its place and under its name.
 * On failure node j is as it was. */
static glia_status make_fused(struct glia_model *m, int j, const char *text)
{
    struct glia__node *nd = &m->graph.nodes[j], f = *nd;
    int prod[FUSE_MAX_VARS], n = fuse_producers(text, prod, FUSE_MAX_VARS);
    char *expr = NULL;
    size_t len;
    FILE *fe = open_memstream(&expr, &len);
    for (const char *t = text; fe && *t;) {
        if (*t != '{') {
            fputc(*t++, fe);
            continue;
        }
        int k = fuse_token(t, &t), v = 0;
        while (prod[v] != k) v++;
        fputc(fuse_vars[v], fe);
    }
    expr = fuse_close(fe, &expr);
    struct glia_section *s = expr ? glia__section_new(m->cfg, nd->sec->name, nd->sec->line) : NULL;
    glia_status st = s ? GLIA_OK : GLIA_ENOMEM;
    if (!st) st = override_key(s, "type", "pointwise", fuse_origin);
    if (!st) st = override_key(s, "expr", expr, fuse_origin);
    free(expr);
    if (s) {  /* type and impl readable before validation */
        s->schemas[0] = glia__core_schema("layer");
        s->n_schemas = 1;
    }
    struct glia_layer rl = {0};
    if (!st) st = glia__resolve_layer(m, s, &rl);
    if (!st) {
        const struct glia_key *sch[] = {glia__core_schema("layer"), rl.type->keys};
        st = glia__section_validate(s, sch, 2);
    }
    if (!st) {
        f.layer = (struct glia_layer){.name = s->name, .type = rl.type, .kernel = rl.kernel, .ctx = m->ctx,
                                      .backend = m->backend};
        f.sec = f.own_sec = s;
        f.created = false;
        f.n_in = n;
        memcpy(f.in, prod, sizeof *prod * (size_t)n);
        if ((st = glia__create_layer(m, &f))) glia__destroy_layer(&f);
    }
    if (st) {
        glia__section_free(s);
        return st;
    }
    glia__destroy_layer(nd);  /* the chain's last layer, replaced */
    *nd = f;            /* layers keep no pointer to their struct (layer.h) */
    return GLIA_OK;
}

/* Whether m has a fused layer named name. */
static bool fused_in(const struct glia_model *m, const char *name)
{
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (m->graph.nodes[i].own_sec && !strcmp(m->graph.nodes[i].layer.name, name)) return true;
    return false;
}

/* Whether model m's layer called name is one that an activation after it became part of (act_fused). */
static bool act_fused_in(const struct glia_model *m, const char *name)
{
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (m->graph.nodes[i].act_fused && !strcmp(m->graph.nodes[i].layer.name, name)) return true;
    return false;
}

/* 0: no fusion; 1: fuse where the fused layer can be made (auto on a GPU); 2: fuse (on) */
int glia__fuse_pointwise_mode(const struct glia_model *m, const struct glia_section *graph)
{
    const char *v = glia_section_str(graph, "fuse_pointwise");
    return !strcmp(v, "on") ? 2 : !strcmp(v, "auto") && m->device.type != GLIA_DEVICE_CPU ? 1 : 0;
}

/* Removes every node i with into[i] >= 0, merged into node into[i] (a chain: into[into[i]] may be
 * set too): whatever read node i now reads the node its chain ends in, declarations follow, and
 * the others move up. */
static void drop_nodes(struct glia_model *m, const int *into, int *map)
{
    int n = m->graph.n_nodes, w = 0;
    for (int i = 0; i < n; i++) {
        if (into[i] >= 0) {
            glia__destroy_layer(&m->graph.nodes[i]);
            map[i] = -1;
            continue;
        }
        map[i] = w;
        if (w != i) m->graph.nodes[w] = m->graph.nodes[i];  /* layers keep no pointer to their struct (layer.h) */
        w++;
    }
    for (int i = 0; i < n; i++) {
        int r = i;
        while (into[r] >= 0) r = into[r];
        map[i] = map[r];
    }
    m->graph.n_nodes = w;
    for (int i = 0; i < w; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k] >= 0) nd->in[k] = map[nd->in[k]];
        if (nd->bias_dropped) nd->bias_dropped_for = map[nd->bias_dropped_for];
    }
    for (int d = 0; d < m->graph.n_decl; d++) m->graph.decl[d].node = map[m->graph.decl[d].node];
    link_nodes(m);
}

/* Whether enum key `key` of keys offers the choice `value`. */
static bool key_has_choice(const struct glia_key *keys, const char *key, const char *value)
{
    const struct glia_key *k = find_key(keys, key);
    if (!k || k->type != GLIA_KEY_ENUM || !k->choices) return false;
    size_t n = strlen(value);
    for (const char *c = k->choices; c;) {
        if (!strncmp(c, value, n) && (c[n] == '|' || c[n] == '\0')) return true;
        c = strchr(c, '|');
        if (c) c++;
    }
    return false;
}

/* The name under which layer r would be a producer's `activation`: its type's name, then "_VALUE" for each enum key
 * its section sets to other than the default (gelu with approximate = tanh: "gelu_tanh"), in buf; NULL when r sets
 * a key of another kind, or the name does not fit. */
static const char *act_name(const struct glia__node *r, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "%s", r->layer.type->name);
    for (const struct glia_key *k = r->layer.type->keys; k && k->name && n < size; k++) {
        if (!glia__section_entry(r->sec, k->name)) continue;
        const char *v = glia_section_str(r->sec, k->name);
        if (k->type != GLIA_KEY_ENUM) return NULL;
        if (k->default_value && !strcmp(v, k->default_value)) continue;
        n += (size_t)snprintf(buf + n, size - n, "_%s", v);
    }
    return n < size ? buf : NULL;
}

/* Phase 3, before the chains below: a layer whose input is a layer of a type with GLIA_TYPE_FUSIBLE_ACTIVATION
 * (batchnorm, conv2d, linear) that nothing else reads, and whose act_name that one's `activation` key offers (relu; gelu,
 * gelu_tanh), becomes its activation (one pass over the data instead of two, and one tensor fewer between them); the
 * producer keeps its name, its parameters and its place, and what read the activation reads it. An activation with an
 * impl or a key other than an enum set in its section stays. The key is set in the producer's section (a dp replica,
 * built from the same sections, finds the key set and fuses the same layers). */
glia_status glia__pass_fuse_activation(struct glia_model *m)
{
    int n = m->graph.n_nodes, *into = malloc(2 * sizeof *into * (size_t)n), fused = 0;  /* and drop_nodes' map */
    glia_status st = into ? GLIA_OK : GLIA_ENOMEM;
    for (int j = 0; j < n && into; j++) into[j] = -1;
    for (int j = 0; j < n && !st; j++) {
        const struct glia__node *r = &m->graph.nodes[j];
        int i = r->in[0];
        char name[64];
        const char *act = act_name(r, name, sizeof name);
        if (r->own_sec || strcmp(glia_section_str(r->sec, "impl"), "auto") || r->n_in != 1 || i < 0 || !act ||
            !(m->graph.nodes[i].layer.type->flags & GLIA_TYPE_FUSIBLE_ACTIVATION) || only_consumer(m, i) != j ||
            m->graph.nodes[i].layer.kernel->struct_size < sizeof(struct glia_kernel) ||  /* older: may not know it */
            m->graph.nodes[i].own_sec || !key_has_choice(m->graph.nodes[i].layer.type->keys, "activation", act))
            continue;
        struct glia__node *b = &m->graph.nodes[i];
        const char *have = glia_section_str(b->sec, "activation");
        /* a dp replica, built after its model set the key in the section they share, finds it set: it follows */
        bool set = m->dist.like && !strcmp(have, act) && act_fused_in(m->dist.like, b->layer.name);
        if (strcmp(have, "none") && !set) continue;
        if (!set && (st = override_key(b->sec, "activation", act, fuse_origin))) break;
        if (!set) glia__destroy_layer(b);
        if (!set && (st = glia__create_layer(m, b))) break;
        b->act_fused = true;
        into[j] = i;
        fused++;
    }
    if (!st && fused) drop_nodes(m, into, into + n);
    free(into);
    return st;
}

/* Phase 3, after the graph is checked as written: chains of fusible layers, each feeding only
 * the next, become one pointwise layer named like the chain's last; the others move up. A
 * dropout (or a pointwise layer with dropout()) only ends a chain: the fused layer then has its
 * name, so it draws the mask that layer draws unfused (the step's seed hashed with the name). */
glia_status glia__pass_fuse_pointwise(struct glia_model *m, bool on)
{
    int n = m->graph.n_nodes, *into = malloc(2 * sizeof *into * (size_t)n);  /* and drop_nodes' map */
    char **text = calloc((size_t)n, sizeof *text);
    bool *grew = calloc((size_t)n, sizeof *grew);
    glia_status st = text && grew && into ? GLIA_OK : GLIA_ENOMEM;
    for (int j = 0; j < n && into; j++) into[j] = -1;
    for (int j = 0; j < n && !st; j++) {  /* producers first: text[i] is i's whole chain */
        into[j] = -1;
        if (!(text[j] = fuse_text(m, j, &st))) continue;
        for (int k = 0; k < m->graph.nodes[j].n_in && !st; k++) {
            int i = m->graph.nodes[j].in[k];
            if (i < 0 || !text[i] || into[i] >= 0 || only_consumer(m, i) != j || fuse_has_dropout(text[i])) continue;
            char *t = fuse_subst(text[j], i, text[i]);
            if (!t) st = GLIA_ENOMEM;
            else if (!fuse_fits(t)) free(t);
            else {
                free(text[j]);
                text[j] = t;
                into[i] = j;
                grew[j] = true;
            }
        }
    }
    for (int j = 0; j < n && !st; j++) {
        if (!grew[j] || into[j] >= 0) continue;
        bool follow = m->dist.like != NULL;  /* a dp replica fuses what its model fused, so their layers pair up */
        if (follow && !fused_in(m->dist.like, m->graph.nodes[j].layer.name)) st = GLIA_EUNSUPPORTED;
        else if (!(st = make_fused(m, j, text[j]))) continue;
        if (st == GLIA_ENOMEM || on || (follow && st != GLIA_EUNSUPPORTED)) {
            glia_error(m->ctx, st, "%s (a layer made by %s; off runs the layers one by one)", glia_context_error(m->ctx),
                       fuse_origin);
            break;
        }
        /* auto: the chain stays as written */
        if (!follow)
            glia_log(m->ctx, GLIA_LOG_WARN, "%s = auto leaves the layers before [%s] as they are: %s", fuse_origin,
                     m->graph.nodes[j].layer.name, glia_context_error(m->ctx));
        glia_context_clear_error(m->ctx);
        st = GLIA_OK;
        for (int i = 0; i < j; i++) {
            int r = i;
            while (into[r] >= 0) r = into[r];
            if (r == j) into[i] = -1;  /* left in place, unfused */
        }
    }
    if (!st) drop_nodes(m, into, into + n);
    for (int j = 0; text && j < n; j++) free(text[j]);
    free(text);
    free(grew);
    free(into);
    return st;
}

glia_status glia__pass_fold_norm_eval(struct glia_model *m)
{
    glia_status st = GLIA_OK;
    if (m->dist.like) return GLIA_OK;  /* a dp replica never evaluates */
    for (int j = 0; j < m->graph.n_nodes && !st; j++) {
        struct glia__node *nj = &m->graph.nodes[j];
        int i = nj->in[0];
        glia_status (*affine)(struct glia_layer *, struct glia_tensor *, bool *) = glia_kernel_eval_affine(nj->layer.kernel);
        bool relu;
        if (!(nj->layer.type->flags & GLIA_TYPE_NORMALIZATION) || !affine || nj->n_in != 1 || i < 0 ||
            only_consumer(m, i) != j || nj->edge[0] != GLIA__EDGE_DIRECT || m->graph.nodes[i].norm_fold ||
            !(glia_layer_kernel_flags(&m->graph.nodes[i].layer) & GLIA_KERNEL_EVAL_AFFINE) ||
            m->graph.nodes[i].out_dtype != nj->out_dtype || m->graph.nodes[i].out_fmt != nj->out_fmt ||
            nj->out_shape.ndim < 2 || affine(&nj->layer, NULL, &relu))
            continue;
        glia_context_clear_error(m->ctx);
        struct glia_shape as = glia_shape_make(2, (int64_t[]){3, nj->out_shape.dim[1]});
        struct glia__node *ni = &m->graph.nodes[i];
        if ((st = glia_tensor_new(m->backend, GLIA_F32, &as, &ni->fold_affine))) break;
        ni->norm_fold = j + 1;
        nj->folded_by = i + 1;
    }
    return st;
}

glia_status glia__pass_fuse_dact(struct glia_model *m)
{
    for (int p = 0; p < m->graph.n_nodes; p++) {
        struct glia__node *np = &m->graph.nodes[p];
        int c = only_consumer(m, p);
        if (c < 0 || !(glia_layer_kernel_flags(&np->layer) & GLIA_KERNEL_DOUT_PREACT) || !np->needs_grad) continue;
        struct glia__node *nc = &m->graph.nodes[c];
        bool (*takes)(const struct glia_layer *, const char *) = glia_kernel_din_act(nc->layer.kernel);
        const char *act = glia_section_str(np->sec, "activation");
        if (!takes || nc->in[0] != p || nc->edge[0] != GLIA__EDGE_DIRECT || nc->in_dtype[0] != np->out_dtype ||
            !nc->needs_grad || !act || !strcmp(act, "none") || !takes(&nc->layer, act))
            continue;
        bool once = true;  /* read as input 0 only: its gradient is written once, never added */
        for (int k = 1; k < nc->n_in; k++) once &= nc->in[k] != p;
        if (!once) continue;
        glia_context_clear_error(m->ctx);
        nc->din_act = p + 1;
        np->dout_preact = c + 1;
    }
    return GLIA_OK;
}

/* Whether node i adds its two inputs, elementwise, and nothing else: its type's pointwise text is x + y. */
static bool is_sum_of_two(const struct glia__node *nd)
{
    const struct glia_layer_type *t = nd->layer.type;
    char text[8];
    return t->pointwise && nd->n_in == 2 && !nd->layer.n_params && !nd->layer.n_buffers &&
           !strcmp(glia_section_str(nd->sec, "impl"), "auto") && t->pointwise(&nd->layer, 2, text, sizeof text) == 5 &&
           !strcmp(text, "x + y");
}

glia_status glia__pass_fuse_residual(struct glia_model *m)
{
    for (int j = 0; j < m->graph.n_nodes; j++) {
        struct glia__node *nj = &m->graph.nodes[j];
        int i = nj->in[0];
        if (nj->n_in != 1 || i < 0 || !(glia_layer_kernel_flags(&nj->layer) & GLIA_KERNEL_RESIDUAL_IN)) continue;
        struct glia__node *ni = &m->graph.nodes[i];
        bool same = ni->out_dtype == nj->in_dtype[0] && nj->in_dtype[0] == nj->out_dtype && ni->out_fmt == nj->out_fmt &&
                    glia_shape_equal(&ni->out_shape, &nj->out_shape);
        for (int k = 0; k < 2 && same; k++) same = ni->edge[k] == GLIA__EDGE_DIRECT && ni->in_dtype[k] == ni->out_dtype;
        if (!same || nj->edge[0] != GLIA__EDGE_DIRECT || ni->res_norm || ni->norm_fold || nj->folded_by ||
            !is_sum_of_two(ni))
            continue;
        glia_context_clear_error(m->ctx);
        ni->res_norm = j + 1;
        nj->res_by = i + 1;
    }
    return GLIA_OK;
}

/* ---- pass checkpoint_segments ------------------------------------------------------------ */

static const char ckpt_origin[] = "[graph] checkpoint_segments";

/* Marks the segments that the cuts cut[0..n) (node indices, ascending) make: in each but the last, the nodes before
 * the cut whose output something in backward reads (their own backward, a consumer's backward through a direct or
 * retagged edge, a consumer's second forward) run forward again, those that can; the others' outputs die after the
 * forward. */
static void mark_segments(struct glia_model *m, const int *cut, int n)
{
    for (int i = 0; i < m->graph.n_nodes; i++) {
        m->graph.nodes[i].recompute = m->graph.nodes[i].cut = false;
        m->graph.nodes[i].recompute_n = 0;
    }
    for (int k = 0, prev = -1; k < n; prev = cut[k++]) {
        m->graph.nodes[cut[k]].recompute_n = cut[k] - prev - 1;
        m->graph.nodes[cut[k]].cut = true;
        for (int j = cut[k] - 1; j > prev; j--) {  /* consumers first: only the segment and its cut read j */
            bool needed = glia__bwd_reads_out(m, j);
            for (int i = j + 1; i <= cut[k] && !needed; i++)
                for (int e = 0; e < m->graph.nodes[i].n_in; e++)
                    if (m->graph.nodes[i].in[e] == j &&
                        (m->graph.nodes[i].recompute || (m->graph.nodes[i].edge[e] != GLIA__EDGE_CONVERT && glia__bwd_reads_in(m, i))))
                        needed = true;
            m->graph.nodes[j].recompute = needed;
        }
    }
}

/* A training step's activation cost with the nodes marked as now: the real plan (real) or the most floats alive at
 * once (the plan's floor, in O(nodes)), with *area the floats times moments alive; -1 when out of memory. */
static int64_t ckpt_cost(struct glia_model *m, bool real, double *area)
{
    return real ? glia__train_plan_len(m, m->data.batch) : glia__train_live_peak(m, m->data.batch, area);
}

/* Drops, last first, each of the *n cuts whose loss leaves the cost (ckpt_cost) at most *best; the nodes stay marked
 * for the cuts left. */
static void drop_unneeded_cuts(struct glia_model *m, int *cut, int *n, int64_t *best, bool real, int *trial)
{
    double area;
    for (int k = *n - 1; k >= 0 && *best >= 0; k--) {
        memcpy(trial, cut, sizeof *cut * (size_t)k);
        memcpy(trial + k, cut + k + 1, sizeof *cut * (size_t)(*n - k - 1));
        mark_segments(m, trial, *n - 1);
        int64_t c = ckpt_cost(m, real, &area);
        if (c >= 0 && c <= *best) memcpy(cut, trial, sizeof *cut * (size_t)--*n), *best = c;
    }
    mark_segments(m, cut, *n);
}

static glia_status choose_cuts(struct glia_model *m, int want, const bool *can, int *cut, int *trial);

/* Phase 4, activation checkpointing (as torch.utils.checkpoint.checkpoint_sequential): cut the graph into at most
 * `checkpoint_segments` segments, each cut after a layer whose output alone carries everything the later layers read
 * (the data batch aside). In every segment but the last, a training step keeps only the output of the segment's last
 * layer; the others' forward runs again just before that layer's backward. The cuts are chosen by the training step's
 * activation plan (core/memplan.c); a cut that saves nothing is not made. A dp replica cuts where its model did. */
glia_status glia__pass_checkpoint(struct glia_model *m, const struct glia_section *graph)
{
    int want = (int)glia_section_int(graph, "checkpoint_segments"), n = m->graph.n_nodes;
    m->graph.ckpt_segments = 1;
    m->graph.ckpt_asked = want;
    if (want < 2) return GLIA_OK;
    if (m->dist.like) {
        for (int i = 0; i < n; i++) {
            m->graph.nodes[i].recompute = m->dist.like->graph.nodes[i].recompute;
            m->graph.nodes[i].recompute_n = m->dist.like->graph.nodes[i].recompute_n;
            m->graph.nodes[i].cut = m->dist.like->graph.nodes[i].cut;
        }
        m->graph.ckpt_segments = m->dist.like->graph.ckpt_segments;
        memcpy(m->graph.ckpt_plan, m->dist.like->graph.ckpt_plan, sizeof m->graph.ckpt_plan);
        return GLIA_OK;
    }
    int *last_reader = malloc(3 * sizeof *last_reader * (size_t)n), n_can = 0;
    int *cut = last_reader + n, *trial = cut + n;  /* the cuts; a trial set of them (room for n each) */
    bool *can = malloc((size_t)n);                  /* a cut may follow node c */
    if (!last_reader || !can) {
        free(last_reader), free(can);
        return glia_error(m->ctx, GLIA_ENOMEM, "%s: out of memory planning the activations", ckpt_origin);
    }
    for (int i = 0; i < n; i++) {
        last_reader[i] = i;
        for (int k = 0; k < m->graph.nodes[i].n_in; k++)
            if (m->graph.nodes[i].in[k] >= 0) last_reader[m->graph.nodes[i].in[k]] = i;
    }
    for (int c = 0, reach = -1; c < n; c++) {  /* reach: the last reader of any node before c */
        can[c] = c + 1 < n && reach <= c;
        n_can += can[c];
        if (last_reader[c] > reach) reach = last_reader[c];
    }
    glia_status st = n_can ? GLIA_OK
                           : glia_section_error(graph, "checkpoint_segments", GLIA_EINVAL,
                                                "no layer's output alone carries what the layers after it read: nothing "
                                                "to cut (0 turns checkpointing off)");
    if (!st) st = choose_cuts(m, want, can, cut, trial);
    free(last_reader);
    free(can);
    return st;
}

/* The greedy choice of at most want - 1 cuts among those can allows (cut, trial: room for n_nodes each), marked on the
 * nodes, with the plans without and with them in m->graph.ckpt_plan. */
static glia_status choose_cuts(struct glia_model *m, int want, const bool *can, int *cut, int *trial)
{
    int n = m->graph.n_nodes, n_cut = 0;
    /* Greedy on the most floats alive at once (the plan's floor, cheap to find): add the cut that gives the smallest
     * peak, and of equal peaks the smallest area (shorter lives: the peak often falls only once two cuts are made);
     * then drop each cut whose loss leaves the peak as low. */
    double area, best_area;
    int64_t best = ckpt_cost(m, false, &best_area);
    while (best >= 0 && n_cut + 1 < want) {
        int pick = -1, at = 0;
        int64_t pick_peak = best;
        double pick_area = best_area;
        for (int c = 0; c < n; c++) {
            if (!can[c]) continue;
            int k = 0;
            while (k < n_cut && cut[k] < c) trial[k] = cut[k], k++;
            if (k < n_cut && cut[k] == c) continue;
            trial[k] = c;
            memcpy(trial + k + 1, cut + k, sizeof *cut * (size_t)(n_cut - k));
            mark_segments(m, trial, n_cut + 1);
            int64_t peak = ckpt_cost(m, false, &area);
            if (peak < 0) return glia_error(m->ctx, GLIA_ENOMEM, "%s: out of memory planning the activations", ckpt_origin);
            if (peak < pick_peak || (peak == pick_peak && area < pick_area))
                pick_peak = peak, pick_area = area, pick = c, at = k;
        }
        if (pick < 0) break;
        memmove(cut + at + 1, cut + at, sizeof *cut * (size_t)(n_cut - at));
        cut[at] = pick;
        n_cut++;
        best = pick_peak, best_area = pick_area;
    }
    drop_unneeded_cuts(m, cut, &n_cut, &best, false, trial);
    /* the plans themselves, without and with the cuts; then cuts the plan does not need go too, and cuts that do not
     * make the plan smaller are not made */
    mark_segments(m, cut, 0);
    m->graph.ckpt_plan[0] = best < 0 ? -1 : ckpt_cost(m, true, &area);
    mark_segments(m, cut, n_cut);
    m->graph.ckpt_plan[1] = m->graph.ckpt_plan[0] < 0 ? -1 : ckpt_cost(m, true, &area);
    drop_unneeded_cuts(m, cut, &n_cut, &m->graph.ckpt_plan[1], true, trial);
    if (m->graph.ckpt_plan[1] < 0) return glia_error(m->ctx, GLIA_ENOMEM, "%s: out of memory planning the activations", ckpt_origin);
    if (m->graph.ckpt_plan[1] >= m->graph.ckpt_plan[0]) n_cut = 0, m->graph.ckpt_plan[1] = m->graph.ckpt_plan[0];
    mark_segments(m, cut, n_cut);
    m->graph.ckpt_segments = n_cut + 1;
    if (m->graph.ckpt_segments < want)
        glia_log(m->ctx, GLIA_LOG_WARN, "%s = %d: %d segment%s; %s", ckpt_origin, want, m->graph.ckpt_segments,
                 m->graph.ckpt_segments > 1 ? "s" : "",
                 m->graph.ckpt_segments > 1 ? "another cut would not make the activations smaller"
                                      : "no cut makes a training step's activations smaller in this model");
    return GLIA_OK;
}

/* What edge k of node nd must be, from the formats and types on either side: the producer's (the data batch's for
 * -1) and what the layer gets. A type changes only between float types (a token batch of ids reaches a layer as it
 * is). */
static enum glia__edge edge_of(const struct glia_model *m, const struct glia__node *nd, int k)
{
    int p = nd->in[k];
    struct glia_shape s = glia__in_shape_of(m, p, m->data.batch);
    enum glia_memory_format have = p < 0 ? GLIA_CONTIGUOUS : m->graph.nodes[p].out_fmt;
    enum glia_dtype has = p < 0 ? glia__data_dtype(m) : m->graph.nodes[p].out_dtype;
    if (glia__float_dtype(has) && nd->in_dtype[k] != has) return GLIA__EDGE_CONVERT;
    if (nd->in_fmt[k] == have) return GLIA__EDGE_DIRECT;
    if (s.dim[1] == 1 || s.dim[2] * s.dim[3] == 1) return GLIA__EDGE_RETAG;
    return GLIA__EDGE_CONVERT;
}

/* Memory formats: a layer that takes either format (GLIA_KERNEL_CHANNELS_LAST) works in the
 * model's; any other layer, and the data batch, in contiguous NCHW. Where producer and
 * consumer disagree on a 4-D tensor the edge converts, unless C or H*W is 1 (both formats
 * are then the same bytes, and the edge only retags them). */
void glia__plan_formats(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        bool any =
            m->graph.format == GLIA_CHANNELS_LAST && (glia_layer_kernel_flags(&nd->layer) & GLIA_KERNEL_CHANNELS_LAST);
        nd->out_fmt = any && nd->out_shape.ndim == 4 ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
        for (int k = 0; k < nd->n_in; k++) {
            struct glia_shape s = glia__in_shape_of(m, nd->in[k], m->data.batch);
            nd->in_fmt[k] = any && s.ndim == 4 ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
            nd->edge[k] = edge_of(m, nd, k);
        }
    }
}

/* ---- half activations ([graph] half_activations) ----
 * With [runtime] precision = bf16 or fp16, on a backend that converts types (the math group's convert, ABI 2.1),
 * activations move between layers in that half type where both sides take it, as torch.autocast keeps them:
 *  - a node outputs half when its kernel has GLIA_KERNEL_HALF, it is not the loss, no loss whose kernel lacks the flag
 *    reads its output (the logits: a loss kernel with it reads half logits as f32 and writes their gradient in half,
 *    as autocast's bf16 logits and PyTorch's cross-entropy over them; the host widens them for the accuracy), and it
 *    reads no token batch (ids are not activations); its output gradient has the same type;
 *  - such a node gets every input in half too (the data batch converted); a loss with the flag gets its logits in
 *    the type their producer wrote (its loss and the loss scale f32); any other node gets f32;
 *  - where a layer gets another type than its producer wrote, the edge converts (glia_tensor_convert: into cin[k]
 *    in forward, and the gradient back from cdin[k] in backward, added when accumulating), format and type in one
 *    pass. Parameters, their gradients, buffers and the optimizer's state stay f32 (master weights). */

enum glia_dtype glia__half_of(const struct glia_model *m, const struct glia_section *graph)
{
    if (strcmp(glia_section_str(graph, "half_activations"), "auto") || !glia_backend_can_convert(m->backend))
        return GLIA_F32;
    switch (m->backend->options.precision) {
    case GLIA_PRECISION_BF16: return GLIA_BF16;
    case GLIA_PRECISION_FP16: return GLIA_F16;
    default: return GLIA_F32;
    }
}

/* Whether node i's output may be of the half type (the rule above). */
static bool may_be_half(const struct glia_model *m, int i)
{
    const struct glia__node *nd = &m->graph.nodes[i];
    if (!(glia_layer_kernel_flags(&nd->layer) & GLIA_KERNEL_HALF) || (nd->layer.type->flags & GLIA_TYPE_LOSS))
        return false;
    for (int k = 0; k < nd->n_in; k++)
        if (nd->in[k] < 0 && glia__data_dtype(m) != GLIA_F32) return false;
    for (int j = i + 1; j < m->graph.n_nodes; j++)
        for (int k = 0; k < m->graph.nodes[j].n_in; k++)
            if (m->graph.nodes[j].in[k] == i && (m->graph.nodes[j].layer.type->flags & GLIA_TYPE_LOSS) &&
                !(glia_layer_kernel_flags(&m->graph.nodes[j].layer) & GLIA_KERNEL_HALF))
                return false;
    return true;
}

/* The type node i takes its input k in: its output's, but a loss with GLIA_KERNEL_HALF takes its producer's (a
 * node's: the data batch is no logits). */
static enum glia_dtype in_dtype_of(const struct glia_model *m, int i, int k)
{
    const struct glia__node *nd = &m->graph.nodes[i];
    int p = nd->in[k];
    if (p >= 0 && (nd->layer.type->flags & GLIA_TYPE_LOSS) && (glia_layer_kernel_flags(&nd->layer) & GLIA_KERNEL_HALF))
        return m->graph.nodes[p].out_dtype;
    return nd->out_dtype;
}

void glia__plan_dtypes(struct glia_model *m, enum glia_dtype half)
{
    m->graph.half = half;
    for (int i = 0; i < m->graph.n_nodes; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        nd->out_dtype = half != GLIA_F32 && may_be_half(m, i) ? half : GLIA_F32;
        for (int k = 0; k < nd->n_in; k++) {
            nd->in_dtype[k] = in_dtype_of(m, i, k);
            nd->edge[k] = edge_of(m, nd, k);
        }
    }
}
