/*
 * rt_client_impl.h - librtrain internals shared by client/lib/ (all .c files).
 *
 * A call goes through rt__call_begin (reset error, start the clock), one of
 * the two transports of rt_client_call.c (rt__unary, or the rt__stream_*
 * helpers that Fit and UploadDataset use), then rt__call_end (close the time
 * account, keep it for tracing). The transports fill c->cur as they go.
 */
#ifndef RTRAIN_CLIENT_IMPL_H
#define RTRAIN_CLIENT_IMPL_H

#include <stdatomic.h>
#include <stdarg.h>

#include <grpc/grpc.h>

#include "rtrain/rtrain.h"
#include "rt_service.h"
#include "rt_wire.h"

/* The client's call table, indexed like the .proto's service (protoc-c's
 * descriptor, rt_service.h); names and paths come from the descriptor. */
enum {
    RT__M_INFO = RT_METHOD_INDEX(get_info),
    RT__M_PING = RT_METHOD_INDEX(ping),
    RT__M_CREATE_SESSION = RT_METHOD_INDEX(create_session),
    RT__M_CLOSE_SESSION = RT_METHOD_INDEX(close_session),
    RT__M_COMPILE = RT_METHOD_INDEX(compile),
    RT__M_UPLOAD = RT_METHOD_INDEX(upload_dataset),
    RT__M_FIND_DATASET = RT_METHOD_INDEX(find_dataset),
    RT__M_RUN_STEPS = RT_METHOD_INDEX(run_steps),
    RT__M_FIT = RT_METHOD_INDEX(fit),
    RT__M_EVALUATE = RT_METHOD_INDEX(evaluate),
    RT__M_PREDICT = RT_METHOD_INDEX(predict),
    RT__M_GET_WEIGHTS = RT_METHOD_INDEX(get_weights),
    RT__M_SET_WEIGHTS = RT_METHOD_INDEX(set_weights),
    RT__M_CONTROL = RT_METHOD_INDEX(control),
    RT__M_EXPORT_ONNX = RT_METHOD_INDEX(export_onnx),
    RT__M_CHECKPOINT = RT_METHOD_INDEX(checkpoint),
    RT__M_RESTORE_CHECKPOINT = RT_METHOD_INDEX(restore_checkpoint),
    RT__M_DROP_PROGRAM = RT_METHOD_INDEX(drop_program),
    RT__M_COUNT = RT_N_METHODS
};

struct rt_client {
    char *target;
    grpc_channel *ch;
    grpc_completion_queue *cq;
    void *reg[RT__M_COUNT];
    int64_t timeout_ms;
    int64_t next_timeout_ms; /* INT64_MIN = not set */
    int next_storage;        /* rt_client_next_upload_storage, for one upload */
    uint64_t next_shuffle_buffer;
    char errmsg[4096]; /* a Keras import lists every problem */
    int grpc_status;
    rt_client_timings cur; /* the call in progress */
    uint64_t t_response;   /* when the response was in hand (decode start) */
    rt_client_timings last;
    int has_last;
    int trace_on;
    rt_client_timings *trace;
    size_t n_trace, cap_trace;
    uint64_t seq;
    atomic_int cancel_flag;
    int64_t reattach_ms; /* rt_client_set_reattach_ms */
    /* The daemon's last answer: its boot id and where it keeps its state
     * (StateKind: 0 unknown, 1 memory, 2 disk); rt__wait_daemon gives up
     * at once on a memory-only daemon that is gone. */
    uint64_t daemon_boot;
    int daemon_state;
    int wait_ready; /* calls wait for the channel (WAIT_FOR_READY) */
    struct {        /* rt_client_session_token: a ring */
        char sid[RT_ID_MAX], token[RT_ID_MAX];
    } tokens[16];
    unsigned n_tokens;
    int in_loop; /* rt_client_train_steps: calls keep the flag */
    int tls;
    /* "authorization: Bearer <token>", sent as initial metadata with every
     * call (n_md = 0 without a token). */
    grpc_metadata md[1];
    size_t n_md;
    rt_client_connect_times conn; /* rt_client_connect, rt_client_wait_ready */
};

