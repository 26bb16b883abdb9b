/*
 * rt_srv_impl.h - internals shared by the gRPC core (rt_srv.c) and the
 * method handlers (rt_h_*.c, rt_handlers.h).
 *
 * Every call is an rt_call. The core decodes the request and calls the
 * method's handler on the completion-queue thread. A handler either fills
 * c->resp itself (cheap, no device: Ping, CreateSession, ...) or validates,
 * takes references (session, program, datasets) and sets c->work. The core
 * then runs work inline on the cq thread when the device is free and the
 * estimate is small, or queues it for the executor pool (or the compile
 * pool); long work shares the device in time slices (rt_call_yield).
 */
#ifndef RTRAIN_SRV_IMPL_H
#define RTRAIN_SRV_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "rt_auth.h"
#include "rt_dash.h"
#include "rt_log.h" /* rt_log_esc, rt_log_id */
#include "rt_data.h"
#include "rt_metrics.h"
#include "rt_obs.h"
#include "rt_service.h"
#include "rt_session.h"
#include "rt_srv.h"
#include "rt_upload_store.h"
#include "rt_wire.h"

typedef struct rt__tag {
    void (*fn)(struct rt__tag *t, int ok);
} rt__tag;

/* gRPC owns a tag from the call that posts it (start_batch, request_call,
 * shutdown_and_notify) until grpc_completion_queue_next hands it back, and
 * what the poster wrote before is visible to the thread that gets it back.
 * gRPC is not built with ThreadSanitizer, so TSan cannot see the
 * synchronisation that makes this so: in the tsan build these two
 * annotations state the contract (release at post, acquire at completion);
 * elsewhere they are nothing. */
#ifdef __SANITIZE_THREAD__
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define RT_TAG_POST(tag) __tsan_release(tag)
#define RT_TAG_DONE(tag) __tsan_acquire(tag)
#else
#define RT_TAG_POST(tag) ((void)(tag))
#define RT_TAG_DONE(tag) ((void)(tag))
#endif

#define RT_CONTAINER(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

typedef enum rt_call_kind { RT_UNARY, RT_CLIENT_STREAM, RT_SERVER_STREAM } rt_call_kind;

typedef struct rt_call rt_call;
typedef struct rt__transport rt__transport;

/* One handler signature for every method (docs/style.md, 8). For unary and
 * server-streaming methods handle() runs once with c->req decoded; for the
 * client-streaming upload it runs per message, and end() when the client
 * half-closes; a message handler that sets c->resp answers at once (OK),
 * and the rest of the stream is not read. Return 0, or a negative code
 * after rt_call_fail(). */
typedef int (*rt_handler_fn)(rt_call *c);

/* What rt_method_table.c writes for one method: protoc-c's member name for it
 * ("run_steps"), its shape and its handlers. rt_handlers[] is indexed by
 * RT_METHOD_INDEX(member), so it follows the .proto's order. */
typedef struct rt_method_handler {
    const char *member;
    rt_call_kind kind;
    rt_handler_fn handle;
    rt_handler_fn end;
} rt_method_handler;

extern const rt_method_handler rt_handlers[RT_N_METHODS];

/* One method as the server registers it: the handler entry joined with what
 * the service descriptor says (path, request type). */
typedef struct rt_method {
    char path[RT_METHOD_PATH_MAX]; /* "/rtrain.v1.Trainer/Ping" */
    const char *req_name;          /* "PingRequest", for "malformed PingRequest" */
    const ProtobufCMessageDescriptor *req_desc;
    rt_call_kind kind;
    rt_handler_fn handle;
    rt_handler_fn end;
} rt_method;

/* Join the handler table h (nh entries) with the service descriptor sd into
 * out[sd->n_methods] (.proto order). Every method of sd must have exactly
 * one handler entry with its name, and every entry a method: otherwise -1
 * with err naming the first method or entry that has no partner. */
int rt_methods_bind(const ProtobufCServiceDescriptor *sd, const rt_method_handler *h, int nh,
                    rt_method *out, int max, char *err, size_t errlen);

