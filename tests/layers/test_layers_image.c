/*
 * test_layers_image.c - the random image ops (Keras' RandomFlip,
 * RandomRotation, RandomTranslation, RandomZoom, RandomContrast,
 * RandomBrightness) through the public API on the selected backend.
 *
 * A training forward's output is read back without any internal hook:
 * x -> op -> Flatten -> Dense(Wd, zeros (N, n)) and MSE with labels
 * -n^2/2 on the diagonal make dL/dz the identity, so rt_exec_compute_grads
 * leaves sample j's output in column j of dL/dWd, exactly.
 *
 * References are written here from the layers' documented meaning, not
 * from rt_imgaug.c: a quarter turn is numpy's rot90 (out[i][j] =
 * in[j][n-1-i]), a whole-pixel translation is numpy's roll with the fill
 * modes of Keras' docstring (reflect (d c b a | a b c d | d c b a), wrap,
 * nearest, constant), a zoom of 1/2 about the centre averages the pixels
 * around (2 + y/2, 2 + x/2), a flip is numpy's flip, contrast and
 * brightness are Keras' formulas (keras/src/layers/preprocessing/
 * image_preprocessing/random_contrast.py: (x - mean) * f + mean per
 * channel, clipped to value_range; random_brightness.py: x + delta,
 * clipped). Outside training every op is the identity.
 *
 * RandomCrop: outside training (and in training when the input is
 * smaller) Keras' smart_resize, against tfjs' resizeBilinear on Keras'
 * box (tfjs/gen_crop_fixture.js wrote argv[1]); in training every output
 * is a window of its input at a legal offset, found by search, and the
 * offsets vary over samples and steps and repeat with the seed.
 */
#include <json-c/json.h>

#include "../engine/rt_test.h"
#include "import_keras.h"

#define MAXN 64

static rt_attr flt(const char *name, double f)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_FLOAT, .f = f};
}
static rt_attr str(const char *name, const char *s)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_STR, .s = s};
}

static rt_graph *graph(const char *op, int na, const rt_attr *at, int H, int W, int C,
                       int flatten)
{
    rt_graph *g = rt_graph_create();
    REQUIRE(g);
    const int64_t d[4] = {RT_BATCH, H, W, C};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 4, d) == 0);
    const char *x = "x", *y = "y";
    if (rt_graph_add_node(g, "y", op, 1, &x, na, at) != 0) {
        fprintf(stderr, "%s: %s\n", op, rt_graph_errmsg(g));
        exit(1);
    }
    if (flatten)
        REQUIRE(rt_graph_add_node(g, "f", "Flatten", 1, &y, 0, NULL) == 0);
    return g;
}

static void config(rt_train_config *cfg, int n, int64_t label)
{
    rt_train_config_init(cfg);
    cfg->loss = RT_LOSS_MSE;
    cfg->batch_size = n;
    cfg->seed = 42;
    cfg->label_dtype = RT_F32;
    cfg->label_ndim = 1;
    cfg->label_dims[0] = label;
    cfg->metrics = 0;
}

/* g's value `out` (per values a sample) in training for the n samples x,
 * after `steps` training steps when steps > 0, into out; destroys g */
static void fwd_graph(rt_graph *g, const char *val, int64_t per, int n, const float *x,
                     float *out, int steps)
{
    const int64_t wd[2] = {per, n};
    const char *fin[2] = {"f__", "Wd__"};
    REQUIRE(rt_graph_add_node(g, "f__", "Flatten", 1, &val, 0, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "Wd__", 2, wd, RT_INIT_ZEROS, 1, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "z__", "Dense", 2, fin, 0, NULL) == 0);
    REQUIRE(rt_graph_set_output(g, "z__") == 0);
    rt_train_config cfg;
    config(&cfg, n, n);
    rt_plan *p;
    rt_exec *e;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "%s: compile: %s\n", val, err);
        exit(1);
    }
    REQUIRE(rt_exec_create(p, &e) == 0);
    REQUIRE(rt_plan_n_params(p) == 1);
    float *lab = calloc((size_t)(n * n), sizeof(float)), *dw = malloc(sizeof(float) * per * n);
    float *zero = calloc((size_t)(per * n), sizeof(float));
    REQUIRE(lab && dw && zero);
    for (int j = 0; j < n; j++)
        lab[j * n + j] = -(float)(n * n) / 2.0f;
    rt_data d = {.x = x, .y = lab, .y_dtype = RT_F32, .n = n};
    if (steps > 0) {
        rt_train_result res;
        CHECK_RC(rt_exec_train(e, &d, steps, &res, NULL, NULL, NULL));
        CHECK_RC(rt_exec_set_param(e, 0, zero));
    }
    double loss;
    CHECK_RC(rt_exec_compute_grads(e, &d, n, &loss));
    CHECK_RC(rt_exec_get_grad(e, 0, dw));
    for (int j = 0; j < n; j++)
        for (int64_t i = 0; i < per; i++)
            out[j * per + i] = dw[i * n + j];
    free(lab);
    free(dw);
    free(zero);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* the op's training outputs of the n samples x into out */
