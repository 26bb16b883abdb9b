/* rt_client_train.c - the steps-per-call training loop (rt_client_train_steps;
 * its semantics are in rtrain.h).
 *
 * The calls in flight form a ring, oldest first. A call is started with
 * rt__run_steps_start and finished, in send order, with
 * rt__run_steps_finish between rt__call_begin and rt__call_end, so each
 * call has its own time account (from its own start) in the last timings
 * and the trace, as a lone rt_client_run_steps would. Validation rides in the
 * epoch's last RunSteps (val_at_end), so it costs no round trip of its own;
 * against a daemon that does not answer it, an Evaluate (the public
 * rt_client_evaluate) follows the epoch. */
#include "rt_client_impl.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/support/time.h>

/* Auto K: the fixed cost of a call may be at most this share of the call. */
#define RT__AUTO_SHARE 0.05
/* Calls between two choices of K (and at every epoch start). */
#define RT__AUTO_EVERY 16
/* Running estimates: weight of the newest measurement. */
#define RT__AUTO_ALPHA 0.25
/* Replayed answers in a row beyond this mean something else is wrong. */
#define RT__MAX_REPLAYS(w) (4 * (w) + 16)

typedef struct slot {
    rt__call k;
    uint64_t steps, seq, start_ns;
    size_t li; /* its entry in the run's log */
    int val;   /* validates after its last step (val_at_end) */
} slot;

/* The epoch's calls in send order (their seqs ascend): what each asked,
 * and, once answered, what it reported. After the daemon restarts, the
 * calls past the restored seq go back to pending and are sent again with
 * the same seq and steps, so the epoch is made of the same calls and its
 * sums (taken in log order) are those of a run that never stopped. */
enum { LC_PENDING, LC_FLIGHT, LC_DONE, LC_DEAD };
typedef struct lcall {
    uint64_t seq, steps; /* seq 0: not sent yet */
    uint32_t epoch;      /* 1-based, of the run */
    int last;            /* ends its epoch */
    int state;
    double loss, acc; /* sample-weighted sums */
    uint64_t samples, execute_ns;
} lcall;

typedef struct loop {
    rt_client *c;
    const rt_client_train_params *p;
    rt_client_fit_cb cb;
    void *user;
    int64_t timeout; /* next_timeout_ms at the start, for every call */
    uint32_t window;
    slot s[RT_TRAIN_MAX_WINDOW];
    uint32_t head, n;    /* the ring of calls in flight */
    uint64_t base, done; /* global step before the run; steps run since */
    int any_done;        /* a call of this run succeeded */
    unsigned replays;    /* replayed answers in a row */
    uint64_t boot;       /* the daemon's boot id, once answered */
    uint64_t last_seq;   /* the seq of the call started last */
    int across;          /* across_epochs */
    lcall *log;          /* the run's calls */
    size_t n_log, cap_log;
    /* auto K */
    int autok;
    uint64_t k;               /* K in force */
    double fixed_ns, step_ns; /* running estimates, 0 = none yet */
    unsigned since_choice;    /* calls since K was last chosen */
    /* The other metrics (auc, mae, ...) over an epoch are the daemon's own
     * (they do not average over calls): the EpochEnd of the answer whose
     * call ended epoch end_epoch (0 = none yet). */
    uint32_t end_epoch;
    rt_client_metrics end_train;
} loop;

/* The epoch's running account: sample-weighted sums of the calls' means. */
typedef struct epoch_acc {
    double loss, acc;
    uint64_t samples, execute_ns, done, sent;
    int has_val; /* the epoch's last call validated */
    rt_client_metrics val;
} epoch_acc;

static double wmean(double sum, uint64_t n) { return n ? sum / (double)n : NAN; }

