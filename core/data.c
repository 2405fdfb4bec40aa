/* core/data.c — the [data] section: dataset formats, their keys, files and normalization, loaded into the
 * model's datasets. Not the file readers (core/data_image.c, core/data_tokens.c) nor the batch loader. */
#include <ctype.h>
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"

/* A dp replica computes on batches the model it copies hands it: same settings, no samples. */
static void borrow_data(struct glia_model *m, const struct glia_model *like)
{
    m->data.train = (struct glia__dataset){.n = like->data.train.n, .channels = like->data.train.channels, .rows = like->data.train.rows,
                                      .cols = like->data.train.cols, .n_classes = like->data.train.n_classes,
                                      .tokens = like->data.train.tokens, .stream = like->data.train.stream};
    m->data.test = (struct glia__dataset){.n = like->data.test.n, .channels = like->data.test.channels, .rows = like->data.test.rows,
                                     .cols = like->data.test.cols, .n_classes = like->data.test.n_classes,
                                     .tokens = like->data.test.tokens, .stream = like->data.test.stream};
    m->data.batch = like->data.batch;
    m->data.test_batch = like->data.test_batch;
    m->data.n_classes = like->data.n_classes;
    m->data.vocab = like->data.vocab;
    m->data.lm = like->data.lm;
    m->data.norm = like->data.norm;
    m->data.workers = 0;
}

/* [data] format: what the files are. */
enum data_format { FMT_IDX, FMT_TOKENS, FMT_CIFAR10, FMT_CIFAR100, FMT_SYNTHETIC, FMT_TOKEN_STREAM, FMT_BYTES, FMT_NPY,
                   FMT_FOLDER, N_FORMATS };
static const char *const format_names[N_FORMATS] = {"idx", "tokens", "cifar10", "cifar100", "synthetic", "token_stream",
                                                    "bytes", "npy", "folder"};
#define IMAGE_FORMATS (1u << FMT_IDX | 1u << FMT_CIFAR10 | 1u << FMT_CIFAR100 | 1u << FMT_SYNTHETIC | 1u << FMT_NPY | \
                       1u << FMT_FOLDER)
#define FILE_IMAGE_FORMATS (1u << FMT_IDX | 1u << FMT_NPY)  /* images and labels in files of their own */
#define CIFAR_FORMATS (1u << FMT_CIFAR10 | 1u << FMT_CIFAR100)
#define STREAM_FORMATS (1u << FMT_TOKEN_STREAM | 1u << FMT_BYTES)  /* a language model's: windows of a stream */

/* The keys of [data] that only some formats read (setting one for another format is an error),
 * and those some formats require. */
