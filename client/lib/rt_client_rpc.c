/* rt_client_rpc.c - the unary RPCs: info, ping, sessions, compile, run_steps,
 * evaluate, predict, get/set weights. Each one validates its arguments
 * (a clear RT_EINVAL before any I/O), builds the request on the stack, makes
 * one unary call and copies the answer into caller-owned result structs. */
#include "rt_client_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define FREE_RESP(r) protobuf_c_message_free_unpacked(&(r)->base, NULL)

static char **copy_strv(char **src, size_t n, size_t *n_out)
{
    char **v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        v[i] = rt__strdup(src[i]);
        if (!v[i]) {
            for (size_t j = 0; j < i; j++)
                free(v[j]);
            free(v);
            return NULL;
        }
    }
    *n_out = n;
    return v;
}

static void free_strv(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void rt_client_info_free(rt_client_info *info)
{
    if (!info)
        return;
    free(info->version);
    free(info->device_name);
    free(info->device_kind);
    free(info->backend);
    free_strv(info->ops, info->n_ops);
    free_strv(info->formats, info->n_formats);
    free_strv(info->losses, info->n_losses);
    free_strv(info->optimizers, info->n_optimizers);
    free_strv(info->replica_hosts, info->n_replica_hosts);
    memset(info, 0, sizeof *info);
}

int rt_client_info_get(rt_client *c, rt_client_info *out)
{
    if (!c || !out)
        return RT_EINVAL;
    memset(out, 0, sizeof *out);
    rt__call_begin(c, RT__M_INFO);
    Rtrain__V1__InfoRequest req = RTRAIN__V1__INFO_REQUEST__INIT;
    Rtrain__V1__InfoResponse *r;
    int rc = rt__unary(c, RT__M_INFO, &req.base, &rtrain__v1__info_response__descriptor,
                       (ProtobufCMessage **)&r);
    if (rc == 0) {
        rt__take_timings(c, r->timings, 0);
        out->version = rt__strdup(r->version);
        out->engine_version = r->engine_version;
        const Rtrain__V1__Device *d = r->n_devices ? r->devices[0] : NULL;
        out->device_name = rt__strdup(d ? d->name : "");
        out->device_kind = rt__strdup(d ? d->kind : "");
        out->backend = rt__strdup(d ? d->backend : "");
        snprintf(out->state, sizeof out->state, "%s", r->state ? r->state : "");
        if (d) {
            out->device_memory_bytes = d->memory_bytes;
            out->device_cores = d->cores;
        }
        if (r->limits) {
            out->max_message_bytes = r->limits->max_message_bytes;
            out->max_dataset_bytes = r->limits->max_dataset_bytes;
            out->max_upload_bytes = r->limits->max_upload_bytes;
            out->max_sessions = r->limits->max_sessions;
            out->max_dim = r->limits->max_dim;
            out->max_params = r->limits->max_params;
            out->max_steps_per_call = r->limits->max_steps_per_call;
        }
        out->ops = copy_strv(r->ops, r->n_ops, &out->n_ops);
        out->formats = copy_strv(r->formats, r->n_formats, &out->n_formats);
        out->losses = copy_strv(r->losses, r->n_losses, &out->n_losses);
        out->optimizers = copy_strv(r->optimizers, r->n_optimizers, &out->n_optimizers);
        out->deterministic_reduce = r->deterministic_reduce;
        out->replica_hosts = copy_strv(r->replica_hosts, r->n_replica_hosts, &out->n_replica_hosts);
        if (!out->replica_hosts || !out->version || !out->device_name || !out->device_kind ||
            !out->backend || !out->ops || !out->formats || !out->losses || !out->optimizers) {
            rt_client_info_free(out);
            rc = rt__err(c, RT_ENOMEM, "GetInfo: out of memory");
        }
        FREE_RESP(r);
    }
    return rt__call_end(c, rc);
}

int rt_client_ping(rt_client *c, size_t payload_bytes, uint64_t *rtt_ns)
{
    if (!c)
        return RT_EINVAL;
    rt__call_begin(c, RT__M_PING);
    if (payload_bytes > UINT32_MAX)
        return rt__call_end(c, rt__err(c, RT_ETOOBIG, "Ping: payload over 4 GiB"));
    uint8_t *buf = NULL;
    if (payload_bytes) {
        buf = malloc(payload_bytes);
        if (!buf)
            return rt__call_end(c, rt__err(c, RT_ENOMEM, "Ping: out of memory"));
        memset(buf, 0xa5, payload_bytes);
    }
    Rtrain__V1__PingRequest req = RTRAIN__V1__PING_REQUEST__INIT;
    req.payload.data = buf;
    req.payload.len = payload_bytes;
    req.response_bytes = (uint32_t)payload_bytes;
    Rtrain__V1__PingResponse *r;
    int rc = rt__unary(c, RT__M_PING, &req.base, &rtrain__v1__ping_response__descriptor,
                       (ProtobufCMessage **)&r);
    free(buf);
    if (rc == 0) {
        rt__take_timings(c, r->timings, 0);
        if (r->payload.len != payload_bytes)
            rc = rt__err(c, RT_EPROTO, "Ping: asked for %zu bytes back, got %zu", payload_bytes,
                         r->payload.len);
        FREE_RESP(r);
    }
    if (rtt_ns)
        *rtt_ns = c->cur.round_trip_ns;
    return rt__call_end(c, rc);
}

int rt_client_session_create(rt_client *c, const char *name, char *id_out)
{
    if (!c || !id_out)
        return RT_EINVAL;
    id_out[0] = 0;
    rt__call_begin(c, RT__M_CREATE_SESSION);
    Rtrain__V1__CreateSessionRequest req = RTRAIN__V1__CREATE_SESSION_REQUEST__INIT;
    req.name = (char *)(name ? name : "");
    Rtrain__V1__CreateSessionResponse *r;
    int rc = rt__unary(c, RT__M_CREATE_SESSION, &req.base,
                       &rtrain__v1__create_session_response__descriptor, (ProtobufCMessage **)&r);
    if (rc == 0) {
        rt__take_timings(c, r->timings, 0);
        rc = rt__copy_id(c, id_out, r->session_id);
        if (rc == 0 && !id_out[0])
            rc = rt__err(c, RT_EPROTO, "CreateSession: the daemon sent an empty id");
        if (rc == 0 && r->session_token && *r->session_token)
            rt_client_set_session_token(c, id_out, r->session_token);
        FREE_RESP(r);
    }
    return rt__call_end(c, rc);
}

int rt_client_session_close(rt_client *c, const char *session)
{
    if (!c)
        return RT_EINVAL;
    rt__call_begin(c, RT__M_CLOSE_SESSION);
    int rc = rt__check_id(c, "session", session);
    if (rc < 0)
        return rt__call_end(c, rc);
    Rtrain__V1__CloseSessionRequest req = RTRAIN__V1__CLOSE_SESSION_REQUEST__INIT;
    req.session_id = (char *)session;
    Rtrain__V1__CloseSessionResponse *r;
    rc = rt__unary(c, RT__M_CLOSE_SESSION, &req.base,
                   &rtrain__v1__close_session_response__descriptor, (ProtobufCMessage **)&r);
    if (rc == 0) {
        rt__take_timings(c, r->timings, 0);
        FREE_RESP(r);
    }
    return rt__call_end(c, rc);
}

/* ------------------------------------------------------------- compile */

/* The default metric: this very string (rt_train_opts_init's list, or a
 * caller's list holding its pointer) is the default, not asked for. */
static const char rt__accuracy_default[] = "accuracy";

void rt_train_opts_init(rt_train_opts *o)
{
    static const char *const accuracy[] = {rt__accuracy_default};
    memset(o, 0, sizeof *o);
    o->metrics = accuracy;
    o->n_metrics = 1;
    o->batch_size = 32;
}

void rt_client_compile_result_free(rt_client_compile_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_params; i++)
        free(r->params[i].name);
    free(r->params);
    for (size_t i = 0; i < r->n_ops; i++)
        free(r->ops[i].name);
    free(r->ops);
    memset(r, 0, sizeof *r);
}

