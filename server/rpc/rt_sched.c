/* rt_sched.c - where a call's work waits and runs: the device's lanes
 * (round-robin between keys, slices, quanta), the executor and the compile
 * pool, pipelined RunSteps (after_seq), uploads in flight and rt_srv_tick,
 * which answers stalled uploads and compiles past their budget. */
#include "rt_srv_core.h"

#include <errno.h>
#include <netdb.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zlib.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>

#include "rt_bufpool.h"
#include "rt_dist.h"
#include "rt_health.h"
#include "rt_hold.h"
#include "rt_stream.h"
#include "rt_state.h"
#include "rt_transport.h"

/* What this file asks of the transport goes through s->tp (rt_srv_core.h):
 * a call's work done, its status goes out; watch for the client going
 * away. */
static void finish(rt_call *c) { c->srv->tp->finish(c); }
static void watch_close(rt_call *c) { c->srv->tp->watch_close(c); }

/* ------------------------------------------------------------- the device */
/* A quantum: what a holder always gets before a short job may cut in, and
 * what counts as short. A twentieth of the slice, at least 100 us. */
static uint64_t quantum_ns(const rt_srv *s)
{
    uint64_t q = s->cfg.slice_ns / 20;
    return q < 100000 ? 100000 : q;
}

/* Hand the device to the first waiter of the lane served longest ago (with
 * short_first, of the first lane whose next job is short); that lane goes
 * to the back. With nobody waiting the device is free. dev_mu held. */
static void grant_next_locked(rt_srv *s, int short_first)
{
    if (s->n_lanes == 0) {
        s->dev_held = 0;
        return;
    }
    int li = 0;
    if (short_first)
        for (int i = 0; i < s->n_lanes; i++)
            if (s->lanes[i].head->is_short) {
                li = i;
                break;
            }
    rt__lane first = s->lanes[li];
    rt__dev_wait *w = first.head;
    first.head = w->next;
    if (!first.head)
        first.tail = NULL;
    memmove(s->lanes + li, s->lanes + li + 1, sizeof *s->lanes * (size_t)(s->n_lanes - li - 1));
    s->n_lanes--;
    if (first.head)
        s->lanes[s->n_lanes++] = first;
    __atomic_sub_fetch(&s->dev_waiting, 1, __ATOMIC_ACQ_REL);
    if (w->is_short)
        __atomic_sub_fetch(&s->dev_short_waiting, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&s->dev_since, rt_now_ns(), __ATOMIC_RELEASE);
    w->granted = 1;
    pthread_cond_signal(&w->cv);
}

/* Wait in key's lane until granted. dev_mu held; returns with it held. */
static void wait_turn_locked(rt_srv *s, const char *key, uint64_t est_ns)
{
    rt__dev_wait w;
    memset(&w, 0, sizeof w);
    pthread_cond_init(&w.cv, NULL);
    w.is_short = est_ns <= quantum_ns(s);
    int li = -1;
    for (int i = 0; i < s->n_lanes; i++)
        if (strcmp(s->lanes[i].key, key) == 0)
            li = i;
    if (li < 0) {
        /* Every waiter is an executor or compile thread, so the lanes
         * allocated at create (one per such thread) always suffice. */
        if (s->n_lanes == s->cap_lanes)
            abort();
        li = s->n_lanes++;
        memset(&s->lanes[li], 0, sizeof s->lanes[li]);
        snprintf(s->lanes[li].key, sizeof s->lanes[li].key, "%s", key);
    }
    rt__lane *l = &s->lanes[li];
    if (l->tail)
        l->tail->next = &w;
    else
        l->head = &w;
    l->tail = &w;
    __atomic_add_fetch(&s->dev_waiting, 1, __ATOMIC_ACQ_REL);
    if (w.is_short)
        __atomic_add_fetch(&s->dev_short_waiting, 1, __ATOMIC_ACQ_REL);
    while (!w.granted)
        pthread_cond_wait(&w.cv, &s->dev_mu);
    pthread_cond_destroy(&w.cv);
}