static const struct format_key {
    const char *key;
    unsigned formats, required;  /* masks of 1 << format */
} format_keys[] = {
    {"train_images", FILE_IMAGE_FORMATS, FILE_IMAGE_FORMATS},
    {"train_labels", FILE_IMAGE_FORMATS, FILE_IMAGE_FORMATS},
    {"test_images", FILE_IMAGE_FORMATS, FILE_IMAGE_FORMATS},
    {"test_labels", FILE_IMAGE_FORMATS, FILE_IMAGE_FORMATS},
    {"train", 1u << FMT_TOKENS | CIFAR_FORMATS, 1u << FMT_TOKENS | CIFAR_FORMATS},
    {"test", 1u << FMT_TOKENS | CIFAR_FORMATS, 1u << FMT_TOKENS | CIFAR_FORMATS},
    {"vocab", 1u << FMT_TOKENS | 1u << FMT_TOKEN_STREAM, 1u << FMT_TOKENS},
    {"train_tokens", STREAM_FORMATS, STREAM_FORMATS},
    {"val_tokens", STREAM_FORMATS, 1u << FMT_TOKEN_STREAM},
    {"seq_len", STREAM_FORMATS, STREAM_FORMATS},
    {"steps_per_epoch", STREAM_FORMATS, 0},
    {"val_batches", STREAM_FORMATS, 0},
    {"val_fraction", 1u << FMT_BYTES, 0},
    {"max_length", 1u << FMT_TOKENS, 0},
    {"pad_to_multiple", 1u << FMT_TOKENS, 0},
    {"group_by_length", 1u << FMT_TOKENS, 0},
    {"group_size", 1u << FMT_TOKENS, 0},
    {"coarse_labels", 1u << FMT_CIFAR100, 0},
    {"layout", 1u << FMT_NPY, 0},
    {"train_dir", 1u << FMT_FOLDER, 1u << FMT_FOLDER},
    {"test_dir", 1u << FMT_FOLDER, 1u << FMT_FOLDER},
    {"image_size", 1u << FMT_FOLDER, 1u << FMT_FOLDER},
    {"random_resized_crop", 1u << FMT_FOLDER, 0},
    {"channels", 1u << FMT_SYNTHETIC, 0},
    {"rows", 1u << FMT_SYNTHETIC, 0},
    {"cols", 1u << FMT_SYNTHETIC, 0},
    {"classes", 1u << FMT_SYNTHETIC, 0},
    {"seed", 1u << FMT_SYNTHETIC, 0},
    {"train_samples", ~STREAM_FORMATS, 0},
    {"test_samples", ~STREAM_FORMATS, 0},
    {"mean", IMAGE_FORMATS, 0},
    {"std", IMAGE_FORMATS, 0},
    {"random_crop_padding", IMAGE_FORMATS & ~(1u << FMT_FOLDER), 0},
    {"random_flip", IMAGE_FORMATS, 0},
};

/* "idx", "idx or cifar10", "idx, cifar10 or cifar100" from a mask of formats. */
static void format_list(unsigned mask, char *buf, size_t size)
{
    int n = 0, total = 0;
    for (int f = 0; f < N_FORMATS; f++) total += (mask >> f) & 1;
    buf[0] = 0;
    for (int f = 0; f < N_FORMATS; f++)
        if ((mask >> f) & 1) {
            size_t at = strlen(buf);
            snprintf(buf + at, size - at, "%s%s", n == 0 ? "" : n == total - 1 ? " or " : ", ", format_names[f]);
            n++;
        }
}

static glia_status check_format_keys(struct glia_section *s, enum data_format fmt)
{
    for (size_t i = 0; i < GLIA__ARRAY_LEN(format_keys); i++) {
        const struct format_key *k = &format_keys[i];
        if (glia__section_entry(s, k->key) && !((k->formats >> fmt) & 1)) {
            char list[64];
            format_list(k->formats, list, sizeof list);
            return glia_section_error(s, k->key, GLIA_ECONFIG, "'%s' applies to format = %s, not %s", k->key, list,
                                      format_names[fmt]);
        }
    }
    for (size_t i = 0; i < GLIA__ARRAY_LEN(format_keys); i++)
        if (!glia__section_entry(s, format_keys[i].key) && ((format_keys[i].required >> fmt) & 1))
            return glia_section_error(s, format_keys[i].key, GLIA_ECONFIG, "missing required key (format = %s)",
                                      format_names[fmt]);
    if (fmt == FMT_TOKENS && glia_section_int(s, "vocab") < 2)
        return glia_section_error(s, "vocab", GLIA_ECONFIG, "vocab must be at least 2 (id 0 is padding)");
    return GLIA_OK;
}

/* [data] mean or std into v[0..channels): one number for every channel or one per channel; the
 * data set's own values (def) when the key is not written. */
