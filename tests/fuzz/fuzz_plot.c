/* tests/fuzz/fuzz_plot.c — libFuzzer harness of `glia plot`'s reader of metrics files (JSON lines,
 * tools/plot.c) and its SVG writer. Not a check of the drawing: an input passes when it is drawn
 * or refused with a one-line message. */
#include "plot.h"
#include "fuzzutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = fuzz_write(fuzz_path("m.jsonl"), data, size, 0);
    char err[512] = "";
    if (glia_plot(in, fuzz_path("m.svg"), err, sizeof err) && (!err[0] || strchr(err, '\n')))
        fuzz_die("a refused file without a one-line message", err);
    return 0;
}
