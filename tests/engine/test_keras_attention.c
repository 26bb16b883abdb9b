/*
 * test_keras_attention.c - Keras' Attention layer (import_keras_attn.c)
 * against PyTorch: tests/fixtures/keras_attention_ref.bin
 * (gen_keras_attention_fixtures.py: Keras 2.10's attention.py and
 * base_dense_attention.py transcribed, float64) for Input (T, d) ->
 * Attention([x, x]) -> Flatten: the prediction, the training loss and,
 * with use_scale, the gradient of the scale weight, which must also match
 * the central difference of the engine's loss. The causal case passes
 * use_causal_mask as the call's keyword (Keras 2.10's inbound node).
 * Then the settings refused, each named, and a Keras 2.10 model whose
 * outputs are a dict (their order, Keras' sorted keys).
 */
#include <stdint.h>

#include "import_keras.h"
#include "rt_fixture.h"
#include "rt_test.h"

#define K_MODEL                                                                                   \
    "{\"class_name\": \"Functional\", \"keras_version\": \"2.10.0\", \"config\": {\"name\": "    \
    "\"m\", \"layers\": [{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": "          \
    "{\"batch_input_shape\": [null, %d, %d], \"name\": \"x\"}, \"inbound_nodes\": []}, "          \
    "{\"class_name\": \"Attention\", \"name\": \"att\", \"config\": {\"name\": \"att\", "         \
    "\"trainable\": true, \"dtype\": \"float32\", \"use_scale\": %s, \"score_mode\": \"%s\", "    \
    "\"dropout\": %s}, \"inbound_nodes\": [[[\"x\", 0, 0, %s], [\"x\", 0, 0, {}]]]}, "            \
    "{\"class_name\": \"Flatten\", \"name\": \"f\", \"config\": {\"name\": \"f\"}, "              \
    "\"inbound_nodes\": [[[\"att\", 0, 0, {}]]]}], \"input_layers\": [[\"x\", 0, 0]], "            \
    "\"output_layers\": [[\"f\", 0, 0]]}}"

static rt_exec *model(int T, int d, const char *scale, const char *mode, const char *drop,
                      const char *kw, int B, char *err, size_t errlen)
{
    char json[2048];
    snprintf(json, sizeof json, K_MODEL, T, d, scale, mode, drop, kw);
    rt_graph *g;
    if (rt_keras_import(json, strlen(json), &g, err, errlen) < 0)
        return NULL;
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = B;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = T * d;
    rt_plan *p;
    const int rc = rt_plan_compile(g, &cfg, &p, NULL, err, errlen);
    rt_graph_destroy(g);
    if (rc < 0)
        return NULL;
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_plan_release(p);
    return e;
}

static void run_case(const char *name, int use_scale, int causal)
{
    char nm[96], err[512];
#define REF(sfx) (snprintf(nm, sizeof nm, "%s/%s", name, sfx), rt_fixture_find(nm))
    const rt_ref_tensor *x = REF("x"), *y = REF("y"), *out = REF("out");
    const int B = (int)x->dims[0], T = (int)x->dims[1], d = (int)x->dims[2];
    rt_exec *e = model(T, d, use_scale ? "true" : "false", "dot", "0.0",
                       causal ? "{\"use_causal_mask\": true}" : "{}", B, err, sizeof err);
    if (!e) {
        fprintf(stderr, "%s: %s\n", name, err);
        exit(1);
    }
    const float s = 1.3f;
    REQUIRE(rt_plan_n_params(rt_exec_plan(e)) == use_scale);
    if (use_scale) CHECK_RC(rt_exec_set_param(e, 0, &s));
    float got[256];
    REQUIRE(out->count <= 256);
    CHECK_RC(rt_exec_predict(e, x->data, B, got));
    snprintf(nm, sizeof nm, "%s output", name);
    CHECK(!rt_fixture_compare(nm, got, out->data, out->count, 1e-5, 1e-4));
    rt_data dd = {.x = x->data, .y = y->data, .y_dtype = RT_F32, .n = B};
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &dd, B, &loss));
    CHECK(fabs(loss - ((float *)REF("loss")->data)[0]) < 1e-5 * (1 + fabs(loss)));
    int fd = 0;
    if (use_scale) {
        float gs;
        CHECK_RC(rt_exec_get_grad(e, 0, &gs));
        snprintf(nm, sizeof nm, "%s dscale", name);
        CHECK(!rt_fixture_compare(nm, &gs, REF("grad/scale")->data, 1, 1e-6, 1e-4));
        fd = rt_test_fd_param(e, &dd, B, 0, 0, 1e-4, name);
    }
    printf("%-16s torch ok, %d finite differences\n", name, fd);
    rt_exec_destroy(e);
