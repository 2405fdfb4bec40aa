/* tests/test_plugin.c — CUnit tests of the plugin loader against the fixture plugins in
 * tests/fixtures (good, wrong ABI, newer minor, name mismatch, no entry, failing init, probe
 * refusal, not a shared object), the checks of the register calls, and a new context's log level
 * ($GLIA_LOG_LEVEL). Not a test of any real plugin's features. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glia/glia.h>
#include "internal.h"
#include "testutil.h"

/* glia_test_fixtures()/<name>.so in a static buffer ring. */
static const char *fixture(const char *name)
{
    static char bufs[8][1024];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s.so", glia_test_fixtures(), name);
    return b;
}

static struct glia_context *new_ctx(void)
{
    struct glia_context *ctx = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(ctx != NULL);
    /* Warnings from the loader would clutter the test log; errors stay visible. */
    glia_log_set(ctx, stderr, GLIA_LOG_ERROR);
    return ctx;
}

/* Asserts that the context's error message contains needle, and shows it when not. */
#define ASSERT_MSG_HAS(ctx, needle)                                                          \
    do {                                                                                     \
        const char *m_ = glia_context_error(ctx);                                            \
        int ok_ = m_ && strstr(m_, (needle)) != NULL;                                        \
        if (!ok_) fprintf(stderr, "\n  message \"%s\" lacks \"%s\"\n", m_ ? m_ : "(null)", (needle)); \
        CU_ASSERT(ok_);                                                                      \
    } while (0)

/* Loads and reports the status; shows the message when it is not the expected one. */
static glia_status load(struct glia_context *ctx, const char *what, glia_status expect)
{
    glia_context_clear_error(ctx);
    glia_status st = glia_plugin_load(ctx, what);
    if (st != expect)
        fprintf(stderr, "\n  glia_plugin_load(%s) = %s (expected %s): %s\n", what,
                glia_status_name(st), glia_status_name(expect), glia_context_error(ctx));
    return st;
}

static void abi_text(char *buf, size_t n, unsigned pmaj, unsigned pmin)
{
    snprintf(buf, n, "plugin ABI %u.%u, core ABI %u.%u", pmaj, pmin, (unsigned)GLIA_ABI_MAJOR,
             (unsigned)GLIA_ABI_MINOR);
}

static void test_good_by_path(void)
{
    struct glia_context *ctx = new_ctx();
    CU_ASSERT(load(ctx, fixture("good"), GLIA_OK) == GLIA_OK);
    /* Already loaded: a no-op, by path and by name. */
    CU_ASSERT(load(ctx, fixture("good"), GLIA_OK) == GLIA_OK);
    CU_ASSERT(glia_plugin_add_path(ctx, glia_test_fixtures()) == GLIA_OK);
    CU_ASSERT(load(ctx, "good", GLIA_OK) == GLIA_OK);
    glia_context_free(ctx);
}

static void test_good_by_name(void)
{
    struct glia_context *ctx = new_ctx();
    CU_ASSERT(glia_plugin_add_path(ctx, glia_test_fixtures()) == GLIA_OK);
    CU_ASSERT(load(ctx, "good", GLIA_OK) == GLIA_OK);
    CU_ASSERT(load(ctx, "good", GLIA_OK) == GLIA_OK);
    CU_ASSERT(load(ctx, fixture("good"), GLIA_OK) == GLIA_OK);
    glia_context_free(ctx);
}

static void test_not_found(void)
{
    struct glia_context *ctx = new_ctx();
    CU_ASSERT(glia_plugin_add_path(ctx, glia_test_fixtures()) == GLIA_OK);
    CU_ASSERT(load(ctx, "no_such_plugin_here", GLIA_ENOTFOUND) == GLIA_ENOTFOUND);
    ASSERT_MSG_HAS(ctx, "no_such_plugin_here");
    /* The message names the searched folders: the added one, $GLIA_PLUGIN_PATH's, and the
     * installed plugin folder. */
    ASSERT_MSG_HAS(ctx, glia_test_fixtures());
    const char *env = getenv("GLIA_PLUGIN_PATH");
    if (env && *env) {
        char *copy = strdup(env), *save = NULL;
        CU_ASSERT_FATAL(copy != NULL);
        for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
            if (*d) ASSERT_MSG_HAS(ctx, d);
        free(copy);
    }
    /* The tests run with GLIA_PLUGIN_SYSTEM_PATH set and empty: no installed folder. Unset,
     * the installed folder is searched; set to a folder, that folder is searched instead. */
    const char *sys = getenv("GLIA_PLUGIN_SYSTEM_PATH");
    char *saved = sys ? strdup(sys) : NULL;
    if (sys) CU_ASSERT_PTR_NULL(strstr(glia_context_error(ctx), glia_plugin_dir()));
    unsetenv("GLIA_PLUGIN_SYSTEM_PATH");
    CU_ASSERT(load(ctx, "no_such_plugin_here", GLIA_ENOTFOUND) == GLIA_ENOTFOUND);
    ASSERT_MSG_HAS(ctx, glia_plugin_dir());
    setenv("GLIA_PLUGIN_SYSTEM_PATH", "/nonexistent-glia-a:/nonexistent-glia-b", 1);
    CU_ASSERT(load(ctx, "no_such_plugin_here", GLIA_ENOTFOUND) == GLIA_ENOTFOUND);
    ASSERT_MSG_HAS(ctx, "/nonexistent-glia-a");
    ASSERT_MSG_HAS(ctx, "/nonexistent-glia-b");
    CU_ASSERT_PTR_NULL(strstr(glia_context_error(ctx), glia_plugin_dir()));
    if (saved) setenv("GLIA_PLUGIN_SYSTEM_PATH", saved, 1);
    else unsetenv("GLIA_PLUGIN_SYSTEM_PATH");
    free(saved);
    glia_context_free(ctx);
}

