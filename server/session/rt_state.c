/* rt_state.c - the state directory: atomic files, sessions, datasets, and
 * the restore at start (rt_state.h). Checkpoints are in rt_ckpt.c. */
#include "rt_state.h"

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

#include "rt_log.h"
#include "rt_obs.h"
#include "rt_wire.h"

struct rt_state {
    rt_state_config cfg;
    char dir[512];
};

typedef int (*rt__ckpt_use_fn)(void *ud, const rt_ckpt_view *v, char *err, size_t errlen);
int rt__ckpt_load_newest(const char *dir, rt__ckpt_use_fn use, void *ud, int *warnings);

static int mkdir_p(const char *path)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

int rt_state_open(const rt_state_config *cfg, rt_state **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cfg->dir || !*cfg->dir || strlen(cfg->dir) > 400) {
        snprintf(err, errlen, "--state-dir must be a path of 1 to 400 bytes");
        return RT_EINVAL;
    }
    rt_state *st = calloc(1, sizeof *st);
    if (!st)
        return RT_ENOMEM;
    st->cfg = *cfg;
    snprintf(st->dir, sizeof st->dir, "%s", cfg->dir);
    st->cfg.dir = st->dir;
    if (st->cfg.keep < 1)
        st->cfg.keep = 3;
    char sub[600];
    const char *subs[] = {"", "/datasets", "/sessions"};
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "%s%s", st->dir, subs[i]);
        if (mkdir_p(sub) < 0) {
            snprintf(err, errlen, "--state-dir: cannot create %s: %s", sub, strerror(errno));
            free(st);
            return RT_EIO;
        }
    }
    snprintf(sub, sizeof sub, "%s/.probe", st->dir);
    int fd = open(sub, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "--state-dir: cannot write in %s: %s", st->dir, strerror(errno));
        free(st);
        return RT_EIO;
    }
    close(fd);
    unlink(sub);
    *out = st;
    return 0;
}

void rt_state_close(rt_state *st) { free(st); }

const rt_state_config *rt_state_cfg(const rt_state *st) { return &st->cfg; }

static int io_err(int e, const char *what, const char *path, char *err, size_t errlen)
{
    int full = e == ENOSPC || e == EFBIG || e == EDQUOT;
    snprintf(err, errlen, "%s%s %s: %s", full ? "disk full: " : "", what, path, strerror(e));
    return full ? RT_ETOOBIG : RT_EIO;
}

int rt_state_write_file(const rt_state *st, const char *path, const rt_exec_span *sp, int n,
                        char *err, size_t errlen)
{
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return io_err(errno, "cannot create", tmp, err, errlen);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const char *p = sp[i].p;
        size_t left = sp[i].n;
        while (left) {
            /* at most 1 GiB per write: Linux caps one write anyway */
            ssize_t k = write(fd, p, left > (1u << 30) ? (1u << 30) : left);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                rc = io_err(k < 0 ? errno : ENOSPC, "cannot write", tmp, err, errlen);
                break;
            }
            p += k;
            left -= (size_t)k;
        }
    }
    if (rc == 0 && !st->cfg.no_fsync && fsync(fd) < 0)
        rc = io_err(errno, "cannot fsync", tmp, err, errlen);
    if (close(fd) < 0 && rc == 0)
        rc = io_err(errno, "cannot close", tmp, err, errlen);
    if (rc == 0 && rename(tmp, path) < 0)
        rc = io_err(errno, "cannot rename", tmp, err, errlen);
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    if (st->cfg.no_fsync)
        return 0;
    /* the rename itself is durable only once the folder is */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return io_err(errno, "cannot open", dir, err, errlen);
    if (fsync(dfd) < 0)
        rc = io_err(errno, "cannot fsync", dir, err, errlen);
    close(dfd);
    return rc;
}

/* ------------------------------------------------------------- sessions */