static glia_status norm_values(struct glia_section *s, const char *key, int channels, const float *def, float *v)
{
    const char **items;
    int n = glia__section_entry(s, key) ? glia_section_list(s, key, &items) : 0;
    if (n < 0) return GLIA_ENOMEM;
    if (n == 0) return memcpy(v, def, sizeof(float) * (size_t)channels), GLIA_OK;
    bool is_std = !strcmp(key, "std");
    if (n != 1 && n != channels) {
        if (channels == 1)
            return glia_section_error(s, key, GLIA_ECONFIG, "expected 1 value (the images have one channel), got %d", n);
        return glia_section_error(s, key, GLIA_ECONFIG, "expected 1 value or %d (one per channel), got %d", channels, n);
    }
    for (int c = 0; c < n; c++) {
        char *end;
        double x = strtod(items[c], &end);
        if (end == items[c] || *end || !isfinite(x))
            return glia_section_error(s, key, GLIA_ECONFIG, "'%s' is not a number", items[c]);
        if (is_std ? !(x >= 1e-12 && x <= 1e12) : fabs(x) > 1e12)
            return glia_section_error(s, key, GLIA_ECONFIG, "%s is out of range [%g, %g]", items[c], is_std ? 1e-12 : -1e12,
                                      1e12);
        v[c] = (float)x;
    }
    for (int c = n; c < channels; c++) v[c] = v[0];  /* one value: every channel's */
    return GLIA_OK;
}

/* The normalization of every image format when [data] does not give one: each data set's
 * training-set statistics (Fashion-MNIST for idx; pixel/255 per channel; synthetic: those of
 * pixels uniform on 0..255, mean 1/2 and std sqrt((256^2 - 1) / 12) / 255). */
static const float default_mean[N_FORMATS][GLIA__MAX_CHANNELS] = {
    [FMT_IDX] = {0.2860f}, [FMT_CIFAR10] = {0.4914f, 0.4822f, 0.4465f}, [FMT_CIFAR100] = {0.5071f, 0.4865f, 0.4409f},
    [FMT_SYNTHETIC] = {0.5f, 0.5f, 0.5f}, [FMT_FOLDER] = {0.485f, 0.456f, 0.406f}};
static const float default_std[N_FORMATS][GLIA__MAX_CHANNELS] = {
    [FMT_IDX] = {0.3530f}, [FMT_CIFAR10] = {0.2470f, 0.2435f, 0.2616f}, [FMT_CIFAR100] = {0.2673f, 0.2564f, 0.2762f},
    [FMT_SYNTHETIC] = {0.2898f, 0.2898f, 0.2898f}, [FMT_FOLDER] = {0.229f, 0.224f, 0.225f}};

/* A growing list of owned paths. */
struct paths {
    char **p;
    int n, cap;
};

static bool paths_add(struct paths *l, char *path)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        char **p = realloc(l->p, sizeof *p * (size_t)cap);
        if (!p) return free(path), false;
        l->p = p, l->cap = cap;
    }
    l->p[l->n++] = path;
    return true;
}

static void paths_free(struct paths *l)
{
    for (int i = 0; i < l->n; i++) free(l->p[i]);
    free(l->p);
}

/* The files a [data] key lists (comma-separated, relative to the file's folder), each item that
 * holds *, ? or [ replaced by the files it matches, in name order. */
static glia_status file_list(struct glia_section *s, const char *key, struct paths *out)
{
    const char **items;
    int n = glia_section_list(s, key, &items);
    if (n < 0) return GLIA_ENOMEM;
    for (int k = 0; k < n; k++) {
        if (!*items[k]) return glia_section_error(s, key, GLIA_ECONFIG, "list item %d is empty", k + 1);
        char *path = glia__config_path(s, key, items[k]);
        if (!path) return GLIA_ENOMEM;
        if (!strpbrk(items[k], "*?[")) {
            if (!paths_add(out, path)) return GLIA_ENOMEM;
            continue;
        }
        glob_t g;
        int r = glob(path, GLOB_ERR, NULL, &g);
        glia_status st = GLIA_OK;
        if (r == GLOB_NOMATCH) st = glia_section_error(s, key, GLIA_ECONFIG, "no file matches '%s'", path);
        else if (r == GLOB_NOSPACE) st = GLIA_ENOMEM;
        else if (r) st = glia_section_error(s, key, GLIA_EIO, "cannot read the folders of '%s'", path);
        for (size_t f = 0; !st && f < g.gl_pathc; f++) {
            char *one = glia__strdup(g.gl_pathv[f]);
            if (!one || !paths_add(out, one)) st = GLIA_ENOMEM;
        }
        globfree(&g);
        free(path);
        if (st) return st;
    }
    return GLIA_OK;
}