/* The server's method table, bound once by rt_methods_init() from
 * rt_handlers and the Trainer service descriptor; rt_methods_init aborts
 * with a message if they disagree (a build from a .proto whose methods do
 * not all have handlers). Thread-safe; idempotent. */
void rt_methods_init(void);
extern const rt_method *const rt_methods;
extern const int rt_n_methods;

/* A bump arena: the decoded request and the response of one call live in
 * it and go with one free (docs/style.md, 6: protobuf-c with a per-request arena). */
typedef struct rt__arena_blk {
    struct rt__arena_blk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
} rt__arena_blk;

typedef struct rt__out {
    struct rt__out *next;
    grpc_byte_buffer *bb;
    int coalesce; /* a progress event a later one may replace */
} rt__out;

/* A call's state (rt_call.state), the transport's. It moves with the
 * owner reference, so one thread at a time changes it (rt_srv_tick
 * answers a stalled upload under out_mu, which on_stream_recv also takes).
 * rt__call_to() checks each move against this table (debug builds abort on
 * a move outside it; release builds log it):
 *
 *   from \ to    HANDLING RECEIVING HELD QUEUED RUNNING FINISHED
 *   POSTED         x                                          (matched)
 *   HANDLING                x        x     x      x       x   (handler ran)
 *   RECEIVING      x                                      x   (message/end; gone)
 *   HELD                                   x      x       x   (predecessor done)
 *   QUEUED                                        x       x   (picked; cancelled)
 *   RUNNING                                               x   (work done)
 *   FINISHED       -- the status batch, then the last reference frees it
 *
 * POSTED     waiting for gRPC to match a request (request_call)
 * HANDLING   on a cq thread: authenticate, decode, the handler (per message
 *            for a client stream)
 * RECEIVING  a stream waits for the client's next message or half-close
 * HELD       a pipelined RunSteps waits for its predecessor (rt_sched.c)
 * QUEUED     in the executor's or the compile pool's queue
 * RUNNING    its work runs (inline on the cq thread, or on a pool thread)
 * FINISHED   rt__finish ran (or rt_srv_tick answered a stalled upload);
 *            a compile past its budget is answered by rt_srv_tick while it
 *            is still RUNNING (final_claimed says who sends the status) */
typedef enum rt_call_state {
    RT_CS_POSTED,
    RT_CS_HANDLING,
    RT_CS_RECEIVING,
    RT_CS_HELD,
    RT_CS_QUEUED,
    RT_CS_RUNNING,
    RT_CS_FINISHED,
    RT_CS__COUNT
} rt_call_state;

struct rt_call {
    rt__tag tag;         /* arrival, then the stream's RECV_MESSAGE */
    rt__tag close_tag;   /* streams: RECV_CLOSE_ON_SERVER */
    rt__tag send_tag;    /* server stream: one SEND_MESSAGE */
    rt__tag final_tag;   /* the status batch */
    rt_call_state state; /* atomic (relaxed): rt__call_to */
    rt_srv *srv;
    const rt_method *m;
    rt_principal *who;    /* the caller, set before the handler runs */
    const char *who_name; /* its name (the metrics, the log, the dashboard) */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    size_t req_bytes;   /* the unary request's size on the wire */
    int recv_cancelled; /* written by RECV_CLOSE_ON_SERVER */
    int cancelled;      /* atomic: the client cancelled/went away */
    int close_done;     /* atomic */
    int refs;           /* atomic: batches in flight + owner */
    int sent_initial_md;
    int close_posted; /* RECV_CLOSE_ON_SERVER already in flight */

    rt__arena_blk *arena;
    ProtobufCAllocator alloc; /* over arena */
    uint64_t charged;         /* large arena blocks, as RT_Q_CALL_BYTES */
    char alloc_err[200];      /* why the arena refused (a quota), or "" */

    rt_obs_timing tm;
    Rtrain__V1__Timings sent_tm; /* the last Timings packed for the client */
    int has_sent_tm;
    int dash_fit; /* the dashboard's handle of a Fit (rt_dash.h) */
    ProtobufCMessage *req;
    ProtobufCMessage *resp; /* in the arena, or NULL */
    int err;
    char errmsg[4096]; /* a Keras or ONNX import lists every problem */

