/* rt_metrics.c - Prometheus counters, histograms and the /metrics endpoint.
 * Everything recorded lives in one static registry of fixed arrays, so the
 * call path never allocates or locks (except the per-second step ring,
 * touched once per training call). */
#include "rt_metrics.h"
#include "rt_clock.h"
#include "rt_dash.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <microhttpd.h>

#include "rt_wire.h"
#include "rtrain/rt_error.h"

#define N_CODES 17
#define N_BUCKETS 24
#define RING 64
#define RATE_WINDOW_S 10

/* Upper bounds in ns: 1 us .. 60 s, then +Inf. */
static const uint64_t bucket_ns[N_BUCKETS] = {
    1000,       2500,          5000,          10000,          25000,          50000,
    100000,     250000,        500000,        1000000,        2500000,        5000000,
    10000000,   25000000,      50000000,      100000000,      250000000,      500000000,
    1000000000, 2500000000ull, 5000000000ull, 10000000000ull, 30000000000ull, 60000000000ull};

typedef struct hist {
    uint64_t b[N_BUCKETS + 1]; /* not cumulative; the last is +Inf */
    uint64_t sum_ns, count;
} hist;

enum { PH_QUEUE, PH_DECODE, PH_COMPILE, PH_EXECUTE, PH_ENCODE, PH_N };
static const char *const phase_names[PH_N] = {"queue", "decode", "compile", "execute", "encode"};

static const char *const code_names[N_CODES] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

typedef struct step_slot {
    uint64_t sec, steps, samples;
} step_slot;

static struct {
    const char *const *names;
    int n;
    const char *backend, *backend_desc;
    uint64_t calls[RT_METRICS_MAX_METHODS][N_CODES];
    hist dur[RT_METRICS_MAX_METHODS];
    hist phase[PH_N];
    uint64_t steps, samples;
    uint64_t ckpt[2]; /* failed, ok */
    uint64_t ckpt_bytes, ckpt_last_unix_ms;
    hist ckpt_dur;
    uint64_t up_bytes, up_resumed;
    pthread_mutex_t ring_mu;
    step_slot ring[RING];
    uint64_t scrapes;
    uint64_t last_render_ns;
    double start_unix;
    uint64_t start_ns;
} M = {.ring_mu = PTHREAD_MUTEX_INITIALIZER};

#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

void rt_metrics_init(const char *const *method_names, int n)
{
    M.names = method_names;
    M.n = n < RT_METRICS_MAX_METHODS ? n : RT_METRICS_MAX_METHODS;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    M.start_unix = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    M.start_ns = rt_now_ns();
}

static void observe(hist *h, uint64_t ns)
{
    int i = 0;
    while (i < N_BUCKETS && ns > bucket_ns[i])
        i++;
    ADD(&h->b[i], 1);
    ADD(&h->sum_ns, ns);
    ADD(&h->count, 1);
}

void rt_metrics_backend(const char *name, const char *describe)
{
    M.backend = name;
    M.backend_desc = describe;
}

void rt_metrics_call(int method, int code, const rt_obs_timing *t, uint64_t end_ns)
{
    if (method < 0 || method >= M.n || code < 0 || code >= N_CODES)
        return;
    ADD(&M.calls[method][code], 1);
    observe(&M.dur[method], end_ns > t->arrival_ns ? end_ns - t->arrival_ns : 0);
    observe(&M.phase[PH_QUEUE], t->queue_ns);
    observe(&M.phase[PH_DECODE], t->decode_ns);
    observe(&M.phase[PH_COMPILE], t->compile_ns);
    observe(&M.phase[PH_EXECUTE], t->execute_ns);
    observe(&M.phase[PH_ENCODE], t->encode_ns);
}

void rt_metrics_steps(uint64_t steps, uint64_t samples)
{
    if (!steps)
        return;
    ADD(&M.steps, steps);
    ADD(&M.samples, samples);
    uint64_t sec = rt_now_ns() / 1000000000ull;
    pthread_mutex_lock(&M.ring_mu);
    step_slot *s = &M.ring[sec % RING];
    if (s->sec != sec) {
        s->sec = sec;
        s->steps = s->samples = 0;
    }
    s->steps += steps;
    s->samples += samples;
    pthread_mutex_unlock(&M.ring_mu);
}

