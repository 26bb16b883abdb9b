/*
 * rt_train.h - the training use cases of a program: RunSteps as one call
 * (rt_program_run_steps) and Fit's loop (rt_program_fit_run). The handler
 * decodes the request, calls it once with the device held, and encodes the
 * answer (Fit's events go out through the caller's hooks); the use case calls down
 * into the data view (rt_view.h), the engine (or the trainer plugged in
 * at startup) and the state directory, never back into server/rpc except
 * through the hooks the caller hands it (and the allocator that gives
 * RunSteps' epoch ends their room, which are returned as data).
 *
 *     rt_run_steps_in in = {.steps = 1, ...};
 *     rt_run_steps_out out;
 *     char err[300];
 *     rc = rt_program_run_steps(p, &ctx, &in, &out, err, sizeof err);
 *
 * Locking: [device] (rt_program.h), as every training call.
 */
#ifndef RTRAIN_TRAIN_H
#define RTRAIN_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "rt_program.h"
#include "rt_state.h"
#include "rt_view.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What trains: rt_exec_train, or a multi-process trainer (server/mpi)
 * that the daemon plugs in at startup, so the session layer does not
 * depend on MPI. err gets the failure's text. */
typedef int (*rt_trainer_fn)(rt_exec *e, const rt_data *d, const uint8_t key[16], int64_t steps,
                             rt_train_result *res, rt_step_cb cb, void *ud, float *step_losses,
                             char *err, size_t errlen);
/* Set once, before the first call is served (NULL: rt_exec_train). */
void rt_train_set_trainer(rt_trainer_fn fn);

/* A Fit's StepProgress (rt_train_host.progress): the mean over the
 * epoch's steps so far. */
typedef struct rt_fit_progress {
    int64_t step, epoch, step_in_epoch, steps_per_epoch;
    float loss, acc, lr;
    int64_t nan_step; /* the first non-finite loss so far, 0 = none */
} rt_fit_progress;

/* The caller's flags, read at each step boundary without calling up
 * (atomic ints; NULL: never set): the call was cancelled (the client went
 * away), the daemon's grace period ended, another call waits for the
 * device. pause_at: --pause-at-step (0: none). */
typedef struct rt_train_flags {
    const int *cancelled, *hard_cancel, *waiting;
    int64_t pause_at;
} rt_train_flags;

/* The caller's side of a training call. step (ud): at a step boundary
 * where *flags.waiting is set or the step is at or past flags.pause_at,
 * the --pause-at-step hook and the device's time slice; 1 when the call
 * was cancelled. yield (ud): Predict's chunk boundary where *flags.waiting
 * is set, the device's time slice alone. Fit's (rt_program_fit_run), the
 * others unused there: stopping (ud): a durable daemon is stopping; with
 * answer_ud: progress: send a StepProgress (coalesce 0: at once, a new
 * rate); epoch_end: send an EpochEnd (nan_step as progress; val_ns: time
 * spent validating and checkpointing it). epoch_end < 0: the call failed
 * (its caller set the failure). RunSteps' epoch ends come back as data
 * (rt_run_steps_out.epochs). */
typedef struct rt_train_host {
    void *ud;
    rt_train_flags flags;
    int (*step)(void *ud, int64_t global_step);
    int (*yield)(void *ud);
    int (*stopping)(void *ud);
    void *answer_ud;
    void (*progress)(void *answer_ud, const rt_fit_progress *pr, int coalesce);
    int (*epoch_end)(void *answer_ud, const rt_fit_epoch *e, int64_t nan_step, uint64_t val_ns);
} rt_train_host;

/* Where a training call trains: the data sets (checked with rt_view_check
 * by the caller), the state directory (NULL: memory only) and the
 * session's id for its checkpoints. */
typedef struct rt_train_ctx {
    rt_dataset *ds, *val_ds;
    rt_state *state;
    const char *sid;
    const rt_train_host *host;
    rt_stream_use use, val_use; /* a streamed data set's cursor */
} rt_train_ctx;

/* What a training call (RunSteps, Fit) names, found before it waits for
 * the device, in one call and in this order: the session (who's), its
 * program, the data set and the optional validation set (val_did NULL or
 * ""). Each reference found is retained in *out, also when a later one is
 * missing (the caller releases what is set); the failures are
 * rt_session_lookup's and rt_data_store_lookup's. */
typedef struct rt_train_refs {
    rt_session *sess;
    rt_program *prog; /* valid while sess is held */
    rt_dataset *ds, *val_ds;
} rt_train_refs;

