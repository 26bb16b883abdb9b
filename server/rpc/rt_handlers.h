/* rt_handlers.h - what the handler files share (server/rpc only): the
 * request/response macros, the lookups every handler starts with, the
 * training helpers and the durability calls. One file of handlers per
 * area, each a row group of rt_handlers[] (rt_method_table.c):
 *   rt_h_session.c  GetInfo, Ping, CreateSession, CloseSession
 *   rt_h_compile.c  Compile, and compiling a kept model (restore)
 *   rt_h_upload.c   UploadDataset, FindDataset (ingestion: rt_ingest.h)
 *   rt_h_train.c    RunSteps, Fit, Evaluate, Predict, Control
 *   rt_h_state.c    GetWeights, SetWeights, ExportOnnx, Checkpoint,
 *                   RestoreCheckpoint, DropProgram, the state dir at
 *                   start and exit
 * Handlers run on a completion-queue thread; the *_work functions run with
 * the device held (needs_device), inline or on the executor. A handler
 * validates, takes references and sets work; the use cases are the
 * owners' (rt_train.h, rt_program.h, rt_ingest.h, rt_view.h, rt_state.h). */
#ifndef RTRAIN_HANDLERS_H
#define RTRAIN_HANDLERS_H

#include "rt_errf.h"
#include "rt_srv_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
/* libxxhash's XXH3 with a run-time choice of SSE2/AVX2/AVX-512 (the
 * plain entry points are SSE2): same hashes, about twice the speed */
#include <xxh_x86dispatch.h>
#endif

#include "import_keras.h"
#include "import_graph.h"
#include "import_onnx.h"
#include "rt_bufpool.h"
#include "rt_dist.h"
#include "rt_example.h"
#include "rt_stream.h"
#include "rt_ingest.h"
#include "rt_state.h"
#include "rt_view.h"
#include "rt_train.h"

#define RT_MAX_STEPS_PER_CALL 10000000ull
#define RT_MAX_RETURN_LOSSES 1000000ull

#define REQ(c, T) ((T *)(c)->req)
#define NEW(c, T, INIT)                        \
    ({                                         \
        T *p_ = rt_call_alloc((c), sizeof(T)); \
        if (p_) {                              \
            T init_ = INIT;                    \
            *p_ = init_;                       \
        }                                      \
        p_;                                    \
    })
/* Out of memory, or a quota the arena checked (rt_call_alloc). */
#define OOM(c)                                                               \
    ((c)->alloc_err[0] ? rt_call_fail((c), RT_ETOOBIG, "%s", (c)->alloc_err) \
                       : rt_call_fail((c), RT_ENOMEM, "out of memory"))

/* rt_handlers.c: shared handler helpers */
int rt_h_need_session(rt_call *c, const char *id);
int rt_h_need_program(rt_call *c, const char *sid, const char *pid);
int rt_h_daemon_stopping(const rt_call *c);
/* RunSteps, Fit, Evaluate, Predict: rt_train_open (in->check set here
 * from bad), its references held by the call (and the program's pipeline
 * marks); the lookup's failure, else the handler's own (bad < 0, why),
 * else rt_train_open's checks'; o has the call's estimate, the plan's
 * facts and batch size */
int rt_h_open_train(rt_call *c, rt_train_open_in *in, int bad, const char *why,
                    rt_train_open_out *o);
/* The failures of rt_h_refuse_if_stopping and rt_h_check_lr as a code and
 * a text in why (0: none), for checks reported after the lookups */
int rt_h_stopping_why(const rt_call *c, char *why, size_t n);
int rt_h_lr_why(float lr, char *why, size_t n);
/* rt_h_upload.c: the most bytes one upload of c's principal can hold
 * (GetInfo's Limits.max_upload_bytes) */
uint64_t rt_h_upload_limit(const rt_call *c);
int rt_h_refuse_if_stopping(rt_call *c);
/* The end of a training call's work: its data sets go back; returns rc */
int rt_h_data_done(rt_call *c, int rc);
int rt_h_check_lr(rt_call *c, float lr);
int rt_h_apply_lr(rt_call *c, float lr);
int rt_h_engine_fail(rt_call *c, int rc);
Rtrain__V1__Metrics *rt_h_metrics_pb(rt_call *c, const rt_metrics *m);
int64_t *rt_h_dims_pb(rt_call *c, int n, const int64_t *d);
/* Whether a failed checkpoint lets the call go on (CHECKPOINT_CONTINUE,
 * or by default the daemon's --checkpoint-fail continue); durable mode. */
int rt_h_ckpt_continue(const rt_call *c, int policy);
int rt_h_durable_checkpoint(rt_call *c, rt_program *p, int policy);
int rt_h_durable_program(rt_call *c, rt_program *prog);

/* rt_h_session.c: sessions and info */
int rt_h_get_info(rt_call *c);
int rt_h_ping(rt_call *c);
int rt_h_create_session(rt_call *c);
int rt_h_close_session(rt_call *c);

/* rt_h_compile.c: compile */
int rt_h_unmake_program(rt_call *c, rt_program *p, int rc);
int rt_h_compile(rt_call *c);
int rt_h_restore_program(rt_srv *srv, rt_session *sess, const uint8_t *req, size_t len,
                         const char *pid, rt_program **out, char *err, size_t errlen);

/* rt_h_upload.c: upload */
int rt_h_upload_chunk(rt_call *c);
int rt_h_upload_end(rt_call *c);
int rt_h_find_dataset(rt_call *c);

/* rt_h_train.c: training */
int rt_h_run_steps(rt_call *c);
int rt_h_fit(rt_call *c);
int rt_h_evaluate(rt_call *c);
int rt_h_predict(rt_call *c);
int rt_h_control(rt_call *c);

/* rt_h_state.c: state and checkpoints */
int rt_h_get_weights(rt_call *c);
int rt_h_export_onnx(rt_call *c);
int rt_h_set_weights(rt_call *c);
int rt_h_checkpoint(rt_call *c);
int rt_h_restore_checkpoint(rt_call *c);
int rt_h_drop_program(rt_call *c);
/* rt_service_life's (rt_srv_impl.h): --state-dir at start and exit */
int rt_h_state_open(rt_srv *s, char *err, size_t errlen);
void rt_h_state_flush(rt_srv *s);

#endif
