/* rt_h_train.c - RunSteps, Fit, Evaluate, Predict and Control. The
 * RunSteps and Fit use cases are rt_train.h's and the program's state
 * between calls rt_program.h's; these build the answers and stream the
 * events. */
#include "rt_handlers.h"

/* What a training call's steps read without calling up (rt_train_flags). */
static rt_train_flags train_flags(rt_call *c)
{
    return (rt_train_flags){.cancelled = &c->cancelled,
                            .hard_cancel = &c->srv->hard_cancel,
                            .waiting = &c->srv->dev_waiting,
                            .pause_at = c->srv->cfg.pause_at_step};
}

static int call_yield(void *ud) { return rt_call_yield(ud); }

/* The ids a RunSteps or Fit request names, for rt_train_open. */
#define TRAIN_IDS(q)                                                            \
    {                                                                           \
        .sid = (q)->session_id, .pid = (q)->program_id, .did = (q)->dataset_id, \
        .val_did = (q)->val_dataset_id                                          \
    }

/* --------------------------------------------------------------- RunSteps */
static Rtrain__V1__StateKind state_kind(const rt_srv *s)
{
    return s->state ? RTRAIN__V1__STATE_KIND__STATE_DISK : RTRAIN__V1__STATE_KIND__STATE_MEMORY;
}

static Rtrain__V1__EpochEnd *epoch_pb(rt_call *c, int64_t epoch, const rt_metrics *train,
                                      int64_t steps, uint64_t exec_ns)
{
    Rtrain__V1__EpochEnd *e = NEW(c, Rtrain__V1__EpochEnd, RTRAIN__V1__EPOCH_END__INIT);
    if (!e)
        return NULL;
    e->epoch = (uint64_t)epoch;
    e->train = rt_h_metrics_pb(c, train);
    e->steps = (uint64_t)steps;
    e->execute_ns = exec_ns;
    return e->train ? e : NULL;
}

/* A RunSteps answer's EpochEnds (n_epochs > 0), from the use case's
 * (rt_run_epoch). */
static int epochs_pb(rt_call *c, const rt_run_steps_out *out, Rtrain__V1__RunStepsResponse *r)
{
    if (!(r->epochs = rt_call_alloc(c, sizeof *r->epochs * out->n_epochs)))
        return -1;
    for (size_t i = 0; i < out->n_epochs; i++) {
        const rt_run_epoch *x = out->epochs[i];
        Rtrain__V1__EpochEnd *e = epoch_pb(c, x->epoch, &x->train, x->step, x->exec_ns);
        if (!e || (x->has_val && !(e->val = rt_h_metrics_pb(c, &x->val))))
            return -1;
        r->epochs[r->n_epochs++] = e;
    }
    return 0;
}