static glia_status load_cifar(struct glia_model *m, struct glia_section *s, bool cifar100)
{
    static const char *const keys[2] = {"train", "test"};
    struct glia__dataset *sets[2] = {&m->data.train, &m->data.test};
    bool coarse = cifar100 && glia_section_bool(s, "coarse_labels");
    glia_status st = GLIA_OK;
    for (int i = 0; i < 2 && !st; i++) {
        struct paths l = {0};
        st = file_list(s, keys[i], &l);
        if (!st)
            st = glia__cifar_load(m->ctx, (const char *const *)l.p, l.n, cifar100, coarse,
                                  glia_section_int(s, i == 0 ? "train_samples" : "test_samples"), sets[i]);
        paths_free(&l);
    }
    return st;
}

static glia_status load_tokens(struct glia_model *m, struct glia_section *s)
{
    char *paths[2] = {glia__config_path(s, "train", glia_section_str(s, "train")),
                      glia__config_path(s, "test", glia_section_str(s, "test"))};
    int64_t vocab = glia_section_int(s, "vocab"), max_length = glia_section_int(s, "max_length");
    glia_status st = paths[0] && paths[1] ? GLIA_OK : GLIA_ENOMEM;
    if (!st) st = glia__tokens_load(m->ctx, paths[0], vocab, max_length, glia_section_int(s, "train_samples"), &m->data.train);
    if (!st) st = glia__tokens_load(m->ctx, paths[1], vocab, max_length, glia_section_int(s, "test_samples"), &m->data.test);
    free(paths[0]);
    free(paths[1]);
    if (st) return st;
    /* one padded length bounds every batch of both sets: activations are sized for it */
    int64_t mult = glia_section_int(s, "pad_to_multiple"), longest = m->data.train.cols > m->data.test.cols ? m->data.train.cols : m->data.test.cols;
    longest = (longest + mult - 1) / mult * mult;
    if (longest > INT32_MAX) return glia_section_error(s, "pad_to_multiple", GLIA_ECONFIG, "a padded length of %lld is too long", (long long)longest);
    m->data.train.cols = m->data.test.cols = (int)longest;
    m->data.pad_multiple = (int)mult;
    m->data.vocab = vocab;
    m->data.group_by_length = glia_section_bool(s, "group_by_length");
    m->data.group_size = (int)glia_section_int(s, "group_size");
    return GLIA_OK;
}

/* ---- format = token_stream, bytes ------------------------------------------------------- */

/* The files of [data] key (glob patterns, each pattern's matches in name order) as one stream into d. */
static glia_status stream_files(struct glia_model *m, struct glia_section *s, const char *key, bool bytes, int64_t vocab,
                                struct glia__dataset *d)
{
    struct paths l = {0};
    glia_status st = file_list(s, key, &l);
    if (!st) st = glia__stream_load(m->ctx, (const char *const *)l.p, l.n, bytes, vocab, d);
    paths_free(&l);
    return st;
}

/* The windows of T tokens set d takes per epoch: training, `steps` batches of the job (B x world windows each;
 * steps 0: as many as the tokens fill, at least one); evaluation, its sequential windows, at most `batches` batches
 * of the job (0: all). One line naming the key when there is not one window. */
