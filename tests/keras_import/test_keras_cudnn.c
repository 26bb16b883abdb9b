/*
 * test_keras_cudnn.c - Keras 2's CuDNNLSTM and CuDNNGRU through the
 * importer, held to PyTorch: cudnn/cudnn_ref.json (cudnn/
 * gen_cudnn_fixtures.py) holds, per case, a model JSON as Keras 2.2 writes
 * it, weights in Keras' layout (the bias (2*G*units): input biases, then
 * recurrent ones), an input and MSE labels, and torch.nn.LSTM / GRU's
 * output, loss and weight gradients (cuDNN's formulation). Each case is
 * imported, given those weights by name (Keras' shapes: a (2*G*units,)
 * bias), and its prediction, loss and gradients must agree to 1e-5
 * (relative to the larger of the value and 1). Settings cuDNN's layers do
 * not take (dropout, an activation) and a masked input are refused naming
 * the layer.
 *
 * The same program runs tfop/tfop_ref.json (keras_tfop, tfop/
 * gen_tfop_fixtures.py): weightless models of TF 2.2-2.3's
 * TensorFlowOpLayer and TFOpLambda with a constant first argument, held to
 * NumPy transcriptions of the TensorFlow ops, and a model of the later ops
 * (LeakyRelu, Square, Sqrt, Rsqrt, Neg, ConcatV2, Mean, Sum, Reshape) after
 * a Dense layer whose gradients are finite differences of that NumPy.
 *
 *   test_keras_cudnn <cudnn_ref.json or tfop_ref.json>
 */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/rt_test.h"
#include "import_keras.h"
#include "rtrain/rt_error.h"

static float *floats(json_object *a, int *n)
{
    *n = (int)json_object_array_length(a);
    float *v = malloc(sizeof(float) * (size_t)(*n > 0 ? *n : 1));
    REQUIRE(v);
    for (int i = 0; i < *n; i++) v[i] = (float)json_object_get_double(json_object_array_get_idx(a, i));
    return v;
}

static void near(const char *cs, const char *what, const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= 1e-5 * fmax(1.0, fabs(want[i])))) {
            fprintf(stderr, "%s: %s[%d] = %.8g, reference %.8g\n", cs, what, i, got[i], want[i]);
            rt_test_failures++;
            return;
        }
}

static void run_case(json_object *c)
{
    json_object *o;
    const char *name = json_object_get_string(json_object_object_get_ex(c, "name", &o) ? o : NULL);
    REQUIRE(json_object_object_get_ex(c, "model", &o));
    const char *js = json_object_get_string(o);
    rt_graph *g = NULL;
    char err[1024];
    int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    if (rc < 0) fprintf(stderr, "%s: import: %s\n", name, err);
    REQUIRE(rc == 0);
    json_object *dims, *jw, *jg;
    REQUIRE(json_object_object_get_ex(c, "out_dims", &dims));
    REQUIRE(json_object_object_get_ex(c, "weights", &jw));
    REQUIRE(json_object_object_get_ex(c, "grads", &jg));
    REQUIRE(json_object_object_get_ex(c, "batch", &o));
    const int B = json_object_get_int(o);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = (int)json_object_array_length(dims);
    for (int i = 0; i < cfg.label_ndim; i++)
        cfg.label_dims[i] = json_object_get_int64(json_object_array_get_idx(dims, (size_t)i));
    cfg.batch_size = B;
    cfg.seed = 7;
    cfg.opt = RT_OPT_SGD;
    cfg.metrics = 0;
    cfg.shuffle = 0;
    rt_plan *p = NULL;
    rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc < 0) fprintf(stderr, "%s: compile: %s\n", name, err);
    REQUIRE(rc == 0);
    rt_exec *e = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0);
    /* every trainable parameter is one of the Keras weights, in Keras'
     * shape (a recorded op's constant is a frozen one) */
    const int np = rt_plan_n_params(p);
    int n_trainable = 0;
    for (int i = 0; i < np; i++) {
        const char *pn;
        int64_t d[RT_MAX_DIMS];
        int tr = 0;
        int nd = rt_plan_param_info(p, i, &pn, d, &tr), n;
        if (!tr) continue;
        n_trainable++;
        int64_t numel = 1;
        for (int k = 0; k < nd; k++) numel *= d[k];
        if (!json_object_object_get_ex(jw, pn, &o)) {
            fprintf(stderr, "%s: parameter '%s' is not a Keras weight\n", name, pn);
            rt_test_failures++;
            continue;
        }
        float *w = floats(o, &n);
        CHECK(n == numel);
        /* Keras' CuDNN bias is one flat vector */
        if (strstr(pn, "/bias")) CHECK(nd == 1);
        if (n == numel) CHECK_RC(rt_exec_set_param(e, i, w));
        free(w);
    }
    CHECK(n_trainable == json_object_object_length(jw));
    int nx, ny, nout;
    REQUIRE(json_object_object_get_ex(c, "x", &o));
    float *x = floats(o, &nx);
    REQUIRE(json_object_object_get_ex(c, "labels", &o));
    float *y = floats(o, &ny);
    REQUIRE(json_object_object_get_ex(c, "output", &o));
    float *want = floats(o, &nout);
    float *got = calloc((size_t)nout, sizeof(float));
    REQUIRE(got && nout == ny);
    CHECK_RC(rt_exec_predict(e, x, B, got));
    near(name, "output", got, want, nout);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = B};
    double loss = 0;
    CHECK_RC(rt_exec_compute_grads(e, &d, B, &loss));
    REQUIRE(json_object_object_get_ex(c, "loss", &o));
    float fl = (float)loss, wl = (float)json_object_get_double(o);
    near(name, "loss", &fl, &wl, 1);
    for (int i = 0; i < np; i++) {
        const char *pn;
        int64_t dd[RT_MAX_DIMS];
        rt_plan_param_info(p, i, &pn, dd, NULL);
        int n;
        if (!json_object_object_get_ex(jg, pn, &o)) continue;
        float *gw = floats(o, &n), *gg = calloc((size_t)n, sizeof(float));
        REQUIRE(gg);
        CHECK_RC(rt_exec_get_grad(e, i, gg));
        char what[160];
        snprintf(what, sizeof what, "gradient of %s", pn);
        near(name, what, gg, gw, n);
        free(gw);
        free(gg);
    }
    free(x);
    free(y);
    free(want);
    free(got);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

