/* tests/test_tensorboard.c — [train] tensorboard: CRC32C and the masked CRC against known answers, the encoder's
 * bytes, and training runs read back with the tests' own reader (tbutil.h): every record's CRCs, the version record,
 * train/loss and train/lr at the optimizer steps of the progress lines, the epoch scalars equal to the epoch results,
 * a resumed run's new file, the refusal of a folder that cannot be written, and write errors that fail the run but
 * keep its checkpoint. Not ddp's one writer (test_ddp_mpi) nor the GPU's lagged loss (test_cuda). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "modelutil.h"
#include "parts.h"
#include "report.h"
#include "tbutil.h"
#include "tensorboard.h"

#define MAX_EVENTS 4096

static char dir[512];
static struct tb_event events[MAX_EVENTS];

static void make_data(void)
{
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "tensorboard-data", 512, 200, 6, 5, 11) == 0);
}

static void rm_rf(const char *path)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

/* The classifier of test_train (512 training samples: 16 batches of 32 an epoch), `train` appended to [train]. */
static const char *model_text(int batch, const char *train)
{
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 5\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = %d\ntest_batch_size = 64\nmean = 0.2\nstd = 0.3\n"
             "[train]\noptimizer = sgd\nlr = 0.05\n%s\n[optimizer]\nmomentum = 0.9\n"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = relu\n"
             "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir, batch, train);
    return buf;
}

/* The line of text holding `key =` (1-based). */
static int line_of(const char *text, const char *key)
{
    const char *at = strstr(text, key);
    CU_ASSERT_FATAL(at != NULL);
    int line = 1;
    for (const char *p = text; p < at; p++) line += *p == '\n';
    return line;
}