static glia_status stream_windows(struct glia_model *m, struct glia_section *s, struct glia__dataset *d, bool train,
                                  int64_t T, int64_t steps, int64_t batches, const char *key)
{
    d->cols = (int)T;
    d->random_windows = train && glia_section_bool(s, "shuffle");
    int64_t seq = glia__stream_count(d, T, true), job = (int64_t)glia_section_int(s, train ? "batch_size" : "test_batch_size") * m->dist.world;
    if (seq == 0)
        return glia_section_error(s, key, GLIA_ECONFIG, "the %s files hold no window of seq_len + 1 = %lld tokens "
                                  "(%lld tokens in %d file%s)", train ? "training" : "validation", (long long)T + 1,
                                  (long long)d->n_tok, d->n_shards, d->n_shards == 1 ? "" : "s");
    if (train) {
        int64_t fill = d->n_tok / (T * job);
        d->n = (steps > 0 ? steps : fill > 0 ? fill : 1) * job;
    } else {
        d->n = batches > 0 && batches * job < seq ? batches * job : seq;
    }
    return GLIA_OK;
}

/* A language model's data: windows of seq_len + 1 tokens of one stream, inputs (N, T) and next tokens (N, T). */
static glia_status load_stream(struct glia_model *m, struct glia_section *s, bool bytes)
{
    int64_t T = glia_section_int(s, "seq_len"), vocab = bytes ? 256 : glia_section_int(s, "vocab");
    if (glia__section_entry(s, "val_tokens") && glia__section_entry(s, "val_fraction"))
        return glia_section_error(s, "val_fraction", GLIA_ECONFIG, "val_tokens names the validation files: "
                                  "val_fraction (the training bytes' last part instead) cannot apply");
    glia_status st = stream_files(m, s, "train_tokens", bytes, vocab, &m->data.train);
    if (!st && glia__section_entry(s, "val_tokens")) st = stream_files(m, s, "val_tokens", bytes, vocab, &m->data.test);
    else if (!st && (st = glia__stream_split(&m->data.train, glia_section_float(s, "val_fraction"), &m->data.test)))
        st = glia_section_error(s, "val_fraction", st, "out of memory setting aside the validation bytes");
    if (!st) st = stream_windows(m, s, &m->data.train, true, T, glia_section_int(s, "steps_per_epoch"), 0, "train_tokens");
    if (!st)
        st = stream_windows(m, s, &m->data.test, false, T, 0, glia_section_int(s, "val_batches"),
                            glia__section_entry(s, "val_tokens") ? "val_tokens" : "val_fraction");
    if (st) return st;
    if (vocab == 0) {  /* llm.c's files do not say: the largest token the files hold */
        for (int i = 0; i < 2; i++) {
            const struct glia__dataset *d = i == 0 ? &m->data.train : &m->data.test;
            for (int64_t k = 0; k < d->n_tok; k++) vocab = d->tok[k] >= vocab ? d->tok[k] + 1 : vocab;
        }
        if (vocab < 2) vocab = 2;
    }
    for (int i = 0; i < 2; i++) {
        struct glia__dataset *d = i == 0 ? &m->data.train : &m->data.test;
        d->n_classes = (int)vocab;
        if (bytes) d->classes_why = glia__strdup("format = bytes has 256 byte values");
        else if (glia__section_entry(s, "vocab")) d->classes_why = glia__printf("[data] vocab = %lld", (long long)vocab);
        else d->classes_why = glia__printf("the largest token of the files is %lld", (long long)vocab - 1);
    }
    m->data.vocab = vocab;
    m->data.pad_multiple = 1;
    m->data.lm = true;
    return GLIA_OK;
}

static glia_status load_idx(struct glia_model *m, struct glia_section *s)
{
    char *paths[4] = {0};
    static const char *keys[4] = {"train_images", "train_labels", "test_images", "test_labels"};
    glia_status st = GLIA_OK;
    for (int i = 0; i < 4 && !st; i++)
        if (!(paths[i] = glia__config_path(s, keys[i], glia_section_str(s, keys[i])))) st = GLIA_ENOMEM;
    if (!st) st = glia__idx_load(m->ctx, paths[0], paths[1], glia_section_int(s, "train_samples"), &m->data.train);
    if (!st) st = glia__idx_load(m->ctx, paths[2], paths[3], glia_section_int(s, "test_samples"), &m->data.test);
    if (!st && (m->data.train.rows != m->data.test.rows || m->data.train.cols != m->data.test.cols))
        st = glia_section_error(s, "test_images", GLIA_EFORMAT, "test images are %dx%d, training images %dx%d",
                                m->data.test.rows, m->data.test.cols, m->data.train.rows, m->data.train.cols);
    for (int i = 0; i < 4; i++) free(paths[i]);
    return st;
}