typedef struct onnx_model {
    const void *data;
    size_t len;
    const char *output;
} onnx_model;

static int do_compile(rt_client *c, const char *session, const rt_model *m, const char *keras_json,
                      const onnx_model *onnx, const rt_train_opts *o, rt_client_compile_result *out)
{
    if (!c || !out)
        return RT_EINVAL;
    memset(out, 0, sizeof *out);
    rt__call_begin(c, RT__M_COMPILE);
    int rc = rt__check_id(c, "session", session);
    if (rc < 0)
        return rt__call_end(c, rc);
    rt_train_opts defaults;
    if (!o) {
        rt_train_opts_init(&defaults);
        o = &defaults;
    }
    if (o->n_metrics < 0 || (o->n_metrics && !o->metrics) || o->label_ndim < 0 ||
        o->label_ndim > RT_CLIENT_MAX_DIMS || o->input_ndim < 0 ||
        o->input_ndim > RT_CLIENT_MAX_DIMS)
        return rt__call_end(
            c,
            rt__err(c, RT_EINVAL, "Compile: bad training options (metrics, label or input shape)"));

    if (o->n_outputs < 0 || o->n_outputs > RT_CLIENT_MAX_OUTPUTS || (o->n_outputs && !o->outputs))
        return rt__call_end(
            c, rt__err(c, RT_EINVAL, "Compile: n_outputs must be 0..%d", RT_CLIENT_MAX_OUTPUTS));
    Rtrain__V1__OutputLoss outs[RT_CLIENT_MAX_OUTPUTS], *outp[RT_CLIENT_MAX_OUTPUTS];
    for (int k = 0; k < o->n_outputs; k++) {
        const rt_output_loss *ol = &o->outputs[k];
        rtrain__v1__output_loss__init(&outs[k]);
        outs[k].loss = (char *)(ol->loss ? ol->loss : "");
        outs[k].from_logits = ol->from_logits != 0;
        outs[k].has_weight = ol->has_weight != 0;
        outs[k].weight = ol->weight;
        outs[k].n_metrics = ol->metrics && ol->n_metrics > 0 ? (size_t)ol->n_metrics : 0;
        outs[k].metrics = (char **)ol->metrics;
        outp[k] = &outs[k];
    }

    Rtrain__V1__LrSchedule sched = RTRAIN__V1__LR_SCHEDULE__INIT;
    sched.kind = (char *)(o->schedule ? o->schedule : "");
    sched.step_size = o->step_size;
    sched.gamma = o->gamma;
    sched.warmup_steps = o->warmup_steps;
    sched.total_steps = o->total_steps;
    sched.min_lr = o->min_lr;

    Rtrain__V1__TrainConfig cfg = RTRAIN__V1__TRAIN_CONFIG__INIT;
    cfg.loss = (char *)(o->loss ? o->loss : "");
    cfg.from_logits = o->from_logits != 0;
    cfg.optimizer = (char *)(o->optimizer ? o->optimizer : "");
    cfg.learning_rate = o->lr;
    cfg.momentum = o->momentum;
    cfg.nesterov = o->nesterov != 0;
    cfg.beta1 = o->beta1;
    cfg.beta2 = o->beta2;
    cfg.epsilon = o->eps;
    cfg.weight_decay = o->weight_decay;
    cfg.rho = o->rho;
    cfg.clip_norm = o->clip_norm;
    cfg.schedule = (o->schedule && *o->schedule) || o->step_size || o->gamma || o->warmup_steps ||
                           o->total_steps || o->min_lr
                       ? &sched
                       : NULL;
    cfg.n_metrics = (size_t)o->n_metrics;
    cfg.metrics = (char **)o->metrics;
    for (int i = 0; i < o->n_metrics; i++)
        cfg.default_accuracy |= o->metrics[i] == rt__accuracy_default;
    cfg.batch_size = o->batch_size;
    cfg.seed = o->seed;
    cfg.no_shuffle = o->no_shuffle != 0;
    cfg.sync_batchnorm = o->sync_batchnorm != 0;
    cfg.precision = (char *)(o->precision ? o->precision : "");
    cfg.label_dtype = (Rtrain__V1__DType)o->label_dtype;
    cfg.n_label_shape = (size_t)o->label_ndim;
    cfg.label_shape = (int64_t *)o->label_shape;
    cfg.reduction = (char *)(o->reduction ? o->reduction : "");
    cfg.label_smoothing = o->label_smoothing;
    cfg.has_ignore_index = o->has_ignore_index != 0;
    cfg.ignore_index = o->ignore_index;
    cfg.has_loss_beta = o->has_loss_beta != 0;
    cfg.loss_beta = o->loss_beta;
    cfg.n_class_weight = o->class_weight && o->n_class_weight > 0 ? (size_t)o->n_class_weight : 0;
    cfg.class_weight = (float *)o->class_weight;
    cfg.n_pos_weight = o->pos_weight && o->n_pos_weight > 0 ? (size_t)o->n_pos_weight : 0;
    cfg.pos_weight = (float *)o->pos_weight;
    cfg.no_loss_check = o->no_loss_check != 0;
    cfg.l2_weight_decay = o->l2_weight_decay;
    cfg.dampening = o->dampening;
    cfg.n_outputs = (size_t)o->n_outputs;
    cfg.outputs = o->n_outputs ? outp : NULL;
    cfg.has_ftrl = o->has_ftrl != 0;
    cfg.ftrl_learning_rate_power = o->ftrl_power;
    cfg.ftrl_initial_accumulator_value = o->ftrl_init;
    cfg.ftrl_l1_regularization_strength = o->ftrl_l1;
    cfg.ftrl_l2_regularization_strength = o->ftrl_l2;
    cfg.ftrl_l2_shrinkage_regularization_strength = o->ftrl_shrink;
    cfg.ftrl_beta = o->ftrl_beta;

    Rtrain__V1__CompileRequest req = RTRAIN__V1__COMPILE_REQUEST__INIT;
    req.session_id = (char *)session;
    req.config = &cfg;
    req.state_from_program = (char *)(o->state_from ? o->state_from : "");
    req.data_layout = (char *)(o->data_layout ? o->data_layout : "");
    if (m) {
        req.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
        req.graph = rt__model_graph(m);
    } else if (onnx) {
        req.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_ONNX;
        req.onnx.data = (uint8_t *)onnx->data;
        req.onnx.len = onnx->len;
        req.onnx_output = (char *)(onnx->output ? onnx->output : "");
    } else {
        req.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
        req.keras_json = (char *)keras_json;
        req.n_input_dims = (size_t)o->input_ndim;
        req.input_dims = (int64_t *)o->input_shape;
        req.input_values = o->input_ndim ? 0 : o->input_values;
    }
    Rtrain__V1__CompileResponse *r;
    rc = rt__unary(c, RT__M_COMPILE, &req.base, &rtrain__v1__compile_response__descriptor,
                   (ProtobufCMessage **)&r);
    if (rc < 0)
        return rt__call_end(c, rc);
    rt__take_timings(c, r->timings, 0);
    rc = rt__copy_id(c, out->program_id, r->program_id);
    const Rtrain__V1__CompileReport *rep = r->report;
    if (rc == 0 && rep) {
        out->param_count = rep->param_count;
        out->trainable_param_count = rep->trainable_param_count;
        out->flops_per_step = rep->flops_per_step;
        out->arena_bytes = rep->arena_bytes;
        out->naive_bytes = rep->naive_bytes;
        out->compile_ns = rep->compile_ns;
        out->cache_hit = rep->cache_hit || (r->timings && r->timings->cache_hit);
        out->kernels = rep->kernels;
        snprintf(out->data_layout, sizeof out->data_layout, "%s",
                 rep->data_layout ? rep->data_layout : "");
        snprintf(out->backend, sizeof out->backend, "%s", rep->backend ? rep->backend : "");
        out->n_passes = 0;
        for (size_t i = 0; i < rep->n_passes && i < RT_CLIENT_MAX_PASSES; i++) {
            snprintf(out->pass_name[i], sizeof out->pass_name[i], "%s", rep->passes[i]->name);
            out->pass_ns[i] = rep->passes[i]->ns;
            out->n_passes++;
        }
        rc = rt__shape_from_pb(c, "input shape", rep->n_input_shape, rep->input_shape,
                               &out->input_ndim, out->input_shape);
        if (rc == 0)
            rc = rt__shape_from_pb(c, "output shape", rep->n_output_shape, rep->output_shape,
                                   &out->output_ndim, out->output_shape);
        if (rc == 0 && rep->n_params) {
            out->params = calloc(rep->n_params, sizeof *out->params);
            if (!out->params)
                rc = rt__err(c, RT_ENOMEM, "Compile: out of memory");
            for (size_t i = 0; rc == 0 && i < rep->n_params; i++) {
                rt_client_param_info *pi = &out->params[i];
                pi->name = rt__strdup(rep->params[i]->name);
                out->n_params++;
                if (!pi->name)
                    rc = rt__err(c, RT_ENOMEM, "Compile: out of memory");
                else
                    rc = rt__shape_from_pb(c, "param shape", rep->params[i]->n_shape,
                                           rep->params[i]->shape, &pi->ndim, pi->shape);
                pi->trainable = rep->params[i]->trainable;
            }
        }
        out->bf16_ops = rep->bf16_ops;
        if (rc == 0 && rep->n_ops) {
            out->ops = calloc(rep->n_ops, sizeof *out->ops);
            if (!out->ops)
                rc = rt__err(c, RT_ENOMEM, "Compile: out of memory");
            for (size_t i = 0; rc == 0 && i < rep->n_ops; i++) {
                rt_client_op_info *oi = &out->ops[i];
                const Rtrain__V1__OpInfo *po = rep->ops[i];
                oi->name = rt__strdup(po->name ? po->name : "");
                out->n_ops++;
                if (!oi->name)
                    rc = rt__err(c, RT_ENOMEM, "Compile: out of memory");
                snprintf(oi->op, sizeof oi->op, "%s", po->op ? po->op : "");
                snprintf(oi->precision, sizeof oi->precision, "%s",
                         po->precision ? po->precision : "");
            }
        }
    }
    if (r->timings && r->timings->cache_hit)
        out->cache_hit = 1;
    if (rc < 0)
        rt_client_compile_result_free(out);
    FREE_RESP(r);
    return rt__call_end(c, rc);
}

