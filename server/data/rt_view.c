/* rt_view.c - a stored dataset as a step sees it (rt_view.h). */
#include "rt_view.h"

#include "rt_errf.h"

#include <stdio.h>
#include <string.h>

/* IDX images are (28, 28), a channels-last CNN takes (28, 28, 1), a
 * PyTorch one (1, 28, 28): dims of 1 move no byte. (8, 8, 3) data for a
 * (3, 8, 8) program is refused (layout_hint), and a shape that fits both
 * layouts is taken as the program declares it. */
static int drop_ones(int n, const int64_t *d, int64_t *o)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (d[i] != 1)
            o[m++] = d[i];
    return m;
}

int rt_view_shapes_fit(int an, const int64_t *a, int bn, const int64_t *b)
{
    if (an == bn && memcmp(a, b, sizeof(int64_t) * (size_t)an) == 0)
        return 1;
    int64_t na = rt_data_numel(an, a);
    if (na < 0 || na != rt_data_numel(bn, b) || an > RT_MAX_DIMS || bn > RT_MAX_DIMS)
        return 0;
    int64_t sa[RT_MAX_DIMS], sb[RT_MAX_DIMS];
    an = drop_ones(an, a, sa);
    bn = drop_ones(bn, b, sb);
    if (an == bn && memcmp(sa, sb, sizeof(int64_t) * (size_t)an) == 0)
        return 1;
    return an <= 1 || bn <= 1;
}

/* the hint for image data in the other layout than the program's */
const char *rt_view_layout_hint(int an, const int64_t *a, int bn, const int64_t *b)
{
    if (an != 3 || bn != 3)
        return "";
    if (a[0] == b[1] && a[1] == b[2] && a[2] == b[0])
        return "; the data is NHWC and the model takes NCHW (PyTorch's): transpose it, or "
               "compile with data_layout NHWC";
    if (a[0] == b[2] && a[1] == b[0] && a[2] == b[1])
        return "; the data is NCHW and the model takes NHWC: transpose it";
    return "";
}

void rt_view_spec_of(const rt_plan *plan, rt_view_spec *out)
{
    memset(out, 0, sizeof *out);
    out->in_n = rt_plan_input_shape(plan, out->in);
    out->lab_n = rt_plan_label_shape(plan, out->lab);
    const rt_train_config *cfg = rt_plan_config(plan);
    out->label_dtype = cfg->label_dtype;
    out->seed = cfg->seed;
    out->batch_size = cfg->batch_size;
    out->shuffle = cfg->shuffle;
}

int rt_view_check(const rt_dataset *ds, const rt_view_spec *v, const char *prog_id, int need_labels,
                  char *err, size_t errlen)
{
    int in_n = v->in_n, lab_n = need_labels ? v->lab_n : -1;
    const int64_t *in = v->in, *lab = v->lab;
    char a[96], b[96];
    if (in_n >= 0 && !rt_view_shapes_fit(ds->x_ndim, ds->x_dims, in_n, in))
        return rt_errf(err, errlen, RT_ESHAPE,
                       "dataset %s has samples of shape %s but program %s expects %s%s", ds->id,
                       rt_data_shape_str(ds->x_ndim, ds->x_dims, a, sizeof a), prog_id,
                       rt_data_shape_str(in_n, in, b, sizeof b),
                       rt_view_layout_hint(ds->x_ndim, ds->x_dims, in_n, in));
    if (!need_labels)
        return 0;
    if (!ds->y)
        return rt_errf(err, errlen, RT_EDATA, "dataset %s has no labels", ds->id);
    if (lab_n >= 0 && rt_data_numel(ds->y_ndim, ds->y_dims) != rt_data_numel(lab_n, lab))
        return rt_errf(err, errlen, RT_ESHAPE,
                       "dataset %s has labels of shape %s but program %s expects %s", ds->id,
                       rt_data_shape_str(ds->y_ndim, ds->y_dims, a, sizeof a), prog_id,
                       rt_data_shape_str(lab_n, lab, b, sizeof b));
    return 0;
}