/* ---- format = folder ---------------------------------------------------------------------- */

static glia_status load_folder(struct glia_model *m, struct glia_section *s)
{
    char *train = glia__config_path(s, "train_dir", glia_section_str(s, "train_dir"));
    char *test = glia__config_path(s, "test_dir", glia_section_str(s, "test_dir"));
    int size = (int)glia_section_int(s, "image_size");
    glia_status st = train && test ? GLIA_OK : GLIA_ENOMEM;
    if (!st) st = glia__folder_load(m->ctx, train, size, NULL, glia_section_int(s, "train_samples"), &m->data.train);
    if (!st) st = glia__folder_load(m->ctx, test, size, &m->data.train, glia_section_int(s, "test_samples"), &m->data.test);
    m->data.train.random_crop = glia_section_bool(s, "random_resized_crop");
    free(train);
    free(test);
    return st;
}

/* ---- format = npy ------------------------------------------------------------------------- */

static glia_status load_npy(struct glia_model *m, struct glia_section *s)
{
    char *paths[4] = {0};
    static const char *keys[4] = {"train_images", "train_labels", "test_images", "test_labels"};
    bool nhwc = !strcmp(glia_section_str(s, "layout"), "nhwc");
    glia_status st = GLIA_OK;
    for (int i = 0; i < 4 && !st; i++)
        if (!(paths[i] = glia__config_path(s, keys[i], glia_section_str(s, keys[i])))) st = GLIA_ENOMEM;
    if (!st) st = glia__npy_load(m->ctx, paths[0], paths[1], nhwc, glia_section_int(s, "train_samples"), &m->data.train);
    if (!st) st = glia__npy_load(m->ctx, paths[2], paths[3], nhwc, glia_section_int(s, "test_samples"), &m->data.test);
    const struct glia__dataset *a = &m->data.train, *b = &m->data.test;
    if (!st && (!a->fimages != !b->fimages))
        st = glia_section_error(s, "test_images", GLIA_EFORMAT, "test images are %s, training images %s: one type for "
                                "both (their normalization is the same)", b->fimages ? "float32" : "uint8",
                                a->fimages ? "float32" : "uint8");
    if (!st && (a->channels != b->channels || a->rows != b->rows || a->cols != b->cols))
        st = glia_section_error(s, "test_images", GLIA_EFORMAT, "test images are %dx%dx%d, training images %dx%dx%d",
                                b->channels, b->rows, b->cols, a->channels, a->rows, a->cols);
    for (int i = 0; i < 4; i++) free(paths[i]);
    return st;
}

/* The training images' own mean and std per channel (pixel/255 of bytes, the values of floats): the normalization of
 * format = npy when [data] gives none. */
static void image_stats(const struct glia__dataset *d, float *mean, float *std)
{
    int64_t px = (int64_t)d->rows * d->cols;
    for (int c = 0; c < d->channels; c++) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < d->n; i++) {
            const uint8_t *p = d->images ? d->images + (i * d->channels + c) * px : NULL;
            const float *q = d->fimages ? d->fimages + (i * d->channels + c) * px : NULL;
            for (int64_t j = 0; j < px; j++) {
                double v = p ? p[j] / 255.0 : q[j];
                sum += v;
                sq += v * v;
            }
        }
        double n = (double)d->n * (double)px, mu = sum / n, var = sq / n - mu * mu;
        mean[c] = (float)mu;
        std[c] = (float)(var > 1e-12 ? sqrt(var) : 1.0);  /* a constant channel: left unscaled */
    }
}

/* ---- format = synthetic ------------------------------------------------------------------- */

