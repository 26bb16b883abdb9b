/* fuzz_backend_diff.c - differential fuzzing of the backends
 * (docs/backends.md): the input's bytes choose a small valid graph (a chain
 * of ops drawn from the op table, with their shapes, attributes, fusable
 * pairs), a loss, an optimizer and the data; the graph then runs on cpu and
 * ref (tests/engine/rt_diff.h): the forward pass, the first backward pass
 * and three updates (SGD) or one (the adaptive optimizers: see below). A disagreement beyond tolerance is a crash. A
 * combination compile refuses (a loss that does not fit the output) is
 * skipped; so is everything on a build with one backend.
 *
 * Tolerances: test_backend_diff.c's derivation, at the widest shapes drawn
 * here (K <= 6 * 6 * 4 * 3 = 432 terms); a graph of random ops can also put
 * an operation near a singularity (Div by ~0, Sqrt near 0, exp of a large
 * value) where float and double honestly differ more, so relative parts are
 * 10x test_backend_diff's. A loss near 0 (a confident right prediction) is
 * lse(z) - z_t, two values of |z| ~ 10 whose float difference carries
 * ulp(10) ~ 1e-6 absolute error however small it is: loss_abs 1e-5 (the
 * fourth finding). */
#include <stdint.h>
#include <string.h>

#include "rt_diff.h"

static const rt_diff_tol tol = {
    .fwd_abs = 1e-4, .fwd_rel = 1e-3,
    .grad_abs = 1e-4, .grad_rel = 1e-2,
    .loss_abs = 1e-5, .loss_rel = 1e-3,
    .w_abs = 1e-4, .w_rel = 1e-2,
};

typedef struct src {
    const uint8_t *p;
    size_t n, i;
} src;

static unsigned pick(src *s, unsigned n)
{
    const unsigned v = s->i < s->n ? s->p[s->i] : 0;
    s->i++;
    return n ? v % n : 0;
}

/* a value for data: a deterministic stream from the input's bytes */
static uint64_t st;
static float val(void)
{
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (float)((double)(st >> 11) / 4503599627370496.0 - 1.0); /* [-1, 1) */
}

typedef struct gb {
    rt_graph *g;
    char cur[32];
    int k;            /* names made */
    int img;          /* current value is (H, W, C), else (F) */
    int64_t H, W, C, F;
    int bad;
    int norms;        /* BatchNorm/LayerNorm nodes so far */
} gb;

static const char *nm(gb *b, const char *pre)
{
    static char buf[8][32];
    char *o = buf[b->k % 8];
    snprintf(o, 32, "%s%d", pre, b->k++);
    return o;
}

static void param(gb *b, const char *name, int nd, const int64_t *d, rt_init init)
{
    if (rt_graph_add_param(b->g, name, nd, d, init, 1, NULL) < 0) b->bad = 1;
}

static void add(gb *b, const char *op, int n, const char **in, int na, const rt_attr *at)
{
    const char *name = nm(b, "n");
    if (rt_graph_add_node(b->g, name, op, n, in, na, at) < 0) b->bad = 1;
    if (getenv("RT_FUZZ_VERBOSE")) {
        fprintf(stderr, "  %s = %s(", name, op);
        for (int i = 0; i < n; i++) fprintf(stderr, "%s%s", i ? ", " : "", in[i]);
        for (int i = 0; i < na; i++)
            if (at[i].kind == RT_ATTR_STR) fprintf(stderr, ", %s=%s", at[i].name, at[i].s);
            else if (at[i].kind == RT_ATTR_FLOAT) fprintf(stderr, ", %s=%g", at[i].name, at[i].f);
            else if (at[i].kind == RT_ATTR_INTS)
                fprintf(stderr, ", %s=%lld..", at[i].name, (long long)at[i].ints[0]);
        fprintf(stderr, ")\n");
    }
    snprintf(b->cur, sizeof b->cur, "%s", name);
}

static void unary(gb *b, const char *op)
{
    const char *in[1] = {b->cur};
    add(b, op, 1, in, 0, NULL);
}

static void dense(gb *b, int64_t N, const char *act)
{
    char w[32], bb[32];
    snprintf(w, sizeof w, "%s", nm(b, "w"));
    snprintf(bb, sizeof bb, "%s", nm(b, "b"));
    const int64_t dw[2] = {b->F, N}, db[1] = {N};
    param(b, w, 2, dw, RT_INIT_GLOROT_UNIFORM);
    param(b, bb, 1, db, RT_INIT_GLOROT_UNIFORM);
    const char *in[3] = {b->cur, w, bb};
    const rt_attr a = {.name = "activation", .kind = RT_ATTR_STR, .s = act};
    add(b, "Dense", 3, in, act ? 1 : 0, &a);
    b->F = N;
}

