/* rt_handlers.c - what the handler files share (rt_handlers.h): the
 * session/program/dataset lookups, the training-call checks and helpers,
 * and the durability calls. */
#include "rt_handlers.h"

/* ---------------------------------------------------------------- helpers */

/* The lookups are one call down each (rt_session_lookup, rt_train_open),
 * which word the failures. */
int rt_h_need_session(rt_call *c, const char *id)
{
    char err[200];
    int rc = rt_session_lookup(c->srv->sessions, c->who, id, NULL, &c->sess, NULL, err, sizeof err);
    return rc < 0 ? rt_call_fail(c, rc, "%s", err) : 0;
}

int rt_h_need_program(rt_call *c, const char *sid, const char *pid)
{
    char err[200];
    int rc =
        rt_session_lookup(c->srv->sessions, c->who, sid, pid, &c->sess, &c->prog, err, sizeof err);
    return rc < 0 ? rt_call_fail(c, rc, "%s", err) : 0;
}

/* A training call's admission (rt_train_open, one call down): its
 * references held by the call; the failure reported is the lookup's, else
 * the handler's own request check's (bad < 0, its text in why), else
 * rt_train_open's checks'. */
int rt_h_open_train(rt_call *c, rt_train_open_in *in, int bad, const char *why,
                    rt_train_open_out *o)
{
    char err[512];
    in->check = bad == 0;
    int rc = rt_train_open(c->srv->sessions, c->srv->data, c->who, in, o, err, sizeof err);
    c->sess = o->refs.sess;
    c->prog = o->refs.prog;
    c->ds = o->refs.ds;
    c->val_ds = o->refs.val_ds;
    c->pipe = o->pipe;
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", err);
    return bad < 0 ? rt_call_fail(c, bad, "%s", why) : 0;
}

/* A durable daemon that is stopping takes no new training or checkpoint
 * calls: the calls running end at their boundary, the exit checkpoint
 * follows, and the client reattaches to the next start. */
int rt_h_daemon_stopping(const rt_call *c)
{
    return c->srv->state && __atomic_load_n(&c->srv->stopping, __ATOMIC_ACQUIRE);
}

int rt_h_stopping_why(const rt_call *c, char *why, size_t n)
{
    if (rt_h_daemon_stopping(c))
        return rt_errf(why, n, RT_EUNAVAILABLE, "the daemon is stopping; retry after it restarts");
    return 0;
}

int rt_h_refuse_if_stopping(rt_call *c)
{
    char why[80];
    int rc = rt_h_stopping_why(c, why, sizeof why);
    return rc < 0 ? rt_call_fail(c, rc, "%s", why) : 0;
}

/* A training call's work is done (rc its result): its data sets go back
 * now, the answer encoded, so the transport has none left to give back
 * before the status. */
int rt_h_data_done(rt_call *c, int rc)
{
    if (c->ds)
        rt_dataset_release(c->ds);
    if (c->val_ds)
        rt_dataset_release(c->val_ds);
    c->ds = c->val_ds = NULL;
    return rc;
}

/* RunSteps/Fit learning_rate: > 0 sets the program's rate from the call's
 * first step on (rt_exec_set_lr), 0 leaves it. */
int rt_h_lr_why(float lr, char *why, size_t n)
{
    if (!(lr >= 0.0f) || isinf(lr))
        return rt_errf(why, n, RT_EINVAL, "learning_rate %g must be finite and > 0 (0: unchanged)",
                       (double)lr);
    return 0;
}

int rt_h_check_lr(rt_call *c, float lr)
{
    char why[100];
    int rc = rt_h_lr_why(lr, why, sizeof why);
    return rc < 0 ? rt_call_fail(c, rc, "%s", why) : 0;
}

int rt_h_apply_lr(rt_call *c, float lr)
{
    int rc = rt_program_set_lr(c->prog, lr);
    return rc < 0 ? rt_h_engine_fail(c, rc) : 0;
}

