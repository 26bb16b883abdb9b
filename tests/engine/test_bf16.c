/*
 * test_bf16.c - mixed bfloat16 (Keras' mixed_bfloat16) on the CPU backend.
 *
 * The reference is the arithmetic the policy defines, computed here in
 * double: a Dense or Conv2D output is sum_k bf16(x_k) bf16(w_k) + b with
 * bf16() round-to-nearest-even of the float32 value, and the weight
 * gradient is sum_r bf16(x_r) bf16(dz_r). The kernels accumulate in
 * float32; a float32 sum of m terms differs from the exact one by at most
 * m u sum|terms| (u = 2^-24, Higham 3.1; the bf16 products are exact in
 * float32), so each output must lie within (m + 2) u (sum|terms| + |b|)
 * of the reference. The same outputs must lie far outside that bound from
 * the float32 product sum_k x_k w_k (bf16 keeps 8 significant bits: each
 * product moves by up to 2^-8 of itself), or the kernel did not multiply
 * in bf16.
 *
 * Also: the compile report's per-op precision (a Softmax, and a layer set
 * to float32, stay float32), the Keras policies (Keras 2's Policy object,
 * Keras 3's DTypePolicy, a plain name; a float32-only model takes the
 * config's precision), the refusal (with argument "refuse", run under
 * ONEDNN_MAX_CPU_ISA=AVX512_CORE, a CPU oneDNN may not run bf16 on), a
 * PyTorch autocast fixture, a small CNN trained in bf16 next to float32,
 * and the cpu backend against ref's bf16 (the definition, rt_ref_bf16.c).
 *
 * Where the CPU has no bf16 instructions the bf16 checks cannot run: the
 * test says so and exits 77 (skipped); the refusal test runs anywhere.
 */
#include "import_keras.h"
#include "rt_test.h"

extern int rt_kern_bf16_pool_chunk; /* the cpu backend's (rt_kern_bf16.h) */
extern int rt_kern_bf16_conv_min_c; /* the same */
extern int rt_kern_bf16_col_oc;     /* the same */
extern int rt_kern_bf16_col_rows;   /* the same */
extern int rt_kern_bf16_act_store;  /* the same */
extern int rt_kern_bf16_f32_k;      /* the same */
extern int rt_kern_bf16_f32_chunk;  /* the same */
extern int rt_ref_bf16_act_store;   /* the ref backend's emulation of it */

static const double U = 1.0 / 16777216.0; /* float32's unit roundoff */

#define RT_TESTRNG_SEED 0x2545f4914f6cdd1dull
#include "../lib/rt_testrng.h"

/* round to nearest even at 8 significant bits, written from the format's
 * definition (not the kernel's code): the float32 value rounded to a
 * multiple of 2^(e-7) for its exponent e */
static double bf(float f)
{
    if (f == 0.0f || !isfinite(f))
        return f;
    int e;
    frexp((double)f, &e); /* f = m 2^e, 0.5 <= |m| < 1 */
    const double q = ldexp(1.0, e - 8);
    return nearbyint((double)f / q) * q; /* the default mode: ties to even */
}

