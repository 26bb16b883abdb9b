/*
 * test_conv_dnnl_batch.c - oneDNN's convolution primitives at a batch
 * smaller than the plan's (a last partial batch, predict's remainder):
 * they are built on the first such call, or the call falls back to
 * im2col. The same model compiled both ways (every Conv2D forced onto the
 * primitives, every one forced onto im2col + GEMM, which
 * conv_gradcheck and conv_fixture check against finite differences and
 * PyTorch) gives the same gradients at n = 8 (the plan's batch), 5 and 1,
 * and the same predictions for 11 samples (8 + 3), to float32 rounding.
 */
#include "../engine/rt_test.h"
#include "conv_models.h"
#include "conv_grads.h"
#include "cpu/rt_kern_conv.h"

enum { B = 8, NS = 11, H = 9, C = 4 };

/* 9x9x4 -> Conv 16 3x3 same relu -> Conv 16 3x3 stride 2 valid (no act)
 * -> Flatten -> Dense 10 */
static rt_plan *plan(int impl)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, H, H, C};
    int rc = rt_graph_add_input(g, "x", RT_F32, 4, in);
    rc |= rt_conv_add_conv(g, "c1", "x", 3, 3, C, 16, "same", "relu", RT_INIT_GLOROT_UNIFORM,
                           NULL, NULL);
    int64_t k[4] = {3, 3, 16, 16}, ob = 16, st[2] = {2, 2};
    rc |= rt_graph_add_param(g, "c2/kernel", 4, k, RT_INIT_GLOROT_UNIFORM, 1, NULL);
    rc |= rt_graph_add_param(g, "c2/bias", 1, &ob, RT_INIT_ZEROS, 1, NULL);
    rt_attr at[2] = {{.name = "padding", .kind = RT_ATTR_STR, .s = "valid"},
                     {.name = "strides", .kind = RT_ATTR_INTS, .n = 2, .ints = st}};
    const char *ins[3] = {"c1", "c2/kernel", "c2/bias"};
    rc |= rt_graph_add_node(g, "c2", "Conv2D", 3, ins, 2, at);
    rc |= rt_conv_add1(g, "f", "Flatten", "c2", 0, NULL);
    rc |= rt_conv_add_dense(g, "d", "f", 4 * 4 * 16, 10, "linear", RT_INIT_GLOROT_UNIFORM, NULL,
                            NULL);
    rc |= rt_graph_set_output(g, "d");
    REQUIRE(rc == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.batch_size = B;
    cfg.seed = 5;
    rt_kern_conv_impl = impl;
    rt_plan *p;
    char err[256];
    REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
    rt_kern_conv_impl = RT_KERN_CONV_AUTO;
    rt_graph_destroy(g);
    return p;
}

int main(void)
{
    static float x[NS * H * H * C];
    static int32_t y[NS];
    uint64_t s = 3;
    for (int i = 0; i < NS * H * H * C; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int i = 0; i < NS; i++) y[i] = i % 10;
    rt_plan *pd = plan(RT_KERN_CONV_DNNL), *pi = plan(RT_KERN_CONV_IM2COL);
    rt_exec *ed, *ei;
    REQUIRE(rt_exec_create(pd, &ed) == 0 && rt_exec_create(pi, &ei) == 0);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = NS};
    static float gd[16 * 16 * 9 * 4], gi[16 * 16 * 9 * 4];
    const int64_t ns[3] = {B, 5, 1};
    for (int k = 0; k < 3; k++)
        grads_match("oneDNN against im2col", ed, ei, pd, &d, ns[k], gd, gi,
                    (int64_t)(sizeof gd / sizeof gd[0]));
    static float od[NS * 10], oi[NS * 10];
    CHECK_RC(rt_exec_predict(ed, x, NS, od));
    CHECK_RC(rt_exec_predict(ei, x, NS, oi));
    close_to("predictions of 8 + 3 samples", od, oi, NS * 10);
    rt_exec_destroy(ed);
    rt_exec_destroy(ei);
    rt_plan_release(pd);
    rt_plan_release(pi);
    if (rt_test_failures) {
        fprintf(stderr, "test_conv_dnnl_batch: %d check(s) failed\n", rt_test_failures);
        return 1;
    }
    printf("test_conv_dnnl_batch: ok\n");
    return 0;
}