/* The records of the event file at path into events (CRCs checked): how many. */
static int read_events(const char *path)
{
    size_t n;
    uint8_t *buf = tb_slurp(path, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    int count, rc = tb_parse(buf, n, events, MAX_EVENTS, &count);
    if (rc) printf("\n  %s: unreadable (%d) after %d records\n", path, rc, count);
    CU_ASSERT_EQUAL(rc, TB_OK);
    free(buf);
    return count;
}

/* The one event file in folder d, its records read into events: how many. */
static int read_only_file(const char *d)
{
    char names[4][256], path[1200];
    int files = tb_list(d, names, 4);
    CU_ASSERT_EQUAL_FATAL(files, 1);
    char host[256];
    CU_ASSERT_FATAL(gethostname(host, sizeof host) == 0);
    long long when = 0;
    char rest[256] = "";
    CU_ASSERT_EQUAL(sscanf(names[0], "events.out.tfevents.%lld.%255s", &when, rest), 2);
    CU_ASSERT_STRING_EQUAL(rest, host);
    CU_ASSERT(llabs(when - (long long)time(NULL)) < 3600);
    snprintf(path, sizeof path, "%s/%s", d, names[0]);
    return read_events(path);
}

/* The first record: the file version with a wall time, no step and no values. */
static void check_version_record(const struct tb_event *e, time_t t0, time_t t1)
{
    CU_ASSERT_STRING_EQUAL(e->version, "brain.Event:2");
    CU_ASSERT(e->has_wall && !e->has_step && e->n_values == 0);
    CU_ASSERT(e->wall >= (double)t0 && e->wall < (double)t1 + 1);
}

/* A progress line: epoch, batch (1-based) and loss. */
struct shown {
    int epoch;
    long long k;
    double loss;
};

/* The plain progress lines of out (rewound): how many, into s. */
static int progress_lines(FILE *out, struct shown *s, int max)
{
    rewind(out);
    char line[512];
    int n = 0, e, epochs;
    long long k, steps;
    double l;
    while (fgets(line, sizeof line, out))
        if (sscanf(line, "epoch %d/%d step %lld/%lld loss %lf", &e, &epochs, &k, &steps, &l) == 5 && n < max)
            s[n++] = (struct shown){e, k, l};
    return n;
}

/* The events of `count` holding tag, in file order: their steps and values into step[], v[]; how many. */
static int scalars(int count, const char *tag, int64_t *step, float *v, int max)
{
    int n = 0;
    for (int i = 0; i < count; i++) {
        const float *x = tb_find(&events[i], tag);
        if (!x) continue;
        CU_ASSERT(events[i].has_step && events[i].has_wall);
        CU_ASSERT_EQUAL(events[i].n_values, 1);
        if (n < max) step[n] = events[i].step, v[n] = *x;
        n++;
    }
    return n;
}

/* Steps never go back and wall times neither, from the second record on. */
static void check_order(int count)
{
    for (int i = 2; i < count; i++) {
        CU_ASSERT(events[i].step >= events[i - 1].step);
        CU_ASSERT(events[i].wall >= events[i - 1].wall);
    }
}

/* The epoch scalars at the step each epoch ended (spe optimizer steps an epoch): those of a classifier, equal to the
 * results as floats; a language model's tags absent. */
static void check_classifier_epochs(int count, const struct glia_epoch_result *res, int epochs, int64_t spe)
{
    static const char *tags[] = {"epoch/train_loss", "epoch/test_loss", "epoch/test_accuracy", "epoch/samples_per_s",
                                 "epoch/data_wait_s"};
    for (size_t t = 0; t < GLIA__ARRAY_LEN(tags); t++) {
        int64_t step[8];
        float v[8];
        CU_ASSERT_EQUAL_FATAL(scalars(count, tags[t], step, v, 8), epochs);
        for (int e = 0; e < epochs; e++) {
            const struct glia_epoch_result *r = &res[e];
            double want[] = {r->train_loss, r->test_loss, r->test_accuracy, r->samples_per_s, r->data_wait_s};
            CU_ASSERT_EQUAL(step[e], (e + 1) * spe);
            CU_ASSERT_EQUAL(v[e], (float)want[t]);
        }
    }
    int64_t step[1];
    float v[1];
    CU_ASSERT_EQUAL(scalars(count, "epoch/val_loss", step, v, 1), 0);
    CU_ASSERT_EQUAL(scalars(count, "epoch/perplexity", step, v, 1), 0);
}

/* ---- the format ---- */

/* CRC-32C's check value and iSCSI's test vectors (RFC 3720, B.4), from glia and from the reader's own table; and
 * the 12 bytes every TensorBoard event file begins with (a 24-byte version record's length and its masked CRC). */
static void test_crc32c_known_answers(void)
{
    uint8_t zeros[32] = {0}, ones[32], up[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) up[i] = (uint8_t)i;
    CU_ASSERT_EQUAL(glia__crc32c("123456789", 9), 0xE3069283u);
    CU_ASSERT_EQUAL(glia__crc32c(zeros, 32), 0x8A9136AAu);
    CU_ASSERT_EQUAL(glia__crc32c(ones, 32), 0x62A8AB43u);
    CU_ASSERT_EQUAL(glia__crc32c(up, 32), 0x46DD794Eu);
    CU_ASSERT_EQUAL(glia__crc32c("", 0), 0u);
    CU_ASSERT_EQUAL(tb_crc32c((const uint8_t *)"123456789", 9), 0xE3069283u);
    CU_ASSERT_EQUAL(tb_crc32c(up, 32), 0x46DD794Eu);
    uint8_t len24[8] = {24};
    CU_ASSERT_EQUAL(glia__tb_mask(glia__crc32c(len24, 8)), 0x224b7fa3u);
    CU_ASSERT_EQUAL(tb_masked(len24, 8), 0x224b7fa3u);
    CU_ASSERT_EQUAL(glia__tb_mask(0), 0xa282ead8u);
    CU_ASSERT_EQUAL(glia__tb_mask(0x80000000u), 0xa282ead8u + 0x10000u);  /* bit 31 rotates to bit 16 */
    CU_ASSERT_EQUAL(glia__tb_mask(0x00008000u), 0xa282ead8u + 1u);         /* bit 15 rotates to bit 0 */
}

/* The encoder's bytes, written out by hand from the wire format; and a step past 2^32 through the reader. */
static void test_event_bytes(void)
{
    uint8_t buf[128];
    size_t n = glia__tb_version_event(buf, sizeof buf, 1.5);
    static const uint8_t version[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f,  /* wall_time 1.5 */
                                      0x1a, 13, 'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2'};
    CU_ASSERT_EQUAL_FATAL(n, sizeof version);
    CU_ASSERT_EQUAL(memcmp(buf, version, n), 0);
    n = glia__tb_scalar_event(buf, sizeof buf, 1.5, 300, "a/b", 0.25f);
    static const uint8_t scalar[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f,  /* wall_time */
                                     0x10, 0xac, 0x02,                      /* step 300 */
                                     0x2a, 12,                              /* summary */
                                     0x0a, 10,                              /* value */
                                     0x0a, 3, 'a', '/', 'b',                /* tag */
                                     0x15, 0, 0, 0x80, 0x3e};               /* simple_value 0.25 */
    CU_ASSERT_EQUAL_FATAL(n, sizeof scalar);
    CU_ASSERT_EQUAL(memcmp(buf, scalar, n), 0);
    n = glia__tb_scalar_event(buf, sizeof buf, 1e9 + 0.25, 5000000000LL, "train/loss", -3.5f);
    struct tb_event e;
    CU_ASSERT_FATAL(n > 0 && tb_event_decode(buf, n, &e));
    CU_ASSERT(e.has_step && e.step == 5000000000LL && e.wall == 1e9 + 0.25);
    CU_ASSERT(e.n_values == 1 && !strcmp(e.values[0].tag, "train/loss") && e.values[0].v == -3.5f);
    CU_ASSERT_EQUAL(glia__tb_scalar_event(buf, 20, 1.5, 300, "a/b", 0.25f), 0);  /* does not fit: nothing */
}

/* A file of records read back; then any one flipped byte is caught: in a length by its CRC, in data by the data's
 * CRC, in a CRC by itself. */
static void test_reader_catches_corruption(void)
{
    const char *d = glia_test_tmp("tensorboard-corrupt");
    rm_rf(d);
    struct glia__tb tb;
    CU_ASSERT_EQUAL_FATAL(glia__tb_open(&tb, d), 0);
    glia__tb_scalar(&tb, "train/loss", 1, 2.5);
    glia__tb_scalar(&tb, "train/lr", 1, 0.125);
    CU_ASSERT_EQUAL(glia__tb_close(&tb), 0);
    size_t n;
    uint8_t *buf = tb_slurp(tb.path, &n);
    glia__tb_free(&tb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    int count;
    CU_ASSERT_EQUAL(tb_parse(buf, n, events, MAX_EVENTS, &count), TB_OK);
    CU_ASSERT_EQUAL_FATAL(count, 3);
    CU_ASSERT_STRING_EQUAL(events[0].version, "brain.Event:2");
    CU_ASSERT(events[1].step == 1 && *tb_find(&events[1], "train/loss") == 2.5f);
    CU_ASSERT(events[2].step == 1 && *tb_find(&events[2], "train/lr") == 0.125f);
    size_t second = 16 + 24;  /* the second record, after the 24-byte version record's */
    struct {
        size_t at;
        int want;
    } flips[] = {{0, TB_HEADER_CRC}, {9, TB_HEADER_CRC}, {second + 3, TB_HEADER_CRC}, {12, TB_DATA_CRC},
                 {second + 12 + 5, TB_DATA_CRC}, {n - 1, TB_DATA_CRC}, {n - 10, TB_DATA_CRC}};
    for (size_t i = 0; i < GLIA__ARRAY_LEN(flips); i++) {
        uint8_t *bad = malloc(n);
        CU_ASSERT_FATAL(bad != NULL);
        memcpy(bad, buf, n);
        bad[flips[i].at] ^= 0x10;
        int rc = tb_parse(bad, n, events, MAX_EVENTS, &count);
        if (rc != flips[i].want) printf("\n  byte %zu flipped: %d, want %d\n", flips[i].at, rc, flips[i].want);
        CU_ASSERT_EQUAL(rc, flips[i].want);
        free(bad);
    }
    CU_ASSERT_EQUAL(tb_parse(buf, n - 1, events, MAX_EVENTS, &count), TB_SHORT);
    free(buf);
}

/* ---- training ---- */

/* Two epochs with log_every = 3 and a warmup, the progress lines captured: train/loss at every third batch, at the
 * optimizer step it ended, equal to the line's loss; train/lr the warmup's at that step; the epoch scalars the
 * results; the folder made with its parents. */
static void test_classifier_run(void)
{
    make_data();
    char tb[700], train[1000];
    snprintf(tb, sizeof tb, "%s/tb-run/a/b", dir);
    rm_rf(tb);
    snprintf(train, sizeof train, "epochs = 2\nlog_every = 3\nwarmup_steps = 8\ntensorboard = %s\n", tb);
    struct run r;
    open_run(&r, model_text(32, train));
    FILE *out = tmpfile();
    CU_ASSERT_FATAL(out != NULL);
    struct glia_train_options o = quiet;
    o.out = out;
    o.progress = 0;
    struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
    time_t t0 = time(NULL);
    glia_status st = glia_model_train(r.m, &o, res, 2);
    time_t t1 = time(NULL);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    int count = read_only_file(tb);
    CU_ASSERT_FATAL(count > 1);
    check_version_record(&events[0], t0, t1);
    check_order(count);
    struct shown s[64];
    int lines = progress_lines(out, s, 64);
    fclose(out);
    CU_ASSERT_EQUAL(lines, 2 * 5);  /* batches 3, 6, 9, 12, 15 of 16 */
    int64_t step[64], lr_step[64];
    float loss[64], lr[64];
    CU_ASSERT_EQUAL_FATAL(scalars(count, "train/loss", step, loss, 64), lines);
    CU_ASSERT_EQUAL_FATAL(scalars(count, "train/lr", lr_step, lr, 64), lines);
    for (int i = 0; i < lines; i++) {
        CU_ASSERT_EQUAL(s[i].k % 3, 0);
        CU_ASSERT_EQUAL(step[i], (s[i].epoch - 1) * 16 + s[i].k);  /* one update a batch */
        CU_ASSERT(fabs(loss[i] - s[i].loss) <= 5.01e-5);           /* the line's %.4f */
        CU_ASSERT_EQUAL(lr_step[i], step[i]);
        CU_ASSERT_EQUAL(lr[i], (float)(0.05 * (double)(step[i] < 8 ? step[i] : 8) / 8.0));
        if (i) CU_ASSERT(step[i] > step[i - 1]);
    }
    check_classifier_epochs(count, res, 2, 16);
    CU_ASSERT_EQUAL(r.m->trainer.step, 32);
    close_run(&r);
}

/* accumulate = 2 and log_every = 1, quiet: every batch's loss, at the optimizer steps taken so far (batch K after
 * K/2 updates); their mean is the epoch's training loss. */
static void test_accumulate_steps(void)
{
    make_data();
    char tb[700], train[1000];
    snprintf(tb, sizeof tb, "%s/tb-accumulate", dir);
    rm_rf(tb);
    snprintf(train, sizeof train, "epochs = 1\nlog_every = 1\naccumulate = 2\ntensorboard = %s\n", tb);
    struct run r;
    open_run(&r, model_text(32, train));
    struct glia_epoch_result res[1] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, res, 1), GLIA_OK);
    int count = read_only_file(tb);
    int64_t step[32];
    float loss[32];
    CU_ASSERT_EQUAL_FATAL(scalars(count, "train/loss", step, loss, 32), 16);
    double sum = 0;
    for (int k = 0; k < 16; k++) {
        CU_ASSERT_EQUAL(step[k], (k + 1) / 2);
        sum += loss[k];
    }
    CU_ASSERT_DOUBLE_EQUAL(sum / 16, res[0].train_loss, 1e-6 * res[0].train_loss);  /* 16 full batches of 32 */
    check_classifier_epochs(count, res, 1, 8);
    close_run(&r);
}

