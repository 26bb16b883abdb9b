/* rt_srv_core.h - what the files of the gRPC core share (server/rpc
 * only; the handlers see rt_srv_impl.h). Who calls whom, top down:
 *   rt_srv_setup.c  configuration defaults, TLS and bind, create, start,
 *                   stop and destroy; it wires the others together
 *   rt_srv.c        the transport: packing, the call's life, streams,
 *                   decode, arrival, cq threads
 *   rt_srv_generic.c  the calls that reach no handler: unknown methods,
 *                   health calls while draining (uses rt_srv.c's helpers)
 *   rt_sched.c      where work waits and runs: the device's lanes, the
 *                   executor, the compile pool, pipelined RunSteps,
 *                   uploads in flight and the tick that answers stalls;
 *                   it reaches the transport only through rt__transport
 *   rt_call.c       the call object: arena, error, state moves, cancelled
 * None of them names a handler: the handlers are reached through
 * rt_methods[] and rt_service_life (rt_method_table.c). */
#ifndef RTRAIN_SRV_CORE_H
#define RTRAIN_SRV_CORE_H

#include "rt_srv_impl.h"

/* A key waiting for the device (rt_sched.c): its waiters in order. */
typedef struct rt__dev_wait {
    struct rt__dev_wait *next;
    pthread_cond_t cv;
    int granted;
    int is_short; /* estimated under one quantum */
} rt__dev_wait;

typedef struct rt__lane {
    char key[64];
    rt__dev_wait *head, *tail;
} rt__lane;

/* rt_call.c */
/* Move c to state to (the table at rt_call_state). */
void rt__call_to(rt_call *c, rt_call_state to);

/* What the scheduler asks of the transport (rt_srv_create sets s->tp):
 *   finish          the call's logic is done: send the response or the
 *                   error; drops the owner reference (rt__finish)
 *   watch_close     post RECV_CLOSE_ON_SERVER, so a client going away
 *                   cancels the call (rt__post_close)
 *   answer_stalled  rt_srv_tick: an upload past --upload-stall-s, answered
 *                   DEADLINE_EXCEEDED if it waits for a chunk (up_mu held)
 *   answer_budget   rt_srv_tick: a compile past --compile-timeout, answered
 *                   while its work still runs (q_mu held)
 * The two answers return 1 when they sent a status. */
struct rt__transport {
    void (*finish)(rt_call *c);
    void (*watch_close)(rt_call *c);
    int (*answer_stalled)(rt_call *c);
    int (*answer_budget)(rt_call *c);
};
extern const rt__transport rt__transport_ops;

/* rt_srv.c */
void rt__call_free(rt_call *c, int matched);
void rt__call_unref(rt_call *c);
void *rt__cq_main(void *arg);
void rt__finish(rt_call *c);
void rt__health_call_begin(void *ud);
void rt__health_call_end(void *ud);
void rt__on_close(rt__tag *t, int ok);
void rt__on_shutdown(rt__tag *t, int ok);
void rt__on_stream_recv(rt__tag *t, int ok);
void rt__post_close(rt_call *c);
void rt__request_call(rt_srv *s, int mi);
void rt__request_generic(rt_srv *s);
/* rt_srv.c's helpers for rt_srv_generic.c: the drained check after a
 * live call ends, and a status on its own (initial metadata and the status
 * with details, into ops[0..1]). */
void rt__check_drained(rt_srv *s);
void rt__status_ops(grpc_op ops[2], grpc_status_code code, grpc_slice *details);
void rt__start_batch(rt_call *c, const grpc_op *ops, size_t n, rt__tag *tag);
void rt__start_final(rt_call *c);

/* rt_sched.c */
void *rt__compile_main(void *arg);
void rt__dev_lock(rt_srv *s, const char *key, uint64_t est_ns);
void rt__dev_unlock(rt_srv *s);
void rt__dispatch(rt_call *c);
void rt__enqueue(rt_call *c);
/* The engine's pause hook (rt_exec_set_pause_hook), set once by rt_srv_create. */
void rt__sched_pause_hook(void);
void rt__pipe_cancel(rt_call *c);
/* How many calls wait for their predecessor now (the calls_held gauge). */
int rt__pipe_held_count(rt_srv *s);
rt_call *rt__pipe_complete(rt_call *c);
void rt__pipe_release_list(rt_call *l);
/* An upload's in-flight slot and bytes go back (rt__finish, before the
 * status, or rt__call_free); once. */
void rt_srv_upload_release(rt_call *c);

#endif
