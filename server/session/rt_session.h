/*
 * rt_session.h - sessions, their program instances, and the daemon-wide
 * program (plan) cache.
 *
 * A session owns programs; a program is one rt_exec (weights, optimizer
 * state, data cursor) over a plan that may be shared through the cache.
 *
 * Every session belongs to a principal (rt_principal.h). A lookup names the
 * principal asking, and another principal's session is simply not found:
 * the answer is the same as for an id that never existed. Ids carry 128
 * random bits from getrandom.
 *
 *     rt_session_table *t = rt_session_table_create(64);
 *     rt_session *s;
 *     rt_principal_reserve(who, RT_Q_SESSIONS, 1, ...);  // the caller's quota
 *     rt_session_open(t, "notebook", who, &s);      // takes that reservation
 *     rt_program *p;
 *     rt_session_add_program(s, plan, exec, bytes, &p); // takes plan ref, exec
 *                                                       // and the reservation
 *     rt_session_release(s);
 *     ...
 *     rt_session *s2 = rt_session_find(t, id, who);  // retained or NULL
 *     rt_program *p2 = rt_session_find_program(s2, pid); // valid while s2 held
 *
 * Threads: the table and each session have a mutex. A program's exec is
 * only used under the device lock (server/rpc), never concurrently.
 */
#ifndef RTRAIN_SESSION_H
#define RTRAIN_SESSION_H

#include <pthread.h>
#include <stdint.h>

#include "rt_engine.h"
#include "rt_principal.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_SESSION_ID_LEN 40 /* "s-" / "p-" + 32 hex digits + NUL, padded */

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
    int64_t epoch;        /* EpochEnd.epoch (the program's Fit count) */
    int64_t steps;        /* global step at its end */
    uint64_t execute_ns;
    int32_t has_val, pad;
    rt_metrics train, val;
} rt_fit_epoch;

typedef struct rt_fit_rec {
    uint64_t id;          /* 0: no resumable fit */
    int64_t first_epoch;  /* the program's fit_epochs before it */
    int64_t steps_done;   /* steps it ran (its epochs' and the current one's) */
    int64_t spe;          /* steps per epoch */
    uint32_t epochs;      /* asked */
    /* Its epochs are the engine's (steps_per_epoch is the data set's and it
     * started at an engine epoch's start): the exec's epoch accumulators
     * then hold the current epoch's metrics, so the fit can stop and resume
     * at any step. Otherwise only at its epoch ends. */
    int32_t aligned;
    int32_t done, stopped; /* it ended (stopped: by a Control call) */
    int32_t pad;
} rt_fit_rec;

typedef struct rt_program {
    char id[RT_SESSION_ID_LEN];
    /* What the program's memory was charged as (RT_Q_PROGRAM_BYTES), given
     * back with RT_Q_PROGRAMS when the program is freed. */
    uint64_t charged_bytes;
    rt_plan *plan;
    rt_exec *exec;
    /* RunSteps replay protection: the highest applied seq and what its
     * call reported, returned again when a seq is replayed. */
    uint64_t last_seq;
    rt_metrics last_metrics;
    rt_metrics last_mean;
    /* Pipelined RunSteps (after_seq), under the server's pipe_mu: the
     * highest seq whose call completed, and the highest that failed. */
    uint64_t pipe_done;
    uint64_t pipe_failed;
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
} rt_program;

typedef struct rt_session {
    char id[RT_SESSION_ID_LEN];
    char name[64];
    char token[RT_SESSION_ID_LEN]; /* "t-" + 32 random hex digits */
    rt_principal *owner;          /* NULL only for tools and tests */
    uint64_t last_used_ns;        /* atomic: rt_now_ns() of the last lookup */
    /* private */
    pthread_mutex_t mu;
    rt_program **progs;
    int n_progs, cap_progs;
    int refs;
} rt_session;

typedef struct rt_session_table rt_session_table;

rt_session_table *rt_session_table_create(int max_sessions);
/* Destroys every remaining session; NULL is a no-op. */
void rt_session_table_destroy(rt_session_table *t);

