/*
 * test_gradcheck.c - finite-difference gradient checks for every op and
 * every loss.
 *
 * Each case is a small graph x -> Dense -> (op under test) -> ... -> loss, so
 * the op's input gradient is checked through the first Dense's parameters
 * and its own parameters directly. The analytic gradient comes from
 * rt_exec_compute_grads; the numeric one is the central difference
 * (L(w+h) - L(w-h)) / 2h with h = 1e-3, where L is the f32 forward's loss
 * accumulated in double. Every element of every parameter is checked.
 *
 * Tolerance: |analytic - numeric| <= 1e-3 + 2e-2 * max(|analytic|, |numeric|)
 * (f32 rounding in the forward is ~1e-7 relative, divided by 2h).
 */
#include <stdint.h>

#include "rt_test.h"

#define B 5
static uint64_t lcg = 88172645463325252ull;
static float rnd(void)
{
    /* deterministic normal-ish values in about (-2, 2) */
    float s = 0;
    for (int i = 0; i < 4; i++) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        s += (float)((lcg >> 40) & 0xffffff) / 16777216.0f;
    }
    return (s - 2.0f) * 1.7f;
}

static rt_graph *g;
static int fails_before;
/* PyTorch losses' options for the next run_check (reset after it) */
static rt_train_config extra;
static int use_extra;

static void param(const char *name, int nd, int64_t d0, int64_t d1)
{
    int64_t d[2] = {d0, d1};
    REQUIRE(rt_graph_add_param(g, name, nd, d, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
}

static void node(const char *name, const char *op, const char *a, const char *b,
                 const char *c, int n_attr, const rt_attr *attrs)
{
    const char *in[3] = {a, b, c};
    int n = c ? 3 : b ? 2 : 1;
    if (rt_graph_add_node(g, name, op, n, in, n_attr, attrs) != 0) {
        fprintf(stderr, "add_node %s: %s\n", name, rt_graph_errmsg(g));
        exit(1);
    }
}

/* x (B, in) -> h = Dense(x) (B, k) */
static void start(int in, int k)
{
    g = rt_graph_create();
    int64_t d[] = {RT_BATCH, in};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, d) == 0);
    param("W0", 2, in, k);
    param("b0", 1, k, 0);
    node("h", "Dense", "x", "W0", "b0", 0, NULL);
}

