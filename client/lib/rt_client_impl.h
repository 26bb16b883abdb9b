/*
 * rt_client_impl.h - librtrain internals shared by client/lib/ (all .c files).
 *
 * A call goes through rt__call_begin (reset error, start the clock), one of
 * the transports (rt__unary, or the stream code in rt_client_fit.c /
 * rt_client_upload.c), then rt__call_end (close the time account, keep it
 * for tracing). The transports fill c->cur as they go.
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
    RT__M_COUNT = RT_N_METHODS
};

struct rt_client {
    char *target;
    grpc_channel *ch;
    grpc_completion_queue *cq;
    void *reg[RT__M_COUNT];
    int64_t timeout_ms;
    int64_t next_timeout_ms; /* INT64_MIN = not set */
    char errmsg[1024];
    int grpc_status;
    rt_client_timings cur;   /* the call in progress */
    uint64_t t_response;     /* when the response was in hand (decode start) */
    rt_client_timings last;
    int has_last;
    int trace_on;
    rt_client_timings *trace;
    size_t n_trace, cap_trace;
    uint64_t seq;
    atomic_int cancel_flag;
};

/* printf into c->errmsg; returns rc so callers can `return rt__err(...)`. */
int rt__err(rt_client *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void rt__call_begin(rt_client *c, int method);
/* Closes the account of the current call; returns rc. */
int rt__call_end(rt_client *c, int rc);

/* The deadline for the call starting now (consumes next_timeout_ms). */
gpr_timespec rt__deadline(rt_client *c);

/* Pluck tag from c->cq, polling the cancel flag every few ms so that
 * rt_client_cancel can stay async-signal-safe (it only sets the flag; the
 * owning thread calls grpc_call_cancel). Returns the event's success bit. */
int rt__pluck(rt_client *c, grpc_call *call, void *tag);

/* Turn a finished call's status into an rc and message (0 for OK). Takes
 * ownership of details (unrefs it) and error_string (gpr_free). */
int rt__status(rt_client *c, grpc_status_code st, grpc_slice details,
               const char *error_string);

/* One unary call: pack req, one 6-op batch, unpack the response as desc.
 * On success *resp is the unpacked message (free with
 * protobuf_c_message_free_unpacked(.., NULL)). Fills encode and round trip. */
int rt__unary(rt_client *c, int method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp);

/* Copy (add, for streams) a response's Timings into c->cur. */
void rt__take_timings(rt_client *c, const Rtrain__V1__Timings *t, int add);

/* Helpers */
char *rt__strdup(const char *s);
int rt__check_id(rt_client *c, const char *what, const char *id);
int rt__copy_id(rt_client *c, char dst[RT_ID_MAX], const char *src);
int rt__shape_from_pb(rt_client *c, const char *what, size_t n,
                      const int64_t *src, int *ndim,
                      int64_t dst[RT_CLIENT_MAX_DIMS]);
void rt__metrics_from_pb(const Rtrain__V1__Metrics *m, rt_client_metrics *out);
void rt__epoch_from_pb(const Rtrain__V1__EpochEnd *e, rt_client_epoch *out);
/* Tensor <-> proto. to_pb points into the caller's data (no copy). */
int rt__tensor_from_pb(rt_client *c, const Rtrain__V1__Tensor *t,
                       rt_client_tensor *out);
int rt__array_nbytes(rt_client *c, const char *what, const rt_client_array *a,
                     size_t *nbytes);

/* rt_model internals used by compile. */
Rtrain__V1__Graph *rt__model_graph(const rt_model *m);

#endif