/* A folder of $GLIA_PLUGIN_SYSTEM_PATH is searched (after the added folders and
 * $GLIA_PLUGIN_PATH) in place of the installed one. */
static void test_system_path(void)
{
    const char *sys = getenv("GLIA_PLUGIN_SYSTEM_PATH");
    char *saved = sys ? strdup(sys) : NULL;
    char list[1200];
    snprintf(list, sizeof list, "/nonexistent-glia-a:%s", glia_test_fixtures());
    setenv("GLIA_PLUGIN_SYSTEM_PATH", list, 1);
    struct glia_context *ctx = new_ctx();
    CU_ASSERT(load(ctx, "good", GLIA_OK) == GLIA_OK);
    glia_context_free(ctx);
    setenv("GLIA_PLUGIN_SYSTEM_PATH", "", 1);
    ctx = new_ctx();
    CU_ASSERT(load(ctx, "good", GLIA_ENOTFOUND) == GLIA_ENOTFOUND);
    glia_context_free(ctx);
    if (saved) setenv("GLIA_PLUGIN_SYSTEM_PATH", saved, 1);
    else unsetenv("GLIA_PLUGIN_SYSTEM_PATH");
    free(saved);
}

static void test_wrong_abi(void)
{
    struct glia_context *ctx = new_ctx();
    char want[128];
    const char *path = fixture("wrong_abi");
    CU_ASSERT(load(ctx, path, GLIA_EABI) == GLIA_EABI);
    abi_text(want, sizeof want, GLIA_ABI_MAJOR + 1, 0);
    ASSERT_MSG_HAS(ctx, path);
    ASSERT_MSG_HAS(ctx, GLIA_PLUGIN_ENTRY_SYMBOL);
    ASSERT_MSG_HAS(ctx, want);
    /* Refused, not recorded: the same answer again. */
    CU_ASSERT(load(ctx, path, GLIA_EABI) == GLIA_EABI);
    glia_context_free(ctx);
}

static void test_newer_minor(void)
{
    struct glia_context *ctx = new_ctx();
    char want[128];
    const char *path = fixture("newer_minor");
    CU_ASSERT(load(ctx, path, GLIA_EABI) == GLIA_EABI);
    abi_text(want, sizeof want, GLIA_ABI_MAJOR, GLIA_ABI_MINOR + 1);
    ASSERT_MSG_HAS(ctx, path);
    ASSERT_MSG_HAS(ctx, GLIA_PLUGIN_ENTRY_SYMBOL);
    ASSERT_MSG_HAS(ctx, want);
    glia_context_free(ctx);
}

static void test_name_mismatch(void)
{
    struct glia_context *ctx = new_ctx();
    CU_ASSERT(load(ctx, fixture("name_mismatch"), GLIA_EPLUGIN) == GLIA_EPLUGIN);
    ASSERT_MSG_HAS(ctx, "other_name");
    ASSERT_MSG_HAS(ctx, "name_mismatch");
    glia_context_free(ctx);
}

static void test_no_entry(void)
{
    struct glia_context *ctx = new_ctx();
    const char *path = fixture("no_entry");
    CU_ASSERT(load(ctx, path, GLIA_EPLUGIN) == GLIA_EPLUGIN);
    ASSERT_MSG_HAS(ctx, path);
    ASSERT_MSG_HAS(ctx, GLIA_PLUGIN_ENTRY_SYMBOL);
    glia_context_free(ctx);
}

/* init registers fixture_rollback and fails. The failure must be rolled back completely:
 * the plugin is not recorded as loaded (a second load runs init again and fails the same
 * way) and its registration is gone (else the second init's glia_register_layer would give
 * GLIA_EEXIST, which failing_init returns instead of GLIA_EINVAL). */
