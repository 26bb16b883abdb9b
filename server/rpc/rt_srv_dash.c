/* rt_srv_dash.c - the server's side of the dashboard (server/obs/rt_dash.h):
 * what a call's end and a Fit's epochs record, and the view of sessions,
 * programs, data, lanes and replicas the page reads. Everything here runs
 * at a call's end, at an epoch's end or on the HTTP thread, never per step;
 * the HTTP thread copies under the owners' locks and renders after. */
#include "rt_srv_impl.h"
#include "rt_bufpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_dist.h"
#include "rt_stream.h"

#define SID 11       /* ids shown: "s-" and 8 hex digits (ids are capabilities) */
#define MAX_SESS 256 /* shown; the rest are counted */
#define MAX_PROGS 512
#define MAX_DS 512
#define MAX_PRINCIPALS 256

static void short_id(char dst[SID], const char *id)
{
    size_t n = id ? strnlen(id, SID - 1) : 0;
    if (n)
        memcpy(dst, id, n);
    dst[n] = 0;
}

static const char *owner_name(const rt_principal *p) { return p ? rt_principal_name(p) : "local"; }

/* ------------------------------------------------------------- recording */
void rt_srv_dash_call(rt_call *c, int code, const char *session_id)
{
    char sess[SID];
    short_id(sess, session_id);
    uint64_t steps = c->m->req_desc == &rtrain__v1__run_steps_request__descriptor && c->req
                         ? ((const Rtrain__V1__RunStepsRequest *)c->req)->steps
                         : 0;
    rt_dash_call(c->m->path, c->who_name, sess, code, steps, c->has_sent_tm ? &c->sent_tm : NULL);
    if (c->dash_fit)
        rt_dash_fit_end(c->dash_fit, code);
}

void rt_srv_dash_fit_begin(rt_call *c)
{
    char sess[SID], prog[SID];
    short_id(sess, c->sess ? c->sess->id : NULL);
    short_id(prog, c->prog ? rt_program_id(c->prog) : NULL);
    const Rtrain__V1__FitRequest *q = (const Rtrain__V1__FitRequest *)c->req;
    c->dash_fit = rt_dash_fit_begin(c->who_name, sess, prog, q ? q->epochs : 0);
}

void rt_srv_dash_epoch(rt_call *c, const Rtrain__V1__EpochEnd *e)
{
    if (!c->dash_fit || !e)
        return;
    rt_dash_point pt = {.epoch = (int64_t)e->epoch,
                        .step = (int64_t)e->steps,
                        .loss = e->train ? e->train->loss : NAN,
                        .acc = e->train ? e->train->accuracy : NAN,
                        .val_loss = e->val ? e->val->loss : NAN,
                        .val_acc = e->val ? e->val->accuracy : NAN,
                        .execute_ns = e->execute_ns};
    rt_dash_fit_epoch(c->dash_fit, &pt);
}

/* --------------------------------------------------------------- the view */
typedef struct prog_view {
    char id[SID];
    int sess;
    rt_compile_report rep;
    int has_rep;
} prog_view;

typedef struct sess_view {
    char id[SID];
    char name[64];
    char owner[64];
    uint64_t idle_ms;
    int n_progs;
} sess_view;

typedef struct view {
    const char *principal; /* NULL: everyone's */
    uint64_t now_ns;
    sess_view *sv;
    int ns, ns_all;
    prog_view *pv;
    int np;
} view;

static void take_session(void *ud, rt_session *s)
{
    view *v = ud;
    const char *owner = owner_name(s->owner);
    if (v->principal && strcmp(owner, v->principal) != 0)
        return;
    v->ns_all++;
    if (v->ns >= MAX_SESS)
        return;
    sess_view *o = &v->sv[v->ns];
    short_id(o->id, s->id);
    snprintf(o->name, sizeof o->name, "%s", s->name);
    snprintf(o->owner, sizeof o->owner, "%s", owner);
    uint64_t used = __atomic_load_n(&s->last_used_ns, __ATOMIC_RELAXED);
    o->idle_ms = v->now_ns > used ? (v->now_ns - used) / 1000000 : 0;
    o->n_progs = s->n_progs;
    for (int k = 0; k < s->n_progs && v->np < MAX_PROGS; k++) {
        prog_view *p = &v->pv[v->np++];
        short_id(p->id, rt_program_id(s->progs[k]));
        p->sess = v->ns;
        rt_plan *plan = rt_program_plan(s->progs[k]);
        const rt_compile_report *r = plan ? rt_plan_report(plan) : NULL;
        p->has_rep = r != NULL;
        if (r)
            p->rep = *r;
    }
    v->ns++;
}

