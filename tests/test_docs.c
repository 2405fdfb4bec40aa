/* tests/test_docs.c — checks README.md's INI reference against the schemas the program uses: every
 * key of every core section, layer type and optimizer is documented, with its type and default;
 * and the list of ddp's per-rank keys against the start-up check's. Not a check of the prose: only
 * the reference tables and that list are read. */
#include "model_internal.h"
#include "testutil.h"

static char *readme;

static void load_readme(void)
{
    const char *src = getenv("GLIA_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/README.md", src ? src : ".");
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    readme = malloc((size_t)n + 1);
    CU_ASSERT_FATAL(readme && fread(readme, 1, (size_t)n, f) == (size_t)n);
    readme[n] = '\0';
    fclose(f);
}

/* The text from the line starting with `title` to the next line starting with "**" (a block of
 * the reference: its bold title, then its table), as [*b, *e); false when there is no such line. */
static bool block(const char *title, const char **b, const char **e)
{
    size_t tl = strlen(title);
    for (const char *p = readme; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, title, tl)) {
            *b = p;
            const char *q = strchr(p, '\n');
            while (q && strncmp(q + 1, "**", 2)) q = strchr(q + 1, '\n');
            *e = q ? q : p + strlen(p);
            return true;
        }
    return false;
}

/* Copies cell `col` (0 first) of the table row at `row` into out, trimmed; false past the row. */
static bool cell(const char *row, int col, char *out, size_t n)
{
    const char *p = row;
    if (*p != '|') return false;
    for (int c = 0; c <= col; c++) {
        const char *q = strchr(p + 1, '|');
        const char *nl = strchr(p + 1, '\n');
        if (!q || (nl && nl < q)) return false;
        if (c == col) {
            p++;
            while (p < q && *p == ' ') p++;
            size_t len = (size_t)(q - p);
            while (len && p[len - 1] == ' ') len--;
            if (len >= n) len = n - 1;
            memcpy(out, p, len);
            out[len] = '\0';
            return true;
        }
        p = q;
    }
    return false;
}

/* The place of `key` in the comma-separated list `names` ("train_images, train_labels"), or -1;
 * *n_names: how many names the list holds. */
static int name_index(const char *names, const char *key, int *n_names)
{
    size_t kl = strlen(key);
    int at = -1, i = 0;
    for (const char *p = names; *p; i++) {
        while (*p == ' ' || *p == ',') p++;
        const char *q = p;
        while (*q && *q != ',') q++;
        size_t len = (size_t)(q - p);
        while (len && p[len - 1] == ' ') len--;
        if (at < 0 && len == kl && !strncmp(p, key, kl)) at = i;
        p = q;
    }
    *n_names = i;
    return at;
}

static const char *type_name(enum glia_key_type t)
{
    static const char *names[] = {[GLIA_KEY_INT] = "int",     [GLIA_KEY_FLOAT] = "float", [GLIA_KEY_BOOL] = "bool",
                                  [GLIA_KEY_STRING] = "string", [GLIA_KEY_ENUM] = "enum", [GLIA_KEY_LIST] = "list"};
    return names[t];
}

/* A default text agrees with a key's default when it starts with it (then ends or goes on with
 * " (", ",", ";", ":" or ")": "0 (all)", "0: = size"), or says required for a required key or for
 * one whose doc says it is required in some use ("format = tokens: ...; required"). */
static bool default_agrees(const char *text, const struct glia_key *k)
{
    if (!strncmp(text, "required", 8)) return k->required || (k->doc && strstr(k->doc, "required"));
    if (k->required) return false;
    if (!k->default_value) return true;  /* optional without a default: the text explains */
    size_t dl = strlen(k->default_value);
    if (strncmp(text, k->default_value, dl)) return false;
    return strchr(" ,;:)", text[dl]) != NULL;  /* also the terminating NUL */
}

/* Item i of a cell that lists one item per name of its row ("float, int" for "gamma, step_epochs"),
 * or the whole cell when its item count differs from n_names. */
static void item(const char *cellv, int i, int n_names, char *out, size_t n)
{
    int count = 1;
    for (const char *p = cellv; *p; p++) count += *p == ',';
    const char *p = cellv;
    if (count == n_names)
        for (int j = 0; j < i; j++) p = strchr(p, ',') + 1;
    while (*p == ' ') p++;
    size_t len = count == n_names && strchr(p, ',') ? (size_t)(strchr(p, ',') - p) : strlen(p);
    if (len >= n) len = n - 1;
    memcpy(out, p, len);
    out[len] = '\0';
}

/* Every key of a core section has a row of the section's table (key | type | default | meaning)
 * naming it, with its type and a default cell that agrees. */
