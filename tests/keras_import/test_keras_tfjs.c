/*
 * test_keras_tfjs.c - the Keras importer and engine held to TensorFlow.js.
 *
 * tests/keras_import/tfjs/gen_tfjs_fixtures.js loads every model of the
 * corpus that tfjs 4.x accepts into tfjs (pure-JS CPU backend), sets the
 * initial weights rtrain drew (this program's "dump" mode writes them), and
 * records tfjs' predictions, evaluate loss, metrics and the weights after 3
 * SGD and 3 Adam steps. This program ("check" mode, run by ctest) holds
 * rtrain to those fixtures: 1e-5 relative on predictions, losses and
 * metrics, 1e-4 on weights relative to the larger of the element and the
 * parameter's RMS (an element near zero, such as a bias a few Adam steps
 * from 0 whose gradient is float32 rounding, is held to its parameter's
 * scale).
 *
 * Data, shared with the generator (keep in step with gen_tfjs_fixtures.js):
 *   mix(x) = lowbias32 (x ^= x>>16; x *= 0x7feb352d; x ^= x>>15;
 *            x *= 0x846ca68b; x ^= x>>16), on uint32
 *   input value i (flat over n samples): "uniform": ((mix(i ^ 0x5eed0001)
 *            >> 22) - 512) / 512; "index": mix(i ^ 0x5eed0001) % mod
 *   label, with h = mix(j ^ 0x1abe1000): "sparse" and "onehot": class
 *            h % classes for row j (a row: one label of the output's last
 *            axis); "binary": h >> 31 for value j; "float": (h >> 22) / 1024
 * Weights after training are sampled: a parameter of N values keeps all of
 * them when N <= 64, else S = 64 values idx_k = floor(k N / S) + (k * 131)
 * % floor(N / S).
 *
 *   test_keras_tfjs check <fixture dir> <repository root>
 *   test_keras_tfjs dump <model json> <derive 0|1> <bind dim or 0> <out.bin>
 *
 * "derive": the model's Dropout/SpatialDropout/GaussianDropout/AlphaDropout
 * rates, GaussianNoise stddev, recurrent and MultiHeadAttention dropouts
 * set to 0 (the RNGs
 * differ, so training steps are compared without them; the fixture lists
 * the layers changed, and inference is unaffected).
 */
#include <json-c/json.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

#include "../engine/rt_test.h"
#include "import_keras.h"
#include "rt_engine.h"
#include "rtrain/rt_error.h"

#define SEED 1
#define SAMPLES 64

static int values_checked;
#define FAIL(...)                                                                  \
    do {                                                                           \
        fprintf(stderr, "FAIL " __VA_ARGS__);                                      \
        fputc('\n', stderr);                                                       \
        rt_test_failures++;                                                        \
    } while (0)

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* ------------------------------------------------------------ derivation */

static int is_one_of(const char *s, const char *const *l)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(s, l[i]))
            return 1;
    return 0;
}

static int zero_key(json_object *cfg, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(cfg, key, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return 0;
    if (json_object_get_double(v) == 0)
        return 0;
    json_object_object_add(cfg, key, json_object_new_double(0));
    return 1;
}

/* Sets the rates named above to 0; appends the layers changed to names
 * (comma-separated, in document order). */
static void derive(json_object *o, char *names, size_t nl)
{
    static const char *const drop[] = {"Dropout", "SpatialDropout1D", "SpatialDropout2D",
                                       "SpatialDropout3D", "GaussianDropout", "AlphaDropout",
                                       NULL};
    static const char *const rnn[] = {"LSTM", "GRU", "SimpleRNN", "CuDNNLSTM", "CuDNNGRU",
                                      NULL};
    if (json_object_is_type(o, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(o); i++)
            derive(json_object_array_get_idx(o, i), names, nl);
        return;
    }
    if (!json_object_is_type(o, json_type_object))
        return;
    json_object *cn, *cfg;
    if (json_object_object_get_ex(o, "class_name", &cn) &&
        json_object_is_type(cn, json_type_string) &&
        json_object_object_get_ex(o, "config", &cfg) &&
        json_object_is_type(cfg, json_type_object)) {
        const char *c = json_object_get_string(cn);
        int changed = 0;
        if (is_one_of(c, drop))
            changed = zero_key(cfg, "rate") | zero_key(cfg, "p");
        else if (!strcmp(c, "GaussianNoise"))
            changed = zero_key(cfg, "stddev") | zero_key(cfg, "sigma");
        else if (is_one_of(c, rnn))
            changed = zero_key(cfg, "dropout") | zero_key(cfg, "recurrent_dropout") |
                      zero_key(cfg, "dropout_W") | zero_key(cfg, "dropout_U");
        else if (!strcmp(c, "MultiHeadAttention")) /* on the attention scores */
            changed = zero_key(cfg, "dropout");
        json_object *nm;
        if (changed && json_object_object_get_ex(cfg, "name", &nm)) {
            size_t l = strlen(names);
            snprintf(names + l, nl - l, "%s%s", l ? "," : "", json_object_get_string(nm));
        }
    }
    json_object_object_foreach(o, k, v) {
        (void)k;
        derive(v, names, nl);
    }
}

/* The model (derived when asked) imported with its first null dim bound. */
static int import_model(const char *path, int do_derive, int64_t bind, rt_graph **g,
                        char *derived, size_t dl, char *err, size_t errlen)
{
    size_t len;
    char *js = rt_test_slurp(path, &len);
    if (!js) {
        snprintf(err, errlen, "cannot read %s", path);
        return RT_EINVAL;
    }
    derived[0] = 0;
    const char *text = js;
    json_object *doc = NULL;
    if (do_derive) {
        doc = json_tokener_parse(js);
        if (!doc) {
            free(js);
            snprintf(err, errlen, "%s: not JSON", path);
            return RT_EJSON;
        }
        derive(doc, derived, dl);
        text = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN);
        len = strlen(text);
    }
    int rc;
    if (bind > 0) {
        int64_t dims[RT_MAX_DIMS] = {bind};
        rc = RT_EINVAL;
        for (int n = 1; n < RT_MAX_DIMS; n++) {
            rc = rt_keras_import_dims(text, len, dims, n, g, err, errlen, NULL, NULL);
            if (rc != RT_EINVAL || !strstr(err, "dims per sample"))
                break;
        }
    } else {
        rc = rt_keras_import(text, len, g, err, errlen);
    }
    json_object_put(doc);
    free(js);
    return rc;
}

/* ------------------------------------------------------------------ data */