typedef struct ds_view {
    char id[SID];
    char owner[64];
    int64_t n;
    char shape[64];
    uint64_t bytes, spool;
    int streamed;
} ds_view;

typedef struct ds_list {
    const char *principal;
    ds_view *v;
    int n, n_all;
    uint64_t bytes;
} ds_list;

static void take_dataset(void *ud, const rt_dataset *ds)
{
    ds_list *l = ud;
    const char *owner = owner_name(ds->owner);
    if (l->principal && strcmp(owner, l->principal) != 0)
        return;
    l->n_all++;
    uint64_t bytes = rt_dataset_bytes(ds);
    l->bytes += bytes;
    if (l->n >= MAX_DS)
        return;
    ds_view *o = &l->v[l->n++];
    short_id(o->id, ds->id);
    snprintf(o->owner, sizeof o->owner, "%s", owner);
    o->n = ds->n;
    rt_data_shape_str(ds->x_ndim, ds->x_dims, o->shape, sizeof o->shape);
    o->bytes = bytes;
    o->streamed = ds->stream != NULL;
    o->spool = ds->stream ? rt_stream_file_bytes(ds->stream) : 0;
}

static void render_sessions(rt_srv *s, const char *principal, rt_dash_buf *b)
{
    view v = {.principal = principal, .now_ns = rt_now_ns()};
    v.sv = calloc(MAX_SESS, sizeof *v.sv);
    v.pv = calloc(MAX_PROGS, sizeof *v.pv);
    if (!v.sv || !v.pv) {
        free(v.sv);
        free(v.pv);
        b->oom = 1;
        return;
    }
    rt_session_each(s->sessions, take_session, &v);
    rt_dash_printf(b, "\"sessions_total\":%d,\"sessions\":[", v.ns_all);
    for (int i = 0; i < v.ns; i++) {
        rt_dash_printf(b, "%s{\"id\":", i ? "," : "");
        rt_dash_str(b, v.sv[i].id);
        rt_dash_printf(b, ",\"name\":");
        rt_dash_str(b, v.sv[i].name);
        rt_dash_printf(b, ",\"principal\":");
        rt_dash_str(b, v.sv[i].owner);
        rt_dash_printf(b, ",\"idle_ms\":%llu,\"programs\":%d}", (unsigned long long)v.sv[i].idle_ms,
                       v.sv[i].n_progs);
    }
    rt_dash_printf(b, "],\"programs\":[");
    for (int i = 0; i < v.np; i++) {
        const prog_view *p = &v.pv[i];
        rt_dash_printf(b, "%s{\"id\":", i ? "," : "");
        rt_dash_str(b, p->id);
        rt_dash_printf(b, ",\"session\":");
        rt_dash_str(b, v.sv[p->sess].id);
        if (p->has_rep) {
            const rt_compile_report *r = &p->rep;
            rt_dash_printf(
                b,
                ",\"report\":{\"param_count\":%llu,\"trainable_param_count\":%llu,"
                "\"flops_per_step\":%llu,\"arena_bytes\":%llu,\"naive_bytes\":%llu,"
                "\"param_bytes\":%llu,\"compile_ns\":%llu,\"nodes\":%u,"
                "\"kernels\":%u,\"passes\":[",
                (unsigned long long)r->param_count, (unsigned long long)r->trainable_param_count,
                (unsigned long long)r->flops_per_step, (unsigned long long)r->arena_bytes,
                (unsigned long long)r->naive_bytes, (unsigned long long)r->param_bytes,
                (unsigned long long)r->compile_ns, r->n_nodes, r->n_kernels);
            for (int k = 0; k < RT_COMPILE_PASSES; k++) {
                rt_dash_printf(b, "%s{\"name\":", k ? "," : "");
                rt_dash_str(b, rt_compile_pass_name(k));
                rt_dash_printf(b, ",\"ns\":%llu}", (unsigned long long)r->pass_ns[k]);
            }
            rt_dash_printf(b, "]}");
        }
        rt_dash_printf(b, "}");
    }
    rt_dash_printf(b, "],");
    free(v.sv);
    free(v.pv);
}

