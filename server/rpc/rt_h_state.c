/* rt_h_state.c - GetWeights, SetWeights, ExportOnnx, Checkpoint,
 * RestoreCheckpoint, and the state directory at start and at exit. */
#include "rt_handlers.h"

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
            return rt_h_engine_fail(c, rc);
        t->name = (char *)name;
        t->dtype = RTRAIN__V1__DTYPE__F32;
        t->shape = rt_h_dims_pb(c, nd, dims);
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

int rt_h_get_weights(rt_call *c)
{
    Rtrain__V1__GetWeightsRequest *q = REQ(c, Rtrain__V1__GetWeightsRequest);
    int rc = rt_h_need_program(c, q->session_id, q->program_id);
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
    int rc = rt_onnx_export(q->onnx.data, q->onnx.len, q->onnx_output, export_param, c, &out, &len,
                            err, sizeof err);
    if (rc < 0)
        return rt_call_fail(c, rc == RT_ENOTFOUND || rc == RT_ESHAPE ? RT_EINVAL : rc, "%s%s", err,
                            rc == RT_ENOTFOUND || rc == RT_ESHAPE
                                ? " (not the model this program was compiled from)"
                                : "");
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

int rt_h_export_onnx(rt_call *c)
{
    Rtrain__V1__ExportOnnxRequest *q = REQ(c, Rtrain__V1__ExportOnnxRequest);
    int rc = rt_h_need_program(c, q->session_id, q->program_id);
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
            return rt_h_engine_fail(c, rc);
    }
    Rtrain__V1__SetWeightsResponse *r =
        NEW(c, Rtrain__V1__SetWeightsResponse, RTRAIN__V1__SET_WEIGHTS_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    c->resp = &r->base;
    return 0;
}

int rt_h_set_weights(rt_call *c)
{
    Rtrain__V1__SetWeightsRequest *q = REQ(c, Rtrain__V1__SetWeightsRequest);
    int rc = rt_h_need_program(c, q->session_id, q->program_id);
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
                                    t->name,
                                    rt_data_shape_str((int)t->n_shape, t->shape, a, sizeof a),
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
            return rt_call_fail(c, RT_EINVAL, "weight '%.64s' is missing (all must be given)",
                                name);
        }
    c->work = set_weights_work;
    c->needs_device = 1;
    c->est_ns = rt_plan_report(p)->param_count + 2000;
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
        int rc = rt_h_durable_checkpoint(c, p, RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_STOP);
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

int rt_h_checkpoint(rt_call *c)
{
    Rtrain__V1__CheckpointRequest *q = REQ(c, Rtrain__V1__CheckpointRequest);
    int rc;
    if ((rc = rt_h_need_program(c, q->session_id, q->program_id)) < 0 ||
        (rc = need_token(c, q->session_token)) < 0)
        return rc;
    /* a reattaching client must find the next start, not this one */
    if ((rc = rt_h_refuse_if_stopping(c)) < 0)
        return rc;
    c->work = checkpoint_work;
    c->needs_device = 1;
    c->est_ns = q->save || q->pull ? UINT64_MAX : 2000;
    return 0;
}

static int restore_at_start(void *ud, rt_session *s, const uint8_t *req, size_t len,
                            const char *pid, rt_program **out, char *err, size_t errlen)
{
    return rt_h_restore_program(ud, s, req, len, pid, out, err, errlen);
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

/* RestoreCheckpoint's answer: p's id and position, logged (how: what
 * became of p). */
static int restore_answer(rt_call *c, rt_program *p, const char *how)
{
    Rtrain__V1__RestoreCheckpointResponse *r = NEW(c, Rtrain__V1__RestoreCheckpointResponse,
                                                   RTRAIN__V1__RESTORE_CHECKPOINT_RESPONSE__INIT);
    if (!r || !(r->program_id = rt_call_strdup(c, rt_program_id(p))))
        return OOM(c);
    r->global_step = (uint64_t)rt_exec_global_step(rt_program_exec(p));
    r->last_seq = rt_program_last_seq(p);
    c->resp = &r->base;
    char sid[16], pid[16];
    RT_LOG(RT_LOG_INFO, "session %s: program %s %s a pushed state at step %lld",
           rt_log_id(c->sess->id, sid), rt_log_id(rt_program_id(p), pid), how,
           (long long)r->global_step);
    return 0;
}

/* A packed CompileRequest's bytes without the fields that say where it
 * was compiled, not what: its session and the program it took its first
 * weights from (state_from_program). NULL when it does not unpack. */
static uint8_t *model_bytes(const uint8_t *req, size_t len, size_t *out)
{
    Rtrain__V1__CompileRequest *q = rtrain__v1__compile_request__unpack(NULL, len, req);
    if (!q)
        return NULL;
    char *sid = q->session_id, *from = q->state_from_program;
    q->session_id = q->state_from_program = (char *)protobuf_c_empty_string;
    size_t n = protobuf_c_message_get_packed_size(&q->base);
    uint8_t *b = malloc(n ? n : 1);
    if (b)
        *out = protobuf_c_message_pack(&q->base, b);
    q->session_id = sid;
    q->state_from_program = from;
    rtrain__v1__compile_request__free_unpacked(q, NULL);
    return b;
}

/* Whether the state's model is the program's: the CompileRequest it
 * carries is the one the program was compiled from, up to its session and
 * its state_from_program (a state pulled from a program of the same model
 * in another session or daemon). 0: another; < 0: out of memory. */
static int same_model(const rt_program *p, const rt_ckpt_view *v)
{
    size_t pn, an = 0, bn = 0;
    const uint8_t *pm = rt_program_model(p, &pn);
    if (!pm)
        return 0;
    if (pn == v->req_len && memcmp(pm, v->req, pn) == 0)
        return 1;
    /* the program's own unpacks (it was compiled from it): NULL is out of
     * memory; the state's may not (then it is not this model) */
    uint8_t *a = model_bytes(pm, pn, &an);
    if (!a)
        return RT_ENOMEM;
    uint8_t *b = model_bytes(v->req, v->req_len, &bn);
    int same = b && an == bn && memcmp(a, b, an) == 0;
    free(a);
    free(b);
    return same;
}

/* RestoreCheckpoint with program_id: the state loaded into that program
 * of the session, in place (the Python client's load_model and
 * load_checkpoint on a model it has), so that reloading in a loop does
 * not leave a program behind each time. Nothing is changed until the
 * state is known to fit: the model is the program's, and
 * rt_exec_load_state checks the whole blob before it copies anything. */
static int restore_into(rt_call *c, const rt_ckpt_view *v)
{
    rt_program *p = c->prog;
    int rc = same_model(p, v);
    if (rc < 0)
        return OOM(c);
    if (!rc)
        return rt_call_fail(c, RT_ESTATE,
                            "the state was saved from a different model than program %.64s's: "
                            "push it without program_id to make a new program",
                            rt_program_id(p));
    /* The executor runs one job of a session at a time, so a RunSteps or
     * Fit on this program (the session's) has ended before this work
     * runs. A program still marked running (its run generation, what
     * Control reads) is refused rather than changed under that call
     * between two of its steps. */
    if (rt_program_control(p, 0))
        return rt_call_fail(c, RT_ESTATE,
                            "a RunSteps or Fit call is running on program %.64s: push the state "
                            "after it ends (Control stops it)",
                            rt_program_id(p));
    rt_exec *e = rt_program_exec(p);
    rc = rt_exec_load_state(e, v->exec, v->exec_len);
    if (rc < 0) /* refused before anything was copied: the program is as it was */
        return rt_call_fail(c, rc, "%s", rt_exec_errmsg(e));
    rt_ckpt_apply_meta_into(p, v);
    /* Written now, as for a new program; should it fail, the state stays
     * loaded and marked changed, so the next checkpoint (or the exit's)
     * writes it. */
    if (c->srv->state && (rc = rt_h_durable_checkpoint(
                              c, p, RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_POLICY_DEFAULT)) < 0)
        return rc;
    return restore_answer(c, p, "loaded in place from");
}

static int restore_work(rt_call *c)
{
    restore_st *st = c->st;
    rt_ckpt_view v;
    char err[256];
    int rc = rt_ckpt_parse(st->buf, st->len, &v, err, sizeof err);
    if (rc < 0)
        return rt_call_fail(c, rc, "%s", err);
    if (c->prog)
        return restore_into(c, &v);
    rt_program *p;
    if ((rc = rt_h_restore_program(c->srv, c->sess, v.req, v.req_len, NULL, &p, err, sizeof err)) <
        0)
        return rt_call_fail(c, rc, "cannot compile the state's model: %s", err);
    if ((rc = rt_exec_load_state(rt_program_exec(p), v.exec, v.exec_len)) < 0) {
        rt_call_fail(c, rc, "%s", rt_exec_errmsg(rt_program_exec(p)));
        return rt_h_unmake_program(c, p, rc);
    }
    rt_ckpt_apply_meta(p, &v);
    /* sequence numbers and fits belong to the client that trained it: the
     * program is new to whoever pushed it */
    rt_program_forget_client(p);
    if (c->srv->state &&
        (rc = rt_h_durable_checkpoint(c, p, RTRAIN__V1__CHECKPOINT_POLICY__CHECKPOINT_STOP)) < 0)
        return rt_h_unmake_program(c, p, rc);
    if (rt_call_is_cancelled(c))
        return rt_h_unmake_program(c, p, rt_call_fail(c, RT_ECANCELLED, "restore cancelled"));
    if ((rc = restore_answer(c, p, "restored from")) < 0)
        return rt_h_unmake_program(c, p, rc);
    return 0;
}

int rt_h_restore_checkpoint(rt_call *c)
{
    Rtrain__V1__RestoreCheckpointRequest *q = REQ(c, Rtrain__V1__RestoreCheckpointRequest);
    int rc;
    /* with program_id: into that program of the session (restore_into) */
    if ((rc = q->program_id && q->program_id[0] ? rt_h_need_program(c, q->session_id, q->program_id)
                                                : rt_h_need_session(c, q->session_id)) < 0 ||
        (rc = need_token(c, q->session_token)) < 0)
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

int rt_h_state_open(rt_srv *s, char *err, size_t errlen)
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
    RT_LOG(RT_LOG_INFO,
           "state %s: restored %d session(s), %d program(s), %d dataset(s) in "
           "%.1f ms%s",
           s->cfg.state_dir, res.sessions, res.programs, res.datasets,
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
        RT_LOG(RT_LOG_ERROR, "checkpoint of %s at exit failed: %s",
               rt_log_id(rt_program_id(p), pid), err);
        return 0;
    }
    RT_LOG(RT_LOG_INFO, "program %s: on disk at exit, step %lld (checkpoint at exit)",
           rt_log_id(rt_program_id(p), pid), (long long)rt_program_ckpt_step(p));
    return 1;
}

void rt_h_state_flush(rt_srv *s)
{
    if (!s->state)
        return;
    int n = rt_session_each_program(s->sessions, flush_one, s);
    RT_LOG(RT_LOG_INFO, "state: %d checkpoint(s) written at exit", n);
}

/* ------------------------------------------------------------ DropProgram */
/* Holding the device, behind the session's calls queued before it: no call
 * runs on the program meanwhile, so its files go before any checkpoint of
 * it could be written again (rt_train_checkpoint skips a dropped one). */
static int drop_work(rt_call *c)
{
    rt_program *p = c->prog;
    Rtrain__V1__DropProgramResponse *r =
        NEW(c, Rtrain__V1__DropProgramResponse, RTRAIN__V1__DROP_PROGRAM_RESPONSE__INIT);
    if (!r)
        return OOM(c);
    /* A RunSteps or Fit on it that handed the device over stops at its
     * next step; one that found it and waits answers NOT_FOUND (run_work). */
    rt_program_control(p, 1);
    if (rt_session_drop_program(c->sess, p) < 0)
        return rt_call_fail(c, RT_ENOTFOUND, "unknown program '%.64s' in session %s",
                            rt_program_id(p), c->sess->id);
    if (c->srv->state) {
        uint64_t t0 = rt_now_ns();
        rt_state_program_remove(c->srv->state, c->sess->id, rt_program_id(p));
        c->tm.durable_ns += rt_now_ns() - t0;
    }
    char sid[16], pid[16];
    RT_LOG(RT_LOG_INFO, "session %s: program %s dropped", rt_log_id(c->sess->id, sid),
           rt_log_id(rt_program_id(p), pid));
    c->resp = &r->base;
    return 0;
}

int rt_h_drop_program(rt_call *c)
{
    Rtrain__V1__DropProgramRequest *q = REQ(c, Rtrain__V1__DropProgramRequest);
    int rc;
    if ((rc = rt_h_need_program(c, q->session_id, q->program_id)) < 0 ||
        (rc = need_token(c, q->session_token)) < 0)
        return rc;
    c->work = drop_work;
    c->needs_device = 1;
    c->est_ns = 2000;
    return 0;
}
