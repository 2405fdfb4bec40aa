/* tests/test_model.c — building models from INI: a table of malformed models with the exact
 * status and file:line message, --set overrides, the summary, and the glia program's exit
 * codes and one-line errors. Not training (test_train.c). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include "testutil.h"
#include "traceutil.h"
#include <glia/glia.h>

static char dir[512];

/* The [data] section, lines 1-6; cases start at line 7. '@' stands for the data folder. */
#define DATA "[data]\ntrain_images = @/tri\ntrain_labels = @/trl\ntest_images = @/tei\ntest_labels = @/tel\nbatch_size = 16\n"
#define LOSS "[loss]\ntype = softmax_cross_entropy\n"

static void make_data(void)
{
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "model-data", 64, 32, 4, 4, 1) == 0);
}

/* text with every '@' replaced by the data folder (static buffer) */
static const char *expand(const char *text)
{
    static char ring[4][8192];
    static int r;
    char *out = ring[r++ % 4];
    size_t k = 0;
    for (const char *p = text; *p && k < sizeof ring[0] - 600; p++) {
        if (*p == '@') k += (size_t)snprintf(out + k, sizeof ring[0] - k, "%s", dir);
        else out[k++] = *p;
    }
    out[k] = '\0';
    return out;
}

static glia_status build(const char *text, const char *set, struct glia_context *ctx, struct glia_model **m,
                         struct glia_config **cfg)
{
    glia_status st = glia_config_parse_string(ctx, "m.ini", expand(text), cfg);
    if (!st && set) st = glia_config_set(*cfg, set);
    if (!st) st = glia_model_build(ctx, *cfg, m);
    return st;
}

struct bad_case {
    const char *text;
    const char *set;
    glia_status status;
    const char *message;  /* must appear in the error */
};

static const struct bad_case bad_cases[] = {
    {DATA "[f]\ntype = flatten\n[fc]\ntype = lnear\noutputs = 4\n" LOSS, NULL, GLIA_ECONFIG,
     "m.ini:10: [fc] type: unknown layer type 'lnear'; did you mean 'linear'?"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutput = 4\n" LOSS, NULL, GLIA_ECONFIG,
     "m.ini:11: [fc] output: unknown key; did you mean 'outputs'?"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\n" LOSS, NULL, GLIA_ECONFIG,
     "[fc] outputs: missing required key"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 0\n" LOSS, NULL, GLIA_ECONFIG,
     "m.ini:11: [fc] outputs:"},
    {DATA "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\ninputs = flt\n" LOSS, NULL, GLIA_ECONFIG,
     "m.ini:12: [fc] inputs: unknown layer 'flt'; did you mean 'flat'?"},
    {DATA "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\ninputs = loss\n" LOSS, NULL, GLIA_ECONFIG,
     "m.ini:12: [fc] inputs: layer 'loss' is defined later; inputs must name earlier layers"},
    /* linear maps the last dim of any rank (nn.Linear): without a flatten the loss is the one refusing */
    {DATA "[fc]\ntype = linear\noutputs = 4\n" LOSS, NULL, GLIA_ESHAPE,
     "m.ini:10: [loss] softmax_cross_entropy expects (N, classes) or (N, T, classes) logits, got 16x1x4x4"},
    {DATA "[f]\ntype = flatten\n[input]\ntype = linear\noutputs = 4\n" LOSS, NULL, GLIA_ECONFIG,
     "m.ini:9: [input] 'input' is reserved: `inputs = input` names the data batch; give this layer another name"},
    {DATA "[input]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\ninputs = input\n" LOSS, NULL, GLIA_ECONFIG,
     "m.ini:7: [input] 'input' is reserved"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, "input.type=relu", GLIA_ECONFIG,
     "--set input.type=relu: [input] 'input' is reserved"},
    {DATA "[trian]\nepochs = 2\n[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, NULL, GLIA_ECONFIG,
     "m.ini:7: [trian] unknown section; did you mean [train]?"},
    {DATA "[train]\noptimizer = sgdd\n[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, NULL,
     GLIA_ECONFIG, "m.ini:8: [train] optimizer: unknown optimizer 'sgdd'; did you mean 'sgd'?"},
    {DATA "[train]\nepochs = many\n[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, NULL,
     GLIA_ECONFIG, "m.ini:8: [train] epochs:"},
    {DATA "[runtime]\ndevice = gpu\n[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, NULL,
     GLIA_ECONFIG, "m.ini:8: [runtime] device: expected auto, cpu, cuda or cuda:N, got 'gpu'"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n", NULL, GLIA_ECONFIG,
     "m.ini:10: [fc] type: the last layer must be a loss layer"},
    {DATA "[f]\ntype = flatten\n[a]\ntype = linear\noutputs = 4\n[b]\ntype = linear\noutputs = 4\ninputs = f\n" LOSS,
     NULL, GLIA_ECONFIG, "m.ini:9: [a] the output of this layer is not used by any later layer"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 2\n" LOSS, NULL, GLIA_ESHAPE,
     "[loss] the model outputs 2 classes but the data has 4 labels (label 3 at index 3 of /"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\nimpl = cudnn\n" LOSS, "runtime.device=cpu", GLIA_ECONFIG,
     "m.ini:12: [fc] impl: no impl 'cudnn' of layer type 'linear' for device cpu (available: cpu)"},
    {DATA "[optimizer]\nmomentum = fast\n[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, NULL,
     GLIA_ECONFIG, "m.ini:8: [optimizer] momentum:"},
    {DATA "[plugins]\nload = nosuch\n[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, NULL,
     GLIA_ENOTFOUND, "m.ini:8: [plugins] load: plugin 'nosuch' not found (searched:"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, "train.epoch=3", GLIA_ECONFIG,
     "--set train.epoch=3: [train] epoch: unknown key; did you mean 'epochs'?"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, "foo.bar=1", GLIA_ECONFIG,
     "--set foo.bar=1: [foo] a layer section needs a type = key"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, "trian.epochs=1", GLIA_ECONFIG,
     "--set trian.epochs=1: [trian] unknown section; did you mean [train]?"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS, "data.train_images=@/missing", GLIA_EIO,
     "cannot open "},
    /* tensors larger than any machine holds: refused when built, naming the layer and the size */
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 1073741824\n[fc2]\ntype = linear\noutputs = 1073741824\n"
     LOSS, NULL, GLIA_ENOMEM, "m.ini:12: [fc2] parameter 'weight', 1073741824x1073741824, has 1.153e+18 elements, more "
     "than a tensor may have (2^45); its values would need 4611686018427387904 bytes (4.6 EB): cannot allocate"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 1073741824\n" LOSS, "data.batch_size=1048576", GLIA_ENOMEM,
     "m.ini:9: [fc] its output at batch 1048576 ([data] batch_size), 1048576x1073741824, has 1.126e+15 elements, more "
     "than a tensor may have (2^45); it would need 4503599627370496 bytes (4.5 PB): cannot allocate"},
    {DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 1073741824\n" LOSS, "data.test_batch_size=1048576",
     GLIA_ENOMEM, "m.ini:9: [fc] its output at batch 1048576 ([data] test_batch_size), 1048576x1073741824, has"},
    {"[data]\ntrain_images = @/tri\n[f]\ntype = flatten\n" LOSS, NULL, GLIA_ECONFIG,
     "[data] train_labels: missing required key"},
    {"", NULL, GLIA_ECONFIG, "[data] train_images: missing required key"},
};

