/* rt_stream.c - streamed datasets: spool file of decoded rows, shuffle
 * buffer order, mapped reads on the step's thread or prefetching workers
 * (rt_stream.h). */
#include "rt_stream.h"
#include "rt_data.h"
#include "rt_errf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <omp.h>

#include "rt_data.h"

/* bytes of all spool files, for --max-spool-bytes */
static uint64_t spool_total;

/* the pipeline's second RNG stream (rt_engine.h: augmentation is the first) */
#define RT__STREAM_SHUFFLE_BUFFER (RT_RNG_STREAM_AUGMENT + 1)

typedef struct slot {
    float *x;     /* batch * per floats */
    int64_t *idx; /* the samples of its rows */
    int64_t epoch, pos, nb;
    int64_t next, done; /* rows handed out, rows decoded */
    int rc;
    char msg[200];
} slot;

/* One thread's read scratch: a row. */
typedef struct scratch {
    uint8_t *row;
    int ok;
} scratch;

static void scratch_free(scratch *sc);

struct rt_stream {
    rt_stream_rows R;
    float plain[3][256]; /* RT_ROWS_U8_IMAGE without augmentation */
    uint64_t row_bytes;
    int fd;
    char path[PATH_MAX];
    int64_t n, max_n;
    uint64_t file_bytes;
    uint64_t written; /* bytes appended so far */
    uint64_t charged; /* counted in spool_total */
    uint64_t map_max;
    const uint8_t *map; /* the mapped file, or NULL: pread */
    int threads, prefetch;
    int64_t shuffle_buffer;

    pthread_mutex_t mu;
    pthread_cond_t work_cv, ready_cv;
    pthread_t *th;
    int nth, stop;

    /* what is being produced: the use it was asked for, the batches from
     * seq head (the next one taken) to sched (the next one scheduled) */
    int active;
    uint64_t seed;
    int64_t batch;
    int shuffle, augment, eval;
    /* the draws' key: a batch of epoch e draws on epoch aug_base + (e -
     * aug_at), its rows on row0 + their samples */
    uint64_t aug_base, row0;
    int64_t aug_at;
    int64_t head, sched;
    int64_t h_epoch, h_pos, s_epoch, s_pos;
    int s_end;      /* evaluation: every batch is scheduled */
    int64_t busy;   /* rows being decoded outside the lock */
    int64_t *order; /* the order of (order_seed, order_epoch) */
    int64_t order_epoch;
    uint64_t order_seed;
    slot *slots;
    int64_t slot_batch;      /* rows the slot buffers hold */
    pthread_mutex_t fill_mu; /* one rt_stream_fill at a time */
    scratch *team;           /* the filling thread's OpenMP team's, under fill_mu */
    int n_team, team_init;
};

int rt_stream_order(int64_t n, int64_t buf, uint64_t seed, int64_t epoch, int64_t *out)
{
    if (buf <= 1) {
        for (int64_t k = 0; k < n; k++)
            out[k] = k;
        return 0;
    }
    /* tf.data's Dataset.shuffle: draw slot j of the buffer, refill it with
     * the next record; when the records run out the buffer shrinks. */
    int64_t size = buf < n ? buf : n, next = size;
    int64_t *b = malloc(sizeof(int64_t) * (size_t)size);
    if (!b)
        return RT_ENOMEM;
    for (int64_t k = 0; k < size; k++)
        b[k] = k;
    for (int64_t k = 0; k < n; k++) {
        uint64_t r =
            rt_rng_u64(seed, RT__STREAM_SHUFFLE_BUFFER, ((uint64_t)epoch << 32) | (uint64_t)k);
        int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)size) >> 64);
        out[k] = b[j];
        if (next < n)
            b[j] = next++;
        else
            b[j] = b[--size];
    }
    free(b);
    return 0;
}

