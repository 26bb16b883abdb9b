/* rt_tb.c - TensorBoard event files (rtrain_tb.h).
 *
 * The Event protos are protobuf-c code generated from proto/tfevents.proto,
 * rtrain's subset of TensorBoard's Event with its field numbers, so the files
 * are what TensorBoard's own reader parses; the framing is TFRecord's, with
 * the CRC32C the data reader checks TFRecord files with (server/data). */
#include "rtrain/rtrain_tb.h"
#include "rtrain/rt_error.h"
#include "rt_crc32c.h"
#include "tfevents.pb-c.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { RT_TB_TRAIN, RT_TB_VAL, RT_TB_RUNS };
static const char *const rt_tb_run_names[RT_TB_RUNS] = {"train", "validation"};

/* Per-method call counters for the timing tags' steps. */
#define RT_TB_METHODS 32

struct rt_tb_log {
    char *dir;
    FILE *f[RT_TB_RUNS];
    int err; /* first write error (0 = none) */
    char msg[256];
    struct {
        char method[32];
        int64_t n;
    } calls[RT_TB_METHODS];
};

/* The n in the file name: two logs of one process opened in the same second
 * (TensorFlow's writers add the same kind of counter) never share a file. */
static atomic_uint rt_tb_files;

static int tb_fail(rt_tb_log *l, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->msg, sizeof l->msg, fmt, ap);
    va_end(ap);
    if (!l->err)
        l->err = rc;
    return rc;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* mkdir -p: EEXIST of a directory is fine. */
static int mkdirs(const char *path)
{
    char *p = strdup(path);
    if (!p)
        return RT_ENOMEM;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            struct stat st;
            if (mkdir(p, 0777) < 0 &&
                !(errno == EEXIST && stat(p, &st) == 0 && S_ISDIR(st.st_mode))) {
                if (errno == EEXIST)
                    errno = ENOTDIR; /* a file where a directory goes */
                free(p);
                return RT_EIO;
            }
            if (!c)
                break;
            *s = c;
        }
    }
    free(p);
    return 0;
}

/* One TFRecord frame: u64 length, masked crc of those 8 bytes, the data,
 * masked crc of the data; all little-endian. */
static int tb_frame(FILE *f, const uint8_t *data, size_t n)
{
    uint8_t head[12];
    uint64_t len = n;
    for (int i = 0; i < 8; i++)
        head[i] = (uint8_t)(len >> (8 * i));
    uint32_t c = rt_crc32c_mask(rt_crc32c(0, head, 8));
    for (int i = 0; i < 4; i++)
        head[8 + i] = (uint8_t)(c >> (8 * i));
    uint8_t tail[4];
    c = rt_crc32c_mask(rt_crc32c(0, data, n));
    for (int i = 0; i < 4; i++)
        tail[i] = (uint8_t)(c >> (8 * i));
    if (fwrite(head, 1, 12, f) != 12 || (n && fwrite(data, 1, n, f) != n) ||
        fwrite(tail, 1, 4, f) != 4 || fflush(f) != 0)
        return RT_EIO;
    return 0;
}

static int tb_event(rt_tb_log *l, int run, const Rtrain__Tfevents__Event *ev)
{
    size_t n = rtrain__tfevents__event__get_packed_size(ev);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return tb_fail(l, RT_ENOMEM, "tensorboard: out of memory");
    rtrain__tfevents__event__pack(ev, buf);
    int rc = tb_frame(l->f[run], buf, n);
    free(buf);
    if (rc < 0)
        return tb_fail(l, rc, "tensorboard: cannot write %s/%s: %s", l->dir, rt_tb_run_names[run],
                       strerror(errno));
    return 0;
}

/* The run's file, made with its file_version event on first use. */
static int tb_file(rt_tb_log *l, int run)
{
    if (l->f[run])
        return 0;
    size_t dn = strlen(l->dir) + 16;
    char *d = malloc(dn);
    if (!d)
        return tb_fail(l, RT_ENOMEM, "tensorboard: out of memory");
    snprintf(d, dn, "%s/%s", l->dir, rt_tb_run_names[run]);
    if (mkdirs(d) < 0) {
        tb_fail(l, RT_EIO, "tensorboard: cannot make %s: %s", d, strerror(errno));
        free(d);
        return RT_EIO;
    }
    char host[64] = "localhost";
    if (gethostname(host, sizeof host) < 0)
        strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    double now = wall_now();
    size_t pn = dn + sizeof host + 96;
    char *path = malloc(pn);
    if (!path) {
        free(d);
        return tb_fail(l, RT_ENOMEM, "tensorboard: out of memory");
    }
    snprintf(path, pn, "%s/events.out.tfevents.%lld.%s.%d.%u.v2", d, (long long)now, host,
             (int)getpid(), atomic_fetch_add(&rt_tb_files, 1));
    free(d);
    l->f[run] = fopen(path, "wbx");
    if (!l->f[run]) {
        tb_fail(l, RT_EIO, "tensorboard: cannot create %s: %s", path, strerror(errno));
        free(path);
        return RT_EIO;
    }
    free(path);
    Rtrain__Tfevents__Event ev = RTRAIN__TFEVENTS__EVENT__INIT;
    ev.wall_time = now;
    ev.what_case = RTRAIN__TFEVENTS__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)"brain.Event:2";
    return tb_event(l, run, &ev);
}