/* A call's admission in one descent, before it waits for the device
 * (RunSteps, Fit, Evaluate, Predict): the session, the program, the data
 * set (did NULL: none, Predict's x) and the optional validation set
 * found (rt_session_lookup, rt_data_store_lookup) and held in out->refs
 * (the caller releases what is set, failed or not), the program's
 * pipeline marks, its plan facts and batch size; then, when check is set,
 * Fit's cap on its steps, Predict's x against the program's input
 * (rt_train_open_x), each data set against the program's plan
 * (rt_view_check; labels needed unless unlabelled) and the call's time
 * estimate. The caller clears check when its own request checks failed: it
 * reports those after a lookup's failure and before the checks here. 0, or
 * the lookup's or a check's failure with err set. */
typedef struct rt_train_open_in {
    const char *sid, *pid, *did;
    const char *val_did; /* NULL or "": none */
    int check;
    int unlabelled; /* Predict: the data set needs no labels */
    /* Fit: epochs x steps_per_epoch (0: one pass over the data set) must
     * not pass max_steps; epochs 0: no such cap */
    uint32_t epochs;
    uint64_t steps_per_epoch, max_steps;
    /* the estimate: steps training steps (RunSteps), or with forward set
     * forward passes over forward_n samples (0: the data set's), in
     * batches, at half a step each (Evaluate, Predict) */
    uint64_t steps;
    int forward;
    int64_t forward_n;
    /* Predict's x (NULL: none), F32 with dims within bounds (the
     * request's checks): checked against the plan's input after the
     * lookups (rt_train_open_x) */
    const struct rt_train_x *x;
} rt_train_open_in;
/* Predict's x as the request brings it: n_shape dims (samples first),
 * len bytes of F32 at data (any alignment). */
typedef struct rt_train_x {
    int n_shape;
    const int64_t *shape;
    const void *data;
    size_t len;
} rt_train_x;
typedef struct rt_train_open_out {
    rt_train_refs refs;
    double step_ns;           /* the program's step estimate (when checked) */
    uint64_t est_ns;          /* the call's time on the device (when checked) */
    int batch_size;           /* the plan's (when found) */
    const rt_view_spec *view; /* the plan's facts (when found; while prog is) */
    rt_program_pipe *pipe;    /* its pipeline marks (rt_program_pipe_marks) */
    /* forward calls (when found): the output's per-sample dims (out_n < 0:
     * the plan has none) and the floats per sample in and out (-1: none) */
    int out_n;
    int64_t out[RT_MAX_DIMS];
    int64_t in_per, out_per;
} rt_train_open_out;
/* x against the program's input (v; pid names it): its samples' shape,
 * its bytes against its shape, every value finite. 0, or RT_ESHAPE,
 * RT_EDATA or RT_ENAN with err set. rt_train_open calls it for in->x. */
int rt_train_open_x(const rt_train_x *x, const rt_view_spec *v, const char *pid, char *err,
                    size_t errlen);
int rt_train_open(rt_session_table *t, rt_data_store *store, const rt_principal *who,
                  const rt_train_open_in *in, rt_train_open_out *out, char *err, size_t errlen);

typedef struct rt_run_steps_in {
    uint64_t seq; /* replay protection (0: none) */
    uint64_t steps;
    float lr;       /* > 0: the rate from the first step on */
    int val_at_end; /* validate once after the last step, else at epoch ends */
    int stop_on_nan;
    int checkpoint; /* checkpoint at the end (durable mode) */
    uint32_t every_steps, every_s;
    int ckpt_continue; /* a failed checkpoint is logged, not the call's failure */
    float *losses;     /* room for steps losses, or NULL: none returned */
    /* room for the epoch ends (rt_run_steps_out.epochs), asked for as
     * they come, none in a call that ends no epoch: the caller's
     * allocator, which charges it to the call's principal (its arena);
     * NULL: out of memory, the call stops */
    void *(*alloc)(void *alloc_ud, size_t n);
    void *alloc_ud;
} rt_run_steps_in;

/* An engine epoch that ended inside a RunSteps call, for its answer's
 * EpochEnd: its number, its training metrics, the global step at its end,
 * the time its steps took in this call and, validated at its end (a
 * validation set without val_at_end), its validation metrics. */
typedef struct rt_run_epoch {
    int64_t epoch, step;
    uint64_t exec_ns;
    int has_val;
    rt_metrics train, val;
} rt_run_epoch;

typedef struct rt_run_steps_out {
    int replayed, recorded; /* a seq applied already; its answer was kept */
    int64_t recorded_step;
    int64_t global_step;
    rt_metrics last, mean;
    int stopped;      /* Control's stop */
    int64_t nan_step; /* the first non-finite loss's step, 0 = none */
    int64_t done;     /* steps run (in->losses: written) */
    int has_val;
    rt_metrics val;        /* val_at_end */
    uint64_t durable_ns;   /* the checkpoint's time, with a state dir */
    rt_run_epoch **epochs; /* the epoch ends in order (in->alloc's room) */
    size_t n_epochs;
    int alloc_failed; /* in->alloc returned NULL: the call's failure */
} rt_run_steps_out;

