/* fuzz_data.h - what the CSV, NPY and IDX harnesses share: parse one
 * layout of parts the way an upload does (rt_data_parse_take over a
 * malloc'ed copy, which the dataset may adopt), then read the result the
 * way the handlers do (label conversion, the store key, shape text, and
 * for a streamed set (storage RT_STORAGE_STREAM in the template) its
 * first batch read back from the spool). */
#ifndef RT_FUZZ_DATA_H
#define RT_FUZZ_DATA_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_data.h"
#include "rt_stream.h"

/* What parsing may allocate; small enough that a fuzzed header cannot
 * push the harness past libFuzzer's memory limit. */
#define FUZZ_DATA_MAX_BYTES (16u << 20)

/* Parse n_parts parts laid back to back, each one the whole input, with
 * the roles and options of tmpl (lengths are filled in). */
static inline void fuzz_data_parse(const rt_data_part *tmpl, int n_parts,
                                   const uint8_t *data, size_t size)
{
    rt_data_part parts[2];
    size_t len = size * (size_t)n_parts;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return;
    for (int i = 0; i < n_parts; i++) {
        parts[i] = tmpl[i];
        parts[i].length = size;
        if (size)
            memcpy(buf + (size_t)i * size, data, size);
    }
    rt_dataset *ds = NULL;
    char err[256];
    int rc = rt_data_parse_take(parts, n_parts, &buf, len, FUZZ_DATA_MAX_BYTES, 100, free,
                                &ds, err, sizeof err);
    free(buf); /* NULL when the dataset adopted it */
    if (rc < 0) {
        /* Errors are short text that ends inside the buffer. */
        if (strnlen(err, sizeof err) == sizeof err)
            abort();
        return;
    }
    if (ds->n <= 0 || !ds->x == !ds->stream)
        abort();
    if (ds->stream) {
        /* the first batch of up to 4 rows, as evaluation reads it */
        const int64_t nb = ds->n < 4 ? ds->n : 4;
        const int64_t per = rt_data_numel(ds->x_ndim, ds->x_dims);
        float *x = malloc(sizeof(float) * (size_t)(nb * per));
        rt_stream_use u = {.st = ds->stream, .batch = nb};
        if (!x || rt_stream_fill(&u, RT_EPOCH_EVAL, 0, nb, x, NULL, NULL, err, sizeof err) < 0)
            abort();
        free(x);
    }
    const void *y;
    if (ds->y) {
        rt_dataset_labels_as(ds, RT_F32, &y, err, sizeof err);
        rt_dataset_labels_as(ds, RT_I32, &y, err, sizeof err);
    }
    uint8_t hash[16] = {0}, key[16];
    rt_data_key(hash, parts, n_parts, key);
    rt_dataset_set_key(ds, key);
    char shape[96];
    rt_data_shape_str(ds->x_ndim, ds->x_dims, shape, sizeof shape);
    rt_data_shape_str(ds->y_ndim, ds->y_dims, shape, sizeof shape);
    rt_dataset_release(ds);
}

#endif
