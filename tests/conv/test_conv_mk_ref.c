/*
 * test_conv_mk_ref.c - the native backend's register-blocked convolution
 * paths against the ref backend (plain loops summed in double), gradients
 * of every parameter at the plan's batch and at a smaller one:
 *   - W-B's shape: 3 -> 64 3x3 'valid' ReLU with the fused 2x2 max pool, a
 *     first layer (no input gradient): the forward pass pooling its
 *     registers (rt__mk_pool2_blk), the weight gradient from the pooled
 *     gradient and the kept argmax by the permute kernel (rt__mk_dw_pool2);
 *     the same at odd sizes, and under a 3x3 pool (the banded kernels:
 *     dz routed out of the argmax, x read in place by the 27-column
 *     kernel);
 *   - the 3x3x64 net's shape: 3 -> 64 3x3 'same' ReLU (a padded copy read
 *     in place, dz formed a few lines at a time), then 64 -> 32 'same' ReLU
 *     (72 output pixels: both backward directions on the per-sample tap
 *     path, dz formed once per sample, dx from the flipped weights);
 *   - 16 -> 80 -> 32 (80 channels: no tap path), whose second layer's
 *     weight gradient (K = 720) runs on the microkernel over im2col's
 *     columns in place of sgemm, its input gradient on sgemm;
 *   - a pooled 16 -> 64 layer with an input gradient (the pool's backward
 *     over whole samples);
 *   - more of the tap path's shapes (tap_graph).
 * Each is compiled on "cpu" and on "ref" from the same seed (the
 * initializers are backend-independent).
 */
#include "../engine/rt_test.h"
#include "conv_models.h"
#include "conv_grads.h"

enum { B = 8 };

/* a first layer (3 channels, 3x3) fused with a pk x pk max pool, then
 * Dense(10) */
static rt_graph *pooled_first(int64_t H, int64_t W, int64_t OC, const char *pad, const char *act,
                              int64_t pk)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, H, W, 3}, k[2] = {pk, pk};
    rt_attr pa[2] = {{.name = "pool", .kind = RT_ATTR_INTS, .n = 2, .ints = k},
                     {.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = k}};
    const int64_t v = strcmp(pad, "valid") == 0 ? 2 : 0;
    const int64_t flat = (H - v) / pk * ((W - v) / pk) * OC;
    int rc = rt_graph_add_input(g, "x", RT_F32, 4, in);
    rc |= rt_conv_add_conv(g, "c", "x", 3, 3, 3, OC, pad, act, RT_INIT_GLOROT_UNIFORM, NULL, NULL);
    rc |= rt_conv_add1(g, "p", "MaxPool2D", "c", 2, pa);
    rc |= rt_conv_add1(g, "f", "Flatten", "p", 0, NULL);
    rc |= rt_conv_add_dense(g, "d", "f", flat, 10, "linear", RT_INIT_GLOROT_UNIFORM, NULL, NULL);
    rc |= rt_graph_set_output(g, "d");
    REQUIRE(rc == 0);
    return g;
}

/* W-B's layer: 12x10 -> 10x8 -> pooled 5x4 */
static rt_graph *wb_graph(void) { return pooled_first(12, 10, 64, "valid", "relu", 2); }

/* odd sizes through the pooled first layer: 'same' padding (a padded copy
 * read in place), 11x11 -> pooled 5x5 (a line and a column left over; the
 * forward pass's blocks of 3 and 2 windows; W-B's shape above has 3 and 1),
 * no activation (no dead windows), 32 channels (one half of the 64 the
 * permute and pooled forward kernels take at a time) */
static rt_graph *wb_odd_graph(void) { return pooled_first(11, 11, 32, "same", "linear", 2); }

/* W-B's layer under a 3x3 pool (10x8 -> 3x2): the dense banded weight
 * gradient (dz routed out of the argmax, rt__mk_dw_x9), which the permute
 * kernel (2x2 pools only) does not take */
static rt_graph *wb_pool3_graph(void) { return pooled_first(12, 10, 64, "valid", "relu", 3); }

/* 9x8xc0 -> Conv2D(c1, 3x3, same, relu) -> Conv2D(c2, 3x3, same, relu) ->
 * GlobalAvgPool -> Dense(10) */
static rt_graph *two_convs(int64_t c0, int64_t c1, int64_t c2)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 9, 8, c0};
    int rc = rt_graph_add_input(g, "x", RT_F32, 4, in);
    rc |= rt_conv_add_conv(g, "c1", "x", 3, 3, c0, c1, "same", "relu", RT_INIT_HE_UNIFORM, NULL,
                           NULL);
    rc |= rt_conv_add_conv(g, "c2", "c1", 3, 3, c1, c2, "same", "relu", RT_INIT_HE_UNIFORM, NULL,
                           NULL);
    rc |= rt_conv_add1(g, "gap", "GlobalAvgPool", "c2", 0, NULL);
    rc |= rt_conv_add_dense(g, "d", "gap", c2, 10, "linear", RT_INIT_GLOROT_UNIFORM, NULL, NULL);
    rc |= rt_graph_set_output(g, "d");
    REQUIRE(rc == 0);
    return g;
}

static rt_graph *net64_graph(void) { return two_convs(3, 64, 32); }
static rt_graph *wide_graph(void) { return two_convs(16, 80, 32); }