    /* Routing: set by the handler when the call needs the executor. */
    int (*work)(rt_call *c);
    int needs_device;
    int compile_pool; /* work runs on the compile pool */
    uint64_t est_ns;
    uint64_t enq_ns;
    rt_call *next_job;
    rt_call *next_run;   /* the executor's running list */
    char key[64];        /* device lane (rt_call_sched_key) */
    char xkey[64];       /* executor order: the session (exec_key) */
    int holds_device;    /* the work holds the device on a pool thread */
    uint64_t started_ns; /* atomic: compile work began (0 = queued) */
    int compile_running; /* in the compile pool's running list */
    int final_claimed;   /* atomic: a status is going out (finish or
                                     rt_srv_tick's compile budget) */
    rt__tag budget_tag;  /* rt_srv_tick's DEADLINE_EXCEEDED batch */
    grpc_slice budget_details;

    /* Upload in flight: the server-wide reservation (rt_srv_upload_*). */
    rt_call *up_next;
    uint64_t up_bytes;
    uint64_t up_last_ns; /* atomic: the last chunk arrived */
    int up_registered;
    int up_waiting;          /* under out_mu: a RECV_MESSAGE is pending */
    uint64_t recv_posted_ns; /* when that RECV_MESSAGE was posted */
    int up_stalled;          /* under out_mu: rt_srv_tick answered it */
    int recv_held;           /* the handler holds the next receive */
    int recv_gate;           /* atomic: a held receive is posted by the
                                     second of the cq thread and the resumer */

    /* Pipelined RunSteps: its seq and its predecessor's (0 = none). A
     * call whose predecessor has not completed waits on the server's held
     * list (under pipe_mu) until it has (rt_srv.c, pipe_admit). */
    uint64_t seq, after_seq;
    rt_program_pipe *pipe; /* its program's marks (rt_sched.c, pipe_of) */
    rt_call *held_next;
    uint64_t held_ns;
    int held; /* under pipe_mu: on the held list */

    /* Client stream: the request's bulk bytes field ("data"), in place in
     * the received slices (rt_wire_split) while the handler runs; NULL
     * when the message came compressed (then it is in c->req). */
    rt_wire_span *bulk;
    size_t n_bulk;
    rt_call *next_z; /* on the inflate queue (a compressed message) */

    /* References a handler took for its work; released at the end. */
    rt_session *sess;
    rt_program *prog;
    rt_dataset *ds;
    rt_dataset *val_ds;
    void *st; /* method state (upload, fit) */
    void (*st_free)(void *st);
    void (*st_done)(void *st); /* before the status: give back quotas */

    /* Server stream: outbound queue, one SEND_MESSAGE in flight. */
    pthread_mutex_t out_mu;
    rt__out *out_head, *out_tail;
    pthread_cond_t out_cv; /* the queue shrank, or the call ended */
    int n_out;             /* messages queued (not counting the one sending) */
    int send_in_flight;
    int merge_out; /* queued messages that must arrive go out joined (Fit's merge_events) */
    int final_pending;
    int final_started;
    grpc_byte_buffer *sending;
    grpc_byte_buffer *final_bb;
    grpc_slice final_details;
    int final_has_details;
};

/* The server object; fields used by handlers. */

struct rt_srv {
    rt_srv_config cfg;
    int paused_once; /* rt_srv_pause_point fired (atomic) */
    char bound[128];
    grpc_server *server;
    grpc_completion_queue *cq;
    void *reg[32];
    pthread_t *threads;
    int n_threads;

    rt_session_table *sessions;
    rt_plan_cache *plans;
    rt_data_store *data;
    rt_principal_set *principals;
    rt_auth *auth;
    uint64_t quota[RT_Q__COUNT]; /* defaults in force */