static int check_params(rt_client *c, const rt_client_train_params *p)
{
    int rc = rt__check_ids(c, p->session, p->program);
    if (rc == 0)
        rc = rt__check_id(c, "dataset", p->dataset);
    if (rc == 0 && p->val_dataset && *p->val_dataset)
        rc = rt__check_id(c, "validation dataset", p->val_dataset);
    if (rc == 0 && p->epochs == 0)
        rc = rt__err(c, RT_EINVAL, "train: epochs must be at least 1");
    if (rc == 0 && p->steps_per_epoch == 0)
        rc = rt__err(c, RT_EINVAL, "train: steps_per_epoch must be at least 1");
    if (rc == 0 && p->window > RT_TRAIN_MAX_WINDOW)
        rc = rt__err(c, RT_EINVAL, "train: window %u is over %d calls in flight", p->window,
                     RT_TRAIN_MAX_WINDOW);
    return rc;
}

/* The cancel flag, seen between calls too: inside the loop rt__call_begin
 * leaves it set (c->in_loop). */
static int cancelled(rt_client *c) { return atomic_load(&c->cancel_flag) != 0; }

/* ------------------------------------------------------------- auto K */

/* K for an epoch of spe steps in n equal calls: the most calls whose fixed
 * costs stay within share of the epoch's time, n x fixed <= share x
 * (n x fixed + spe x step), at least one; K = ceil(spe / n). Equal calls,
 * so no short last call pays a whole fixed cost for a few steps. */
static uint64_t auto_choose(const loop *L)
{
    uint64_t spe = L->p->steps_per_epoch;
    if (L->step_ns <= 0)
        return spe;
    if (L->fixed_ns <= 0)
        return 1;
    double n =
        floor(RT__AUTO_SHARE / (1 - RT__AUTO_SHARE) * (double)spe * L->step_ns / L->fixed_ns);
    uint64_t calls = n < 1 ? 1 : n >= (double)spe ? spe : (uint64_t)n;
    return (spe + calls - 1) / calls;
}

/* One answered call's measurements into the running estimates. */
static void auto_measure(loop *L, const rt_client_timings *t, uint64_t steps)
{
    if (!steps || !t->has_server)
        return;
    uint64_t own = t->execute_ns + t->queue_ns; /* queued: behind our other calls */
    double fixed = t->round_trip_ns > own ? (double)(t->round_trip_ns - own) : 0;
    double step = (double)t->execute_ns / (double)steps;
    if (L->step_ns <= 0) {
        L->fixed_ns = fixed;
        L->step_ns = step;
    } else {
        L->fixed_ns += RT__AUTO_ALPHA * (fixed - L->fixed_ns);
        L->step_ns += RT__AUTO_ALPHA * (step - L->step_ns);
    }
    if (++L->since_choice >= RT__AUTO_EVERY || L->k == 0) {
        L->k = auto_choose(L);
        L->since_choice = 0;
    }
}

/* ------------------------------------------------------------- the ring */

static int start_call(loop *L, size_t li, int val)
{
    rt_client *c = L->c;
    lcall *e = &L->log[li];
    slot *s = &L->s[(L->head + L->n) % L->window];
    /* Each call names the one before it: the daemon runs them in this
     * order, and none after one that failed. The epoch's last one asks a
     * durable daemon for a checkpoint. */
    rt_client_steps_params sp = {.session = L->p->session,
                                 .program = L->p->program,
                                 .dataset = L->p->dataset,
                                 .steps = e->steps,
                                 .seq = e->seq,
                                 .checkpoint = e->last,
                                 .boot_id = L->boot,
                                 .learning_rate = L->p->learning_rate,
                                 .after_seq = L->last_seq,
                                 .checkpoint_every_steps = L->p->checkpoint_every_steps,
                                 .checkpoint_every_s = L->p->checkpoint_every_s};
    /* The epoch's last call validates inside itself, so validation costs
     * no round trip of its own. */
    if (val) {
        sp.val_dataset = L->p->val_dataset;
        sp.val_at_end = 1;
    }
    c->next_timeout_ms = L->timeout;
    s->start_ns = rt_now_ns();
    int rc = rt__run_steps_start(c, &s->k, &sp, &s->seq);
    if (rc < 0)
        return rc;
    e->seq = s->seq;
    e->state = LC_FLIGHT;
    s->steps = e->steps;
    s->li = li;
    s->val = val;
    L->last_seq = s->seq;
    L->n++;
    return 0;
}

