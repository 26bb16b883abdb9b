/*
 * rt_view.h - the dataset as a training or evaluation step sees it: the
 * check that a stored dataset fits a program's plan, and the rt_data view
 * the engine reads (labels in the plan's dtype, a streamed set through its
 * workers, an augmented set's epoch copy).
 *
 *     rt_view_spec v;
 *     rt_view_spec_of(plan, &v);    // once per program (rt_program_view)
 *     char err[512];
 *     if ((rc = rt_view_check(ds, &v, "p-1", 1, err, sizeof err)) < 0) -> refuse
 *     rt_stream_use use;            // lives as long as the view
 *     rt_data d;
 *     rt_view_make(ds, &v, 1, &use, &d, err, sizeof err);
 *     rt_view_epoch(ds, &v, global_step, &d, err, sizeof err); // per epoch
 *
 * Threads: the dataset's label conversion is cached under its own lock
 * (rt_data.h); these functions add none.
 */
#ifndef RTRAIN_VIEW_H
#define RTRAIN_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "rt_data.h"
#include "rt_engine.h"
#include "rt_stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the view needs of a program's plan, read once when the program is
 * made (rt_program_view): a training call then checks and views its data
 * without going back to the engine. in_n, lab_n < 0: the plan has none. */
typedef struct rt_view_spec {
    int in_n, lab_n;
    int64_t in[RT_MAX_DIMS], lab[RT_MAX_DIMS];
    rt_dtype label_dtype;
    uint64_t seed;
    int batch_size, shuffle;
} rt_view_spec;
void rt_view_spec_of(const rt_plan *plan, rt_view_spec *out);

/* Whether ds's per-sample shapes (and, with need_labels, its labels) fit
 * the plan (v). Equal element counts are accepted when either side is flat, and
 * shapes that differ only by dims of 1; nothing else is reinterpreted.
 * 0, or RT_ESHAPE/RT_EDATA with a message naming ds and prog_id. */
int rt_view_check(const rt_dataset *ds, const rt_view_spec *v, const char *prog_id, int need_labels,
                  char *err, size_t errlen);

/* The shape test and the layout hint of rt_view_check, for samples sent
 * in a request (Predict's x). */
int rt_view_shapes_fit(int an, const int64_t *a, int bn, const int64_t *b);
const char *rt_view_layout_hint(int an, const int64_t *a, int bn, const int64_t *b);

/* d for the engine over ds: labels converted (and cached) to the plan's
 * label dtype; a streamed set fills batches through use (the caller's
 * storage, used only when ds->stream, alive while d is). 0, or an RT_ code
 * with a message (without the dataset's id). */
int rt_view_make(rt_dataset *ds, const rt_view_spec *v, int need_labels, rt_stream_use *use,
                 rt_data *d, char *err, size_t errlen);

/* A data set that is a chunk of a larger one (a client's fit over rows
 * larger than one upload, FitRequest.rows_before): its first row's id in
 * the whole set (a multiple of the batch size) and the whole set's steps
 * per epoch. {0, 0}: the data set is the whole. */
typedef struct rt_view_chunk {
    uint64_t rows_before, whole_spe;
} rt_view_chunk;

/* Whether ds's images are augmented when training (in memory, or its
 * stream's rows): its training steps run an epoch at a time, each after
 * rt_view_epoch. */
int rt_view_augments(const rt_dataset *ds);

/* A dataset with image augmentation: d->aug asks the training step's
 * gather for the images of the epoch that global_step is in, drawn from
 * the plan's seed, so a rerun or a resumed run sees the same images; a
 * streamed set's workers draw on the same key (d's rt_stream_use, from
 * rt_view_make). A chunk (ck not NULL and set) draws as the whole set
 * would: on the whole set's epoch (of the steps before the chunk's first)
 * and the rows' ids in it. Returns 0 (also without augmentation), or
 * RT_EINVAL for a chunk that does not fit its whole. */
int rt_view_epoch(rt_dataset *ds, const rt_view_spec *v, int64_t global_step,
                  const rt_view_chunk *ck, rt_data *d, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