static void flatten(gb *b)
{
    if (!b->img) return;
    unary(b, "Flatten");
    b->F = b->H * b->W * b->C;
    b->img = 0;
}

/* the unary activations of op_act.c and op_eltwise.c */
static const char *const acts[] = {"Relu", "Sigmoid", "Tanh", "Elu", "Selu", "LeakyRelu",
                                   "Gelu", "Softplus", "Softsign", "HardSigmoid", "Swish",
                                   "Mish", "HardSwish", "LogSigmoid", "Erf", "Identity"};

static void op_flat(gb *b, src *s)
{
    unsigned k = pick(s, 8);
    /* One normalisation per graph. A channel (or row) constant over the
     * batch, which a Max/Min against a parameter or a single row makes,
     * normalises to 0 with 1/sqrt(eps) = 31.6 times the rounding noise in
     * its gradient; each more BatchNorm multiplies that again, past any
     * float tolerance (the second finding below). */
    if ((k == 3 || k == 7) && b->norms++) k = 1;
    switch (k) {
    case 0: {
        static const char *const da[] = {NULL, "relu", "sigmoid", "tanh"};
        /* one draw a statement: argument order is the compiler's */
        const int64_t N = 1 + pick(s, 8);
        dense(b, N, da[pick(s, 4)]);
        break;
    }
    case 1: unary(b, acts[pick(s, sizeof acts / sizeof acts[0])]); break;
    case 2: {
        /* a binary against a parameter broadcast over the batch */
        static const char *const bin[] = {"Add", "Sub", "Mul", "Max", "Min"};
        char w[32];
        snprintf(w, sizeof w, "%s", nm(b, "p"));
        const int64_t d[1] = {pick(s, 2) ? b->F : 1};
        param(b, w, 1, d, RT_INIT_GLOROT_UNIFORM);
        const char *in[2] = {b->cur, w};
        add(b, bin[pick(s, 5)], 2, in, 0, NULL);
        break;
    }
    case 3: {
        char g[32], bt[32];
        snprintf(g, sizeof g, "%s", nm(b, "g"));
        snprintf(bt, sizeof bt, "%s", nm(b, "t"));
        const int64_t d[1] = {b->F};
        param(b, g, 1, d, RT_INIT_ONES);
        param(b, bt, 1, d, RT_INIT_GLOROT_UNIFORM); /* not 0: see BatchNorm's */
        const char *in[3] = {b->cur, g, bt};
        add(b, "LayerNormalization", 3, in, 0, NULL);
        break;
    }
    case 4: {
        const rt_attr r = {.name = "rate", .kind = RT_ATTR_FLOAT, .f = 0.1 * (1 + pick(s, 5))};
        const char *in[1] = {b->cur};
        add(b, "Dropout", 1, in, 1, &r);
        break;
    }
    case 5: {
        /* Dense then a separate activation: the CPU fuses the pair */
        const int64_t N = 1 + pick(s, 8);
        dense(b, N, NULL);
        unary(b, pick(s, 2) ? "Relu" : "Tanh");
        break;
    }
    case 6: {
        /* Concat of the value with a Dense of it */
        const char *x = nm(b, "c");
        char keep[32];
        snprintf(keep, sizeof keep, "%s", b->cur);
        const int64_t F0 = b->F;
        dense(b, 1 + pick(s, 4), "tanh");
        const char *in[2] = {keep, b->cur};
        const rt_attr ax = {.name = "axis", .kind = RT_ATTR_INT, .i = -1};
        (void)x;
        add(b, "Concat", 2, in, 1, &ax);
        b->F += F0;
        break;
    }
    default: {
        char w[32], bt[32], m[32], v[32];
        snprintf(w, sizeof w, "%s", nm(b, "bg"));
        snprintf(bt, sizeof bt, "%s", nm(b, "bb"));
        snprintf(m, sizeof m, "%s", nm(b, "bm"));
        snprintf(v, sizeof v, "%s", nm(b, "bv"));
        const int64_t d[1] = {b->F};
        param(b, w, 1, d, RT_INIT_ONES);
        /* beta not 0: a channel constant over the batch (one row, or a Max
         * against a parameter) normalises to beta, which ref gives exactly
         * and the CPU's folded x s + (beta - mean s), contracted to an FMA,
         * gives with the rounding of mean s; at beta = 0 a Relu after it
         * then passes a gradient ref's blocks. That tie is the first
         * finding below; off the kink both agree. */
        param(b, bt, 1, d, RT_INIT_GLOROT_UNIFORM);
        if (rt_graph_add_param(b->g, m, 1, d, RT_INIT_ZEROS, 0, NULL) < 0 ||
            rt_graph_add_param(b->g, v, 1, d, RT_INIT_ONES, 0, NULL) < 0)
            b->bad = 1;
        const char *in[5] = {b->cur, w, bt, m, v};
        add(b, "BatchNorm", 5, in, 0, NULL);
        break;
    }
    }
}