static void train_fwd(const char *op, int na, const rt_attr *at, int H, int W, int C, int n,
                      const float *x, float *out, int steps)
{
    fwd_graph(graph(op, na, at, H, W, C, 0), "y", (int64_t)H * W * C, n, x, out, steps);
}

static uint64_t lcg = 0x9E3779B97F4A7C15ull;
static float rnd(void) /* [0, 1) */
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(lcg >> 40) / 16777216.0f;
}

static float X(const float *x, int W, int C, int i, int j, int c)
{
    return x[((int64_t)i * W + j) * C + c];
}

/* Keras' fill modes on index i of a side of n, for an overshoot under n
 * (the docstring's patterns); -1: fill_value */
static int fold(int i, int n, const char *mode)
{
    if (i >= 0 && i < n)
        return i;
    if (!strcmp(mode, "reflect"))
        return i < 0 ? -i - 1 : 2 * n - 1 - i;
    if (!strcmp(mode, "wrap"))
        return ((i % n) + n) % n;
    if (!strcmp(mode, "nearest"))
        return i < 0 ? 0 : n - 1;
    return -1;
}

static int max_err_ok(const char *what, const float *got, const float *want, int64_t n, float tol)
{
    float m = 0;
    for (int64_t i = 0; i < n; i++) {
        const float d = fabsf(got[i] - want[i]);
        m = d > m ? d : m;
    }
    CHECKF(m <= tol, "%s: max error %g", what, (double)m);
    printf("%-52s max |err| %.3g\n", what, (double)m);
    return m <= tol;
}

static void rotations(void)
{
    enum { H = 7, W = 7, C = 2, N = 2 };
    float x[N * H * W * C], y[N * H * W * C], want[N * H * W * C];
    for (int i = 0; i < N * H * W * C; i++)
        x[i] = rnd();
    static const struct {
        double turn;
        int k; /* numpy's rot90 k */
    } cases[] = {{0.25, 1}, {-0.25, -1}};
    for (int ci = 0; ci < 2; ci++)
        for (int interp = 0; interp < 2; interp++) {
            const rt_attr at[3] = {flt("lower", cases[ci].turn), flt("upper", cases[ci].turn),
                                   str("interpolation", interp ? "nearest" : "bilinear")};
            train_fwd("RandomRotation", 3, at, H, W, C, N, x, y, 0);
            for (int s = 0; s < N; s++)
                for (int i = 0; i < H; i++)
                    for (int j = 0; j < W; j++)
                        for (int c = 0; c < C; c++)
                            want[((s * H + i) * W + j) * C + c] =
                                cases[ci].k == 1
                                    ? X(x + s * H * W * C, W, C, j, W - 1 - i, c)
                                    : X(x + s * H * W * C, W, C, H - 1 - j, i, c);
            char nm[96];
            snprintf(nm, sizeof nm, "RandomRotation %g turn %s = rot90(k=%d)", cases[ci].turn,
                     interp ? "nearest" : "bilinear", cases[ci].k);
            max_err_ok(nm, y, want, N * H * W * C, interp ? 0.0f : 2e-6f);
        }
    /* a half turn of a non-square image: rot90 twice */
    enum { H2 = 5, W2 = 8 };
    float x2[H2 * W2], y2[H2 * W2], w2[H2 * W2];
    for (int i = 0; i < H2 * W2; i++)
        x2[i] = rnd();
    const rt_attr at[2] = {flt("lower", 0.5), flt("upper", 0.5)};
    train_fwd("RandomRotation", 2, at, H2, W2, 1, 1, x2, y2, 0);
    for (int i = 0; i < H2; i++)
        for (int j = 0; j < W2; j++)
            w2[i * W2 + j] = x2[(H2 - 1 - i) * W2 + (W2 - 1 - j)];
    max_err_ok("RandomRotation 0.5 turn (5x8) = rot90(k=2)", y2, w2, H2 * W2, 2e-6f);
}

static void translations(void)
{
    enum { H = 6, W = 8, C = 2, N = 2 };
    float x[N * H * W * C], y[N * H * W * C], want[N * H * W * C];
    for (int i = 0; i < N * H * W * C; i++)
        x[i] = rnd();
    static const char *const modes[] = {"reflect", "wrap", "nearest", "constant"};
    /* down by 0.5 H = 3 rows, left by 0.25 W = 2 columns: out(i, j) reads
     * in(i - 3, j + 2) */
    for (int m = 0; m < 4; m++)
        for (int interp = 0; interp < 2; interp++) {
            const rt_attr at[7] = {flt("height_lower", 0.5),
                                   flt("height_upper", 0.5),
                                   flt("width_lower", -0.25),
                                   flt("width_upper", -0.25),
                                   str("fill_mode", modes[m]),
                                   flt("fill_value", 0.5),
                                   str("interpolation", interp ? "nearest" : "bilinear")};
            train_fwd("RandomTranslation", 7, at, H, W, C, N, x, y, 0);
            for (int s = 0; s < N; s++)
                for (int i = 0; i < H; i++)
                    for (int j = 0; j < W; j++) {
                        const int si = fold(i - 3, H, modes[m]), sj = fold(j + 2, W, modes[m]);
                        for (int c = 0; c < C; c++)
                            want[((s * H + i) * W + j) * C + c] =
                                si < 0 || sj < 0 ? 0.5f : X(x + s * H * W * C, W, C, si, sj, c);
                    }
            char nm[96];
            snprintf(nm, sizeof nm, "RandomTranslation (+3, -2) %s %s = roll", modes[m],
                     interp ? "nearest" : "bilinear");
            max_err_ok(nm, y, want, N * H * W * C, 0.0f);
        }
}

