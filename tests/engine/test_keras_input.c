/*
 * test_keras_input.c - Keras JSON the importer must refuse with a clear
 * message (trailing data, non-finite numbers, shape products past 2^32,
 * Functional graphs with duplicate names or cycles) and Functional models
 * listed out of order, which it must place after their inputs.
 */
#include "import_keras.h"
#include "rt_test.h"

static void expect_err(const char *what, const char *js, int code, const char *needle)
{
    rt_graph *g = (rt_graph *)1;
    char err[256] = "";
    int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    printf("%-28s %-18s \"%s\"\n", what, rt_err_name(rc), err);
    if (rc != code || !strstr(err, needle) || g != NULL) {
        fprintf(stderr, "%s: want %s with '%s'\n", what, rt_err_name(code), needle);
        rt_test_failures++;
    }
}

#define SEQ(layers) "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": [" layers "]}}"
#define INPUT4 "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4], \"name\": \"in\"}}"
#define DENSE(n, u) "{\"class_name\": \"Dense\", \"config\": {\"name\": \"" n "\", \"units\": " #u "}}"
#define FLAYER(n, cls, cfg, src)                                                                 \
    "{\"name\": \"" n "\", \"class_name\": \"" cls "\", \"config\": {\"name\": \"" n "\"" cfg "}," \
    "\"inbound_nodes\": [[[\"" src "\", 0, 0, {}]]]}"
#define FIN "{\"name\": \"in\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 4], \"name\": \"in\"}, \"inbound_nodes\": []}"
#define FUNC(layers, out)                                                                       \
    "{\"class_name\": \"Functional\", \"config\": {\"layers\": [" layers "],"                    \
    "\"input_layers\": [[\"in\", 0, 0]], \"output_layers\": [[\"" out "\", 0, 0]]}}"

int main(void)
{
    expect_err("trailing object", SEQ(INPUT4 "," DENSE("d", 3)) " {}", RT_EJSON, "trailing data");
    expect_err("trailing text", SEQ(INPUT4 "," DENSE("d", 3)) "x", RT_EJSON, "trailing data");
    expect_err("NaN rate", SEQ(INPUT4 ", {\"class_name\": \"Dropout\", \"config\": {\"name\": \"dr\", \"rate\": NaN}}"),
               RT_EINVAL, "'rate' must be a finite number");
    expect_err("Infinity momentum", SEQ(INPUT4 ", {\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", \"momentum\": -Infinity}}"),
               RT_EINVAL, "'momentum' must be a finite number");
    expect_err("1e999 epsilon", SEQ(INPUT4 ", {\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", \"epsilon\": 1e999}}"),
               RT_EINVAL, "'epsilon' must be a finite number");
    expect_err("input past 2^32", SEQ("{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 65536, 65536, 2], \"name\": \"in\"}}"),
               RT_EOVERFLOW, "more than 2^32 values");
    expect_err("flatten past 2^32", SEQ(INPUT4 "," DENSE("d", 4611686018427387904) ", {\"class_name\": \"Reshape\", \"config\": {\"name\": \"r\", \"target_shape\": [2, 2]}}"),
               RT_EOVERFLOW, "more than 2^32 values per sample");
    expect_err("duplicate layer name", FUNC(FIN "," FLAYER("d", "Dense", ", \"units\": 2", "in") "," FLAYER("d", "Dense", ", \"units\": 2", "in"), "d"),
               RT_EINVAL, "two layers are named 'd'");
    expect_err("cycle", FUNC(FIN "," FLAYER("a", "Dense", ", \"units\": 4", "b") "," FLAYER("b", "Dense", ", \"units\": 4", "a"), "b"),
               RT_EINVAL, "cycle");
    expect_err("dangling", FUNC(FIN "," FLAYER("a", "Dense", ", \"units\": 4", "ghost"), "a"),
               RT_EINVAL, "no layer produces");

    /* out of order: the output layer first, its input last */
    const char *js = FUNC(FLAYER("b", "Dense", ", \"units\": 3", "a") "," FLAYER("a", "Dense", ", \"units\": 5", "in") "," FIN, "b");
    rt_graph *g = NULL;
    char err[256] = "";
    CHECK_RC(rt_keras_import(js, strlen(js), &g, err, sizeof err));
    if (g) {
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.batch_size = 4;
        cfg.loss = RT_LOSS_MSE;
        cfg.label_dtype = RT_F32;
        cfg.label_ndim = 1;
        cfg.label_dims[0] = 3;
        rt_plan *p = NULL;
        rt_compile_report rep;
        CHECK_RC(rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err));
        CHECK(rep.trainable_param_count == 4 * 5 + 5 + 5 * 3 + 3);
        uint64_t sum = 0;
        for (int i = 0; i < RT_COMPILE_PASSES; i++) {
            CHECK(rt_compile_pass_name(i) != NULL);
            sum += rep.pass_ns[i];
        }
        CHECK(rt_compile_pass_name(RT_COMPILE_PASSES) == NULL && rt_compile_pass_name(-1) == NULL);
        CHECK(sum > 0 && sum <= rep.compile_ns);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    return rt_test_done("engine_keras_input");
}