void rt__dev_lock(rt_srv *s, const char *key, uint64_t est_ns)
{
    pthread_mutex_lock(&s->dev_mu);
    if (!s->dev_held && s->n_lanes == 0) {
        s->dev_held = 1;
        __atomic_store_n(&s->dev_since, rt_now_ns(), __ATOMIC_RELEASE);
    } else {
        wait_turn_locked(s, key, est_ns);
    }
    pthread_mutex_unlock(&s->dev_mu);
    rt_device_hold_enter(); /* debug builds: rt_program.h's rule */
}

/* Inline jobs never wait: the device must be free with nobody queued. */
static int dev_trylock(rt_srv *s)
{
    int ok = 0;
    pthread_mutex_lock(&s->dev_mu);
    if (!s->dev_held && s->n_lanes == 0) {
        s->dev_held = ok = 1;
        __atomic_store_n(&s->dev_since, rt_now_ns(), __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s->dev_mu);
    if (ok)
        rt_device_hold_enter();
    return ok;
}

void rt__dev_unlock(rt_srv *s)
{
    rt_device_hold_leave();
    pthread_mutex_lock(&s->dev_mu);
    grant_next_locked(s, 0);
    pthread_mutex_unlock(&s->dev_mu);
}

/* At a step boundary the holder yields once its slice is over and anyone
 * waits (round-robin), or, after one quantum, to a short job (a K=1
 * RunSteps): short jobs then wait about a quantum, not a slice, and a
 * stream of them still leaves the holder most of the device. */
int rt_call_yield(rt_call *c)
{
    rt_srv *s = c->srv;
    if (!c->holds_device || !__atomic_load_n(&s->dev_waiting, __ATOMIC_ACQUIRE))
        return 0;
    uint64_t ran = rt_now_ns() - __atomic_load_n(&s->dev_since, __ATOMIC_ACQUIRE);
    int for_short = ran < s->cfg.slice_ns;
    if (for_short &&
        (ran < quantum_ns(s) || !__atomic_load_n(&s->dev_short_waiting, __ATOMIC_ACQUIRE)))
        return 0;
    pthread_mutex_lock(&s->dev_mu);
    int yielded = 0;
    if (s->n_lanes > 0) {
        grant_next_locked(s, for_short);
        wait_turn_locked(s, c->key, c->est_ns);
        yielded = 1;
    }
    pthread_mutex_unlock(&s->dev_mu);
    return yielded;
}

void rt_srv_pause_point(rt_srv *s, int64_t global_step)
{
    int64_t at = s->cfg.pause_at_step;
    if (at <= 0 || global_step < at || __atomic_exchange_n(&s->paused_once, 1, __ATOMIC_ACQ_REL))
        return;
    RT_LOG(RT_LOG_INFO, "pausing at step %lld (--pause-at-step %lld)", (long long)global_step,
           (long long)at);
    raise(SIGSTOP);
}

/* A training call's step boundary (rt_train_host.step, ud the call): the
 * --pause-at-step hook, the device's time slice, and 1 when the client
 * went away or the daemon's grace period ended. The use case calls it only
 * when the call's flags say so (a waiter, the pause step). */
int rt_call_step_point(void *ud, int64_t global_step)
{
    rt_call *c = ud;
    rt_srv_pause_point(c->srv, global_step);
    rt_call_yield(c);
    return rt_call_is_cancelled(c);
}

void rt_call_device_lock(rt_call *c)
{
    rt__dev_lock(c->srv, rt_call_sched_key(c), 0);
    c->holds_device = 1;
}

void rt_call_device_unlock(rt_call *c)
{
    c->holds_device = 0;
    rt__dev_unlock(c->srv);
}

/* The session, or the peer for a call without one: the executor runs one
 * job per session at a time, in order. */
static const char *exec_key(rt_call *c)
{
    if (!c->xkey[0]) {
        if (c->sess) {
            snprintf(c->xkey, sizeof c->xkey, "s:%s", c->sess->id);
        } else {
            char *peer = c->call ? grpc_call_get_peer(c->call) : NULL;
            snprintf(c->xkey, sizeof c->xkey, "p:%s", peer ? peer : "?");
            gpr_free(peer);
        }
    }
    return c->xkey;
}

/* The device is shared between principals when there are several (a
 * tokens file); single-user, between sessions. */
const char *rt_call_sched_key(rt_call *c)
{
    if (!c->key[0]) {
        if (c->srv->cfg.tokens_path && c->who)
            snprintf(c->key, sizeof c->key, "u:%s", rt_principal_name(c->who));
        else
            snprintf(c->key, sizeof c->key, "%s", exec_key(c));
    }
    return c->key;
}

/* ------------------------------------------------------------- executor */
/* The call whose work this executor thread runs holding the device, for
 * the engine's pause hook: the exec's long host passes (a data set's
 * checks, an epoch's order: up to a second before a first step) pause at
 * rt_call_yield while a call holds the device. */
static __thread rt_call *holding;

static void pause_point(void)
{
    if (holding)
        rt_call_yield(holding);
}

/* Set once, before the first call is served. Not with MPI replicas:
 * rt_dist runs those passes holding its own lock, which a call waiting for
 * the device may need. */
void rt__sched_pause_hook(void)
{
    if (rt_dist_size() == 1)
        rt_exec_set_pause_hook(pause_point);
}

static void run_work(rt_call *c)
{
    rt__call_to(c, RT_CS_RUNNING);
    uint64_t t0 = rt_now_ns(), cb = c->tm.compile_ns, eb = c->tm.encode_ns, xb = c->tm.execute_ns;
    /* A call that found its program before a DropProgram that ran first
     * (rt_session.h: the program's memory is still the call's). */
    int rc =
        c->prog && rt_program_dropped(c->prog)
            ? rt_call_fail(c, RT_ENOTFOUND, "program %.64s was dropped", rt_program_id(c->prog))
            : c->work(c);
    if (rc < 0 && !c->err)
        rt_call_fail(c, rc, "%s", rt_strerror(rc));
    uint64_t dur = rt_now_ns() - t0;
    uint64_t named = (c->tm.compile_ns - cb) + (c->tm.encode_ns - eb) + (c->tm.execute_ns - xb);
    c->tm.execute_ns += dur > named ? dur - named : 0;
}

static void *executor_main(void *arg);

static int key_running_locked(rt_srv *s, const char *key)
{
    for (rt_call *r = s->running; r; r = r->next_run)
        if (strcmp(r->xkey, key) == 0)
            return 1;
    return 0;
}

void rt__enqueue(rt_call *c)
{
    rt_srv *s = c->srv;
    /* A queued unary call may run long: watch for the client going away
     * (cancel, deadline) so the work can stop at a step boundary. Inline
     * calls skip this batch; it would cost the fast path a round of cq
     * work. */
    if (c->m->kind == RT_UNARY && !c->close_posted)
        watch_close(c);
    rt_call_sched_key(c);
    exec_key(c);
    rt__call_to(c, RT_CS_QUEUED);
    c->enq_ns = rt_now_ns();
    c->next_job = NULL;
    pthread_mutex_lock(&s->q_mu);
    if (c->compile_pool) {
        if (s->c_tail)
            s->c_tail->next_job = c;
        else
            s->c_head = c;
        s->c_tail = c;
        pthread_cond_signal(&s->cq_cv);
        pthread_mutex_unlock(&s->q_mu);
        return;
    }
    __atomic_add_fetch(&s->q_pending, 1, __ATOMIC_ACQ_REL);
    if (s->q_tail)
        s->q_tail->next_job = c;
    else
        s->q_head = c;
    s->q_tail = c;
    s->q_len++;
    /* A thread per key with work, up to the cap: a key whose job waits for
     * the device must not keep another key's job from reaching it. An idle
     * thread may already be promised to an earlier job that it has not
     * picked yet, so compare with the queue's length. */
    if (s->q_len > s->idle_exec && s->n_exec < s->cfg.max_exec_threads && !s->q_stop &&
        !key_running_locked(s, c->xkey)) {
        if (s->n_exec == s->cap_exec) {
            int nc = s->cap_exec ? s->cap_exec * 2 : 8;
            pthread_t *nt = realloc(s->exec_threads, sizeof *nt * (size_t)nc);
            if (nt) {
                s->exec_threads = nt;
                s->cap_exec = nc;
            }
        }
        if (s->n_exec < s->cap_exec &&
            pthread_create(&s->exec_threads[s->n_exec], NULL, executor_main, s) == 0)
            s->n_exec++;
    }
    pthread_cond_broadcast(&s->q_cv);
    pthread_mutex_unlock(&s->q_mu);
}

/* The first queued job whose key has nothing running (q_mu held). */
static rt_call *pick_locked(rt_srv *s)
{
    rt_call *prev = NULL;
    for (rt_call *c = s->q_head; c; prev = c, c = c->next_job) {
        if (key_running_locked(s, c->xkey))
            continue;
        if (prev)
            prev->next_job = c->next_job;
        else
            s->q_head = c->next_job;
        if (s->q_tail == c)
            s->q_tail = prev;
        s->q_len--;
        c->next_run = s->running;
        s->running = c;
        return c;
    }
    return NULL;
}

static void *executor_main(void *arg)
{
    rt_srv *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->q_mu);
        rt_call *c;
        while (!(c = pick_locked(s)) && !s->q_stop) {
            s->idle_exec++;
            pthread_cond_wait(&s->q_cv, &s->q_mu);
            s->idle_exec--;
        }
        pthread_mutex_unlock(&s->q_mu);
        if (!c)
            break;
        if (c->needs_device) {
            rt__dev_lock(s, c->key, c->est_ns);
            c->holds_device = 1;
        }
        c->tm.queue_ns += rt_now_ns() - c->enq_ns;
        if (rt_call_is_cancelled(c)) {
            rt_call_fail(c, RT_ECANCELLED, "cancelled before it ran");
        } else {
            holding = c->holds_device ? c : NULL;
            run_work(c);
            holding = NULL;
        }
        if (c->holds_device) {
            c->holds_device = 0;
            rt__dev_unlock(s);
        }
        pthread_mutex_lock(&s->q_mu);
        for (rt_call **pp = &s->running; *pp; pp = &(*pp)->next_run)
            if (*pp == c) {
                *pp = c->next_run;
                break;
            }
        if (s->q_head)
            pthread_cond_broadcast(&s->q_cv);
        pthread_mutex_unlock(&s->q_mu);
        __atomic_sub_fetch(&s->q_pending, 1, __ATOMIC_ACQ_REL);
        finish(c);
    }
    return NULL;
}

