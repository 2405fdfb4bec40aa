/* tests/test_config.c — CUnit tests of core/config.c: parse errors, --set, schema checks, getters.
 * Not a test of any real schema: the schemas here are small ones made for these tests. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "internal.h"
#include "testutil.h"

/* ---- schemas ---------------------------------------------------------------------------- */

static const struct glia_key common_keys[] = {
    {.name = "type", .type = GLIA_KEY_STRING, .doc = "layer type", .required = true},
    {.name = "impl", .type = GLIA_KEY_ENUM, .default_value = "auto", .doc = "implementation",
     .choices = "auto|cpu|cudnn"},
    {.name = NULL},
};

static const struct glia_key fc_keys[] = {
    {.name = "outputs", .type = GLIA_KEY_INT, .doc = "number of outputs", .required = true,
     .min = 1, .max = 65536},
    {.name = "bias", .type = GLIA_KEY_BOOL, .default_value = "on", .doc = "add a bias"},
    {.name = "init_scale", .type = GLIA_KEY_FLOAT, .default_value = "1.0", .doc = "scale",
     .min = 0, .max = 10},
    {.name = "inputs", .type = GLIA_KEY_LIST, .doc = "input layers"},
    {.name = NULL},
};

static const struct glia_key train_keys[] = {
    {.name = "epochs", .type = GLIA_KEY_INT, .default_value = "10", .doc = "epochs", .min = 1,
     .max = 1000},
    {.name = "lr", .type = GLIA_KEY_FLOAT, .default_value = "0.01", .doc = "learning rate"},
    {.name = "optimizer", .type = GLIA_KEY_ENUM, .default_value = "sgd", .doc = "optimizer",
     .choices = "sgd|adam|adadelta"},
    {.name = "shuffle", .type = GLIA_KEY_BOOL, .default_value = "yes", .doc = "shuffle"},
    {.name = "metrics", .type = GLIA_KEY_STRING, .doc = "metrics file"},
    {.name = "seed", .type = GLIA_KEY_INT, .default_value = "-1", .doc = "seed"},
    {.name = "tags", .type = GLIA_KEY_LIST, .default_value = "a, b", .doc = "tags"},
    {.name = NULL},
};

static const struct glia_key empty_keys[] = {{.name = NULL}};

/* Validates s against the test schema chosen by its name. */
static glia_status validate(struct glia_section *s)
{
    const struct glia_key *fc[] = {common_keys, fc_keys};
    const struct glia_key *train[] = {NULL, train_keys};
    const struct glia_key *other[] = {common_keys};
    const struct glia_key *none[] = {empty_keys};
    if (strcmp(s->name, "fc") == 0) return glia__section_validate(s, fc, 2);
    if (strcmp(s->name, "train") == 0) return glia__section_validate(s, train, 2);
    if (strcmp(s->name, "empty") == 0) return glia__section_validate(s, none, 1);
    return glia__section_validate(s, other, 1);
}

static glia_status validate_all(struct glia_config *cfg)
{
    for (int i = 0; i < cfg->n_sections; i++) {
        glia_status st = validate(cfg->sections[i]);
        if (st != GLIA_OK) return st;
    }
    return GLIA_OK;
}

/* Each test runs with a fresh context (begin); one left by a failed test is freed there. */
static struct glia_context *ctx;

static void begin(void)
{
    if (ctx) glia_context_free(ctx);
    ctx = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
}

static void end(void)
{
    if (ctx) glia_context_free(ctx);
    ctx = NULL;
}

/* Parses text as "model.ini" and validates it; the config is freed unless out is given. */
static glia_status load(const char *text, const char *set, struct glia_config **out)
{
    struct glia_config *cfg = NULL;
    glia_status st = glia_config_parse_string(ctx, "model.ini", text, &cfg);
    if (st != GLIA_OK) {
        CU_ASSERT(cfg == NULL);
        return st;
    }
    if (set) st = glia_config_set(cfg, set);
    if (st == GLIA_OK) st = validate_all(cfg);
    if (out && st == GLIA_OK)
        *out = cfg;
    else
        glia_config_free(cfg);
    return st;
}

/* Checks a status and the context's message (equal, or containing it when substring). */
static void expect(const char *what, glia_status st, glia_status want, const char *msg,
                   bool substring)
{
    const char *got = glia_context_error(ctx);
    bool ok = st == want && (substring ? strstr(got, msg) != NULL : strcmp(got, msg) == 0);
    if (!ok)
        fprintf(stderr, "\n  %s: got %s \"%s\"\n  %*s  want %s \"%s\"\n", what,
                glia_status_name(st), got, (int)strlen(what), "", glia_status_name(want), msg);
    CU_ASSERT(ok);
}

/* ---- malformed inputs ------------------------------------------------------------------ */

struct bad_case {
    const char *what;
    const char *text;
    const char *set;     /* applied after parsing (NULL: none) */
    glia_status status;
    const char *message; /* the whole message */
};

