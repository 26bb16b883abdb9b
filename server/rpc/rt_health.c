/* rt_health.c - grpc.health.v1.Health: Check (unary) and Watch (server
 * stream). Low traffic, so one mutex guards the serving state, the list of
 * watchers and every watcher's send state. */
#include "rt_health.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>

#include "health.pb-c.h"
#include "rt_obs.h"
#include "rt_srv_impl.h" /* RT_TAG_POST: the tag hand-off between cq threads */
#include "rt_wire.h"

typedef Grpc__Health__V1__HealthCheckResponse__ServingStatus hstatus;
#define H_SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
#define H_NOT_SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
#define H_SERVICE_UNKNOWN GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN

/* Same layout as the server's rt__tag: the cq threads call fn(tag, ok). */
typedef struct htag {
    void (*fn)(struct htag *t, int ok);
} htag;

#define H_CONTAINER(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

enum { M_CHECK, M_WATCH, M_LIST, M_N };
static const char *const paths[M_N] = {
    "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch", "/grpc.health.v1.Health/List"};
/* The services this daemon reports, all with the daemon's status. */
static const char *const services[] = {"", "rtrain.v1.Trainer"};
#define N_SERVICES 2

typedef struct hcall hcall;

struct rt_health {
    grpc_server *server;
    grpc_completion_queue *cq;
    void *reg[M_N];
    rt_health_hooks hooks;
    pthread_mutex_t mu;
    int serving;
    int stopping;
    hcall *watchers;
};

struct hcall {
    htag arrive, send, close, final;
    rt_health *h;
    int method;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    int refs; /* under h->mu: batches in flight + 1 */
    int recv_cancelled;
    grpc_byte_buffer *out; /* the message in flight */
    grpc_slice details;
    int has_details;
    /* Watch */
    hcall *next, *prev;
    int known;      /* a service this daemon reports */
    int want, sent; /* status to report, last one sent (-1 none) */
    int sending, ending, final_started, sent_md;
};

static int service_known(const char *name)
{
    for (int i = 0; i < N_SERVICES; i++)
        if (strcmp(name ? name : "", services[i]) == 0)
            return 1;
    return 0;
}

static grpc_byte_buffer *pack_list(hstatus st)
{
    Grpc__Health__V1__HealthCheckResponse rs = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    rs.status = st;
    Grpc__Health__V1__HealthListResponse__StatusesEntry e[N_SERVICES], *pe[N_SERVICES];
    for (int i = 0; i < N_SERVICES; i++) {
        grpc__health__v1__health_list_response__statuses_entry__init(&e[i]);
        e[i].key = (char *)services[i];
        e[i].value = &rs;
        pe[i] = &e[i];
    }
    Grpc__Health__V1__HealthListResponse r = GRPC__HEALTH__V1__HEALTH_LIST_RESPONSE__INIT;
    r.n_statuses = N_SERVICES;
    r.statuses = pe;
    return rt_wire_pack(&r.base, NULL);
}

static grpc_byte_buffer *pack_status(hstatus st)
{
    Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = st;
    return rt_wire_pack(&r.base, NULL);
}

static void on_arrive(htag *t, int ok);
static void on_send(htag *t, int ok);
static void on_close(htag *t, int ok);
static void on_final(htag *t, int ok);

static void request(rt_health *h, int method)
{
    hcall *c = calloc(1, sizeof *c);
    if (!c) {
        RT_LOG(RT_LOG_ERROR, "out of memory posting a call for %s", paths[method]);
        return;
    }
    c->h = h;
    c->method = method;
    c->arrive.fn = on_arrive;
    c->send.fn = on_send;
    c->close.fn = on_close;
    c->final.fn = on_final;
    c->sent = -1;
    grpc_metadata_array_init(&c->md);
    RT_TAG_POST(&c->arrive);
    if (grpc_server_request_registered_call(h->server, h->reg[method], &c->call, &c->deadline,
                                            &c->md, &c->payload, h->cq, h->cq,
                                            &c->arrive) != GRPC_CALL_OK) {
        grpc_metadata_array_destroy(&c->md);
        free(c);
    }
}

static void hcall_free(hcall *c, int matched)
{
    rt_health *h = c->h;
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    if (c->out)
        grpc_byte_buffer_destroy(c->out);
    if (c->has_details)
        grpc_slice_unref(c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->call)
        grpc_call_unref(c->call);
    free(c);
    if (matched && h->hooks.call_end)
        h->hooks.call_end(h->hooks.ud);
}