/* A byte-level language model: its epoch scalars are val_loss and perplexity (no accuracy, no test_loss), as its
 * epoch line. */
static void test_language_model(void)
{
    make_data();
    char corpus[700], tb[700], text[4096];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    FILE *f = fopen(corpus, "w");
    CU_ASSERT_FATAL(f != NULL);
    for (int i = 0; i < 200; i++) fprintf(f, "the quick brown fox %d jumps over the lazy dog.\n", i % 7);
    CU_ASSERT_FATAL(fclose(f) == 0);
    snprintf(tb, sizeof tb, "%s/tb-lm", dir);
    rm_rf(tb);
    snprintf(text, sizeof text,
             "[runtime]\ndevice = cpu\nseed = 3\n"
             "[data]\nformat = bytes\ntrain_tokens = %s\nseq_len = 16\nval_fraction = 0.2\nbatch_size = 4\n"
             "test_batch_size = 8\nsteps_per_epoch = 6\nval_batches = 2\n"
             "[train]\nepochs = 2\noptimizer = adam\nlr = 0.01\nlog_every = 2\ntensorboard = %s\n"
             "[emb]\ntype = embedding\nvocab = 256\ndim = 8\noutput = sequence\n[fc]\ntype = linear\noutputs = 256\n"
             "[loss]\ntype = softmax_cross_entropy\n",
             corpus, tb);
    struct run r;
    open_run(&r, text);
    struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
    glia_status st = glia_model_train(r.m, &quiet, res, 2);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    int count = read_only_file(tb);
    check_order(count);
    int64_t step[16];
    float v[16];
    CU_ASSERT_EQUAL(scalars(count, "train/loss", step, v, 16), 2 * 3);  /* batches 2, 4, 6 of each epoch */
    CU_ASSERT_EQUAL(scalars(count, "epoch/val_loss", step, v, 16), 2);
    CU_ASSERT(step[0] == 6 && step[1] == 12);
    CU_ASSERT(v[0] == (float)res[0].test_loss && v[1] == (float)res[1].test_loss);
    CU_ASSERT_EQUAL(scalars(count, "epoch/perplexity", step, v, 16), 2);
    CU_ASSERT(v[0] == (float)exp(res[0].test_loss) && v[1] == (float)exp(res[1].test_loss));
    CU_ASSERT_EQUAL(scalars(count, "epoch/train_loss", step, v, 16), 2);
    CU_ASSERT(v[0] == (float)res[0].train_loss && v[1] == (float)res[1].train_loss);
    CU_ASSERT_EQUAL(scalars(count, "epoch/test_loss", step, v, 16), 0);
    CU_ASSERT_EQUAL(scalars(count, "epoch/test_accuracy", step, v, 16), 0);
    CU_ASSERT_EQUAL(scalars(count, "epoch/samples_per_s", step, v, 16), 2);
    CU_ASSERT_EQUAL(scalars(count, "epoch/data_wait_s", step, v, 16), 2);
    close_run(&r);
}