typedef struct spec {
    char loss[48], labels[16], xkind[16], opt_sgd[16];
    int from_logits, classes, n, batch, rows, nesterov;
    int64_t mod;
    double lr_sgd, momentum, lr_adam, beta1, beta2, eps;
    uint32_t metrics;
} spec;

static float *make_x(const spec *s, int64_t per)
{
    int64_t total = per * s->n;
    float *x = malloc(sizeof(float) * (size_t)total);
    for (int64_t i = 0; i < total; i++) {
        uint32_t h = mix((uint32_t)i ^ 0x5eed0001u);
        x[i] = !strcmp(s->xkind, "index") ? (float)(h % (uint32_t)s->mod)
                                          : (float)((int)(h >> 22) - 512) / 512.0f;
    }
    return x;
}

/* labels of the output's per-sample dims od (on of them); sparse labels
 * drop the last axis */
static void *make_y(const spec *s, const int64_t *od, int on)
{
    int64_t per = 1;
    for (int i = 0; i < on; i++) per *= od[i];
    int64_t total = per * s->n;
    if (!strcmp(s->labels, "sparse")) {
        int64_t rows = total / od[on - 1];
        int32_t *y = malloc(sizeof(int32_t) * (size_t)rows);
        for (int64_t j = 0; j < rows; j++)
            y[j] = (int32_t)(mix((uint32_t)j ^ 0x1abe1000u) % (uint32_t)s->classes);
        return y;
    }
    float *y = calloc((size_t)total, sizeof(float));
    if (!strcmp(s->labels, "onehot")) {
        int64_t c = od[on - 1];
        for (int64_t j = 0; j < total / c; j++)
            y[j * c + mix((uint32_t)j ^ 0x1abe1000u) % (uint32_t)c] = 1.0f;
    } else {
        for (int64_t j = 0; j < total; j++) {
            uint32_t h = mix((uint32_t)j ^ 0x1abe1000u);
            y[j] = !strcmp(s->labels, "binary") ? (float)(h >> 31) : (float)(h >> 22) / 1024.0f;
        }
    }
    return y;
}

/* ------------------------------------------------------------------ dump */

/* The initial weights for the generator: "RTW1", u32 count, then per
 * parameter: u32 name length, name, u32 trainable, u32 ndim, i32 dims, f32
 * values */
static int write_params(rt_exec *e, const char *out)
{
    const rt_plan *p = rt_exec_plan(e);
    FILE *f = fopen(out, "wb");
    if (!f)
        return -1;
    uint32_t np = (uint32_t)rt_plan_n_params(p);
    fwrite("RTW1", 1, 4, f);
    fwrite(&np, 4, 1, f);
    for (uint32_t i = 0; i < np; i++) {
        const char *name;
        int64_t d[RT_MAX_DIMS];
        int tr;
        int nd = rt_plan_param_info(p, (int)i, &name, d, &tr);
        uint32_t nl = (uint32_t)strlen(name), t = (uint32_t)tr, ndu = (uint32_t)nd;
        int64_t cnt = 1;
        fwrite(&nl, 4, 1, f);
        fwrite(name, 1, nl, f);
        fwrite(&t, 4, 1, f);
        fwrite(&ndu, 4, 1, f);
        for (int k = 0; k < nd; k++) {
            int32_t dk = (int32_t)d[k];
            fwrite(&dk, 4, 1, f);
            cnt *= d[k];
        }
        float *v = malloc(sizeof(float) * (size_t)cnt);
        rt_exec_get_param(e, (int)i, v);
        fwrite(v, sizeof(float), (size_t)cnt, f);
        free(v);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int dump(const char *model, int do_derive, int64_t bind, const char *out)
{
    rt_graph *g = NULL;
    char err[4096], derived[2048];
    if (import_model(model, do_derive, bind, &g, derived, sizeof derived, err, sizeof err) < 0) {
        fprintf(stderr, "import: %s\n", err);
        return 1;
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.seed = SEED;
    cfg.metrics = 0;
    cfg.loss_check = 0; /* only the parameters are wanted */
    rt_plan *p = NULL;
    rt_compile_report rep;
    int rc = rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err);
    if (rc == RT_ESHAPE) {
        cfg.loss = RT_LOSS_CE;
        rc = rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err);
    }
    if (rc < 0) {
        fprintf(stderr, "compile: %s\n", err);
        return 1;
    }
    rt_exec *e = NULL;
    if (rt_exec_create(p, &e) < 0)
        return 1;
    if (write_params(e, out) < 0)
        return 1;
    int64_t id[RT_MAX_DIMS], od[RT_MAX_DIMS];
    int in = rt_plan_input_shape(p, id), on = rt_plan_output_shape(p, od);
    printf("{\"derived\": \"%s\", \"flops_per_sample\": %llu, \"input\": [", derived,
           (unsigned long long)(rep.flops_per_step / (uint64_t)cfg.batch_size));
    for (int k = 0; k < in; k++) printf("%s%lld", k ? ", " : "", (long long)id[k]);
    printf("], \"output\": [");
    for (int k = 0; k < on; k++) printf("%s%lld", k ? ", " : "", (long long)od[k]);
    printf("]}\n");
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return 0;
}

/* ----------------------------------------------------------------- check */

static json_object *get(json_object *o, const char *k)
{
    json_object *v = NULL;
    return o && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static double num(json_object *o, const char *k, double def)
{
    json_object *v = get(o, k);
    return v ? json_object_get_double(v) : def;
}

static const char *str(json_object *o, const char *k, const char *def)
{
    json_object *v = get(o, k);
    return v ? json_object_get_string(v) : def;
}

/* |a - b| <= tol * max(|b|, floor) */
static int close_to(double a, double b, double tol, double floor)
{
    double ref = fabs(b) > floor ? fabs(b) : floor;
    return fabs(a - b) <= tol * ref && a == a;
}

static double worst_pred, worst_loss, worst_metric, worst_w;
static int n_ill, n_opt_runs, n_loss_runs;
static void track(double *worst, double a, double b, double floor)
{
    double ref = fabs(b) > floor ? fabs(b) : floor;
    double r = fabs(a - b) / ref;
    if (r > *worst || a != a) *worst = a != a ? INFINITY : r;
}

/* adam 0: SGD; 1: Adam; 2: the optimizer the fixture's object opt names */
static int compile_exec(rt_graph *g, const spec *s, int adam, const int64_t *od, int on,
                        rt_exec **e, char *err, size_t errlen, json_object *opt)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    if (rt_loss_from_name(s->loss, &cfg.loss) < 0) {
        snprintf(err, errlen, "unknown loss %s", s->loss);
        return RT_EINVAL;
    }
    cfg.from_logits = s->from_logits;
    cfg.batch_size = s->batch;
    cfg.seed = SEED;
    cfg.shuffle = 0;
    cfg.metrics = s->metrics;
    if (adam == 2) {
        if (rt_opt_from_name(str(opt, "name", ""), &cfg.opt) < 0) {
            snprintf(err, errlen, "unknown optimizer %s", str(opt, "name", ""));
            return RT_EINVAL;
        }
        cfg.lr = (float)num(opt, "lr", 0);
        cfg.rho = (float)num(opt, "rho", 0.9);
        cfg.beta1 = (float)num(opt, "beta_1", 0.9);
        cfg.beta2 = (float)num(opt, "beta_2", 0.999);
        cfg.eps = (float)num(opt, "epsilon", 1e-7);
    } else if (adam) {
        cfg.opt = RT_OPT_ADAM;
        cfg.lr = (float)s->lr_adam;
        cfg.beta1 = (float)s->beta1;
        cfg.beta2 = (float)s->beta2;
        cfg.eps = (float)s->eps;
    } else {
        cfg.opt = RT_OPT_SGD;
        cfg.lr = (float)s->lr_sgd;
        cfg.momentum = (float)s->momentum;
        cfg.nesterov = s->nesterov;
    }
    if (!strcmp(s->labels, "sparse")) {
        cfg.label_dtype = RT_I32;
        cfg.label_ndim = on - 1;
        memcpy(cfg.label_dims, od, sizeof(int64_t) * (size_t)(on - 1));
    } else {
        cfg.label_dtype = RT_F32;
        cfg.label_ndim = on;
        memcpy(cfg.label_dims, od, sizeof(int64_t) * (size_t)on);
    }
    rt_plan *p = NULL;
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, errlen);
    if (rc < 0)
        return rc;
    rc = rt_exec_create(p, e);
    rt_plan_release(p);
    return rc;
}