void rt_metrics_checkpoint_stats(uint64_t *ok, uint64_t *failed, uint64_t *bytes,
                                 uint64_t *last_unix_ms)
{
    *ok = LOAD(&M.ckpt[1]);
    *failed = LOAD(&M.ckpt[0]);
    *bytes = LOAD(&M.ckpt_bytes);
    *last_unix_ms = LOAD(&M.ckpt_last_unix_ms);
}

void rt_metrics_checkpoint(uint64_t ns, uint64_t bytes, int ok)
{
    ADD(&M.ckpt[ok ? 1 : 0], 1);
    observe(&M.ckpt_dur, ns);
    if (ok) {
        ADD(&M.ckpt_bytes, bytes);
        __atomic_store_n(&M.ckpt_last_unix_ms, rt_unix_ms(), __ATOMIC_RELAXED);
    }
}

void rt_metrics_upload(uint64_t received, uint64_t resumed)
{
    ADD(&M.up_bytes, received);
    ADD(&M.up_resumed, resumed);
}

/* Steps and samples per second over the last RATE_WINDOW_S whole seconds. */
static void rates(double *steps, double *samples)
{
    uint64_t now = rt_now_ns() / 1000000000ull, st = 0, sa = 0;
    pthread_mutex_lock(&M.ring_mu);
    for (int i = 0; i < RING; i++)
        if (M.ring[i].sec < now && M.ring[i].sec + RATE_WINDOW_S >= now) {
            st += M.ring[i].steps;
            sa += M.ring[i].samples;
        }
    pthread_mutex_unlock(&M.ring_mu);
    *steps = (double)st / RATE_WINDOW_S;
    *samples = (double)sa / RATE_WINDOW_S;
}

/* ---------------------------------------------------------------- render */
/* The text goes into the dashboard's growing buffer (rt_dash.h): one
 * appender for both of obs' text answers. */
static void head(rt_dash_buf *b, const char *name, const char *type, const char *help)
{
    rt_dash_printf(b, "# HELP rtrain_%s %s\n# TYPE rtrain_%s %s\n", name, help, name, type);
}

/* The buckets' le values as text, formatted once: "%g" of a double was the
 * largest share of a render (glibc's printf_fp). */
static char le_text[N_BUCKETS][24];
static pthread_once_t le_once = PTHREAD_ONCE_INIT;

static void le_init(void)
{
    for (int i = 0; i < N_BUCKETS; i++)
        snprintf(le_text[i], sizeof le_text[i], "%g", bucket_ns[i] / 1e9);
}

/* One histogram; lk = NULL for one without a label. */
static void put_hist(rt_dash_buf *b, const char *name, const char *lk, const char *lv,
                     const hist *h)
{
    char lab[160] = "";
    if (lk)
        snprintf(lab, sizeof lab, "%s=\"%s\",", lk, lv);
    uint64_t cum = 0;
    for (int i = 0; i <= N_BUCKETS; i++) {
        cum += LOAD(&h->b[i]);
        if (i < N_BUCKETS)
            rt_dash_printf(b, "rtrain_%s_bucket{%sle=\"%s\"} %llu\n", name, lab, le_text[i],
                           (unsigned long long)cum);
        else
            rt_dash_printf(b, "rtrain_%s_bucket{%sle=\"+Inf\"} %llu\n", name, lab,
                           (unsigned long long)cum);
    }
    size_t n = strlen(lab);
    if (n)
        lab[n - 1] = 0; /* the trailing comma */
    rt_dash_printf(b, "rtrain_%s_sum%s%s%s %.9f\n", name, n ? "{" : "", lab, n ? "}" : "",
                   LOAD(&h->sum_ns) / 1e9);
    /* count = the +Inf bucket, read once, so the two always agree. */
    rt_dash_printf(b, "rtrain_%s_count%s%s%s %llu\n", name, n ? "{" : "", lab, n ? "}" : "",
                   (unsigned long long)cum);
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (uint64_t)sysconf(_SC_PAGESIZE);
}

