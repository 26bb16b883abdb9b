/* rt_ckpt.c - a program's checkpoint: its format, writing one atomically,
 * keeping the last K, and reading it back (rt_state.h).
 *
 * A checkpoint file:
 *
 *     "RTCKPT1\0"  u64 req_len   CompileRequest bytes
 *                  u64 meta_len  rt_ckpt_meta, then its n_fit_epochs
 *                                rt_fit_epoch (the resumable Fit's last
 *                                epochs, in ring order)
 *                  u64 exec_len  the exec's state (rt_exec_state_spans)
 *     u64 XXH3-64 of everything before it
 *
 * The exec's weights and optimizer slots are written from where they live
 * (no copy), so writing a checkpoint adds no memory the size of the model.
 * Integers are the host's (little-endian x86-64 and aarch64): a checkpoint
 * moves between daemons of the same build, as the state blob does. */
#include "rt_state.h"
#include "rt_program_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "rt_log.h"
#include "rt_metrics.h"
#include "rt_obs.h"
#include "rt_wire.h"

#define CK_MAGIC "RTCKPT1"
#define CK_HEAD 8
#define CK_TAIL 8

/* The resumable Fit's epochs a checkpoint holds: ring slots 0..n-1 (the
 * fit's epochs so far, at most the ring). */
static uint64_t fit_epochs_kept(const rt_program *p)
{
    if (!p->fit.id)
        return 0;
    int64_t d = p->fit_epochs - p->fit.first_epoch;
    return d <= 0 ? 0 : d < RT_FIT_RING ? (uint64_t)d : RT_FIT_RING;
}

/* The program's fields a checkpoint's meta carries, the same name on both
 * sides: one list for the save (fill_meta) and the restore
 * (rt_ckpt_apply_meta). */
#define RT__CKPT_FIELDS(X) \
    X(last_seq) X(fit_epochs) X(epoch_exec_ns) X(last_metrics) X(last_mean) X(fit)

static void fill_meta(const char *sid, const rt_program *p, rt_ckpt_meta *m)
{
    memset(m, 0, sizeof *m);
    memcpy(m->magic, "RTMETA2", 8);
    snprintf(m->session_id, sizeof m->session_id, "%s", sid);
    snprintf(m->program_id, sizeof m->program_id, "%s", p->id);
#define RT__TO_META(f) m->f = p->f;
    RT__CKPT_FIELDS(RT__TO_META)
#undef RT__TO_META
    memcpy(m->ring, p->ring, sizeof m->ring);
    m->n_fit_epochs = fit_epochs_kept(p);
}

void rt_ckpt_apply_meta(rt_program *p, const rt_ckpt_view *v)
{
    const rt_ckpt_meta *m = &v->meta;
#define RT__FROM_META(f) p->f = m->f;
    RT__CKPT_FIELDS(RT__FROM_META)
#undef RT__FROM_META
    memcpy(p->ring, m->ring, sizeof p->ring);
    memset(p->fit_ring, 0, sizeof p->fit_ring);
    if (m->n_fit_epochs)
        memcpy(p->fit_ring, v->fit_epochs, sizeof *p->fit_ring * m->n_fit_epochs);
    p->ckpt_dirty = 0;
    /* pipelined calls (after_seq) up to the restored seq have completed */
    p->pipe.done = p->pipe.seen = m->last_seq;
    p->pipe.failed = 0;
}

void rt_ckpt_apply_meta_into(rt_program *p, const rt_ckpt_view *v)
{
    const rt_ckpt_meta *m = &v->meta;
    p->fit_epochs = m->fit_epochs;
    p->epoch_exec_ns = m->epoch_exec_ns;
    memset(&p->fit, 0, sizeof p->fit);
    memset(p->fit_ring, 0, sizeof p->fit_ring);
    p->ckpt_partial = 0; /* a checkpoint is at a call boundary */
    __atomic_store_n(&p->ckpt_dirty, 1, __ATOMIC_RELEASE);
}

/* The spans of p's checkpoint, in file order; the checksum is the caller's. */
typedef struct ck_spans {
    uint64_t lens[3];
    rt_ckpt_meta meta;
    unsigned char ehdr[RT_EXEC_STATE_HDR];
    rt_exec_span sp[12]; /* 11 spans and the checksum rt_state_checkpoint appends */
    int n;
} ck_spans;

