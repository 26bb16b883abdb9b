/*
 * rt_stream.h - a dataset larger than memory: its samples as fixed-size
 * decoded rows in a spool file on disk, read back batch by batch for the
 * training step that needs them.
 *
 *     rt_stream_rows r = {.per = 784, .u8_len = 784, .u8_kind = RT_ROWS_U8_UNIT};
 *     rt_stream *st;
 *     rt_stream_begin(&r, n, 0, &cfg, &st, err, sizeof err);   // room checked
 *     rt_stream_write(st, rows, n * rt_stream_row_bytes(&r), err, sizeof err);
 *     rt_stream_end(st, err, sizeof err);
 *     rt_stream_use u = {.st = st, .seed = 7, .batch = 32, .shuffle = 1, .augment = 1,
 *                        .y = labels, .lab_per = 1};
 *     rt_data d = {.y = labels, .y_dtype = RT_I32, .n = n,
 *                  .fill = rt_stream_fill, .fill_ud = &u, .fill_id = st};
 *     rt_exec_train(e, &d, steps, ...);
 *     rt_stream_destroy(st);
 *
 * Rows. Every source is decoded once, at upload, into rows of the same
 * size: a sample's per input floats, of which one block (u8_off, u8_len)
 * may be kept as 8-bit values (an IDX/NPY u8 array, or the resized image
 * of a TFRecord record before normalisation and augmentation) and the
 * rest as f32. A row is the 8-bit block followed by the other floats in
 * order. Reading a row converts the block as the in-memory path does
 * ((float)v, v / 255.0f, or rt_image_to_input with the row's augmentation
 * drawn from (seed, epoch, sample)), so a batch holds the floats an
 * in-memory dataset would.
 *
 * Reading. A spool file up to cfg->map_max bytes is mapped and the step's
 * own thread copies and converts its rows (with its OpenMP team for large
 * batches): that costs about what the in-memory gather costs, less than
 * handing rows between threads. A larger file is read with pread by
 * worker threads into a ring of prefetch batch buffers ahead of the step
 * (tf.data's map(num_parallel_calls).prefetch), so disk reads overlap the
 * steps; a step that finds its batch unfinished reads the unclaimed rows
 * itself on its OpenMP team.
 *
 * Order. A training epoch reads the rows through a shuffle buffer of
 * shuffle_buffer samples, as tf.data's Dataset.shuffle does: the buffer is
 * filled with the first rows in file order, each step draws one sample
 * from it uniformly and puts the next row in its place. A buffer as large
 * as the dataset gives a uniform permutation; a smaller one mixes only
 * within that window but reads the file almost sequentially. Without
 * shuffling, and for evaluation (epoch RT_EPOCH_EVAL), the order is the
 * file's.
 *
 * Determinism. The order is a pure function of (seed, epoch) drawn from
 * the counter-based RNG, and each row is converted (and augmented, keyed
 * by seed, epoch and its index, or by the use's aug_epoch and row0 + its
 * index: the in-memory key, rt_view_epoch) on its own into its own place,
 * so a batch is a pure function of (seed, epoch, position, key): it does
 * not depend on the
 * mapping, the number of workers or their timing, and a resumed or re-run
 * program sees the same data. Asking for a batch other than the next one
 * drops what was read ahead and starts again there.
 *
 * Memory: nothing per row. A mapped file's pages (clean page cache, under
 * map_max); otherwise, while a program reads, the prefetch batch buffers
 * and one row of scratch per worker and team thread. The spool file is
 * unlinked as soon as it is created, so it goes with the stream or the
 * process.
 *
 * Threads: workers start at the first fill of an unmapped stream and stop
 * in rt_stream_destroy. Fills are serialised per stream (training holds
 * the device, so one program reads at a time anyway).
 */
#ifndef RTRAIN_STREAM_H
#define RTRAIN_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "rt_example.h"
#include "rt_image.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where streamed datasets are spooled unless --spool-dir says otherwise:
 * the one place to change when durable state gives the daemon a state
 * directory (spool under it then). Not /tmp, which is often memory. */
#define RT_SPOOL_DIR_DEFAULT "/var/tmp"
#define RT_STREAM_SHUFFLE_DEFAULT 10000
/* A streamed dataset is refused if writing it would leave less free on the
 * spool's disk. */