static const struct bad_case bad_cases[] = {
    {"syntax error", "[fc]\ntype = linear\noutputs 3\n", NULL, GLIA_ECONFIG,
     "model.ini:3: syntax error: expected [section] or key = value"},
    {"no closing bracket", "; model\n[fc\ntype = linear\n", NULL, GLIA_ECONFIG,
     "model.ini:2: syntax error: expected [section] or key = value"},
    {"empty key name", "[fc]\n= linear\n", NULL, GLIA_ECONFIG,
     "model.ini:2: syntax error: expected [section] or key = value"},
    {"indented text is no continuation", "[train]\nmetrics = a\n   b\n", NULL, GLIA_ECONFIG,
     "model.ini:3: syntax error: expected [section] or key = value"},
    {"empty section name", "\n[ ]\n", NULL, GLIA_ECONFIG,
     "model.ini:2: syntax error: empty section name"},
    {"text after header", "[fc] type = linear\n", NULL, GLIA_ECONFIG,
     "model.ini:1: syntax error: unexpected text after [fc]"},
    {"key outside section", "; top\nepochs = 3\n[train]\n", NULL, GLIA_ECONFIG,
     "model.ini:2: key 'epochs' is outside any [section]"},
    {"duplicate section", "[fc]\ntype = linear\noutputs = 3\n\n[act]\ntype = relu\n\n\n[fc]\n",
     NULL, GLIA_ECONFIG, "model.ini:9: duplicate section [fc] (first at line 1)"},
    {"duplicate section, spaces", "[train]\n[ train ]\n", NULL, GLIA_ECONFIG,
     "model.ini:2: duplicate section [train] (first at line 1)"},
    {"duplicate key", "[train]\nepochs = 1\nlr = 0.1\nepochs = 2\n", NULL, GLIA_ECONFIG,
     "model.ini:4: [train] epochs: duplicate key (first at line 2)"},
    {"syntax error before duplicate", "[a]\nnonsense\n[a]\n", NULL, GLIA_ECONFIG,
     "model.ini:2: syntax error: expected [section] or key = value"},
    {"duplicate before syntax error", "[a]\nx = 1\nx = 2\nnonsense\n", NULL, GLIA_ECONFIG,
     "model.ini:3: [a] x: duplicate key (first at line 2)"},
    {"unknown key, near", "[fc]\ntype = linear\noutptus = 10\n", NULL, GLIA_ECONFIG,
     "model.ini:3: [fc] outptus: unknown key; did you mean 'outputs'?"},
    {"unknown key, other case", "[train]\nEpochs = 3\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] Epochs: unknown key; did you mean 'epochs'?"},
    {"unknown key, nothing near", "[fc]\ntype = linear\noutputs = 3\nzzzzzz = 1\n", NULL,
     GLIA_ECONFIG,
     "model.ini:4: [fc] zzzzzz: unknown key (valid: type, impl, outputs, bias, init_scale, "
     "inputs)"},
    {"unknown key, no keys", "[empty]\nx = 1\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [empty] x: unknown key (this section takes no keys)"},
    {"bad int", "[train]\nepochs = ten\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] epochs: expected an integer, got 'ten'"},
    {"int with junk", "[train]\nepochs = 3x ; three\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] epochs: expected an integer, got '3x'"},
    {"empty int", "[train]\nepochs =\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] epochs: expected an integer, got ''"},
    {"out-of-range int", "[fc]\ntype = linear\noutputs = 70000\n", NULL, GLIA_ECONFIG,
     "model.ini:3: [fc] outputs: 70000 is out of range [1, 65536]"},
    {"int below range", "[fc]\ntype = linear\noutputs = 0\n", NULL, GLIA_ECONFIG,
     "model.ini:3: [fc] outputs: 0 is out of range [1, 65536]"},
    {"int overflow", "[train]\nseed = 99999999999999999999\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] seed: 99999999999999999999 does not fit in a 64-bit integer"},
    {"bad float", "[train]\nlr = 0.1x\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] lr: expected a number, got '0.1x'"},
    {"infinite float", "[train]\nlr = inf\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] lr: expected a finite number, got 'inf'"},
    {"float out of range", "[fc]\ntype = linear\noutputs = 2\ninit_scale = 10.5\n", NULL,
     GLIA_ECONFIG, "model.ini:4: [fc] init_scale: 10.5 is out of range [0, 10]"},
    {"bad bool", "[train]\nshuffle = maybe\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] shuffle: expected on or off, got 'maybe'"},
    {"bad enum, near", "[train]\noptimizer = adamw\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] optimizer: expected one of sgd, adam, adadelta, got 'adamw'; "
     "did you mean 'adam'?"},
    {"bad enum, nothing near", "[train]\noptimizer = lbfgs\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] optimizer: expected one of sgd, adam, adadelta, got 'lbfgs'"},
    {"empty list item", "[train]\ntags = a, , b\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] tags: list item 2 is empty in 'a, , b'"},
    {"trailing comma", "[train]\ntags = a,\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] tags: list item 2 is empty in 'a,'"},
    {"empty list", "[train]\ntags =\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] tags: expected a comma-separated list, got ''"},
    {"empty string", "[train]\nmetrics = ; none\n", NULL, GLIA_ECONFIG,
     "model.ini:2: [train] metrics: empty value"},
    {"missing required key", "[act]\ntype = relu\n\n[fc]\ntype = linear\n", NULL, GLIA_ECONFIG,
     "model.ini:4: [fc] outputs: missing required key (number of outputs)"},
    {"bad --set, no =", "[train]\n", "train.epochs", GLIA_EINVAL,
     "--set train.epochs: expected section.key=value"},
    {"bad --set, no dot", "[train]\n", "epochs=3", GLIA_EINVAL,
     "--set epochs=3: expected section.key=value"},
    {"bad --set, dot in value only", "[train]\n", "train=a.b", GLIA_EINVAL,
     "--set train=a.b: expected section.key=value"},
    {"bad --set, empty section", "[train]\n", " .epochs=3", GLIA_EINVAL,
     "--set  .epochs=3: expected section.key=value"},
    {"bad --set, empty key", "[train]\n", "train.=3", GLIA_EINVAL,
     "--set train.=3: expected section.key=value"},
    {"--set value in error", "[train]\nepochs = 1\n", "train.epochs=zero", GLIA_ECONFIG,
     "--set train.epochs=zero: [train] epochs: expected an integer, got 'zero'"},
    {"--set unknown key", "[train]\n", "train.epoch = 2", GLIA_ECONFIG,
     "--set train.epoch=2: [train] epoch: unknown key; did you mean 'epochs'?"},
    {"--set section misses a key", "[train]\n", "fc.type=linear", GLIA_ECONFIG,
     "--set fc.type=linear: [fc] outputs: missing required key (number of outputs)"},
};

