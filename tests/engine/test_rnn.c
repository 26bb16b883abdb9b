/*
 * test_rnn.c - SimpleRNN, LSTM, GRU and Embedding against PyTorch and by
 * finite differences.
 *
 * Each case of tests/fixtures/rnn_ref.bin (gen_rnn_fixtures.py: Keras'
 * cell formulas in torch autograd, checked there against torch.nn's
 * modules) is built as a graph of the engine's ops with the fixture's
 * Keras-layout weights; its output (rt_exec_predict), MSE loss and every
 * weight gradient must match torch, and every gradient element must match
 * the central difference of the engine's own loss. The dropout cases
 * (dropout, recurrent_dropout) compare the inference output (no masks)
 * and the training loss and gradients, torch using the masks the engine
 * draws (the generator mirrors its counter-based RNG); the finite
 * differences run at that fixed step, so with those masks. The masked
 * cases add a SequenceMask of x (or of the indices) at 0 as the step mask
 * (the generator checks its formulas against torch's packed sequences). Then Embedding's index
 * checks: a fractional or out-of-range index is RT_EDATA naming the sample.
 * Then the Keras importer (import_keras_rnn.c): a Keras 3 LSTM with
 * hard_sigmoid (relu6(x + 3) / 6 there) and Bidirectional(LSTM) with every
 * merge mode against torch, weights set by their Keras names; and the
 * settings it refuses, each named in the error. An LSTM with elu (no
 * torch fixture: torch's LSTM has no such activation) against Keras' cell
 * formulas and finite differences. A stateful LSTM's carried states:
 * kept, reset, refused part batches, and kept in the state blob.
 */
#include <stdint.h>

#include "import_keras.h"
#include "rt_fixture.h"
#include "rt_test.h"

typedef struct rcase {
    const char *name, *op;
    int seq, backwards, aligned, reset_after;
    const char *ract;
    int vocab;
    double drop, rdrop; /* dropout, recurrent_dropout: a training case */
    int masked, zero_out; /* a step mask: SequenceMask(x or the indices, 0) */
} rcase;

#define B 3
#define T 5
#define F 4
#define U 3

static void put_param(rt_graph *g, const char *pname, const rt_ref_tensor *t)
{
    int64_t d[4];
    for (uint32_t i = 0; i < t->ndim; i++) d[i] = t->dims[i];
    REQUIRE(rt_graph_add_param(g, pname, (int)t->ndim, d, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
}

static void run_case(const rcase *c)
{
    char nm[160];
#define REF(sfx) (snprintf(nm, sizeof nm, "%s/%s", c->name, sfx), rt_fixture_find(nm))
    rt_graph *g = rt_graph_create();
    int64_t xd[3] = {RT_BATCH, T, F};
    if (c->vocab) {
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, xd) == 0);
        put_param(g, "emb", REF("emb"));
        const char *in[2] = {"x", "emb"};
        REQUIRE(rt_graph_add_node(g, "e", "Embedding", 2, in, 0, NULL) == 0);
    } else {
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 3, xd) == 0);
    }
    put_param(g, "kernel", REF("kernel"));
    put_param(g, "recurrent_kernel", REF("recurrent_kernel"));
    put_param(g, "bias", REF("bias"));
    if (c->masked) {
        const char *min = "x";
        const rt_attr mv = {.name = "mask_value", .kind = RT_ATTR_FLOAT, .f = 0.0};
        REQUIRE(rt_graph_add_node(g, "m", "SequenceMask", 1, &min, 1, &mv) == 0);
    }
    rt_attr at[10] = {
        {.name = "masked", .kind = RT_ATTR_INT, .i = c->masked},
        {.name = "zero_output_for_mask", .kind = RT_ATTR_INT, .i = c->zero_out},
        {.name = "dropout", .kind = RT_ATTR_FLOAT, .f = c->drop},
        {.name = "recurrent_dropout", .kind = RT_ATTR_FLOAT, .f = c->rdrop},
        {.name = "return_sequences", .kind = RT_ATTR_INT, .i = c->seq},
        {.name = "go_backwards", .kind = RT_ATTR_INT, .i = c->backwards},
        {.name = "reverse_output", .kind = RT_ATTR_INT, .i = c->aligned},
        {.name = "recurrent_activation", .kind = RT_ATTR_STR, .s = c->ract},
        {.name = "reset_after", .kind = RT_ATTR_INT, .i = c->reset_after},
    };
    const int nat = strcmp(c->op, "GRU") == 0 ? 9 : strcmp(c->op, "LSTM") == 0 ? 8 : 7;
    const char *in[5] = {c->vocab ? "e" : "x", "kernel", "recurrent_kernel", "bias", "m"};
    if (rt_graph_add_node(g, "rnn", c->op, c->masked ? 5 : 4, in, nat, at) != 0) {
        fprintf(stderr, "%s: %s\n", c->name, rt_graph_errmsg(g));
        exit(1);
    }
    const rt_ref_tensor *out = REF("out");
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = B;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = (int)out->ndim - 1;
    for (uint32_t i = 1; i < out->ndim; i++) cfg.label_dims[i - 1] = out->dims[i];
    rt_plan *p;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "%s: compile: %s\n", c->name, err);
        exit(1);
    }
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    const int np = rt_plan_n_params(p);
    for (int i = 0; i < np; i++) {
        const char *pn;
        int64_t d[RT_MAX_DIMS];
        REQUIRE(rt_plan_param_info(p, i, &pn, d, NULL) >= 0);
        CHECK_RC(rt_exec_set_param(e, i, REF(pn)->data));
    }
    const rt_ref_tensor *x = REF("x"), *y = REF("y");
    float got[B * T * U];
    CHECK_RC(rt_exec_predict(e, x->data, B, got));
    snprintf(nm, sizeof nm, "%s output", c->name);
    CHECK(!rt_fixture_compare(nm, got, out->data, out->count, 1e-5, 1e-4));
    rt_data d = {.x = x->data, .y = y->data, .y_dtype = RT_F32, .n = B};
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &d, B, &loss));
    CHECK(fabs(loss - ((float *)REF("loss")->data)[0]) < 1e-5);
    int checked = 0;
    for (int i = 0; i < np; i++) {
        const char *pn;
        int64_t dd[RT_MAX_DIMS];
        REQUIRE(rt_plan_param_info(p, i, &pn, dd, NULL) >= 0);
        char gname[64];
        snprintf(gname, sizeof gname, "grad/%s", pn);
        const rt_ref_tensor *gr = REF(gname);
        float *gg = malloc(gr->count * 4);
        REQUIRE(gg);
        CHECK_RC(rt_exec_get_grad(e, i, gg));
        snprintf(nm, sizeof nm, "%s d%s", c->name, pn);
        CHECK(!rt_fixture_compare(nm, gg, gr->data, gr->count, 1e-5, 1e-3));
        free(gg);
    }
    /* after the torch comparison: the finite differences leave the last
     * gradient at a perturbed weight */
    for (int i = 0; i < np; i++) checked += rt_test_fd_param(e, &d, B, i, 0, 1e-3, c->name);
    printf("%-22s torch ok, %3d finite differences\n", c->name, checked);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
#undef REF
}

/* Indices must be integral and in [0, vocabulary): RT_EDATA names the
 * sample, for training and for prediction alike. */
