/* rt_methods.c - one handler per rtrain.v1.Trainer method, and the handler
 * table (indexed in .proto order). Handlers run on a completion-queue thread; the
 * *_work functions run with the device held, inline or on the executor. */
#include "rt_srv_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>
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

#define RT_MAX_STEPS_PER_CALL 10000000ull
#define RT_MAX_RETURN_LOSSES 1000000ull

#define REQ(c, T) ((T *)(c)->req)
#define NEW(c, T, INIT)                                                        \
    ({                                                                         \
        T *p_ = rt_call_alloc((c), sizeof(T));                                 \
        if (p_) {                                                              \
            T init_ = INIT;                                                    \
            *p_ = init_;                                                       \
        }                                                                      \
        p_;                                                                    \
    })
/* Out of memory, or a quota the arena checked (rt_call_alloc). */
#define OOM(c)                                                                 \
    ((c)->alloc_err[0] ? rt_call_fail((c), RT_ETOOBIG, "%s", (c)->alloc_err)  \
                       : rt_call_fail((c), RT_ENOMEM, "out of memory"))

/* ---------------------------------------------------------------- helpers */

static int need_session(rt_call *c, const char *id)
{
    if (!id || !*id)
        return rt_call_fail(c, RT_EINVAL, "session_id is empty");
    /* Another principal's session answers exactly like a missing one. */
    c->sess = rt_session_find(c->srv->sessions, id, c->who);
    if (!c->sess)
        return rt_call_fail(c, RT_ENOTFOUND, "unknown session '%.64s'", id);
    return 0;
}

static int need_program(rt_call *c, const char *sid, const char *pid)
{
    int rc = need_session(c, sid);
    if (rc < 0)
        return rc;
    if (!pid || !*pid)
        return rt_call_fail(c, RT_EINVAL, "program_id is empty");
    c->prog = rt_session_find_program(c->sess, pid);
    if (!c->prog)
        return rt_call_fail(c, RT_ENOTFOUND, "unknown program '%.64s' in session %s",
                            pid, c->sess->id);
    return 0;
}

static int need_dataset(rt_call *c, const char *id, rt_dataset **out,
                        const char *what)
{
    if (!id || !*id)
        return rt_call_fail(c, RT_EINVAL, "%s is empty", what);
    *out = rt_data_store_find_id(c->srv->data, c->who, id);
    if (!*out)
        return rt_call_fail(c, RT_ENOTFOUND, "unknown dataset '%.64s'", id);
    return 0;
}

/* RunSteps/Fit: the training set and the optional validation set. */
static int need_train_data(rt_call *c, const char *did, const char *val_did)
{
    int rc = need_dataset(c, did, &c->ds, "dataset_id");
    if (rc == 0 && val_did && *val_did)
        rc = need_dataset(c, val_did, &c->val_ds, "val_dataset_id");
    return rc;
}

/* A durable daemon that is stopping takes no new training or checkpoint
 * calls: the calls running end at their boundary, the exit checkpoint
 * follows, and the client reattaches to the next start. */
static int daemon_stopping(const rt_call *c)
{
    return c->srv->state && __atomic_load_n(&c->srv->stopping, __ATOMIC_ACQUIRE);
}

static int refuse_if_stopping(rt_call *c)
{
    if (daemon_stopping(c))
        return rt_call_fail(c, RT_EUNAVAILABLE, "the daemon is stopping; retry after it "
                            "restarts");
    return 0;
}

/* The dataset as the program sees it (rt_view.h): checked on the cq
 * thread, viewed by the work. */
static int check_fit(rt_call *c, rt_dataset *ds, int need_labels)
{
    char err[512];
    int rc = rt_view_check(ds, rt_program_plan(c->prog), rt_program_id(c->prog), need_labels, err,
                           sizeof err);
    return rc < 0 ? rt_call_fail(c, rc, "%s", err) : 0;
}

static int data_for(rt_call *c, rt_dataset *ds, rt_data *d, int need_labels)
{
    rt_stream_use *use = NULL;
    if (ds->stream && need_labels && !(use = rt_call_alloc(c, sizeof *use)))
        return OOM(c);
    char err[200];
    int rc = rt_view_make(ds, rt_program_plan(c->prog), need_labels, use, d, err, sizeof err);
    return rc < 0 ? rt_call_fail(c, rc, "dataset %s: %s", ds->id, err) : 0;
}

/* RunSteps/Fit work: c->ds and c->val_ds (when given) as rt_data. */
static int train_data(rt_call *c, rt_data *d, rt_data *vd)
{
    int rc = data_for(c, c->ds, d, 1);
    if (rc == 0 && c->val_ds)
        rc = data_for(c, c->val_ds, vd, 1);
    return rc;
}

static int check_train_data(rt_call *c)
{
    int rc = check_fit(c, c->ds, 1);
    if (rc == 0 && c->val_ds)
        rc = check_fit(c, c->val_ds, 1);
    return rc;
}

static int engine_fail(rt_call *c, int rc);

/* RunSteps/Fit learning_rate: > 0 sets the program's rate from the call's
 * first step on (rt_exec_set_lr), 0 leaves it. */
static int check_lr(rt_call *c, float lr)
{
    if (!(lr >= 0.0f) || isinf(lr))
        return rt_call_fail(c, RT_EINVAL, "learning_rate %g must be finite and > 0 (0: unchanged)",
                            (double)lr);
    return 0;
}

static int apply_lr(rt_call *c, float lr)
{
    int rc = rt_program_set_lr(c->prog, lr);
    return rc < 0 ? engine_fail(c, rc) : 0;
}

/* A dataset with image augmentation: the epoch's augmented copy. */
static int train_x(rt_call *c, rt_data *d)
{
    char err[200];
    int rc = rt_view_epoch(c->ds, rt_program_plan(c->prog),
                           rt_exec_global_step(rt_program_exec(c->prog)), d, err, sizeof err);
    return rc < 0 ? rt_call_fail(c, rc, "dataset %s: %s", c->ds->id, err) : 0;
}

static int engine_fail(rt_call *c, int rc)
{
    const char *m = rt_exec_errmsg(rt_program_exec(c->prog));
    return rt_call_fail(c, rc, "%.240s", m && *m ? m : rt_strerror(rc));
}

static Rtrain__V1__Metrics *metrics_pb(rt_call *c, const rt_metrics *m)
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
            for (int i = 0; i < m->n_values; i++) {
                rtrain__v1__metric_value__init(&v[i]);
                v[i].name = (char *)rt_metric_name(m->value_bit[i]);
                v[i].value = m->values[i];
                p->values[i] = &v[i];
            }
            p->n_values = (size_t)m->n_values;
        }
    }
    return p;
}

static int64_t *dims_pb(rt_call *c, int n, const int64_t *d)
{
    int64_t *p = rt_call_alloc(c, sizeof(int64_t) * (size_t)(n ? n : 1));
    if (p && n)
        memcpy(p, d, sizeof(int64_t) * (size_t)n);
    return p;
}

static uint64_t clamp_est(double ns) { return ns > 1e18 ? (uint64_t)1e18 : (uint64_t)ns; }

static void note_step_time(rt_program *p, uint64_t ns, int64_t steps)
{
    if (steps <= 0)
        return;
    rt_program_note_steps(p, ns, steps);
    const rt_train_config *tc = rt_plan_config(rt_program_plan(p));
    rt_metrics_steps((uint64_t)steps, (uint64_t)steps * (uint64_t)(tc ? tc->batch_size : 0));
}

/* ------------------------------------------------------------- durability */

/* Write p's checkpoint (the caller holds the device). A failure (disk
 * full) stops the call, or with CHECKPOINT_CONTINUE (or the daemon's
 * --checkpoint-fail continue) is only logged; the previous checkpoint is
 * untouched either way. */
static int durable_checkpoint(rt_call *c, rt_program *p, int policy)
{
    char err[300];
    int rc = rt_state_checkpoint(c->srv->state, c->sess->id, p, err, sizeof err);
    if (rc == 0)
        return 0;
    int cont = policy == RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_CONTINUE ||
               (policy == RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_POLICY_DEFAULT &&
                rt_state_cfg(c->srv->state)->fail_continue);
    char pid[16];
    RT_LOG(RT_LOG_WARN, "checkpoint of %s at step %lld failed (%s): %s; the one at step %lld "
           "is kept", rt_log_id(rt_program_id(p), pid), (long long)rt_exec_global_step(rt_program_exec(p)),
           cont ? "training goes on" : "the call stops", err, (long long)rt_program_ckpt_step(p));
    if (cont)
        return 0;
    return rt_call_fail(c, rc, "checkpoint failed, training stopped at step %lld: %.200s; the "
                        "checkpoint at step %lld is kept", (long long)rt_exec_global_step(rt_program_exec(p)),
                        err, (long long)rt_program_ckpt_step(p));
}

/* A new program keeps its model (a pull carries it) and, in durable mode,
 * is on disk before Compile answers. */
static int durable_program(rt_call *c, rt_program *prog)
{
    size_t n = protobuf_c_message_get_packed_size(c->req);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return OOM(c);
    rt_program_take_model(prog, b, protobuf_c_message_pack(c->req, b));
    if (!c->srv->state)
        return 0;
    rt_call_device_lock(c);
    int rc = durable_checkpoint(c, prog, RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_POLICY_DEFAULT);
    rt_call_device_unlock(c);
    return rc;
}

/* ---------------------------------------------------------------- GetInfo */
static const char *const formats[] = {"raw", "npy", "csv", "idx", "idx.gz", "tfrecord",
                                      "tfrecord.gz", "tfrecord.zlib", NULL};

static char **strv(rt_call *c, const char *const *v, size_t *n)
{
    size_t k = 0;
    while (v && v[k])
        k++;
    char **out = rt_call_alloc(c, sizeof(char *) * (k ? k : 1));
    if (out)
        for (size_t i = 0; i < k; i++)
            out[i] = (char *)v[i];
    *n = out ? k : 0;
    return out;
}

static int h_get_info(rt_call *c)
{
    rt_srv *s = c->srv;
    Rtrain__V1__InfoResponse *r = NEW(c, Rtrain__V1__InfoResponse, RTRAIN__V1__INFO_RESPONSE__INIT);
    Rtrain__V1__Device *d = NEW(c, Rtrain__V1__Device, RTRAIN__V1__DEVICE__INIT);
    Rtrain__V1__Device **dv = rt_call_alloc(c, sizeof *dv);
    Rtrain__V1__Limits *l = NEW(c, Rtrain__V1__Limits, RTRAIN__V1__LIMITS__INIT);
    char *backend = rt_call_alloc(c, 64);
    if (!r || !d || !dv || !l || !backend)
        return OOM(c);
    r->version = RT_VERSION_STRING;
    r->engine_version = RT_ENGINE_VERSION;
    const dnnl_version_t *v = dnnl_version();
    snprintf(backend, 64, "cpu+onednn-%d.%d", v->major, v->minor);
    d->name = "cpu0";
    d->kind = "cpu";
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    d->memory_bytes = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    d->cores = nc > 0 ? (uint32_t)nc : 1;
    d->backend = backend;
    dv[0] = d;
    r->n_devices = 1;
    r->devices = dv;
    l->max_message_bytes = s->cfg.max_message_bytes;
    l->max_dataset_bytes = s->cfg.max_dataset_bytes;
    l->max_sessions = (uint32_t)s->cfg.max_sessions;
    l->max_dim = RT_MAX_DIM_LIMIT;
    l->max_params = RT_MAX_PARAMS_LIMIT;
    l->max_steps_per_call = RT_MAX_STEPS_PER_CALL;
    r->limits = l;
    r->ops = strv(c, rt_engine_op_names(), &r->n_ops);
    r->formats = strv(c, formats, &r->n_formats);
    r->losses = strv(c, rt_engine_loss_names(), &r->n_losses);
    r->optimizers = strv(c, rt_engine_optimizer_names(), &r->n_optimizers);
    if (rt_dist_size() > 1 || rt_dist_micro() > 0) {
        r->replica_hosts = rt_call_alloc(c, sizeof(char *) * (size_t)rt_dist_size());
        if (!r->replica_hosts)
            return OOM(c);
        for (int i = 0; i < rt_dist_size(); i++)
            r->replica_hosts[r->n_replica_hosts++] = (char *)rt_dist_host(i);
        r->deterministic_reduce = (uint32_t)rt_dist_micro();
    }
    r->state = s->state ? "disk" : "memory";
    c->resp = &r->base;
    return 0;
}

