/* rt_client.c - the client handle, errors and the per-call time account
 * (the calls themselves go through rt_client_call.c). */
#include "rt_client_impl.h"
#include "rt_absl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "rt_transport.h"

size_t rt_client_dtype_size(rt_client_dtype dt)
{
    switch (dt) {
    case RT_DTYPE_F32: return 4;
    case RT_DTYPE_I32: return 4;
    case RT_DTYPE_I64: return 8;
    case RT_DTYPE_U8: return 1;
    }
    return 0;
}

const char *rt_client_dtype_name(rt_client_dtype dt)
{
    switch (dt) {
    case RT_DTYPE_F32: return "f32";
    case RT_DTYPE_I32: return "i32";
    case RT_DTYPE_I64: return "i64";
    case RT_DTYPE_U8: return "u8";
    }
    return "?";
}

char *rt__strdup(const char *s)
{
    if (!s)
        s = "";
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

int rt__err(rt_client *c, int rc, const char *fmt, ...)
{
    /* through a copy: callers pass c->errmsg itself as an argument */
    char msg[sizeof c->errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(c->errmsg, msg, sizeof msg);
    return rc;
}

void rt_client_opts_init(rt_client_opts *o)
{
    if (o)
        memset(o, 0, sizeof *o);
}

static const char *opt_or_env(const rt_client_opts *o, const char *v, const char *env)
{
    if (v && *v)
        return v;
    if (o->no_env)
        return NULL;
    const char *e = getenv(env);
    return e && *e ? e : NULL;
}

/* A whole small file (PEM or token), NUL-terminated; NULL with err set. */
static char *read_small_file(const char *what, const char *path, char *err, size_t errlen, int *rc)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read %s %s: %s", what, path, strerror(errno));
        *rc = RT_EIO;
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        *rc = RT_ENOMEM;
        return NULL;
    }
    for (size_t k; (k = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += k;
        if (len == cap) {
            if (cap >= (16u << 20)) {
                snprintf(err, errlen, "%s %s is too large", what, path);
                free(buf);
                fclose(f);
                *rc = RT_EINVAL;
                return NULL;
            }
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                *rc = RT_ENOMEM;
                return NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    buf[len] = 0;
    return buf;
}

static char *read_pem(const char *what, const char *path, char *err, size_t errlen, int *rc)
{
    char *pem = read_small_file(what, path, err, errlen, rc);
    if (pem && !strstr(pem, "-----BEGIN ")) {
        snprintf(err, errlen, "%s %s is not a PEM file", what, path);
        free(pem);
        *rc = RT_EINVAL;
        return NULL;
    }
    return pem;
}

/* Channel credentials: insecure, or TLS verified against the CA (with a
 * client certificate for mTLS). */
static int make_creds(const rt_client_opts *o, grpc_channel_credentials **out, int *tls, char *err,
                      size_t errlen)
{
    *out = NULL;
    *tls = 0;
    const char *ca = opt_or_env(o, o->tls_ca, "RTRAIN_TLS_CA");
    const char *cert = opt_or_env(o, o->tls_cert, "RTRAIN_TLS_CERT");
    const char *key = opt_or_env(o, o->tls_key, "RTRAIN_TLS_KEY");
    if (!ca && !cert && !key) {
        *out = grpc_insecure_credentials_create();
        return *out ? 0 : RT_ENOMEM;
    }
    if (!cert != !key) {
        snprintf(err, errlen,
                 "a client certificate needs both tls_cert and tls_key "
                 "(--tls-cert/--tls-key, RTRAIN_TLS_CERT/RTRAIN_TLS_KEY)");
        return RT_EINVAL;
    }
    int rc = 0;
    char *ca_pem = NULL, *cert_pem = NULL, *key_pem = NULL;
    if (ca && !(ca_pem = read_pem("CA", ca, err, errlen, &rc)))
        goto done;
    if (cert && (!(cert_pem = read_pem("certificate", cert, err, errlen, &rc)) ||
                 !(key_pem = read_pem("private key", key, err, errlen, &rc))))
        goto done;
    grpc_ssl_pem_key_cert_pair pair = {key_pem, cert_pem};
    /* A NULL CA means gRPC's default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH
     * or the system's). */
    *out = grpc_ssl_credentials_create(ca_pem, cert_pem ? &pair : NULL, NULL, NULL);
    if (!*out) {
        snprintf(err, errlen, "gRPC refused the TLS settings");
        rc = RT_EINVAL;
    }
    *tls = 1;
done:
    if (key_pem)
        explicit_bzero(key_pem, strlen(key_pem));
    free(ca_pem);
    free(cert_pem);
    free(key_pem);
    return rc;
}

/* The token: given, or the first line of the token file. Metadata values
 * must be visible ASCII, so anything else is refused here rather than by
 * gRPC on the first call. */
static int load_token(rt_client *c, const rt_client_opts *o, char *err, size_t errlen)
{
    const char *tok = opt_or_env(o, o->token, "RTRAIN_TOKEN");
    char *file_buf = NULL;
    int rc = 0;
    if (!tok) {
        const char *path = opt_or_env(o, o->token_file, "RTRAIN_TOKEN_FILE");
        if (!path)
            return 0;
        if (!(file_buf = read_small_file("token file", path, err, errlen, &rc)))
            return rc;
        file_buf[strcspn(file_buf, "\r\n")] = 0;
        tok = file_buf;
        if (!*tok) {
            snprintf(err, errlen, "token file %s is empty", path);
            free(file_buf);
            return RT_EINVAL;
        }
    }
    for (const char *p = tok; *p; p++)
        if (*p < 0x21 || *p > 0x7e) {
            snprintf(err, errlen, "the token has a character that is not visible ASCII");
            rc = RT_EINVAL;
            break;
        }
    if (rc == 0) {
        size_t n = strlen(tok);
        char *v = malloc(n + 8);
        if (!v) {
            rc = RT_ENOMEM;
        } else {
            memcpy(v, "Bearer ", 7);
            memcpy(v + 7, tok, n + 1);
            c->md[0].key = grpc_slice_from_static_string("authorization");
            c->md[0].value = grpc_slice_from_copied_buffer(v, n + 7);
            c->n_md = 1;
            explicit_bzero(v, n + 7);
            free(v);
        }
    }
    if (file_buf) {
        explicit_bzero(file_buf, strlen(file_buf));
        free(file_buf);
    }
    return rc;
}

/* "A.B.C.D:port" and "[v6]:port" name an address: gRPC's ipv4: and ipv6:
 * targets take it as it is, while a plain target first goes through the
 * DNS resolver (a hop to its executor thread and getaddrinfo, which opens a
 * UDP socket to sort the addresses) before the connect starts. The caller
 * keeps the original as the default authority, so the :authority header and
 * a TLS name check see the same name as before. NULL when target is not such
 * a literal (a name, or a URI with its own scheme). */
static char *literal_target(const char *t)
{
    const char *colon, *scheme = NULL;
    char host[64];
    size_t hn;
    if (t[0] == '[') {
        const char *close = strchr(t, ']');
        if (!close || close[1] != ':')
            return NULL;
        colon = close + 1;
        hn = (size_t)(close - t - 1);
        if (hn >= sizeof host)
            return NULL;
        memcpy(host, t + 1, hn);
        host[hn] = 0;
        struct in6_addr a6;
        if (inet_pton(AF_INET6, host, &a6) == 1)
            scheme = "ipv6:";
    } else {
        colon = strchr(t, ':');
        if (!colon || strchr(colon + 1, ':'))
            return NULL;
        hn = (size_t)(colon - t);
        if (hn >= sizeof host)
            return NULL;
        memcpy(host, t, hn);
        host[hn] = 0;
        struct in_addr a4;
        if (inet_pton(AF_INET, host, &a4) == 1)
            scheme = "ipv4:";
    }
    size_t pn = strlen(colon + 1);
    if (!scheme || pn == 0 || pn > 5 || strspn(colon + 1, "0123456789") != pn)
        return NULL;
    size_t n = strlen(scheme) + strlen(t) + 1;
    char *u = malloc(n);
    if (u)
        snprintf(u, n, "%s%s", scheme, t);
    return u;
}

/* gRPC's process-wide state (its executor and timer threads) starts with
 * the first grpc_init and stops with the last grpc_shutdown, which joins
 * those threads. Its default event engine (a timer thread and workers)
 * lives only as long as some channel refers to it: without one, every new
 * channel started it and every channel's destroy joined its threads, so a
 * hold also keeps a lame channel, which never connects (on this 2-vCPU
 * machine a channel's create fell from 74 to 9 us, its destroy from 166 to
 * 3 us). */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static int hold_n;
static grpc_channel *hold_anchor;

void rt_client_library_hold(void)
{
    rt_absl_no_deadlock_graph(); /* rt_absl.cc */
    grpc_init();
    pthread_mutex_lock(&hold_mu);
    if (hold_n++ == 0)
        hold_anchor = grpc_lame_client_channel_create(NULL, GRPC_STATUS_UNAVAILABLE,
                                                      "librtrain's library hold");
    pthread_mutex_unlock(&hold_mu);
}

void rt_client_library_release(void)
{
    grpc_channel *anchor = NULL;
    pthread_mutex_lock(&hold_mu);
    int held = hold_n > 0;
    if (held && --hold_n == 0) {
        anchor = hold_anchor;
        hold_anchor = NULL;
    }
    pthread_mutex_unlock(&hold_mu);
    if (anchor)
        grpc_channel_destroy(anchor);
    if (held)
        grpc_shutdown();
}

int rt_client_connect(const rt_client_opts *opts, rt_client **out, char *err, size_t errlen)
{
    char ebuf[256];
    if (!err || !errlen) {
        err = ebuf;
        errlen = sizeof ebuf;
    }
    err[0] = 0;
    if (!out)
        return RT_EINVAL;
    *out = NULL;
    rt_client_opts none;
    rt_client_opts_init(&none);
    const rt_client_opts *o = opts ? opts : &none;
    const char *target = opt_or_env(o, o->target, "RTRAIN_SERVER");
    if (!target)
        target = RT_DEFAULT_SERVER;
    rt_client *c = calloc(1, sizeof *c);
    if (!c)
        return RT_ENOMEM;
    c->target = rt__strdup(target);
    if (!c->target) {
        free(c);
        return RT_ENOMEM;
    }
    uint64_t t0 = rt_now_ns();
    int started = !grpc_is_initialized();
    rt_absl_no_deadlock_graph(); /* gRPC's locks without the debug graph */
    grpc_init();
    uint64_t t1 = rt_now_ns();
    c->conn.library_init_ns = started ? t1 - t0 : 0;
    c->conn.library_started = started;
    int rc = load_token(c, o, err, errlen);
    grpc_channel_credentials *creds = NULL;
    if (rc == 0)
        rc = make_creds(o, &creds, &c->tls, err, errlen);
    if (rc < 0) {
        rt_client_destroy(c);
        return rc;
    }
    /* GetWeights and Predict answers grow with the model and the data; the
     * 4 MiB default would turn them into RESOURCE_EXHAUSTED. */
    /* Uploads: the transport settings the daemon uses (rt_transport.h);
     * 3 more, the 2 reconnect backoffs and an address literal's authority. */
    grpc_arg args[6 + RT_TRANSPORT_NARGS];
    memset(args, 0, sizeof args);
    size_t nargs = rt_transport_args(args);
    args[nargs].type = GRPC_ARG_INTEGER;
    args[nargs].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[nargs++].value.integer = -1;
    args[nargs].type = GRPC_ARG_INTEGER;
    args[nargs].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[nargs++].value.integer = -1;
    if (c->tls && o->tls_server_name && *o->tls_server_name) {
        args[nargs].type = GRPC_ARG_STRING;
        args[nargs].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[nargs++].value.string = (char *)o->tls_server_name;
    }
    /* A restarted daemon is found again within a second: the default
     * reconnect backoff grows to two minutes. (GRPC_ARG_MIN_RECONNECT_
     * BACKOFF_MS stays: it is also the connect timeout, and a short one
     * fails handshakes on a loaded machine.) */
    static const char *const backoff[2] = {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                                           GRPC_ARG_MAX_RECONNECT_BACKOFF_MS};
    for (int i = 0; i < 2; i++) {
        args[nargs].type = GRPC_ARG_INTEGER;
        args[nargs].key = (char *)backoff[i];
        args[nargs].value.integer = i == 0 ? 100 : 1000;
        nargs++;
    }
    char *direct = literal_target(c->target);
    if (direct) {
        args[nargs].type = GRPC_ARG_STRING;
        args[nargs].key = (char *)GRPC_ARG_DEFAULT_AUTHORITY;
        args[nargs++].value.string = c->target;
    }
    grpc_channel_args ca = {nargs, args};
    c->ch = grpc_channel_create(direct ? direct : c->target, creds, &ca);
    free(direct);
    grpc_channel_credentials_release(creds);
    c->cq = grpc_completion_queue_create_for_pluck(NULL);
    if (!c->ch || !c->cq) {
        rt_client_destroy(c);
        return RT_ENOMEM;
    }
    /* Methods are registered on the channel at their first call
     * (rt_client_call.c): a client uses a few of the 17. */
    c->conn.channel_ns = rt_now_ns() - t1;
    c->timeout_ms = RT_CLIENT_DEFAULT_TIMEOUT_MS;
    c->next_timeout_ms = INT64_MIN;
    c->reattach_ms = RT_CLIENT_REATTACH_MS;
    c->grpc_status = -1;
    atomic_init(&c->cancel_flag, 0);
    *out = c;
    return 0;
}

int rt_client_create(const char *target, rt_client **out)
{
    rt_client_opts o;
    rt_client_opts_init(&o);
    o.target = target;
    return rt_client_connect(&o, out, NULL, 0);
}

int rt_client_is_tls(const rt_client *c) { return c ? c->tls : 0; }

int rt_client_connect_timings(const rt_client *c, rt_client_connect_times *out)
{
    if (!c || !out)
        return RT_EINVAL;
    *out = c->conn;
    return 0;
}

void rt_client_destroy(rt_client *c)
{
    if (!c)
        return;
    if (c->cq) {
        grpc_completion_queue_shutdown(c->cq);
        /* A pluck queue is drained with pluck on a tag that never comes;
         * after shutdown it returns GRPC_QUEUE_SHUTDOWN. */
        grpc_event ev;
        do {
            ev = grpc_completion_queue_pluck(c->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        } while (ev.type != GRPC_QUEUE_SHUTDOWN);
        grpc_completion_queue_destroy(c->cq);
    }
    if (c->ch)
        grpc_channel_destroy(c->ch);
    for (size_t i = 0; i < c->n_md; i++) {
        grpc_slice_unref(c->md[i].key);
        grpc_slice_unref(c->md[i].value);
    }
    if (c->target) {
        grpc_shutdown();
        free(c->target);
    }
    free(c->trace);
    free(c);
}

const char *rt_client_target(const rt_client *c) { return c ? c->target : ""; }
const char *rt_client_errmsg(const rt_client *c) { return c ? c->errmsg : ""; }
int rt_client_grpc_status(const rt_client *c) { return c ? c->grpc_status : -1; }

void rt_client_set_timeout_ms(rt_client *c, int64_t ms)
{
    if (c)
        c->timeout_ms = ms;
}

void rt_client_next_timeout_ms(rt_client *c, int64_t ms)
{
    if (c)
        c->next_timeout_ms = ms;
}

int rt_client_cancel(rt_client *c)
{
    /* Only an atomic store: safe from signal handlers and other threads.
     * The thread blocked in rt__pluck sees it within RT__POLL_MS. */
    if (c)
        atomic_store(&c->cancel_flag, 1);
    return 0;
}

void rt__call_begin(rt_client *c, int method)
{
    c->errmsg[0] = 0;
    c->grpc_status = -1;
    if (!c->in_loop)
        atomic_store(&c->cancel_flag, 0);
    memset(&c->cur, 0, sizeof c->cur);
    c->cur.method = rt_service_method_name(method);
    c->cur.start_ns = rt_now_ns();
    c->t_response = 0;
}

int rt__call_end(rt_client *c, int rc)
{
    /* The trace's room first, so that growing it is inside the call's own
     * time (its decode), not an unexplained gap after it. */
    if (c->trace_on && c->n_trace == c->cap_trace) {
        size_t cap = c->cap_trace ? c->cap_trace * 2 : 256;
        rt_client_timings *n = realloc(c->trace, cap * sizeof *n);
        if (n) {
            c->trace = n;
            c->cap_trace = cap;
        }
    }
    uint64_t now = rt_now_ns();
    rt_client_timings *t = &c->cur;
    t->client_total_ns = now - t->start_ns;
    if (c->t_response && now >= c->t_response)
        t->client_decode_ns = now - c->t_response;
    t->wire_ns = t->round_trip_ns > t->server_total_ns ? t->round_trip_ns - t->server_total_ns : 0;
    uint64_t known = t->client_encode_ns + t->round_trip_ns + t->client_decode_ns;
    t->unattributed_ns =
        t->server_other_ns + (t->client_total_ns > known ? t->client_total_ns - known : 0);
    c->last = *t;
    c->has_last = 1;
    /* Out of memory only loses trace entries, never the call. */
    if (c->trace_on && c->n_trace < c->cap_trace)
        c->trace[c->n_trace++] = *t;
    if (rc < 0 && !c->errmsg[0])
        snprintf(c->errmsg, sizeof c->errmsg, "%s: %s", c->cur.method, rt_strerror(rc));
    return rc;
}

int rt_client_last_timings(const rt_client *c, rt_client_timings *out)
{
    if (!c || !out)
        return RT_EINVAL;
    if (!c->has_last)
        return RT_ENOTFOUND;
    *out = c->last;
    return 0;
}

void rt_client_trace_enable(rt_client *c, int on)
{
    if (c)
        c->trace_on = on;
}

void rt_client_trace_clear(rt_client *c)
{
    if (c)
        c->n_trace = 0;
}

const rt_client_timings *rt_client_trace_calls(const rt_client *c, size_t *n)
{
    if (n)
        *n = c ? c->n_trace : 0;
    return c ? c->trace : NULL;
}

int rt_client_trace_write(const rt_client *c, const char *path)
{
    if (!c)
        return RT_EINVAL;
    return rt_client_trace_write_calls(c->trace, c->n_trace, path);
}

void rt__take_timings(rt_client *c, const Rtrain__V1__Timings *t, int add)
{
    if (!t)
        return;
    rt_client_timings *d = &c->cur;
    if (!add) {
        d->queue_ns = d->decode_ns = d->compile_ns = d->execute_ns = 0;
        d->encode_ns = d->server_other_ns = d->server_total_ns = 0;
        d->server_stream_wait_ns = d->auth_ns = d->durable_ns = 0;
    }
    d->has_server = 1;
    d->queue_ns += t->queue_ns;
    d->decode_ns += t->decode_ns;
    d->compile_ns += t->compile_ns;
    d->execute_ns += t->execute_ns;
    d->encode_ns += t->encode_ns;
    d->server_other_ns += t->other_ns;
    d->server_stream_wait_ns += t->stream_wait_ns;
    d->auth_ns += t->auth_ns;
    d->durable_ns += t->durable_ns;
    d->server_total_ns += t->total_ns;
    if (t->cache_hit)
        d->cache_hit = 1;
}

/* ------------------------------------------------------------- helpers */

int rt__check_id(rt_client *c, const char *what, const char *id)
{
    if (!id || !*id)
        return rt__err(c, RT_EINVAL, "%s id is empty", what);
    if (strlen(id) >= RT_ID_MAX)
        return rt__err(c, RT_EINVAL, "%s id is longer than %d bytes", what, RT_ID_MAX - 1);
    return 0;
}

int rt__check_ids(rt_client *c, const char *session, const char *program)
{
    int rc = rt__check_id(c, "session", session);
    return rc < 0 ? rc : rt__check_id(c, "program", program);
}

int rt__copy_id(rt_client *c, char dst[RT_ID_MAX], const char *src)
{
    if (!src || strlen(src) >= RT_ID_MAX)
        return rt__err(c, RT_EPROTO, "the daemon sent an id longer than %d bytes", RT_ID_MAX - 1);
    memcpy(dst, src, strlen(src) + 1);
    return 0;
}

int rt__shape_from_pb(rt_client *c, const char *what, size_t n, const int64_t *src, int *ndim,
                      int64_t dst[RT_CLIENT_MAX_DIMS])
{
    if (n > RT_CLIENT_MAX_DIMS)
        return rt__err(c, RT_EPROTO, "%s has %zu dims (at most %d)", what, n, RT_CLIENT_MAX_DIMS);
    *ndim = (int)n;
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i];
    return 0;
}

void rt__metrics_from_pb(const Rtrain__V1__Metrics *m, rt_client_metrics *out)
{
    memset(out, 0, sizeof *out);
    if (!m) {
        out->loss = out->accuracy = __builtin_nan("");
        return;
    }
    out->loss = m->loss;
    out->accuracy = m->accuracy;
    out->samples = m->samples;
    for (size_t i = 0; i < m->n_values && out->n_values < RT_CLIENT_MAX_METRICS; i++) {
        if (!m->values[i] || !m->values[i]->name)
            continue;
        snprintf(out->value_name[out->n_values], sizeof out->value_name[0], "%s",
                 m->values[i]->name);
        out->values[out->n_values++] = m->values[i]->value;
    }
}

void rt__epoch_from_pb(const Rtrain__V1__EpochEnd *e, rt_client_epoch *out)
{
    memset(out, 0, sizeof *out);
    out->epoch = e->epoch;
    rt__metrics_from_pb(e->train, &out->train);
    out->has_val = e->val != NULL;
    rt__metrics_from_pb(e->val, &out->val);
    out->steps = e->steps;
    out->execute_ns = e->execute_ns;
}

int rt__array_nbytes(rt_client *c, const char *what, const rt_client_array *a, size_t *nbytes)
{
    size_t es = rt_client_dtype_size(a->dtype);
    if (!es)
        return rt__err(c, RT_EDTYPE, "%s: unknown dtype %d", what, (int)a->dtype);
    if (a->ndim < 1 || a->ndim > RT_CLIENT_MAX_DIMS)
        return rt__err(c, RT_ESHAPE, "%s: ndim %d outside 1..%d", what, a->ndim,
                       RT_CLIENT_MAX_DIMS);
    size_t n = es;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] < 0)
            return rt__err(c, RT_ESHAPE, "%s: negative dim %d", what, i);
        if (a->shape[i] && n > SIZE_MAX / (size_t)a->shape[i])
            return rt__err(c, RT_EOVERFLOW, "%s: size overflows", what);
        n *= (size_t)a->shape[i];
    }
    if (n && !a->data)
        return rt__err(c, RT_EINVAL, "%s: data is NULL", what);
    *nbytes = n;
    return 0;
}