int rt_metrics_render(rt_metrics_collect_fn collect, void *ud, char **out, size_t *len)
{
    uint64_t t0 = rt_now_ns();
    pthread_once(&le_once, le_init);
    rt_dash_buf b = {malloc(65536), 0, 65536, 0};
    if (!b.p)
        return RT_ENOMEM;
    ADD(&M.scrapes, 1);

    head(&b, "calls_total", "counter", "Finished gRPC calls by method and status code.");
    for (int m = 0; m < M.n; m++)
        for (int c = 0; c < N_CODES; c++) {
            uint64_t v = LOAD(&M.calls[m][c]);
            /* Every method's OK line is always there so rate() has a series
             * from the start; other codes appear once they happen. */
            if (v || c == 0)
                rt_dash_printf(&b, "rtrain_calls_total{method=\"%s\",code=\"%s\"} %llu\n",
                               M.names[m], code_names[c], (unsigned long long)v);
        }
    head(&b, "call_duration_seconds", "histogram",
         "Time from a call's arrival to its status, by method.");
    for (int m = 0; m < M.n; m++)
        if (LOAD(&M.dur[m].count))
            put_hist(&b, "call_duration_seconds", "method", M.names[m], &M.dur[m]);
    head(&b, "phase_duration_seconds", "histogram",
         "Time of each call in one phase: queue, decode, compile, execute, encode.");
    for (int p = 0; p < PH_N; p++)
        put_hist(&b, "phase_duration_seconds", "phase", phase_names[p], &M.phase[p]);

    if (M.backend) {
        head(&b, "backend_info", "gauge", "The kernel backend every program runs on.");
        rt_dash_printf(&b, "rtrain_backend_info{backend=\"%s\",describe=\"%s\"} 1\n", M.backend,
                       M.backend_desc);
    }

    double sps, smps;
    rates(&sps, &smps);
    head(&b, "steps_total", "counter", "Training steps run.");
    rt_dash_printf(&b, "rtrain_steps_total %llu\n", (unsigned long long)LOAD(&M.steps));
    head(&b, "samples_total", "counter", "Training samples run (steps x batch size).");
    rt_dash_printf(&b, "rtrain_samples_total %llu\n", (unsigned long long)LOAD(&M.samples));
    head(&b, "steps_per_second", "gauge", "Training steps per second, last 10 whole seconds.");
    rt_dash_printf(&b, "rtrain_steps_per_second %.3f\n", sps);
    head(&b, "samples_per_second", "gauge", "Training samples per second, last 10 whole seconds.");
    rt_dash_printf(&b, "rtrain_samples_per_second %.3f\n", smps);

    head(&b, "checkpoints_total", "counter", "Checkpoints written (ok) or failed.");
    rt_dash_printf(&b, "rtrain_checkpoints_total{result=\"ok\"} %llu\n",
                   (unsigned long long)LOAD(&M.ckpt[1]));
    rt_dash_printf(&b, "rtrain_checkpoints_total{result=\"failed\"} %llu\n",
                   (unsigned long long)LOAD(&M.ckpt[0]));
    head(&b, "checkpoint_bytes_total", "counter", "Bytes of the checkpoints written.");
    rt_dash_printf(&b, "rtrain_checkpoint_bytes_total %llu\n",
                   (unsigned long long)LOAD(&M.ckpt_bytes));
    head(&b, "checkpoint_duration_seconds", "histogram", "Time each checkpoint took.");
    put_hist(&b, "checkpoint_duration_seconds", NULL, NULL, &M.ckpt_dur);
    head(&b, "checkpoint_last_success_timestamp_seconds", "gauge",
         "When the last checkpoint was written, seconds since the epoch; 0 = never.");
    rt_dash_printf(&b, "rtrain_checkpoint_last_success_timestamp_seconds %.3f\n",
                   LOAD(&M.ckpt_last_unix_ms) / 1e3);
    head(&b, "upload_bytes_total", "counter", "Dataset bytes received on upload streams.");
    rt_dash_printf(&b, "rtrain_upload_bytes_total %llu\n", (unsigned long long)LOAD(&M.up_bytes));
    head(&b, "upload_resumed_bytes_total", "counter",
         "Bytes resumed uploads took from a broken stream instead of receiving them again.");
    rt_dash_printf(&b, "rtrain_upload_resumed_bytes_total %llu\n",
                   (unsigned long long)LOAD(&M.up_resumed));

    rt_metrics_gauges g;
    memset(&g, 0, sizeof g);
    if (collect)
        collect(ud, &g);
    static const struct {
        const char *name, *help;
        size_t off;
    } gauges[] = {
        {"sessions", "Open sessions.", offsetof(rt_metrics_gauges, sessions)},
        {"programs", "Compiled programs held by sessions.", offsetof(rt_metrics_gauges, programs)},
        {"plans_cached", "Plans in the compile cache.", offsetof(rt_metrics_gauges, plans_cached)},
        {"datasets", "Datasets in the store.", offsetof(rt_metrics_gauges, datasets)},
        {"stored_bytes", "Bytes of the datasets in the store.",
         offsetof(rt_metrics_gauges, stored_bytes)},
        {"live_calls", "Calls in progress.", offsetof(rt_metrics_gauges, live_calls)},
        {"calls_held", "Pipelined RunSteps calls waiting for their predecessor (after_seq).",
         offsetof(rt_metrics_gauges, calls_held)},
        {"uploads", "Uploads in flight.", offsetof(rt_metrics_gauges, uploads)},
        {"upload_reserved_bytes",
         "Bytes reserved by uploads in flight: what arrived plus a window each "
         "(--max-upload-bytes).",
         offsetof(rt_metrics_gauges, upload_reserved_bytes)},
        {"upload_kept_bytes", "Bytes of broken uploads kept for a resume (--upload-keep-s).",
         offsetof(rt_metrics_gauges, upload_kept_bytes)},
        {"upload_pool_bytes", "Idle upload buffer bytes kept for reuse (--upload-pool-bytes).",
         offsetof(rt_metrics_gauges, upload_pool_bytes)},
        {"memory_charged_bytes",
         "Bytes charged to the memory budget (--max-memory-bytes) "
         "by all principals: programs, stored datasets, uploads and calls in flight.",
         offsetof(rt_metrics_gauges, charged_bytes)},
    };
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
        head(&b, gauges[i].name, "gauge", gauges[i].help);
        rt_dash_printf(&b, "rtrain_%s %llu\n", gauges[i].name,
                       (unsigned long long)*(const uint64_t *)((const char *)&g + gauges[i].off));
    }
    head(&b, "serving", "gauge", "1 while grpc.health.v1 reports SERVING.");
    rt_dash_printf(&b, "rtrain_serving %d\n", g.serving);
    head(&b, "memory_bytes", "gauge",
         "Memory by kind: params (weights, gradients, optimizer state), activations "
         "(planned arenas), datasets (the store), rss (the process).");
    rt_dash_printf(&b, "rtrain_memory_bytes{kind=\"params\"} %llu\n",
                   (unsigned long long)g.mem_params);
    rt_dash_printf(&b, "rtrain_memory_bytes{kind=\"activations\"} %llu\n",
                   (unsigned long long)g.mem_activations);
    rt_dash_printf(&b, "rtrain_memory_bytes{kind=\"datasets\"} %llu\n",
                   (unsigned long long)g.mem_datasets);
    rt_dash_printf(&b, "rtrain_memory_bytes{kind=\"rss\"} %llu\n", (unsigned long long)rss_bytes());

    head(&b, "process_start_time_seconds", "gauge", "Start time, seconds since the epoch.");
    rt_dash_printf(&b, "rtrain_process_start_time_seconds %.3f\n", M.start_unix);
    head(&b, "uptime_seconds", "gauge", "Seconds since the daemon started.");
    rt_dash_printf(&b, "rtrain_uptime_seconds %.3f\n", (rt_now_ns() - M.start_ns) / 1e9);
    head(&b, "scrapes_total", "counter", "Renders of this page.");
    rt_dash_printf(&b, "rtrain_scrapes_total %llu\n", (unsigned long long)LOAD(&M.scrapes));
    head(&b, "scrape_render_seconds", "gauge", "Time the previous render of this page took.");
    rt_dash_printf(&b, "rtrain_scrape_render_seconds %.9f\n", LOAD(&M.last_render_ns) / 1e9);
    if (b.oom) {
        free(b.p);
        return RT_ENOMEM;
    }
    __atomic_store_n(&M.last_render_ns, rt_now_ns() - t0, __ATOMIC_RELAXED);
    *out = b.p;
    *len = b.n;
    return 0;
}

