/* tools/bench.h — `glia bench WHAT`: micro-benchmarks of single layers on a device: conv (the convolution
 * table of PyTorch's performance-tuning guide) and layer (one op at given shapes, its bytes per second, and
 * PyTorch's figure beside it when bench/layer/torch_layer.py runs) and optim (one optimizer step over a flat
 * parameter arena, its bytes per second). Not the training comparisons: the
 * scripts under bench/ run both sides. */
#ifndef GLIA_TOOLS_BENCH_H
#define GLIA_TOOLS_BENCH_H

/* Runs `glia bench` with argv[0] = WHAT and its options after it; returns the exit status
 * (0 done, 1 failed or no device, 2 bad usage). Prints the table to stdout, errors to stderr. */
int glia__bench_main(int argc, char **argv);

/* The usage lines of `glia bench`. */
#define GLIA__BENCH_USAGE                                                                              \
    "       glia bench conv [--device cuda|cuda:N|cpu] [--steps N] [--warmup N] [--batch N]\n"         \
    "                       [--bias on|off] [--relu on|off] [--impl NAME] [--json]\n"                                  \
    "       glia bench layer OP --shape NxCxHxW [--precision fp32|tf32|bf16|fp16]\n"                    \
    "                       [--memory-format contiguous|channels_last] [--activations auto|f32]\n"    \
    "                       [--device cuda|cuda:N|cpu] [--steps N] [--warmup N] [--torch SCRIPT|off]\n" \
    "                       [--json]\n"                                                                \
    "                       (OP: batchnorm, batchnorm_relu, maxpool, avgpool, dropout, cross_entropy,\n" \
    "                        relu, gelu, cat, attention, or any layer type)\n"                   \
    "       glia bench optim NAME [--params N] [--tensors K] [--device cuda|cuda:N|cpu] [--steps N]\n" \
    "                       [--warmup N] [--set KEY=VALUE]... [--json]\n"                          \
    "                       (NAME: sgd, adam, adamw, adadelta, lamb, lars, novograd, or any optimizer)\n"

#endif
