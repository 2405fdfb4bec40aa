/* core/data_folder.c — [data] format = folder: an ImageFolder tree (one subfolder per class, sorted names), PNG
 * (libpng) and JPEG (libjpeg) files checked when the model is built and decoded per sample in the loader's workers,
 * cropped (training: torchvision's RandomResizedCrop; evaluation: Resize to size / 0.875 then CenterCrop), resized
 * bilinearly to image_size, flipped and normalized. Not other image formats and not a cache of decoded images. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include "parts.h"
#include "build-config.h"
#ifdef GLIA_HAVE_PNG
#include <png.h>
#endif
#ifdef GLIA_HAVE_JPEG
#include <jpeglib.h>
#endif

enum kind { NOT_IMAGE, PNG_FILE, JPEG_FILE };

static enum kind kind_of(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot || name[0] == '.') return NOT_IMAGE;
    if (!strcasecmp(dot, ".png")) return PNG_FILE;
    if (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg")) return JPEG_FILE;
    return NOT_IMAGE;
}

/* ---- decoding: RGB bytes (h, w, 3) ---- */

#ifdef GLIA_HAVE_JPEG
struct jerr {
    struct jpeg_error_mgr mgr;
    jmp_buf back;
    char msg[JMSG_LENGTH_MAX];
};

static void jpeg_fail(j_common_ptr c)
{
    struct jerr *e = (struct jerr *)c->err;
    e->mgr.format_message(c, e->msg);
    longjmp(e->back, 1);
}

static void jpeg_quiet(j_common_ptr c, int level)
{
    (void)c, (void)level;  /* warnings (a stream cut short) are counted in num_warnings, not printed */
}

/* header_only: the size alone. A stream that ends early or is corrupt is an error (libjpeg only warns). */
static bool jpeg_read(const char *path, bool header_only, uint8_t **rgb, int *w, int *h, char *why, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(why, n, "cannot open: %s", strerror(errno)), false;
    struct jpeg_decompress_struct c;
    struct jerr e;
    volatile bool ok = false;
    uint8_t *volatile out = NULL;
    c.err = jpeg_std_error(&e.mgr);
    e.mgr.error_exit = jpeg_fail;
    e.mgr.emit_message = jpeg_quiet;
    if (setjmp(e.back)) {
        snprintf(why, n, "not a JPEG glia can read: %s", e.msg);
        goto done;
    }
    jpeg_create_decompress(&c);
    jpeg_stdio_src(&c, f);
    jpeg_read_header(&c, TRUE);
    *w = (int)c.image_width;
    *h = (int)c.image_height;
    if (header_only) {
        ok = true;
        goto done;
    }
    c.out_color_space = JCS_RGB;
    jpeg_start_decompress(&c);
    out = malloc((size_t)c.output_width * c.output_height * 3);
    if (!out) {
        snprintf(why, n, "out of memory");
        goto done;
    }
    while (c.output_scanline < c.output_height) {
        JSAMPROW row = out + (size_t)c.output_scanline * c.output_width * 3;
        jpeg_read_scanlines(&c, &row, 1);
    }
    if (e.mgr.num_warnings) {
        snprintf(why, n, "its JPEG data is cut short or corrupt");
        goto done;
    }
    jpeg_finish_decompress(&c);
    ok = true;
done:
    jpeg_destroy_decompress(&c);
    fclose(f);
    if (ok && !header_only) *rgb = out;
    else free(out);
    return ok;
}
#endif

#ifdef GLIA_HAVE_PNG
static bool png_read(const char *path, bool header_only, uint8_t **rgb, int *w, int *h, char *why, size_t n)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&im, path)) {
        snprintf(why, n, "not a PNG glia can read: %s", im.message);
        return false;
    }
    *w = (int)im.width;
    *h = (int)im.height;
    if (header_only) {
        png_image_free(&im);
        return true;
    }
    im.format = PNG_FORMAT_RGB;  /* gray, palette and alpha turned into RGB (alpha composed on black) */
    uint8_t *out = malloc(PNG_IMAGE_SIZE(im));
    if (!out) {
        png_image_free(&im);
        return snprintf(why, n, "out of memory"), false;
    }
    if (!png_image_finish_read(&im, NULL, out, 0, NULL)) {
        snprintf(why, n, "its PNG data is corrupt: %s", im.message);
        free(out);
        return false;
    }
    *rgb = out;
    return true;
}
#endif