static void test_bad_models(void)
{
    make_data();
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const struct bad_case *c = &bad_cases[i];
        struct glia_context *ctx;
        struct glia_model *m = NULL;
        struct glia_config *cfg = NULL;
        CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
        glia_status st = build(c->text, c->set ? expand(c->set) : NULL, ctx, &m, &cfg);
        const char *err = glia_context_error(ctx);
        int ok = st == c->status && strstr(err, c->message) && !strchr(err, '\n');
        if (!ok) printf("\n  case %zu: got %s \"%s\"\n  want %s \"%s\"\n", i, glia_status_name(st), err,
                        glia_status_name(c->status), c->message);
        CU_ASSERT(ok);
        CU_ASSERT_PTR_NULL(m);
        glia_model_free(m);
        glia_config_free(cfg);
        glia_context_free(ctx);
    }
}

#define GOOD DATA "[train]\nepochs = 1\n[f]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 8\n[act]\ntype = relu\n[fc2]\ntype = linear\noutputs = 4\n" LOSS

static void test_good_model(void)
{
    make_data();
    struct glia_context *ctx;
    struct glia_model *m = NULL;
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = build(GOOD, "runtime.device=cpu", ctx, &m, &cfg);  /* auto would be cuda on a GPU machine */
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_param_count(m), 16 * 8 + 8 + 8 * 4 + 4);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    glia_model_summary(m, f);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "fc1              linear                 cpu    8                       136"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "total: 5 layers, 172 parameters"));
    free(buf);
    glia_model_free(m);
    glia_config_free(cfg);
    glia_context_free(ctx);
}

static void test_set_overrides(void)
{
    make_data();
    struct glia_context *ctx;
    struct glia_model *m = NULL;
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "m.ini", expand(GOOD), &cfg) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_config_set(cfg, "fc1.outputs=5"), GLIA_OK);
    CU_ASSERT_EQUAL(glia_config_set(cfg, "runtime.device=cpu"), GLIA_OK);
    CU_ASSERT_EQUAL(glia_config_set(cfg, "nonsense"), GLIA_EINVAL);
    CU_ASSERT_EQUAL_FATAL(glia_model_build(ctx, cfg, &m), GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_param_count(m), 16 * 5 + 5 + 5 * 4 + 4);
    glia_model_free(m);
    glia_config_free(cfg);
    glia_context_free(ctx);
}