/* printf into c->errmsg; returns rc so callers can `return rt__err(...)`. */
int rt__err(rt_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void rt__call_begin(rt_client *c, int method);
/* Closes the account of the current call; returns rc. */
int rt__call_end(rt_client *c, int rc);
/* A TFRecord feature spec (rtrain_data.h), built in rt_client_shards.c
 * and sent in rt_client_upload.c's header. */
#define RT__SPEC_MAX_FEATURES 16
struct rt_client_example_spec {
    Rtrain__V1__ExampleSpec pb;
    Rtrain__V1__FeatureSpec f[RT__SPEC_MAX_FEATURES];
    Rtrain__V1__FeatureSpec *fp[RT__SPEC_MAX_FEATURES];
    int64_t shape[RT__SPEC_MAX_FEATURES][2];
    char key[RT__SPEC_MAX_FEATURES][64];
    Rtrain__V1__ImageSpec img;
    float mean[3], std[3];
};

/* The wire form of a spec (rt_client_upload.c); owned by s, NULL for NULL. */
Rtrain__V1__ExampleSpec *rt__example_spec_pb(const struct rt_client_example_spec *s);

/* The deadline for the call starting now (consumes next_timeout_ms). */
gpr_timespec rt__deadline(rt_client *c);

/* Pluck tag from c->cq, polling the cancel flag every few ms so that
 * rt_client_cancel can stay async-signal-safe (it only sets the flag; the
 * owning thread calls grpc_call_cancel). Returns the event's success bit. */
int rt__pluck(rt_client *c, grpc_call *call, void *tag);

/* Turn a finished call's status into an rc and message (0 for OK). Takes
 * ownership of details (unrefs it) and error_string (gpr_free). */
int rt__status(rt_client *c, grpc_status_code st, grpc_slice details, const char *error_string);

/* One gRPC call in flight (rt_client_call.c). The caller owns the struct;
 * the helpers below create and release what it holds. */
typedef struct rt__call {
    rt_client *c;
    int method;
    grpc_call *call;
    grpc_metadata_array init_md, trail_md;
    grpc_status_code st;
    grpc_slice details;
    const char *error_string;
    grpc_byte_buffer *send, *recv;
    grpc_op ops[6];   /* unary: its one batch; stream: the status batch */
    grpc_op io[3];    /* stream: the first batch, then one send or receive */
    uint64_t t_start; /* the first batch started */
    uint64_t encode_ns;
    size_t bytes_sent;
    int answered; /* unary: its batch completed (rt__unary_wait) */
} rt__call;

/* Unary calls. rt__unary_start packs req and starts the call's one 6-op
 * batch; rt__unary_finish waits for it, fills c->cur (encode, round trip,
 * bytes), turns the status into rc and unpacks the response as desc into
 * *resp (free with protobuf_c_message_free_unpacked(.., NULL)). finish
 * always releases k; a failed start leaves nothing to finish. Several calls
 * may be started before the first is finished. rt__unary does both. */
int rt__unary_start(rt_client *c, rt__call *k, int method, const ProtobufCMessage *req);
/* Wait until `until` for k's answer without cancelling it; 1 once it is
 * in (rt__unary_finish then takes it without waiting), 0 on timeout. */
int rt__unary_wait(rt_client *c, rt__call *k, gpr_timespec until);
int rt__unary_finish(rt_client *c, rt__call *k, const ProtobufCMessageDescriptor *desc,
                     ProtobufCMessage **resp);
int rt__unary(rt_client *c, int method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp);

/* Streams. open creates the call and sends the initial metadata; with req
 * (a server stream) also req and the half-close. It posts the status batch
 * at once, so a daemon ending the call mid-stream is seen. send sends one
 * message (bb stays the caller's), with the half-close when last; it
 * returns 0 when the call is over (the status says why). recv gives the
 * next message or NULL at the end of the stream (or on cancellation or an
 * error: the status says). close waits for the status, sets the round trip
 * (from open), returns the status as an rc and releases k. Bytes are
 * counted into c->cur as they go. */
int rt__stream_open(rt_client *c, rt__call *k, int method, const ProtobufCMessage *req);
int rt__stream_send(rt__call *k, grpc_byte_buffer *bb, int last);
/* rt__stream_send in two halves, so the next message can be made while
 * this one goes out; at most one in flight. Both return 1 on success. */
int rt__stream_send_start(rt__call *k, grpc_byte_buffer *bb, int last);
int rt__stream_send_wait(rt__call *k);
void rt__stream_recv(rt__call *k, grpc_byte_buffer **bb);
void rt__stream_cancel(rt__call *k);
int rt__stream_close(rt__call *k);

/* RunSteps in two halves, so that several can be in flight (the training
 * loop): start builds and starts the call (seq 0 takes the client's next;
 * *seq, if not NULL, gets the one sent); finish waits for it and fills out.
 * Neither begins nor ends the call's time account. */
int rt__run_steps_start(rt_client *c, rt__call *k, const rt_client_steps_params *p, uint64_t *seq);
int rt__run_steps_finish(rt_client *c, rt__call *k, rt_client_steps_result *out);

/* Reattaching (rt_client_train.c). daemon_gone: whether rc is the daemon
 * going away (restart, preemption, network: UNAVAILABLE, ABORTED for a
 * restart, a daemon-side CANCELLED) rather than an answer. wait_daemon:
 * retry a Checkpoint call with backoff (50 ms doubling to 1 s) until the
 * daemon answers or c->reattach_ms since t0 passed, and read where the
 * program stands into *info; errors are prefixed with what. Both keep the
 * cancel flag (c->in_loop). */
int rt__daemon_gone(rt_client *c, int rc);
int rt__wait_daemon(rt_client *c, const char *what, const char *session, const char *program,
                    uint64_t t0, rt_client_ckpt_info *info);

/* Copy (add, for streams) a response's Timings into c->cur. */
void rt__take_timings(rt_client *c, const Rtrain__V1__Timings *t, int add);

/* Helpers */
char *rt__strdup(const char *s);
int rt__check_id(rt_client *c, const char *what, const char *id);
/* rt__check_id of a session's and then a program's id. */
int rt__check_ids(rt_client *c, const char *session, const char *program);
int rt__copy_id(rt_client *c, char dst[RT_ID_MAX], const char *src);
int rt__shape_from_pb(rt_client *c, const char *what, size_t n, const int64_t *src, int *ndim,
                      int64_t dst[RT_CLIENT_MAX_DIMS]);
void rt__metrics_from_pb(const Rtrain__V1__Metrics *m, rt_client_metrics *out);
void rt__epoch_from_pb(const Rtrain__V1__EpochEnd *e, rt_client_epoch *out);
/* Tensor <-> proto. to_pb points into the caller's data (no copy). */
int rt__tensor_from_pb(rt_client *c, const Rtrain__V1__Tensor *t, rt_client_tensor *out);
int rt__array_nbytes(rt_client *c, const char *what, const rt_client_array *a, size_t *nbytes);

/* rt_model internals used by compile. */
Rtrain__V1__Graph *rt__model_graph(const rt_model *m);

#endif
