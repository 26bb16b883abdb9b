/* rt_client_chunks.c - a fit on arrays larger than one upload.
 *
 * The daemon holds an upload whole while it arrives, so one upload is at
 * most GetInfo's max_upload_bytes. rt_client_fit_arrays sends arrays up to
 * that size as one data set and one Fit; larger ones in chunks of whole
 * batches of at most half of it (as the Python client does): each epoch
 * uploads its chunks in row order and runs one Fit of one pass over each
 * (the daemon starts a pass at the first batch of a new data set), so an
 * unshuffled program trains on the batches of the one-upload fit in the
 * same order and ends on the same weights, bit for bit. The epoch's
 * metrics are the sample-weighted means of its chunks' (the daemon's
 * epoch means), as Keras' trackers weigh each batch by its size: auc,
 * precision and recall cannot be combined that way and are refused. A
 * chunk uploaded again in a later epoch costs a FindDataset while the
 * daemon still holds it. */
#include "rt_client_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct chunk_run {
    rt_client_fit_cb cb;
    void *user;
    uint64_t epoch, steps_before, steps_per_epoch;
    int got_end, user_stop;
    rt_client_metrics end; /* the chunk's epoch means */
    uint64_t step;         /* the last global step reported */
} chunk_run;

/* a chunk's events: progress goes on as the epoch's, its epoch end is
 * kept for the merge, its done event is the caller's at the very end */
static int chunk_event(const rt_client_fit_event *ev, void *ud)
{
    chunk_run *r = ud;
    if (ev->step > r->step)
        r->step = ev->step;
    if (ev->kind == RT_FIT_EPOCH_END) {
        r->end = ev->epoch_end.train;
        r->got_end = 1;
        return 0;
    }
    if (ev->kind != RT_FIT_PROGRESS || !r->cb)
        return 0;
    rt_client_fit_event e = *ev;
    e.epoch = r->epoch;
    e.step_in_epoch = r->steps_before + ev->step_in_epoch;
    e.steps_per_epoch = r->steps_per_epoch;
    if (r->cb(&e, r->user)) {
        r->user_stop = 1;
        return 1;
    }
    return 0;
}

/* values per row: the dims after the first */
static uint64_t row_numel(const rt_client_array *a)
{
    uint64_t k = 1;
    for (int d = 1; d < a->ndim; d++)
        k *= (uint64_t)a->shape[d];
    return k;
}

static int unmergeable(const char *name)
{
    return strstr(name, "auc") || strstr(name, "precision") || strstr(name, "recall");
}

static int is_rmse(const char *name)
{
    const size_t l = strlen(name);
    return l >= 4 && !strcmp(name + l - 4, "rmse");
}

/* what is averaged over samples: the value, or RMSE's square */
static double mean_term(const rt_client_metrics *m, int i)
{
    return is_rmse(m->value_name[i]) ? m->values[i] * m->values[i] : m->values[i];
}

/* sums of samples * value into acc (count: the samples so far) */
static int merge(rt_client *c, rt_client_metrics *acc, const rt_client_metrics *m)
{
    const double w = (double)m->samples;
    if (acc->samples == 0) {
        *acc = *m;
        acc->loss = m->loss * w;
        acc->accuracy = m->accuracy * w;
        for (int i = 0; i < m->n_values; i++) {
            if (unmergeable(m->value_name[i]))
                return rt__err(c, RT_EINVAL,
                               "fit on arrays over one upload: metric %s is not a mean over "
                               "samples and cannot be combined over chunks; leave it out",
                               m->value_name[i]);
            acc->values[i] = mean_term(m, i) * w;
        }
        return 0;
    }
    acc->loss += m->loss * w;
    acc->accuracy += m->accuracy * w;
    for (int i = 0; i < m->n_values && i < acc->n_values; i++)
        acc->values[i] += mean_term(m, i) * w;
    acc->samples += m->samples;
    return 0;
}

/* the sums as means (RMSE: the root of the mean square) */
static void merged(rt_client_metrics *m)
{
    const double n = m->samples ? (double)m->samples : 1.0;
    m->loss /= n;
    m->accuracy /= n;
    for (int i = 0; i < m->n_values; i++)
        m->values[i] = is_rmse(m->value_name[i]) ? sqrt(m->values[i] / n) : m->values[i] / n;
}

/* rows [lo, lo + n) of a (rows first), or NULL for NULL */
static const rt_client_array *rows_of(const rt_client_array *a, int64_t lo, int64_t n,
                                      rt_client_array *view)
{
    if (!a)
        return NULL;
    *view = *a;
    const uint64_t row = rt_client_dtype_size(a->dtype) * (uint64_t)row_numel(a);
    view->data = (const char *)a->data + (uint64_t)lo * row;
    view->shape[0] = n;
    return view;
}