/* Compile workers: compiles never hold a cq thread or the device while
 * they run (the work takes the device briefly to create the instance).
 * A compile past its budget is answered DEADLINE_EXCEEDED by
 * rt_srv_tick; the worker then drops what it built. */
void *rt__compile_main(void *arg)
{
    rt_srv *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->q_mu);
        while (!s->c_head && !s->q_stop)
            pthread_cond_wait(&s->cq_cv, &s->q_mu);
        rt_call *c = s->c_head;
        if (!c) {
            pthread_mutex_unlock(&s->q_mu);
            break;
        }
        s->c_head = c->next_job;
        if (!s->c_head)
            s->c_tail = NULL;
        c->next_run = s->c_running;
        s->c_running = c;
        c->compile_running = 1;
        uint64_t now = rt_now_ns();
        __atomic_store_n(&c->started_ns, now, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&s->q_mu);
        c->tm.queue_ns += now - c->enq_ns;
        if (s->cfg.compile_hold && __atomic_add_fetch(&s->compiles_taken, 1, __ATOMIC_RELAXED) ==
                                       (unsigned)s->cfg.compile_hold) {
            RT_LOG(RT_LOG_WARN, "compile held until its budget's answer (--compile-hold)");
            while (!rt_call_is_cancelled(c) && !__atomic_load_n(&s->q_stop, __ATOMIC_ACQUIRE))
                nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        }
        if (rt_call_is_cancelled(c))
            rt_call_fail(c, RT_ECANCELLED, "cancelled before it ran");
        else
            run_work(c);
        if (c->holds_device)
            rt_call_device_unlock(c);
        pthread_mutex_lock(&s->q_mu);
        for (rt_call **pp = &s->c_running; *pp; pp = &(*pp)->next_run)
            if (*pp == c) {
                *pp = c->next_run;
                break;
            }
        c->compile_running = 0;
        pthread_mutex_unlock(&s->q_mu);
        finish(c);
    }
    return NULL;
}

