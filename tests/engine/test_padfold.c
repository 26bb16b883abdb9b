/*
 * test_padfold.c - a zero Pad folded into the Conv2D that reads it (the
 * fuse pass's rt__fold_pads), against the same graph compiled with the
 * fold switched off (rt_compile_pad_fold 0: the Pad a node of its own,
 * its own forward and backward kernels), on the backend RT_BACKEND picks.
 *
 * Each graph: x -> [1x1 Conv2D c0] -> Pad -> Conv2D -> Flatten -> Dense,
 * MSE. c0 (where present) puts a trainable layer before the Pad, so its
 * weight gradient is the folded convolution's backward-data (the gradient
 * of the unpadded input) carried one layer further. Checked in float32
 * and bf16: the plan's nodes (the Pad gone, the Conv2D "Pad+Conv2D"; or
 * refused, every node kept), the outputs (rt_exec_predict) and every
 * parameter's gradient (rt_exec_compute_grads) of the two plans from the
 * same weights, then 40 training steps of each, which must track each
 * other and lower the loss (by 10% at least: the 32-channel case, the slowest,
 * by 14%). The finite-difference checks of the folded
 * convolutions' input and weight gradients are test_conv_gradcheck's
 * "Pad ... +" cases (every conv path: its _dnnl and _mixed builds too).
 *
 * Tolerances: a plan may pick other kernels for the folded shape
 * (oneDNN or im2col, their sums in another order), so the two plans agree
 * to float32 rounding of the sums, not bit for bit: 1e-5 of the largest
 * magnitude in float32, 1e-4 in bf16 (the same operands are rounded to
 * bf16 either way; a sum in another order can round a stored bf16 value
 * the other way). The folded plan is also checked against ref's unfolded
 * plan (double sums; its bf16 the policy's emulation), 1e-4 of the
 * largest. Measured: below 2e-6 everywhere; a misplaced row or column of
 * padding moves outputs and gradients by their own size.
 */
#include "rt_test.h"

extern int rt_compile_pad_fold; /* rt_compile.c */

#define RT_TESTRNG_SEED 0x6a09e667f3bcc909ull
#include "../lib/rt_testrng.h"

enum { B = 8, H0 = 12, W0 = 12, C0 = 3, N = 64 };

typedef struct {
    const char *name;
    int c0;          /* a 1x1 Conv2D (C0 -> c0 channels) before the Pad, or 0 */
    int64_t pads[8]; /* the Pad's (batch, H, W, C begins, then ends) */
    float value;     /* the Pad's constant */
    int64_t k, s, g; /* the Conv2D: k x k, stride s, group g (0: depthwise) */
    const char *pad; /* its padding */
    int twice;       /* a second Conv2D reads the Pad too (added to the first) */
    int folds;       /* the fold must happen */
} pcase;

/* clang-format off */
static const pcase cases[] = {
    {"MobileNet: Pad((0,1),(0,1)) + depthwise 3x3 s2 valid", 4, {0, 0, 0, 0, 0, 1, 1, 0}, 0,
     3, 2, 0, "valid", 0, 1},
    /* 32 channels: the CPU backend's blocked (oneDNN) depthwise shapes */
    {"MobileNet, 32 channels: Pad((0,1),(0,1)) + depthwise 3x3 s2 valid", 32,
     {0, 0, 0, 0, 0, 1, 1, 0}, 0, 3, 2, 0, "valid", 0, 1},
    {"ResNet stem: Pad(3) on the input + Conv2D 7x7 s2 valid", 0, {0, 3, 3, 0, 0, 3, 3, 0}, 0,
     7, 2, 1, "valid", 0, 1},
    {"Pad((1,0),(0,1)) + grouped 3x3 s1 same", 4, {0, 1, 0, 0, 0, 0, 1, 0}, 0, 3, 1, 2, "same",
     0, 1},
    {"refused: Pad value 0.5", 4, {0, 0, 0, 0, 0, 1, 1, 0}, 0.5f, 3, 2, 0, "valid", 0, 0},
    {"refused: Pad on the channels", 4, {0, 1, 1, 1, 0, 1, 1, 1}, 0, 3, 2, 1, "valid", 0, 0},
    {"refused: Pad read by two Conv2D", 4, {0, 0, 0, 0, 0, 1, 1, 0}, 0, 3, 2, 1, "valid", 1, 0},
    {"refused: Pad(3) before a 3x3 (beyond the window)", 4, {0, 3, 3, 0, 0, 3, 3, 0}, 0, 3, 1,
     1, "valid", 0, 0},
};
/* clang-format on */

