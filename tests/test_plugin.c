/* tests/test_plugin.c — CUnit tests of the plugin loader against the fixture plugins in
 * tests/fixtures (good, wrong ABI, newer minor, name mismatch, no entry, failing init, probe
 * refusal, not a shared object). Not a test of any real plugin's features. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <glia/glia.h>
#include "testutil.h"

/* The folder holding the built fixture .so files. */
static const char *fixtures_dir(void)
{
    const char *d = getenv("GLIA_FIXTURES");
    return d && *d ? d : "tests/fixtures/.libs";
}

/* "$GLIA_FIXTURES/<name>.so" in a static buffer ring. */
static const char *fixture(const char *name)
{
    static char bufs[8][1024];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s.so", fixtures_dir(), name);
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
    CU_ASSERT(glia_plugin_add_path(ctx, fixtures_dir()) == GLIA_OK);
    CU_ASSERT(load(ctx, "good", GLIA_OK) == GLIA_OK);
    glia_context_free(ctx);
}

static void test_good_by_name(void)
{
    struct glia_context *ctx = new_ctx();
    CU_ASSERT(glia_plugin_add_path(ctx, fixtures_dir()) == GLIA_OK);
    CU_ASSERT(load(ctx, "good", GLIA_OK) == GLIA_OK);
    CU_ASSERT(load(ctx, "good", GLIA_OK) == GLIA_OK);
    CU_ASSERT(load(ctx, fixture("good"), GLIA_OK) == GLIA_OK);
    glia_context_free(ctx);
}

static void test_not_found(void)
{
    struct glia_context *ctx = new_ctx();
    CU_ASSERT(glia_plugin_add_path(ctx, fixtures_dir()) == GLIA_OK);
    CU_ASSERT(load(ctx, "no_such_plugin_here", GLIA_ENOTFOUND) == GLIA_ENOTFOUND);
    ASSERT_MSG_HAS(ctx, "no_such_plugin_here");
    /* The message names the searched folders: the added one, $GLIA_PLUGIN_PATH's, and the
     * installed plugin folder. */
    ASSERT_MSG_HAS(ctx, fixtures_dir());
    const char *env = getenv("GLIA_PLUGIN_PATH");
    if (env && *env) {
        char *copy = strdup(env), *save = NULL;
        CU_ASSERT_FATAL(copy != NULL);
        for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
            if (*d) ASSERT_MSG_HAS(ctx, d);
        free(copy);
    }
    ASSERT_MSG_HAS(ctx, glia_plugin_dir());
    glia_context_free(ctx);
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
    CU_ASSERT(glia_plugin_add_path(ctx, fixtures_dir()) == GLIA_OK);
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

GLIA_TEST_MAIN("plugin",
               GLIA_TEST(test_good_by_path),
               GLIA_TEST(test_good_by_name),
               GLIA_TEST(test_not_found),
               GLIA_TEST(test_wrong_abi),
               GLIA_TEST(test_newer_minor),
               GLIA_TEST(test_name_mismatch),
               GLIA_TEST(test_no_entry),
               GLIA_TEST(test_failing_init),
               GLIA_TEST(test_probe_refuse),
               GLIA_TEST(test_not_a_shared_object),
               GLIA_TEST(test_load_all))
