/* tests/test_docs.c — holds the documentation to the code: docs/model.md's INI reference against the
 * schemas the program uses (every key of every core section, layer type and optimizer, with its type
 * and default), docs/distributed.md's per-rank keys against ddp's start-up check, the command lines
 * of README.md and of the manual page docs/glia.1 against `glia --help` (and every option of it in
 * the manual), the links between README.md and the pages of docs/, and Makefile.am's install rules
 * against docs/. Not a check of the prose: only those tables, lists, lines and links are read. */
#include <ctype.h>
#include <dirent.h>
#include "parts.h"
#include "testutil.h"

/* The documents read (owned, loaded once); `doc` is the one the reference checks read, and
 * doc_name its name in their messages. */
static char *model_md, *distributed_md, *readme, *man;
static const char *doc, *doc_name = "docs/model.md";

/* The text of file `rel` under $GLIA_SRCDIR (owned), or NULL when it cannot be read. */
static char *load(const char *rel)
{
    const char *src = getenv("GLIA_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("\n  cannot read %s", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) == (size_t)n) s[n] = '\0';
    else free(s), s = NULL;
    fclose(f);
    return s;
}

static void load_docs(void)
{
    if (!model_md) model_md = load("docs/model.md");
    if (!distributed_md) distributed_md = load("docs/distributed.md");
    if (!readme) readme = load("README.md");
    if (!man) man = load("docs/glia.1");
    CU_ASSERT_FATAL(model_md && distributed_md && readme && man);
    doc = model_md;
}

/* Whether line p is a Markdown heading ("#" to "######", then a blank). */
static bool heading(const char *p)
{
    size_t n = strspn(p, "#");
    return n >= 1 && n <= 6 && p[n] == ' ';
}

/* The text from the line starting with `title` (a heading, "### [runtime]") to the next heading or
 * line starting with "**" (the paragraph after a table), as [*b, *e); false when there is no such
 * line. */
static bool block(const char *title, const char **b, const char **e)
{
    size_t tl = strlen(title);
    for (const char *p = doc; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, title, tl) && (p[tl] == '\n' || !p[tl])) {
            *b = p;
            const char *q = strchr(p, '\n');
            while (q && strncmp(q + 1, "**", 2) && !heading(q + 1)) q = strchr(q + 1, '\n');
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
        printf("\n  %s has no block '%s' for [%s]", doc_name, title, section);
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
                printf("\n  %s [%s] %s: type '%s', the schema says %s", doc_name, section, k->name, type, type_name(k->type));
                bad++;
            }
            if (!default_agrees(def, k)) {
                printf("\n  %s [%s] %s: default '%s', the schema says %s", doc_name, section, k->name, def,
                       k->required ? "required" : k->default_value);
                bad++;
            }
            break;
        }
        if (!found) {
            printf("\n  %s [%s]: key %s is not documented", doc_name, section, k->name);
            bad++;
        }
    }
    return bad;
}

static void test_core_sections(void)
{
    load_docs();
    int bad = check_section("runtime", "### [runtime]") + check_section("data", "### [data]") +
              check_section("train", "### [train]") + check_section("distributed", "### [distributed]") +
              check_section("plugins", "### [plugins]") + check_section("graph", "### [graph]") +
              check_section("layer", "### Every layer section");
    CU_ASSERT_EQUAL(bad, 0);
}

/* Every key of a layer type or optimizer is written `key` in its row of the table under `title`;
 * where the row says `key` (default), the default agrees with the schema's. */
static int check_row(const char *title, const char *what, const char *name, const struct glia_key *keys)
{
    const char *b, *e;
    if (!block(title, &b, &e)) {
        printf("\n  %s has no block '%s'", doc_name, title);
        return 1;
    }
    char head[128];
    snprintf(head, sizeof head, "| %s |", name);
    const char *row = NULL;
    for (const char *r = b; r && r < e; r = strchr(r, '\n'), r = r ? r + 1 : NULL)
        if (!strncmp(r, head, strlen(head))) row = r;
    if (!row) {
        printf("\n  %s: %s %s has no row under %s", doc_name, what, name, title);
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
            printf("\n  %s: %s %s: key %s is not documented", doc_name, what, name, k->name);
            bad++;
            continue;
        }
        const char *after = at + strlen(tick);
        if (strncmp(after, " (", 2)) continue;  /* no default written next to it */
        if (!default_agrees(after + 2, k)) {
            int len = (int)strcspn(after + 2, ")|\n");
            printf("\n  %s: %s %s: key %s: default '%.*s', the schema says %s", doc_name, what, name, k->name, len, after + 2,
                   k->required ? "required" : k->default_value ? k->default_value : "none");
            bad++;
        }
    }
    return bad;
}