/* Samples generated when [data] train_samples / test_samples is 0. */
#define SYNTH_TRAIN_DEFAULT 1024
#define SYNTH_TEST_DEFAULT 256

/* splitmix64 of a counter: the stream of sample i of a set, the same whatever thread makes it. */
static uint64_t synth_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Fills d (n samples of channels x rows x cols, its shape set) with uniform u8 pixels and labels
 * uniform on 0 .. classes-1, from (seed, set): a pure function of them, so a run repeats its data. */
static void synth_fill(struct glia__dataset *d, int classes, uint64_t seed, uint64_t set)
{
    const int64_t per = (int64_t)d->channels * d->rows * d->cols;
    const uint64_t base = synth_mix(synth_mix(seed) ^ (set + 1) * 0xd1b54a32d192ed03ull);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d->n; i++) {
        uint64_t key = synth_mix(base ^ (uint64_t)i * 0x9e3779b97f4a7c15ull), word = 0;
        uint8_t *px = d->images + i * per;
        for (int64_t j = 0; j < per; j++) {
            if (j % 8 == 0) word = synth_mix(key + (uint64_t)j / 8);
            px[j] = (uint8_t)(word >> 8 * (j % 8));
        }
        /* the high half of a 64x32-bit product: uniform enough for at most 2^24 classes */
        d->labels[i] = (int32_t)((synth_mix(~key) >> 32) * (uint64_t)classes >> 32);
    }
}

/* One synthetic set of n samples: its memory, or one line naming [data] train_samples (or
 * test_samples) and the bytes when it cannot be had. */
static glia_status synth_set(struct glia_section *s, const char *key, int64_t n, const int shape[3], int classes,
                             uint64_t seed, uint64_t set, struct glia__dataset *d)
{
    *d = (struct glia__dataset){.n = n, .channels = shape[0], .rows = shape[1], .cols = shape[2], .n_classes = classes};
    double per = (double)shape[0] * shape[1] * shape[2], bytes = (double)n * (per + sizeof(int32_t));
    if (bytes < 0x1p62) {  /* beyond: no allocator would give it, and size_t arithmetic could wrap */
        d->images = malloc((size_t)n * (size_t)per);
        d->labels = d->images ? malloc((size_t)n * sizeof *d->labels) : NULL;
    }
    if (!d->labels) {
        glia__dataset_free(d);
        return glia__alloc_error(s, key, bytes, "%lld synthetic %s images of %dx%dx%d and their labels", (long long)n,
                                 set == 0 ? "training" : "test", shape[0], shape[1], shape[2]);
    }
    d->classes_why = glia__printf("[data] classes = %d", classes);
    synth_fill(d, classes, seed, set);
    return GLIA_OK;
}

/* Random images and labels made here, once, when the model is built: a data set of any shape
 * for benchmarks and tests without files. Seeded by [data] seed, else [runtime] seed. */
static glia_status load_synthetic(struct glia_model *m, struct glia_section *s)
{
    const int shape[3] = {(int)glia_section_int(s, "channels"), (int)glia_section_int(s, "rows"),
                          (int)glia_section_int(s, "cols")};
    int classes = (int)glia_section_int(s, "classes");
    uint64_t seed = glia__section_entry(s, "seed") ? (uint64_t)glia_section_int(s, "seed") : m->seed;
    int64_t n_train = glia_section_int(s, "train_samples"), n_test = glia_section_int(s, "test_samples");
    glia_status st = synth_set(s, "train_samples", n_train ? n_train : SYNTH_TRAIN_DEFAULT, shape, classes, seed, 0,
                               &m->data.train);
    if (!st) st = synth_set(s, "test_samples", n_test ? n_test : SYNTH_TEST_DEFAULT, shape, classes, seed, 1, &m->data.test);
    return st;
}