int rt_h_engine_fail(rt_call *c, int rc)
{
    const char *m = rt_exec_errmsg(rt_program_exec(c->prog));
    return rt_call_fail(c, rc, "%.240s", m && *m ? m : rt_strerror(rc));
}

Rtrain__V1__Metrics *rt_h_metrics_pb(rt_call *c, const rt_metrics *m)
{
    Rtrain__V1__Metrics *p = NEW(c, Rtrain__V1__Metrics, RTRAIN__V1__METRICS__INIT);
    if (p) {
        p->loss = m->loss;
        p->accuracy = m->acc;
        p->samples = (uint64_t)m->samples;
        if (m->n_values > 0) {
            p->values = rt_call_alloc(c, sizeof *p->values * (size_t)m->n_values);
            Rtrain__V1__MetricValue *v = rt_call_alloc(c, sizeof *v * (size_t)m->n_values);
            if (!p->values || !v)
                return NULL;
            /* several outputs: Keras' "out1_loss", "out2_accuracy" */
            const rt_plan *pl = c->prog ? rt_exec_plan(rt_program_exec(c->prog)) : NULL;
            for (int i = 0; i < m->n_values; i++) {
                rtrain__v1__metric_value__init(&v[i]);
                v[i].name = (char *)rt_metric_name(m->value_bit[i]);
                if (m->value_head[i] >= 0) {
                    char nm[160];
                    if (rt_metric_value_name(pl, m, i, nm, sizeof nm) < 0)
                        snprintf(nm, sizeof nm, "output_%d_%s", m->value_head[i] + 1,
                                 m->value_bit[i] == RT_METRIC_HEAD_LOSS ? "loss" : v[i].name);
                    v[i].name = rt_call_strdup(c, nm);
                    if (!v[i].name)
                        return NULL;
                }
                v[i].value = m->values[i];
                p->values[i] = &v[i];
            }
            p->n_values = (size_t)m->n_values;
        }
    }
    return p;
}

int64_t *rt_h_dims_pb(rt_call *c, int n, const int64_t *d)
{
    int64_t *p = rt_call_alloc(c, sizeof(int64_t) * (size_t)(n ? n : 1));
    if (p && n)
        memcpy(p, d, sizeof(int64_t) * (size_t)n);
    return p;
}

/* ------------------------------------------------------------- durability */

/* Write p's checkpoint (the caller holds the device). A failure (disk
 * full) stops the call, or with CHECKPOINT_CONTINUE (or the daemon's
 * --checkpoint-fail continue) is only logged; the previous checkpoint is
 * untouched either way. */
int rt_h_ckpt_continue(const rt_call *c, int policy)
{
    return policy == RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_CONTINUE ||
           (policy == RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_POLICY_DEFAULT &&
            rt_state_cfg(c->srv->state)->fail_continue);
}

int rt_h_durable_checkpoint(rt_call *c, rt_program *p, int policy)
{
    char err[400];
    uint64_t t0 = rt_now_ns();
    int rc = rt_train_checkpoint(c->srv->state, c->sess->id, p, rt_h_ckpt_continue(c, policy), err,
                                 sizeof err);
    c->tm.durable_ns += rt_now_ns() - t0;
    return rc < 0 ? rt_call_fail(c, rc, "%s", err) : 0;
}

/* A new program keeps its model (a pull carries it) and, in durable mode,
 * is on disk before Compile answers. */
int rt_h_durable_program(rt_call *c, rt_program *prog)
{
    size_t n = protobuf_c_message_get_packed_size(c->req);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return OOM(c);
    rt_program_take_model(prog, b, protobuf_c_message_pack(c->req, b));
    if (!c->srv->state)
        return 0;
    rt_call_device_lock(c);
    int rc =
        rt_h_durable_checkpoint(c, prog, RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_POLICY_DEFAULT);
    rt_call_device_unlock(c);
    return rc;
}