/* Runs the glia program; returns its exit status and its stderr in err. */
static int run_glia(const char *args, char *err, size_t n)
{
    const char *bin = getenv("GLIA_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>%s >/dev/null", bin ? bin : "tools/glia", args, glia_test_tmp("cli.err"));
    int rc = system(cmd);
    FILE *f = fopen(glia_test_tmp("cli.err"), "r");
    size_t k = f ? fread(err, 1, n - 1, f) : 0;
    err[k] = '\0';
    if (f) fclose(f);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void test_cli_errors(void)
{
    make_data();
    char err[4096], args[1024];
    const char *bad = glia_test_tmp("bad.ini");
    CU_ASSERT_FATAL(glia_test_write(bad, expand(DATA "[f]\ntype = flatten\n[fc]\ntype = linear\noutptus = 4\n" LOSS)) == 0);
    snprintf(args, sizeof args, "train %s", bad);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 1);
    CU_ASSERT_EQUAL(lines(err), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "bad.ini:11: [fc] outptus: unknown key; did you mean 'outputs'?"));
    snprintf(args, sizeof args, "check %s --set fc.outptus=4", bad);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 1);
    CU_ASSERT_EQUAL(lines(err), 1);
    snprintf(args, sizeof args, "train %s", glia_test_tmp("does-not-exist.ini"));
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 1);
    CU_ASSERT_EQUAL(lines(err), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot open"));
    /* a plugin built for another ABI: one line naming file, symbol and both versions */
    const char *fx = glia_test_fixtures();
    char text[2048], want[128];
    snprintf(text, sizeof text, DATA "[plugins]\nload = %s/wrong_abi.so\n[f]\ntype = flatten\n" LOSS,
             fx);
    const char *abi = glia_test_tmp("abi.ini");
    CU_ASSERT_FATAL(glia_test_write(abi, expand(text)) == 0);
    snprintf(args, sizeof args, "train %s", abi);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 1);
    CU_ASSERT_EQUAL(lines(err), 1);
    snprintf(want, sizeof want, "wrong_abi.so: glia_plugin_entry: plugin ABI %d.%d, core ABI %d.%d", GLIA_ABI_MAJOR + 1, 0,
             GLIA_ABI_MAJOR, GLIA_ABI_MINOR);
    if (!strstr(err, want)) printf("\n  got: %s", err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "abi.ini:8: [plugins] load:"));
    CU_ASSERT_EQUAL(run_glia("train", err, sizeof err), 2);
    CU_ASSERT_EQUAL(run_glia("frobnicate x.ini", err, sizeof err), 2);
    CU_ASSERT_EQUAL(run_glia("train x.ini --bogus", err, sizeof err), 2);
    CU_ASSERT_EQUAL(run_glia("--version", err, sizeof err), 0);
    CU_ASSERT_EQUAL(run_glia("plugins --describe linear", err, sizeof err), 0);
    CU_ASSERT_EQUAL(run_glia("plugins --describe no_such_thing", err, sizeof err), 1);
    CU_ASSERT_EQUAL(lines(err), 1);
}

/* Runs the glia program with its address space limited to 1 GB (ulimit -v), so that an allocation of
 * many GB fails on any machine; returns its exit status and its stderr in err. */
static int run_glia_1gb(const char *args, char *err, size_t n)
{
    const char *bin = getenv("GLIA_BIN");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "ulimit -v 1000000 && %s %s 2>%s >/dev/null", bin ? bin : "tools/glia", args,
             glia_test_tmp("cli.err"));
    int rc = system(cmd);
    FILE *f = fopen(glia_test_tmp("cli.err"), "r");
    size_t k = f ? fread(err, 1, n - 1, f) : 0;
    err[k] = '\0';
    if (f) fclose(f);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Memory that a key scales and that cannot be had: one line naming the key (or the layer) and the bytes, for the
 * parameters, the activations of training and of evaluation, the loader's batch buffers and the host copies of the
 * logits. */