static void param(rt_graph *g, const char *name, int nd, const int64_t *d)
{
    REQUIRE(rt_graph_add_param(g, name, nd, d, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
}

static rt_plan *compile(rt_graph *g, rt_train_config *cfg, int want_rc, const char *needle)
{
    rt_plan *p = NULL;
    rt_compile_report rep;
    char err[256] = "";
    const int rc = rt_plan_compile(g, cfg, &p, &rep, err, sizeof err);
    if (rc != want_rc || (needle && !strstr(err, needle))) {
        fprintf(stderr, "compile: %s \"%s\", want %s with '%s'\n", rt_err_name(rc), err,
                rt_err_name(want_rc), needle ? needle : "");
        rt_test_failures++;
    }
    if (rc < 0 && needle)
        printf("refused as expected: %s\n", err);
    return rc < 0 ? NULL : p;
}

/* node name's precision in the plan (-1: not there) */
static int prec_of(const rt_plan *p, const char *name, char *op, size_t oplen)
{
    for (int i = 0; i < rt_plan_n_nodes(p); i++) {
        const char *nm;
        int prec;
        REQUIRE(rt_plan_node_info(p, i, &nm, op, oplen, &prec) == 0);
        if (!strcmp(nm, name))
            return prec;
    }
    return -1;
}

/* ---------------------------------------------------------------- Dense */

enum { DB = 16, DK = 96, DN = 8 };

static rt_graph *dense_graph(const char *prec_attr)
{
    rt_graph *g = rt_graph_create();
    const int64_t in[2] = {RT_BATCH, DK}, w[2] = {DK, DN}, b[1] = {DN};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    param(g, "d/w", 2, w);
    REQUIRE(rt_graph_add_param(g, "d/b", 1, b, RT_INIT_ZEROS, 1, NULL) == 0);
    const char *din[3] = {"x", "d/w", "d/b"};
    const rt_attr at = {.name = "precision", .kind = RT_ATTR_STR, .s = prec_attr};
    REQUIRE(rt_graph_add_node(g, "d", "Dense", 3, din, prec_attr ? 1 : 0, &at) == 0);
    return g;
}

static void mse_config(rt_train_config *cfg, int B, int64_t lab)
{
    rt_train_config_init(cfg);
    cfg->loss = RT_LOSS_MSE;
    cfg->opt = RT_OPT_SGD;
    cfg->lr = 0.01f;
    cfg->metrics = 0;
    cfg->batch_size = B;
    cfg->seed = 7;
    cfg->label_dtype = RT_F32;
    cfg->label_ndim = 1;
    cfg->label_dims[0] = lab;
}

static void test_dense(void)
{
    rt_graph *g = dense_graph(NULL);
    rt_train_config cfg;
    mse_config(&cfg, DB, DN);
    cfg.precision = RT_PREC_BF16;
    rt_plan *p = compile(g, &cfg, 0, NULL);
    REQUIRE(p);
    char op[48];
    CHECK(rt_plan_report(p)->n_bf16 == 1);
    CHECK(prec_of(p, "d", op, sizeof op) == RT_PREC_BF16);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    static float x[DB * DK], w[DK * DN], b[DN], y[DB * DN], t[DB * DN];
    for (int i = 0; i < DB * DK; i++)
        x[i] = normal();
    for (int i = 0; i < DK * DN; i++)
        w[i] = 0.1f * normal();
    for (int i = 0; i < DN; i++)
        b[i] = 0.1f * normal();
    for (int i = 0; i < DB * DN; i++)
        t[i] = normal();
    REQUIRE(rt_exec_set_param(e, 0, w) == 0 && rt_exec_set_param(e, 1, b) == 0);
    /* the full batch, and a smaller one (the padded rows of rt_kern_bf16.c) */
    for (int pass = 0; pass < 2; pass++) {
        const int n = pass ? 5 : DB;
        memset(y, 0, sizeof y);
        REQUIRE(rt_exec_predict(e, x, n, y) == 0);
        double worst = 0, far = INFINITY;
        for (int r = 0; r < n; r++)
            for (int j = 0; j < DN; j++) {
                double ref = b[j], f32 = b[j], mag = fabs(b[j]);
                for (int k = 0; k < DK; k++) {
                    ref += bf(x[r * DK + k]) * bf(w[k * DN + j]);
                    f32 += (double)x[r * DK + k] * w[k * DN + j];
                    mag += fabs(bf(x[r * DK + k]) * bf(w[k * DN + j]));
                }
                const double tol = (DK + 2) * U * mag;
                const double got = y[r * DN + j];
                if (fabs(got - ref) / tol > worst)
                    worst = fabs(got - ref) / tol;
                (void)f32;
            }
        /* away from float32: the largest distance over the batch */
        double away = 0, tolmax = 0;
        for (int r = 0; r < n; r++)
            for (int j = 0; j < DN; j++) {
                double f32 = b[j], mag = fabs(b[j]);
                for (int k = 0; k < DK; k++) {
                    f32 += (double)x[r * DK + k] * w[k * DN + j];
                    mag += fabs(bf(x[r * DK + k]) * bf(w[k * DN + j]));
                }
                if (fabs(y[r * DN + j] - f32) > away)
                    away = fabs(y[r * DN + j] - f32);
                if ((DK + 2) * U * mag > tolmax)
                    tolmax = (DK + 2) * U * mag;
            }
        (void)far;
        printf("dense n=%d: worst |y - bf16 ref| / bound %.3f; max |y - f32| %.3g = %.0f bounds\n",
               n, worst, away, away / tolmax);
        CHECK(worst <= 1.0);
        CHECK(away > 10 * tolmax);
    }
    /* the weight gradient: sum over rows of bf16(x) bf16(dz). dz is the
     * MSE's 2 (y - t) / (N n) from the kernel's own y: N n = 128, so dz is
     * fl(y - t) 2^-6 exactly whichever order the loss scales in */
    double loss;
    REQUIRE(rt_exec_compute_grads(e, &(rt_data){.x = x, .y = t, .y_dtype = RT_F32, .n = DB}, DB,
                                  &loss) == 0);
    REQUIRE(rt_exec_predict(e, x, DB, y) == 0);
    static float gw[DK * DN], gb[DN];
    REQUIRE(rt_exec_get_grad(e, 0, gw) == 0 && rt_exec_get_grad(e, 1, gb) == 0);
    double worst = 0, worst_b = 0;
    for (int k = 0; k < DK; k++)
        for (int j = 0; j < DN; j++) {
            double ref = 0, mag = 0;
            for (int r = 0; r < DB; r++) {
                const float dz = (y[r * DN + j] - t[r * DN + j]) * (2.0f / (DN * DB));
                ref += bf(x[r * DK + k]) * bf(dz);
                mag += fabs(bf(x[r * DK + k]) * bf(dz));
            }
            const double tol = (DB + 2) * U * mag;
            if (fabs(gw[k * DN + j] - ref) / tol > worst)
                worst = fabs(gw[k * DN + j] - ref) / tol;
        }
    for (int j = 0; j < DN; j++) { /* the bias gradient stays float32 */
        double ref = 0, mag = 0;
        for (int r = 0; r < DB; r++) {
            const float dz = (y[r * DN + j] - t[r * DN + j]) * (2.0f / (DN * DB));
            ref += dz;
            mag += fabs(dz);
        }
        if (fabs(gb[j] - ref) / ((DB + 2) * U * mag) > worst_b)
            worst_b = fabs(gb[j] - ref) / ((DB + 2) * U * mag);
    }
    printf("dense dW: worst |dW - bf16 ref| / bound %.3f; db (float32) %.3f\n", worst, worst_b);
    CHECK(worst <= 1.0);
    CHECK(worst_b <= 1.0);
    rt_exec_destroy(e);
    rt_plan_release(p);

    /* the node's own attribute wins over the config, and config float32
     * over the attribute */
    mse_config(&cfg, DB, DN);
    p = compile(g, &cfg, 0, NULL);
    CHECK(p && rt_plan_report(p)->n_bf16 == 0);
    rt_plan_release(p);
    rt_graph_destroy(g);
    g = dense_graph("mixed_bfloat16");
    p = compile(g, &cfg, 0, NULL);
    CHECK(p && rt_plan_report(p)->n_bf16 == 1);
    rt_plan_release(p);
    cfg.precision = RT_PREC_F32;
    p = compile(g, &cfg, 0, NULL);
    CHECK(p && rt_plan_report(p)->n_bf16 == 0);
    rt_plan_release(p);
    rt_graph_destroy(g);
    g = dense_graph("float16");
    cfg.precision = 0;
    compile(g, &cfg, RT_EINVAL, "not float32 or mixed_bfloat16");
    rt_graph_destroy(g);
}

/* --------------------------------------------------------------- Conv2D */

enum { CB = 4, CH = 8, CW = 8, CC = 16, CO = 8 };

/* ks: the kernel's size, 3 or 1 (a 1x1 convolution runs on the bf16
 * matmul); cc input channels (3: an RGB layer's 27 or 3 products a sum) */
static void test_conv(int ks, int cc)
{
    rt_graph *g = rt_graph_create();
    const int64_t in[4] = {RT_BATCH, CH, CW, cc}, k[4] = {ks, ks, cc, CO}, bd[1] = {CO};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, in) == 0);
    param(g, "c/k", 4, k);
    REQUIRE(rt_graph_add_param(g, "c/b", 1, bd, RT_INIT_ZEROS, 1, NULL) == 0);
    const char *cin[3] = {"x", "c/k", "c/b"};
    const rt_attr same = {.name = "padding", .kind = RT_ATTR_STR, .s = "same"};
    REQUIRE(rt_graph_add_node(g, "c", "Conv2D", 3, cin, 1, &same) == 0);
    rt_train_config cfg;
    mse_config(&cfg, CB, CH * CW * CO);
    cfg.label_ndim = 3;
    cfg.label_dims[0] = CH, cfg.label_dims[1] = CW, cfg.label_dims[2] = CO;
    cfg.precision = RT_PREC_BF16;
    rt_plan *p = compile(g, &cfg, 0, NULL);
    REQUIRE(p);
    char op[48];
    CHECK(prec_of(p, "c", op, sizeof op) == RT_PREC_BF16);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    static float x[CB * CH * CW * CC], w[9 * CC * CO], b[CO], y[CB * CH * CW * CO];
    const int kp = (ks - 1) / 2;
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = normal();
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        w[i] = 0.1f * normal();
    for (int i = 0; i < CO; i++)
        b[i] = 0.1f * normal();
    REQUIRE(rt_exec_set_param(e, 0, w) == 0 && rt_exec_set_param(e, 1, b) == 0);
    for (int pass = 0; pass < 2; pass++) {
        const int n = pass ? 3 : CB;
        REQUIRE(rt_exec_predict(e, x, n, y) == 0);
        double worst = 0, away = 0, tolmax = 0;
        for (int s_ = 0; s_ < n; s_++)
            for (int oh = 0; oh < CH; oh++)
                for (int ow = 0; ow < CW; ow++)
                    for (int o = 0; o < CO; o++) {
                        double ref = b[o], f32 = b[o], mag = fabs(b[o]);
                        for (int kh = 0; kh < ks; kh++)
                            for (int kw = 0; kw < ks; kw++) {
                                const int ih = oh + kh - kp, iw = ow + kw - kp;
                                if (ih < 0 || ih >= CH || iw < 0 || iw >= CW)
                                    continue;
                                for (int c = 0; c < cc; c++) {
                                    const float xv = x[((s_ * CH + ih) * CW + iw) * cc + c];
                                    const float wv = w[((kh * ks + kw) * cc + c) * CO + o];
                                    ref += bf(xv) * bf(wv);
                                    f32 += (double)xv * wv;
                                    mag += fabs(bf(xv) * bf(wv));
                                }
                            }
                        const double tol = (ks * ks * cc + 2) * U * mag;
                        const double got = y[((s_ * CH + oh) * CW + ow) * CO + o];
                        if (fabs(got - ref) / tol > worst)
                            worst = fabs(got - ref) / tol;
                        if (fabs(got - f32) > away)
                            away = fabs(got - f32);
                        if (tol > tolmax)
                            tolmax = tol;
                    }
        printf("conv %dx%dx%d n=%d: worst |y - bf16 ref| / bound %.3f; max |y - f32| %.3g = %.0f "
               "bounds\n",
               ks, ks, cc, n, worst, away, away / tolmax);
        CHECK(worst <= 1.0);
        CHECK(away > 10 * tolmax);
    }
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* ------------------------------------------------------- a CNN trained */

/* conv 3x3x2x16 relu, conv 3x3x16x16 relu, 2x2 max pool, Dense(4),
 * Softmax; pool_first: the pool after the first conv instead (a fused
 * Conv2D + MaxPool2D whose input needs no gradient); cnn_pw (without
 * pool_first): a 1x1 conv 16x16 relu with bias between the two 3x3 ones
 * (run on the bf16 matmul, with an input gradient); cnn_dw (without
 * pool_first): a depthwise 3x3 conv (group 16) relu with bias there
 * (oneDNN's bf16 depthwise primitives, weights (3,3,1,16)); cnn_dw 2:
 * its output plus c1 (an Add) feeds c2, so the depthwise backward adds
 * into c1's gradient */
static int cnn_pw, cnn_dw, cnn_bn, cnn_bin;
static int64_t cnn_oc1 = 16; /* c1's output channels (pool_first) */
/* c2's kernel, 3x3 unless set: wider than its 4x4 input (pool_first),
 * its outer taps read only padding */
static int64_t cnn_k2h = 3, cnn_k2w = 3;

static rt_graph *bncnn(void);
static rt_graph *bincnn(void);

static rt_graph *cnn(int pool_first)
{
    if (cnn_bn)
        return bncnn();
    if (cnn_bin)
        return bincnn();
    rt_graph *g = rt_graph_create();
    const int64_t c1n = pool_first ? cnn_oc1 : 16;
    const int64_t in[4] = {RT_BATCH, 8, 8, 2}, k1[4] = {3, 3, 2, c1n}, b1[1] = {c1n};
    const int64_t k2[4] = {cnn_k2h, cnn_k2w, c1n, 16}, w3[2] = {16 * 4 * 4, 4}, b3[1] = {4};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, in) == 0);
    param(g, "c1/k", 4, k1);
    REQUIRE(rt_graph_add_param(g, "c1/b", 1, b1, RT_INIT_ZEROS, 1, NULL) == 0);
    param(g, "c2/k", 4, k2);
    param(g, "fc/w", 2, w3);
    REQUIRE(rt_graph_add_param(g, "fc/b", 1, b3, RT_INIT_ZEROS, 1, NULL) == 0);
    const rt_attr relu[2] = {{.name = "padding", .kind = RT_ATTR_STR, .s = "same"},
                             {.name = "activation", .kind = RT_ATTR_STR, .s = "relu"}};
    const char *c1[3] = {"x", "c1/k", "c1/b"}, *c2[2] = {pool_first ? "mp" : "c1", "c2/k"};
    const char *mp[1] = {pool_first ? "c1" : "c2"}, *fl[1] = {pool_first ? "c2" : "mp"};
    const char *fc[3] = {"fl", "fc/w", "fc/b"}, *sm[1] = {"fc"};
    REQUIRE(rt_graph_add_node(g, "c1", "Conv2D", 3, c1, 2, relu) == 0);
    if (cnn_pw && !pool_first) {
        const int64_t kp[4] = {1, 1, 16, 16}, bp[1] = {16};
        param(g, "pw/k", 4, kp);
        REQUIRE(rt_graph_add_param(g, "pw/b", 1, bp, RT_INIT_ZEROS, 1, NULL) == 0);
        const char *pw[3] = {"c1", "pw/k", "pw/b"};
        REQUIRE(rt_graph_add_node(g, "pw", "Conv2D", 3, pw, 2, relu) == 0);
        c2[0] = "pw";
    }
    if (cnn_dw && !pool_first) {
        const int64_t kd[4] = {3, 3, 1, 16}, bdw[1] = {16};
        param(g, "dw/k", 4, kd);
        REQUIRE(rt_graph_add_param(g, "dw/b", 1, bdw, RT_INIT_ZEROS, 1, NULL) == 0);
        const char *dw[3] = {"c1", "dw/k", "dw/b"};
        const rt_attr dwa[3] = {relu[0], relu[1], {.name = "group", .kind = RT_ATTR_INT, .i = 16}};
        REQUIRE(rt_graph_add_node(g, "dw", "Conv2D", 3, dw, 3, dwa) == 0);
        c2[0] = "dw";
        if (cnn_dw == 2) { /* c1 read twice: dw's backward adds into its dx */
            const char *res[2] = {"dw", "c1"};
            REQUIRE(rt_graph_add_node(g, "res", "Add", 2, res, 0, NULL) == 0);
            c2[0] = "res";
        }
    }
    if (pool_first)
        REQUIRE(rt_graph_add_node(g, "mp", "MaxPool2D", 1, mp, 0, NULL) == 0); /* 2x2 */
    REQUIRE(rt_graph_add_node(g, "c2", "Conv2D", 2, c2, 2, relu) == 0);
    if (!pool_first)
        REQUIRE(rt_graph_add_node(g, "mp", "MaxPool2D", 1, mp, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "fl", "Flatten", 1, fl, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "fc", "Dense", 3, fc, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "sm", "Softmax", 1, sm, 0, NULL) == 0);
    return g;
}

