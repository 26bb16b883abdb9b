/* test_keras.c - the Keras JSON importer on its own: the sample files, the
 * graph it builds (compiled by the engine), and its error messages. */
#include <stdlib.h>
#include <string.h>

#include "import_keras.h"
#include "itest_unit.h"

static char *slurp(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", RT_ITEST_DATA_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n)
        n = 0;
    b[n] = 0;
    fclose(f);
    return b;
}

/* Import and compile; returns the plan's param count, or -1. */
static int64_t import_compile(const char *json, int64_t *in0, int64_t *out0, char *err)
{
    rt_graph *g;
    int rc = rt_keras_import(json, strlen(json), &g, err, 256);
    if (rc < 0)
        return rc;
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss_check = 0; /* shapes and parameter counts; no loss is trained */
    rt_plan *p;
    rt_compile_report rep;
    rc = rt_plan_compile(g, &cfg, &p, &rep, err, 256);
    rt_graph_destroy(g);
    if (rc < 0)
        return rc;
    int64_t d[RT_MAX_DIMS];
    int n = rt_plan_input_shape(p, d);
    *in0 = n > 0 ? rt_data_numel_local(n, d) : -1;
    n = rt_plan_output_shape(p, d);
    *out0 = n > 0 ? rt_data_numel_local(n, d) : -1;
    int64_t pc = (int64_t)rep.param_count;
    rt_plan_release(p);
    return pc;
}

static void test_samples(void)
{
    struct { const char *file; int64_t params, in, out; } s[] = {
        {"iris_sequential_keras2.json", 4 * 32 + 32 + 32 * 3 + 3, 4, 3},
        {"iris_functional_keras3.json", 4 * 32 + 32 + 32 * 3 + 3, 4, 3},
        {"reshape_flatten_keras2_model.json", 4 * 16 + 16 * 3 + 3, 4, 3},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        char *js = slurp(s[i].file), err[256] = "";
        CHECK(js != NULL, "read %s", s[i].file);
        if (!js)
            continue;
        int64_t in = 0, out = 0, pc = import_compile(js, &in, &out, err);
        CHECK(pc == s[i].params, "%s: params %lld (%s)", s[i].file, (long long)pc, err);
        CHECK(in == s[i].in && out == s[i].out, "%s: in %lld out %lld", s[i].file, (long long)in,
              (long long)out);
        free(js);
    }
}