static void test_layers_and_optimizers(void)
{
    load_docs();
    struct glia_context *ctx = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_plugin_load_all(ctx), GLIA_OK);
    int bad = 0, layers = 0, optimizers = 0;
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *ft = &ctx->features[i];
        if (ft->kind == GLIA__FEAT_TYPE) {
            const struct glia_layer_type *o = ft->ops;
            bad += check_row("### Layer types", "layer", o->name, o->keys);
            layers++;
        } else if (ft->kind == GLIA__FEAT_OPTIMIZER) {
            const struct glia_optimizer_type *o = ft->ops;
            bad += check_row("### Optimizers", "optimizer", o->name, o->keys);
            optimizers++;
        }
    }
    CU_ASSERT(layers >= 10);  /* the plugins were found (GLIA_PLUGIN_PATH) */
    CU_ASSERT(optimizers >= 4);
    CU_ASSERT_EQUAL(bad, 0);
    glia_context_free(ctx);
}

/* docs/distributed.md's per-rank keys of a ddp job ("`[section] key`" between "Per-rank keys" and
 * "When training starts") are the keys the start-up check of the ranks' settings skips, no more,
 * no fewer. */
static void test_ddp_per_rank_keys(void)
{
    load_docs();
    const char *b = strstr(distributed_md, "Per-rank keys, which may differ");
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
            printf("\n  docs/distributed.md: per-rank key %s is not listed", tick);
            bad++;
        }
    }
    CU_ASSERT(known > 10);
    if (listed != known) printf("\n  docs/distributed.md lists %d per-rank keys, the check skips %d", listed, known);
    CU_ASSERT_EQUAL(listed, known);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The reference checker itself: a key missing from a table, a wrong type and a wrong default are
 * each found. */
static void test_checker_finds_errors(void)
{
    load_docs();
    printf("\n  (the errors of a made-up reference follow: each is expected)");
    doc = "### [runtime]\n\n| key | type | default | meaning |\n|---|---|---|---|\n"
          "| device | string | auto | d |\n| seed | float | 1 | s |\n| threads | int | 4 | t |\n"
          "### Layer types\n\n| linear | `outputs` (required), `bias` (off) | x | y |\n";
    doc_name = "made-up";
    int n_runtime = 0;
    for (const struct glia_key *k = glia_config_schema("runtime"); k->name; k++) n_runtime++;
    /* seed's type and threads' default are wrong; every other key is missing */
    CU_ASSERT_EQUAL(check_section("runtime", "### [runtime]"), 2 + (n_runtime - 3));
    static const struct glia_key lin[] = {
        {.name = "outputs", .type = GLIA_KEY_INT, .required = true},
        {.name = "bias", .type = GLIA_KEY_BOOL, .default_value = "on"},
        {.name = "init", .type = GLIA_KEY_STRING},
        {.name = NULL},
    };
    CU_ASSERT_EQUAL(check_row("### Layer types", "layer", "linear", lin), 2);  /* bias's default, init missing */
    CU_ASSERT_EQUAL(check_row("### Layer types", "layer", "conv2d", lin), 1);  /* no row */
    CU_ASSERT_EQUAL(check_section("data", "### [data]"), 1);                   /* no block */
    doc = model_md;
    doc_name = "docs/model.md";
}

/* ---- command lines: README.md and the manual page against `glia --help` ---- */