static void test_bad_inputs(void)
{
    begin();
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const struct bad_case *c = &bad_cases[i];
        glia_context_clear_error(ctx);
        glia_status st = load(c->text, c->set, NULL);
        expect(c->what, st, c->status, c->message, false);
    }
    end();
}

/* A line of n 'x' after "metrics = " (n + 10 characters), as line 3. */
static glia_status long_line(int n, const char *eol)
{
    char *text = malloc((size_t)n + 64);
    CU_ASSERT_FATAL(text != NULL);
    int k = sprintf(text, "[train]\n; comment\nmetrics = ");
    memset(text + k, 'x', (size_t)n);
    strcpy(text + k + n, eol);
    strcat(text, "[fc]\n");
    struct glia_config *cfg = NULL;
    glia_status st = glia_config_parse_string(ctx, "model.ini", text, &cfg);
    if (st == GLIA_OK) {
        CU_ASSERT(cfg->n_sections == 2);
        struct glia_section *s = glia__config_find(cfg, "train");
        const struct glia__entry *e = s ? glia__section_entry(s, "metrics") : NULL;
        CU_ASSERT(e != NULL && (int)strlen(e->value) == n);
    }
    glia_config_free(cfg);
    free(text);
    return st;
}

static void test_long_lines(void)
{
    begin();
    /* GLIA__CONFIG_LINE_MAX characters, the line ending not counted */
    const int most = GLIA__CONFIG_LINE_MAX - 10;
    CU_ASSERT(long_line(5000, "\n") == GLIA_OK);
    CU_ASSERT(long_line(most, "\n") == GLIA_OK);
    CU_ASSERT(long_line(most, "\r\n") == GLIA_OK);
    expect("over-long line", long_line(most + 1, "\n"), GLIA_ECONFIG,
           "model.ini:3: line longer than 65536 characters", false);
    expect("over-long line, \\r\\n", long_line(most + 1, "\r\n"), GLIA_ECONFIG,
           "model.ini:3: line longer than 65536 characters", false);
    expect("much longer line", long_line(3 * most, ""), GLIA_ECONFIG,
           "model.ini:3: line longer than 65536 characters", false);
    /* a comment is a line too */
    size_t n = GLIA__CONFIG_LINE_MAX + 64;
    char *text = malloc(n + 1);
    CU_ASSERT_FATAL(text != NULL);
    memset(text, ';', n);
    text[n] = '\0';
    memcpy(text, "[a]\nx = 1\n", 10);
    struct glia_config *cfg = NULL;
    expect("long comment", glia_config_parse_string(ctx, "model.ini", text, &cfg), GLIA_ECONFIG,
           "model.ini:3: line longer than 65536 characters", false);
    text[10 + GLIA__CONFIG_LINE_MAX] = '\n';
    CU_ASSERT(glia_config_parse_string(ctx, "model.ini", text, &cfg) == GLIA_OK);
    glia_config_free(cfg);
    free(text);
    end();
}

/* A --set as long as a line may be is taken whole; a longer one is refused, and messages show
 * a long one's start. */
static void test_long_set(void)
{
    begin();
    size_t n = GLIA__CONFIG_LINE_MAX + 1;
    char *a = malloc(n + 1);
    CU_ASSERT_FATAL(a != NULL);
    memset(a, 'x', n);
    memcpy(a, "train.metrics=", 14);
    a[n] = '\0';
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "model.ini", "[train]\n", &cfg) == GLIA_OK);
    glia_status st = glia_config_set(cfg, a);
    CU_ASSERT(st == GLIA_EINVAL);
    const char *err = glia_context_error(ctx);
    CU_ASSERT(strncmp(err, "--set train.metrics=xxx", 23) == 0);
    CU_ASSERT(strstr(err, "...: longer than 65536 characters") != NULL && strlen(err) < 200);
    a[n - 1] = '\0';
    CU_ASSERT(glia_config_set(cfg, a) == GLIA_OK);
    struct glia_section *s = glia__config_find(cfg, "train");
    const struct glia__entry *e = glia__section_entry(s, "metrics");
    CU_ASSERT_FATAL(e != NULL);
    CU_ASSERT(strlen(e->value) == n - 1 - 14);
    CU_ASSERT(strlen(e->origin) == 100 && strcmp(e->origin + 97, "...") == 0);
    st = glia_section_error(s, "metrics", GLIA_ECONFIG, "the message");
    CU_ASSERT(strstr(glia_context_error(ctx), "...: [train] metrics: the message") != NULL);
    glia_config_free(cfg);
    free(a);
    end();
}

/* ---- parsing ---------------------------------------------------------------------------- */