/* ------------------------------------------------------------------- Ping */
static int h_ping(rt_call *c)
{
    Rtrain__V1__PingRequest *q = REQ(c, Rtrain__V1__PingRequest);
    Rtrain__V1__PingResponse *r = NEW(c, Rtrain__V1__PingResponse, RTRAIN__V1__PING_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    size_t n = q->response_bytes;
    if (n > c->srv->cfg.max_message_bytes)
        return rt_call_fail(c, RT_ETOOBIG,
                            "response_bytes %zu is over the message limit %llu", n,
                            (unsigned long long)c->srv->cfg.max_message_bytes);
    if (n) {
        uint8_t *p = rt_call_alloc(c, n);
        if (!p)
            return OOM(c);
        /* Echo the request's bytes, repeated to the asked size. */
        if (q->payload.len)
            for (size_t i = 0; i < n; i += q->payload.len)
                memcpy(p + i, q->payload.data,
                       n - i < q->payload.len ? n - i : q->payload.len);
        r->payload.data = p;
        r->payload.len = n;
    }
    c->resp = &r->base;
    return 0;
}

/* --------------------------------------------------------------- Sessions */
static int h_create_session(rt_call *c)
{
    Rtrain__V1__CreateSessionRequest *q = REQ(c, Rtrain__V1__CreateSessionRequest);
    Rtrain__V1__CreateSessionResponse *r =
        NEW(c, Rtrain__V1__CreateSessionResponse, RTRAIN__V1__CREATE_SESSION_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    rt_session *s;
    char err[200], sid[16], name[80];
    int rc = rt_principal_reserve(c->who, RT_Q_SESSIONS, 1, err, sizeof err);
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", err);
    rc = rt_session_open(c->srv->sessions, q->name, c->who, &s);
    if (rc == RT_ETOOBIG)
        return rt_call_fail(c, rc, "session limit (%d) reached", c->srv->cfg.max_sessions);
    if (rc < 0)
        return rt_call_fail(c, rc, "cannot create a session");
    r->session_id = rt_call_strdup(c, s->id);
    r->session_token = rt_call_strdup(c, s->token);
    if (c->srv->state && (rc = rt_state_session_save(c->srv->state, s, err, sizeof err)) < 0) {
        rt_session_close(c->srv->sessions, s->id, c->who);
        rt_session_release(s);
        return rt_call_fail(c, rc, "cannot keep the session: %s", err);
    }
    RT_LOG(RT_LOG_INFO, "session %s opened by %s (\"%s\")", rt_log_id(s->id, sid),
           rt_principal_name(c->who), rt_log_esc(q->name, name, sizeof name));
    rt_session_release(s);
    c->resp = &r->base;
    return r->session_id && r->session_token ? 0 : OOM(c);
}

static int h_close_session(rt_call *c)
{
    Rtrain__V1__CloseSessionRequest *q = REQ(c, Rtrain__V1__CloseSessionRequest);
    Rtrain__V1__CloseSessionResponse *r =
        NEW(c, Rtrain__V1__CloseSessionResponse, RTRAIN__V1__CLOSE_SESSION_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    if (rt_session_close(c->srv->sessions, q->session_id, c->who) < 0)
        return rt_call_fail(c, RT_ENOTFOUND, "unknown session '%.64s'", q->session_id);
    if (c->srv->state)
        rt_state_session_remove(c->srv->state, q->session_id);
    char sid[16];
    RT_LOG(RT_LOG_INFO, "session %s closed", rt_log_id(q->session_id, sid));
    c->resp = &r->base;
    return 0;
}

/* ---------------------------------------------------------------- Compile */
/* A Compile request up to this size is imported on the cq thread (a few
 * tens of layers: microseconds); a cache hit is then answered without the
 * hand-off to the compile pool. */
#define RT_COMPILE_INLINE_BYTES (64u << 10)

typedef struct compile_st {
    rt_graph *g;
    rt_train_config cfg;
    uint8_t key[16];
    rt_plan *plan; /* from the cache, or compiled by the work */
    rt_principal *who; /* holds one RT_Q_PROGRAMS until the program takes it */
    rt_program *from;  /* state_from_program (valid while c->sess is held) */
    int nchw;          /* the ONNX model's data input takes NCHW data */
} compile_st;

static void compile_st_free(void *p)
{
    compile_st *st = p;
    rt_graph_destroy(st->g);
    rt_plan_release(st->plan);
    rt_principal_unreserve(st->who, RT_Q_PROGRAMS, 1);
    free(st);
}

/* What an instance of the plan holds: parameters, their gradients and up
 * to two optimizer slots per trainable parameter (rt_exec_create's block),
 * plus the activation arena. */
static uint64_t program_bytes(rt_plan *p)
{
    const rt_compile_report *r = rt_plan_report(p);
    return 4 * (r->param_count + 3 * r->trainable_param_count) + r->arena_bytes;
}

/* A metric's TrainConfig bit: the accuracies Keras' "accuracy" resolves
 * to by the loss stay the accuracy field; the others are values. -1 for a
 * name the engine does not know. */
static int metric_bit(const char *m, uint32_t *bit)
{
    if (!strcmp(m, "accuracy") || !strcmp(m, "acc") || !strcmp(m, "sparse_categorical_accuracy") ||
        !strcmp(m, "categorical_accuracy") || !strcmp(m, "binary_accuracy")) {
        *bit = RT_METRIC_ACCURACY;
        return 0;
    }
    return rt_metric_from_name(m, bit) == 0 ? 0 : -1;
}

/* Labels as the loss takes them when the request says nothing: class
 * indices (i32) for the sparse losses, nll_loss, and cross_entropy without
 * a label shape (with one: probabilities of the output's shape, f32). */
static rt_dtype default_label_dtype(rt_loss_kind loss, size_t n_label_shape)
{
    if (loss == RT_LOSS_SPARSE_CE || loss == RT_LOSS_NLL ||
        (loss == RT_LOSS_CROSS_ENTROPY && n_label_shape == 0))
        return RT_I32;
    return RT_F32;
}

static int config_from_pb(rt_call *c, const Rtrain__V1__TrainConfig *p, rt_train_config *cfg)
{
    rt_train_config_init(cfg);
    if (!p)
        return 0;
    if (p->loss && *p->loss && rt_loss_from_name(p->loss, &cfg->loss) < 0)
        return rt_call_fail(c, RT_EINVAL, "unknown loss '%.48s'", p->loss);
    if (p->optimizer && *p->optimizer && rt_opt_from_name(p->optimizer, &cfg->opt) < 0)
        return rt_call_fail(c, RT_EINVAL, "unknown optimizer '%.48s'", p->optimizer);
    /* 0 means "the default" (proto3); anything else must be a finite
     * number, and the optimizer's magnitudes must not be negative: a NaN
     * learning rate silently replaced by the default trains something the
     * client did not ask for. */
    const struct { const char *name; float v; int signed_ok; } nums[] = {
        {"learning_rate", p->learning_rate, 0}, {"momentum", p->momentum, 0},
        {"beta1", p->beta1, 0}, {"beta2", p->beta2, 0}, {"epsilon", p->epsilon, 0},
        {"weight_decay", p->weight_decay, 0}, {"rho", p->rho, 0},
        {"clip_norm", p->clip_norm, 0},
        {"schedule.gamma", p->schedule ? p->schedule->gamma : 0.0f, 1},
        {"schedule.min_lr", p->schedule ? p->schedule->min_lr : 0.0f, 0},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        if (!isfinite(nums[i].v))
            return rt_call_fail(c, RT_EINVAL, "TrainConfig.%s is %s", nums[i].name,
                                isnan(nums[i].v) ? "NaN" : "infinite");
        if (!nums[i].signed_ok && nums[i].v < 0)
            return rt_call_fail(c, RT_EINVAL, "TrainConfig.%s is negative (%g)", nums[i].name,
                                (double)nums[i].v);
    }
    cfg->from_logits = p->from_logits;
    cfg->sync_bn = p->sync_batchnorm;
    /* PyTorch's losses: the compile checks ranges and which loss takes what */
    if (p->reduction && *p->reduction && rt_reduction_from_name(p->reduction, &cfg->reduction) < 0)
        return rt_call_fail(c, RT_EINVAL, "unknown reduction '%.32s' (mean or sum)", p->reduction);
    if (!isfinite(p->label_smoothing) || !isfinite(p->loss_beta))
        return rt_call_fail(c, RT_EINVAL, "TrainConfig.label_smoothing and loss_beta must be "
                            "finite");
    cfg->label_smoothing = p->label_smoothing;
    if (p->has_ignore_index) cfg->ignore_index = p->ignore_index;
    if (p->has_loss_beta) cfg->loss_beta = p->loss_beta;
    if (p->n_class_weight > 1 << 20 || p->n_pos_weight > 1 << 20)
        return rt_call_fail(c, RT_EINVAL, "class_weight or pos_weight has too many values");
    cfg->class_weight = p->n_class_weight ? p->class_weight : NULL;
    cfg->n_class_weight = (int)p->n_class_weight;
    cfg->pos_weight = p->n_pos_weight ? p->pos_weight : NULL;
    cfg->n_pos_weight = (int)p->n_pos_weight;
    cfg->loss_check = !p->no_loss_check;
    if (!(p->l2_weight_decay >= 0) || !isfinite(p->l2_weight_decay) || !(p->dampening >= 0) ||
        !isfinite(p->dampening))
        return rt_call_fail(c, RT_EINVAL, "TrainConfig.l2_weight_decay and dampening must be "
                            "finite and >= 0");
    cfg->l2_decay = p->l2_weight_decay;
    cfg->dampening = p->dampening;
    if (p->learning_rate > 0) cfg->lr = p->learning_rate;
    if (p->momentum > 0) cfg->momentum = p->momentum;
    cfg->nesterov = p->nesterov;
    if (p->beta1 > 0) cfg->beta1 = p->beta1;
    if (p->beta2 > 0) cfg->beta2 = p->beta2;
    if (p->epsilon > 0) cfg->eps = p->epsilon;
    if (p->weight_decay > 0) cfg->weight_decay = p->weight_decay;
    if (p->rho > 0) cfg->rho = p->rho;
    if (p->clip_norm > 0) cfg->clip_norm = p->clip_norm;
    if (p->schedule) {
        const Rtrain__V1__LrSchedule *s = p->schedule;
        if (s->kind && *s->kind && rt_sched_from_name(s->kind, &cfg->sched) < 0)
            return rt_call_fail(c, RT_EINVAL, "unknown schedule '%.48s'", s->kind);
        cfg->step_size = s->step_size;
        cfg->gamma = s->gamma;
        cfg->warmup_steps = s->warmup_steps;
        cfg->total_steps = s->total_steps;
        cfg->min_lr = s->min_lr;
    }
    if (p->n_metrics) {
        cfg->metrics = 0;
        for (size_t i = 0; i < p->n_metrics; i++) {
            const char *m = p->metrics[i];
            uint32_t bit;
            if (metric_bit(m, &bit) < 0)
                return rt_call_fail(c, RT_EINVAL, "unknown metric '%.48s'", m);
            cfg->metrics |= bit;
        }
    }
    if (p->batch_size) cfg->batch_size = (int)p->batch_size;
    cfg->seed = p->seed;
    cfg->shuffle = !p->no_shuffle;
    if (p->label_dtype == RTRAIN__V1__DTYPE__F32 || p->label_dtype == RTRAIN__V1__DTYPE__I32)
        cfg->label_dtype = (rt_dtype)p->label_dtype;
    else if (p->label_dtype != RTRAIN__V1__DTYPE__DTYPE_UNSPECIFIED)
        return rt_call_fail(c, RT_EINVAL, "label_dtype must be F32 or I32");
    else
        cfg->label_dtype = default_label_dtype(cfg->loss, p->n_label_shape);
    if (p->n_label_shape > RT_MAX_DIMS)
        return rt_call_fail(c, RT_EINVAL, "label_shape has more than %d dims", RT_MAX_DIMS);
    if (p->n_label_shape) {
        cfg->label_ndim = (int)p->n_label_shape;
        memcpy(cfg->label_dims, p->label_shape, sizeof(int64_t) * p->n_label_shape);
    }
    return 0;
}

/* What a Keras model saved with its compile settings (Keras 3's
 * compile_config, Keras 2's training_config) fills in where the request
 * says nothing: the loss, the optimizer and its numbers, the metrics. */
static int keras_compile_defaults(rt_call *c, rt_train_config *cfg, const char *json,
                                  const Rtrain__V1__TrainConfig *p)
{
    rt_keras_compile k;
    if (rt_keras_compile_config(json, strlen(json), &k) != 1)
        return 0;
    if (!(p && p->loss && *p->loss) && k.loss[0]) {
        if (rt_loss_from_name(k.loss, &cfg->loss) < 0)
            return rt_call_fail(c, RT_EINVAL, "the model's saved loss '%.48s' is not supported; "
                                "give a loss in TrainConfig", k.loss);
        cfg->from_logits = k.from_logits || (p && p->from_logits);
        if (!p || p->label_dtype == RTRAIN__V1__DTYPE__DTYPE_UNSPECIFIED)
            cfg->label_dtype = default_label_dtype(cfg->loss, p ? p->n_label_shape : 0);
    }
    if (!(p && p->optimizer && *p->optimizer) && k.optimizer[0]) {
        if (rt_opt_from_name(k.optimizer, &cfg->opt) < 0)
            return rt_call_fail(c, RT_EINVAL, "the model's saved optimizer '%.32s' is not "
                                "supported; give an optimizer in TrainConfig", k.optimizer);
        const struct { float given; double saved; float *dst; } nums[] = {
            {p ? p->learning_rate : 0, k.lr, &cfg->lr},
            {p ? p->beta1 : 0, k.beta1, &cfg->beta1},
            {p ? p->beta2 : 0, k.beta2, &cfg->beta2},
            {p ? p->epsilon : 0, k.eps, &cfg->eps},
            {p ? p->momentum : 0, k.momentum, &cfg->momentum},
            {p ? p->rho : 0, k.rho, &cfg->rho},
            {p ? p->weight_decay : 0, k.weight_decay, &cfg->weight_decay},
        };
        for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
            if (!(nums[i].given > 0) && nums[i].saved > 0)
                *nums[i].dst = (float)nums[i].saved;
        if (!(p && p->nesterov))
            cfg->nesterov = k.nesterov;
    }
    if (!(p && p->n_metrics) && k.n_metrics) {
        /* the engine computes accuracy; other saved metrics are reports,
         * not training settings */
        cfg->metrics = 0;
        for (int i = 0; i < k.n_metrics; i++) {
            uint32_t bit;
            if (metric_bit(k.metrics[i], &bit) == 0)
                cfg->metrics |= bit;
        }
    }
    return 0;
}

static void *graph_tmp_alloc(void *c, size_t n) { return rt_call_alloc(c, n); }
static void graph_tmp_free(void *c, void *p) {} /* the arena goes with the call */

/* The model, from Keras JSON or the native graph, into st->g, and the
 * cache lookup. On the compile pool: a 20,000-layer import must not hold a
 * completion-queue thread. */
static int build_graph(rt_call *c, compile_st *st)
{
    Rtrain__V1__CompileRequest *q = REQ(c, Rtrain__V1__CompileRequest);
    int rc;
    if (st->g)
        return 0; /* h_compile built it (a small model) */
    /* Keras models and graphs are channels last already */
    if (q->model_case != RTRAIN__V1__COMPILE_REQUEST__MODEL_ONNX && q->data_layout &&
        *q->data_layout && strcasecmp(q->data_layout, "NHWC"))
        return rt_call_fail(c, RT_EINVAL, "data_layout '%.16s' applies to ONNX models; this "
                            "model takes its input as it declares it (NHWC)", q->data_layout);
    if (q->model_case == RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON) {
        char err[4096];
        rc = rt_keras_import_bind(q->keras_json, strlen(q->keras_json), q->input_dims,
                                  (int)q->n_input_dims, q->input_values, &st->g, err,
                                  sizeof err, NULL, NULL);
        if (rc < 0)
            return rt_call_fail(c, rc, "%s", err);
        if ((rc = keras_compile_defaults(c, &st->cfg, q->keras_json, q->config)) < 0)
            return rc;
    } else if (q->model_case == RTRAIN__V1__COMPILE_REQUEST__MODEL_ONNX) {
        char err[768];
        rt_onnx_opts io = {.output = q->onnx_output};
        if (rt_onnx_layout_from_name(q->data_layout, &io.data_nhwc) < 0)
            return rt_call_fail(c, RT_EINVAL, "unknown data_layout '%.16s' (NCHW, the model's, "
                                "or NHWC)", q->data_layout);
        rc = rt_onnx_import_opts(q->onnx.data, q->onnx.len, &io, &st->g, err, sizeof err);
        if (rc < 0)
            return rt_call_fail(c, rc, "%s", err);
        st->nchw = io.nchw_input;
    } else {
        st->g = rt_graph_create();
        if (!st->g)
            return OOM(c);
        /* the temporaries in the call's arena, charged to the caller (also
         * for restore_program's calls, which have no protobuf allocator) */
        ProtobufCAllocator al = {graph_tmp_alloc, graph_tmp_free, c};
        char err[512];
        if ((rc = rt_graph_import_pb(q->graph, &al, st->g, err, sizeof err)) < 0)
            return err[0] ? rt_call_fail(c, rc, "%s", err) : OOM(c);
    }
    /* The cache lookup is the compile phase of a hit. */
    uint64_t t0 = rt_now_ns();
    rc = rt_plan_key(st->g, &st->cfg, st->key);
    if (rc == 0) {
        /* Plans are shared only within a principal: a cache hit (and its
         * speed) must not tell one tenant what another compiled. */
        const char *who = rt_principal_name(c->who);
        XXH3_state_t *h = XXH3_createState();
        if (!h)
            return OOM(c);
        XXH3_128bits_reset(h);
        XXH3_128bits_update(h, st->key, sizeof st->key);
        XXH3_128bits_update(h, who, strlen(who));
        XXH128_canonical_t k;
        XXH128_canonicalFromHash(&k, XXH3_128bits_digest(h));
        XXH3_freeState(h);
        memcpy(st->key, k.digest, sizeof st->key);
        st->plan = rt_plan_cache_get(c->srv->plans, st->key);
    }
    c->tm.compile_ns += rt_now_ns() - t0;
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", rt_graph_errmsg(st->g)[0] ? rt_graph_errmsg(st->g)
                                                                    : rt_strerror(rc));
    return 0;
}

/* MPI replicas (server/dist): the same program on every rank */
static int dist_program(rt_call *c, rt_exec *e, char *err, size_t errlen)
{
    if (rt_dist_size() == 1 && rt_dist_micro() == 0)
        return 0;
    const ProtobufCMessage *q = c->req;
    size_t n = protobuf_c_message_get_packed_size(q);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        return RT_ENOMEM;
    }
    protobuf_c_message_pack(q, buf);
    int rc = rt_dist_program(e, buf, n, err, errlen);
    free(buf);
    return rc;
}

/* A program that the failing call c added: gone again, from the session
 * and the state directory, with what it was charged (its id reached
 * nobody). Returns rc, the call's failure. */
static int drop_program(rt_call *c, rt_program *p, int rc)
{
    if (c->srv->state)
        rt_state_program_remove(c->srv->state, c->sess->id, rt_program_id(p));
    rt_session_remove_program(c->sess, p);
    return rc;
}

static int compile_answer(rt_call *c, compile_st *st, rt_program *prog, int hit);

static int compile_work(rt_call *c)
{
    compile_st *st = c->st;
    int rc0 = build_graph(c, st);
    if (rc0 < 0)
        return rc0;
    if (rt_call_is_cancelled(c))
        return rt_call_fail(c, RT_ECANCELLED, "compile cancelled after the import");
    int hit = st->plan != NULL;
    if (!hit) {
        char err[256];
        uint64_t t0 = rt_now_ns();
        rt_plan *p;
        /* Past its budget (or when the client goes) the compile stops at
         * the next pass boundary: the worker is free again within a pass. */
        int rc = rt_plan_compile_cancellable(st->g, &st->cfg, &c->cancelled, &p, NULL, err,
                                             sizeof err);
        c->tm.compile_ns += rt_now_ns() - t0;
        if (rc < 0)
            return rt_call_fail(c, rc, "%.250s", err);
        rt_plan_cache_put(c->srv->plans, st->key, p, &st->plan);
        rt_plan_release(p);
    }
    /* Past its budget the client was answered already; a plan that did
     * finish stays in the cache (a retry is a hit), but no program is made
     * for nobody. */
    if (rt_call_is_cancelled(c))
        return rt_call_fail(c, RT_ECANCELLED, "compile cancelled");
    /* The memory is charged before it is allocated. */
    char err[200];
    uint64_t bytes = program_bytes(st->plan);
    int rc = rt_principal_reserve(c->who, RT_Q_PROGRAM_BYTES, bytes, err, sizeof err);
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", err);
    rt_exec *e;
    /* needs_device: the dispatcher holds the device for the whole work (a
     * cache hit answered inline, or on the executor); on the compile pool
     * the work takes it only here. */
    int lock = !c->needs_device;
    if (lock)
        rt_call_device_lock(c);
    rc = rt_exec_create(st->plan, &e);
    char cerr[200] = "";
    if (rc == 0 && st->from && (rc = rt_exec_copy_state(e, rt_program_exec(st->from))) < 0) {
        snprintf(cerr, sizeof cerr, "%s", rt_exec_errmsg(e));
        rt_exec_destroy(e);
    }
    char derr[200] = "";
    if (rc == 0 && (rc = dist_program(c, e, derr, sizeof derr)) < 0)
        rt_exec_destroy(e);
    if (lock)
        rt_call_device_unlock(c);
    if (rc < 0) {
        rt_principal_unreserve(c->who, RT_Q_PROGRAM_BYTES, bytes);
        if (cerr[0])
            return rt_call_fail(c, rc, "state_from_program %s: %s", rt_program_id(st->from), cerr);
        if (derr[0])
            return rt_call_fail(c, rc, "replicas: %s", derr);
        return rt_call_fail(c, rc, "cannot create the program instance: %s", rt_strerror(rc));
    }
    rt_plan_retain(st->plan);
    rt_program *prog;
    st->who = NULL; /* the program count goes with the program now */
    if ((rc = rt_session_add_program(c->sess, st->plan, e, bytes, &prog)) < 0)
        return rt_call_fail(c, rc, "cannot add the program to the session");
    if (st->from)
        rt_program_inherit(prog, st->from);
    if ((rc = durable_program(c, prog)) < 0 || (rc = compile_answer(c, st, prog, hit)) < 0)
        return drop_program(c, prog, rc);
    /* a client gone (its deadline) would never learn the id */
    if (rt_call_is_cancelled(c))
        return drop_program(c, prog, rt_call_fail(c, RT_ECANCELLED, "compile cancelled"));
    char sid[16], pid[16];
    RT_LOG(RT_LOG_INFO, "session %s: program %s (%s, %llu params)", rt_log_id(c->sess->id, sid),
           rt_log_id(rt_program_id(prog), pid), hit ? "cache hit" : "compiled",
           (unsigned long long)rt_plan_report(st->plan)->param_count);
    return 0;
}

/* Compile's answer for the new program prog. */
static int compile_answer(rt_call *c, compile_st *st, rt_program *prog, int hit)
{
    const rt_compile_report *rep = rt_plan_report(st->plan);
    Rtrain__V1__CompileResponse *r = NEW(c, Rtrain__V1__CompileResponse, RTRAIN__V1__COMPILE_RESPONSE__INIT);
    Rtrain__V1__CompileReport *cr = NEW(c, Rtrain__V1__CompileReport, RTRAIN__V1__COMPILE_REPORT__INIT);
    if (!r || !cr)
        return OOM(c);
    r->program_id = rt_call_strdup(c, rt_program_id(prog));
    cr->param_count = rep->param_count;
    cr->trainable_param_count = rep->trainable_param_count;
    cr->flops_per_step = rep->flops_per_step;
    cr->arena_bytes = rep->arena_bytes;
    cr->naive_bytes = rep->naive_bytes;
    cr->compile_ns = rep->compile_ns;
    cr->cache_hit = hit;
    cr->kernels = rep->n_kernels;
    cr->regularized_params = rep->n_regularized;
    cr->constrained_params = rep->n_constrained;
    {
        const rt_train_config *pc = rt_plan_config(st->plan);
        static const char *const optn[] = {"", "sgd", "adam", "adamw", "rmsprop"};
        const char *ln = rt_loss_name(pc->loss);
        cr->loss = (char *)(ln ? ln : "");
        cr->data_layout = (char *)(st->nchw ? "NCHW" : "");
        cr->optimizer = (char *)(pc->opt >= 1 && pc->opt <= 4 ? optn[pc->opt] : "");
    }
    cr->passes = rt_call_alloc(c, sizeof *cr->passes * RT_COMPILE_PASSES);
    if (!cr->passes)
        return OOM(c);
    for (int i = 0; i < RT_COMPILE_PASSES; i++) {
        Rtrain__V1__CompilePass *ps = NEW(c, Rtrain__V1__CompilePass, RTRAIN__V1__COMPILE_PASS__INIT);
        if (!ps)
            return OOM(c);
        ps->name = (char *)rt_compile_pass_name(i);
        ps->ns = rep->pass_ns[i];
        cr->passes[cr->n_passes++] = ps;
    }
    int np = rt_plan_n_params(st->plan);
    cr->params = rt_call_alloc(c, sizeof *cr->params * (size_t)(np > 0 ? np : 1));
    if (!cr->params || !r->program_id)
        return OOM(c);
    for (int i = 0; i < np; i++) {
        Rtrain__V1__ParamInfo *pi = NEW(c, Rtrain__V1__ParamInfo, RTRAIN__V1__PARAM_INFO__INIT);
        const char *name;
        int64_t dims[RT_MAX_DIMS];
        int tr, nd = rt_plan_param_info(st->plan, i, &name, dims, &tr);
        if (!pi || nd < 0)
            return OOM(c);
        pi->name = (char *)name;
        pi->shape = dims_pb(c, nd, dims);
        pi->n_shape = (size_t)nd;
        pi->trainable = tr;
        cr->params[cr->n_params++] = pi;
    }
    int64_t d[RT_MAX_DIMS];
    int n = rt_plan_input_shape(st->plan, d);
    if (n >= 0) {
        cr->input_shape = dims_pb(c, n, d);
        cr->n_input_shape = (size_t)n;
    }
    n = rt_plan_output_shape(st->plan, d);
    if (n >= 0) {
        cr->output_shape = dims_pb(c, n, d);
        cr->n_output_shape = (size_t)n;
    }
    r->report = cr;
    c->tm.cache_hit = hit;
    c->resp = &r->base;
    return 0;
}

static int h_compile(rt_call *c)
{
    Rtrain__V1__CompileRequest *q = REQ(c, Rtrain__V1__CompileRequest);
    int rc = need_session(c, q->session_id);
    if (rc < 0)
        return rc;
    compile_st *st = calloc(1, sizeof *st);
    if (!st)
        return OOM(c);
    c->st = st;
    c->st_free = compile_st_free;
    char err[200];
    if ((rc = rt_principal_reserve(c->who, RT_Q_PROGRAMS, 1, err, sizeof err)) < 0)
        return rt_call_fail(c, rc, "%s", err);
    st->who = c->who;
    if ((rc = config_from_pb(c, q->config, &st->cfg)) < 0)
        return rc;
    if (q->state_from_program && *q->state_from_program &&
        !(st->from = rt_session_find_program(c->sess, q->state_from_program)))
        return rt_call_fail(c, RT_ENOTFOUND, "state_from_program: unknown program '%.64s' in "
                            "session %s", q->state_from_program, c->sess->id);
    if (q->model_case != RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON &&
        q->model_case != RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH &&
        q->model_case != RTRAIN__V1__COMPILE_REQUEST__MODEL_ONNX)
        return rt_call_fail(c, RT_EINVAL, "CompileRequest has no graph, keras_json or onnx");
    c->work = compile_work;
    /* A small model whose plan is cached costs an import, a lookup and the
     * instance, tens of microseconds: answered like any short call, here
     * when the device is free, else on the executor. Not in durable mode
     * (the program is written and synced before the answer) nor with MPI
     * replicas (every rank creates it), which the pool serves. */
    if (c->req_bytes <= RT_COMPILE_INLINE_BYTES && !c->srv->state && rt_dist_size() == 1 &&
        rt_dist_micro() == 0) {
        if ((rc = build_graph(c, st)) < 0)
            return rc;
        if (st->plan) {
            c->needs_device = 1;
            c->est_ns = rt_plan_report(st->plan)->param_count * 4 + 5000;
            return 0;
        }
    }
    /* Import, compile (or cache lookup) on the compile pool; the work takes
     * the device only to create the instance. */
    c->compile_pool = 1;
    c->needs_device = 0;
    c->est_ns = UINT64_MAX;
    return 0;
}

/* ----------------------------------------------------------------- Upload */
/* Where a stream's bytes go: the dataset's final buffer, filled once, and
 * the hashes of what arrived, advanced as it arrives. What a broken stream
 * leaves behind when it is kept for a resume (rt_upload_kept). */
typedef struct up_data {
    uint8_t *buf;
    rt_data_cursor cur;    /* where the next stream bytes go */
    uint64_t received;     /* stream bytes placed */
    uint64_t hashed;       /* stream bytes hashed (the lane's position) */
    XXH64_state_t *x64;    /* NULL under no_checksum */
    XXH3_state_t *x3;
    XXH3_state_t *xs;      /* the sample (rt_sample_run) */
} up_data;

static void up_data_free(void *p)
{
    up_data *d = p;
    if (!d)
        return;
    rt_bufpool_put(d->buf);
    if (d->x64)
        XXH64_freeState(d->x64);
    if (d->x3)
        XXH3_freeState(d->x3);
    if (d->xs)
        XXH3_freeState(d->xs);
    free(d);
}

typedef struct upload_st {
    int have_header;
    int done;              /* the last chunk arrived and checked */
    int bad;               /* a chunk was refused: nothing is kept */
    char name[64];
    rt_data_part parts[RT_DATA_MAX_PARTS];
    int n_parts;
    rt_example_spec spec;  /* TFRecord parts point here */
    uint64_t stream_total; /* bytes in the stream: parts not held */
    int any_held;
    uint8_t content_hash_given[16];
    int has_content_hash;
    int hash_later;        /* the content hash comes in a chunk */
    uint8_t sample_given[16];
    int has_sample;
    int no_checksum;
    uint8_t key[16];       /* rt_data_key: what a kept stream is found by */
    uint64_t total;
    uint64_t resumed;      /* stream bytes taken from a kept broken upload */
    up_data *d;
    rt_srv *srv;
    rt_principal *who;     /* holds one RT_Q_UPLOADS and reserved bytes */
    uint64_t reserved;     /* RT_Q_UPLOAD_BYTES (up_reserve) */
    int cut_short;         /* its reservation could not grow */
    int busy;              /* counted in rt_bufpool_busy */
    struct up_lane *lane;  /* large uploads: hashing and placing off the cq thread */
} upload_st;

/* A large upload's lane: the cq thread hands each chunk's received
 * slices (the byte buffer itself, no copy) to a thread of the upload's
 * own, which hashes, places and checks them in order, and goes back to
 * reading the socket: receiving and the one pass over the data overlap
 * instead of taking turns on one thread. At most RT__LANE_DEPTH chunks
 * wait (the cq thread waits for room); everything that reads what the
 * lane writes drains it first (up_drain). */
#define RT__LANE_DEPTH 8
#define RT__LANE_MIN (8u << 20) /* smaller uploads place inline */
typedef struct up_item {
    grpc_byte_buffer *bb;
    rt_wire_span *sp;
    size_t n;
} up_item;

typedef struct up_lane {
    pthread_t t;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    up_item q[RT__LANE_DEPTH];
    int head, count, working, stop;
    upload_st *u;
} up_lane;

/* The upload's quotas go back before its status (finish): a client that
 * has its answer may start the next upload at once. A stream that broke
 * (cancelled, cut short, stalled) after sending some of a dataset whose
 * content hash it declared leaves its bytes, hashes and byte charge for
 * --upload-keep-s, so the same upload resumes where it stopped. */
static void up_drain(upload_st *u);
static void up_lane_stop(upload_st *u);

static void upload_st_done(void *p)
{
    upload_st *u = p;
    up_drain(u); /* a kept upload's bytes and hashes are all placed */
    if (u->who && u->have_header && !u->done && !u->bad && u->has_content_hash &&
        !u->any_held && u->d && u->d->received > 0 && u->srv->cfg.upload_keep_ms) {
        rt_upload_kept *k = calloc(1, sizeof *k);
        if (k) {
            k->who = u->who;
            memcpy(k->key, u->key, 16);
            k->offset = u->d->received;
            k->bytes = u->reserved;
            if (u->has_sample) {
                rt_data_key(u->sample_given, u->parts, u->n_parts, k->probe);
                k->has_probe = 1;
            }
            k->st = u->d;
            k->st_free = up_data_free;
            u->d = NULL;
            u->reserved = 0;
            RT_LOG(RT_LOG_INFO, "upload %02x%02x%02x%02x.. broke at %llu of %llu bytes: kept "
                   "for %llu s", u->key[0], u->key[1], u->key[2], u->key[3],
                   (unsigned long long)k->offset,
                   (unsigned long long)u->stream_total,
                   (unsigned long long)(u->srv->cfg.upload_keep_ms / 1000));
            rt_upload_store_put(&u->srv->upstore, k);
        }
    }
    if (u->busy) {
        u->busy = 0;
        rt_bufpool_busy(-1);
    }
    rt_principal_unreserve(u->who, RT_Q_UPLOAD_BYTES, u->reserved);
    rt_principal_unreserve(u->who, RT_Q_UPLOADS, 1);
    u->who = NULL;
    u->reserved = 0;
}

static void upload_st_free(void *p)
{
    upload_st *u = p;
    upload_st_done(u);
    up_lane_stop(u);
    up_data_free(u->d);
    free(u);
}

static int parts_from_header(rt_call *c, const Rtrain__V1__DatasetHeader *h,
                             rt_data_part *parts, int *n_parts, uint64_t *total,
                             rt_example_spec *spec)
{
    int tfr = h->n_parts >= 1 && h->parts[0]->format == RTRAIN__V1__DATA_FORMAT__FORMAT_TFRECORD;
    if (tfr) {
        char err[200];
        if (h->n_parts > RT_DATA_MAX_PARTS)
            return rt_call_fail(c, RT_EDATA, "a TFRecord dataset has 1..%d shards; got %zu",
                                RT_DATA_MAX_PARTS, h->n_parts);
        if (rt_example_spec_from_pb(h->example_spec, spec, err, sizeof err) < 0)
            return rt_call_fail(c, RT_EINVAL, "example_spec: %s", err);
    } else if (h->n_parts < 1 || h->n_parts > 3)
        return rt_call_fail(c, RT_EDATA,
                            "a dataset has 1 to 3 parts (features [+ labels] [+ sample weights]); "
                            "got %zu", h->n_parts);
    uint64_t sum = 0;
    for (size_t i = 0; i < h->n_parts; i++) {
        const Rtrain__V1__DataPart *p = h->parts[i];
        rt_data_part *d = &parts[i];
        memset(d, 0, sizeof *d);
        d->role = (rt_data_role)p->role;
        d->format = (rt_data_format)p->format;
        d->length = p->length;
        d->dtype = (rt_dtype)p->dtype;
        if (p->n_shape > RT_MAX_DIMS)
            return rt_call_fail(c, RT_EDATA, "part %zu shape has more than %d dims", i, RT_MAX_DIMS);
        d->ndim = (int)p->n_shape;
        if (p->n_shape) /* shape is NULL when empty (CSV/NPY/IDX parts): memcpy(NULL) is UB */
            memcpy(d->dims, p->shape, sizeof(int64_t) * p->n_shape);
        d->label_column = p->label_column;
        d->csv_header = p->csv_header;
        d->normalize = p->normalize;
        d->compression = (rt_tfr_compression)p->compression;
        d->spec = tfr ? spec : NULL;
        if ((int)p->storage < 0 || (int)p->storage > 2)
            return rt_call_fail(c, RT_EINVAL, "part %zu has unknown storage %d", i,
                                (int)p->storage);
        if ((p->storage || p->shuffle_buffer) && tfr)
            return rt_call_fail(c, RT_EINVAL,
                                "part %zu: a TFRecord set takes storage from example_spec", i);
        if ((p->storage || p->shuffle_buffer) && p->role != RTRAIN__V1__DATA_ROLE__ROLE_FEATURES &&
            p->role != RTRAIN__V1__DATA_ROLE__ROLE_BOTH)
            return rt_call_fail(c, RT_EINVAL,
                                "part %zu: storage and shuffle_buffer are for the features part", i);
        if (p->shuffle_buffer > RT_DATA_MAX_SHUFFLE)
            return rt_call_fail(c, RT_EINVAL, "part %zu: shuffle_buffer %llu is too large", i,
                                (unsigned long long)p->shuffle_buffer);
        d->storage = (int)p->storage;
        d->shuffle_buffer = (int64_t)p->shuffle_buffer;
        if (p->shard_hash.len || p->held) {
            if (!tfr || p->shard_hash.len != 16)
                return rt_call_fail(c, RT_EINVAL,
                                    "part %zu: shard_hash (16 bytes, XXH3-128) is for TFRecord parts",
                                    i);
            memcpy(d->shard_hash, p->shard_hash.data, 16);
            d->has_shard_hash = 1;
            d->held = p->held;
        }
        if (p->length > UINT64_MAX - sum)
            return rt_call_fail(c, RT_EDATA, "part lengths overflow");
        sum += p->length;
    }
    if (h->total_bytes && h->total_bytes != sum)
        return rt_call_fail(c, RT_EDATA, "total_bytes %llu is not the sum of part lengths %llu",
                            (unsigned long long)h->total_bytes, (unsigned long long)sum);
    *n_parts = (int)h->n_parts;
    *total = sum;
    return 0;
}

/* Place one run of stream bytes and hash it, a cache-sized block at a
 * time: the hash reads a block from memory and the copy into the final
 * buffer reads it again from cache (a slice can be megabytes: hashing it
 * whole, then copying it, would read it from memory twice). */
#define RT__UP_BLOCK (64u << 10)
static void up_place(upload_st *u, const uint8_t *p, size_t n)
{
    up_data *d = u->d;
    while (n) {
        size_t b = n < RT__UP_BLOCK ? n : RT__UP_BLOCK;
        XXH3_128bits_update(d->x3, p, b);
        size_t at, run;
        for (size_t o = 0; o < b && (run = rt_sample_run(d->hashed + o, b - o, &at)); o += at + run)
            XXH3_128bits_update(d->xs, p + o + at, run);
        d->hashed += b;
        if (d->x64)
            XXH64_update(d->x64, p, b);
        rt_data_place(u->parts, u->n_parts, &d->cur, d->buf, p, b);
        p += b;
        n -= b;
    }
}

static void *up_lane_main(void *arg)
{
    up_lane *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->count && !l->stop)
            pthread_cond_wait(&l->cv, &l->mu);
        if (!l->count)
            break;
        up_item it = l->q[l->head];
        l->head = (l->head + 1) % RT__LANE_DEPTH;
        l->count--;
        l->working = 1;
        pthread_mutex_unlock(&l->mu);
        for (size_t i = 0; i < it.n; i++)
            up_place(l->u, it.sp[i].p, it.sp[i].n);
        grpc_byte_buffer_destroy(it.bb);
        free(it.sp);
        pthread_mutex_lock(&l->mu);
        l->working = 0;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* A lane for a large upload; none (everything inline) if no thread. */
static void up_lane_start(upload_st *u)
{
    if (u->stream_total < RT__LANE_MIN)
        return;
    up_lane *l = calloc(1, sizeof *l);
    if (!l)
        return;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->u = u;
    if (pthread_create(&l->t, NULL, up_lane_main, l) != 0) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
        free(l);
        return;
    }
    u->lane = l;
}

