/* tests/emu/emu_jit.c — run-time compiled kernels in the CPU emulation of CUDA: NVRTC itself runs (its
 * calls pass through), each CUBIN or PTX image it hands out is remembered with its CUDA C source, and
 * cudaLibraryLoadData of such an image builds that source as host C++ against cuda_emu.h (the
 * command in $GLIA_EMU_JIT_CXX, set by run.sh) and loads it; cudaLaunchKernel queues the kernel like
 * any other (or records it into a stream capture: a library stays loaded while any graph lives).
 * Not a loader of images from elsewhere: those are refused as unsupported. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "emu.h"

/* ---- NVRTC: programs and the images they gave, each with its source ---- */

struct program {
    nvrtcProgram prog;
    char *source;
    struct program *next;
};
struct image {
    void *bytes;
    size_t size;
    char *source;
    struct image *next;
};
static struct program *programs;
static struct image *images;

/* The real NVRTC function `name` (the next definition after this library's). */
static void *real(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "emu jit: no real %s: %s\n", name, dlerror());
        abort();
    }
    return f;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int n_headers,
                               const char *const *headers, const char *const *include_names)
{
    GLIA_EMU_GUARD;
    nvrtcResult (*f)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *) =
        (nvrtcResult(*)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *))(
            uintptr_t)real("nvrtcCreateProgram");
    nvrtcResult r = f(prog, src, name, n_headers, headers, include_names);
    if (r != NVRTC_SUCCESS) return r;
    struct program *p = calloc(1, sizeof *p);
    if (!p || !(p->source = strdup(src))) abort();
    p->prog = *prog;
    p->next = programs;
    programs = p;
    return r;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
{
    GLIA_EMU_GUARD;
    for (struct program **p = &programs; *p; p = &(*p)->next)
        if ((*p)->prog == *prog) {
            struct program *d = *p;
            *p = d->next;
            free(d->source);
            free(d);
            break;
        }
    return ((nvrtcResult(*)(nvrtcProgram *))(uintptr_t)real("nvrtcDestroyProgram"))(prog);
}

/* Gets prog's image (CUBIN or PTX) into buf through the real getter and remembers it. */
static nvrtcResult get_image(nvrtcProgram prog, char *buf, const char *getter, const char *sizer)
{
    nvrtcResult r = ((nvrtcResult(*)(nvrtcProgram, char *))(uintptr_t)real(getter))(prog, buf);
    size_t n = 0;
    if (r == NVRTC_SUCCESS) r = ((nvrtcResult(*)(nvrtcProgram, size_t *))(uintptr_t)real(sizer))(prog, &n);
    if (r != NVRTC_SUCCESS) return r;
    for (struct program *p = programs; p; p = p->next)
        if (p->prog == prog) {
            struct image *im = calloc(1, sizeof *im);
            if (!im || !(im->bytes = malloc(n)) || !(im->source = strdup(p->source))) abort();
            memcpy(im->bytes, buf, n);
            im->size = n;
            im->next = images;
            images = im;
        }
    return r;
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *buf)
{
    GLIA_EMU_GUARD;
    return get_image(prog, buf, "nvrtcGetCUBIN", "nvrtcGetCUBINSize");
}
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *buf)
{
    GLIA_EMU_GUARD;
    return get_image(prog, buf, "nvrtcGetPTX", "nvrtcGetPTXSize");
}

/* The size of the image at code: an ELF file's extent from its header, or a PTX text with its NUL. */
static size_t image_size(const void *code)
{
    const unsigned char *c = code;
    if (memcmp(c, "\177ELF", 4)) return strlen(code) + 1;
    uint64_t shoff, phoff;
    uint16_t shentsize, shnum, phentsize, phnum;
    memcpy(&phoff, c + 32, 8);
    memcpy(&shoff, c + 40, 8);
    memcpy(&phentsize, c + 54, 2);
    memcpy(&phnum, c + 56, 2);
    memcpy(&shentsize, c + 58, 2);
    memcpy(&shnum, c + 60, 2);
    uint64_t a = shoff + (uint64_t)shentsize * shnum, b = phoff + (uint64_t)phentsize * phnum;
    return (size_t)(a > b ? a : b);
}

static const char *source_of(const void *code)
{
    size_t n = image_size(code);
    for (struct image *im = images; im; im = im->next)
        if (im->size >= n && !memcmp(im->bytes, code, n)) return im->source;
    return NULL;
}

/* ---- libraries: the source built as host C++ and opened ---- */

typedef void (*entry_fn)(dim3, dim3, size_t, cudaStream_t, void **);

#define KERNEL_MAGIC 0x4b726e6cu
struct kernel {
    unsigned magic;
    char name[64];
    entry_fn entry;
};
struct library {
    void *dl;
    int n;
    struct kernel k[16];
};