static void test_cli_out_of_memory(void)
{
    make_data();
    char big[sizeof dir], err[4096], args[1400];
    snprintf(big, sizeof big, "%s", dir);
    CU_ASSERT_FATAL(glia_test_idx_set(big, sizeof big, "model-data-64", 64, 32, 64, 4, 1) == 0);
    char path[600], small[sizeof dir];  /* copies: glia_test_tmp's buffers are reused */
    snprintf(path, sizeof path, "%s", glia_test_tmp("oom.ini"));
    snprintf(small, sizeof small, "%s", dir);
    CU_ASSERT_FATAL(glia_test_write(path, expand("[data]\ntrain_images = @/tri\ntrain_labels = @/trl\ntest_images = @/tei\n"
                                                 "test_labels = @/tel\nbatch_size = 1048576\n[runtime]\ndevice = cpu\n[f]\ntype = flatten\n[fc1]\ntype = linear\n"
                                                 "outputs = 4096\n[act]\ntype = relu\n[fc2]\ntype = linear\noutputs = 4\n" LOSS)) == 0);
    static const struct {
        const char *args, *want;
    } cases[] = {
        {"check %s --set fc1.outputs=100000000 --set data.batch_size=16", "oom.ini:11: [fc1] 2100000004 parameters (1700000000 of them this "
                                                 "layer's) with their gradients and 1 optimizer state need 25200000048 "
                                                 "bytes (25.2 GB): cannot allocate"},
        {"train %s", "oom.ini:6: [data] batch_size: the activations of a training step at batch 1048576 need "
                     "51694797056 bytes (51.7 GB): cannot allocate"},
        {"train %s --set data.batch_size=16 --set data.test_batch_size=1048576", "--set data.test_batch_size=1048576: "
         "[data] test_batch_size: the activations of evaluation at batch 1048576 need "},
        {"train %s --set fc2.outputs=100000 --set fc1.outputs=4",
         "oom.ini:6: [data] batch_size: host copies of the logits and labels of a batch of 1048576 need 419434594304 "
         "bytes (419.4 GB): cannot allocate"},
        {"train %s --set fc1.outputs=4 --set data.train_images=@/tri --set data.train_labels=@/trl --set "
         "data.test_images=@/tei --set data.test_labels=@/tel",
         "oom.ini:6: [data] batch_size: the loader's 4 batch buffers (2 workers x prefetch 2) of 1048576 samples need "
         "68736253952 bytes (68.7 GB): cannot allocate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a[1200];
        snprintf(a, sizeof a, cases[i].args, path);
        snprintf(dir, sizeof dir, "%s", i == 4 ? big : small);  /* the 64x64 images */
        snprintf(args, sizeof args, "%s", expand(a));
        int rc = run_glia_1gb(args, err, sizeof err);
        bool ok = rc == 1 && lines(err) == 1 && strstr(err, cases[i].want);
        if (!ok) printf("\n  case %zu: exit %d, got %s  want %s\n", i, rc, err, cases[i].want);
        CU_ASSERT(ok);
    }
    make_data();
}

/* glia train on SIGTERM: it stops at the next optimizer step, writes that step's checkpoint, says
 * how to go on and exits with 128 + 15; the checkpoint is whole (glia eval reads it). */
static void test_cli_sigterm(void)
{
    make_data();
    const char *good = glia_test_tmp("sig.ini"), *bin = getenv("GLIA_BIN"), *errp = glia_test_tmp("sig.err");
    CU_ASSERT_FATAL(glia_test_write(good, expand(GOOD)) == 0);
    char ck[700], cmd[2400];
    snprintf(ck, sizeof ck, "%s/sig-ck", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ck);
    CU_ASSERT_FATAL(system(cmd) == 0);
    char epochs[] = "train.epochs=1000000", every[] = "train.log_every=1", ckset[800];
    snprintf(ckset, sizeof ckset, "train.checkpoint_dir=%s", ck);
    int out[2];
    CU_ASSERT_FATAL(pipe(out) == 0);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (e >= 0) dup2(e, STDERR_FILENO);
        close(out[0]);
        char *argv[] = {(char *)(bin ? bin : "tools/glia"), "train", (char *)good, "--set", epochs, "--set", every,
                        "--set", ckset, NULL};
        execv(argv[0], argv);
        _exit(127);
    }
    close(out[1]);
    FILE *f = fdopen(out[0], "r");
    char line[512];
    bool stepping = false, sent = false;
    alarm(600);  /* a program that never stops fails this test instead of hanging it */
    while (fgets(line, sizeof line, f)) {  /* the first progress line: it is training; then signal, read to the end */
        if (!sent && strstr(line, " step ")) stepping = true;
        if (stepping && !sent) sent = kill(pid, SIGTERM) == 0;
    }
    fclose(f);
    int status = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    alarm(0);
    CU_ASSERT(sent);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM);
    char err[2048] = "";
    FILE *ef = fopen(errp, "r");
    size_t k = ef ? fread(err, 1, sizeof err - 1, ef) : 0;
    err[k] = '\0';
    if (ef) fclose(ef);
    char want[800];
    snprintf(want, sizeof want, ": continue with --resume %s/step-", ck);
    const char *at = strstr(err, want);
    if (!at) printf("\n  stderr: %s", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "glia: interrupted at step "));
    char path[900];
    CU_ASSERT_FATAL(sscanf(at + strlen(": continue with --resume "), "%899s", path) == 1);
    CU_ASSERT_EQUAL(access(path, R_OK), 0);
    char args[2000];
    snprintf(args, sizeof args, "eval %s --checkpoint %s", good, path);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 0);
}