/* Hand one chunk's slices to the lane: it owns bb and sp from here. */
static void up_lane_put(up_lane *l, grpc_byte_buffer *bb, rt_wire_span *sp, size_t n)
{
    pthread_mutex_lock(&l->mu);
    while (l->count == RT__LANE_DEPTH)
        pthread_cond_wait(&l->cv, &l->mu);
    l->q[(l->head + l->count) % RT__LANE_DEPTH] = (up_item){bb, sp, n};
    l->count++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void up_drain(upload_st *u)
{
    up_lane *l = u->lane;
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    while (l->count || l->working)
        pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
}

static void up_lane_stop(upload_st *u)
{
    up_lane *l = u->lane;
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->t, NULL); /* it places what is queued first */
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
    u->lane = NULL;
}

/* What an upload reserves (--max-upload-bytes, the principal's upload
 * quota and the memory budget) is what has arrived, plus the bytes of its
 * held shards, plus a window, never more than its declared size: uploads
 * that declare gigabytes and send nothing hold a window each, not their
 * declarations, and cannot starve the others. The window is the server
 * cap's share for twice --max-uploads uploads (at least 1 MiB), so even
 * --max-uploads stalled ones leave half the cap free. Growing past the cap
 * fails the upload (RESOURCE_EXHAUSTED) where it stands; with a
 * content_hash its bytes are kept for a resume. */
