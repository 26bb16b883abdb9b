/* rt_srv_obs.c - the daemon's side of observability: what a call's end
 * records (metrics, the access log line) and the gauges /metrics reads. */
#include "rt_srv_impl.h"
#include "rt_srv_core.h"
#include "rt_bufpool.h"

#include <string.h>

#include "rt_health.h"
#include "rt_log.h"

/* Session ids are capabilities: logs carry only "s-" and 6 hex digits. */
#define SESSION_PREFIX 8

void rt_srv_obs_init(void)
{
    static const char *names[RT_METRICS_MAX_METHODS];
    int n = rt_n_methods < RT_METRICS_MAX_METHODS ? rt_n_methods : RT_METRICS_MAX_METHODS;
    for (int i = 0; i < n; i++)
        names[i] = rt_methods[i].path;
    rt_metrics_init(names, n);
}

/* A message's session_id string field, or NULL. */
static const char *session_field(const ProtobufCMessage *m)
{
    if (!m)
        return NULL;
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "session_id");
    if (!f || f->type != PROTOBUF_C_TYPE_STRING || f->label == PROTOBUF_C_LABEL_REPEATED)
        return NULL;
    return *(const char *const *)((const char *)m + f->offset);
}

/* The session a call was about: the one it looked up, else the request's
 * session_id (a call that failed before the lookup), else the response's
 * (CreateSession). */
static const char *call_session(const rt_call *c)
{
    if (c->sess)
        return c->sess->id;
    const char *id = session_field(c->req);
    if (id && *id)
        return id;
    return c->err ? NULL : session_field(c->resp);
}

void rt_srv_observe_call(rt_call *c, int code)
{
    uint64_t now = rt_now_ns();
    rt_metrics_call((int)(c->m - rt_methods), code, &c->tm, now);
    const char *sid = call_session(c);
    rt_srv_dash_call(c, code, sid);
    int json = rt_log_get_format() == RT_LOG_FORMAT_JSON;
    if ((int)(json ? RT_LOG_INFO : RT_LOG_DEBUG) > (int)rt_obs_level())
        return;
    char sess[SESSION_PREFIX + 1] = "";
    if (sid) {
        size_t n = strnlen(sid, SESSION_PREFIX);
        memcpy(sess, sid, n);
        sess[n] = 0;
    }
    rt_log_call_info ci = {
        /* NULL (logged "anonymous") when the call was refused before its
         * token was checked. */
        .principal = c->who_name,
        .session = sess,
        .method = c->m->path,
        .code = code,
        .duration_ns = now > c->tm.arrival_ns ? now - c->tm.arrival_ns : 0,
        .error = c->err ? c->errmsg : NULL,
    };
    rt_log_call(&ci);
}

void rt_srv_metrics_collect(void *ud, struct rt_metrics_gauges *g)
{
    rt_srv *s = ud;
    rt_session_usage u;
    rt_session_table_usage(s->sessions, &u);
    g->sessions = u.sessions;
    g->programs = u.programs;
    g->mem_params = u.param_bytes;
    g->mem_activations = u.arena_bytes;
    g->plans_cached = (uint64_t)rt_plan_cache_count(s->plans);
    g->datasets = (uint64_t)rt_data_store_count(s->data);
    g->stored_bytes = g->mem_datasets = rt_data_store_bytes(s->data);
    int live = rt_srv_live_calls(s);
    g->live_calls = live > 0 ? (uint64_t)live : 0;
    g->calls_held = (uint64_t)rt__pipe_held_count(s);
    g->serving = s->health ? rt_health_serving(s->health) : 0;
    g->upload_kept_bytes = rt_upload_store_bytes(&s->upstore);
    pthread_mutex_lock(&s->up_mu);
    g->uploads = s->n_uploads > 0 ? (uint64_t)s->n_uploads : 0;
    g->upload_reserved_bytes = s->upload_bytes;
    pthread_mutex_unlock(&s->up_mu);
    g->upload_pool_bytes = rt_bufpool_idle_bytes();
    g->charged_bytes = rt_principal_set_budget_used(s->principals);
}