typedef struct {
    const char *from, *to, *want;
} edit;

/* case c's model with each edit is refused, the error holding want (and
 * the layer's name where layer is given) */
static void refused(json_object *c, const edit *bad, size_t n, const char *layer)
{
    json_object *o;
    REQUIRE(json_object_object_get_ex(c, "model", &o));
    const char *js = json_object_get_string(o);
    for (size_t i = 0; i < n; i++) {
        const char *at = strstr(js, bad[i].from);
        REQUIRE(at);
        char m[16384];
        snprintf(m, sizeof m, "%.*s%s%s", (int)(at - js), js, bad[i].to, at + strlen(bad[i].from));
        rt_graph *g = NULL;
        char err[2048] = "";
        int rc = rt_keras_import(m, strlen(m), &g, err, sizeof err);
        if (rc >= 0 || !strstr(err, bad[i].want) || (layer && !strstr(err, layer))) {
            fprintf(stderr, "refused case %zu (%s): rc %d, '%s'\n", i, bad[i].want, rc, err);
            rt_test_failures++;
        }
        rt_graph_destroy(g);
    }
}

/* settings CuDNN layers do not have, and a mask */
static const edit bad_cudnn[] = {
    {"\"stateful\": false", "\"stateful\": false, \"dropout\": 0.2", "'dropout'"},
    {"\"stateful\": false", "\"stateful\": false, \"activation\": \"relu\"", "'activation'"},
    {"\"stateful\": false", "\"stateful\": false, \"reset_after\": false", "'reset_after'"},
    {"{\"class_name\": \"CuDNNGRU\"",
     "{\"class_name\": \"Masking\", \"config\": {\"name\": \"m\", \"mask_value\": 0.0, "
     "\"batch_input_shape\": [null, 4, 5]}}, {\"class_name\": \"CuDNNGRU\"",
     "takes no mask"},
};

/* an op, attr or constant the importer does not read */
static const edit bad_op[] = {
    {"\"op\": \"Sigmoid\"", "\"op\": \"Cumsum\"", "op 'Cumsum'"},
    {"\"attr\": {\"T\": {\"type\": \"DT_FLOAT\"}}",
     "\"attr\": {\"T\": {\"type\": \"DT_FLOAT\"}, \"axis\": {\"i\": 1}}", "attr 'axis'"},
    {"\"constants\": {\"1\": 3.0}", "\"constants\": {\"1\": \"three\"}", "constant"},
};