static void embedding_checks(void)
{
    rt_graph *g = rt_graph_create();
    int64_t xd[2] = {RT_BATCH, 2}, wd[2] = {4, 3};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, xd) == 0);
    REQUIRE(rt_graph_add_param(g, "W", 2, wd, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    const char *in[2] = {"x", "W"};
    REQUIRE(rt_graph_add_node(g, "emb", "Embedding", 2, in, 0, NULL) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = 2;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 2;
    cfg.label_dims[0] = 2;
    cfg.label_dims[1] = 3;
    rt_plan *p;
    char err[256];
    REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float lab[3 * 6] = {0}, out[3 * 6];
    float good[6] = {0, 3, 1, 2, 3, 0};
    rt_data d = {.x = good, .y = lab, .y_dtype = RT_F32, .n = 3};
    CHECK_RC(rt_exec_check_data(e, &d));
    float w[12];
    CHECK_RC(rt_exec_get_param(e, 0, w));
    CHECK_RC(rt_exec_predict(e, good, 3, out));
    CHECK(memcmp(out + 3, w + 9, 12) == 0); /* sample 0, index 3: row 3 */
    float frac[6] = {0, 3, 1, 2.5f, 3, 0};
    d.x = frac;
    CHECK(rt_exec_check_data(e, &d) == RT_EDATA);
    CHECK(strstr(rt_exec_errmsg(e), "sample 1") && strstr(rt_exec_errmsg(e), "'emb'"));
    float big[6] = {0, 3, 1, 2, 4, 0};
    CHECK(rt_exec_predict(e, big, 3, out) == RT_EDATA);
    CHECK(strstr(rt_exec_errmsg(e), "sample 2") && strstr(rt_exec_errmsg(e), "[0, 4)"));
    float neg[6] = {-1, 3, 1, 2, 3, 0};
    d.x = neg;
    rt_train_result r;
    CHECK(rt_exec_train(e, &d, 1, &r, NULL, NULL, NULL) == RT_EDATA);
    CHECK(strstr(rt_exec_errmsg(e), "sample 0") != NULL);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    printf("%-22s ok\n", "embedding index checks");
}

/* Import json, compile for batch 3 (MSE, labels shaped as the output:
 * lab_ndim dims l0, l1), set every parameter from the
 * fixture tensor prefix + (its name after the first '/', with
 * "forward_<x>"/"backward_<x>" as "fw"/"bw"), predict x into out. With
 * output_at, the graph's output is that value instead of the model's. */
static int import_predict_at(const char *json, const char *prefix, const float *x, float *out,
                             int64_t *out_numel, int lab_ndim, int64_t l0, int64_t l1,
                             const char *output_at)
{
    rt_graph *g;
    char err[400];
    if (rt_keras_import(json, strlen(json), &g, err, sizeof err) < 0) {
        fprintf(stderr, "import: %s\n", err);
        return -1;
    }
    if (output_at) REQUIRE(rt_graph_set_output(g, output_at) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = B;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = lab_ndim;
    cfg.label_dims[0] = l0;
    cfg.label_dims[1] = l1;
    rt_plan *p;
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    rt_graph_destroy(g);
    if (rc < 0) {
        fprintf(stderr, "compile: %s\n", err);
        return -1;
    }
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    int64_t d[RT_MAX_DIMS];
    int nd = rt_plan_output_shape(p, d);
    *out_numel = 1;
    for (int i = 0; i < nd; i++) *out_numel *= d[i];
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *pn;
        int tr;
        REQUIRE(rt_plan_param_info(p, i, &pn, d, &tr) >= 0);
        if (!tr) continue; /* Bidirectional ave's constant 0.5 */
        /* output_at: only its own layer's weights reach it */
        if (output_at && (strncmp(pn, output_at, strlen(output_at)) || pn[strlen(output_at)] != '/'))
            continue;
        const char *rest = strchr(pn, '/') + 1;
        char nm[160];
        if (!strncmp(rest, "forward_", 8) && strchr(rest, '/'))
            snprintf(nm, sizeof nm, "%s/fw/%s", prefix, strchr(rest, '/') + 1);
        else if (!strncmp(rest, "backward_", 9) && strchr(rest, '/'))
            snprintf(nm, sizeof nm, "%s/bw/%s", prefix, strchr(rest, '/') + 1);
        else if (!strcmp(rest, "embeddings"))
            snprintf(nm, sizeof nm, "%s/emb", prefix);
        else
            snprintf(nm, sizeof nm, "%s/%s", prefix, rest);
        CHECK_RC(rt_exec_set_param(e, i, rt_fixture_find(nm)->data));
    }
    CHECK_RC(rt_exec_predict(e, x, B, out));
    rt_exec_destroy(e);
    rt_plan_release(p);
    return 0;
}

static int import_predict(const char *json, const char *prefix, const float *x, float *out,
                          int64_t *out_numel, int lab_ndim, int64_t l0, int64_t l1)
{
    return import_predict_at(json, prefix, x, out, out_numel, lab_ndim, l0, l1, NULL);
}

static const char *lstm_keras3 =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", "
    "\"layers\": [{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", "
    "\"config\": {\"batch_shape\": [null, 5, 4], \"dtype\": \"float32\", \"name\": \"in\"}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm\", "
    "\"trainable\": true, \"dtype\": \"float32\", \"return_sequences\": false, "
    "\"return_state\": false, \"go_backwards\": false, \"stateful\": false, \"unroll\": false, "
    "\"zero_output_for_mask\": false, \"units\": 3, \"activation\": \"tanh\", "
    "\"recurrent_activation\": \"hard_sigmoid\", \"use_bias\": true, "
    "\"kernel_initializer\": {\"module\": \"keras.initializers\", \"class_name\": "
    "\"GlorotUniform\", \"config\": {\"seed\": null}, \"registered_name\": null}, "
    "\"recurrent_initializer\": {\"module\": \"keras.initializers\", \"class_name\": "
    "\"GlorotUniform\", \"config\": {\"seed\": null}, \"registered_name\": null}, "
    "\"bias_initializer\": {\"module\": \"keras.initializers\", \"class_name\": \"Zeros\", "
    "\"config\": {}, \"registered_name\": null}, \"unit_forget_bias\": true, "
    "\"kernel_regularizer\": null, \"recurrent_regularizer\": null, \"bias_regularizer\": null, "
    "\"activity_regularizer\": null, \"kernel_constraint\": null, \"recurrent_constraint\": null, "
    "\"bias_constraint\": null, \"dropout\": 0.0, \"recurrent_dropout\": 0.0, \"seed\": null}}]}}";

/* Keras 2 Bidirectional(LSTM(3, return_sequences)) on (5, 4); %s: merge */
static const char *bilstm_keras2 =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
    "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bi\", \"trainable\": true, "
    "\"batch_input_shape\": [null, 5, 4], \"dtype\": \"float32\", \"layer\": {\"class_name\": "
    "\"LSTM\", \"config\": {\"name\": \"lstm\", \"units\": 3, \"return_sequences\": true, "
    "\"activation\": \"tanh\", \"recurrent_activation\": \"sigmoid\", \"use_bias\": true, "
    "\"unit_forget_bias\": true, \"dropout\": 0.0, \"recurrent_dropout\": 0.0, "
    "\"implementation\": 2}}, \"merge_mode\": \"%s\"}}]}}";

/* Keras 3 writes both halves, named forward_lstm and backward_lstm */
#define K3_LSTM(nm, back)                                                                  \
    "{\"module\": \"keras.layers\", \"class_name\": \"LSTM\", \"config\": {\"name\": \"" nm     \
    "\", \"units\": 3, \"return_sequences\": true, \"go_backwards\": " back ", "                 \
    "\"activation\": \"tanh\", \"recurrent_activation\": \"sigmoid\", \"use_bias\": true, "     \
    "\"unit_forget_bias\": true, \"dropout\": 0.0, \"recurrent_dropout\": 0.0, \"seed\": null}, " \
    "\"registered_name\": null}"
static const char *bilstm_keras3 =
    "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", "
    "\"layers\": [{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", "
    "\"config\": {\"batch_shape\": [null, 5, 4], \"name\": \"in\"}}, "
    "{\"module\": \"keras.layers\", \"class_name\": \"Bidirectional\", \"config\": {\"name\": "
    "\"bi\", \"trainable\": true, \"merge_mode\": \"concat\", \"layer\": "
    K3_LSTM("forward_lstm", "false") ", \"backward_layer\": " K3_LSTM("backward_lstm", "true")
    "}}]}}";

/* Keras 1: the Sequential config is the layer list; LSTM(output_dim,
 * init, inner_init, inner_activation, forget_bias_init, dropout_W, ...) */
static const char *emb_lstm_keras1 =
    "{\"class_name\": \"Sequential\", \"config\": [{\"class_name\": \"Embedding\", "
    "\"config\": {\"name\": \"embedding_1\", \"trainable\": true, \"batch_input_shape\": "
    "[null, 5], \"input_dtype\": \"int32\", \"input_dim\": 7, \"output_dim\": 4, \"init\": "
    "\"glorot_uniform\", \"input_length\": 5, \"activity_regularizer\": null, "
    "\"W_constraint\": null, \"mask_zero\": false, \"W_regularizer\": null, \"dropout\": 0.0}}, "
    "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm_1\", \"trainable\": true, "
    "\"return_sequences\": false, \"go_backwards\": false, \"stateful\": false, "
    "\"unroll\": false, \"consume_less\": \"cpu\", \"input_dim\": 4, \"input_length\": null, "
    "\"output_dim\": 3, \"init\": \"glorot_uniform\", \"inner_init\": \"glorot_uniform\", "
    "\"forget_bias_init\": \"one\", \"activation\": \"tanh\", \"inner_activation\": "
    "\"sigmoid\", \"W_regularizer\": null, \"U_regularizer\": null, \"b_regularizer\": null, "
    "\"dropout_W\": 0.0, \"dropout_U\": 0.0}}]}";

/* Keras 2 Sequential: %s is the layer list after the input's shape */
#define SEQ2(layers) \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": [" layers "]}}"
#define K2_RNN(cls, nm, extra)                                                               \
    "{\"class_name\": \"" cls "\", \"config\": {\"name\": \"" nm "\", \"units\": 3, "           \
    "\"activation\": \"tanh\", \"recurrent_activation\": \"sigmoid\", \"use_bias\": true, "       \
    "\"dropout\": 0.2, \"recurrent_dropout\": 0.3, \"implementation\": 2" extra "}}"

/* Step masks through the importer: Embedding(mask_zero) -> LSTM and
 * Masking(0) -> GRU against the masked torch cases (inference: dropout
 * off); Bidirectional(return_sequences) on a mask outputs 0 at masked
 * steps in both halves (Keras forces zero_output_for_mask there); a mask
 * reaching a layer that would use it, or the model output (Keras masks
 * the loss), is refused naming the layers. */
static void masking_imports(void)
{
    static const char *emb_lstm = SEQ2(
        "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"emb\", "
        "\"batch_input_shape\": [null, 5], \"input_dim\": 7, \"output_dim\": 4, "
        "\"mask_zero\": true}}, " K2_RNN("LSTM", "lstm", ", \"unit_forget_bias\": true"));
    static const char *mask_gru = SEQ2(
        "{\"class_name\": \"Masking\", \"config\": {\"name\": \"mask\", \"trainable\": true, "
        "\"batch_input_shape\": [null, 5, 4], \"dtype\": \"float32\", \"mask_value\": 0.0}}, "
        K2_RNN("GRU", "gru", ", \"reset_after\": false"));
    float out[B * T * 2 * U];
    int64_t n;
    const rt_ref_tensor *ref = rt_fixture_find("emb_lstm_mask_drop/out");
    if (import_predict(emb_lstm, "emb_lstm_mask_drop",
                       rt_fixture_find("emb_lstm_mask_drop/x")->data, out, &n, 1, U, 0) == 0)
        CHECK(!rt_fixture_compare("Embedding(mask_zero) -> LSTM", out, ref->data, ref->count,
                                  1e-5, 1e-4));
    else
        CHECK(!"Embedding(mask_zero) -> LSTM imports");
    ref = rt_fixture_find("gru_rb_mask/out");
    if (import_predict(mask_gru, "gru_rb_mask", rt_fixture_find("gru_rb_mask/x")->data, out, &n,
                       1, U, 0) == 0)
        CHECK(!rt_fixture_compare("Masking -> GRU", out, ref->data, ref->count, 1e-5, 1e-4));
    else
        CHECK(!"Masking -> GRU imports");
    /* Bidirectional(GRU, return_sequences) -> LSTM: the sequence between
     * them is checked through a model cut after the Bidirectional, whose
     * output carries the mask (so its loss is masked per step, as Keras:
     * keras_timedist checks that loss), and through its output: the
     * masked steps of lstm_mask_seq's x give 0 in both halves */
    static const char *bi_cut = SEQ2(
        "{\"class_name\": \"Masking\", \"config\": {\"name\": \"mask\", "
        "\"batch_input_shape\": [null, 5, 4], \"mask_value\": 0.0}}, "
        "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bi\", \"layer\": "
        K2_RNN("GRU", "gru", ", \"return_sequences\": true") ", \"merge_mode\": \"concat\"}}");
    char err[400] = "";
    rt_graph *g = NULL;
    if (rt_keras_import(bi_cut, strlen(bi_cut), &g, err, sizeof err) == 0) {
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.loss = RT_LOSS_MSE;
        cfg.batch_size = B;
        cfg.label_dtype = RT_F32;
        cfg.label_ndim = 2;
        cfg.label_dims[0] = T;
        cfg.label_dims[1] = 2 * U;
        rt_plan *p = NULL;
        CHECK(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
        rt_plan_release(p);
    } else {
        fprintf(stderr, "the masked Bidirectional output: %s\n", err);
        CHECK(!"a model whose output carries the mask imports (a masked loss)");
    }
    rt_graph_destroy(g);
    /* the same Bidirectional, read through a Dense (which passes the mask)
     * by a last-step LSTM: imports, and the Bidirectional's own output is
     * predicted by a graph whose output is set to it */
    static const char *bi_lstm = SEQ2(
        "{\"class_name\": \"Masking\", \"config\": {\"name\": \"mask\", "
        "\"batch_input_shape\": [null, 5, 4], \"mask_value\": 0.0}}, "
        "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bi\", \"layer\": "
        K2_RNN("GRU", "gru", ", \"return_sequences\": true") ", \"merge_mode\": \"concat\"}}, "
        "{\"class_name\": \"Dropout\", \"config\": {\"name\": \"drop\", \"rate\": 0.1}}, "
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": 2}}, "
        K2_RNN("LSTM", "lstm", ""));
    /* and its values: Keras' Bidirectional over the mask, in torch */
    ref = rt_fixture_find("bigru_mask/out");
    if (import_predict_at(bi_lstm, "bigru_mask", rt_fixture_find("bigru_mask/x")->data, out,
                          &n, 2, T, 2 * U, "bi") == 0)
        CHECK(n == T * 2 * U && !rt_fixture_compare("Masking -> Bidirectional(GRU)", out,
                                                     ref->data, ref->count, 1e-5, 1e-4));
    else
        CHECK(!"Masking -> Bidirectional(GRU) with the fixture's weights");
    if (rt_keras_import(bi_lstm, strlen(bi_lstm), &g, err, sizeof err) == 0) {
        REQUIRE(rt_graph_set_output(g, "bi") == 0);
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.loss = RT_LOSS_MSE;
        cfg.batch_size = B;
        cfg.label_dtype = RT_F32;
        cfg.label_ndim = 2;
        cfg.label_dims[0] = T;
        cfg.label_dims[1] = 2 * U;
        rt_plan *p;
        rt_exec *e;
        REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
        REQUIRE(rt_exec_create(p, &e) == 0);
        const float *sm = rt_fixture_find("lstm_mask_seq/step_mask")->data;
        CHECK_RC(rt_exec_predict(e, rt_fixture_find("lstm_mask_seq/x")->data, B, out));
        int zeros_ok = 1, nonzero = 0;
        for (int i = 0; i < B * T; i++)
            for (int j = 0; j < 2 * U; j++) {
                if (sm[i] == 0.0f) zeros_ok &= out[i * 2 * U + j] == 0.0f;
                else nonzero += out[i * 2 * U + j] != 0.0f;
            }
        CHECK(zeros_ok && nonzero > 0);
        rt_exec_destroy(e);
        rt_plan_release(p);
    } else {
        fprintf(stderr, "Bidirectional on a mask: %s\n", err);
        CHECK(!"Bidirectional on a mask imports");
    }
    rt_graph_destroy(g);
    /* Embedding(mask_zero) -> GlobalAveragePooling1D averages the kept
     * steps only (Keras: sum(x m) / sum(m)), against that mean of the
     * fixture's embedding rows */
    static const char *emb_gap = SEQ2(
        "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"emb\", "
        "\"batch_input_shape\": [null, 5], \"input_dim\": 7, \"output_dim\": 4, "
        "\"mask_zero\": true}}, {\"class_name\": \"GlobalAveragePooling1D\", \"config\": "
        "{\"name\": \"gap\", \"data_format\": \"channels_last\", \"keepdims\": false}}");
    {
        const float *xi = rt_fixture_find("emb_lstm_mask_drop/x")->data;
        const float *E = rt_fixture_find("emb_lstm_mask_drop/emb")->data;
        float want[B * F] = {0};
        for (int i = 0; i < B; i++) {
            int kept = 0;
            for (int t = 0; t < T; t++) {
                const int k = (int)xi[i * T + t];
                if (!k) continue;
                kept++;
                for (int j = 0; j < F; j++) want[i * F + j] += E[k * F + j];
            }
            for (int j = 0; j < F; j++) want[i * F + j] /= (float)kept;
        }
        if (import_predict(emb_gap, "emb_lstm_mask_drop", xi, out, &n, 1, F, 0) == 0)
            CHECK(n == F && !rt_fixture_compare("mask_zero -> GlobalAveragePooling1D", out,
                                                 want, B * F, 1e-6, 1e-5));
        else
            CHECK(!"mask_zero -> GlobalAveragePooling1D imports");
    }
    /* a mask into Flatten (Keras 2 refuses it too), into GlobalMaxPooling1D
     * (Keras 2 does not support one there): refused naming both */
    static const char *bad[] = {
        SEQ2("{\"class_name\": \"Embedding\", \"config\": {\"name\": \"emb\", "
             "\"batch_input_shape\": [null, 5], \"input_dim\": 7, \"output_dim\": 4, "
             "\"mask_zero\": true}}, {\"class_name\": \"Flatten\", \"config\": {\"name\": "
             "\"flat\"}}, {\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", "
             "\"units\": 1}}"),
        SEQ2("{\"class_name\": \"Embedding\", \"config\": {\"name\": \"emb\", "
             "\"batch_input_shape\": [null, 5], \"input_dim\": 7, \"output_dim\": 4, "
             "\"mask_zero\": true}}, {\"class_name\": \"GlobalMaxPooling1D\", "
             "\"config\": {\"name\": \"flat\"}}, {\"class_name\": \"Dense\", \"config\": "
             "{\"name\": \"d\", \"units\": 1}}"),
    };
    for (int i = 0; i < 2; i++) {
        g = NULL;
        err[0] = 0;
        int rc = rt_keras_import(bad[i], strlen(bad[i]), &g, err, sizeof err);
        if (rc >= 0 || !strstr(err, "'flat'") || !strstr(err, "emb/mask")) {
            fprintf(stderr, "mask into a layer that uses it %d: rc %d '%s'\n", i, rc, err);
            CHECK(0);
        }
        rt_graph_destroy(g);
    }
    printf("%-22s ok\n", "keras masking");
}

static void keras_import_checks(void)
{
    float out[B * T * 2 * U];
    int64_t n;
    const rt_ref_tensor *ref = rt_fixture_find("lstm_hard3/out");
    if (import_predict(lstm_keras3, "lstm_hard3", rt_fixture_find("lstm_hard3/x")->data, out,
                       &n, 1, U, 0) == 0) {
        CHECK(n == U);
        CHECK(!rt_fixture_compare("keras 3 LSTM hard_sigmoid", out, ref->data, ref->count,
                                  1e-5, 1e-4));
    } else {
        CHECK(!"keras 3 LSTM imports");
    }
    ref = rt_fixture_find("bilstm/out"); /* (B, T, 2U): forward | backward */
    const float *r = ref->data;
    const char *modes[] = {"concat", "sum", "mul", "ave"};
    for (int m = 0; m < 4; m++) {
        char js[2048], what[64];
        snprintf(js, sizeof js, bilstm_keras2, modes[m]);
        snprintf(what, sizeof what, "Bidirectional merge_mode %s", modes[m]);
        if (import_predict(js, "bilstm", rt_fixture_find("bilstm/x")->data, out, &n, 2, T,
                           m == 0 ? 2 * U : U) < 0) {
            CHECK(!"Bidirectional imports");
            continue;
        }
        CHECK(n == T * U * (m == 0 ? 2 : 1));
        float want[B * T * 2 * U];
        for (int i = 0; i < B * T; i++)
            for (int j = 0; j < U; j++) {
                const float f = r[i * 2 * U + j], b = r[i * 2 * U + U + j];
                if (m == 0) {
                    want[i * 2 * U + j] = f;
                    want[i * 2 * U + U + j] = b;
                } else {
                    want[i * U + j] = m == 1 ? f + b : m == 2 ? f * b : 0.5f * (f + b);
                }
            }
        CHECK(!rt_fixture_compare(what, out, want, (size_t)(B * n), 1e-5, 1e-4));
    }
    if (import_predict(bilstm_keras3, "bilstm", rt_fixture_find("bilstm/x")->data, out, &n, 2,
                       T, 2 * U) == 0)
        CHECK(!rt_fixture_compare("Keras 3 Bidirectional", out, r, ref->count, 1e-5, 1e-4));
    else
        CHECK(!"Keras 3 Bidirectional imports");
    ref = rt_fixture_find("emb_lstm/out");
    if (import_predict(emb_lstm_keras1, "emb_lstm", rt_fixture_find("emb_lstm/x")->data, out, &n,
                       1, U, 0) == 0)
        CHECK(!rt_fixture_compare("Keras 1 Embedding+LSTM", out, ref->data, ref->count, 1e-5,
                                  1e-4));
    else
        CHECK(!"Keras 1 Embedding+LSTM imports");
    {
        /* a Keras 1 GRU is Keras 2's reset_after=false: one (3U) bias */
        char js[2048], err[256];
        const char *at = strstr(emb_lstm_keras1, "{\"class_name\": \"LSTM\"");
        snprintf(js, sizeof js, "%.*s{\"class_name\": \"GRU\"%s", (int)(at - emb_lstm_keras1),
                 emb_lstm_keras1, at + strlen("{\"class_name\": \"LSTM\""));
        char *fb = strstr(js, "\"forget_bias_init\": \"one\", ");
        REQUIRE(fb);
        memmove(fb, fb + 27, strlen(fb + 27) + 1);
        rt_graph *g = NULL;
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.loss = RT_LOSS_MSE;
        cfg.label_dtype = RT_F32;
        cfg.label_ndim = 1;
        cfg.label_dims[0] = U;
        rt_plan *p = NULL;
        int ok = rt_keras_import(js, strlen(js), &g, err, sizeof err) == 0 &&
                 rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0;
        if (!ok) fprintf(stderr, "Keras 1 GRU: %s\n", err);
        CHECK(ok);
        int found = 0;
        for (int i = 0; ok && i < rt_plan_n_params(p); i++) {
            const char *pn;
            int64_t d[RT_MAX_DIMS];
            int nd = rt_plan_param_info(p, i, &pn, d, NULL);
            if (!strcmp(pn, "lstm_1/bias")) found = nd == 1 && d[0] == 3 * U;
        }
        CHECK(found);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    /* refused settings: the error names the setting and the layer */
    static const struct { const char *from, *to, *needle; } bad[] = {
        {"\"recurrent_dropout\": 0.0", "\"recurrent_dropout\": 1.5", "recurrent_dropout"},
        /* stateful needs the model's fixed batch size, which this one has not */
        {"\"implementation\": 2", "\"stateful\": true", "stateful LSTM needs a fixed batch size"},
        {"\"implementation\": 2", "\"return_state\": true", "return_state"},
        /* (the kernel's regularizer is read per half: keras_params; a
         * half's activity_regularizer: keras_actreg) Keras' would cover
         * the returned states too */
        {"\"implementation\": 2",
         "\"return_state\": true, \"activity_regularizer\": {\"class_name\": \"L2\"}",
         "activity_regularizer with return_state"},
        {"\"implementation\": 2", "\"new_field\": 1", "new_field"},
        {"\"merge_mode\": \"concat\"", "\"merge_mode\": null", "merge_mode"},
        {"\"class_name\": \"LSTM\"", "\"class_name\": \"Dense\"", "Dense"},
        {"\"recurrent_activation\": \"sigmoid\"", "\"recurrent_activation\": \"selu\"",
         "selu"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char base[2048], js[2200], err[256] = "";
        snprintf(base, sizeof base, bilstm_keras2, "concat");
        char *at = strstr(base, bad[i].from);
        REQUIRE(at);
        snprintf(js, sizeof js, "%.*s%s%s", (int)(at - base), base, bad[i].to,
                 at + strlen(bad[i].from));
        rt_graph *g = NULL;
        int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
        if (rc >= 0 || !strstr(err, bad[i].needle) || !strstr(err, "'bi'")) {
            fprintf(stderr, "refused setting %s: rc %d, '%s'\n", bad[i].needle, rc, err);
            CHECK(0);
        }
        rt_graph_destroy(g);
    }
    masking_imports();
    printf("%-22s ok\n", "keras import");
}

/* Graphs the recurrent ops refuse at compile, each naming the node */
static void bad_graphs(void)
{
    static const struct {
        int64_t steps, feat, k0, k1, r0, r1;
        const char *act;
        int code;
        const char *needle;
    } bad[] = {
        {5, 4, 3, 12, 3, 12, "tanh", RT_ESHAPE, "kernel 'k'"}, /* 3 rows, input has 4 */
        {5, 4, 4, 16, 3, 12, "tanh", RT_ESHAPE, "recurrent kernel 'r'"},
        {5, 4, 4, 16, 4, 16, "swish", RT_EINVAL, "activation 'swish'"},
        {1 << 20, 1, 1, 1 << 14, 1 << 12, 1 << 14, "tanh", RT_EOVERFLOW, "2^32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_graph *g = rt_graph_create();
        int64_t xd[3] = {RT_BATCH, bad[i].steps, bad[i].feat}, kd[2] = {bad[i].k0, bad[i].k1},
                rd[2] = {bad[i].r0, bad[i].r1};
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 3, xd) == 0);
        REQUIRE(rt_graph_add_param(g, "k", 2, kd, RT_INIT_ZEROS, 1, NULL) == 0);
        REQUIRE(rt_graph_add_param(g, "r", 2, rd, RT_INIT_ZEROS, 1, NULL) == 0);
        const rt_attr at = {.name = "activation", .kind = RT_ATTR_STR, .s = bad[i].act};
        const char *in[3] = {"x", "k", "r"};
        REQUIRE(rt_graph_add_node(g, "lstm", "LSTM", 3, in, 1, &at) == 0);
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.loss = RT_LOSS_MSE;
        cfg.label_dtype = RT_F32;
        rt_plan *p = NULL;
        char err[256] = "";
        int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
        if (rc != bad[i].code || !strstr(err, bad[i].needle) || !strstr(err, "'lstm'")) {
            fprintf(stderr, "bad graph %zu: rc %d '%s'\n", i, rc, err);
            CHECK(0);
        }
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    printf("%-22s ok\n", "bad graphs");
}

/* LSTM(activation="elu"), the activation of a real corpus model (keras-
 * corpus memetic_predictor_lstm.json): the sequence output against Keras'
 * LSTMCell formulas (keras/src/layers/rnn/lstm.py: z = x W + h U + b split
 * into i, f, c, o; c = f c + i act(z_c); h = o act(c); recurrent
 * activation sigmoid) in double, and every weight gradient by finite
 * differences. elu is x > 0 ? x : exp(x) - 1 (keras/src/activations). */
static double elu_d(double z) { return z > 0 ? z : expm1(z); }
static double sig_d(double z) { return 1 / (1 + exp(-z)); }

/* A plan and exec of g with an MSE loss on (rows, U) labels at batch B */
static rt_exec *mse_exec(rt_graph *g, int64_t rows, rt_plan **p, const char *what)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = B;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 2;
    cfg.label_dims[0] = rows;
    cfg.label_dims[1] = U;
    char err[256];
    if (rt_plan_compile(g, &cfg, p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "%s: compile: %s\n", what, err);
        exit(1);
    }
    rt_exec *e;
    REQUIRE(rt_exec_create(*p, &e) == 0);
    return e;
}

static void elu_lstm(void)
{
    enum { G = 4 * U };
    float k[F * G], r[U * G], b[G], x[B * T * F], y[B * T * U];
    uint32_t s = 99;
#define NEXT() (s = s * 1664525u + 1013904223u, (float)(s >> 8) / 16777216.0f - 0.5f)
    for (int i = 0; i < F * G; i++) k[i] = 1.2f * NEXT();
    for (int i = 0; i < U * G; i++) r[i] = 1.2f * NEXT();
    for (int i = 0; i < G; i++) b[i] = 0.5f * NEXT();
    for (int i = 0; i < B * T * F; i++) x[i] = 3.0f * NEXT();
    for (int i = 0; i < B * T * U; i++) y[i] = NEXT();
#undef NEXT
    rt_graph *g = rt_graph_create();
    int64_t xd[3] = {RT_BATCH, T, F}, kd[2] = {F, G}, rd[2] = {U, G}, bd[1] = {G};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 3, xd) == 0);
    REQUIRE(rt_graph_add_param(g, "kernel", 2, kd, RT_INIT_ZEROS, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "recurrent_kernel", 2, rd, RT_INIT_ZEROS, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "bias", 1, bd, RT_INIT_ZEROS, 1, NULL) == 0);
    const rt_attr at[3] = {
        {.name = "activation", .kind = RT_ATTR_STR, .s = "elu"},
        {.name = "recurrent_activation", .kind = RT_ATTR_STR, .s = "sigmoid"},
        {.name = "return_sequences", .kind = RT_ATTR_INT, .i = 1},
    };
    const char *in[4] = {"x", "kernel", "recurrent_kernel", "bias"};
    REQUIRE(rt_graph_add_node(g, "rnn", "LSTM", 4, in, 3, at) == 0);
    rt_plan *p;
    rt_exec *e = mse_exec(g, T, &p, "elu lstm");
    const float *vals[3] = {k, r, b};
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *pn;
        int64_t d[RT_MAX_DIMS];
        REQUIRE(rt_plan_param_info(p, i, &pn, d, NULL) >= 0);
        const int w = !strcmp(pn, "kernel") ? 0 : !strcmp(pn, "recurrent_kernel") ? 1 : 2;
        CHECK_RC(rt_exec_set_param(e, i, vals[w]));
    }
    float got[B * T * U];
    CHECK_RC(rt_exec_predict(e, x, B, got));
    double worst = 0;
    int neg = 0;
    for (int n = 0; n < B; n++) {
        double h[U] = {0}, c[U] = {0};
        for (int t = 0; t < T; t++) {
            double z[G];
            for (int j = 0; j < G; j++) {
                z[j] = b[j];
                for (int q = 0; q < F; q++) z[j] += (double)x[(n * T + t) * F + q] * k[q * G + j];
                for (int q = 0; q < U; q++) z[j] += h[q] * r[q * G + j];
            }
            for (int u = 0; u < U; u++) {
                const double ig = sig_d(z[u]), fg = sig_d(z[U + u]), og = sig_d(z[3 * U + u]);
                neg += z[2 * U + u] < 0;
                c[u] = fg * c[u] + ig * elu_d(z[2 * U + u]);
                h[u] = og * elu_d(c[u]);
                const double d = fabs(h[u] - got[(n * T + t) * U + u]);
                worst = d > worst ? d : worst;
            }
        }
    }
    CHECK(worst < 1e-5);
    CHECK(neg > 0); /* both branches of elu are exercised */
    rt_data dd = {.x = x, .y = y, .y_dtype = RT_F32, .n = B};
    int checked = 0;
    for (int i = 0; i < rt_plan_n_params(p); i++)
        checked += rt_test_fd_param(e, &dd, B, i, 0, 1e-3, "elu lstm");
    printf("%-22s Keras formulas: worst |difference| %.2g, %3d finite differences\n",
           "lstm_elu", worst, checked);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* Keras' return_state and initial_state on the engine's ops, the states
 * sliced apart with Pad and Reshape as the importer does: an encoder over
 * the first T steps of a (2T, F) input returns its final states, a
 * decoder over the last T steps starts from them (return_sequences and
 * return_state). With the same weights the decoder's output and final
 * states must be those of one layer run over all 2T steps (the initial
 * state is the carried state); then, with weights of their own, every
 * weight gradient (the encoder's reach the loss only through the states)
 * by finite differences, the loss over the decoder's whole output (its
 * sequence and its final states). Masked steps (x2's all-zero steps,
 * first steps among them) and recurrent dropout on the decoder cover the
 * state gradient's other paths. */
typedef struct scase {
    const char *name, *op;
    int reset_after, enc_back, masked;
    double rdrop;
} scase;

static void add_rows(rt_graph *g, const char *name, const char *src, int64_t r0, int64_t nr,
                     int64_t R, int64_t W, int squeeze)
{
    char row[64];
    snprintf(row, sizeof row, "%s:rows", name);
    const int64_t pads[6] = {0, -r0, 0, 0, -(R - r0 - nr), 0}, shape[1] = {W};
    const rt_attr a = {.name = "pads", .kind = RT_ATTR_INTS, .n = 6, .ints = pads};
    const rt_attr sh = {.name = "shape", .kind = RT_ATTR_INTS, .n = 1, .ints = shape};
    REQUIRE(rt_graph_add_node(g, squeeze ? row : name, "Pad", 1, &src, 1, &a) == 0);
    const char *in = row;
    if (squeeze) REQUIRE(rt_graph_add_node(g, name, "Reshape", 1, &in, 1, &sh) == 0);
}

/* one recurrent node: prefix's weights (added with new_w), nst initial
 * states */
static void add_cell(rt_graph *g, const scase *c, const char *name, const char *x,
                     const char *prefix, int new_w, const char *const *st, int nst, int seq,
                     int back, int ret_state, double rdrop)
{
    const int G = !strcmp(c->op, "LSTM") ? 4 : !strcmp(c->op, "GRU") ? 3 : 1;
    char kn[32], rn[32], bn[32], mn[32];
    snprintf(kn, sizeof kn, "%s/kernel", prefix);
    snprintf(rn, sizeof rn, "%s/recurrent_kernel", prefix);
    snprintf(bn, sizeof bn, "%s/bias", prefix);
    int64_t kd[2] = {F, G * U}, rd[2] = {U, G * U}, bd[2] = {2, G * U};
    if (new_w) {
        REQUIRE(rt_graph_add_param(g, kn, 2, kd, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
        REQUIRE(rt_graph_add_param(g, rn, 2, rd, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
        if (c->reset_after)
            REQUIRE(rt_graph_add_param(g, bn, 2, bd, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
        else
            REQUIRE(rt_graph_add_param(g, bn, 1, bd + 1, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    }
    const char *in[7] = {x, kn, rn, bn};
    int n = 4;
    for (int k = 0; k < nst; k++) in[n++] = st[k];
    if (c->masked) {
        snprintf(mn, sizeof mn, "%s/mask", name);
        const rt_attr mv = {.name = "mask_value", .kind = RT_ATTR_FLOAT, .f = 0.0};
        REQUIRE(rt_graph_add_node(g, mn, "SequenceMask", 1, &x, 1, &mv) == 0);
        in[n++] = mn;
    }
    const rt_attr at[8] = {
        {.name = "initial_state", .kind = RT_ATTR_INT, .i = nst > 0},
        {.name = "return_state", .kind = RT_ATTR_INT, .i = ret_state},
        {.name = "return_sequences", .kind = RT_ATTR_INT, .i = seq},
        {.name = "go_backwards", .kind = RT_ATTR_INT, .i = back},
        {.name = "masked", .kind = RT_ATTR_INT, .i = c->masked},
        {.name = "recurrent_dropout", .kind = RT_ATTR_FLOAT, .f = rdrop},
        {.name = "recurrent_activation", .kind = RT_ATTR_STR, .s = "sigmoid"},
        {.name = "reset_after", .kind = RT_ATTR_INT, .i = c->reset_after},
    };
    const int nat = G == 3 ? 8 : G == 4 ? 7 : 6;
    if (rt_graph_add_node(g, name, c->op, n, in, nat, at) != 0) {
        fprintf(stderr, "%s: %s\n", c->name, rt_graph_errmsg(g));
        exit(1);
    }
}

/* parameter values by name: a fixed draw per weight kind (k, r, b) */
static void set_by_kind(rt_exec *e, const rt_plan *p)
{
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *pn;
        int64_t d[RT_MAX_DIMS], n = 1;
        int nd = rt_plan_param_info(p, i, &pn, d, NULL);
        for (int k = 0; k < nd; k++) n *= d[k];
        const char *w = strchr(pn, '/') + 1;
        uint32_t s = (uint32_t)(w[0] * 131 + strlen(w));
        float *v = malloc(sizeof(float) * (size_t)n);
        REQUIRE(v);
        for (int64_t k = 0; k < n; k++) {
            s = s * 1664525u + 1013904223u;
            v[k] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (w[0] == 'b' ? 0.6f : 1.4f);
        }
        CHECK_RC(rt_exec_set_param(e, i, v));
        free(v);
    }
}

static void state_case(const scase *c)
{
    const int S = !strcmp(c->op, "LSTM") ? 2 : 1;
    float x[B * 2 * T * F], y[B * (T + 2) * U];
    uint32_t s = 7;
    for (int i = 0; i < B * 2 * T * F; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = 2.0f * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    if (c->masked) /* all-zero steps: the decoder's first in sample 0 */
        for (int n = 0; n < B; n++)
            for (int t = 0; t < 2 * T; t++)
                if ((n + t) % 3 == 2 || (n == 0 && t == T))
                    memset(x + (n * 2 * T + t) * F, 0, sizeof(float) * F);
    for (int i = 0; i < B * (T + S) * U; i++) {
        s = s * 1664525u + 1013904223u;
        y[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    /* the encoder and decoder with one set of weights, and one layer over
     * all 2T steps */
    rt_graph *g = rt_graph_create(), *g1 = rt_graph_create();
    int64_t xd[3] = {RT_BATCH, 2 * T, F};
    REQUIRE(rt_graph_add_input(g, "x2", RT_F32, 3, xd) == 0);
    REQUIRE(rt_graph_add_input(g1, "x2", RT_F32, 3, xd) == 0);
    const int64_t p1[6] = {0, 0, 0, 0, -T, 0}, p2[6] = {0, -T, 0, 0, 0, 0};
    const rt_attr a1 = {.name = "pads", .kind = RT_ATTR_INTS, .n = 6, .ints = p1};
    const rt_attr a2 = {.name = "pads", .kind = RT_ATTR_INTS, .n = 6, .ints = p2};
    const char *x2 = "x2";
    REQUIRE(rt_graph_add_node(g, "xa", "Pad", 1, &x2, 1, &a1) == 0);
    REQUIRE(rt_graph_add_node(g, "xb", "Pad", 1, &x2, 1, &a2) == 0);
    const char *st[2] = {"enc/h", "enc/c"};
    for (int pass = 0; pass < 2; pass++) {
        rt_graph *gg = pass ? g1 : g;
        if (pass) {
            add_cell(g1, c, "full", "x2", "w", 1, NULL, 0, 1, 0, 1, 0.0);
            break;
        }
        add_cell(gg, c, "enc", "xa", "w", 1, NULL, 0, 0, c->enc_back, 1, 0.0);
        for (int k = 0; k < S; k++) add_rows(gg, st[k], "enc", 1 + k, 1, 1 + S, U, 1);
        add_cell(gg, c, "dec", "xb", "w", 0, st, S, 1, 0, 1, c->rdrop);
    }
    double worst = 0;
    if (!c->enc_back && c->rdrop == 0) {
        rt_plan *pp, *pf;
        rt_exec *e = mse_exec(g, T + S, &pp, c->name), *f = mse_exec(g1, 2 * T + S, &pf, c->name);
        set_by_kind(e, pp);
        set_by_kind(f, pf);
        float got[B * (T + 2) * U], full[B * (2 * T + 2) * U];
        CHECK_RC(rt_exec_predict(e, x, B, got));
        CHECK_RC(rt_exec_predict(f, x, B, full));
        for (int n = 0; n < B; n++)
            for (int r = 0; r < T + S; r++)
                for (int u = 0; u < U; u++) {
                    const double d = fabs(got[(n * (T + S) + r) * U + u] -
                                          full[(n * (2 * T + S) + T + r) * U + u]);
                    worst = d > worst ? d : worst;
                }
        CHECK(worst < 1e-5);
        rt_exec_destroy(e);
        rt_exec_destroy(f);
        rt_plan_release(pp);
        rt_plan_release(pf);
    }
    rt_graph_destroy(g);
    rt_graph_destroy(g1);
    /* weights of their own: the encoder's gradients come through the
     * states alone */
    g = rt_graph_create();
    REQUIRE(rt_graph_add_input(g, "x2", RT_F32, 3, xd) == 0);
    REQUIRE(rt_graph_add_node(g, "xa", "Pad", 1, &x2, 1, &a1) == 0);
    REQUIRE(rt_graph_add_node(g, "xb", "Pad", 1, &x2, 1, &a2) == 0);
    add_cell(g, c, "enc", "xa", "e", 1, NULL, 0, 0, c->enc_back, 1, 0.0);
    for (int k = 0; k < S; k++) add_rows(g, st[k], "enc", 1 + k, 1, 1 + S, U, 1);
    add_cell(g, c, "dec", "xb", "d", 1, st, S, 1, 0, 1, c->rdrop);
    rt_plan *p;
    rt_exec *e = mse_exec(g, T + S, &p, c->name);
    set_by_kind(e, p);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = B};
    int checked = 0, enc_nonzero = 0;
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *pn;
        int64_t dd[RT_MAX_DIMS], n = 1;
        int nd = rt_plan_param_info(p, i, &pn, dd, NULL);
        for (int k = 0; k < nd; k++) n *= dd[k];
        checked += rt_test_fd_param(e, &d, B, i, 0, 1e-3, c->name);
        if (pn[0] == 'e') { /* the state path carries a gradient at all */
            float *gr = malloc(sizeof(float) * (size_t)n);
            REQUIRE(gr);
            CHECK_RC(rt_exec_get_grad(e, i, gr));
            for (int64_t k = 0; k < n; k++) enc_nonzero += fabsf(gr[k]) > 1e-4f;
            free(gr);
        }
    }
    CHECK(enc_nonzero > 0);
    if (!c->enc_back && c->rdrop == 0)
        printf("%-22s one layer over 2T: %.2g, %3d finite differences\n", c->name, worst,
               checked);
    else
        printf("%-22s %3d finite differences\n", c->name, checked);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

static void state_checks(void)
{
    static const scase cases[] = {
        {"state_lstm", "LSTM", 0, 0, 0, 0},
        {"state_gru_ra", "GRU", 1, 0, 0, 0},
        {"state_gru_rb", "GRU", 0, 0, 0, 0},
        {"state_rnn", "SimpleRNN", 0, 0, 0, 0},
        {"state_lstm_mask", "LSTM", 0, 0, 1, 0},
        {"state_gru_mask", "GRU", 1, 0, 1, 0},
        {"state_lstm_back_drop", "LSTM", 0, 1, 0, 0.4},
        {"state_gru_rb_drop", "GRU", 0, 0, 1, 0.3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) state_case(&cases[i]);
}

/* The importer's reading of states: a Keras 2 Functional model (the
 * decoder's inbound node lists [x, enc:1, enc:2]), the same in Keras 3's
 * form with initial_state as a keyword and as the second positional
 * argument, all predict the same; the states matter (a decoder from zero
 * states predicts otherwise); the settings refused name the fix. */
#define K_IN(fmt3) \
    "{\"class_name\": \"InputLayer\", \"name\": \"in\", \"config\": {\"" fmt3 "\": " \
    "[null, 5, 4], \"name\": \"in\"}, \"inbound_nodes\": []}"
#define K_LSTM_CFG(nm, seq, extra)                                                           \
    "\"config\": {\"name\": \"" nm "\", \"units\": 3, \"activation\": \"tanh\", "               \
    "\"recurrent_activation\": \"sigmoid\", \"use_bias\": true, \"unit_forget_bias\": true, "    \
    "\"return_sequences\": " seq ", \"return_state\": true, \"dropout\": 0.0, "                  \
    "\"recurrent_dropout\": 0.0" extra "}"
#define K2_MODEL(dec_in, outs)                                                                  \
    "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": [" K_IN(        \
        "batch_input_shape") ", {\"class_name\": \"LSTM\", \"name\": \"enc\", " K_LSTM_CFG(      \
        "enc", "false", "") ", \"inbound_nodes\": [[[\"in\", 0, 0, {}]]]}, {\"class_name\": "    \
        "\"LSTM\", \"name\": \"dec\", " K_LSTM_CFG("dec", "true", "") ", \"inbound_nodes\": "   \
        "[[" dec_in "]]}], \"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [" outs "]}}"
#define K3_T(nm, t) \
    "{\"class_name\": \"__keras_tensor__\", \"config\": {\"shape\": [null, 3], \"dtype\": " \
    "\"float32\", \"keras_history\": [\"" nm "\", 0, " #t "]}}"
#define K3_MODEL(args, kwargs)                                                                  \
    "{\"module\": \"keras\", \"class_name\": \"Functional\", \"config\": {\"name\": \"m\", "    \
    "\"layers\": [" K_IN("batch_shape") ", {\"module\": \"keras.layers\", \"class_name\": "    \
    "\"LSTM\", \"name\": \"enc\", " K_LSTM_CFG("enc", "false", ", \"seed\": null") ", "         \
    "\"inbound_nodes\": [{\"args\": [" K3_T("in", 0) "], \"kwargs\": {\"training\": false}}]},"  \
    " {\"module\": \"keras.layers\", \"class_name\": \"LSTM\", \"name\": \"dec\", " K_LSTM_CFG( \
        "dec", "true", ", \"seed\": null") ", \"inbound_nodes\": [{\"args\": [" args "], "      \
    "\"kwargs\": {" kwargs "}}]}], \"input_layers\": [[\"in\", 0, 0]], \"output_layers\": "    \
    "[[\"dec\", 0, 0]]}}"

static int state_predict(const char *js, float *out, char *err, size_t errlen)
{
    rt_graph *g;
    if (rt_keras_import(js, strlen(js), &g, err, errlen) < 0) return -1;
    rt_plan *p;
    rt_exec *e = mse_exec(g, 5, &p, "keras states"); /* (5, units 3) */
    rt_graph_destroy(g);
    set_by_kind(e, p);
    float x[B * 5 * 4];
    for (int i = 0; i < B * 5 * 4; i++) x[i] = (float)((i * 37) % 19) / 9.5f - 1.0f;
    CHECK_RC(rt_exec_predict(e, x, B, out));
    rt_exec_destroy(e);
    rt_plan_release(p);
    return 0;
}

static void state_imports(void)
{
    static const char *k2 = K2_MODEL(
        "[\"in\", 0, 0, {}], [\"enc\", 0, 1, {}], [\"enc\", 0, 2, {}]", "[\"dec\", 0, 0]");
    static const char *forms[] = {
        K3_MODEL(K3_T("in", 0), "\"initial_state\": [" K3_T("enc", 1) ", " K3_T("enc", 2)
                 "], \"training\": false"),
        K3_MODEL(K3_T("in", 0) ", [" K3_T("enc", 1) ", " K3_T("enc", 2) "]", ""),
    };
    float want[B * 5 * 3], got[B * 5 * 3], zero[B * 5 * 3];
    char err[400];
    if (state_predict(k2, want, err, sizeof err) < 0) {
        fprintf(stderr, "Keras 2 initial_state: %s\n", err);
        CHECK(0);
        return;
    }
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        if (state_predict(forms[i], got, err, sizeof err) < 0) {
            fprintf(stderr, "Keras 3 initial_state form %zu: %s\n", i, err);
            CHECK(0);
            continue;
        }
        CHECK(!rt_fixture_compare("Keras 3 initial_state", got, want, B * 5 * 3, 0, 0));
    }
    /* the decoder alone (no initial state): another prediction */
    static const char *k2_zero = K2_MODEL("[\"in\", 0, 0, {}]", "[\"dec\", 0, 0]");
    REQUIRE(state_predict(k2_zero, zero, err, sizeof err) == 0);
    double diff = 0;
    for (int i = 0; i < B * 5 * 3; i++) diff += fabs(zero[i] - want[i]);
    CHECK(diff > 1e-2);
    static const struct { const char *js, *needle; } bad[] = {
        {K2_MODEL("[\"in\", 0, 0, {}], [\"enc\", 0, 1, {}]", "[\"dec\", 0, 0]"),
         "LSTM takes 2 initial states (h, c), got 1"},
        {K2_MODEL("[\"in\", 0, 0, {}], [\"enc\", 0, 1, {}], [\"enc\", 0, 3, {}]",
                  "[\"dec\", 0, 0]"),
         "reads output 3 of layer 'enc', which has 3 outputs"},
        {K2_MODEL("[\"in\", 0, 0, {}], [\"enc\", 0, 1, {}], [\"enc\", 0, 0, {}]",
                  "[\"dec\", 0, 7]"),
         "reads output 7 of layer 'dec'"},
        {K3_MODEL(K3_T("in", 0), "\"mask\": " K3_T("enc", 1)), "mask"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_graph *g = NULL;
        err[0] = 0;
        int rc = rt_keras_import(bad[i].js, strlen(bad[i].js), &g, err, sizeof err);
        if (rc >= 0 || !strstr(err, bad[i].needle)) {
            fprintf(stderr, "refused state %zu: rc %d, '%s'\n", i, rc, err);
            CHECK(0);
        }
        rt_graph_destroy(g);
    }
    {
        /* Keras' stateful layer given an initial state uses its carried
         * states unless they are all zero: refused */
        char js[4096], err2[400] = "";
        static const char dec[] = "\"config\": {\"name\": \"dec\", ";
        const char *a = strstr(k2, "[null, 5, 4]"), *b = strstr(k2, dec);
        REQUIRE(a && b && a < b);
        snprintf(js, sizeof js, "%.*s[3, 5, 4]%.*s%s\"stateful\": true, %s", (int)(a - k2), k2,
                 (int)(b - a - 12), a + 12, dec, b + strlen(dec));
        rt_graph *g = NULL;
        int rc = rt_keras_import(js, strlen(js), &g, err2, sizeof err2);
        if (rc >= 0 || !strstr(err2, "initial_state on a stateful layer is not supported")) {
            fprintf(stderr, "stateful initial_state: rc %d, '%s'\n", rc, err2);
            CHECK(0);
        }
        rt_graph_destroy(g);
    }
    printf("%-22s ok\n", "keras states");
}

/* A stateful LSTM (Keras' stateful: true, batch 2): the states carry from
 * one predict to the next (the same input predicts something else), a
 * reset brings back the first prediction bit for bit, a part batch and
 * another batch size are refused with Keras' rules, reset_states matches
 * layers by name, and the state blob (checkpoints) carries the states: a
 * fresh exec loaded from it predicts what the saved one predicts. The
 * values themselves are python_stateful_rnn's (against PyTorch). */
static void stateful_checks(void)
{
    static const char js[] =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm\", \"units\": 3, "
        "\"batch_input_shape\": [2, 4, 2], \"stateful\": true, \"return_sequences\": false}},"
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": 1}}]}}";
    char err[300] = "";
    rt_graph *g = NULL;
    REQUIRE(rt_keras_import(js, strlen(js), &g, err, sizeof err) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0.1f;
    cfg.shuffle = 0;
    cfg.batch_size = 4;
    rt_plan *p = NULL;
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    CHECKF(rc == RT_EINVAL && strstr(err, "compile with batch_size 2, not 4"), "batch 4: %d %s",
           rc, err);
    cfg.batch_size = 2;
    REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
    rt_exec *e = NULL, *e2 = NULL;
    REQUIRE(rt_exec_create(p, &e) == 0 && rt_exec_create(p, &e2) == 0);
    CHECK(rt_exec_stateful_batch(e) == 2);
    float x[4 * 4 * 2], y[4], a[4], b[4], c[4];
    for (int i = 0; i < 32; i++)
        x[i] = (float)sin(0.7 * i);
    for (int i = 0; i < 4; i++)
        y[i] = 0.25f * (float)i;
    CHECK_RC(rt_exec_predict(e, x, 4, a));
    CHECK_RC(rt_exec_predict(e, x, 4, b));
    CHECK(memcmp(a, b, sizeof a) != 0); /* carried states */
    CHECK(rt_exec_reset_states(e, "dense") == 0 && rt_exec_reset_states(e, "lst") == 0);
    CHECK(rt_exec_reset_states(e, "lstm") == 1);
    CHECK_RC(rt_exec_predict(e, x, 4, c));
    CHECK(memcmp(a, c, sizeof a) == 0);
    rc = rt_exec_predict(e, x, 3, c);
    CHECKF(rc == RT_EINVAL && strstr(rt_exec_errmsg(e), "divided by the batch size 2. Found: 3"),
           "3 rows: %d %s", rc, rt_exec_errmsg(e));
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = 3};
    CHECK(rt_exec_train(e, &d, 1, NULL, NULL, NULL, NULL) == RT_EINVAL);
    d.n = 4;
    CHECK_RC(rt_exec_train(e, &d, 3, NULL, NULL, NULL, NULL));
    const size_t n = rt_exec_state_size(e);
    unsigned char *blob = malloc(n);
    REQUIRE(blob && rt_exec_save_state(e, blob, n) == 0);
    CHECK_RC(rt_exec_load_state(e2, blob, n));
    CHECK_RC(rt_exec_predict(e, x, 4, a));
    CHECK_RC(rt_exec_predict(e2, x, 4, b));
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* a non-finite state is refused */
    float nan = NAN;
    memcpy(blob + n - 4, &nan, 4);
    CHECK(rt_exec_load_state(e2, blob, n) == RT_ENAN);
    free(blob);
    rt_exec_destroy(e);
    rt_exec_destroy(e2);
    rt_plan_release(p);
    rt_graph_destroy(g);
    printf("%-22s ok\n", "stateful");
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2);
    rt_fixture_load(argv[1]);
    /* mirrors main() of tests/fixtures/gen_rnn_fixtures.py */
    static const rcase cases[] = {
        {"lstm_seq", "LSTM", 1, 0, 0, 0, "sigmoid", 0},
        {"lstm_back_hard", "LSTM", 0, 1, 0, 0, "hard_sigmoid", 0},
        {"gru_ra_back_aligned", "GRU", 1, 1, 1, 1, "sigmoid", 0},
        {"gru_rb", "GRU", 0, 0, 0, 0, "sigmoid", 0},
        {"rnn_back_seq", "SimpleRNN", 1, 1, 0, 0, "sigmoid", 0},
        {"emb_lstm", "LSTM", 0, 0, 0, 0, "sigmoid", 7},
        {"lstm_drop", "LSTM", 1, 0, 0, 0, "sigmoid", 0, 0.3, 0.4},
        {"gru_ra_drop", "GRU", 0, 1, 0, 1, "sigmoid", 0, 0.25, 0.5},
        {"gru_rb_drop", "GRU", 1, 0, 0, 0, "sigmoid", 0, 0.4, 0.3},
        {"rnn_drop", "SimpleRNN", 1, 0, 0, 0, "sigmoid", 0, 0.5, 0.5},
        {"lstm_rdrop", "LSTM", 0, 0, 0, 0, "sigmoid", 0, 0.0, 0.5},
        {"emb_gru_drop", "GRU", 0, 0, 0, 1, "sigmoid", 7, 0.3, 0.3},
        {"lstm_mask_seq", "LSTM", 1, 0, 0, 0, "sigmoid", 0, 0, 0, 1, 0},
        {"gru_mask_back_zero", "GRU", 1, 1, 1, 1, "sigmoid", 0, 0, 0, 1, 1},
        {"gru_rb_mask", "GRU", 0, 0, 0, 0, "sigmoid", 0, 0, 0, 1, 0},
        {"rnn_mask_seq", "SimpleRNN", 1, 0, 0, 0, "sigmoid", 0, 0, 0, 1, 0},
        {"emb_lstm_mask_drop", "LSTM", 0, 0, 0, 0, "sigmoid", 7, 0.2, 0.3, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    elu_lstm();
    embedding_checks();
    bad_graphs();
    keras_import_checks();
    state_checks();
    state_imports();
    stateful_checks();
    rt_fixture_free();
    return rt_test_done("test_rnn");
}