/* A stream with its config and no spool yet. */
static rt_stream *stream_new(const rt_stream_config *cfg, int64_t shuffle_buffer)
{
    rt_stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->fd = -1;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    st->threads = cfg && cfg->threads > 0 ? cfg->threads : cpus > 0 ? (int)cpus : 1;
    st->prefetch = cfg && cfg->prefetch > 0 ? cfg->prefetch : RT_STREAM_PREFETCH_DEFAULT;
    st->shuffle_buffer = shuffle_buffer > 0               ? shuffle_buffer
                         : cfg && cfg->shuffle_buffer > 0 ? cfg->shuffle_buffer
                                                          : RT_STREAM_SHUFFLE_DEFAULT;
    st->order_epoch = -1;
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->fill_mu, NULL);
    pthread_cond_init(&st->work_cv, NULL);
    pthread_cond_init(&st->ready_cv, NULL);
    return st;
}

/* Charge need bytes to --max-spool-bytes, check the disk's room, and open
 * the (unlinked) spool file; nothing is written yet. */
static int spool_open(rt_stream *st, uint64_t need, const rt_stream_config *cfg, char *err,
                      size_t errlen)
{
    const char *dir =
        cfg && cfg->spool_dir && *cfg->spool_dir ? cfg->spool_dir : RT_SPOOL_DIR_DEFAULT;
    /* room: under --max-spool-bytes for all streamed sets, and the disk
     * keeps RT_SPOOL_DISK_RESERVE free; checked before writing anything */
    const uint64_t cap = cfg ? cfg->max_spool_bytes : 0;
    uint64_t held = __atomic_add_fetch(&spool_total, need, __ATOMIC_RELAXED);
    st->charged = need;
    if (cap && held > cap)
        return rt_errf(
            err, errlen, RT_ETOOBIG,
            "streamed datasets would hold %llu bytes on disk, over --max-spool-bytes %llu",
            (unsigned long long)held, (unsigned long long)cap);
    struct statvfs vfs;
    if (statvfs(dir, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < need + RT_SPOOL_DISK_RESERVE)
        return rt_errf(
            err, errlen, RT_ETOOBIG,
            "spool dir %.120s has %llu bytes free; the dataset needs %llu and %llu stay free", dir,
            (unsigned long long)vfs.f_bavail * vfs.f_frsize, (unsigned long long)need,
            (unsigned long long)RT_SPOOL_DISK_RESERVE);
    snprintf(st->path, sizeof st->path, "%s/rtrain-spool-XXXXXX", dir);
    st->fd = mkstemp(st->path);
    if (st->fd < 0)
        return rt_errf(err, errlen, RT_EIO, "spool dir %.120s: %s", dir, strerror(errno));
    unlink(st->path);
    return 0;
}

static int spool_write(rt_stream *st, const uint8_t *p, size_t len, char *err, size_t errlen)
{
    for (size_t w = 0; w < len;) {
        ssize_t r = write(st->fd, p + w, len - w);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            const char *dir = strrchr(st->path, '/');
            return rt_errf(err, errlen, RT_EIO, "spool dir %.*s: %s",
                           dir ? (int)(dir - st->path) : 0, st->path,
                           strerror(r < 0 ? errno : ENOSPC));
        }
        w += (size_t)r;
    }
    return 0;
}

uint64_t rt_stream_row_bytes(const rt_stream_rows *r)
{
    return (uint64_t)r->u8_len + 4 * (uint64_t)(r->per - r->u8_len);
}

int rt_stream_begin(const rt_stream_rows *rows, int64_t max_n, int64_t shuffle_buffer,
                    const rt_stream_config *cfg, rt_stream **out, char *err, size_t errlen)
{
    *out = NULL;
    const rt_stream_rows *r = rows;
    if (r->per < 1 || r->u8_off < 0 || r->u8_len < 0 || r->u8_off + r->u8_len > r->per ||
        (r->u8_len && (r->u8_kind < RT_ROWS_U8_VALUE || r->u8_kind > RT_ROWS_U8_IMAGE)) ||
        (r->u8_len && r->u8_kind == RT_ROWS_U8_IMAGE &&
         (int64_t)r->img.h * r->img.w * r->img.c != r->u8_len) ||
        max_n < 1 || (uint64_t)max_n > UINT64_MAX / 8 / rt_stream_row_bytes(r))
        return rt_errf(err, errlen, RT_EINVAL, "bad stream rows (%lld rows of %lld)",
                       (long long)max_n, (long long)r->per);
    rt_stream *st = stream_new(cfg, shuffle_buffer);
    if (!st)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory");
    st->R = *r;
    if (r->u8_len && r->u8_kind == RT_ROWS_U8_IMAGE)
        rt_image_plain_lut(&r->img, st->plain);
    st->row_bytes = rt_stream_row_bytes(r);
    st->max_n = max_n;
    st->map_max = cfg ? cfg->map_max : 0;
    int rc = spool_open(st, st->row_bytes * (uint64_t)max_n, cfg, err, errlen);
    if (rc < 0) {
        rt_stream_destroy(st);
        return rc;
    }
    *out = st;
    return 0;
}