int rt_client_compile(rt_client *c, const char *session, const rt_model *m, const rt_train_opts *o,
                      rt_client_compile_result *out)
{
    if (!m)
        return c ? rt__err(c, RT_EINVAL, "Compile: model is NULL") : RT_EINVAL;
    return do_compile(c, session, m, NULL, NULL, o, out);
}

int rt_client_compile_keras(rt_client *c, const char *session, const char *keras_json,
                            const rt_train_opts *o, rt_client_compile_result *out)
{
    if (!keras_json || !*keras_json)
        return c ? rt__err(c, RT_EINVAL, "Compile: Keras JSON is empty") : RT_EINVAL;
    return do_compile(c, session, NULL, keras_json, NULL, o, out);
}

int rt_client_compile_onnx(rt_client *c, const char *session, const void *onnx, size_t len,
                           const char *output, const rt_train_opts *o,
                           rt_client_compile_result *out)
{
    if (!onnx || !len)
        return c ? rt__err(c, RT_EINVAL, "Compile: the ONNX model is empty") : RT_EINVAL;
    const onnx_model om = {onnx, len, output};
    return do_compile(c, session, NULL, NULL, &om, o, out);
}

int rt_client_export_onnx(rt_client *c, const char *session, const char *program, const void *onnx,
                          size_t len, const char *output, uint8_t **out, size_t *outlen)
{
    if (!c || !out || !outlen)
        return RT_EINVAL;
    *out = NULL;
    *outlen = 0;
    rt__call_begin(c, RT__M_EXPORT_ONNX);
    int rc = rt__check_ids(c, session, program);
    if (rc == 0 && (!onnx || !len))
        rc = rt__err(c, RT_EINVAL, "ExportOnnx: the ONNX model is empty");
    if (rc < 0)
        return rt__call_end(c, rc);
    Rtrain__V1__ExportOnnxRequest req = RTRAIN__V1__EXPORT_ONNX_REQUEST__INIT;
    req.session_id = (char *)session;
    req.program_id = (char *)program;
    req.onnx.data = (uint8_t *)onnx;
    req.onnx.len = len;
    req.onnx_output = (char *)(output ? output : "");
    Rtrain__V1__ExportOnnxResponse *r;
    rc = rt__unary(c, RT__M_EXPORT_ONNX, &req.base, &rtrain__v1__export_onnx_response__descriptor,
                   (ProtobufCMessage **)&r);
    if (rc < 0)
        return rt__call_end(c, rc);
    rt__take_timings(c, r->timings, 0);
    *out = malloc(r->onnx.len ? r->onnx.len : 1);
    if (!*out) {
        rc = rt__err(c, RT_ENOMEM, "ExportOnnx: out of memory");
    } else {
        memcpy(*out, r->onnx.data, r->onnx.len);
        *outlen = r->onnx.len;
    }
    FREE_RESP(r);
    return rt__call_end(c, rc);
}

