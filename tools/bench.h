/* tools/bench.h — `glia bench WHAT`: micro-benchmarks of single layers on a device (today: conv,
 * the convolution table of PyTorch's performance-tuning guide). Not the PyTorch comparison: the
 * scripts under bench/ run both sides. */
#ifndef GLIA_TOOLS_BENCH_H
#define GLIA_TOOLS_BENCH_H

/* Runs `glia bench` with argv[0] = WHAT and its options after it; returns the exit status
 * (0 done, 1 failed or no device, 2 bad usage). Prints the table to stdout, errors to stderr. */
int glia__bench_main(int argc, char **argv);

/* The usage lines of `glia bench`. */
#define GLIA__BENCH_USAGE                                                                              \
    "       glia bench conv [--device cuda|cuda:N|cpu] [--steps N] [--warmup N] [--batch N]\n"         \
    "                       [--bias on|off] [--impl NAME] [--json]\n"

#endif