int rt_stream_write(rt_stream *st, const void *data, size_t len, char *err, size_t errlen)
{
    if (st->n || len > st->row_bytes * (uint64_t)st->max_n - st->written)
        return rt_errf(err, errlen, RT_EINVAL, "more rows than the stream was opened for");
    int rc = spool_write(st, data, len, err, errlen);
    if (rc == 0)
        st->written += len;
    return rc;
}

int rt_stream_end(rt_stream *st, char *err, size_t errlen)
{
    if (st->n || st->written == 0 || st->written % st->row_bytes)
        return rt_errf(err, errlen, RT_EINVAL, "the stream got %llu bytes, not whole rows",
                       (unsigned long long)st->written);
    st->n = (int64_t)(st->written / st->row_bytes);
    st->file_bytes = st->written;
    /* give back the room of rows never written (records skipped) */
    __atomic_sub_fetch(&spool_total, st->charged - st->file_bytes, __ATOMIC_RELAXED);
    st->charged = st->file_bytes;
    if (st->file_bytes <= st->map_max && st->file_bytes <= SIZE_MAX) {
        void *m = mmap(NULL, (size_t)st->file_bytes, PROT_READ, MAP_SHARED, st->fd, 0);
        if (m != MAP_FAILED) {
            /* read in shuffle-buffer order: near-sequential, mostly */
            madvise(m, (size_t)st->file_bytes, MADV_WILLNEED);
            st->map = m;
        }
    }
    return 0;
}

static void stop_workers(rt_stream *st)
{
    pthread_mutex_lock(&st->mu);
    st->stop = 1;
    pthread_cond_broadcast(&st->work_cv);
    pthread_mutex_unlock(&st->mu);
    for (int i = 0; i < st->nth; i++)
        pthread_join(st->th[i], NULL);
    st->nth = 0;
}

void rt_stream_destroy(rt_stream *st)
{
    if (!st)
        return;
    stop_workers(st);
    free(st->th);
    if (st->fd >= 0)
        close(st->fd);
    if (st->slots)
        for (int i = 0; i < st->prefetch; i++) {
            free(st->slots[i].x);
            free(st->slots[i].idx);
        }
    free(st->slots);
    free(st->order);
    if (st->map)
        munmap((void *)st->map, (size_t)st->file_bytes);
    for (int i = 0; i < st->n_team; i++)
        scratch_free(&st->team[i]);
    free(st->team);
    __atomic_sub_fetch(&spool_total, st->charged, __ATOMIC_RELAXED);
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->fill_mu);
    pthread_cond_destroy(&st->work_cv);
    pthread_cond_destroy(&st->ready_cv);
    free(st);
}

int64_t rt_stream_samples(const rt_stream *st) { return st->n; }
int rt_stream_mapped(const rt_stream *st) { return st->map != NULL; }
uint64_t rt_stream_file_bytes(const rt_stream *st) { return st->file_bytes; }
int rt_stream_threads(const rt_stream *st) { return st->threads; }
int64_t rt_stream_shuffle_buffer(const rt_stream *st) { return st->shuffle_buffer; }

static int64_t batches(const rt_stream *st) { return (st->n + st->batch - 1) / st->batch; }