/* ------------------------------------------------------------- training */

void rt_client_steps_result_free(rt_client_steps_result *r)
{
    if (!r)
        return;
    free(r->losses);
    free(r->epochs);
    memset(r, 0, sizeof *r);
}

int rt__run_steps_start(rt_client *c, rt__call *k, const rt_client_steps_params *p, uint64_t *seq)
{
    Rtrain__V1__RunStepsRequest req = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    req.session_id = (char *)p->session;
    req.program_id = (char *)p->program;
    req.dataset_id = (char *)p->dataset;
    req.val_dataset_id = (char *)(p->val_dataset ? p->val_dataset : "");
    req.steps = p->steps;
    req.seq = p->seq ? p->seq : ++c->seq;
    req.after_seq = p->after_seq;
    req.val_at_end = p->val_at_end != 0;
    req.return_losses = p->return_losses != 0;
    req.learning_rate = p->learning_rate;
    req.checkpoint = p->checkpoint != 0;
    req.checkpoint_every_steps = p->checkpoint_every_steps;
    req.checkpoint_every_s = p->checkpoint_every_s;
    req.boot_id = p->boot_id;
    if (seq)
        *seq = req.seq;
    return rt__unary_start(c, k, RT__M_RUN_STEPS, &req.base);
}

int rt__run_steps_finish(rt_client *c, rt__call *k, rt_client_steps_result *out)
{
    memset(out, 0, sizeof *out);
    Rtrain__V1__RunStepsResponse *r;
    int rc = rt__unary_finish(c, k, &rtrain__v1__run_steps_response__descriptor,
                              (ProtobufCMessage **)&r);
    if (rc < 0)
        return rc;
    rt__take_timings(c, r->timings, 0);
    out->global_step = r->global_step;
    rt__metrics_from_pb(r->last, &out->last);
    rt__metrics_from_pb(r->mean, &out->mean);
    out->replayed = r->replayed;
    if (r->val) {
        rt__metrics_from_pb(r->val, &out->val);
        out->has_val = 1;
    }
    out->stopped = r->stopped;
    out->recorded = r->recorded;
    out->recorded_step = r->recorded_step;
    out->boot_id = r->boot_id;
    if (r->boot_id) {
        c->daemon_boot = r->boot_id;
        c->daemon_state = (int)r->state;
    }
    if (r->n_losses) {
        out->losses = malloc(r->n_losses * sizeof(float));
        if (out->losses) {
            memcpy(out->losses, r->losses, r->n_losses * sizeof(float));
            out->n_losses = r->n_losses;
        } else {
            rc = rt__err(c, RT_ENOMEM, "RunSteps: out of memory");
        }
    }
    if (rc == 0 && r->n_epochs) {
        out->epochs = calloc(r->n_epochs, sizeof *out->epochs);
        if (out->epochs) {
            for (size_t i = 0; i < r->n_epochs; i++)
                rt__epoch_from_pb(r->epochs[i], &out->epochs[i]);
            out->n_epochs = r->n_epochs;
        } else {
            rc = rt__err(c, RT_ENOMEM, "RunSteps: out of memory");
        }
    }
    if (rc < 0)
        rt_client_steps_result_free(out);
    FREE_RESP(r);
    return rc;
}