static void zooms(void)
{
    enum { H = 9, W = 9 };
    float x[H * W], y[H * W], want[H * W];
    for (int i = 0; i < H * W; i++)
        x[i] = rnd();
    /* zoom 1/2 (height_factor -0.5, the width the same): output (i, j)
     * samples (2 + i/2, 2 + j/2), the mean of the pixels around it */
    const rt_attr in[2] = {flt("height_lower", -0.5), flt("height_upper", -0.5)};
    train_fwd("RandomZoom", 2, in, H, W, 1, 1, x, y, 0);
    for (int i = 0; i < H; i++)
        for (int j = 0; j < W; j++) {
            const int r0 = 2 + i / 2, r1 = 2 + (i + 1) / 2, c0 = 2 + j / 2, c1 = 2 + (j + 1) / 2;
            want[i * W + j] = (x[r0 * W + c0] + x[r0 * W + c1] + x[r1 * W + c0] + x[r1 * W + c1]) /
                              4.0f;
        }
    max_err_ok("RandomZoom 1/2 bilinear = mean of the 4 around", y, want, H * W, 1e-6f);
    /* zoom 2 (factor +1), nearest, constant 7: (i, j) reads (2i - 4,
     * 2j - 4), fill_value where either is outside */
    const rt_attr out[5] = {flt("height_lower", 1), flt("height_upper", 1),
                            str("fill_mode", "constant"), flt("fill_value", 7),
                            str("interpolation", "nearest")};
    train_fwd("RandomZoom", 5, out, H, W, 1, 1, x, y, 0);
    for (int i = 0; i < H; i++)
        for (int j = 0; j < W; j++) {
            const int r = 2 * i - 4, c = 2 * j - 4;
            want[i * W + j] = r < 0 || r >= H || c < 0 || c >= W ? 7.0f : x[r * W + c];
        }
    max_err_ok("RandomZoom 2 nearest constant", y, want, H * W, 0.0f);
    /* width only (zoom 2 across, 1 down), reflect: (i, j) reads (i, 2j - 4) */
    const rt_attr wide[5] = {flt("height_lower", 0), flt("height_upper", 0),
                             flt("width_lower", 1), flt("width_upper", 1),
                             str("interpolation", "nearest")};
    train_fwd("RandomZoom", 5, wide, H, W, 1, 1, x, y, 0);
    for (int i = 0; i < H; i++)
        for (int j = 0; j < W; j++)
            want[i * W + j] = x[i * W + fold(2 * j - 4, W, "reflect")];
    max_err_ok("RandomZoom width 2 reflect", y, want, H * W, 0.0f);
}

/* sample s of n: which flips (bit 0 left-right, bit 1 up-down) make y
 * from x, -1 when none does */
static int which_flip(const float *x, const float *y, int H, int W, int C)
{
    for (int f = 0; f < 4; f++) {
        int same = 1;
        for (int i = 0; i < H && same; i++)
            for (int j = 0; j < W && same; j++)
                for (int c = 0; c < C; c++)
                    same &= y[(i * W + j) * C + c] ==
                            X(x, W, C, f & 2 ? H - 1 - i : i, f & 1 ? W - 1 - j : j, c);
        if (same)
            return f;
    }
    return -1;
}