    /* The device: one job at a time, handed round-robin between keys
     * (lanes, in the order they were last served) at step boundaries. */
    pthread_mutex_t dev_mu;
    int dev_held;
    uint64_t dev_since;    /* atomic: the holder's slice began */
    int dev_waiting;       /* atomic: waiters in all lanes */
    int dev_short_waiting; /* atomic: of those, jobs under a quantum */
    struct rt__lane *lanes;
    int n_lanes, cap_lanes;

    /* Device jobs: a pool of executor threads, one job per key at a time
     * so one client's queue cannot take every thread. */
    pthread_mutex_t q_mu;
    pthread_cond_t q_cv;
    rt_call *q_head, *q_tail;
    int q_len;
    rt_call *running;
    unsigned compiles_taken; /* --compile-hold's count (atomic) */
    int q_stop;
    int q_pending; /* atomic: queued or running on the executor */
    pthread_t *exec_threads;
    int n_exec, cap_exec, idle_exec;

    /* The compile pool: its own threads and queue. */
    pthread_cond_t cq_cv; /* under q_mu */
    rt_call *c_head, *c_tail, *c_running;
    pthread_t *compile_threads;
    int n_compile;

    /* Compressed stream messages (upload chunks a client gzip'ed): the cq
     * thread queues them and goes back to serving; these threads inflate,
     * decode and handle them and post the stream's next receive, so one
     * message per stream is queued at most, in order (rt_srv.c). Under
     * q_mu, stopped with q_stop. */
#define RT__Z_THREADS 2
    pthread_cond_t z_cv;
    rt_call *z_head, *z_tail;
    pthread_t z_threads[RT__Z_THREADS];
    int n_z, idle_z;

    /* Uploads in flight (rt_srv_upload_reserve). */
    pthread_mutex_t up_mu;
    rt_call *uploads;
    int n_uploads;
    uint64_t upload_bytes;
    uint64_t last_tick_ns; /* atomic: rt_srv_tick last ran */

    /* Broken uploads kept for a resume, and the probe table (data layer,
     * its own lock; taken after up_mu, never before). */
    rt_upload_store upstore;

    /* Pipelined RunSteps waiting for their predecessor (pipe_admit). */
    pthread_mutex_t pipe_mu;
    rt_call *held;

    int live;           /* atomic: matched calls not yet freed */
    int stopping;       /* atomic */
    int hard_cancel;    /* atomic: the grace period is over */
    int shutdown_acked; /* atomic */
    int drained_fired;  /* atomic */
    rt__tag shutdown_tag;
    void (*on_drained)(void *ud);
    void *drained_ud;
    uint64_t start_ns;
    struct rt_health *health; /* grpc.health.v1 (rt_health.c) */
    struct rt_state *state;   /* --state-dir, or NULL (rt_state.h) */
    const rt__transport *tp;  /* the transport, for rt_sched.c (rt_srv_core.h) */
    uint64_t boot_id;         /* random per start: RunSteps' restart check */
};

/* What the daemon's life asks of the handlers besides the methods, filled
 * in rt_method_table.c beside rt_handlers[]: durable mode's open of
 * --state-dir, restoring what it holds (before the daemon listens), and
 * the exit checkpoints (after the last call). The transport reaches the
 * handlers through these two tables only. */
typedef struct rt_service_hooks {
    int (*state_open)(rt_srv *s, char *err, size_t errlen);
    void (*state_flush)(rt_srv *s);
} rt_service_hooks;
extern const rt_service_hooks rt_service_life;

/* Observability at a call's end (rt_srv_obs.c): the metrics and the
 * access log line. code is the gRPC status sent. */
void rt_srv_observe_call(rt_call *c, int code);
/* Once, before calls: name the methods for the metrics. */
void rt_srv_obs_init(void);
/* The dashboard (rt_srv_dash.c): its view of the server, attached at
 * create; a call's end (and a Fit's end); a Fit's start and epoch ends. */
void rt_srv_dash_attach(rt_srv *s);
void rt_srv_dash_call(rt_call *c, int code, const char *session_id);
void rt_srv_dash_fit_begin(rt_call *c);
void rt_srv_dash_epoch(rt_call *c, const Rtrain__V1__EpochEnd *e);