/* ------------------------------------------------------ pipelined calls */
/* A client keeps several RunSteps of one program in flight, each naming
 * its predecessor (after_seq). Two cq threads may take them in any order,
 * so a call whose predecessor has not completed waits on s->held (no
 * thread waits) and is dispatched when that one finishes: steps run in the
 * client's order, none after a failed call, and nothing is replayed. */

/* A call's program's marks, looked up once (the program lives while the
 * call holds it: rt__call_free releases it). */
static rt_program_pipe *pipe_of(rt_call *c)
{
    if (!c->pipe)
        c->pipe = rt_program_pipe_marks(c->prog);
    return c->pipe;
}

/* The held call's verdict once its predecessor completed: 0 run, or the
 * failure recorded (a call between after_seq and this one failed). pipe_mu
 * held. */
static int pipe_verdict_locked(rt_call *c)
{
    const rt_program_pipe *p = c->pipe;
    if (p->failed >= c->after_seq && p->failed < c->seq)
        return rt_call_fail(c, RT_ESTATE, "RunSteps seq %llu not run: seq %llu before it failed",
                            (unsigned long long)c->seq, (unsigned long long)p->failed);
    /* Its client gave up while it waited (rt__on_close may not have run yet). */
    if (rt_call_is_cancelled(c) || gpr_time_cmp(gpr_now(c->deadline.clock_type), c->deadline) >= 0)
        return rt_call_fail(c, RT_ECANCELLED, "cancelled while waiting for seq %llu",
                            (unsigned long long)c->after_seq);
    return 0;
}