static void test_sections_in_order(void)
{
    begin();
    struct glia_config *cfg = NULL;
    const char *text = "\xEF\xBB\xBF; a model\n[runtime] ; comment\ndevice = cpu   ; inline\n\n"
                       "[conv1]\n  type = conv2d\n  size=3\nimpl: auto\n[FC]\n[fc]\n"
                       "path = a;b\n";
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "m.ini", text, &cfg) == GLIA_OK);
    CU_ASSERT_FATAL(cfg->n_sections == 4);
    const char *names[] = {"runtime", "conv1", "FC", "fc"};
    const int lines[] = {2, 5, 9, 10};
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_STRING_EQUAL(glia_section_name(cfg->sections[i]), names[i]);
        CU_ASSERT(cfg->sections[i]->line == lines[i]);
        CU_ASSERT(cfg->sections[i]->cfg == cfg);
    }
    const struct glia__entry *e = glia__section_entry(glia__config_find(cfg, "runtime"), "device");
    CU_ASSERT_FATAL(e != NULL);
    CU_ASSERT_STRING_EQUAL(e->value, "cpu");
    CU_ASSERT(e->line == 3 && e->origin == NULL);
    struct glia_section *conv = glia__config_find(cfg, "conv1");
    CU_ASSERT_FATAL(conv != NULL && conv->n_entries == 3);
    CU_ASSERT_STRING_EQUAL(conv->entries[0].key, "type");
    CU_ASSERT_STRING_EQUAL(conv->entries[0].value, "conv2d");
    CU_ASSERT_STRING_EQUAL(conv->entries[1].key, "size");
    CU_ASSERT(conv->entries[1].line == 7);
    CU_ASSERT_STRING_EQUAL(conv->entries[2].value, "auto");
    CU_ASSERT(glia__section_entry(conv, "Type") == NULL);
    e = glia__section_entry(glia__config_find(cfg, "fc"), "path");
    CU_ASSERT(e != NULL && strcmp(e->value, "a;b") == 0);
    CU_ASSERT(glia__config_find(cfg, "Fc") == NULL);
    CU_ASSERT(glia__config_find(cfg, "nope") == NULL);
    glia_config_free(cfg);
    end();
}

static void test_empty_input(void)
{
    begin();
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, NULL, "", &cfg) == GLIA_OK);
    CU_ASSERT(cfg->n_sections == 0);
    CU_ASSERT_STRING_EQUAL(cfg->path, "<string>");
    glia_config_free(cfg);
    /* a byte-order mark before the first header */
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "bom.ini", "\xEF\xBB\xBF[fc]\nx = 1\n", &cfg) ==
                    GLIA_OK);
    CU_ASSERT(cfg->n_sections == 1 && strcmp(cfg->sections[0]->name, "fc") == 0);
    CU_ASSERT(cfg->sections[0]->n_entries == 1);
    glia_config_free(cfg);
    glia_config_free(NULL);
    end();
}

static void test_where(void)
{
    begin();
    struct glia_config *cfg = NULL;
    char buf[256];
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "model.ini", "\n[fc]\ntype = linear\n"
                                             "outputs = 3\n", &cfg) == GLIA_OK);
    struct glia_section *s = glia__config_find(cfg, "fc");
    glia__where(s, "outputs", buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "model.ini:4: [fc] outputs: ");
    glia__where(s, NULL, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "model.ini:2: [fc] ");
    glia__where(s, "bias", buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "model.ini:2: [fc] bias: ");
    CU_ASSERT(glia_config_set(cfg, "fc.outputs=7") == GLIA_OK);
    glia__where(s, "outputs", buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "--set fc.outputs=7: [fc] outputs: ");
    CU_ASSERT(glia_config_set(cfg, "new.key=v") == GLIA_OK);
    CU_ASSERT(glia_config_set(cfg, "new.more=w") == GLIA_OK);
    glia__where(glia__config_find(cfg, "new"), NULL, buf, sizeof buf);  /* the --set that made it */
    CU_ASSERT_STRING_EQUAL(buf, "--set new.key=v: [new] ");
    glia__where(glia__config_find(cfg, "new"), "other", buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "--set new.key=v: [new] other: ");
    glia__where(glia__config_find(cfg, "new"), "more", buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "--set new.more=w: [new] more: ");
    glia__where(glia__config_section(cfg, "core"), NULL, buf, sizeof buf);  /* made by the core */
    CU_ASSERT_STRING_EQUAL(buf, "model.ini: [core] ");
    glia__where(s, "outputs", buf, 8);
    CU_ASSERT_STRING_EQUAL(buf, "--set f");
    glia_config_free(cfg);
    end();
}

static void test_section_error(void)
{
    begin();
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(load("[fc]\ntype = linear\noutputs = 3\n", NULL, &cfg) == GLIA_OK);
    struct glia_section *s = glia__config_find(cfg, "fc");
    glia_status st = glia_section_error(s, "outputs", GLIA_ESHAPE, "needs %d, got %s", 4, "3");
    expect("section error", st, GLIA_ESHAPE, "model.ini:3: [fc] outputs: needs 4, got 3", false);
    st = glia_section_error(s, NULL, GLIA_EPLUGIN, "no layer type '%s'", "linear");
    expect("section error", st, GLIA_EPLUGIN, "model.ini:1: [fc] no layer type 'linear'", false);
    glia_config_free(cfg);
    end();
}

/* ---- --set -------------------------------------------------------------------------------- */