static int spans(const char *sid, const rt_program *p, ck_spans *k)
{
    rt_exec_span es[4];
    int rc = rt_exec_state_spans(p->exec, k->ehdr, es);
    if (rc < 0)
        return rc;
    fill_meta(sid, p, &k->meta);
    k->lens[0] = p->req_len;
    k->lens[1] = sizeof k->meta + sizeof *p->fit_ring * k->meta.n_fit_epochs;
    k->lens[2] = es[0].n + es[1].n + es[2].n + es[3].n;
    int n = 0;
    k->sp[n++] = (rt_exec_span){CK_MAGIC, CK_HEAD};
    k->sp[n++] = (rt_exec_span){&k->lens[0], 8};
    k->sp[n++] = (rt_exec_span){p->req, p->req_len};
    k->sp[n++] = (rt_exec_span){&k->lens[1], 8};
    k->sp[n++] = (rt_exec_span){&k->meta, sizeof k->meta};
    k->sp[n++] = (rt_exec_span){p->fit_ring, sizeof *p->fit_ring * k->meta.n_fit_epochs};
    k->sp[n++] = (rt_exec_span){&k->lens[2], 8};
    for (int i = 0; i < 4; i++)
        k->sp[n++] = es[i];
    k->n = n;
    return 0;
}

size_t rt_ckpt_size(const rt_program *p)
{
    return CK_HEAD + 24 + p->req_len + sizeof(rt_ckpt_meta) +
           sizeof *p->fit_ring * fit_epochs_kept(p) + rt_exec_state_size(p->exec) + CK_TAIL;
}

int rt_ckpt_build(const char *sid, const rt_program *p, uint8_t *buf, size_t len)
{
    ck_spans k;
    int rc = spans(sid, p, &k);
    if (rc < 0)
        return rc;
    if (len < rt_ckpt_size(p))
        return RT_EINVAL;
    size_t o = 0;
    for (int i = 0; i < k.n; i++) {
        if (k.sp[i].n)
            memcpy(buf + o, k.sp[i].p, k.sp[i].n);
        o += k.sp[i].n;
    }
    uint64_t h = XXH3_64bits(buf, o);
    memcpy(buf + o, &h, 8);
    rt_exec_state_release(p->exec);
    return 0;
}

/* The program record of a checkpoint is untrusted as the rest (a pushed
 * file, or one in the state directory with its XXH3 recomputed): its
 * counters must be what rt_state_checkpoint could have written, so that
 * Fit's resume arithmetic on them (rt_train.c fit_resume) cannot
 * overflow or index outside the epoch ring. */
static int check_meta(const rt_ckpt_meta *m, char *err, size_t errlen)
{
    const rt_fit_rec *f = &m->fit;
    if (m->fit_epochs < 0 || m->fit_epochs > RT_EXEC_MAX_STEP) {
        snprintf(err, errlen, "checkpoint's Fit epoch count %lld is out of range",
                 (long long)m->fit_epochs);
        return RT_EDATA;
    }
    if (!f->id) {
        if (m->n_fit_epochs) {
            snprintf(err, errlen, "checkpoint's Fit record does not add up");
            return RT_EDATA;
        }
        return 0;
    }
    int64_t total;
    const int64_t done = m->fit_epochs - f->first_epoch; /* both in 0..2^53 */
    if (f->first_epoch < 0 || f->first_epoch > m->fit_epochs || done > (int64_t)f->epochs ||
        f->spe < 1 || __builtin_mul_overflow((int64_t)f->epochs, f->spe, &total) ||
        f->steps_done < 0 || f->steps_done > total || (f->aligned & ~1) || (f->done & ~1) ||
        (f->stopped & ~1) ||
        m->n_fit_epochs != (uint64_t)(done < RT_FIT_RING ? done : RT_FIT_RING)) {
        snprintf(err, errlen, "checkpoint's Fit record (fit %016llx) does not add up",
                 (unsigned long long)f->id);
        return RT_EDATA;
    }
    return 0;
}