static void test_cli_check(void)
{
    make_data();
    const char *good = glia_test_tmp("good.ini");
    CU_ASSERT_FATAL(glia_test_write(good, expand(GOOD)) == 0);
    const char *bin = getenv("GLIA_BIN");
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s check %s --set runtime.device=cpu", bin ? bin : "tools/glia", good);
    FILE *p = popen(cmd, "r");
    CU_ASSERT_FATAL(p != NULL);
    size_t k = fread(out, 1, sizeof out - 1, p);
    out[k] = '\0';
    CU_ASSERT_EQUAL(pclose(p), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "layer            type                   impl   output"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "fc2              linear                 cpu    4"));
    /* profile: 64 samples in batches of 4 = 16 steps, enough for 5 warm-up + 3 */
    snprintf(cmd, sizeof cmd, "%s profile %s --steps 3 --set data.batch_size=4", bin ? bin : "tools/glia", good);
    p = popen(cmd, "r");
    CU_ASSERT_FATAL(p != NULL);
    k = fread(out, 1, sizeof out - 1, p);
    out[k] = '\0';
    CU_ASSERT_EQUAL(pclose(p), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "profile: 3 training steps of batch 4 after 5 warm-up steps"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "fc1              linear"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "(optimizer)      sgd"));
    char err[1024], args[1024];
    snprintf(args, sizeof args, "profile %s --steps 30", good);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "profile: 5 warm-up + 30 steps, but an epoch has 4 batches"));
    /* --trace: a Chrome trace of the 3 counted steps (flatten, the first layer, has no backward) */
    const char *trace = glia_test_tmp("cli-trace.json");
    remove(trace);
    snprintf(cmd, sizeof cmd, "%s profile %s --steps 3 --set data.batch_size=4 --set runtime.device=cpu --trace %s", bin ? bin : "tools/glia", good, trace);
    p = popen(cmd, "r");
    CU_ASSERT_FATAL(p != NULL);
    k = fread(out, 1, sizeof out - 1, p);
    out[k] = '\0';
    CU_ASSERT_EQUAL(pclose(p), 0);
    char want[800];
    snprintf(want, sizeof want, "trace: 36 events in %s\n", trace);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    static const char *const fwd[] = {"f", "fc1", "act", "fc2", "loss"};
    static const char *const bwd[] = {"loss", "fc2", "act", "fc1"};
    struct trace_expect e = {3, 5, fwd, 4, bwd, "sgd", false, 0, 0, NULL};
    CU_ASSERT_EQUAL(trace_check(trace, &e), 0);
    /* a trace path that cannot be written: one line naming it */
    char bad[700];
    snprintf(bad, sizeof bad, "%s/no-such-folder/t.json", dir);
    snprintf(args, sizeof args, "profile %s --steps 3 --set data.batch_size=4 --set runtime.device=cpu --trace %s", good, bad);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 1);
    CU_ASSERT_EQUAL(lines(err), 1);
    snprintf(want, sizeof want, "glia: cannot write trace file %s: No such file or directory", bad);
    if (!strstr(err, want)) printf("\n  got: %s", err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    /* --trace belongs to profile; each command refuses the options it does not take */
    snprintf(args, sizeof args, "train %s --trace %s", good, trace);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(err, "glia: --trace is not an option of train (see glia --help)\n");
    snprintf(args, sizeof args, "train %s --steps 3", good);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(err, "glia: --steps is not an option of train (see glia --help)\n");
    snprintf(args, sizeof args, "check %s --quiet", good);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(err, "glia: --quiet is not an option of check (see glia --help)\n");
    snprintf(args, sizeof args, "eval %s --resume x.ckpt", good);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(err, "glia: --resume is not an option of eval (see glia --help)\n");
    snprintf(args, sizeof args, "profile %s --metrics m.jsonl", good);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(err, "glia: --metrics is not an option of profile (see glia --help)\n");
    CU_ASSERT_EQUAL(run_glia("plugins --set a.b=1", err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(err, "glia: --set is not an option of plugins (see glia --help)\n");
    snprintf(args, sizeof args, "profile %s --trace", good);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(err, "glia: --trace needs a value\n");
    /* --peak-gbs and --peak-tflops: the fraction of peak of each layer, from the figures given */
    good = glia_test_tmp("good.ini");  /* (glia_test_tmp's buffers are reused) */
    snprintf(cmd, sizeof cmd, "%s profile %s --steps 3 --set data.batch_size=4 --set runtime.device=cpu --peak-gbs 50 "
             "--peak-tflops 1.5", bin ? bin : "tools/glia", good);
    p = popen(cmd, "r");
    CU_ASSERT_FATAL(p != NULL);
    k = fread(out, 1, sizeof out - 1, p);
    out[k] = '\0';
    CU_ASSERT_EQUAL(pclose(p), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "peak of cpu: 50 GB/s, 1.50 TFLOP/s at fp32 (given)\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "% mem\n"));
    snprintf(args, sizeof args, "profile %s --peak-gbs fast", good);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(err, "glia: --peak-gbs takes a positive number, not 'fast'\n");
    snprintf(args, sizeof args, "profile %s --peak-tflops 0", good);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(err, "glia: --peak-tflops takes a positive number, not '0'\n");
    snprintf(args, sizeof args, "train %s --peak-gbs 5", good);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(err, "glia: --peak-gbs is not an option of train (see glia --help)\n");
}

/* device = cuda without a usable GPU (or without a CUDA build) is one clear error; device = auto
 * then runs on the CPU and says why in one line. On a GPU machine both pick the GPU. */
static void test_device_cuda_or_fallback(void)
{
    make_data();
    struct glia_context *ctx;
    struct glia_config *cfg;
    struct glia_model *m = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct glia_backend *gpu;
    bool have_gpu = glia_plugin_load(ctx, "cuda") == GLIA_OK &&
                    glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CUDA, 0}, &gpu) == GLIA_OK;
    glia_context_free(ctx);
    static const char *net = "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS;
    char text[1024];
    snprintf(text, sizeof text, "%s[runtime]\ndevice = cuda\n%s", DATA, net);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = build(text, NULL, ctx, &m, &cfg);
    if (!have_gpu) {
        CU_ASSERT_EQUAL(st, GLIA_EDEVICE);
        const char *e = glia_context_error(ctx);
        CU_ASSERT_PTR_NOT_NULL(strstr(e, "m.ini:8: [runtime] device: "));
        CU_ASSERT(strstr(e, "this build of glia has no CUDA backend") || strstr(e, "plugin 'cuda' refused this machine"));
        CU_ASSERT_PTR_NULL(strchr(e, '\n'));
    } else if (!st) {
        glia_model_free(m);
    }
    glia_config_free(cfg);
    glia_context_free(ctx);
    /* on a GPU, deterministic = on says once that timing may choose other (deterministic) algorithms in
     * another run, unless cudnn_benchmark = off */
    for (int bench = 0; have_gpu && bench < 2; bench++) {
        snprintf(text, sizeof text, "%s[runtime]\ndevice = cuda\ndeterministic = on\ncudnn_benchmark = %s\n%s", DATA,
                 bench ? "on" : "off", net);
        CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
        char *dlog = NULL;
        size_t dlen = 0;
        FILE *df = open_memstream(&dlog, &dlen);
        glia_log_set(ctx, df, GLIA_LOG_INFO);
        CU_ASSERT_EQUAL(build(text, NULL, ctx, &m, &cfg), GLIA_OK);
        fclose(df);
        const char *said = strstr(dlog, "deterministic = on with cudnn_benchmark = on: every algorithm chosen is "
                                        "deterministic, but the timing may choose others in another run");
        CU_ASSERT(bench ? said != NULL : said == NULL);
        free(dlog);
        glia_model_free(m);
        m = NULL;
        glia_config_free(cfg);
        glia_context_free(ctx);
    }
    snprintf(text, sizeof text, "%s[runtime]\ndevice = auto\n%s", DATA, net);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    char *log = NULL, *sum = NULL;
    size_t len = 0, slen = 0;
    FILE *f = open_memstream(&log, &len);
    glia_log_set(ctx, f, GLIA_LOG_INFO);
    st = build(text, NULL, ctx, &m, &cfg);
    fclose(f);
    if (!have_gpu) {
        CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
        FILE *g = open_memstream(&sum, &slen);
        glia_model_summary(m, g);
        fclose(g);
        CU_ASSERT_PTR_NOT_NULL(strstr(sum, " on cpu,"));
        CU_ASSERT_PTR_NOT_NULL(strstr(log, "device = auto: using cpu ("));
        CU_ASSERT_EQUAL(strchr(log, '\n'), log + len - 1);  /* one line */
        glia_model_free(m);
    } else if (!st) {
        glia_model_free(m);
    }
    free(log);
    free(sum);
    glia_config_free(cfg);
    glia_context_free(ctx);

    /* cuda_graph = on: the CPU backend refuses it, naming the key; device = auto falling back to
     * the CPU says so in its one line */
    snprintf(text, sizeof text, "%s[runtime]\ndevice = cpu\ncuda_graph = on\n%s", DATA, net);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(build(text, NULL, ctx, &m, &cfg), GLIA_ECONFIG);
    CU_ASSERT_STRING_EQUAL(glia_context_error(ctx), "m.ini:9: [runtime] cuda_graph: the cpu backend cannot capture CUDA "
                                                    "graphs (set cuda_graph = off or device = cuda)");
    glia_config_free(cfg);
    glia_context_free(ctx);
    snprintf(text, sizeof text, "%s[runtime]\ndevice = auto\ncuda_graph = on\n%s", DATA, net);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    log = NULL;
    f = open_memstream(&log, &len);
    glia_log_set(ctx, f, GLIA_LOG_INFO);
    st = build(text, NULL, ctx, &m, &cfg);
    fclose(f);
    if (!have_gpu) {
        CU_ASSERT_EQUAL(st, GLIA_OK);
        CU_ASSERT_PTR_NOT_NULL(strstr(log, "device = auto: using cpu ("));
        CU_ASSERT_PTR_NOT_NULL(strstr(log, "); cuda_graph = on has nothing to capture there\n"));
        CU_ASSERT_EQUAL(strchr(log, '\n'), log + len - 1);  /* one line */
    }
    if (!st) glia_model_free(m);
    free(log);
    glia_config_free(cfg);
    glia_context_free(ctx);
}

/* ---- plugins a model file names: where each is loaded from, and what is not loaded ---- */

/* A new folder glia_test_tmp(name) holding a copy of the marker fixture (its constructor appends a
 * line to $GLIA_TEST_MARKER when it is dlopened): a copy of its own, so each case loads afresh. */
static const char *marker_dir(const char *name)
{
    static char bufs[4][600];
    static int k;
    char *d = bufs[k++ % 4], from[700], to[700], buf[65536];
    snprintf(d, sizeof bufs[0], "%s", glia_test_tmp(name));
    mkdir(d, 0755);
    snprintf(from, sizeof from, "%s/marker.so", glia_test_fixtures());
    snprintf(to, sizeof to, "%s/marker.so", d);
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    CU_ASSERT_FATAL(in && out);
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) CU_ASSERT_FATAL(fwrite(buf, 1, n, out) == n);
    fclose(in);
    CU_ASSERT_FATAL(fclose(out) == 0);
    return d;
}

