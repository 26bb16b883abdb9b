/* rt_state.c - the state directory's sessions and datasets, and the
 * restore at start (rt_state.h). The directory itself and its files are
 * rt_statedir.c's, checkpoints rt_ckpt.c's. */
#include "rt_state.h"
#include "rt_program_impl.h"
#include "rt_state_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <xxhash.h>

#include "rt_example.h"
#include "rt_log.h"
#include "rt_obs.h"
#include "rt_wire.h"

typedef int (*rt__ckpt_use_fn)(void *ud, const rt_ckpt_view *v, char *err, size_t errlen);
int rt__ckpt_load_newest_at(int dfd, const char *where, uint64_t max, rt__ckpt_use_fn use, void *ud,
                            int *warnings);

/* A session or program record is a few lines; a meta record too. */
#define RT__RECORD_MAX 4096

/* ------------------------------------------------------------- sessions */

int rt_state_session_save(const rt_state *st, const rt_session *s, char *err, size_t errlen)
{
    char body[512];
    int dfd = rt_state_open_dir(st, s->id, NULL, 1);
    if (dfd < 0) {
        char what[80];
        snprintf(what, sizeof what, "sessions/%s", s->id);
        return rt__state_io_err(errno == ELOOP ? ENOTDIR : errno, "cannot create", what, err,
                                errlen);
    }
    /* the name is free text: its newlines would split the record */
    char name[sizeof s->name];
    snprintf(name, sizeof name, "%s", s->name);
    for (char *p = name; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    int n = snprintf(body, sizeof body, "rtrain-session 1\n%s\n%s\n%s\n%s\n", s->id, s->token,
                     s->owner ? rt_principal_name(s->owner) : "", name);
    rt_exec_span sp = {body, (size_t)n};
    int rc = rt_state_write_at(st, dfd, "session", &sp, 1, err, errlen);
    close(dfd);
    return rc;
}

/* Whether name is a checkpoint's, or its temporary file's (rt_ckpt.c). */
static int ckpt_name(const char *name)
{
    size_t n = strlen(name);
    if (n > 4 && !strcmp(name + n - 4, ".tmp"))
        n -= 4;
    if (n != 22 || strncmp(name, "ckpt-", 5) || strncmp(name + 17, ".rtck", 5))
        return 0;
    for (int i = 5; i < 17; i++)
        if (name[i] < '0' || name[i] > '9')
            return 0;
    return 1;
}

/* Unlink name in dfd if it is a regular file: what the daemon wrote. */
static void unlink_ours(int dfd, const char *name)
{
    struct stat sb;
    if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
        unlinkat(dfd, name, 0);
}

/* sessions/<sid>/<pid> (sfd: sessions/<sid>): its checkpoints, then the
 * folder if nothing else is left in it. A symlink there is left alone. */
static void remove_program_dir(int sfd, const char *sid, const char *pid)
{
    int pfd = rt__state_dir_at(sfd, pid, 0);
    if (pfd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
            RT_LOG(RT_LOG_WARN, "state: sessions/%.40s/%.40s is not a folder; left alone", sid,
                   pid);
        return;
    }
    DIR *pd = rt_state_list(pfd);
    struct dirent *f;
    while (pd && (f = readdir(pd)))
        if (ckpt_name(f->d_name))
            unlink_ours(pfd, f->d_name);
    if (pd)
        closedir(pd);
    close(pfd);
    unlinkat(sfd, pid, AT_REMOVEDIR);
}

void rt_state_program_remove(const rt_state *st, const char *sid, const char *pid)
{
    /* ids are "p-" + a few safe characters: one name */
    if (!st || !pid || strncmp(pid, "p-", 2) || strchr(pid, '/') ||
        strlen(pid) >= RT_SESSION_ID_LEN)
        return;
    int sfd = rt_state_open_dir(st, sid, NULL, 0);
    if (sfd < 0)
        return;
    remove_program_dir(sfd, sid, pid);
    close(sfd);
}

void rt_state_session_remove(const rt_state *st, const char *sid)
{
    /* Only the daemon's own files go: the session record, the program
     * folders and their checkpoints. A symlink in their place (to a folder
     * elsewhere) is left alone, and so is anything else found there. */
    int sfd = rt_state_open_dir(st, sid, NULL, 0);
    if (sfd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
            RT_LOG(RT_LOG_WARN, "state: sessions/%.40s is not a folder; left alone", sid);
        return;
    }
    /* the record first: a removal cut short leaves no session to restore */
    unlink_ours(sfd, "session");
    unlink_ours(sfd, "session.tmp");
    DIR *d = rt_state_list(sfd);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "p-", 2) || strlen(e->d_name) >= RT_SESSION_ID_LEN)
            continue;
        remove_program_dir(sfd, sid, e->d_name);
    }
    if (d)
        closedir(d);
    close(sfd);
    if (unlinkat(st->ss, sid, AT_REMOVEDIR) < 0 && errno != ENOENT)
        RT_LOG(RT_LOG_WARN,
               "state: sessions/%.40s not removed: %s (files not the daemon's "
               "are left)",
               sid, strerror(errno));
}