static void test_failing_init(void)
{
    struct glia_context *ctx = new_ctx();
    const char *path = fixture("failing_init");
    CU_ASSERT(load(ctx, path, GLIA_EINVAL) == GLIA_EINVAL);
    ASSERT_MSG_HAS(ctx, "failing_init");
    ASSERT_MSG_HAS(ctx, "init");
    CU_ASSERT(load(ctx, path, GLIA_EINVAL) == GLIA_EINVAL);
    ASSERT_MSG_HAS(ctx, "failing_init");
    /* The context is still usable. */
    CU_ASSERT(load(ctx, fixture("good"), GLIA_OK) == GLIA_OK);
    glia_context_free(ctx);
}

static void test_probe_refuse(void)
{
    struct glia_context *ctx = new_ctx();
    const char *path = fixture("probe_refuse");
    CU_ASSERT(load(ctx, path, GLIA_EPROBE) == GLIA_EPROBE);
    ASSERT_MSG_HAS(ctx, "no such device here");
    ASSERT_MSG_HAS(ctx, path);
    glia_context_free(ctx);
}

/* A text file named junk.so: dlopen fails, and the message carries dlerror's text. */
static void test_not_a_shared_object(void)
{
    const char *path = glia_test_tmp("junk.so");
    CU_ASSERT_FATAL(glia_test_write(path, "this is not an ELF file, just text\n") == 0);

    /* What dlopen says about it here, without the leading "path: ". */
    char expect[512] = "";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CU_ASSERT_FATAL(h == NULL);
    const char *e = dlerror();
    CU_ASSERT_FATAL(e != NULL);
    const char *tail = e;
    size_t plen = strlen(path);
    if (strncmp(e, path, plen) == 0 && strncmp(e + plen, ": ", 2) == 0) tail = e + plen + 2;
    snprintf(expect, sizeof expect, "%s", tail);

    struct glia_context *ctx = new_ctx();
    CU_ASSERT(load(ctx, path, GLIA_EPLUGIN) == GLIA_EPLUGIN);
    ASSERT_MSG_HAS(ctx, path);
    ASSERT_MSG_HAS(ctx, expect);
    glia_context_free(ctx);
    remove(path);
}

/* Loading everything in the search path: refusals are warnings, the good one loads. */
static void test_load_all(void)
{
    struct glia_context *ctx = new_ctx();
    FILE *log = tmpfile();
    CU_ASSERT_FATAL(log != NULL);
    glia_log_set(ctx, log, GLIA_LOG_WARN);
    CU_ASSERT(glia_plugin_add_path(ctx, glia_test_fixtures()) == GLIA_OK);
    glia_status st = glia_plugin_load_all(ctx);
    if (st != GLIA_OK)
        fprintf(stderr, "\n  glia_plugin_load_all = %s: %s\n", glia_status_name(st),
                glia_context_error(ctx));
    CU_ASSERT(st == GLIA_OK);

    char text[8192];
    size_t n = 0;
    rewind(log);
    n = fread(text, 1, sizeof text - 1, log);
    text[n] = '\0';
    fclose(log);
    glia_log_set(ctx, stderr, GLIA_LOG_ERROR);
    if (!strstr(text, "wrong_abi")) fprintf(stderr, "\n  load_all log lacks wrong_abi:\n%s\n", text);
    CU_ASSERT(strstr(text, "wrong_abi") != NULL);
    CU_ASSERT(strstr(text, "failing_init") != NULL);
    /* good was loaded by load_all: loading it again is the no-op. */
    CU_ASSERT(load(ctx, "good", GLIA_OK) == GLIA_OK);
    glia_context_free(ctx);
}

/* Copies file from to to; 0 on success. */
static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    char buf[65536];
    size_t n;
    int bad = !in || !out;
    while (!bad && (n = fread(buf, 1, sizeof buf, in)) > 0) bad = fwrite(buf, 1, n, out) != n;
    if (in) fclose(in);
    if (out && fclose(out)) bad = 1;
    return bad ? -1 : 0;
}

/* "marker.so" (no '/') is the file of the working directory: dlopen would look the bare name up in
 * LD_LIBRARY_PATH and the system's library folders instead, where it is not. */
static void test_bare_so_name_is_a_file(void)
{
    char dir[600], old[4096];
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("bare-so"));
    mkdir(dir, 0755);
    char path[700];
    snprintf(path, sizeof path, "%s/marker.so", dir);
    CU_ASSERT_FATAL(copy_file(fixture("marker"), path) == 0);
    CU_ASSERT_FATAL(getcwd(old, sizeof old) != NULL);
    CU_ASSERT_FATAL(chdir(dir) == 0);
    struct glia_context *ctx = new_ctx();
    CU_ASSERT(load(ctx, "marker.so", GLIA_OK) == GLIA_OK);
    const char *from = glia__plugin_path(ctx, "marker");
    CU_ASSERT(from && !strcmp(from, "./marker.so"));
    CU_ASSERT(load(ctx, "no_such.so", GLIA_ENOTFOUND) == GLIA_ENOTFOUND);
    ASSERT_MSG_HAS(ctx, "plugin file ./no_such.so not found");
    glia_context_free(ctx);
    CU_ASSERT_FATAL(chdir(old) == 0);
    remove(path);
}