static void run_check(const char *name, rt_loss_kind loss, int from_logits,
                      rt_dtype ydt, int lab_per_sample, int in)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = loss;
    cfg.from_logits = from_logits;
    cfg.batch_size = B;
    cfg.seed = 3;
    cfg.label_dtype = ydt;
    cfg.label_ndim = lab_per_sample > 1 ? 1 : 0;
    cfg.label_dims[0] = lab_per_sample;
    if (use_extra) {
        cfg.reduction = extra.reduction;
        cfg.label_smoothing = extra.label_smoothing;
        cfg.ignore_index = extra.ignore_index;
        cfg.loss_beta = extra.loss_beta;
        cfg.class_weight = extra.class_weight;
        cfg.n_class_weight = extra.n_class_weight;
        cfg.pos_weight = extra.pos_weight;
        cfg.n_pos_weight = extra.n_pos_weight;
        if (extra.label_ndim) {
            cfg.label_ndim = extra.label_ndim;
            for (int i = 0; i < extra.label_ndim; i++) cfg.label_dims[i] = extra.label_dims[i];
        }
        use_extra = 0;
    }
    rt_plan *p;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "%s: compile: %s\n", name, err);
        rt_test_failures++;
        rt_graph_destroy(g);
        return;
    }
    int64_t od[RT_MAX_DIMS];
    int ond = rt_plan_output_shape(p, od);
    int64_t C = ond ? od[ond - 1] : 1;
    if (loss == RT_LOSS_CROSS_ENTROPY || loss == RT_LOSS_NLL) C = od[0]; /* dim 1 */
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    float x[B * 16];
    for (int i = 0; i < B * in; i++) x[i] = rnd();
    union { int32_t i[B * 16]; float f[B * 16]; } y = {{0}};
    REQUIRE(lab_per_sample >= 1 && lab_per_sample <= 16);
    for (int i = 0; i < B * lab_per_sample; i++) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        int cls = (int)((lcg >> 33) % (uint64_t)C);
        if (ydt == RT_I32) y.i[i] = cls;
        else if (loss == RT_LOSS_BCE || loss == RT_LOSS_BCE_LOGITS ||
                 loss == RT_LOSS_BCE_TORCH)
            y.f[i] = (float)((lcg >> 20) & 1);
        else if (loss == RT_LOSS_CROSS_ENTROPY) /* probabilities, normalised below */
            y.f[i] = (float)((lcg >> 20) & 7) + 0.5f;
        else y.f[i] = rnd();
    }
    if (loss == RT_LOSS_CROSS_ENTROPY && ydt == RT_F32)
        for (int r = 0; r < B; r++) {
            /* rows of C over the class axis: the first per-sample dim, each
             * position's C values strided by the rest */
            const int per = lab_per_sample, S = per / (int)C;
            for (int s = 0; s < S; s++) {
                float t = 0;
                for (int c = 0; c < C; c++) t += y.f[r * per + c * S + s];
                for (int c = 0; c < C; c++) y.f[r * per + c * S + s] /= t;
            }
        }
    if (ydt == RT_I32 && (loss == RT_LOSS_CROSS_ENTROPY || loss == RT_LOSS_NLL) &&
        cfg.ignore_index >= 0 && cfg.ignore_index < C)
        y.i[1] = (int32_t)cfg.ignore_index; /* one target left out */
    if (loss == RT_LOSS_CE) /* one-hot rows */
        for (int r = 0; r < B * lab_per_sample / (int)C; r++) {
            int hot = r % (int)C;
            for (int j = 0; j < C; j++) y.f[r * C + j] = j == hot ? 1.0f : 0.0f;
        }
    rt_data d = {.x = x, .y = &y, .y_dtype = ydt, .n = B};
    double l0;
    CHECK_RC(rt_exec_compute_grads(e, &d, B, &l0));
    int checked = 0;
    for (int pi = 0; pi < rt_plan_n_params(p); pi++)
        checked += rt_test_fd_param(e, &d, B, pi, 0, 1e-3, name);
    printf("%-28s %4d gradients %s\n", name, checked,
           rt_test_failures == fails_before ? "ok" : "FAILED");
    fails_before = rt_test_failures;
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* run_check with PyTorch losses' options x */
static void run_with(rt_train_config x, const char *name, rt_loss_kind loss, int from_logits,
                     rt_dtype ydt, int lab_per_sample, int in)
{
    extra = x;
    use_extra = 1;
    run_check(name, loss, from_logits, ydt, lab_per_sample, in);
}

/* the usual tail: output (B, C) logits or values, MSE against f32 labels */
static void mse(const char *name, int in) { run_check(name, RT_LOSS_MSE, 0, RT_F32, 0, in); }

/* g compiled for MSE at batch b against labels of dims l0 x l1, and an
 * exec; NULL (a failure counted) when compile refuses */
static rt_exec *mse_exec(const char *what, int b, int64_t l0, int64_t l1, rt_plan **p)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.batch_size = b;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 2;
    cfg.label_dims[0] = l0;
    cfg.label_dims[1] = l1;
    char err[256];
    rt_exec *e = NULL;
    if (rt_plan_compile(g, &cfg, p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "%s: compile: %s\n", what, err);
        rt_test_failures++;
        rt_graph_destroy(g);
        return NULL;
    }
    REQUIRE(rt_exec_create(*p, &e) == 0);
    return e;
}