static const char *next_line(const char *p)
{
    const char *q = strchr(p, '\n');
    return q ? q + 1 : NULL;
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

enum { MAX_SYN = 32, SYN_LEN = 512 };

/* The synopses of a usage text: each as synopsis() reads it, joined by one blank with the indented
 * lines after it that go on with more options ("    [--bias on|off] ..."). Returns how many. */
static int synopses(const char *usage, char syn[MAX_SYN][SYN_LEN])
{
    int n = 0;
    for (const char *u = usage; u && *u && n < MAX_SYN; u = next_line(u)) {
        if (!synopsis(u, syn[n], SYN_LEN)) continue;
        for (const char *c = next_line(u); c && *c == ' '; c = next_line(c)) {
            const char *s = c + strspn(c, " ");
            if (*s != '[') break;
            size_t have = strlen(syn[n]);
            snprintf(syn[n] + have, SYN_LEN - have, " %.*s", (int)strcspn(s, "\n"), s);
            u = c;
        }
        n++;
    }
    return n;
}

/* The synopses `glia --help` prints (see synopses). */
static int help_synopses(char syn[MAX_SYN][SYN_LEN])
{
    const char *bin = getenv("GLIA_BIN");
    char cmd[1100], usage[8192];
    snprintf(cmd, sizeof cmd, "%s --help", bin ? bin : "tools/glia");
    FILE *p = popen(cmd, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    size_t k = fread(usage, 1, sizeof usage - 1, p);
    usage[k] = '\0';
    CU_ASSERT_EQUAL(pclose(p), 0);
    int n = synopses(usage, syn);
    CU_ASSERT(n >= 8);  /* the usage was read */
    return n;
}

/* The command word of a synopsis ("train", "--version"; for bench with its benchmark: "bench conv") into w. */
static void command_word(const char *syn, char w[64])
{
    char a[32], b[32];
    int n = sscanf(syn, "glia %31s %31s", a, b);
    if (n < 1) w[0] = '\0';
    else if (n == 2 && !strcmp(a, "bench")) snprintf(w, 64, "%s %s", a, b);
    else snprintf(w, 64, "%s", a);
}

/* Every command of README.md's command-line block has the synopsis `glia --help` prints for it. */
static void test_command_lines(void)
{
    load_docs();
    char syn[MAX_SYN][SYN_LEN];
    int n_syn = help_synopses(syn);
    const char *b = strstr(readme, "## Command line\n\n```\n"), *e = b ? strstr(b + 20, "```") : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    int n = 0;
    for (const char *r = b + 20; r && r < e; r = next_line(r)) {
        char doc_line[SYN_LEN], word[64], w[64];
        const char *prog = "";
        if (strncmp(r, "glia ", 5) || !synopsis(r, doc_line, sizeof doc_line)) continue;
        command_word(doc_line, word);
        n++;
        for (int i = 0; i < n_syn; i++) {
            command_word(syn[i], w);
            if (!strcmp(w, word)) prog = syn[i];
        }
        if (strcmp(doc_line, prog)) printf("\n  README.md: '%s'\n  glia --help: '%s'", doc_line, prog);
        CU_ASSERT_STRING_EQUAL(doc_line, prog);
    }
    CU_ASSERT_EQUAL(n, n_syn);  /* every command of glia --help is in the block */
}

/* Line p of a roff text as it reads, into out: font escapes (\fB, \fI, \fR, \fP) dropped, \- as -,
 * \& and \| as nothing, \e as a backslash; a request's leading ".XX " and the quotes of its argument
 * dropped too. */
static void roff_text(const char *p, char *out, size_t n)
{
    size_t k = 0;
    if (*p == '.') p += strcspn(p, " \n"), p += *p == ' ';
    for (; *p && *p != '\n' && k + 1 < n; p++) {
        if (*p == '"') continue;
        if (*p != '\\') {
            out[k++] = *p;
            continue;
        }
        char c = p[1];
        if (c == 'f' && p[2]) p += 2;
        else if (c == '-') out[k++] = '-', p++;
        else if (c == 'e') out[k++] = '\\', p++;
        else if (c == '&' || c == '|') p++;
        else out[k++] = *p;
    }
    out[k] = '\0';
}

/* The lines of section `name` of a manual page (after ".SH name" up to the next ".SH"), as [*b, *e). */
static bool man_section(const char *m, const char *name, const char **b, const char **e)
{
    char head[64];
    snprintf(head, sizeof head, ".SH %s\n", name);
    const char *h = strstr(m, head);
    if (!h) return false;
    *b = h + strlen(head);
    const char *q = strstr(*b, "\n.SH ");
    *e = q ? q + 1 : *b + strlen(*b);
    return true;
}

/* Whether option `opt` is documented in the COMMANDS lines [b, e): as the start of a .TP tag
 * ("--steps N", "-o OUT.svg, --output OUT.svg") or in a .SS title ("glia --version"). */
static bool option_documented(const char *b, const char *e, const char *opt)
{
    size_t ol = strlen(opt);
    bool tag = false;
    for (const char *p = b; p && p < e; p = next_line(p)) {
        char text[SYN_LEN];
        roff_text(p, text, sizeof text);
        if (tag && !strncmp(text, opt, ol) && strchr(" ,|", text[ol])) return true;
        if (!strncmp(p, ".SS ", 4)) {
            const char *at = strstr(text, opt);
            if (at && at > text && at[-1] == ' ' && strchr(" ,|", at[ol])) return true;
        }
        tag = !strncmp(p, ".TP", 3) && (p[3] == '\n' || p[3] == ' ');
    }
    return false;
}

/* Checks manual page m against the synopses of glia --help: its SYNOPSIS holds exactly those lines;
 * COMMANDS has a .SS for each command and documents each option of each synopsis. Returns the
 * number of problems, each printed. */
static int check_man(const char *m, char syn[MAX_SYN][SYN_LEN], int n_syn)
{
    const char *b, *e, *cb, *ce;
    if (!man_section(m, "SYNOPSIS", &b, &e) || !man_section(m, "COMMANDS", &cb, &ce)) {
        printf("\n  the manual page has no SYNOPSIS or no COMMANDS");
        return 1;
    }
    int bad = 0, lines = 0;
    for (const char *p = b; p && p < e; p = next_line(p)) {
        char text[SYN_LEN];
        if (*p == '.' || *p == '\n') continue;
        roff_text(p, text, sizeof text);
        lines++;
        bool found = false;
        for (int i = 0; i < n_syn && !found; i++) found = !strcmp(text, syn[i]);
        if (!found) printf("\n  glia.1 SYNOPSIS: '%s' is not a synopsis of glia --help", text), bad++;
    }
    if (lines != n_syn) printf("\n  glia.1 SYNOPSIS: %d lines, glia --help: %d synopses", lines, n_syn), bad++;
    for (int i = 0; i < n_syn; i++) {
        char word[64], title[128];
        command_word(syn[i], word);
        snprintf(title, sizeof title, "glia %s", word);
        bool ss = false;
        for (const char *p = cb; p && p < ce && !ss; p = next_line(p)) {
            char text[SYN_LEN];
            roff_text(p, text, sizeof text);
            ss = !strncmp(p, ".SS ", 4) && !strncmp(text, title, strlen(title)) && strchr(" ", text[strlen(title)]);
        }
        if (!ss) printf("\n  glia.1 COMMANDS: no .SS for '%s'", title), bad++;
        const char *s = syn[i];
        for (size_t k = 0; s[k]; k++) {
            if (s[k] != '-' || (k && s[k - 1] != ' ' && s[k - 1] != '[')) continue;
            char opt[64];
            size_t len = strcspn(s + k, " ]|");
            snprintf(opt, sizeof opt, "%.*s", (int)len, s + k);
            if (!option_documented(cb, ce, opt)) printf("\n  glia.1 COMMANDS: %s of '%s' is not documented", opt, title), bad++;
            k += len - 1;
        }
    }
    return bad;
}

/* The manual page's synopsis is glia --help's, and it documents every command and option. */
static void test_man_page(void)
{
    load_docs();
    char syn[MAX_SYN][SYN_LEN];
    int n_syn = help_synopses(syn);
    CU_ASSERT_EQUAL(check_man(man, syn, n_syn), 0);
}

/* check_man finds a synopsis that differs, one missing, a command without its .SS and an option
 * without its tag. */
static void test_man_checker_finds_errors(void)
{
    printf("\n  (the errors of a made-up manual page follow: each is expected)");
    char syn[MAX_SYN][SYN_LEN] = {"glia train MODEL.ini [--set SECTION.KEY=VALUE]... [--quiet]",
                                  "glia plot METRICS.jsonl [-o OUT.svg]", "glia --version"};
    const char *good = ".SH SYNOPSIS\n\\fBglia train\\fR \\fIMODEL.ini\\fR [\\fB\\-\\-set\\fR \\fISECTION.KEY=VALUE\\fR]... "
                       "[\\fB\\-\\-quiet\\fR]\n.br\n\\fBglia plot\\fR \\fIMETRICS.jsonl\\fR [\\fB\\-o\\fR \\fIOUT.svg\\fR]\n"
                       ".br\n\\fBglia \\-\\-version\\fR\n.SH COMMANDS\n.SS \"glia train \\fIMODEL.ini\\fP\"\nTrains.\n.TP\n"
                       "\\fB\\-\\-set\\fR \\fISECTION.KEY=VALUE\\fR\nSets.\n.TP\n\\fB\\-\\-quiet\\fR, \\fB\\-q\\fR\nQuiet.\n"
                       ".SS \"glia plot \\fIMETRICS.jsonl\\fP\"\n.TP\n\\fB\\-o\\fR \\fIOUT.svg\\fR\nOut.\n"
                       ".SS \"glia \\-\\-version\"\nVersion.\n.SH ENVIRONMENT\n.TP\n\\fB\\-\\-quiet\\fR\n";
    CU_ASSERT_EQUAL(check_man(good, syn, 3), 0);
    /* train's synopsis without --quiet (differs, and --version's line is missing: 2 lines for 3);
     * plot's .SS gone; --quiet's tag gone from COMMANDS (ENVIRONMENT's does not count) */
    const char *bad = ".SH SYNOPSIS\nglia train MODEL.ini [--set SECTION.KEY=VALUE]...\n.br\n"
                      "glia plot METRICS.jsonl [-o OUT.svg]\n.SH COMMANDS\n.SS \"glia train\"\n.TP\n"
                      "\\fB\\-\\-set\\fR \\fISECTION.KEY=VALUE\\fR\n.TP\n\\fB\\-o\\fR \\fIOUT.svg\\fR\n"
                      ".SS \"glia \\-\\-version\"\n.SH ENVIRONMENT\n.TP\n\\fB\\-\\-quiet\\fR\n";
    CU_ASSERT_EQUAL(check_man(bad, syn, 3), 4);
}

/* ---- links between README.md and the pages of docs/ ---- */

/* Whether line p opens or closes a fenced code block. */
static bool fence(const char *p)
{
    return !strncmp(p, "```", 3);
}

/* GitHub's anchor of the heading text [h, h + len): lower case, blanks as '-', other ASCII
 * punctuation than '-' and '_' dropped (other bytes kept), into out. */
static void anchor_of(const char *h, size_t len, char *out, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < n; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c == ' ') out[k++] = '-';
        else if (c >= 0x80 || c == '-' || c == '_' || (c < 0x80 && isalnum(c))) out[k++] = (char)tolower(c);
    }
    out[k] = '\0';
}

