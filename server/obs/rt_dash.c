/* rt_dash.c - the live dashboard: the rings of recent calls and fits, the
 * JSON the page reads, and its HTTP routes (called from rt_metrics.c's MHD
 * thread). */
#include "rt_dash.h"
#include "rt_clock.h"

#include <arpa/inet.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "rt_dash_assets.h"
#include "rt_log.h"

#define CALL_RING 256   /* recent calls kept */
#define CALLS_SHOWN 120 /* of them, in one state answer */
#define FITS 16         /* recent fits kept */
#define FIT_POINTS 1024 /* epochs kept per fit (the latest) */
#define NAME 64
#define COPY_CHUNK 32              /* records copied per hold of the lock */
#define SID 11                     /* "s-" and 8 hex digits: ids are capabilities */
#define HEARTBEAT_NS 5000000000ull /* under MHD's idle timeout (10 s) */
#define WAKE_NS 250000000ull       /* calls alone refresh the page this often */

typedef struct dash_call {
    uint64_t seq, unix_ms;
    char method[48];
    char principal[NAME];
    char session[SID];
    int code, has_t, cache_hit;
    uint64_t steps;
    uint64_t queue, decode, compile, execute, encode, other, total, stream_wait;
    uint64_t auth, durable; /* of decode and of execute: --tokens, --state-dir */
} dash_call;

typedef struct dash_fit {
    int id; /* 0: free */
    int running, code;
    char principal[NAME];
    char session[SID], program[SID];
    uint32_t epochs;
    uint64_t start_ms, end_ms;
    int64_t n; /* points recorded (the ring keeps the last FIT_POINTS) */
    rt_dash_point pt[FIT_POINTS];
    uint64_t pt_ms[FIT_POINTS]; /* when each epoch was recorded */
} dash_fit;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a fit changed: the event thread wakes at once */
    uint64_t seq;      /* bumped by every record */
    uint64_t n_calls;
    dash_call calls[CALL_RING];
    dash_fit fits[FITS];
    int next_fit;
    int has_provider;
    rt_dash_provider prov;
} D = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void copy(char *dst, size_t n, const char *src)
{
    size_t l = src ? strnlen(src, n - 1) : 0;
    if (l)
        memcpy(dst, src, l);
    dst[l] = 0;
}