/* Waits until the wall clock's second changes, so that the next event file gets a name of its own. */
static void next_second(void)
{
    time_t t = time(NULL);
    struct timespec ms10 = {0, 10000000};
    while (time(NULL) == t) nanosleep(&ms10, NULL);
}

/* A run stopped at max_steps = 5 and resumed: the resumed run writes a second file, from step 6 on, and the first
 * keeps what it had. */
static void test_resume_new_file(void)
{
    make_data();
    char tb[700], ck[700], train[2000], resume[800];
    snprintf(tb, sizeof tb, "%s/tb-resume", dir);
    snprintf(ck, sizeof ck, "%s/tb-resume-ck", dir);
    rm_rf(tb);
    rm_rf(ck);
    snprintf(train, sizeof train, "epochs = 2\nlog_every = 1\nmax_steps = 5\ncheckpoint_dir = %s\ntensorboard = %s\n",
             ck, tb);
    struct run r;
    open_run(&r, model_text(32, train));
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);
    close_run(&r);
    next_second();
    snprintf(train, sizeof train, "epochs = 2\nlog_every = 1\ncheckpoint_dir = %s\ntensorboard = %s\n", ck, tb);
    open_run(&r, model_text(32, train));
    snprintf(resume, sizeof resume, "%s/step-00000005.ckpt", ck);
    struct glia_train_options o = quiet;
    o.resume = resume;
    struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &o, res, 2), GLIA_OK);
    close_run(&r);
    char names[4][256], path[1200];
    CU_ASSERT_EQUAL_FATAL(tb_list(tb, names, 4), 2);
    int64_t step[64];
    float v[64];
    snprintf(path, sizeof path, "%s/%s", tb, names[0]);  /* the older name first */
    int count = read_events(path);
    CU_ASSERT_STRING_EQUAL(events[0].version, "brain.Event:2");
    CU_ASSERT_EQUAL(scalars(count, "train/loss", step, v, 64), 4);  /* the batch that reached max_steps has no line */
    CU_ASSERT(step[0] == 1 && step[3] == 4);
    CU_ASSERT_EQUAL(scalars(count, "epoch/train_loss", step, v, 64), 0);
    snprintf(path, sizeof path, "%s/%s", tb, names[1]);
    count = read_events(path);
    CU_ASSERT_STRING_EQUAL(events[0].version, "brain.Event:2");
    check_order(count);
    CU_ASSERT_EQUAL_FATAL(scalars(count, "train/loss", step, v, 64), 32 - 5);
    CU_ASSERT(step[0] == 6 && step[26] == 32);
    check_classifier_epochs(count, res, 2, 16);
}