static uint64_t up_window(const rt_srv *s)
{
    uint64_t cap = s->cfg.max_upload_bytes ? s->cfg.max_upload_bytes
                                           : 2 * s->cfg.max_dataset_bytes;
    uint64_t w = cap / (2 * (uint64_t)(s->cfg.max_uploads > 0 ? s->cfg.max_uploads : 1));
    return w < (1u << 20) ? (1u << 20) : w;
}

/* Cover arrived bytes of the stream: grown by a window once they pass
 * the reservation (at the header, first: at once). */
static int up_reserve(rt_call *c, upload_st *u, uint64_t arrived, int first)
{
    uint64_t want = arrived + (u->total - u->stream_total);
    if (!first && want <= u->reserved && want <= c->up_bytes)
        return 0;
    uint64_t t = want + up_window(c->srv);
    if (t > u->total || t < want)
        t = u->total;
    int rc;
    if (c->up_bytes < t && (rc = rt_srv_upload_reserve(c, t - c->up_bytes)) < 0) {
        u->cut_short = 1;
        return rc;
    }
    if (u->reserved < t) {
        /* over the principal's quota, its own kept uploads make room */
        char err[200];
        while ((rc = rt_principal_reserve(c->who, RT_Q_UPLOAD_BYTES, t - u->reserved, err,
                                          sizeof err)) < 0 &&
               rt_upload_store_drop_one(&c->srv->upstore, c->who))
            ;
        if (rc < 0) {
            u->cut_short = 1;
            return rt_call_fail(c, rc, "%s", err);
        }
        u->reserved = t;
    }
    return 0;
}

/* The header: parts, limits, reservations, and the buffer, fresh or taken
 * back from a kept broken upload (resume_offset). */
static int upload_begin(rt_call *c, upload_st *u, const Rtrain__V1__DatasetHeader *h)
{
    int rc = need_session(c, h->session_id);
    if (rc < 0)
        return rc;
    if ((rc = parts_from_header(c, h, u->parts, &u->n_parts, &u->total, &u->spec)) < 0)
        return rc;
    if (u->total > c->srv->cfg.max_dataset_bytes)
        return rt_call_fail(c, RT_ETOOBIG, "dataset of %llu bytes is over the limit of %llu",
                            (unsigned long long)u->total,
                            (unsigned long long)c->srv->cfg.max_dataset_bytes);
    if (h->content_hash.len) {
        if (h->content_hash.len != 16)
            return rt_call_fail(c, RT_EINVAL, "content_hash must be 16 bytes (XXH3-128)");
        memcpy(u->content_hash_given, h->content_hash.data, 16);
        u->has_content_hash = 1;
        rt_data_key(u->content_hash_given, u->parts, u->n_parts, u->key);
    }
    u->no_checksum = h->no_checksum;
    u->hash_later = h->hash_later;
    if (u->hash_later && (u->has_content_hash || h->resume_offset))
        return rt_call_fail(c, RT_EINVAL, "hash_later is for a header without %s",
                            u->has_content_hash ? "content_hash" : "resume_offset");
    if ((u->no_checksum || h->resume_offset) && !u->has_content_hash && !u->hash_later)
        return rt_call_fail(c, RT_EINVAL, "%s needs the header's content_hash (or hash_later)",
                            u->no_checksum ? "no_checksum" : "resume_offset");
    if (h->sample_hash.len) {
        if (h->sample_hash.len != 16)
            return rt_call_fail(c, RT_EINVAL, "sample_hash must be 16 bytes (XXH3-128)");
        memcpy(u->sample_given, h->sample_hash.data, 16);
        u->has_sample = 1;
    }
    snprintf(u->name, sizeof u->name, "%s", h->name);
    u->stream_total = 0;
    for (int i = 0; i < u->n_parts; i++) {
        u->any_held |= u->parts[i].held;
        u->stream_total += u->parts[i].held ? 0 : u->parts[i].length;
    }
    if ((h->resume_offset || u->hash_later || u->has_sample) && u->any_held)
        return rt_call_fail(c, RT_EINVAL, "%s with held shards",
                            h->resume_offset ? "resume_offset"
                            : u->hash_later  ? "hash_later"
                                             : "sample_hash");
    /* What a broken upload of this content left: taken for a resume, or
     * dropped by a fresh start (its bytes would only be held twice). */
    rt_upload_kept *k = u->has_content_hash ? rt_upload_store_take(&c->srv->upstore, c->who, u->key) : NULL;
    if (h->resume_offset && (!k || k->offset != h->resume_offset)) {
        uint64_t have = k ? k->offset : 0;
        rt_upload_kept_free(k);
        return rt_call_fail(c, RT_ENOTFOUND,
                            "no broken upload to resume at %llu (the daemon holds %llu bytes of "
                            "it); send it all",
                            (unsigned long long)h->resume_offset, (unsigned long long)have);
    }
    if (k && !h->resume_offset) {
        rt_upload_kept_free(k);
        k = NULL;
    }
    /* The upload's count is charged before its buffer exists, against the
     * principal; its bytes as they come (up_reserve). A resume takes over
     * the kept upload's charge. */
    char err[200];
    if ((rc = rt_principal_reserve(c->who, RT_Q_UPLOADS, 1, err, sizeof err)) < 0) {
        rt_upload_kept_free(k);
        return rt_call_fail(c, rc, "%s", err);
    }
    u->who = c->who;
    u->busy = 1;
    rt_bufpool_busy(1);
    if (k) {
        u->reserved = k->bytes;
        u->d = k->st;
        u->resumed = k->offset;
        free(k); /* its charge and data are the upload's now */
        rt_metrics_upload(0, u->resumed);
        if ((rc = up_reserve(c, u, u->resumed, 1)) < 0)
            return rc;
    } else {
        if ((rc = up_reserve(c, u, 0, 1)) < 0)
            return rc;
        u->d = calloc(1, sizeof *u->d);
        if (u->d) {
            u->d->buf = rt_bufpool_get(u->total);
            u->d->x3 = XXH3_createState();
            u->d->xs = XXH3_createState();
            u->d->x64 = u->no_checksum ? NULL : XXH64_createState();
        }
        if (!u->d || !u->d->buf || !u->d->x3 || !u->d->xs || (!u->no_checksum && !u->d->x64))
            return rt_call_fail(c, RT_ENOMEM, "out of memory for a %llu-byte dataset",
                                (unsigned long long)u->total);
        if (u->d->x64)
            XXH64_reset(u->d->x64, 0);
        XXH3_128bits_reset(u->d->x3);
        XXH3_128bits_reset(u->d->xs);
    }
    u->have_header = 1;
    up_lane_start(u);
    return 0;
}

static Rtrain__V1__DatasetInfo *dataset_info(rt_call *c, const rt_dataset *ds, int dedup);

static int upload_chunk(rt_call *c, upload_st *u)
{
    Rtrain__V1__UploadChunk *q = REQ(c, Rtrain__V1__UploadChunk);
    if (u->done)
        return rt_call_fail(c, RT_EPROTO, "UploadChunk after the last one");
    if (!u->have_header) {
        if (!q->header)
            return rt_call_fail(c, RT_EPROTO, "the first UploadChunk has no header");
        int rc = upload_begin(c, u, q->header);
        if (rc < 0)
            return rc;
    } else if (q->header) {
        return rt_call_fail(c, RT_EPROTO, "UploadChunk header after the first chunk");
    }
    rt_srv_upload_touch(c);
    up_data *d = u->d;
    if (q->content_hash.len) {
        /* hash_later: the client hashed while it sent */
        if (!u->hash_later)
            return rt_call_fail(c, RT_EINVAL,
                                "a chunk's content_hash needs the header's hash_later");
        if (u->has_content_hash)
            return rt_call_fail(c, RT_EPROTO, "content_hash sent twice");
        if (q->content_hash.len != 16)
            return rt_call_fail(c, RT_EINVAL, "content_hash must be 16 bytes (XXH3-128)");
        memcpy(u->content_hash_given, q->content_hash.data, 16);
        u->has_content_hash = 1;
        rt_data_key(u->content_hash_given, u->parts, u->n_parts, u->key);
        /* a fresh start of this content: a broken one's bytes would only
         * be held twice */
        rt_upload_kept_free(rt_upload_store_take(&c->srv->upstore, c->who, u->key));
        /* Stored already (the probe missed it: a restart, or its entry
         * went): answered now, the rest of the stream is not read. */
        rt_dataset *ds = rt_data_store_find_key(c->srv->data, c->who, u->key);
        if (ds) {
            c->ds = ds;
            u->done = 1; /* nothing to keep */
            Rtrain__V1__UploadResponse *r =
                NEW(c, Rtrain__V1__UploadResponse, RTRAIN__V1__UPLOAD_RESPONSE__INIT);
            if (!r || !(r->dataset = dataset_info(c, ds, 1)))
                return OOM(c);
            r->bytes_received = d->received;
            c->resp = &r->base;
            return 0;
        }
    }
    /* The data: in place in the received slices, or decoded (compressed). */
    size_t len = 0;
    if (c->bulk) {
        for (size_t i = 0; i < c->n_bulk; i++)
            len += c->bulk[i].n;
    } else {
        len = q->data.len;
    }
    if (len) {
        if (q->offset != d->received)
            return rt_call_fail(c, RT_EPROTO, "chunk offset %llu, expected %llu",
                                (unsigned long long)q->offset, (unsigned long long)d->received);
        if (len > u->stream_total - d->received)
            return rt_call_fail(c, RT_EDATA, "chunk at %llu overruns the %llu bytes declared",
                                (unsigned long long)q->offset,
                                (unsigned long long)u->stream_total);
        int rc = up_reserve(c, u, d->received + len, 0);
        if (rc < 0)
            return rc;
        d->received += len;
        if (c->bulk && u->lane) {
            /* the slices go to the lane as they are; the call lets go */
            up_lane_put(u->lane, c->payload, c->bulk, c->n_bulk);
            c->payload = NULL;
            c->bulk = NULL;
            c->n_bulk = 0;
        } else if (c->bulk) {
            for (size_t i = 0; i < c->n_bulk; i++)
                up_place(u, c->bulk[i].p, c->bulk[i].n);
        } else {
            up_drain(u); /* in order after what the lane holds */
            up_place(u, q->data.data, q->data.len);
        }
        rt_metrics_upload(len, 0);
    }
    if (q->last) {
        if (u->hash_later && !u->has_content_hash)
            return rt_call_fail(c, RT_EINVAL,
                                "hash_later, but no chunk up to the last had the content_hash");
        up_drain(u);
        if (d->x64) {
            uint64_t sum = XXH64_digest(d->x64);
            if (sum != q->checksum)
                return rt_call_fail(c, RT_ECHECKSUM,
                                    "checksum mismatch: XXH64 of the data is %016llx, the client "
                                    "sent %016llx",
                                    (unsigned long long)sum, (unsigned long long)q->checksum);
        }
        if (d->received != u->stream_total)
            return rt_call_fail(c, RT_ETRUNCATED, "upload ended at %llu of %llu bytes",
                                (unsigned long long)d->received,
                                (unsigned long long)u->stream_total);
        u->done = 1;
    }
    return 0;
}

static int h_upload_chunk(rt_call *c)
{
    upload_st *u = c->st;
    if (!u) {
        u = calloc(1, sizeof *u);
        if (!u)
            return OOM(c);
        u->srv = c->srv;
        c->st = u;
        c->st_free = upload_st_free;
        c->st_done = upload_st_done;
    }
    int rc = upload_chunk(c, u);
    if (rc < 0 && !u->cut_short)
        u->bad = 1; /* refused data is not kept for a resume (an upload
                       cut short by the cap is: its bytes are good) */
    return rc;
}

static Rtrain__V1__DatasetInfo *dataset_info(rt_call *c, const rt_dataset *ds, int dedup)
{
    Rtrain__V1__DatasetInfo *i = NEW(c, Rtrain__V1__DatasetInfo, RTRAIN__V1__DATASET_INFO__INIT);
    if (!i)
        return NULL;
    i->dataset_id = rt_call_strdup(c, ds->id);
    i->samples = (uint64_t)ds->n;
    i->x_shape = dims_pb(c, ds->x_ndim, ds->x_dims);
    i->n_x_shape = (size_t)ds->x_ndim;
    i->y_dtype = ds->y ? (Rtrain__V1__DType)ds->y_dtype : RTRAIN__V1__DTYPE__DTYPE_UNSPECIFIED;
    i->y_shape = dims_pb(c, ds->y_ndim, ds->y_dims);
    i->n_y_shape = (size_t)ds->y_ndim;
    i->bytes = rt_dataset_bytes(ds);
    if (ds->stream) {
        i->streamed = 1;
        i->spool_bytes = rt_stream_file_bytes(ds->stream);
    }
    i->deduplicated = dedup;
    i->records_skipped = (uint64_t)ds->skipped;
    if (ds->skipped && !(i->first_skipped = rt_call_strdup(c, ds->skip_msg)))
        return NULL;
    return i->dataset_id && i->x_shape && i->y_shape ? i : NULL;
}

static int upload_work(rt_call *c)
{
    upload_st *u = c->st;
    up_lane_stop(u); /* drained at the last chunk: the thread just ends */
    up_data *d = u->d;
    rt_ingest in = {.data = c->srv->data, .state = c->srv->state, .uploads = &c->srv->upstore,
                    .who = c->who, .name = u->name, .parts = u->parts, .n_parts = u->n_parts,
                    .any_held = u->any_held, .buf = &d->buf, .total = u->total, .cur = &d->cur,
                    .buf_free = rt_bufpool_put,
                    .content_given = u->has_content_hash ? u->content_hash_given : NULL,
                    .sample_given = u->has_sample ? u->sample_given : NULL,
                    .max_dataset_bytes = c->srv->cfg.max_dataset_bytes,
                    .max_inflate_ratio = c->srv->cfg.max_inflate_ratio,
                    .max_store_bytes = c->srv->cfg.max_store_bytes};
    if (!u->any_held) {
        XXH128_canonical_t h;
        XXH128_canonicalFromHash(&h, XXH3_128bits_digest(d->x3));
        memcpy(in.stream_hash, h.digest, 16);
        XXH128_canonicalFromHash(&h, XXH3_128bits_digest(d->xs));
        memcpy(in.sample_hash, h.digest, 16);
    }
    rt_dataset *kept;
    int dedup;
    char err[512];
    int rc = rt_ingest_upload(&in, &kept, &dedup, err, sizeof err);
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", err);
    c->ds = kept;
    rt_bufpool_put(d->buf); /* parsed (or adopted: then NULL); the raw bytes are not kept */
    d->buf = NULL;
    rt_srv_upload_release(c);
    Rtrain__V1__UploadResponse *r = NEW(c, Rtrain__V1__UploadResponse, RTRAIN__V1__UPLOAD_RESPONSE__INIT);
    if (!r || !(r->dataset = dataset_info(c, kept, dedup)))
        return OOM(c);
    r->bytes_received = d->received;
    r->bytes_resumed = u->resumed;
    c->resp = &r->base;
    return 0;
}