/* Whether Markdown text md has a heading (outside fenced code) whose anchor is a. */
static bool has_anchor(const char *md, const char *a)
{
    bool code = false;
    for (const char *p = md; p && *p; p = next_line(p)) {
        if (fence(p)) code = !code;
        if (code || !heading(p)) continue;
        const char *h = p + strspn(p, "#") + 1;
        char got[256];
        anchor_of(h, strcspn(h, "\n"), got, sizeof got);
        if (!strcmp(got, a)) return true;
    }
    return false;
}

/* Checks every relative link "](target)" outside fenced code of Markdown file rel (under
 * $GLIA_SRCDIR; its text md): the target file exists, relative to rel's folder, and an anchor
 * ("#name", "file.md#name") names a heading of that Markdown file. Returns the number of broken
 * links, each printed; *links counts the links checked. */
static int check_links(const char *rel, const char *md, int *links)
{
    const char *src = getenv("GLIA_SRCDIR");
    const char *slash = strrchr(rel, '/');
    int dir_len = slash ? (int)(slash - rel + 1) : 0, bad = 0;
    bool code = false;
    for (const char *p = md; p && *p; p = next_line(p)) {
        if (fence(p)) code = !code;
        if (code) continue;
        const char *end = p + strcspn(p, "\n");
        for (const char *l = strstr(p, "]("); l && l < end; l = strstr(l + 2, "](")) {
            char target[512], file[512], anchor[256] = "";
            snprintf(target, sizeof target, "%.*s", (int)strcspn(l + 2, ")\n"), l + 2);
            if (strstr(target, "://") || !strncmp(target, "mailto:", 7)) continue;
            char *hash = strchr(target, '#');
            if (hash) snprintf(anchor, sizeof anchor, "%s", hash + 1), *hash = '\0';
            (*links)++;
            const char *text = md;
            char *other = NULL;
            if (*target) {
                char path[4096];
                struct stat st;
                if (snprintf(file, sizeof file, "%.*s%s", dir_len, rel, target) >= (int)sizeof file ||
                    snprintf(path, sizeof path, "%s/%s", src ? src : ".", file) >= (int)sizeof path || stat(path, &st)) {
                    printf("\n  %s: link to %s: no such file", rel, target);
                    bad++;
                    continue;
                }
                size_t fl = strlen(file);
                if (!*anchor || fl < 3 || strcmp(file + fl - 3, ".md")) continue;
                text = other = load(file);
            }
            if (*anchor && (!text || !has_anchor(text, anchor))) {
                printf("\n  %s: link to %s#%s: no such heading", rel, target, anchor);
                bad++;
            }
            free(other);
        }
    }
    return bad;
}