static float *param(rt_exec *e, int i, int64_t *cnt)
{
    int64_t d[RT_MAX_DIMS];
    int nd = rt_plan_param_info(rt_exec_plan(e), i, NULL, d, NULL);
    *cnt = 1;
    for (int k = 0; k < nd; k++) *cnt *= d[k];
    float *v = malloc(sizeof(float) * (size_t)*cnt);
    rt_exec_get_param(e, i, v);
    return v;
}

/* the fixture's parameter i by name */
static json_object *fixture_param(json_object *list, const char *name)
{
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *p = json_object_array_get_idx(list, i);
        if (!strcmp(str(p, "name", ""), name))
            return p;
    }
    return NULL;
}

/* The initial weights the fixture was made from: their sum and sum of
 * squares (a changed initializer means the fixtures must be regenerated). */
static int check_init(const char *m, rt_exec *e, json_object *init)
{
    int n = rt_plan_n_params(rt_exec_plan(e)), bad = 0;
    if ((size_t)n != json_object_array_length(init)) {
        FAIL("%s: %d parameters, the fixture has %zu", m, n, json_object_array_length(init));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const char *name;
        rt_plan_param_info(rt_exec_plan(e), i, &name, (int64_t[RT_MAX_DIMS]){0}, NULL);
        json_object *fp = fixture_param(init, name);
        int64_t cnt;
        float *v = param(e, i, &cnt);
        double s = 0, q = 0;
        for (int64_t k = 0; k < cnt; k++) s += v[k], q += (double)v[k] * v[k];
        free(v);
        if (!fp) {
            FAIL("%s: parameter %s is not in the fixture", m, name);
            bad = 1;
        } else if (!close_to(q, num(fp, "sumsq", 0), 1e-9, 1e-30) ||
                   fabs(s - num(fp, "sum", 0)) > 1e-9 * sqrt(q * (double)cnt) + 1e-30) {
            FAIL("%s: %s's initial values are not the ones the fixture was made from "
                 "(regenerate it: tests/keras_import/tfjs/gen_tfjs_fixtures.js)", m, name);
            bad = 1;
        }
    }
    return bad;
}

static void check_weights(const char *m, const char *what, rt_exec *e, json_object *ws)
{
    int n = rt_plan_n_params(rt_exec_plan(e));
    for (int i = 0; i < n; i++) {
        const char *name;
        rt_plan_param_info(rt_exec_plan(e), i, &name, (int64_t[RT_MAX_DIMS]){0}, NULL);
        json_object *fp = fixture_param(ws, name);
        if (!fp) {
            FAIL("%s %s: no fixture values for %s", m, what, name);
            continue;
        }
        int64_t cnt;
        float *v = param(e, i, &cnt);
        json_object *vals = get(fp, "values");
        double rms = num(fp, "rms", 0);
        /* a BatchNormalization moving mean is on the scale of its
         * activation, sqrt(moving variance): a channel whose mean is 0 by
         * construction holds rounding noise */
        const char *mm = strstr(name, "/moving_mean");
        if (mm && !mm[12]) {
            char vn[512];
            snprintf(vn, sizeof vn, "%.*s/moving_variance", (int)(mm - name), name);
            json_object *fv = fixture_param(ws, vn);
            if (fv && sqrt(num(fv, "rms", 0)) > rms) rms = sqrt(num(fv, "rms", 0));
        }
        int64_t s = cnt <= SAMPLES ? cnt : SAMPLES, stride = cnt / SAMPLES;
        if ((int64_t)json_object_array_length(vals) != s) {
            FAIL("%s %s: %s has %lld samples in the fixture, not %lld", m, what, name,
                 (long long)json_object_array_length(vals), (long long)s);
            free(v);
            continue;
        }
        int shown = 0;
        for (int64_t k = 0; k < s; k++) {
            int64_t idx = cnt <= SAMPLES ? k : k * cnt / SAMPLES + (k * 131) % stride;
            double want = json_object_get_double(json_object_array_get_idx(vals, (size_t)k));
            values_checked++;
            track(&worst_w, v[idx], want, rms);
            if (!close_to(v[idx], want, 1e-4, rms) && shown++ < 3)
                FAIL("%s %s: %s[%lld] = %.9g, tfjs %.9g", m, what, name, (long long)idx, v[idx],
                     want);
        }
        free(v);
    }
}

