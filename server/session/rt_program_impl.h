/* rt_program_impl.h - struct rt_program, for the session layer only
 * (rt_program.c, rt_session.c, the checkpoint code) and its tests. The
 * locking rule is in rt_program.h. */
#ifndef RTRAIN_PROGRAM_IMPL_H
#define RTRAIN_PROGRAM_IMPL_H

#include "rt_program.h"
#include "rt_session.h"
#include "rt_view.h"

struct rt_program {
    char id[RT_SESSION_ID_LEN];
    /* What the program's memory was charged as (RT_Q_PROGRAM_BYTES), given
     * back with RT_Q_PROGRAMS when the program is freed. */
    uint64_t charged_bytes;
    rt_plan *plan;
    rt_exec *exec;
    /* What the data view needs of the plan (rt_view_spec_of), read once
     * when the program is added: the plan never changes. */
    rt_view_spec view;
    /* The plan's per-sample output dims (rt_plan_output_shape: their
     * count, < 0 for none), read once likewise (Predict). */
    int out_n;
    int64_t out[RT_MAX_DIMS];
    /* RunSteps replay protection: the highest applied seq and what its
     * call reported, returned again when a seq is replayed. */
    uint64_t last_seq;
    rt_metrics last_metrics;
    rt_metrics last_mean;
    /* Pipelined RunSteps (after_seq), the transport's (rt_program_pipe). */
    rt_program_pipe pipe;
    /* Measured cost of one training step, for choosing inline vs executor;
     * an exponential moving average, 0 until the first measurement.
     * Atomic (__atomic_load/__atomic_store): handlers read it on cq threads
     * while the work that measures a step, under the device lock, writes it. */
    double step_ns;
    /* Epochs completed by Fit calls (1-based numbering of EpochEnd). */
    int64_t fit_epochs;
    /* Training time already spent in the engine's current epoch by earlier
     * calls: a RunSteps epoch can span calls, and its EpochEnd.execute_ns
     * counts the steps of every one of them (not the gaps between). */
    uint64_t epoch_exec_ns;
    /* Control's stop (atomic, __atomic_load/__atomic_store): run_gen is the
     * generation of the RunSteps/Fit call running on the program (0: none),
     * set by that call's work; Control copies it into stop_gen, and the
     * running call stops at its next step boundary when the two match, so
     * a stop never reaches a later call. */
    uint64_t run_gen;
    uint64_t stop_gen;
    /* Durable mode (rt_state.h): the answers of the last RunSteps calls,
     * the model as compiled (a packed CompileRequest, owned), and when the
     * last checkpoint was written (global step, rt_now_ns). Under the
     * device lock, as the exec. */
    rt_seq_rec ring[RT_SEQ_RING];
    uint8_t *req;
    size_t req_len;
    int64_t ckpt_step;
    uint64_t ckpt_ns;
    int ckpt_partial; /* a call stopped mid-way: not at a call boundary */
    /* The exec changed outside training since the last checkpoint
     * (SetWeights, a learning rate): the newest checkpoint is not the
     * program's state even at the same step. Atomic (Control sets it). */
    int ckpt_dirty;
    /* The resumable Fit (the last one with a fit_id), under the device
     * lock; written with every checkpoint. */
    rt_fit_rec fit;
    rt_fit_epoch fit_ring[RT_FIT_RING];
    /* Lifetime (rt_session.h): the session's list holds one reference and
     * every call that looked the program up one more (atomic); the last
     * release frees it and gives back what it was charged to owner.
     * dropped (atomic) is set by DropProgram, under the device lock, when
     * the program leaves its session's list. */
    int refs;
    int dropped;
    rt_principal *owner;
};

#endif