static void test_set_override(void)
{
    begin();
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "model.ini", "[train]\nepochs = 1\nlr = 0.1\n",
                                             &cfg) == GLIA_OK);
    CU_ASSERT(glia_config_set(cfg, "train.epochs=5") == GLIA_OK);
    CU_ASSERT(glia_config_set(cfg, " train . lr = 0.5 ") == GLIA_OK);
    CU_ASSERT(glia_config_set(cfg, "train.metrics=a=b.jsonl") == GLIA_OK);
    CU_ASSERT(glia_config_set(cfg, "train.epochs=6") == GLIA_OK);  /* the later one wins */
    struct glia_section *s = glia__config_find(cfg, "train");
    CU_ASSERT_FATAL(s != NULL && s->n_entries == 3);
    const struct glia__entry *e = glia__section_entry(s, "epochs");
    CU_ASSERT(e->line == 0);
    CU_ASSERT_STRING_EQUAL(e->origin, "--set train.epochs=6");
    CU_ASSERT_STRING_EQUAL(glia__section_entry(s, "lr")->origin, "--set train.lr=0.5");
    CU_ASSERT_STRING_EQUAL(glia__section_entry(s, "metrics")->value, "a=b.jsonl");
    CU_ASSERT(glia__section_entry(s, "metrics")->line == 0);
    CU_ASSERT(validate(s) == GLIA_OK);
    CU_ASSERT(glia_section_int(s, "epochs") == 6);
    CU_ASSERT(glia_section_float(s, "lr") == 0.5);
    CU_ASSERT_STRING_EQUAL(glia_section_str(s, "metrics"), "a=b.jsonl");
    glia_config_free(cfg);
    end();
}

static void test_set_creates_section(void)
{
    begin();
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "model.ini", "[train]\n", &cfg) == GLIA_OK);
    CU_ASSERT(glia_config_set(cfg, "runtime.device=cuda:1") == GLIA_OK);
    CU_ASSERT(glia_config_set(cfg, "runtime.seed=3") == GLIA_OK);
    CU_ASSERT_FATAL(cfg->n_sections == 2);
    struct glia_section *s = cfg->sections[1];
    CU_ASSERT(s == glia__config_find(cfg, "runtime"));
    CU_ASSERT(s->line == 0 && s->n_entries == 2);
    CU_ASSERT_STRING_EQUAL(glia__section_entry(s, "device")->value, "cuda:1");
    CU_ASSERT(glia__config_section(cfg, "runtime") == s);
    struct glia_section *made = glia__config_section(cfg, "data");
    CU_ASSERT(made != NULL && made->line == 0 && made->n_entries == 0 && cfg->n_sections == 3);
    glia_config_free(cfg);
    end();
}

/* ---- validation and getters ---------------------------------------------------------- */

static void test_defaults(void)
{
    begin();
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(load("[train]\n[fc]\ntype = linear\noutputs = 2\n", NULL, &cfg) == GLIA_OK);
    struct glia_section *s = glia__config_find(cfg, "train");
    CU_ASSERT(s->n_schemas == 1);  /* the NULL schema is skipped */
    CU_ASSERT(!glia_section_has(s, "epochs"));
    CU_ASSERT(glia_section_int(s, "epochs") == 10);
    CU_ASSERT(glia_section_int(s, "seed") == -1);
    CU_ASSERT_DOUBLE_EQUAL(glia_section_float(s, "lr"), 0.01, 1e-15);
    CU_ASSERT_STRING_EQUAL(glia_section_str(s, "optimizer"), "sgd");
    CU_ASSERT(glia_section_bool(s, "shuffle") == true);
    CU_ASSERT(glia_section_str(s, "metrics") == NULL);
    const char **items = NULL;
    CU_ASSERT_FATAL(glia_section_list(s, "tags", &items) == 2);
    CU_ASSERT_STRING_EQUAL(items[0], "a");
    CU_ASSERT_STRING_EQUAL(items[1], "b");
    struct glia_section *fc = glia__config_find(cfg, "fc");
    CU_ASSERT(fc->n_schemas == 2);
    CU_ASSERT(glia_section_list(fc, "inputs", &items) == 0 && items == NULL);
    CU_ASSERT_STRING_EQUAL(glia_section_str(fc, "impl"), "auto");
    CU_ASSERT(glia_section_bool(fc, "bias"));
    CU_ASSERT_DOUBLE_EQUAL(glia_section_float(fc, "init_scale"), 1.0, 0);
    CU_ASSERT(glia_section_float(fc, "outputs") == 2.0);
    glia_config_free(cfg);
    end();
}

static void test_typed_getters(void)
{
    begin();
    struct glia_config *cfg = NULL;
    const char *text = "[train]\nepochs = 7 ; seven\nlr = 2.5e-3\noptimizer = adadelta\n"
                       "shuffle = OFF\nmetrics = runs/x.jsonl\nseed = -42\n";
    CU_ASSERT_FATAL(load(text, NULL, &cfg) == GLIA_OK);
    struct glia_section *s = glia__config_find(cfg, "train");
    CU_ASSERT(glia_section_has(s, "epochs"));
    CU_ASSERT(glia_section_int(s, "epochs") == 7);
    CU_ASSERT(glia_section_float(s, "lr") == 2.5e-3);
    CU_ASSERT_STRING_EQUAL(glia_section_str(s, "optimizer"), "adadelta");
    CU_ASSERT(glia_section_bool(s, "shuffle") == false);
    CU_ASSERT_STRING_EQUAL(glia_section_str(s, "metrics"), "runs/x.jsonl");
    CU_ASSERT(glia_section_int(s, "seed") == -42);
    CU_ASSERT(glia_section_float(s, "epochs") == 7.0);
    glia_config_free(cfg);
    end();
}