/* ---------------------------------------------------------------- buffer */
void rt_dash_printf(rt_dash_buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int k = vsnprintf(b->p ? b->p + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap - b->n <= (size_t)k)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* The log's JSON escaping (rt_log.h): invalid UTF-8 from a client's names
 * becomes U+FFFD, so the answer is always JSON a browser parses. */
void rt_dash_str(rt_dash_buf *b, const char *s)
{
    if (!s) {
        rt_dash_printf(b, "null");
        return;
    }
    size_t cap = strlen(s) * 6 + 3, len = 0; /* \u00XX per byte at most */
    char small[512], *tmp = cap <= sizeof small ? small : malloc(cap);
    if (!tmp) {
        b->oom = 1;
        return;
    }
    rt_log_json_str(tmp, cap, &len, s);
    rt_dash_printf(b, "%s", tmp);
    if (tmp != small)
        free(tmp);
}

void rt_dash_num(rt_dash_buf *b, double v)
{
    if (isfinite(v))
        rt_dash_printf(b, "%.17g", v); /* exact: the page shows what the client got */
    else
        rt_dash_printf(b, "null");
}

/* -------------------------------------------------------------- recording */
void rt_dash_attach(const rt_dash_provider *p)
{
    pthread_mutex_lock(&D.mu);
    D.prov = *p;
    D.has_provider = 1;
    pthread_mutex_unlock(&D.mu);
}

void rt_dash_detach(void *ud)
{
    pthread_mutex_lock(&D.mu);
    if (D.has_provider && D.prov.ud == ud)
        D.has_provider = 0;
    pthread_mutex_unlock(&D.mu);
}

void rt_dash_call(const char *method, const char *principal, const char *session, int code,
                  uint64_t steps, const Rtrain__V1__Timings *t)
{
    dash_call r;
    r.unix_ms = rt_unix_ms();
    const char *m = method ? strrchr(method, '/') : NULL;
    copy(r.method, sizeof r.method, m ? m + 1 : method);
    copy(r.principal, sizeof r.principal, principal);
    copy(r.session, sizeof r.session, session);
    r.code = code;
    r.steps = steps;
    r.has_t = t != NULL;
    r.cache_hit = t ? t->cache_hit : 0;
    r.queue = t ? t->queue_ns : 0;
    r.decode = t ? t->decode_ns : 0;
    r.compile = t ? t->compile_ns : 0;
    r.execute = t ? t->execute_ns : 0;
    r.encode = t ? t->encode_ns : 0;
    r.other = t ? t->other_ns : 0;
    r.total = t ? t->total_ns : 0;
    r.stream_wait = t ? t->stream_wait_ns : 0;
    r.auth = t ? t->auth_ns : 0;
    r.durable = t ? t->durable_ns : 0;
    pthread_mutex_lock(&D.mu);
    r.seq = ++D.seq;
    D.calls[D.n_calls++ % CALL_RING] = r;
    pthread_mutex_unlock(&D.mu);
}

int rt_dash_fit_begin(const char *principal, const char *session, const char *program,
                      uint32_t epochs)
{
    pthread_mutex_lock(&D.mu);
    /* the oldest finished slot, else a free one; never a running fit's */
    dash_fit *f = NULL;
    for (int i = 0; i < FITS; i++) {
        dash_fit *g = &D.fits[i];
        if (!g->id) {
            f = g;
            break;
        }
        if (!g->running && (!f || g->id < f->id))
            f = g;
    }
    int id = 0;
    if (f) {
        id = ++D.next_fit;
        f->id = id;
        f->running = 1;
        f->code = 0;
        copy(f->principal, sizeof f->principal, principal);
        copy(f->session, sizeof f->session, session);
        copy(f->program, sizeof f->program, program);
        f->epochs = epochs;
        f->start_ms = rt_unix_ms();
        f->end_ms = 0;
        f->n = 0;
        D.seq++;
        pthread_cond_broadcast(&D.cv);
    }
    pthread_mutex_unlock(&D.mu);
    return id;
}

static dash_fit *fit_of(int id)
{
    for (int i = 0; id > 0 && i < FITS; i++)
        if (D.fits[i].id == id)
            return &D.fits[i];
    return NULL;
}

void rt_dash_fit_epoch(int id, const rt_dash_point *pt)
{
    if (id <= 0)
        return;
    uint64_t ms = rt_unix_ms();
    pthread_mutex_lock(&D.mu);
    dash_fit *f = fit_of(id);
    if (f) {
        f->pt[f->n % FIT_POINTS] = *pt;
        f->pt_ms[f->n % FIT_POINTS] = ms;
        f->n++;
        D.seq++;
        pthread_cond_broadcast(&D.cv);
    }
    pthread_mutex_unlock(&D.mu);
}

void rt_dash_fit_end(int id, int code)
{
    if (id <= 0)
        return;
    pthread_mutex_lock(&D.mu);
    dash_fit *f = fit_of(id);
    if (f) {
        f->running = 0;
        f->code = code;
        f->end_ms = rt_unix_ms();
        D.seq++;
        pthread_cond_broadcast(&D.cv);
    }
    pthread_mutex_unlock(&D.mu);
}

/* ------------------------------------------------------------- rendering */
static int visible(const char *owner, const char *principal)
{
    return !principal || strcmp(owner, principal) == 0;
}

static void render_call(rt_dash_buf *b, const dash_call *c)
{
    rt_dash_printf(b, "{\"seq\":%llu,\"t_ms\":%llu,\"method\":", (unsigned long long)c->seq,
                   (unsigned long long)c->unix_ms);
    rt_dash_str(b, c->method);
    rt_dash_printf(b, ",\"principal\":");
    rt_dash_str(b, c->principal);
    rt_dash_printf(b, ",\"session\":");
    rt_dash_str(b, c->session[0] ? c->session : NULL);
    rt_dash_printf(b, ",\"code\":%d,\"steps\":%llu", c->code, (unsigned long long)c->steps);
    if (c->has_t)
        rt_dash_printf(b,
                       ",\"timings\":{\"queue_ns\":%llu,\"decode_ns\":%llu,\"compile_ns\":%llu,"
                       "\"execute_ns\":%llu,\"encode_ns\":%llu,\"other_ns\":%llu,"
                       "\"total_ns\":%llu,\"stream_wait_ns\":%llu,\"auth_ns\":%llu,"
                       "\"durable_ns\":%llu,\"cache_hit\":%s}",
                       (unsigned long long)c->queue, (unsigned long long)c->decode,
                       (unsigned long long)c->compile, (unsigned long long)c->execute,
                       (unsigned long long)c->encode, (unsigned long long)c->other,
                       (unsigned long long)c->total, (unsigned long long)c->stream_wait,
                       (unsigned long long)c->auth, (unsigned long long)c->durable,
                       c->cache_hit ? "true" : "false");
    rt_dash_printf(b, "}");
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The median total of calls matching method (and K when k > 0), or 0. */
static uint64_t median_total(const dash_call *v, size_t n, const char *method, uint64_t k,
                             size_t *count)
{
    uint64_t t[CALL_RING];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i].has_t && v[i].code == 0 && strcmp(v[i].method, method) == 0 &&
            (!k || v[i].steps == k))
            t[m++] = v[i].total;
    *count = m;
    if (!m)
        return 0;
    qsort(t, m, sizeof t[0], cmp_u64);
    return t[m / 2];
}