/* A folder that cannot be made is refused before the first step, in one line naming the file, line, section, key
 * and the event file. */
static void test_unwritable_folder(void)
{
    make_data();
    char file[700], train[1000], want[1400];
    snprintf(file, sizeof file, "%s/tb-not-a-folder", dir);
    CU_ASSERT_FATAL(glia_test_write(file, "a file\n") == 0);
    snprintf(train, sizeof train, "epochs = 1\ntensorboard = %s/sub\n", file);
    const char *text = model_text(32, train);
    struct run r;
    open_run(&r, text);
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_EIO);
    const char *e = glia_context_error(r.ctx);
    snprintf(want, sizeof want,
             "t.ini:%d: [train] tensorboard: cannot write the event file %s/sub/events.out.tfevents.", line_of(text, "tensorboard ="), file);
    if (strncmp(e, want, strlen(want))) printf("\n  got:  %s\n  want: %s...\n", e, want);
    CU_ASSERT_EQUAL(strncmp(e, want, strlen(want)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, ": Not a directory"));
    CU_ASSERT_PTR_NULL(strchr(e, '\n'));
    CU_ASSERT_EQUAL(r.m->trainer.step, 0);  /* not one step was trained */
    close_run(&r);
}

/* A write that fails ends the run with an error naming the event file, after the run and its checkpoint: here the
 * file outgrows RLIMIT_FSIZE (SIGXFSZ ignored), while final.ckpt, smaller, is written whole. An earlier error of
 * the run stays the one reported. */