/* A new session with a random id, owned by owner, which already reserved
 * one RT_Q_SESSIONS: the session gives it back when it is freed, or at once
 * if opening fails. RT_ETOOBIG at max_sessions, RT_EIO if the system has
 * no random bytes. *out is retained for the caller. */
int rt_session_open(rt_session_table *t, const char *name, rt_principal *owner,
                    rt_session **out);
/* The session with this id owned by who, retained, or NULL (also when
 * another principal owns it). */
rt_session *rt_session_find(rt_session_table *t, const char *id, const rt_principal *who);
/* Remove who's session from the table; it is freed when its last holder
 * releases it. RT_ENOTFOUND if unknown or not who's. */
int rt_session_close(rt_session_table *t, const char *id, const rt_principal *who);
int rt_session_count(rt_session_table *t);
/* Open sessions, their programs, and those programs' planned memory
 * (compile report: parameter/optimizer bytes and activation arenas). */
typedef struct rt_session_usage {
    uint64_t sessions, programs, param_bytes, arena_bytes;
} rt_session_usage;
void rt_session_table_usage(rt_session_table *t, rt_session_usage *u);
/* Close sessions not looked up for idle_ns (as of now_ns) and not in use by
 * a call. Writes up to max closed ids into ids (may be NULL); returns how
 * many were closed. */
int rt_session_expire(rt_session_table *t, uint64_t now_ns, uint64_t idle_ns,
                      char (*ids)[RT_SESSION_ID_LEN], int max);

void rt_session_retain(rt_session *s);
void rt_session_release(rt_session *s); /* NULL is a no-op */

/* Add a program over plan (the session takes the caller's plan reference)
 * and exec (the session takes ownership). The caller reserved one
 * RT_Q_PROGRAMS and bytes of RT_Q_PROGRAM_BYTES for s->owner; they are
 * given back when the program is freed. On error everything is released
 * and given back. */
int rt_session_add_program(rt_session *s, rt_plan *plan, rt_exec *exec,
                           uint64_t bytes, rt_program **out);
/* Take back a program that a failed call added and never answered with:
 * removed from s, freed, its quota given back. No other holder may use p
 * (its id went to nobody). RT_ENOTFOUND if p is not s's. */
int rt_session_remove_program(rt_session *s, rt_program *p);
/* Fill dst with 128 random bits as prefix + 32 hex digits (len >= 35).
 * RT_EIO if getrandom fails: ids are never made from guessable values. */
int rt_random_id(char *dst, size_t len, const char *prefix);
rt_program *rt_session_find_program(rt_session *s, const char *id);
/* fn(ud, session, program) for every program of every session, under the
 * table's lock (for the exit checkpoint, when no call runs); returns the
 * sum of what fn returned. */
int rt_session_each_program(rt_session_table *t,
                            int (*fn)(void *ud, rt_session *s, rt_program *p), void *ud);

/* fn(ud, session) for every session, under the table's and the session's
 * locks (the dashboard copies what it shows: ids, names, owner, programs
 * and their compile reports, never the exec). Returns how many. */
int rt_session_each(rt_session_table *t, void (*fn)(void *ud, rt_session *s), void *ud);

/* ----------------------------------------------------------- plan cache */
typedef struct rt_plan_cache rt_plan_cache;

rt_plan_cache *rt_plan_cache_create(int capacity);
void rt_plan_cache_destroy(rt_plan_cache *c); /* NULL is a no-op */
/* A retained plan or NULL. */
rt_plan *rt_plan_cache_get(rt_plan_cache *c, const uint8_t key[16]);
/* Insert (retains plan). If the key is already there (two compiles raced),
 * the cached plan is returned retained in *winner; else *winner = plan
 * retained again. The caller releases its own reference either way. */
void rt_plan_cache_put(rt_plan_cache *c, const uint8_t key[16], rt_plan *plan,
                       rt_plan **winner);
int rt_plan_cache_count(rt_plan_cache *c);

#ifdef __cplusplus
}
#endif
#endif