/* glia_plugin_print lists libglia, then the plugins by name, whatever order they loaded in. */
static void test_print_sorted(void)
{
    struct glia_context *ctx = new_ctx();
    CU_ASSERT(load(ctx, fixture("marker"), GLIA_OK) == GLIA_OK);
    CU_ASSERT(load(ctx, fixture("good"), GLIA_OK) == GLIA_OK);
    CU_ASSERT(load(ctx, fixture("forward_counter"), GLIA_OK) == GLIA_OK);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT(glia_plugin_print(ctx, f, NULL) == GLIA_OK);
    fclose(f);
    const char *lib = strstr(text, "libglia (built in)"), *fc = strstr(text, "\nforward_counter "),
               *good = strstr(text, "\ngood "), *mk = strstr(text, "\nmarker ");
    if (!(lib && fc && good && mk && lib < fc && fc < good && good < mk)) printf("\n  not sorted:\n%s", text);
    CU_ASSERT(lib && fc && good && mk && lib < fc && fc < good && good < mk);
    free(text);
    glia_context_free(ctx);
}

/* The search folders in order, for messages; and the plugin file nearest to a word, read from the
 * folders' listings without loading anything (marker's constructor would write the marker file). */
static void test_searched_and_near(void)
{
    const char *marker = glia_test_tmp("near.marker");
    remove(marker);
    setenv("GLIA_TEST_MARKER", marker, 1);
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("near-dir"));
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/marker.so", dir);
    CU_ASSERT_FATAL(copy_file(fixture("marker"), path) == 0);
    struct glia_context *ctx = new_ctx();
    CU_ASSERT(glia_plugin_add_path(ctx, dir) == GLIA_OK);
    char buf[2048], near[64];
    const char *sys = getenv("GLIA_PLUGIN_SYSTEM_PATH");  /* the tests' own: set and empty */
    char *saved = sys ? strdup(sys) : NULL;
    unsetenv("GLIA_PLUGIN_SYSTEM_PATH");  /* the installed folder comes last */
    glia__plugin_searched(ctx, buf, sizeof buf);
    if (saved) setenv("GLIA_PLUGIN_SYSTEM_PATH", saved, 1);
    free(saved);
    CU_ASSERT(!strncmp(buf, dir, strlen(dir)) && !strncmp(buf + strlen(dir), ", ", 2));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, glia_plugin_dir()));
    CU_ASSERT(glia__plugin_file_near(ctx, "markr", near, sizeof near));
    CU_ASSERT_STRING_EQUAL(near, "marker");
    CU_ASSERT_FALSE(glia__plugin_file_near(ctx, "zzzzzzzzzz", near, sizeof near));
    CU_ASSERT_EQUAL(ctx->n_plugins, 0);
    CU_ASSERT_EQUAL(access(marker, F_OK), -1);
    /* the marker works: loading writes it */
    CU_ASSERT(load(ctx, "marker", GLIA_OK) == GLIA_OK);
    CU_ASSERT_EQUAL(access(marker, F_OK), 0);
    glia_context_free(ctx);
    unsetenv("GLIA_TEST_MARKER");
    remove(marker);
    remove(path);
}

/* ---- what the register calls refuse: a struct of an older ABI, a missing required slot, a
 * second registration of the same thing; each error names the registering plugin ---- */

static glia_status l_create(struct glia_layer *l, const struct glia_section *c, const struct glia_shape *in, int n)
{
    (void)l, (void)c, (void)in, (void)n;
    return GLIA_OK;
}
static glia_status l_infer(const struct glia_layer *l, const struct glia_shape *in, int n, struct glia_shape *out)
{
    (void)l, (void)in, (void)n, (void)out;
    return GLIA_OK;
}
static glia_status l_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    (void)l, (void)a;
    return GLIA_OK;
}
static glia_status o_create(struct glia_optimizer *o, const struct glia_section *c)
{
    (void)o, (void)c;
    return GLIA_OK;
}
static glia_status o_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    (void)o, (void)s;
    return GLIA_OK;
}

static glia_status c_group(void *priv)
{
    (void)priv;
    return GLIA_OK;
}

/* The status of call, with the context's message holding every piece of want (NULL-ended). */
static void expect_refusal(struct glia_context *ctx, glia_status got, glia_status want_st, const char *const *want)
{
    CU_ASSERT_EQUAL(got, want_st);
    const char *msg = glia_context_error(ctx);
    for (; *want; want++) {
        if (!strstr(msg, *want)) printf("\n  message '%s' lacks '%s'", msg, *want);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, *want));
    }
}