static void check_losses(const char *m, const char *what, const float *got, json_object *want)
{
    for (size_t k = 0; k < json_object_array_length(want); k++) {
        double w = json_object_get_double(json_object_array_get_idx(want, k));
        values_checked++;
        track(&worst_loss, got[k], w, 0);
        if (!close_to(got[k], w, 1e-5, 0))
            FAIL("%s %s: step %zu loss %.9g, tfjs %.9g", m, what, k + 1, got[k], w);
    }
}

static double metric_value(const rt_metrics *mt, const char *name)
{
    uint32_t b;
    if (!strcmp(name, "accuracy"))
        return mt->acc;
    if (rt_metric_from_name(name, &b) < 0)
        return NAN;
    for (int i = 0; i < mt->n_values; i++)
        if (mt->value_bit[i] == b)
            return mt->values[i];
    return NAN;
}


/* ------------------------------------------------- several inputs, outputs */

/* Models of tests/fixtures/keras-multi: two inputs, two outputs, a loss and
 * a weight per output from the saved compile_config. Input k's value i
 * (flat over its n samples): ((mix(i ^ (0x5eed0001 + k)) >> 22) - 512) /
 * 512; head k's label j: h = mix(j ^ (0x1abe1000 + k)), class h % C for a
 * sparse or one-hot row, h >> 31 binary, (h >> 22) / 1024 float. The
 * engine takes them packed per sample: each input's values in turn, each
 * head's labels in turn (f32). */
static const char *head_labels(rt_loss_kind l)
{
    return l == RT_LOSS_SPARSE_CE ? "sparse" : l == RT_LOSS_CE ? "onehot"
           : l == RT_LOSS_BCE     ? "binary" : "float";
}

static int multi_compile(rt_graph *g, const char *txt, int batch, int adam, json_object *o,
                         const uint32_t *head_mets, rt_exec **e, char *err, size_t errlen)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.batch_size = batch;
    cfg.seed = SEED;
    cfg.shuffle = 0;
    cfg.metrics = 0;
    if (adam) {
        cfg.opt = RT_OPT_ADAM;
        cfg.lr = (float)num(o, "lr", 0);
        cfg.beta1 = (float)num(o, "beta_1", 0.9);
        cfg.beta2 = (float)num(o, "beta_2", 0.999);
        cfg.eps = (float)num(o, "epsilon", 1e-7);
    } else {
        cfg.opt = RT_OPT_SGD;
        cfg.lr = o ? (float)num(o, "lr", 0) : 0.01f;
        cfg.momentum = (float)num(o, "momentum", 0);
    }
    int rc = rt_keras_heads(txt, strlen(txt), &cfg, err, errlen);
    if (rc < 2) {
        if (rc >= 0) snprintf(err, errlen, "rt_keras_heads found %d outputs", rc);
        return rc < 0 ? rc : RT_EINVAL;
    }
    for (int k = 0; head_mets && k < rc; k++) cfg.heads[k].metrics = head_mets[k];
    rt_plan *p = NULL;
    if ((rc = rt_plan_compile(g, &cfg, &p, NULL, err, errlen)) < 0)
        return rc;
    rc = rt_exec_create(p, e);
    rt_plan_release(p);
    return rc;
}