static void render_principals(rt_srv *s, const char *principal, rt_dash_buf *b)
{
    rt_principal *ps[MAX_PRINCIPALS];
    int n = rt_principal_set_list(s->principals, ps, MAX_PRINCIPALS);
    rt_dash_printf(b, "\"principals\":[");
    int any = 0;
    for (int i = 0; i < n; i++) {
        const char *name = rt_principal_name(ps[i]);
        if (principal && strcmp(name, principal) != 0)
            continue;
        rt_dash_printf(b, "%s{\"name\":", any++ ? "," : "");
        rt_dash_str(b, name);
        rt_dash_printf(b, ",\"quotas\":[");
        for (int k = 0; k < RT_Q__COUNT; k++) {
            rt_dash_printf(b, "%s{\"name\":", k ? "," : "");
            rt_dash_str(b, rt_quota_name((rt_quota_kind)k));
            uint64_t lim = rt_principal_limit(ps[i], (rt_quota_kind)k);
            rt_dash_printf(b, ",\"used\":%llu,\"limit\":",
                           (unsigned long long)rt_principal_used(ps[i], (rt_quota_kind)k));
            if (lim == UINT64_MAX)
                rt_dash_printf(b, "null}");
            else
                rt_dash_printf(b, "%llu}", (unsigned long long)lim);
        }
        rt_dash_printf(b, "]}");
    }
    rt_dash_printf(b, "],");
}

static void render_data(rt_srv *s, const char *principal, rt_dash_buf *b)
{
    ds_list l = {.principal = principal};
    l.v = calloc(MAX_DS, sizeof *l.v);
    if (!l.v) {
        b->oom = 1;
        return;
    }
    rt_data_store_each(s->data, take_dataset, &l);
    rt_dash_printf(b, "\"datasets_total\":%d,\"datasets\":[", l.n_all);
    uint64_t spool = 0;
    for (int i = 0; i < l.n; i++) {
        const ds_view *d = &l.v[i];
        spool += d->spool;
        rt_dash_printf(b, "%s{\"id\":", i ? "," : "");
        rt_dash_str(b, d->id);
        rt_dash_printf(b, ",\"principal\":");
        rt_dash_str(b, d->owner);
        rt_dash_printf(b, ",\"samples\":%lld,\"x_shape\":", (long long)d->n);
        rt_dash_str(b, d->shape);
        rt_dash_printf(b, ",\"bytes\":%llu,\"streamed\":%s,\"spool_bytes\":%llu}",
                       (unsigned long long)d->bytes, d->streamed ? "true" : "false",
                       (unsigned long long)d->spool);
    }
    /* Server-wide numbers carry no names: a principal sees how full the
     * store is, not whose data fills it. */
    rt_dash_printf(b,
                   "],\"store\":{\"bytes_visible\":%llu,\"bytes\":%llu,\"max_bytes\":%llu,"
                   "\"datasets\":%zu,\"spool_bytes_visible\":%llu,\"max_spool_bytes\":%llu},",
                   (unsigned long long)l.bytes, (unsigned long long)rt_data_store_bytes(s->data),
                   (unsigned long long)s->cfg.max_store_bytes, rt_data_store_count(s->data),
                   (unsigned long long)spool, (unsigned long long)s->cfg.max_spool_bytes);
    free(l.v);
}