static void test_bool_spellings(void)
{
    begin();
    static const char *const words[] = {"on", "off", "TRUE", "False", "yes", "NO", "1", "0"};
    for (int i = 0; i < 8; i++) {
        char text[64];
        struct glia_config *cfg = NULL;
        snprintf(text, sizeof text, "[train]\nshuffle = %s\n", words[i]);
        CU_ASSERT_FATAL(load(text, NULL, &cfg) == GLIA_OK);
        CU_ASSERT(glia_section_bool(glia__config_find(cfg, "train"), "shuffle") == (i % 2 == 0));
        glia_config_free(cfg);
    }
    end();
}

static void test_int_bounds(void)
{
    begin();
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(load("[fc]\ntype = linear\noutputs = 65536\n", NULL, &cfg) == GLIA_OK);
    CU_ASSERT(glia_section_int(glia__config_find(cfg, "fc"), "outputs") == 65536);
    glia_config_free(cfg);
    CU_ASSERT_FATAL(load("[train]\nseed = -9223372036854775808\n", NULL, &cfg) == GLIA_OK);
    CU_ASSERT(glia_section_int(glia__config_find(cfg, "train"), "seed") == INT64_MIN);
    glia_config_free(cfg);
    CU_ASSERT(load("[train]\nseed = 0x10\n", NULL, NULL) == GLIA_ECONFIG);
    end();
}

static void test_lists(void)
{
    begin();
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(load("[fc]\ntype = linear\noutputs = 2\ninputs = conv1 , act2,x\n"
                         "[train]\ntags = one\n", NULL, &cfg) == GLIA_OK);
    struct glia_section *fc = glia__config_find(cfg, "fc");
    struct glia_section *train = glia__config_find(cfg, "train");
    const char **a = NULL, **b = NULL, **again = NULL;
    CU_ASSERT_FATAL(glia_section_list(fc, "inputs", &a) == 3);
    CU_ASSERT_FATAL(glia_section_list(train, "tags", &b) == 1);
    CU_ASSERT_FATAL(glia_section_list(fc, "inputs", &again) == 3);
    /* items of earlier calls stay valid */
    CU_ASSERT(again == a);
    CU_ASSERT_STRING_EQUAL(a[0], "conv1");
    CU_ASSERT_STRING_EQUAL(a[1], "act2");
    CU_ASSERT_STRING_EQUAL(a[2], "x");
    CU_ASSERT(a[3] == NULL);
    CU_ASSERT_STRING_EQUAL(b[0], "one");
    CU_ASSERT(glia_config_set(cfg, "fc.inputs=p, q") == GLIA_OK);
    CU_ASSERT(glia_section_list(fc, "inputs", &b) == 2);
    CU_ASSERT_STRING_EQUAL(b[1], "q");
    CU_ASSERT_STRING_EQUAL(a[2], "x");
    glia_config_free(cfg);
    end();
}

static void test_validate_twice(void)
{
    begin();
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(load("[train]\nepochs = 2\n", NULL, &cfg) == GLIA_OK);
    struct glia_section *s = glia__config_find(cfg, "train");
    const struct glia_key *fc[] = {common_keys, fc_keys, NULL};
    glia_context_clear_error(ctx);
    /* a failed validation keeps the schemas of the last good one */
    expect("revalidate", glia__section_validate(s, fc, 3), GLIA_ECONFIG,
           "model.ini:2: [train] epochs: unknown key (valid: type, impl, outputs, bias, "
           "init_scale, inputs)", false);
    CU_ASSERT(s->n_schemas == 1 && s->schemas[0] == train_keys);
    CU_ASSERT(glia_section_int(s, "epochs") == 2);
    glia_config_free(cfg);
    end();
}

static void test_did_you_mean(void)
{
    begin();
    const char *keys[] = {"type", "outputs", "bias", NULL, "inputs"};
    CU_ASSERT_STRING_EQUAL(glia__did_you_mean("outptus", keys, 5), "outputs");
    CU_ASSERT_STRING_EQUAL(glia__did_you_mean("BIAS", keys, 5), "bias");
    CU_ASSERT_STRING_EQUAL(glia__did_you_mean("typo", keys, 5), "type");
    CU_ASSERT_STRING_EQUAL(glia__did_you_mean("input", keys, 5), "inputs");
    CU_ASSERT(glia__did_you_mean("zzzz", keys, 5) == NULL);
    CU_ASSERT(glia__did_you_mean("tpyee", keys, 5) == NULL);  /* 3 edits, limit 1 */
    CU_ASSERT(glia__did_you_mean("x", keys, 0) == NULL);
    const char *ties[] = {"ab", "ac"};
    CU_ASSERT_STRING_EQUAL(glia__did_you_mean("aa", ties, 2), "ab");
    const char *one[] = {"y"};
    CU_ASSERT_STRING_EQUAL(glia__did_you_mean("x", one, 1), "y");
    end();
}

/* A getter that cannot answer (a key outside the schema, the getter of another type, a default that does not parse)
 * does not abort: it returns 0, false or NULL and marks the section with the first such call, which
 * glia__section_misread turns into one line naming the place, the caller and the key (the core refuses the plugin's
 * create with it). The mark is kept until cleared; a later bad call does not overwrite it. */