/* The names of the __global__ functions in src, at most max. */
static int kernel_names(const char *src, char names[][64], int max)
{
    int n = 0;
    for (const char *p = src; n < max && (p = strstr(p, "__global__")); p += 10) {
        const char *q = p + 10;
        q += strspn(q, " \t\n");
        if (strncmp(q, "void", 4)) continue;
        q += 4;
        q += strspn(q, " \t\n");
        if (!strncmp(q, "__launch_bounds__", 17)) {
            q = strchr(q, ')');
            if (!q) break;
            q++;
            q += strspn(q, " \t\n");
        }
        size_t len = strspn(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        if (!len || len >= 64) continue;
        memcpy(names[n], q, len);
        names[n++][len] = 0;
    }
    return n;
}

cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code, enum cudaJitOption *jo, void **jv, unsigned int nj,
                                enum cudaLibraryOption *lo, void **lv, unsigned int nl)
{
    GLIA_EMU_GUARD;
    (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
    const char *cxx = getenv("GLIA_EMU_JIT_CXX"), *src = source_of(code);
    if (!cxx || !src) {
        fprintf(stderr, "emu jit: %s\n", !cxx ? "GLIA_EMU_JIT_CXX is not set" : "an image NVRTC did not give out");
        return cudaErrorNotSupported;
    }
    static int serial;
    const char *dir = getenv("GLIA_EMU_JIT_DIR");
    char cc[512], so[512], cmd[4096];
    snprintf(cc, sizeof cc, "%s/jit_%d_%d.cc", dir && *dir ? dir : "/tmp", (int)getpid(), serial);
    snprintf(so, sizeof so, "%s/jit_%d_%d.so", dir && *dir ? dir : "/tmp", (int)getpid(), serial++);
    struct library *L = calloc(1, sizeof *L);
    char names[16][64];
    int n = kernel_names(src, names, 16);
    FILE *f = fopen(cc, "w");
    if (!L || !f) abort();
    fputs(src, f);
    fputs("\n", f);
    for (int i = 0; i < n; i++)
        fprintf(f, "extern \"C\" void glia_emu_entry_%s(dim3 g, dim3 b, size_t smem, cudaStream_t s, void **a)\n"
                   "{ glia_emu_launch_args(\"%s\", g, b, smem, s, %s, a); }\n", names[i], names[i], names[i]);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s -o '%s' '%s' %s", cxx, so, cc, getenv("GLIA_EMU_JIT_LIBS") ? getenv("GLIA_EMU_JIT_LIBS") : "");
    int rc = system(cmd);
    L->dl = rc ? NULL : dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!L->dl) {
        fprintf(stderr, "emu jit: '%s' exited with %d%s%s\n", cmd, rc, rc ? "" : ": ", rc ? "" : dlerror());
        free(L);
        return cudaErrorNotSupported;
    }
    remove(cc);
    remove(so);
    for (int i = 0; i < n; i++) {
        char sym[96];
        snprintf(sym, sizeof sym, "glia_emu_entry_%.63s", names[i]);
        L->k[i].magic = KERNEL_MAGIC;
        snprintf(L->k[i].name, sizeof L->k[i].name, "%.63s", names[i]);
        L->k[i].entry = (entry_fn)(uintptr_t)dlsym(L->dl, sym);
    }
    L->n = n;
    *lib = (cudaLibrary_t)(void *)L;
    return cudaSuccess;
}

cudaError_t cudaLibraryUnload(cudaLibrary_t lib)
{
    GLIA_EMU_GUARD;
    struct library *L = (struct library *)(void *)lib;
    cudaError_t e = glia_emu_unsafe("cudaLibraryUnload");
    if (e) return e;
    glia_emu_flush_stream(NULL);  /* its kernels may still be queued */
    /* a graph may hold its kernels' code and argument blocks: the code stays while any graph lives */
    if (L->dl && !glia_emu_graphs_alive()) dlclose(L->dl);
    free(L);
    return cudaSuccess;
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib, const char *name)
{
    GLIA_EMU_GUARD;
    struct library *L = (struct library *)(void *)lib;
    for (int i = 0; i < L->n; i++)
        if (!strcmp(L->k[i].name, name) && L->k[i].entry) {
            *k = (cudaKernel_t)(void *)&L->k[i];
            return cudaSuccess;
        }
    return cudaErrorSymbolNotFound;
}

static struct kernel *as_kernel(const void *f)
{
    struct kernel *k = (struct kernel *)(uintptr_t)f;
    return k && k->magic == KERNEL_MAGIC ? k : NULL;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *f)
{
    GLIA_EMU_GUARD;
    if (!as_kernel(f)) return cudaErrorInvalidDeviceFunction;
    memset(a, 0, sizeof *a);
    a->maxThreadsPerBlock = 1024;
    a->numRegs = 32;
    return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s)
{
    GLIA_EMU_GUARD;
    struct kernel *k = as_kernel(f);
    if (!k) return cudaErrorInvalidDeviceFunction;
    k->entry(g, b, smem, s, args);  /* copies the arguments now: the launch may run later */
    return cudaPeekAtLastError();
}