static void render_server(rt_srv *s, rt_dash_buf *b)
{
    pthread_mutex_lock(&s->q_mu);
    int q_len = s->q_len, n_exec = s->n_exec, idle = s->idle_exec;
    pthread_mutex_unlock(&s->q_mu);
    pthread_mutex_lock(&s->dev_mu);
    int lanes = s->n_lanes, held = s->dev_held;
    pthread_mutex_unlock(&s->dev_mu);
    pthread_mutex_lock(&s->up_mu);
    int uploads = s->n_uploads;
    uint64_t up_bytes = s->upload_bytes;
    pthread_mutex_unlock(&s->up_mu);
    uint64_t kept = rt_upload_store_bytes(&s->upstore);
    rt_dash_printf(b,
                   "\"executor\":{\"queue_depth\":%d,\"threads\":%d,\"idle_threads\":%d,"
                   "\"max_threads\":%d,\"device_held\":%s,\"device_waiting\":%d,"
                   "\"short_waiting\":%d,\"lanes\":%d,\"slice_ns\":%llu,\"live_calls\":%d,"
                   "\"pending\":%d},",
                   q_len, n_exec, idle, s->cfg.max_exec_threads, held ? "true" : "false",
                   __atomic_load_n(&s->dev_waiting, __ATOMIC_RELAXED),
                   __atomic_load_n(&s->dev_short_waiting, __ATOMIC_RELAXED), lanes,
                   (unsigned long long)s->cfg.slice_ns, rt_srv_live_calls(s),
                   __atomic_load_n(&s->q_pending, __ATOMIC_RELAXED));
    rt_dash_printf(b,
                   "\"uploads\":{\"in_flight\":%d,\"reserved_bytes\":%llu,\"kept_bytes\":%llu,"
                   "\"pool_bytes\":%llu},",
                   uploads, (unsigned long long)up_bytes, (unsigned long long)kept,
                   (unsigned long long)rt_bufpool_idle_bytes());
    uint64_t ok, failed, bytes, last;
    rt_metrics_checkpoint_stats(&ok, &failed, &bytes, &last);
    rt_dash_printf(b,
                   "\"checkpoints\":{\"durable\":%s,\"written\":%llu,\"failed\":%llu,"
                   "\"bytes\":%llu,\"last_ms\":%llu,\"every_steps\":%u,\"every_s\":%u},",
                   s->state ? "true" : "false", (unsigned long long)ok, (unsigned long long)failed,
                   (unsigned long long)bytes, (unsigned long long)last, s->cfg.ckpt_every_steps,
                   s->cfg.ckpt_every_s);
    int n = rt_dist_size();
    rt_dash_printf(b, "\"replicas\":[");
    for (int i = 0; i < n; i++) {
        rt_dash_printf(b, "%s{\"rank\":%d,\"host\":", i ? "," : "", i);
        rt_dash_str(b, rt_dist_host(i));
        rt_dash_printf(b, "}");
    }
    rt_dash_printf(b, "],\"version\":");
    rt_dash_str(b, RT_VERSION_STRING);
    rt_dash_printf(b, ",\"uptime_ms\":%llu,",
                   (unsigned long long)((rt_now_ns() - s->start_ns) / 1000000));
}

static void dash_state(void *ud, const char *principal, rt_dash_buf *b)
{
    rt_srv *s = ud;
    render_sessions(s, principal, b);
    render_principals(s, principal, b);
    render_data(s, principal, b);
    render_server(s, b);
}

static int dash_who(void *ud, const char *tok, size_t len, char *out, size_t outlen)
{
    rt_srv *s = ud;
    const char *why = NULL;
    rt_principal *p = rt_auth_check_token(s->auth, tok, len, &why);
    if (!p)
        return RT_EAUTH;
    snprintf(out, outlen, "%s", rt_principal_name(p));
    return 0;
}

void rt_srv_dash_attach(rt_srv *s)
{
    rt_dash_provider p = {
        .ud = s, .auth_required = rt_auth_required(s->auth), .who = dash_who, .state = dash_state};
    rt_dash_attach(&p);
}
