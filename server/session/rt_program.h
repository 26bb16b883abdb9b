/*
 * rt_program.h - a compiled program in a session: one rt_exec over a
 * (shared) plan, and what its training calls keep between them: RunSteps'
 * replay records, the run and stop generations of Control's stop, the
 * resumable Fit's record, the step-time estimate and the checkpoint marks.
 * The struct is the session layer's (rt_program_impl.h); server/rpc sees
 * only these functions.
 *
 * Locking rule (the one place it is stated):
 *   - The training state belongs to the caller that holds the device
 *     (server/rpc's device lock): every function marked [device] is called
 *     by that holder only, one call at a time, and never concurrently with
 *     another [device] function on the same program. The transport marks
 *     the holding thread (common/rt_hold.h); debug builds assert the mark
 *     in each [device] mutator (release builds compile the check away, so
 *     the step path takes no lock).
 *   - [any] functions may run on any thread: the id, plan and exec
 *     pointers never change, and the fields they touch are atomics (the
 *     step estimate, the run/stop generations, the dirty mark).
 *   - [new] functions are for a program no other call can see yet (just
 *     added or restored, its id not yet answered).
 *   - rt_program_pipe() is the transport's: under its own pipe lock.
 *   - The checkpoint writer and reader (rt_ckpt.c, rt_state.c) are this
 *     layer's and read the struct directly, under the same device rule.
 */
#ifndef RTRAIN_PROGRAM_H
#define RTRAIN_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "rt_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A RunSteps call's answer, kept so a retry after a crash or a lost answer
 * gets the original numbers (seq 0 = empty). */
#define RT_SEQ_RING 64 /* >= RT_TRAIN_MAX_WINDOW, the calls a client has in flight */
typedef struct rt_seq_rec {
    uint64_t seq;
    int64_t global_step;
    rt_metrics last, mean;
} rt_seq_rec;

/* A resumable Fit (FitRequest.fit_id): where it started and how far it
 * got, kept with the program's state so that a Fit sent again after a
 * restart continues it, and the results of its last RT_FIT_RING epochs
 * (epoch k of the fit in ring[(k - 1) % RT_FIT_RING]) so that EpochEnds
 * the client lost in the crash are sent again as they were. */
#define RT_FIT_RING 128 /* > the epochs a stream can hold unsent (stream_queue_max) */
typedef struct rt_fit_epoch {
    int64_t epoch; /* EpochEnd.epoch (the program's Fit count) */
    int64_t steps; /* global step at its end */
    uint64_t execute_ns;
    int32_t has_val, pad;
    rt_metrics train, val;
} rt_fit_epoch;

typedef struct rt_fit_rec {
    uint64_t id;         /* 0: no resumable fit */
    int64_t first_epoch; /* the program's fit_epochs before it */
    int64_t steps_done;  /* steps it ran (its epochs' and the current one's) */
    int64_t spe;         /* steps per epoch */
    uint32_t epochs;     /* asked */
    /* Its epochs are the engine's (steps_per_epoch is the data set's and it
     * started at an engine epoch's start): the exec's epoch accumulators
     * then hold the current epoch's metrics, so the fit can stop and resume
     * at any step. Otherwise only at its epoch ends. */
    int32_t aligned;
    int32_t done, stopped; /* it ended (stopped: by a Control call) */
    int32_t pad;
} rt_fit_rec;

typedef struct rt_program rt_program;

/* Pipelined RunSteps (after_seq): the highest seq whose call completed,
 * the highest that failed, and the highest that was let run (a held
 * call's predecessor that runs may take any time: --pipeline-hold-ms is
 * for one that never comes). The transport's, under its pipe lock. */
typedef struct rt_program_pipe {
    uint64_t done;
    uint64_t failed;
    uint64_t seen;
} rt_program_pipe;

/* ------------------------------------------------------------ [any] */
/* What never changes once a program is added, at the start of struct
 * rt_program (rt_program.c checks the offsets): read inline, so the
 * handlers' accessors cost what a field read did. */
typedef struct rt_program_head {
    char id[40]; /* RT_SESSION_ID_LEN */
    uint64_t charged_bytes;
    rt_plan *plan;
    rt_exec *exec;
} rt_program_head;
static inline const char *rt_program_id(const rt_program *p)
{
    return ((const rt_program_head *)(const void *)p)->id;
}
static inline rt_plan *rt_program_plan(const rt_program *p)
{
    return ((const rt_program_head *)(const void *)p)->plan;
}
static inline rt_exec *rt_program_exec(const rt_program *p)
{
    return ((const rt_program_head *)(const void *)p)->exec;
}
rt_program_pipe *rt_program_pipe_marks(rt_program *p);
/* [any] Give back a reference (rt_session.h: a program's lifetime); the
 * last frees the program. NULL is a no-op. */
void rt_program_release(rt_program *p);
/* [any] 1 once DropProgram took p out of its session: a call that found
 * it before answers NOT_FOUND when it reaches the device, and no
 * checkpoint of it is written. */
int rt_program_dropped(const rt_program *p);
/* [any] What the data view needs of the plan (rt_view.h), read when the
 * program was added, so a training call's data checks and views do not go
 * back to the engine. */
