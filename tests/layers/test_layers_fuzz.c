/*
 * test_layers_fuzz.c - mutated Keras JSON of the new layers through import,
 * compile and (when the plan is small) a training step, predict and
 * gradients: every failure is an error code with a NUL-terminated message
 * under 200 bytes, never a crash (run it under ASan+UBSan). Each mutation
 * replaces one number of tests/layers/data/keras_{seq1d,func2d,misc}.json
 * with a value from a list of edge cases (0, negatives, 2^20, 2^31, ...)
 * or one string value with another layer setting's string. Deterministic:
 * a fixed generator seed; argv[2] is the number of mutations.
 */
#include <ctype.h>
#include <stdint.h>

#include "../engine/rt_test.h"
#include "import_keras.h"

static uint64_t s = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(uint64_t n)
{
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return n ? s % n : 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    b[n] = 0;
    fclose(f);
    return b;
}

static const char *nums[] = {"0", "-1", "1", "2", "3", "7", "-3", "1048576", "1048577",
                             "2147483648", "1e30", "0.5", "-0.5", "99999999999999999999"};
static const char *strs[] = {"\"same\"", "\"valid\"", "\"causal\"", "\"full\"", "\"bilinear\"",
                             "\"channels_first\"", "\"relu6\"", "\"nope\"", "null", "[]",
                             "[1]", "[[1, 2], [3]]", "{}", "\"\""};

/* one mutation of js into out */
static void mutate(const char *js, char *out, size_t cap)
{
    const size_t n = strlen(js);
    size_t at = 0, end = 0;
    const char *rep;
    for (int tries = 0; tries < 100; tries++) {
        size_t i = (size_t)rnd(n);
        if (rnd(2)) { /* a number */
            while (i < n && !isdigit((unsigned char)js[i])) i++;
            if (i >= n) continue;
            while (i > 0 && (isdigit((unsigned char)js[i - 1]) || js[i - 1] == '.' || js[i - 1] == '-')) i--;
            at = i;
            end = i;
            while (end < n && (isdigit((unsigned char)js[end]) || js[end] == '.' || js[end] == '-' ||
                               js[end] == 'e'))
                end++;
            rep = nums[rnd(sizeof nums / sizeof nums[0])];
        } else { /* a string value: after ": " */
            const char *p = strstr(js + i, "\": \"");
            if (!p) continue;
            at = (size_t)(p - js) + 3;
            const char *q = strchr(js + at + 1, '"');
            if (!q) continue;
            end = (size_t)(q - js) + 1;
            rep = strs[rnd(sizeof strs / sizeof strs[0])];
        }
        snprintf(out, cap, "%.*s%s%s", (int)at, js, rep, js + end);
        return;
    }
    snprintf(out, cap, "%s", js);
}

static int ok_msg(const char *err)
{
    return memchr(err, 0, 256) != NULL && strlen(err) < 200 && strlen(err) > 0;
}

int main(int argc, char **argv)
{
    REQUIRE(argc >= 2);
    const int iters = argc > 2 ? atoi(argv[2]) : 600;
    static const char *files[] = {"keras_seq1d.json", "keras_func2d.json", "keras_misc.json"};
    char *src[3];
    for (int k = 0; k < 3; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/data/%s", argv[1], files[k]);
        src[k] = slurp(path);
    }
    const size_t cap = 1 << 16;
    char *js = malloc(cap);
    REQUIRE(js);
    int imported = 0, compiled = 0, ran = 0;
    for (int it = 0; it < iters; it++) {
        const int k = (int)rnd(3);
        mutate(src[k], js, cap);
        if (rnd(3) == 0) { /* a second mutation on top */
            char *t = strdup(js);
            mutate(t, js, cap);
            free(t);
        }
        char err[256];
        memset(err, 'x', sizeof err);
        rt_graph *g = NULL;
        int rc = rt_keras_import(js, strlen(js), &g, err, sizeof err);
        if (rc < 0) {
            CHECK(g == NULL && ok_msg(err));
            continue;
        }
        imported++;
        rt_train_config cfg;
        rt_train_config_init(&cfg);
        cfg.loss = RT_LOSS_MSE;
        cfg.batch_size = 2;
        cfg.label_dtype = RT_F32;
        cfg.metrics = 0;
        rt_plan *p = NULL;
        rt_compile_report rep;
        memset(err, 'x', sizeof err);
        rc = rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err);
        rt_graph_destroy(g);
        if (rc < 0) {
            CHECK(p == NULL && ok_msg(err));
            continue;
        }
        compiled++;
        if (rep.arena_bytes + rep.param_bytes < (64u << 20)) {
            rt_exec *e;
            if (rt_exec_create(p, &e) == 0) {
                int64_t d[RT_MAX_DIMS], in_n = 1, out_n = 1;
                int nd = rt_plan_input_shape(p, d);
                for (int i = 0; i < nd; i++) in_n *= d[i];
                nd = rt_plan_output_shape(p, d);
                for (int i = 0; i < nd; i++) out_n *= d[i];
                float *x = calloc((size_t)(2 * in_n), sizeof(float));
                float *y = calloc((size_t)(2 * out_n), sizeof(float));
                REQUIRE(x && y);
                for (int64_t i = 0; i < 2 * in_n; i++) x[i] = (float)(i % 7) - 3.0f;
                rt_data dd = {.x = x, .y = y, .y_dtype = RT_F32, .n = 2};
                rt_train_result res;
                double loss;
                if (rt_exec_train(e, &dd, 1, &res, NULL, NULL, NULL) == 0) ran++;
                else if (getenv("RT_FUZZ_VERBOSE")) fprintf(stderr, "train: %s\n", rt_exec_errmsg(e));
                rt_exec_compute_grads(e, &dd, 2, &loss);
                rt_exec_predict(e, x, 2, y);
                free(x);
                free(y);
                rt_exec_destroy(e);
            }
        }
        rt_plan_release(p);
    }
    printf("%d mutations: %d imported, %d compiled, %d trained a step\n", iters, imported, compiled,
           ran);
    CHECK(imported > 0 && compiled > 0 && ran > 0);
    free(js);
    for (int k = 0; k < 3; k++) free(src[k]);
    return rt_test_done("test_layers_fuzz");
}