static int log_add(loop *L, uint64_t steps, uint32_t epoch, int last)
{
    if (L->n_log == L->cap_log) {
        size_t nc = L->cap_log ? 2 * L->cap_log : 64;
        lcall *nv = realloc(L->log, sizeof *nv * nc);
        if (!nv)
            return rt__err(L->c, RT_ENOMEM, "train: out of memory");
        L->log = nv;
        L->cap_log = nc;
    }
    memset(&L->log[L->n_log], 0, sizeof *L->log);
    L->log[L->n_log].epoch = epoch;
    L->log[L->n_log].last = last;
    L->log[L->n_log++].steps = steps;
    return 0;
}

/* The epoch's account from its answered calls, in log order. */
static void log_sums(const loop *L, epoch_acc *a, uint32_t epoch)
{
    memset(a, 0, sizeof *a);
    for (size_t i = 0; i < L->n_log; i++) {
        const lcall *e = &L->log[i];
        if (e->epoch != epoch)
            continue;
        if (e->state == LC_DONE) {
            a->done += e->steps;
            a->loss += e->loss;
            a->acc += e->acc;
            a->samples += e->samples;
            a->execute_ns += e->execute_ns;
        }
        if (e->state == LC_DONE || e->state == LC_FLIGHT)
            a->sent += e->steps;
    }
}

/* Finish the oldest call in flight; *s is its slot (valid until the next
 * start). Its account is the last timings. */
static int finish_call(loop *L, rt_client_steps_result *r, slot **s)
{
    rt_client *c = L->c;
    *s = &L->s[L->head];
    L->head = (L->head + 1) % L->window;
    L->n--;
    rt__call_begin(c, RT__M_RUN_STEPS);
    c->cur.start_ns = (*s)->start_ns;
    int rc = rt__run_steps_finish(c, &(*s)->k, r);
    return rt__call_end(c, rc);
}

/* End the calls in flight; their answers count for nothing. First the
 * daemon's own answers, for up to RT__ABORT_GRACE_MS: a call it already
 * started (or released after its predecessor) runs on whatever the client
 * does, and a cancel only reaches it at a step boundary, if at all before
 * it ends, so only its answer says no step of it runs after the loop
 * returned (Ctrl-C, a stop, an error). Calls still out then are cancelled.
 * The run's error (message, status, last timings) stays. */
#define RT__ABORT_GRACE_MS 1000
static void abort_all(loop *L)
{
    rt_client *c = L->c;
    if (!L->n)
        return;
    gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                      gpr_time_from_millis(RT__ABORT_GRACE_MS, GPR_TIMESPAN));
    uint32_t in = 0;
    while (in < L->n && rt__unary_wait(c, &L->s[(L->head + in) % L->window].k, until))
        in++;
    for (uint32_t i = in; i < L->n; i++)
        grpc_call_cancel(L->s[(L->head + i) % L->window].k.call, NULL);
    char msg[sizeof c->errmsg];
    memcpy(msg, c->errmsg, sizeof msg);
    int st = c->grpc_status;
    rt_client_timings last = c->last;
    while (L->n) {
        rt_client_steps_result r;
        slot *s;
        if (finish_call(L, &r, &s) == 0)
            rt_client_steps_result_free(&r);
    }
    memcpy(c->errmsg, msg, sizeof msg);
    c->grpc_status = st;
    c->last = last;
}

/* ------------------------------------------------------------- epochs */

/* One answered call: account, estimates, the progress event. Returns < 0
 * on error, 1 when cb asks to stop, 0 to go on. */
