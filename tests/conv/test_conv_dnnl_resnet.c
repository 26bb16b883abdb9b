/*
 * test_conv_dnnl_resnet.c - the convolution paths the shape rule mixes, on a
 * ResNet-shaped graph, against im2col + GEMM (which conv_gradcheck and
 * conv_fixture hold to finite differences and PyTorch).
 *
 * The same graph is compiled twice: every Conv2D on im2col, and the
 * engine's default choice by shape (rt__conv_dnnl_dirs: oneDNN's
 * primitives for some directions of some layers, im2col for the rest).
 * The graph is torchvision's resnet18 at 32x32 cut down to what the rule
 * sees there: a 7x7 stride-2 stem without bias, BatchNorm, ReLU, a 3x3
 * stride-2 max pool, two basic blocks of 3x3x64 convolutions at 8x8
 * (identity shortcuts: a block's input gradient is the sum of two
 * readers'), a strided block with a 1x1 stride-2 shortcut, global average
 * pooling and a Dense head. Gradients must agree at the plan's batch and
 * at a smaller one, and three SGD (momentum) steps must give the same
 * losses and weights, to float32 rounding.
 */
#include "../engine/rt_test.h"
#include "conv_models.h"
#include "cpu/rt_kern_conv.h"

enum { B = 8, NS = 16, H = 32, C = 3, F = 64 };

static int rc_;

/* Conv2D without bias: the kernel (KH,KW,cin,cout), strides s, explicit
 * pads (top, left, bottom, right) */
static void conv(rt_graph *g, const char *name, const char *in, int64_t k, int64_t cin,
                 int64_t cout, int64_t s, int64_t pad)
{
    char kn[64];
    snprintf(kn, sizeof kn, "%s/kernel", name);
    int64_t kd[4] = {k, k, cin, cout}, st[2] = {s, s}, pd[4] = {pad, pad, pad, pad};
    rc_ |= rt_graph_add_param(g, kn, 4, kd, RT_INIT_HE_UNIFORM, 1, NULL);
    rt_attr at[2] = {{.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = st},
                     {.name = "pads", .kind = RT_ATTR_INTS, .n = 4, .ints = pd}};
    const char *ins[2] = {in, kn};
    rc_ |= rt_graph_add_node(g, name, "Conv2D", 2, ins, 2, at);
}

/* BatchNorm (training mode) over the channels */
static void bn(rt_graph *g, const char *name, const char *in, int64_t c)
{
    static const char *parts[4] = {"gamma", "beta", "moving_mean", "moving_variance"};
    static const rt_init init[4] = {RT_INIT_ONES, RT_INIT_ZEROS, RT_INIT_ZEROS, RT_INIT_ONES};
    char pn[4][64];
    const char *ins[5] = {in, pn[0], pn[1], pn[2], pn[3]};
    for (int i = 0; i < 4; i++) {
        snprintf(pn[i], sizeof pn[i], "%s/%s", name, parts[i]);
        rc_ |= rt_graph_add_param(g, pn[i], 1, &c, init[i], i < 2, NULL);
    }
    rt_attr at[2] = {{.name = "momentum", .kind = RT_ATTR_FLOAT, .f = 0.9},
                     {.name = "epsilon", .kind = RT_ATTR_FLOAT, .f = 1e-5}};
    rc_ |= rt_graph_add_node(g, name, "BatchNorm", 5, ins, 2, at);
}

static void relu(rt_graph *g, const char *name, const char *in)
{
    rc_ |= rt_conv_add1(g, name, "Relu", in, 0, NULL);
}

static void add(rt_graph *g, const char *name, const char *a, const char *b)
{
    const char *ins[2] = {a, b};
    rc_ |= rt_graph_add_node(g, name, "Add", 2, ins, 0, NULL);
}