/* Builds the model file dir/m.ini holding text ('@': the data folder), with an optional --set, in a
 * new context; returns the status and the one-line error in err. */
static glia_status build_file(const char *dir, const char *text, const char *set, char *err, size_t n)
{
    char path[700];
    snprintf(path, sizeof path, "%s/m.ini", dir);
    CU_ASSERT_FATAL(glia_test_write(path, expand(text)) == 0);
    struct glia_context *ctx;
    struct glia_config *cfg = NULL;
    struct glia_model *m = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_config_load(ctx, path, &cfg);
    if (!st && set) st = glia_config_set(cfg, set);
    if (!st) st = glia_model_build(ctx, cfg, &m);
    snprintf(err, n, "%s", st ? glia_context_error(ctx) : "");
    CU_ASSERT(!st || strchr(err, '\n') == NULL);
    glia_model_free(m);
    glia_config_free(cfg);
    glia_context_free(ctx);
    return st;
}

/* Whether the marker fixture was loaded since the marker file was last removed. */
static bool marker_loaded(void) { return access(glia_test_tmp("plugin.marker"), F_OK) == 0; }

#define ASSERT_ERR(err, want)                                                  \
    do {                                                                       \
        if (!strstr((err), (want))) printf("\n  got: %s\n  want: %s", (err), (want)); \
        CU_ASSERT_PTR_NOT_NULL(strstr((err), (want)));                         \
    } while (0)