/* Arena allocation; never NULL-checked by callers that can fail softly:
 * returns NULL on out of memory, or when a large block (RT__CALL_CHARGE_MIN
 * and up: decoded requests, weights, predictions) would exceed the
 * caller's call-bytes quota or the server memory budget (then
 * c->alloc_err says which). Zeroed. */
#define RT__CALL_CHARGE_MIN (64u << 10)
void *rt_call_alloc(rt_call *c, size_t n);
/* c->alloc: protobuf-c's allocator over the call's arena (rt_call_alloc). */
void rt__call_arena_init(rt_call *c);
/* Free the call's arena blocks and return what they were charged (the
 * call's free, and calls made outside gRPC). */
void rt__call_arena_free(rt_call *c);
char *rt_call_strdup(rt_call *c, const char *s);

/* Record an error for the call (code from rt_error.h, short message). */
/* A client stream whose consumer is full holds its next receive instead
 * of blocking the cq thread (HTTP/2 flow control then slows the client):
 * the handler calls rt_call_recv_hold before it returns, and the consumer
 * calls rt_call_recv_resume once, from any thread, when it has room. The
 * receive is posted when both the handler has returned and the consumer
 * resumed; a call that fails meanwhile is not resumed. */
void rt_call_recv_hold(rt_call *c);
void rt_call_recv_resume(rt_call *c);

int rt_call_fail(rt_call *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Server stream: queue one message (packed now, with timings if tm is not
 * NULL). coalesce = 1 lets a later coalescable message replace this one if
 * it has not been sent yet. Returns 0 or RT_ECANCELLED/RT_ENOMEM. */
int rt_call_stream_send(rt_call *c, const ProtobufCMessage *msg, int coalesce, int with_timings);
/* The scheduling key of a call: who the device is shared between. Its
 * principal when a tokens file names several; single-user, its session
 * (or the peer address for a call without one). */
const char *rt_call_sched_key(rt_call *c);
/* Called by long work at step boundaries: once the call has held the
 * device for a slice and another key waits, hand the device over and
 * wait for the next turn (round-robin). Returns 1 if it yielded. */
int rt_call_yield(rt_call *c);
/* --pause-at-step (tests only): called at each step boundary with the
 * program's global step; once, at the first at or past the flag's step,
 * the whole process stops itself with SIGSTOP so that a test can SIGKILL or
 * SIGTERM it at a step it chose. Nothing happens with the flag off. */
void rt_srv_pause_point(rt_srv *s, int64_t global_step);
/* rt_train_host's step for a training call (ud: the rt_call):
 * rt_srv_pause_point, rt_call_yield and rt_call_is_cancelled in one call.
 * The use case calls it when the call's flags (rt_train_flags: the call's
 * and the daemon's cancel, dev_waiting, --pause-at-step) say so, and reads
 * them at the other step boundaries instead. */
int rt_call_step_point(void *ud, int64_t global_step);
/* The principal of a call's metadata: its `authorization` values, read
 * here (gRPC is the transport's), checked by rt_auth_check_bearer. */
rt_principal *rt_call_principal(rt_auth *a, const grpc_metadata_array *md, const char **why);
/* Take/drop the device from work running on the compile pool. */
void rt_call_device_lock(rt_call *c);
void rt_call_device_unlock(rt_call *c);

/* Uploads in flight: the first reserve (at arrival, 0 bytes) takes one of
 * --max-uploads; the header adds its declared size. Fails with RT_ETOOBIG
 * naming the limit. touch() on each chunk (the stall clock). The transport
 * gives the slot back (rt_srv_core.h), before the status. */
int rt_srv_upload_reserve(rt_call *c, uint64_t bytes);
void rt_srv_upload_touch(rt_call *c);

/* The client cancelled (or its deadline passed) or the daemon is cancelling
 * calls. Work checks this at step boundaries. For unary calls it is only
 * observed once the call went to the executor. */
int rt_call_is_cancelled(rt_call *c);

#endif