static void flips(void)
{
    enum { H = 3, W = 4, C = 2, N = 64, PER = H * W * C };
    static float x[N * PER], y[N * PER];
    for (int i = 0; i < N * PER; i++)
        x[i] = rnd();
    static const struct {
        const char *mode;
        int joint;
        unsigned allowed; /* bit f: flip combination f may occur */
    } cases[] = {{"horizontal", 0, 0x3},
                 {"vertical", 0, 0x5},
                 {"horizontal_and_vertical", 0, 0xF},
                 {"horizontal_and_vertical", 1, 0x9}};
    for (int ci = 0; ci < 4; ci++) {
        const rt_attr at[2] = {str("mode", cases[ci].mode),
                               {.name = "joint", .kind = RT_ATTR_INT, .i = cases[ci].joint}};
        train_fwd("RandomFlip", 2, at, H, W, C, N, x, y, 0);
        int count[4] = {0, 0, 0, 0}, bad = 0;
        for (int s = 0; s < N; s++) {
            const int f = which_flip(x + s * PER, y + s * PER, H, W, C);
            if (f < 0 || !(cases[ci].allowed >> f & 1))
                bad++;
            else
                count[f]++;
        }
        CHECKF(!bad, "RandomFlip %s: %d samples are not an allowed flip", cases[ci].mode, bad);
        /* each allowed combination occurs, none more than 3/4 of the time
         * (p = 1/2 or 1/4 over 64 draws) */
        for (int f = 0; f < 4; f++)
            if (cases[ci].allowed >> f & 1)
                CHECKF(count[f] >= 4 && count[f] <= 48, "RandomFlip %s joint %d: %d of %d flip %d",
                       cases[ci].mode, cases[ci].joint, count[f], N, f);
        printf("RandomFlip %-24s joint %d: none %d, lr %d, ud %d, both %d\n", cases[ci].mode,
               cases[ci].joint, count[0], count[1], count[2], count[3]);
    }
}

static void contrast_brightness(void)
{
    enum { H = 4, W = 5, C = 3, N = 16, PER = H * W * C };
    static float x[N * PER], y[N * PER];
    for (int i = 0; i < N * PER; i++)
        x[i] = 255.0f * rnd();
    const rt_attr at[4] = {flt("lower", 0.3), flt("upper", 0.4), flt("value_min", 0),
                           flt("value_max", 255)};
    train_fwd("RandomContrast", 4, at, H, W, C, N, x, y, 0);
    double fmin = 9, fmax = -9;
    int clipped = 0;
    for (int s = 0; s < N; s++) {
        const float *xs = x + s * PER, *ys = y + s * PER;
        double mean[C] = {0, 0, 0};
        for (int i = 0; i < PER; i++)
            mean[i % C] += xs[i] / (double)(H * W);
        /* the factor from the unclipped pixel farthest from its mean */
        double best = 0, f = 1;
        for (int i = 0; i < PER; i++) {
            const double dx = xs[i] - mean[i % C];
            if (ys[i] > 0 && ys[i] < 255 && fabs(dx) > best) {
                best = fabs(dx);
                f = (ys[i] - mean[i % C]) / dx;
            }
        }
        fmin = f < fmin ? f : fmin;
        fmax = f > fmax ? f : fmax;
        CHECKF(f >= 0.7 - 1e-4 && f <= 1.4 + 1e-4, "RandomContrast factor %g", f);
        for (int i = 0; i < PER; i++) {
            double t = (xs[i] - mean[i % C]) * f + mean[i % C];
            clipped += t < 0 || t > 255;
            t = t < 0 ? 0 : t > 255 ? 255 : t;
            CHECKF(fabs(ys[i] - t) < 2e-3, "RandomContrast sample %d value %d: %g, want %g", s,
                   i, (double)ys[i], t);
        }
    }
    CHECKF(fmax - fmin > 0.1, "RandomContrast: factors %g..%g do not vary per image", fmin,
           fmax);
    printf("RandomContrast (0.3, 0.4): factors in [%.3f, %.3f], %d values clipped\n", fmin, fmax,
           clipped);
    for (int i = 0; i < N * PER; i++)
        x[i] = rnd();
    const rt_attr bt[4] = {flt("lower", -0.2), flt("upper", 0.3), flt("value_min", 0),
                           flt("value_max", 1)};
    train_fwd("RandomBrightness", 4, bt, H, W, C, N, x, y, 0);
    double dmin = 9, dmax = -9;
    for (int s = 0; s < N; s++) {
        const float *xs = x + s * PER, *ys = y + s * PER;
        double delta = 0;
        for (int i = 0; i < PER; i++)
            if (ys[i] > 0 && ys[i] < 1) {
                delta = ys[i] - xs[i];
                break;
            }
        dmin = delta < dmin ? delta : dmin;
        dmax = delta > dmax ? delta : dmax;
        CHECKF(delta >= -0.2 - 1e-6 && delta <= 0.3 + 1e-6, "RandomBrightness delta %g", delta);
        for (int i = 0; i < PER; i++) {
            double t = xs[i] + delta;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            CHECKF(fabs(ys[i] - t) < 1e-6, "RandomBrightness sample %d: %g, want %g", s,
                   (double)ys[i], t);
        }
    }
    CHECKF(dmax - dmin > 0.05, "RandomBrightness: deltas %g..%g do not vary", dmin, dmax);
    printf("RandomBrightness (-0.2, 0.3): deltas in [%.3f, %.3f]\n", dmin, dmax);
}

/* predict (and so evaluate and validation, which run the same inference
 * forward) returns the input unchanged */