static int check_section(const char *section, const char *title)
{
    const struct glia_key *keys = glia_config_schema(section);
    const char *b, *e;
    if (!keys || !block(title, &b, &e)) {
        printf("\n  README.md has no block '%s' for [%s]", title, section);
        return 1;
    }
    int bad = 0;
    for (const struct glia_key *k = keys; k->name; k++) {
        bool found = false;
        for (const char *r = b; r && r < e; r = strchr(r, '\n'), r = r ? r + 1 : NULL) {
            char names[256], type[64], def[256], it[256];
            int n_names, at;
            if (!cell(r, 0, names, sizeof names) || (at = name_index(names, k->name, &n_names)) < 0) continue;
            found = true;
            if (cell(r, 1, it, sizeof it)) item(it, at, n_names, type, sizeof type);
            else type[0] = '\0';
            if (cell(r, 2, it, sizeof it)) item(it, at, n_names, def, sizeof def);
            else def[0] = '\0';
            if (strcmp(type, type_name(k->type))) {
                printf("\n  README.md [%s] %s: type '%s', the schema says %s", section, k->name, type, type_name(k->type));
                bad++;
            }
            if (!default_agrees(def, k)) {
                printf("\n  README.md [%s] %s: default '%s', the schema says %s", section, k->name, def,
                       k->required ? "required" : k->default_value);
                bad++;
            }
            break;
        }
        if (!found) {
            printf("\n  README.md [%s]: key %s is not documented", section, k->name);
            bad++;
        }
    }
    return bad;
}

static void test_core_sections(void)
{
    load_readme();
    int bad = check_section("runtime", "**[runtime]**") + check_section("data", "**[data]**") +
              check_section("train", "**[train]**") + check_section("distributed", "**[distributed]**") +
              check_section("plugins", "**[plugins]**") + check_section("graph", "**[graph]**") +
              check_section("layer", "**Every layer section**");
    CU_ASSERT_EQUAL(bad, 0);
}

/* Every key of a layer type or optimizer is written `key` in its row of the table under `title`;
 * where the row says `key` (default), the default agrees with the schema's. */
static int check_row(const char *title, const char *what, const char *name, const struct glia_key *keys)
{
    const char *b, *e;
    if (!block(title, &b, &e)) {
        printf("\n  README.md has no block '%s'", title);
        return 1;
    }
    char head[128];
    snprintf(head, sizeof head, "| %s |", name);
    const char *row = NULL;
    for (const char *r = b; r && r < e; r = strchr(r, '\n'), r = r ? r + 1 : NULL)
        if (!strncmp(r, head, strlen(head))) row = r;
    if (!row) {
        printf("\n  README.md: %s %s has no row under %s", what, name, title);
        return 1;
    }
    const char *end = strchr(row, '\n');
    size_t rl = end ? (size_t)(end - row) : strlen(row);
    int bad = 0;
    for (const struct glia_key *k = keys; k && k->name; k++) {
        char tick[96];
        snprintf(tick, sizeof tick, "`%s`", k->name);
        const char *at = NULL;
        for (const char *p = row; (p = strstr(p, tick)) && p < row + rl; p++) {
            at = p;
            break;
        }
        if (!at) {
            printf("\n  README.md: %s %s: key %s is not documented", what, name, k->name);
            bad++;
            continue;
        }
        const char *after = at + strlen(tick);
        if (strncmp(after, " (", 2)) continue;  /* no default written next to it */
        if (!default_agrees(after + 2, k)) {
            int len = (int)strcspn(after + 2, ")|\n");
            printf("\n  README.md: %s %s: key %s: default '%.*s', the schema says %s", what, name, k->name, len, after + 2,
                   k->required ? "required" : k->default_value ? k->default_value : "none");
            bad++;
        }
    }
    return bad;
}

static void test_layers_and_optimizers(void)
{
    if (!readme) load_readme();
    struct glia_context *ctx = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_plugin_load_all(ctx), GLIA_OK);
    int bad = 0, layers = 0, optimizers = 0;
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *ft = &ctx->features[i];
        if (ft->kind == GLIA__FEAT_TYPE) {
            const struct glia_layer_type *o = ft->ops;
            bad += check_row("**Layer types**", "layer", o->name, o->keys);
            layers++;
        } else if (ft->kind == GLIA__FEAT_OPTIMIZER) {
            const struct glia_optimizer_type *o = ft->ops;
            bad += check_row("**Optimizers**", "optimizer", o->name, o->keys);
            optimizers++;
        }
    }
    CU_ASSERT(layers >= 10);  /* the plugins were found (GLIA_PLUGIN_PATH) */
    CU_ASSERT(optimizers >= 4);
    CU_ASSERT_EQUAL(bad, 0);
    glia_context_free(ctx);
}

/* README's per-rank keys of a ddp job ("`[section] key`" between "Per-rank keys" and "When training
 * starts") are the keys the start-up check of the ranks' settings skips, no more, no fewer. */