/* BatchMatMul's forward against the product written out: a = x as
 * (3,4), b = x as (4,3), y = a b (and a^T-stored, b^T-stored variants) */
static void bmm_forward(void)
{
    static const int64_t s34[] = {3, 4}, s43[] = {4, 3};
    for (int t = 0; t < 4; t++) {
        const int ta = t & 1, tb = t >> 1;
        g = rt_graph_create();
        int64_t d[] = {RT_BATCH, 12};
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, d) == 0);
        const rt_attr ra = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = ta ? s43 : s34};
        const rt_attr rb = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = tb ? s34 : s43};
        const rt_attr tr[2] = {{.name = "transpose_a", .kind = RT_ATTR_INT, .i = ta},
                               {.name = "transpose_b", .kind = RT_ATTR_INT, .i = tb}};
        node("a", "Reshape", "x", NULL, NULL, 1, &ra);
        node("b", "Reshape", "x", NULL, NULL, 1, &rb);
        node("y", "BatchMatMul", "a", "b", NULL, 2, tr);
        rt_plan *p;
        rt_exec *e = mse_exec("bmm forward", B, 3, 3, &p);
        if (!e)
            continue;
        float x[B * 12], y[B * 9];
        for (int i = 0; i < B * 12; i++) x[i] = rnd();
        CHECK_RC(rt_exec_predict(e, x, B, y));
        double worst = 0;
        for (int n = 0; n < B; n++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) {
                    double s = 0;
                    for (int k = 0; k < 4; k++) {
                        /* op(a)(i,k), op(b)(k,j) from x's row-major layouts */
                        const float av = ta ? x[n * 12 + k * 3 + i] : x[n * 12 + i * 4 + k];
                        const float bv = tb ? x[n * 12 + j * 4 + k] : x[n * 12 + k * 3 + j];
                        s += (double)av * bv;
                    }
                    const double e1 = fabs(s - y[n * 9 + i * 3 + j]);
                    worst = e1 > worst ? e1 : worst;
                }
        printf("BatchMatMul forward (ta %d, tb %d): worst error %.2e %s\n", ta, tb, worst,
               worst <= 1e-5 ? "ok" : "FAILED");
        if (!(worst <= 1e-5))
            rt_test_failures++;
        rt_exec_destroy(e);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
}

/* A noise_shape's mask is one draw per mask element: with one sample of
 * ones (x = 1 + P, P = 0) and MSE against 0, dL/dP = 2 m^2 / 16 per
 * element, zero exactly where the element was dropped. noise_shape
 * (null, 1, 16) drops whole columns of the (4, 16) sample; without it the
 * rows of a column differ (the check could fail). */
static void noise_shape_mask(int with)
{
    static const int64_t shp[] = {4, 16}, ns[] = {-1, 1, 16};
    g = rt_graph_create();
    int64_t d[] = {RT_BATCH, 4, 16};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 3, d) == 0);
    float zero[64] = {0};
    REQUIRE(rt_graph_add_param(g, "P", 2, shp, RT_INIT_ZEROS, 1, zero) == 0);
    node("h", "Add", "x", "P", NULL, 0, NULL);
    const rt_attr dr[2] = {{.name = "rate", .kind = RT_ATTR_FLOAT, .f = 0.5},
                           {.name = "noise_shape", .kind = RT_ATTR_INTS, .n = 3, .ints = ns}};
    node("y", "Dropout", "h", NULL, NULL, with ? 2 : 1, dr);
    rt_plan *p;
    rt_exec *e = mse_exec("noise_shape", 1, 4, 16, &p);
    if (!e)
        return;
    float x[64], lab[64] = {0}, gr[64];
    for (int i = 0; i < 64; i++) x[i] = 1.0f;
    rt_data dd = {.x = x, .y = lab, .y_dtype = RT_F32, .n = 1};
    double l;
    CHECK_RC(rt_exec_compute_grads(e, &dd, 1, &l));
    CHECK_RC(rt_exec_get_grad(e, 0, gr));
    int kept = 0, dropped = 0, mixed = 0, bad = 0;
    for (int j = 0; j < 16; j++) {
        int z = 0;
        for (int i = 0; i < 4; i++) {
            const float v = gr[i * 16 + j];
            z += v == 0.0f;
            /* kept: 2 * (1/(1-0.5))^2 / 64 elements */
            bad += v != 0.0f && fabsf(v - 2.0f * 4.0f / 64.0f) > 1e-6f;
        }
        kept += z == 0;
        dropped += z == 4;
        mixed += z != 0 && z != 4;
    }
    const int ok = bad == 0 && (with ? mixed == 0 && kept > 0 && dropped > 0 : mixed > 0);
    printf("Dropout %s noise_shape: %d columns kept, %d dropped, %d mixed %s\n",
           with ? "with" : "without", kept, dropped, mixed, ok ? "ok" : "FAILED");
    if (!ok)
        rt_test_failures++;
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