/* the ops read later: other reductions stay refused by name, and the
 * shapes and axes they cannot take */
static const edit bad_op3[] = {
    {"\"op\": \"Mean\"", "\"op\": \"Cumprod\"", "op 'Cumprod'"},
    {"\"op\": \"Sum\"", "\"op\": \"ArgMax\"", "op 'ArgMax'"},
    {"{\"1\": [1]}", "{\"1\": [0]}", "reduces axis 0, the batch"},
    {"{\"1\": [1]}", "{\"1\": [-4]}", "axis -4 is outside"},
    {"{\"1\": [1]}", "{\"1\": [1.5]}", "reduction_indices"},
    {"{\"1\": [-1, 3, 4]}", "{\"1\": [3, -1, 4]}", "shape[0] is 3"},
    {"{\"1\": [-1, 3, 4]}", "{\"1\": [-1, 3, 5]}", "15 values per sample"},
    {"{\"1\": [-1, 3, 4]}", "{\"1\": [-1, -1, 4]}", "shape[1] = -1"},
    {"{\"3\": -1}", "{\"3\": \"last\"}", "constant whole-number axis"},
    {"{\"3\": -1}", "{\"3\": 0}", "the batch"},
    {"{\"3\": -1}", "{\"0\": 1.0}", "a constant among the values"},
    {"\"alpha\": {\"f\": 0.1}", "\"alpha\": {\"f\": 0.1}, \"data_format\": {\"s\": \"x\"}",
     "attr 'data_format'"},
    {"\"Tshape\": {\"type\": \"DT_INT32\"}", "\"Tshape\": {\"type\": \"DT_FLOAT\"}",
     "DT_INT32 or DT_INT64"},
};

/* Max, Min and Prod over the batch, as Mean and Sum; an axis outside the
 * rank; Abs given two inputs */
#define K_IN(l) "}}, \"inbound_nodes\": [[[\"tf_op_layer_" l
static const edit bad_op4[] = {
    {"{\"1\": [1]" K_IN("concat_t"), "{\"1\": [0, 1]" K_IN("concat_t"),
     "Max reduces axis 0, the batch"},
    {"{\"1\": -1" K_IN("concat_f"), "{\"1\": -3" K_IN("concat_f"),
     "Min reduces axis 0, the batch"},
    {"{\"1\": [-1]" K_IN("Log_1"), "{\"1\": [0]" K_IN("Log_1"),
     "Prod reduces axis 0, the batch"},
    {"{\"1\": [1]" K_IN("Relu_1"), "{\"1\": [3]" K_IN("Relu_1"), "axis 3 is outside"},
    {"\"op\": \"Abs\", \"input\": [\"d/Identity\"]",
     "\"op\": \"Abs\", \"input\": [\"d/Identity\", \"x\"]", "Abs: node_def has 2 inputs"},
};
#undef K_IN

int main(int argc, char **argv)
{
    REQUIRE(argc == 2);
    json_object *doc = json_object_from_file(argv[1]), *cases;
    REQUIRE(doc && json_object_object_get_ex(doc, "cases", &cases));
    const int n = (int)json_object_array_length(cases);
    REQUIRE(n >= 2);
    for (int i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(cases, (size_t)i), *nm;
        run_case(c);
        if (json_object_object_get_ex(c, "name", &nm) &&
            !strcmp(json_object_get_string(nm), "CuDNNGRU sequences"))
            refused(c, bad_cudnn, sizeof bad_cudnn / sizeof bad_cudnn[0], "'rnn'");
        if (json_object_object_get_ex(c, "name", &nm) &&
            !strcmp(json_object_get_string(nm), "TensorFlowOpLayer ops"))
            refused(c, bad_op, sizeof bad_op / sizeof bad_op[0], NULL);
        if (json_object_object_get_ex(c, "name", &nm) &&
            !strcmp(json_object_get_string(nm), "TensorFlowOpLayer reductions and shapes"))
            refused(c, bad_op3, sizeof bad_op3 / sizeof bad_op3[0], NULL);
        if (json_object_object_get_ex(c, "name", &nm) &&
            !strcmp(json_object_get_string(nm), "TensorFlowOpLayer Abs, Log, Max, Min, Prod"))
            refused(c, bad_op4, sizeof bad_op4 / sizeof bad_op4[0], NULL);
    }
    json_object_put(doc);
    return rt_test_done("keras_cudnn");
}