int rt_ckpt_parse(const uint8_t *buf, size_t len, rt_ckpt_view *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    if (len < CK_HEAD + 24 + CK_TAIL || memcmp(buf, CK_MAGIC, CK_HEAD) != 0) {
        snprintf(err, errlen, "not an rtrain checkpoint (%zu bytes)", len);
        return RT_EDATA;
    }
    uint64_t h;
    memcpy(&h, buf + len - CK_TAIL, 8);
    if (XXH3_64bits(buf, len - CK_TAIL) != h) {
        snprintf(err, errlen, "checkpoint checksum mismatch (torn or corrupt, %zu bytes)", len);
        return RT_ECHECKSUM;
    }
    size_t o = CK_HEAD, end = len - CK_TAIL;
    const uint8_t *part[3];
    uint64_t plen[3];
    for (int i = 0; i < 3; i++) {
        if (end - o < 8) {
            snprintf(err, errlen, "checkpoint section %d is cut short", i);
            return RT_EDATA;
        }
        memcpy(&plen[i], buf + o, 8);
        o += 8;
        if (plen[i] > end - o) {
            snprintf(err, errlen, "checkpoint section %d is cut short", i);
            return RT_EDATA;
        }
        part[i] = buf + o;
        o += plen[i];
    }
    if (o != end || plen[1] < sizeof v->meta) {
        snprintf(err, errlen, "checkpoint sections do not add up");
        return RT_EDATA;
    }
    memcpy(&v->meta, part[1], sizeof v->meta);
    if (memcmp(v->meta.magic, "RTMETA2", 8) != 0) {
        snprintf(err, errlen, "checkpoint has an unknown program record");
        return RT_EDATA;
    }
    if (v->meta.n_fit_epochs > RT_FIT_RING ||
        plen[1] != sizeof v->meta + sizeof(rt_fit_epoch) * v->meta.n_fit_epochs) {
        snprintf(err, errlen, "checkpoint's Fit record does not add up");
        return RT_EDATA;
    }
    if (check_meta(&v->meta, err, errlen) < 0)
        return RT_EDATA;
    v->fit_epochs = part[1] + sizeof v->meta;
    v->meta.session_id[RT_SESSION_ID_LEN - 1] = 0;
    v->meta.program_id[RT_SESSION_ID_LEN - 1] = 0;
    v->req = part[0];
    v->req_len = plen[0];
    v->exec = part[2];
    v->exec_len = plen[2];
    return 0;
}

/* ------------------------------------------------------------ writing */

/* ckpt-<n>.rtck names in the folder dfd, ascending by n. */
static int list_ckpts(int dfd, uint64_t **out)
{
    *out = NULL;
    DIR *d = rt_state_list(dfd);
    if (!d)
        return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t k;
        char tail[8];
        if (sscanf(e->d_name, "ckpt-%" SCNu64 ".%7s", &k, tail) != 2 || strcmp(tail, "rtck"))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            uint64_t *nv = realloc(*out, sizeof *nv * (size_t)cap);
            if (!nv)
                break;
            *out = nv;
        }
        (*out)[n++] = k;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort: a handful of files */
        for (int j = i; j > 0 && (*out)[j - 1] > (*out)[j]; j--) {
            uint64_t t = (*out)[j];
            (*out)[j] = (*out)[j - 1];
            (*out)[j - 1] = t;
        }
    return n;
}