static void dispatch_now(rt_call *c);

/* Released calls run in order, one after another on this thread: a
 * released call that runs inline and finishes releases the next, which
 * joins the list instead of nesting. */
static __thread rt_call *tl_rel_head, *tl_rel_tail;
static __thread int tl_releasing;

void rt__pipe_release_list(rt_call *l)
{
    while (l) {
        rt_call *n = l->held_next;
        l->held_next = NULL;
        if (tl_rel_tail)
            tl_rel_tail->held_next = l;
        else
            tl_rel_head = l;
        tl_rel_tail = l;
        l = n;
    }
    if (tl_releasing)
        return;
    tl_releasing = 1;
    rt_call *c;
    while ((c = tl_rel_head)) {
        tl_rel_head = c->held_next;
        if (!tl_rel_head)
            tl_rel_tail = NULL;
        c->held_next = NULL;
        c->tm.queue_ns += rt_now_ns() - c->held_ns;
        if (c->err)
            finish(c);
        else
            dispatch_now(c);
    }
    tl_releasing = 0;
}

/* c completed (its status is about to go out): record it, and take off
 * the held list the calls that waited for it, each with its verdict. */
rt_call *rt__pipe_complete(rt_call *c)
{
    rt_srv *s = c->srv;
    rt_program_pipe *p = pipe_of(c);
    rt_call *out = NULL, **tail = &out;
    pthread_mutex_lock(&s->pipe_mu);
    if (c->seq > p->done)
        p->done = c->seq;
    if (c->err && c->err != RT_ERESTARTED &&
        c->seq > p->failed) /* refused unrun: it is sent again */
        p->failed = c->seq;
    for (rt_call **pp = &s->held; *pp;) {
        rt_call *h = *pp;
        if (h->prog == c->prog && h->after_seq <= p->done) {
            *pp = h->held_next;
            h->held = 0;
            h->held_next = NULL;
            if (pipe_verdict_locked(h) == 0 && h->seq > p->seen)
                p->seen = h->seq; /* it runs next */
            *tail = h;
            tail = &h->held_next;
        } else {
            pp = &h->held_next;
        }
    }
    pthread_mutex_unlock(&s->pipe_mu);
    return out;
}

/* Returns 1 when c waits for its predecessor (or failed for it), 0 when
 * it may run now. */