/* Every link of README.md and of the pages of docs/ reaches its file and heading. */
static void test_links(void)
{
    load_docs();
    const char *src = getenv("GLIA_SRCDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/docs", src ? src : ".");
    int links = 0, pages = 0, bad = check_links("README.md", readme, &links);
    DIR *d = opendir(dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    for (struct dirent *de; (de = readdir(d));) {
        size_t nl = strlen(de->d_name);
        if (nl < 4 || strcmp(de->d_name + nl - 3, ".md")) continue;
        char rel[512];
        snprintf(rel, sizeof rel, "docs/%s", de->d_name);
        char *md = load(rel);
        CU_ASSERT_PTR_NOT_NULL(md);
        if (md) bad += check_links(rel, md, &links);
        free(md);
        pages++;
    }
    closedir(d);
    CU_ASSERT(pages >= 7);
    CU_ASSERT(links >= 20);  /* the pages were read */
    CU_ASSERT_EQUAL(bad, 0);
}

/* check_links finds a missing file, a missing heading in the page itself and one in another page,
 * and passes links that reach theirs. */
static void test_link_checker_finds_errors(void)
{
    printf("\n  (the errors of a made-up page follow: each is expected)");
    const char *md = "# A page\n\n## The `[runtime]` keys\n\n[ok](#a-page), [ok](#the-runtime-keys), [ok](model.md), "
                     "[ok](../README.md), [ok](model.md#ini-reference), [ok](https://example.org/#x)\n"
                     "[bad](#no-such), [bad](no-such.md), [bad](model.md#no-such)\n```\n[code](nothing.md)\n```\n";
    int links = 0;
    CU_ASSERT_EQUAL(check_links("docs/made-up.md", md, &links), 3);
    CU_ASSERT_EQUAL(links, 8);
}

/* ---- installation ---- */

/* How many of the files of docs/ (under $GLIA_SRCDIR) Makefile.am text am does not name as
 * "docs/NAME"; each printed. */
static int docs_not_installed(const char *am)
{
    const char *src = getenv("GLIA_SRCDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/docs", src ? src : ".");
    DIR *d = opendir(dir);
    if (!d) return 1;
    int bad = 0, n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char name[512];
        snprintf(name, sizeof name, "docs/%s", de->d_name);
        size_t nl = strlen(name);
        bool listed = false;
        for (const char *p = am; (p = strstr(p, name)) && !listed; p += nl)
            listed = (p == am || isspace((unsigned char)p[-1])) && (!p[nl] || isspace((unsigned char)p[nl]) || p[nl] == '\\');
        if (!listed) printf("\n  Makefile.am does not install %s", name), bad++;
        n++;
    }
    closedir(d);
    return n ? bad : 1;
}

