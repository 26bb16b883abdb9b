/*
 * test_fuzz.c - random graphs (bad and good) through compile, and every
 * graph that compiles through create/train/evaluate/predict/grads. Bad input
 * must come back as an error code with a NUL-terminated message under 200
 * bytes, never a crash (run it under ASan+UBSan). Deterministic: a fixed
 * generator seed; argv[1] sets the number of graphs (default 3000), and
 * RT_FUZZ_ALL_OPS=1 draws from every registered op, not only this area's.
 */
#include <stdint.h>

#include "rt_test.h"

static uint64_t s = 0x243f6a8885a308d3ull;
static uint32_t rnd(uint32_t n)
{
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return n ? (uint32_t)(s % n) : 0;
}

static const char *ops[] = {"Dense", "MatMul", "Add", "Sub", "Mul", "Relu", "Sigmoid", "Tanh",
                            "Softmax", "LogSoftmax", "Reshape", "Flatten", "Identity",
                            "Dropout", "NoSuchOp"};

static int64_t dim(void)
{
    switch (rnd(40)) {
    case 0: return 0;
    case 1: return -3;
    case 2: return INT64_C(1) << 40;
    default: return 1 + rnd(5);
    }
}

int main(int argc, char **argv)
{
    int graphs = argc > 1 ? atoi(argv[1]) : 3000;
    /* RT_FUZZ_ALL_OPS=1: every registered op (the convolution ops too) */
    const char *const *all_ops = getenv("RT_FUZZ_ALL_OPS") ? rt_engine_op_names() : NULL;
    int n_all = 0;
    while (all_ops && all_ops[n_all]) n_all++;
    int compiled = 0, ran = 0;
    for (int it = 0; it < graphs; it++) {
        rt_graph *g = rt_graph_create();
        REQUIRE(g);
        char names[24][16];
        int nn = 0;
        int nd = 1 + rnd(3);
        int64_t in[4] = {rnd(20) ? RT_BATCH : (int64_t)rnd(9) - 1};
        for (int i = 1; i < nd; i++) in[i] = rnd(10) ? 1 + rnd(3) : dim();
        rt_graph_add_input(g, "x", rnd(30) ? RT_F32 : RT_I32, nd, in);
        snprintf(names[nn++], 16, "x");
        int np = (int)rnd(5);
        for (int i = 0; i < np; i++) {
            int64_t d[3];
            int r = rnd(3) ? 2 : (int)rnd(4);
            for (int k = 0; k < r; k++) d[k] = rnd(12) ? 1 + rnd(3) : dim();
            snprintf(names[nn], 16, "p%d", i);
            if (rt_graph_add_param(g, names[nn], r, d, (rt_init)rnd(8), rnd(5) != 0, NULL) == 0) nn++;
        }
        int nodes = 1 + rnd(8);
        const char *prev = "x";
        for (int i = 0; i < nodes && nn < 24; i++) {
            const char *op = all_ops ? all_ops[rnd((uint32_t)n_all)] : ops[rnd(sizeof ops / sizeof ops[0])];
            const char *ins[3];
            int ni;
            char ghost[16];
            if (rnd(8)) {
                /* mostly well-formed: the op's usual arity over the last value */
                const int unary = strcmp(op, "Dense") && strcmp(op, "MatMul") && strcmp(op, "Add") &&
                                  strcmp(op, "Sub") && strcmp(op, "Mul");
                ins[0] = prev;
                ni = unary ? 1 : 2;
                if (!unary) ins[1] = np && rnd(3) ? names[1 + rnd((uint32_t)np)] : names[rnd((uint32_t)nn)];
            } else {
                ni = (int)rnd(4);
                for (int k = 0; k < ni; k++) {
                    if (rnd(4) == 0) {
                        snprintf(ghost, sizeof ghost, "n%d", i + 1 + (int)rnd(3)); /* later or missing */
                        ins[k] = ghost;
                    } else {
                        ins[k] = names[rnd((uint32_t)nn)];
                    }
                }
            }
            rt_attr at[2];
            int na = 0;
            int64_t shp[3] = {-1, 1 + (int64_t)rnd(4), rnd(3) ? 1 + (int64_t)rnd(3) : -1};
            switch (rnd(5)) {
            case 0: at[na++] = (rt_attr){.name = "shape", .kind = RT_ATTR_INTS, .n = 1 + (int)rnd(3), .ints = shp}; break;
            case 1: at[na++] = (rt_attr){.name = "rate", .kind = rnd(2) ? RT_ATTR_FLOAT : RT_ATTR_STR,
                                         .f = (double)rnd(12) / 10.0, .s = "x"}; break;
            case 2: at[na++] = (rt_attr){.name = "activation", .kind = RT_ATTR_STR,
                                         .s = rnd(2) ? "relu" : "swish"}; break;
            default: break;
            }
            snprintf(names[nn], 16, "n%d", i);
            if (rt_graph_add_node(g, names[nn], op, ni, ins, na, at) == 0) prev = names[nn++];
        }
        if (rnd(6) == 0) rt_graph_set_output(g, names[rnd(nn)]);

        rt_train_config c;
        rt_train_config_init(&c);
        c.loss = (rt_loss_kind)(1 + rnd(6));
        c.from_logits = rnd(2);
        c.opt = (rt_opt_kind)(1 + rnd(4));
        c.momentum = rnd(2) ? 0.9f : 0.0f;
        c.nesterov = rnd(2);
        c.clip_norm = rnd(3) ? 0.0f : 1.0f;
        c.batch_size = 1 + rnd(6);
        c.seed = rnd(1000);
        c.label_dtype = rnd(2) ? RT_I32 : RT_F32;
        c.label_ndim = rnd(4) ? 0 : (int)rnd(3);
        for (int k = 0; k < c.label_ndim; k++) c.label_dims[k] = 1 + rnd(4);
        c.metrics = rnd(2);
        rt_plan *p = NULL;
        char err[256];
        memset(err, 'q', sizeof err);
        int rc = rt_plan_compile(g, &c, &p, NULL, err, sizeof err);
        if (rc < 0) {
            CHECK(p == NULL);
            CHECK(memchr(err, 0, sizeof err) && strlen(err) > 0 && strlen(err) < 200);
            CHECK(strcmp(rt_err_name(rc), "RT_EUNKNOWN") != 0);
        } else {
            compiled++;
            rt_exec *e;
            REQUIRE(rt_exec_create(p, &e) == 0);
            int64_t xd[RT_MAX_DIMS], od[RT_MAX_DIMS];
            int xn = rt_plan_input_shape(p, xd), on = rt_plan_output_shape(p, od);
            int64_t xs = 1, os = 1, ls = 1;
            for (int k = 0; k < xn; k++) xs *= xd[k];
            for (int k = 0; k < on; k++) os *= od[k];
            /* the plan's label shape: a one-hot loss with no label_dims takes
             * the output's shape */
            int64_t ld[RT_MAX_DIMS];
            const int lnd = rt_plan_label_shape(p, ld);
            for (int k = 0; k < lnd; k++) ls *= ld[k];
            int64_t C = on ? od[on - 1] : 1;
            const int n = 1 + rnd(13);
            float *x = malloc(sizeof(float) * (size_t)(n * xs));
            float *out = malloc(sizeof(float) * (size_t)(n * os));
            int32_t *yi = malloc(sizeof(int32_t) * (size_t)(n * ls));
            for (int64_t k = 0; k < n * xs; k++) x[k] = (float)rnd(2001) / 500.0f - 2.0f;
            for (int64_t k = 0; k < n * ls; k++) {
                int32_t v = (int32_t)rnd((uint32_t)C + (rnd(20) == 0 ? 1u : 0u));
                if (c.label_dtype == RT_I32) yi[k] = v;
                else ((float *)yi)[k] = (float)v;
            }
            rt_data d = {.x = x, .y = yi, .y_dtype = rnd(30) ? c.label_dtype : RT_F32 + RT_I32 - c.label_dtype, .n = n};
            rt_train_result r;
            rc = rt_exec_train(e, &d, 1 + rnd(4), &r, NULL, NULL, NULL);
            if (rc == 0) {
                ran++;
                rt_metrics m;
                CHECK(rt_exec_evaluate(e, &d, &m) == 0);
                double l;
                CHECK(rt_exec_compute_grads(e, &d, n < c.batch_size ? n : c.batch_size, &l) == 0);
            } else {
                CHECK(strlen(rt_exec_errmsg(e)) > 0 && strlen(rt_exec_errmsg(e)) < 200);
            }
            CHECK(rt_exec_predict(e, x, n, out) == 0);
            free(x);
            free(out);
            free(yi);
            rt_exec_destroy(e);
            rt_plan_release(p);
        }
        rt_graph_destroy(g);
    }
    printf("%d graphs: %d compiled, %d trained\n", graphs, compiled, ran);
    /* the generator does reach the executor */
    CHECK(compiled > graphs / (all_ops ? 50 : 20) && ran > 0);
    return rt_test_done("test_fuzz");
}