int rt_client_run_steps(rt_client *c, const rt_client_steps_params *p, rt_client_steps_result *out)
{
    if (!c || !p || !out)
        return RT_EINVAL;
    memset(out, 0, sizeof *out);
    rt__call_begin(c, RT__M_RUN_STEPS);
    int rc = rt__check_ids(c, p->session, p->program);
    if (rc == 0)
        rc = rt__check_id(c, "dataset", p->dataset);
    if (rc == 0 && p->steps == 0)
        rc = rt__err(c, RT_EINVAL, "RunSteps: steps must be at least 1");
    rt__call k;
    if (rc == 0)
        rc = rt__run_steps_start(c, &k, p, NULL);
    if (rc == 0)
        rc = rt__run_steps_finish(c, &k, out);
    return rt__call_end(c, rc);
}

int rt_client_evaluate(rt_client *c, const char *session, const char *program, const char *dataset,
                       rt_client_metrics *out)
{
    if (!c || !out)
        return RT_EINVAL;
    memset(out, 0, sizeof *out);
    rt__call_begin(c, RT__M_EVALUATE);
    int rc = rt__check_ids(c, session, program);
    if (rc == 0)
        rc = rt__check_id(c, "dataset", dataset);
    if (rc < 0)
        return rt__call_end(c, rc);
    Rtrain__V1__EvaluateRequest req = RTRAIN__V1__EVALUATE_REQUEST__INIT;
    req.session_id = (char *)session;
    req.program_id = (char *)program;
    req.dataset_id = (char *)dataset;
    Rtrain__V1__EvaluateResponse *r;
    rc = rt__unary(c, RT__M_EVALUATE, &req.base, &rtrain__v1__evaluate_response__descriptor,
                   (ProtobufCMessage **)&r);
    if (rc == 0) {
        rt__take_timings(c, r->timings, 0);
        rt__metrics_from_pb(r->metrics, out);
        FREE_RESP(r);
    }
    return rt__call_end(c, rc);
}

