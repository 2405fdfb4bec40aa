/* tests/test_plot.c — `glia plot`: the metrics parser (what glia writes, and its errors with
 * file:line), the SVG it draws (well-formed XML, one polyline point per epoch, axes, legend,
 * escaped title), and the command line. Not how the picture looks: that was checked by eye. */
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "testutil.h"
#include "../tools/plot.h"

/* Writes n epochs in the format of core/train.c; bad_from > 0 makes train_loss nan from
 * that epoch on (a diverged run). */
static void write_metrics(const char *path, int n, int nan_epoch)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    for (int e = 1; e <= n; e++) {
        double tl = 2.3 / (1 + 0.5 * e), vl = tl * 1.1 + 0.02, acc = 0.9 - 0.6 / (1 + e);
        fprintf(f,
                "{\"epoch\": %d, \"step\": %lld, \"lr\": %.9g, \"train_loss\": %.9g, \"test_loss\": %.9g, "
                "\"test_accuracy\": %.9g, \"samples_per_s\": %.6g, \"seconds\": %.6g, \"data_wait_s\": %.6g}\n",
                e, (long long)e * 938, 0.02, e == nan_epoch ? NAN : tl, vl, acc, 51234.5, 1.25 * e, 0.01);
    }
    CU_ASSERT_FATAL(fclose(f) == 0);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t k = fread(s, 1, (size_t)n, f);
    s[k] = '\0';
    fclose(f);
    return s;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* A small XML well-formedness check: tags balance, one root, quoted attributes, no '<' in
 * attribute values, only the five entities (or &#...;). Returns NULL or what is wrong. */
static const char *xml_check(const char *s)
{
    static char why[256];
    const char *stack[64];
    size_t lens[64];
    int depth = 0, roots = 0;
    const char *p = s;
    while (*p) {
        if (*p == '&') {
            static const char *const ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#"};
            int ok = 0;
            for (int i = 0; i < 6; i++) ok |= !strncmp(p, ents[i], strlen(ents[i]));
            if (!ok) return "a bare '&'";
            p++;
            continue;
        }
        if (*p != '<') {
            if (!depth && *p != '\n' && *p != ' ') return "text outside the root element";
            p++;
            continue;
        }
        if (!strncmp(p, "<?", 2)) {
            if (p != s) return "a processing instruction after the start";
            p = strstr(p, "?>");
            if (!p) return "an unterminated <?";
            p += 2;
            continue;
        }
        if (!strncmp(p, "<!--", 4)) {
            p = strstr(p, "-->");
            if (!p) return "an unterminated comment";
            p += 3;
            continue;
        }
        int closing = p[1] == '/';
        const char *name = p + 1 + closing;
        size_t nl = strcspn(name, " \t\n/>");
        if (!nl) return "a tag without a name";
        const char *q = name + nl;
        char quote = 0;
        for (; *q && (quote || *q != '>'); q++) {
            if (quote && *q == quote) quote = 0;
            else if (!quote && (*q == '"' || *q == '\'')) quote = *q;
            else if (*q == '<') return "'<' inside a tag";
        }
        if (!*q) return "an unterminated tag";
        int empty = q[-1] == '/';
        if (closing) {
            if (!depth || lens[depth - 1] != nl || strncmp(stack[depth - 1], name, nl)) {
                snprintf(why, sizeof why, "</%.*s> does not close the open element", (int)nl, name);
                return why;
            }
            depth--;
        } else {
            if (!depth) roots++;
            if (!empty) {
                if (depth == 64) return "nested too deeply";
                stack[depth] = name;
                lens[depth++] = nl;
            }
        }
        p = q + 1;
    }
    if (depth) return "unclosed elements at the end";
    if (roots != 1) return "not exactly one root element";
    return NULL;
}

static void check_xml(const char *svg, const char *path)
{
    const char *why = xml_check(svg);
    if (why) printf("\n  %s: %s\n", path, why);
    CU_ASSERT_PTR_NULL(why);
    if (system("command -v xmllint >/dev/null 2>&1") == 0) { /* a second opinion, where there is one */
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "xmllint --noout '%s'", path);
        CU_ASSERT_EQUAL(system(cmd), 0);
    }
}

