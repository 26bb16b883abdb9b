/*
 * rt_view.h - the dataset as a training or evaluation step sees it: the
 * check that a stored dataset fits a program's plan, and the rt_data view
 * the engine reads (labels in the plan's dtype, a streamed set through its
 * workers, an augmented set's epoch copy).
 *
 *     char err[512];
 *     if ((rc = rt_view_check(ds, plan, "p-1", 1, err, sizeof err)) < 0) -> refuse
 *     rt_stream_use use;            // lives as long as the view
 *     rt_data d;
 *     rt_view_make(ds, plan, 1, &use, &d, err, sizeof err);
 *     rt_view_epoch(ds, plan, global_step, &d, err, sizeof err); // per epoch
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

/* Whether ds's per-sample shapes (and, with need_labels, its labels) fit
 * plan. Equal element counts are accepted when either side is flat, and
 * shapes that differ only by dims of 1; nothing else is reinterpreted.
 * 0, or RT_ESHAPE/RT_EDATA with a message naming ds and prog_id. */
int rt_view_check(const rt_dataset *ds, const rt_plan *plan, const char *prog_id, int need_labels,
                  char *err, size_t errlen);

/* The shape test and the layout hint of rt_view_check, for samples sent
 * in a request (Predict's x). */
int rt_view_shapes_fit(int an, const int64_t *a, int bn, const int64_t *b);
const char *rt_view_layout_hint(int an, const int64_t *a, int bn, const int64_t *b);

/* d for the engine over ds: labels converted (and cached) to the plan's
 * label dtype; a streamed set fills batches through use (the caller's
 * storage, used only when ds->stream, alive while d is). 0, or an RT_ code
 * with a message (without the dataset's id). */
int rt_view_make(rt_dataset *ds, const rt_plan *plan, int need_labels, rt_stream_use *use,
                 rt_data *d, char *err, size_t errlen);

/* A dataset with image augmentation: d->aug asks the training step's
 * gather for the images of the epoch that global_step is in, drawn from
 * the plan's seed, so a rerun or a resumed run sees the same images.
 * Returns 0 (also without augmentation). */
int rt_view_epoch(rt_dataset *ds, const rt_plan *plan, int64_t global_step, rt_data *d, char *err,
                  size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