static int do_predict(rt_client *c, const char *session, const char *program,
                      const rt_client_array *x, const char *dataset, rt_client_tensor *out)
{
    if (!c || !out)
        return RT_EINVAL;
    memset(out, 0, sizeof *out);
    rt__call_begin(c, RT__M_PREDICT);
    int rc = rt__check_ids(c, session, program);
    if (rc == 0 && !x)
        rc = rt__check_id(c, "dataset", dataset);
    size_t nbytes = 0;
    if (rc == 0 && x)
        rc = rt__array_nbytes(c, "Predict x", x, &nbytes);
    if (rc < 0)
        return rt__call_end(c, rc);
    Rtrain__V1__PredictRequest req = RTRAIN__V1__PREDICT_REQUEST__INIT;
    Rtrain__V1__Tensor t = RTRAIN__V1__TENSOR__INIT;
    req.session_id = (char *)session;
    req.program_id = (char *)program;
    if (x) {
        t.name = (char *)"x";
        t.dtype = (Rtrain__V1__DType)x->dtype;
        t.n_shape = (size_t)x->ndim;
        t.shape = (int64_t *)x->shape;
        t.data.data = (uint8_t *)x->data;
        t.data.len = nbytes;
        req.input_case = RTRAIN__V1__PREDICT_REQUEST__INPUT_X;
        req.x = &t;
    } else {
        req.input_case = RTRAIN__V1__PREDICT_REQUEST__INPUT_DATASET_ID;
        req.dataset_id = (char *)dataset;
    }
    Rtrain__V1__PredictResponse *r;
    rc = rt__unary(c, RT__M_PREDICT, &req.base, &rtrain__v1__predict_response__descriptor,
                   (ProtobufCMessage **)&r);
    if (rc == 0) {
        rt__take_timings(c, r->timings, 0);
        if (!r->y)
            rc = rt__err(c, RT_EPROTO, "Predict: the response has no output tensor");
        else
            rc = rt__tensor_from_pb(c, r->y, out);
        FREE_RESP(r);
    }
    return rt__call_end(c, rc);
}

int rt_client_predict(rt_client *c, const char *session, const char *program,
                      const rt_client_array *x, rt_client_tensor *out)
{
    if (!x)
        return c ? rt__err(c, RT_EINVAL, "Predict: x is NULL") : RT_EINVAL;
    return do_predict(c, session, program, x, NULL, out);
}

int rt_client_predict_dataset(rt_client *c, const char *session, const char *program,
                              const char *dataset, rt_client_tensor *out)
{
    return do_predict(c, session, program, NULL, dataset, out);
}

/* ------------------------------------------------------------- weights */

void rt_client_weights_free(rt_client_weights *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        rt_client_tensor_free(&w->t[i]);
    free(w->t);
    memset(w, 0, sizeof *w);
}

int rt_client_get_weights(rt_client *c, const char *session, const char *program,
                          rt_client_weights *out)
{
    if (!c || !out)
        return RT_EINVAL;
    memset(out, 0, sizeof *out);
    rt__call_begin(c, RT__M_GET_WEIGHTS);
    int rc = rt__check_ids(c, session, program);
    if (rc < 0)
        return rt__call_end(c, rc);
    Rtrain__V1__GetWeightsRequest req = RTRAIN__V1__GET_WEIGHTS_REQUEST__INIT;
    req.session_id = (char *)session;
    req.program_id = (char *)program;
    Rtrain__V1__GetWeightsResponse *r;
    rc = rt__unary(c, RT__M_GET_WEIGHTS, &req.base, &rtrain__v1__get_weights_response__descriptor,
                   (ProtobufCMessage **)&r);
    if (rc < 0)
        return rt__call_end(c, rc);
    rt__take_timings(c, r->timings, 0);
    out->global_step = r->global_step;
    out->learning_rate = r->learning_rate;
    out->t = calloc(r->n_weights ? r->n_weights : 1, sizeof *out->t);
    if (!out->t)
        rc = rt__err(c, RT_ENOMEM, "GetWeights: out of memory");
    for (size_t i = 0; rc == 0 && i < r->n_weights; i++) {
        rc = rt__tensor_from_pb(c, r->weights[i], &out->t[i]);
        if (rc == 0)
            out->n++;
    }
    if (rc < 0)
        rt_client_weights_free(out);
    FREE_RESP(r);
    return rt__call_end(c, rc);
}