/* 4 classes, each a bright 3x3 patch in one quadrant of channel 0 over
 * noise: a task the CNN learns to near 100% in a few epochs */
enum { TN = 512, VN = 256 };
static void make_set(float *x, int32_t *y, int n)
{
    for (int i = 0; i < n; i++) {
        const int c = (int)(unif() * 4) & 3;
        y[i] = c;
        float *im = x + i * 128;
        for (int j = 0; j < 128; j++)
            im[j] = 0.5f * normal();
        const int r0 = (c >> 1) * 4 + (int)(unif() * 2), c0 = (c & 1) * 4 + (int)(unif() * 2);
        for (int dr = 0; dr < 3 && r0 + dr < 8; dr++)
            for (int dc = 0; dc < 3 && c0 + dc < 8; dc++)
                im[((r0 + dr) * 8 + c0 + dc) * 2] += 2.0f;
    }
}

/* the CNN's config: sparse CE on its Softmax, batch 32 */
static void cnn_config(rt_train_config *cfg, rt_opt_kind opt, float lr, uint64_t seed, int prec)
{
    rt_train_config_init(cfg);
    cfg->loss = RT_LOSS_SPARSE_CE;
    cfg->opt = opt;
    cfg->lr = lr;
    cfg->batch_size = 32;
    cfg->seed = seed;
    cfg->metrics = 0;
    cfg->precision = prec;
}

/* every parameter of p (grad: its gradient) into w, in order; their count */
static int64_t read_vals(const rt_plan *p, const rt_exec *e, float *w, int64_t cap, int grad)
{
    int64_t off = 0;
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        int64_t dims[RT_MAX_DIMS], n = 1;
        const int nd = rt_plan_param_info(p, i, NULL, dims, NULL);
        for (int k = 0; k < nd; k++)
            n *= dims[k];
        REQUIRE(off + n <= cap &&
                (grad ? rt_exec_get_grad(e, i, w + off) : rt_exec_get_param(e, i, w + off)) == 0);
        off += n;
    }
    return off;
}
static int64_t read_params(const rt_plan *p, const rt_exec *e, float *w, int64_t cap)
{
    return read_vals(p, e, w, cap, 0);
}

static double train_acc(int prec, const float *x, const int32_t *y, const float *vx,
                        const int32_t *vy, double *loss0)
{
    rt_graph *g = cnn(0);
    rt_train_config cfg;
    cnn_config(&cfg, RT_OPT_ADAM, 0.003f, 3, prec);
    cfg.metrics = RT_METRIC_ACCURACY;
    rt_plan *p = compile(g, &cfg, 0, NULL);
    REQUIRE(p);
    if (prec == RT_PREC_BF16) {
        char op[48];
        /* the convolutions (the second with its MaxPool2D fused) and
         * the Dense in bf16; the Softmax in float32 */
        CHECK(prec_of(p, "c1", op, sizeof op) == RT_PREC_BF16);
        CHECK(prec_of(p, "c2", op, sizeof op) == RT_PREC_BF16);
        CHECKF(!strcmp(op, "Conv2D+MaxPool2D"), "c2 is %s", op);
        CHECK(prec_of(p, "mp", op, sizeof op) == -1);
        CHECK(prec_of(p, "fc", op, sizeof op) == RT_PREC_BF16);
        CHECK(prec_of(p, "sm", op, sizeof op) == RT_PREC_F32);
    }
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = TN};
    rt_train_result r;
    REQUIRE(rt_exec_train(e, &d, 16, &r, NULL, NULL, NULL) == 0);
    *loss0 = r.mean.loss;
    REQUIRE(rt_exec_train(e, &d, 10 * TN / 32 - 16, &r, NULL, NULL, NULL) == 0);
    rt_metrics m;
    REQUIRE(rt_exec_evaluate(e, &(rt_data){.x = vx, .y = vy, .y_dtype = RT_I32, .n = VN}, &m) == 0);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return m.acc;
}

static void test_train(void)
{
    static float x[TN * 128], vx[VN * 128];
    static int32_t y[TN], vy[VN];
    make_set(x, y, TN);
    make_set(vx, vy, VN);
    double l32, l16;
    const double a32 = train_acc(RT_PREC_F32, x, y, vx, vy, &l32);
    const double a16 = train_acc(RT_PREC_BF16, x, y, vx, vy, &l16);
    printf("cnn, 10 epochs: val accuracy float32 %.4f, bf16 %.4f; first 16 steps' loss %.4f, "
           "%.4f\n",
           a32, a16, l32, l16);
    /* 256 validation images: one image is 0.39 points, so "within 0.5
     * points" is "at most one image apart" */
    CHECK(a32 > 0.9);
    CHECK(fabs(a16 - a32) <= 0.005);
}

/* ------------------------------------------------------- Keras policies */

#define K2POL(n) "{\"class_name\": \"Policy\", \"config\": {\"name\": \"" n "\"}}"
#define K3POL(n)                                                                           \
    "{\"module\": \"keras\", \"class_name\": \"DTypePolicy\", \"config\": {\"name\": \"" n \
    "\"}, \"registered_name\": null}"
#define KSEQ(d1, d2, act)                                                                     \
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["            \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 12], "       \
    "\"dtype\": \"float32\", \"name\": \"in\"}},"                                             \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"units\": 16, "              \
    "\"activation\": \"relu\", \"dtype\": " d1 "}},"                                          \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\", \"units\": 3, \"dtype\": " d2 \
    "}},"                                                                                     \
    "{\"class_name\": \"Activation\", \"config\": {\"name\": \"sm\", \"activation\": "        \
    "\"softmax\", \"dtype\": " act "}}]}}"

static void keras_case(const char *what, const char *js, int cfg_prec, int want_d1, int want_d2)
{
    rt_graph *g = NULL;
    char err[256] = "";
    const int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "%s: import %s %s\n", what, rt_err_name(rc), err);
        rt_test_failures++;
        return;
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.batch_size = 8;
    cfg.precision = cfg_prec;
    rt_plan *p = compile(g, &cfg, 0, NULL);
    if (p) {
        char op1[48], op2[48], op3[48];
        const int d1 = prec_of(p, "d1", op1, sizeof op1), d2 = prec_of(p, "d2", op2, sizeof op2);
        const int sm = prec_of(p, "sm", op3, sizeof op3);
        printf("%-34s d1 (%s) %s, d2 (%s) %s, sm %s\n", what, op1, rt_precision_name(d1), op2,
               rt_precision_name(d2), rt_precision_name(sm));
        CHECK(d1 == want_d1);
        CHECK(d2 == want_d2);
        CHECK(sm == RT_PREC_F32);
        rt_plan_release(p);
    }
    rt_graph_destroy(g);
}

static void test_keras(void)
{
    const int F = RT_PREC_F32, H = RT_PREC_BF16;
    keras_case("keras 2 Policy",
               KSEQ(K2POL("mixed_bfloat16"), K2POL("mixed_bfloat16"), K2POL("float32")), 0, H, H);
    keras_case("keras 3 DTypePolicy, d2 float32",
               KSEQ(K3POL("mixed_bfloat16"), K3POL("float32"), K3POL("float32")), 0, H, F);
    keras_case("names", KSEQ("\"mixed_bfloat16\"", "\"float32\"", "\"float32\""), 0, H, F);
    /* a mixed model's float32 layer stays float32 under the config too */
    keras_case("names, config bf16", KSEQ("\"mixed_bfloat16\"", "\"float32\"", "\"float32\""), H, H,
               F);
    keras_case("mixed model, config float32",
               KSEQ("\"mixed_bfloat16\"", "\"mixed_bfloat16\"", "\"float32\""), F, F, F);
    /* float32 everywhere is Keras' default, which the config replaces */
    keras_case("float32 model", KSEQ("\"float32\"", "\"float32\"", "\"float32\""), 0, F, F);
    keras_case("float32 model, config bf16", KSEQ("\"float32\"", "\"float32\"", "\"float32\""), H,
               H, H);
    const char *js = KSEQ(K2POL("mixed_float16"), "\"float32\"", "\"float32\"");
    rt_graph *g = (rt_graph *)1;
    char err[256] = "";
    const int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
    printf("mixed_float16: %s \"%s\"\n", rt_err_name(rc), err);
    CHECK(rc < 0 && strstr(err, "mixed_float16") && strstr(err, "mixed_bfloat16"));
}

/* ------------------------------------------- PyTorch autocast fixture */

/* tests/fixtures/bf16_ref.bin (gen_bf16_fixtures.py): 3 SGD steps of a
 * Conv2D + Dense classifier in PyTorch under autocast bf16 and in float32.
 *
 * Float32 against float32 checks the harness (layouts, flatten order,
 * loss) to float32's precision. bf16 against autocast: PyTorch rounds
 * more than Keras' policy does (a conv's and linear's outputs and the
 * Dense bias to bf16, and the weight gradients come back bf16 before the
 * float32 cast), each a relative 2^-9 of the value it rounds; rtrain keeps
 * those float32. The inputs of every product are rounded alike, so the
 * two differ per step by a few such roundings of the logits and of the
 * gradients: the loss by at most 2 max|dz| <= 2^-6 of it over the three
 * steps (CE's gradient in z has l1 norm <= 2), each weight's change by a
 * few 2^-9 of the largest change of its tensor; 2^-5 of it is allowed. */