/* Next batch position after (epoch, pos); 0 when evaluation is done. */
static int advance(const rt_stream *st, int64_t *epoch, int64_t *pos)
{
    if (*pos + 1 < batches(st)) {
        (*pos)++;
        return 1;
    }
    if (st->eval)
        return 0;
    (*epoch)++;
    *pos = 0;
    return 1;
}

/* Under mu: give the next free slot the next batch. 0 when nothing can be
 * scheduled (ring full, evaluation done, out of memory for the order). */
static int schedule(rt_stream *st)
{
    if (!st->active || st->s_end || st->sched >= st->head + st->prefetch)
        return 0;
    slot *sl = &st->slots[st->sched % st->prefetch];
    const int64_t B = st->batch, start = st->s_pos * B;
    sl->epoch = st->s_epoch;
    sl->pos = st->s_pos;
    sl->nb = st->n - start < B ? st->n - start : B;
    sl->next = sl->done = 0;
    sl->rc = 0;
    sl->msg[0] = 0;
    if (!st->eval && st->shuffle) {
        if (st->order_epoch != st->s_epoch || st->order_seed != st->seed) {
            if (!st->order && !(st->order = malloc(sizeof(int64_t) * (size_t)st->n))) {
                sl->rc = RT_ENOMEM;
                snprintf(sl->msg, sizeof sl->msg, "out of memory for the epoch order");
                sl->next = sl->done = sl->nb;
                goto scheduled;
            }
            if (rt_stream_order(st->n, st->shuffle_buffer, st->seed, st->s_epoch, st->order) < 0) {
                sl->rc = RT_ENOMEM;
                snprintf(sl->msg, sizeof sl->msg, "out of memory for the shuffle buffer");
                sl->next = sl->done = sl->nb;
                goto scheduled;
            }
            st->order_epoch = st->s_epoch;
            st->order_seed = st->seed;
        }
        memcpy(sl->idx, st->order + start, sizeof(int64_t) * (size_t)sl->nb);
    } else {
        for (int64_t r = 0; r < sl->nb; r++)
            sl->idx[r] = start + r;
    }
scheduled:
    st->sched++;
    if (!advance(st, &st->s_epoch, &st->s_pos))
        st->s_end = 1;
    if (sl->done == sl->nb)
        pthread_cond_broadcast(&st->ready_cv);
    return 1;
}

static void scratch_init(const rt_stream *st, scratch *sc)
{
    sc->row = malloc((size_t)st->row_bytes);
    sc->ok = sc->row != NULL;
}

static void scratch_free(scratch *sc) { free(sc->row); }

/* Rows a worker claims per lock: about 64 KiB of rows, 8 to 256 of them.
 * Fewer hand-offs of mu (a worker preempted while holding it stalls the
 * others on a loaded machine), and still several claims per batch of
 * large rows so all workers share one. */
static int64_t rows_per_claim(const rt_stream *st)
{
    uint64_t k = (UINT64_C(1) << 16) / st->row_bytes;
    return k < 8 ? 8 : k > 256 ? 256 : (int64_t)k;
}