int rt__tensor_from_pb(rt_client *c, const Rtrain__V1__Tensor *t, rt_client_tensor *out)
{
    memset(out, 0, sizeof *out);
    size_t es = rt_client_dtype_size((rt_client_dtype)t->dtype);
    if (!es)
        return rt__err(c, RT_EPROTO, "tensor '%s' has unknown dtype %d", t->name ? t->name : "",
                       (int)t->dtype);
    int rc = rt__shape_from_pb(c, "tensor", t->n_shape, t->shape, &out->ndim, out->shape);
    if (rc < 0)
        return rc;
    size_t n = es;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] < 0 || (out->shape[i] && n > SIZE_MAX / (size_t)out->shape[i]))
            return rt__err(c, RT_EPROTO, "tensor '%s' has a bad shape", t->name);
        n *= (size_t)out->shape[i];
    }
    if (n != t->data.len)
        return rt__err(c, RT_EPROTO,
                       "tensor '%s': %zu data bytes for a shape "
                       "of %zu bytes",
                       t->name, t->data.len, n);
    out->dtype = (rt_client_dtype)t->dtype;
    out->name = rt__strdup(t->name);
    out->data = malloc(n ? n : 1);
    if (!out->name || !out->data) {
        rt_client_tensor_free(out);
        return rt__err(c, RT_ENOMEM, "out of memory");
    }
    if (n)
        memcpy(out->data, t->data.data, n);
    out->nbytes = n;
    return 0;
}

void rt_client_tensor_free(rt_client_tensor *t)
{
    if (!t)
        return;
    free(t->name);
    free(t->data);
    memset(t, 0, sizeof *t);
}

int64_t rt_client_tensor_numel(const rt_client_tensor *t)
{
    if (!t)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}