static void test_torch(const char *path)
{
    size_t len = 0;
    char *buf = rt_test_slurp(path, &len);
    REQUIRE(buf && len > 8 && !memcmp(buf, "RTBF", 4));
    const float *f = (const float *)(buf + 8);
    enum { N = 16, NX = 16 * 8 * 8 * 4, NK = 3 * 3 * 4 * 8, NC = 8, ND = 512 * 5, NB = 5 };
    const float *x = f, *yf = x + NX, *k0 = yf + N, *c0 = k0 + NK, *d0 = c0 + NC, *b0 = d0 + ND;
    const float *res[2] = {b0 + NB, b0 + NB + 3 + NK + NC + ND + NB};
    REQUIRE((size_t)((const char *)(res[1] + 3 + NK + NC + ND + NB) - buf) == len);
    int32_t y[N];
    for (int i = 0; i < N; i++)
        y[i] = (int32_t)yf[i];
    const int64_t sz[4] = {NK, NC, ND, NB};
    const float *init[4] = {k0, c0, d0, b0};
    for (int mode = 0; mode < 2; mode++) { /* 0: bf16, 1: float32 */
        rt_graph *g = rt_graph_create();
        const int64_t in[4] = {RT_BATCH, 8, 8, 4}, k[4] = {3, 3, 4, 8}, c[1] = {8}, d[2] = {512, 5},
                      b[1] = {5};
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, in) == 0);
        param(g, "c/k", 4, k);
        REQUIRE(rt_graph_add_param(g, "c/b", 1, c, RT_INIT_ZEROS, 1, NULL) == 0);
        param(g, "d/w", 2, d);
        REQUIRE(rt_graph_add_param(g, "d/b", 1, b, RT_INIT_ZEROS, 1, NULL) == 0);
        const rt_attr relu[2] = {{.name = "padding", .kind = RT_ATTR_STR, .s = "same"},
                                 {.name = "activation", .kind = RT_ATTR_STR, .s = "relu"}};
        const char *ci[3] = {"x", "c/k", "c/b"}, *fi[1] = {"c"}, *di[3] = {"fl", "d/w", "d/b"};
        const char *si[1] = {"d"};
        REQUIRE(rt_graph_add_node(g, "c", "Conv2D", 3, ci, 2, relu) == 0);
        REQUIRE(rt_graph_add_node(g, "fl", "Flatten", 1, fi, 0, NULL) == 0);
        REQUIRE(rt_graph_add_node(g, "d", "Dense", 3, di, 0, NULL) == 0);
        REQUIRE(rt_graph_add_node(g, "sm", "Softmax", 1, si, 0, NULL) == 0);
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.loss = RT_LOSS_SPARSE_CE;
        cfg.opt = RT_OPT_SGD;
        cfg.lr = 0.1f;
        cfg.batch_size = N;
        cfg.shuffle = 0;
        cfg.metrics = 0;
        cfg.precision = mode ? RT_PREC_F32 : RT_PREC_BF16;
        rt_plan *p = compile(g, &cfg, 0, NULL);
        REQUIRE(p);
        CHECK(rt_plan_report(p)->n_bf16 == (mode ? 0u : 3u)); /* c, fl (bf16 values), d */
        rt_exec *e;
        REQUIRE(rt_exec_create(p, &e) == 0);
        for (int i = 0; i < 4; i++)
            REQUIRE(rt_exec_set_param(e, i, init[i]) == 0);
        rt_data dd = {.x = x, .y = y, .y_dtype = RT_I32, .n = N};
        const float *want = res[mode];
        double lw = 0;
        for (int st = 0; st < 3; st++) {
            rt_train_result r;
            REQUIRE(rt_exec_train(e, &dd, 1, &r, NULL, NULL, NULL) == 0);
            const double rel = fabs(r.last.loss - want[st]) / fabs(want[st]);
            if (rel > lw)
                lw = rel;
        }
        const float *after = want + 3;
        double ww = 0;
        for (int i = 0; i < 4; i++) {
            float *w = malloc(sizeof(float) * (size_t)sz[i]);
            REQUIRE(w && rt_exec_get_param(e, i, w) == 0);
            double big = 0, err = 0;
            for (int64_t j = 0; j < sz[i]; j++) {
                const double dt = (double)after[j] - init[i][j], dr = (double)w[j] - init[i][j];
                if (fabs(dt) > big)
                    big = fabs(dt);
                if (fabs(dr - dt) > err)
                    err = fabs(dr - dt);
            }
            if (err / big > ww)
                ww = err / big;
            after += sz[i];
            free(w);
        }
        printf("vs PyTorch %s: worst loss rel %.3g, worst weight change err / max change %.3g\n",
               mode ? "float32" : "autocast bf16", lw, ww);
        if (mode) {
            CHECK(lw <= 1e-5);
            CHECK(ww <= 1e-4);
        } else {
            CHECK(lw <= 1.0 / 64);
            CHECK(ww <= 1.0 / 32);
        }
        rt_exec_destroy(e);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    free(buf);
}

/* ------------------------------------------------- cpu against ref */

/* 6 SGD steps of the CNN in bf16 on the cpu backend (oneDNN) and on ref
 * (rt_ref_bf16.c: the definition, summed in double). Both round the same
 * float32 values, but those carry float32 summation differences (about
 * 1e-5 relative, test_backend_diff.c) into each layer; a value within that
 * of a bf16 rounding boundary (2^-8 relative apart) rounds the other way
 * on one backend, so about 1e-5 / 2^-8 = 0.3% of the rounded values move
 * by 2^-8 of themselves, averaging out in every sum: the losses agree to
 * 1e-3 relative and each weight's change to 2^-6 of the largest change
 * (SGD: a change is linear in the gradients; Adam's m / sqrt(v) would
 * turn a tiny gradient's rounding into a full step). cpu bf16 against cpu
 * float32 is printed beside it; its losses must be further apart. (Seen:
 * about 1e-8 and 1e-6, far inside the bounds, since the cpu's Conv2D bias
 * gradient sums the float32 dz as ref does; summing the bf16 dz, as it did,
 * gave 1e-4 and 0.6%, and 0.4% and 2.6% with the pool after the first
 * conv.) */
static void ref_run(const char *be, int prec, int pool_first, const float *x, const int32_t *y,
                    int n, double loss[6], float *w, int64_t *nw)
{
    REQUIRE(rt_backend_select(be) == 0);
    rt_graph *g = cnn(pool_first);
    rt_train_config cfg;
    cnn_config(&cfg, RT_OPT_SGD, 0.05f, 5, prec);
    cfg.shuffle = 0;
    rt_plan *p = compile(g, &cfg, 0, NULL);
    REQUIRE(p);
    unsigned want = 3u + (cnn_pw != 0) + (cnn_dw != 0);
    /* Flatten stores bf16 for fc; ref's MaxPool2D stores bf16 (the
     * values its reader rounds its input to), where cpu runs it fused
     * with its Conv2D */
    if (rt_kern_bf16_act_store)
        want += 1u + !strcmp(be, "ref") + (cnn_dw == 2); /* and the Add */
    if (cnn_bn) /* BatchNorm, the activations, Pad, AvgPool2D, Flatten; cpu
                 * runs each BatchNorm and its activation (Clip, Keras'
                 * ReLU6, Relu) as one node */
        want = rt_kern_bf16_act_store ? (strcmp(be, "ref") ? 12u : 16u) : 5u;
    if (cnn_bin) /* every node but the Softmax; ref's MaxPool2D apart */
        want = rt_kern_bf16_act_store ? 10u + !strcmp(be, "ref") : 3u;
    CHECKF(rt_plan_report(p)->n_bf16 == (prec == RT_PREC_BF16 ? want : 0u), "%s: %u bf16 ops, want %u", be, rt_plan_report(p)->n_bf16, prec == RT_PREC_BF16 ? want : 0u);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = n};
    for (int st = 0; st < 6; st++) {
        rt_train_result r;
        REQUIRE(rt_exec_train(e, &d, 1, &r, NULL, NULL, NULL) == 0);
        loss[st] = r.last.loss;
    }
    *nw = read_params(p, e, w, 16000);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    REQUIRE(rt_backend_select("cpu") == 0);
}

/* n samples (batch 32: n 40 has a last batch of 8); chunk: the bf16
 * Conv2D + MaxPool2D's chunk (its pre-pool values are 1024 a sample);
 * pool_first: the fused pair is the first layer */