static void test_ddp_per_rank_keys(void)
{
    if (!readme) load_readme();
    const char *b = strstr(readme, "Per-rank keys, which may differ");
    const char *e = b ? strstr(b, "When training starts") : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    int listed = 0, known = 0, bad = 0;
    for (const char *p = b; (p = strstr(p, "`[")) && p < e; p++) listed++;
    const char *key, *section;
    for (; (section = glia__ddp_per_rank_key(known, &key)); known++) {
        char tick[96];
        snprintf(tick, sizeof tick, "`[%s] %s`", section, key);
        const char *at = strstr(b, tick);
        if (!at || at > e) {
            printf("\n  README.md: per-rank key %s is not listed", tick);
            bad++;
        }
    }
    CU_ASSERT(known > 10);
    if (listed != known) printf("\n  README.md lists %d per-rank keys, the check skips %d", listed, known);
    CU_ASSERT_EQUAL(listed, known);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The checker itself: a key missing from a table, a wrong type and a wrong default are each found. */
static void test_checker_finds_errors(void)
{
    if (!readme) load_readme();
    char *saved = readme;
    printf("\n  (the errors of a made-up README follow: each is expected)");
    readme = "**[runtime]**\n\n| key | type | default | meaning |\n|---|---|---|---|\n"
             "| device | string | auto | d |\n| seed | float | 1 | s |\n| threads | int | 4 | t |\n"
             "**Layer types**\n\n| linear | `outputs` (required), `bias` (off) | x | y |\n";
    int n_runtime = 0;
    for (const struct glia_key *k = glia_config_schema("runtime"); k->name; k++) n_runtime++;
    /* seed's type and threads' default are wrong; every other key is missing */
    CU_ASSERT_EQUAL(check_section("runtime", "**[runtime]**"), 2 + (n_runtime - 3));
    static const struct glia_key lin[] = {
        {.name = "outputs", .type = GLIA_KEY_INT, .required = true},
        {.name = "bias", .type = GLIA_KEY_BOOL, .default_value = "on"},
        {.name = "init", .type = GLIA_KEY_STRING},
        {.name = NULL},
    };
    CU_ASSERT_EQUAL(check_row("**Layer types**", "layer", "linear", lin), 2);  /* bias's default, init missing */
    CU_ASSERT_EQUAL(check_row("**Layer types**", "layer", "conv2d", lin), 1);  /* no row */
    readme = saved;
}

/* A command's synopsis on line p: from "glia " to the first run of two spaces or the line's end,
 * into out; false when the line holds no "glia ". */
static bool synopsis(const char *p, char *out, size_t n)
{
    const char *end = strchr(p, '\n');
    const char *g = strstr(p, "glia ");
    if (!g || (end && g > end)) return false;
    const char *e = g;
    while (*e && *e != '\n' && strncmp(e, "  ", 2)) e++;
    size_t len = (size_t)(e - g);
    if (len >= n) len = n - 1;
    memcpy(out, g, len);
    out[len] = '\0';
    return true;
}

/* Every command of the README's command-line block has the synopsis `glia --help` prints for it. */
static void test_command_lines(void)
{
    if (!readme) load_readme();
    const char *bin = getenv("GLIA_BIN");
    char cmd[1100], usage[8192];
    snprintf(cmd, sizeof cmd, "%s --help", bin ? bin : "tools/glia");
    FILE *p = popen(cmd, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    size_t k = fread(usage, 1, sizeof usage - 1, p);
    usage[k] = '\0';
    CU_ASSERT_EQUAL(pclose(p), 0);
    const char *b = strstr(readme, "## Command line\n\n```\n"), *e = b ? strstr(b + 20, "```") : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    int n = 0;
    for (const char *r = b + 20; r && r < e; r = strchr(r, '\n'), r = r ? r + 1 : NULL) {
        char doc[512], prog[512] = "", word[64];
        if (strncmp(r, "glia ", 5) || !synopsis(r, doc, sizeof doc) || sscanf(doc, "glia %63s", word) != 1) continue;
        n++;
        for (const char *u = usage; u && *u; u = strchr(u, '\n'), u = u ? u + 1 : NULL) {
            char mine[512], w[64];
            if (synopsis(u, mine, sizeof mine) && sscanf(mine, "glia %63s", w) == 1 && !strcmp(w, word)) {
                snprintf(prog, sizeof prog, "%s", mine);
                break;
            }
        }
        if (strcmp(doc, prog)) printf("\n  README.md: '%s'\n  glia --help: '%s'", doc, prog);
        CU_ASSERT_STRING_EQUAL(doc, prog);
    }
    CU_ASSERT(n >= 7);  /* the block was found and read */
}

int main(void)
{
    static const struct glia_test tests[] = {
        GLIA_TEST(test_core_sections),
        GLIA_TEST(test_layers_and_optimizers),
        GLIA_TEST(test_checker_finds_errors),
        GLIA_TEST(test_command_lines),
        GLIA_TEST(test_ddp_per_rank_keys),
    };
    int rc = glia_test_run("docs", tests, (int)(sizeof tests / sizeof tests[0]));
    free(readme);
    return rc;
}
