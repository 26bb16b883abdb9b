/*
 * test_backend_diff.c - 20-step training runs on the cpu and ref backends
 * (docs/backends.md) agree: the forward pass before training, the first
 * step's gradients, every step's loss and every parameter after every
 * step, for models that together use every op family ref has, each CPU
 * fusion (Dense + Relu/Sigmoid/Tanh, Conv2D + MaxPool2D, Softmax +
 * crossentropy), every Keras loss, two PyTorch losses and every optimizer.
 *
 * Tolerances, from the arithmetic (u = 2^-24, float32's unit roundoff):
 *  - forward, abs 1e-5 + rel 1e-4: the CPU sums a dot product of K <= 288
 *    terms in float in a blocked order (oneDNN, AVX-512 partial sums), ref
 *    in double rounded once. The float sum's error is at most
 *    K u sum|x_i w_i| (Higham 3.1) = 1.7e-5 sum|x w| at K = 288; with
 *    O(1) inputs and glorot weights sum|x w| is O(1) per layer, and a few
 *    layers compound it: 1e-4 relative, with 1e-5 absolute for outputs
 *    that cancel to near 0. The CPU's exp/log are vectorised polynomials
 *    within 2 ulp (test_math.c), far inside this.
 *  - gradients, abs 1e-5 + rel 1e-3: a gradient is a sum over the batch
 *    (32 rows) of products of forward values, so it carries the forward
 *    error plus the batch sum's 32 u; where it cancels (a bias gradient
 *    summing terms of both signs) the absolute part covers it, at the
 *    forward's scale (1e-4 of O(0.1) terms).
 *  - loss, rel 1e-4 per step and weights, abs 5e-5 + rel 1e-3 after each
 *    of 20 steps: each step moves a weight by lr times an update whose
 *    relative error is the gradient's (SGD, RMSprop) or at most twice it
 *    (Adam's m / sqrt(v)); over 20 steps at lr <= 0.05 that is
 *    20 * 0.05 * 1e-3 * |g| ~ 5e-5 for |g| ~ 1, and the runs feed back only
 *    through the weights they already share to that precision.
 * Data are random normals (no exact ties for Relu, MaxPool or Max/Min to
 * break differently); dropout masks are the engine's counter RNG, the same
 * on both backends.
 */
#include "rt_diff.h"
#include "rt_test.h"

static const rt_diff_tol tol = {
    .fwd_abs = 1e-5, .fwd_rel = 1e-4,
    .grad_abs = 1e-5, .grad_rel = 1e-3,
    .loss_abs = 1e-6, .loss_rel = 1e-4,
    .w_abs = 5e-5, .w_rel = 1e-3,
};

#define RT_TESTRNG_SEED 0x9e3779b97f4a7c15ull
#include "../lib/rt_testrng.h"

static void param(rt_graph *g, const char *name, int nd, int64_t d0, int64_t d1, int64_t d2,
                  int64_t d3, rt_init init)
{
    const int64_t d[4] = {d0, d1, d2, d3};
    REQUIRE(rt_graph_add_param(g, name, nd, d, init, 1, NULL) == 0);
}

static void node(rt_graph *g, const char *name, const char *op, int n, const char *i0,
                 const char *i1, const char *i2, int na, const rt_attr *at)
{
    const char *in[3] = {i0, i1, i2};
    if (rt_graph_add_node(g, name, op, n, in, na, at) < 0) {
        fprintf(stderr, "%s: %s\n", name, rt_graph_errmsg(g));
        exit(1);
    }
}

static void dense(rt_graph *g, const char *name, const char *x, int64_t K, int64_t N,
                  const char *act)
{
    char w[64], b[64];
    snprintf(w, sizeof w, "%s/w", name);
    snprintf(b, sizeof b, "%s/b", name);
    param(g, w, 2, K, N, 0, 0, RT_INIT_GLOROT_UNIFORM);
    param(g, b, 1, N, 0, 0, 0, RT_INIT_ZEROS);
    const rt_attr a = {.name = "activation", .kind = RT_ATTR_STR, .s = act};
    node(g, name, "Dense", 3, x, w, b, act ? 1 : 0, &a);
}