static int h_upload_end(rt_call *c)
{
    upload_st *u = c->st;
    if (!u || !u->have_header)
        return rt_call_fail(c, RT_ETRUNCATED, "upload ended before its header");
    if (!u->done)
        return rt_call_fail(c, RT_ETRUNCATED,
                            "upload ended without a last chunk (%llu of %llu bytes received)",
                            (unsigned long long)u->d->received, (unsigned long long)u->total);
    c->work = upload_work;
    c->needs_device = 0;
    c->est_ns = u->total * 4; /* parsing ~4 ns/byte: small ones stay inline */
    if (u->parts[0].format == RT_FMT_TFRECORD)
        c->est_ns = u->total * 64; /* JPEG decoding: ~60 ns per compressed byte */
    return 0;
}

static int h_find_dataset(rt_call *c)
{
    Rtrain__V1__FindDatasetRequest *q = REQ(c, Rtrain__V1__FindDatasetRequest);
    int rc = need_session(c, q->session_id);
    if (rc < 0)
        return rc;
    int probe = q->content_hash.len == 0 && q->sample_hash.len;
    if (probe && q->sample_hash.len != 16)
        return rt_call_fail(c, RT_EINVAL, "sample_hash must be 16 bytes (XXH3-128), got %zu",
                            q->sample_hash.len);
    if (!probe && q->content_hash.len != 16)
        return rt_call_fail(c, RT_EINVAL, "content_hash must be 16 bytes (XXH3-128), got %zu",
                            q->content_hash.len);
    if (!q->header)
        return rt_call_fail(c, RT_EINVAL, "FindDatasetRequest needs the upload's header");
    /* parts_from_header refuses more than RT_DATA_MAX_PARTS; room for what
     * the header has (the arena zeroes what it gives). */
    size_t np = q->header->n_parts >= 1 && q->header->n_parts <= RT_DATA_MAX_PARTS
                    ? q->header->n_parts : 1;
    rt_data_part *parts = rt_call_alloc(c, sizeof(rt_data_part) * np);
    rt_example_spec *spec = rt_call_alloc(c, sizeof *spec);
    int n;
    uint64_t total;
    if (!parts || !spec)
        return OOM(c);
    if ((rc = parts_from_header(c, q->header, parts, &n, &total, spec)) < 0)
        return rc;
    uint8_t key[16];
    Rtrain__V1__FindDatasetResponse *r =
        NEW(c, Rtrain__V1__FindDatasetResponse, RTRAIN__V1__FIND_DATASET_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    if (probe) {
        /* Probable: who holds a dataset, or a broken upload, with these
         * parts and this sample. Then the client hashes it all first. */
        rt_data_key(q->sample_hash.data, parts, n, key);
        uint8_t keys[8][16];
        int nk = rt_upload_store_probe_keys(&c->srv->upstore, key, keys, 8);
        r->probable = rt_upload_store_has_probe(&c->srv->upstore, c->who, key);
        for (int i = 0; i < nk && !r->probable; i++) {
            rt_dataset *ds = rt_data_store_find_key(c->srv->data, c->who, keys[i]);
            r->probable = ds != NULL;
            rt_dataset_release(ds);
        }
        c->resp = &r->base;
        return 0;
    }
    rt_data_key(q->content_hash.data, parts, n, key);
    c->ds = rt_data_store_find_key(c->srv->data, c->who, key);
    int shards = 0;
    for (int i = 0; i < n; i++)
        shards += parts[i].has_shard_hash;
    if (!c->ds && shards) {
        r->shard_held = rt_call_alloc(c, sizeof *r->shard_held * (size_t)n);
        if (!r->shard_held)
            return OOM(c);
        r->n_shard_held = (size_t)n;
        for (int i = 0; i < n; i++) {
            uint8_t skey[16];
            rt_data_shard_key(rt_principal_name(c->who), parts[i].shard_hash, skey);
            r->shard_held[i] = parts[i].has_shard_hash &&
                               rt_shard_cache_has(rt_data_store_shards(c->srv->data), skey,
                                                  parts[i].length);
        }
    }
    if (c->ds) {
        r->found = 1;
        if (!(r->dataset = dataset_info(c, c->ds, 1)))
            return OOM(c);
    } else {
        r->resume_offset = rt_upload_store_offset(&c->srv->upstore, c->who, key);
    }
    c->resp = &r->base;
    return 0;
}

/* Work stopped early: the client went away (CANCELLED; it will not see
 * this) or the daemon's grace period ended (UNAVAILABLE: retry elsewhere or
 * later). Either way the client must not take it for a completed call. */
static int stopped_fail(rt_call *c, int64_t done, int64_t asked)
{
    if (__atomic_load_n(&c->srv->hard_cancel, __ATOMIC_ACQUIRE))
        return rt_call_fail(c, RT_EUNAVAILABLE,
                            "the daemon is shutting down: stopped after %lld of %lld steps",
                            (long long)done, (long long)asked);
    return rt_call_fail(c, RT_ECANCELLED, "cancelled after %lld of %lld steps", (long long)done,
                        (long long)asked);
}

/* --------------------------------------------------------------- RunSteps */
typedef struct run_cb {
    rt_call *c;
    Rtrain__V1__EpochEnd **epochs;
    size_t n_epochs, cap_epochs;
    int stop_for_val;
    int hit_epoch_end;
    int cancelled;
    int stopped;           /* Control's stop */
    uint64_t gen;          /* this call's run_gen */
    uint64_t mark;         /* epoch clock (rt_program_epoch_clock_end) */
    int stop_on_nan;       /* the request's */
    int nan_stop;          /* stopped at a non-finite loss */
    int64_t nan_step;      /* the first step with one, 0 = none */
    float nan_loss;
} run_cb;

static Rtrain__V1__StateKind state_kind(const rt_srv *s)
{
    return s->state ? RTRAIN__V1__STATE_KIND__STATE_DISK : RTRAIN__V1__STATE_KIND__STATE_MEMORY;
}

/* A step's loss that is NaN or infinite: recorded (the first), and with
 * stop_on_nan the run stops after that step. 1 = stop. */
static int non_finite(int64_t *first, int stop_on_nan, int *stopped, const rt_step_info *info)
{
    if (isfinite(info->loss))
        return 0;
    if (!*first)
        *first = info->step;
    if (!stop_on_nan)
        return 0;
    *stopped = 1;
    return 1;
}

static int nan_fail(rt_call *c, int64_t step, float loss)
{
    return rt_call_fail(c, RT_ESTATE, "loss is %s at step %lld (stop_on_nan): training stopped "
                        "after that step; the weights are that step's", isnan(loss) ? "NaN"
                        : "infinite", (long long)step);
}

static Rtrain__V1__EpochEnd *epoch_pb(rt_call *c, int64_t epoch, const rt_metrics *train,
                                      int64_t steps, uint64_t exec_ns)
{
    Rtrain__V1__EpochEnd *e = NEW(c, Rtrain__V1__EpochEnd, RTRAIN__V1__EPOCH_END__INIT);
    if (!e)
        return NULL;
    e->epoch = (uint64_t)epoch;
    e->train = metrics_pb(c, train);
    e->steps = (uint64_t)steps;
    e->execute_ns = exec_ns;
    return e->train ? e : NULL;
}

static int run_step_cb(void *ud, const rt_step_info *info)
{
    run_cb *r = ud;
    rt_srv_pause_point(r->c->srv, info->step);
    rt_call_yield(r->c);
    if (rt_call_is_cancelled(r->c)) {
        r->cancelled = 1;
        return 1;
    }
    if (non_finite(&r->nan_step, r->stop_on_nan, &r->nan_stop, info)) {
        r->nan_loss = info->loss;
        return 1;
    }
    if (rt_program_stop_asked(r->c->prog, r->gen))
        r->stopped = 1;
    if (!info->epoch_end)
        return r->stopped;
    if (r->n_epochs == r->cap_epochs) {
        size_t nc = r->cap_epochs ? r->cap_epochs * 2 : 8;
        Rtrain__V1__EpochEnd **nv = rt_call_alloc(r->c, sizeof *nv * nc);
        if (!nv)
            return 1;
        if (r->n_epochs)
            memcpy(nv, r->epochs, sizeof *nv * r->n_epochs);
        r->epochs = nv;
        r->cap_epochs = nc;
    }
    Rtrain__V1__EpochEnd *e = epoch_pb(r->c, info->epoch, &info->epoch_metrics, info->step,
                                       rt_program_epoch_clock_end(r->c->prog, &r->mark));
    if (!e)
        return 1;
    r->epochs[r->n_epochs++] = e;
    r->hit_epoch_end = 1;
    /* Stop here so the caller can validate between epochs. */
    return r->stop_for_val || r->stopped;
}

static int run_steps_work(rt_call *c)
{
    Rtrain__V1__RunStepsRequest *q = REQ(c, Rtrain__V1__RunStepsRequest);
    rt_program *p = c->prog;
    Rtrain__V1__RunStepsResponse *r = NEW(c, Rtrain__V1__RunStepsResponse, RTRAIN__V1__RUN_STEPS_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    c->resp = &r->base;
    rt_seq_rec rec;
    if (rt_program_replay(p, q->seq, &rec)) {
        r->replayed = 1;
        r->boot_id = c->srv->boot_id;
        r->state = state_kind(c->srv);
        r->global_step = (uint64_t)rt_exec_global_step(rt_program_exec(p));
        if (rec.seq == q->seq) { /* it ran: the original answer */
            r->recorded = 1;
            r->recorded_step = (uint64_t)rec.global_step;
        }
        r->last = metrics_pb(c, &rec.last);
        r->mean = metrics_pb(c, &rec.mean);
        return r->last && r->mean ? 0 : OOM(c);
    }
    rt_data d, vd;
    int rc = train_data(c, &d, &vd);
    if (rc < 0)
        return rc;
    if ((rc = apply_lr(c, q->learning_rate)) < 0)
        return rc;
    float *losses = NULL;
    if (q->return_losses) {
        losses = rt_call_alloc(c, sizeof(float) * q->steps);
        if (!losses)
            return OOM(c);
    }
    /* stop at epoch ends to validate, or to draw the next epoch's
     * augmentation; val_at_end validates once, after the last step */
    int val_in = c->val_ds && !q->val_at_end;
    run_cb cb = {.c = c, .stop_for_val = val_in || c->ds->img != NULL,
                 .gen = rt_program_run_begin(p), .stop_on_nan = q->stop_on_nan};
    int64_t left = (int64_t)q->steps, done = 0;
    double loss_sum = 0, acc_sum = 0;
    int64_t samples = 0;
    rt_train_result res;
    memset(&res, 0, sizeof res);
    uint64_t exec_ns = 0;
    while (left > 0) {
        rt_train_result part;
        cb.hit_epoch_end = 0;
        if ((rc = train_x(c, &d)) < 0) {
            rt_program_run_end(p);
            return rc;
        }
        cb.mark = rt_now_ns();
        char derr[256] = "";
        rc = rt_dist_train(rt_program_exec(p), &d, d.x == c->ds->x ? c->ds->key : NULL, left, &part,
                           run_step_cb, &cb, losses ? losses + done : NULL, derr, sizeof derr);
        if (rc < 0) {
            rt_program_run_end(p);
            return rt_call_fail(c, rc, "%s", derr);
        }
        rt_program_epoch_clock_pause(p, cb.mark);
        exec_ns += part.execute_ns;
        if (cb.cancelled) {
            rt_program_run_end(p);
            rt_program_set_partial(p, done + part.steps_run > 0);
            return stopped_fail(c, done + part.steps_run, (int64_t)q->steps);
        }
        if (cb.nan_stop) {
            rt_program_run_end(p);
            rt_program_set_partial(p, 1);
            return nan_fail(c, cb.nan_step, cb.nan_loss);
        }
        left -= part.steps_run;
        done += part.steps_run;
        loss_sum += part.mean.loss * (double)part.mean.samples;
        acc_sum += part.mean.acc * (double)part.mean.samples;
        samples += part.mean.samples;
        res = part;
        if (cb.hit_epoch_end && val_in && cb.n_epochs) {
            rt_metrics vm;
            if ((rc = rt_exec_evaluate(rt_program_exec(p), &vd, &vm)) < 0) {
                rt_program_run_end(p);
                return engine_fail(c, rc);
            }
            Rtrain__V1__EpochEnd *e = cb.epochs[cb.n_epochs - 1];
            if (!(e->val = metrics_pb(c, &vm))) {
                rt_program_run_end(p);
                return OOM(c);
            }
        }
        if (cb.stopped)
            break;
        if (part.steps_run == 0)
            break; /* defensive: the engine made no progress */
    }
    rt_program_run_end(p);
    r->stopped = cb.stopped;
    note_step_time(p, exec_ns, done);
    rt_metrics mean = {.loss = samples ? loss_sum / (double)samples : NAN,
                       .acc = samples ? acc_sum / (double)samples : NAN,
                       .samples = samples};
    rt_program_run_done(p, q->seq, &res.last, &mean);
    if (c->srv->state && (q->checkpoint || rt_state_checkpoint_due(c->srv->state, p,
                                                                   q->checkpoint_every_steps,
                                                                   q->checkpoint_every_s)) &&
        (rc = durable_checkpoint(c, p, q->checkpoint_policy)) < 0)
        return rc;
    r->global_step = (uint64_t)rt_exec_global_step(rt_program_exec(p));
    r->boot_id = c->srv->boot_id;
    r->state = state_kind(c->srv);
    r->non_finite = cb.nan_step != 0;
    r->first_non_finite_step = (uint64_t)cb.nan_step;
    r->last = metrics_pb(c, &res.last);
    r->mean = metrics_pb(c, &mean);
    if (losses) {
        r->losses = losses;
        r->n_losses = (size_t)done;
    }
    r->epochs = cb.epochs;
    r->n_epochs = cb.n_epochs;
    if (q->val_at_end && c->val_ds) {
        rt_metrics vm;
        if ((rc = rt_exec_evaluate(rt_program_exec(p), &vd, &vm)) < 0)
            return engine_fail(c, rc);
        if (!(r->val = metrics_pb(c, &vm)))
            return OOM(c);
    }
    return r->last && r->mean ? 0 : OOM(c);
}

static int h_run_steps(rt_call *c)
{
    Rtrain__V1__RunStepsRequest *q = REQ(c, Rtrain__V1__RunStepsRequest);
    int rc;
    if ((rc = need_program(c, q->session_id, q->program_id)) < 0)
        return rc;
    /* From here on the call counts for the program's pipeline: a failure
     * stops the calls sent after it (rt_srv.c, pipe_complete). */
    c->seq = q->seq;
    if ((rc = need_train_data(c, q->dataset_id, q->val_dataset_id)) < 0 ||
        (rc = refuse_if_stopping(c)) < 0)
        return rc;
    if (q->boot_id && q->boot_id != c->srv->boot_id)
        return rt_call_fail(c, RT_ERESTARTED, "the daemon restarted since this client's last "
                            "call: nothing was applied; reattach (Checkpoint) and resend");
    if (q->steps == 0)
        return rt_call_fail(c, RT_EINVAL, "steps must be at least 1");
    if ((rc = check_lr(c, q->learning_rate)) < 0)
        return rc;
    if (q->steps > RT_MAX_STEPS_PER_CALL)
        return rt_call_fail(c, RT_ETOOBIG, "steps %llu is over the limit of %llu per call",
                            (unsigned long long)q->steps, RT_MAX_STEPS_PER_CALL);
    if (q->val_at_end && !c->val_ds)
        return rt_call_fail(c, RT_EINVAL, "val_at_end needs val_dataset_id");
    if (q->return_losses && q->steps > RT_MAX_RETURN_LOSSES)
        return rt_call_fail(c, RT_ETOOBIG, "return_losses allows at most %llu steps",
                            RT_MAX_RETURN_LOSSES);
    if ((rc = check_train_data(c)) < 0)
        return rc;
    c->work = run_steps_work;
    c->needs_device = 1;
    c->est_ns = clamp_est((double)q->steps * rt_program_step_ns(c->prog));
    if (q->after_seq) {
        if (!q->seq || q->after_seq >= q->seq)
            return rt_call_fail(c, RT_EINVAL, "after_seq %llu must be below seq %llu",
                                (unsigned long long)q->after_seq, (unsigned long long)q->seq);
        /* Pipelined (rt_srv.c, pipe_hold): runs after its predecessor. */
        c->after_seq = q->after_seq;
    }
    return 0;
}

/* -------------------------------------------------------------------- Fit */
/* A Fit with a fit_id is resumable (rt_fit_rec): its start, steps and the
 * results of its last epochs go with every checkpoint, and a Fit sent again
 * with the same id after a restart continues from the restored state. A
 * fit whose epochs are the engine's ("aligned": steps_per_epoch is the
 * data set's and the exec was at an epoch start) takes its epoch metrics
 * from the exec's epoch accumulators, which a checkpoint holds, so it can
 * stop and resume at any step: the interval checkpoints (per fit or the
 * daemon's) and a stopping daemon's exit checkpoint land between steps.
 * Another fit stops and resumes at its epoch ends only. */
typedef struct fit_cb {
    rt_call *c;
    const Rtrain__V1__FitRequest *q;
    uint32_t every;
    int64_t epoch, spe, in_epoch;
    int64_t n, bs;         /* dataset samples, batch size */
    double loss_sum, acc_sum;
    int64_t samples;
    uint64_t mark;         /* epoch clock (rt_program_epoch_clock_end) */
    uint64_t gen;          /* this call's run_gen */
    int stopped;           /* Control's stop */
    int aligned;           /* rt_fit_rec.aligned */
    int resumable;         /* the request has a fit_id */
    int draining;          /* stopped for a stopping daemon's exit checkpoint */
    int ckpt_rc;           /* an interval checkpoint failed (the call fails) */
    rt_metrics ep;         /* aligned: the epoch's metrics at its last step */
    float last_lr;         /* the previous step's rate (0 before the first) */
    int nan_stop;          /* stopped at a non-finite loss (stop_on_nan) */
    int64_t nan_step;      /* the first step with one, 0 = none */
    float nan_loss;
} fit_cb;

/* What every FitEvent of the call carries: the daemon's boot, whether it
 * is durable, and the first non-finite loss so far. */
static void fit_stamp(rt_call *c, Rtrain__V1__FitEvent *ev, int64_t nan_step)
{
    ev->boot_id = c->srv->boot_id;
    ev->state = state_kind(c->srv);
    ev->non_finite = nan_step != 0;
    ev->first_non_finite_step = (uint64_t)nan_step;
}

static int fit_step_cb(void *ud, const rt_step_info *info)
{
    fit_cb *f = ud;
    rt_program *p = f->c->prog;
    f->in_epoch++;
    if (f->resumable)
        rt_program_fit_step(p);
    if (f->aligned) {
        f->loss_sum = info->epoch_metrics.loss;
        f->acc_sum = info->epoch_metrics.acc;
        f->samples = 1;
        if (info->epoch_end)
            f->ep = info->epoch_metrics;
    } else {
        /* Weight each step by its batch, as the epoch metrics are: batches
         * are taken in order and only an engine epoch's last one is smaller
         * (rt_exec_train), so step k of an engine epoch holds
         * min(bs, n - (k-1) bs) samples. */
        int64_t nb = f->n - (info->step_in_epoch - 1) * f->bs;
        nb = nb < f->bs ? nb : f->bs;
        nb = nb > 0 ? nb : 1;
        f->loss_sum += (double)info->loss * (double)nb;
        f->acc_sum += (double)info->acc * (double)nb;
        f->samples += nb;
    }
    if (info->epoch_end) /* RunSteps' epoch clock follows the engine's epochs */
        rt_program_epoch_clock_end(p, &f->mark);
    rt_srv_pause_point(f->c->srv, info->step);
    rt_call_yield(f->c);
    if (rt_call_is_cancelled(f->c))
        return 1;
    if (non_finite(&f->nan_step, f->q->stop_on_nan, &f->nan_stop, info)) {
        f->nan_loss = info->loss;
        return 1;
    }
    /* A new rate is reported at its first step, uncoalesced (StepProgress.
     * learning_rate), so a client can replay the run exactly. */
    int lr_changed = f->last_lr > 0 && info->lr != f->last_lr;
    f->last_lr = info->lr;
    if (rt_program_stop_asked(p, f->gen))
        f->stopped = 1;
    if ((f->every && f->in_epoch % f->every == 0 && f->in_epoch < f->spe) ||
        lr_changed) {
        Rtrain__V1__StepProgress sp = RTRAIN__V1__STEP_PROGRESS__INIT;
        Rtrain__V1__FitEvent ev = RTRAIN__V1__FIT_EVENT__INIT;
        sp.step = (uint64_t)info->step;
        sp.epoch = (uint64_t)f->epoch;
        sp.step_in_epoch = (uint64_t)f->in_epoch;
        sp.steps_per_epoch = (uint64_t)f->spe;
        sp.loss = (float)(f->loss_sum / (double)f->samples);
        sp.accuracy = (float)(f->acc_sum / (double)f->samples);
        sp.learning_rate = info->lr;
        ev.event_case = RTRAIN__V1__FIT_EVENT__EVENT_PROGRESS;
        ev.progress = &sp;
        fit_stamp(f->c, &ev, f->nan_step);
        uint64_t t0 = rt_now_ns();
        rt_call_stream_send(f->c, &ev.base, !lr_changed, 0);
        f->c->tm.encode_ns += rt_now_ns() - t0;
    }
    /* Between two steps of an epoch the exec's state is exact for an
     * aligned fit (the epoch's last step is the caller's: the engine moves
     * its cursor after this callback). */
    if (f->aligned && !info->epoch_end && !f->stopped && f->c->srv->state) {
        if (f->resumable && daemon_stopping(f->c)) {
            f->draining = 1;
            return 1;
        }
        if (rt_state_checkpoint_due(f->c->srv->state, p, f->q->checkpoint_every_steps,
                                    f->q->checkpoint_every_s)) {
            int rc = durable_checkpoint(f->c, p, f->q->checkpoint_policy);
            if (rc < 0) {
                f->ckpt_rc = rc;
                return 1;
            }
        }
    }
    return f->stopped;
}

static int fit_run(rt_call *c, uint64_t gen);

static int fit_work(rt_call *c)
{
    uint64_t gen = rt_program_run_begin(c->prog);
    rt_srv_dash_fit_begin(c);
    int rc = fit_run(c, gen);
    rt_program_run_end(c->prog);
    return rc;
}

static void fit_send_epoch(rt_call *c, Rtrain__V1__EpochEnd *e, int64_t nan_step)
{
    Rtrain__V1__FitEvent ev = RTRAIN__V1__FIT_EVENT__INIT;
    ev.event_case = RTRAIN__V1__FIT_EVENT__EVENT_EPOCH_END;
    ev.epoch_end = e;
    rt_srv_dash_epoch(c, e);
    fit_stamp(c, &ev, nan_step);
    uint64_t t1 = rt_now_ns();
    rt_call_stream_send(c, &ev.base, 0, 0);
    c->tm.encode_ns += rt_now_ns() - t1;
}

/* A resent Fit: where the fit stands on this daemon (its state may have
 * been restored from disk), after sending again the EpochEnds the client
 * did not get. *pos gets the steps already run of the current epoch. 1
 * when the fit had ended (only its final event is left). */
static int fit_resume(rt_call *c, int64_t spe, int64_t *pos)
{
    Rtrain__V1__FitRequest *q = REQ(c, Rtrain__V1__FitRequest);
    rt_program *p = c->prog;
    const rt_fit_rec *r = rt_program_fit(p);
    unsigned long long id = (unsigned long long)q->fit_id;
    if (r->epochs != q->epochs || r->spe != spe)
        return rt_call_fail(c, RT_EINVAL, "fit %016llx was started with %u epochs of %lld "
                            "steps, not %u of %lld", id, r->epochs, (long long)r->spe,
                            q->epochs, (long long)spe);
    int64_t done = rt_program_fit_epochs(p) - r->first_epoch;
    if ((int64_t)q->epochs_received > done)
        return rt_call_fail(c, RT_ESTATE, "fit %016llx: the daemon's state is at epoch %lld of "
                            "it, but the client has %u epochs (a newer checkpoint was lost)",
                            id, (long long)done, q->epochs_received);
    for (int64_t k = (int64_t)q->epochs_received + 1; k <= done; k++) {
        if (done - k >= RT_FIT_RING)
            return rt_call_fail(c, RT_ESTATE, "fit %016llx: epoch %lld's result is no longer "
                                "kept (the last %d are)", id, (long long)k, RT_FIT_RING);
        const rt_fit_epoch *fe = rt_program_fit_epoch(p, k);
        Rtrain__V1__EpochEnd *e = epoch_pb(c, fe->epoch, &fe->train, fe->steps, fe->execute_ns);
        if (!e || (fe->has_val && !(e->val = metrics_pb(c, &fe->val))))
            return OOM(c);
        fit_send_epoch(c, e, 0);
    }
    if (r->done)
        return 1;
    *pos = r->steps_done - done * spe;
    if (*pos < 0 || *pos >= spe)
        return rt_call_fail(c, RT_ESTATE, "fit %016llx: %lld steps run do not fit %lld epochs "
                            "of %lld", id, (long long)r->steps_done, (long long)done,
                            (long long)spe);
    if (*pos && !r->aligned)
        return rt_call_fail(c, RT_ESTATE, "fit %016llx stopped inside an epoch that is not the "
                            "data set's (steps_per_epoch): it resumes only at epoch ends", id);
    return 0;
}

static int fit_run(rt_call *c, uint64_t gen)
{
    Rtrain__V1__FitRequest *q = REQ(c, Rtrain__V1__FitRequest);
    rt_program *p = c->prog;
    rt_data d, vd;
    int rc = train_data(c, &d, &vd);
    if (rc < 0)
        return rc;
    int64_t bs = rt_plan_config(rt_program_plan(p))->batch_size;
    int64_t spe = q->steps_per_epoch ? q->steps_per_epoch : (d.n + bs - 1) / bs;
    const rt_fit_rec *fr = rt_program_fit(p);
    int resume = q->fit_id && fr->id == q->fit_id;
    int64_t pos = 0;
    uint32_t ep0 = 0;
    int ended = 0;
    if (resume) {
        if ((rc = fit_resume(c, spe, &pos)) < 0)
            return rc;
        ended = rc;
        ep0 = (uint32_t)(rt_program_fit_epochs(p) - fr->first_epoch);
        char pid[16];
        RT_LOG(RT_LOG_INFO, "fit %016llx on %s resumed at epoch %u step %lld",
               (unsigned long long)q->fit_id, rt_log_id(rt_program_id(p), pid), ep0 + 1,
               (long long)rt_exec_global_step(rt_program_exec(p)));
    } else {
        if (q->fit_id && q->epochs_received)
            return rt_call_fail(c, RT_ESTATE, "fit %016llx is unknown here, but the client has "
                                "%u of its epochs (the daemon's state predates them)",
                                (unsigned long long)q->fit_id, q->epochs_received);
        /* a resumed fit keeps the rate it has (a Control call may have
         * changed the request's) */
        if ((rc = apply_lr(c, q->learning_rate)) < 0)
            return rc;
        int64_t cur_ep, cur_pos;
        rt_exec_cursor(rt_program_exec(p), &cur_ep, &cur_pos);
        rt_program_fit_begin(p, q->fit_id, spe, q->epochs,
                             spe == (d.n + bs - 1) / bs && cur_pos == 0);
        if (q->fit_id) {
            /* The fit's start on disk, unless the newest checkpoint is the
             * state already: a restart before the fit's first checkpoint
             * then restores its start, where it begins again. */
            if (c->srv->state && !rt_program_ckpt_current(p) &&
                (rc = durable_checkpoint(c, p, q->checkpoint_policy)) < 0)
                return rc;
        }
    }
    fit_cb f = {.c = c, .q = q, .every = q->progress_every, .spe = spe, .n = d.n, .bs = bs,
                .gen = gen, .aligned = fr->aligned, .resumable = q->fit_id != 0};
    int cancelled = 0;
    uint64_t exec_ns = 0;
    int64_t steps = 0;
    for (uint32_t ep = ep0; ep < q->epochs && !cancelled && !ended; ep++) {
        int64_t from = ep == ep0 ? pos : 0; /* steps of this epoch run before */
        f.epoch = rt_program_fit_epochs(p) + 1;
        f.in_epoch = from;
        f.samples = 0;
        f.loss_sum = f.acc_sum = 0;
        if ((rc = train_x(c, &d)) < 0)
            return rc;
        f.mark = rt_now_ns();
        rt_train_result res;
        char derr[256] = "";
        if ((rc = rt_dist_train(rt_program_exec(p), &d, d.x == c->ds->x ? c->ds->key : NULL, spe - from,
                                &res, fit_step_cb, &f, NULL, derr, sizeof derr)) < 0)
            return rt_call_fail(c, rc, "%s", derr);
        rt_program_epoch_clock_pause(p, f.mark);
        exec_ns += res.execute_ns;
        steps += res.steps_run;
        /* an aligned fit is exact between any two steps */
        int partial = res.steps_run > 0 && !f.aligned;
        if (f.ckpt_rc < 0) {
            rt_program_set_partial(p, partial);
            return f.ckpt_rc;
        }
        if (f.nan_stop) {
            rt_program_set_partial(p, partial);
            return nan_fail(c, f.nan_step, f.nan_loss);
        }
        if (f.draining) {
            rt_program_set_partial(p, 0);
            return rt_call_fail(c, RT_EUNAVAILABLE, "the daemon is stopping: the fit stopped "
                                "at step %lld, on disk at exit; reattach after it restarts",
                                (long long)rt_exec_global_step(rt_program_exec(p)));
        }
        if ((res.stopped && !f.stopped) || rt_call_is_cancelled(c)) {
            rt_program_set_partial(p, partial);
            if (__atomic_load_n(&c->srv->hard_cancel, __ATOMIC_ACQUIRE))
                return stopped_fail(c, steps, (int64_t)q->epochs * spe);
            cancelled = 1;
            break;
        }
        /* Control's stop inside the epoch ends the fit without its epoch
         * end; at the epoch's last step the epoch completes first. */
        if (f.stopped && res.steps_run < spe - from) {
            rt_program_set_partial(p, 0); /* the call ends here, at a step boundary */
            if (f.resumable)
                rt_program_fit_end(p, 1);
            break;
        }
        int64_t fit_epoch = rt_program_fit_epoch_end(p);
        uint64_t t0 = rt_now_ns();
        Rtrain__V1__EpochEnd *e = epoch_pb(c, fit_epoch, f.aligned ? &f.ep : &res.mean,
                                           res.global_step, res.execute_ns);
        if (!e)
            return OOM(c);
        rt_metrics vm = {0};
        if (c->val_ds) {
            if ((rc = rt_exec_evaluate(rt_program_exec(p), &vd, &vm)) < 0)
                return engine_fail(c, rc);
            if (!(e->val = metrics_pb(c, &vm)))
                return OOM(c);
        }
        if (f.resumable) {
            rt_program_fit_keep_epoch(p, &(rt_fit_epoch){
                .epoch = fit_epoch, .steps = res.global_step, .execute_ns = res.execute_ns,
                .has_val = c->val_ds != NULL, .train = f.aligned ? f.ep : res.mean,
                .val = vm});
            /* ended before its checkpoint, so that a resend finds it so */
            if (ep + 1 == q->epochs || f.stopped)
                rt_program_fit_end(p, f.stopped);
        }
        /* An epoch reported is on disk: a restart never runs it again. */
        if (c->srv->state && (rc = durable_checkpoint(c, p, q->checkpoint_policy)) < 0)
            return rc;
        c->tm.execute_ns += rt_now_ns() - t0; /* the epoch's validation */
        fit_send_epoch(c, e, f.nan_step);
        if (f.stopped)
            break;
        if (f.resumable && ep + 1 < q->epochs && daemon_stopping(c))
            return rt_call_fail(c, RT_EUNAVAILABLE, "the daemon is stopping: the fit stopped "
                                "at the end of epoch %lld, on disk; reattach after it restarts",
                                (long long)fit_epoch);
    }
    note_step_time(p, exec_ns, steps);
    Rtrain__V1__FitEvent *fin = NEW(c, Rtrain__V1__FitEvent, RTRAIN__V1__FIT_EVENT__INIT);
    if (!fin)
        return OOM(c);
    fin->done = 1;
    fin->cancelled = cancelled;
    fin->stopped = ended ? fr->stopped : f.stopped && !cancelled;
    fin->global_step = (uint64_t)rt_exec_global_step(rt_program_exec(p));
    fit_stamp(c, fin, f.nan_step);
    c->resp = &fin->base;
    char pid[16];
    if (cancelled)
        RT_LOG(RT_LOG_INFO, "fit on %s stopped at step %lld: the client cancelled",
               rt_log_id(rt_program_id(p), pid), (long long)rt_exec_global_step(rt_program_exec(p)));
    else if (fin->stopped && !ended)
        RT_LOG(RT_LOG_INFO, "fit on %s stopped at step %lld by a Control call",
               rt_log_id(rt_program_id(p), pid), (long long)rt_exec_global_step(rt_program_exec(p)));
    return 0;
}

static int h_fit(rt_call *c)
{
    Rtrain__V1__FitRequest *q = REQ(c, Rtrain__V1__FitRequest);
    int rc;
    if ((rc = need_program(c, q->session_id, q->program_id)) < 0 ||
        (rc = need_train_data(c, q->dataset_id, q->val_dataset_id)) < 0)
        return rc;
    if (q->epochs == 0)
        return rt_call_fail(c, RT_EINVAL, "epochs must be at least 1");
    if ((rc = check_lr(c, q->learning_rate)) < 0)
        return rc;
    /* as RunSteps: the running fits stop for the exit checkpoint, and a
     * client reattaches to the next start */
    if ((rc = refuse_if_stopping(c)) < 0)
        return rc;
    /* The same per-call cap as RunSteps, on the steps the Fit will really
     * run: without steps_per_epoch an epoch is one pass over the dataset. */
    int64_t bs = rt_plan_config(rt_program_plan(c->prog))->batch_size;
    uint64_t spe = q->steps_per_epoch
                       ? q->steps_per_epoch
                       : (uint64_t)((c->ds->n + (bs > 0 ? bs : 1) - 1) / (bs > 0 ? bs : 1));
    if (spe && (uint64_t)q->epochs > RT_MAX_STEPS_PER_CALL / spe)
        return rt_call_fail(c, RT_ETOOBIG,
                            "Fit of %u epochs x %llu steps is over the limit of %llu steps per call",
                            q->epochs, (unsigned long long)spe, RT_MAX_STEPS_PER_CALL);
    if ((rc = check_train_data(c)) < 0)
        return rc;
    c->work = fit_work;
    c->needs_device = 1;
    c->est_ns = UINT64_MAX;
    return 0;
}

/* --------------------------------------------------------------- Evaluate */
static int evaluate_work(rt_call *c)
{
    rt_data d;
    int rc = data_for(c, c->ds, &d, 1);
    if (rc < 0)
        return rc;
    rt_metrics m;
    if ((rc = rt_exec_evaluate(rt_program_exec(c->prog), &d, &m)) < 0)
        return engine_fail(c, rc);
    Rtrain__V1__EvaluateResponse *r = NEW(c, Rtrain__V1__EvaluateResponse, RTRAIN__V1__EVALUATE_RESPONSE__INIT);
    if (!r || !(r->metrics = metrics_pb(c, &m)))
        return OOM(c);
    c->resp = &r->base;
    return 0;
}

static uint64_t forward_estimate(rt_call *c, int64_t n)
{
    int64_t bs = rt_plan_config(rt_program_plan(c->prog))->batch_size;
    if (bs < 1)
        bs = 1;
    return clamp_est((double)((n + bs - 1) / bs) * rt_program_step_ns(c->prog) / 2);
}

static int h_evaluate(rt_call *c)
{
    Rtrain__V1__EvaluateRequest *q = REQ(c, Rtrain__V1__EvaluateRequest);
    int rc;
    if ((rc = need_program(c, q->session_id, q->program_id)) < 0 ||
        (rc = need_dataset(c, q->dataset_id, &c->ds, "dataset_id")) < 0 ||
        (rc = check_fit(c, c->ds, 1)) < 0)
        return rc;
    c->work = evaluate_work;
    c->needs_device = 1;
    c->est_ns = forward_estimate(c, c->ds->n);
    return 0;
}

/* ---------------------------------------------------------------- Predict */
typedef struct predict_st {
    const float *x;
    int64_t n;
    rt_stream_use su;   /* a streamed dataset: su.st set, x NULL */
} predict_st;

static int predict_work(rt_call *c)
{
    predict_st *ps = c->st;
    int64_t od[RT_MAX_DIMS];
    int on = rt_plan_output_shape(rt_program_plan(c->prog), od);
    if (on < 0)
        return rt_call_fail(c, on, "the program has no output shape");
    int64_t per = rt_data_numel(on, od);
    float *y = rt_call_alloc(c, sizeof(float) * (size_t)(ps->n * per));
    int64_t *shape = rt_call_alloc(c, sizeof(int64_t) * (size_t)(on + 1));
    Rtrain__V1__PredictResponse *r = NEW(c, Rtrain__V1__PredictResponse, RTRAIN__V1__PREDICT_RESPONSE__INIT);
    Rtrain__V1__Tensor *t = NEW(c, Rtrain__V1__Tensor, RTRAIN__V1__TENSOR__INIT);
    if (!y || !shape || !r || !t)
        return OOM(c);
    /* In chunks of whole batches, so a large Predict shares the device at
     * chunk boundaries like Fit does at steps; inference is per sample, so
     * the outputs are those of one call. */
    int64_t id[RT_MAX_DIMS];
    int in = rt_plan_input_shape(rt_program_plan(c->prog), id);
    if (in < 0)
        return rt_call_fail(c, in, "the program has no input shape");
    int64_t in_per = rt_data_numel(in, id);
    int64_t bs = rt_plan_config(rt_program_plan(c->prog))->batch_size;
    if (bs < 1)
        bs = 1;
    if (ps->su.st) {
        /* a streamed dataset: batch by batch in file order from its
         * workers, yielding every 16 batches */
        ps->su.batch = bs;
        float *xb = rt_call_alloc(c, sizeof(float) * (size_t)(bs * in_per));
        if (!xb)
            return OOM(c);
        for (int64_t pos = 0; pos * bs < ps->n; pos++) {
            int64_t off = pos * bs, cnt = ps->n - off < bs ? ps->n - off : bs;
            char err[240];
            int rc = rt_stream_fill(&ps->su, RT_EPOCH_EVAL, pos, cnt, xb, NULL, NULL, err,
                                    sizeof err);
            if (rc < 0)
                return rt_call_fail(c, rc, "dataset %s: %s", c->ds->id, err);
            /* every batch lands in the same buffer, which rt_exec_predict's
             * once-per-data-set index check would take as checked */
            if ((rc = rt_exec_check_rows(rt_program_exec(c->prog), xb, cnt)) < 0 ||
                (rc = rt_exec_predict(rt_program_exec(c->prog), xb, cnt, y + off * per)) < 0)
                return engine_fail(c, rc);
            if (pos % 16 == 15 && off + cnt < ps->n) {
                if (rt_call_is_cancelled(c))
                    return rt_call_fail(c, RT_ECANCELLED, "Predict cancelled");
                rt_call_yield(c);
            }
        }
    }
    int64_t chunk = bs * 16;
    for (int64_t off = 0; !ps->su.st && off < ps->n; off += chunk) {
        int64_t cnt = ps->n - off < chunk ? ps->n - off : chunk;
        int rc = rt_exec_predict(rt_program_exec(c->prog), ps->x + off * in_per, cnt, y + off * per);
        if (rc < 0)
            return engine_fail(c, rc);
        if (off + cnt < ps->n) {
            if (rt_call_is_cancelled(c))
                return rt_call_fail(c, RT_ECANCELLED, "Predict cancelled");
            rt_call_yield(c);
        }
    }
    shape[0] = ps->n;
    memcpy(shape + 1, od, sizeof(int64_t) * (size_t)on);
    t->name = "y";
    t->dtype = RTRAIN__V1__DTYPE__F32;
    t->shape = shape;
    t->n_shape = (size_t)on + 1;
    t->data.data = (uint8_t *)y;
    t->data.len = sizeof(float) * (size_t)(ps->n * per);
    r->y = t;
    c->resp = &r->base;
    return 0;
}

static int h_predict(rt_call *c)
{
    Rtrain__V1__PredictRequest *q = REQ(c, Rtrain__V1__PredictRequest);
    int rc = need_program(c, q->session_id, q->program_id);
    if (rc < 0)
        return rc;
    predict_st *ps = calloc(1, sizeof *ps);
    if (!ps)
        return OOM(c);
    c->st = ps;
    c->st_free = free;
    if (q->input_case == RTRAIN__V1__PREDICT_REQUEST__INPUT_DATASET_ID) {
        if ((rc = need_dataset(c, q->dataset_id, &c->ds, "dataset_id")) < 0 ||
            (rc = check_fit(c, c->ds, 0)) < 0)
            return rc;
        if (c->ds->stream)
            ps->su = (rt_stream_use){.st = c->ds->stream,
                                     .seed = rt_plan_config(rt_program_plan(c->prog))->seed};
        ps->x = c->ds->x;
        ps->n = c->ds->n;
    } else if (q->input_case == RTRAIN__V1__PREDICT_REQUEST__INPUT_X) {
        const Rtrain__V1__Tensor *x = q->x;
        int64_t in[RT_MAX_DIMS];
        int in_n = rt_plan_input_shape(rt_program_plan(c->prog), in);
        char a[96], b[96];
        if (x->dtype != RTRAIN__V1__DTYPE__F32)
            return rt_call_fail(c, RT_EDTYPE, "Predict x must be F32");
        if (x->n_shape < 1 || x->n_shape > RT_MAX_DIMS)
            return rt_call_fail(c, RT_ESHAPE, "Predict x needs a shape (samples first)");
        for (size_t i = 0; i < x->n_shape; i++)
            if (x->shape[i] < 0 || x->shape[i] > RT_MAX_DIM_LIMIT)
                return rt_call_fail(c, RT_ESHAPE, "Predict x dim %zu is %lld", i,
                                    (long long)x->shape[i]);
        if (in_n >= 0 && !rt_view_shapes_fit((int)x->n_shape - 1, x->shape + 1, in_n, in))
            return rt_call_fail(c, RT_ESHAPE, "x has samples of shape %s but program %s expects %s%s",
                                rt_data_shape_str((int)x->n_shape - 1, x->shape + 1, a, sizeof a),
                                rt_program_id(c->prog), rt_data_shape_str(in_n, in, b, sizeof b),
                                rt_view_layout_hint((int)x->n_shape - 1, x->shape + 1, in_n, in));
        int64_t n = x->shape[0], numel = rt_data_numel((int)x->n_shape, x->shape);
        if (numel < 0 || numel > (int64_t)(x->data.len / 4) + 1)
            return rt_call_fail(c, RT_ESHAPE, "Predict x shape %s is larger than its %zu bytes",
                                rt_data_shape_str((int)x->n_shape, x->shape, a, sizeof a),
                                x->data.len);
        if ((uint64_t)numel * 4 != x->data.len)
            return rt_call_fail(c, RT_EDATA, "x holds %zu bytes but its shape needs %lld",
                                x->data.len, (long long)numel * 4);
        float *f = rt_call_alloc(c, x->data.len ? x->data.len : 4);
        if (!f)
            return OOM(c);
        if (x->data.len)
            memcpy(f, x->data.data, x->data.len);
        for (int64_t i = 0; i < numel; i++)
            if (!isfinite(f[i]))
                return rt_call_fail(c, RT_ENAN, "x contains %s at sample %lld, column %lld",
                                    isnan(f[i]) ? "NaN" : "Inf", (long long)(i / (numel / (n ? n : 1))),
                                    (long long)(i % (numel / (n ? n : 1))));
        ps->x = f;
        ps->n = n;
    } else {
        return rt_call_fail(c, RT_EINVAL, "PredictRequest needs dataset_id or x");
    }
    c->work = predict_work;
    c->needs_device = 1;
    c->est_ns = forward_estimate(c, ps->n);
    return 0;
}

/* ------------------------------------------------------------- Weights */
static int get_weights_work(rt_call *c)
{
    rt_plan *p = rt_program_plan(c->prog);
    int np = rt_plan_n_params(p);
    Rtrain__V1__GetWeightsResponse *r =
        NEW(c, Rtrain__V1__GetWeightsResponse, RTRAIN__V1__GET_WEIGHTS_RESPONSE__INIT);
    if (!r || !(r->weights = rt_call_alloc(c, sizeof *r->weights * (size_t)(np > 0 ? np : 1))))
        return OOM(c);
    for (int i = 0; i < np; i++) {
        const char *name;
        int64_t dims[RT_MAX_DIMS];
        int tr, nd = rt_plan_param_info(p, i, &name, dims, &tr);
        if (nd < 0)
            return rt_call_fail(c, nd, "parameter %d has no info", i);
        int64_t n = rt_data_numel(nd, dims);
        Rtrain__V1__Tensor *t = NEW(c, Rtrain__V1__Tensor, RTRAIN__V1__TENSOR__INIT);
        float *v = rt_call_alloc(c, sizeof(float) * (size_t)(n ? n : 1));
        if (!t || !v)
            return OOM(c);
        int rc = rt_exec_get_param(rt_program_exec(c->prog), i, v);
        if (rc < 0)
            return engine_fail(c, rc);
        t->name = (char *)name;
        t->dtype = RTRAIN__V1__DTYPE__F32;
        t->shape = dims_pb(c, nd, dims);
        t->n_shape = (size_t)nd;
        t->data.data = (uint8_t *)v;
        t->data.len = sizeof(float) * (size_t)n;
        r->weights[r->n_weights++] = t;
    }
    r->global_step = (uint64_t)rt_exec_global_step(rt_program_exec(c->prog));
    r->learning_rate = rt_exec_lr(rt_program_exec(c->prog));
    c->resp = &r->base;
    return 0;
}

static int h_get_weights(rt_call *c)
{
    Rtrain__V1__GetWeightsRequest *q = REQ(c, Rtrain__V1__GetWeightsRequest);
    int rc = need_program(c, q->session_id, q->program_id);
    if (rc < 0)
        return rc;
    c->work = get_weights_work;
    c->needs_device = 1;
    c->est_ns = rt_plan_report(rt_program_plan(c->prog))->param_count + 2000;
    return 0;
}

/* ---------------------------------------------------------- ExportOnnx */
/* The program's parameter of that name (the importer names parameters
 * after the initializers), checked for size. */
static int export_param(void *ud, const char *name, float *dst, int64_t numel)
{
    rt_call *c = ud;
    rt_plan *p = rt_program_plan(c->prog);
    for (int i = 0, np = rt_plan_n_params(p); i < np; i++) {
        const char *nm;
        int64_t dims[RT_MAX_DIMS];
        int tr, nd = rt_plan_param_info(p, i, &nm, dims, &tr);
        if (nd < 0 || strcmp(nm, name) != 0)
            continue;
        if (rt_data_numel(nd, dims) != numel)
            return RT_ESHAPE;
        return rt_exec_get_param(rt_program_exec(c->prog), i, dst);
    }
    return RT_ENOTFOUND;
}

static int export_onnx_work(rt_call *c)
{
    Rtrain__V1__ExportOnnxRequest *q = REQ(c, Rtrain__V1__ExportOnnxRequest);
    char err[768];
    uint8_t *out;
    size_t len;
    int rc = rt_onnx_export(q->onnx.data, q->onnx.len, q->onnx_output, export_param, c, &out,
                            &len, err, sizeof err);
    if (rc < 0)
        return rt_call_fail(c, rc == RT_ENOTFOUND || rc == RT_ESHAPE ? RT_EINVAL : rc,
                            "%s%s", err,
                            rc == RT_ENOTFOUND || rc == RT_ESHAPE
                                ? " (not the model this program was compiled from)" : "");
    Rtrain__V1__ExportOnnxResponse *r =
        NEW(c, Rtrain__V1__ExportOnnxResponse, RTRAIN__V1__EXPORT_ONNX_RESPONSE__INIT);
    uint8_t *b = r ? rt_call_alloc(c, len ? len : 1) : NULL;
    if (!b) {
        free(out);
        return OOM(c);
    }
    memcpy(b, out, len);
    free(out);
    r->onnx.data = b;
    r->onnx.len = len;
    c->resp = &r->base;
    return 0;
}

static int h_export_onnx(rt_call *c)
{
    Rtrain__V1__ExportOnnxRequest *q = REQ(c, Rtrain__V1__ExportOnnxRequest);
    int rc = need_program(c, q->session_id, q->program_id);
    if (rc < 0)
        return rc;
    if (!q->onnx.len)
        return rt_call_fail(c, RT_EINVAL, "ExportOnnx: onnx is empty");
    /* reads the weights: on the device, as GetWeights */
    c->work = export_onnx_work;
    c->needs_device = 1;
    c->est_ns = rt_plan_report(rt_program_plan(c->prog))->param_count * 4 + q->onnx.len + 20000;
    return 0;
}

typedef struct set_st {
    int np;
    const float **vals; /* by parameter index */
} set_st;

static void set_st_free(void *p)
{
    set_st *s = p;
    free(s->vals);
    free(s);
}

static int set_weights_work(rt_call *c)
{
    set_st *s = c->st;
    for (int i = 0; i < s->np; i++) {
        rt_program_mark_dirty(c->prog);
        int rc = rt_exec_set_param(rt_program_exec(c->prog), i, s->vals[i]);
        if (rc < 0)
            return engine_fail(c, rc);
    }
    Rtrain__V1__SetWeightsResponse *r =
        NEW(c, Rtrain__V1__SetWeightsResponse, RTRAIN__V1__SET_WEIGHTS_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    c->resp = &r->base;
    return 0;
}

static int h_set_weights(rt_call *c)
{
    Rtrain__V1__SetWeightsRequest *q = REQ(c, Rtrain__V1__SetWeightsRequest);
    int rc = need_program(c, q->session_id, q->program_id);
    if (rc < 0)
        return rc;
    rt_plan *p = rt_program_plan(c->prog);
    int np = rt_plan_n_params(p);
    set_st *s = calloc(1, sizeof *s);
    if (!s)
        return OOM(c);
    c->st = s;
    c->st_free = set_st_free;
    s->np = np;
    s->vals = calloc((size_t)(np > 0 ? np : 1), sizeof *s->vals);
    if (!s->vals)
        return OOM(c);
    /* Everything is checked before anything is written: all or nothing. */
    for (size_t k = 0; k < q->n_weights; k++) {
        const Rtrain__V1__Tensor *t = q->weights[k];
        int found = 0;
        for (int i = 0; i < np; i++) {
            const char *name;
            int64_t dims[RT_MAX_DIMS];
            int tr, nd = rt_plan_param_info(p, i, &name, dims, &tr);
            if (nd < 0 || strcmp(name, t->name) != 0)
                continue;
            found = 1;
            char a[96], b[96];
            if (t->dtype != RTRAIN__V1__DTYPE__F32)
                return rt_call_fail(c, RT_EDTYPE, "weight '%.64s' must be F32", t->name);
            if ((int)t->n_shape != nd || memcmp(t->shape, dims, sizeof(int64_t) * (size_t)nd))
                return rt_call_fail(c, RT_ESHAPE, "weight '%.64s' has shape %s, expected %s",
                                    t->name, rt_data_shape_str((int)t->n_shape, t->shape, a, sizeof a),
                                    rt_data_shape_str(nd, dims, b, sizeof b));
            int64_t n = rt_data_numel(nd, dims);
            if (t->data.len != (size_t)n * 4)
                return rt_call_fail(c, RT_EDATA, "weight '%.64s' has %zu bytes, expected %lld",
                                    t->name, t->data.len, (long long)n * 4);
            if (s->vals[i])
                return rt_call_fail(c, RT_EINVAL, "weight '%.64s' is given twice", t->name);
            float *v = rt_call_alloc(c, t->data.len ? t->data.len : 4);
            if (!v)
                return OOM(c);
            memcpy(v, t->data.data, t->data.len);
            for (int64_t j = 0; j < n; j++)
                if (!isfinite(v[j]))
                    return rt_call_fail(c, RT_ENAN, "weight '%.64s' contains %s at %lld", t->name,
                                        isnan(v[j]) ? "NaN" : "Inf", (long long)j);
            s->vals[i] = v;
        }
        if (!found)
            return rt_call_fail(c, RT_ENOTFOUND, "program %s has no parameter '%.64s'",
                                rt_program_id(c->prog), t->name);
    }
    for (int i = 0; i < np; i++)
        if (!s->vals[i]) {
            const char *name;
            int64_t dims[RT_MAX_DIMS];
            int tr;
            rt_plan_param_info(p, i, &name, dims, &tr);
            return rt_call_fail(c, RT_EINVAL, "weight '%.64s' is missing (all must be given)", name);
        }
    c->work = set_weights_work;
    c->needs_device = 1;
    c->est_ns = rt_plan_report(p)->param_count + 2000;
    return 0;
}

/* ---------------------------------------------------------------- Control */
/* Answered at once on the call's thread, without the device: the rate goes
 * into the exec atomically (rt_exec_set_lr) and the stop into the program's
 * stop_gen; the running training reads both at its next step boundary. */
static int h_control(rt_call *c)
{
    Rtrain__V1__ControlRequest *q = REQ(c, Rtrain__V1__ControlRequest);
    int rc;
    if ((rc = need_program(c, q->session_id, q->program_id)) < 0 ||
        (rc = check_lr(c, q->learning_rate)) < 0)
        return rc;
    Rtrain__V1__ControlResponse *r =
        NEW(c, Rtrain__V1__ControlResponse, RTRAIN__V1__CONTROL_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    if ((rc = apply_lr(c, q->learning_rate)) < 0)
        return rc;
    r->running = rt_program_control(c->prog, q->stop);
    c->resp = &r->base;
    return 0;
}

/* ------------------------------------------------- Checkpoint, restore */

/* The session token, compared in constant time: with the id it is what
 * lets a client reattach, pull or push state. */
static int need_token(rt_call *c, const char *token)
{
    const char *t = c->sess->token;
    size_t n = strlen(t), m = token ? strlen(token) : 0;
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned)(t[i] ^ (i < m ? token[i] : 0));
    if (diff)
        return rt_call_fail(c, RT_EAUTH, "wrong session_token for session %.64s", c->sess->id);
    return 0;
}

static int checkpoint_work(rt_call *c)
{
    Rtrain__V1__CheckpointRequest *q = REQ(c, Rtrain__V1__CheckpointRequest);
    rt_program *p = c->prog;
    Rtrain__V1__CheckpointResponse *r =
        NEW(c, Rtrain__V1__CheckpointResponse, RTRAIN__V1__CHECKPOINT_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    c->resp = &r->base;
    if (q->save) {
        if (!c->srv->state)
            return rt_call_fail(c, RT_ESTATE, "the daemon has no --state-dir: nothing to save to");
        int rc = durable_checkpoint(c, p, RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_STOP);
        if (rc < 0)
            return rc;
        r->saved = 1;
    }
    if (q->pull) {
        size_t n = rt_ckpt_size(p);
        if (n > c->srv->cfg.max_message_bytes)
            return rt_call_fail(c, RT_ETOOBIG, "the state (%zu bytes) is over the message limit",
                                n);
        uint8_t *b = rt_call_alloc(c, n);
        if (!b)
            return OOM(c);
        if (rt_ckpt_build(c->sess->id, p, b, n) < 0)
            return rt_call_fail(c, RT_EINTERNAL, "cannot read the program's state");
        r->state.data = b;
        r->state.len = n;
    }
    int64_t ep, pos;
    rt_exec_cursor(rt_program_exec(p), &ep, &pos);
    r->global_step = (uint64_t)rt_exec_global_step(rt_program_exec(p));
    r->last_seq = rt_program_last_seq(p);
    r->epoch = (uint64_t)ep + 1;
    r->step_in_epoch = (uint64_t)pos;
    r->fit_epochs = (uint64_t)rt_program_fit_epochs(p);
    const rt_fit_rec *fr = rt_program_fit(p);
    r->fit_id = fr->id;
    r->fit_epochs_done = fr->id ? (uint64_t)(rt_program_fit_epochs(p) - fr->first_epoch) : 0;
    r->durable = c->srv->state != NULL;
    r->boot_id = c->srv->boot_id;
    return 0;
}

static int h_checkpoint(rt_call *c)
{
    Rtrain__V1__CheckpointRequest *q = REQ(c, Rtrain__V1__CheckpointRequest);
    int rc;
    if ((rc = need_program(c, q->session_id, q->program_id)) < 0 ||
        (rc = need_token(c, q->session_token)) < 0)
        return rc;
    /* a reattaching client must find the next start, not this one */
    if ((rc = refuse_if_stopping(c)) < 0)
        return rc;
    c->work = checkpoint_work;
    c->needs_device = 1;
    c->est_ns = q->save || q->pull ? UINT64_MAX : 2000;
    return 0;
}

/* Compile a kept model (a packed CompileRequest) for session sess under id
 * pid (NULL: a new id), outside any call: at start, and for
 * RestoreCheckpoint (whose work holds the device). */
static int restore_program(rt_srv *srv, rt_session *sess, const uint8_t *req, size_t len,
                           const char *pid, rt_program **out, char *err, size_t errlen)
{
    *out = NULL;
    rt_call *c = calloc(1, sizeof *c);
    if (!c)
        return RT_ENOMEM;
    c->srv = srv;
    c->who = sess->owner;
    c->sess = sess;
    compile_st st;
    memset(&st, 0, sizeof st);
    int rc;
    Rtrain__V1__CompileRequest *q = rtrain__v1__compile_request__unpack(NULL, len, req);
    if (!q) {
        rc = rt_call_fail(c, RT_EPROTO, "the kept model is not a CompileRequest");
        goto out;
    }
    c->req = &q->base;
    if ((rc = config_from_pb(c, q->config, &st.cfg)) < 0 || (rc = build_graph(c, &st)) < 0)
        goto out;
    if (!st.plan) {
        rt_plan *p;
        char e[256];
        if ((rc = rt_plan_compile(st.g, &st.cfg, &p, NULL, e, sizeof e)) < 0) {
            rt_call_fail(c, rc, "%.250s", e);
            goto out;
        }
        rt_plan_cache_put(srv->plans, st.key, p, &st.plan);
        rt_plan_release(p);
    }
    uint64_t bytes = program_bytes(st.plan);
    if ((rc = rt_principal_reserve(c->who, RT_Q_PROGRAMS, 1, c->errmsg, sizeof c->errmsg)) < 0)
        goto out;
    if ((rc = rt_principal_reserve(c->who, RT_Q_PROGRAM_BYTES, bytes, c->errmsg,
                                   sizeof c->errmsg)) < 0) {
        rt_principal_unreserve(c->who, RT_Q_PROGRAMS, 1);
        goto out;
    }
    rt_exec *e;
    if ((rc = rt_exec_create(st.plan, &e)) < 0) {
        rt_principal_unreserve(c->who, RT_Q_PROGRAM_BYTES, bytes);
        rt_principal_unreserve(c->who, RT_Q_PROGRAMS, 1);
        rt_call_fail(c, rc, "cannot create the program instance");
        goto out;
    }
    /* MPI replicas: the program on every rank; its state reaches them at
     * the first training call (rt_dist_train compares a state hash) */
    char derr[200] = "";
    if ((rt_dist_size() > 1 || rt_dist_micro() > 0) &&
        (rc = rt_dist_program(e, req, len, derr, sizeof derr)) < 0) {
        rt_exec_destroy(e);
        rt_principal_unreserve(c->who, RT_Q_PROGRAM_BYTES, bytes);
        rt_principal_unreserve(c->who, RT_Q_PROGRAMS, 1);
        rt_call_fail(c, rc, "replicas: %s", derr);
        goto out;
    }
    rt_plan_retain(st.plan);
    rt_program *prog;
    if ((rc = rt_session_add_program(sess, st.plan, e, bytes, &prog)) < 0) {
        rt_call_fail(c, rc, "cannot add the program to the session");
        goto out;
    }
    if (pid)
        rt_program_set_id(prog, pid);
    uint8_t *model = malloc(len ? len : 1);
    if (!model) {
        rt_session_remove_program(sess, prog);
        rc = rt_call_fail(c, RT_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(model, req, len);
    rt_program_take_model(prog, model, len);
    *out = prog;
    rc = 0;
out:
    if (rc < 0)
        snprintf(err, errlen, "%s", c->errmsg[0] ? c->errmsg : rt_strerror(rc));
    rt_graph_destroy(st.g);
    rt_plan_release(st.plan);
    if (q)
        rtrain__v1__compile_request__free_unpacked(q, NULL);
    for (rt__arena_blk *b = c->arena, *nb; b; b = nb) {
        nb = b->next;
        free(b);
    }
    rt_principal_unreserve(c->who, RT_Q_CALL_BYTES, c->charged);
    free(c);
    return rc;
}

static int restore_at_start(void *ud, rt_session *s, const uint8_t *req, size_t len,
                            const char *pid, rt_program **out, char *err, size_t errlen)
{
    return restore_program(ud, s, req, len, pid, out, err, errlen);
}

typedef struct restore_st {
    uint8_t *buf; /* the state, copied out of the request */
    size_t len;
} restore_st;

static void restore_st_free(void *p)
{
    restore_st *st = p;
    free(st->buf);
    free(st);
}

static int restore_work(rt_call *c)
{
    restore_st *st = c->st;
    rt_ckpt_view v;
    char err[256];
    int rc = rt_ckpt_parse(st->buf, st->len, &v, err, sizeof err);
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", err);
    rt_program *p;
    if ((rc = restore_program(c->srv, c->sess, v.req, v.req_len, NULL, &p, err, sizeof err)) < 0)
        return rt_call_fail(c, rc, "cannot compile the state's model: %s", err);
    if ((rc = rt_exec_load_state(rt_program_exec(p), v.exec, v.exec_len)) < 0) {
        rt_call_fail(c, rc, "%s", rt_exec_errmsg(rt_program_exec(p)));
        return drop_program(c, p, rc);
    }
    rt_ckpt_apply_meta(p, &v);
    /* sequence numbers and fits belong to the client that trained it: the
     * program is new to whoever pushed it */
    rt_program_forget_client(p);
    if (c->srv->state &&
        (rc = durable_checkpoint(c, p, RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_STOP)) < 0)
        return drop_program(c, p, rc);
    Rtrain__V1__RestoreCheckpointResponse *r = NEW(
        c, Rtrain__V1__RestoreCheckpointResponse, RTRAIN__V1__RESTORE_CHECKPOINT_RESPONSE__INIT);
    if (!r || !(r->program_id = rt_call_strdup(c, rt_program_id(p))))
        return drop_program(c, p, OOM(c));
    if (rt_call_is_cancelled(c))
        return drop_program(c, p, rt_call_fail(c, RT_ECANCELLED, "restore cancelled"));
    r->global_step = (uint64_t)rt_exec_global_step(rt_program_exec(p));
    r->last_seq = rt_program_last_seq(p);
    c->resp = &r->base;
    char sid[16], pid[16];
    RT_LOG(RT_LOG_INFO, "session %s: program %s restored from a pushed state at step %lld",
           rt_log_id(c->sess->id, sid), rt_log_id(rt_program_id(p), pid), (long long)r->global_step);
    return 0;
}

static int h_restore_checkpoint(rt_call *c)
{
    Rtrain__V1__RestoreCheckpointRequest *q = REQ(c, Rtrain__V1__RestoreCheckpointRequest);
    int rc;
    if ((rc = need_session(c, q->session_id)) < 0 || (rc = need_token(c, q->session_token)) < 0)
        return rc;
    if (!q->state.len)
        return rt_call_fail(c, RT_EINVAL, "state is empty");
    restore_st *st = calloc(1, sizeof *st);
    if (!st || !(st->buf = malloc(q->state.len))) {
        free(st);
        return OOM(c);
    }
    memcpy(st->buf, q->state.data, q->state.len);
    st->len = q->state.len;
    c->st = st;
    c->st_free = restore_st_free;
    c->work = restore_work;
    c->needs_device = 1;
    c->est_ns = UINT64_MAX;
    return 0;
}

int rt_methods_state_open(rt_srv *s, char *err, size_t errlen)
{
    rt_state_config sc = {.dir = s->cfg.state_dir,
                          .every_steps = s->cfg.ckpt_every_steps,
                          .every_s = s->cfg.ckpt_every_s,
                          .keep = s->cfg.ckpt_keep,
                          .fail_continue = s->cfg.ckpt_fail_continue,
                          .no_fsync = s->cfg.ckpt_no_fsync};
    /* a checkpoint holds a model (one message) and its state (held in the
     * memory budget): a larger file is not one of ours */
    uint64_t budget = rt_principal_set_budget(s->principals);
    sc.max_file_bytes = budget > UINT64_MAX / 2 ? 0 : budget + s->cfg.max_message_bytes;
    int rc = rt_state_open(&sc, &s->state, err, errlen);
    if (rc < 0)
        return rc;
    uint64_t t0 = rt_now_ns();
    rt_state_restore_result res;
    rt_state_restore(s->state, s->sessions, s->data, s->principals, s->cfg.max_dataset_bytes,
                     restore_at_start, s, &res);
    RT_LOG(RT_LOG_INFO, "state %s: restored %d session(s), %d program(s), %d dataset(s) in "
           "%.1f ms%s", s->cfg.state_dir, res.sessions, res.programs, res.datasets,
           (double)(rt_now_ns() - t0) / 1e6, res.warnings ? " (with warnings)" : "");
    return 0;
}

/* After the last call: every program at a call boundary and not yet on
 * disk at its step gets a checkpoint (SIGTERM's). */
static int flush_one(void *ud, rt_session *s, rt_program *p)
{
    rt_srv *srv = ud;
    char err[300], pid[16];
    if (rt_exec_global_step(rt_program_exec(p)) == rt_program_ckpt_step(p)) {
        RT_LOG(RT_LOG_INFO, "program %s: on disk at exit, step %lld (its last checkpoint)",
               rt_log_id(rt_program_id(p), pid), (long long)rt_program_ckpt_step(p));
        return 0;
    }
    if (rt_program_partial(p)) {
        RT_LOG(RT_LOG_WARN, "program %s stopped inside a call: its checkpoint at step %lld stays",
               rt_log_id(rt_program_id(p), pid), (long long)rt_program_ckpt_step(p));
        return 0;
    }
    if (rt_state_checkpoint(srv->state, s->id, p, err, sizeof err) < 0) {
        RT_LOG(RT_LOG_ERROR, "checkpoint of %s at exit failed: %s", rt_log_id(rt_program_id(p), pid), err);
        return 0;
    }
    RT_LOG(RT_LOG_INFO, "program %s: on disk at exit, step %lld (checkpoint at exit)",
           rt_log_id(rt_program_id(p), pid), (long long)rt_program_ckpt_step(p));
    return 1;
}

void rt_methods_state_flush(rt_srv *s)
{
    if (!s->state)
        return;
    int n = rt_session_each_program(s->sessions, flush_one, s);
    RT_LOG(RT_LOG_INFO, "state: %d checkpoint(s) written at exit", n);
}

/* ------------------------------------------------------------ the table */

/* Indexed by the method's place in the .proto (RT_METHOD_INDEX), so a
 * method the .proto adds without an entry here leaves a hole that
 * rt_methods_init() reports at start; the request types and paths come
 * from protoc-c's service descriptor (rt_method_table.c). */
#define H(member, kind, handle, end) [RT_METHOD_INDEX(member)] = {#member, kind, handle, end}
const rt_method_handler rt_handlers[RT_N_METHODS] = {
    H(get_info, RT_UNARY, h_get_info, NULL),
    H(ping, RT_UNARY, h_ping, NULL),
    H(create_session, RT_UNARY, h_create_session, NULL),
    H(close_session, RT_UNARY, h_close_session, NULL),
    H(compile, RT_UNARY, h_compile, NULL),
    H(upload_dataset, RT_CLIENT_STREAM, h_upload_chunk, h_upload_end),
    H(find_dataset, RT_UNARY, h_find_dataset, NULL),
    H(run_steps, RT_UNARY, h_run_steps, NULL),
    H(fit, RT_SERVER_STREAM, h_fit, NULL),
    H(evaluate, RT_UNARY, h_evaluate, NULL),
    H(predict, RT_UNARY, h_predict, NULL),
    H(get_weights, RT_UNARY, h_get_weights, NULL),
    H(set_weights, RT_UNARY, h_set_weights, NULL),
    H(control, RT_UNARY, h_control, NULL),
    H(export_onnx, RT_UNARY, h_export_onnx, NULL),
    H(checkpoint, RT_UNARY, h_checkpoint, NULL),
    H(restore_checkpoint, RT_UNARY, h_restore_checkpoint, NULL),
};
#undef H
