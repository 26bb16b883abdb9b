/* rt_client_chunks.c - a fit, Evaluate and Predict on data larger than
 * one upload.
 *
 * The daemon holds an upload whole while it arrives, so one upload is at
 * most GetInfo's max_upload_bytes. rt_client_fit_rows sends rows up to
 * that size as one data set and one Fit; larger ones in chunks of whole
 * batches of at most half of it (as the Python client does): each epoch
 * takes an order of all rows (a permutation per epoch when shuffling, as
 * Keras shuffles arrays; row order otherwise), uploads its consecutive
 * slices and runs one Fit of one pass over each (the daemon starts a pass
 * at the first batch of a new data set), so an unshuffled program trains
 * on the batches of the one-upload fit in the same order and ends on the
 * same weights, bit for bit. The epoch's metrics are the sample-weighted
 * means of its chunks' (the daemon's epoch means), as Keras' trackers
 * weigh each batch by its size; validation over the limit is evaluated in
 * chunks and combined the same way. auc, precision and recall cannot be
 * combined that way and are refused. A chunk uploaded again (unshuffled,
 * or the validation's) costs a FindDataset while the daemon still holds
 * it. rt_client_evaluate_rows and rt_client_predict_rows send rows in row
 * order in the same chunks, combining the metrics the same way and
 * concatenating the outputs. */
#include "rt_client_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct chunk_run {
    rt_client_fit_cb cb;
    void *user;
    uint64_t epoch, steps_before, steps_per_epoch;
    uint64_t batch, chunk_rows; /* this chunk's rows */
    double loss_sum, acc_sum;   /* the epoch's chunks so far: sums */
    uint64_t samples;           /* ... and their samples */
    int got_end, user_stop, stopped;
    rt_client_metrics end; /* the chunk's epoch means */
    uint64_t step;         /* the last global step reported */
} chunk_run;

/* a chunk's events: progress goes on as the epoch's (running means over
 * the epoch so far), its epoch end is kept for the merge, its done event
 * is the caller's at the very end */
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
    if (ev->kind == RT_FIT_DONE && ev->stopped)
        r->stopped = 1;
    if (ev->kind != RT_FIT_PROGRESS || !r->cb)
        return 0;
    rt_client_fit_event e = *ev;
    e.epoch = r->epoch;
    e.step_in_epoch = r->steps_before + ev->step_in_epoch;
    if (r->steps_per_epoch)
        e.steps_per_epoch = r->steps_per_epoch;
    if (r->samples) {
        uint64_t s = ev->step_in_epoch * r->batch;
        if (s > r->chunk_rows)
            s = r->chunk_rows;
        const double n = (double)(r->samples + s);
        e.loss = (float)((r->loss_sum + ev->loss * (double)s) / n);
        e.accuracy = (float)((r->acc_sum + ev->accuracy * (double)s) / n);
    }
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