/* ---------------------------------------------------------------- HTTP */
/* Slow or idle clients cannot hold the port: each address has a few
 * connections, all of them together a few dozen; a connection idle this
 * long is closed, and so is one whose request head has not arrived this
 * long after it connected (or after its previous answer), however it
 * trickles; a head past the memory limit is refused (431). The polling
 * thread is woken through its own pipe (MHD_USE_ITC), so a stop never
 * waits for a client, even when the connection limit has taken the
 * listening socket out of the poll set. */
/* a browser opens up to 6 connections to a host; the dashboard's event
 * stream holds one of them */
#define HTTP_PER_IP 8
#define HTTP_CONNECTIONS 64
#define HTTP_IDLE_S 10
#define HTTP_HEAD_S 10
#define HTTP_MEMORY (16u << 10)

/* A connection, for the head deadline: MHD's own timeout is an idle one. */
typedef struct http_conn {
    struct http_conn *next, **prev;
    int fd;
    int head_done; /* the request head arrived: the deadline is off */
    int cut;       /* shut down for its deadline */
    uint64_t t0;   /* connected, or answered its previous request */
} http_conn;

struct rt_metrics_server {
    struct MHD_Daemon *d;
    rt_metrics_collect_fn collect;
    void *ud;
    char bound[128];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t reaper;
    int reaper_on, stopping;
    http_conn *conns;   /* under mu */
    rt_dash_http *dash; /* the dashboard's event streams (rt_dash.h) */
};

