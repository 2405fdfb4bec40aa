/* glia/plugin.h — the plugin descriptor, GLIA_PLUGIN_DEFINE and feature registration.
 * Not the loader: the core finds, checks, probes and initializes plugins (docs/plugins.md). */
#ifndef GLIA_PLUGIN_H
#define GLIA_PLUGIN_H

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include "version.h"
#include "status.h"
#include "layer.h"
#include "optimizer.h"
#include "backend.h"
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handed to a plugin's init: where it registers its features. */
struct glia_registry;

/* The descriptor every plugin exports through GLIA_PLUGIN_ENTRY_SYMBOL. */
struct glia_plugin_desc {
    uint32_t struct_size;       /* sizeof(struct glia_plugin_desc) of the builder */
    uint32_t abi_major;         /* GLIA_ABI_MAJOR of the SDK it was built with */
    uint32_t abi_minor;         /* GLIA_ABI_MINOR of the SDK it was built with */
    const char *name;           /* must equal the file name without ".so" */
    const char *version;
    const char *license;
    const char *description;    /* one line */
    /* ABI 1.0 */
    /* Register features with glia_register_*. Required. On failure everything it
     * registered is removed again and the plugin is unloaded. */
    glia_status (*init)(struct glia_registry *r);
    /* Say whether this machine can run the plugin (a CUDA plugin without a GPU says no).
     * Optional: NULL means always. On refusal write the reason into why. */
    glia_status (*probe)(struct glia_context *ctx, char *why, size_t why_size);
};

#define GLIA_PLUGIN_ENTRY_SYMBOL "glia_plugin_entry"
typedef const struct glia_plugin_desc *(*glia_plugin_entry_fn)(void);

#if defined(__GNUC__)
#define GLIA_EXPORT __attribute__((visibility("default")))
#else
#define GLIA_EXPORT
#endif

#define GLIA__PLUGIN_DEFINE(name_, version_, license_, description_, init_, probe_)     \
    GLIA_EXPORT const struct glia_plugin_desc *glia_plugin_entry(void);                \
    GLIA_EXPORT const struct glia_plugin_desc *glia_plugin_entry(void)                 \
    {                                                                                  \
        static const struct glia_plugin_desc desc = {                                  \
            sizeof(struct glia_plugin_desc), GLIA_ABI_MAJOR, GLIA_ABI_MINOR, #name_,   \
            version_, license_, description_, init_, probe_};                          \
        return &desc;                                                                  \
    }

/* One per plugin, at the end of its file. name is a bare word equal to the file name. */
#define GLIA_PLUGIN_DEFINE(name, version, license, description, init) \
    GLIA__PLUGIN_DEFINE(name, version, license, description, init, NULL)
/* The same with a probe function. */
#define GLIA_PLUGIN_DEFINE_PROBE(name, version, license, description, init, probe) \
    GLIA__PLUGIN_DEFINE(name, version, license, description, init, probe)

/* Registration, from init only. What is registered is (borrowed) and must outlive the plugin
 * (static). A duplicate (a layer type or optimizer of the same name, a kernel of the same type
 * and impl, an optimizer kernel of the same optimizer and device type, a backend of the same
 * name) is GLIA_EEXIST. A schema that declares a key twice (for a layer type: or declares one of
 * the keys every layer section has, type, inputs, impl, weight_decay), and an optimizer with
 * n_state above GLIA_OPTIMIZER_MAX_STATE, are GLIA_EINVAL, naming the plugin, the type and the key.
 * A kernel may be registered before its type (another plugin may own the type): the core pairs
 * them by name when a model asks for the type. */
glia_status glia_register_layer_type(struct glia_registry *r, const struct glia_layer_type *type);
glia_status glia_register_kernel(struct glia_registry *r, const struct glia_kernel *kernel);
glia_status glia_register_optimizer_type(struct glia_registry *r, const struct glia_optimizer_type *type);
glia_status glia_register_optimizer_kernel(struct glia_registry *r, const struct glia_optimizer_kernel *kernel);
glia_status glia_register_backend(struct glia_registry *r, const struct glia_backend_ops *ops);
/* A communication transport; its name is the [distributed] transport value. */
glia_status glia_register_comm(struct glia_registry *r, const struct glia_comm_ops *ops);
/* The context behind a registry (for glia_error and logging from init). */
struct glia_context *glia_registry_context(struct glia_registry *r);

/* Loading (used by the core and by programs embedding glia). `name_or_path` is a plugin
 * name looked up in the search path, or a path to a .so (it has a '/' or ends in ".so"; a
 * relative one is relative to the working directory: "x.so" is ./x.so, never looked up in the
 * system's library path). Loading runs the plugin's code: dlopen runs its constructors before
 * its descriptor is checked. Loading an already loaded plugin is a no-op. On refusal the
 * context error names the file, the symbol and both versions. */
glia_status glia_plugin_load(struct glia_context *ctx, const char *name_or_path);
/* Search path, first match wins: directories added here (in order), then each entry of
 * $GLIA_PLUGIN_PATH, then the installed plugin directory, or instead of it each entry of
 * $GLIA_PLUGIN_SYSTEM_PATH when that variable is set (set and empty: no installed folder). */
glia_status glia_plugin_add_path(struct glia_context *ctx, const char *dir);
/* Load every plugin found in the search path (each folder's in file-name order); refusals are
 * logged as warnings. */
glia_status glia_plugin_load_all(struct glia_context *ctx);
/* The installed plugin directory. */
const char *glia_plugin_dir(void);
/* Print loaded plugins (libglia's own features first, then the plugins by name) and their
 * features to f; with `only` (a plugin, layer type or optimizer name) print just that, with
 * each key's type, default and doc. */
glia_status glia_plugin_print(struct glia_context *ctx, FILE *f, const char *only);
/* Print a key schema, one key a line (used by glia_plugin_print and `glia plugins`). */
void glia_keys_print(FILE *f, const struct glia_key *keys);

#ifdef __cplusplus
}
#endif
#endif
