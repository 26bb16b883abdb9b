/*
 * rt_stream.h - a dataset larger than memory: its good TFRecord records
 * (or the fixed rows of a RAW, NPY, CSV or IDX set) in a spool file on disk, decoded batch by batch on worker threads ahead of
 * the training step that reads them (tf.data's prefetch with
 * num_parallel_calls), through a bounded ring of batch buffers.
 *
 *     rt_stream *st;
 *     if (rt_stream_create(&spec, recs, lens, n, &cfg, &st, err, sizeof err) < 0) ...
 *     rt_stream_use u = {.st = st, .seed = 7, .batch = 32, .shuffle = 1, .augment = 1,
 *                        .y = labels, .lab_per = 1};
 *     rt_data d = {.y = labels, .y_dtype = RT_I32, .n = n,
 *                  .fill = rt_stream_fill, .fill_ud = &u, .fill_id = st};
 *     rt_exec_train(e, &d, steps, ...);    // batches come from the workers
 *     rt_stream_destroy(st);
 *
 * Order. A training epoch reads the records through a shuffle buffer of
 * shuffle_buffer samples, as tf.data's Dataset.shuffle does: the buffer is
 * filled with the first records in file order, each step draws one sample
 * from it uniformly and puts the next record in its place. A buffer as
 * large as the dataset gives a uniform permutation; a smaller one mixes
 * only within that window but reads the file almost sequentially. Without
 * shuffling, and for evaluation (epoch RT_EPOCH_EVAL), the order is the
 * file's.
 *
 * Determinism. The order is a pure function of (seed, epoch) drawn from
 * the counter-based RNG, each sample is decoded (and augmented, keyed by
 * seed, epoch and its index) on its own into its own row, so the batches
 * do not depend on the number of workers or their timing; a batch is a
 * pure function of (seed, epoch, position), so a resumed or re-run program
 * sees the same data. Asking for a batch other than the next one (another
 * program, a restore, evaluation in between) drops what was decoded ahead
 * and starts again there.
 *
 * Memory: the record index (12 bytes a record) always; while a program
 * reads, prefetch batch buffers and one record and image of scratch per
 * worker. The spool file is unlinked as soon as it is created, so it goes
 * with the stream or the process.
 *
 * Threads: workers start at the first fill and stop in rt_stream_destroy.
 * A fill that finds its batch unfinished decodes the unclaimed rows itself
 * on the caller's OpenMP team. Fills are serialised per stream (training
 * holds the device, so one program reads at a time anyway).
 */
#ifndef RTRAIN_STREAM_H
#define RTRAIN_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "rt_example.h"

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

/* Write the n records (recs[i], lens[i] bytes) to a new spool file and
 * index them. The spec is copied. cfg may be NULL (defaults). RT_ETOOBIG,
 * before anything is written, past cfg->max_spool_bytes (all streams of
 * the process) or when the disk would keep less than RT_SPOOL_DISK_RESERVE
 * free; RT_EIO with the path and the system's reason when the spool cannot
 * be written. */
int rt_stream_create(const rt_example_spec *spec, const uint8_t *const *recs,
                     const size_t *lens, int64_t n, const rt_stream_config *cfg,
                     rt_stream **out, char *err, size_t errlen);
void rt_stream_destroy(rt_stream *st); /* NULL is a no-op */

uint64_t rt_stream_mem_bytes(const rt_stream *st);  /* the index */
uint64_t rt_stream_file_bytes(const rt_stream *st); /* the spool file */
int rt_stream_threads(const rt_stream *st);
int64_t rt_stream_shuffle_buffer(const rt_stream *st);

/* How one program reads a stream (the fill_ud of its rt_data). */
typedef struct rt_stream_use {
    rt_stream *st;
    uint64_t seed;
    int64_t batch;
    int shuffle;        /* training epochs through the shuffle buffer */
    int augment;        /* training batches augment their images */
    const void *y;      /* the labels: n * lab_per values of 4 bytes */
    int64_t lab_per;
    const float *sw;    /* per-sample weights (n), or NULL */
} rt_stream_use;

/* rt_batch_fill (rt_engine.h) over an rt_stream_use: x from the workers,
 * y and w gathered from u->y and u->sw in the batch's order. */
int rt_stream_fill(void *ud, int64_t epoch, int64_t pos, int64_t nb, float *x, void *y,
                   float *w, char *err, size_t errlen);

/* A stream of fixed rows instead of records: RAW, NPY, CSV and IDX
 * features (rt_data.c), n rows of per values, written once in row order
 * and read back by row. RT_ROWS_U8 rows are 8-bit and converted per batch
 * (divided by 255 when normalize), RT_ROWS_F32 rows are the f32 values
 * themselves; either way the batch holds the floats the in-memory path
 * would. begin checks the room (as rt_stream_create) and opens the spool;
 * write appends bytes in row order (any split); end checks that all
 * n * per values came. */
enum { RT_ROWS_U8 = 1, RT_ROWS_F32 = 2 };
int rt_stream_rows_begin(int kind, int64_t per, int normalize, int64_t n,
                         int64_t shuffle_buffer, const rt_stream_config *cfg, rt_stream **out,
                         char *err, size_t errlen);
int rt_stream_rows_write(rt_stream *st, const void *data, size_t len, char *err, size_t errlen);
int rt_stream_rows_end(rt_stream *st, char *err, size_t errlen);

/* The order of one epoch through a shuffle buffer of buf samples (buf <= 1:
 * file order): out[k] is the k-th sample read. RT_ENOMEM without room for
 * the buffer. */
int rt_stream_order(int64_t n, int64_t buf, uint64_t seed, int64_t epoch, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