static void test_names(void)
{
    char *js = slurp("iris_sequential_keras2.json"), err[256];
    rt_graph *g;
    CHECK(rt_keras_import(js, strlen(js), &g, err, sizeof err) == 0, "import: %s", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    rt_plan *p;
    CHECK(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0, "compile: %s", err);
    const char *name;
    int64_t d[RT_MAX_DIMS];
    int tr;
    CHECK(rt_plan_n_params(p) == 4, "4 params");
    CHECK(rt_plan_param_info(p, 0, &name, d, &tr) == 2 && !strcmp(name, "dense/kernel") &&
              d[0] == 4 && d[1] == 32 && tr,
          "first param is dense/kernel (4, 32), got %s", name);
    rt_plan_param_info(p, 3, &name, d, &tr);
    CHECK(!strcmp(name, "dense_1/bias"), "last param dense_1/bias, got %s", name);
    rt_plan_release(p);
    rt_graph_destroy(g);
    free(js);
}

static void expect_err(const char *json, int code, const char *needle)
{
    rt_graph *g = NULL;
    char err[256] = "";
    int rc = rt_keras_import(json, strlen(json), &g, err, sizeof err);
    CHECK(rc == code && strstr(err, needle), "want %d '%s', got %d '%s'", code, needle, rc, err);
    CHECK(g == NULL, "no graph on error");
    rt_graph_destroy(g);
}

#define SEQ(layers) "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": [" layers "]}}"
#define INPUT4 "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4], \"name\": \"in\"}}"

static void test_errors(void)
{
    char *js = slurp("unknown_layer.json");
    expect_err(js, RT_EUNKNOWN_LAYER, "unknown Keras layer 'Foo' (layer 'foo_1')");
    free(js);
    expect_err("", RT_EJSON, "empty");
    expect_err("{\"class_name\": ", RT_EJSON, "does not parse");
    expect_err("[1, 2]", RT_EJSON, "not a Keras model");
    expect_err("{\"class_name\": \"Bogus\", \"config\": {}}", RT_EUNKNOWN_LAYER, "Bogus");
    expect_err(SEQ("{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}"),
               RT_ESHAPE, "input shape is unknown");
    expect_err(SEQ(INPUT4 ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3, \"activation\": \"gelu_fancy\"}}"),
               RT_EINVAL, "unsupported activation 'gelu_fancy' (layer 'd')");
    expect_err(SEQ(INPUT4 ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": \"3\"}}"),
               RT_EINVAL, "'units' must be an integer (layer 'd')");
    expect_err(SEQ(INPUT4 ", {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3, \"kernel_initializer\": {\"class_name\": \"Foo\"}}}"),
               RT_EINVAL, "unsupported initializer 'Foo'");
    expect_err(SEQ(INPUT4 ", {\"class_name\": \"Reshape\", \"config\": {\"name\": \"r\", \"target_shape\": [3]}}"),
               RT_ESHAPE, "holds 3 values but the input has 4");
    expect_err(SEQ(INPUT4 ", {\"class_name\": \"Dropout\", \"config\": {\"name\": \"dr\", \"rate\": 1.5}}"),
               RT_EINVAL, "outside [0, 1)");
    expect_err(SEQ("{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, null], \"name\": \"in\"}}"),
               RT_EINVAL, "input 'in' has a variable dimension; give input dims");
    expect_err(SEQ("{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, -2], \"name\": \"in\"}}"),
               RT_ESHAPE, "unknown or bad dim");
    /* Functional: a dangling input, a shared layer, two outputs. */
    expect_err("{\"class_name\": \"Functional\", \"config\": {\"layers\": ["
               "{\"name\": \"in\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"in\"}, \"inbound_nodes\": []},"
               "{\"name\": \"d\", \"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2}, \"inbound_nodes\": [[[\"ghost\", 0, 0, {}]]]}],"
               "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"d\", 0, 0]]}}",
               RT_EINVAL, "no layer produces");
    expect_err("{\"class_name\": \"Functional\", \"config\": {\"layers\": ["
               "{\"name\": \"in\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"in\"}, \"inbound_nodes\": []},"
               "{\"name\": \"d\", \"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 4}, \"inbound_nodes\": [[[\"in\", 0, 0, {}]], [[\"d\", 0, 0, {}]]]}],"
               "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"d\", 2, 0]]}}",
               RT_EINVAL, "output 'd' is node 2 of a layer called 2 times");
    expect_err("{\"class_name\": \"Functional\", \"config\": {\"layers\": ["
               "{\"name\": \"in\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"in\"}, \"inbound_nodes\": []},"
               "{\"name\": \"d\", \"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 4}, \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]},"
               "{\"name\": \"e\", \"class_name\": \"Dense\", \"config\": {\"name\": \"e\", \"units\": 4}, \"inbound_nodes\": [[[\"d\", 1, 0, {}]]]}],"
               "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"e\", 0, 0]]}}",
               RT_EINVAL, "reads node 1 of layer 'd', which is called 1 time");
    expect_err("{\"class_name\": \"Functional\", \"config\": {\"layers\": ["
               "{\"name\": \"in\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"in\"}, \"inbound_nodes\": []},"
               "{\"name\": \"d\", \"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}, \"inbound_nodes\": [[[\"in\", 0, 0, {}]], [[\"d\", 0, 0, {}]]]}],"
               "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"d\", 1, 0]]}}",
               RT_ESHAPE, "shared layer 'd' needs weight 'd@1/kernel' of another shape");
    expect_err("{\"class_name\": \"Model\", \"config\": {\"layers\": [],"
               "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"a\", 0, 0], [\"b\", 0, 0],"
               " [\"c\", 0, 0], [\"d\", 0, 0], [\"e\", 0, 0], [\"f\", 0, 0], [\"g\", 0, 0],"
               " [\"h\", 0, 0], [\"i\", 0, 0]]}}",
               RT_EINVAL, "needs 1 to 8 outputs (got 9)");
}

/* Keras 2.0-era Sequential (the layer list is the config) and a Keras 3
 * single-input list written flat. */
static void test_variants(void)
{
    const char *old = "{\"class_name\": \"Sequential\", \"config\": ["
                      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3, \"batch_input_shape\": [null, 4], \"activation\": \"softmax\"}}]}";
    int64_t in, out;
    char err[256] = "";
    CHECK(import_compile(old, &in, &out, err) == 4 * 3 + 3, "Keras 2.0 list config: %s", err);
    /* a Dense applied to its own output: one kernel and bias, two calls */
    const char *twice = "{\"class_name\": \"Functional\", \"config\": {\"layers\": ["
        "{\"name\": \"in\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"in\"}, \"inbound_nodes\": []},"
        "{\"name\": \"d\", \"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 4}, \"inbound_nodes\": [[[\"in\", 0, 0, {}]], [[\"d\", 0, 0, {}]]]}],"
        "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"d\", 1, 0]]}}";
    CHECK(import_compile(twice, &in, &out, err) == 4 * 4 + 4, "Dense called twice: %s", err);
    /* Keras 3: the second call read through keras_history's node index */
    const char *k3 = "{\"module\": \"keras\",\"class_name\": \"Functional\",\"config\": {\"name\": \"f\",\"layers\": [{\"module\": \"keras.layers\",\"class_name\": \"InputLayer\",\"config\": {\"batch_shape\": [null,4],\"dtype\": \"float32\",\"name\": \"in\"},\"registered_name\": null,\"name\": \"in\",\"inbound_nodes\": []},{\"module\": \"keras.layers\",\"class_name\": \"Dense\",\"config\": {\"name\": \"d\",\"units\": 4},\"registered_name\": null,\"name\": \"d\",\"inbound_nodes\": [{\"args\": [{\"class_name\": \"__keras_tensor__\",\"config\": {\"shape\": [null,4],\"dtype\": \"float32\",\"keras_history\": [\"in\",0,0]}}],\"kwargs\": {}},{\"args\": [{\"class_name\": \"__keras_tensor__\",\"config\": {\"shape\": [null,4],\"dtype\": \"float32\",\"keras_history\": [\"d\",0,0]}}],\"kwargs\": {}}]},{\"module\": \"keras.layers\",\"class_name\": \"Dense\",\"config\": {\"name\": \"e\",\"units\": 2},\"registered_name\": null,\"name\": \"e\",\"inbound_nodes\": [{\"args\": [{\"class_name\": \"__keras_tensor__\",\"config\": {\"shape\": [null,4],\"dtype\": \"float32\",\"keras_history\": [\"d\",1,0]}}],\"kwargs\": {}}]}],\"input_layers\": [[\"in\",0,0]],\"output_layers\": [[\"e\",0,0]]},\"registered_name\": \"Functional\"}";
    CHECK(import_compile(k3, &in, &out, err) == 4 * 4 + 4 + 4 * 2 + 2 && out == 2,
          "Keras 3 shared Dense: %s", err);
    /* Keras 2: a nested model called on two inputs (its calls are nodes 1
     * and 2; node 0 is its own graph) */
    const char *nest = "{\"class_name\": \"Functional\",\"config\": {\"name\": \"siam\",\"layers\": [{\"class_name\": \"InputLayer\",\"name\": \"a\",\"config\": {\"batch_input_shape\": [null,3],\"name\": \"a\"},\"inbound_nodes\": []},{\"class_name\": \"InputLayer\",\"name\": \"b\",\"config\": {\"batch_input_shape\": [null,3],\"name\": \"b\"},\"inbound_nodes\": []},{\"class_name\": \"Functional\",\"name\": \"tower\",\"config\": {\"name\": \"tower\",\"layers\": [{\"class_name\": \"InputLayer\",\"name\": \"t_in\",\"config\": {\"batch_input_shape\": [null,3],\"name\": \"t_in\"},\"inbound_nodes\": []},{\"class_name\": \"Dense\",\"name\": \"t_d\",\"config\": {\"name\": \"t_d\",\"units\": 2},\"inbound_nodes\": [[[\"t_in\",0,0,{}]]]}],\"input_layers\": [[\"t_in\",0,0]],\"output_layers\": [[\"t_d\",0,0]]},\"inbound_nodes\": [[[\"a\",0,0,{}]],[[\"b\",0,0,{}]]]},{\"class_name\": \"Concatenate\",\"name\": \"join\",\"config\": {\"name\": \"join\",\"axis\": -1},\"inbound_nodes\": [[[\"tower\",1,0,{}],[\"tower\",2,0,{}]]]}],\"input_layers\": [[\"a\",0,0],[\"b\",0,0]],\"output_layers\": [[\"join\",0,0]]}}";
    CHECK(import_compile(nest, &in, &out, err) == 3 * 2 + 2 && in == 6 && out == 4,
          "nested model called twice: %s", err);
    const char *flat = "{\"class_name\": \"Functional\", \"config\": {\"layers\": ["
                       "{\"name\": \"x\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"x\"}, \"inbound_nodes\": []},"
                       "{\"name\": \"d\", \"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, \"use_bias\": false},"
                       " \"inbound_nodes\": [{\"args\": [{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null, 4], \"keras_history\": [\"x\", 0, 0]}}], \"kwargs\": {}}]}],"
                       "\"input_layers\": [\"x\", 0, 0], \"output_layers\": [\"d\", 0, 0]}}";
    CHECK(import_compile(flat, &in, &out, err) == 8, "Keras 3 flat io lists, no bias: %s", err);
    /* A built Keras 3 Sequential without an InputLayer: the shape is in
     * build_input_shape (model) or build_config (layer). */
    const char *k3a = "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"s\","
                      " \"layers\": [{\"module\": \"keras.layers\", \"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 5}}],"
                      " \"build_input_shape\": [null, 6]}}";
    CHECK(import_compile(k3a, &in, &out, err) == 6 * 5 + 5 && in == 6 && out == 5,
          "build_input_shape: %s", err);
    const char *k3b = "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
                      "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 2},"
                      " \"build_config\": {\"input_shape\": [null, 7]}}]}}";
    CHECK(import_compile(k3b, &in, &out, err) == 7 * 2 + 2 && in == 7, "layer build_config: %s", err);
}

/* Mutated Keras JSON (fixed seed): an error or a graph, never a crash. */
static uint64_t rng_state = 0x853c49e6748fea9bull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_fuzz(void)
{
    const char *files[] = {"iris_sequential_keras2.json", "iris_functional_keras3.json",
                           "reshape_flatten_keras2_model.json"};
    static const char alphabet[] = "{}[]\",:0123456789-nulltruefalse \\abcdefxyz";
    int ok = 0, errs = 0;
    for (int f = 0; f < 3; f++) {
        char *js = slurp(files[f]);
        if (!js)
            continue;
        size_t n = strlen(js);
        char *m = malloc(n + 1);
        for (int round = 0; round < 300; round++) {
            memcpy(m, js, n + 1);
            for (int k = 0; k < 1 + (int)(rng() % 3); k++)
                m[rng() % n] = alphabet[rng() % (sizeof alphabet - 1)];
            size_t len = rng() % 8 == 0 ? rng() % n : n;
            rt_graph *g = NULL;
            char err[256] = "";
            int rc = rt_keras_import(m, len, &g, err, sizeof err);
            if (rc == 0) {
                ok++;
                rt_graph_destroy(g);
            } else {
                errs++;
                CHECK(g == NULL && err[0] && strlen(err) < 256, "error %d without a message", rc);
            }
        }
        free(m);
        free(js);
    }
    CHECK(ok > 0 && errs > 0, "fuzz reached both outcomes (%d ok, %d errors)", ok, errs);
}

int main(void)
{
    RUN(test_samples);
    RUN(test_names);
    RUN(test_errors);
    RUN(test_variants);
    RUN(test_fuzz);
    return itest_summary();
}