static void param(rt_graph *g, const char *name, int nd, const int64_t *d, rt_init init)
{
    REQUIRE(rt_graph_add_param(g, name, nd, d, init, 1, NULL) == 0);
}

static rt_graph *build(const pcase *c, int64_t *out_n)
{
    rt_graph *g = rt_graph_create();
    const int64_t in[4] = {RT_BATCH, H0, W0, C0};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, in) == 0);
    int64_t C = C0;
    const char *src = "x";
    if (c->c0) {
        const int64_t k0[4] = {1, 1, C0, c->c0}, b0[1] = {c->c0};
        param(g, "c0/k", 4, k0, RT_INIT_GLOROT_UNIFORM);
        param(g, "c0/b", 1, b0, RT_INIT_ZEROS);
        const char *i0[3] = {"x", "c0/k", "c0/b"};
        const rt_attr a0 = {.name = "activation", .kind = RT_ATTR_STR, .s = "tanh"};
        REQUIRE(rt_graph_add_node(g, "c0", "Conv2D", 3, i0, 1, &a0) == 0);
        C = c->c0;
        src = "c0";
    }
    const rt_attr pa[2] = {{.name = "pads", .kind = RT_ATTR_INTS, .n = 8, .ints = c->pads},
                           {.name = "value", .kind = RT_ATTR_FLOAT, .f = c->value}};
    REQUIRE(rt_graph_add_node(g, "pd", "Pad", 1, &src, 2, pa) == 0);
    const int64_t Hp = H0 + c->pads[1] + c->pads[5], Wp = W0 + c->pads[2] + c->pads[6];
    const int64_t Cp = C + c->pads[3] + c->pads[7];
    const int64_t G = c->g ? c->g : Cp, OC = c->g ? 6 : Cp;
    const int64_t k[4] = {c->k, c->k, Cp / G, OC}, bd[1] = {OC};
    int64_t st[2] = {c->s, c->s};
    const rt_attr ca[4] = {{.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = st},
                           {.name = "padding", .kind = RT_ATTR_STR, .s = c->pad},
                           {.name = "group", .kind = RT_ATTR_INT, .i = G},
                           {.name = "activation", .kind = RT_ATTR_STR, .s = "relu"}};
    param(g, "cv/k", 4, k, RT_INIT_GLOROT_UNIFORM);
    param(g, "cv/b", 1, bd, RT_INIT_ZEROS);
    const char *ci[3] = {"pd", "cv/k", "cv/b"};
    REQUIRE(rt_graph_add_node(g, "cv", "Conv2D", 3, ci, 4, ca) == 0);
    const char *last = "cv";
    if (c->twice) {
        param(g, "cw/k", 4, k, RT_INIT_GLOROT_UNIFORM);
        const char *wi[2] = {"pd", "cw/k"};
        REQUIRE(rt_graph_add_node(g, "cw", "Conv2D", 2, wi, 4, ca) == 0);
        const char *ai[2] = {"cv", "cw"};
        REQUIRE(rt_graph_add_node(g, "sum", "Add", 2, ai, 0, NULL) == 0);
        last = "sum";
    }
    int64_t OH, OW;
    if (!strcmp(c->pad, "same")) {
        OH = (Hp + c->s - 1) / c->s;
        OW = (Wp + c->s - 1) / c->s;
    } else {
        OH = (Hp - c->k) / c->s + 1;
        OW = (Wp - c->k) / c->s + 1;
    }
    REQUIRE(rt_graph_add_node(g, "fl", "Flatten", 1, &last, 0, NULL) == 0);
    const int64_t fw[2] = {OH * OW * OC, 5}, fb[1] = {5};
    param(g, "fc/w", 2, fw, RT_INIT_GLOROT_UNIFORM);
    param(g, "fc/b", 1, fb, RT_INIT_ZEROS);
    const char *fi[3] = {"fl", "fc/w", "fc/b"};
    REQUIRE(rt_graph_add_node(g, "fc", "Dense", 3, fi, 0, NULL) == 0);
    *out_n = 5;
    return g;
}