static void inference(void)
{
    enum { H = 5, W = 6, C = 2, N = 4, PER = H * W * C };
    float x[N * PER], y[N * PER];
    for (int i = 0; i < N * PER; i++)
        x[i] = rnd();
    static const struct {
        const char *op;
        rt_attr a[2];
    } ops[] = {{"RandomFlip", {{.name = "mode", .kind = RT_ATTR_STR, .s = "horizontal"}}},
               {"RandomRotation", {{.name = "lower", .kind = RT_ATTR_FLOAT, .f = -0.3},
                                   {.name = "upper", .kind = RT_ATTR_FLOAT, .f = 0.3}}},
               {"RandomTranslation", {{.name = "height_lower", .kind = RT_ATTR_FLOAT, .f = -0.3},
                                      {.name = "width_upper", .kind = RT_ATTR_FLOAT, .f = 0.3}}},
               {"RandomZoom", {{.name = "height_lower", .kind = RT_ATTR_FLOAT, .f = -0.3},
                               {.name = "height_upper", .kind = RT_ATTR_FLOAT, .f = 0.3}}},
               {"RandomContrast", {{.name = "lower", .kind = RT_ATTR_FLOAT, .f = 0.5},
                                   {.name = "upper", .kind = RT_ATTR_FLOAT, .f = 0.5}}},
               {"RandomBrightness", {{.name = "lower", .kind = RT_ATTR_FLOAT, .f = -0.5},
                                     {.name = "upper", .kind = RT_ATTR_FLOAT, .f = 0.5}}}};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        rt_graph *g = graph(ops[k].op, ops[k].a[1].name ? 2 : 1, ops[k].a, H, W, C, 1);
        rt_train_config cfg;
        config(&cfg, N, PER);
        rt_plan *p;
        rt_exec *e;
        char err[256];
        REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
        REQUIRE(rt_exec_create(p, &e) == 0);
        CHECK_RC(rt_exec_predict(e, x, N, y));
        CHECKF(!memcmp(x, y, sizeof x), "%s: predict changed the input", ops[k].op);
        rt_metrics m;
        rt_data d = {.x = x, .y = x, .y_dtype = RT_F32, .n = N};
        CHECK_RC(rt_exec_evaluate(e, &d, &m));
        CHECKF(m.loss == 0.0, "%s: evaluate's MSE against the input is %g", ops[k].op, m.loss);
        rt_exec_destroy(e);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    printf("inference (predict, evaluate): every op the identity\n");
}

/* the same (seed, step) draws the same transforms; the next step others */
static void reproducible(void)
{
    enum { H = 6, W = 6, C = 1, N = 8, PER = H * W * C };
    float x[N * PER], a[N * PER], b[N * PER], c[N * PER];
    for (int i = 0; i < N * PER; i++)
        x[i] = rnd();
    const rt_attr at[2] = {flt("lower", -0.2), flt("upper", 0.2)};
    train_fwd("RandomRotation", 2, at, H, W, C, N, x, a, 0);
    train_fwd("RandomRotation", 2, at, H, W, C, N, x, b, 0);
    train_fwd("RandomRotation", 2, at, H, W, C, N, x, c, 1);
    CHECK(!memcmp(a, b, sizeof a));
    int differ = 0;
    for (int s = 0; s < N; s++)
        differ += memcmp(a + s * PER, c + s * PER, sizeof(float) * PER) != 0;
    CHECKF(differ == N, "after a step only %d of %d samples drew another rotation", differ, N);
    /* samples of one batch draw different angles */
    CHECK(memcmp(a, a + PER, sizeof(float) * PER) != 0);
    printf("draws: reproducible at one step, new at the next\n");
}

static void refused(void)
{
    static const struct {
        const char *op;
        rt_attr a;
        int rank3;
        const char *msg;
    } bad[] = {
        {"RandomRotation", {.name = "fill_mode", .kind = RT_ATTR_STR, .s = "mirror"}, 0,
         "fill_mode 'mirror'"},
        {"RandomZoom", {.name = "interpolation", .kind = RT_ATTR_STR, .s = "bicubic"}, 0,
         "interpolation 'bicubic'"},
        {"RandomTranslation", {.name = "height_upper", .kind = RT_ATTR_FLOAT, .f = 1.5}, 0,
         "must lie in [-1, 1]"},
        {"RandomFlip", {.name = "mode", .kind = RT_ATTR_STR, .s = "diagonal"}, 0,
         "mode 'diagonal'"},
        {"RandomContrast", {.name = "lower", .kind = RT_ATTR_FLOAT, .f = 1.5}, 0, "lower 1.5"},
        {"RandomFlip", {.name = "mode", .kind = RT_ATTR_STR, .s = "vertical"}, 1,
         "must be images (B, H, W, C)"},
        {"RandomCrop", {.name = "height", .kind = RT_ATTR_INT, .i = 0}, 0, "height 0"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        rt_graph *g = rt_graph_create();
        const int64_t d4[4] = {RT_BATCH, 4, 4, 1}, d3[3] = {RT_BATCH, 4, 4};
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, bad[k].rank3 ? 3 : 4, bad[k].rank3 ? d3 : d4) ==
                0);
        const char *x = "x";
        REQUIRE(rt_graph_add_node(g, "y", bad[k].op, 1, &x, 1, &bad[k].a) == 0);
        rt_train_config cfg;
        config(&cfg, 2, bad[k].rank3 ? 4 : 16);
        cfg.label_ndim = bad[k].rank3 ? 2 : 3;
        cfg.label_dims[0] = 4;
        cfg.label_dims[1] = 4;
        cfg.label_dims[2] = 1;
        rt_plan *p = NULL;
        char err[256] = "";
        const int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
        CHECKF(rc < 0 && strstr(err, bad[k].msg) && strstr(err, "node 'y'"),
               "%s: rc %d, error '%s' lacks '%s'", bad[k].op, rc, err, bad[k].msg);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    printf("bad attributes and shapes: refused with the node named\n");
}