/* The numbers of points of the polylines in the group of one series, in order; returns how
 * many polylines. Also counts the group's circles in *circles. */
static int polylines(const char *svg, const char *series, int *points, int max, int *circles)
{
    char open[64];
    snprintf(open, sizeof open, "<g class=\"%s\"", series);
    const char *g = strstr(svg, open), *end = g ? strstr(g, "</g>") : NULL;
    int n = 0;
    *circles = 0;
    if (!g || !end) return -1;
    for (const char *p = g; (p = strstr(p, "<circle")) && p < end; p++) (*circles)++;
    for (const char *p = g; (p = strstr(p, "<polyline")) && p < end; p++) {
        const char *pts = strstr(p, "points=\"");
        CU_ASSERT_FATAL(pts != NULL);
        pts += 8;
        int k = 0;
        for (const char *c = pts; *c != '"'; c++)
            if (*c == ',') k++;
        if (n < max) points[n] = k;
        n++;
    }
    return n;
}

/* Every circle lies inside the 960 x 446 picture. */
static void check_circles_inside(const char *svg)
{
    int bad = 0, n = 0;
    for (const char *p = svg; (p = strstr(p, "<circle cx=\"")); p++) {
        double x, y;
        if (sscanf(p, "<circle cx=\"%lf\" cy=\"%lf\"", &x, &y) != 2) continue;
        n++;
        bad += !(x > 0 && x < 960 && y > 60 && y < 446);
    }
    CU_ASSERT(n > 0);
    CU_ASSERT_EQUAL(bad, 0);
}

static char err[8192];

