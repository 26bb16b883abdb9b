/* rt_h_session.c - GetInfo, Ping, CreateSession, CloseSession. */
#include "rt_handlers.h"

/* ---------------------------------------------------------------- GetInfo */
static const char *const formats[] = {"raw",      "npy",         "csv",           "idx", "idx.gz",
                                      "tfrecord", "tfrecord.gz", "tfrecord.zlib", NULL};

static char **strv(rt_call *c, const char *const *v, size_t *n)
{
    size_t k = 0;
    while (v && v[k])
        k++;
    char **out = rt_call_alloc(c, sizeof(char *) * (k ? k : 1));
    if (out)
        for (size_t i = 0; i < k; i++)
            out[i] = (char *)v[i];
    *n = out ? k : 0;
    return out;
}

int rt_h_get_info(rt_call *c)
{
    rt_srv *s = c->srv;
    Rtrain__V1__InfoResponse *r = NEW(c, Rtrain__V1__InfoResponse, RTRAIN__V1__INFO_RESPONSE__INIT);
    Rtrain__V1__Device *d = NEW(c, Rtrain__V1__Device, RTRAIN__V1__DEVICE__INIT);
    Rtrain__V1__Device **dv = rt_call_alloc(c, sizeof *dv);
    Rtrain__V1__Limits *l = NEW(c, Rtrain__V1__Limits, RTRAIN__V1__LIMITS__INIT);
    char *backend = rt_call_alloc(c, 64);
    if (!r || !d || !dv || !l || !backend)
        return OOM(c);
    r->version = RT_VERSION_STRING;
    r->engine_version = RT_ENGINE_VERSION;
    snprintf(backend, 64, "%s", rt_backend_describe()); /* rtraind --backend */
    d->name = "cpu0";
    d->kind = "cpu";
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    d->memory_bytes = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    d->cores = nc > 0 ? (uint32_t)nc : 1;
    d->backend = backend;
    dv[0] = d;
    r->n_devices = 1;
    r->devices = dv;
    l->max_message_bytes = s->cfg.max_message_bytes;
    l->max_dataset_bytes = s->cfg.max_dataset_bytes;
    l->max_upload_bytes = rt_h_upload_limit(c);
    l->max_sessions = (uint32_t)s->cfg.max_sessions;
    l->max_dim = RT_MAX_DIM_LIMIT;
    l->max_params = RT_MAX_PARAMS_LIMIT;
    l->max_steps_per_call = RT_MAX_STEPS_PER_CALL;
    r->limits = l;
    r->ops = strv(c, rt_engine_op_names(), &r->n_ops);
    r->formats = strv(c, formats, &r->n_formats);
    r->losses = strv(c, rt_engine_loss_names(), &r->n_losses);
    r->optimizers = strv(c, rt_engine_optimizer_names(), &r->n_optimizers);
    if (rt_dist_size() > 1 || rt_dist_micro() > 0) {
        r->replica_hosts = rt_call_alloc(c, sizeof(char *) * (size_t)rt_dist_size());
        if (!r->replica_hosts)
            return OOM(c);
        for (int i = 0; i < rt_dist_size(); i++)
            r->replica_hosts[r->n_replica_hosts++] = (char *)rt_dist_host(i);
        r->deterministic_reduce = (uint32_t)rt_dist_micro();
    }
    r->state = s->state ? "disk" : "memory";
    c->resp = &r->base;
    return 0;
}

/* ------------------------------------------------------------------- Ping */
int rt_h_ping(rt_call *c)
{
    Rtrain__V1__PingRequest *q = REQ(c, Rtrain__V1__PingRequest);
    Rtrain__V1__PingResponse *r = NEW(c, Rtrain__V1__PingResponse, RTRAIN__V1__PING_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    size_t n = q->response_bytes;
    if (n > c->srv->cfg.max_message_bytes)
        return rt_call_fail(c, RT_ETOOBIG, "response_bytes %zu is over the message limit %llu", n,
                            (unsigned long long)c->srv->cfg.max_message_bytes);
    if (n) {
        uint8_t *p = rt_call_alloc(c, n);
        if (!p)
            return OOM(c);
        /* Echo the request's bytes, repeated to the asked size. */
        if (q->payload.len)
            for (size_t i = 0; i < n; i += q->payload.len)
                memcpy(p + i, q->payload.data, n - i < q->payload.len ? n - i : q->payload.len);
        r->payload.data = p;
        r->payload.len = n;
    }
    c->resp = &r->base;
    return 0;
}

/* --------------------------------------------------------------- Sessions */
int rt_h_create_session(rt_call *c)
{
    Rtrain__V1__CreateSessionRequest *q = REQ(c, Rtrain__V1__CreateSessionRequest);
    Rtrain__V1__CreateSessionResponse *r =
        NEW(c, Rtrain__V1__CreateSessionResponse, RTRAIN__V1__CREATE_SESSION_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    rt_session *s;
    char err[200], sid[16], name[80];
    int rc = rt_principal_reserve(c->who, RT_Q_SESSIONS, 1, err, sizeof err);
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", err);
    rc = rt_session_open(c->srv->sessions, q->name, c->who, &s);
    if (rc == RT_ETOOBIG)
        return rt_call_fail(c, rc, "session limit (%d) reached", c->srv->cfg.max_sessions);
    if (rc < 0)
        return rt_call_fail(c, rc, "cannot create a session");
    r->session_id = rt_call_strdup(c, s->id);
    r->session_token = rt_call_strdup(c, s->token);
    uint64_t t0 = c->srv->state ? rt_now_ns() : 0;
    if (c->srv->state && (rc = rt_state_session_save(c->srv->state, s, err, sizeof err)) < 0) {
        rt_session_close(c->srv->sessions, s->id, c->who);
        rt_session_release(s);
        return rt_call_fail(c, rc, "cannot keep the session: %s", err);
    }
    if (c->srv->state)
        c->tm.durable_ns += rt_now_ns() - t0;
    RT_LOG(RT_LOG_INFO, "session %s opened by %s (\"%s\")", rt_log_id(s->id, sid),
           rt_principal_name(c->who), rt_log_esc(q->name, name, sizeof name));
    rt_session_release(s);
    c->resp = &r->base;
    return r->session_id && r->session_token ? 0 : OOM(c);
}

int rt_h_close_session(rt_call *c)
{
    Rtrain__V1__CloseSessionRequest *q = REQ(c, Rtrain__V1__CloseSessionRequest);
    Rtrain__V1__CloseSessionResponse *r =
        NEW(c, Rtrain__V1__CloseSessionResponse, RTRAIN__V1__CLOSE_SESSION_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    if (rt_session_close(c->srv->sessions, q->session_id, c->who) < 0)
        return rt_call_fail(c, RT_ENOTFOUND, "unknown session '%.64s'", q->session_id);
    if (c->srv->state) {
        uint64_t t0 = rt_now_ns();
        rt_state_session_remove(c->srv->state, q->session_id);
        c->tm.durable_ns += rt_now_ns() - t0;
    }
    char sid[16];
    RT_LOG(RT_LOG_INFO, "session %s closed", rt_log_id(q->session_id, sid));
    c->resp = &r->base;
    return 0;
}