/* Makefile.am installs (and distributes) every file of docs/: a page added there is not lost to
 * `make install` or to a release tarball. */
static void test_docs_installed(void)
{
    char *am = load("Makefile.am");
    CU_ASSERT_PTR_NOT_NULL_FATAL(am);
    CU_ASSERT(strstr(am, "dist_doc_DATA") != NULL);
    CU_ASSERT_EQUAL(docs_not_installed(am), 0);
    printf("\n  (the errors of a made-up Makefile.am follow: each is expected)");
    CU_ASSERT(docs_not_installed("dist_doc_DATA = README.md docs/model.mdx\n") >= 7);
    free(am);
}

int main(void)
{
    static const struct glia_test tests[] = {
        GLIA_TEST(test_core_sections),
        GLIA_TEST(test_layers_and_optimizers),
        GLIA_TEST(test_checker_finds_errors),
        GLIA_TEST(test_command_lines),
        GLIA_TEST(test_man_page),
        GLIA_TEST(test_man_checker_finds_errors),
        GLIA_TEST(test_ddp_per_rank_keys),
        GLIA_TEST(test_links),
        GLIA_TEST(test_link_checker_finds_errors),
        GLIA_TEST(test_docs_installed),
    };
    int rc = glia_test_run("docs", tests, (int)(sizeof tests / sizeof tests[0]));
    free(model_md);
    free(distributed_md);
    free(readme);
    free(man);
    return rc;
}