/* conv-bn-relu-conv-bn (+ shortcut) -> relu; name##o is the block's output */
static void block(rt_graph *g, const char *name, const char *in, int64_t cin, int64_t cout,
                  int64_t s)
{
    char a[64], b[64], c[64], d[64], e[64], sc[64], sb[64], o[64], r[64];
    snprintf(a, sizeof a, "%s.c1", name);
    snprintf(b, sizeof b, "%s.bn1", name);
    snprintf(r, sizeof r, "%s.r1", name);
    snprintf(c, sizeof c, "%s.c2", name);
    snprintf(d, sizeof d, "%s.bn2", name);
    snprintf(e, sizeof e, "%s.add", name);
    snprintf(o, sizeof o, "%so", name);
    conv(g, a, in, 3, cin, cout, s, 1);
    bn(g, b, a, cout);
    relu(g, r, b);
    conv(g, c, r, 3, cout, cout, 1, 1);
    bn(g, d, c, cout);
    const char *shortcut = in;
    if (s != 1 || cin != cout) {
        snprintf(sc, sizeof sc, "%s.down", name);
        snprintf(sb, sizeof sb, "%s.dbn", name);
        conv(g, sc, in, 1, cin, cout, s, 0);
        bn(g, sb, sc, cout);
        shortcut = sb;
    }
    add(g, e, d, shortcut);
    relu(g, o, e);
}

static rt_plan *plan(int impl)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, H, H, C};
    rc_ = rt_graph_add_input(g, "x", RT_F32, 4, in);
    conv(g, "stem", "x", 7, C, F, 2, 3); /* 16x16 */
    bn(g, "stem.bn", "stem", F);
    relu(g, "stem.r", "stem.bn");
    int64_t pk[2] = {3, 3}, ps[2] = {2, 2}, pp[4] = {1, 1, 1, 1};
    rt_attr pa[3] = {{.name = "pool", .kind = RT_ATTR_INTS, .n = 2, .ints = pk},
                     {.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = ps},
                     {.name = "pads", .kind = RT_ATTR_INTS, .n = 4, .ints = pp}};
    rc_ |= rt_conv_add1(g, "pool", "MaxPool2D", "stem.r", 3, pa); /* 8x8 */
    block(g, "l1a", "pool", F, F, 1);
    block(g, "l1b", "l1ao", F, F, 1);
    block(g, "l2a", "l1bo", F, 2 * F, 2); /* 4x4, 1x1 stride-2 shortcut */
    block(g, "l2b", "l2ao", 2 * F, 2 * F, 1);
    block(g, "l3a", "l2bo", 2 * F, 4 * F, 2); /* 2x2 */
    block(g, "l3b", "l3ao", 4 * F, 4 * F, 1);
    block(g, "l4a", "l3bo", 4 * F, 8 * F, 2); /* 1x1: 3x3 windows of padding but one pixel */
    block(g, "l4b", "l4ao", 8 * F, 8 * F, 1);
    rc_ |= rt_conv_add1(g, "gap", "GlobalAvgPool", "l4bo", 0, NULL);
    rc_ |= rt_conv_add_dense(g, "fc", "gap", 8 * F, 10, "linear", RT_INIT_GLOROT_UNIFORM, NULL,
                             NULL);
    rc_ |= rt_graph_set_output(g, "fc");
    REQUIRE(rc_ == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.metrics = 0;
    cfg.batch_size = B;
    cfg.shuffle = 0;
    cfg.seed = 11;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 0.002f;
    cfg.momentum = 0.9f;
    const int saved = rt_kern_conv_impl;
    rt_kern_conv_impl = impl;
    rt_plan *p;
    char err[256];
    const int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    rt_kern_conv_impl = saved;
    if (rc < 0)
        fprintf(stderr, "compile: %s\n", err);
    REQUIRE(rc == 0);
    rt_graph_destroy(g);
    return p;
}

/* |a - b| <= tol * (1 + max |b|), element by element; returns the worst
 * deviation relative to max |b| */
static double close_to(const char *what, const float *a, const float *b, int64_t n, double tol)
{
    double m = 0, worst = 0;
    for (int64_t i = 0; i < n; i++)
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double dv = fabs((double)a[i] - (double)b[i]);
        worst = dv > worst ? dv : worst;
        bad += !(dv <= tol * (1.0 + m));
    }
    if (bad)
        fprintf(stderr, "%s: %lld of %lld values differ (worst %.3g, max |ref| %.3g)\n", what,
                (long long)bad, (long long)n, worst, m);
    CHECK(bad == 0);
    return worst / (m > 0 ? m : 1);
}

/* the plan's Conv2D directions on the primitives, summed over its layers */
static int dn_layers(const rt_plan *p, int dir)
{
    int k = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        const rt__node *nd = &p->nodes[i];
        if (nd->op == &rt__op_conv2d && nd->kdata) {
            const rt_kern_conv_plan *kp = nd->kdata;
            k += kp->dn && (kp->dn_dirs & dir);
        }
    }
    return k;
}