static void op_img(gb *b, src *s)
{
    const rt_attr pads[2] = {{.name = "padding", .kind = RT_ATTR_STR, .s = "same"},
                             {.name = "padding", .kind = RT_ATTR_STR, .s = "valid"}};
    switch (pick(s, 6)) {
    case 0:
    case 1: {
        /* Conv2D, maybe with its activation, maybe followed by a
         * non-overlapping MaxPool2D (the CPU fusion) */
        const int64_t k = 1 + pick(s, 3);
        const int64_t OC = 1 + pick(s, 4);
        const int64_t st2 = 1 + pick(s, 2);
        char w[32];
        snprintf(w, sizeof w, "%s", nm(b, "k"));
        const int64_t d[4] = {k, k, b->C, OC};
        param(b, w, 4, d, RT_INIT_GLOROT_UNIFORM);
        const int same = pick(s, 2) == 0;
        const rt_attr at[3] = {pads[same ? 0 : 1],
                               {.name = "strides", .kind = RT_ATTR_INTS, .n = 2,
                                .ints = st2 == 2 ? (const int64_t[]){2, 2} : (const int64_t[]){1, 1}},
                               {.name = "activation", .kind = RT_ATTR_STR, .s = "relu"}};
        const char *in[2] = {b->cur, w};
        add(b, "Conv2D", 2, in, pick(s, 2) ? 3 : 2, at);
        b->H = same ? (b->H + st2 - 1) / st2 : (b->H - k) / st2 + 1;
        b->W = same ? (b->W + st2 - 1) / st2 : (b->W - k) / st2 + 1;
        b->C = OC;
        if (b->H >= 2 && b->W >= 2 && pick(s, 2)) {
            unary(b, "MaxPool2D");
            b->H /= 2;
            b->W /= 2;
        }
        break;
    }
    case 2:
        if (b->H >= 2 && b->W >= 2) {
            const rt_attr at[2] = {{.name = "strides", .kind = RT_ATTR_INTS, .n = 2,
                                    .ints = (const int64_t[]){1, 1}}, pads[0]};
            const char *in[1] = {b->cur};
            add(b, pick(s, 2) ? "AvgPool2D" : "MaxPool2D", 1, in, 2, at);
        }
        break;
    case 3: {
        const rt_attr sc = {.name = "scales", .kind = RT_ATTR_INTS, .n = 2,
                            .ints = (const int64_t[]){2, 2}};
        const rt_attr md[2] = {sc, {.name = "mode", .kind = RT_ATTR_STR,
                                    .s = pick(s, 2) ? "bilinear" : "nearest"}};
        if (b->H * 2 <= 8 && b->W * 2 <= 8) {
            const char *in[1] = {b->cur};
            add(b, "Upsample", 1, in, 2, md);
            b->H *= 2;
            b->W *= 2;
        }
        break;
    }
    case 4: {
        const int64_t OC = 1 + pick(s, 3);
        char w[32];
        snprintf(w, sizeof w, "%s", nm(b, "ct"));
        const int64_t d[4] = {2, 2, OC, b->C};
        param(b, w, 4, d, RT_INIT_GLOROT_UNIFORM);
        const rt_attr at[2] = {{.name = "strides", .kind = RT_ATTR_INTS, .n = 2,
                                .ints = (const int64_t[]){2, 2}}, pads[0]};
        if (b->H * 2 <= 8 && b->W * 2 <= 8) {
            const char *in[2] = {b->cur, w};
            add(b, "ConvTranspose", 2, in, 2, at);
            b->H *= 2;
            b->W *= 2;
            b->C = OC;
        }
        break;
    }
    default:
        unary(b, acts[pick(s, sizeof acts / sizeof acts[0])]);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (rt_backend_select("cpu") < 0 || rt_backend_select("ref") < 0) return 0;
    src s = {data, size, 0};
    gb b = {.g = rt_graph_create()};
    if (!b.g) return 0;
    st = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < size; i++) st = (st ^ data[i]) * 0x100000001b3ull;
    if (!st) st = 1;
    b.img = pick(&s, 2);
    int64_t in_dims[4] = {RT_BATCH, 0, 0, 0}, in_numel;
    int nd;
    if (b.img) {
        b.H = 2 + pick(&s, 5);
        b.W = 2 + pick(&s, 5);
        b.C = 1 + pick(&s, 3);
        in_dims[1] = b.H;
        in_dims[2] = b.W;
        in_dims[3] = b.C;
        nd = 4;
        in_numel = b.H * b.W * b.C;
    } else {
        b.F = 1 + pick(&s, 8);
        in_dims[1] = b.F;
        nd = 2;
        in_numel = b.F;
    }
    if (rt_graph_add_input(b.g, "x", RT_F32, nd, in_dims) < 0) b.bad = 1;
    snprintf(b.cur, sizeof b.cur, "x");
    const int nops = 1 + pick(&s, 5);
    for (int i = 0; i < nops && !b.bad; i++) {
        if (b.img && pick(&s, 4) == 0) flatten(&b);
        if (b.img) op_img(&b, &s);
        else op_flat(&b, &s);
    }
    if (b.img && pick(&s, 2)) {
        unary(&b, pick(&s, 2) ? "GlobalAvgPool" : "GlobalMaxPool");
        b.F = b.C;
        b.img = 0;
    }
    flatten(&b);
    /* the head: a loss and what it reads */
    const int64_t C = 2 + pick(&s, 3);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    int lab_i32 = 0;
    int64_t lab = C;
    switch (pick(&s, 6)) {
    case 0: dense(&b, C, NULL); unary(&b, "Softmax"); cfg.loss = RT_LOSS_SPARSE_CE; lab_i32 = 1; lab = 1; break;
    case 1: dense(&b, C, NULL); unary(&b, "Softmax"); cfg.loss = RT_LOSS_CE; break;
    case 2: dense(&b, C, "sigmoid"); cfg.loss = RT_LOSS_BCE; break;
    case 3: dense(&b, C, NULL); cfg.loss = RT_LOSS_MSE; break;
    case 4: dense(&b, C, NULL); cfg.loss = RT_LOSS_MAE; break;
    default: dense(&b, C, NULL); cfg.loss = RT_LOSS_LOGCOSH; break;
    }
    static const rt_opt_kind opts[] = {RT_OPT_SGD, RT_OPT_ADAM, RT_OPT_ADAMW, RT_OPT_RMSPROP};
    cfg.opt = opts[pick(&s, 4)];
    cfg.lr = 0.01f;
    cfg.momentum = pick(&s, 2) ? 0.9f : 0.0f;
    cfg.nesterov = (int)pick(&s, 2);
    cfg.clip_norm = pick(&s, 3) == 0 ? 0.5f : 0.0f;
    cfg.batch_size = 1 + (int)pick(&s, 6);
    cfg.seed = pick(&s, 256);
    cfg.label_dtype = lab_i32 ? RT_I32 : RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = lab;
    if (getenv("RT_FUZZ_VERBOSE"))
        fprintf(stderr, "  loss %s, optimizer %d lr %g momentum %g nesterov %d clip %g, batch %d\n",
                rt_loss_name(cfg.loss), (int)cfg.opt, (double)cfg.lr, (double)cfg.momentum,
                cfg.nesterov, (double)cfg.clip_norm, cfg.batch_size);
    if (b.bad) {
        rt_graph_destroy(b.g);
        return 0;
    }
    const int64_t n = cfg.batch_size;
    float *x = malloc(sizeof(float) * (size_t)(n * in_numel));
    void *y = malloc(4 * (size_t)(n * lab));
    if (!x || !y) abort();
    for (int64_t i = 0; i < n * in_numel; i++) x[i] = val();
    for (int64_t i = 0; i < n * lab; i++) {
        const float v = val();
        if (lab_i32) ((int32_t *)y)[i] = (int32_t)((v + 1) * 0.5f * (float)C) % (int32_t)C;
        else if (cfg.loss == RT_LOSS_CE) ((float *)y)[i] = i % C == 0 ? 1.0f : 0.0f;
        else if (cfg.loss == RT_LOSS_BCE) ((float *)y)[i] = v > 0 ? 1.0f : 0.0f;
        else ((float *)y)[i] = v;
    }
    rt_data d = {.x = x, .y = y, .y_dtype = lab_i32 ? RT_I32 : RT_F32, .n = n};
    rt_diff_stats dst;
    char why[320] = "";
    /* SGD: three updates. An adaptive optimizer moves an element whose
     * gradient is rounding noise by up to lr, its direction the noise's
     * (rt_diff.h); a second step would carry that into every value
     * downstream, so those are compared over one update. */
    const int steps = cfg.opt == RT_OPT_SGD ? 3 : 1;
    const int rc = rt_diff_run(b.g, &cfg, &d, steps, &tol, &dst, why, sizeof why);
    if (rc == 0) {
        fprintf(stderr, "backends disagree: %s\n", why);
        abort();
    }
    if (getenv("RT_FUZZ_VERBOSE"))
        fprintf(stderr, "%s: fwd %.3f grad %.3f loss %.3f w %.3f of tolerance%s%s\n",
                rc == 1 ? "agree" : "skipped", dst.fwd, dst.grad, dst.loss, dst.w,
                rc == 1 ? "" : ": ", rc == 1 ? "" : why);
    free(x);
    free(y);
    rt_graph_destroy(b.g);
    return 0;
}