/* MHD calls this on its thread before it closes the socket: under mu the
 * reaper never touches an fd that is closed (or reused). */
static void on_conn(void *cls, struct MHD_Connection *conn, void **socket_ctx,
                    enum MHD_ConnectionNotificationCode toe)
{
    rt_metrics_server *ms = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        http_conn *h = ci ? calloc(1, sizeof *h) : NULL;
        *socket_ctx = h;
        if (!h)
            return;
        h->fd = ci->connect_fd;
        h->t0 = rt_now_ns();
        pthread_mutex_lock(&ms->mu);
        h->next = ms->conns;
        h->prev = &ms->conns;
        if (ms->conns)
            ms->conns->prev = &h->next;
        ms->conns = h;
        pthread_mutex_unlock(&ms->mu);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && *socket_ctx) {
        http_conn *h = *socket_ctx;
        pthread_mutex_lock(&ms->mu);
        *h->prev = h->next;
        if (h->next)
            h->next->prev = h->prev;
        pthread_mutex_unlock(&ms->mu);
        free(h);
        *socket_ctx = NULL;
    }
}

static http_conn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* An answer sent: a kept-alive connection's next head has its own
 * deadline. */
static void on_done(void *cls, struct MHD_Connection *conn, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    rt_metrics_server *ms = cls;
    (void)toe;
    rt_dash_request_done(con_cls);
    http_conn *h = conn_of(conn);
    if (!h)
        return;
    pthread_mutex_lock(&ms->mu);
    h->head_done = 0;
    h->t0 = rt_now_ns();
    pthread_mutex_unlock(&ms->mu);
}

/* Shuts down the connections past the head deadline; MHD then reads EOF
 * and closes them on its thread. */