static int take_answer(loop *L, epoch_acc *a, uint32_t epoch)
{
    rt_client *c = L->c;
    rt_client_steps_result r;
    slot *s;
    int rc = finish_call(L, &r, &s);
    if (rc < 0)
        return rc;
    lcall *e = &L->log[s->li];
    if (!L->boot)
        L->boot = r.boot_id;
    if (r.replayed && !r.recorded) {
        /* Nothing ran. The daemon runs a run's calls in order (after_seq),
         * so this is a daemon without pipelining: a later call of this run
         * got there first. Send the steps again. */
        rt_client_steps_result_free(&r);
        if (!L->any_done)
            return rt__err(c, RT_ESTATE,
                           "train: RunSteps seq %llu was replayed: the "
                           "program's sequence numbers are ahead of this client's "
                           "(another client trains it?)",
                           (unsigned long long)s->seq);
        if (++L->replays > RT__MAX_REPLAYS(L->window))
            return rt__err(c, RT_ESTATE,
                           "train: %u RunSteps calls in a row were "
                           "replayed",
                           L->replays);
        if (L->across) /* later epochs' calls are out: the order is lost */
            return rt__err(c, RT_ESTATE, "train: RunSteps seq %llu was replayed",
                           (unsigned long long)s->seq);
        /* its steps go again in a new call (log_add may move the log) */
        uint32_t ep = e->epoch;
        int last = e->last;
        e->state = LC_DEAD;
        a->sent -= s->steps;
        return log_add(L, s->steps, ep, last);
    }
    L->replays = 0;
    if (!L->any_done) /* the run's first answer: that call ran alone */
        L->base = (r.recorded ? r.recorded_step : r.global_step) - s->steps;
    L->any_done = 1;
    L->done += s->steps;
    a->done += s->steps;
    a->loss += r.mean.loss * (double)r.mean.samples;
    a->acc += r.mean.accuracy * (double)r.mean.samples;
    a->samples += r.mean.samples;
    a->execute_ns += c->last.execute_ns;
    if (s->val && r.has_val) {
        a->val = r.val;
        a->has_val = 1;
    }
    int ctl_stop = r.stopped; /* rt_client_control's stop: end the run */
    e->state = LC_DONE;
    e->loss = r.mean.loss * (double)r.mean.samples;
    e->acc = r.mean.accuracy * (double)r.mean.samples;
    e->samples = r.mean.samples;
    e->execute_ns = c->last.execute_ns;
    if (r.n_epochs && r.epochs[r.n_epochs - 1].train.n_values) {
        L->end_train = r.epochs[r.n_epochs - 1].train;
        L->end_epoch = e->epoch;
    }
    rt_client_steps_result_free(&r);
    if (L->autok)
        auto_measure(L, &c->last, s->steps);
    rt_client_fit_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = RT_FIT_PROGRESS;
    /* Counted here, not taken from the answer: with calls in flight the
     * daemon may have run a later call's steps first. */
    ev.step = L->base + L->done;
    ev.epoch = epoch;
    ev.step_in_epoch = a->done;
    ev.steps_per_epoch = L->p->steps_per_epoch;
    ev.loss = (float)wmean(a->loss, a->samples);
    ev.accuracy = (float)wmean(a->acc, a->samples);
    ev.call = &c->last;
    ev.steps_per_call = L->k;
    if (L->autok) {
        ev.fixed_ns = L->fixed_ns;
        ev.step_ns = L->step_ns;
    }
    return (L->cb && L->cb(&ev, L->user)) || ctl_stop ? 1 : 0;
}

/* The next call to send: the first pending one in the log, or a new one
 * while the log's calls do not reach limit (steps of the run). A call ends
 * at or before the end of the epoch it is in. *li gets its index. 0 when
 * there is none. */
static int next_call(loop *L, uint64_t spe, uint64_t limit, size_t *li)
{
    uint64_t planned = 0;
    size_t pick = SIZE_MAX;
    for (size_t i = 0; i < L->n_log; i++) {
        if (L->log[i].state == LC_DEAD)
            continue;
        planned += L->log[i].steps;
        if (pick == SIZE_MAX && L->log[i].state == LC_PENDING)
            pick = i;
    }
    if (pick == SIZE_MAX) {
        if (planned >= limit)
            return 0;
        uint64_t k = L->k ? L->k : 1, left = (planned / spe + 1) * spe - planned;
        uint64_t n = left < k ? left : k;
        if (log_add(L, n, (uint32_t)(planned / spe + 1), n == left) < 0)
            return -1;
        pick = L->n_log - 1;
    }
    *li = pick;
    return 1;
}