#define NET "[f]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n" LOSS

/* type, [train] optimizer, [plugins] load and [distributed] transport naming a .so: relative to the
 * model file's folder (the working directory is elsewhere), or to the working directory for --set,
 * and a bare "marker.so" is never handed to dlopen as it is (that would search the system). */
static void test_plugin_files_resolve(void)
{
    make_data();
    char err[2048], want[1400];
    setenv("GLIA_TEST_MARKER", glia_test_tmp("plugin.marker"), 1);
    remove(glia_test_tmp("plugin.marker"));
    const char *d = marker_dir("pf-type");
    CU_ASSERT_EQUAL(build_file(d, DATA "[runtime]\ndevice = cpu\n[train]\noptimizer = marker.so\n[f]\ntype = flatten\n"
                                       "[mk]\ntype = ./marker.so\n[fc]\ntype = linear\noutputs = 4\n" LOSS,
                               NULL, err, sizeof err),
                    GLIA_OK);
    if (err[0]) printf("\n  %s", err);
    CU_ASSERT(marker_loaded());

    remove(glia_test_tmp("plugin.marker"));
    d = marker_dir("pf-load");
    CU_ASSERT_EQUAL(build_file(d, DATA "[runtime]\ndevice = cpu\n[plugins]\nload = marker.so\n[f]\ntype = flatten\n"
                                       "[mk]\ntype = marker\n[fc]\ntype = linear\noutputs = 4\n" LOSS,
                               NULL, err, sizeof err),
                    GLIA_OK);
    if (err[0]) printf("\n  %s", err);
    CU_ASSERT(marker_loaded());

    /* --set: the working directory's marker.so, not the model file's folder's (it has none) */
    remove(glia_test_tmp("plugin.marker"));
    d = marker_dir("pf-set");
    char sub[700], old[4096];
    snprintf(sub, sizeof sub, "%s/sub", d);
    mkdir(sub, 0755);
    CU_ASSERT_FATAL(getcwd(old, sizeof old) != NULL);
    CU_ASSERT_FATAL(chdir(d) == 0);
    glia_status st = build_file(sub, DATA "[runtime]\ndevice = cpu\n[f]\ntype = flatten\n[mk]\ntype = relu\n[fc]\n"
                                          "type = linear\noutputs = 4\n" LOSS, "mk.type=marker.so", err, sizeof err);
    CU_ASSERT_FATAL(chdir(old) == 0);
    CU_ASSERT_EQUAL(st, GLIA_OK);
    if (err[0]) printf("\n  %s", err);
    CU_ASSERT(marker_loaded());

    /* a transport file is loaded with the rest; this one registers no transport of its name */
    remove(glia_test_tmp("plugin.marker"));
    d = marker_dir("pf-transport");
    CU_ASSERT_EQUAL(build_file(d, DATA "[runtime]\ndevice = cpu\n[distributed]\nmode = ddp\ntransport = ./marker.so\n" NET,
                               NULL, err, sizeof err),
                    GLIA_EPLUGIN);
    CU_ASSERT(marker_loaded());
    snprintf(want, sizeof want, "%s/m.ini:11: [distributed] transport: plugin marker.so registers no transport named 'marker'", d);
    ASSERT_ERR(err, want);

    /* a file that is not there: named with the model file's folder */
    CU_ASSERT_EQUAL(build_file(d, DATA "[train]\noptimizer = sub/nope.so\n" NET, NULL, err, sizeof err), GLIA_ENOTFOUND);
    snprintf(want, sizeof want, "%s/m.ini:8: [train] optimizer: plugin file %s/sub/nope.so not found", d, d);
    ASSERT_ERR(err, want);
    remove(glia_test_tmp("plugin.marker"));
    unsetenv("GLIA_TEST_MARKER");
}

/* A name not found says which folders were searched, for each key that names a plugin; a [plugins]
 * path folder that is not there is an error; a "did you mean" loads nothing. */