static rt_plan *compile(const pcase *c, int prec, int fold, int *n_nodes, int *folded)
{
    int64_t no;
    rt_graph *g = build(c, &no);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0.05f;
    cfg.metrics = 0;
    cfg.batch_size = B;
    cfg.seed = 11;
    cfg.shuffle = 0;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = no;
    cfg.precision = prec;
    rt_compile_pad_fold = fold;
    rt_plan *p = NULL;
    char err[256] = "";
    const int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    rt_compile_pad_fold = 1;
    rt_graph_destroy(g);
    if (rc == RT_ESTATE && prec == RT_PREC_BF16 && strstr(err, "no bf16 instructions")) {
        printf("bf16 skipped: %s\n", err);
        return NULL; /* a CPU oneDNN may not run bf16 on */
    }
    if (rc < 0) {
        fprintf(stderr, "%s: compile: %s\n", c->name, err);
        rt_test_failures++;
        return NULL;
    }
    *n_nodes = rt_plan_n_nodes(p);
    *folded = 0;
    int has_pad = 0;
    for (int i = 0; i < *n_nodes; i++) {
        const char *nm;
        char op[64];
        REQUIRE(rt_plan_node_info(p, i, &nm, op, sizeof op, NULL) == 0);
        if (!strncmp(op, "Pad+", 4))
            (*folded)++;
        if (!strcmp(nm, "pd"))
            has_pad = 1;
        if (!strcmp(nm, "cv") && !strncmp(op, "Pad+", 4))
            CHECKF(!strcmp(op, "Pad+Conv2D"), "%s: cv is %s", c->name, op);
    }
    CHECKF(has_pad == !*folded, "%s: the Pad node %s, %d folded", c->name,
           has_pad ? "kept" : "gone", *folded);
    return p;
}

static double maxabs(const float *a, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i]));
    return m;
}

/* max |a - b| over max |b| */
static double reldiff(const float *a, const float *b, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    const double m = maxabs(b, n);
    return m > 0 ? d / m : d;
}

static int64_t param_floats(const rt_plan *p, int i)
{
    int64_t dims[RT_MAX_DIMS], n = 1;
    const int nd = rt_plan_param_info(p, i, NULL, dims, NULL);
    for (int k = 0; k < nd; k++)
        n *= dims[k];
    return n;
}