int rt_client_set_weights(rt_client *c, const char *session, const char *program,
                          const rt_client_tensor *t, size_t n)
{
    if (!c || (n && !t))
        return RT_EINVAL;
    rt__call_begin(c, RT__M_SET_WEIGHTS);
    int rc = rt__check_ids(c, session, program);
    if (rc < 0)
        return rt__call_end(c, rc);
    Rtrain__V1__Tensor *pt = calloc(n ? n : 1, sizeof *pt);
    Rtrain__V1__Tensor **pp = calloc(n ? n : 1, sizeof *pp);
    if (!pt || !pp) {
        free(pt);
        free(pp);
        return rt__call_end(c, rt__err(c, RT_ENOMEM, "SetWeights: out of memory"));
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rtrain__v1__tensor__init(&pt[i]);
        if (!t[i].name || !*t[i].name)
            rc = rt__err(c, RT_EINVAL, "SetWeights: tensor %zu has no name", i);
        else if (t[i].ndim < 0 || t[i].ndim > RT_CLIENT_MAX_DIMS)
            rc = rt__err(c, RT_EINVAL, "SetWeights: tensor '%s' has ndim %d", t[i].name, t[i].ndim);
        else if (t[i].nbytes && !t[i].data)
            rc = rt__err(c, RT_EINVAL, "SetWeights: tensor '%s' has no data", t[i].name);
        pt[i].name = t[i].name;
        pt[i].dtype = (Rtrain__V1__DType)t[i].dtype;
        pt[i].n_shape = (size_t)(t[i].ndim > 0 ? t[i].ndim : 0);
        pt[i].shape = (int64_t *)t[i].shape;
        pt[i].data.data = t[i].data;
        pt[i].data.len = t[i].nbytes;
        pp[i] = &pt[i];
    }
    if (rc == 0) {
        Rtrain__V1__SetWeightsRequest req = RTRAIN__V1__SET_WEIGHTS_REQUEST__INIT;
        req.session_id = (char *)session;
        req.program_id = (char *)program;
        req.n_weights = n;
        req.weights = pp;
        Rtrain__V1__SetWeightsResponse *r;
        rc = rt__unary(c, RT__M_SET_WEIGHTS, &req.base,
                       &rtrain__v1__set_weights_response__descriptor, (ProtobufCMessage **)&r);
        if (rc == 0) {
            rt__take_timings(c, r->timings, 0);
            FREE_RESP(r);
        }
    }
    free(pt);
    free(pp);
    return rt__call_end(c, rc);
}

/* -------------------------------------------------------------- control */

int rt_client_control(rt_client *c, const rt_client_control_params *p, int *running)
{
    if (!c || !p)
        return RT_EINVAL;
    /* Inside a Fit or training-loop callback the stream's account (c->cur)
     * and a pending rt_client_cancel must survive this call. */
    rt_client_timings outer = c->cur;
    uint64_t outer_resp = c->t_response;
    int outer_cancel = atomic_load(&c->cancel_flag);
    rt__call_begin(c, RT__M_CONTROL);
    int rc = rt__check_ids(c, p->session, p->program);
    if (rc == 0 && (!(p->learning_rate >= 0.0f) || isinf(p->learning_rate)))
        rc = rt__err(c, RT_EINVAL,
                     "Control: learning_rate %g must be finite and > 0 "
                     "(0: unchanged)",
                     (double)p->learning_rate);
    if (rc == 0) {
        Rtrain__V1__ControlRequest req = RTRAIN__V1__CONTROL_REQUEST__INIT;
        req.session_id = (char *)p->session;
        req.program_id = (char *)p->program;
        req.learning_rate = p->learning_rate;
        req.stop = p->stop != 0;
        req.reset_states = p->reset_states != 0;
        req.reset_layer = (char *)(p->reset_layer ? p->reset_layer : "");
        Rtrain__V1__ControlResponse *r;
        rc = rt__unary(c, RT__M_CONTROL, &req.base, &rtrain__v1__control_response__descriptor,
                       (ProtobufCMessage **)&r);
        if (rc == 0) {
            rt__take_timings(c, r->timings, 0);
            if (running)
                *running = r->running;
            FREE_RESP(r);
        }
    }
    rc = rt__call_end(c, rc);
    if (outer.method) {
        c->cur = outer;
        c->t_response = outer_resp;
    }
    if (outer_cancel)
        atomic_store(&c->cancel_flag, 1);
    return rc;
}

/* ------------------------------------------------------------- durability */

void rt_client_set_reattach_ms(rt_client *c, int64_t ms)
{
    if (c)
        c->reattach_ms = ms > 0 ? ms : 0;
}

const char *rt_client_session_token(const rt_client *c, const char *session)
{
    if (!c || !session)
        return NULL;
    for (unsigned i = 0; i < 16; i++)
        if (c->tokens[i].sid[0] && strcmp(c->tokens[i].sid, session) == 0)
            return c->tokens[i].token;
    return NULL;
}

int rt_client_set_session_token(rt_client *c, const char *session, const char *token)
{
    if (!c || !session || !token || strlen(session) >= RT_ID_MAX || strlen(token) >= RT_ID_MAX)
        return RT_EINVAL;
    unsigned slot = c->n_tokens++ % 16;
    for (unsigned i = 0; i < 16; i++)
        if (strcmp(c->tokens[i].sid, session) == 0)
            slot = i;
    snprintf(c->tokens[slot].sid, RT_ID_MAX, "%s", session);
    snprintf(c->tokens[slot].token, RT_ID_MAX, "%s", token);
    return 0;
}