static void test_plugin_not_found(void)
{
    make_data();
    char err[2048], want[1400];
    setenv("GLIA_TEST_MARKER", glia_test_tmp("plugin.marker"), 1);
    remove(glia_test_tmp("plugin.marker"));
    const char *d = marker_dir("pf-search");
    CU_ASSERT_EQUAL(build_file(d, DATA "[plugins]\npath = ./nosuch\n" NET, NULL, err, sizeof err), GLIA_ENOTFOUND);
    snprintf(want, sizeof want, "%s/m.ini:8: [plugins] path: folder %s/nosuch does not exist", d, d);
    ASSERT_ERR(err, want);
    CU_ASSERT_EQUAL(build_file(d, DATA "[plugins]\npath = m.ini\n" NET, NULL, err, sizeof err), GLIA_ENOTFOUND);
    snprintf(want, sizeof want, "%s/m.ini:8: [plugins] path: %s/m.ini is not a folder", d, d);
    ASSERT_ERR(err, want);

    static const struct {
        const char *text, *key, *want;
    } cases[] = {
        {"[plugins]\npath = .\nload = xyzzy\n" NET, "[plugins] load", "plugin 'xyzzy' not found (searched: %s, "},
        {"[plugins]\npath = .\n[mk]\ntype = xyzzy\n" NET, "[mk] type",
         "unknown layer type 'xyzzy' (no loaded plugin registers it, and there is no xyzzy.so in %s, "},
        {"[plugins]\npath = .\n[train]\noptimizer = xyzzy\n" NET, "[train] optimizer",
         "unknown optimizer 'xyzzy' (no loaded plugin registers it, and there is no xyzzy.so in %s, "},
        {"[plugins]\npath = .\n[distributed]\nmode = ddp\ntransport = xyzzy\n" NET, "[distributed] transport",
         "[plugin 'xyzzy' not found (searched: %s, "},
        /* did you mean: from the file names, without loading marker.so (nor any other) */
        {"[plugins]\npath = .\n[mk]\ntype = markr\n" NET, "[mk] type", "unknown layer type 'markr'; did you mean 'marker'? ("},
        {"[plugins]\npath = .\n[mk]\ntype = reluu\n" NET, "[mk] type", "unknown layer type 'reluu'; did you mean 'relu'? ("},
        {"[plugins]\npath = .\n[train]\noptimizer = markerr\n" NET, "[train] optimizer",
         "unknown optimizer 'markerr'; did you mean 'marker'? ("},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024], tail[700];
        snprintf(text, sizeof text, "%s%s", DATA, cases[i].text);
        glia_status st = build_file(d, text, NULL, err, sizeof err);
        CU_ASSERT(st == GLIA_ENOTFOUND || st == GLIA_ECONFIG);
        snprintf(tail, sizeof tail, cases[i].want, d);
        ASSERT_ERR(err, cases[i].key);
        ASSERT_ERR(err, tail);
        if (strstr(cases[i].want, "%s")) ASSERT_ERR(err, getenv("GLIA_PLUGIN_PATH"));  /* and on */
        if (marker_loaded()) printf("\n  case %zu loaded marker.so", i);
        CU_ASSERT_FALSE(marker_loaded());
    }
    unsetenv("GLIA_TEST_MARKER");
}

/* glia check loads what the model names (its constructor runs); glia plugins sees a model file's
 * [plugins] path when given the file. */
static void test_cli_plugins(void)
{
    make_data();
    char err[2048], args[1400], model[700];
    setenv("GLIA_TEST_MARKER", glia_test_tmp("plugin.marker"), 1);
    remove(glia_test_tmp("plugin.marker"));
    const char *d = marker_dir("pf-cli");
    snprintf(model, sizeof model, "%s/m.ini", d);
    CU_ASSERT_FATAL(glia_test_write(model, expand(DATA "[runtime]\ndevice = cpu\n[plugins]\npath = .\n[f]\ntype = flatten\n"
                                                       "[mk]\ntype = ./marker.so\n[fc]\ntype = linear\noutputs = 4\n"
                                                       LOSS)) == 0);
    snprintf(args, sizeof args, "check %s", model);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 0);
    CU_ASSERT(marker_loaded());
    CU_ASSERT_EQUAL(run_glia("plugins --describe marker", err, sizeof err), 1);
    CU_ASSERT_STRING_EQUAL(err, "glia: no plugin or feature named 'marker' is loaded\n");
    snprintf(args, sizeof args, "plugins --describe marker %s", model);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 0);
    const char *bin = getenv("GLIA_BIN");
    char cmd[2000], out[16384];
    snprintf(cmd, sizeof cmd, "%s plugins %s", bin ? bin : "tools/glia", model);
    FILE *p = popen(cmd, "r");
    CU_ASSERT_FATAL(p != NULL);
    size_t k = fread(out, 1, sizeof out - 1, p);
    out[k] = '\0';
    CU_ASSERT_EQUAL(pclose(p), 0);
    char want[800];
    snprintf(want, sizeof want, "\nmarker 2.0 (MIT) — loader fixture: says when it is loaded\n    %s/marker.so\n"
                                "  layer marker: loader fixture: y = x\n  kernel marker impl cpu (cpu)\n", d);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    /* by name: linear comes before marker, marker before relu */
    const char *lin = strstr(out, "\nlinear "), *mk = strstr(out, "\nmarker "), *relu = strstr(out, "\nrelu ");
    CU_ASSERT(lin && mk && relu && lin < mk && mk < relu);
    /* a model whose [plugins] path is not there: one line */
    CU_ASSERT_FATAL(glia_test_write(model, "[plugins]\npath = gone\n") == 0);
    snprintf(args, sizeof args, "plugins %s", model);
    CU_ASSERT_EQUAL(run_glia(args, err, sizeof err), 1);
    CU_ASSERT_EQUAL(lines(err), 1);
    snprintf(want, sizeof want, "glia: %s:2: [plugins] path: folder %s/gone does not exist\n", model, d);
    CU_ASSERT_STRING_EQUAL(err, want);
    remove(glia_test_tmp("plugin.marker"));
    unsetenv("GLIA_TEST_MARKER");
}

GLIA_TEST_MAIN("model", GLIA_TEST(test_device_cuda_or_fallback), GLIA_TEST(test_bad_models), GLIA_TEST(test_good_model), GLIA_TEST(test_set_overrides),
               GLIA_TEST(test_cli_errors), GLIA_TEST(test_cli_check), GLIA_TEST(test_cli_out_of_memory),
               GLIA_TEST(test_cli_sigterm), GLIA_TEST(test_plugin_files_resolve), GLIA_TEST(test_plugin_not_found),
               GLIA_TEST(test_cli_plugins))