static int dump_multi(const char *model, const char *out)
{
    size_t len;
    char *txt = rt_test_slurp(model, &len), err[4096];
    rt_graph *g = NULL;
    rt_exec *e = NULL;
    if (!txt || rt_keras_import(txt, len, &g, err, sizeof err) < 0 ||
        multi_compile(g, txt, 4, 0, NULL, NULL, &e, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", model, txt ? err : "cannot read");
        return 1;
    }
    const rt_plan *p = rt_exec_plan(e);
    if (write_params(e, out) < 0)
        return 1;
    const rt_train_config *c = rt_plan_config(p);
    printf("{\"heads\": [");
    for (int k = 0; k < rt_plan_n_heads(p); k++) {
        int64_t d[RT_MAX_DIMS];
        int nd = rt_plan_head_shape(p, k, d, NULL);
        printf("%s{\"loss\": \"%s\", \"from_logits\": %d, \"weight\": %.9g, \"labels\": \"%s\", "
               "\"dims\": [", k ? ", " : "", rt_loss_name(c->heads[k].loss),
               c->heads[k].from_logits, (double)c->heads[k].weight,
               head_labels(c->heads[k].loss));
        for (int i = 0; i < nd; i++) printf("%s%lld", i ? ", " : "", (long long)d[i]);
        printf("]}");
    }
    printf("]}\n");
    rt_exec_destroy(e);
    rt_graph_destroy(g);
    free(txt);
    return 0;
}

/* Each output's loss (unweighted) and metrics, as Keras' History names
 * them, against tfjs' */
static void check_head_values(const char *m, const rt_plan *p, const rt_metrics *mt, int nh,
                              json_object *hl, json_object *hmets)
{
    int seen[RT_MAX_HEADS] = {0}, want_n = 0;
    for (int k = 0; k < nh && hmets; k++)
        want_n += 1 + json_object_object_length(json_object_array_get_idx(hmets, (size_t)k));
    for (int i = 0; i < mt->n_values; i++) {
        const int k = mt->value_head[i];
        char nm[160];
        if (k < 0 || k >= nh || rt_metric_value_name(p, mt, i, nm, sizeof nm) < 0) {
            FAIL("%s: value %d belongs to no output (%d)", m, i, k);
            continue;
        }
        const char *hn = rt_plan_head_name(p, k);
        if (strncmp(nm, hn, strlen(hn)) || nm[strlen(hn)] != '_') {
            FAIL("%s: value %d is named '%s', not after output '%s'", m, i, nm, hn);
            continue;
        }
        const char *mn = nm + strlen(hn) + 1;
        double want = !strcmp(mn, "loss")
                          ? json_object_get_double(json_object_array_get_idx(hl, (size_t)k))
                          : num(json_object_array_get_idx(hmets, (size_t)k), mn, NAN);
        values_checked++;
        seen[k]++;
        track(&worst_metric, mt->values[i], want, 1e-6);
        if (!close_to(mt->values[i], want, 1e-5, 1e-6))
            FAIL("%s: %s %.9g, tfjs %.9g", m, nm, mt->values[i], want);
    }
    int got_n = 0;
    for (int k = 0; k < nh; k++) got_n += seen[k];
    if (got_n != want_n || mt->n_values != want_n)
        FAIL("%s: %d per-output values, the fixture has %d", m, mt->n_values, want_n);
}

/* the epoch's per-output values at its end */
typedef struct head_end {
    rt_metrics at;
    int n;
} head_end;
static int head_end_cb(void *ud, const rt_step_info *s)
{
    head_end *h = ud;
    if (s->epoch_end) {
        h->at = s->epoch_metrics;
        h->n++;
    }
    return 0;
}

/* A state saved after the epoch's first step and loaded into a fresh exec
 * ends the epoch with the same per-output values as the exec that ran
 * through (the header carries each output's sums); e is left as it was */
static void check_head_resume(const char *m, rt_exec *e, const rt_data *d, int nh)
{
    rt_exec *a = NULL, *b = NULL;
    void *blob = NULL;
    head_end ha = {0}, hb = {0};
    const size_t n = rt_exec_state_size(e);
    if (rt_exec_create(rt_exec_plan(e), &a) < 0 || rt_exec_create(rt_exec_plan(e), &b) < 0 ||
        !(blob = malloc(n))) {
        FAIL("%s: resume: no exec", m);
        goto out;
    }
    rt_train_result r;
    if (rt_exec_train(a, d, 1, &r, NULL, NULL, NULL) < 0 ||
        rt_exec_save_state(a, blob, n) < 0 || rt_exec_load_state(b, blob, n) < 0 ||
        rt_exec_train(a, d, 2, &r, head_end_cb, &ha, NULL) < 0 ||
        rt_exec_train(b, d, 2, &r, head_end_cb, &hb, NULL) < 0) {
        FAIL("%s: resume: %s / %s", m, rt_exec_errmsg(a), rt_exec_errmsg(b));
        goto out;
    }
    values_checked++;
    if (ha.n != 1 || hb.n != 1 || ha.at.n_values < nh || ha.at.n_values != hb.at.n_values) {
        FAIL("%s: resume: %d/%d epoch ends, %d/%d values", m, ha.n, hb.n, ha.at.n_values,
             hb.at.n_values);
        goto out;
    }
    for (int i = 0; i < ha.at.n_values; i++)
        if (ha.at.values[i] != hb.at.values[i] || ha.at.value_bit[i] != hb.at.value_bit[i])
            FAIL("%s: resume: value %d %.9g, resumed %.9g", m, i, ha.at.values[i],
                 hb.at.values[i]);
    /* the total is the weighted sum of the outputs' losses */
    const rt_train_config *c = rt_plan_config(rt_exec_plan(e));
    double tot = 0;
    for (int i = 0; i < ha.at.n_values; i++)
        if (ha.at.value_bit[i] == RT_METRIC_HEAD_LOSS)
            tot += (double)c->heads[ha.at.value_head[i]].weight * ha.at.values[i];
    if (!close_to(ha.at.loss, tot, 1e-6, 0))
        FAIL("%s: epoch loss %.9g, the weighted outputs' losses sum to %.9g", m, ha.at.loss,
             tot);
out:
    rt_exec_destroy(a);
    rt_exec_destroy(b);
    free(blob);
}

static int check_multi(json_object *fx, const char *m, const char *mpath, int *agreed)
{
    const int before = rt_test_failures;
    size_t len;
    char *txt = rt_test_slurp(mpath, &len), err[4096];
    rt_graph *g = NULL;
    rt_exec *e = NULL;
    float *x = NULL, *y = NULL, *pred = NULL;
    json_object *ins = get(fx, "inputs"), *heads = get(fx, "heads");
    const int n = (int)num(fx, "n", 0), batch = (int)num(fx, "batch", 0),
              rows = (int)num(get(fx, "predict"), "rows", 0);
    const int nin = (int)json_object_array_length(ins), nh = (int)json_object_array_length(heads);
    if (!txt || rt_keras_import(txt, len, &g, err, sizeof err) < 0) {
        FAIL("%s: import: %s", m, txt ? err : "cannot read");
        goto out;
    }
    /* each output's metrics: those the fixture has for it */
    json_object *hmets = get(get(fx, "evaluate"), "head_metrics");
    uint32_t hm[RT_MAX_HEADS] = {0};
    for (int k = 0; k < nh && k < RT_MAX_HEADS && hmets; k++) {
        json_object_object_foreach(json_object_array_get_idx(hmets, (size_t)k), mk, mv) {
            (void)mv;
            uint32_t b;
            if (rt_metric_from_name(mk, &b) == 0) hm[k] |= b;
        }
    }
    if (!hmets) FAIL("%s: the fixture has no head_metrics (regenerate it)", m);
    if (multi_compile(g, txt, batch, 0, get(fx, "sgd"), hm, &e, err, sizeof err) < 0) {
        FAIL("%s: compile: %s", m, err);
        goto out;
    }
    const rt_plan *p = rt_exec_plan(e);
    const rt_train_config *c = rt_plan_config(p);
    if (rt_plan_n_heads(p) != nh) {
        FAIL("%s: %d outputs, the fixture has %d", m, rt_plan_n_heads(p), nh);
        goto out;
    }
    /* the losses and weights read from compile_config, against the
     * generator's own reading of it */
    for (int k = 0; k < nh; k++) {
        json_object *h = json_object_array_get_idx(heads, (size_t)k);
        if (strcmp(rt_loss_name(c->heads[k].loss), str(h, "loss", "")) ||
            c->heads[k].from_logits != (int)num(h, "from_logits", 0) ||
            c->heads[k].weight != (float)num(h, "weight", 1))
            FAIL("%s: output %d: loss %s from_logits %d weight %g; the fixture's %s %d %g", m, k,
                 rt_loss_name(c->heads[k].loss), c->heads[k].from_logits,
                 (double)c->heads[k].weight, str(h, "loss", ""), (int)num(h, "from_logits", 0),
                 num(h, "weight", 1));
    }
    int64_t in_n[RT_KERAS_MAX_IN], in_tot = 0, id[RT_MAX_DIMS], lab_tot = 0, out_tot = 0;
    rt_plan_input_shape(p, id);
    for (int k = 0; k < nin && k < RT_KERAS_MAX_IN; k++) {
        json_object *d = json_object_array_get_idx(ins, (size_t)k);
        in_n[k] = 1;
        for (size_t i = 0; i < json_object_array_length(d); i++)
            in_n[k] *= json_object_get_int64(json_object_array_get_idx(d, i));
        in_tot += in_n[k];
    }
    if (in_tot != id[0]) {
        FAIL("%s: the inputs have %lld values a sample, the plan takes %lld", m,
             (long long)in_tot, (long long)id[0]);
        goto out;
    }
    x = malloc(sizeof(float) * (size_t)(n * in_tot));
    json_object *index = get(fx, "index"); /* per input: indices below mod, or 0 */
    for (int k = 0, off = 0; k < nin; off += (int)in_n[k], k++) {
        json_object *mo = index ? json_object_array_get_idx(index, (size_t)k) : NULL;
        const uint32_t mod = mo ? (uint32_t)json_object_get_int64(mo) : 0;
        for (int64_t i = 0; i < n * in_n[k]; i++) {
            uint32_t h = mix((uint32_t)i ^ (0x5eed0001u + (uint32_t)k));
            x[(i / in_n[k]) * in_tot + off + i % in_n[k]] =
                mod ? (float)(h % mod) : (float)((int)(h >> 22) - 512) / 512.0f;
        }
    }
    int64_t on[RT_MAX_HEADS], ln[RT_MAX_HEADS];
    for (int k = 0; k < nh; k++) {
        int64_t d[RT_MAX_DIMS];
        int nd = rt_plan_head_shape(p, k, d, &ln[k]);
        on[k] = 1;
        for (int i = 0; i < nd; i++) on[k] *= d[i];
        lab_tot += ln[k];
        out_tot += on[k];
    }
    y = calloc((size_t)(n * lab_tot), sizeof(float));
    for (int k = 0, off = 0; k < nh; off += (int)ln[k], k++) {
        const char *lk = head_labels(c->heads[k].loss);
        int64_t dd[RT_MAX_DIMS];
        const int64_t C = dd[rt_plan_head_shape(p, k, dd, NULL) - 1];
        const int per_row = !strcmp(lk, "sparse") || !strcmp(lk, "onehot");
        const int64_t R = per_row ? on[k] / C : on[k]; /* labels drawn a sample */
        for (int64_t sm = 0; sm < n; sm++)
            for (int64_t r = 0; r < R; r++) {
                uint32_t h = mix((uint32_t)(sm * R + r) ^ (0x1abe1000u + (uint32_t)k));
                float *yr = y + sm * lab_tot + off;
                if (!strcmp(lk, "sparse")) yr[r] = (float)(h % (uint32_t)C);
                else if (!strcmp(lk, "onehot")) yr[r * C + h % (uint32_t)C] = 1.0f;
                else if (!strcmp(lk, "binary")) yr[r] = (float)(h >> 31);
                else yr[r] = (float)(h >> 22) / 1024.0f;
            }
    }
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = n};
    if (check_init(m, e, get(fx, "init")))
        goto out;
    /* predictions: a list, one per output */
    pred = malloc(sizeof(float) * (size_t)(out_tot * rows));
    if (rt_exec_predict(e, x, rows, pred) < 0) {
        FAIL("%s: predict: %s", m, rt_exec_errmsg(e));
    } else {
        json_object *pv = get(get(fx, "predict"), "values");
        for (int k = 0, off = 0; k < nh; off += (int)on[k], k++) {
            json_object *hv = json_object_array_get_idx(pv, (size_t)k);
            if ((int64_t)json_object_array_length(hv) != rows * on[k]) {
                FAIL("%s: output %d: %zu predicted values in the fixture, not %lld", m, k,
                     json_object_array_length(hv), (long long)(rows * on[k]));
                continue;
            }
            int shown = 0;
            for (int64_t i = 0; i < rows * on[k]; i++) {
                double w = json_object_get_double(json_object_array_get_idx(hv, (size_t)i));
                float got = pred[(i / on[k]) * out_tot + off + i % on[k]];
                values_checked++;
                track(&worst_pred, got, w, 0);
                if (!close_to(got, w, 1e-5, 0) && shown++ < 3)
                    FAIL("%s: output %d prediction %lld: %.9g, tfjs %.9g", m, k, (long long)i,
                         got, w);
            }
        }
    }
    rt_metrics mt;
    if (rt_exec_evaluate(e, &d, &mt) < 0) {
        FAIL("%s: evaluate: %s", m, rt_exec_errmsg(e));
    } else {
        double wl = num(get(fx, "evaluate"), "loss", NAN);
        values_checked++;
        track(&worst_loss, mt.loss, wl, 0);
        if (!close_to(mt.loss, wl, 1e-5, 0))
            FAIL("%s: evaluate loss %.9g, tfjs %.9g", m, mt.loss, wl);
        check_head_values(m, p, &mt, nh, get(get(fx, "evaluate"), "head_losses"), hmets);
    }
    check_head_resume(m, e, &d, nh);
    float losses[3];
    if (rt_exec_train(e, &d, 3, &(rt_train_result){0}, NULL, NULL, losses) < 0) {
        FAIL("%s: SGD: %s", m, rt_exec_errmsg(e));
    } else {
        check_losses(m, "SGD", losses, get(get(fx, "sgd"), "losses"));
        check_weights(m, "SGD", e, get(get(fx, "sgd"), "weights"));
    }
    rt_exec_destroy(e);
    e = NULL;
    if (multi_compile(g, txt, batch, 1, get(fx, "adam"), NULL, &e, err, sizeof err) < 0) {
        FAIL("%s: compile (Adam): %s", m, err);
    } else if (rt_exec_train(e, &d, 3, &(rt_train_result){0}, NULL, NULL, losses) < 0) {
        FAIL("%s: Adam: %s", m, rt_exec_errmsg(e));
    } else {
        check_losses(m, "Adam", losses, get(get(fx, "adam"), "losses"));
        check_weights(m, "Adam", e, get(get(fx, "adam"), "weights"));
    }
out:
    rt_exec_destroy(e);
    rt_graph_destroy(g);
    free(txt);
    free(x);
    free(y);
    free(pred);
    int ok = rt_test_failures == before;
    printf("  %-8s %-44s %d inputs, %d outputs:", ok ? "agrees" : "DIFFERS", m, nin, nh);
    for (int k = 0; k < nh; k++) {
        json_object *h = json_object_array_get_idx(heads, (size_t)k);
        printf(" %s%s x %g", str(h, "loss", "?"), num(h, "from_logits", 0) ? " (logits)" : "",
               num(h, "weight", 1));
    }
    printf("\n");
    *agreed += ok;
    return 1;
}