static glia_status capture_nothing(void *priv) { return GLIA_OK; }

/* A graph group's writes into host memory (the CPU's "device"), counting the calls of each slot. */
static int n_u64_writes, n_writes;
static glia_status write_u64_host(void *priv, void *dst, uint64_t v)
{
    (void)priv;
    n_u64_writes++;
    memcpy(dst, &v, 8);
    return GLIA_OK;
}
static glia_status write_host(void *priv, void *dst, const void *src, size_t n)
{
    (void)priv;
    n_writes++;
    memcpy(dst, src, n);
    return GLIA_OK;
}

/* glia_backend_write (ABI 2.1) uses the graph group's write where the backend has it, and for a backend built for
 * ABI 2.0 (a graph group that ends at write_u64) writes 8 bytes at a time with write_u64; it refuses what is not
 * whole words or more than GLIA_BACKEND_WRITE_MAX bytes, and a backend without graphs. */
static void test_backend_write(void)
{
    struct glia_context *ctx = new_ctx();
    const struct glia_backend_ops *cpu = glia__find_backend(ctx, GLIA_DEVICE_CPU);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
    struct glia_backend_graph_ops g = {.struct_size = offsetof(struct glia_backend_graph_ops, write),
                                       .capture_begin = capture_nothing, .write_u64 = write_u64_host,
                                       .write = write_host};  /* write lies past its struct_size: never read */
    struct glia_backend_ops ops = *cpu;
    ops.graph = &g;
    struct glia_backend b = {.ops = &ops, .ctx = ctx};
    uint64_t src[5] = {1, 2, 3, 0xfedcba9876543210ull, 5}, dst[6] = {0};
    CU_ASSERT_EQUAL(glia_backend_write(&b, dst, src, 40), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(dst, src, 40), 0);
    CU_ASSERT_EQUAL(dst[5], 0);
    CU_ASSERT_EQUAL(n_u64_writes, 5);
    CU_ASSERT_EQUAL(n_writes, 0);
    g.struct_size = sizeof g;  /* ABI 2.1: one call */
    memset(dst, 0, sizeof dst);
    CU_ASSERT_EQUAL(glia_backend_write(&b, dst, src, 16), GLIA_OK);
    CU_ASSERT(dst[0] == 1 && dst[1] == 2 && dst[2] == 0);
    CU_ASSERT_EQUAL(n_writes, 1);
    CU_ASSERT_EQUAL(n_u64_writes, 5);
    expect_refusal(ctx, glia_backend_write(&b, dst, src, 12), GLIA_EINVAL,
                   (const char *[]){"glia_backend_write: 12 bytes (a multiple of 8 up to 256)", NULL});
    expect_refusal(ctx, glia_backend_write(&b, dst, src, GLIA_BACKEND_WRITE_MAX + 8), GLIA_EINVAL,
                   (const char *[]){"264 bytes", NULL});
    ops.graph = NULL;
    expect_refusal(ctx, glia_backend_write(&b, dst, src, 8), GLIA_EUNSUPPORTED,
                   (const char *[]){"cannot capture CUDA graphs", NULL});
    glia_context_free(ctx);
}