static void test_typical_run(void)
{
    const char *in = glia_test_tmp("plot-run.jsonl"), *out = glia_test_tmp("plot-run.svg");
    write_metrics(in, 12, 0);
    int rc = glia_plot(in, out, err, sizeof err);
    if (rc) printf("\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    char *svg = slurp(out);
    CU_ASSERT_FATAL(svg != NULL);
    check_xml(svg, out);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "font-family=\"sans-serif\""));
    int pts[4], circles;
    CU_ASSERT_EQUAL(polylines(svg, "train_loss", pts, 4, &circles), 1);
    CU_ASSERT_EQUAL(pts[0], 12);
    CU_ASSERT_EQUAL(circles, 12);
    CU_ASSERT_EQUAL(polylines(svg, "test_loss", pts, 4, &circles), 1);
    CU_ASSERT_EQUAL(pts[0], 12);
    CU_ASSERT_EQUAL(polylines(svg, "test_accuracy", pts, 4, &circles), 1);
    CU_ASSERT_EQUAL(pts[0], 12);
    CU_ASSERT_EQUAL(circles, 12);
    /* panel titles, axis labels, the legend and round tick labels */
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">loss</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">test accuracy</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">accuracy</text>"));
    CU_ASSERT_EQUAL(count(svg, ">epoch</text>"), 2);
    CU_ASSERT_EQUAL(count(svg, "<g class=\"legend\""), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">train_loss</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">test_loss</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">test_accuracy</text>"));
    for (int e = 0; e <= 12; e += 2) {
        char t[32];
        snprintf(t, sizeof t, ">%d</text>", e);
        CU_ASSERT_PTR_NOT_NULL(strstr(svg, t));
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">0.9</text>")); /* accuracy 0.6 .. 0.85: ticks by 0.1 */
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">0.6</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">0.5</text>")); /* loss 0.32 .. 1.71: ticks by 0.5 */
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">2.0</text>"));
    /* the title names the file; the summary the last epoch and the best accuracy */
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "plot-run.jsonl</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "12 epochs; last (epoch 12): train_loss 0.3286, test_loss 0.3814, "
                                       "test_accuracy 0.8538; best test_accuracy 0.8538 (epoch 12)"));
    CU_ASSERT_PTR_NULL(strstr(svg, "note:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "<title>epoch 3: train_loss 0.92</title>"));
    check_circles_inside(svg);
    free(svg);
}

static void test_one_epoch(void)
{
    const char *in = glia_test_tmp("plot-one.jsonl"), *out = glia_test_tmp("plot-one.svg");
    write_metrics(in, 1, 0);
    CU_ASSERT_EQUAL_FATAL(glia_plot(in, out, err, sizeof err), 0);
    char *svg = slurp(out);
    CU_ASSERT_FATAL(svg != NULL);
    check_xml(svg, out);
    int pts[4], circles;
    CU_ASSERT_EQUAL(polylines(svg, "train_loss", pts, 4, &circles), 0); /* a point, no line */
    CU_ASSERT_EQUAL(circles, 1);
    CU_ASSERT_EQUAL(polylines(svg, "test_accuracy", pts, 4, &circles), 0);
    CU_ASSERT_EQUAL(circles, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">0</text>")); /* epoch ticks 0, 1, 2 around the point */
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">1</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">2</text>"));
    CU_ASSERT_PTR_NULL(strstr(svg, ">0.5</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">1 epoch; last (epoch 1)"));
    CU_ASSERT_PTR_NULL(strstr(svg, "nan"));
    check_circles_inside(svg);
    free(svg);
}

static void test_many_epochs(void)
{
    const char *in = glia_test_tmp("plot-many.jsonl"), *out = glia_test_tmp("plot-many.svg");
    write_metrics(in, 200, 0);
    CU_ASSERT_EQUAL_FATAL(glia_plot(in, out, err, sizeof err), 0);
    char *svg = slurp(out);
    CU_ASSERT_FATAL(svg != NULL);
    check_xml(svg, out);
    int pts[4], circles;
    CU_ASSERT_EQUAL(polylines(svg, "test_loss", pts, 4, &circles), 1);
    CU_ASSERT_EQUAL(pts[0], 200);
    CU_ASSERT_EQUAL(circles, 200);
    for (int e = 0; e <= 200; e += 50) {
        char t[32];
        snprintf(t, sizeof t, ">%d</text>", e);
        CU_ASSERT_PTR_NOT_NULL(strstr(svg, t));
    }
    CU_ASSERT_PTR_NULL(strstr(svg, ">10</text>"));
    check_circles_inside(svg);
    free(svg);
}

/* A diverged run: nan, -nan, inf and null are not drawn and the lines break around them. */
static void test_nonfinite(void)
{
    const char *in = glia_test_tmp("plot-nan.jsonl"), *out = glia_test_tmp("plot-nan.svg");
    CU_ASSERT_FATAL(glia_test_write(in,
                                    "{\"epoch\": 1, \"train_loss\": 2.1, \"test_loss\": 2.0, \"test_accuracy\": 0.3}\n"
                                    "{\"epoch\": 2, \"train_loss\": 1.5, \"test_loss\": 1.6, \"test_accuracy\": 0.5}\n"
                                    "{\"epoch\": 3, \"train_loss\": nan, \"test_loss\": inf, \"test_accuracy\": 0.1}\n"
                                    "{\"epoch\": 4, \"train_loss\": 1.2, \"test_loss\": -nan, \"test_accuracy\": null}\n"
                                    "{\"epoch\": 5, \"train_loss\": 1.1, \"test_loss\": 1.3, \"test_accuracy\": 0.6}\n") == 0);
    CU_ASSERT_EQUAL_FATAL(glia_plot(in, out, err, sizeof err), 0);
    char *svg = slurp(out);
    CU_ASSERT_FATAL(svg != NULL);
    check_xml(svg, out);
    int pts[4], circles;
    CU_ASSERT_EQUAL(polylines(svg, "train_loss", pts, 4, &circles), 2);
    CU_ASSERT_EQUAL(pts[0], 2);
    CU_ASSERT_EQUAL(pts[1], 2);
    CU_ASSERT_EQUAL(circles, 4);
    CU_ASSERT_EQUAL(polylines(svg, "test_loss", pts, 4, &circles), 1); /* 1, 2 and a lone point at 5 */
    CU_ASSERT_EQUAL(pts[0], 2);
    CU_ASSERT_EQUAL(circles, 3);
    CU_ASSERT_EQUAL(polylines(svg, "test_accuracy", pts, 4, &circles), 1);
    CU_ASSERT_EQUAL(pts[0], 3);
    CU_ASSERT_EQUAL(circles, 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "note: 4 values (nan, inf or null) not drawn: train_loss 1, test_loss 2, "
                                       "test_accuracy 1</text>"));
    CU_ASSERT_PTR_NULL(strstr(svg, "\"nan"));
    CU_ASSERT_PTR_NULL(strstr(svg, "inf\""));
    free(svg);

    /* only nan: the panel says so instead of drawing */
    CU_ASSERT_FATAL(glia_test_write(in, "{\"epoch\": 1, \"train_loss\": nan, \"test_accuracy\": 0.5}\n") == 0);
    CU_ASSERT_EQUAL_FATAL(glia_plot(in, out, err, sizeof err), 0);
    svg = slurp(out);
    check_xml(svg, out);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">no finite values</text>"));
    free(svg);
    /* no accuracy key at all */
    CU_ASSERT_FATAL(glia_test_write(in, "{\"epoch\": 1, \"train_loss\": 0.5}\n{\"epoch\": 2, \"train_loss\": 0.4}\n") == 0);
    CU_ASSERT_EQUAL_FATAL(glia_plot(in, out, err, sizeof err), 0);
    svg = slurp(out);
    check_xml(svg, out);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">no data</text>"));
    CU_ASSERT_PTR_NULL(strstr(svg, "<g class=\"test_accuracy\""));
    free(svg);
}