static void test_ref(int n, int chunk, int pool_first)
{
    printf("ref: %d samples, conv+pool chunks of %d samples, pool %s\n", n, chunk / 1024,
           pool_first ? "first" : "second");
    const int chunk0 = rt_kern_bf16_pool_chunk;
    rt_kern_bf16_pool_chunk = chunk;
    /* the same 64 samples for every variant: they compare kernels */
    static float x[64 * 128], w0[16000], w[3][16000];
    static int32_t y[64];
    static int made;
    if (!made++)
        make_set(x, y, 64);
    double l[3][6];
    int64_t nw, n0;
    /* the initial weights: the engine's initializers are backend-
     * independent functions of the seed, read from a fresh exec */
    {
        rt_graph *g = cnn(pool_first);
        rt_train_config cfg;
        cnn_config(&cfg, RT_OPT_SGD, 0.05f, 5, RT_PREC_F32);
        rt_plan *p = compile(g, &cfg, 0, NULL);
        rt_exec *e;
        REQUIRE(p && rt_exec_create(p, &e) == 0);
        n0 = read_params(p, e, w0, 16000);
        rt_exec_destroy(e);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    ref_run("cpu", RT_PREC_BF16, pool_first, x, y, n, l[0], w[0], &nw);
    REQUIRE(nw == n0);
    ref_run("ref", RT_PREC_BF16, pool_first, x, y, n, l[1], w[1], &nw);
    ref_run("cpu", RT_PREC_F32, pool_first, x, y, n, l[2], w[2], &nw);
    rt_kern_bf16_pool_chunk = chunk0;
    double lr = 0, lf = 0, big = 0, er = 0, ef = 0;
    for (int st = 0; st < 6; st++) {
        lr = fmax(lr, fabs(l[0][st] - l[1][st]) / fabs(l[1][st]));
        lf = fmax(lf, fabs(l[0][st] - l[2][st]) / fabs(l[2][st]));
    }
    for (int64_t i = 0; i < nw; i++) {
        big = fmax(big, fabs((double)w[1][i] - w0[i]));
        er = fmax(er, fabs((double)w[0][i] - w[1][i]));
        ef = fmax(ef, fabs((double)w[0][i] - w[2][i]));
    }
    printf("bf16 cpu vs ref: loss rel %.3g, weights %.3g of the largest change; "
           "(cpu bf16 vs cpu float32: %.3g, %.3g)\n",
           lr, er / big, lf, ef / big);
    CHECK(lr <= 1e-3);
    CHECK(er <= big / 64);
    CHECK(lr < lf / 4); /* the oracle is nearer than float32 is */
}

/* With rt_kern_bf16_conv_min_c 4 a Conv2D with fewer input channels (an
 * image's first layer) runs float32, and the report says so; the rest
 * stay bf16. */
static void test_stem(void)
{
    const int min_c0 = rt_kern_bf16_conv_min_c;
    rt_kern_bf16_conv_min_c = 4;
    rt_graph *g = cnn(0);
    rt_train_config cfg;
    cnn_config(&cfg, RT_OPT_SGD, 0.05f, 5, RT_PREC_BF16);
    rt_plan *p = compile(g, &cfg, 0, NULL);
    REQUIRE(p);
    char op[48];
    CHECK(prec_of(p, "c1", op, sizeof op) == RT_PREC_F32);
    CHECK(prec_of(p, "c2", op, sizeof op) == RT_PREC_BF16);
    CHECK(prec_of(p, "fc", op, sizeof op) == RT_PREC_BF16);
    CHECK(prec_of(p, "fl", op, sizeof op) == RT_PREC_BF16); /* c2 + mp to fc */
    CHECK(rt_plan_report(p)->n_bf16 == 3u);
    rt_plan_release(p);
    rt_graph_destroy(g);
    rt_kern_bf16_conv_min_c = min_c0;
}

/* A Conv2D + MaxPool2D with few products a sum (rt_kern_bf16_f32_k)
 * multiplies its bf16 values on the float32 fused kernel. Its numbers are
 * the bf16 op's: every gradient and the loss of one batch against the
 * same plan with the pair on oneDNN's bf16 primitives (rt_kern_bf16_f32_k
 * 0), which round x, W and dz to bf16 and sum in float32 too, so the two
 * differ by the order of float32 sums; both lie far from the float32
 * plan's gradients. variant 0: cnn(1), c1 (3x3x2, 18 products) + Relu +
 * MaxPool2D, the first layer (no dx); 1: cnn(0) with the threshold above
 * 144, c2 (3x3x16) + Relu + MaxPool2D after c1, with dx, its output
 * stored bf16 for Flatten; 2: variant 0 with 12 channels out of c1, past
 * the float32 kernel's last 16, whose backward reads y for Relu's mask
 * (widened from the bf16 y). Relu's mask is y > 0 of the bf16 y on both
 * paths (bf16 rounds no normal float32 to 0, and denormals flush to zero
 * inside engine calls), so the float32 plan's masks are the same too.
 * variants 3 to 5: 0 to 2 in chunks of 16 samples, of a batch of 24. */
static int64_t fewk_grads(int variant, int prec, int k, const float *x, const int32_t *y, float *gr,
                          int64_t cap, double *loss)
{
    const int k0 = rt_kern_bf16_f32_k, ch0 = rt_kern_bf16_f32_chunk;
    const int nb = variant >= 3 ? 24 : 32;
    rt_kern_bf16_f32_k = k;
    if (variant >= 3)
        rt_kern_bf16_f32_chunk = 1; /* the least chunk: 16 samples */
    variant %= 3;
    cnn_oc1 = variant == 2 ? 12 : 16;
    rt_graph *g = cnn(variant != 1);
    cnn_oc1 = 16;
    rt_train_config cfg;
    cnn_config(&cfg, RT_OPT_SGD, 0.05f, 5, prec);
    cfg.shuffle = 0;
    rt_plan *p = compile(g, &cfg, 0, NULL);
    REQUIRE(p);
    rt_kern_bf16_f32_k = k0;
    rt_kern_bf16_f32_chunk = ch0;
    char op[48];
    /* still a bf16 op: its products multiply bf16 values */
    if (prec == RT_PREC_BF16)
        CHECK(prec_of(p, variant == 1 ? "c2" : "c1", op, sizeof op) == RT_PREC_BF16 &&
              !strcmp(op, "Conv2D+MaxPool2D"));
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    REQUIRE(rt_exec_compute_grads(e, &(rt_data){.x = x, .y = y, .y_dtype = RT_I32, .n = nb}, nb,
                                  loss) == 0);
    const int64_t n = read_vals(p, e, gr, cap, 1);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return n;
}

static void test_fewk(void)
{
    CHECK(rt_kern_bf16_f32_k == 32); /* an RGB 3x3 layer (27) takes the float32 kernel */
    static float x[32 * 128], g[3][16000];
    static int32_t y[32];
    make_set(x, y, 32);
    for (int v = 0; v < 6; v++) {
        const int k = v % 3 == 1 ? 145 : 32;
        double l[3];
        const int64_t n = fewk_grads(v, RT_PREC_BF16, k, x, y, g[0], 16000, &l[0]);
        REQUIRE(fewk_grads(v, RT_PREC_BF16, 0, x, y, g[1], 16000, &l[1]) == n);
        REQUIRE(fewk_grads(v, RT_PREC_F32, k, x, y, g[2], 16000, &l[2]) == n);
        double big = 0, er = 0, ef = 0;
        for (int64_t j = 0; j < n; j++) {
            big = fmax(big, fabs((double)g[1][j]));
            er = fmax(er, fabs((double)g[0][j] - g[1][j]));
            ef = fmax(ef, fabs((double)g[0][j] - g[2][j]));
        }
        const double lr = fabs(l[0] - l[1]) / fabs(l[1]), lf = fabs(l[0] - l[2]) / fabs(l[2]);
        printf("few products a sum, variant %d: loss rel vs oneDNN bf16 %.3g (vs float32 %.3g); "
               "gradients %.3g (vs float32 %.3g) of the largest\n",
               v, lr, lf, er / big, ef / big);
        CHECK(big > 0);
        CHECK(lr <= 1e-6 && lr < lf / 100);
        CHECK(er <= 1e-5 * big && er < ef / 1000);
    }
}

/* ---------------------------------------------- bf16 activation storage */

static void bn_layer(rt_graph *g, const char *name, const char *in)
{
    char nm[4][16];
    const int64_t c = 16;
    const rt_init init[4] = {RT_INIT_ONES, RT_INIT_ZEROS, RT_INIT_ZEROS, RT_INIT_ONES};
    const char *bin[5] = {in, nm[0], nm[1], nm[2], nm[3]};
    for (int i = 0; i < 4; i++) {
        snprintf(nm[i], sizeof nm[i], "%s/%c", name, "gbmv"[i]);
        REQUIRE(rt_graph_add_param(g, nm[i], 1, &c, init[i], i < 2, NULL) == 0);
    }
    REQUIRE(rt_graph_add_node(g, name, "BatchNorm", 5, bin, 0, NULL) == 0);
}

/* MobileNet's pattern on the 8x8x2 images: c1 (3x3, 2 -> 16) -> bn1 ->
 * r1 Clip [0, 6] -> pw (1x1: the bf16 matmul) -> bn2 -> r2 ReLU
 * (max_value 6) -> dw (depthwise 3x3) -> bn3 -> r3 Relu -> c2 (3x3) -> bn4
 * -> r4 Relu -> pad (1 each side) -> mp (2x2) -> Flatten -> fc ->
 * Softmax. With bf16 storage the convolutions, bn1..bn4, r1..r4 and pad
 * store their outputs bf16 (every reader reads bf16; the convolutions'
 * primitives write them so); mp (AvgPool2D) reads bf16 and writes float32
 * (Flatten reads float32). */
static rt_graph *bncnn(void)
{
    rt_graph *g = rt_graph_create();
    const int64_t in[4] = {RT_BATCH, 8, 8, 2}, k1[4] = {3, 3, 2, 16}, kp[4] = {1, 1, 16, 16};
    const int64_t kd[4] = {3, 3, 1, 16}, k2[4] = {3, 3, 16, 16}, wf[2] = {5 * 5 * 16, 4};
    const int64_t bf[1] = {4};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, in) == 0);
    param(g, "c1/k", 4, k1);
    param(g, "pw/k", 4, kp);
    param(g, "dw/k", 4, kd);
    param(g, "c2/k", 4, k2);
    param(g, "fc/w", 2, wf);
    REQUIRE(rt_graph_add_param(g, "fc/b", 1, bf, RT_INIT_ZEROS, 1, NULL) == 0);
    const rt_attr same = {.name = "padding", .kind = RT_ATTR_STR, .s = "same"};
    const rt_attr dwa[2] = {same, {.name = "group", .kind = RT_ATTR_INT, .i = 16}};
    const rt_attr clip[2] = {{.name = "min", .kind = RT_ATTR_FLOAT, .f = 0},
                             {.name = "max", .kind = RT_ATTR_FLOAT, .f = 6}};
    const rt_attr r6 = {.name = "max_value", .kind = RT_ATTR_FLOAT, .f = 6};
    static const int64_t pads[8] = {0, 1, 1, 0, 0, 1, 1, 0};
    const rt_attr pad = {.name = "pads", .kind = RT_ATTR_INTS, .n = 8, .ints = pads};
    const char *c1[2] = {"x", "c1/k"}, *r1[1] = {"bn1"}, *pw[2] = {"r1", "pw/k"};
    const char *r2[1] = {"bn2"}, *dw[2] = {"r2", "dw/k"}, *r3[1] = {"bn3"}, *c2[2] = {"r3", "c2/k"};
    const char *r4[1] = {"bn4"}, *pd[1] = {"r4"}, *mp[1] = {"pad"}, *fl[1] = {"mp"};
    const char *fc[3] = {"fl", "fc/w", "fc/b"}, *sm[1] = {"fc"};
    REQUIRE(rt_graph_add_node(g, "c1", "Conv2D", 2, c1, 1, &same) == 0);
    bn_layer(g, "bn1", "c1");
    REQUIRE(rt_graph_add_node(g, "r1", "Clip", 1, r1, 2, clip) == 0);
    REQUIRE(rt_graph_add_node(g, "pw", "Conv2D", 2, pw, 0, NULL) == 0);
    bn_layer(g, "bn2", "pw");
    REQUIRE(rt_graph_add_node(g, "r2", "KerasRelu", 1, r2, 1, &r6) == 0);
    REQUIRE(rt_graph_add_node(g, "dw", "Conv2D", 2, dw, 2, dwa) == 0);
    bn_layer(g, "bn3", "dw");
    REQUIRE(rt_graph_add_node(g, "r3", "Relu", 1, r3, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "c2", "Conv2D", 2, c2, 1, &same) == 0);
    bn_layer(g, "bn4", "c2");
    REQUIRE(rt_graph_add_node(g, "r4", "Relu", 1, r4, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "pad", "Pad", 1, pd, 1, &pad) == 0);
    REQUIRE(rt_graph_add_node(g, "mp", "AvgPool2D", 1, mp, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "fl", "Flatten", 1, fl, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "fc", "Dense", 3, fc, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "sm", "Softmax", 1, sm, 0, NULL) == 0);
    return g;
}