int main(void)
{
    const rt_attr rate = {.name = "rate", .kind = RT_ATTR_FLOAT, .f = 0.3};
    const int64_t shp[] = {2, 3};
    const rt_attr reshape = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = shp};
    const rt_attr act_tanh = {.name = "activation", .kind = RT_ATTR_STR, .s = "tanh"};

    /* ---- ops; output width 1 unless stated, MSE against f32 labels */
    start(3, 4); param("W", 2, 4, 1); param("b", 1, 1, 0);
    node("y", "Dense", "h", "W", "b", 0, NULL);
    run_check("Dense", RT_LOSS_MSE, 0, RT_F32, 1, 3);

    start(3, 4); param("W", 2, 4, 2);
    node("y", "Dense", "h", "W", NULL, 1, &act_tanh); /* no bias, activation attr */
    run_check("Dense(no bias, tanh)", RT_LOSS_MSE, 0, RT_F32, 2, 3);

    start(3, 4); param("W", 2, 4, 3);
    node("y", "MatMul", "h", "W", NULL, 0, NULL);
    run_check("MatMul", RT_LOSS_MSE, 0, RT_F32, 3, 3);

    start(3, 4); param("P", 1, 4, 0);
    node("y", "Add", "h", "P", NULL, 0, NULL);
    run_check("Add (broadcast row)", RT_LOSS_MSE, 0, RT_F32, 4, 3);

    start(3, 4); param("W1", 2, 3, 4);
    node("h2", "Dense", "x", "W1", NULL, 0, NULL);
    node("y", "Sub", "h", "h2", NULL, 0, NULL);
    run_check("Sub (same shape)", RT_LOSS_MSE, 0, RT_F32, 4, 3);

    start(3, 4); param("P", 2, 1, 4);
    node("y", "Sub", "P", "h", NULL, 0, NULL);
    run_check("Sub (param - batch)", RT_LOSS_MSE, 0, RT_F32, 4, 3);

    start(3, 4); param("P", 1, 4, 0);
    node("y", "Mul", "h", "P", NULL, 0, NULL);
    run_check("Mul (broadcast row)", RT_LOSS_MSE, 0, RT_F32, 4, 3);

    start(3, 4);
    node("y", "Mul", "h", "h", NULL, 0, NULL); /* one input twice */
    run_check("Mul (x * x)", RT_LOSS_MSE, 0, RT_F32, 4, 3);

    start(3, 6); param("P", 2, 2, 1);
    node("r", "Reshape", "h", NULL, NULL, 1, &reshape); /* (B,6) -> (B,2,3) */
    node("y", "Mul", "r", "P", NULL, 0, NULL);          /* column broadcast */
    run_check("Reshape + Mul (column)", RT_LOSS_MSE, 0, RT_F32, 6, 3);

    const char *acts[] = {"Relu", "Sigmoid", "Tanh"};
    for (int i = 0; i < 3; i++) {
        char nm[64];
        /* standalone kernel: the input is not a Dense, so nothing fuses */
        start(3, 4); param("P", 1, 4, 0);
        node("s", "Add", "h", "P", NULL, 0, NULL);
        node("y", acts[i], "s", NULL, NULL, 0, NULL);
        snprintf(nm, sizeof nm, "%s", acts[i]);
        run_check(nm, RT_LOSS_MSE, 0, RT_F32, 4, 3);
        /* fused into the Dense before it */
        start(3, 4); param("W", 2, 4, 3); param("b", 1, 3, 0);
        node("d", "Dense", "h", "W", "b", 0, NULL);
        node("y", acts[i], "d", NULL, NULL, 0, NULL);
        snprintf(nm, sizeof nm, "Dense+%s (fused)", acts[i]);
        run_check(nm, RT_LOSS_MSE, 0, RT_F32, 3, 3);
    }

    start(3, 4);
    node("y", "Softmax", "h", NULL, NULL, 0, NULL);
    run_check("Softmax", RT_LOSS_MSE, 0, RT_F32, 4, 3);

    start(3, 4);
    node("y", "LogSoftmax", "h", NULL, NULL, 0, NULL);
    run_check("LogSoftmax", RT_LOSS_MSE, 0, RT_F32, 4, 3);

    start(3, 6);
    node("r", "Reshape", "h", NULL, NULL, 1, &reshape);
    node("s", "Softmax", "r", NULL, NULL, 0, NULL); /* rows of 3, 2 per sample */
    node("y", "Flatten", "s", NULL, NULL, 0, NULL);
    run_check("Reshape+Softmax+Flatten", RT_LOSS_MSE, 0, RT_F32, 6, 3);

    start(3, 4);
    node("y", "Identity", "h", NULL, NULL, 0, NULL);
    run_check("Identity", RT_LOSS_MSE, 0, RT_F32, 4, 3);

    start(3, 8); param("W", 2, 8, 2);
    node("dr", "Dropout", "h", NULL, NULL, 1, &rate);
    node("y", "Dense", "dr", "W", NULL, 0, NULL);
    run_check("Dropout (training mode)", RT_LOSS_MSE, 0, RT_F32, 2, 3);

    /* a value with two readers: gradients accumulate */
    start(3, 4); param("W", 2, 4, 4);
    node("a", "Relu", "h", NULL, NULL, 0, NULL);
    node("c", "Dense", "h", "W", NULL, 0, NULL);
    node("y", "Add", "a", "c", NULL, 0, NULL);
    run_check("fan-out (accumulation)", RT_LOSS_MSE, 0, RT_F32, 4, 3);

    /* BatchMatMul of two activations: h and h2 = Dense(x) reshaped into
     * matrices (and groups), every transpose combination, and one input
     * on both sides (its gradient accumulates, as attention's Q K^T of a
     * self-attention reads one value twice) */
    {
        static const int64_t s34[] = {3, 4}, s43[] = {4, 3}, s42[] = {4, 2}, s24[] = {2, 4};
        static const int64_t s234[] = {2, 3, 4}, s242[] = {2, 4, 2};
        const rt_attr r34 = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = s34};
        const rt_attr r43 = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = s43};
        const rt_attr r42 = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = s42};
        const rt_attr r24 = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = s24};
        const rt_attr r234 = {.name = "shape", .kind = RT_ATTR_INTS, .n = 3, .ints = s234};
        const rt_attr r242 = {.name = "shape", .kind = RT_ATTR_INTS, .n = 3, .ints = s242};
        for (int t = 0; t < 4; t++) {
            const int ta = t & 1, tb = t >> 1;
            const rt_attr tr[2] = {{.name = "transpose_a", .kind = RT_ATTR_INT, .i = ta},
                                   {.name = "transpose_b", .kind = RT_ATTR_INT, .i = tb}};
            char nm[64];
            start(3, 12); param("W1", 2, 3, 8);
            node("h2", "Dense", "x", "W1", NULL, 0, NULL);
            node("a", "Reshape", "h", NULL, NULL, 1, ta ? &r43 : &r34);
            node("b", "Reshape", "h2", NULL, NULL, 1, tb ? &r24 : &r42);
            node("p", "BatchMatMul", "a", "b", NULL, 2, tr); /* (3,4)(4,2) */
            node("y", "Flatten", "p", NULL, NULL, 0, NULL);
            snprintf(nm, sizeof nm, "BatchMatMul (ta %d, tb %d)", ta, tb);
            run_check(nm, RT_LOSS_MSE, 0, RT_F32, 6, 3);
        }
        start(3, 24); param("W1", 2, 3, 16);
        node("h2", "Dense", "x", "W1", NULL, 0, NULL);
        node("a", "Reshape", "h", NULL, NULL, 1, &r234);
        node("b", "Reshape", "h2", NULL, NULL, 1, &r242);
        node("p", "BatchMatMul", "a", "b", NULL, 0, NULL); /* 2 x (3,4)(4,2) */
        node("y", "Flatten", "p", NULL, NULL, 0, NULL);
        run_check("BatchMatMul (groups)", RT_LOSS_MSE, 0, RT_F32, 12, 3);

        const rt_attr tb1 = {.name = "transpose_b", .kind = RT_ATTR_INT, .i = 1};
        start(3, 12);
        node("a", "Reshape", "h", NULL, NULL, 1, &r34);
        node("p", "BatchMatMul", "a", "a", NULL, 1, &tb1); /* a a^T (3,3) */
        node("s", "Softmax", "p", NULL, NULL, 0, NULL);
        node("y", "Flatten", "s", NULL, NULL, 0, NULL);
        run_check("BatchMatMul (a a^T, softmax)", RT_LOSS_MSE, 0, RT_F32, 9, 3);

        /* products of 33x33x32: the CPU backend's threaded path (each
         * product a serial oneDNN GEMM) rather than its small kernel; the
         * (33, 32) matrix is h2[i] + h[j], few parameters */
        static const int64_t s132[] = {1, 32}, s331[] = {33, 1}, ax2[] = {2};
        const rt_attr r132 = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = s132};
        const rt_attr r331 = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = s331};
        const rt_attr red[2] = {{.name = "axes", .kind = RT_ATTR_INTS, .n = 1, .ints = ax2},
                                {.name = "keepdims", .kind = RT_ATTR_INT, .i = 0}};
        start(3, 32); param("W1", 2, 3, 33); param("W2", 2, 33, 2);
        node("h2", "Dense", "x", "W1", NULL, 0, NULL);
        node("r", "Reshape", "h", NULL, NULL, 1, &r132);
        node("c", "Reshape", "h2", NULL, NULL, 1, &r331);
        node("a", "Add", "c", "r", NULL, 0, NULL);         /* (33, 32) */
        node("p", "BatchMatMul", "a", "a", NULL, 1, &tb1); /* (33,32)(32,33) */
        node("t", "Tanh", "p", NULL, NULL, 0, NULL);
        node("m", "ReduceMean", "t", NULL, NULL, 2, red);   /* (33) */
        node("y", "Dense", "m", "W2", NULL, 0, NULL);
        run_check("BatchMatMul (33x33x32)", RT_LOSS_MSE, 0, RT_F32, 2, 3);
    }

    /* BandMask (causal, and a window of 2) on scores before a softmax */
    {
        static const int64_t s44[] = {4, 4};
        const rt_attr r44 = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = s44};
        for (int w = 0; w < 2; w++) {
            const rt_attr ba[2] = {{.name = "causal", .kind = RT_ATTR_INT, .i = 1 - w},
                                   {.name = "window", .kind = RT_ATTR_INT, .i = 2 * w}};
            start(3, 16);
            node("r", "Reshape", "h", NULL, NULL, 1, &r44);
            node("m", "BandMask", "r", NULL, NULL, 2, ba);
            node("s", "Softmax", "m", NULL, NULL, 0, NULL);
            node("y", "Flatten", "s", NULL, NULL, 0, NULL);
            run_check(w ? "BandMask (window 2)" : "BandMask (causal)", RT_LOSS_MSE, 0, RT_F32, 16,
                      3);
        }
    }

    /* Dropout with a noise_shape: one draw per (sample, column) */
    {
        static const int64_t s34[] = {3, 4}, ns[] = {-1, 1, 4};
        const rt_attr dr[3] = {
            {.name = "rate", .kind = RT_ATTR_FLOAT, .f = 0.4},
            {.name = "noise_shape", .kind = RT_ATTR_INTS, .n = 3, .ints = ns},
            {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = s34}};
        start(3, 12);
        node("r", "Reshape", "h", NULL, NULL, 1, &dr[2]);
        node("d", "Dropout", "r", NULL, NULL, 2, dr);
        node("y", "Flatten", "d", NULL, NULL, 0, NULL);
        run_check("Dropout (noise_shape)", RT_LOSS_MSE, 0, RT_F32, 12, 3);
    }

    /* ---- losses */
    start(3, 4);
    run_check("loss sparse CE (logits)", RT_LOSS_SPARSE_CE, 1, RT_I32, 1, 3);
    start(3, 4);
    node("y", "Softmax", "h", NULL, NULL, 0, NULL);
    run_check("loss sparse CE (softmax)", RT_LOSS_SPARSE_CE, 0, RT_I32, 1, 3);
    start(3, 4);
    node("y", "Sigmoid", "h", NULL, NULL, 0, NULL); /* probabilities, no Softmax */
    run_check("loss sparse CE (clipped probs)", RT_LOSS_SPARSE_CE, 0, RT_I32, 1, 3);
    start(3, 4);
    run_check("loss CE (logits)", RT_LOSS_CE, 1, RT_F32, 4, 3);
    start(3, 4);
    node("y", "Sigmoid", "h", NULL, NULL, 0, NULL);
    run_check("loss CE (clipped probs)", RT_LOSS_CE, 0, RT_F32, 4, 3);
    start(3, 4);
    node("y", "Softmax", "h", NULL, NULL, 0, NULL);
    run_check("loss CE (softmax)", RT_LOSS_CE, 0, RT_F32, 4, 3);
    start(3, 1);
    run_check("loss BCE (logits)", RT_LOSS_BCE, 1, RT_F32, 1, 3);
    start(3, 2);
    node("y", "Sigmoid", "h", NULL, NULL, 0, NULL);
    run_check("loss BCE (probs)", RT_LOSS_BCE, 0, RT_F32, 2, 3);
    start(3, 3);
    run_check("loss MSE", RT_LOSS_MSE, 0, RT_F32, 3, 3);
    start(3, 3);
    run_check("loss MAE", RT_LOSS_MAE, 0, RT_F32, 3, 3);
    start(3, 3);
    run_check("loss logcosh (f32)", RT_LOSS_LOGCOSH, 0, RT_F32, 3, 3);
    start(3, 3);
    node("y", "Softmax", "h", NULL, NULL, 0, NULL);
    run_check("loss logcosh (int, bcast)", RT_LOSS_LOGCOSH, 0, RT_I32, 1, 3);
    start(3, 3);
    run_check("loss MSE (f32, bcast)", RT_LOSS_MSE, 0, RT_F32, 1, 3);

    /* ---- PyTorch's losses */
    const float cw[4] = {0.5f, 2.0f, 1.0f, 0.25f}, pw[3] = {3.0f, 0.5f, 1.5f};
    start(3, 4);
    run_check("cross_entropy (indices)", RT_LOSS_CROSS_ENTROPY, 0, RT_I32, 1, 3);
    start(3, 4);
    run_with((rt_train_config){.label_smoothing = 0.2f, .ignore_index = 2, .class_weight = cw,
                              .n_class_weight = 4},
             "cross_entropy (smooth, w, ign)", RT_LOSS_CROSS_ENTROPY, 0, RT_I32, 1, 3);
    start(3, 4);
    run_with((rt_train_config){.reduction = RT_REDUCE_SUM, .ignore_index = -100,
                              .label_smoothing = 0.1f},
             "cross_entropy (sum)", RT_LOSS_CROSS_ENTROPY, 0, RT_I32, 1, 3);
    start(3, 4);
    run_with((rt_train_config){.label_smoothing = 0.1f, .ignore_index = -100,
                              .class_weight = cw, .n_class_weight = 4},
             "cross_entropy (probs)", RT_LOSS_CROSS_ENTROPY, 0, RT_F32, 4, 3);
    {
        /* (N, C, d): classes on dim 1, 3 positions each */
        const int64_t cd[] = {4, 3};
        const rt_attr rs = {.name = "shape", .kind = RT_ATTR_INTS, .n = 2, .ints = cd};
        start(3, 12);
        node("y", "Reshape", "h", NULL, NULL, 1, &rs);
        run_with((rt_train_config){.ignore_index = 1, .class_weight = cw, .n_class_weight = 4,
                                  .label_ndim = 1, .label_dims = {3}},
                 "cross_entropy (N, C, d)", RT_LOSS_CROSS_ENTROPY, 0, RT_I32, 3, 3);
        start(3, 12);
        node("y", "Reshape", "h", NULL, NULL, 1, &rs);
        run_with((rt_train_config){.ignore_index = -100, .label_smoothing = 0.3f,
                                  .label_ndim = 2, .label_dims = {4, 3}},
                 "cross_entropy (N, C, d probs)", RT_LOSS_CROSS_ENTROPY, 0, RT_F32, 12, 3);
    }
    start(3, 4);
    node("y", "LogSoftmax", "h", NULL, NULL, 0, NULL);
    run_with((rt_train_config){.ignore_index = 0, .class_weight = cw, .n_class_weight = 4},
             "nll_loss (w, ign)", RT_LOSS_NLL, 0, RT_I32, 1, 3);
    start(3, 3);
    run_with((rt_train_config){.pos_weight = pw, .n_pos_weight = 3},
             "bce_with_logits (pos_weight)", RT_LOSS_BCE_LOGITS, 0, RT_F32, 3, 3);
    start(3, 3);
    node("y", "Sigmoid", "h", NULL, NULL, 0, NULL);
    run_with((rt_train_config){.reduction = RT_REDUCE_SUM, .loss_beta = 1},
             "binary_cross_entropy (sum)", RT_LOSS_BCE_TORCH, 0, RT_F32, 3, 3);
    start(3, 3);
    run_check("mse_loss", RT_LOSS_MSE_TORCH, 0, RT_F32, 3, 3);
    start(3, 3);
    run_check("l1_loss", RT_LOSS_L1, 0, RT_F32, 3, 3);
    start(3, 3);
    run_with((rt_train_config){.loss_beta = 0.7f},
             "smooth_l1_loss (beta 0.7)", RT_LOSS_SMOOTH_L1, 0, RT_F32, 3, 3);
    start(3, 3);
    run_with((rt_train_config){.loss_beta = 0.8f, .reduction = RT_REDUCE_SUM},
             "huber_loss (delta 0.8, sum)", RT_LOSS_HUBER, 0, RT_F32, 3, 3);
    bmm_forward();
    noise_shape_mask(1);
    noise_shape_mask(0);
    (void)mse;
    return rt_test_done("test_gradcheck");
}