/* ------------------------------------------------------------- datasets */

/* How a part is parsed, as stored (the spec pointer is not: TFRecord
 * uploads are not kept). */
typedef struct ds_part {
    int32_t role, format, dtype, ndim;
    int64_t dims[RT_MAX_DIMS];
    int32_t label_column, csv_header, normalize;
    int32_t storage; /* storage + 4 * shuffle_buffer (under 2^28); 0 in
                          files written before streamed arrays */
    uint64_t length;
} ds_part;

typedef struct ds_head {
    char magic[8]; /* "RTDATA1"; "RTDATA2": a ds_tfr follows the parts */
    uint8_t hash[16];
    uint32_t n_parts, pad;
    uint64_t len;
} ds_head;

/* A TFRecord upload's parse options beyond ds_part: each shard's
 * compression and the feature spec. Both enter the store key, which a
 * restore recomputes, so a file whose spec is not the upload's is not
 * restored. */
typedef struct ds_tfr {
    int32_t compression[RT_DATA_MAX_PARTS];
    rt_example_spec spec;
} ds_tfr;

static void hex16(const uint8_t k[16], char out[33])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", k[i]);
}

int rt_state_dataset_put(const rt_state *st, const uint8_t key[16], const uint8_t hash[16],
                         const rt_data_part *parts, int n_parts, const uint8_t *buf, uint64_t len,
                         int *kept, char *err, size_t errlen)
{
    *kept = 0;
    /* TFRecord shards come with a spec (the same for every part) */
    const rt_example_spec *spec = NULL;
    for (int i = 0; i < n_parts; i++)
        if (parts[i].format == RT_FMT_TFRECORD || parts[i].spec) {
            if (!parts[i].spec || (spec && spec != parts[i].spec))
                return 0;
            spec = parts[i].spec;
        }
    char kh[33], name[64];
    hex16(key, kh);
    snprintf(name, sizeof name, "%s.data", kh);
    *kept = 1;
    struct stat sb;
    if (fstatat(st->ds, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
        return 0; /* content-addressed: the same bytes are there */
    ds_head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, spec ? "RTDATA2" : "RTDATA1", 8);
    memcpy(h.hash, hash, 16);
    h.n_parts = (uint32_t)n_parts;
    h.len = len;
    ds_part *dp = calloc((size_t)(n_parts > 0 ? n_parts : 1), sizeof *dp);
    if (!dp)
        return RT_ENOMEM;
    for (int i = 0; i < n_parts; i++) {
        dp[i].role = parts[i].role;
        dp[i].format = parts[i].format;
        dp[i].dtype = parts[i].dtype;
        dp[i].ndim = parts[i].ndim;
        memcpy(dp[i].dims, parts[i].dims, sizeof dp[i].dims);
        dp[i].label_column = parts[i].label_column;
        dp[i].csv_header = parts[i].csv_header;
        dp[i].normalize = parts[i].normalize;
        dp[i].storage = parts[i].storage + 4 * (int32_t)parts[i].shuffle_buffer;
        dp[i].length = parts[i].length;
    }
    ds_tfr *t = spec ? calloc(1, sizeof *t) : NULL;
    if (spec && !t) {
        free(dp);
        return RT_ENOMEM;
    }
    if (t) {
        for (int i = 0; i < n_parts; i++)
            t->compression[i] = (int32_t)parts[i].compression;
        t->spec = *spec;
    }
    rt_exec_span sp[4] = {
        {&h, sizeof h}, {dp, sizeof *dp * (size_t)n_parts}, {t, t ? sizeof *t : 0}, {buf, len}};
    int rc = rt_state_write_at(st, st->ds, name, sp, 4, err, errlen);
    free(t);
    free(dp);
    return rc;
}

int rt_state_dataset_owner(const rt_state *st, const rt_dataset *ds, const char *owner,
                           const char *name, char *err, size_t errlen)
{
    char kh[33], file[80], body[600];
    hex16(ds->key, kh);
    snprintf(file, sizeof file, "%s-%016llx.meta", kh,
             (unsigned long long)XXH3_64bits(owner, strlen(owner)));
    char nm[80];
    snprintf(nm, sizeof nm, "%s", name ? name : "");
    for (char *p = nm; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    int n =
        snprintf(body, sizeof body, "rtrain-dataset 1\n%s\n%s\n%s\n%s\n", kh, ds->id, owner, nm);
    rt_exec_span sp = {body, (size_t)n};
    return rt_state_write_at(st, st->ds, file, &sp, 1, err, errlen);
}

/* ------------------------------------------------------------- restore */

/* Split a text record into up to max lines (in place). */
static int lines(char *b, char **v, int max)
{
    int n = 0;
    while (*b && n < max) {
        v[n++] = b;
        char *e = strchr(b, '\n');
        if (!e)
            break;
        *e = 0;
        b = e + 1;
    }
    return n;
}

/* A dataset file, checked before anything is read past its head: a
 * regular file, its size what the head says, the data no larger than one
 * upload may be (max_bytes). Its bytes are read once, into *buf. */
static int read_dataset_file(const rt_state *st, const char *name, uint64_t max_bytes, ds_head *h,
                             rt_data_part *parts, ds_tfr *t, uint8_t **buf, char *err,
                             size_t errlen)
{
    *buf = NULL;
    int fd = openat(st->ds, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s", errno == ELOOP ? "is a symlink" : strerror(errno));
        return RT_EIO;
    }
    int rc = RT_EDATA;
    struct stat sb;
    ds_part dp[RT_DATA_MAX_PARTS];
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "is not a regular file");
        goto out;
    }
    if ((uint64_t)sb.st_size < sizeof *h ||
        (rc = rt_state_read_full(fd, h, sizeof *h, err, errlen)) < 0) {
        snprintf(err, errlen, "is torn or not a dataset file");
        rc = RT_EDATA;
        goto out;
    }
    rc = RT_EDATA;
    const int tfr = !memcmp(h->magic, "RTDATA2", 8);
    size_t need = sizeof *h + sizeof(ds_part) * (size_t)h->n_parts + (tfr ? sizeof *t : 0);
    if ((!tfr && memcmp(h->magic, "RTDATA1", 8)) || h->n_parts == 0 ||
        h->n_parts > RT_DATA_MAX_PARTS) {
        snprintf(err, errlen, "is torn or not a dataset file");
        goto out;
    }
    if (h->len > max_bytes) {
        snprintf(err, errlen, "holds %llu bytes, over --max-dataset-bytes %llu",
                 (unsigned long long)h->len, (unsigned long long)max_bytes);
        rc = RT_ETOOBIG;
        goto out;
    }
    if ((uint64_t)sb.st_size != need + h->len) {
        snprintf(err, errlen, "is %llu bytes, its head says %llu: torn or not a dataset file",
                 (unsigned long long)sb.st_size, (unsigned long long)(need + h->len));
        goto out;
    }
    if ((rc = rt_state_read_full(fd, dp, sizeof *dp * h->n_parts, err, errlen)) < 0)
        goto out;
    memset(parts, 0, sizeof *parts * RT_DATA_MAX_PARTS);
    for (uint32_t i = 0; i < h->n_parts; i++) {
        parts[i].role = (rt_data_role)dp[i].role;
        parts[i].format = (rt_data_format)dp[i].format;
        parts[i].dtype = (rt_dtype)dp[i].dtype;
        parts[i].ndim = dp[i].ndim < 0 || dp[i].ndim > RT_MAX_DIMS ? 0 : dp[i].ndim;
        memcpy(parts[i].dims, dp[i].dims, sizeof parts[i].dims);
        parts[i].label_column = dp[i].label_column;
        parts[i].csv_header = dp[i].csv_header;
        parts[i].normalize = dp[i].normalize;
        parts[i].storage = dp[i].storage >= 0 ? dp[i].storage % 4 : 0;
        parts[i].shuffle_buffer = dp[i].storage >= 0 ? dp[i].storage / 4 : 0;
        parts[i].length = dp[i].length;
    }
    if (tfr) {
        /* checked before the store key reads it: counts in range, keys
         * terminated; the key then vouches for the rest */
        if ((rc = rt_state_read_full(fd, t, sizeof *t, err, errlen)) < 0)
            goto out;
        rc = RT_EDATA;
        int ok = t->spec.n >= 1 && t->spec.n <= RT_SPEC_MAX_FEATURES;
        for (int i = 0; ok && i < t->spec.n; i++)
            ok = memchr(t->spec.f[i].key, 0, sizeof t->spec.f[i].key) != NULL &&
                 t->spec.f[i].ndim >= 0 && t->spec.f[i].ndim <= 2;
        if (!ok) {
            snprintf(err, errlen, "holds a feature spec that does not check out");
            goto out;
        }
        for (uint32_t i = 0; i < h->n_parts; i++) {
            parts[i].compression = (rt_tfr_compression)t->compression[i];
            if (parts[i].format == RT_FMT_TFRECORD)
                parts[i].spec = &t->spec;
        }
    }
    if (!(*buf = malloc(h->len ? h->len : 1))) {
        snprintf(err, errlen, "no memory for its %llu bytes", (unsigned long long)h->len);
        rc = RT_ENOMEM;
        goto out;
    }
    if ((rc = rt_state_read_full(fd, *buf, h->len, err, errlen)) < 0) {
        free(*buf);
        *buf = NULL;
    }
out:
    close(fd);
    return rc;
}