static void test_register_refusals(void)
{
    struct glia_context *ctx = new_ctx();
    struct glia_registry r = {ctx, -1};
    struct glia_layer_type lay = {.struct_size = sizeof lay, .name = "probe_layer", .create = l_create,
                                  .infer_shape = l_infer};
    CU_ASSERT_EQUAL(glia_register_layer_type(&r, &lay), GLIA_OK);
    expect_refusal(ctx, glia_register_layer_type(&r, &lay), GLIA_EEXIST,
                   (const char *[]){"libglia", "'probe_layer'", "already registered", NULL});
    struct glia_layer_type no_infer = lay;
    no_infer.name = "other", no_infer.infer_shape = NULL;
    expect_refusal(ctx, glia_register_layer_type(&r, &no_infer), GLIA_EINVAL,
                   (const char *[]){"create and infer_shape are required", NULL});
    struct glia_layer_type old = lay;
    old.name = "old", old.struct_size = 8;
    expect_refusal(ctx, glia_register_layer_type(&r, &old), GLIA_EABI, (const char *[]){"8 bytes", "ABI 2.0", NULL});
    expect_refusal(ctx, glia_register_layer_type(&r, NULL), GLIA_EABI, (const char *[]){"glia_register_layer_type", NULL});

    /* a kernel may come before its type (another plugin may own it); one per (type, impl); auto is the core's */
    struct glia_kernel k = {.struct_size = sizeof k, .type = "probe_later", .impl = "cpu", .forward = l_forward};
    CU_ASSERT_EQUAL(glia_register_kernel(&r, &k), GLIA_OK);
    expect_refusal(ctx, glia_register_kernel(&r, &k), GLIA_EEXIST,
                   (const char *[]){"kernel 'cpu' of layer type 'probe_later' is already registered", NULL});
    struct glia_kernel bad = k;
    bad.impl = "other", bad.forward = NULL;
    expect_refusal(ctx, glia_register_kernel(&r, &bad), GLIA_EINVAL, (const char *[]){"forward are required", NULL});
    bad.forward = l_forward, bad.impl = "auto";
    expect_refusal(ctx, glia_register_kernel(&r, &bad), GLIA_EINVAL, (const char *[]){"impl 'auto' is the core's", NULL});
    bad.impl = "small", bad.struct_size = 8;
    expect_refusal(ctx, glia_register_kernel(&r, &bad), GLIA_EABI, (const char *[]){"8 bytes", "ABI 2.0", NULL});

    struct glia_optimizer_type opt = {.struct_size = sizeof opt, .name = "probe_opt", .create = o_create};
    CU_ASSERT_EQUAL(glia_register_optimizer_type(&r, &opt), GLIA_OK);
    expect_refusal(ctx, glia_register_optimizer_type(&r, &opt), GLIA_EEXIST, (const char *[]){"'probe_opt'", NULL});
    struct glia_optimizer_type no_create = opt;
    no_create.name = "probe_opt2", no_create.create = NULL;
    expect_refusal(ctx, glia_register_optimizer_type(&r, &no_create), GLIA_EINVAL,
                   (const char *[]){"create are required", NULL});
    no_create.create = o_create, no_create.struct_size = 4;
    expect_refusal(ctx, glia_register_optimizer_type(&r, &no_create), GLIA_EABI, (const char *[]){"too small", NULL});
    struct glia_optimizer_kernel ok = {.struct_size = sizeof ok, .type = "probe_opt", .step = o_step};
    CU_ASSERT_EQUAL(glia_register_optimizer_kernel(&r, &ok), GLIA_OK);
    expect_refusal(ctx, glia_register_optimizer_kernel(&r, &ok), GLIA_EEXIST, (const char *[]){"already registered", NULL});
    ok.type = "probe_opt3", ok.step = NULL;
    expect_refusal(ctx, glia_register_optimizer_kernel(&r, &ok), GLIA_EINVAL, (const char *[]){"step are required", NULL});

    /* a backend's groups: each required one present, every slot in it set; the graph group all or nothing */
    struct glia_backend_ops be = {.struct_size = sizeof be, .name = "probe_backend"};  /* no groups */
    expect_refusal(ctx, glia_register_backend(&r, &be), GLIA_EINVAL,
                   (const char *[]){"backend probe_backend: no device (every slot", NULL});
    const struct glia_backend_ops *cpu = glia__find_backend(ctx, GLIA_DEVICE_CPU);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
    struct glia_backend_math_ops math = *cpu->math;
    math.axpy_f32 = NULL;
    be = *cpu;
    be.name = "probe_backend", be.math = &math;
    expect_refusal(ctx, glia_register_backend(&r, &be), GLIA_EINVAL,
                   (const char *[]){"no math.gemm_f32, transpose_f32, axpy_f32", NULL});
    math = *cpu->math;
    struct glia_backend_graph_ops partial = {.struct_size = sizeof partial, .capture_begin = capture_nothing};
    be.graph = &partial;
    expect_refusal(ctx, glia_register_backend(&r, &be), GLIA_EINVAL, (const char *[]){"the group is all or nothing", NULL});
    be.graph = NULL;
    expect_refusal(ctx, glia_register_backend(&r, &be), GLIA_EEXIST, (const char *[]){"already registered", NULL});
    be.struct_size = 4;
    expect_refusal(ctx, glia_register_backend(&r, &be), GLIA_EABI, (const char *[]){"too small", NULL});

    struct glia_comm_ops cm = {.struct_size = sizeof cm, .name = "probe_comm"};  /* no calls */
    expect_refusal(ctx, glia_register_comm(&r, &cm), GLIA_EINVAL, (const char *[]){"wait are required", NULL});
    cm.struct_size = 4;
    expect_refusal(ctx, glia_register_comm(&r, &cm), GLIA_EABI, (const char *[]){"too small for ABI 2.0", NULL});
    /* the transport that is built in already holds its name */
    const struct glia_comm_ops *self = NULL;
    for (int i = 0; i < ctx->n_features && !self; i++)
        if (ctx->features[i].kind == GLIA__FEAT_COMM) self = ctx->features[i].ops;
    CU_ASSERT_PTR_NOT_NULL_FATAL(self);
    expect_refusal(ctx, glia_register_comm(&r, self), GLIA_EEXIST, (const char *[]){"already registered", NULL});
    struct glia_comm_ops half = *self;
    half.name = "probe_half", half.group_begin = c_group, half.group_end = NULL;
    expect_refusal(ctx, glia_register_comm(&r, &half), GLIA_EINVAL, (const char *[]){"go together", NULL});
    glia_context_free(ctx);
}