/* The epoch's order of n rows: a permutation drawn from (seed, epoch)
 * (Fisher-Yates on splitmix64), or row order. */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void epoch_order(uint64_t *order, uint64_t n, int shuffle, uint64_t seed, uint64_t epoch)
{
    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle)
        return;
    uint64_t s = seed ^ (epoch * 0xd1b54a32d192ed03ull);
    for (uint64_t i = n - 1; i > 0; i--) {
        /* an unbiased draw from [0, i]: the top bits of a 128-bit product,
         * retried in the rare region that would favour some values */
        const uint64_t range = i + 1, floor = -range % range;
        unsigned __int128 m;
        do
            m = (unsigned __int128)splitmix(&s) * range;
        while ((uint64_t)m < floor);
        const uint64_t j = (uint64_t)(m >> 64), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* Rows per chunk: whole batches (batch; 1 for an evaluation) of at most
 * half the limit, or RT_ETOOBIG with a message. */
static int chunk_rows(rt_client *c, const rt_client_rows *r, uint64_t limit, uint64_t batch,
                      const char *what, uint64_t *out)
{
    const uint64_t room = limit / 2 > r->fixed_bytes ? limit / 2 - r->fixed_bytes : 0;
    const uint64_t per = batch * (r->row_bytes ? r->row_bytes : 1);
    if (room / per == 0 && batch > 1)
        return rt__err(c, RT_ETOOBIG,
                       "%s: one batch of %llu rows is up to %llu bytes, over half of the "
                       "daemon's max_upload_bytes %llu: use a smaller batch",
                       what, (unsigned long long)batch, (unsigned long long)per,
                       (unsigned long long)limit);
    if (room / per == 0)
        return rt__err(c, RT_ETOOBIG,
                       "%s: one row is up to %llu bytes, over half of the daemon's "
                       "max_upload_bytes %llu",
                       what, (unsigned long long)per, (unsigned long long)limit);
    *out = room / per * batch;
    return 0;
}

/* The metrics of Evaluate over rows (in order) in chunks of per rows:
 * the chunks' combined. */
static int eval_chunks(rt_client *c, const char *session, const char *program, const char *name,
                       const rt_client_rows *r, const uint64_t *order, uint64_t per,
                       rt_client_metrics *out)
{
    rt_client_metrics acc, m;
    memset(&acc, 0, sizeof acc);
    for (uint64_t lo = 0; lo < r->n; lo += per) {
        const uint64_t k = r->n - lo < per ? r->n - lo : per;
        rt_client_dataset ds;
        int rc = r->upload(c, session, name, order + lo, k, &ds, r->user);
        if (rc < 0 || (rc = rt_client_evaluate(c, session, program, ds.id, &m)) < 0 ||
            (rc = merge(c, &acc, &m)) < 0)
            return rc;
    }
    merged(&acc);
    *out = acc;
    return 0;
}

static int eval_rows(rt_client *c, const rt_client_fit_rows_params *p, const uint64_t *order,
                     uint64_t vrows, rt_client_metrics *out)
{
    return eval_chunks(c, p->fit.session, p->fit.program, p->val_name ? p->val_name : "val",
                       &p->val, order, vrows, out);
}

static int upload_all(rt_client *c, const char *session, const char *name, const rt_client_rows *r,
                      const uint64_t *order, rt_client_dataset *ds)
{
    return r->upload(c, session, name, order, r->n, ds, r->user);
}

int rt_client_upload_limit(rt_client *c, uint64_t *limit)
{
    if (!c || !limit)
        return RT_EINVAL;
    rt_client_info info;
    int rc = rt_client_info_get(c, &info);
    if (rc < 0)
        return rc;
    *limit = info.max_upload_bytes ? info.max_upload_bytes : info.max_dataset_bytes;
    rt_client_info_free(&info);
    return 0;
}

/* The most one upload holds: given, or the daemon's */
static int upload_limit(rt_client *c, uint64_t given, uint64_t *limit)
{
    *limit = given;
    return given ? 0 : rt_client_upload_limit(c, limit);
}

int rt_client_fit_rows(rt_client *c, const rt_client_fit_rows_params *p, rt_client_fit_cb cb,
                       void *user)
{
    if (!c || !p || !p->train.n || !p->train.upload || (p->val.n && !p->val.upload))
        return RT_EINVAL;
    const char *name = p->name ? p->name : "data";
    uint64_t limit;
    int lrc = upload_limit(c, p->max_upload_bytes, &limit);
    if (lrc < 0)
        return lrc;
    const uint64_t n = p->train.n, vn = p->val.n;
    const int tr_one = !limit || p->train.bytes <= limit;
    const int va_one = !vn || p->val.bytes <= limit;
    rt_client_fit_params fp = p->fit;
    const uint64_t B = p->batch_size;
    uint64_t rows = n, vrows = vn;
    int rc = 0;
    if (!tr_one || !va_one) {
        if (fp.steps_per_epoch)
            return rt__err(c, RT_EINVAL,
                           "fit on data over one upload: steps_per_epoch is not supported "
                           "(an epoch is one pass over the rows)");
        if (fp.epochs == 0)
            return rt__err(c, RT_EINVAL, "Fit: epochs must be at least 1");
    }
    if (!tr_one && B == 0)
        return rt__err(c, RT_EINVAL, "fit on data over one upload needs the batch size");
    if ((!tr_one && (rc = chunk_rows(c, &p->train, limit, B, "fit", &rows)) < 0) ||
        (!va_one && (rc = chunk_rows(c, &p->val, limit, 1, "validation", &vrows)) < 0))
        return rc;
    const uint64_t most = n > vn ? n : vn;
    uint64_t *order = malloc(most * sizeof *order), *vorder = order;
    if (!order)
        return rt__err(c, RT_ENOMEM, "fit: out of memory for the row order");
    rt_client_dataset ds, vds;
    memset(&vds, 0, sizeof vds);
    if (vn && va_one) {
        epoch_order(order, vn, 0, 0, 0);
        if ((rc = upload_all(c, fp.session, p->val_name ? p->val_name : "val", &p->val, order,
                             &vds)) < 0)
            goto out;
        fp.val_dataset = vds.id;
    }
    if (tr_one) {
        epoch_order(order, n, 0, 0, 0);
        if ((rc = upload_all(c, fp.session, name, &p->train, order, &ds)) < 0)
            goto out;
        fp.dataset = ds.id;
        if (va_one) { /* one upload each: one Fit stream */
            rc = rt_client_fit(c, &fp, cb, user);
            goto out;
        }
    }
    const char *val_id = vn ? vds.id : fp.val_dataset; /* evaluated whole */
    chunk_run r = {.cb = cb,
                   .user = user,
                   .batch = B ? B : 1,
                   .steps_per_epoch = tr_one ? 0 : (n + B - 1) / B}; /* 0: the daemon's */
    for (uint32_t e = 0; e < fp.epochs && rc == 0 && !r.stopped; e++) {
        rt_client_metrics acc;
        memset(&acc, 0, sizeof acc);
        r.epoch = e + 1;
        r.steps_before = 0;
        r.loss_sum = r.acc_sum = 0;
        r.samples = 0;
        if (!tr_one)
            epoch_order(order, n, p->shuffle, p->seed, (uint64_t)p->first_epoch + e);
        uint64_t lo = 0;
        for (; lo < n && rc == 0; lo += rows) {
            const uint64_t k = n - lo < rows ? n - lo : rows;
            rt_client_fit_params one = fp;
            if (!tr_one) {
                rc = p->train.upload(c, fp.session, name, order + lo, k, &ds, p->train.user);
                if (rc < 0)
                    break;
                one.dataset = ds.id;
                /* the draws of augmented images: the whole set's epoch
                 * and row ids (the position in the epoch's order) */
                one.rows_before = lo;
                one.whole_steps_per_epoch = r.steps_per_epoch;
            }
            one.val_dataset = NULL;
            one.epochs = 1;
            r.got_end = 0;
            r.chunk_rows = k;
            rc = rt_client_fit(c, &one, chunk_event, &r);
            if (rc < 0)
                break;
            if (!r.got_end) {
                rc = r.stopped ? 0
                               : rt__err(c, RT_EPROTO, "Fit over a chunk ended without its epoch");
                break;
            }
            if ((rc = merge(c, &acc, &r.end)) < 0)
                break;
            r.loss_sum = acc.loss;
            r.acc_sum = acc.accuracy;
            r.samples = acc.samples;
            r.steps_before += (k + r.batch - 1) / r.batch;
            if (r.stopped)
                break;
        }
        /* stopped (rt_client_control) before the epoch's last chunk: no
         * epoch end for a part of an epoch */
        if (rc < 0 || !r.got_end || (r.stopped && lo + rows < n))
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
        if (vn && !va_one) {
            epoch_order(vorder, vn, 0, 0, 0);
            if ((rc = eval_rows(c, p, vorder, vrows, &ev.epoch_end.val)) < 0)
                break;
            ev.epoch_end.has_val = 1;
        } else if (val_id && *val_id) {
            if ((rc = rt_client_evaluate(c, fp.session, fp.program, val_id, &ev.epoch_end.val)) < 0)
                break;
            ev.epoch_end.has_val = 1;
        }
        if (cb && cb(&ev, user)) {
            r.user_stop = 1;
            break;
        }
    }
    if (r.user_stop)
        rc = rt__err(c, RT_ECANCELLED, "Fit: cancelled by the callback");
    if (rc == 0 && cb) {
        rt_client_fit_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = RT_FIT_DONE;
        ev.done = 1;
        ev.stopped = r.stopped;
        ev.step = r.step;
        cb(&ev, user);
    }
out:
    free(order);
    return rc;
}

/* ------------------------------------------------ evaluate, predict */

/* rows' order (row order) and the rows per upload: all of them when they
 * fit one upload, else whole batches of at most half of it */
static int plain_chunks(rt_client *c, const rt_client_rows *r, uint32_t batch, uint64_t given,
                        const char *what, uint64_t **order, uint64_t *per)
{
    uint64_t limit;
    int rc = upload_limit(c, given, &limit);
    if (rc < 0)
        return rc;
    *per = r->n;
    if (limit && r->bytes > limit &&
        (rc = chunk_rows(c, r, limit, batch ? batch : 1, what, per)) < 0)
        return rc;
    if (!(*order = malloc((r->n ? r->n : 1) * sizeof **order)))
        return rt__err(c, RT_ENOMEM, "%s: out of memory for the row order", what);
    epoch_order(*order, r->n, 0, 0, 0);
    return 0;
}

int rt_client_evaluate_rows(rt_client *c, const char *session, const char *program,
                            const char *name, const rt_client_rows *rows, uint32_t batch_size,
                            uint64_t max_upload_bytes, rt_client_metrics *out)
{
    if (!c || !session || !program || !rows || !rows->n || !rows->upload || !out)
        return RT_EINVAL;
    uint64_t *order, per;
    int rc = plain_chunks(c, rows, batch_size, max_upload_bytes, "evaluate", &order, &per);
    if (rc < 0)
        return rc;
    rc = eval_chunks(c, session, program, name ? name : "data", rows, order, per, out);
    free(order);
    return rc;
}

/* t's rows appended to out (the first chunk's tensor becomes out) */
static int append_rows(rt_client *c, rt_client_tensor *out, rt_client_tensor *t)
{
    if (!out->data) {
        *out = *t;
        memset(t, 0, sizeof *t);
        return 0;
    }
    int same = t->dtype == out->dtype && t->ndim == out->ndim && t->ndim >= 1;
    for (int d = 1; same && d < t->ndim; d++)
        same = t->shape[d] == out->shape[d];
    if (!same)
        return rt__err(c, RT_EPROTO, "predict over chunks: a chunk's outputs have another shape");
    char *b = realloc(out->data, out->nbytes + t->nbytes);
    if (!b)
        return rt__err(c, RT_ENOMEM, "predict: out of memory for the outputs");
    memcpy(b + out->nbytes, t->data, t->nbytes);
    out->data = b;
    out->nbytes += t->nbytes;
    out->shape[0] += t->shape[0];
    return 0;
}

int rt_client_predict_rows(rt_client *c, const char *session, const char *program, const char *name,
                           const rt_client_rows *rows, uint32_t batch_size,
                           uint64_t max_upload_bytes, rt_client_tensor *out)
{
    if (!c || !session || !program || !rows || !rows->n || !rows->upload || !out)
        return RT_EINVAL;
    memset(out, 0, sizeof *out);
    uint64_t *order, per;
    int rc = plain_chunks(c, rows, batch_size, max_upload_bytes, "predict", &order, &per);
    if (rc < 0)
        return rc;
    for (uint64_t lo = 0; lo < rows->n && rc == 0; lo += per) {
        const uint64_t k = rows->n - lo < per ? rows->n - lo : per;
        rt_client_dataset ds;
        rt_client_tensor t;
        memset(&t, 0, sizeof t);
        if ((rc = rows->upload(c, session, name ? name : "data", order + lo, k, &ds, rows->user)) <
                0 ||
            (rc = rt_client_predict_dataset(c, session, program, ds.id, &t)) < 0)
            break;
        if (t.ndim < 1 || t.shape[0] != (int64_t)k)
            rc = rt__err(c, RT_EPROTO, "predict over chunks: %lld outputs for a chunk of %llu rows",
                         t.ndim ? (long long)t.shape[0] : 0LL, (unsigned long long)k);
        else
            rc = append_rows(c, out, &t);
        rt_client_tensor_free(&t);
    }
    free(order);
    if (rc < 0)
        rt_client_tensor_free(out);
    return rc;
}

/* ------------------------------------------------------------ arrays */
typedef struct array_rows {
    const rt_client_array *a[3];
    uint64_t row[3]; /* bytes per row */
    char *buf[3];    /* the gathered rows */
    uint64_t cap;    /* rows buf holds */
} array_rows;

/* rows[0..k) of x, y and the weights: in place when consecutive, else
 * gathered */
static int arrays_upload(rt_client *c, const char *session, const char *name, const uint64_t *rows,
                         uint64_t k, rt_client_dataset *out, void *ud)
{
    array_rows *ar = ud;
    int run = 1;
    for (uint64_t i = 1; i < k && run; i++)
        run = rows[i] == rows[0] + i;
    rt_client_array v[3];
    for (int j = 0; j < 3; j++) {
        if (!ar->a[j])
            continue;
        v[j] = *ar->a[j];
        v[j].shape[0] = (int64_t)k;
        const char *src = ar->a[j]->data;
        if (run) {
            v[j].data = src + rows[0] * ar->row[j];
            continue;
        }
        if (k > ar->cap) {
            char *b = realloc(ar->buf[j], k * ar->row[j] + 1);
            if (!b)
                return rt__err(c, RT_ENOMEM, "fit: out of memory gathering a chunk");
            ar->buf[j] = b;
        }
        for (uint64_t i = 0; i < k; i++)
            memcpy(ar->buf[j] + i * ar->row[j], src + rows[i] * ar->row[j], ar->row[j]);
        v[j].data = ar->buf[j];
    }
    if (!run && k > ar->cap)
        ar->cap = k;
    return rt_client_upload_weighted(c, session, name, &v[0], ar->a[1] ? &v[1] : NULL,
                                     ar->a[2] ? &v[2] : NULL, out);
}

int rt_client_fit_arrays(rt_client *c, const rt_client_fit_arrays_params *p, rt_client_fit_cb cb,
                         void *user)
{
    if (!c || !p || !p->x || !p->y)
        return RT_EINVAL;
    array_rows ar = {.a = {p->x, p->y, p->sample_weights}};
    const int64_t n = p->x->ndim > 0 ? p->x->shape[0] : 0;
    uint64_t row = 0;
    for (int i = 0; i < 3; i++) {
        if (!ar.a[i])
            continue;
        if (ar.a[i]->ndim < 1 || ar.a[i]->shape[0] != n || !rt_client_dtype_size(ar.a[i]->dtype))
            return rt__err(c, RT_ESHAPE,
                           "fit on arrays: x, y and the sample weights need the same rows and "
                           "a dtype");
        ar.row[i] = rt_client_dtype_size(ar.a[i]->dtype) * row_numel(ar.a[i]);
        row += ar.row[i];
    }
    if (n <= 0)
        return rt__err(c, RT_ESHAPE, "fit on arrays: x has no rows");
    rt_client_fit_rows_params fr = {.fit = p->fit,
                                    .name = p->name,
                                    .train = {.n = (uint64_t)n,
                                              .bytes = (uint64_t)n * row,
                                              .row_bytes = row,
                                              .upload = arrays_upload,
                                              .user = &ar},
                                    .batch_size = p->batch_size,
                                    .shuffle = p->shuffle,
                                    .seed = p->seed,
                                    .max_upload_bytes = p->max_upload_bytes};
    int rc = rt_client_fit_rows(c, &fr, cb, user);
    for (int i = 0; i < 3; i++)
        free(ar.buf[i]);
    return rc;
}
