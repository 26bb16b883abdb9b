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

#include <math.h>
#include <string.h>

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
    int val;                  /* validates after its last step (val_at_end) */
} slot;

typedef struct loop {
    rt_client *c;
    const rt_client_train_params *p;
    rt_client_fit_cb cb;
    void *user;
    int64_t timeout;          /* next_timeout_ms at the start, for every call */
    uint32_t window;
    slot s[RT_TRAIN_MAX_WINDOW];
    uint32_t head, n;         /* the ring of calls in flight */
    uint64_t base, done;      /* global step before the run; steps run since */
    int any_done;             /* a call of this run succeeded */
    unsigned replays;         /* replayed answers in a row */
    uint64_t last_seq;        /* the seq of the call started last */
    uint64_t sent_total;      /* steps of the run sent so far */
    int across;               /* across_epochs */
    /* auto K */
    int autok;
    uint64_t k;               /* K in force */
    double fixed_ns, step_ns; /* running estimates, 0 = none yet */
    unsigned since_choice;    /* calls since K was last chosen */
} loop;

/* The epoch's running account: sample-weighted sums of the calls' means. */
typedef struct epoch_acc {
    double loss, acc;
    uint64_t samples, execute_ns, done;
    int has_val;              /* the epoch's last call validated */
    rt_client_metrics val;
} epoch_acc;

static double wmean(double sum, uint64_t n) { return n ? sum / (double)n : NAN; }

static int check_params(rt_client *c, const rt_client_train_params *p)
{
    int rc = rt__check_id(c, "session", p->session);
    if (rc == 0)
        rc = rt__check_id(c, "program", p->program);
    if (rc == 0)
        rc = rt__check_id(c, "dataset", p->dataset);
    if (rc == 0 && p->val_dataset && *p->val_dataset)
        rc = rt__check_id(c, "validation dataset", p->val_dataset);
    if (rc == 0 && p->epochs == 0)
        rc = rt__err(c, RT_EINVAL, "train: epochs must be at least 1");
    if (rc == 0 && p->steps_per_epoch == 0)
        rc = rt__err(c, RT_EINVAL, "train: steps_per_epoch must be at least 1");
    if (rc == 0 && p->window > RT_TRAIN_MAX_WINDOW)
        rc = rt__err(c, RT_EINVAL, "train: window %u is over %d calls in flight",
                     p->window, RT_TRAIN_MAX_WINDOW);
    return rc;
}

/* The cancel flag, seen between calls too: inside the loop rt__call_begin
 * leaves it set (c->in_loop). */
static int cancelled(rt_client *c)
{
    return atomic_load(&c->cancel_flag) != 0;
}

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
    double n = floor(RT__AUTO_SHARE / (1 - RT__AUTO_SHARE) * (double)spe * L->step_ns /
                     L->fixed_ns);
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

static int start_call(loop *L, uint64_t steps, int val)
{
    rt_client *c = L->c;
    slot *s = &L->s[(L->head + L->n) % L->window];
    /* Each call names the one before it: the daemon runs them in this
     * order, and none after one that failed. */
    rt_client_steps_params sp = {.session = L->p->session, .program = L->p->program,
                                 .dataset = L->p->dataset, .steps = steps,
                                 .learning_rate = L->p->learning_rate,
                                 .after_seq = L->last_seq};
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
    s->steps = steps;
    s->val = val;
    L->last_seq = s->seq;
    L->n++;
    return 0;
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

/* Cancel every call in flight, then take their answers, which count for
 * nothing. The run's error (message, status, last timings) stays. */
static void abort_all(loop *L)
{
    rt_client *c = L->c;
    if (!L->n)
        return;
    for (uint32_t i = 0; i < L->n; i++)
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
    if (r.replayed) {
        /* Nothing ran. The daemon runs a run's calls in order (after_seq),
         * so this is a daemon without pipelining: a later call of this run
         * got there first. Send the steps again. */
        rt_client_steps_result_free(&r);
        if (!L->any_done)
            return rt__err(c, RT_ESTATE, "train: RunSteps seq %llu was replayed: the "
                           "program's sequence numbers are ahead of this client's "
                           "(another client trains it?)", (unsigned long long)s->seq);
        if (++L->replays > RT__MAX_REPLAYS(L->window))
            return rt__err(c, RT_ESTATE, "train: %u RunSteps calls in a row were "
                           "replayed", L->replays);
        if (L->across) /* later epochs' calls are out: the order is lost */
            return rt__err(c, RT_ESTATE, "train: RunSteps seq %llu was replayed",
                           (unsigned long long)s->seq);
        L->sent_total -= s->steps;
        return 0;
    }
    L->replays = 0;
    if (!L->any_done) /* the run's first answer: that call ran alone */
        L->base = r.global_step - s->steps;
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
    rt_client_steps_result_free(&r);
    if (L->autok)
        auto_measure(L, &c->last, s->steps);
    rt_client_fit_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = RT_FIT_PROGRESS;
    /* Counted here, not taken from the answer: an older daemon may run a
     * later call's steps first. */
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

/* The RunSteps calls of one epoch, up to window in flight. */
static int run_epoch(loop *L, epoch_acc *a, uint32_t epoch)
{
    rt_client *c = L->c;
    uint64_t spe = L->p->steps_per_epoch;
    if (L->autok && L->any_done) {
        L->k = auto_choose(L);
        L->since_choice = 0;
    }
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
        while (L->n < room && L->sent_total < limit) {
            if (cancelled(c))
                return rt__err(c, RT_ECANCELLED, "train: cancelled by rt_client_cancel");
            /* the call ends at or before the end of the epoch it is in */
            uint64_t k = L->k ? L->k : 1,
                     left = (L->sent_total / spe + 1) * spe - L->sent_total;
            int rc = start_call(L, left < k ? left : k, has_val && left <= k);
            if (rc < 0)
                return rc;
            L->sent_total += left < k ? left : k;
        }
        int rc = take_answer(L, a, epoch);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int rt_client_train_steps(rt_client *c, const rt_client_train_params *p,
                          rt_client_fit_cb cb, void *user)
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
        ep->val.loss = ep->val.accuracy = NAN;
        ep->steps = L.base + L.done;
        ep->execute_ns = a.execute_ns;
        if (has_val && a.has_val) {
            ep->val.loss = a.val.loss;
            ep->val.accuracy = a.val.accuracy;
            ep->val.samples = a.val.samples;
            ep->has_val = 1; /* its call was reported with its progress */
        } else if (has_val) {
            /* a daemon without val_at_end: one Evaluate */
            if (cancelled(c)) {
                rc = rt__err(c, RT_ECANCELLED, "train: cancelled by rt_client_cancel");
                break;
            }
            c->next_timeout_ms = L.timeout;
            rc = rt_client_evaluate(c, p->session, p->program, p->val_dataset, &ep->val);
            if (rc < 0)
                break;
            ep->has_val = 1;
            ev.call = &c->last;
        }
        if (cb && cb(&ev, user))
            stopped = 1;
    }
    abort_all(&L);
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