static int pread_all(const rt_stream *st, uint8_t *dst, uint64_t len, uint64_t off, char *msg,
                     size_t ml)
{
    for (uint64_t got = 0; got < len;) {
        ssize_t n = pread(st->fd, dst + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return rt_errf(msg, ml, RT_EIO, "reading the spool: %s",
                           n < 0 ? strerror(errno) : "short file");
        got += (uint64_t)n;
    }
    return 0;
}

/* A row's bytes into x: the 8-bit block converted as the in-memory path
 * converts it (augmented: with the draws of (key_epoch, key_row)), the
 * other floats copied. */
static void convert_row(const rt_stream *st, const uint8_t *row, uint64_t key_row,
                        uint64_t key_epoch, int augment, uint64_t seed, float *x)
{
    const rt_stream_rows *R = &st->R;
    const uint8_t *f = row + R->u8_len; /* the f32 values, unaligned */
    if (R->u8_off)
        memcpy(x, f, sizeof(float) * (size_t)R->u8_off);
    const int64_t rest = R->per - R->u8_off - R->u8_len;
    if (rest)
        memcpy(x + R->u8_off + R->u8_len, f + 4 * R->u8_off, sizeof(float) * (size_t)rest);
    float *xb = x + R->u8_off;
    switch (R->u8_len ? R->u8_kind : 0) {
    case RT_ROWS_U8_VALUE:
        for (int64_t j = 0; j < R->u8_len; j++)
            xb[j] = (float)row[j];
        break;
    case RT_ROWS_U8_UNIT:
        for (int64_t j = 0; j < R->u8_len; j++)
            xb[j] = (float)row[j] / 255.0f;
        break;
    case RT_ROWS_U8_IMAGE:
        if (augment) {
            rt_image_aug a;
            rt_image_aug_draw(&R->img, seed, key_epoch, key_row, &a);
            rt_image_to_input(&R->img, row, xb, &a);
        } else {
            rt_image_lut_apply(&R->img, st->plain, row, xb);
        }
        break;
    default: break;
    }
}

/* One sample into x through the thread's scratch; 0 or an error with a
 * message. Thread-safe. */
static int decode_one(const rt_stream *st, int64_t sample, uint64_t row0, uint64_t key_epoch,
                      int augment, uint64_t seed, float *x, scratch *sc, char *msg, size_t ml)
{
    if (!sc->ok)
        return rt_errf(msg, ml, RT_ENOMEM, "out of memory for read scratch");
    int rc = pread_all(st, sc->row, st->row_bytes, (uint64_t)sample * st->row_bytes, msg, ml);
    if (rc == 0)
        convert_row(st, sc->row, row0 + (uint64_t)sample, key_epoch, augment, seed, x);
    return rc;
}

int rt_stream_augments(const rt_stream *st)
{
    return st->R.u8_len && st->R.u8_kind == RT_ROWS_U8_IMAGE && rt_image_spec_augments(&st->R.img);
}

/* The draws' epoch of a training batch of epoch e, as u keys it. */
static uint64_t aug_epoch(const rt_stream_use *u, int64_t e)
{
    return u->aug_keyed ? u->aug_epoch : (uint64_t)e;
}

/* Under mu: claim up to max rows of sl and decode them with mu released,
 * on this thread (team NULL) or on an OpenMP team with one scratch per
 * thread (n_team of them). */
static void decode_rows(rt_stream *st, slot *sl, int64_t max, scratch *sc, scratch *team,
                        int n_team)
{
    const int64_t r0 = sl->next, k = sl->nb - r0 < max ? sl->nb - r0 : max;
    sl->next += k;
    /* a slot decoded ahead, past the epoch it was asked in, draws on the
     * next epochs: its key is checked when it is taken (fill_locked) */
    const int augment = st->augment && !st->eval && rt_stream_augments(st);
    const uint64_t key_epoch = augment ? st->aug_base + (uint64_t)(sl->epoch - st->aug_at) : 0,
                   row0 = st->row0;
    const uint64_t seed = st->seed;
    st->busy++;
    pthread_mutex_unlock(&st->mu);

    char msg[200] = "";
    int rc = 0;
    int64_t bad = INT64_MAX; /* the first failing row, as in row order */
    if (!team) {
        for (int64_t r = r0; r < r0 + k && rc == 0; r++) {
            rc = decode_one(st, sl->idx[r], row0, key_epoch, augment, seed, sl->x + r * st->R.per,
                            sc, msg, sizeof msg);
            if (rc < 0)
                bad = r;
        }
    } else {
#pragma omp parallel for schedule(dynamic, 4) num_threads(n_team)
        for (int64_t r = r0; r < r0 + k; r++) {
            char m[200];
            int t = omp_get_thread_num();
            int e = decode_one(st, sl->idx[r], row0, key_epoch, augment, seed,
                               sl->x + r * st->R.per, &team[t < n_team ? t : 0], m, sizeof m);
            if (e < 0) {
#pragma omp critical(rt__stream_err)
                if (r < bad) {
                    bad = r;
                    rc = e;
                    memcpy(msg, m, sizeof msg);
                }
            }
        }
    }

    pthread_mutex_lock(&st->mu);
    st->busy--;
    if (rc < 0 && sl->rc == 0) {
        sl->rc = rc;
        snprintf(sl->msg, sizeof sl->msg, "sample %lld: %.170s", (long long)sl->idx[bad], msg);
    }
    sl->done += k;
    if (sl->done == sl->nb || st->busy == 0)
        pthread_cond_broadcast(&st->ready_cv);
}

static void *worker(void *arg)
{
    rt_stream *st = arg;
    scratch sc;
    scratch_init(st, &sc);
    pthread_mutex_lock(&st->mu);
    while (!st->stop) {
        slot *sl = NULL;
        for (int64_t q = st->head; q < st->sched; q++) {
            slot *c = &st->slots[q % st->prefetch];
            if (c->next < c->nb) {
                sl = c;
                break;
            }
        }
        if (sl)
            decode_rows(st, sl, rows_per_claim(st), &sc, NULL, 0);
        else if (!schedule(st))
            pthread_cond_wait(&st->work_cv, &st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    scratch_free(&sc);
    return NULL;
}

/* Under mu: drop the batches in flight and start producing at (epoch, pos)
 * for u. */
static int restart(rt_stream *st, const rt_stream_use *u, int64_t epoch, int64_t pos, char *err,
                   size_t errlen)
{
    const int eval = epoch == RT_EPOCH_EVAL;
    /* no new rows; wait for the rows being decoded into the buffers */
    st->active = 0;
    for (int64_t q = st->head; q < st->sched; q++)
        st->slots[q % st->prefetch].next = st->slots[q % st->prefetch].nb;
    while (st->busy > 0)
        pthread_cond_wait(&st->ready_cv, &st->mu);
    st->head = st->sched = 0;
    if (!st->slots && !(st->slots = calloc((size_t)st->prefetch, sizeof *st->slots)))
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory for prefetch buffers");
    if (st->slot_batch != u->batch) {
        for (int i = 0; i < st->prefetch; i++) {
            slot *sl = &st->slots[i];
            free(sl->x);
            free(sl->idx);
            sl->x = malloc(sizeof(float) * (size_t)(u->batch * st->R.per));
            sl->idx = malloc(sizeof(int64_t) * (size_t)u->batch);
            if (!sl->x || !sl->idx) {
                st->slot_batch = 0;
                return rt_errf(err, errlen, RT_ENOMEM,
                               "out of memory for %d prefetch batches of %lld samples",
                               st->prefetch, (long long)u->batch);
            }
        }
        st->slot_batch = u->batch;
    }
    st->seed = u->seed;
    st->batch = u->batch;
    st->shuffle = u->shuffle;
    st->augment = u->augment;
    st->aug_base = eval ? 0 : aug_epoch(u, epoch);
    st->aug_at = epoch;
    st->row0 = u->row0;
    st->eval = eval;
    st->h_epoch = st->s_epoch = epoch;
    st->h_pos = st->s_pos = pos;
    st->s_end = 0;
    st->active = 1;
    if (!st->th && !(st->th = calloc((size_t)st->threads, sizeof *st->th)))
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory");
    while (st->nth < st->threads) {
        if (pthread_create(&st->th[st->nth], NULL, worker, st) != 0) {
            if (st->nth > 0)
                break; /* fewer workers, same batches */
            st->active = 0;
            return rt_errf(err, errlen, RT_ENOMEM, "cannot start decode workers");
        }
        st->nth++;
    }
    pthread_cond_broadcast(&st->work_cv);
    return 0;
}

static int fill_locked(const rt_stream_use *u, int64_t epoch, int64_t pos, int64_t nb, float *x,
                       void *y, float *w, char *err, size_t errlen)
{
    rt_stream *st = u->st;
    if (u->batch < 1 || pos < 0 || pos * u->batch >= st->n || nb < 1 || nb > u->batch)
        return rt_errf(err, errlen, RT_EINVAL, "batch %lld of %lld rows is outside the dataset",
                       (long long)pos, (long long)nb);
    pthread_mutex_lock(&st->mu);
    const int eval = epoch == RT_EPOCH_EVAL;
    /* the batches read ahead serve only when drawn on the key this one
     * asks for: a training batch's draws are keyed on the epoch that
     * rt_view_epoch gave u, which one read ahead into the next epoch may
     * not have guessed */
    const int same =
        st->active && st->seed == u->seed && st->batch == u->batch && st->shuffle == u->shuffle &&
        st->augment == u->augment && st->eval == eval && st->h_epoch == epoch && st->h_pos == pos &&
        (eval || (st->row0 == u->row0 &&
                  st->aug_base + (uint64_t)(epoch - st->aug_at) == aug_epoch(u, epoch)));
    int rc = 0;
    if (!same && (rc = restart(st, u, epoch, pos, err, errlen)) < 0) {
        pthread_mutex_unlock(&st->mu);
        return rc;
    }
    /* Waiting for the batch, the caller decodes the rows no worker has
     * claimed, on its OpenMP team: the workers may get no core while the
     * team spins between steps (libgomp's default wait policy) or the
     * machine is loaded, and the team is awake and ready then. */
    slot *sl = &st->slots[st->head % st->prefetch];
    while (st->sched <= st->head || sl->done < sl->nb) {
        if (st->sched <= st->head) {
            schedule(st);
            pthread_cond_broadcast(&st->work_cv);
        } else if (sl->next < sl->nb && st->n_team > 0) {
            /* the rest of the batch on the training threads' team */
            decode_rows(st, sl, sl->nb, NULL, st->team, st->n_team);
        } else {
            pthread_cond_wait(&st->ready_cv, &st->mu);
        }
    }
    if (sl->rc < 0) {
        rc = rt_errf(err, errlen, sl->rc, "%s", sl->msg);
        st->active = 0; /* the next call starts again */
        pthread_mutex_unlock(&st->mu);
        return rc;
    }
    if (nb > sl->nb) {
        st->active = 0;
        pthread_mutex_unlock(&st->mu);
        return rt_errf(err, errlen, RT_EINVAL, "batch %lld has %lld rows, not %lld", (long long)pos,
                       (long long)sl->nb, (long long)nb);
    }
    pthread_mutex_unlock(&st->mu);
    /* the slot is ours until head moves past it */
    memcpy(x, sl->x, sizeof(float) * (size_t)(nb * st->R.per));
    if (y && u->y) {
        const size_t lb = (size_t)u->lab_per * 4;
        for (int64_t r = 0; r < nb; r++)
            memcpy((char *)y + r * lb, (const char *)u->y + sl->idx[r] * lb, lb);
    }
    if (w && u->sw)
        for (int64_t r = 0; r < nb; r++)
            w[r] = u->sw[sl->idx[r]];
    pthread_mutex_lock(&st->mu);
    st->head++;
    if (!advance(st, &st->h_epoch, &st->h_pos))
        st->active = 0; /* evaluation done */
    pthread_cond_broadcast(&st->work_cv);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* A mapped stream, under fill_mu: the rows straight from the mapping into
 * x on this thread (its OpenMP team for a large batch). */
static int fill_mapped(const rt_stream_use *u, int64_t epoch, int64_t pos, int64_t nb, float *x,
                       void *y, float *w, char *err, size_t errlen)
{
    rt_stream *st = u->st;
    const int64_t start = pos * u->batch;
    if (nb > st->n - start)
        return rt_errf(err, errlen, RT_EINVAL, "batch %lld has %lld rows, not %lld", (long long)pos,
                       (long long)(st->n - start), (long long)nb);
    const int eval = epoch == RT_EPOCH_EVAL;
    const int64_t *idx = NULL;
    if (!eval && u->shuffle) {
        if (!st->order && !(st->order = malloc(sizeof(int64_t) * (size_t)st->n)))
            return rt_errf(err, errlen, RT_ENOMEM, "out of memory for the epoch order");
        if (st->order_epoch != epoch || st->order_seed != u->seed) {
            st->order_epoch = -1;
            if (rt_stream_order(st->n, st->shuffle_buffer, u->seed, epoch, st->order) < 0)
                return rt_errf(err, errlen, RT_ENOMEM, "out of memory for the shuffle buffer");
            st->order_epoch = epoch;
            st->order_seed = u->seed;
        }
        idx = st->order + start;
    }
    const int augment = u->augment && !eval && rt_stream_augments(st);
    const int64_t per = st->R.per;
    const uint64_t rb = st->row_bytes, ke = eval ? 0 : aug_epoch(u, epoch);
    /* the team only for batches worth a fork and a barrier (a 224 x 224
     * image batch, not a Fashion-MNIST one): under load a barrier can
     * cost a time slice */
#pragma omp parallel for schedule(static) if (nb * per >= (1 << 20))
    for (int64_t r = 0; r < nb; r++) {
        const int64_t s = idx ? idx[r] : start + r;
        convert_row(st, st->map + (uint64_t)s * rb, u->row0 + (uint64_t)s, ke, augment, u->seed,
                    x + r * per);
    }
    if (y && u->y) {
        const size_t lb = (size_t)u->lab_per * 4;
        for (int64_t r = 0; r < nb; r++)
            memcpy((char *)y + r * lb, (const char *)u->y + (idx ? idx[r] : start + r) * lb, lb);
    }
    if (w && u->sw)
        for (int64_t r = 0; r < nb; r++)
            w[r] = u->sw[idx ? idx[r] : start + r];
    return 0;
}

/* a held set (rt_data.h) in order: evaluation and prediction on rank 0
 * (its training batches come through the replicas, server/mpi) */
static int held_fill(const rt_stream_use *u, int64_t epoch, int64_t pos, int64_t nb, float *x,
                     void *y, float *w, char *err, size_t errlen)
{
    if (epoch != RT_EPOCH_EVAL)
        return rt_errf(err, errlen, RT_EINTERNAL,
                       "a held data set trains through the MPI "
                       "replicas only");
    const int64_t s = pos * u->batch;
    if (u->batch < 1 || pos < 0 || nb < 1 || nb > u->batch || s >= u->n || nb > u->n - s)
        return rt_errf(err, errlen, RT_EINVAL, "batch %lld of %lld rows is outside the dataset",
                       (long long)pos, (long long)nb);
    int rc = u->held->rows(u->held, s, nb, x, err, errlen);
    if (rc < 0)
        return rc;
    if (y && u->y)
        memcpy(y, (const char *)u->y + 4 * s * u->lab_per, (size_t)(4 * nb * u->lab_per));
    if (w && u->sw)
        memcpy(w, u->sw + s, sizeof(float) * (size_t)nb);
    return 0;
}

int rt_stream_fill(void *ud, int64_t epoch, int64_t pos, int64_t nb, float *x, void *y, float *w,
                   char *err, size_t errlen)
{
    const rt_stream_use *u = ud;
    if (u->held)
        return held_fill(u, epoch, pos, nb, x, y, w, err, errlen);
    rt_stream *st = u->st;
    if (u->batch < 1 || pos < 0 || pos >= (st->n + u->batch - 1) / u->batch || nb < 1 ||
        nb > u->batch)
        return rt_errf(err, errlen, RT_EINVAL, "batch %lld of %lld rows is outside the dataset",
                       (long long)pos, (long long)nb);
    pthread_mutex_lock(&st->fill_mu);
    if (st->map) {
        int rc = fill_mapped(u, epoch, pos, nb, x, y, w, err, errlen);
        pthread_mutex_unlock(&st->fill_mu);
        return rc;
    }
    if (!st->team_init) {
        st->team_init = 1;
        int n = omp_get_max_threads();
        st->team = calloc((size_t)(n > 0 ? n : 1), sizeof *st->team);
        for (int i = 0; st->team && i < n; i++) {
            scratch_init(st, &st->team[i]);
            if (!st->team[i].ok) {
                scratch_free(&st->team[i]);
                break;
            }
            st->n_team = i + 1;
        }
    }
    int rc = fill_locked(u, epoch, pos, nb, x, y, w, err, errlen);
    pthread_mutex_unlock(&st->fill_mu);
    return rc;
}
