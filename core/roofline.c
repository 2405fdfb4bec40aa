/* core/roofline.c — glia profile's roofline: the bytes each layer and the optimizer move and the FLOPs they compute in
 * a training step, from the tensors' shapes and types and what each kernel declares it reads, and the device's peak.
 * Not the timing (core/step.c), and not a measurement of traffic: the bytes are the least a layer must move. */
#include <stdio.h>
#include <string.h>
#include "parts.h"
#include "roofline.h"

/* Bytes of tensor t (a view at the current batch) at `batch` rows. */
static double rows_bytes(const struct glia_tensor *t, int64_t batch)
{
    if (!t || t->shape.ndim < 1 || t->shape.dim[0] < 1) return 0;
    return (double)glia_tensor_nbytes(t) / (double)t->shape.dim[0] * (double)batch;
}

/* Input k of node nd: the tensor the layer reads (the data batch for -1). */
static const struct glia_tensor *input_of(const struct glia_model *m, const struct glia__node *nd, int k)
{
    return nd->in[k] < 0 ? m->act.x : m->graph.nodes[nd->in[k]].out;
}

/* Forward: each input once, the weights, the output (and the labels, for a loss). Backward, when it runs: the
 * output's gradient, the inputs (unless GLIA_KERNEL_BWD_NO_INPUT) and the output (unless GLIA_KERNEL_BWD_NO_OUTPUT),
 * the weights when an input's gradient is wanted, then each wanted input gradient and every weight gradient written.
 * A loss's output and its gradient are one scalar each: not counted. FLOPs: the type's forward count; backward twice
 * it for a layer with weights whose input gradient is wanted (one for the weights, one for the input), once
 * otherwise. */
void glia__node_cost(const struct glia_model *m, int i, int64_t batch, struct glia__cost *c)
{
    const struct glia__node *nd = &m->graph.nodes[i];
    const struct glia_layer *l = &nd->layer;
    bool loss = l->type->flags & GLIA_TYPE_LOSS;
    unsigned kf = l->kernel ? glia_layer_kernel_flags(l) : 0;
    double in = 0, weights = 0, dx = 0;
    bool wants_dx = false;
    for (int k = 0; k < nd->n_in; k++) {
        bool dup = false;  /* a tensor fed twice is read once */
        for (int j = 0; j < k; j++) dup |= nd->in[j] == nd->in[k];
        if (dup) continue;
        double b = rows_bytes(input_of(m, nd, k), batch);
        in += b;
        if (nd->in[k] >= 0 && m->graph.nodes[nd->in[k]].needs_grad) {
            dx += b;
            wants_dx = true;
        }
    }
    for (int p = 0; p < l->n_params; p++) weights += 4.0 * (double)glia_shape_numel(&l->params[p].shape);
    double out = loss ? 0 : rows_bytes(nd->out, batch), labels = loss ? rows_bytes(m->act.y, batch) : 0;
    *c = (struct glia__cost){0};
    c->flops_known = l->type->flops != NULL;
    c->fwd_bytes = in + weights + out + labels;
    c->fwd_flops = (double)nd->flops / (double)(m->data.batch > 0 ? m->data.batch : 1) * (double)batch;
    if (!nd->needs_grad) return;
    c->bwd_bytes = out + labels + (kf & GLIA_KERNEL_BWD_NO_INPUT ? 0 : in) + (kf & GLIA_KERNEL_BWD_NO_OUTPUT ? 0 : out) +
                   (wants_dx ? weights : 0) + dx + weights;
    c->bwd_flops = c->fwd_flops * (l->n_params > 0 && wants_dx ? 2 : 1);
}

/* The weights read and written, their gradients read, each state array read and written: 4 bytes each. */
double glia__optimizer_bytes(const struct glia_model *m)
{
    int n_state = m->trainer.opt.type ? m->trainer.opt.type->n_state : 0;
    return 4.0 * (double)m->params.wa.n * (3 + 2 * n_state);
}

void glia__peak_of(struct glia_model *m, double bandwidth, double flops, struct glia__peak *p)
{
    struct glia_device_peak d = {.struct_size = sizeof d};
    *p = (struct glia__peak){.bandwidth = bandwidth, .flops = flops};
    bool have = glia_backend_peak(m->backend, &d) == GLIA_OK;
    glia_context_clear_error(m->ctx);
    enum glia_precision prec = m->backend->options.precision;
    if (p->bandwidth <= 0 && have) p->bandwidth = d.bandwidth;
    if (p->flops <= 0 && have && (int)prec >= 0 && (int)prec < 4) p->flops = d.flops[prec];
    const char *given = bandwidth > 0 && flops > 0 ? "given"
                        : bandwidth > 0            ? "bandwidth given"
                        : flops > 0                ? "FLOP/s given"
                                                   : "";
    snprintf(p->basis, sizeof p->basis, "%s%s%s", have ? d.basis : "", have && *given ? "; " : "", given);
}

/* "12.3% mem": the larger of the two fractions, and which; "-" when neither peak is known. */
void glia__peak_share(const struct glia__peak *p, double bytes, double flops, double seconds, char *buf, size_t n)
{
    double fb = p->bandwidth > 0 && seconds > 0 ? bytes / seconds / p->bandwidth : -1;
    double ff = p->flops > 0 && seconds > 0 ? flops / seconds / p->flops : -1;
    if (fb < 0 && ff < 0) snprintf(buf, n, "-");
    else if (fb >= ff) snprintf(buf, n, "%.1f%% mem", 100 * fb);
    else snprintf(buf, n, "%.1f%% math", 100 * ff);
}