typedef struct model {
    const char *name;
    rt_graph *g;
    rt_train_config cfg;
    int64_t in, lab;      /* values per sample */
    int classes;          /* > 0: i32 labels in [0, classes); 0: f32 labels */
    int onehot;           /* f32 one-hot labels of 'lab' classes */
    int index_input;      /* inputs are indices in [0, index_input) */
} model;

static int run(model *m)
{
    enum { N = 64 };
    float *x = malloc(sizeof(float) * (size_t)(N * m->in));
    void *y = malloc(4 * (size_t)(N * m->lab));
    REQUIRE(x && y);
    for (int64_t i = 0; i < N * m->in; i++)
        x[i] = m->index_input ? (float)(int)(unif() * m->index_input) : normal();
    for (int64_t i = 0; i < N * m->lab; i++) {
        if (m->classes) ((int32_t *)y)[i] = (int32_t)(unif() * m->classes);
        else if (m->onehot) ((float *)y)[i] = 0.0f;
        else ((float *)y)[i] = m->cfg.loss == RT_LOSS_BCE || m->cfg.loss == RT_LOSS_BCE_LOGITS
                                   ? (float)(unif() < 0.5) : normal();
    }
    if (m->onehot)
        for (int64_t i = 0; i < N; i++) ((float *)y)[i * m->lab + (int)(unif() * m->lab)] = 1.0f;
    rt_data d = {.x = x, .y = y, .y_dtype = m->classes ? RT_I32 : RT_F32, .n = N};
    rt_diff_stats st;
    char why[256] = "";
    int rc = rt_diff_run(m->g, &m->cfg, &d, 20, &tol, &st, why, sizeof why);
    printf("%-10s %s  worst/tolerance: forward %.3f, gradient %.3f, loss %.3f, weights %.3f%s%s\n",
           m->name, rc == 1 ? "agree" : "DIFFER", st.fwd, st.grad, st.loss, st.w,
           rc == 1 ? "" : ": ", rc == 1 ? "" : why);
    CHECK(rc == 1);
    free(x);
    free(y);
    rt_graph_destroy(m->g);
    return rc;
}

static rt_graph *graph(int nd, int64_t d0, int64_t d1, int64_t d2)
{
    rt_graph *g = rt_graph_create();
    REQUIRE(g);
    const int64_t d[4] = {RT_BATCH, d0, d1, d2};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, nd + 1, d) == 0);
    return g;
}

static void config(model *m, rt_loss_kind loss, rt_opt_kind opt, float lr)
{
    rt_train_config_init(&m->cfg);
    m->cfg.loss = loss;
    m->cfg.opt = opt;
    m->cfg.lr = lr;
    m->cfg.batch_size = 32;
    m->cfg.seed = 7;
    m->cfg.label_dtype = m->classes ? RT_I32 : RT_F32;
    m->cfg.label_ndim = 1;
    m->cfg.label_dims[0] = m->lab;
}

