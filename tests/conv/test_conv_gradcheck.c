/*
 * test_conv_gradcheck.c - finite-difference gradient checks of the
 * convolutional ops (Conv2D, MaxPool2D, AvgPool2D, GlobalAvgPool,
 * BatchNorm, Concat) across strides, paddings, dilations and odd shapes.
 *
 * Each case is rt_gradcase.h's x (B,H,W,C) -> Add(P) -> op -> Flatten ->
 * MSE. The MSE is a mean over all outputs, so gradients here are
 * 1e-3..1e-1; the tolerance's absolute part (3e-4) is about 5x the f32
 * noise of L divided by 2h.
 *
 * Kinks: ReLU and max are not differentiable where inputs tie, and a
 * finite difference that crosses a kink is wrong. MaxPool cases therefore
 * start from inputs on a grid 0.05 apart (P starts at zero) and smooth
 * activations (tanh) are used after convolutions. ReLU + MaxPool are
 * checked against PyTorch in test_conv_fixture instead.
 */
#define GC_BATCH 4
#include "../lib/rt_gradcase.h"

static void param4(const char *name, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t dd[4] = {a, b, c, d};
    gc_param(name, 4, dd, RT_INIT_GLOROT_UNIFORM, 1, NULL);
}
static void param1(const char *name, int64_t n, rt_init init, int trainable)
{
    /* non-trivial values so gamma/beta/bias gradients are not degenerate */
    float v[64];
    REQUIRE(n <= 64);
    for (int i = 0; i < n; i++)
        v[i] = init == RT_INIT_ONES ? 1.0f + 0.3f * rnd() : 0.3f * rnd();
    if (init == RT_INIT_ONES && !trainable) /* a moving variance: > 0 */
        for (int i = 0; i < n; i++) v[i] = 0.5f + fabsf(v[i]);
    gc_param(name, 1, &n, init, trainable, v);
}

/* x (B,H,W,C) -> h = x + P */
static void start(int64_t H, int64_t W, int64_t C)
{
    const int64_t d[3] = {H, W, C};
    gc_start(3, d);
}

static rt_attr ints(const char *name, int64_t *v) /* v holds 2 values */
{
    return (rt_attr){.name = name, .kind = RT_ATTR_INTS, .n = 2, .ints = v};
}
static rt_attr str(const char *name, const char *s)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_STR, .s = s};
}

static void run_check(const char *name, const char *out) { gc_run(name, out, 0); }

/* Conv2D case: x (B,H,W,C) -> conv with kernel (KH,KW,C,OC) */
static void conv_case(const char *name, int64_t H, int64_t W, int64_t C, int64_t KH,
                      int64_t KW, int64_t OC, int64_t sh, int64_t sw, int64_t dh,
                      int64_t dw, const char *pad, int bias, const char *act)
{
    start(H, W, C);
    param4("K", KH, KW, C, OC);
    if (bias) param1("b", OC, RT_INIT_ZEROS, 1);
    int64_t s[2] = {sh, sw}, dl[2] = {dh, dw};
    rt_attr at[4] = {ints("strides", s), ints("dilations", dl), str("padding", pad),
                     str("activation", act ? act : "linear")};
    const char *in[] = {"h", "K", "b"};
    node("y", "Conv2D", bias ? 3 : 2, in, 4, at);
    run_check(name, "y");
}

/* Pad(t, l, b, r on height and width, zeros) -> Conv2D: the fuse pass
 * folds the Pad into the convolution's padding (rt__fold_pads), so the
 * gradient of P is the folded convolution's backward-data on the unpadded
 * input, and K's its backward-weights over the folded padding */
static void pad_conv_case(const char *name, int64_t H, int64_t W, int64_t C, const int64_t pd[4],
                          int64_t KH, int64_t KW, int64_t OC, int64_t G, int64_t s1, int64_t d1,
                          const char *pad)
{
    start(H, W, C);
    param4("K", KH, KW, C / G, OC);
    param1("b", OC, RT_INIT_ZEROS, 1);
    int64_t pads[8] = {0, pd[0], pd[1], 0, 0, pd[2], pd[3], 0};
    const rt_attr pa = {.name = "pads", .kind = RT_ATTR_INTS, .n = 8, .ints = pads};
    node1("pd", "Pad", "h", 1, &pa);
    int64_t s[2] = {s1, s1}, dl[2] = {d1, d1};
    rt_attr at[5] = {ints("strides", s), ints("dilations", dl), str("padding", pad),
                     str("activation", "tanh"), {.name = "group", .kind = RT_ATTR_INT, .i = G}};
    const char *in[] = {"pd", "K", "b"};
    node("y", "Conv2D", 3, in, 5, at);
    run_check(name, "y");
}

static void pool_case(const char *name, const char *op, int64_t H, int64_t W, int64_t C,
                      int64_t kh, int64_t kw, int64_t sh, int64_t sw, const char *pad)
{
    start(H, W, C);
    int64_t k[2] = {kh, kw}, s[2] = {sh, sw};
    rt_attr at[3] = {ints("pool", k), ints("strides", s), str("padding", pad)};
    node1("y", op, "h", 3, at);
    grid_input = strcmp(op, "MaxPool2D") == 0;
    run_check(name, "y");
}

