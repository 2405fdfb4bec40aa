/* core/dataset.c — freeing a dataset (struct glia__dataset, core/internal.h) whatever its format made it.
 * Not a reader: each format's loader (data_image.c, data_npy.c, data_folder.c, data_tokens.c, data_stream.c) fills one. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

void glia__dataset_free(struct glia__dataset *d)
{
    if (!d) return;
    free(d->images);
    free(d->fimages);
    for (int64_t i = 0; i < d->n_files; i++) free(d->files[i]);
    free(d->files);
    for (int i = 0; d->class_names && i < d->n_classes; i++) free(d->class_names[i]);
    free(d->class_names);
    free(d->labels);
    free(d->offsets);
    free(d->ids);
    free(d->tok);
    free(d->shard_end);
    free(d->classes_why);
    memset(d, 0, sizeof *d);
}