/* ResNet's and Inception's joins on the 8x8x2 images: c1 (3x3, 2 -> 16)
 * -> bn1 -> r1 Relu -> mp (MaxPool2D 2x2) -> c2 (3x3, 16 -> 16) -> bn2;
 * add = bn2 + mp; cat = Concat(add, mp) -> gap (GlobalAvgPool) -> d1
 * (Dense 32 -> 16) -> r2 Relu (fused: Dense + Relu) -> fc -> Softmax.
 * With bf16 storage every value up to fc's input is stored bf16: c1, c2
 * and d1 write theirs from their primitives, mp and gap run a sample at
 * a time, add and cat directly. */
static rt_graph *joincnn(void)
{
    rt_graph *g = rt_graph_create();
    const int64_t in[4] = {RT_BATCH, 8, 8, 2}, k1[4] = {3, 3, 2, 16}, k2[4] = {3, 3, 16, 16};
    const int64_t w1[2] = {32, 16}, b1[1] = {16}, wf[2] = {16, 4}, bf[1] = {4};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, in) == 0);
    param(g, "c1/k", 4, k1);
    param(g, "c2/k", 4, k2);
    param(g, "d1/w", 2, w1);
    REQUIRE(rt_graph_add_param(g, "d1/b", 1, b1, RT_INIT_ZEROS, 1, NULL) == 0);
    param(g, "fc/w", 2, wf);
    REQUIRE(rt_graph_add_param(g, "fc/b", 1, bf, RT_INIT_ZEROS, 1, NULL) == 0);
    const rt_attr same = {.name = "padding", .kind = RT_ATTR_STR, .s = "same"};
    const rt_attr axis = {.name = "axis", .kind = RT_ATTR_INT, .i = -1};
    const char *c1[2] = {"x", "c1/k"}, *r1[1] = {"bn1"}, *mp[1] = {"r1"}, *c2[2] = {"mp", "c2/k"};
    const char *ad[2] = {"bn2", "mp"}, *cat[2] = {"add", "mp"}, *gap[1] = {"cat"};
    const char *d1[3] = {"gap", "d1/w", "d1/b"}, *r2[1] = {"d1"}, *fc[3] = {"r2", "fc/w", "fc/b"};
    const char *sm[1] = {"fc"};
    REQUIRE(rt_graph_add_node(g, "c1", "Conv2D", 2, c1, 1, &same) == 0);
    bn_layer(g, "bn1", "c1");
    REQUIRE(rt_graph_add_node(g, "r1", "Relu", 1, r1, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "mp", "MaxPool2D", 1, mp, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "c2", "Conv2D", 2, c2, 1, &same) == 0);
    bn_layer(g, "bn2", "c2");
    REQUIRE(rt_graph_add_node(g, "add", "Add", 2, ad, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "cat", "Concat", 2, cat, 1, &axis) == 0);
    REQUIRE(rt_graph_add_node(g, "gap", "GlobalAvgPool", 1, gap, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "d1", "Dense", 3, d1, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "r2", "Relu", 1, r2, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "fc", "Dense", 3, fc, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "sm", "Softmax", 1, sm, 0, NULL) == 0);
    return g;
}

/* The binaries, Reshape, Flatten and Conv2D + MaxPool2D reading and
 * writing bf16, on the 8x8x2 images: c0 (1x1, 2 -> 8, no activation) ->
 * c1 (3x3, 8 -> 16, Relu) -> mp (MaxPool2D 2x2; cpu runs c1 + mp fused:
 * it reads c0's output bf16 and stores the pooled maxima bf16); gap =
 * GlobalAvgPool(mp) -> rs Reshape (1, 1, 16); mul = mp * rs (broadcast
 * over the image, a sample at a time); sub = mul - sb (sb a (16,)
 * parameter, unbatched: read float32); mx = Max(sub, mp) (of the
 * output's shape: widened chunks, x read in the backward); fl Flatten
 * -> dr Dropout(0.25) -> fc (Dense 256 -> 4) -> Softmax. With bf16
 * storage every value from c0 to fc's input is stored bf16. */
static rt_graph *bincnn(void)
{
    rt_graph *g = rt_graph_create();
    const int64_t in[4] = {RT_BATCH, 8, 8, 2}, k0[4] = {1, 1, 2, 8}, k1[4] = {3, 3, 8, 16};
    const int64_t c16[1] = {16}, wf[2] = {4 * 4 * 16, 4}, bf[1] = {4};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, in) == 0);
    param(g, "c0/k", 4, k0);
    param(g, "c1/k", 4, k1);
    REQUIRE(rt_graph_add_param(g, "sb", 1, c16, RT_INIT_ZEROS, 1, NULL) == 0);
    param(g, "fc/w", 2, wf);
    REQUIRE(rt_graph_add_param(g, "fc/b", 1, bf, RT_INIT_ZEROS, 1, NULL) == 0);
    const rt_attr relu[2] = {{.name = "padding", .kind = RT_ATTR_STR, .s = "same"},
                             {.name = "activation", .kind = RT_ATTR_STR, .s = "relu"}};
    static const int64_t shp[3] = {1, 1, 16};
    const rt_attr rsa = {.name = "shape", .kind = RT_ATTR_INTS, .n = 3, .ints = shp};
    const char *c0[2] = {"x", "c0/k"}, *c1[2] = {"c0", "c1/k"}, *mp[1] = {"c1"};
    const char *gap[1] = {"mp"}, *rs[1] = {"gap"}, *mul[2] = {"mp", "rs"};
    const char *sub[2] = {"mul", "sb"}, *mx[2] = {"sub", "mp"}, *fl[1] = {"mx"};
    const char *dr[1] = {"fl"}, *fc[3] = {"dr", "fc/w", "fc/b"}, *sm[1] = {"fc"};
    const rt_attr rate = {.name = "rate", .kind = RT_ATTR_FLOAT, .f = 0.25f};
    REQUIRE(rt_graph_add_node(g, "c0", "Conv2D", 2, c0, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "c1", "Conv2D", 2, c1, 2, relu) == 0);
    REQUIRE(rt_graph_add_node(g, "mp", "MaxPool2D", 1, mp, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "gap", "GlobalAvgPool", 1, gap, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "rs", "Reshape", 1, rs, 1, &rsa) == 0);
    REQUIRE(rt_graph_add_node(g, "mul", "Mul", 2, mul, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "sub", "Sub", 2, sub, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "mx", "Max", 2, mx, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "fl", "Flatten", 1, fl, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "dr", "Dropout", 1, dr, 1, &rate) == 0);
    REQUIRE(rt_graph_add_node(g, "fc", "Dense", 3, fc, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "sm", "Softmax", 1, sm, 0, NULL) == 0);
    return g;
}

/* W-C's pattern on the 8x8x2 images: fl Flatten -> d0 (Dense 128 -> 32,
 * Relu) -> d1 (Dense 32 -> 32, Relu) -> fc (Dense 32 -> 4) -> Softmax.
 * d1's and fc's backwards compute dx from bf16 weights they round again
 * (rt_kern_bf16.c keeps no weight copy live from the forward). */
static rt_graph *mlpnet(void)
{
    rt_graph *g = rt_graph_create();
    const int64_t in[4] = {RT_BATCH, 8, 8, 2}, w0[2] = {128, 32}, w1[2] = {32, 32};
    const int64_t wf[2] = {32, 4}, b32[1] = {32}, b4[1] = {4};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, in) == 0);
    param(g, "d0/w", 2, w0);
    REQUIRE(rt_graph_add_param(g, "d0/b", 1, b32, RT_INIT_ZEROS, 1, NULL) == 0);
    param(g, "d1/w", 2, w1);
    REQUIRE(rt_graph_add_param(g, "d1/b", 1, b32, RT_INIT_ZEROS, 1, NULL) == 0);
    param(g, "fc/w", 2, wf);
    REQUIRE(rt_graph_add_param(g, "fc/b", 1, b4, RT_INIT_ZEROS, 1, NULL) == 0);
    const rt_attr relu = {.name = "activation", .kind = RT_ATTR_STR, .s = "relu"};
    const char *fl[1] = {"x"}, *d0[3] = {"fl", "d0/w", "d0/b"}, *d1[3] = {"d0", "d1/w", "d1/b"};
    const char *fc[3] = {"d1", "fc/w", "fc/b"}, *sm[1] = {"fc"};
    REQUIRE(rt_graph_add_node(g, "fl", "Flatten", 1, fl, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "d0", "Dense", 3, d0, 1, &relu) == 0);
    REQUIRE(rt_graph_add_node(g, "d1", "Dense", 3, d1, 1, &relu) == 0);
    REQUIRE(rt_graph_add_node(g, "fc", "Dense", 3, fc, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "sm", "Softmax", 1, sm, 0, NULL) == 0);
    return g;
}