/* Under h->mu. Returns 1 when the last reference went: free after unlock. */
static int unref_locked(hcall *c) { return --c->refs == 0; }

/* Start a batch under h->mu, holding a reference for it. A batch that
 * cannot start gives its reference back and returns -1. */
static int start_locked(hcall *c, const grpc_op *ops, size_t n, htag *tag)
{
    c->refs++;
    RT_TAG_POST(tag);
    if (grpc_call_start_batch(c->call, ops, n, tag, NULL) == GRPC_CALL_OK)
        return 0;
    c->refs--;
    return -1;
}

/* Unary answer, or a Watch that fails before streaming: one batch with the
 * status, and the message out when it is not NULL (consumed). */
static void answer(hcall *c, grpc_byte_buffer *out, grpc_status_code code, const char *msg)
{
    rt_health *h = c->h;
    grpc_op ops[4];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if ((c->out = out) != NULL) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->out;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    if (msg) {
        c->details = grpc_slice_from_copied_string(msg);
        c->has_details = 1;
        ops[n].data.send_status_from_server.status_details = &c->details;
    }
    n++;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->recv_cancelled;
    pthread_mutex_lock(&h->mu);
    int bad = start_locked(c, ops, n, &c->final) < 0;
    int last = unref_locked(c); /* the owner's */
    pthread_mutex_unlock(&h->mu);
    if (bad)
        RT_LOG(RT_LOG_WARN, "%s: cannot answer", paths[c->method]);
    if (last)
        hcall_free(c, 1);
}

/* Watch: send the next status, or end the stream. Under h->mu. */
static void pump_locked(hcall *c)
{
    if (c->sending || c->final_started)
        return;
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->sent_md)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->sent_md = 1; /* the batch started below carries it */
    if (c->want != c->sent) {
        c->out = pack_status((hstatus)c->want);
        if (!c->out)
            return;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->out;
        c->sent = c->want;
        c->sending = 1;
        if (start_locked(c, ops, n, &c->send) < 0) {
            c->sending = 0;
            grpc_byte_buffer_destroy(c->out);
            c->out = NULL;
        }
        return;
    }
    if (!c->ending)
        return;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = GRPC_STATUS_UNAVAILABLE;
    c->details = grpc_slice_from_static_string("the daemon is shutting down");
    c->has_details = 1;
    ops[n++].data.send_status_from_server.status_details = &c->details;
    c->final_started = 1;
    start_locked(c, ops, n, &c->final);
}

static void watch_begin(hcall *c, const char *service)
{
    rt_health *h = c->h;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->recv_cancelled;
    pthread_mutex_lock(&h->mu);
    c->known = service_known(service);
    /* The owner reference now belongs to the list; on_close takes the
     * watcher off it, which always comes: after our status, or when the
     * client goes away. */
    if (start_locked(c, &op, 1, &c->close) < 0) {
        int last = unref_locked(c);
        pthread_mutex_unlock(&h->mu);
        if (last)
            hcall_free(c, 1);
        return;
    }
    c->next = h->watchers;
    if (h->watchers)
        h->watchers->prev = c;
    h->watchers = c;
    c->want = !c->known ? H_SERVICE_UNKNOWN : h->serving ? H_SERVING : H_NOT_SERVING;
    c->ending = h->stopping;
    pump_locked(c);
    pthread_mutex_unlock(&h->mu);
}