static rt_graph *pooled_dx_graph(void)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 8, 8, 4};
    int rc = rt_graph_add_input(g, "x", RT_F32, 4, in);
    rc |= rt_conv_add_conv(g, "c1", "x", 3, 3, 4, 16, "same", "relu", RT_INIT_HE_UNIFORM, NULL,
                           NULL);
    rc |= rt_conv_add_conv(g, "c2", "c1", 3, 3, 16, 64, "same", "relu", RT_INIT_HE_UNIFORM, NULL,
                           NULL);
    rc |= rt_conv_add1(g, "p", "MaxPool2D", "c2", 0, NULL);
    rc |= rt_conv_add1(g, "f", "Flatten", "p", 0, NULL);
    rc |= rt_conv_add_dense(g, "d", "f", 4 * 4 * 64, 10, "linear", RT_INIT_GLOROT_UNIFORM, NULL,
                            NULL);
    rc |= rt_graph_set_output(g, "d");
    REQUIRE(rc == 0);
    return g;
}

/* The per-sample tap path (stride 1, K > 64, <= 64 channels each side,
 * > 64 output pixels): c1 16 -> 64 'same' ReLU (weights only: a first
 * layer), then two branches off c1 whose input gradients add into c1's
 * output gradient (the second one's backward-data accumulates): c2 64 ->
 * 48 'valid' linear (x read in place, 3 vectors of channels) and c3 64 ->
 * 64 5x5 'same' ReLU (a padded copy, 4-column weight blocks: a window row
 * of 320 floats). c2 and c3 are big enough to run on several threads. */
static rt_graph *tap_graph(void)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 12, 12, 16};
    int rc = rt_graph_add_input(g, "x", RT_F32, 4, in);
    rc |= rt_conv_add_conv(g, "c1", "x", 3, 3, 16, 64, "same", "relu", RT_INIT_HE_UNIFORM, NULL,
                           NULL);
    rc |= rt_conv_add_conv(g, "c2", "c1", 3, 3, 64, 48, "valid", "linear", RT_INIT_HE_UNIFORM,
                           NULL, NULL);
    rc |= rt_conv_add_conv(g, "c3", "c1", 5, 5, 64, 64, "same", "relu", RT_INIT_HE_UNIFORM, NULL,
                           NULL);
    rc |= rt_conv_add1(g, "g2", "GlobalAvgPool", "c2", 0, NULL);
    rc |= rt_conv_add1(g, "g3", "GlobalAvgPool", "c3", 0, NULL);
    const char *cat[2] = {"g2", "g3"};
    rc |= rt_graph_add_node(g, "cat", "Concat", 2, cat, 0, NULL);
    rc |= rt_conv_add_dense(g, "d", "cat", 48 + 64, 10, "linear", RT_INIT_GLOROT_UNIFORM, NULL,
                            NULL);
    rc |= rt_graph_set_output(g, "d");
    REQUIRE(rc == 0);
    return g;
}

static rt_plan *compile_on(const char *be, rt_graph *(*mk)(void))
{
    REQUIRE(rt_backend_select(be) == 0);
    rt_graph *g = mk();
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.batch_size = B;
    cfg.seed = 7;
    rt_plan *p;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "compile on %s: %s\n", be, err);
        exit(1);
    }
    rt_graph_destroy(g);
    return p;
}

static void check(const char *name, rt_graph *(*mk)(void), const float *x, const int32_t *y)
{
    const int before = rt_test_failures;
    rt_plan *pc = compile_on("cpu", mk), *pr = compile_on("ref", mk);
    REQUIRE(rt_backend_select("cpu") == 0);
    rt_exec *ec, *er;
    REQUIRE(rt_exec_create(pc, &ec) == 0 && rt_exec_create(pr, &er) == 0);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = B};
    static float gc[64 * 64 * 25 + 4096], gr[64 * 64 * 25 + 4096];
    const int64_t cap = (int64_t)(sizeof gc / sizeof gc[0]);
    grads_match(name, ec, er, pc, &d, B, gc, gr, cap);
    grads_match(name, ec, er, pc, &d, 3, gc, gr, cap);
    printf("%-40s %s\n", name, rt_test_failures == before ? "ok" : "FAILED");
    rt_exec_destroy(ec);
    rt_exec_destroy(er);
    rt_plan_release(pc);
    rt_plan_release(pr);
}

int main(void)
{
    static float x[B * 12 * 12 * 16];
    static int32_t y[B];
    uint64_t s = 11;
    for (int i = 0; i < B * 12 * 12 * 16; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int i = 0; i < B; i++) y[i] = i % 10;
    check("W-B shape (fused pool, first layer)", wb_graph, x, y);
    check("pooled first layer, odd sizes, 'same'", wb_odd_graph, x, y);
    check("W-B's layer under a 3x3 pool", wb_pool3_graph, x, y);
    check("3x3x64 shape (K = 27 and K = 576)", net64_graph, x, y);
    check("80 channels (dW microkernel, K = 720)", wide_graph, x, y);
    check("pooled 16 -> 64 with an input gradient", pooled_dx_graph, x, y);
    check("tap path (in place, padded, accumulating)", tap_graph, x, y);
    if (rt_test_failures) {
        fprintf(stderr, "test_conv_mk_ref: %d check(s) failed\n", rt_test_failures);
        return 1;
    }
    printf("test_conv_mk_ref: ok\n");
    return 0;
}