/* Keras JSON (Keras 2.15's configs, and Keras 3.6's RandomFlip with its
 * data_format) through rt_keras_import: the settings reach the op */
static rt_graph *keras(const char *layers, int H, int W, int C)
{
    char json[2048], err[256];
    snprintf(json, sizeof json,
             "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, %d, "
             "%d, %d], \"dtype\": \"float32\", \"name\": \"in\"}}, %s]}}",
             H, W, C, layers);
    rt_graph *g = NULL;
    if (rt_keras_import(json, strlen(json), &g, err, sizeof err) < 0) {
        fprintf(stderr, "import: %s\n", err);
        exit(1);
    }
    return g;
}

static void keras_import(void)
{
    enum { H = 7, W = 7, C = 2, N = 64, PER = H * W * C };
    static float x[N * PER], y[N * PER], want[N * PER];
    for (int i = 0; i < N * PER; i++)
        x[i] = rnd();
    fwd_graph(keras("{\"class_name\": \"RandomRotation\", \"config\": {\"name\": \"r\", "
                    "\"factor\": [0.25, 0.25], \"fill_mode\": \"nearest\", "
                    "\"interpolation\": \"nearest\", \"fill_value\": 0, \"seed\": 3}}",
                    H, W, C),
              "r", PER, 2, x, y, 0);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++)
                for (int c = 0; c < C; c++)
                    want[((s * H + i) * W + j) * C + c] = X(x + s * PER, W, C, j, W - 1 - i, c);
    max_err_ok("Keras RandomRotation factor [0.25, 0.25] = rot90", y, want, 2 * PER, 0.0f);
    fwd_graph(keras("{\"class_name\": \"RandomTranslation\", \"config\": {\"name\": \"t\", "
                    "\"height_factor\": [-0.2857142857142857, -0.2857142857142857], "
                    "\"width_factor\": [0.42857142857142855, 0.42857142857142855], "
                    "\"fill_mode\": \"wrap\", \"interpolation\": \"nearest\"}}",
                    H, W, C),
              "t", PER, 2, x, y, 0);
    /* up 2 rows, right 3 columns: (i, j) reads (i + 2, j - 3), wrapped */
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++)
                for (int c = 0; c < C; c++)
                    want[((s * H + i) * W + j) * C + c] =
                        X(x + s * PER, W, C, fold(i + 2, H, "wrap"), fold(j - 3, W, "wrap"), c);
    max_err_ok("Keras RandomTranslation (-2/7, 3/7) wrap = roll", y, want, 2 * PER, 0.0f);
    fwd_graph(keras("{\"class_name\": \"RandomBrightness\", \"config\": {\"name\": \"b\", "
                    "\"factor\": [0.1, 0.1], \"value_range\": [1, 0]}}",
                    H, W, C),
              "b", PER, 2, x, y, 0);
    for (int i = 0; i < 2 * PER; i++)
        want[i] = x[i] + 0.1f > 1.0f ? 1.0f : x[i] + 0.1f;
    max_err_ok("Keras RandomBrightness [0.1, 0.1] in [0, 1]", y, want, 2 * PER, 0.0f);
    /* RandomFlip: Keras 2.15 draws the two flips apart, Keras 3.6 (its
     * config holds data_format) once for both */
    for (int k3 = 0; k3 < 2; k3++) {
        char l[256];
        snprintf(l, sizeof l,
                 "{\"module\": \"keras.layers\", \"class_name\": \"RandomFlip\", \"config\": "
                 "{\"name\": \"f\", \"mode\": \"horizontal_and_vertical\", \"seed\": null%s}, "
                 "\"registered_name\": null}",
                 k3 ? ", \"data_format\": \"channels_last\"" : "");
        fwd_graph(keras(l, H, W, C), "f", PER, N, x, y, 0);
        int count[4] = {0, 0, 0, 0}, bad = 0;
        for (int s = 0; s < N; s++) {
            const int f = which_flip(x + s * PER, y + s * PER, H, W, C);
            bad += f < 0;
            count[f < 0 ? 0 : f]++;
        }
        CHECK(!bad);
        CHECKF(k3 ? count[1] == 0 && count[2] == 0 && count[0] > 8 && count[3] > 8
                  : count[0] > 4 && count[1] > 4 && count[2] > 4 && count[3] > 4,
               "Keras %d RandomFlip: %d %d %d %d", k3 ? 3 : 2, count[0], count[1], count[2],
               count[3]);
        printf("Keras %s RandomFlip both ways: none %d, lr %d, ud %d, both %d\n",
               k3 ? "3.6" : "2.15", count[0], count[1], count[2], count[3]);
    }
    /* refused settings name the layer */
    static const char *const bad[][2] = {
        {"{\"class_name\": \"RandomZoom\", \"config\": {\"name\": \"z\", \"height_factor\": 0.2, "
         "\"fill_mode\": \"mirror\"}}",
         "fill_mode 'mirror'"},
        {"{\"class_name\": \"RandomRotation\", \"config\": {\"name\": \"r\", \"factor\": [1, 2, 3]}}",
         "factor must be a number or two numbers (layer 'r')"},
        {"{\"class_name\": \"RandomTranslation\", \"config\": {\"name\": \"t\", "
         "\"height_factor\": 0.1}}",
         "needs height_factor and width_factor (layer 't')"},
        {"{\"class_name\": \"RandomContrast\", \"config\": {\"name\": \"c\", \"factor\": 0.1, "
         "\"bounding_box_format\": \"xyxy\"}}",
         "bounding_box_format"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char json[1024], err[256] = "";
        snprintf(json, sizeof json,
                 "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": "
                 "[{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4, "
                 "4, 1], \"name\": \"in\"}}, %s]}}",
                 bad[k][0]);
        rt_graph *g = NULL;
        int rc = rt_keras_import(json, strlen(json), &g, err, sizeof err);
        if (rc >= 0) {
            /* an op setting: the compile refuses it, naming the node */
            rt_train_config cfg;
            config(&cfg, 2, 16);
            cfg.label_ndim = 3;
            cfg.label_dims[0] = 4;
            cfg.label_dims[1] = 4;
            cfg.label_dims[2] = 1;
            rt_plan *p = NULL;
            rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
            rt_plan_release(p);
            rt_graph_destroy(g);
        }
        CHECKF(rc < 0 && strstr(err, bad[k][1]), "Keras case %zu: rc %d, '%s' lacks '%s'", k, rc,
               err, bad[k][1]);
    }
    printf("Keras import: settings reach the ops; bad ones refused by name\n");
}