static void on_arrive(htag *t, int ok)
{
    hcall *c = H_CONTAINER(t, hcall, arrive);
    rt_health *h = c->h;
    if (!ok) { /* shutting down: never matched */
        hcall_free(c, 0);
        return;
    }
    if (h->hooks.call_begin)
        h->hooks.call_begin(h->hooks.ud);
    c->refs = 1;
    pthread_mutex_lock(&h->mu);
    int stopping = h->stopping, serving = h->serving;
    pthread_mutex_unlock(&h->mu);
    if (!stopping)
        request(h, c->method);
    /* Check and Watch take a HealthCheckRequest; List an empty message. */
    ProtobufCMessage *q =
        rt_wire_unpack(c->payload,
                       c->method == M_LIST ? &grpc__health__v1__health_list_request__descriptor
                                           : &grpc__health__v1__health_check_request__descriptor,
                       NULL);
    if (c->payload) {
        grpc_byte_buffer_destroy(c->payload);
        c->payload = NULL;
    }
    hstatus st = serving ? H_SERVING : H_NOT_SERVING;
    if (!q) {
        answer(c, NULL, GRPC_STATUS_INVALID_ARGUMENT,
               c->method == M_LIST ? "malformed HealthListRequest"
                                   : "malformed HealthCheckRequest");
        return;
    }
    const char *service =
        c->method == M_LIST ? "" : ((Grpc__Health__V1__HealthCheckRequest *)q)->service;
    if (c->method == M_WATCH) {
        watch_begin(c, service);
    } else if (c->method == M_LIST) {
        answer(c, pack_list(st), GRPC_STATUS_OK, NULL);
    } else if (!service_known(service)) {
        char msg[160];
        snprintf(msg, sizeof msg, "unknown service '%.100s'", service);
        answer(c, NULL, GRPC_STATUS_NOT_FOUND, msg);
    } else {
        answer(c, pack_status(st), GRPC_STATUS_OK, NULL);
    }
    protobuf_c_message_free_unpacked(q, NULL);
}

static void on_send(htag *t, int ok)
{
    hcall *c = H_CONTAINER(t, hcall, send);
    rt_health *h = c->h;
    pthread_mutex_lock(&h->mu);
    grpc_byte_buffer_destroy(c->out);
    c->out = NULL;
    c->sending = 0;
    if (ok)
        pump_locked(c);
    int last = unref_locked(c);
    pthread_mutex_unlock(&h->mu);
    if (last)
        hcall_free(c, 1);
}

static void on_close(htag *t, int ok)
{
    hcall *c = H_CONTAINER(t, hcall, close);
    rt_health *h = c->h;
    pthread_mutex_lock(&h->mu);
    if (c->prev)
        c->prev->next = c->next;
    else if (h->watchers == c)
        h->watchers = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    int last = unref_locked(c);     /* the batch */
    last = unref_locked(c) || last; /* the list's */
    pthread_mutex_unlock(&h->mu);
    if (last)
        hcall_free(c, 1);
}

static void on_final(htag *t, int ok)
{
    hcall *c = H_CONTAINER(t, hcall, final);
    rt_health *h = c->h;
    pthread_mutex_lock(&h->mu);
    int last = unref_locked(c);
    pthread_mutex_unlock(&h->mu);
    if (last)
        hcall_free(c, 1);
}

rt_health *rt_health_create(grpc_server *server, grpc_completion_queue *cq,
                            const rt_health_hooks *hooks)
{
    rt_health *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->server = server;
    h->cq = cq;
    if (hooks)
        h->hooks = *hooks;
    h->serving = 1;
    pthread_mutex_init(&h->mu, NULL);
    for (int i = 0; i < M_N; i++)
        h->reg[i] = grpc_server_register_method(server, paths[i], NULL,
                                                GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    return h;
}

void rt_health_start(rt_health *h, int per)
{
    for (int i = 0; i < M_N; i++)
        for (int k = 0; k < per; k++)
            request(h, i);
}

/* Under h->mu: tell every watcher of a known service. */
static void broadcast_locked(rt_health *h)
{
    for (hcall *c = h->watchers; c; c = c->next) {
        if (c->known)
            c->want = h->serving ? H_SERVING : H_NOT_SERVING;
        c->ending = h->stopping;
        pump_locked(c);
    }
}

void rt_health_set_serving(rt_health *h, int serving)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    if (h->serving != !!serving) {
        h->serving = !!serving;
        RT_LOG(RT_LOG_INFO, "health: %s", serving ? "SERVING" : "NOT_SERVING");
        broadcast_locked(h);
    }
    pthread_mutex_unlock(&h->mu);
}

int rt_health_serving(rt_health *h)
{
    pthread_mutex_lock(&h->mu);
    int s = h->serving;
    pthread_mutex_unlock(&h->mu);
    return s;
}

void rt_health_shutdown(rt_health *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->serving = 0;
    h->stopping = 1;
    broadcast_locked(h);
    pthread_mutex_unlock(&h->mu);
}

void rt_health_destroy(rt_health *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->mu);
    free(h);
}