/* A RunSteps call, start to end: replay, the view, the rate, the steps
 * (stopping at epoch ends to validate or to draw the next augmentation),
 * Control's stop, the non-finite check, the step estimate, the replay
 * record and the checkpoint-due decision. 0, or a negative RT_E* with
 * err set (the call's failure message). */
int rt_program_run_steps(rt_program *p, rt_train_ctx *ctx, const rt_run_steps_in *in,
                         rt_run_steps_out *out, char *err, size_t errlen);

/* Evaluate: the metrics of the program on ctx->ds (labels needed), one
 * forward pass over it. 0, or a negative RT_E* with err set. [device] */
int rt_program_evaluate(rt_program *p, rt_train_ctx *ctx, rt_metrics *m, char *err, size_t errlen);

/* Predict: the outputs of n samples, x (n x in_per floats) or, x NULL, of
 * ctx->ds, into y (n x out_per floats), in chunks of whole batches; a
 * streamed or held data set batch by batch through xb (batch x in_per
 * floats), in file order. Between chunks of 16 batches a cancelled call
 * stops and a waiting one yields the device (ctx->host). 0, or a negative
 * RT_E* with err set. [device] */
typedef struct rt_predict_in {
    const float *x;
    int64_t n, in_per, out_per;
    float *y, *xb;
} rt_predict_in;
int rt_program_predict(rt_program *p, rt_train_ctx *ctx, const rt_predict_in *in, char *err,
                       size_t errlen);

typedef struct rt_fit_in {
    uint64_t fit_id; /* resumable (rt_fit_rec), 0: not */
    uint32_t epochs;
    uint32_t epochs_received; /* a resend: the EpochEnds the client has */
    uint64_t steps_per_epoch; /* 0: one pass over the data set */
    float lr;                 /* > 0: the rate from the first step on */
    int stop_on_nan;
    uint32_t progress_every;       /* a StepProgress every N steps, 0: none */
    uint32_t every_steps, every_s; /* the fit's checkpoint intervals */
    int ckpt_continue;             /* a failed checkpoint is logged, not the call's failure */
    rt_view_chunk chunk;           /* the data set is a chunk of a larger one (rt_view_epoch) */
} rt_fit_in;

typedef struct rt_fit_out {
    int cancelled; /* the client went away */
    int stopped;   /* by Control's stop */
    int64_t global_step;
    int64_t nan_step;    /* the first non-finite loss's step, 0 = none */
    uint64_t durable_ns; /* its checkpoints' time, with a state dir (failed too) */
} rt_fit_out;

/* A Fit, start to end: a resent fit's resume (its lost EpochEnds sent
 * again), the rate, the epochs with their StepProgress and EpochEnd
 * events (host->progress, host->epoch_end), validation, Control's stop,
 * non-finite losses, the durable checkpoints (the fit's start, its
 * intervals, each epoch's end) and a stopping daemon's drain. [device],
 * as RunSteps. 0 (out set), or a negative RT_E* with err set, or a hook's
 * failure (err untouched). */
int rt_program_fit_run(rt_program *p, rt_train_ctx *ctx, const rt_fit_in *in, rt_fit_out *out,
                       char *err, size_t errlen);

/* A step's loss that is NaN or infinite: recorded in *first (the first),
 * and with stop_on_nan *stopped is set. 1 = stop after this step. */
int rt_train_non_finite(int64_t *first, int stop_on_nan, int *stopped, const rt_step_info *info);
/* The failure messages of a training call, in err; each returns its code.
 * Work stopped early: the client went away (RT_ECANCELLED; it will not see
 * this) or, hard, the daemon's grace period ended (RT_EUNAVAILABLE: retry
 * elsewhere or later); either way not a completed call. A non-finite loss
 * under stop_on_nan: RT_ESTATE. */
int rt_train_stopped_msg(int hard, int64_t done, int64_t asked, char *err, size_t errlen);
int rt_train_nan_msg(int64_t step, float loss, char *err, size_t errlen);

/* Training took ns over steps: the program's step estimate and the
 * daemon's step counters. */
void rt_train_note_steps(rt_program *p, uint64_t ns, int64_t steps);
/* Write p's checkpoint. A failure is logged; with cont training goes on
 * (0), else err holds the call's failure. */
int rt_train_checkpoint(rt_state *st, const char *sid, rt_program *p, int cont, char *err,
                        size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
