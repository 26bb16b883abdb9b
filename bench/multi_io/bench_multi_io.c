/* bench_multi_io.c - the training step of a Keras model with two inputs and
 * two outputs against the same model's single-output halves (the model cut
 * at one output: the graph keeps only what that output needs), and the
 * cost of each output's metrics (see README.md). */
#define RT_BENCH_NAME "bench_multi_io"
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "bench_util.h"
#include "import_keras.h"
#include "rt_engine.h"

#define REPS 7

static int W = 256, B = 64, STEPS = 40;

static char *append(char *s, size_t *n, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static char *append(char *s, size_t *n, size_t *cap, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(s + *n, *cap - *n, fmt, ap);
        va_end(ap);
        if (k < 0) die("format", "vsnprintf");
        if (*n + (size_t)k < *cap) {
            *n += (size_t)k;
            return s;
        }
        *cap = 2 * (*cap + (size_t)k);
        if (!(s = realloc(s, *cap))) die("memory", "out of memory");
    }
}

static int first_layer;

static char *layer(char *s, size_t *n, size_t *cap, const char *cls, const char *name,
                   const char *cfg, const char *in1, const char *in2)
{
    s = append(s, n, cap, "%s{\"class_name\": \"%s\", \"name\": \"%s\", \"config\": {\"name\": "
               "\"%s\"%s%s}, \"inbound_nodes\": [", first_layer ? "" : ", ", cls, name, name,
               cfg[0] ? ", " : "", cfg);
    first_layer = 0;
    if (in1) {
        s = append(s, n, cap, "[[\"%s\", 0, 0, {}]", in1);
        if (in2) s = append(s, n, cap, ", [\"%s\", 0, 0, {}]", in2);
        s = append(s, n, cap, "]");
    }
    return append(s, n, cap, "]}");
}

/* Functional: a (32) and b (48) through Dense(W) relu each, joined, two
 * shared Dense(W) relu, then "cls" Dense(10) softmax and "reg" Dense(4);
 * outs: which outputs the model has (1 cls, 2 reg, 3 both) */
static char *model_json(int outs)
{
    size_t n = 0, cap = 4096;
    char *s = malloc(cap), c[256];
    if (!s) die("memory", "out of memory");
    s = append(s, &n, &cap, "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", "
               "\"layers\": [");
    first_layer = 1;
    s = layer(s, &n, &cap, "InputLayer", "a", "\"batch_input_shape\": [null, 32]", NULL, NULL);
    s = layer(s, &n, &cap, "InputLayer", "b", "\"batch_input_shape\": [null, 48]", NULL, NULL);
    snprintf(c, sizeof c, "\"units\": %d, \"activation\": \"relu\"", W);
    s = layer(s, &n, &cap, "Dense", "ha", c, "a", NULL);
    s = layer(s, &n, &cap, "Dense", "hb", c, "b", NULL);
    s = layer(s, &n, &cap, "Concatenate", "j", "\"axis\": -1", "ha", "hb");
    s = layer(s, &n, &cap, "Dense", "s1", c, "j", NULL);
    s = layer(s, &n, &cap, "Dense", "s2", c, "s1", NULL);
    s = layer(s, &n, &cap, "Dense", "cls", "\"units\": 10, \"activation\": \"softmax\"", "s2",
              NULL);
    s = layer(s, &n, &cap, "Dense", "reg", "\"units\": 4, \"activation\": \"linear\"", "s2",
              NULL);
    s = append(s, &n, &cap, "], \"input_layers\": [[\"a\", 0, 0], [\"b\", 0, 0]], "
               "\"output_layers\": [%s%s%s]}, \"compile_config\": {\"loss\": {\"cls\": "
               "\"sparse_categorical_crossentropy\", \"reg\": \"mse\"}, \"loss_weights\": "
               "{\"cls\": 1.0, \"reg\": 0.5}, \"metrics\": {\"cls\": [\"accuracy\"], \"reg\": "
               "[\"mae\"]}}}",
               outs & 1 ? "[\"cls\", 0, 0]" : "", outs == 3 ? ", " : "",
               outs & 2 ? "[\"reg\", 0, 0]" : "");
    return s;
}