static int check_one(const char *path, const char *root, int *agreed)
{
    size_t len;
    char *txt = rt_test_slurp(path, &len);
    json_object *fx = txt ? json_tokener_parse(txt) : NULL;
    free(txt);
    if (!fx) {
        FAIL("%s: cannot read", path);
        return 0;
    }
    const int before = rt_test_failures;
    const char *m = str(fx, "model", "?");
    char mpath[1024], err[4096], derived[2048];
    snprintf(mpath, sizeof mpath, "%s/%s", root, m);
    if (get(fx, "heads")) {
        int r = check_multi(fx, m, mpath, agreed);
        json_object_put(fx);
        return r;
    }
    spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.loss, sizeof s.loss, "%s", str(fx, "loss", ""));
    snprintf(s.labels, sizeof s.labels, "%s", str(fx, "labels", ""));
    snprintf(s.xkind, sizeof s.xkind, "%s", str(get(fx, "x"), "kind", "uniform"));
    s.mod = (int64_t)num(get(fx, "x"), "mod", 1);
    s.from_logits = (int)num(fx, "from_logits", 0);
    s.classes = (int)num(fx, "classes", 0);
    s.n = (int)num(fx, "n", 0);
    s.batch = (int)num(fx, "batch", 0);
    s.rows = (int)num(get(fx, "predict"), "rows", 0);
    json_object *sgd = get(fx, "sgd"), *adam = get(fx, "adam");
    int sgd_ok = 1, adam_ok = 1;
    s.lr_sgd = num(sgd, "lr", 0);
    s.momentum = num(sgd, "momentum", 0);
    s.nesterov = (int)num(sgd, "nesterov", 0);
    s.lr_adam = num(adam, "lr", 0);
    s.beta1 = num(adam, "beta_1", 0.9);
    s.beta2 = num(adam, "beta_2", 0.999);
    s.eps = num(adam, "epsilon", 1e-7);
    json_object *mets = get(get(fx, "evaluate"), "metrics");
    json_object_object_foreach(mets, mk, mv) {
        (void)mv;
        uint32_t b;
        if (!strcmp(mk, "accuracy"))
            s.metrics |= RT_METRIC_ACCURACY;
        else if (rt_metric_from_name(mk, &b) == 0)
            s.metrics |= b;
        else
            FAIL("%s: unknown metric %s", m, mk);
    }
    rt_graph *g = NULL;
    const char *want_derived = str(fx, "derived", "");
    if (import_model(mpath, want_derived[0] != 0, (int64_t)num(fx, "bind", 0), &g, derived,
                     sizeof derived, err, sizeof err) < 0) {
        FAIL("%s: import: %s", m, err);
        json_object_put(fx);
        return 0;
    }
    if (strcmp(derived, want_derived))
        FAIL("%s: derived layers %s, the fixture's %s", m, derived, want_derived);
    /* the output's shape: from a throwaway compile */
    int64_t od[RT_MAX_DIMS], id[RT_MAX_DIMS];
    int on = 0, in = 0;
    {
        rt_train_config c;
        rt_train_config_init(&c);
        c.loss = RT_LOSS_MSE;
        c.label_dtype = RT_F32;
        c.loss_check = 0; /* only the shapes are wanted */
        rt_plan *p = NULL;
        int rc = rt_plan_compile(g, &c, &p, NULL, err, sizeof err);
        if (rc == RT_ESHAPE) {
            c.loss = RT_LOSS_CE;
            rc = rt_plan_compile(g, &c, &p, NULL, err, sizeof err);
        }
        if (rc < 0) {
            FAIL("%s: compile: %s", m, err);
            rt_graph_destroy(g);
            json_object_put(fx);
            return 0;
        }
        on = rt_plan_output_shape(p, od);
        in = rt_plan_input_shape(p, id);
        rt_plan_release(p);
    }
    int64_t per_x = 1, per_y = 1;
    for (int i = 0; i < in; i++) per_x *= id[i];
    for (int i = 0; i < on; i++) per_y *= od[i];
    float *x = make_x(&s, per_x);
    void *y = make_y(&s, od, on);
    rt_data d = {.x = x, .y = y, .y_dtype = !strcmp(s.labels, "sparse") ? RT_I32 : RT_F32,
                 .n = s.n};
    rt_exec *e = NULL;
    int rc = compile_exec(g, &s, 0, od, on, &e, err, sizeof err, NULL);
    if (rc < 0) {
        FAIL("%s: compile (%s): %s", m, s.loss, err);
        goto out;
    }
    if (check_init(m, e, get(fx, "init")))
        goto out;
    /* predictions */
    json_object *pv = get(get(fx, "predict"), "values");
    float *pred = malloc(sizeof(float) * (size_t)(per_y * s.rows));
    if ((rc = rt_exec_predict(e, x, s.rows, pred)) < 0) {
        FAIL("%s: predict: %s", m, rt_exec_errmsg(e));
    } else if ((int64_t)json_object_array_length(pv) != per_y * s.rows) {
        FAIL("%s: %lld predicted values, the fixture has %zu", m, (long long)(per_y * s.rows),
             json_object_array_length(pv));
    } else {
        int shown = 0;
        for (int64_t i = 0; i < per_y * s.rows; i++) {
            double w = json_object_get_double(json_object_array_get_idx(pv, (size_t)i));
            values_checked++;
            track(&worst_pred, pred[i], w, 0);
            if (!close_to(pred[i], w, 1e-5, 0) && shown++ < 3)
                FAIL("%s: prediction %lld: %.9g, tfjs %.9g", m, (long long)i, pred[i], w);
        }
    }
    free(pred);
    /* evaluate: loss and metrics */
    rt_metrics mt;
    if (rt_exec_evaluate(e, &d, &mt) < 0) {
        FAIL("%s: evaluate: %s", m, rt_exec_errmsg(e));
    } else {
        double wl = num(get(fx, "evaluate"), "loss", NAN);
        values_checked++;
        track(&worst_loss, mt.loss, wl, 0);
        if (!close_to(mt.loss, wl, 1e-5, 0))
            FAIL("%s: evaluate loss %.9g, tfjs %.9g", m, mt.loss, wl);
        json_object_object_foreach(mets, k, v) {
            double got = metric_value(&mt, k), want = json_object_get_double(v);
            values_checked++;
            /* a metric is a ratio of counts or a mean: a floor of 1e-6
             * for the zeros */
            track(&worst_metric, got, want, 1e-6);
            if (!close_to(got, want, 1e-5, 1e-6))
                FAIL("%s: metric %s %.9g, tfjs %.9g", m, k, got, want);
        }
    }
    /* 3 SGD steps, then 3 Adam steps from the same initial weights; not
     * where the generator found tfjs' own trajectory decided by rounding
     * (the fixture's ill_conditioned says why) */
    float losses[3];
    sgd_ok = !get(sgd, "ill_conditioned");
    adam_ok = !get(adam, "ill_conditioned");
    n_ill += !sgd_ok + !adam_ok;
    if (!sgd_ok) {
        /* inference only */
    } else if (rt_exec_train(e, &d, 3, &(rt_train_result){0}, NULL, NULL, losses) < 0) {
        FAIL("%s: SGD: %s", m, rt_exec_errmsg(e));
    } else {
        check_losses(m, "SGD", losses, get(sgd, "losses"));
        check_weights(m, "SGD", e, get(sgd, "weights"));
    }
    rt_exec_destroy(e);
    e = NULL;
    if (!adam_ok) {
        /* inference only */
    } else if ((rc = compile_exec(g, &s, 1, od, on, &e, err, sizeof err, NULL)) < 0) {
        FAIL("%s: compile (Adam): %s", m, err);
    } else if (rt_exec_train(e, &d, 3, &(rt_train_result){0}, NULL, NULL, losses) < 0) {
        FAIL("%s: Adam: %s", m, rt_exec_errmsg(e));
    } else {
        check_losses(m, "Adam", losses, get(adam, "losses"));
        check_weights(m, "Adam", e, get(adam, "weights"));
    }
    /* Adagrad, Adadelta, Adamax (a few models) */
    json_object *opts = get(fx, "optimizers");
    for (size_t k = 0; opts && k < json_object_array_length(opts); k++) {
        json_object *o = json_object_array_get_idx(opts, k);
        const char *on_ = str(o, "name", "?");
        rt_exec_destroy(e);
        e = NULL;
        if ((rc = compile_exec(g, &s, 2, od, on, &e, err, sizeof err, o)) < 0) {
            FAIL("%s: compile (%s): %s", m, on_, err);
        } else if (rt_exec_train(e, &d, 3, &(rt_train_result){0}, NULL, NULL, losses) < 0) {
            FAIL("%s: %s: %s", m, on_, rt_exec_errmsg(e));
        } else {
            check_losses(m, on_, losses, get(o, "losses"));
            check_weights(m, on_, e, get(o, "weights"));
            n_opt_runs++;
        }
    }
    /* Keras' other losses (a few models): evaluate and 3 plain SGD steps */
    json_object *xl = get(fx, "extra_losses");
    for (size_t k = 0; xl && k < json_object_array_length(xl); k++) {
        json_object *o = json_object_array_get_idx(xl, k);
        spec s2 = s;
        snprintf(s2.loss, sizeof s2.loss, "%s", str(o, "loss", ""));
        snprintf(s2.labels, sizeof s2.labels, "%s", str(o, "labels", ""));
        s2.from_logits = 0;
        s2.metrics = 0;
        s2.lr_sgd = num(get(o, "sgd"), "lr", 0);
        s2.momentum = 0;
        s2.nesterov = 0;
        void *y2 = make_y(&s2, od, on);
        rt_data d2 = {.x = x, .y = y2, .y_dtype = RT_F32, .n = s.n};
        char what[80];
        snprintf(what, sizeof what, "%s (SGD)", s2.loss);
        rt_exec_destroy(e);
        e = NULL;
        rt_metrics mt2;
        if ((rc = compile_exec(g, &s2, 0, od, on, &e, err, sizeof err, NULL)) < 0) {
            FAIL("%s: compile (%s): %s", m, s2.loss, err);
        } else if (rt_exec_evaluate(e, &d2, &mt2) < 0) {
            FAIL("%s: evaluate (%s): %s", m, s2.loss, rt_exec_errmsg(e));
        } else {
            double wl = num(o, "evaluate", NAN);
            values_checked++;
            track(&worst_loss, mt2.loss, wl, 0);
            if (!close_to(mt2.loss, wl, 1e-5, 0))
                FAIL("%s: %s evaluate loss %.9g, tfjs %.9g", m, s2.loss, mt2.loss, wl);
            if (rt_exec_train(e, &d2, 3, &(rt_train_result){0}, NULL, NULL, losses) < 0) {
                FAIL("%s: %s: %s", m, what, rt_exec_errmsg(e));
            } else {
                check_losses(m, what, losses, get(get(o, "sgd"), "losses"));
                check_weights(m, what, e, get(get(o, "sgd"), "weights"));
                n_loss_runs++;
            }
        }
        free(y2);
    }