/* What a JSON writer may do that glia does not: other key order, unknown keys of any kind,
 * escapes, CRLF, blank lines, exponents; a second run appended starts a new line. */
static void test_json_variants(void)
{
    const char *in = glia_test_tmp("plot-json.jsonl"), *out = glia_test_tmp("plot-json.svg");
    CU_ASSERT_FATAL(glia_test_write(in,
                                    "{\"test_accuracy\":0.5,\"epoch\":1,\"note\":\"a \\\"q\\\" \\u00e9\\n\","
                                    "\"tags\":[1,{\"a\":[]}],\"ok\":true,\"x\":null}\r\n"
                                    "\n"
                                    "  { \"epoch\" : 2 , \"test_accuracy\" : 6.5e-1 , \"train_loss\" : 1E0 }  \n"
                                    "{\"epoch\": 1, \"test_accuracy\": 0.55}\n"
                                    "{\"epoch\": 2, \"test_accuracy\": 0.7}\n"
                                    "{\"epoch\": 3, \"test_accuracy\": 0.75}\n") == 0);
    int rc = glia_plot(in, out, err, sizeof err);
    if (rc) printf("\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    char *svg = slurp(out);
    check_xml(svg, out);
    int pts[4], circles;
    CU_ASSERT_EQUAL(polylines(svg, "test_accuracy", pts, 4, &circles), 2);
    CU_ASSERT_EQUAL(pts[0], 2);
    CU_ASSERT_EQUAL(pts[1], 3);
    CU_ASSERT_EQUAL(circles, 5);
    CU_ASSERT_EQUAL(polylines(svg, "train_loss", pts, 4, &circles), 0);
    CU_ASSERT_EQUAL(circles, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">5 epochs;"));
    free(svg);
}

static void test_title_escaped(void)
{
    const char *in = glia_test_tmp("a&b<c>'d\".jsonl"), *out = glia_test_tmp("plot-esc.svg");
    write_metrics(in, 3, 0);
    CU_ASSERT_EQUAL_FATAL(glia_plot(in, out, err, sizeof err), 0);
    char *svg = slurp(out);
    CU_ASSERT_FATAL(svg != NULL);
    check_xml(svg, out);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "a&amp;b&lt;c&gt;&apos;d&quot;.jsonl</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "<title>glia metrics: "));
    CU_ASSERT_PTR_NULL(strstr(svg, "a&b"));
    free(svg);
    remove(in);

    /* a name that is not UTF-8, with a control character: still well-formed */
    in = glia_test_tmp("bad\x01name\xff\xc3.jsonl");
    write_metrics(in, 2, 0);
    CU_ASSERT_EQUAL_FATAL(glia_plot(in, out, err, sizeof err), 0);
    svg = slurp(out);
    check_xml(svg, out);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "bad?name??.jsonl</text>"));
    free(svg);
    remove(in);
}