/* The registry's part of the state, for principal (NULL = all). Copies the
 * rings under the lock and renders after, so a call's end never waits for
 * the page. */
void rt_dash_registry_json(const char *principal, rt_dash_buf *b)
{
    dash_call *calls = malloc(sizeof(dash_call) * CALL_RING);
    dash_fit *fits = malloc(sizeof(dash_fit) * FITS);
    if (!calls || !fits) {
        free(calls);
        free(fits);
        b->oom = 1;
        return;
    }
    /* Copied in chunks, the lock released between them, so that a call's
     * or an epoch's end waits for a few records' copy at most. A slot
     * written meanwhile holds a newer call (left out: seq past the
     * snapshot); a fit slot reused meanwhile is left out. */
    pthread_mutex_lock(&D.mu);
    uint64_t seq = D.seq, nc = D.n_calls;
    pthread_mutex_unlock(&D.mu);
    size_t n = nc < CALL_RING ? (size_t)nc : CALL_RING, got = 0;
    for (size_t i = 0; i < n; i += COPY_CHUNK) {
        pthread_mutex_lock(&D.mu);
        for (size_t j = i; j < n && j < i + COPY_CHUNK; j++) { /* oldest first */
            const dash_call *c = &D.calls[(nc - n + j) % CALL_RING];
            if (c->seq <= seq)
                calls[got++] = *c;
        }
        pthread_mutex_unlock(&D.mu);
    }
    n = got;
    for (int i = 0; i < FITS; i++) {
        pthread_mutex_lock(&D.mu);
        const dash_fit *f = &D.fits[i];
        memcpy(&fits[i], f, offsetof(dash_fit, pt));
        int wrapped = f->n > FIT_POINTS;
        if (wrapped) { /* the ring moves under a chunked copy: all at once */
            memcpy(fits[i].pt, f->pt, sizeof f->pt);
            memcpy(fits[i].pt_ms, f->pt_ms, sizeof f->pt_ms);
        }
        pthread_mutex_unlock(&D.mu);
        for (int64_t k = 0; !wrapped && k < fits[i].n; k += COPY_CHUNK) {
            pthread_mutex_lock(&D.mu);
            if (f->id != fits[i].id)
                fits[i].id = 0;
            for (int64_t j = k; fits[i].id && j < fits[i].n && j < k + COPY_CHUNK; j++) {
                fits[i].pt[j] = f->pt[j];
                fits[i].pt_ms[j] = f->pt_ms[j];
            }
            pthread_mutex_unlock(&D.mu);
        }
    }

    size_t m = 0; /* the visible ones, packed */
    for (size_t i = 0; i < n; i++)
        if (visible(calls[i].principal, principal))
            calls[m++] = calls[i];
    rt_dash_printf(b, "\"seq\":%llu,\"now_ms\":%llu,\"calls\":[", (unsigned long long)seq,
                   (unsigned long long)rt_unix_ms());
    size_t first = m > CALLS_SHOWN ? m - CALLS_SHOWN : 0;
    for (size_t i = first; i < m; i++) {
        if (i > first)
            rt_dash_printf(b, ",");
        render_call(b, &calls[i]);
    }
    /* The floor a call cannot go under (Ping), and RunSteps by K: medians
     * of the recent calls this principal made. */
    size_t cnt;
    uint64_t ping = median_total(calls, m, "Ping", 0, &cnt);
    rt_dash_printf(b, "],\"ping_floor\":{\"median_ns\":%llu,\"calls\":%zu},\"k_sweep\":[",
                   (unsigned long long)ping, cnt);
    uint64_t ks[32];
    int nk = 0;
    for (size_t i = 0; i < m && nk < 32; i++) {
        if (strcmp(calls[i].method, "RunSteps") || !calls[i].steps || !calls[i].has_t)
            continue;
        int seen = 0;
        for (int j = 0; j < nk; j++)
            seen |= ks[j] == calls[i].steps;
        if (!seen)
            ks[nk++] = calls[i].steps;
    }
    qsort(ks, (size_t)nk, sizeof ks[0], cmp_u64);
    for (int j = 0; j < nk; j++) {
        uint64_t med = median_total(calls, m, "RunSteps", ks[j], &cnt);
        rt_dash_printf(b, "%s{\"k\":%llu,\"median_ns\":%llu,\"calls\":%zu}", j ? "," : "",
                       (unsigned long long)ks[j], (unsigned long long)med, cnt);
    }
    rt_dash_printf(b, "],\"fits\":[");
    int any = 0;
    for (int pass = 0; pass < 2; pass++) /* running first, then newest first */
        for (int i = 0; i < FITS; i++) {
            /* newest first within a pass: highest id first */
            int best = -1;
            for (int j = 0; j < FITS; j++) {
                dash_fit *g = &fits[j];
                if (g->id <= 0 || g->running != !pass || !visible(g->principal, principal))
                    continue;
                if (best < 0 || g->id > fits[best].id)
                    best = j;
            }
            if (best < 0)
                break;
            dash_fit *f = &fits[best];
            rt_dash_printf(b, "%s{\"id\":%d,\"running\":%s,\"code\":%d,\"principal\":",
                           any++ ? "," : "", f->id, f->running ? "true" : "false", f->code);
            rt_dash_str(b, f->principal);
            rt_dash_printf(b, ",\"session\":");
            rt_dash_str(b, f->session);
            rt_dash_printf(b, ",\"program\":");
            rt_dash_str(b, f->program);
            rt_dash_printf(b, ",\"epochs\":%u,\"start_ms\":%llu,\"end_ms\":%llu,\"points\":[",
                           f->epochs, (unsigned long long)f->start_ms,
                           (unsigned long long)f->end_ms);
            int64_t p0 = f->n > FIT_POINTS ? f->n - FIT_POINTS : 0;
            for (int64_t k = p0; k < f->n; k++) {
                const rt_dash_point *p = &f->pt[k % FIT_POINTS];
                rt_dash_printf(b, "%s{\"epoch\":%lld,\"step\":%lld,\"t_ms\":%llu,\"loss\":",
                               k > p0 ? "," : "", (long long)p->epoch, (long long)p->step,
                               (unsigned long long)f->pt_ms[k % FIT_POINTS]);
                rt_dash_num(b, p->loss);
                rt_dash_printf(b, ",\"acc\":");
                rt_dash_num(b, p->acc);
                rt_dash_printf(b, ",\"val_loss\":");
                rt_dash_num(b, p->val_loss);
                rt_dash_printf(b, ",\"val_acc\":");
                rt_dash_num(b, p->val_acc);
                rt_dash_printf(b, ",\"execute_ns\":%llu}", (unsigned long long)p->execute_ns);
            }
            rt_dash_printf(b, "]}");
            f->id = -1; /* rendered */
        }
    rt_dash_printf(b, "]");
    free(calls);
    free(fits);
}