glia_status glia__load_data(struct glia_model *m)
{
    if (m->dist.like) return borrow_data(m, m->dist.like), GLIA_OK;
    struct glia_section *s = glia__config_find(m->cfg, "data");
    enum data_format fmt = FMT_IDX;
    while (fmt < N_FORMATS - 1 && strcmp(glia_section_str(s, "format"), format_names[fmt])) fmt++;
    glia_status st = check_format_keys(s, fmt);
    if (st) return st;
    int channels = fmt == FMT_IDX ? 1 : fmt == FMT_SYNTHETIC ? (int)glia_section_int(s, "channels") : 3;  /* of the image formats */
    bool images = (IMAGE_FORMATS >> fmt) & 1;
    if (images && fmt != FMT_NPY && !(st = norm_values(s, "mean", channels, default_mean[fmt], m->data.norm.mean)))
        st = norm_values(s, "std", channels, default_std[fmt], m->data.norm.std);
    if (st) return st;
    if (fmt == FMT_NPY) {  /* the channels come from the files; the default normalization from the training set */
        float mean[GLIA__MAX_CHANNELS], sd[GLIA__MAX_CHANNELS];
        if ((st = load_npy(m, s))) return st;
        image_stats(&m->data.train, mean, sd);
        st = norm_values(s, "mean", m->data.train.channels, mean, m->data.norm.mean);
        if (!st) st = norm_values(s, "std", m->data.train.channels, sd, m->data.norm.std);
        if (st) return st;
    }
    if (fmt == FMT_TOKENS) st = load_tokens(m, s);
    else if ((STREAM_FORMATS >> fmt) & 1) st = load_stream(m, s, fmt == FMT_BYTES);
    else if (fmt == FMT_NPY) st = GLIA_OK;  /* loaded above */
    else if (fmt == FMT_FOLDER) st = load_folder(m, s);
    else if (fmt == FMT_IDX) st = load_idx(m, s);
    else if (fmt == FMT_SYNTHETIC) st = load_synthetic(m, s);
    else st = load_cifar(m, s, fmt == FMT_CIFAR100);
    if (st) return st;
    m->data.batch = (int)glia_section_int(s, "batch_size");
    m->data.test_batch = (int)glia_section_int(s, "test_batch_size");
    m->data.shuffle = glia_section_bool(s, "shuffle");
    m->data.workers = (int)glia_section_int(s, "workers");
    m->data.prefetch = (int)glia_section_int(s, "prefetch");
    m->data.persistent = glia_section_bool(s, "persistent_workers");
    m->data.pin_memory = glia_section_bool(s, "pin_memory");
    m->data.drop_last = glia_section_bool(s, "drop_last");
    m->data.crop_padding = (int)glia_section_int(s, "random_crop_padding");
    m->data.flip = glia_section_bool(s, "random_flip");
    const char *res = glia_section_str(s, "resident");
    m->data.resident = !strcmp(res, "on") ? GLIA__RESIDENT_ON : !strcmp(res, "off") ? GLIA__RESIDENT_OFF : GLIA__RESIDENT_AUTO;
    m->data.resident_share = glia_section_float(s, "resident_share");
    if (m->data.resident == GLIA__RESIDENT_ON && (m->data.train.fimages || m->data.train.folder))
        return glia_section_error(s, "resident", GLIA_ECONFIG, "resident = on makes batches of byte images on the "
                                  "device; these images are %s (set auto or off)",
                                  m->data.train.folder ? "decoded from files batch by batch" : "float32");
    if (m->data.resident == GLIA__RESIDENT_ON && m->data.train.tokens)
        return glia_section_error(s, "resident", GLIA_ECONFIG, "resident = on keeps images on the device; the batches "
                                  "of format = %s are made on the host (set auto or off)", format_names[fmt]);
    if (m->data.drop_last && m->data.train.n < m->data.batch)
        return glia_section_error(s, "drop_last", GLIA_ECONFIG, "drop_last with %lld training samples and batch_size %d leaves no batch",
                                  (long long)m->data.train.n, m->data.batch);
    m->data.n_classes = m->data.train.n_classes > m->data.test.n_classes ? m->data.train.n_classes : m->data.test.n_classes;
    return GLIA_OK;
}