static void test_output_name(void)
{
    char name[64];
    CU_ASSERT_EQUAL(glia_plot_output_name("runs/metrics.jsonl", name, sizeof name), 0);
    CU_ASSERT_STRING_EQUAL(name, "runs/metrics.svg");
    CU_ASSERT_EQUAL(glia_plot_output_name("m.json", name, sizeof name), 0);
    CU_ASSERT_STRING_EQUAL(name, "m.svg");
    CU_ASSERT_EQUAL(glia_plot_output_name("metrics.log", name, sizeof name), 0);
    CU_ASSERT_STRING_EQUAL(name, "metrics.log.svg");
    CU_ASSERT_EQUAL(glia_plot_output_name("dir.jsonl/metrics", name, sizeof name), 0);
    CU_ASSERT_STRING_EQUAL(name, "dir.jsonl/metrics.svg");
    CU_ASSERT_EQUAL(glia_plot_output_name("runs/.jsonl", name, sizeof name), 0);
    CU_ASSERT_STRING_EQUAL(name, "runs/.jsonl.svg");
    CU_ASSERT_EQUAL(glia_plot_output_name("a-rather-long-name.jsonl", name, 8), -1);
}

/* Runs glia_plot on text expected to fail; checks the message is want (with "@" standing for
 * the file's path) and that no output was written. */
static void expect_error(const char *text, const char *want)
{
    const char *in = glia_test_tmp("plot-bad.jsonl"), *out = glia_test_tmp("plot-bad.svg");
    CU_ASSERT_FATAL(glia_test_write(in, text) == 0);
    remove(out);
    CU_ASSERT_EQUAL(glia_plot(in, out, err, sizeof err), -1);
    char full[8192];
    const char *at = strchr(want, '@');
    snprintf(full, sizeof full, "%.*s%s%s", (int)(at - want), want, in, at + 1);
    if (strcmp(err, full)) printf("\n  got:  %s\n  want: %s\n", err, full);
    CU_ASSERT_STRING_EQUAL(err, full);
    CU_ASSERT_PTR_NULL(strchr(err, '\n'));
    CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0);
}

static void test_errors(void)
{
    const char *good = "{\"epoch\": 1, \"train_loss\": 0.5}\n";
    expect_error("", "@: empty file, no metrics to plot");
    expect_error("\n  \n\n", "@: empty file, no metrics to plot");
    char text[512];
    snprintf(text, sizeof text, "%s{\"epoch\" 2, \"train_loss\": 0.4}\n", good);
    expect_error(text, "@:2: invalid JSON at column 10: expected ':' after a key");
    snprintf(text, sizeof text, "%s\n{\"epoch\": 2, \"train_loss\": 0.4", good);
    expect_error(text, "@:3: invalid JSON at column 31: expected ',' or '}'");
    snprintf(text, sizeof text, "%s%s{\"epoch\": 3, \"train_loss\": 0.4} x\n", good, good);
    expect_error(text, "@:3: invalid JSON at column 33: unexpected text after '}'");
    expect_error("{\"epoch\": 1, \"train_loss: 0.4}\n", "@:1: invalid JSON at column 31: unterminated string");
    expect_error("epoch 1 loss 0.5\n", "@:1: invalid JSON at column 1: expected '{'");
    expect_error("{\"epoch\": 1, \"train_loss\": 0.5,}\n", "@:1: invalid JSON at column 32: expected a key (a string) or '}'");
    expect_error("{\"epoch\": 1, \"train_loss\": .5}\n", "@:1: invalid JSON at column 28: expected a value");
    expect_error("{\"epoch\": 1, \"train_loss\": 05}\n", "@:1: invalid JSON at column 30: leading zero in a number");
    expect_error("{\"epoch\": 1, \"train_loss\": 1e}\n", "@:1: invalid JSON at column 30: expected a digit in the exponent");
    snprintf(text, sizeof text, "%s%s{\"step\": 10, \"train_loss\": 0.4}\n", good, good);
    expect_error(text, "@:3: missing key \"epoch\"");
    expect_error("{\"epoch\": 1, \"lr\": 0.1, \"seconds\": 3}\n", "@:1: no \"train_loss\", \"test_loss\" or \"test_accuracy\" key");
    expect_error("{\"epoch\": \"one\", \"train_loss\": 0.5}\n", "@:1: \"epoch\" is not a finite number");
    expect_error("{\"epoch\": nan, \"train_loss\": 0.5}\n", "@:1: \"epoch\" is not a finite number");
    expect_error("{\"epoch\": 1, \"test_loss\": \"0.5\"}\n", "@:1: \"test_loss\" is not a number");

    const char *missing = glia_test_tmp("plot-no-such-file.jsonl");
    CU_ASSERT_EQUAL(glia_plot(missing, glia_test_tmp("plot-x.svg"), err, sizeof err), -1);
    char want[1024];
    snprintf(want, sizeof want, "cannot open %s: No such file or directory", missing);
    CU_ASSERT_STRING_EQUAL(err, want);

    const char *in = glia_test_tmp("plot-ok.jsonl");
    CU_ASSERT_FATAL(glia_test_write(in, good) == 0);
    CU_ASSERT_EQUAL(glia_plot(in, glia_test_tmp("no-such-dir/x.svg"), err, sizeof err), -1);
    snprintf(want, sizeof want, "cannot write %s: No such file or directory", glia_test_tmp("no-such-dir/x.svg"));
    CU_ASSERT_STRING_EQUAL(err, want);
}

