/* core/summary.c — glia_model_summary: the table of layers, shapes, parameters and FLOPs, and what the
 * graph passes did. Not the profile (core/train.c). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"
#include "act.h"

static void human(double v, char *buf, size_t n)
{
    if (v >= 1e9) snprintf(buf, n, "%.2fG", v / 1e9);
    else if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, n, "%.1fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

/* "graph pass fuse_pointwise: a (type) + b (type)": the layers as written that node i computes */
static void fused_layers(FILE *f, const struct glia_model *m, int i)
{
    fprintf(f, "graph pass fuse_pointwise:");
    for (int d = 0, first = 1; d < m->graph.n_decl; d++)
        if (m->graph.decl[d].node == i) {
            fprintf(f, "%s %s (%s)", first ? "" : " +", m->graph.decl[d].name, m->graph.decl[d].type);
            first = 0;
        }
}

void glia_model_summary(const struct glia_model *m, FILE *f)
{
    char dev[32], shp[96], fl[32];
    fprintf(f, "model %s on %s, batch %d, memory format %s, precision %s\n", m->cfg->path ? m->cfg->path : "(string)",
            glia_device_str(m->device, dev, sizeof dev), m->data.batch, glia_memory_format_name(m->graph.format),
            glia_precision_name(m->precision));
    if (m->dist.n_replicas > 1) {
        fprintf(f, "dp: batch %d split over %d devices:", m->data.batch, m->dist.n_replicas);
        for (int r = 0; r < m->dist.n_replicas; r++)
            fprintf(f, " %s", glia_device_str(r ? m->dist.replica[r]->device : m->device, dev, sizeof dev));
        fprintf(f, "\n");
    }
    if (m->dist.ddp)
        fprintf(f, "ddp: rank %d of %d over %s, batch %d per rank (%d in all), %d gradient buckets\n", m->dist.rank, m->dist.world,
                m->dist.comm->ops->name, m->data.batch, m->data.batch * m->dist.world, glia__ddp_n_buckets(m->dist.ddp));
    fprintf(f, "%-16s %-22s %-6s %-16s %10s %10s\n", "layer", "type", "impl", "output", "params", "FLOPs");
    struct glia_shape in = glia__in_shape_of(m, -1, 1);
    struct glia_shape per = in;
    per.ndim--;
    memmove(per.dim, in.dim + 1, sizeof(int64_t) * (size_t)per.ndim);
    fprintf(f, "%-16s %-22s %-6s %-16s %10s %10s\n", "input", "data", "-", glia_shape_str(&per, shp, sizeof shp), "0", "-");
    double total_flops = 0;
    for (int i = 0; i < m->graph.n_nodes; i++) {
        const struct glia__node *nd = &m->graph.nodes[i];
        long long np = 0;
        for (int p = 0; p < nd->layer.n_params; p++)
            if (nd->tie != p + 1) np += glia_shape_numel(&nd->layer.params[p].shape);  /* a tied one: its owner's */
        struct glia_shape o = nd->out_shape;
        if (!(nd->layer.type->flags & GLIA_TYPE_LOSS) && o.ndim > 0) {
            o.ndim--;
            memmove(o.dim, nd->out_shape.dim + 1, sizeof(int64_t) * (size_t)o.ndim);
        }
        double per_sample = nd->layer.type->flops ? (double)nd->flops / m->data.batch : -1;
        if (per_sample >= 0) {
            human(per_sample, fl, sizeof fl);
            total_flops += per_sample;
        } else {
            snprintf(fl, sizeof fl, "-");
        }
        glia_shape_str(&o, shp, sizeof shp);
        if (nd->out_dtype != GLIA_F32)  /* [graph] half_activations */
            snprintf(shp + strlen(shp), sizeof shp - strlen(shp), " %s", glia_dtype_name(nd->out_dtype));
        fprintf(f, "%-16s %-22s %-6s %-16s %10lld %10s\n", nd->layer.name, nd->layer.type->name,
                nd->layer.kernel->impl, shp, np, fl);
    }
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (m->graph.nodes[i].bias_dropped)
            fprintf(f, "graph pass drop_bias_before_norm: no bias in %s (its output goes only into %s, a %s)\n",
                    m->graph.nodes[i].layer.name, m->graph.nodes[m->graph.nodes[i].bias_dropped_for].layer.name,
                    m->graph.nodes[m->graph.nodes[i].bias_dropped_for].layer.type->name);
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (m->graph.nodes[i].act_fused) {
            fused_layers(f, m, i);
            fprintf(f, " run as %s %s with activation = %s\n", m->graph.nodes[i].layer.type->name, m->graph.nodes[i].layer.name,
                    glia_section_str(m->graph.nodes[i].sec, "activation"));
        }
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (m->graph.nodes[i].din_act) {
            const struct glia__node *nd = &m->graph.nodes[i], *np = &m->graph.nodes[nd->din_act - 1];
            fprintf(f, "graph pass fuse_pointwise: in training %s (%s) applies the gradient of %s's activation (%s) as it "
                    "writes that layer's output gradient\n", nd->layer.name, nd->layer.type->name, np->layer.name,
                    glia_section_str(np->sec, "activation"));
        }
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (m->graph.nodes[i].res_norm) {
            const struct glia__node *nd = &m->graph.nodes[i], *nj = &m->graph.nodes[nd->res_norm - 1];
            fprintf(f, "graph pass fuse_pointwise: %s (%s) computes the sum %s (%s) in the same pass\n", nj->layer.name,
                    nj->layer.type->name, nd->layer.name, nd->layer.type->name);
        }
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (m->graph.nodes[i].norm_fold) {
            const struct glia__node *nd = &m->graph.nodes[i], *nj = &m->graph.nodes[nd->norm_fold - 1];
            fprintf(f, "graph pass fuse_pointwise: in evaluation %s (%s) computes %s (%s) too, in the same pass over its "
                    "output\n", nd->layer.name, nd->layer.type->name, nj->layer.name, nj->layer.type->name);
        }
    for (int i = 0; i < m->graph.n_nodes; i++) {
        const struct glia__node *nd = &m->graph.nodes[i];
        if (!nd->own_sec) continue;
        fused_layers(f, m, i);
        fprintf(f, " run as one pointwise layer %s = %s of", nd->layer.name, glia_section_str(nd->sec, "expr"));
        for (int k = 0; k < nd->n_in; k++)
            fprintf(f, "%s %c = %s", k ? "," : "", "xyzw"[k], nd->in[k] < 0 ? "input" : m->graph.nodes[nd->in[k]].layer.name);
        fprintf(f, "\n");
    }
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (m->graph.nodes[i].tie)
            fprintf(f, "tied weight: %s.%s is %s.%s (one tensor; both layers' gradients are summed into it)\n",
                    m->graph.nodes[i].layer.name, m->graph.nodes[i].layer.params[m->graph.nodes[i].tie - 1].name,
                    m->graph.nodes[m->graph.nodes[i].tie_node].layer.name,
                    m->graph.nodes[m->graph.nodes[i].tie_node].layer.params[m->graph.nodes[i].tie_param].name);
    if (m->graph.ckpt_asked > 1 && m->graph.ckpt_segments == 1)
        fprintf(f, "graph pass checkpoint_segments: no cut makes a training step's activations smaller than %.1f MB "
                "(batch %d); none made\n", 4e-6 * (double)m->graph.ckpt_plan[0], m->data.batch);
    if (m->graph.ckpt_segments > 1) {
        fprintf(f, "graph pass checkpoint_segments: %d segments, cut after", m->graph.ckpt_segments);
        for (int i = 0, cuts = 0; i < m->graph.n_nodes; i++)
            if (m->graph.nodes[i].cut) fprintf(f, "%s %s", cuts++ ? "," : "", m->graph.nodes[i].layer.name);
        fprintf(f, "; a training step runs the forward of");
        int any = 0;
        for (int i = 0; i < m->graph.n_nodes; i++)
            if (m->graph.nodes[i].recompute) {
                int j = i;
                while (j + 1 < m->graph.n_nodes && m->graph.nodes[j + 1].recompute) j++;
                fprintf(f, "%s %s", any++ ? "," : "", m->graph.nodes[i].layer.name);
                if (j > i) fprintf(f, " .. %s (%d layers)", m->graph.nodes[j].layer.name, j - i + 1);
                i = j;
            }
        fprintf(f, "%s again in backward: %.1f MB of activations instead of %.1f MB (batch %d)\n", any ? "" : " no layer",
                4e-6 * (double)m->graph.ckpt_plan[1], 4e-6 * (double)m->graph.ckpt_plan[0], m->data.batch);
    }
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int k = 0; k < m->graph.nodes[i].n_in; k++)
            if (m->graph.nodes[i].edge[k] == GLIA__EDGE_CONVERT) {
                const struct glia__node *nd = &m->graph.nodes[i];
                int p = nd->in[k];
                enum glia_memory_format fmt = p < 0 ? GLIA_CONTIGUOUS : m->graph.nodes[p].out_fmt;
                enum glia_dtype t = p < 0 ? glia__data_dtype(m) : m->graph.nodes[p].out_dtype;
                const char *from = p < 0 ? "input" : m->graph.nodes[p].layer.name;
                if (fmt != nd->in_fmt[k])
                    fprintf(f, "memory format: %s converts its input from %s (%s -> %s)\n", nd->layer.name, from,
                            glia_memory_format_name(fmt), glia_memory_format_name(nd->in_fmt[k]));
                if (t != nd->in_dtype[k])
                    fprintf(f, "half activations: %s converts its input from %s (%s -> %s)\n", nd->layer.name, from,
                            glia_dtype_name(t), glia_dtype_name(nd->in_dtype[k]));
            }
    if (m->params.decay_mask) {  /* which parameters the optimizer's weight_decay skips */
        fprintf(f, "no weight decay:");
        for (int i = 0; i < m->graph.n_nodes; i++)
            for (int p = 0; p < m->graph.nodes[i].layer.n_params; p++)
                if (!m->graph.nodes[i].layer.params[p].decay)
                    fprintf(f, " %s.%s", m->graph.nodes[i].layer.name, m->graph.nodes[i].layer.params[p].name);
        fprintf(f, "\n");
    }
    struct glia__act_plan pl;  /* shape inference only: the model does not change */
    if (glia__act_plan((struct glia_model *)m, m->data.batch, m->data.test_batch, &pl)) {
        glia_context_clear_error(m->ctx);  /* the line is left out; training reports the error */
    } else {
        fprintf(f, "activation memory: %.1f MB, shared by a training step at batch %d (%.1f MB; %.1f MB if nothing "
                "were shared) and evaluation at batch %d (%.1f MB; %.1f MB)\n", pl.len * 4e-6, m->data.batch, pl.train * 4e-6,
                pl.train_unshared * 4e-6, m->data.test_batch, pl.eval * 4e-6, pl.eval_unshared * 4e-6);
        glia__act_plan_free(&pl);
    }
    human(total_flops, fl, sizeof fl);
    char at[48] = "";
    if (m->data.train.tokens) snprintf(at, sizeof at, " at the longest length (%d)", m->data.train.cols);
    fprintf(f, "total: %d layers, %lld parameters (%.2f MB fp32), %s FLOPs per sample forward%s\n",
            m->graph.n_nodes, (long long)m->params.wa.n, m->params.wa.n * 4.0 / 1e6, fl, at);
    static const char *sched[] = {"constant", "step", "cosine", "poly", "linear"};
    char shape[64], how[96];
    if (m->trainer.schedule == GLIA__SCHED_POLY)  /* the per-step decays say where they end */
        snprintf(how, sizeof how, "poly power %g to %g at step %lld, warmup %lld", m->trainer.power, m->trainer.min_lr,
                 (long long)m->trainer.total_steps, (long long)m->trainer.warmup_steps);
    else if (m->trainer.schedule == GLIA__SCHED_LINEAR)
        snprintf(how, sizeof how, "linear to %g at step %lld, warmup %lld", m->trainer.min_lr,
                 (long long)m->trainer.total_steps, (long long)m->trainer.warmup_steps);
    else
        snprintf(how, sizeof how, "%s", sched[m->trainer.schedule]);
    if (m->data.train.tokens)
        snprintf(shape, sizeof shape, "token sequences up to %d%s", m->data.train.cols,
                 m->data.group_by_length ? ", grouped by length" : "");
    else if (m->data.train.channels > 1)
        snprintf(shape, sizeof shape, "%dx%dx%d", m->data.train.channels, m->data.train.rows, m->data.train.cols);
    else
        snprintf(shape, sizeof shape, "%dx%d", m->data.train.rows, m->data.train.cols);
    fprintf(f, "data: %lld training samples, %lld test samples, %s, %d classes; optimizer %s, lr %g (%s), %d epochs\n",
            (long long)m->data.train.n, (long long)m->data.test.n, shape, m->data.n_classes, m->trainer.opt.type->name, m->trainer.lr, how,
            m->trainer.epochs);
    const struct glia__dataset *d = &m->data.train;
    if (d->class_names) {  /* format = folder: the classes by their folders, label 0 first */
        fprintf(f, "classes:");
        for (int i = 0; i < d->n_classes && i < 20; i++) fprintf(f, "%s %d %s", i ? "," : "", i, d->class_names[i]);
        if (d->n_classes > 20) fprintf(f, ", ... (%d more)", d->n_classes - 20);
        fprintf(f, "\n");
    }
}