/* bn_plan builds bncnn (0), joincnn (1), bincnn (2) or mlpnet (3) */
static int store_join;

/* bncnn's (or joincnn's) plan on backend be in precision prec (store:
 * bf16 storage on) */
static rt_plan *bn_plan(const char *be, int prec, int store)
{
    REQUIRE(rt_backend_select(be) == 0);
    rt_kern_bf16_act_store = rt_ref_bf16_act_store = store;
    rt_graph *g = store_join == 3   ? mlpnet()
                  : store_join == 2 ? bincnn()
                  : store_join      ? joincnn()
                                    : bncnn();
    rt_train_config cfg;
    cnn_config(&cfg, RT_OPT_SGD, 0.05f, 5, prec);
    cfg.shuffle = 0;
    rt_plan *p = compile(g, &cfg, 0, NULL);
    REQUIRE(p);
    rt_graph_destroy(g);
    rt_kern_bf16_act_store = rt_ref_bf16_act_store = 1;
    REQUIRE(rt_backend_select("cpu") == 0);
    return p;
}

/* every parameter's gradient over the first 32 samples, into gr; count */
static int64_t bn_grads(const char *be, int prec, int store, const float *x, const int32_t *y,
                        float *gr, int64_t cap)
{
    rt_plan *p = bn_plan(be, prec, store);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    double loss;
    REQUIRE(rt_exec_compute_grads(e, &(rt_data){.x = x, .y = y, .y_dtype = RT_I32, .n = 32}, 32,
                                  &loss) == 0);
    const int64_t off = read_vals(p, e, gr, cap, 1);
    rt_exec_destroy(e);
    rt_plan_release(p);
    return off;
}

/* The arena under bf16 storage against float32 storage of the same bf16
 * plan and against float32; which ops are bf16; and the gradients of the
 * bf16-stored kernels (the convolutions reading and writing bf16,
 * BatchNorm, Clip, ReLU(max_value), Relu, Pad, AvgPool2D) against ref's
 * bf16 (which emulates the storage: it stores float32 values rounded to
 * bf16 where cpu stores bf16, so both see the same values up to the order
 * of sums) and float32. */
/* every parameter's gradient, one batch of 32, cpu bf16 with storage
 * against ref's bf16 (its emulation) and cpu float32 */
static void store_grads(void)
{
    static float x[32 * 128], g[3][8000];
    static int32_t y[32];
    make_set(x, y, 32);
    const int64_t n = bn_grads("cpu", RT_PREC_BF16, 1, x, y, g[0], 8000);
    REQUIRE(bn_grads("ref", RT_PREC_BF16, 1, x, y, g[1], 8000) == n);
    REQUIRE(bn_grads("cpu", RT_PREC_F32, 1, x, y, g[2], 8000) == n);
    /* per parameter, relative to its largest reference gradient */
    rt_plan *p = bn_plan("cpu", RT_PREC_F32, 1);
    int64_t off0 = 0;
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        int64_t dims[RT_MAX_DIMS], m = 1;
        const char *nm;
        const int nd = rt_plan_param_info(p, i, &nm, dims, NULL);
        for (int k = 0; k < nd; k++)
            m *= dims[k];
        double big = 0, er = 0, ef = 0;
        for (int64_t j = off0; j < off0 + m; j++) {
            big = fmax(big, fabs((double)g[1][j]));
            er = fmax(er, fabs((double)g[0][j] - g[1][j]));
            ef = fmax(ef, fabs((double)g[0][j] - g[2][j]));
        }
        off0 += m;
        if (big == 0)
            continue; /* the moving statistics */
        printf("grad %-6s: cpu bf16 vs ref bf16 %.3g, vs cpu float32 %.3g of the largest\n", nm,
               er / big, ef / big);
        CHECKF(er <= 0.04 * big && er < ef, "%s", nm);
    }
    rt_plan_release(p);
}

static void test_store(void)
{
    rt_plan *on = bn_plan("cpu", RT_PREC_BF16, 1), *off = bn_plan("cpu", RT_PREC_BF16, 0);
    rt_plan *f32 = bn_plan("cpu", RT_PREC_F32, 1);
    const uint64_t a_on = rt_plan_report(on)->arena_bytes, a_off = rt_plan_report(off)->arena_bytes;
    const uint64_t a32 = rt_plan_report(f32)->arena_bytes;
    printf("bf16 storage: arena %llu bytes, float32 storage of the bf16 plan %llu, float32 %llu\n",
           (unsigned long long)a_on, (unsigned long long)a_off, (unsigned long long)a32);
    CHECK(a_on < a_off);
    CHECK(a_on < a32);
    char op[48];
    static const char *const bf16_nodes[] = {"c1", "bn1", "pw", "bn2", "dw",
                                             "bn3", "c2", "bn4", "fc"};
    for (size_t i = 0; i < sizeof bf16_nodes / sizeof bf16_nodes[0]; i++)
        CHECKF(prec_of(on, bf16_nodes[i], op, sizeof op) == RT_PREC_BF16, "%s", bf16_nodes[i]);
    /* BatchNorm + Relu, + Clip [0, 6], + ReLU(max_value=6): one node, one
     * pass each way */
    static const char *const acts[4][2] = {
        {"r1", "Clip"}, {"r2", "KerasRelu"}, {"r3", "Relu"}, {"r4", "Relu"}};
    for (int i = 0; i < 4; i++) {
        const char bn[4] = {'b', 'n', (char)('1' + i), 0};
        CHECKF(prec_of(on, acts[i][0], op, sizeof op) == -1, "%s", acts[i][0]);
        CHECKF(prec_of(on, bn, op, sizeof op) == RT_PREC_BF16 && strstr(op, acts[i][1]), "%s %s",
               bn, op);
    }
    CHECK(prec_of(on, "pad", op, sizeof op) == RT_PREC_BF16);
    CHECK(prec_of(on, "mp", op, sizeof op) == RT_PREC_BF16);
    CHECK(prec_of(on, "sm", op, sizeof op) == RT_PREC_F32);
    CHECK(prec_of(off, "bn1", op, sizeof op) == RT_PREC_F32); /* nothing stored bf16 */
    CHECK(prec_of(off, "r1", op, sizeof op) == -1 && prec_of(off, "bn1", op, sizeof op) ==
                                                         RT_PREC_F32 && strstr(op, "Clip"));
    CHECK(rt_plan_report(off)->n_bf16 == 5);
    rt_plan_release(on);
    rt_plan_release(off);
    rt_plan_release(f32);

    store_grads();

    /* six SGD steps over 40 samples (a last batch of 8: the convolutions
     * zero the stored input's rows past it), with and without storage,
     * each against ref's bf16 with the same storage (ref emulates it:
     * the values stored bf16 here hold bf16 values there) and float32. */
    cnn_bn = 1;
    static float xs[64 * 128], w[5][16000], w0[16000];
    static int32_t ys[64];
    make_set(xs, ys, 64);
    double l[5][6];
    int64_t nw;
    {
        rt_plan *p0 = bn_plan("cpu", RT_PREC_F32, 1);
        rt_exec *e;
        REQUIRE(rt_exec_create(p0, &e) == 0);
        nw = read_params(p0, e, w0, 16000);
        rt_exec_destroy(e);
        rt_plan_release(p0);
    }
    ref_run("ref", RT_PREC_BF16, 0, xs, ys, 40, l[0], w[0], &nw);
    ref_run("cpu", RT_PREC_F32, 0, xs, ys, 40, l[1], w[1], &nw);
    ref_run("cpu", RT_PREC_BF16, 0, xs, ys, 40, l[2], w[2], &nw);
    rt_kern_bf16_act_store = rt_ref_bf16_act_store = 0;
    ref_run("cpu", RT_PREC_BF16, 0, xs, ys, 40, l[3], w[3], &nw);
    ref_run("ref", RT_PREC_BF16, 0, xs, ys, 40, l[4], w[4], &nw);
    rt_kern_bf16_act_store = rt_ref_bf16_act_store = 1;
    cnn_bn = 0;
    for (int v = 2; v < 4; v++) {
        const int r = v == 2 ? 0 : 4; /* ref with the same storage */
        double lr = 0, lf = 0, big = 0, er = 0, ef = 0;
        for (int st = 0; st < 6; st++) {
            lr = fmax(lr, fabs(l[v][st] - l[r][st]) / fabs(l[r][st]));
            lf = fmax(lf, fabs(l[v][st] - l[1][st]) / fabs(l[1][st]));
        }
        for (int64_t i = 0; i < nw; i++) {
            big = fmax(big, fabs((double)w[r][i] - w0[i]));
            er = fmax(er, fabs((double)w[v][i] - w[r][i]));
            ef = fmax(ef, fabs((double)w[v][i] - w[1][i]));
        }
        printf("bn cnn, cpu bf16 %s storage vs ref bf16: loss rel %.3g, weights %.3g of the "
               "largest change; vs cpu float32: %.3g, %.3g; loss %.4f -> %.4f\n",
               v == 2 ? "with" : "without", lr, er / big, lf, ef / big, l[v][0], l[v][5]);
        CHECK(l[v][5] < l[v][0] / 2);
        CHECK(lr <= 0.01 && lf <= 0.03);
        CHECK(er <= big / 8 && er < ef);
    }
}

/* The new writers and readers: Conv2D and Dense writing bf16 from their
 * primitives, MaxPool2D, Add, Concat and GlobalAvgPool on bf16 values;
 * which nodes store bf16, the arena, and the gradients against ref's
 * emulation and float32. */