/* Decode, run the use case (rt_program_run_steps), encode. */
static int run_steps(rt_call *c)
{
    Rtrain__V1__RunStepsRequest *q = REQ(c, Rtrain__V1__RunStepsRequest);
    rt_run_steps_in in = {.seq = q->seq,
                          .steps = q->steps,
                          .lr = q->learning_rate,
                          .val_at_end = q->val_at_end,
                          .stop_on_nan = q->stop_on_nan,
                          .checkpoint = q->checkpoint,
                          .every_steps = q->checkpoint_every_steps,
                          .every_s = q->checkpoint_every_s};
    if (q->return_losses && !(in.losses = rt_call_alloc(c, sizeof(float) * q->steps)))
        return OOM(c);
    if (c->srv->state)
        in.ckpt_continue = rt_h_ckpt_continue(c, q->checkpoint_policy);
    in.alloc = c->alloc.alloc; /* the call's arena (rt_call.c) */
    in.alloc_ud = c->alloc.allocator_data;
    const rt_train_host h = {.ud = c, .flags = train_flags(c), .step = rt_call_step_point};
    rt_train_ctx ctx = {
        .ds = c->ds, .val_ds = c->val_ds, .state = c->srv->state, .sid = c->sess->id, .host = &h};
    rt_run_steps_out out;
    char err[400] = "";
    int rc = rt_program_run_steps(c->prog, &ctx, &in, &out, err, sizeof err);
    c->tm.durable_ns += out.durable_ns;
    if (rc < 0)
        return out.alloc_failed ? OOM(c) : rt_call_fail(c, rc, "%s", err);
    Rtrain__V1__RunStepsResponse *r =
        NEW(c, Rtrain__V1__RunStepsResponse, RTRAIN__V1__RUN_STEPS_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    c->resp = &r->base;
    r->replayed = out.replayed;
    r->recorded = out.recorded;
    r->recorded_step = (uint64_t)out.recorded_step;
    r->boot_id = c->srv->boot_id;
    r->state = state_kind(c->srv);
    r->global_step = (uint64_t)out.global_step;
    r->stopped = out.stopped;
    r->non_finite = out.nan_step != 0;
    r->first_non_finite_step = (uint64_t)out.nan_step;
    r->last = rt_h_metrics_pb(c, &out.last);
    r->mean = rt_h_metrics_pb(c, &out.mean);
    if (in.losses && !out.replayed) {
        r->losses = in.losses;
        r->n_losses = (size_t)out.done;
    }
    if (out.n_epochs && epochs_pb(c, &out, r) < 0)
        return OOM(c);
    if (out.has_val && !(r->val = rt_h_metrics_pb(c, &out.val)))
        return OOM(c);
    return r->last && r->mean ? 0 : OOM(c);
}

static int run_steps_work(rt_call *c) { return rt_h_data_done(c, run_steps(c)); }

/* RunSteps' own checks, in the order they are reported: 0, or the code
 * with why set. They need nothing found, so they run before the lookups
 * (rt_h_open_train reports a lookup's failure first); val_at_end's set is
 * named by the request, as the lookup of a named one must succeed. */
static int run_steps_request(const rt_call *c, const Rtrain__V1__RunStepsRequest *q, char *why,
                             size_t n)
{
    int rc;
    if ((rc = rt_h_stopping_why(c, why, n)) < 0)
        return rc;
    if (q->boot_id && q->boot_id != c->srv->boot_id)
        return rt_errf(why, n, RT_ERESTARTED,
                       "the daemon restarted since this client's last "
                       "call: nothing was applied; reattach (Checkpoint) and resend");
    if (q->steps == 0)
        return rt_errf(why, n, RT_EINVAL, "steps must be at least 1");
    if ((rc = rt_h_lr_why(q->learning_rate, why, n)) < 0)
        return rc;
    if (q->steps > RT_MAX_STEPS_PER_CALL)
        return rt_errf(why, n, RT_ETOOBIG, "steps %llu is over the limit of %llu per call",
                       (unsigned long long)q->steps, RT_MAX_STEPS_PER_CALL);
    if (q->val_at_end && !(q->val_dataset_id && *q->val_dataset_id))
        return rt_errf(why, n, RT_EINVAL, "val_at_end needs val_dataset_id");
    if (q->return_losses && q->steps > RT_MAX_RETURN_LOSSES)
        return rt_errf(why, n, RT_ETOOBIG, "return_losses allows at most %llu steps",
                       RT_MAX_RETURN_LOSSES);
    return 0;
}

/* The request's checks, then one call down (rt_h_open_train: lookups,
 * data checks, the call's estimate, pipeline marks); nothing after it calls
 * down again before the work. */
int rt_h_run_steps(rt_call *c)
{
    Rtrain__V1__RunStepsRequest *q = REQ(c, Rtrain__V1__RunStepsRequest);
    char why[200];
    int bad = run_steps_request(c, q, why, sizeof why);
    rt_train_open_in in = TRAIN_IDS(q);
    in.steps = q->steps;
    rt_train_open_out o;
    int rc = rt_h_open_train(c, &in, bad, why, &o);
    /* Once its program is found the call counts for the program's
     * pipeline: a failure stops the calls sent after it (rt_sched.c,
     * rt__pipe_complete). */
    if (c->prog)
        c->seq = q->seq;
    if (rc < 0)
        return rc;
    c->work = run_steps_work;
    c->needs_device = 1;
    c->est_ns = o.est_ns;
    if (q->after_seq) {
        if (!q->seq || q->after_seq >= q->seq)
            return rt_call_fail(c, RT_EINVAL, "after_seq %llu must be below seq %llu",
                                (unsigned long long)q->after_seq, (unsigned long long)q->seq);
        /* Pipelined (rt_sched.c, pipe_hold): runs after its predecessor. */
        c->after_seq = q->after_seq;
    }
    return 0;
}

/* -------------------------------------------------------------------- Fit */
/* Fit's use case is rt_program_fit_run (rt_train.h); these stream its
 * events. */

/* What every FitEvent of the call carries: the daemon's boot, whether it
 * is durable, and the first non-finite loss so far. */
static void fit_stamp(rt_call *c, Rtrain__V1__FitEvent *ev, int64_t nan_step)
{
    ev->boot_id = c->srv->boot_id;
    ev->state = state_kind(c->srv);
    ev->non_finite = nan_step != 0;
    ev->first_non_finite_step = (uint64_t)nan_step;
}

typedef struct fit_answer {
    rt_call *c;
    int failed; /* the call's failure (OOM), already set */
} fit_answer;

static void fit_progress(void *ud, const rt_fit_progress *pr, int coalesce)
{
    rt_call *c = ((fit_answer *)ud)->c;
    Rtrain__V1__StepProgress sp = RTRAIN__V1__STEP_PROGRESS__INIT;
    Rtrain__V1__FitEvent ev = RTRAIN__V1__FIT_EVENT__INIT;
    sp.step = (uint64_t)pr->step;
    sp.epoch = (uint64_t)pr->epoch;
    sp.step_in_epoch = (uint64_t)pr->step_in_epoch;
    sp.steps_per_epoch = (uint64_t)pr->steps_per_epoch;
    sp.loss = pr->loss;
    sp.accuracy = pr->acc;
    sp.learning_rate = pr->lr;
    ev.event_case = RTRAIN__V1__FIT_EVENT__EVENT_PROGRESS;
    ev.progress = &sp;
    fit_stamp(c, &ev, pr->nan_step);
    uint64_t t0 = rt_now_ns();
    rt_call_stream_send(c, &ev.base, coalesce, 0);
    c->tm.encode_ns += rt_now_ns() - t0;
}

static int fit_epoch_end(void *ud, const rt_fit_epoch *fe, int64_t nan_step, uint64_t val_ns)
{
    fit_answer *a = ud;
    rt_call *c = a->c;
    Rtrain__V1__EpochEnd *e = epoch_pb(c, fe->epoch, &fe->train, fe->steps, fe->execute_ns);
    if (!e || (fe->has_val && !(e->val = rt_h_metrics_pb(c, &fe->val))))
        return a->failed = OOM(c);
    c->tm.execute_ns += val_ns; /* the epoch's validation and checkpoint */
    Rtrain__V1__FitEvent ev = RTRAIN__V1__FIT_EVENT__INIT;
    if (c->merge_out) { /* the client takes epoch_ends: queued ones are joined */
        ev.n_epoch_ends = 1;
        ev.epoch_ends = &e;
    } else {
        ev.event_case = RTRAIN__V1__FIT_EVENT__EVENT_EPOCH_END;
        ev.epoch_end = e;
    }
    rt_srv_dash_epoch(c, e);
    fit_stamp(c, &ev, nan_step);
    uint64_t t1 = rt_now_ns();
    rt_call_stream_send(c, &ev.base, 0, 0);
    c->tm.encode_ns += rt_now_ns() - t1;
    return 0;
}

static int call_stopping(void *ud) { return rt_h_daemon_stopping(ud); }

/* Decode, run the use case (rt_program_fit_run), encode the last event. */
static int fit_run(rt_call *c)
{
    Rtrain__V1__FitRequest *q = REQ(c, Rtrain__V1__FitRequest);
    rt_fit_in in = {.fit_id = q->fit_id,
                    .epochs = q->epochs,
                    .epochs_received = q->epochs_received,
                    .steps_per_epoch = q->steps_per_epoch,
                    .lr = q->learning_rate,
                    .stop_on_nan = q->stop_on_nan,
                    .progress_every = q->progress_every,
                    .every_steps = q->checkpoint_every_steps,
                    .every_s = q->checkpoint_every_s};
    in.chunk =
        (rt_view_chunk){.rows_before = q->rows_before, .whole_spe = q->whole_steps_per_epoch};
    if (c->srv->state)
        in.ckpt_continue = rt_h_ckpt_continue(c, q->checkpoint_policy);
    fit_answer a = {.c = c};
    const rt_train_host h = {.ud = c,
                             .flags = train_flags(c),
                             .step = rt_call_step_point,
                             .stopping = call_stopping,
                             .answer_ud = &a,
                             .progress = fit_progress,
                             .epoch_end = fit_epoch_end};
    rt_train_ctx ctx = {
        .ds = c->ds, .val_ds = c->val_ds, .state = c->srv->state, .sid = c->sess->id, .host = &h};
    rt_srv_dash_fit_begin(c);
    rt_fit_out out;
    char err[512] = "";
    int rc = rt_program_fit_run(c->prog, &ctx, &in, &out, err, sizeof err);
    c->tm.durable_ns += out.durable_ns;
    if (rc < 0)
        return a.failed ? a.failed : rt_call_fail(c, rc, "%s", err);
    Rtrain__V1__FitEvent *fin = NEW(c, Rtrain__V1__FitEvent, RTRAIN__V1__FIT_EVENT__INIT);
    if (!fin)
        return OOM(c);
    fin->done = 1;
    fin->cancelled = out.cancelled;
    fin->stopped = out.stopped;
    fin->global_step = (uint64_t)out.global_step;
    fit_stamp(c, fin, out.nan_step);
    c->resp = &fin->base;
    return 0;
}

static int fit_work(rt_call *c) { return rt_h_data_done(c, fit_run(c)); }

/* Fit's own checks, in the order they are reported (after a lookup's
 * failure, before the cap on its steps and the data sets' checks). */
static int fit_request(const rt_call *c, const Rtrain__V1__FitRequest *q, char *why, size_t n)
{
    int rc;
    if (q->epochs == 0)
        return rt_errf(why, n, RT_EINVAL, "epochs must be at least 1");
    if ((rc = rt_h_lr_why(q->learning_rate, why, n)) < 0)
        return rc;
    /* as RunSteps: the running fits stop for the exit checkpoint, and a
     * client reattaches to the next start */
    return rt_h_stopping_why(c, why, n);
}

/* As RunSteps: the request's checks, then one call down (rt_train_open:
 * lookups, the cap on the steps the Fit will run, the data sets' checks). */
int rt_h_fit(rt_call *c)
{
    Rtrain__V1__FitRequest *q = REQ(c, Rtrain__V1__FitRequest);
    char why[200];
    int bad = fit_request(c, q, why, sizeof why);
    rt_train_open_in in = TRAIN_IDS(q);
    in.epochs = q->epochs;
    in.steps_per_epoch = q->steps_per_epoch;
    in.max_steps = RT_MAX_STEPS_PER_CALL;
    rt_train_open_out o;
    int rc = rt_h_open_train(c, &in, bad, why, &o);
    if (rc < 0)
        return rc;
    c->merge_out = q->merge_events;
    c->work = fit_work;
    c->needs_device = 1;
    c->est_ns = UINT64_MAX;
    return 0;
}

/* --------------------------------------------------------------- Evaluate */
/* The use case (rt_program_evaluate), then the answer. */
static int evaluate_run(rt_call *c)
{
    rt_train_ctx ctx = {.ds = c->ds};
    rt_metrics m;
    char err[300];
    int rc = rt_program_evaluate(c->prog, &ctx, &m, err, sizeof err);
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", err);
    Rtrain__V1__EvaluateResponse *r =
        NEW(c, Rtrain__V1__EvaluateResponse, RTRAIN__V1__EVALUATE_RESPONSE__INIT);
    if (!r || !(r->metrics = rt_h_metrics_pb(c, &m)))
        return OOM(c);
    c->resp = &r->base;
    return 0;
}

static int evaluate_work(rt_call *c) { return rt_h_data_done(c, evaluate_run(c)); }

/* One call down, as RunSteps (Evaluate has no checks of its own). */
int rt_h_evaluate(rt_call *c)
{
    Rtrain__V1__EvaluateRequest *q = REQ(c, Rtrain__V1__EvaluateRequest);
    rt_train_open_in in = {
        .sid = q->session_id, .pid = q->program_id, .did = q->dataset_id, .forward = 1};
    rt_train_open_out o;
    int rc = rt_h_open_train(c, &in, 0, NULL, &o);
    if (rc < 0)
        return rc;
    c->work = evaluate_work;
    c->needs_device = 1;
    c->est_ns = o.est_ns;
    return 0;
}

/* ---------------------------------------------------------------- Predict */
/* What the admission found that the work needs: the samples (x, or the
 * call's data set when NULL) and the plan's per-sample sizes. */
typedef struct predict_st {
    const float *x;
    int64_t n;
    int out_n, in_n; /* < 0: the plan has no such shape (its code) */
    int64_t out[RT_MAX_DIMS];
    int64_t in_per, out_per, batch;
} predict_st;

/* The outputs' room, the use case (rt_program_predict), the answer. */
static int predict_run(rt_call *c)
{
    predict_st *ps = c->st;
    if (ps->out_n < 0)
        return rt_call_fail(c, ps->out_n, "the program has no output shape");
    int64_t per = ps->out_per;
    float *y = rt_call_alloc(c, sizeof(float) * (size_t)(ps->n * per));
    int64_t *shape = rt_call_alloc(c, sizeof(int64_t) * (size_t)(ps->out_n + 1));
    Rtrain__V1__PredictResponse *r =
        NEW(c, Rtrain__V1__PredictResponse, RTRAIN__V1__PREDICT_RESPONSE__INIT);
    Rtrain__V1__Tensor *t = NEW(c, Rtrain__V1__Tensor, RTRAIN__V1__TENSOR__INIT);
    if (!y || !shape || !r || !t)
        return OOM(c);
    if (ps->in_n < 0)
        return rt_call_fail(c, ps->in_n, "the program has no input shape");
    rt_predict_in in = {.x = ps->x, .n = ps->n, .in_per = ps->in_per, .out_per = per, .y = y};
    if (!ps->x && (c->ds->stream || c->ds->held) &&
        !(in.xb = rt_call_alloc(c, sizeof(float) * (size_t)(ps->batch * ps->in_per))))
        return OOM(c);
    const rt_train_host h = {.ud = c, .flags = train_flags(c), .yield = call_yield};
    rt_train_ctx ctx = {.ds = c->ds, .host = &h};
    char err[300];
    int rc = rt_program_predict(c->prog, &ctx, &in, err, sizeof err);
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", err);
    shape[0] = ps->n;
    memcpy(shape + 1, ps->out, sizeof(int64_t) * (size_t)ps->out_n);
    t->name = "y";
    t->dtype = RTRAIN__V1__DTYPE__F32;
    t->shape = shape;
    t->n_shape = (size_t)ps->out_n + 1;
    t->data.data = (uint8_t *)y;
    t->data.len = sizeof(float) * (size_t)(ps->n * per);
    r->y = t;
    c->resp = &r->base;
    return 0;
}

static int predict_work(rt_call *c) { return rt_h_data_done(c, predict_run(c)); }

/* Predict x's own checks, in the order they are reported: 0, or the code
 * with why set. They need nothing found, so they run before the lookups;
 * x against the program's input follows them (rt_train_open_x). */
static int predict_x_request(const Rtrain__V1__Tensor *x, char *why, size_t n)
{
    if (x->dtype != RTRAIN__V1__DTYPE__F32)
        return rt_errf(why, n, RT_EDTYPE, "Predict x must be F32");
    if (x->n_shape < 1 || x->n_shape > RT_MAX_DIMS)
        return rt_errf(why, n, RT_ESHAPE, "Predict x needs a shape (samples first)");
    for (size_t i = 0; i < x->n_shape; i++)
        if (x->shape[i] < 0 || x->shape[i] > RT_MAX_DIM_LIMIT)
            return rt_errf(why, n, RT_ESHAPE, "Predict x dim %zu is %lld", i,
                           (long long)x->shape[i]);
    return 0;
}

/* x's own checks, then one call down, as Evaluate (a data set without
 * labels, or x: checked against the program's input there). */
int rt_h_predict(rt_call *c)
{
    Rtrain__V1__PredictRequest *q = REQ(c, Rtrain__V1__PredictRequest);
    int by_ds = q->input_case == RTRAIN__V1__PREDICT_REQUEST__INPUT_DATASET_ID;
    int by_x = q->input_case == RTRAIN__V1__PREDICT_REQUEST__INPUT_X && q->x;
    char why[200];
    int bad = by_x ? predict_x_request(q->x, why, sizeof why) : 0;
    rt_train_x x = {0};
    if (by_x)
        x = (rt_train_x){.n_shape = (int)q->x->n_shape,
                         .shape = q->x->shape,
                         .data = q->x->data.data,
                         .len = q->x->data.len};
    rt_train_open_in in = {.sid = q->session_id,
                           .pid = q->program_id,
                           .did = by_ds ? q->dataset_id : NULL,
                           .unlabelled = 1,
                           .forward = 1,
                           .forward_n = by_x && q->x->n_shape ? q->x->shape[0] : 0,
                           .x = by_x ? &x : NULL};
    rt_train_open_out o;
    int rc = rt_h_open_train(c, &in, bad, why, &o);
    if (rc < 0)
        return rc;
    predict_st *ps = calloc(1, sizeof *ps);
    if (!ps)
        return OOM(c);
    c->st = ps;
    c->st_free = free;
    ps->out_n = o.out_n;
    memcpy(ps->out, o.out, sizeof ps->out);
    ps->in_n = o.view->in_n;
    ps->in_per = o.in_per;
    ps->out_per = o.out_per;
    ps->batch = o.batch_size < 1 ? 1 : o.batch_size;
    if (by_ds) {
        ps->n = c->ds->n;
    } else if (by_x) { /* checked: into the call's arena, aligned */
        float *f = rt_call_alloc(c, q->x->data.len ? q->x->data.len : 4);
        if (!f)
            return OOM(c);
        if (q->x->data.len)
            memcpy(f, q->x->data.data, q->x->data.len);
        ps->x = f;
        ps->n = q->x->shape[0];
    } else {
        return rt_call_fail(c, RT_EINVAL, "PredictRequest needs dataset_id or x");
    }
    c->work = predict_work;
    c->needs_device = 1;
    c->est_ns = o.est_ns;
    return 0;
}

/* ---------------------------------------------------------------- Control */
/* Answered at once on the call's thread, without the device: the rate goes
 * into the exec atomically (rt_exec_set_lr), a reset of the stateful RNNs'
 * states too (rt_exec_reset_states), and the stop into the program's
 * stop_gen; the running training reads them at its next step boundary. */
int rt_h_control(rt_call *c)
{
    Rtrain__V1__ControlRequest *q = REQ(c, Rtrain__V1__ControlRequest);
    int rc;
    if ((rc = rt_h_need_program(c, q->session_id, q->program_id)) < 0 ||
        (rc = rt_h_check_lr(c, q->learning_rate)) < 0)
        return rc;
    Rtrain__V1__ControlResponse *r =
        NEW(c, Rtrain__V1__ControlResponse, RTRAIN__V1__CONTROL_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    if ((rc = rt_h_apply_lr(c, q->learning_rate)) < 0)
        return rc;
    if (q->reset_states) {
        const char *layer = q->reset_layer && *q->reset_layer ? q->reset_layer : NULL;
        int n = rt_exec_reset_states(rt_program_exec(c->prog), layer);
        if (n < 0)
            return rt_h_engine_fail(c, n);
        if (n == 0 && layer) /* Keras: "Layer must be stateful." */
            return rt_call_fail(
                c, RT_EINVAL, "reset_states: the program has no stateful RNN layer '%.64s'", layer);
        if (n)
            rt_program_mark_dirty(c->prog);
        r->states_reset = (uint32_t)n;
    }
    r->running = rt_program_control(c->prog, q->stop);
    c->resp = &r->base;
    return 0;
}