int rt_client_fit_arrays(rt_client *c, const rt_client_fit_arrays_params *p, rt_client_fit_cb cb,
                         void *user)
{
    if (!c || !p || !p->x || !p->y)
        return RT_EINVAL;
    const rt_client_array *arr[3] = {p->x, p->y, p->sample_weights};
    const int64_t n = p->x->ndim > 0 ? p->x->shape[0] : 0;
    uint64_t row = 0;
    for (int i = 0; i < 3; i++) {
        if (!arr[i])
            continue;
        if (arr[i]->ndim < 1 || arr[i]->shape[0] != n || !rt_client_dtype_size(arr[i]->dtype))
            return rt__err(c, RT_ESHAPE,
                           "fit on arrays: x, y and the sample weights need the same rows and "
                           "a dtype");
        row += rt_client_dtype_size(arr[i]->dtype) * (uint64_t)row_numel(arr[i]);
    }
    const char *name = p->name ? p->name : "data";
    uint64_t limit = p->max_upload_bytes;
    if (!limit) {
        rt_client_info info;
        int rc = rt_client_info_get(c, &info);
        if (rc < 0)
            return rc;
        limit = info.max_upload_bytes ? info.max_upload_bytes : info.max_dataset_bytes;
        rt_client_info_free(&info);
    }
    rt_client_fit_params fp = p->fit;
    rt_client_dataset ds;
    if (!limit || (uint64_t)n * row <= limit) { /* one upload, one Fit */
        int rc = rt_client_upload_weighted(c, fp.session, name, p->x, p->y, p->sample_weights, &ds);
        if (rc < 0)
            return rc;
        fp.dataset = ds.id;
        return rt_client_fit(c, &fp, cb, user);
    }
    const uint64_t B = p->batch_size;
    if (B == 0)
        return rt__err(c, RT_EINVAL, "fit on arrays over one upload needs the batch size");
    if (fp.steps_per_epoch)
        return rt__err(c, RT_EINVAL,
                       "fit on arrays over one upload: steps_per_epoch is not supported "
                       "(an epoch is one pass over the rows)");
    if (fp.epochs == 0)
        return rt__err(c, RT_EINVAL, "Fit: epochs must be at least 1");
    const uint64_t batches = (limit / 2) / (B * row);
    if (batches == 0)
        return rt__err(c, RT_ETOOBIG,
                       "one batch of %llu rows is %llu bytes, over half of the daemon's "
                       "max_upload_bytes %llu: use a smaller batch",
                       (unsigned long long)B, (unsigned long long)(B * row),
                       (unsigned long long)limit);
    const int64_t chunk = (int64_t)(batches * B);
    chunk_run r = {.cb = cb, .user = user, .steps_per_epoch = ((uint64_t)n + B - 1) / B};
    int rc = 0;
    for (uint32_t e = 0; e < fp.epochs && rc == 0; e++) {
        rt_client_metrics acc;
        memset(&acc, 0, sizeof acc);
        r.epoch = e + 1;
        r.steps_before = 0;
        for (int64_t lo = 0; lo < n && rc == 0; lo += chunk) {
            const int64_t k = n - lo < chunk ? n - lo : chunk;
            rt_client_array v[3];
            rc = rt_client_upload_weighted(c, fp.session, name, rows_of(p->x, lo, k, &v[0]),
                                           rows_of(p->y, lo, k, &v[1]),
                                           rows_of(p->sample_weights, lo, k, &v[2]), &ds);
            if (rc < 0)
                break;
            rt_client_fit_params one = fp;
            one.dataset = ds.id;
            one.val_dataset = NULL;
            one.epochs = 1;
            r.got_end = 0;
            rc = rt_client_fit(c, &one, chunk_event, &r);
            if (rc < 0)
                break;
            if (!r.got_end) {
                rc = rt__err(c, RT_EPROTO, "Fit over a chunk ended without its epoch");
                break;
            }
            rc = merge(c, &acc, &r.end);
            r.steps_before += ((uint64_t)k + B - 1) / B;
        }
        if (rc < 0)
            break;
        rt_client_fit_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = RT_FIT_EPOCH_END;
        ev.epoch = e + 1;
        ev.step = r.step;
        ev.epoch_end.epoch = e + 1;
        ev.epoch_end.steps = r.step;
        merged(&acc);
        ev.epoch_end.train = acc;
        if (fp.val_dataset && *fp.val_dataset) {
            if ((rc = rt_client_evaluate(c, fp.session, fp.program, fp.val_dataset,
                                         &ev.epoch_end.val)) < 0)
                break;
            ev.epoch_end.has_val = 1;
        }
        if (cb && cb(&ev, user)) {
            r.user_stop = 1;
            break;
        }
    }
    if (r.user_stop)
        return rt__err(c, RT_ECANCELLED, "Fit: cancelled by the callback");
    if (rc < 0)
        return rc;
    if (cb) {
        rt_client_fit_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = RT_FIT_DONE;
        ev.done = 1;
        ev.step = r.step;
        cb(&ev, user);
    }
    return 0;
}