/* The RunSteps calls of one epoch, up to window in flight; the epoch's
 * last call asks a durable daemon for a checkpoint, so an epoch reported
 * is never run again after a restart. */
static int run_epoch_once(loop *L, epoch_acc *a, uint32_t epoch)
{
    rt_client *c = L->c;
    uint64_t spe = L->p->steps_per_epoch;
    /* Calls go out up to this epoch's end, or with across_epochs up to
     * the run's: the ring then holds later epochs' calls too, answered in
     * order after this epoch's. */
    uint64_t limit = (L->across ? (uint64_t)L->p->epochs : (uint64_t)epoch) * spe;
    int has_val = L->p->val_dataset && *L->p->val_dataset;
    while (a->done < spe) {
        /* The first call of a run goes alone: it finds out whether the
         * program's sequence numbers are this client's, and with auto K
         * it is the one-step probe. */
        uint32_t room = L->any_done ? L->window : 1;
        while (L->n < room) {
            if (cancelled(c))
                return rt__err(c, RT_ECANCELLED, "train: cancelled by rt_client_cancel");
            size_t li;
            int more = next_call(L, spe, limit, &li);
            if (more < 0)
                return RT_ENOMEM;
            if (!more)
                break;
            int rc = start_call(L, li, has_val && L->log[li].last);
            if (rc < 0)
                return rc;
            if (L->log[li].epoch == epoch)
                a->sent += L->log[li].steps;
        }
        if (!L->n)
            return rt__err(c, RT_EINTERNAL, "train: no call in flight before the epoch's end");
        int rc = take_answer(L, a, epoch);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Whether rc is the daemon going away (restart, preemption, network), as
 * opposed to an answer. */
int rt__daemon_gone(rt_client *c, int rc)
{
    return (rc == RT_EUNAVAILABLE && c->grpc_status == 14 /* UNAVAILABLE */) ||
           rc == RT_ERESTARTED ||
           /* a daemon stopping cancels the calls it has not started */
           (rc == RT_ECANCELLED && c->grpc_status == 1 && !cancelled(c));
}

static void nap_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* A daemon that keeps its state in memory and is gone cannot come back
 * with this session: its port refusing connections (the process is not
 * there), or another boot answering, is final. A network that drops
 * packets is not (the same daemon may answer again): that is waited for. */
static int memory_lost(rt_client *c, const char *what, int refused)
{
    return rt__err(c, RT_EUNAVAILABLE,
                   "%s: the daemon %s and kept its state in memory (no --state-dir): the "
                   "session and its training are lost; start again",
                   what, refused ? "is gone (connection refused)" : "restarted (a new boot id)");
}

static int memory_daemon_gone(rt_client *c, const char *what, const char *session,
                              const char *program, rt_client_ckpt_info *info)
{
    if (c->daemon_state != RTRAIN__V1__STATE_KIND__STATE_MEMORY)
        return 0;
    uint64_t boot = c->daemon_boot;
    c->next_timeout_ms = 1000;
    c->wait_ready = 0; /* fail fast: a refused connection says so at once */
    int rc = rt_client_checkpoint(c, session, program, 0, info);
    if (rc == 0 && info->boot_id == boot)
        return 1; /* the same daemon answered: it was the network */
    int refused = rc == RT_EUNAVAILABLE && strcasestr(c->errmsg, "connection refused");
    if (rc == 0 || rc == RT_ENOTFOUND || refused)
        return memory_lost(c, what, refused);
    return 0;
}

int rt__wait_daemon(rt_client *c, const char *what, const char *session, const char *program,
                    uint64_t t0, rt_client_ckpt_info *info)
{
    int64_t wait = 50;
    char first[sizeof c->errmsg];
    memcpy(first, c->errmsg, sizeof first);
    for (;;) {
        int gone = memory_daemon_gone(c, what, session, program, info);
        if (gone != 0)
            return gone > 0 ? 0 : gone;
        if (cancelled(c))
            return rt__err(c, RT_ECANCELLED, "%s: cancelled while the daemon was away", what);
        uint64_t spent = (rt_now_ns() - t0) / 1000000;
        if ((int64_t)spent >= c->reattach_ms)
            return rt__err(c, RT_EUNAVAILABLE,
                           "%s: the daemon did not come back within "
                           "%lld ms: %s",
                           what, (long long)c->reattach_ms, first);
        /* waits for the channel to connect (no fail-fast between
         * reconnect attempts), for up to a second per try */
        c->next_timeout_ms = 1000;
        c->wait_ready = 1;
        int rc = rt_client_checkpoint(c, session, program, 0, info);
        c->wait_ready = 0;
        if (rc == 0)
            return 0;
        if (rc == RT_ETIMEDOUT)
            continue; /* not back within the second: try again */
        if (!rt__daemon_gone(c, rc)) {
            if (rc == RT_ENOTFOUND && c->daemon_state == RTRAIN__V1__STATE_KIND__STATE_MEMORY)
                return memory_lost(c, what, 0);
            if (rc == RT_ENOTFOUND)
                return rt__err(c, rc,
                               "%s: the daemon came back without this session "
                               "(no --state-dir?): %s",
                               what, c->errmsg);
            return rc;
        }
        nap_ms(wait);
        wait = wait * 2 > 1000 ? 1000 : wait * 2;
    }
}

/* Wait for the daemon to answer again (backoff from 50 ms to 1 s, up to
 * c->reattach_ms in all) and read where the program stands. */
static int wait_daemon(loop *L, uint64_t t0, rt_client_ckpt_info *info)
{
    return rt__wait_daemon(L->c, "train", L->p->session, L->p->program, t0, info);
}

/* The daemon went away mid-epoch: drop the calls in flight, wait for it,
 * and put back to pending every call it no longer has (seq past the one
 * it restored). */
static int reattach(loop *L, epoch_acc *a, uint32_t epoch)
{
    rt_client *c = L->c;
    uint64_t t0 = rt_now_ns();
    abort_all(L);
    rt_client_ckpt_info info;
    int rc = wait_daemon(L, t0, &info);
    if (rc < 0)
        return rc;
    L->boot = info.boot_id;
    uint64_t first_seq = 0;
    for (size_t i = 0; i < L->n_log && !first_seq; i++)
        if (L->log[i].epoch == epoch)
            first_seq = L->log[i].seq;
    if (first_seq && info.last_seq + 1 < first_seq && L->any_done)
        return rt__err(c, RT_ESTATE,
                       "train: the daemon restored step %llu, before this "
                       "epoch began (its checkpoint at the last epoch end was lost)",
                       (unsigned long long)info.global_step);
    for (size_t i = 0; i < L->n_log; i++) {
        lcall *e = &L->log[i];
        if (e->state == LC_FLIGHT || (e->state == LC_DONE && e->seq > info.last_seq)) {
            if (e->state == LC_DONE)
                L->done -= e->steps;
            e->state = LC_PENDING; /* same seq: the daemon knows it or it is new */
        }
    }
    log_sums(L, a, epoch);
    /* a restarted daemon knows no call's completion but its state's: the
     * first call sent again names none, the next ones chain on it */
    L->last_seq = 0;
    L->replays = 0;
    if (L->cb) {
        rt_client_fit_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = RT_FIT_RESUMED;
        ev.epoch = epoch;
        ev.step = info.global_step;
        ev.step_in_epoch = a->done;
        ev.steps_per_epoch = L->p->steps_per_epoch;
        if (L->cb(&ev, L->user))
            return 1;
    }
    return 0;
}

static int run_epoch(loop *L, epoch_acc *a, uint32_t epoch)
{
    if (L->autok && L->any_done) {
        L->k = auto_choose(L);
        L->since_choice = 0;
    }
    for (;;) {
        int rc = run_epoch_once(L, a, epoch);
        if (rc >= 0 || !rt__daemon_gone(L->c, rc) || L->c->reattach_ms <= 0)
            return rc;
        if ((rc = reattach(L, a, epoch)) != 0)
            return rc;
    }
}

/* Evaluate, through a daemon restart. */
static int evaluate(loop *L, rt_client_metrics *m)
{
    rt_client *c = L->c;
    uint64_t t0 = rt_now_ns();
    for (;;) {
        c->next_timeout_ms = L->timeout;
        int rc = rt_client_evaluate(c, L->p->session, L->p->program, L->p->val_dataset, m);
        if (rc >= 0 || !rt__daemon_gone(c, rc) || c->reattach_ms <= 0)
            return rc;
        rt_client_ckpt_info info;
        if ((rc = wait_daemon(L, t0, &info)) < 0)
            return rc;
    }
}

int rt_client_train_steps(rt_client *c, const rt_client_train_params *p, rt_client_fit_cb cb,
                          void *user)
{
    if (!c || !p)
        return RT_EINVAL;
    c->errmsg[0] = 0;
    int rc = check_params(c, p);
    if (rc < 0)
        return rc;
    loop L;
    memset(&L, 0, sizeof L);
    L.c = c;
    L.p = p;
    L.cb = cb;
    L.user = user;
    L.timeout = c->next_timeout_ms;
    L.window = p->window ? p->window : RT_TRAIN_WINDOW;
    L.autok = p->steps_per_call == 0;
    L.across = p->across_epochs != 0;
    L.k = p->steps_per_call;
    int has_val = p->val_dataset && *p->val_dataset;
    int stopped = 0;
    atomic_store(&c->cancel_flag, 0);
    c->in_loop = 1;
    for (uint32_t e = 1; e <= p->epochs && rc == 0 && !stopped; e++) {
        epoch_acc a;
        memset(&a, 0, sizeof a);
        rc = run_epoch(&L, &a, e);
        if (rc == 1) {
            stopped = 1;
            rc = 0;
        }
        if (rc < 0 || stopped)
            break;
        rt_client_fit_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = RT_FIT_EPOCH_END;
        ev.epoch = e;
        ev.step = L.base + L.done;
        rt_client_epoch *ep = &ev.epoch_end;
        ep->epoch = e;
        ep->train.loss = wmean(a.loss, a.samples);
        ep->train.accuracy = wmean(a.acc, a.samples);
        ep->train.samples = a.samples;
        if (L.end_epoch == e) {
            ep->train.n_values = L.end_train.n_values;
            memcpy(ep->train.value_name, L.end_train.value_name, sizeof ep->train.value_name);
            memcpy(ep->train.values, L.end_train.values, sizeof ep->train.values);
        }
        ep->val.loss = ep->val.accuracy = NAN;
        ep->steps = L.base + L.done;
        ep->execute_ns = a.execute_ns;
        if (has_val && a.has_val) {
            ep->val.loss = a.val.loss;
            ep->val.accuracy = a.val.accuracy;
            ep->val.samples = a.val.samples;
            ep->val.n_values = a.val.n_values;
            memcpy(ep->val.value_name, a.val.value_name, sizeof ep->val.value_name);
            memcpy(ep->val.values, a.val.values, sizeof ep->val.values);
            ep->has_val = 1; /* its call was reported with its progress */
        } else if (has_val) {
            /* a daemon without val_at_end (or an answer replayed after a
             * restart): one Evaluate */
            if (cancelled(c)) {
                rc = rt__err(c, RT_ECANCELLED, "train: cancelled by rt_client_cancel");
                break;
            }
            rc = evaluate(&L, &ep->val);
            if (rc < 0)
                break;
            ep->has_val = 1;
            ev.call = &c->last;
        }
        if (cb && cb(&ev, user))
            stopped = 1;
    }
    abort_all(&L);
    free(L.log);
    c->in_loop = 0;
    c->next_timeout_ms = INT64_MIN;
    if (rc == 0 && stopped)
        rc = rt__err(c, RT_ECANCELLED, "train: cancelled by the callback");
    if (rc == 0 && cb) {
        rt_client_fit_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = RT_FIT_DONE;
        ev.step = L.base + L.done;
        ev.done = 1;
        cb(&ev, user);
    }
    return rc;
}