/* ------------------------------------------------------------------ HTTP */
typedef struct sse sse;

struct rt_dash_http {
    pthread_mutex_t mu; /* the suspended streams; taken before MHD's own */
    sse *suspended;
    int stopping;
    pthread_t thread;
    int thread_on;
    uint64_t last_hb;
};

struct sse {
    rt_dash_http *h;
    struct MHD_Connection *conn;
    sse *next;
    int suspended, hb;
    uint64_t seen;
    char pend[96];
    size_t plen, poff;
};

/* Resumes every suspended stream (under h->mu); hb: with a heartbeat. */
static void resume_all(rt_dash_http *h, int hb)
{
    for (sse *s = h->suspended; s; s = s->next) {
        s->suspended = 0;
        s->hb |= hb;
        MHD_resume_connection(s->conn);
    }
    h->suspended = NULL;
}

/* Wakes the suspended event streams when something changed: at once for
 * a fit (rt_dash_fit_* signal D.cv), every WAKE_NS for calls alone. */
static void *events_main(void *arg)
{
    rt_dash_http *h = arg;
    uint64_t seen = 0;
    for (;;) {
        struct timespec ts = rt_deadline(CLOCK_REALTIME, WAKE_NS);
        pthread_mutex_lock(&D.mu);
        if (D.seq == seen)
            pthread_cond_timedwait(&D.cv, &D.mu, &ts);
        uint64_t seq = D.seq;
        pthread_mutex_unlock(&D.mu);
        pthread_mutex_lock(&h->mu);
        if (h->stopping) {
            pthread_mutex_unlock(&h->mu);
            return NULL;
        }
        uint64_t now = rt_now_ns();
        int hb = now - h->last_hb > HEARTBEAT_NS;
        if (hb)
            h->last_hb = now;
        if (seq != seen || hb)
            resume_all(h, hb);
        pthread_mutex_unlock(&h->mu);
        seen = seq;
    }
}