int rt_tb_log_open(const char *dir, rt_tb_log **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!dir || !*dir) {
        if (err && errlen)
            snprintf(err, errlen, "tensorboard: the log directory is empty");
        return RT_EINVAL;
    }
    if (mkdirs(dir) < 0) {
        if (err && errlen)
            snprintf(err, errlen, "tensorboard: cannot make %s: %s", dir, strerror(errno));
        return RT_EIO;
    }
    rt_tb_log *l = calloc(1, sizeof *l);
    if (!l || !(l->dir = strdup(dir))) {
        free(l);
        if (err && errlen)
            snprintf(err, errlen, "tensorboard: out of memory");
        return RT_ENOMEM;
    }
    *out = l;
    return 0;
}

int rt_tb_log_scalar(rt_tb_log *l, const char *run, const char *tag, int64_t step, double value)
{
    int r;
    if (!l || !run || !tag || !*tag)
        return RT_EINVAL;
    if (!strcmp(run, "train"))
        r = RT_TB_TRAIN;
    else if (!strcmp(run, "validation"))
        r = RT_TB_VAL;
    else
        return tb_fail(l, RT_EINVAL, "tensorboard: run must be train or validation");
    int rc = tb_file(l, r);
    if (rc < 0)
        return rc;
    Rtrain__Tfevents__Summary__Value v = RTRAIN__TFEVENTS__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = RTRAIN__TFEVENTS__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)value;
    Rtrain__Tfevents__Summary__Value *vs[1] = {&v};
    Rtrain__Tfevents__Summary s = RTRAIN__TFEVENTS__SUMMARY__INIT;
    s.n_value = 1;
    s.value = vs;
    Rtrain__Tfevents__Event ev = RTRAIN__TFEVENTS__EVENT__INIT;
    ev.wall_time = wall_now();
    ev.step = step;
    ev.what_case = RTRAIN__TFEVENTS__EVENT__WHAT_SUMMARY;
    ev.summary = &s;
    return tb_event(l, r, &ev);
}

int rt_tb_log_epoch(rt_tb_log *l, int64_t epoch, const char *name, double value)
{
    if (!l || !name || !*name)
        return RT_EINVAL;
    int val = !strncmp(name, "val_", 4);
    char tag[160];
    snprintf(tag, sizeof tag, "epoch_%s", val ? name + 4 : name);
    return rt_tb_log_scalar(l, val ? "validation" : "train", tag, epoch, value);
}

int rt_tb_log_call(rt_tb_log *l, const rt_client_timings *t)
{
    if (!l || !t)
        return RT_EINVAL;
    const char *m = t->method && *t->method ? t->method : "call";
    int64_t step = 0;
    int i;
    for (i = 0; i < RT_TB_METHODS && l->calls[i].method[0]; i++)
        if (!strncmp(l->calls[i].method, m, sizeof l->calls[i].method - 1))
            break;
    if (i < RT_TB_METHODS) {
        if (!l->calls[i].method[0])
            snprintf(l->calls[i].method, sizeof l->calls[i].method, "%s", m);
        step = l->calls[i].n++;
    }
    struct {
        const char *part;
        uint64_t ns;
        int server;
    } parts[] = {
        {"round_trip", t->round_trip_ns, 0},
        {"client_encode", t->client_encode_ns, 0},
        {"wire", t->wire_ns, 0},
        {"queue", t->queue_ns, 1},
        {"decode", t->decode_ns, 1},
        {"compile", t->compile_ns, 1},
        {"execute", t->execute_ns, 1},
        {"encode", t->encode_ns, 1},
        {"client_decode", t->client_decode_ns, 0},
        {"unattributed", t->unattributed_ns, 0},
    };
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        if (parts[k].server && !t->has_server)
            continue;
        char tag[160];
        snprintf(tag, sizeof tag, "timing/%s/%s_ms", m, parts[k].part);
        int rc = rt_tb_log_scalar(l, "train", tag, step, parts[k].ns / 1e6);
        if (rc < 0)
            return rc;
    }
    return 0;
}

const char *rt_tb_log_error(const rt_tb_log *l) { return l ? l->msg : ""; }

int rt_tb_log_close(rt_tb_log *l)
{
    if (!l)
        return 0;
    for (int r = 0; r < RT_TB_RUNS; r++)
        if (l->f[r] && fclose(l->f[r]) != 0)
            tb_fail(l, RT_EIO, "tensorboard: cannot close %s/%s: %s", l->dir, rt_tb_run_names[r],
                    strerror(errno));
    int rc = l->err;
    free(l->dir);
    free(l);
    return rc;
}
