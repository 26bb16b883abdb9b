/*
 * test_layers_gradcheck.c - finite-difference gradient checks of the ops
 * behind the wider Keras/ONNX layer set: the activations of op_act.c,
 * Div/Max/Min/PRelu, Pad, Transpose, ReduceMean/Sum/Max/Min/Prod, Upsample,
 * GlobalMaxPool, LayerNormalization, grouped/depthwise and dilated Conv2D,
 * ConvTranspose, the train-time noise layers and the random image ops.
 *
 * Each case is rt_gradcase.h's x (B, dims) -> Add(P) -> op -> Flatten ->
 * MSE, every parameter trainable.
 *
 * Kinks (LeakyRelu at 0, Clip at its bounds, max ties) are not
 * differentiable: every kink of these cases is a multiple of 0.1 and the
 * random inputs keep 0.02 away from those; GlobalMaxPool and the tie case
 * start from distinct grid values.
 */
#define GC_BATCH 3
#include "../lib/rt_gradcase.h"

static void param(const char *name, int nd, const int64_t *d, const float *value)
{
    gc_param(name, nd, d, RT_INIT_GLOROT_UNIFORM, 1, value);
}
/* a parameter of random values around base (1 + 0.3 N for base 1) */
static void paramv(const char *name, int nd, const int64_t *d, float base, float spread)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= d[i];
    float *v = malloc(sizeof(float) * (size_t)n);
    REQUIRE(v);
    for (int64_t i = 0; i < n; i++) v[i] = base + spread * rnd();
    param(name, nd, d, v);
    free(v);
}
static void param4(const char *name, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t dd[4] = {a, b, c, d};
    paramv(name, 4, dd, 0.0f, 0.3f);
}

static void node2(const char *name, const char *op, const char *a, const char *b)
{
    const char *in[2] = {a, b};
    node(name, op, 2, in, 0, NULL);
}

/* x (B, dims) -> h = x + P */
static void start(int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    const int64_t dd[4] = {d0, d1, d2, d3};
    gc_start(nd, dd);
}

static rt_attr ints(const char *name, int n, const int64_t *v)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_INTS, .n = n, .ints = v};
}
static rt_attr str(const char *name, const char *s)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_STR, .s = s};
}
static rt_attr flt(const char *name, double f)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_FLOAT, .f = f};
}
static rt_attr int1(const char *name, int64_t i)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_INT, .i = i};
}

static void run_check(const char *name, const char *out) { gc_run(name, out, GC_OFF_TENTHS); }