static void bn_case(const char *name, int64_t H, int64_t W, int64_t C, int frozen,
                    int dense_first)
{
    start(H, W, C);
    const char *src = "h";
    if (dense_first) { /* BatchNorm over a (B, C) Dense output */
        int64_t kd[2] = {H * W * C, 3};
        gc_param("D", 2, kd, RT_INIT_GLOROT_UNIFORM, 1, NULL);
        node1("hf", "Flatten", "h", 0, NULL);
        const char *in[] = {"hf", "D"};
        node("hd", "Dense", 2, in, 0, NULL);
        src = "hd";
        C = 3;
    }
    param1("gamma", C, RT_INIT_ONES, 1);
    param1("beta", C, RT_INIT_ZEROS, 1);
    param1("mm", C, RT_INIT_ZEROS, 0);
    param1("mv", C, RT_INIT_ONES, 0);
    rt_attr at[2] = {{.name = "frozen", .kind = RT_ATTR_INT, .i = frozen},
                     {.name = "epsilon", .kind = RT_ATTR_FLOAT, .f = 1e-3}};
    const char *in[] = {src, "gamma", "beta", "mm", "mv"};
    node("y", "BatchNorm", 5, in, 2, at);
    run_check(name, "y");
}

int main(void)
{
    gc_seed(0x9E3779B97F4A7C15ull);
    /* ---- Conv2D */
    conv_case("Conv2D 3x3 valid s1 bias", 5, 6, 2, 3, 3, 3, 1, 1, 1, 1, "valid", 1, NULL);
    conv_case("Conv2D 3x2 same s2 tanh (odd)", 7, 5, 3, 3, 2, 2, 2, 2, 1, 1, "same", 1, "tanh");
    conv_case("Conv2D 2x3 valid s(1,2) d(2,2)", 7, 8, 2, 2, 3, 2, 1, 2, 2, 2, "valid", 1, NULL);
    conv_case("Conv2D 4x4 same s1 (asym pad)", 5, 5, 2, 4, 4, 2, 1, 1, 1, 1, "same", 0, "sigmoid");
    conv_case("Conv2D 3x3 same s3 d2", 8, 7, 2, 3, 3, 2, 3, 3, 2, 2, "same", 1, NULL);
    /* ---- Pad folded into the Conv2D after it (asymmetric padding) */
    {
        const int64_t mbn[4] = {0, 0, 1, 1}, stem[4] = {3, 3, 3, 3}, asym[4] = {1, 0, 0, 1};
        const int64_t dil[4] = {2, 1, 2, 2};
        /* MobileNet v1's ZeroPadding2D(((0,1),(0,1))) + stride-2 depthwise */
        pad_conv_case("Pad(0,0,1,1) + depthwise 3x3 s2 valid", 6, 6, 3, mbn, 3, 3, 3, 3, 2, 1,
                      "valid");
        /* ResNet's stem: ZeroPadding2D(3) + 7x7 stride 2 'valid' */
        pad_conv_case("Pad(3) + Conv2D 7x7 s2 valid", 9, 9, 2, stem, 7, 7, 3, 1, 2, 1, "valid");
        /* a 'same' convolution's own (asymmetric) padding plus the Pad's */
        pad_conv_case("Pad(1,0,0,1) + grouped 3x3 s2 same", 7, 7, 4, asym, 3, 3, 4, 2, 2, 1,
                      "same");
        pad_conv_case("Pad(2,1,2,2) + Conv2D 3x3 d2 valid", 7, 6, 2, dil, 3, 3, 3, 1, 1, 2,
                      "valid");
    }
    /* OC a multiple of 16 and K <= 64: the register-blocked microkernel,
     * with row counts that leave a partial block */
    conv_case("Conv2D 3x3 OC=32 (microkernel)", 5, 5, 2, 3, 3, 32, 1, 1, 1, 1, "same", 1, NULL);
    conv_case("Conv2D 2x2 OC=48 s2 (microkernel)", 7, 6, 3, 2, 2, 48, 2, 2, 1, 1, "valid", 0, NULL);
    conv_case("Conv2D 1x1 (direct GEMM) no bias", 4, 3, 3, 1, 1, 4, 1, 1, 1, 1, "valid", 0, NULL);
    conv_case("Conv2D 1x1 s2 same", 5, 4, 3, 1, 1, 2, 2, 2, 1, 1, "same", 1, "tanh");
    /* big enough that im2col runs in several chunks (chunk < batch) */
    conv_case("Conv2D 3x3 chunked (C=20, 16x16)", 16, 16, 20, 3, 3, 1, 1, 1, 1, 1, "same", 1, NULL);
    /* one sample's columns over the chunk budget: bands of output lines,
     * whose input gradients overlap at the band edges (24 + 8 lines) */
    conv_case("Conv2D 3x3 bands of lines (C=16, 32x32)", 32, 32, 16, 3, 3, 16, 1, 1, 1, 1, "same",
              1, "tanh");

    /* ---- Conv2D -> MaxPool2D, which the compiler fuses (the pool runs on
     * each chunk of the convolution's output; backward routes the gradient
     * through the argmax the forward pass kept) */
    {
        start(7, 6, 2);
        param4("K", 3, 3, 2, 3);
        param1("b", 3, RT_INIT_ZEROS, 1);
        rt_attr at[2] = {str("padding", "same"), str("activation", "tanh")};
        const char *in[] = {"h", "K", "b"};
        node("c", "Conv2D", 3, in, 2, at);
        node1("y", "MaxPool2D", "c", 0, NULL); /* 7x6 -> 3x3: an edge row left over */
        run_check("Conv2D(tanh) + MaxPool2D (fused)", "y");
    }
    {
        /* 5x5 -> 3x3 -> one window per channel and an edge left over; few
         * windows, so that no finite difference crosses a tie of the max */
        start(5, 5, 2);
        param4("K", 3, 3, 2, 16); /* the microkernel path */
        const char *in[] = {"h", "K"};
        rt_attr pad = str("padding", "valid");
        node("c", "Conv2D", 2, in, 1, &pad);
        int64_t k[2] = {2, 2};
        rt_attr pk = ints("pool", k);
        node1("y", "MaxPool2D", "c", 1, &pk);
        run_check("Conv2D(16) + MaxPool2D (fused; microkernels read x in place)", "y");
    }
    {
        /* the conv's output has a second reader: no fusion */
        start(4, 4, 2);
        param4("K", 3, 3, 2, 2);
        rt_attr pad = str("padding", "same");
        const char *in[] = {"h", "K"};
        node("c", "Conv2D", 2, in, 1, &pad);
        node1("p", "MaxPool2D", "c", 0, NULL);
        node1("f1", "Flatten", "p", 0, NULL);
        node1("f2", "Flatten", "c", 0, NULL);
        const char *cat[] = {"f1", "f2"};
        node("y", "Concat", 2, cat, 0, NULL);
        run_check("Conv2D -> MaxPool2D and Flatten (unfused)", "y");
    }

    /* ---- pools */
    pool_case("MaxPool2D 2x2 valid (odd 5x7)", "MaxPool2D", 5, 7, 2, 2, 2, 2, 2, "valid");
    pool_case("MaxPool2D 3x3 s2 same (overlap)", "MaxPool2D", 6, 5, 2, 3, 3, 2, 2, "same");
    pool_case("MaxPool2D 2x3 s(1,2) valid", "MaxPool2D", 4, 7, 3, 2, 3, 1, 2, "valid");
    pool_case("AvgPool2D 2x2 valid (odd 5x7)", "AvgPool2D", 5, 7, 2, 2, 2, 2, 2, "valid");
    pool_case("AvgPool2D 3x3 s1 same (pad excluded)", "AvgPool2D", 5, 4, 2, 3, 3, 1, 1, "same");
    pool_case("AvgPool2D 2x2 s3 same", "AvgPool2D", 7, 5, 2, 2, 2, 3, 3, "same");

    start(3, 5, 4);
    node1("y", "GlobalAvgPool", "h", 0, NULL);
    run_check("GlobalAvgPool", "y");

    /* ---- BatchNorm */
    bn_case("BatchNorm training (NHWC)", 3, 4, 3, 0, 0);
    bn_case("BatchNorm frozen (inference mode)", 3, 4, 3, 1, 0);
    bn_case("BatchNorm training on Dense (B,C)", 2, 2, 2, 0, 1);

    /* ---- Concat: an Inception-style block, branches of different widths */
    {
        start(5, 5, 2);
        param4("K1", 1, 1, 2, 2);
        param4("K3", 3, 3, 2, 3);
        rt_attr same = str("padding", "same");
        const char *a[] = {"h", "K1"}, *b[] = {"h", "K3"};
        node("b1", "Conv2D", 2, a, 1, &same);
        node("b3", "Conv2D", 2, b, 1, &same);
        int64_t k[2] = {3, 3}, s[2] = {1, 1};
        rt_attr pa[3] = {ints("pool", k), ints("strides", s), same};
        node1("bp", "AvgPool2D", "h", 3, pa);
        const char *c[] = {"b1", "b3", "bp"};
        node("y", "Concat", 3, c, 0, NULL);
        run_check("Concat channels (Inception block)", "y");
    }
    {
        start(3, 4, 2);
        rt_attr ax = {.name = "axis", .kind = RT_ATTR_INT, .i = 2};
        const char *c[] = {"h", "h"};
        node("y", "Concat", 2, c, 1, &ax);
        run_check("Concat axis 2 (width), same input twice", "y");
    }
    /* K = 72 > 64 with OC = 16: the weight gradient on the microkernel over
     * im2col's columns in place of sgemm (under the engine's own choice).
     * Last, so the cases above keep their random draws. */
    conv_case("Conv2D 3x3 K=72 OC=16 (dW microkernel)", 6, 5, 8, 3, 3, 16, 1, 1, 1, 1, "same", 1,
              NULL);

    return rt_test_done("test_conv_gradcheck");
}