static void test_getter_misread(void)
{
    begin();
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(load("[train]\nepochs = 4\n[fc]\ntype = linear\noutputs = 3\n", NULL, &cfg) == GLIA_OK);
    struct glia_section *t = glia__config_find(cfg, "train"), *fc = glia__config_find(cfg, "fc");
    CU_ASSERT_EQUAL(glia__section_misread(t, "who"), GLIA_OK);  /* nothing asked wrongly yet */
    CU_ASSERT_EQUAL(glia_section_int(t, "epochs"), 4);
    CU_ASSERT_EQUAL(glia_section_int(t, "no_such_key"), 0);
    CU_ASSERT_EQUAL(glia_section_float(t, "epochs"), 4.0);  /* an int reads as a float */
    CU_ASSERT_EQUAL(glia_section_int(t, "lr"), 0);          /* a float does not read as an int */
    glia_context_clear_error(ctx);
    expect("unknown key", glia__section_misread(t, "optimizer 'x' (plugin y)"), GLIA_EPLUGIN,
           "model.ini:1: [train] no_such_key: optimizer 'x' (plugin y): glia_section_int reads key 'no_such_key', which "
           "is not among the keys it declares", false);
    glia__section_misread_clear(t);
    CU_ASSERT_EQUAL(glia__section_misread(t, "who"), GLIA_OK);
    CU_ASSERT_EQUAL(glia_section_int(t, "lr"), 0);
    expect("wrong getter", glia__section_misread(t, "who"), GLIA_EPLUGIN,
           "model.ini:1: [train] lr: who: glia_section_int reads key 'lr', which it declares as float", false);
    glia__section_misread_clear(t);
    /* each getter: 0, false, NULL, no items; the key is named with the line it is written on when it is */
    CU_ASSERT_EQUAL(glia_section_float(fc, "outputz"), 0.0);
    CU_ASSERT_FALSE(glia_section_bool(fc, "biass"));
    CU_ASSERT_PTR_NULL(glia_section_str(fc, "nope"));
    const char **items = (const char **)1;
    CU_ASSERT_EQUAL(glia_section_list(fc, "bias", &items), 0);  /* a bool is not a list */
    CU_ASSERT_PTR_NULL(items);
    CU_ASSERT_FALSE(glia_section_has(fc, "outputz"));
    expect("first call wins", glia__section_misread(fc, "who"), GLIA_EPLUGIN,
           "model.ini:3: [fc] outputz: who: glia_section_float reads key 'outputz', which is not among the keys it "
           "declares", false);
    glia__section_misread_clear(fc);
    CU_ASSERT_EQUAL(glia_section_list(fc, "bias", &items), 0);
    expect("list of a bool", glia__section_misread(fc, "who"), GLIA_EPLUGIN,
           "model.ini:3: [fc] bias: who: glia_section_list reads key 'bias', which it declares as bool", false);
    glia__section_misread_clear(fc);
    CU_ASSERT_EQUAL(glia_section_int(fc, "outputs"), 3);
    CU_ASSERT_TRUE(glia_section_bool(fc, "bias"));
    CU_ASSERT_EQUAL(glia__section_misread(fc, "who"), GLIA_OK);
    glia_config_free(cfg);
    /* a schema default that does not parse */
    static const struct glia_key bad_default[] = {
        {.name = "rate", .type = GLIA_KEY_FLOAT, .default_value = "fast", .doc = "a rate"},
        {.name = NULL}};
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "model.ini", "[x]\n", &cfg) == GLIA_OK);
    struct glia_section *x = glia__config_find(cfg, "x");
    const struct glia_key *sch[] = {bad_default};
    CU_ASSERT_FATAL(glia__section_validate(x, sch, 1) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_section_float(x, "rate"), 0.0);
    expect("bad default", glia__section_misread(x, "who"), GLIA_EPLUGIN,
           "model.ini:1: [x] rate: who: key 'rate' has default 'fast', which is not a valid float", false);
    glia_config_free(cfg);
    end();
}

/* ---- files ---------------------------------------------------------------------------- */

static void test_file_load(void)
{
    begin();
    const char *path = glia_test_tmp("x.ini");
    CU_ASSERT_FATAL(glia_test_write(path, "; test\r\n[train]\r\nepochs = 4\r\n"
                                          "[fc]\r\ntype = linear\r\n") == 0);
    struct glia_config *cfg = NULL;
    CU_ASSERT_FATAL(glia_config_load(ctx, path, &cfg) == GLIA_OK);
    CU_ASSERT_STRING_EQUAL(cfg->path, path);
    CU_ASSERT_FATAL(cfg->n_sections == 2);
    struct glia_section *train = cfg->sections[0];
    CU_ASSERT(validate(train) == GLIA_OK);
    CU_ASSERT(glia_section_int(train, "epochs") == 4);
    char want[600];
    snprintf(want, sizeof want, "%s:4: [fc] outputs: missing required key (number of outputs)",
             path);
    expect("file", validate(cfg->sections[1]), GLIA_ECONFIG, want, false);
    glia_config_free(cfg);
    remove(path);
    end();
}