int rt_client_checkpoint(rt_client *c, const char *session, const char *program, int flags,
                         rt_client_ckpt_info *info)
{
    if (!c || !info)
        return RT_EINVAL;
    memset(info, 0, sizeof *info);
    rt__call_begin(c, RT__M_CHECKPOINT);
    int rc = rt__check_ids(c, session, program);
    if (rc < 0)
        return rt__call_end(c, rc);
    const char *tok = rt_client_session_token(c, session);
    Rtrain__V1__CheckpointRequest req = RTRAIN__V1__CHECKPOINT_REQUEST__INIT;
    req.session_id = (char *)session;
    req.program_id = (char *)program;
    req.session_token = (char *)(tok ? tok : "");
    req.save = (flags & RT_CKPT_SAVE) != 0;
    req.pull = (flags & RT_CKPT_PULL) != 0;
    Rtrain__V1__CheckpointResponse *r;
    rc = rt__unary(c, RT__M_CHECKPOINT, &req.base, &rtrain__v1__checkpoint_response__descriptor,
                   (ProtobufCMessage **)&r);
    if (rc == 0) {
        rt__take_timings(c, r->timings, 0);
        info->global_step = r->global_step;
        info->last_seq = r->last_seq;
        info->epoch = r->epoch;
        info->step_in_epoch = r->step_in_epoch;
        info->fit_epochs = r->fit_epochs;
        info->fit_id = r->fit_id;
        info->fit_epochs_done = r->fit_epochs_done;
        info->saved = r->saved;
        info->durable = r->durable;
        info->boot_id = r->boot_id;
        c->daemon_boot = r->boot_id;
        c->daemon_state =
            r->durable ? RTRAIN__V1__STATE_KIND__STATE_DISK : RTRAIN__V1__STATE_KIND__STATE_MEMORY;
        if (r->state.len) {
            if ((info->state = malloc(r->state.len))) {
                memcpy(info->state, r->state.data, r->state.len);
                info->state_len = r->state.len;
            } else {
                rc = rt__err(c, RT_ENOMEM, "Checkpoint: out of memory");
            }
        }
        FREE_RESP(r);
    }
    return rt__call_end(c, rc);
}

/* RestoreCheckpoint: into program (NULL: a new program, its id into
 * program_out). */
static int restore_checkpoint(rt_client *c, const char *session, const char *program,
                              const void *state, size_t len, char *program_out,
                              rt_client_ckpt_info *info)
{
    if (!c || !state || !program_out || !info)
        return RT_EINVAL;
    memset(info, 0, sizeof *info);
    program_out[0] = 0;
    rt__call_begin(c, RT__M_RESTORE_CHECKPOINT);
    int rc = rt__check_id(c, "session", session);
    if (rc == 0 && program)
        rc = rt__check_id(c, "program", program);
    if (rc < 0)
        return rt__call_end(c, rc);
    const char *tok = rt_client_session_token(c, session);
    Rtrain__V1__RestoreCheckpointRequest req = RTRAIN__V1__RESTORE_CHECKPOINT_REQUEST__INIT;
    req.session_id = (char *)session;
    req.session_token = (char *)(tok ? tok : "");
    req.state.data = (uint8_t *)state;
    req.state.len = len;
    if (program)
        req.program_id = (char *)program;
    Rtrain__V1__RestoreCheckpointResponse *r;
    rc = rt__unary(c, RT__M_RESTORE_CHECKPOINT, &req.base,
                   &rtrain__v1__restore_checkpoint_response__descriptor, (ProtobufCMessage **)&r);
    if (rc == 0) {
        rt__take_timings(c, r->timings, 0);
        rc = rt__copy_id(c, program_out, r->program_id);
        info->global_step = r->global_step;
        info->last_seq = r->last_seq;
        FREE_RESP(r);
    }
    return rt__call_end(c, rc);
}

int rt_client_restore_checkpoint(rt_client *c, const char *session, const void *state, size_t len,
                                 char *program_out, rt_client_ckpt_info *info)
{
    return restore_checkpoint(c, session, NULL, state, len, program_out, info);
}

int rt_client_restore_checkpoint_into(rt_client *c, const char *session, const char *program,
                                      const void *state, size_t len, rt_client_ckpt_info *info)
{
    if (!program)
        return RT_EINVAL;
    char id[RT_ID_MAX];
    int rc = restore_checkpoint(c, session, program, state, len, id, info);
    if (rc == 0 && strcmp(id, program) != 0)
        rc = rt__err(c, RT_EPROTO,
                     "RestoreCheckpoint: the daemon answered program %.64s, not %.64s "
                     "(a daemon without program_id makes a new program)",
                     id, program);
    return rc;
}

int rt_client_drop_program(rt_client *c, const char *session, const char *program)
{
    if (!c)
        return RT_EINVAL;
    rt__call_begin(c, RT__M_DROP_PROGRAM);
    int rc = rt__check_id(c, "session", session);
    if (rc == 0)
        rc = rt__check_id(c, "program", program);
    if (rc < 0)
        return rt__call_end(c, rc);
    const char *tok = rt_client_session_token(c, session);
    Rtrain__V1__DropProgramRequest req = RTRAIN__V1__DROP_PROGRAM_REQUEST__INIT;
    req.session_id = (char *)session;
    req.session_token = (char *)(tok ? tok : "");
    req.program_id = (char *)program;
    Rtrain__V1__DropProgramResponse *r;
    rc = rt__unary(c, RT__M_DROP_PROGRAM, &req.base, &rtrain__v1__drop_program_response__descriptor,
                   (ProtobufCMessage **)&r);
    if (rc == 0) {
        rt__take_timings(c, r->timings, 0);
        FREE_RESP(r);
    }
    return rt__call_end(c, rc);
}