static int restore_dataset(const rt_state *st, const char *meta, rt_data_store *store,
                           rt_principal_set *ps, uint64_t max_bytes)
{
    size_t ml;
    char *m, *v[5], err[256];
    if (rt_state_read_at(st->ds, meta, RT__RECORD_MAX, (uint8_t **)&m, &ml, err, sizeof err) < 0) {
        RT_LOG(RT_LOG_WARN, "state: datasets/%.80s %s; left alone", meta, err);
        return -1;
    }
    int rc = -1;
    uint8_t *buf = NULL;
    ds_tfr *tfr = NULL; /* a TFRecord upload's compressions and spec */
    if (lines(m, v, 5) < 4 || strcmp(v[0], "rtrain-dataset 1") || strlen(v[1]) != 32) {
        RT_LOG(RT_LOG_WARN, "state: datasets/%.80s is not a dataset record; left alone", meta);
        goto out;
    }
    rt_principal *who = rt_principal_find(ps, v[3]);
    if (!who) {
        RT_LOG(RT_LOG_WARN, "state: dataset %.12s: owner '%.40s' is unknown now; not restored",
               v[2], v[3]);
        goto out;
    }
    char name[64];
    snprintf(name, sizeof name, "%.32s.data", v[1]);
    ds_head h;
    rt_data_part parts[RT_DATA_MAX_PARTS];
    tfr = calloc(1, sizeof *tfr);
    if (!tfr || read_dataset_file(st, name, max_bytes, &h, parts, tfr, &buf, err, sizeof err) < 0) {
        if (!tfr)
            snprintf(err, sizeof err, "no memory to read it");
        RT_LOG(RT_LOG_WARN, "state: datasets/%s %s; dataset %.12s not restored", name, err, v[2]);
        goto out;
    }
    /* verified against its hash before anything trusts it */
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(buf, h.len));
    uint8_t key[16];
    rt_data_key(c.digest, parts, (int)h.n_parts, key);
    char kh[33];
    hex16(key, kh);
    if (memcmp(c.digest, h.hash, 16) || strcmp(kh, v[1])) {
        RT_LOG(RT_LOG_WARN, "state: datasets/%s does not match its XXH3-128; not restored", name);
        goto out;
    }
    rt_dataset *ds, *kept;
    if (rt_data_parse_take(parts, (int)h.n_parts, &buf, h.len, max_bytes, 0, free, &ds, err,
                           sizeof err) < 0) {
        RT_LOG(RT_LOG_WARN, "state: datasets/%s: %s; not restored", name, err);
        goto out;
    }
    if (rt_dataset_set_key(ds, key) < 0) {
        rt_dataset_release(ds);
        goto out;
    }
    if (rt_data_hold(ds, err, sizeof err) < 0) {
        RT_LOG(RT_LOG_WARN, "state: datasets/%s: %s; not restored", name, err);
        rt_dataset_release(ds);
        goto out;
    }
    snprintf(ds->id, sizeof ds->id, "%s", v[2]);
    uint64_t bytes = rt_dataset_bytes(ds);
    if (rt_principal_reserve(who, RT_Q_STORE_BYTES, bytes, err, sizeof err) < 0) {
        RT_LOG(RT_LOG_WARN, "state: dataset %.12s: %s; not restored", v[2], err);
        rt_dataset_release(ds);
        goto out;
    }
    rt_dataset_set_owner(ds, who, bytes);
    int dedup;
    if (rt_data_store_put(store, ds, &kept, &dedup) < 0) {
        RT_LOG(RT_LOG_WARN, "state: dataset %.12s: the store is full; not restored", v[2]);
        goto out;
    }
    rt_dataset_release(kept);
    rc = 0;