/* The image at path, or only its size: false with why when it cannot be read. */
static bool image_read(const char *path, bool header_only, uint8_t **rgb, int *w, int *h, char *why, size_t n)
{
    (void)header_only, (void)rgb, (void)w, (void)h;  /* unread in a build without libpng and libjpeg */
    switch (kind_of(path)) {
#ifdef GLIA_HAVE_PNG
    case PNG_FILE: return png_read(path, header_only, rgb, w, h, why, n);
#endif
#ifdef GLIA_HAVE_JPEG
    case JPEG_FILE: return jpeg_read(path, header_only, rgb, w, h, why, n);
#endif
    default:
        snprintf(why, n, "a %s file, and this glia was built without lib%s", kind_of(path) == PNG_FILE ? "PNG" : "JPEG",
                 kind_of(path) == PNG_FILE ? "png" : "jpeg");
        return false;
    }
}

/* ---- scanning the tree ---- */

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The entries of dir that are folders (want_dirs) or image files, sorted; *n of them (owned, free each). */
static glia_status list_dir(struct glia_context *ctx, const char *dir, bool want_dirs, char ***out, int *n)
{
    DIR *d = opendir(dir);
    if (!d) return glia_error(ctx, GLIA_EIO, "cannot open the folder %s: %s", dir, strerror(errno));
    char **v = NULL;
    int k = 0, cap = 0;
    glia_status st = GLIA_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%.3000s/%.900s", dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb)) continue;
        if (want_dirs ? !S_ISDIR(sb.st_mode) : !S_ISREG(sb.st_mode) || kind_of(e->d_name) == NOT_IMAGE) continue;
        if (k == cap) {
            cap = cap ? 2 * cap : 64;
            char **g = realloc(v, sizeof *v * (size_t)cap);
            if (!g) {
                st = GLIA_ENOMEM;
                break;
            }
            v = g;
        }
        if (!(v[k] = glia__strdup(e->d_name))) st = GLIA_ENOMEM;
        else k++;
    }
    closedir(d);
    if (k > 1) qsort(v, (size_t)k, sizeof *v, by_name);
    *out = v;
    *n = k;
    return st;
}