#undef REF
}

/* refused: score_mode concat, return_attention_scores, a rate outside [0, 1) */
static void refused(void)
{
    char err[512];
    CHECK(!model(3, 2, "false", "concat", "0.0", "{}", 2, err, sizeof err) &&
          strstr(err, "score_mode 'concat'") && strstr(err, "att"));
    CHECK(!model(3, 2, "false", "dot", "0.0", "{\"return_attention_scores\": true}", 2, err,
                 sizeof err) &&
          strstr(err, "return_attention_scores"));
    CHECK(!model(3, 2, "false", "dot", "1.5", "{}", 2, err, sizeof err) &&
          strstr(err, "dropout 1.5 is outside [0, 1)"));
    /* a rate in range trains (dropout on the weights), inference as rate 0 */
    rt_exec *e0 = model(3, 2, "false", "dot", "0.0", "{}", 2, err, sizeof err),
            *e1 = model(3, 2, "false", "dot", "0.5", "{}", 2, err, sizeof err);
    REQUIRE(e0 && e1);
    float x[12] = {1, 2, -1, 0, 3, 1, 0.5f, -2, 1, 1, 0, 2}, p0[12], p1[12];
    CHECK_RC(rt_exec_predict(e0, x, 2, p0));
    CHECK_RC(rt_exec_predict(e1, x, 2, p1));
    CHECK(memcmp(p0, p1, sizeof p0) == 0);
    rt_exec_destroy(e0);
    rt_exec_destroy(e1);
    printf("%-16s ok\n", "refused");
}

/* Keras 2.10+ writes the outputs a model was built with as a dict
 * ({"key": ["layer", 0, 0]}): Keras flattens it (tf.nest.flatten) in the
 * order of the sorted keys, and the heads follow it, whatever the JSON's
 * order; a loss dict by output name picks each head's */
static void dict_outputs(void)
{
    static const char json[] =
        "{\"class_name\": \"Functional\", \"keras_version\": \"2.10.0\", \"config\": {\"name\": "
        "\"m\", \"layers\": [{\"class_name\": \"InputLayer\", \"name\": \"x\", \"config\": "
        "{\"batch_input_shape\": [null, 4], \"name\": \"x\"}, \"inbound_nodes\": []}, "
        "{\"class_name\": \"Dense\", \"name\": \"pitch\", \"config\": {\"name\": \"pitch\", "
        "\"units\": 3, \"activation\": \"softmax\"}, \"inbound_nodes\": [[[\"x\", 0, 0, {}]]]}, "
        "{\"class_name\": \"Dense\", \"name\": \"duration\", \"config\": {\"name\": "
        "\"duration\", \"units\": 1}, \"inbound_nodes\": [[[\"x\", 0, 0, {}]]]}], "
        "\"input_layers\": [[\"x\", 0, 0]], \"output_layers\": {\"pitch\": [\"pitch\", 0, 0], "
        "\"duration\": [\"duration\", 0, 0]}}, \"training_config\": {\"loss\": {\"pitch\": "
        "\"sparse_categorical_crossentropy\", \"duration\": \"mse\"}}}";
    char err[512];
    rt_graph *g;
    if (rt_keras_import(json, strlen(json), &g, err, sizeof err) < 0) {
        fprintf(stderr, "dict outputs: %s\n", err);
        exit(1);
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.batch_size = 2;
    REQUIRE(rt_keras_heads(json, strlen(json), &cfg, err, sizeof err) == 2);
    CHECK(cfg.heads[0].loss == RT_LOSS_MSE && cfg.heads[1].loss == RT_LOSS_SPARSE_CE);
    rt_plan *p;
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "dict outputs: compile: %s\n", err);
        exit(1);
    }
    int64_t d0[RT_MAX_DIMS], d1[RT_MAX_DIMS];
    CHECK(rt_plan_n_heads(p) == 2);
    CHECK(rt_plan_head_shape(p, 0, d0, NULL) == 1 && d0[0] == 1);
    CHECK(rt_plan_head_shape(p, 1, d1, NULL) == 1 && d1[0] == 3);
    CHECK(!strcmp(rt_plan_head_name(p, 0), "duration") && !strcmp(rt_plan_head_name(p, 1), "pitch"));
    rt_plan_release(p);
    rt_graph_destroy(g);
    printf("%-16s ok (duration, pitch)\n", "dict outputs");
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2);
    rt_fixture_load(argv[1]);
    /* mirrors main() of tests/fixtures/gen_keras_attention_fixtures.py */
    run_case("dot", 0, 0);
    run_case("scaled", 1, 0);
    run_case("scaled_causal", 1, 1);
    refused();
    dict_outputs();
    rt_fixture_free();
    return rt_test_done("test_keras_attention");
}