int rt_state_session_save(const rt_state *st, const rt_session *s, char *err, size_t errlen)
{
    char dir[700], path[760], body[512];
    snprintf(dir, sizeof dir, "%s/sessions/%s", st->dir, s->id);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return io_err(errno, "cannot create", dir, err, errlen);
    snprintf(path, sizeof path, "%s/session", dir);
    /* the name is free text: its newlines would split the record */
    char name[sizeof s->name];
    snprintf(name, sizeof name, "%s", s->name);
    for (char *p = name; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    int n = snprintf(body, sizeof body, "rtrain-session 1\n%s\n%s\n%s\n%s\n", s->id, s->token,
                     s->owner ? rt_principal_name(s->owner) : "", name);
    rt_exec_span sp = {body, (size_t)n};
    return rt_state_write_file(st, path, &sp, 1, err, errlen);
}

static void rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char sub[1200];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            if (e->d_type == DT_DIR)
                rm_tree(sub);
            else
                unlink(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

void rt_state_session_remove(const rt_state *st, const char *sid)
{
    /* ids are "s-" + hex: nothing else names a folder of ours */
    if (!sid || strncmp(sid, "s-", 2) || strchr(sid, '/') || strstr(sid, ".."))
        return;
    char dir[700], rec[760];
    snprintf(dir, sizeof dir, "%s/sessions/%s", st->dir, sid);
    /* the record first: a removal cut short leaves no session to restore */
    snprintf(rec, sizeof rec, "%s/session", dir);
    unlink(rec);
    rm_tree(dir);
}

/* ------------------------------------------------------------- datasets */

/* How a part is parsed, as stored (the spec pointer is not: TFRecord
 * uploads are not kept). */
typedef struct ds_part {
    int32_t role, format, dtype, ndim;
    int64_t dims[RT_MAX_DIMS];
    int32_t label_column, csv_header, normalize;
    int32_t storage;   /* storage + 4 * shuffle_buffer (under 2^28); 0 in
                          files written before streamed arrays */
    uint64_t length;
} ds_part;

typedef struct ds_head {
    char magic[8]; /* "RTDATA1" */
    uint8_t hash[16];
    uint32_t n_parts, pad;
    uint64_t len;
} ds_head;

static void hex16(const uint8_t k[16], char out[33])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", k[i]);
}

int rt_state_dataset_put(const rt_state *st, const uint8_t key[16], const uint8_t hash[16],
                         const rt_data_part *parts, int n_parts, const uint8_t *buf,
                         uint64_t len, int *kept, char *err, size_t errlen)
{
    *kept = 0;
    for (int i = 0; i < n_parts; i++)
        if (parts[i].format == RT_FMT_TFRECORD || parts[i].spec)
            return 0;
    char kh[33], path[700];
    hex16(key, kh);
    snprintf(path, sizeof path, "%s/datasets/%s.data", st->dir, kh);
    *kept = 1;
    struct stat sb;
    if (stat(path, &sb) == 0)
        return 0; /* content-addressed: the same bytes are there */
    ds_head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, "RTDATA1", 8);
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
    rt_exec_span sp[3] = {{&h, sizeof h}, {dp, sizeof *dp * (size_t)n_parts}, {buf, len}};
    int rc = rt_state_write_file(st, path, sp, 3, err, errlen);
    free(dp);
    return rc;
}