static int pipe_hold(rt_call *c)
{
    rt_srv *s = c->srv;
    rt_program_pipe *p = pipe_of(c);
    int posted = c->close_posted || c->m->kind != RT_UNARY;
    for (;;) {
        pthread_mutex_lock(&s->pipe_mu);
        if (p->done >= c->after_seq) {
            int rc = pipe_verdict_locked(c);
            if (rc == 0 && c->seq > p->seen)
                p->seen = c->seq; /* it runs now */
            pthread_mutex_unlock(&s->pipe_mu);
            if (rc < 0) {
                finish(c);
                return 1;
            }
            return 0;
        }
        if (posted) {
            rt__call_to(c, RT_CS_HELD);
            c->held = 1;
            c->held_ns = rt_now_ns();
            c->held_next = s->held;
            s->held = c;
            pthread_mutex_unlock(&s->pipe_mu);
            return 1;
        }
        pthread_mutex_unlock(&s->pipe_mu);
        /* Watch for the client going away while held (rt__on_close), before
         * anyone can release the call and queue it (which would post it). */
        watch_close(c);
        posted = 1;
    }
}

/* The client went away: a held call answers CANCELLED now, which fails
 * the calls held behind it. */
void rt__pipe_cancel(rt_call *c)
{
    rt_srv *s = c->srv;
    pthread_mutex_lock(&s->pipe_mu);
    int mine = c->held;
    if (mine) {
        for (rt_call **pp = &s->held; *pp; pp = &(*pp)->held_next)
            if (*pp == c) {
                *pp = c->held_next;
                break;
            }
        c->held = 0;
        c->held_next = NULL;
    }
    pthread_mutex_unlock(&s->pipe_mu);
    if (mine) {
        rt_call_fail(c, RT_ECANCELLED, "cancelled while waiting for seq %llu",
                     (unsigned long long)c->after_seq);
        rt__pipe_release_list(c);
    }
}

int rt__pipe_held_count(rt_srv *s)
{
    int n = 0;
    pthread_mutex_lock(&s->pipe_mu);
    for (const rt_call *h = s->held; h; h = h->held_next)
        n++;
    pthread_mutex_unlock(&s->pipe_mu);
    return n;
}

/* Whether h's predecessor came: it runs (or ran), or is held itself. A
 * predecessor's steps may take any time; --pipeline-hold-ms is for one
 * that never comes. pipe_mu held. */
static int pipe_came_locked(const rt_srv *s, const rt_call *h)
{
    if (h->pipe->seen >= h->after_seq)
        return 1;
    for (const rt_call *o = s->held; o; o = o->held_next)
        if (o->prog == h->prog && o->seq == h->after_seq)
            return 1;
    return 0;
}

/* Held calls past --pipeline-hold-ms whose predecessor never came, or
 * whose client went away. */
static int pipe_expire(rt_srv *s, uint64_t now)
{
    uint64_t lim = s->cfg.pipeline_hold_ms * 1000000ull;
    rt_call *out = NULL, **tail = &out;
    int n = 0;
    pthread_mutex_lock(&s->pipe_mu);
    for (rt_call **pp = &s->held; *pp;) {
        rt_call *h = *pp;
        int cancelled = rt_call_is_cancelled(h);
        if (cancelled || (now - h->held_ns > lim && !pipe_came_locked(s, h))) {
            *pp = h->held_next;
            h->held = 0;
            h->held_next = NULL;
            if (cancelled)
                rt_call_fail(h, RT_ECANCELLED, "cancelled while waiting for seq %llu",
                             (unsigned long long)h->after_seq);
            else
                rt_call_fail(h, RT_ETIMEDOUT,
                             "RunSteps seq %llu waited %llu ms for seq %llu (--pipeline-hold-ms)",
                             (unsigned long long)h->seq,
                             (unsigned long long)s->cfg.pipeline_hold_ms,
                             (unsigned long long)h->after_seq);
            *tail = h;
            tail = &h->held_next;
            n++;
        } else {
            pp = &h->held_next;
        }
    }
    pthread_mutex_unlock(&s->pipe_mu);
    rt__pipe_release_list(out);
    return n;
}

/* After the handler: answer now, run inline, or queue for the executor. */
void rt__dispatch(rt_call *c)
{
    if (c->err || !c->work) {
        finish(c);
        return;
    }
    if (c->after_seq && c->prog && pipe_hold(c))
        return;
    dispatch_now(c);
}