out:
    free(tfr);
    free(buf);
    free(m);
    return rc;
}

/* One program of a session being restored, from one of its checkpoints. */
typedef struct restore_prog {
    rt_session *s;
    const char *pid;
    rt_state_compile_fn compile;
    void *ud;
} restore_prog;

/* Compile the checkpoint's model and load its state; a state that does
 * not fit the program it made (rt_exec_load_state checks every field)
 * takes the program away again, and the previous checkpoint is tried. */
static int restore_prog_use(void *ud, const rt_ckpt_view *v, char *err, size_t errlen)
{
    restore_prog *r = ud;
    rt_program *p;
    int rc = r->compile(r->ud, r->s, v->req, v->req_len, r->pid, &p, err, errlen);
    if (rc < 0)
        return rc;
    if ((rc = rt_exec_load_state(p->exec, v->exec, v->exec_len)) < 0) {
        snprintf(err, errlen, "%s", rt_exec_errmsg(p->exec));
        rt_session_remove_program(r->s, p);
        return rc;
    }
    rt_ckpt_apply_meta(p, v);
    p->ckpt_step = rt_exec_global_step(p->exec);
    p->ckpt_ns = rt_now_ns();
    return 0;
}

static int restore_session(const rt_state *st, const char *sid, rt_session_table *table,
                           rt_principal_set *ps, rt_state_compile_fn compile, void *ud,
                           rt_state_restore_result *res)
{
    int sfd = rt_state_open_dir(st, sid, NULL, 0);
    if (sfd < 0) {
        RT_LOG(RT_LOG_WARN, "state: sessions/%.40s is not a folder; left alone", sid);
        res->warnings++;
        return -1;
    }
    size_t len;
    char *b, *v[5], err[256];
    int rc =
        rt_state_read_at(sfd, "session", RT__RECORD_MAX, (uint8_t **)&b, &len, err, sizeof err);
    if (rc == RT_ENOTFOUND) { /* a close cut short by a kill: finish it */
        close(sfd);
        rt_state_session_remove(st, sid);
        return -1;
    }
    if (rc < 0) {
        RT_LOG(RT_LOG_WARN, "state: sessions/%.40s/session %s; left alone", sid, err);
        close(sfd);
        res->warnings++;
        return -1;
    }
    int n = lines(b, v, 5);
    if (n < 4 || strcmp(v[0], "rtrain-session 1") || strcmp(v[1], sid) ||
        strlen(v[2]) >= RT_SESSION_ID_LEN) {
        RT_LOG(RT_LOG_WARN, "state: sessions/%.40s/session is not a session record; left alone",
               sid);
        free(b);
        close(sfd);
        res->warnings++;
        return -1;
    }
    rt_principal *who = rt_principal_find(ps, v[3]);
    rt_session *s;
    if (!who || rt_principal_reserve(who, RT_Q_SESSIONS, 1, err, sizeof err) < 0 ||
        rt_session_open(table, n > 4 ? v[4] : "", who, &s) < 0) {
        RT_LOG(RT_LOG_WARN, "state: session %.12s of '%.40s' not restored (%s)", sid, v[3],
               who ? "session limit" : "owner unknown now");
        free(b);
        close(sfd);
        res->warnings++;
        return -1;
    }
    /* not yet visible to any call: the daemon is not listening */
    snprintf(s->id, sizeof s->id, "%s", sid);
    snprintf(s->token, sizeof s->token, "%s", v[2]);
    free(b);
    res->sessions++;
    DIR *d = rt_state_list(sfd);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "p-", 2) || strlen(e->d_name) >= RT_SESSION_ID_LEN)
            continue;
        char where[100];
        snprintf(where, sizeof where, "sessions/%.40s/%.40s", sid, e->d_name);
        int pfd = rt__state_dir_at(sfd, e->d_name, 0);
        if (pfd < 0) {
            RT_LOG(RT_LOG_WARN, "state: %s is not a folder; left alone", where);
            res->warnings++;
            continue;
        }
        restore_prog rp = {.s = s, .pid = e->d_name, .compile = compile, .ud = ud};
        rc = rt__ckpt_load_newest_at(pfd, where, st->cfg.max_file_bytes, restore_prog_use, &rp,
                                     &res->warnings);
        close(pfd);
        if (rc < 0) {
            RT_LOG(RT_LOG_WARN, "state: program %.12s has no valid checkpoint; not restored",
                   e->d_name);
            res->warnings++;
            continue;
        }
        res->programs++;
    }
    if (d)
        closedir(d);
    close(sfd);
    rt_session_release(s);
    return 0;
}

int rt_state_restore(const rt_state *st, rt_session_table *table, rt_data_store *store,
                     rt_principal_set *ps, uint64_t max_dataset_bytes, rt_state_compile_fn compile,
                     void *ud, rt_state_restore_result *res)
{
    memset(res, 0, sizeof *res);
    DIR *d = rt_state_list(st->ds);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".meta"))
            continue;
        if (restore_dataset(st, e->d_name, store, ps, max_dataset_bytes) == 0)
            res->datasets++;
        else
            res->warnings++;
    }
    if (d)
        closedir(d);
    d = rt_state_list(st->ss);
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "s-", 2) || strlen(e->d_name) >= RT_SESSION_ID_LEN)
            continue;
        restore_session(st, e->d_name, table, ps, compile, ud, res);
    }
    if (d)
        closedir(d);
    return 0;
}