static rt_attr inti(const char *name, int64_t v)
{
    return (rt_attr){.name = name, .kind = RT_ATTR_INT, .i = v};
}

/* the generator's input: ((k * 37) % 101) / 10 - 5 at flat index k */
static void crop_input(float *x, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        x[k] = (float)((double)((k * 37) % 101) / 10.0 - 5.0); /* as JavaScript */
}

/* g's predictions (per values a sample) for the n samples x; destroys g */
static void predict_graph(rt_graph *g, int64_t per, int n, const float *x, float *out)
{
    rt_train_config cfg;
    config(&cfg, n, per);
    rt_plan *p;
    rt_exec *e;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "predict: compile: %s\n", err);
        exit(1);
    }
    REQUIRE(rt_exec_create(p, &e) == 0);
    CHECK_RC(rt_exec_predict(e, x, n, out));
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
}

/* sample s's window offset: the (r, c) where out is x's window, -1 when
 * none is (or more than one is) */
static int crop_offset(const float *x, const float *y, int H, int W, int C, int oH, int oW,
                       int *r, int *c)
{
    int found = 0;
    for (int a = 0; a + oH <= H; a++)
        for (int b = 0; b + oW <= W; b++) {
            int same = 1;
            for (int i = 0; i < oH && same; i++)
                same = !memcmp(y + (int64_t)i * oW * C, x + ((int64_t)(a + i) * W + b) * C,
                               sizeof(float) * (size_t)(oW * C));
            if (same)
                *r = a, *c = b, found++;
        }
    return found == 1 ? 0 : -1;
}

/* outside training, and in training when the input is smaller than the
 * crop: smart_resize, against the tfjs fixture; the same through Keras 2
 * and Keras 3 JSON */
