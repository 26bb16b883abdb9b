/* rt_h_compile.c - Compile (import, graph, cache, compile pool), and
 * compiling a kept model for a restore. */
#include "rt_handlers.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

/* ---------------------------------------------------------------- Compile */
/* A Compile request up to this size is imported on the cq thread (a few
 * tens of layers: microseconds); a cache hit is then answered without the
 * hand-off to the compile pool. */
#define RT_COMPILE_INLINE_BYTES (64u << 10)

typedef struct compile_st {
    rt_graph *g;
    rt_train_config cfg;
    uint8_t key[16];
    rt_plan *plan;     /* from the cache, or compiled by the work */
    rt_principal *who; /* holds one RT_Q_PROGRAMS until the program takes it */
    rt_program *from;  /* state_from_program, retained */
    int nchw;          /* the ONNX model's data input takes NCHW data */
} compile_st;

static void compile_st_free(void *p)
{
    compile_st *st = p;
    rt_graph_destroy(st->g);
    rt_plan_release(st->plan);
    rt_principal_unreserve(st->who, RT_Q_PROGRAMS, 1);
    rt_program_release(st->from);
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
    const struct {
        const char *name;
        float v;
        int signed_ok;
    } nums[] = {
        {"learning_rate", p->learning_rate, 0},
        {"momentum", p->momentum, 0},
        {"beta1", p->beta1, 0},
        {"beta2", p->beta2, 0},
        {"epsilon", p->epsilon, 0},
        {"weight_decay", p->weight_decay, 0},
        {"rho", p->rho, 0},
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
    if (p->precision && *p->precision && rt_precision_from_name(p->precision, &cfg->precision) < 0)
        return rt_call_fail(c, RT_EINVAL, "unknown precision '%.32s' (float32 or mixed_bfloat16)",
                            p->precision);
    /* PyTorch's losses: the compile checks ranges and which loss takes what */
    if (p->reduction && *p->reduction && rt_reduction_from_name(p->reduction, &cfg->reduction) < 0)
        return rt_call_fail(c, RT_EINVAL, "unknown reduction '%.32s' (mean or sum)", p->reduction);
    if (!isfinite(p->label_smoothing) || !isfinite(p->loss_beta))
        return rt_call_fail(c, RT_EINVAL,
                            "TrainConfig.label_smoothing and loss_beta must be "
                            "finite");
    cfg->label_smoothing = p->label_smoothing;
    if (p->has_ignore_index)
        cfg->ignore_index = p->ignore_index;
    if (p->has_loss_beta)
        cfg->loss_beta = p->loss_beta;
    if (p->n_class_weight > 1 << 20 || p->n_pos_weight > 1 << 20)
        return rt_call_fail(c, RT_EINVAL, "class_weight or pos_weight has too many values");
    cfg->class_weight = p->n_class_weight ? p->class_weight : NULL;
    cfg->n_class_weight = (int)p->n_class_weight;
    cfg->pos_weight = p->n_pos_weight ? p->pos_weight : NULL;
    cfg->n_pos_weight = (int)p->n_pos_weight;
    cfg->loss_check = !p->no_loss_check;
    if (!(p->l2_weight_decay >= 0) || !isfinite(p->l2_weight_decay) || !(p->dampening >= 0) ||
        !isfinite(p->dampening))
        return rt_call_fail(c, RT_EINVAL,
                            "TrainConfig.l2_weight_decay and dampening must be "
                            "finite and >= 0");
    cfg->l2_decay = p->l2_weight_decay;
    cfg->dampening = p->dampening;
    if (p->learning_rate > 0)
        cfg->lr = p->learning_rate;
    if (p->momentum > 0)
        cfg->momentum = p->momentum;
    cfg->nesterov = p->nesterov;
    if (p->beta1 > 0)
        cfg->beta1 = p->beta1;
    if (p->beta2 > 0)
        cfg->beta2 = p->beta2;
    if (p->epsilon > 0)
        cfg->eps = p->epsilon;
    if (p->weight_decay > 0)
        cfg->weight_decay = p->weight_decay;
    if (p->rho > 0)
        cfg->rho = p->rho;
    else if (cfg->opt == RT_OPT_ADADELTA)
        cfg->rho = 0.95f; /* Keras' Adadelta default */
    if (p->clip_norm > 0)
        cfg->clip_norm = p->clip_norm;
    if (p->has_ftrl) {
        cfg->ftrl_power = p->ftrl_learning_rate_power;
        cfg->ftrl_init = p->ftrl_initial_accumulator_value;
        cfg->ftrl_l1 = p->ftrl_l1_regularization_strength;
        cfg->ftrl_l2 = p->ftrl_l2_regularization_strength;
        cfg->ftrl_shrink = p->ftrl_l2_shrinkage_regularization_strength;
        cfg->ftrl_beta = p->ftrl_beta;
    }
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
    if (p->batch_size)
        cfg->batch_size = (int)p->batch_size;
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
            return rt_call_fail(c, RT_EINVAL,
                                "the model's saved loss '%.48s' is not supported; "
                                "give a loss in TrainConfig",
                                k.loss);
        cfg->from_logits = k.from_logits || (p && p->from_logits);
        if (!p || p->label_dtype == RTRAIN__V1__DTYPE__DTYPE_UNSPECIFIED)
            cfg->label_dtype = default_label_dtype(cfg->loss, p ? p->n_label_shape : 0);
    }
    if (!(p && p->optimizer && *p->optimizer) && k.optimizer[0]) {
        if (rt_opt_from_name(k.optimizer, &cfg->opt) < 0)
            return rt_call_fail(c, RT_EINVAL,
                                "the model's saved optimizer '%.32s' is not "
                                "supported; give an optimizer in TrainConfig",
                                k.optimizer);
        const struct {
            float given;
            double saved;
            float *dst;
        } nums[] = {
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
        float *fd[6] = {&cfg->ftrl_power, &cfg->ftrl_init,   &cfg->ftrl_l1,
                        &cfg->ftrl_l2,    &cfg->ftrl_shrink, &cfg->ftrl_beta};
        for (int i = 0; i < 6 && !(p && p->has_ftrl); i++)
            if (k.has_ftrl[i])
                *fd[i] = (float)k.ftrl[i];
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

/* TrainConfig.outputs: each output's loss, weight and metrics in the
 * model's output order (n outputs) */
static int output_losses(rt_call *c, rt_train_config *cfg, int n, const Rtrain__V1__TrainConfig *p)
{
    if (!p || !p->n_outputs)
        return 0;
    if (n < 2)
        return rt_call_fail(c, RT_EINVAL,
                            "TrainConfig.outputs is for a model with several "
                            "outputs; this one has one (give TrainConfig.loss)");
    if ((int)p->n_outputs != n)
        return rt_call_fail(c, RT_EINVAL,
                            "TrainConfig.outputs has %zu entries; the model has "
                            "%d outputs",
                            p->n_outputs, n);
    for (int k = 0; k < n; k++) {
        const Rtrain__V1__OutputLoss *o = p->outputs[k];
        struct rt_loss_head *h = &cfg->heads[k];
        if (o->loss && *o->loss) {
            if (rt_loss_from_name(o->loss, &h->loss) < 0)
                return rt_call_fail(c, RT_EINVAL, "output %d: unknown loss '%.48s'", k + 1,
                                    o->loss);
            h->from_logits = o->from_logits;
        }
        if (o->has_weight)
            h->weight = o->weight;
        if (o->n_metrics) {
            h->metrics = 0;
            for (size_t i = 0; i < o->n_metrics; i++) {
                uint32_t bit;
                if (rt_metric_from_name(o->metrics[i], &bit) < 0)
                    return rt_call_fail(c, RT_EINVAL, "output %d: unknown metric '%.48s'", k + 1,
                                        o->metrics[i]);
                h->metrics |= bit;
            }
        }
    }
    return 0;
}

/* TrainConfig.default_accuracy: the client's default "accuracy" goes to
 * the outputs whose loss classifies, not to a regression output (Keras
 * adds no metric unasked); an output given its own metrics keeps them. */
static void unasked_accuracy(rt_train_config *cfg, int n, const Rtrain__V1__TrainConfig *p)
{
    if (!p || !p->default_accuracy)
        return;
    for (int k = 0; k < n && k < RT_MAX_HEADS; k++) {
        rt_loss_kind l = cfg->heads[k].loss;
        int own = k < (int)p->n_outputs && p->outputs[k]->n_metrics;
        int classifies = l == RT_LOSS_SPARSE_CE || l == RT_LOSS_CE || l == RT_LOSS_BCE ||
                         l == RT_LOSS_CROSS_ENTROPY || l == RT_LOSS_NLL ||
                         l == RT_LOSS_BCE_LOGITS || l == RT_LOSS_BCE_TORCH || l == RT_LOSS_HINGE ||
                         l == RT_LOSS_SQUARED_HINGE;
        if (!own && !classifies)
            cfg->heads[k].metrics &= ~RT_METRIC_ACCURACY;
    }
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
        return 0; /* rt_h_compile built it (a small model) */
    /* Keras models and graphs are channels last already */
    if (q->model_case != RTRAIN__V1__COMPILE_REQUEST__MODEL_ONNX && q->data_layout &&
        *q->data_layout && strcasecmp(q->data_layout, "NHWC"))
        return rt_call_fail(c, RT_EINVAL,
                            "data_layout '%.16s' applies to ONNX models; this "
                            "model takes its input as it declares it (NHWC)",
                            q->data_layout);
    if (q->model_case == RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON) {
        char err[4096];
        rc = rt_keras_import_bind(q->keras_json, strlen(q->keras_json), q->input_dims,
                                  (int)q->n_input_dims, q->input_values, &st->g, err, sizeof err,
                                  NULL, NULL);
        if (rc < 0)
            return rt_call_fail(c, rc, "%s", err);
        if ((rc = keras_compile_defaults(c, &st->cfg, q->keras_json, q->config)) < 0)
            return rc;
        /* several outputs: a loss and weight each (import_keras.h) */
        if ((rc = rt_keras_heads(q->keras_json, strlen(q->keras_json), &st->cfg, err, sizeof err)) <
            0)
            return rt_call_fail(c, rc, "%s", err);
        /* the request's metrics apply to every output, as Keras' compile(
         * metrics=[...]) on a model with several */
        for (int k = 0; rc > 0 && k < rc && q->config && q->config->n_metrics; k++)
            st->cfg.heads[k].metrics = st->cfg.metrics;
        int heads = rc;
        if ((rc = output_losses(c, &st->cfg, heads, q->config)) < 0)
            return rc;
        unasked_accuracy(&st->cfg, heads, q->config);
    } else if (q->model_case == RTRAIN__V1__COMPILE_REQUEST__MODEL_ONNX) {
        char err[768];
        rt_onnx_opts io = {.output = q->onnx_output};
        if (rt_onnx_layout_from_name(q->data_layout, &io.data_nhwc) < 0)
            return rt_call_fail(c, RT_EINVAL,
                                "unknown data_layout '%.16s' (NCHW, the model's, "
                                "or NHWC)",
                                q->data_layout);
        rc = rt_onnx_import_opts(q->onnx.data, q->onnx.len, &io, &st->g, err, sizeof err);
        if (rc < 0)
            return rt_call_fail(c, rc, "%s", err);
        st->nchw = io.nchw_input;
        if (io.n_outputs > 1) {
            /* every output takes the request's loss and metrics unless
             * TrainConfig.outputs gives its own */
            st->cfg.n_heads = io.n_outputs;
            for (int k = 0; k < io.n_outputs; k++)
                st->cfg.heads[k] = (struct rt_loss_head){
                    .loss = st->cfg.loss,
                    .from_logits = st->cfg.from_logits,
                    .weight = 1.0f,
                    .metrics = q->config && q->config->n_metrics ? st->cfg.metrics : 0};
            st->cfg.label_dtype = RT_F32;
            st->cfg.label_ndim = 0;
        }
        if ((rc = output_losses(c, &st->cfg, io.n_outputs, q->config)) < 0)
            return rc;
        if (io.n_outputs > 1)
            unasked_accuracy(&st->cfg, io.n_outputs, q->config);
        /* a PyTorch model trains with torch.optim.Adam's epsilon */
        st->cfg.adam_eps_vhat = 1;
    } else {
        st->g = rt_graph_create();
        if (!st->g)
            return OOM(c);
        /* the temporaries in the call's arena, charged to the caller (also
         * for rt_h_restore_program's calls, which have no protobuf allocator) */
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
        return rt_call_fail(c, rc, "%s",
                            rt_graph_errmsg(st->g)[0] ? rt_graph_errmsg(st->g) : rt_strerror(rc));
    return 0;
}

/* MPI replicas (server/mpi): the same program on every rank */
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
int rt_h_unmake_program(rt_call *c, rt_program *p, int rc)
{
    if (c->srv->state)
        rt_state_program_remove(c->srv->state, c->sess->id, rt_program_id(p));
    rt_session_remove_program(c->sess, p);
    return rc;
}

static int compile_answer(rt_call *c, compile_st *st, rt_program *prog, int hit);

/* A model at least this large (Keras JSON, ONNX) leaves its parse's memory
 * free in malloc's heaps, and glibc gives back only the top of a heap by
 * itself: a hostile 16 MiB Keras file (570,000 empty objects) parsed at a
 * 577 MiB peak and 531 MiB stayed allocated after. compile_work returns it
 * to the system (malloc_trim) on the compile pool, after the import, never
 * on a cq thread (a compile this large is never inline). */
#define RT_COMPILE_TRIM_BYTES (4u << 20)

static int compile_work_model(rt_call *c);

static int compile_work(rt_call *c)
{
    int rc = compile_work_model(c);
#ifdef __GLIBC__
    Rtrain__V1__CompileRequest *q = REQ(c, Rtrain__V1__CompileRequest);
    size_t model = q->model_case == RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON && q->keras_json
                       ? strlen(q->keras_json)
                   : q->model_case == RTRAIN__V1__COMPILE_REQUEST__MODEL_ONNX ? q->onnx.len
                                                                              : 0;
    if (model >= RT_COMPILE_TRIM_BYTES)
        malloc_trim(0);
#endif
    return rc;
}

static int compile_work_model(rt_call *c)
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
        int rc =
            rt_plan_compile_cancellable(st->g, &st->cfg, &c->cancelled, &p, NULL, err, sizeof err);
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
    if ((rc = rt_h_durable_program(c, prog)) < 0 || (rc = compile_answer(c, st, prog, hit)) < 0)
        return rt_h_unmake_program(c, prog, rc);
    /* a client gone (its deadline) would never learn the id */
    if (rt_call_is_cancelled(c))
        return rt_h_unmake_program(c, prog, rt_call_fail(c, RT_ECANCELLED, "compile cancelled"));
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
    Rtrain__V1__CompileResponse *r =
        NEW(c, Rtrain__V1__CompileResponse, RTRAIN__V1__COMPILE_RESPONSE__INIT);
    Rtrain__V1__CompileReport *cr =
        NEW(c, Rtrain__V1__CompileReport, RTRAIN__V1__COMPILE_REPORT__INIT);
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
    cr->backend = rt_call_strdup(c, rep->backend);
    {
        const rt_train_config *pc = rt_plan_config(st->plan);
        static const char *const optn[] = {"",        "sgd",      "adam",   "adamw", "rmsprop",
                                           "adagrad", "adadelta", "adamax", "nadam", "ftrl"};
        const char *ln = rt_loss_name(pc->loss);
        cr->loss = (char *)(ln ? ln : "");
        cr->data_layout = (char *)(st->nchw ? "NCHW" : "");
        cr->optimizer = (char *)(pc->opt >= 1 && pc->opt <= RT_OPT_LAST ? optn[pc->opt] : "");
    }
    cr->passes = rt_call_alloc(c, sizeof *cr->passes * RT_COMPILE_PASSES);
    if (!cr->passes)
        return OOM(c);
    for (int i = 0; i < RT_COMPILE_PASSES; i++) {
        Rtrain__V1__CompilePass *ps =
            NEW(c, Rtrain__V1__CompilePass, RTRAIN__V1__COMPILE_PASS__INIT);
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
        pi->shape = rt_h_dims_pb(c, nd, dims);
        pi->n_shape = (size_t)nd;
        pi->trainable = tr;
        cr->params[cr->n_params++] = pi;
    }
    const int nn = rt_plan_n_nodes(st->plan);
    cr->ops = rt_call_alloc(c, sizeof *cr->ops * (size_t)(nn > 0 ? nn : 1));
    if (!cr->ops)
        return OOM(c);
    for (int i = 0; i < nn; i++) {
        Rtrain__V1__OpInfo *oi = NEW(c, Rtrain__V1__OpInfo, RTRAIN__V1__OP_INFO__INIT);
        char op[48];
        const char *name;
        int prec;
        if (!oi || rt_plan_node_info(st->plan, i, &name, op, sizeof op, &prec) < 0 ||
            !(oi->op = rt_call_strdup(c, op)))
            return OOM(c);
        oi->name = (char *)name;
        oi->precision = (char *)rt_precision_name(prec);
        cr->ops[cr->n_ops++] = oi;
    }
    cr->bf16_ops = rep->n_bf16;
    int64_t d[RT_MAX_DIMS];
    int n = rt_plan_input_shape(st->plan, d);
    if (n >= 0) {
        cr->input_shape = rt_h_dims_pb(c, n, d);
        cr->n_input_shape = (size_t)n;
    }
    n = rt_plan_output_shape(st->plan, d);
    if (n >= 0) {
        cr->output_shape = rt_h_dims_pb(c, n, d);
        cr->n_output_shape = (size_t)n;
    }
    r->report = cr;
    c->tm.cache_hit = hit;
    c->resp = &r->base;
    return 0;
}

int rt_h_compile(rt_call *c)
{
    Rtrain__V1__CompileRequest *q = REQ(c, Rtrain__V1__CompileRequest);
    int rc = rt_h_need_session(c, q->session_id);
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
        !(st->from = rt_session_get_program(c->sess, q->state_from_program)))
        return rt_call_fail(c, RT_ENOTFOUND,
                            "state_from_program: unknown program '%.64s' in "
                            "session %s",
                            q->state_from_program, c->sess->id);
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

/* Compile a kept model (a packed CompileRequest) for session sess under id
 * pid (NULL: a new id), outside any call: at start, and for
 * RestoreCheckpoint (whose work holds the device). */
int rt_h_restore_program(rt_srv *srv, rt_session *sess, const uint8_t *req, size_t len,
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
    rt__call_arena_free(c);
    free(c);
    return rc;
}