static void test_file_errors(void)
{
    begin();
    const char *path = glia_test_tmp("no-such-dir/missing.ini");
    struct glia_config *cfg = (struct glia_config *)&cfg;
    char want[600];
    snprintf(want, sizeof want, "cannot open %s: No such file or directory", path);
    expect("missing file", glia_config_load(ctx, path, &cfg), GLIA_EIO, want, false);
    CU_ASSERT(cfg == NULL);

    const char *dir = glia_test_tmp("");
    snprintf(want, sizeof want, "cannot read %s: Is a directory", dir);
    expect("directory", glia_config_load(ctx, dir, &cfg), GLIA_EIO, want, false);

    path = glia_test_tmp("nul.ini");
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    fwrite("[a]\nx = 1\x00y\n", 1, 12, f);
    fclose(f);
    snprintf(want, sizeof want, "%s:2: a NUL byte: this is not a text (INI) file", path);
    expect("NUL byte", glia_config_load(ctx, path, &cfg), GLIA_ECONFIG, want, false);
    remove(path);

    path = glia_test_tmp("ctl.ini");
    CU_ASSERT_FATAL(glia_test_write(path, "[a]\t; tab\n\t x = 1\f\v\r\ny = \x1b[1m\n") == 0);
    snprintf(want, sizeof want, "%s:3: a control byte (0x1b): this is not a text (INI) file", path);
    expect("control byte", glia_config_load(ctx, path, &cfg), GLIA_ECONFIG, want, false);
    remove(path);

    /* endless input: refused at its first line, having read no more than a line may hold */
    expect("/dev/zero", glia_config_load(ctx, "/dev/zero", &cfg), GLIA_ECONFIG,
           "/dev/zero:1: a NUL byte: this is not a text (INI) file", false);
    int fd[2];
    CU_ASSERT_FATAL(pipe(fd) == 0);
    const size_t total = (size_t)16 << 20;
    pid_t writer = fork();
    CU_ASSERT_FATAL(writer >= 0);
    if (writer == 0) {  /* 16 MiB of 'x' without a newline */
        close(fd[0]);
        char x[4096];
        memset(x, 'x', sizeof x);
        for (size_t done = 0; done < total; done += sizeof x)
            if (write(fd[1], x, sizeof x) != (ssize_t)sizeof x) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    char name[64];
    snprintf(name, sizeof name, "/dev/fd/%d", fd[0]);
    snprintf(want, sizeof want, "%s:1: line longer than 65536 characters", name);
    expect("endless line", glia_config_load(ctx, name, &cfg), GLIA_ECONFIG, want, false);
    size_t rest = 0;
    char buf[1 << 16];
    for (ssize_t k; (k = read(fd[0], buf, sizeof buf)) > 0;) rest += (size_t)k;
    close(fd[0]);
    CU_ASSERT(rest + 2 * GLIA__CONFIG_LINE_MAX > total);  /* what glia read: the line and a buffer */
    int status;
    CU_ASSERT(waitpid(writer, &status, 0) == writer && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    path = glia_test_tmp("dup.ini");
    CU_ASSERT_FATAL(glia_test_write(path, "[fc]\ntype = a\n[fc]\n") == 0);
    snprintf(want, sizeof want, "%s:3: duplicate section [fc] (first at line 1)", path);
    expect("file duplicate", glia_config_load(ctx, path, &cfg), GLIA_ECONFIG, want, false);
    remove(path);
    end();
}

/* glia_error_wrap puts what the caller did before a call's error; glia_section_error_wrap places it at a key, and
 * without an error falls back to the status's text; a long message is cut, never overrun. */
static void test_error_wrap(void)
{
    struct glia_context *ctx;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_error(ctx, GLIA_EIO, "short read");
    CU_ASSERT_EQUAL(glia_error_wrap(ctx, GLIA_EIO, "loading %s", "w.bin"), GLIA_EIO);
    CU_ASSERT_STRING_EQUAL(glia_context_error(ctx), "loading w.bin: short read");
    glia_context_clear_error(ctx);
    glia_error_wrap(ctx, GLIA_EIO, "nothing before");
    CU_ASSERT_STRING_EQUAL(glia_context_error(ctx), "nothing before");
    struct glia_config *cfg;
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "m.ini", "[fc]\ntype = linear\noutputs = 3\n", &cfg) == GLIA_OK);
    glia_error(ctx, GLIA_ENOTFOUND, "no plugin linear.so");
    CU_ASSERT_EQUAL(glia_section_error_wrap(cfg->sections[0], "type", GLIA_ENOTFOUND), GLIA_ENOTFOUND);
    CU_ASSERT_STRING_EQUAL(glia_context_error(ctx), "m.ini:2: [fc] type: no plugin linear.so");
    glia_context_clear_error(ctx);
    glia_section_error_wrap(cfg->sections[0], "outputs", GLIA_ENOMEM);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "m.ini:3: [fc] outputs: "));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), glia_strerror(GLIA_ENOMEM)));
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    glia_error(ctx, GLIA_EIO, "%s", big);
    glia_error_wrap(ctx, GLIA_EIO, "%s", big);
    CU_ASSERT(strlen(glia_context_error(ctx)) > 500 && strlen(glia_context_error(ctx)) < sizeof big);
    glia_config_free(cfg);
    glia_context_free(ctx);
}

GLIA_TEST_MAIN("config", GLIA_TEST(test_bad_inputs), GLIA_TEST(test_error_wrap),
               GLIA_TEST(test_long_lines), GLIA_TEST(test_long_set), GLIA_TEST(test_sections_in_order),
               GLIA_TEST(test_empty_input), GLIA_TEST(test_where),
               GLIA_TEST(test_section_error), GLIA_TEST(test_set_override),
               GLIA_TEST(test_set_creates_section), GLIA_TEST(test_defaults),
               GLIA_TEST(test_typed_getters), GLIA_TEST(test_bool_spellings),
               GLIA_TEST(test_int_bounds), GLIA_TEST(test_lists), GLIA_TEST(test_validate_twice),
               GLIA_TEST(test_did_you_mean), GLIA_TEST(test_getter_misread),
               GLIA_TEST(test_file_load), GLIA_TEST(test_file_errors))