int main(void)
{
    gc_seed(0x2545F4914F6CDD1Dull);
    /* ---- activations, (B, 2, 5) */
    static const struct {
        const char *op;
        int n;
        rt_attr a[3];
    } acts[] = {
        {"Selu", 0, {{0}}},
        {"Elu", 0, {{0}}},
        {"Elu", 1, {{.name = "alpha", .kind = RT_ATTR_FLOAT, .f = 0.7}}},
        {"LeakyRelu", 1, {{.name = "alpha", .kind = RT_ATTR_FLOAT, .f = 0.3}}},
        {"Gelu", 0, {{0}}},
        {"Gelu", 1, {{.name = "approximate", .kind = RT_ATTR_STR, .s = "tanh"}}},
        {"Erf", 0, {{0}}},
        {"Softplus", 0, {{0}}},
        {"Softsign", 0, {{0}}},
        {"HardSigmoid", 0, {{0}}},
        {"HardSigmoid", 2, {{.name = "alpha", .kind = RT_ATTR_FLOAT, .f = 1.0 / 6},
                            {.name = "beta", .kind = RT_ATTR_FLOAT, .f = 0.5}}},
        {"Swish", 0, {{0}}},
        {"Swish", 1, {{.name = "alpha", .kind = RT_ATTR_FLOAT, .f = 1.702}}},
        {"Clip", 2, {{.name = "min", .kind = RT_ATTR_FLOAT, .f = 0},
                     {.name = "max", .kind = RT_ATTR_FLOAT, .f = 1.5}}},
        {"ThresholdedRelu", 1, {{.name = "alpha", .kind = RT_ATTR_FLOAT, .f = 0.4}}},
        {"KerasRelu", 3, {{.name = "negative_slope", .kind = RT_ATTR_FLOAT, .f = 0.2},
                          {.name = "threshold", .kind = RT_ATTR_FLOAT, .f = 0.5},
                          {.name = "max_value", .kind = RT_ATTR_FLOAT, .f = 2.0}}},
        {"KerasRelu", 2, {{.name = "negative_slope", .kind = RT_ATTR_FLOAT, .f = 0.1},
                          {.name = "threshold", .kind = RT_ATTR_FLOAT, .f = -0.6}}},
        {"Exp", 0, {{0}}},
        {"Scale", 2, {{.name = "alpha", .kind = RT_ATTR_FLOAT, .f = -0.25},
                      {.name = "beta", .kind = RT_ATTR_FLOAT, .f = 0.5}}},
        {"Mish", 0, {{0}}},
        {"HardSwish", 0, {{0}}},
        {"LogSigmoid", 0, {{0}}},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        char nm[96];
        start(2, 2, 5, 0, 0);
        node1("y", acts[i].op, "h", acts[i].n, acts[i].a);
        snprintf(nm, sizeof nm, "%s%s%s", acts[i].op, acts[i].n ? " " : "",
                 acts[i].n ? acts[i].a[0].name : "");
        run_check(nm, "y");
    }

    start(2, 2, 5, 0, 0);
    node1("e", "Exp", "h", 0, NULL);
    node1("y", "Sqrt", "e", 0, NULL);
    run_check("Sqrt (of Exp)", "y");
    start(2, 2, 5, 0, 0);
    node1("y", "Abs", "h", 0, NULL);
    run_check("Abs", "y");
    start(2, 2, 5, 0, 0);
    node1("e", "Exp", "h", 0, NULL);
    node1("y", "Log", "e", 0, NULL);
    run_check("Log (of Exp)", "y");

    /* ---- broadcasting binaries */
    const int64_t row[1] = {4}, col[2] = {3, 1};
    start(2, 3, 4, 0, 0);
    paramv("Q", 1, row, 1.0f, 0.2f);
    node2("y", "Div", "h", "Q");
    run_check("Div (batch / row)", "y");
    start(2, 3, 4, 0, 0);
    paramv("Q", 2, col, 0.0f, 1.0f);
    node1("e", "Exp", "h", 0, NULL);
    node2("y", "Div", "Q", "e");
    run_check("Div (column / batch)", "y");
    start(2, 3, 4, 0, 0);
    paramv("Q", 2, col, 0.0f, 1.0f);
    node2("y", "Max", "h", "Q");
    run_check("Max (batch, column)", "y");
    start(2, 3, 4, 0, 0);
    paramv("Q", 1, row, 0.0f, 1.0f);
    node2("y", "Min", "Q", "h");
    run_check("Min (row, batch)", "y");
    grid_input = 1;
    start(1, 6, 0, 0, 0);
    node2("y", "Max", "h", "h"); /* a tie everywhere: all to input 0 */
    run_check("Max (x, x): ties", "y");
    start(3, 2, 3, 4, 0);
    paramv("A", 1, row, 0.25f, 0.1f);
    node2("y", "PRelu", "h", "A");
    run_check("PRelu (slope per channel)", "y");
    start(3, 2, 3, 4, 0);
    const int64_t shared[3] = {1, 1, 4};
    paramv("A", 3, shared, 0.25f, 0.1f);
    node2("y", "PRelu", "h", "A");
    run_check("PRelu (shared_axes 1, 2)", "y");

    /* ---- Pad, Transpose, Reduce */
    {
        const int64_t pads[] = {0, 1, 0, 2, 0, 2, 1, 0};
        rt_attr a[2] = {ints("pads", 8, pads), flt("value", 0.5)};
        start(3, 3, 4, 2, 0);
        node1("y", "Pad", "h", 2, a);
        run_check("Pad (value 0.5)", "y");
        const int64_t crop[] = {0, -1, 1, 0, 0, -1, -2, 1};
        rt_attr c[1] = {ints("pads", 8, crop)};
        start(3, 3, 4, 2, 0);
        node1("y", "Pad", "h", 1, c);
        run_check("Pad (crops and pads)", "y");
        const int64_t perm[] = {0, 3, 1, 2};
        rt_attr t[1] = {ints("perm", 4, perm)};
        start(3, 2, 3, 4, 0);
        node1("y", "Transpose", "h", 1, t);
        run_check("Transpose (0,3,1,2)", "y");
        const int64_t perm2[] = {0, 2, 1};
        rt_attr t2[1] = {ints("perm", 3, perm2)};
        start(2, 3, 5, 0, 0);
        node1("y", "Transpose", "h", 1, t2);
        run_check("Transpose (0,2,1)", "y");
        const int64_t ax[] = {1, -2};
        rt_attr r1[2] = {ints("axes", 2, ax), int1("keepdims", 1)};
        start(3, 2, 3, 4, 0);
        node1("y", "ReduceMean", "h", 2, r1);
        run_check("ReduceMean axes 1,2 keepdims", "y");
        const int64_t ax2[] = {2};
        rt_attr r2[2] = {ints("axes", 1, ax2), int1("keepdims", 0)};
        start(3, 2, 3, 4, 0);
        node1("y", "ReduceSum", "h", 2, r2);
        run_check("ReduceSum axis 2", "y");
        start(2, 3, 4, 0, 0);
        node1("y", "ReduceMean", "h", 0, NULL);
        run_check("ReduceMean all (keepdims)", "y");
        rt_attr r3[2] = {ints("axes", 2, ax), int1("keepdims", 1)};
        start(3, 2, 3, 4, 0);
        node1("y", "ReduceMax", "h", 2, r3);
        run_check("ReduceMax axes 1,2 keepdims", "y");
        start(3, 2, 3, 4, 0);
        node1("y", "ReduceMin", "h", 2, r2);
        run_check("ReduceMin axis 2", "y");
        const int64_t ax3[] = {-1};
        rt_attr r4[2] = {ints("axes", 1, ax3), int1("keepdims", 0)};
        start(3, 2, 3, 4, 0);
        node1("y", "ReduceProd", "h", 2, r4);
        run_check("ReduceProd axis -1", "y");
        /* grid inputs hold an exact 0 per sample: its gradient is the
         * product of the others, theirs 0 (TensorFlow's _ProdGrad) */
        grid_input = 1;
        start(2, 3, 4, 0, 0);
        node1("y", "ReduceProd", "h", 2, r4);
        run_check("ReduceProd axis -1 with a zero", "y");
        /* (h, h) along the last axis: every max a tie of two, dy split in
         * halves (TensorFlow's _MinOrMaxGrad), so h gets dy once */
        rt_attr cat[1] = {int1("axis", 2)};
        const char *hh[2] = {"h", "h"};
        for (int m = 0; m < 2; m++) {
            start(2, 3, 4, 0, 0);
            node("c", "Concat", 2, hh, 1, cat);
            node1("y", m ? "ReduceMin" : "ReduceMax", "c", 2, r4);
            run_check(m ? "ReduceMin of (h, h): ties split" : "ReduceMax of (h, h): ties split",
                      "y");
        }
        /* a NaN input makes its max or min NaN on either backend (NumPy's
         * max; fmax would drop it), the other outputs untouched */
        for (int m = 0; m < 2; m++) {
            start(2, 3, 4, 0, 0);
            node1("y", m ? "ReduceMin" : "ReduceMax", "h", 2, r4);
            node1("flat", "Flatten", "y", 0, NULL);
            rt_train_config cfg;
            rt_train_config_init(&cfg);
            cfg.loss = RT_LOSS_MSE;
            cfg.batch_size = B;
            cfg.label_dtype = RT_F32;
            cfg.label_ndim = 1;
            cfg.label_dims[0] = 3;
            rt_plan *p;
            rt_exec *e;
            char err[256];
            REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
            REQUIRE(rt_exec_create(p, &e) == 0);
            float x[B * 12], out[B * 3];
            for (int i = 0; i < B * 12; i++) x[i] = 0.1f * (float)(i % 7);
            x[5] = NAN; /* sample 0, row 1 */
            CHECK_RC(rt_exec_predict(e, x, B, out));
            for (int i = 0; i < B * 3; i++)
                if (isnan(out[i]) != (i == 1)) {
                    fprintf(stderr, "%s with a NaN input: output %d is %g\n",
                            m ? "ReduceMin" : "ReduceMax", i, (double)out[i]);
                    rt_test_failures++;
                }
            printf("%-48s %s\n", m ? "ReduceMin with a NaN input" : "ReduceMax with a NaN input",
                   rt_test_failures == fails_before ? "ok" : "FAILED");
            fails_before = rt_test_failures;
            rt_exec_destroy(e);
            rt_plan_release(p);
            rt_graph_destroy(g);
        }
    }

    /* ---- Upsample, GlobalMaxPool */
    {
        const int64_t sc[] = {2, 3};
        rt_attr a[2] = {ints("scales", 2, sc), str("mode", "nearest")};
        start(3, 2, 3, 2, 0);
        node1("y", "Upsample", "h", 2, a);
        run_check("Upsample nearest (2, 3)", "y");
        rt_attr b[2] = {ints("scales", 2, sc), str("mode", "bilinear")};
        start(3, 3, 2, 2, 0);
        node1("y", "Upsample", "h", 2, b);
        run_check("Upsample bilinear (2, 3)", "y");
        grid_input = 1;
        start(3, 3, 4, 3, 0);
        node1("y", "GlobalMaxPool", "h", 0, NULL);
        run_check("GlobalMaxPool 2D", "y");
        grid_input = 1;
        rt_attr k = int1("keepdims", 1);
        start(2, 5, 3, 0, 0);
        node1("y", "GlobalMaxPool", "h", 1, &k);
        run_check("GlobalMaxPool 1D keepdims", "y");
    }

    /* ---- LayerNormalization */
    {
        const int64_t C[1] = {5};
        start(2, 3, 5, 0, 0);
        paramv("gamma", 1, C, 1.0f, 0.3f);
        paramv("beta", 1, C, 0.0f, 0.3f);
        const char *in[3] = {"h", "gamma", "beta"};
        rt_attr e = flt("epsilon", 1e-3);
        node("y", "LayerNormalization", 3, in, 1, &e);
        run_check("LayerNormalization (scale, center)", "y");
        start(1, 6, 0, 0, 0);
        const int64_t C6[1] = {6};
        paramv("beta", 1, C6, 0.0f, 0.3f);
        const char *in2[2] = {"h", "beta"};
        rt_attr a2[1] = {int1("scale", 0)};
        node("y", "LayerNormalization", 2, in2, 1, a2);
        run_check("LayerNormalization (center only)", "y");
        start(2, 2, 4, 0, 0);
        rt_attr a3[2] = {int1("scale", 0), int1("center", 0)};
        node("y", "LayerNormalization", 1, in, 2, a3);
        run_check("LayerNormalization (neither)", "y");
    }

    /* ---- grouped, depthwise and dilated Conv2D */
    {
        const int64_t one[2] = {1, 1}, two[2] = {2, 2}, d2[2] = {2, 1};
        const int64_t OC6[1] = {6};
        start(3, 5, 6, 3, 0);
        param4("W", 3, 3, 1, 6); /* depthwise, multiplier 2 */
        paramv("b", 1, OC6, 0.0f, 0.3f);
        const char *in[3] = {"h", "W", "b"};
        rt_attr a[3] = {int1("group", 3), str("padding", "same"), ints("strides", 2, one)};
        node("y", "Conv2D", 3, in, 3, a);
        run_check("Conv2D depthwise x2, same", "y");
        start(3, 6, 5, 4, 0);
        param4("W", 2, 3, 2, 6); /* 2 groups of 2 -> 3 */
        rt_attr b[4] = {int1("group", 2), str("padding", "same"), ints("strides", 2, two),
                        str("activation", "tanh")};
        node("y", "Conv2D", 2, in, 4, b);
        run_check("Conv2D group 2, stride 2, tanh", "y");
        start(3, 7, 6, 2, 0);
        param4("W", 3, 2, 2, 3);
        rt_attr c[2] = {ints("dilations", 2, d2), str("padding", "valid")};
        node("y", "Conv2D", 2, in, 2, c);
        run_check("Conv2D dilation (2, 1) valid", "y");
        start(3, 6, 6, 2, 0);
        param4("W", 3, 3, 1, 2);
        rt_attr e[3] = {int1("group", 2), ints("dilations", 2, two), str("padding", "same")};
        node("y", "Conv2D", 2, in, 3, e);
        run_check("Conv2D depthwise dilation 2 same", "y");
    }

    /* ---- ConvTranspose: kernel (kh, kw, out, in) */
    {
        const int64_t one[2] = {1, 1}, two[2] = {2, 2}, op1[2] = {1, 0};
        const int64_t OC3[1] = {3};
        const char *in[3] = {"h", "W", "b"};
        start(3, 3, 4, 2, 0);
        param4("W", 3, 3, 3, 2);
        paramv("b", 1, OC3, 0.0f, 0.3f);
        rt_attr a[2] = {ints("strides", 2, two), str("padding", "valid")};
        node("y", "ConvTranspose", 3, in, 2, a);
        run_check("ConvTranspose 3x3 s2 valid", "y");
        start(3, 3, 3, 2, 0);
        param4("W", 3, 2, 3, 2);
        rt_attr b[2] = {ints("strides", 2, two), str("padding", "same")};
        node("y", "ConvTranspose", 2, in, 2, b);
        run_check("ConvTranspose 3x2 s2 same", "y");
        start(3, 3, 3, 2, 0);
        param4("W", 3, 3, 2, 2);
        rt_attr c[3] = {ints("strides", 2, two), str("padding", "same"),
                        ints("output_padding", 2, op1)};
        node("y", "ConvTranspose", 2, in, 3, c);
        run_check("ConvTranspose s2 same output_padding (1,0)", "y");
        start(3, 4, 3, 2, 0);
        param4("W", 2, 2, 2, 2);
        rt_attr d[2] = {ints("dilations", 2, two), ints("strides", 2, one)};
        node("y", "ConvTranspose", 2, in, 2, d);
        run_check("ConvTranspose dilation 2", "y");
        start(3, 3, 3, 2, 0);
        param4("W", 3, 3, 2, 2);
        const int64_t pads[4] = {1, 0, 2, 1};
        rt_attr e[2] = {ints("strides", 2, two), ints("pads", 4, pads)};
        node("y", "ConvTranspose", 2, in, 2, e);
        run_check("ConvTranspose pads (1,0,2,1)", "y");
    }

    /* ---- train-time noise (the mask/noise is fixed for a given step) */
    {
        const int64_t W8[2] = {4, 2};
        rt_attr r = flt("rate", 0.4);
        start(2, 3, 4, 0, 0);
        node1("d", "SpatialDropout", "h", 1, &r);
        paramv("W", 2, W8, 0.0f, 0.5f);
        node2("y", "Dense", "d", "W");
        run_check("SpatialDropout (training)", "y");
        start(2, 3, 4, 0, 0);
        node1("d", "GaussianDropout", "h", 1, &r);
        paramv("W", 2, W8, 0.0f, 0.5f);
        node2("y", "Dense", "d", "W");
        run_check("GaussianDropout (training)", "y");
        rt_attr s = flt("stddev", 0.3);
        start(2, 3, 4, 0, 0);
        node1("d", "GaussianNoise", "h", 1, &s);
        node1("y", "Tanh", "d", 0, NULL);
        run_check("GaussianNoise (training)", "y");
    }

    /* ---- the random image ops in training: the adjoint of the sampling
     * (the draws are fixed for a step); values are clipped nowhere but in
     * the last contrast case */
    {
        static const char *const fills[] = {"reflect", "wrap", "constant", "nearest"};
        for (int f = 0; f < 4; f++)
            for (int nearest = 0; nearest < 2; nearest++) {
                char nm[96];
                rt_attr a[5] = {flt("lower", -0.3), flt("upper", 0.3), str("fill_mode", fills[f]),
                                flt("fill_value", 0.5),
                                str("interpolation", nearest ? "nearest" : "bilinear")};
                start(3, 5, 6, 2, 0);
                node1("y", "RandomRotation", "h", 5, a);
                snprintf(nm, sizeof nm, "RandomRotation %s %s", fills[f], a[4].s);
                run_check(nm, "y");
            }
        rt_attr t[5] = {flt("height_lower", -0.4), flt("height_upper", 0.4),
                        flt("width_lower", -0.3), flt("width_upper", 0.5),
                        str("fill_mode", "reflect")};
        start(3, 5, 6, 2, 0);
        node1("y", "RandomTranslation", "h", 5, t);
        run_check("RandomTranslation reflect", "y");
        rt_attr z[4] = {flt("height_lower", -0.4), flt("height_upper", 0.5),
                        flt("width_lower", -0.2), flt("width_upper", 0.3)};
        start(3, 5, 6, 2, 0);
        node1("y", "RandomZoom", "h", 4, z);
        run_check("RandomZoom reflect", "y");
        rt_attr fl = str("mode", "horizontal_and_vertical");
        start(3, 5, 6, 2, 0);
        node1("y", "RandomFlip", "h", 1, &fl);
        run_check("RandomFlip", "y");
        rt_attr c[4] = {flt("lower", 0.5), flt("upper", 0.5), flt("value_min", -100),
                        flt("value_max", 100)};
        start(3, 5, 6, 2, 0);
        node1("y", "RandomContrast", "h", 4, c);
        run_check("RandomContrast", "y");
        c[2] = flt("value_min", -0.45);
        c[3] = flt("value_max", 0.45);
        start(3, 5, 6, 2, 0);
        node1("y", "RandomContrast", "h", 4, c);
        run_check("RandomContrast (clipped)", "y");
        rt_attr b[4] = {flt("lower", -0.3), flt("upper", 0.3), flt("value_min", -100),
                        flt("value_max", 100)};
        start(3, 5, 6, 2, 0);
        node1("y", "RandomBrightness", "h", 4, b);
        run_check("RandomBrightness", "y");
        /* RandomCrop: a window at the drawn offset (5x6 -> 3x4, 5x2),
         * and the smart_resize of a smaller input (5x6 -> 7x4) */
        static const int64_t crops[3][2] = {{3, 4}, {5, 2}, {7, 4}};
        for (int k = 0; k < 3; k++) {
            char nm[64];
            const rt_attr hw[2] = {{.name = "height", .kind = RT_ATTR_INT, .i = crops[k][0]},
                                   {.name = "width", .kind = RT_ATTR_INT, .i = crops[k][1]}};
            start(3, 5, 6, 2, 0);
            node1("y", "RandomCrop", "h", 2, hw);
            snprintf(nm, sizeof nm, "RandomCrop 5x6 -> %lldx%lld", (long long)crops[k][0],
                     (long long)crops[k][1]);
            run_check(nm, "y");
        }
    }
    return rt_test_done("test_layers_gradcheck");
}