/* A key declared twice in a layer's or an optimizer's schema is refused when it is registered, naming the plugin, the
 * type and the key (the second declaration would never be read, and --describe would show both); so is a layer key
 * that every layer section has already (the core's would win), and an optimizer with more state arrays than the
 * core keeps. */
static void test_register_refuses_duplicate_keys(void)
{
    struct glia_context *ctx = new_ctx();
    CU_ASSERT_EQUAL(load(ctx, fixture("dup_key"), GLIA_EINVAL), GLIA_EINVAL);
    char want[1200];
    snprintf(want, sizeof want, "%s: layer type 'fixture_dup_key': key 'units' is declared twice in its keys",
             fixture("dup_key"));
    ASSERT_MSG_HAS(ctx, want);
    CU_ASSERT_PTR_NULL(glia__find_type(ctx, "fixture_dup_key"));

    struct glia_registry r = {ctx, -1};
    static const struct glia_key twice[] = {GLIA_KEY("beta", GLIA_KEY_FLOAT, "0.9", "a"),
                                            GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-8", "b"),
                                            GLIA_KEY("beta", GLIA_KEY_FLOAT, "0.99", "c"), GLIA_KEY_END};
    struct glia_optimizer_type opt = {.struct_size = sizeof opt, .name = "dup_opt", .keys = twice, .create = o_create};
    expect_refusal(ctx, glia_register_optimizer_type(&r, &opt), GLIA_EINVAL,
                   (const char *[]){"libglia: optimizer 'dup_opt': key 'beta' is declared twice in its keys", NULL});
    CU_ASSERT_PTR_NULL(glia__find_optimizer_type(ctx, "dup_opt"));
    opt.keys = twice + 1;  /* eps, beta: fine */
    opt.n_state = 5;
    expect_refusal(ctx, glia_register_optimizer_type(&r, &opt), GLIA_EINVAL,
                   (const char *[]){"optimizer 'dup_opt': n_state 5, at most 4 state arrays are supported", NULL});
    opt.n_state = 4;
    CU_ASSERT_EQUAL(glia_register_optimizer_type(&r, &opt), GLIA_OK);

    static const struct glia_key impl_again[] = {GLIA_KEY("impl", GLIA_KEY_STRING, "fast", "mine"), GLIA_KEY_END};
    struct glia_layer_type lay = {.struct_size = sizeof lay, .name = "dup_layer", .keys = impl_again, .create = l_create,
                                  .infer_shape = l_infer};
    expect_refusal(ctx, glia_register_layer_type(&r, &lay), GLIA_EINVAL,
                   (const char *[]){"layer type 'dup_layer': key 'impl' is declared again (every layer "
                                    "section has type, inputs, impl and weight_decay already)", NULL});
    lay.keys = twice;
    expect_refusal(ctx, glia_register_layer_type(&r, &lay), GLIA_EINVAL, (const char *[]){"key 'beta' is declared twice", NULL});
    lay.keys = twice + 1;
    CU_ASSERT_EQUAL(glia_register_layer_type(&r, &lay), GLIA_OK);
    glia_context_free(ctx);
}

/* careless.so's count of destroy calls (the plugin is loaded in ctx). */
static int destroys(void)
{
    void *h = dlopen(fixture("careless"), RTLD_NOW | RTLD_NOLOAD);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    int *n = dlsym(h, "careless_destroys");
    CU_ASSERT_PTR_NOT_NULL_FATAL(n);
    int v = *n;
    dlclose(h);
    return v;
}

/* glia_layer_gradcheck of one careless layer section on (2, 3) inputs; its status, the message in *msg. */
static glia_status careless_check(struct glia_context *ctx, const char *ini)
{
    struct glia_shape in = glia_shape_make(2, (int64_t[]){2, 3});
    glia_context_clear_error(ctx);
    return glia_layer_gradcheck(ctx, ini, &in, 1, 3, 1e-3, NULL);
}

/* What layer.h and optimizer.h promise about create and destroy: destroy runs once for every create that returned
 * GLIA_OK, also when the core refuses the layer afterwards, and never after a failed create (which frees its own
 * state; the core frees the parameters it declared). A create that reads a key its schema does not declare is
 * refused, naming plugin, type, section and key, instead of aborting the program. */