int rt_view_make(rt_dataset *ds, const rt_view_spec *v, int need_labels, rt_stream_use *use,
                 rt_data *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->x = ds->x;
    d->n = ds->n;
    if (!need_labels)
        return 0;
    rt_dtype want = v->label_dtype;
    int rc = rt_dataset_labels_as(ds, want, &d->y, err, errlen);
    if (rc < 0)
        return rc;
    d->y_dtype = want;
    d->sw = ds->sw;
    if (ds->stream || ds->held) {
        /* batches decoded by the stream's workers, in its order; or a held
         * set's rows (server/mpi sees fill_id and trains it over the
         * replicas) */
        *use = (rt_stream_use){.st = ds->stream,
                               .seed = v->seed,
                               .batch = v->batch_size,
                               .shuffle = v->shuffle,
                               .augment = 1,
                               .y = d->y,
                               .lab_per = rt_data_numel(ds->y_ndim, ds->y_dims),
                               .sw = ds->sw,
                               .held = ds->held,
                               .n = ds->n};
        d->fill = rt_stream_fill;
        d->fill_ud = use;
        d->fill_id = ds->stream ? (const void *)ds->stream : (const void *)ds->held;
    }
    return 0;
}

int rt_view_augments(const rt_dataset *ds)
{
    return ds->img != NULL || (ds->stream && rt_stream_augments(ds->stream));
}

int rt_view_epoch(rt_dataset *ds, const rt_view_spec *v, int64_t global_step,
                  const rt_view_chunk *ck, rt_data *d, char *err, size_t errlen)
{
    if (!rt_view_augments(ds))
        return 0;
    int64_t spe = (d->n + v->batch_size - 1) / v->batch_size;
    uint64_t row0 = 0;
    if (ck && (ck->rows_before || ck->whole_spe)) {
        /* the whole set's epoch: its steps before this chunk's first row
         * are not this chunk's, the epoch started that many steps ago */
        const uint64_t bs = (uint64_t)v->batch_size, before = ck->rows_before / bs;
        if (ck->rows_before % bs || ck->whole_spe < before + (uint64_t)spe ||
            ck->whole_spe > (uint64_t)INT64_MAX) {
            snprintf(err, errlen,
                     "a chunk of rows %llu..%llu (%lld steps of %d) does not fit a whole of "
                     "%llu steps per epoch (rows_before: a multiple of the batch size)",
                     (unsigned long long)ck->rows_before,
                     (unsigned long long)(ck->rows_before + (uint64_t)d->n), (long long)spe,
                     v->batch_size, (unsigned long long)ck->whole_spe);
            return RT_EINVAL;
        }
        row0 = ck->rows_before;
        spe = (int64_t)ck->whole_spe;
        global_step -= (int64_t)before;
        if (global_step < 0)
            global_step = 0;
    }
    uint64_t epoch = (uint64_t)(global_step / (spe > 0 ? spe : 1));
    if (!ds->img) {
        /* streamed: its workers draw on the same key (rt_view_make's use) */
        rt_stream_use *u = d->fill_ud;
        if (d->fill != rt_stream_fill || !u || u->st != ds->stream)
            return rt_errf(err, errlen, RT_EINTERNAL, "the view of a streamed set has no stream");
        u->aug_keyed = 1;
        u->aug_epoch = epoch;
        u->row0 = row0;
        return 0;
    }
    const rt_image_spec *m = &ds->img_spec;
    d->aug = (rt_augment){.img = ds->img,
                          .h = m->h,
                          .w = m->w,
                          .c = m->c,
                          .off = ds->img_off,
                          .crop_pad = m->crop_pad,
                          .flip = m->flip,
                          .brightness = m->brightness,
                          .contrast = m->contrast,
                          .epoch = epoch,
                          .row0 = row0};
    memcpy(d->aug.mean, m->mean, sizeof d->aug.mean);
    memcpy(d->aug.std, m->std, sizeof d->aug.std);
    return 0;
}