static void *reaper_main(void *arg)
{
    rt_metrics_server *ms = arg;
    pthread_mutex_lock(&ms->mu);
    while (!ms->stopping) {
        struct timespec ts = rt_deadline(CLOCK_MONOTONIC, 500000000ull);
        pthread_cond_timedwait(&ms->cv, &ms->mu, &ts);
        uint64_t now = rt_now_ns();
        for (http_conn *h = ms->conns; h; h = h->next)
            if (!h->head_done && !h->cut && now - h->t0 > HTTP_HEAD_S * 1000000000ull) {
                shutdown(h->fd, SHUT_RDWR);
                h->cut = 1;
            }
    }
    pthread_mutex_unlock(&ms->mu);
    return NULL;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
    enum MHD_Result rc = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    rt_metrics_server *ms = cls;
    http_conn *h = conn_of(conn);
    if (h) {
        pthread_mutex_lock(&ms->mu);
        h->head_done = 1;
        pthread_mutex_unlock(&ms->mu);
    }
    if (strcmp(url, "/metrics") != 0) /* the dashboard: everything else */
        return (enum MHD_Result)rt_dash_request(ms->dash, conn, url, method, upload_data,
                                                upload_data_size, con_cls);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n");
    char *text;
    size_t len;
    if (rt_metrics_render(ms->collect, ms->ud, &text, &len) < 0)
        return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

int rt_metrics_serve(const char *addr, rt_metrics_collect_fn collect, void *ud,
                     rt_metrics_server **out, char *err, size_t errlen)
{
    *out = NULL;
    char host[128];
    const char *colon = strrchr(addr, ':');
    size_t hl = colon ? (size_t)(colon - addr) : 0;
    if (!colon || !colon[1] || hl >= sizeof host) {
        snprintf(err, errlen, "metrics: cannot listen on '%.100s' (expected HOST:PORT)", addr);
        return RT_EINVAL;
    }
    memcpy(host, addr, hl);
    host[hl] = 0;
    char *h = host;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h[hl - 1] = 0;
        h++;
    }
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(h[0] ? h : NULL, colon + 1, &hints, &ai) != 0 || !ai) {
        snprintf(err, errlen, "metrics: cannot listen on '%.100s' (unknown host or port)", addr);
        return RT_EINVAL;
    }
    rt_metrics_server *ms = calloc(1, sizeof *ms);
    if (!ms) {
        freeaddrinfo(ai);
        return RT_ENOMEM;
    }
    ms->collect = collect;
    ms->ud = ud;
    pthread_mutex_init(&ms->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ms->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rt_dash_http_start(&ms->dash) < 0) {
        freeaddrinfo(ai);
        rt_metrics_server_stop(ms);
        return RT_ENOMEM;
    }
    /* suspend/resume: the dashboard's event streams wait off the poll set */
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    ms->d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, ms, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_S, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)HTTP_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)HTTP_PER_IP,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_MEMORY, MHD_OPTION_NOTIFY_CONNECTION,
        on_conn, ms, MHD_OPTION_NOTIFY_COMPLETED, on_done, ms, MHD_OPTION_END);
    int e = errno;
    freeaddrinfo(ai);
    if (!ms->d) {
        snprintf(err, errlen, "metrics: cannot listen on %.100s (%s)", addr,
                 e == EADDRINUSE ? "address already in use" : strerror(e));
        rt_metrics_server_stop(ms);
        return RT_EUNAVAILABLE;
    }
    if (pthread_create(&ms->reaper, NULL, reaper_main, ms) == 0)
        ms->reaper_on = 1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(ms->d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    int port = 0;
    if (di && getsockname(di->listen_fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                              : ((struct sockaddr_in *)&sa)->sin_port);
    snprintf(ms->bound, sizeof ms->bound, "%.*s:%d", (int)(hl > 100 ? 100 : hl), addr, port);
    *out = ms;
    return 0;
}

const char *rt_metrics_bound(const rt_metrics_server *ms) { return ms->bound; }

void rt_metrics_server_stop(rt_metrics_server *ms)
{
    if (!ms)
        return;
    pthread_mutex_lock(&ms->mu);
    ms->stopping = 1;
    pthread_cond_signal(&ms->cv);
    pthread_mutex_unlock(&ms->mu);
    if (ms->reaper_on)
        pthread_join(ms->reaper, NULL);
    rt_dash_http_stop(ms->dash); /* MHD stops with no stream suspended */
    /* closes every connection at once; no client is waited for */
    if (ms->d)
        MHD_stop_daemon(ms->d);
    rt_dash_http_free(ms->dash);
    pthread_cond_destroy(&ms->cv);
    pthread_mutex_destroy(&ms->mu);
    free(ms);
}