out:
    rt_exec_destroy(e);
    free(x);
    free(y);
    rt_graph_destroy(g);
    int ok = rt_test_failures == before;
    printf("  %-8s %-44s %s%s%s%s%s\n", ok ? "agrees" : "DIFFERS", m, s.loss,
           want_derived[0] ? ", rate 0 in " : "", want_derived,
           sgd_ok ? "" : "; SGD not compared (ill-conditioned)",
           adam_ok ? "" : "; Adam not compared (ill-conditioned)");
    json_object_put(fx);
    *agreed += ok;
    return 1;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "dump-multi"))
        return dump_multi(argv[2], argv[3]);
    if (argc == 6 && !strcmp(argv[1], "dump"))
        return dump(argv[2], atoi(argv[3]), atoll(argv[4]), argv[5]);
    if (argc != 4 || strcmp(argv[1], "check")) {
        fprintf(stderr, "usage: %s check <fixture dir> <repository root>\n"
                        "       %s dump <model json> <derive 0|1> <bind or 0> <out.bin>\n",
                argv[0], argv[0]);
        return 2;
    }
    DIR *dir = opendir(argv[2]);
    if (!dir) {
        fprintf(stderr, "no %s\n", argv[2]);
        return 1;
    }
    char *names[256];
    int nn = 0;
    struct dirent *de;
    while ((de = readdir(dir)) && nn < 256) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".json") && strncmp(de->d_name, "callbacks", 9))
            names[nn++] = strdup(de->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)nn, sizeof *names, by_name);
    int compared = 0, agreed = 0;
    for (int i = 0; i < nn; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", argv[2], names[i]);
        compared += check_one(p, argv[3], &agreed);
        free(names[i]);
    }
    printf("\ntfjs parity: %d models compared, %d agree; %d values checked; %d training "
           "runs not compared (tfjs' own run decided by rounding); %d Adagrad, Adadelta or "
           "Adamax runs; %d hinge, squared_hinge, poisson, kl_divergence or huber runs\n"
           "largest relative differences: predictions %.3g, losses %.3g, metrics %.3g, "
           "weights %.3g\n",
           compared, agreed, values_checked, n_ill, n_opt_runs, n_loss_runs, worst_pred, worst_loss, worst_metric, worst_w);
    if (compared == 0)
        FAIL("no fixtures in %s", argv[2]);
    return rt_test_failures ? 1 : 0;
}