static void test_store_join(void)
{
    store_join = 1;
    rt_plan *on = bn_plan("cpu", RT_PREC_BF16, 1), *off = bn_plan("cpu", RT_PREC_BF16, 0);
    const uint64_t a_on = rt_plan_report(on)->arena_bytes, a_off = rt_plan_report(off)->arena_bytes;
    printf("joins: arena %llu bytes with bf16 storage, %llu without\n", (unsigned long long)a_on,
           (unsigned long long)a_off);
    CHECK(a_on < a_off);
    char op[48];
    static const char *const bf16_nodes[] = {"c1",  "bn1", "mp",  "c2", "bn2",
                                             "add", "cat", "gap", "d1", "fc"};
    for (size_t i = 0; i < sizeof bf16_nodes / sizeof bf16_nodes[0]; i++)
        CHECKF(prec_of(on, bf16_nodes[i], op, sizeof op) == RT_PREC_BF16, "%s", bf16_nodes[i]);
    CHECK(prec_of(on, "sm", op, sizeof op) == RT_PREC_F32);
    CHECK(prec_of(off, "add", op, sizeof op) == RT_PREC_F32);
    CHECK(prec_of(off, "mp", op, sizeof op) == RT_PREC_F32);
    rt_plan_release(on);
    rt_plan_release(off);
    store_grads();
    store_join = 0;
}

/* An MLP (mlpnet): its bf16 arena below that of float32 storage (the
 * activations between the Dense layers stored bf16), every layer bf16,
 * and the gradients against
 * ref's emulation and float32 (d0's through d1's and fc's dx, from the
 * weights their backwards round again). */
static void test_store_mlp(void)
{
    store_join = 3;
    rt_plan *on = bn_plan("cpu", RT_PREC_BF16, 1), *off = bn_plan("cpu", RT_PREC_BF16, 0);
    rt_plan *f32 = bn_plan("cpu", RT_PREC_F32, 1);
    const uint64_t a_on = rt_plan_report(on)->arena_bytes, a_off = rt_plan_report(off)->arena_bytes;
    const uint64_t a32 = rt_plan_report(f32)->arena_bytes;
    /* above float32's at these sizes: the calls' scratch holds oneDNN's
     * scratchpad and the weights' bf16 copy (a float32 Dense uses the
     * backend's shared GEMM scratch, outside the arena) */
    printf("mlp: arena %llu bytes with bf16 storage, %llu without, float32 %llu\n",
           (unsigned long long)a_on, (unsigned long long)a_off, (unsigned long long)a32);
    CHECK(a_on < a_off);
    char op[48];
    static const char *const bf16_nodes[] = {"d0", "d1", "fc"};
    for (size_t i = 0; i < sizeof bf16_nodes / sizeof bf16_nodes[0]; i++)
        CHECKF(prec_of(on, bf16_nodes[i], op, sizeof op) == RT_PREC_BF16, "%s", bf16_nodes[i]);
    CHECK(prec_of(on, "sm", op, sizeof op) == RT_PREC_F32);
    rt_plan_release(on);
    rt_plan_release(off);
    rt_plan_release(f32);
    store_grads();
    store_join = 0;
}

/* The binaries (broadcasting and not), Reshape, Flatten, Dropout and a
 * fused Conv2D + MaxPool2D on bf16 values (bincnn): which nodes store bf16, the
 * arena, the gradients against ref's emulation and float32, and six SGD
 * steps over 40 samples (a last batch of 8) with the fused pair in chunks
 * of 3 samples (its last chunk past the batch: a copy of the stored
 * input's rows, zeros after them) against ref and float32. */
static void test_store_bin(void)
{
    store_join = 2;
    rt_plan *on = bn_plan("cpu", RT_PREC_BF16, 1), *off = bn_plan("cpu", RT_PREC_BF16, 0);
    rt_plan *f32 = bn_plan("cpu", RT_PREC_F32, 1);
    const uint64_t a_on = rt_plan_report(on)->arena_bytes, a_off = rt_plan_report(off)->arena_bytes;
    const uint64_t a32 = rt_plan_report(f32)->arena_bytes;
    printf("binaries: arena %llu bytes with bf16 storage, %llu without, float32 %llu\n",
           (unsigned long long)a_on, (unsigned long long)a_off, (unsigned long long)a32);
    CHECK(a_on < a_off && a_on < a32);
    char op[48];
    static const char *const bf16_nodes[] = {"c0",  "c1", "gap", "rs", "mul",
                                             "sub", "mx", "fl",  "dr", "fc"};
    for (size_t i = 0; i < sizeof bf16_nodes / sizeof bf16_nodes[0]; i++)
        CHECKF(prec_of(on, bf16_nodes[i], op, sizeof op) == RT_PREC_BF16, "%s", bf16_nodes[i]);
    CHECK(prec_of(on, "mp", op, sizeof op) == -1); /* fused into c1 */
    CHECK(prec_of(on, "sm", op, sizeof op) == RT_PREC_F32);
    static const char *const f32_nodes[] = {"gap", "rs", "mul", "sub", "mx", "fl", "dr"};
    for (size_t i = 0; i < sizeof f32_nodes / sizeof f32_nodes[0]; i++)
        CHECKF(prec_of(off, f32_nodes[i], op, sizeof op) == RT_PREC_F32, "%s", f32_nodes[i]);
    rt_plan_release(on);
    rt_plan_release(off);
    rt_plan_release(f32);
    store_grads();
    store_join = 0;
    cnn_bin = 1;
    test_ref(40, 3 * 1024, 0);
    cnn_bin = 0;
}

/* ------------------------------------------------------------ refusals */

static int refused_isa(void)
{
    rt_graph *g = dense_graph(NULL);
    rt_train_config cfg;
    mse_config(&cfg, DB, DN);
    cfg.precision = RT_PREC_BF16;
    rt_plan *p = NULL;
    rt_compile_report rep;
    char err[256] = "";
    const int rc = rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err);
    rt_plan_release(p);
    rt_graph_destroy(g);
    if (rc == RT_ESTATE && strstr(err, "no bf16 instructions")) {
        printf("%s\n", err);
        return 1;
    }
    CHECK(rc == 0);
    return 0;
}

int main(int argc, char **argv)
{
    REQUIRE(rt_backend_select("cpu") == 0);
    if (argc > 1 && !strcmp(argv[1], "refuse")) {
        /* ONEDNN_MAX_CPU_ISA=AVX512_CORE: oneDNN may not use bf16 */
        CHECK(refused_isa());
        rt_graph *g = dense_graph(NULL);
        rt_train_config cfg;
        mse_config(&cfg, DB, DN);
        rt_plan *p = compile(g, &cfg, 0, NULL); /* float32 still compiles */
        CHECK(p != NULL);
        rt_plan_release(p);
        rt_graph_destroy(g);
        return rt_test_failures ? 1 : 0;
    }
    if (refused_isa()) {
        printf("SKIP: this CPU has no bf16 instructions\n");
        return 77;
    }
    CHECK(rt_kern_bf16_conv_min_c == 1); /* by default every Conv2D in bf16, as Keras */
    test_dense();
    test_conv(3, CC);
    test_conv(1, CC);
    test_conv(3, 3);
    test_conv(1, 3);
    if (argc > 1)
        test_torch(argv[1]);
    test_keras();
    test_train();
    test_ref(64, 1 << 18, 0);  /* one chunk a batch */
    test_ref(40, 3 * 1024, 0); /* 11 chunks a batch, the last of 2; then 3 */
    test_ref(40, 3 * 1024, 1); /* the same, the fused pair first: no dx */
    cnn_pw = 1;                /* a 1x1 conv between the 3x3 ones */
    test_ref(40, 3 * 1024, 0);
    cnn_pw = 0;
    cnn_dw = 1; /* a depthwise conv between them */
    test_ref(40, 3 * 1024, 0);
    cnn_dw = 2; /* the same, its dx added to the Add's */
    test_ref(40, 3 * 1024, 0);
    cnn_dw = 0;
    /* c2 (3x3x16x16 on 4x4 images, after the pool) with its
     * backward-weights as im2col matmuls: chunks of 3 samples (48 rows),
     * the batch of 32 ending in one of 2, the last batch of 8 in a chunk
     * reaching past it */
    const int col_oc0 = rt_kern_bf16_col_oc, col_rows0 = rt_kern_bf16_col_rows;
    rt_kern_bf16_col_oc = 4;
    rt_kern_bf16_col_rows = 48;
    test_ref(40, 3 * 1024, 1);
    /* the same with c2's window wider than its 4x4 input: the im2col
     * leaves out the taps that only ever read padding (1x9: 7 columns of
     * one row kept; 9x1: 7 whole rows; 9x9: 7 rows of all 9 columns, as
     * the kept taps must be one run of dW's rows), their dW rows zeros */
    const int64_t k2s[3][2] = {{1, 9}, {9, 1}, {9, 9}};
    cnn_oc1 = 8; /* 9x9x8x16 weights */
    for (int i = 0; i < 3; i++) {
        cnn_k2h = k2s[i][0], cnn_k2w = k2s[i][1];
        printf("c2 %dx%d on 4x4 images\n", (int)cnn_k2h, (int)cnn_k2w);
        test_ref(40, 3 * 1024, 1);
    }
    cnn_k2h = cnn_k2w = 3;
    cnn_oc1 = 16;
    rt_kern_bf16_col_oc = col_oc0;
    rt_kern_bf16_col_rows = col_rows0;
    test_store();
    test_store_join();
    test_store_bin();
    test_store_mlp();
    test_stem();
    test_fewk();
    /* the fused first layer on oneDNN's bf16 primitives against ref, as
     * before (by default the float32 kernel runs it, above) */
    rt_kern_bf16_f32_k = 0;
    test_ref(40, 3 * 1024, 1);
    rt_kern_bf16_f32_k = 32;
    if (rt_test_failures)
        fprintf(stderr, "%d check(s) failed\n", rt_test_failures);
    return rt_test_failures ? 1 : 0;
}