/* Runs `glia ARGS`; returns the exit status, stderr in e. */
static int run_glia(const char *args, char *e, size_t n)
{
    const char *bin = getenv("GLIA_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>%s >/dev/null", bin ? bin : "tools/glia", args, glia_test_tmp("plot-cli.err"));
    int rc = system(cmd);
    FILE *f = fopen(glia_test_tmp("plot-cli.err"), "r");
    size_t k = f ? fread(e, 1, n - 1, f) : 0;
    e[k] = '\0';
    if (f) fclose(f);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_cli(void)
{
    const char *in = glia_test_tmp("plot-cli.jsonl"), *dflt = glia_test_tmp("plot-cli.svg"),
               *other = glia_test_tmp("plot-cli-other.svg");
    write_metrics(in, 4, 0);
    remove(dflt);
    remove(other);
    char args[2048], e[4096];
    snprintf(args, sizeof args, "plot %s", in);
    CU_ASSERT_EQUAL(run_glia(args, e, sizeof e), 0);
    CU_ASSERT_EQUAL(access(dflt, F_OK), 0);
    snprintf(args, sizeof args, "plot %s -o %s", in, other);
    CU_ASSERT_EQUAL(run_glia(args, e, sizeof e), 0);
    char *svg = slurp(other);
    CU_ASSERT_FATAL(svg != NULL);
    check_xml(svg, other);
    free(svg);

    const char *bad = glia_test_tmp("plot-cli-bad.jsonl");
    CU_ASSERT_FATAL(glia_test_write(bad, "{\"epoch\": 1, \"train_loss\": 0.5}\n{\"epoch\": 2,\n") == 0);
    snprintf(args, sizeof args, "plot %s", bad);
    CU_ASSERT_EQUAL(run_glia(args, e, sizeof e), 1);
    char want[1024];
    snprintf(want, sizeof want, "glia: %s:2: invalid JSON at column 13: expected a key (a string) or '}'\n", bad);
    CU_ASSERT_STRING_EQUAL(e, want);
    CU_ASSERT_EQUAL(run_glia("plot", e, sizeof e), 2);
    snprintf(args, sizeof args, "plot %s --bogus", in);
    CU_ASSERT_EQUAL(run_glia(args, e, sizeof e), 2);
    snprintf(args, sizeof args, "plot %s -o", in);
    CU_ASSERT_EQUAL(run_glia(args, e, sizeof e), 2);
    snprintf(args, sizeof args, "plot %s %s", in, in);
    CU_ASSERT_EQUAL(run_glia(args, e, sizeof e), 2);
}

GLIA_TEST_MAIN("plot", GLIA_TEST(test_typical_run), GLIA_TEST(test_one_epoch), GLIA_TEST(test_many_epochs),
               GLIA_TEST(test_nonfinite), GLIA_TEST(test_json_variants), GLIA_TEST(test_title_escaped),
               GLIA_TEST(test_output_name), GLIA_TEST(test_errors), GLIA_TEST(test_cli))