/* A new context prints on stderr the messages at and above $GLIA_LOG_LEVEL's level (info when unset or unknown). */
static void test_log_level_env(void)
{
    static const struct {
        const char *value;
        int shown;  /* of one message at each of the four levels */
    } cases[] = {{"debug", 4}, {"info", 3}, {"warning", 2}, {"error", 1}, {"loud", 3}, {NULL, 3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].value) setenv("GLIA_LOG_LEVEL", cases[i].value, 1);
        else unsetenv("GLIA_LOG_LEVEL");
        FILE *f = tmpfile();
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fflush(stderr);
        int saved = dup(2);
        CU_ASSERT_FATAL(saved >= 0 && dup2(fileno(f), 2) == 2);
        struct glia_context *ctx = NULL;
        glia_status st = glia_context_new(&ctx);
        for (int lv = GLIA_LOG_ERROR; !st && lv <= GLIA_LOG_DEBUG; lv++) glia_log(ctx, (enum glia_log_level)lv, "level %d", lv);
        glia_context_free(ctx);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        CU_ASSERT_EQUAL(st, GLIA_OK);
        rewind(f);
        char line[128];
        int n = 0;
        while (fgets(line, sizeof line, f)) n += strncmp(line, "glia: ", 6) == 0;
        fclose(f);
        if (n != cases[i].shown) printf("\n  GLIA_LOG_LEVEL=%s: %d messages shown\n", cases[i].value ? cases[i].value : "(unset)", n);
        CU_ASSERT_EQUAL(n, cases[i].shown);
    }
    unsetenv("GLIA_LOG_LEVEL");
}

static void test_create_destroy_and_misread(void)
{
    struct glia_context *ctx = new_ctx();
    CU_ASSERT_FATAL(load(ctx, fixture("careless"), GLIA_OK) == GLIA_OK);
    int d0 = destroys();
    CU_ASSERT_EQUAL(careless_check(ctx, "[fc]\ntype = careless_ok\noutputs = 4\n"), GLIA_OK);
    CU_ASSERT_EQUAL(destroys(), d0 + 1);
    CU_ASSERT_EQUAL(careless_check(ctx, "[fc]\ntype = careless_fail\noutputs = 4\n"), GLIA_ECONFIG);
    ASSERT_MSG_HAS(ctx, "gradcheck.ini:3: [fc] outputs: careless_fail refuses every configuration");
    CU_ASSERT_EQUAL(destroys(), d0 + 1);  /* none after the failed create; its weight is freed by the core */
    CU_ASSERT_EQUAL(careless_check(ctx, "[fc]\ntype = careless_misread\noutputs = 4\n"), GLIA_EPLUGIN);
    ASSERT_MSG_HAS(ctx, "gradcheck.ini:1: [fc] outputz: layer type 'careless_misread' (plugin careless): "
                        "glia_section_int reads key 'outputz', which is not among the keys it declares");
    CU_ASSERT_EQUAL(destroys(), d0 + 2);  /* its create returned GLIA_OK: destroy was owed */
    struct glia_layer_run *run = NULL;
    struct glia_shape in = glia_shape_make(2, (int64_t[]){2, 3});
    CU_ASSERT_EQUAL(glia_layer_run_new(ctx, "[fc]\ntype = careless_misread\noutputs = 4\n",
                                       (struct glia_device){GLIA_DEVICE_CPU, 0}, &in, 1, GLIA_CONTIGUOUS, 1, &run),
                    GLIA_EPLUGIN);
    CU_ASSERT_PTR_NULL(run);
    CU_ASSERT_EQUAL(destroys(), d0 + 3);

    struct glia_optimizer *o = NULL;
    CU_ASSERT_EQUAL(glia_optimizer_new(ctx, "careless_opt", "[optimizer]\nfail = on\n", &o), GLIA_ECONFIG);
    ASSERT_MSG_HAS(ctx, "careless_opt refuses on request");
    CU_ASSERT_EQUAL(destroys(), d0 + 3);
    CU_ASSERT_EQUAL_FATAL(glia_optimizer_new(ctx, "careless_opt", NULL, &o), GLIA_OK);
    glia_optimizer_free(o);
    CU_ASSERT_EQUAL(destroys(), d0 + 4);
    glia_context_free(ctx);
}

GLIA_TEST_MAIN("plugin",
               GLIA_TEST(test_good_by_path),
               GLIA_TEST(test_good_by_name),
               GLIA_TEST(test_not_found),
               GLIA_TEST(test_system_path),
               GLIA_TEST(test_wrong_abi),
               GLIA_TEST(test_newer_minor),
               GLIA_TEST(test_name_mismatch),
               GLIA_TEST(test_no_entry),
               GLIA_TEST(test_failing_init),
               GLIA_TEST(test_probe_refuse),
               GLIA_TEST(test_not_a_shared_object),
               GLIA_TEST(test_load_all),
               GLIA_TEST(test_bare_so_name_is_a_file),
               GLIA_TEST(test_print_sorted),
               GLIA_TEST(test_searched_and_near),
               GLIA_TEST(test_register_refusals),
               GLIA_TEST(test_register_refuses_duplicate_keys),
               GLIA_TEST(test_create_destroy_and_misread),
               GLIA_TEST(test_log_level_env),
               GLIA_TEST(test_backend_write))