int main(void)
{
    static float x[NS * H * H * C];
    static int32_t y[NS];
    uint64_t s = 7;
    for (int i = 0; i < NS * H * H * C; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int i = 0; i < NS; i++)
        y[i] = (i * 7) % 10;
    rt_plan *pa = plan(RT_KERN_CONV_AUTO), *pi = plan(RT_KERN_CONV_IM2COL);
    /* the rule must actually mix the paths here, or this test checks
     * nothing: some layers' directions on the primitives, others not */
    const int nf = dn_layers(pa, RT_KERN_DN_F), nd = dn_layers(pa, RT_KERN_DN_D),
              nw = dn_layers(pa, RT_KERN_DN_W);
    printf("primitives chosen: forward %d, backward-data %d, backward-weights %d layers\n", nf,
           nd, nw);
    CHECK(nf > 0 && nd > 0 && nw > 0);
    CHECK(dn_layers(pi, 7) == 0);
    rt_exec *ea, *ei;
    REQUIRE(rt_exec_create(pa, &ea) == 0 && rt_exec_create(pi, &ei) == 0);
    const int np = rt_plan_n_params(pa);
    REQUIRE(np == rt_plan_n_params(pi));
    static float ga[64 * F * F * 9], gi[64 * F * F * 9];
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = NS};
    /* gradients at the plan's batch and at a smaller one, twice each (a
     * second call must not see anything the first left behind) */
    const int64_t ns[4] = {B, B, 5, B};
    double worst = 0;
    for (int k = 0; k < 4; k++) {
        double la, li;
        CHECK_RC(rt_exec_compute_grads(ea, &d, ns[k], &la));
        CHECK_RC(rt_exec_compute_grads(ei, &d, ns[k], &li));
        CHECK(fabs(la - li) <= 1e-5 * (1 + fabs(li)));
        for (int i = 0; i < np; i++) {
            int64_t dims[RT_MAX_DIMS], n = 1;
            const char *name;
            int tr;
            const int nd_ = rt_plan_param_info(pa, i, &name, dims, &tr);
            if (!tr)
                continue;
            for (int j = 0; j < nd_; j++)
                n *= dims[j];
            REQUIRE(n <= (int64_t)(sizeof ga / sizeof ga[0]));
            CHECK_RC(rt_exec_get_grad(ea, i, ga));
            CHECK_RC(rt_exec_get_grad(ei, i, gi));
            char what[128];
            snprintf(what, sizeof what, "call %d (n=%lld): gradient of %s", k + 1,
                     (long long)ns[k], name);
            const double w = close_to(what, ga, gi, n, 1e-4);
            worst = w > worst ? w : worst;
        }
    }
    /* three SGD steps: the same losses and weights */
    rt_train_result ra, ri;
    float lsa[3], lsi[3];
    CHECK_RC(rt_exec_train(ea, &d, 3, &ra, NULL, NULL, lsa));
    CHECK_RC(rt_exec_train(ei, &d, 3, &ri, NULL, NULL, lsi));
    for (int k = 0; k < 3; k++) {
        if (!(fabs(lsa[k] - lsi[k]) <= 1e-5 * (1 + fabs(lsi[k])))) {
            fprintf(stderr, "step %d: loss %.8g, im2col %.8g\n", k + 1, lsa[k], lsi[k]);
            rt_test_failures++;
        }
    }
    for (int i = 0; i < np; i++) {
        int64_t dims[RT_MAX_DIMS], n = 1;
        const char *name;
        int tr;
        const int nd_ = rt_plan_param_info(pa, i, &name, dims, &tr);
        for (int j = 0; j < nd_; j++)
            n *= dims[j];
        CHECK_RC(rt_exec_get_param(ea, i, ga));
        CHECK_RC(rt_exec_get_param(ei, i, gi));
        char what[128];
        snprintf(what, sizeof what, "after 3 steps: %s", name);
        close_to(what, ga, gi, n, 1e-4);
    }
    printf("worst gradient deviation %.2e of the largest; losses %.6f %.6f %.6f\n", worst,
           lsa[0], lsa[1], lsa[2]);
    rt_exec_destroy(ea);
    rt_exec_destroy(ei);
    rt_plan_release(pa);
    rt_plan_release(pi);
    if (rt_test_failures) {
        fprintf(stderr, "test_conv_dnnl_resnet: %d check(s) failed\n", rt_test_failures);
        return 1;
    }
    printf("test_conv_dnnl_resnet: ok\n");
    return 0;
}