int rt_state_checkpoint(const rt_state *st, const char *sid, rt_program *p, char *err,
                        size_t errlen)
{
    const rt_state_config *cfg = rt_state_cfg(st);
    char name[64];
    int dfd = rt_state_open_dir(st, sid, p->id, 1);
    if (dfd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot create sessions/%.40s/%.40s: %s", sid, p->id,
                 e == ELOOP || e == ENOTDIR ? "something else is at that name" : strerror(e));
        return RT_EIO;
    }
    uint64_t *ks;
    int n = list_ckpts(dfd, &ks);
    uint64_t next = n ? ks[n - 1] + 1 : 1;
    snprintf(name, sizeof name, "ckpt-%012" PRIu64 ".rtck", next);
    /* cleared before the state is read: a change that lands meanwhile
     * (Control's rate) marks it again */
    __atomic_store_n(&p->ckpt_dirty, 0, __ATOMIC_RELEASE);
    ck_spans k;
    int rc = spans(sid, p, &k);
    if (rc < 0) {
        __atomic_store_n(&p->ckpt_dirty, 1, __ATOMIC_RELEASE);
        free(ks);
        close(dfd);
        snprintf(err, errlen, "cannot read the program's state");
        return rc;
    }
    XXH3_state_t *x = XXH3_createState();
    if (!x) {
        __atomic_store_n(&p->ckpt_dirty, 1, __ATOMIC_RELEASE);
        free(ks);
        close(dfd);
        return RT_ENOMEM;
    }
    XXH3_64bits_reset(x);
    for (int i = 0; i < k.n; i++)
        XXH3_64bits_update(x, k.sp[i].p, k.sp[i].n);
    uint64_t h = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    k.sp[k.n++] = (rt_exec_span){&h, 8};
    uint64_t t0 = rt_now_ns(), bytes = 0;
    for (int i = 0; i < k.n; i++)
        bytes += k.sp[i].n;
    rc = rt_state_write_at(st, dfd, name, k.sp, k.n, err, errlen);
    rt_exec_state_release(p->exec); /* ZeRO: rank 0's slice again */
    rt_metrics_checkpoint(rt_now_ns() - t0, bytes, rc == 0);
    if (rc == 0) {
        p->ckpt_step = rt_exec_global_step(p->exec);
        p->ckpt_ns = rt_now_ns();
        int keep = cfg->keep > 0 ? cfg->keep : 3;
        /* the new one is next; the oldest beyond keep go (a name in the
         * folder opened without following links: the daemon's own) */
        for (int i = 0; i + keep - 1 < n; i++) {
            char old[64];
            snprintf(old, sizeof old, "ckpt-%012" PRIu64 ".rtck", ks[i]);
            unlinkat(dfd, old, 0);
        }
    } else {
        __atomic_store_n(&p->ckpt_dirty, 1, __ATOMIC_RELEASE);
    }
    free(ks);
    close(dfd);
    return rc;
}

int rt_state_checkpoint_due(const rt_state *st, const rt_program *p, uint32_t every_steps,
                            uint32_t every_s)
{
    const rt_state_config *cfg = rt_state_cfg(st);
    return rt_program_checkpoint_due(p, every_steps ? every_steps : cfg->every_steps,
                                     every_s ? every_s : cfg->every_s);
}

/* ------------------------------------------------------------ reading */

/* The checkpoints in the folder dfd, newest first, read (regular files
 * of at most max bytes; 0: 64 GiB), parsed and handed to use until it
 * takes one (returns 0); a corrupt one, one that cannot be read, or one
 * that use refuses (it does not fit the program it would be restored
 * into) is skipped with a warning naming the reason. RT_ENOTFOUND if none
 * was taken. where names the folder in the messages. */
typedef int (*rt__ckpt_use_fn)(void *ud, const rt_ckpt_view *v, char *err, size_t errlen);
int rt__ckpt_load_newest_at(int dfd, const char *where, uint64_t max, rt__ckpt_use_fn use, void *ud,
                            int *warnings);
int rt__ckpt_load_newest_at(int dfd, const char *where, uint64_t max, rt__ckpt_use_fn use, void *ud,
                            int *warnings)
{
    uint64_t *ks;
    int n = list_ckpts(dfd, &ks);
    if (!max)
        max = 64ull << 30;
    for (int i = n - 1; i >= 0; i--) {
        char name[64], err[300];
        snprintf(name, sizeof name, "ckpt-%012" PRIu64 ".rtck", ks[i]);
        uint8_t *b = NULL;
        size_t l;
        rt_ckpt_view v;
        int rc = rt_state_read_at(dfd, name, max, &b, &l, err, sizeof err);
        if (rc == RT_ENOTFOUND)
            continue;
        if (rc == 0 && (rc = rt_ckpt_parse(b, l, &v, err, sizeof err)) == 0)
            rc = use(ud, &v, err, sizeof err);
        free(b);
        if (rc == 0) {
            free(ks);
            return 0;
        }
        (*warnings)++;
        RT_LOG(RT_LOG_WARN, "checkpoint %s/%s: %s; using the previous one", where, name, err);
    }
    free(ks);
    return RT_ENOTFOUND;
}

/* The same, for a folder named by its path (tests, tools). */
int rt__ckpt_load_newest(const char *dir, rt__ckpt_use_fn use, void *ud, int *warnings);
int rt__ckpt_load_newest(const char *dir, rt__ckpt_use_fn use, void *ud, int *warnings)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return RT_ENOTFOUND;
    int rc = rt__ckpt_load_newest_at(dfd, dir, 0, use, ud, warnings);
    close(dfd);
    return rc;
}