int main(void)
{
    if (rt_backend_select("cpu") < 0 || rt_backend_select("ref") < 0) {
        /* a build without the native backend has only one to compare */
        printf("backend_diff: one backend (%s) in this build\n", rt_backend_list());
        return 77;
    }
    /* MLP: Dense + Relu/Tanh fusions, Softmax + sparse crossentropy, Adam */
    {
        model m = {.name = "mlp", .in = 12, .lab = 1, .classes = 5};
        m.g = graph(1, 12, 0, 0);
        dense(m.g, "d1", "x", 12, 32, NULL);
        node(m.g, "r1", "Relu", 1, "d1", NULL, NULL, 0, NULL);
        dense(m.g, "d2", "r1", 32, 16, "tanh");
        dense(m.g, "d3", "d2", 16, 5, NULL);
        node(m.g, "p", "Softmax", 1, "d3", NULL, NULL, 0, NULL);
        config(&m, RT_LOSS_SPARSE_CE, RT_OPT_ADAM, 0.01f);
        m.cfg.metrics = RT_METRIC_ACCURACY;
        run(&m);
    }
    /* CNN: Conv2D + Relu, Conv2D + MaxPool2D fusion, BatchNorm, GAP, one-hot
     * crossentropy, SGD with Nesterov momentum, clipping */
    {
        model m = {.name = "cnn", .in = 8 * 8 * 2, .lab = 4, .onehot = 1};
        m.g = graph(3, 8, 8, 2);
        const rt_attr same = {.name = "padding", .kind = RT_ATTR_STR, .s = "same"};
        const rt_attr relu[2] = {same, {.name = "activation", .kind = RT_ATTR_STR, .s = "relu"}};
        param(m.g, "c1/k", 4, 3, 3, 2, 8, RT_INIT_GLOROT_UNIFORM);
        param(m.g, "c1/b", 1, 8, 0, 0, 0, RT_INIT_ZEROS);
        node(m.g, "c1", "Conv2D", 3, "x", "c1/k", "c1/b", 2, relu);
        node(m.g, "mp", "MaxPool2D", 1, "c1", NULL, NULL, 0, NULL);
        param(m.g, "bn/g", 1, 8, 0, 0, 0, RT_INIT_ONES);
        param(m.g, "bn/b", 1, 8, 0, 0, 0, RT_INIT_ZEROS);
        const int64_t c8 = 8;
        REQUIRE(rt_graph_add_param(m.g, "bn/m", 1, &c8, RT_INIT_ZEROS, 0, NULL) == 0);
        REQUIRE(rt_graph_add_param(m.g, "bn/v", 1, &c8, RT_INIT_ONES, 0, NULL) == 0);
        const char *bin[5] = {"mp", "bn/g", "bn/b", "bn/m", "bn/v"};
        REQUIRE(rt_graph_add_node(m.g, "bn", "BatchNorm", 5, bin, 0, NULL) == 0);
        param(m.g, "c2/k", 4, 3, 3, 8, 8, RT_INIT_GLOROT_UNIFORM);
        node(m.g, "c2", "Conv2D", 2, "bn", "c2/k", NULL, 1, &same);
        node(m.g, "gap", "GlobalAvgPool", 1, "c2", NULL, NULL, 0, NULL);
        dense(m.g, "fc", "gap", 8, 4, NULL);
        node(m.g, "p", "Softmax", 1, "fc", NULL, NULL, 0, NULL);
        config(&m, RT_LOSS_CE, RT_OPT_SGD, 0.05f);
        m.cfg.momentum = 0.9f;
        m.cfg.nesterov = 1;
        m.cfg.clip_norm = 1.0f;
        run(&m);
    }
    /* activations, broadcasting binaries, LayerNorm, Dropout: MSE, RMSprop */
    {
        model m = {.name = "eltwise", .in = 10, .lab = 10};
        m.g = graph(1, 10, 0, 0);
        dense(m.g, "d1", "x", 10, 24, NULL);
        node(m.g, "a1", "Gelu", 1, "d1", NULL, NULL, 0, NULL);
        node(m.g, "a2", "Elu", 1, "d1", NULL, NULL, 0, NULL);
        node(m.g, "a3", "Swish", 1, "d1", NULL, NULL, 0, NULL);
        param(m.g, "sc", 1, 24, 0, 0, 0, RT_INIT_ONES);
        node(m.g, "m1", "Mul", 2, "a1", "sc", NULL, 0, NULL);
        node(m.g, "s1", "Add", 2, "m1", "a2", NULL, 0, NULL);
        node(m.g, "s2", "Sub", 2, "s1", "a3", NULL, 0, NULL);
        node(m.g, "mx", "Max", 2, "s2", "a3", NULL, 0, NULL);
        param(m.g, "ln/g", 1, 24, 0, 0, 0, RT_INIT_ONES);
        param(m.g, "ln/b", 1, 24, 0, 0, 0, RT_INIT_ZEROS);
        node(m.g, "ln", "LayerNormalization", 3, "mx", "ln/g", "ln/b", 0, NULL);
        const rt_attr rate = {.name = "rate", .kind = RT_ATTR_FLOAT, .f = 0.25};
        node(m.g, "dr", "Dropout", 1, "ln", NULL, NULL, 1, &rate);
        node(m.g, "sp", "Softplus", 1, "dr", NULL, NULL, 0, NULL);
        dense(m.g, "d2", "sp", 24, 10, "sigmoid");
        config(&m, RT_LOSS_MSE, RT_OPT_RMSPROP, 0.005f);
        m.cfg.metrics = RT_METRIC_MAE | RT_METRIC_RMSE;
        run(&m);
    }
    /* Embedding, ReduceMean, Concat: binary crossentropy, AdamW */
    {
        model m = {.name = "embed", .in = 6, .lab = 1};
        m.g = graph(1, 6, 0, 0);
        param(m.g, "emb", 2, 20, 8, 0, 0, RT_INIT_GLOROT_UNIFORM);
        node(m.g, "e", "Embedding", 2, "x", "emb", NULL, 0, NULL);
        const int64_t ax = 1;
        const rt_attr axes = {.name = "axes", .kind = RT_ATTR_INTS, .n = 1, .ints = &ax};
        node(m.g, "rm", "ReduceMean", 1, "e", NULL, NULL, 1, &axes);
        dense(m.g, "d1", "rm", 8, 8, "relu");
        const int64_t cax = -1;
        const rt_attr caxis = {.name = "axis", .kind = RT_ATTR_INT, .i = cax};
        node(m.g, "cc", "Concat", 2, "rm", "d1", NULL, 1, &caxis);
        dense(m.g, "d2", "cc", 16, 1, "sigmoid");
        m.index_input = 20;
        config(&m, RT_LOSS_BCE, RT_OPT_ADAMW, 0.01f);
        m.cfg.metrics = RT_METRIC_AUC | RT_METRIC_PRECISION | RT_METRIC_RECALL;
        run(&m);
    }
    /* ConvTranspose, AvgPool2D ('same': windows clipped at the border):
     * logcosh, plain SGD */
    {
        model m = {.name = "deconv", .in = 4 * 4 * 3, .lab = 8 * 8 * 2};
        m.g = graph(3, 4, 4, 3);
        const rt_attr st2[2] = {{.name = "strides", .kind = RT_ATTR_INTS, .n = 2,
                                 .ints = (const int64_t[]){2, 2}},
                                {.name = "padding", .kind = RT_ATTR_STR, .s = "same"}};
        param(m.g, "ct/k", 4, 3, 3, 4, 3, RT_INIT_GLOROT_UNIFORM);
        param(m.g, "ct/b", 1, 4, 0, 0, 0, RT_INIT_ZEROS);
        node(m.g, "ct", "ConvTranspose", 3, "x", "ct/k", "ct/b", 2, st2);
        const rt_attr p1[2] = {{.name = "strides", .kind = RT_ATTR_INTS, .n = 2,
                                .ints = (const int64_t[]){1, 1}},
                               {.name = "padding", .kind = RT_ATTR_STR, .s = "same"}};
        node(m.g, "ap", "AvgPool2D", 1, "ct", NULL, NULL, 2, p1);
        param(m.g, "c/k", 4, 1, 1, 4, 2, RT_INIT_GLOROT_UNIFORM);
        node(m.g, "c", "Conv2D", 2, "ap", "c/k", NULL, 0, NULL);
        node(m.g, "o", "Tanh", 1, "c", NULL, NULL, 0, NULL);
        config(&m, RT_LOSS_LOGCOSH, RT_OPT_SGD, 0.05f);
        run(&m);
    }
    /* PyTorch's cross_entropy on logits with class weights and label
     * smoothing, Adam with torch's l2 weight decay */
    {
        model m = {.name = "torch_ce", .in = 9, .lab = 1, .classes = 4};
        m.g = graph(1, 9, 0, 0);
        dense(m.g, "d1", "x", 9, 16, "relu");
        dense(m.g, "d2", "d1", 16, 4, NULL);
        config(&m, RT_LOSS_CROSS_ENTROPY, RT_OPT_ADAM, 0.01f);
        static const float cw[4] = {1.0f, 0.5f, 2.0f, 1.5f};
        m.cfg.class_weight = cw;
        m.cfg.n_class_weight = 4;
        m.cfg.label_smoothing = 0.1f;
        m.cfg.l2_decay = 1e-3f;
        run(&m);
    }
    /* bce_with_logits with pos_weight, SGD with torch's dampening */
    {
        model m = {.name = "torch_bce", .in = 7, .lab = 3};
        m.g = graph(1, 7, 0, 0);
        dense(m.g, "d1", "x", 7, 12, "tanh");
        dense(m.g, "d2", "d1", 12, 3, NULL);
        config(&m, RT_LOSS_BCE_LOGITS, RT_OPT_SGD, 0.05f);
        static const float pw[3] = {2.0f, 1.0f, 0.5f};
        m.cfg.pos_weight = pw;
        m.cfg.n_pos_weight = 3;
        m.cfg.momentum = 0.9f;
        m.cfg.dampening = 0.1f;
        run(&m);
    }
    return rt_test_done("backend_diff");
}