#define RT_SPOOL_DISK_RESERVE (UINT64_C(1) << 30)
#define RT_STREAM_PREFETCH_DEFAULT 4

typedef struct rt_stream rt_stream;

/* How the 8-bit block of a row becomes floats. */
enum {
    RT_ROWS_U8_VALUE = 1, /* (float)v */
    RT_ROWS_U8_UNIT = 2,  /* (float)v / 255.0f */
    RT_ROWS_U8_IMAGE = 3  /* an (h, w, c) image: rt_image_to_input(&img, ...) */
};

typedef struct rt_stream_rows {
    int64_t per;            /* floats per sample */
    int64_t u8_off, u8_len; /* x[u8_off, u8_off + u8_len) kept as 8 bits; 0: none */
    int u8_kind;            /* RT_ROWS_U8_* */
    rt_image_spec img;      /* RT_ROWS_U8_IMAGE: the image and its augmentation */
} rt_stream_rows;

/* Bytes of one row in the spool. */
uint64_t rt_stream_row_bytes(const rt_stream_rows *r);

/* Open a stream of at most max_n rows: the room for max_n rows is checked
 * before anything is written (RT_ETOOBIG past cfg->max_spool_bytes for all
 * streams of the process, or when the disk would keep less than
 * RT_SPOOL_DISK_RESERVE free) and the unlinked spool file is created
 * (RT_EIO with the path and the system's reason). cfg may be NULL
 * (defaults); shuffle_buffer 0 takes cfg's. */
int rt_stream_begin(const rt_stream_rows *rows, int64_t max_n, int64_t shuffle_buffer,
                    const rt_stream_config *cfg, rt_stream **out, char *err, size_t errlen);
/* Append row bytes (any split, rows in order). */
int rt_stream_write(rt_stream *st, const void *data, size_t len, char *err, size_t errlen);
/* The stream holds the rows written (at least one, whole rows); maps the
 * file when it is within cfg->map_max. */
int rt_stream_end(rt_stream *st, char *err, size_t errlen);
void rt_stream_destroy(rt_stream *st); /* NULL is a no-op */

int64_t rt_stream_samples(const rt_stream *st);
uint64_t rt_stream_file_bytes(const rt_stream *st); /* the spool file */
int rt_stream_mapped(const rt_stream *st);
int rt_stream_threads(const rt_stream *st);
int64_t rt_stream_shuffle_buffer(const rt_stream *st);
/* Whether its rows are augmented when training (8-bit images with an
 * augmentation in their spec). */
int rt_stream_augments(const rt_stream *st);

/* How one program reads a stream (the fill_ud of its rt_data). */
typedef struct rt_stream_use {
    rt_stream *st;
    uint64_t seed;
    int64_t batch;
    int shuffle;   /* training epochs through the shuffle buffer */
    int augment;   /* training batches augment their images */
    const void *y; /* the labels: n * lab_per values of 4 bytes */
    int64_t lab_per;
    const float *sw;      /* per-sample weights (n), or NULL */
    struct rt_held *held; /* st NULL: a held set's rows (rt_data.h), n of them */
    int64_t n;
    /* The augmentation's key, as the in-memory gather's (rt_view_epoch
     * sets it before each run of training steps): aug_keyed, the draws of
     * every training batch are keyed on aug_epoch and row0 + the row's
     * sample (row0: the set's first row in its whole, a chunk's); 0, on
     * the batch's epoch and its sample. */
    int aug_keyed;
    uint64_t aug_epoch, row0;
} rt_stream_use;

/* rt_batch_fill (rt_engine.h) over an rt_stream_use: x from the rows,
 * y and w gathered from u->y and u->sw in the batch's order. */
int rt_stream_fill(void *ud, int64_t epoch, int64_t pos, int64_t nb, float *x, void *y, float *w,
                   char *err, size_t errlen);

/* The order of one epoch through a shuffle buffer of buf samples (buf <= 1:
 * file order): out[k] is the k-th sample read. RT_ENOMEM without room for
 * the buffer. */
int rt_stream_order(int64_t n, int64_t buf, uint64_t seed, int64_t epoch, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