static void dispatch_now(rt_call *c)
{
    rt_srv *s = c->srv;
    if (c->m->kind == RT_UNARY && !c->compile_pool && s->cfg.inline_ns &&
        c->est_ns <= s->cfg.inline_ns) {
        /* trylock: an inline job never waits for the device; if it is busy,
         * or jobs are queued for it (which must keep their order), it goes
         * to the executor's queue. */
        int mine = !c->needs_device;
        if (!mine && dev_trylock(s)) {
            mine = __atomic_load_n(&s->q_pending, __ATOMIC_ACQUIRE) == 0;
            if (!mine)
                rt__dev_unlock(s);
        }
        if (mine) {
            run_work(c);
            if (c->needs_device)
                rt__dev_unlock(s);
            finish(c);
            return;
        }
    }
    rt__enqueue(c);
}

/* ------------------------------------------------------ uploads in flight */
int rt_srv_upload_reserve(rt_call *c, uint64_t bytes)
{
    rt_srv *s = c->srv;
    uint64_t cap = s->cfg.max_upload_bytes ? s->cfg.max_upload_bytes : 2 * s->cfg.max_dataset_bytes;
    int rc = 0;
    pthread_mutex_lock(&s->up_mu);
    if (!c->up_registered) {
        if (s->n_uploads >= s->cfg.max_uploads) {
            rc = rt_call_fail(c, RT_ETOOBIG, "%d uploads are in flight (the limit, --max-uploads)",
                              s->n_uploads);
        } else {
            c->up_registered = 1;
            c->up_next = s->uploads;
            s->uploads = c;
            s->n_uploads++;
        }
    }
    /* Kept broken uploads make room for new ones, oldest first. */
    if (rc == 0)
        rt_upload_store_make_room(&s->upstore, s->upload_bytes, bytes, cap);
    if (rc == 0 && (bytes > cap || s->upload_bytes > cap - bytes))
        rc = rt_call_fail(c, RT_ETOOBIG,
                          "uploads in flight would hold %llu bytes, over the limit of %llu "
                          "(--max-upload-bytes)",
                          (unsigned long long)(s->upload_bytes + bytes), (unsigned long long)cap);
    if (rc == 0) {
        c->up_bytes += bytes;
        s->upload_bytes += bytes;
    }
    __atomic_store_n(&c->up_last_ns, rt_now_ns(), __ATOMIC_RELAXED);
    pthread_mutex_unlock(&s->up_mu);
    return rc;
}

void rt_srv_upload_touch(rt_call *c)
{
    __atomic_store_n(&c->up_last_ns, rt_now_ns(), __ATOMIC_RELAXED);
}

void rt_srv_upload_release(rt_call *c)
{
    rt_srv *s = c->srv;
    pthread_mutex_lock(&s->up_mu);
    if (c->up_registered) {
        for (rt_call **pp = &s->uploads; *pp; pp = &(*pp)->up_next)
            if (*pp == c) {
                *pp = c->up_next;
                break;
            }
        s->n_uploads--;
        s->upload_bytes -= c->up_bytes;
        c->up_registered = 0;
    }
    pthread_mutex_unlock(&s->up_mu);
}

int rt_srv_tick(rt_srv *s)
{
    uint64_t now = rt_now_ns();
    int n = pipe_expire(s, now);
    rt_upload_store_expire(&s->upstore, now);
    if (s->cfg.upload_stall_ms) {
        uint64_t lim = s->cfg.upload_stall_ms * 1000000ull;
        pthread_mutex_lock(&s->up_mu);
        for (rt_call *c = s->uploads; c; c = c->up_next) {
            uint64_t last = __atomic_load_n(&c->up_last_ns, __ATOMIC_RELAXED);
            /* The transport answers it only while it waits for a chunk
             * (up_mu stays held: the reservation goes with the call,
             * rt__call_free, after the pending RECV_MESSAGE completes). */
            if (now > last && now - last > lim && s->tp->answer_stalled(c))
                n++;
        }
        pthread_mutex_unlock(&s->up_mu);
    }
    if (s->cfg.compile_timeout_ms) {
        uint64_t lim = s->cfg.compile_timeout_ms * 1000000ull;
        pthread_mutex_lock(&s->q_mu);
        for (rt_call *c = s->c_running; c; c = c->next_run) {
            uint64_t t0 = __atomic_load_n(&c->started_ns, __ATOMIC_ACQUIRE);
            if (t0 && now - t0 > lim && s->tp->answer_budget(c))
                n++;
        }
        pthread_mutex_unlock(&s->q_mu);
    }
    return n;
}