int rt_state_dataset_owner(const rt_state *st, const rt_dataset *ds, const char *owner,
                           const char *name, char *err, size_t errlen)
{
    char kh[33], path[700], body[600];
    hex16(ds->key, kh);
    snprintf(path, sizeof path, "%s/datasets/%s-%016llx.meta", st->dir, kh,
             (unsigned long long)XXH3_64bits(owner, strlen(owner)));
    char nm[80];
    snprintf(nm, sizeof nm, "%s", name ? name : "");
    for (char *p = nm; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    int n = snprintf(body, sizeof body, "rtrain-dataset 1\n%s\n%s\n%s\n%s\n", kh, ds->id, owner,
                     nm);
    rt_exec_span sp = {body, (size_t)n};
    return rt_state_write_file(st, path, &sp, 1, err, errlen);
}

/* ------------------------------------------------------------- restore */

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat sb;
    char *b = NULL;
    if (fstat(fileno(f), &sb) == 0 && (b = malloc((size_t)sb.st_size + 1))) {
        if (fread(b, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
            free(b);
            b = NULL;
        } else {
            b[sb.st_size] = 0;
            *len = (size_t)sb.st_size;
        }
    }
    fclose(f);
    return b;
}

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

static int restore_dataset(const rt_state *st, const char *meta_path, rt_data_store *store,
                           rt_principal_set *ps, uint64_t max_bytes)
{
    size_t ml;
    char *m = read_all(meta_path, &ml), *v[5];
    if (!m)
        return -1;
    int rc = -1;
    uint8_t *buf = NULL;
    char *raw = NULL;
    if (lines(m, v, 5) < 4 || strcmp(v[0], "rtrain-dataset 1") || strlen(v[1]) != 32) {
        RT_LOG(RT_LOG_WARN, "state: %s is not a dataset record; left alone", meta_path);
        goto out;
    }
    rt_principal *who = rt_principal_find(ps, v[3]);
    if (!who) {
        RT_LOG(RT_LOG_WARN, "state: dataset %.12s: owner '%.40s' is unknown now; not restored",
               v[2], v[3]);
        goto out;
    }
    char path[700];
    snprintf(path, sizeof path, "%s/datasets/%s.data", st->dir, v[1]);
    size_t len;
    raw = read_all(path, &len);
    ds_head h;
    if (!raw || len < sizeof h) {
        RT_LOG(RT_LOG_WARN, "state: %s is missing or short; dataset %.12s not restored", path,
               v[2]);
        goto out;
    }
    memcpy(&h, raw, sizeof h);
    size_t need = sizeof h + sizeof(ds_part) * (size_t)h.n_parts;
    if (memcmp(h.magic, "RTDATA1", 8) || h.n_parts == 0 || h.n_parts > RT_DATA_MAX_PARTS ||
        len < need || len - need != h.len) {
        RT_LOG(RT_LOG_WARN, "state: %s is torn or not a dataset file; not restored", path);
        goto out;
    }
    rt_data_part parts[RT_DATA_MAX_PARTS];
    memset(parts, 0, sizeof parts);
    for (uint32_t i = 0; i < h.n_parts; i++) {
        ds_part dp;
        memcpy(&dp, raw + sizeof h + sizeof dp * i, sizeof dp);
        parts[i].role = (rt_data_role)dp.role;
        parts[i].format = (rt_data_format)dp.format;
        parts[i].dtype = (rt_dtype)dp.dtype;
        parts[i].ndim = dp.ndim < 0 || dp.ndim > RT_MAX_DIMS ? 0 : dp.ndim;
        memcpy(parts[i].dims, dp.dims, sizeof parts[i].dims);
        parts[i].label_column = dp.label_column;
        parts[i].csv_header = dp.csv_header;
        parts[i].normalize = dp.normalize;
        parts[i].storage = dp.storage >= 0 ? dp.storage % 4 : 0;
        parts[i].shuffle_buffer = dp.storage >= 0 ? dp.storage / 4 : 0;
        parts[i].length = dp.length;
    }
    /* verified against its hash before anything trusts it */
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(raw + need, h.len));
    uint8_t key[16];
    rt_data_key(c.digest, parts, (int)h.n_parts, key);
    char kh[33];
    hex16(key, kh);
    if (memcmp(c.digest, h.hash, 16) || strcmp(kh, v[1])) {
        RT_LOG(RT_LOG_WARN, "state: %s does not match its XXH3-128; not restored", path);
        goto out;
    }
    buf = malloc(h.len ? h.len : 1);
    if (!buf)
        goto out;
    memcpy(buf, raw + need, h.len);
    free(raw);
    raw = NULL;
    rt_dataset *ds, *kept;
    char err[256];
    if (rt_data_parse_take(parts, (int)h.n_parts, &buf, h.len, max_bytes, 0, free, &ds, err,
                           sizeof err) < 0) {
        RT_LOG(RT_LOG_WARN, "state: %s: %s; not restored", path, err);
        goto out;
    }
    if (rt_dataset_set_key(ds, key) < 0) {
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
    free(buf);
    free(raw);
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
    char dir[700], path[760];
    snprintf(dir, sizeof dir, "%s/sessions/%s", st->dir, sid);
    snprintf(path, sizeof path, "%s/session", dir);
    size_t len;
    char *b = read_all(path, &len), *v[5];
    if (!b) { /* a close cut short by a kill: finish it */
        rt_state_session_remove(st, sid);
        return -1;
    }
    int n = lines(b, v, 5);
    if (n < 4 || strcmp(v[0], "rtrain-session 1") || strcmp(v[1], sid) ||
        strlen(v[2]) >= RT_SESSION_ID_LEN) {
        RT_LOG(RT_LOG_WARN, "state: %s is not a session record; left alone", path);
        free(b);
        res->warnings++;
        return -1;
    }
    rt_principal *who = rt_principal_find(ps, v[3]);
    char err[256];
    rt_session *s;
    if (!who || rt_principal_reserve(who, RT_Q_SESSIONS, 1, err, sizeof err) < 0 ||
        rt_session_open(table, n > 4 ? v[4] : "", who, &s) < 0) {
        RT_LOG(RT_LOG_WARN, "state: session %.12s of '%.40s' not restored (%s)", sid, v[3],
               who ? "session limit" : "owner unknown now");
        free(b);
        res->warnings++;
        return -1;
    }
    /* not yet visible to any call: the daemon is not listening */
    snprintf(s->id, sizeof s->id, "%s", sid);
    snprintf(s->token, sizeof s->token, "%s", v[2]);
    free(b);
    res->sessions++;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "p-", 2) || strlen(e->d_name) >= RT_SESSION_ID_LEN)
            continue;
        char pdir[1000];
        snprintf(pdir, sizeof pdir, "%s/%s", dir, e->d_name);
        restore_prog rp = {.s = s, .pid = e->d_name, .compile = compile, .ud = ud};
        if (rt__ckpt_load_newest(pdir, restore_prog_use, &rp, &res->warnings) < 0) {
            RT_LOG(RT_LOG_WARN, "state: program %.12s has no valid checkpoint; not restored",
                   e->d_name);
            res->warnings++;
            continue;
        }
        res->programs++;
    }
    if (d)
        closedir(d);
    rt_session_release(s);
    return 0;
}

int rt_state_restore(const rt_state *st, rt_session_table *table, rt_data_store *store,
                     rt_principal_set *ps, uint64_t max_dataset_bytes,
                     rt_state_compile_fn compile, void *ud, rt_state_restore_result *res)
{
    memset(res, 0, sizeof *res);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/datasets", st->dir);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".meta"))
            continue;
        char path[1000];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (restore_dataset(st, path, store, ps, max_dataset_bytes) == 0)
            res->datasets++;
        else
            res->warnings++;
    }
    if (d)
        closedir(d);
    snprintf(dir, sizeof dir, "%s/sessions", st->dir);
    d = opendir(dir);
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "s-", 2) || strlen(e->d_name) >= RT_SESSION_ID_LEN)
            continue;
        restore_session(st, e->d_name, table, ps, compile, ud, res);
    }
    if (d)
        closedir(d);
    return 0;
}