static void crop_resize(const char *path)
{
    /* values in [-5, 5]: TensorFlow (and rtrain) place the sample point in
     * float32, tfjs in double, a few ulps of the lerp apart */
    const float TOL = 5e-6f;
    json_object *doc = json_object_from_file(path);
    REQUIRE(doc);
    json_object *cases = json_object_object_get(doc, "cases");
    REQUIRE(cases && json_object_array_length(cases) >= 6);
    for (size_t k = 0; k < json_object_array_length(cases); k++) {
        json_object *c = json_object_array_get_idx(cases, k), *jy;
#define GETI(key) ((int)json_object_get_int(json_object_object_get(c, key)))
        const int N = GETI("N"), H = GETI("H"), W = GETI("W"), C = GETI("C");
        const int oH = GETI("height"), oW = GETI("width");
#undef GETI
        const int64_t per = (int64_t)oH * oW * C;
        jy = json_object_object_get(c, "y");
        REQUIRE(jy && (int64_t)json_object_array_length(jy) == N * per);
        float *x = malloc(sizeof(float) * (size_t)(N * H * W * C));
        float *want = malloc(sizeof(float) * (size_t)(N * per));
        float *got = malloc(sizeof(float) * (size_t)(N * per));
        REQUIRE(x && want && got);
        crop_input(x, (int64_t)N * H * W * C);
        for (int64_t i = 0; i < N * per; i++)
            want[i] = (float)json_object_get_double(json_object_array_get_idx(jy, (size_t)i));
        const rt_attr at[2] = {inti("height", oH), inti("width", oW)};
        char what[96];
        predict_graph(graph("RandomCrop", 2, at, H, W, C, 1), per, N, x, got);
        snprintf(what, sizeof what, "RandomCrop %dx%d -> %dx%d predict = tfjs", H, W, oH, oW);
        max_err_ok(what, got, want, N * per, TOL);
        if (H < oH || W < oW) {
            fwd_graph(graph("RandomCrop", 2, at, H, W, C, 0), "y", per, N, x, got, 0);
            snprintf(what, sizeof what, "RandomCrop %dx%d -> %dx%d training = tfjs", H, W, oH,
                     oW);
            max_err_ok(what, got, want, N * per, TOL);
        }
        for (int k3 = 0; k3 < 2; k3++) {
            char l[320];
            snprintf(l, sizeof l,
                     "{%s\"class_name\": \"RandomCrop\", \"config\": {\"name\": \"rc\", "
                     "\"height\": %d, \"width\": %d, \"seed\": 7%s}}",
                     k3 ? "\"module\": \"keras.layers\", \"registered_name\": null, " : "", oH,
                     oW, k3 ? ", \"data_format\": \"channels_last\"" : "");
            predict_graph(keras(l, H, W, C), per, N, x, got);
            snprintf(what, sizeof what, "Keras %s RandomCrop %dx%d -> %dx%d predict", k3 ? "3" : "2",
                     H, W, oH, oW);
            max_err_ok(what, got, want, N * per, TOL);
        }
        free(x);
        free(want);
        free(got);
    }
    json_object_put(doc);
}

/* training with the input at least the crop's size: windows at legal
 * offsets, drawn per sample, reproducible at a step, new at the next */
static void crop_windows(void)
{
    enum { H = 6, W = 7, C = 2, oH = 3, oW = 4, N = 48, PER = H * W * C, OPER = oH * oW * C };
    static float x[N * PER], a[N * OPER], b[N * OPER], c[N * OPER];
    for (int i = 0; i < N * PER; i++)
        x[i] = (float)i; /* distinct: a window matches at one offset */
    const rt_attr at[2] = {inti("height", oH), inti("width", oW)};
    fwd_graph(graph("RandomCrop", 2, at, H, W, C, 0), "y", OPER, N, x, a, 0);
    fwd_graph(graph("RandomCrop", 2, at, H, W, C, 0), "y", OPER, N, x, b, 0);
    fwd_graph(graph("RandomCrop", 2, at, H, W, C, 0), "y", OPER, N, x, c, 1);
    CHECK(!memcmp(a, b, sizeof a));
    int seen[H - oH + 1][W - oW + 1], distinct = 0, moved = 0, bad = 0;
    memset(seen, 0, sizeof seen);
    for (int s = 0; s < N; s++) {
        int r, q, r2, q2;
        if (crop_offset(x + s * PER, a + s * OPER, H, W, C, oH, oW, &r, &q) < 0 ||
            crop_offset(x + s * PER, c + s * OPER, H, W, C, oH, oW, &r2, &q2) < 0) {
            bad++;
            continue;
        }
        distinct += !seen[r][q]++;
        moved += r != r2 || q != q2;
    }
    CHECKF(!bad, "%d of %d samples are no window of their input", bad, N);
    const int offsets = (H - oH + 1) * (W - oW + 1);
    /* 48 draws of 16 offsets: the chance of fewer than 12 distinct is
     * below 1e-4; the test's draws are fixed by the seed */
    CHECKF(distinct >= 12, "only %d of %d offsets drawn over %d samples", distinct, offsets, N);
    CHECKF(seen[0][0] + seen[H - oH][W - oW] + seen[0][W - oW] + seen[H - oH][0] > 0,
           "no corner offset drawn");
    CHECKF(moved >= N / 2, "after a step only %d of %d samples moved their window", moved, N);
    printf("RandomCrop training: %d windows at %d of %d offsets, %d moved after a step\n", N,
           distinct, offsets, moved);
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2);
    rotations();
    translations();
    zooms();
    flips();
    contrast_brightness();
    inference();
    reproducible();
    refused();
    keras_import();
    crop_resize(argv[1]);
    crop_windows();
    return rt_test_done("test_layers_image");
}