struct rt_view_spec;
const struct rt_view_spec *rt_program_view(const rt_program *p);
/* [any] The plan's per-sample output dims into dims (RT_MAX_DIMS of
 * them): their count, or the plan's failure (< 0); read when the program
 * was added, as rt_program_view. */
int rt_program_output_shape(const rt_program *p, int64_t *dims);

/* A learning rate > 0 for the program from its next step on (0 leaves it);
 * a changed one marks the newest checkpoint stale. The exec's rate is
 * atomic: Control calls this while training runs. */
int rt_program_set_lr(rt_program *p, float lr);
/* The exec changed outside training (SetWeights): the newest checkpoint
 * is no longer the program's state even at the same step. */
void rt_program_mark_dirty(rt_program *p);
/* Control: stop the RunSteps/Fit running on p (if stop) at its next step
 * boundary, never a later call. 1 when one was running. */
int rt_program_control(rt_program *p, int stop);
/* One training step's estimated cost in ns: the measured moving average,
 * or ~2 GFLOP/s of the plan's FLOPs before the first measurement. */
double rt_program_step_ns(const rt_program *p);

/* --------------------------------------------------------- [device] */
/* A training call's run generation: Control's stop reaches the call whose
 * generation it copied, checked at each step (rt_program_stop_asked). */
uint64_t rt_program_run_begin(rt_program *p);
void rt_program_run_end(rt_program *p);
int rt_program_stop_asked(const rt_program *p, uint64_t gen);

/* RunSteps' replay protection. 1 when seq (> 0) was applied already:
 * *out is its recorded answer when the ring still holds it (out->seq ==
 * seq), else the last call's metrics with out->seq = 0. 0: a new seq. */
int rt_program_replay(const rt_program *p, uint64_t seq, rt_seq_rec *out);
/* A RunSteps call ran to its end: its answer is kept (under seq when seq
 * > 0) and the program is at a call boundary. */
void rt_program_run_done(rt_program *p, uint64_t seq, const rt_metrics *last,
                         const rt_metrics *mean);
/* A training call stopped inside itself (partial: not at a boundary the
 * client can resume from); an exit checkpoint then keeps the older one. */
void rt_program_set_partial(rt_program *p, int partial);
/* steps took ns: the step estimate's moving average. */
void rt_program_note_steps(rt_program *p, uint64_t ns, int64_t steps);
/* Execute time of the engine's epochs: *mark is when the current stretch
 * of training began. At an epoch end the epoch's time is what earlier calls
 * spent in it plus this stretch (returned, *mark restarts); at the end of
 * a call the unfinished epoch's stretch is kept for the next. */
uint64_t rt_program_epoch_clock_end(rt_program *p, uint64_t *mark);
void rt_program_epoch_clock_pause(rt_program *p, uint64_t mark);

/* Checkpoints: the step of the newest one, whether the program's state is
 * exactly that one (same step, nothing changed since), whether the last
 * call stopped inside itself, and the due decision for intervals already
 * resolved (0: that kind of interval is off). */
int64_t rt_program_ckpt_step(const rt_program *p);
int rt_program_ckpt_current(const rt_program *p);
int rt_program_partial(const rt_program *p);
int rt_program_checkpoint_due(const rt_program *p, uint32_t every_steps, uint32_t every_s);

/* RunSteps' last applied seq and the Fit epochs completed on p. */
uint64_t rt_program_last_seq(const rt_program *p);
int64_t rt_program_fit_epochs(const rt_program *p);

/* The resumable Fit (rt_fit_rec). fit_begin starts a new one (id 0: not
 * resumable, only aligned is kept); fit_step counts a step of a resumable
 * one; fit_epoch_end counts a completed epoch (returns the program's Fit
 * epoch number); fit_keep_epoch keeps its result for a resend; fit_end
 * marks the fit ended (stopped: by Control). fit_epoch gives the kept
 * result of the fit's k-th epoch (1-based), NULL if no longer kept. */
const rt_fit_rec *rt_program_fit(const rt_program *p);
void rt_program_fit_begin(rt_program *p, uint64_t id, int64_t spe, uint32_t epochs, int aligned);
void rt_program_fit_step(rt_program *p);
int64_t rt_program_fit_epoch_end(rt_program *p);
void rt_program_fit_keep_epoch(rt_program *p, const rt_fit_epoch *e);
void rt_program_fit_end(rt_program *p, int stopped);
const rt_fit_epoch *rt_program_fit_epoch(const rt_program *p, int64_t k);

/* The model as compiled (a packed CompileRequest, rt_program_take_model's;
 * NULL with *len 0 before it is kept). */
const uint8_t *rt_program_model(const rt_program *p, size_t *len);

/* ------------------------------------------------------------ [new] */
/* The model as compiled (a packed CompileRequest): p takes buf (malloc'd). */
void rt_program_take_model(rt_program *p, uint8_t *buf, size_t len);
/* The restored program keeps the id it had. */
void rt_program_set_id(rt_program *p, const char *id);
/* A program made from another's state continues its Fit epoch count. */
void rt_program_inherit(rt_program *p, const rt_program *from);
/* A pushed state's sequence numbers and fit belong to the client that
 * trained it: forgotten for the new owner. */
void rt_program_forget_client(rt_program *p);

#ifdef __cplusplus
}
#endif
#endif