int rt_dash_http_start(rt_dash_http **out)
{
    rt_dash_http *h = calloc(1, sizeof *h);
    if (!h)
        return -1;
    pthread_mutex_init(&h->mu, NULL);
    h->last_hb = rt_now_ns();
    if (pthread_create(&h->thread, NULL, events_main, h) != 0) {
        pthread_mutex_destroy(&h->mu);
        free(h);
        return -1;
    }
    h->thread_on = 1;
    *out = h;
    return 0;
}

void rt_dash_http_stop(rt_dash_http *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    resume_all(h, 0);
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_lock(&D.mu);
    pthread_cond_broadcast(&D.cv);
    pthread_mutex_unlock(&D.mu);
    if (h->thread_on)
        pthread_join(h->thread, NULL);
    h->thread_on = 0;
}

void rt_dash_http_free(rt_dash_http *h)
{
    if (!h)
        return;
    rt_dash_http_stop(h);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sse *s = cls;
    rt_dash_http *h = s->h;
    pthread_mutex_lock(&h->mu);
    if (h->stopping) {
        pthread_mutex_unlock(&h->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (s->poff == s->plen) {
        pthread_mutex_lock(&D.mu);
        uint64_t seq = D.seq;
        pthread_mutex_unlock(&D.mu);
        s->plen = s->poff = 0;
        if (seq != s->seen) {
            s->seen = seq;
            int k = snprintf(s->pend, sizeof s->pend, "data: {\"seq\":%llu}\n\n",
                             (unsigned long long)seq);
            s->plen = (size_t)k;
        } else if (s->hb) {
            memcpy(s->pend, ": hb\n\n", 6);
            s->plen = 6;
        }
        s->hb = 0;
        if (!s->plen) {
            /* nothing new: off MHD's poll set until events_main resumes it */
            s->suspended = 1;
            s->next = h->suspended;
            h->suspended = s;
            MHD_suspend_connection(s->conn);
            pthread_mutex_unlock(&h->mu);
            return 0;
        }
    }
    size_t k = s->plen - s->poff < max ? s->plen - s->poff : max;
    memcpy(buf, s->pend + s->poff, k);
    s->poff += k;
    pthread_mutex_unlock(&h->mu);
    return (ssize_t)k;
}

static void sse_free(void *cls)
{
    sse *s = cls;
    rt_dash_http *h = s->h;
    pthread_mutex_lock(&h->mu);
    for (sse **p = &h->suspended; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    pthread_mutex_unlock(&h->mu);
    free(s);
}

static void headers(struct MHD_Response *r, const char *type)
{
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'self'; style-src 'self'; "
                            "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                            "frame-ancestors 'none'; base-uri 'none'");
}

static int send_buf(struct MHD_Connection *conn, unsigned code, const char *type, const void *data,
                    size_t len, int copy_it, const char *cookie, const char *location)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, (void *)data, copy_it ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    headers(r, type);
    if (cookie)
        MHD_add_response_header(r, "Set-Cookie", cookie);
    if (location)
        MHD_add_response_header(r, "Location", location);
    if (code == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"rtraind\"");
    int rc = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return rc;
}

static int send_text(struct MHD_Connection *conn, unsigned code, const char *text)
{
    return send_buf(conn, code, "text/plain; charset=utf-8", text, strlen(text), 0, NULL, NULL);
}

static int send_json_error(struct MHD_Connection *conn, unsigned code, const char *msg)
{
    char b[256];
    snprintf(b, sizeof b, "{\"error\":\"%s\"}", msg);
    return send_buf(conn, code, "application/json", b, strlen(b), 1, NULL, NULL);
}

static int is_loopback_peer(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return 0;
    const struct sockaddr *sa = ci->client_addr;
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

/* Without tokens the page must also be asked for by a loopback name: a
 * page of another site whose name was rebound to 127.0.0.1 sends its own
 * Host, and is refused. */
static int is_loopback_host(struct MHD_Connection *conn)
{
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
    if (!host)
        return 0;
    char name[128];
    copy(name, sizeof name, host);
    char *end = name[0] == '[' ? strchr(name, ']') : strrchr(name, ':');
    if (name[0] == '[') {
        if (!end)
            return 0;
        *end = 0;
        memmove(name, name + 1, strlen(name + 1) + 1);
    } else if (end) {
        *end = 0;
    }
    if (strcmp(name, "localhost") == 0 || strcmp(name, "::1") == 0)
        return 1;
    struct in_addr a;
    return inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* The principal of the request's token (header, else cookie) into out;
 * 0, or -1 when there is none or it is not accepted. */
static int request_principal(struct MHD_Connection *conn, const rt_dash_provider *p, char *out,
                             size_t n)
{
    const char *tok = NULL;
    size_t len = 0;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) {
        tok = auth + 7;
        len = strlen(tok);
    } else {
        tok = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, "rt_token");
        len = tok ? strlen(tok) : 0;
    }
    if (!tok || !len || !p->who)
        return -1;
    return p->who(p->ud, tok, len, out, n);
}

static int serve_state(struct MHD_Connection *conn, const rt_dash_provider *p, int have,
                       const char *principal)
{
    rt_dash_buf b = {0};
    rt_dash_printf(&b, "{\"principal\":");
    rt_dash_str(&b, principal);
    rt_dash_printf(&b, ",\"auth\":%s,", p->auth_required ? "true" : "false");
    if (have && p->state)
        p->state(p->ud, p->auth_required ? principal : NULL, &b);
    rt_dash_registry_json(p->auth_required ? principal : NULL, &b);
    rt_dash_printf(&b, "}");
    if (b.oom) {
        free(b.p);
        return send_json_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(b.n, b.p, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(b.p);
        return MHD_NO;
    }
    headers(r, "application/json");
    int rc = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

static int serve_events(rt_dash_http *h, struct MHD_Connection *conn)
{
    sse *s = calloc(1, sizeof *s);
    if (!s)
        return MHD_NO;
    s->h = h;
    s->conn = conn;
    s->seen = (uint64_t)-1; /* the first read says where things stand */
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 256, sse_read, s, sse_free);
    if (!r) {
        free(s);
        return MHD_NO;
    }
    headers(r, "text/event-stream");
    int rc = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

/* The login form's body, gathered across MHD's calls. */
typedef struct post_body {
    size_t n;
    int too_big;
    char b[512];
} post_body;

static int hexval(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The value of "token=" in a form body, URL-decoded, into out. */
static int form_token(const char *body, char *out, size_t n)
{
    const char *p = body;
    while (p && *p) {
        if (strncmp(p, "token=", 6) == 0) {
            p += 6;
            size_t k = 0;
            while (*p && *p != '&' && k + 1 < n) {
                int c = (unsigned char)*p++;
                if (c == '+')
                    c = ' ';
                else if (c == '%' && hexval(p[0]) >= 0 && hexval(p[1]) >= 0) {
                    c = hexval(p[0]) * 16 + hexval(p[1]);
                    p += 2;
                }
                out[k++] = (char)c;
            }
            out[k] = 0;
            return k ? 0 : -1;
        }
        p = strchr(p, '&');
        if (p)
            p++;
    }
    return -1;
}

/* The form again (401), saying why at its <!--error--> mark. */
static int login_failed(struct MHD_Connection *conn)
{
    static const char mark[] = "<!--error-->";
    static const char msg[] = "<p role=\"alert\" class=\"error\">That token is not accepted.</p>";
    const char *page = (const char *)rt_dash_asset_login_html;
    size_t len = rt_dash_asset_login_html_len, ml = sizeof mark - 1;
    const char *at = memmem(page, len, mark, ml);
    rt_dash_buf b = {0};
    if (at)
        rt_dash_printf(&b, "%.*s%s%.*s", (int)(at - page), page, msg,
                       (int)(len - (size_t)(at - page) - ml), at + ml);
    int ok = at && !b.oom;
    int rc = send_buf(conn, MHD_HTTP_UNAUTHORIZED, "text/html; charset=utf-8", ok ? b.p : page,
                      ok ? b.n : len, 1, NULL, NULL);
    free(b.p);
    return rc;
}

/* Characters a token may have in a cookie: no header or cookie syntax. */
static int cookie_safe(const char *t)
{
    for (; *t; t++)
        if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=", *t))
            return 0;
    return 1;
}

static int serve_login_post(struct MHD_Connection *conn, const rt_dash_provider *p, post_body *pb)
{
    char tok[256], who[NAME];
    if (pb->too_big || form_token(pb->b, tok, sizeof tok) < 0 || !cookie_safe(tok) || !p->who ||
        p->who(p->ud, tok, strlen(tok), who, sizeof who) < 0)
        return login_failed(conn);
    /* the token itself, HttpOnly: page scripts never see it */
    char cookie[400];
    snprintf(cookie, sizeof cookie, "rt_token=%s; HttpOnly; SameSite=Strict; Path=/", tok);
    return send_buf(conn, MHD_HTTP_SEE_OTHER, "text/plain; charset=utf-8", "", 0, 0, cookie, "/");
}

int rt_dash_request(rt_dash_http *h, struct MHD_Connection *conn, const char *url,
                    const char *method, const char *upload_data, size_t *upload_data_size,
                    void **con_cls)
{
    rt_dash_provider p;
    pthread_mutex_lock(&D.mu);
    int have = D.has_provider;
    p = D.prov;
    pthread_mutex_unlock(&D.mu);
    if (!have)
        memset(&p, 0, sizeof p);

    int post = strcmp(method, "POST") == 0;
    if (post && strcmp(url, "/login") == 0 && p.auth_required) {
        post_body *pb = *con_cls;
        if (!pb) {
            pb = calloc(1, sizeof *pb);
            if (!pb)
                return MHD_NO;
            *con_cls = pb;
            return MHD_YES;
        }
        if (*upload_data_size) {
            size_t k = *upload_data_size;
            if (pb->n + k >= sizeof pb->b)
                pb->too_big = 1;
            else {
                memcpy(pb->b + pb->n, upload_data, k);
                pb->n += k;
                pb->b[pb->n] = 0;
            }
            *upload_data_size = 0;
            return MHD_YES;
        }
        return serve_login_post(conn, &p, pb);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return send_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "dashboard: read-only (GET)\n");

    /* static assets: no data in them */
    const rt_dash_asset *a = rt_dash_asset_find(url);
    if (a && !a->page)
        return send_buf(conn, MHD_HTTP_OK, a->type, a->data, a->len, 0, NULL, NULL);

    if (!p.auth_required && (!is_loopback_peer(conn) || !is_loopback_host(conn)))
        return send_text(conn, MHD_HTTP_FORBIDDEN,
                         "dashboard: without --tokens it is served to loopback only "
                         "(http://127.0.0.1:PORT/)\n");
    char who[NAME] = "local";
    int authed = !p.auth_required || request_principal(conn, &p, who, sizeof who) == 0;
    if (strcmp(url, "/logout") == 0) /* the browser forgets the token */
        return send_buf(conn, MHD_HTTP_SEE_OTHER, "text/plain; charset=utf-8", "", 0, 0,
                        "rt_token=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0", "/login");
    if (strcmp(url, "/login") == 0)
        return send_buf(conn, MHD_HTTP_OK, "text/html; charset=utf-8", rt_dash_asset_login_html,
                        rt_dash_asset_login_html_len, 0, NULL, NULL);
    if (strcmp(url, "/") == 0) {
        if (!authed)
            return send_buf(conn, MHD_HTTP_SEE_OTHER, "text/plain; charset=utf-8", "", 0, 0, NULL,
                            "/login");
        return send_buf(conn, MHD_HTTP_OK, a->type, a->data, a->len, 0, NULL, NULL);
    }
    if (strncmp(url, "/api/", 5) != 0)
        return send_text(conn, MHD_HTTP_NOT_FOUND, "not found: try / or /metrics\n");
    if (!authed)
        return send_json_error(conn, MHD_HTTP_UNAUTHORIZED,
                               "a token is required: 'Authorization: Bearer TOKEN' or /login");
    if (strcmp(url, "/api/state") == 0)
        return serve_state(conn, &p, have, who);
    if (strcmp(url, "/api/events") == 0)
        return serve_events(h, conn);
    return send_json_error(conn, MHD_HTTP_NOT_FOUND, "not found: /api/state or /api/events");
}

void rt_dash_request_done(void **con_cls)
{
    free(*con_cls);
    *con_cls = NULL;
}