static void test_write_error(void)
{
    make_data();
    char tb[700], ck[700], train[2000];
    snprintf(tb, sizeof tb, "%s/tb-full", dir);
    snprintf(ck, sizeof ck, "%s/tb-full-ck", dir);
    rm_rf(tb);
    rm_rf(ck);
    snprintf(train, sizeof train, "epochs = 8\nlog_every = 1\ncheckpoint_dir = %s\ntensorboard = %s\n", ck, tb);
    struct run r;
    open_run(&r, model_text(4, train));
    struct rlimit old, lim;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = 32768;  /* the checkpoint is some 3 kB; the event file some 110 kB */
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    fflush(stdout);
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    glia_status st = glia_model_train(r.m, &quiet, NULL, 0);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, was);
    CU_ASSERT_EQUAL(st, GLIA_EIO);
    const char *e = glia_context_error(r.ctx);
    if (!strstr(e, "File too large")) printf("\n  %s\n", e);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "writing the TensorBoard event file "));
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "/tb-full/events.out.tfevents."));
    CU_ASSERT_PTR_NOT_NULL(strstr(e, " failed: File too large"));
    CU_ASSERT_EQUAL(r.m->trainer.step, 8 * 128);  /* every epoch trained */
    char path[800];
    snprintf(path, sizeof path, "%s/final.ckpt", ck);
    struct run b;
    open_run(&b, model_text(4, train));
    CU_ASSERT_EQUAL(glia_model_load_checkpoint(b.m, path), GLIA_OK);
    CU_ASSERT(same_weights(&r, &b));  /* the checkpoint is the trained model's */
    close_run(&b);
    /* the report's end: a failed write is the error when the run has none, an earlier one stays */
    for (int k = 0; k < 2; k++) {
        struct glia__report rep = {.out = stdout, .progress = -1, .shown_k = -1};
        CU_ASSERT_EQUAL_FATAL(glia__tb_open_file(&rep.tb, "/dev/full"), 0);
        struct glia_epoch_result er = {sizeof er, 1, 0.5, 0.25, 0.75, 100, 1, 0.05, 0, 0, 0, 1, 0, 0, 0};
        glia__report_epoch(&rep, r.m, &er, 0, true);
        st = glia__report_finish(&rep, r.m, k ? GLIA_ENUMERIC : GLIA_OK, false, true, 0, 0);
        glia__report_close(&rep);
        CU_ASSERT_EQUAL(st, k ? GLIA_ENUMERIC : GLIA_EIO);
        if (!k)
            CU_ASSERT_STRING_EQUAL(glia_context_error(r.ctx),
                                   "writing the TensorBoard event file /dev/full failed: No space left on device");
    }
    close_run(&r);
}