/* median seconds per step over REPS runs of STEPS steps (after a warm-up
 * run); metrics: each output's (two outputs) or the model's */
static double step_time(int outs, int metrics, int64_t *params)
{
    char *js = model_json(outs), err[2048];
    rt_graph *g = NULL;
    if (rt_keras_import(js, strlen(js), &g, err, sizeof err) < 0) die("import", err);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.opt = RT_OPT_ADAM;
    cfg.batch_size = B;
    cfg.seed = 1;
    cfg.metrics = 0;
    cfg.label_dtype = RT_F32;
    cfg.loss = outs == 2 ? RT_LOSS_MSE : RT_LOSS_SPARSE_CE;
    if (outs == 2) {
        cfg.label_ndim = 1;
        cfg.label_dims[0] = 4;
    }
    if (metrics && outs != 3) cfg.metrics = outs == 1 ? RT_METRIC_ACCURACY : RT_METRIC_MAE;
    if (outs == 3) {
        if (rt_keras_heads(js, strlen(js), &cfg, err, sizeof err) != 2) die("heads", err);
        if (!metrics) cfg.heads[0].metrics = cfg.heads[1].metrics = 0;
    }
    rt_plan *p = NULL;
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) die("compile", err);
    const rt_compile_report *rep = rt_plan_report(p);
    *params = (int64_t)rep->param_count;
    int64_t d[RT_MAX_DIMS], xn = 1;
    for (int i = 0, k = rt_plan_input_shape(p, d); i < k; i++) xn *= d[i];
    const int64_t yn = outs == 3 ? 1 + 4 : outs == 1 ? 1 : 4, N = (int64_t)B * STEPS;
    float *x = malloc(sizeof(float) * (size_t)(N * xn)), *y = malloc(sizeof(float) * (size_t)(N * yn));
    if (!x || !y) die("memory", "out of memory");
    for (int64_t i = 0; i < N * xn; i++) x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < yn; j++)
            y[i * yn + j] = j == 0 && outs != 2 ? (float)(i % 10) : (float)((i + j) % 7) / 7.0f;
    rt_exec *e = NULL;
    if (rt_exec_create(p, &e) < 0) die("exec", "create");
    rt_data dd = {.x = x, .y = y, .y_dtype = RT_F32, .n = N};
    rt_train_result r;
    if (rt_exec_train(e, &dd, STEPS, &r, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
    double t[REPS];
    for (int k = 0; k < REPS; k++) {
        double t0 = now_s();
        if (rt_exec_train(e, &dd, STEPS, &r, NULL, NULL, NULL) < 0) die("train", rt_exec_errmsg(e));
        t[k] = (now_s() - t0) / STEPS;
    }
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    free(js);
    free(x);
    free(y);
    return median(t, REPS);
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--width")) W = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) STEPS = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--width W] [--batch B] [--steps S]\n", argv[0]);
            return 2;
        }
    }
    if (W < 1 || B < 1 || STEPS < 1) die("arguments", "width, batch and steps must be >= 1");
    int64_t pc, ph1, ph2, pm;
    const double both = step_time(3, 1, &pc), bare = step_time(3, 0, &pm),
                 h1 = step_time(1, 1, &ph1), h2 = step_time(2, 1, &ph2);
    printf("two inputs (32, 48), Dense width %d, batch %d, Adam; median of %d runs of %d "
           "steps\n", W, B, REPS, STEPS);
    printf("%-40s %10s %12s %10s\n", "model", "params", "us/step", "ratio");
    printf("%-40s %10lld %12.1f %10.3f\n", "two outputs, each with its metric", (long long)pc,
           both * 1e6, 1.0);
    printf("%-40s %10lld %12.1f %10.3f\n", "two outputs, no metrics", (long long)pm, bare * 1e6,
           bare / both);
    printf("%-40s %10lld %12.1f %10.3f\n", "half: cls only (accuracy)", (long long)ph1, h1 * 1e6,
           h1 / both);
    printf("%-40s %10lld %12.1f %10.3f\n", "half: reg only (mae)", (long long)ph2, h2 * 1e6,
           h2 / both);
    printf("two outputs / (cls half + reg half): %.3f; / the larger half: %.3f\n",
           both / (h1 + h2), both / (h1 > h2 ? h1 : h2));
    return 0;
}