static void run_case(const pcase *c, int prec, const float *x, const float *y)
{
    int n0, n1, f0, f1;
    rt_plan *pu = compile(c, prec, 0, &n0, &f0), *pf = compile(c, prec, 1, &n1, &f1);
    if (!pu || !pf) {
        rt_plan_release(pu);
        rt_plan_release(pf);
        return;
    }
    const char *pn = prec == RT_PREC_BF16 ? "bf16" : "float32";
    CHECKF(f0 == 0, "%s %s: folded with the fold switched off", c->name, pn);
    CHECKF(f1 == c->folds, "%s %s: %d folded, want %d", c->name, pn, f1, c->folds);
    CHECKF(n1 == n0 - c->folds, "%s %s: %d nodes folded, %d not", c->name, pn, n1, n0);
    /* the Pad's forward call, and its backward where its input needs a
     * gradient (c0's output; not the data input) */
    const unsigned calls = (unsigned)c->folds * (c->c0 ? 2u : 1u);
    CHECKF(rt_plan_report(pf)->n_kernels == rt_plan_report(pu)->n_kernels - calls,
           "%s %s: %u kernel calls folded, %u not", c->name, pn, rt_plan_report(pf)->n_kernels,
           rt_plan_report(pu)->n_kernels);
    CHECK(rt_plan_n_params(pf) == rt_plan_n_params(pu));
    rt_exec *eu, *ef;
    REQUIRE(rt_exec_create(pu, &eu) == 0 && rt_exec_create(pf, &ef) == 0);
    /* the same weights in both (the unfolded plan's) */
    static float w[65536], gu[65536], gf[65536];
    for (int i = 0; i < rt_plan_n_params(pu); i++) {
        REQUIRE(param_floats(pu, i) <= 65536);
        REQUIRE(rt_exec_get_param(eu, i, w) == 0 && rt_exec_set_param(ef, i, w) == 0);
    }
    const double tol = prec == RT_PREC_BF16 ? 1e-4 : 1e-5;
    static float ou[N * 5], of[N * 5];
    REQUIRE(rt_exec_predict(eu, x, N, ou) == 0 && rt_exec_predict(ef, x, N, of) == 0);
    const double od = reldiff(of, ou, N * 5);
    CHECKF(od <= tol, "%s %s: outputs differ by %.3g of the largest", c->name, pn, od);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = N};
    double lu, lf;
    REQUIRE(rt_exec_compute_grads(eu, &d, B, &lu) == 0 &&
            rt_exec_compute_grads(ef, &d, B, &lf) == 0);
    CHECKF(fabs(lu - lf) <= tol * fabs(lu), "%s %s: loss %.9g folded, %.9g not", c->name, pn, lf,
           lu);
    double worst = 0;
    for (int i = 0; i < rt_plan_n_params(pu); i++) {
        const char *nm;
        rt_plan_param_info(pu, i, &nm, NULL, NULL);
        const int64_t n = param_floats(pu, i);
        REQUIRE(rt_exec_get_grad(eu, i, gu) == 0 && rt_exec_get_grad(ef, i, gf) == 0);
        const double gd = reldiff(gf, gu, n);
        worst = fmax(worst, gd);
        CHECKF(maxabs(gu, n) > 0, "%s %s: %s's gradient is zero", c->name, pn, nm);
        CHECKF(gd <= tol, "%s %s: %s's gradient differs by %.3g of the largest", c->name, pn, nm,
               gd);
    }
    /* the folded plan against ref's unfolded one (plain loops in double,
     * its own Pad), from the same weights, where this run is not on ref */
    char be[16];
    snprintf(be, sizeof be, "%s", rt_plan_report(pf)->backend);
    if (strcmp(be, "ref") != 0) {
        REQUIRE(rt_backend_select("ref") == 0);
        int nr, fr;
        rt_plan *pr = compile(c, prec, 0, &nr, &fr);
        REQUIRE(rt_backend_select(be) == 0);
        REQUIRE(pr);
        rt_exec *er;
        REQUIRE(rt_exec_create(pr, &er) == 0);
        for (int i = 0; i < rt_plan_n_params(pu); i++)
            REQUIRE(rt_exec_get_param(eu, i, w) == 0 && rt_exec_set_param(er, i, w) == 0);
        static float orf[N * 5];
        REQUIRE(rt_exec_predict(er, x, N, orf) == 0);
        double lr, rworst = reldiff(of, orf, N * 5);
        REQUIRE(rt_exec_compute_grads(er, &d, B, &lr) == 0);
        for (int i = 0; i < rt_plan_n_params(pu); i++) {
            REQUIRE(rt_exec_get_grad(er, i, gu) == 0 && rt_exec_get_grad(ef, i, gf) == 0);
            rworst = fmax(rworst, reldiff(gf, gu, param_floats(pu, i)));
        }
        const double rtol = 1e-4;
        printf("%s %s: folded on %s against unfolded on ref: %.2g of the largest\n", c->name, pn,
               be, rworst);
        CHECKF(rworst <= rtol, "%s %s: folded on %s differs from ref by %.3g", c->name, pn, be,
               rworst);
        rt_exec_destroy(er);
        rt_plan_release(pr);
    }
    /* 40 SGD steps each: the same trajectory, and the loss comes down */
    double first = 0, last_u = 0, last_f = 0;
    for (int st = 0; st < 40; st++) {
        rt_train_result ru, rf;
        REQUIRE(rt_exec_train(eu, &d, 1, &ru, NULL, NULL, NULL) == 0);
        REQUIRE(rt_exec_train(ef, &d, 1, &rf, NULL, NULL, NULL) == 0);
        if (st < N / B)
            first += rf.last.loss;
        if (st >= 40 - N / B) {
            last_u += ru.last.loss;
            last_f += rf.last.loss;
        }
    }
    const double ttol = prec == RT_PREC_BF16 ? 1e-3 : 1e-4;
    printf("%s %s: %d nodes (%d unfolded), outputs %.2g, gradients %.2g; loss over the "
           "first/last epoch %.4f -> %.4f (unfolded %.4f)\n",
           c->name, pn, n1, n0, od, worst, first / (N / B), last_f / (N / B), last_u / (N / B));
    CHECKF(fabs(last_f - last_u) <= ttol * last_u, "%s %s: trained loss %.6g folded, %.6g not",
           c->name, pn, last_f, last_u);
    CHECKF(last_f < 0.9 * first, "%s %s: loss %.4g -> %.4g in 40 steps", c->name, pn, first,
           last_f);
    rt_exec_destroy(eu);
    rt_exec_destroy(ef);
    rt_plan_release(pu);
    rt_plan_release(pf);
}

int main(void)
{
    static float x[N * H0 * W0 * C0], y[N * 5];
    for (int i = 0; i < N * H0 * W0 * C0; i++)
        x[i] = (float)normal();
    /* targets a function of the input (a learnable mapping): the mean of
     * each channel in five regions, scaled */
    for (int i = 0; i < N; i++)
        for (int o = 0; o < 5; o++) {
            double s = 0;
            for (int h = o * 2; h < o * 2 + 3; h++)
                for (int w = 0; w < W0; w++)
                    s += x[((i * H0 + h) * W0 + w) * C0 + o % C0];
            y[i * 5 + o] = (float)(s / (3.0 * W0) * 2.0);
        }
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_case(&cases[i], RT_PREC_F32, x, y);
        run_case(&cases[i], RT_PREC_BF16, x, y);
    }
    return rt_test_done("engine_padfold");
}