/* An epoch's scalars reach the file when the epoch is reported, before the run ends: a running TensorBoard sees
 * them. */
static void test_epoch_flushed(void)
{
    make_data();
    char path[700];
    snprintf(path, sizeof path, "%s/tb-flushed.tfevents", dir);
    unlink(path);
    struct run r;
    open_run(&r, model_text(32, "epochs = 1\n"));
    r.m->trainer.step = 7;
    struct glia__report rep = {.out = stdout, .progress = -1, .shown_k = -1};
    CU_ASSERT_EQUAL_FATAL(glia__tb_open_file(&rep.tb, path), 0);
    struct glia_epoch_result er = {sizeof er, 1, 0.5, 0.25, 0.75, 100, 1, 0.05, 0.125, 0, 0, 1, 0, 0, 0};
    glia__report_epoch(&rep, r.m, &er, 0, true);
    int count = read_events(path);  /* the run has not ended */
    CU_ASSERT_EQUAL(count, 1 + 5);
    check_classifier_epochs(count, &er, 1, 7);
    CU_ASSERT_EQUAL(glia__report_finish(&rep, r.m, GLIA_OK, false, true, 0, 0), GLIA_OK);
    glia__report_close(&rep);
    close_run(&r);
}

GLIA_TEST_MAIN("tensorboard", GLIA_TEST(test_crc32c_known_answers), GLIA_TEST(test_event_bytes),
               GLIA_TEST(test_reader_catches_corruption), GLIA_TEST(test_classifier_run),
               GLIA_TEST(test_accumulate_steps), GLIA_TEST(test_language_model), GLIA_TEST(test_resume_new_file),
               GLIA_TEST(test_unwritable_folder), GLIA_TEST(test_epoch_flushed), GLIA_TEST(test_write_error))