static void free_list(char **v, int n)
{
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

glia_status glia__folder_load(struct glia_context *ctx, const char *dir, int size, const struct glia__dataset *classes_of,
                              int64_t keep, struct glia__dataset *out)
{
    memset(out, 0, sizeof *out);
    char **cls = NULL;
    int nc = 0;
    glia_status st = list_dir(ctx, dir, true, &cls, &nc);
    if (!st && nc == 0)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: no class folders in it (an image folder holds one folder of images per "
                        "class)", dir);
    out->folder = true;
    out->channels = 3;
    out->rows = out->cols = size;
    const struct glia__dataset *names = classes_of ? classes_of : out;
    if (!st && !classes_of) {  /* the training set names the classes, in sorted order */
        out->class_names = cls;
        out->n_classes = nc;
        cls = NULL;
    }
    int64_t cap = 0;
    for (int c = 0; c < (classes_of ? nc : out->n_classes) && !st; c++) {
        const char *name = classes_of ? cls[c] : out->class_names[c];
        int label = c;
        if (classes_of) {  /* the test set: a class the training set has */
            label = -1;
            for (int k = 0; k < names->n_classes; k++)
                if (!strcmp(names->class_names[k], name)) label = k;
            if (label < 0) {
                st = glia_error(ctx, GLIA_EFORMAT, "%s/%s: a class the training folder does not have", dir, name);
                break;
            }
        }
        char sub[4096];
        snprintf(sub, sizeof sub, "%.2000s/%.1000s", dir, name);
        char **files = NULL;
        int nf = 0;
        if ((st = list_dir(ctx, sub, false, &files, &nf))) break;
        if (nf == 0) st = glia_error(ctx, GLIA_EFORMAT, "%s: no .png, .jpg or .jpeg images in it", sub);
        for (int i = 0; i < nf && !st; i++) {
            char path[4096], why[300];
            snprintf(path, sizeof path, "%.3000s/%.1000s", sub, files[i]);
            int w, h;
            if (!image_read(path, true, NULL, &w, &h, why, sizeof why))
                st = glia_error(ctx, GLIA_EFORMAT, "%s: %s", path, why);
            else if (w < 1 || h < 1 || w > 65536 || h > 65536)
                st = glia_error(ctx, GLIA_EFORMAT, "%s: an image of %dx%d", path, w, h);
            if (st) break;
            if (out->n == cap) {
                cap = cap ? 2 * cap : 256;
                char **fp = realloc(out->files, sizeof *fp * (size_t)cap);
                int32_t *lb = fp ? realloc(out->labels, sizeof *lb * (size_t)cap) : NULL;
                if (fp) out->files = fp;
                if (lb) out->labels = lb;
                if (!fp || !lb) {
                    st = GLIA_ENOMEM;
                    break;
                }
            }
            if (!(out->files[out->n] = glia__strdup(path))) {
                st = GLIA_ENOMEM;
                break;
            }
            out->labels[out->n++] = label;
        }
        free_list(files, nf);
    }
    if (classes_of) free_list(cls, nc);
    out->n_files = out->n;
    if (!st && keep > 0 && keep < out->n) out->n = keep;  /* the first keep, in the tree's order */
    if (!st) out->n_classes = names->n_classes;
    if (!st) {
        char why[600];
        snprintf(why, sizeof why, "the %d class folders of %s", names->n_classes, classes_of ? "the training set" : dir);
        out->classes_why = glia__strdup(why);
    }
    if (st) glia__dataset_free(out);
    return st;
}

/* ---- one sample ---- */

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform double in [0, 1) from stream state s. */
static double unit(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    return (double)(mix(*s) >> 11) * 0x1.0p-53;
}

void glia__folder_crop(int w, int h, int size, bool random, uint64_t seed, int epoch, int64_t idx, double rect[4],
                       bool *flip)
{
    uint64_t s = seed ^ mix((uint64_t)epoch * 0x9e3779b97f4a7c15ull + (uint64_t)idx + 1);
    *flip = unit(&s) < 0.5;  /* what a training sample takes with random_flip (the caller decides) */
    if (random) {  /* torchvision's RandomResizedCrop: area in [0.08, 1] of the image, aspect in [3/4, 4/3] (log) */
        double area = (double)w * h;
        for (int k = 0; k < 10; k++) {
            double a = area * (0.08 + 0.92 * unit(&s));
            double r = exp(log(3.0 / 4.0) + (log(4.0 / 3.0) - log(3.0 / 4.0)) * unit(&s));
            double cw = round(sqrt(a * r)), ch = round(sqrt(a / r));
            if (cw >= 1 && ch >= 1 && cw <= w && ch <= h) {
                rect[0] = floor(unit(&s) * (w - cw + 1));
                rect[1] = floor(unit(&s) * (h - ch + 1));
                rect[2] = cw;
                rect[3] = ch;
                return;
            }
        }
        double ratio = (double)w / h, cw = w, ch = h;  /* the fallback: the whole image, aspect clamped */
        if (ratio < 3.0 / 4.0) ch = round(w / (3.0 / 4.0));
        else if (ratio > 4.0 / 3.0) cw = round(h * (4.0 / 3.0));
        rect[0] = floor((w - cw) / 2);
        rect[1] = floor((h - ch) / 2);
        rect[2] = cw;
        rect[3] = ch;
        return;
    }
    /* Resize(round(size / 0.875)) then CenterCrop(size): the central square that becomes size x size */
    double resized = round(size / 0.875), side = size * (w < h ? w : h) / resized;
    rect[2] = rect[3] = side;
    rect[0] = (w - side) / 2;
    rect[1] = (h - side) / 2;
}

bool glia__folder_sample(const struct glia__dataset *d, int64_t idx, bool random, bool flip_ok, uint64_t seed,
                         int epoch, const struct glia__norm *nm, float *x, char *why, size_t n)
{
    uint8_t *rgb = NULL;
    int w = 0, h = 0, S = d->rows;
    char err[300];
    if (!image_read(d->files[idx], false, &rgb, &w, &h, err, sizeof err)) {
        snprintf(why, n, "%s: %s", d->files[idx], err);
        memset(x, 0, sizeof *x * (size_t)(3 * S * S));
        return false;
    }
    double r[4];
    bool flip;
    glia__folder_crop(w, h, S, random, seed, epoch, idx, r, &flip);
    flip = flip && flip_ok;
    for (int i = 0; i < S; i++) {  /* bilinear, pixel centers: src = x0 + (i + 0.5) * extent / S - 0.5 */
        double sy = r[1] + (i + 0.5) * r[3] / S - 0.5;
        if (sy < 0) sy = 0;
        if (sy > h - 1) sy = h - 1;
        int y0 = (int)sy, y1 = y0 + 1 < h ? y0 + 1 : y0;
        double fy = sy - y0;
        for (int j = 0; j < S; j++) {
            double sx = r[0] + ((flip ? S - 1 - j : j) + 0.5) * r[2] / S - 0.5;
            if (sx < 0) sx = 0;
            if (sx > w - 1) sx = w - 1;
            int x0 = (int)sx, x1 = x0 + 1 < w ? x0 + 1 : x0;
            double fx = sx - x0;
            for (int c = 0; c < 3; c++) {
                double v = (1 - fy) * ((1 - fx) * rgb[((size_t)y0 * w + x0) * 3 + c] + fx * rgb[((size_t)y0 * w + x1) * 3 + c]) +
                           fy * ((1 - fx) * rgb[((size_t)y1 * w + x0) * 3 + c] + fx * rgb[((size_t)y1 * w + x1) * 3 + c]);
                x[((size_t)c * S + i) * S + j] = (float)((v / 255.0 - nm->mean[c]) / nm->std[c]);
            }
        }
    }
    free(rgb);
    return true;
}
