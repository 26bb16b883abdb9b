/* rt_srv_generic.c - the transport's calls that reach no handler: a
 * method the daemon does not serve (UNIMPLEMENTED, naming it), and the
 * health service's calls, which count as live while the daemon drains. */
#include "rt_srv_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------- unknown methods */
typedef struct rt_gcall {
    rt__tag tag;
    rt_srv *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    int cancelled;
    int matched;
    grpc_slice status;
} rt_gcall;

static void on_generic(rt__tag *t, int ok);

void rt__request_generic(rt_srv *s)
{
    rt_gcall *g = calloc(1, sizeof *g);
    if (!g)
        return;
    g->srv = s;
    g->tag.fn = on_generic;
    grpc_call_details_init(&g->details);
    grpc_metadata_array_init(&g->md);
    RT_TAG_POST(&g->tag);
    if (grpc_server_request_call(s->server, &g->call, &g->details, &g->md, s->cq, s->cq, &g->tag) !=
        GRPC_CALL_OK) {
        grpc_call_details_destroy(&g->details);
        grpc_metadata_array_destroy(&g->md);
        free(g);
    }
}

static void on_generic(rt__tag *t, int ok)
{
    rt_gcall *g = (rt_gcall *)t;
    rt_srv *s = g->srv;
    if (ok && !g->matched) {
        g->matched = 1;
        __atomic_add_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
        if (!__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE))
            rt__request_generic(s);
        char msg[200];
        snprintf(msg, sizeof msg, "unknown method %.*s",
                 (int)(GRPC_SLICE_LENGTH(g->details.method) > 150
                           ? 150
                           : GRPC_SLICE_LENGTH(g->details.method)),
                 (const char *)GRPC_SLICE_START_PTR(g->details.method));
        char esc[300];
        RT_LOG(RT_LOG_DEBUG, "%s", rt_log_esc(msg, esc, sizeof esc));
        g->status = grpc_slice_from_copied_string(msg);
        grpc_op ops[3];
        memset(ops, 0, sizeof ops);
        rt__status_ops(ops, GRPC_STATUS_UNIMPLEMENTED, &g->status);
        ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[2].data.recv_close_on_server.cancelled = &g->cancelled;
        grpc_call *call = g->call; /* g may be gone once the tag is posted */
        RT_TAG_POST(&g->tag);
        if (grpc_call_start_batch(call, ops, 3, &g->tag, NULL) == GRPC_CALL_OK)
            return;
    }
    if (g->matched)
        grpc_slice_unref(g->status);
    if (g->call)
        grpc_call_unref(g->call);
    grpc_call_details_destroy(&g->details);
    grpc_metadata_array_destroy(&g->md);
    int matched = g->matched;
    free(g);
    if (matched) {
        __atomic_sub_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
        rt__check_drained(s);
    }
}

/* Health calls count as live calls while the daemon drains. */
void rt__health_call_begin(void *ud)
{
    __atomic_add_fetch(&((rt_srv *)ud)->live, 1, __ATOMIC_ACQ_REL);
}

void rt__health_call_end(void *ud)
{
    rt_srv *s = ud;
    __atomic_sub_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
    rt__check_drained(s);
}
