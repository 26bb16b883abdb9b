/*
 * test_keras_corpus.c - real model.to_json() / TF.js model.json files from
 * public repositories (tests/fixtures/keras-corpus, sources in SOURCES;
 * also run on tests/fixtures/keras-derived, corpus files with recurrent
 * dropout and step masks switched on by its gen_derived.py):
 * every model whose layers are all built-in Keras layers imports, compiles
 * and trains one epoch on synthetic data of its own input and output shape.
 *
 * A model that fails is one of:
 *   - not built-in: it holds a Lambda, TF op or custom class; the error must
 *     say so (and the model is outside the goal);
 *   - pending: every problem is an unknown layer on the list of layers being
 *     added on other branches (PENDING below); the error names them, and
 *     the count is reported so it can be re-run once they land;
 * A model whose input has a null (variable) dim, a sequence of any length,
 * is imported again with that dim bound (rt_keras_import_dims, as a compile
 * request's input_dims does) to VARLEN_BIND, and must train like the rest.
 *   - a failure of this test (anything else).
 * Every config field of every placed layer is classified through
 * rt_keras_import_ex's callback (read / inert / unsupported); the table is
 * printed, and an unsupported field in a model whose layers are all
 * supported fails the import and so the test.
 *
 *   test_keras_corpus <corpus dir> <docs/keras-fields.md> [max params]
 *                     [min models, default 30: the corpus size]
 *
 * Models with more parameters than max params (default: no limit) are
 * imported and compiled but not trained, and counted apart: ctest passes
 * 7,000,000 so the suite stays fast (a 66M-parameter model's epoch needs
 * 1 GB); bench/keras_import trains them all.
 */
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "import_keras.h"
#include "rt_engine.h"
#include "rtrain/rt_error.h"

#define VARLEN_BIND 20

static int failures;
#define FAIL(...)                                                                  \
    do {                                                                           \
        fprintf(stderr, "FAIL " __VA_ARGS__);                                      \
        fputc('\n', stderr);                                                       \
        failures++;                                                                \
    } while (0)

/* Layers issue 11 adds on other branches (klayers, rnn). */
static const char *const PENDING[] = {
    "Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum",
    "ZeroPadding1D", "ZeroPadding2D", "Cropping1D", "Cropping2D", "UpSampling1D",
    "UpSampling2D", "Permute", "RepeatVector", "Conv1D", "DepthwiseConv2D",
    "SeparableConv2D", "Conv2DTranspose", "MaxPooling1D", "AveragePooling1D",
    "GlobalMaxPooling1D", "GlobalAveragePooling1D", "GlobalMaxPooling2D", "Embedding",
    "SimpleRNN", "GRU", "LSTM", "Bidirectional", "LayerNormalization", "LeakyReLU",
    "PReLU", "ELU", "ReLU", "Softmax", "ThresholdedReLU", "SpatialDropout1D",
    "SpatialDropout2D", "GaussianNoise", "GaussianDropout",
    "MaxPool1D", "AvgPool1D", "GlobalMaxPool1D", "GlobalAvgPool1D", "GlobalMaxPool2D",
    "Convolution1D", NULL,
};

/* Activations issue 11 adds on the klayers branch. */
static const char *const PENDING_ACT[] = {
    "elu", "selu", "gelu", "swish", "silu", "softplus", "softsign", "hard_sigmoid",
    "relu6", "exponential", NULL,
};

/* Keras' built-in layer classes (Keras 1, 2, 3 and TF.js spellings) that
 * corpus models use or could; any other class is a custom one. */
static const char *const BUILTIN[] = {
    "InputLayer", "Dense", "Activation", "Dropout", "Flatten", "Reshape", "Conv2D",
    "Convolution2D", "Conv1D", "Convolution1D", "MaxPooling2D", "MaxPool2D",
    "AveragePooling2D", "AvgPool2D", "GlobalAveragePooling2D", "GlobalAvgPool2D",
    "BatchNormalization", "Concatenate", "Merge", "Rescaling", "Sequential", "Functional",
    "Model", "TimeDistributed", "Lambda", "Masking", NULL,
};

/* Built-in classes outside issue 11's layer list, with the reason. */
static const char *const OUT_OF_SCOPE[] = {NULL};

static int in_list(const char *const *l, const char *s)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], s))
            return 1;
    return 0;
}

/* the layer classes of a model: every "layers" list and wrapper "layer" */
static void classes_of(json_object *o, char names[][48], int *n, int max)
{
    if (json_object_is_type(o, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(o); i++)
            classes_of(json_object_array_get_idx(o, i), names, n, max);
        return;
    }
    if (!json_object_is_type(o, json_type_object))
        return;
    json_object_object_foreach(o, k, v) {
        if ((!strcmp(k, "layers") && json_object_is_type(v, json_type_array)) ||
            (!strcmp(k, "layer") && json_object_is_type(v, json_type_object)) ||
            (!strcmp(k, "config") && json_object_is_type(v, json_type_array))) {
            json_object *items = v;
            size_t cnt = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 1;
            for (size_t i = 0; i < cnt; i++) {
                json_object *l = json_object_is_type(v, json_type_array)
                                     ? json_object_array_get_idx(items, i) : items;
                json_object *cn;
                if (json_object_object_get_ex(l, "class_name", &cn) &&
                    json_object_is_type(cn, json_type_string)) {
                    const char *c = json_object_get_string(cn);
                    int have = 0;
                    for (int j = 0; j < *n && !have; j++) have = !strcmp(names[j], c);
                    if (!have && *n < max) snprintf(names[(*n)++], 48, "%s", c);
                }
            }
        }
        classes_of(v, names, n, max);
    }
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

/* ---------------------------------------------------------- field table */

typedef struct field {
    char cls[48], key[48];
    int kind;
    int count;
} field;
static field fields[2048];
static int n_fields;

static void on_field(void *ud, const char *cls, const char *key, rt_keras_field_kind kind)
{
    (void)ud;
    for (int i = 0; i < n_fields; i++)
        if (!strcmp(fields[i].cls, cls) && !strcmp(fields[i].key, key) &&
            fields[i].kind == (int)kind) {
            fields[i].count++;
            return;
        }
    if (n_fields == 2048)
        return;
    field *f = &fields[n_fields++];
    snprintf(f->cls, sizeof f->cls, "%s", cls);
    snprintf(f->key, sizeof f->key, "%s", key);
    f->kind = (int)kind;
    f->count = 1;
}

/* ------------------------------------------------------- a model's layers */

/* "Lambda", custom classes and recorded TF ops are not built-in layers. */
static int not_builtin(const char *msg)
{
    return strstr(msg, "holds Python code") || strstr(msg, "custom class") ||
           strstr(msg, "TensorFlow operation");
}

/* Every problem shown in the message is an unknown pending layer or an
 * unsupported pending activation (a long message ends "and N more"; the
 * rest are checked through the model's classes). Names go into names. */
static int only_pending(const char *msg, char *names, size_t nl)
{
    names[0] = 0;
    int n = 0, bad = 0;
    const char *p = strstr(msg, "problems: ");
    p = p ? p + strlen("problems: ") : msg;
    while (*p) {
        const char *end = strstr(p, "; ");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char one[512];
        snprintf(one, sizeof one, "%.*s", (int)(len < 511 ? len : 511), p);
        const char *q;
        char what[64] = "";
        if ((q = strstr(one, "unknown Keras layer '")) == one) {
            sscanf(q + strlen("unknown Keras layer '"), "%63[^']", what);
            bad |= !in_list(PENDING, what);
        } else if ((q = strstr(one, "unsupported activation '")) != NULL) {
            sscanf(q + strlen("unsupported activation '"), "%63[^']", what);
            bad |= !in_list(PENDING_ACT, what);
        } else if (strncmp(one, "and ", 4) == 0 && strstr(one, " more")) {
            what[0] = 0;
        } else {
            bad = 1;
        }
        if (what[0] && !strstr(names, what) && strlen(names) + strlen(what) + 2 < nl) {
            if (names[0]) strcat(names, ",");
            strcat(names, what);
        }
        n++;
        p += len;
        if (*p) p += 2;
    }
    return n > 0 && !bad;
}

/* -------------------------------------------------------------- training */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* compile with MSE against labels of the output's shape and train one
 * epoch of 2 batches of 2; returns 0 or a negative code (err says why).
 * indices: the model reads its input through an Embedding, so the inputs
 * are token indices (0 or 1) instead of values in [-1, 1). */
static int train_one_epoch(rt_graph *g, char *err, size_t errlen, uint64_t *params,
                           double *loss, uint64_t max_params, int indices)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.batch_size = 2;
    cfg.opt = RT_OPT_SGD;
    cfg.lr = 1e-3f;
    cfg.metrics = 0;
    rt_plan *p = NULL;
    /* the label shape is the output's: compile once to learn it */
    rt_compile_report rep;
    int rc = rt_plan_compile(g, &cfg, &p, &rep, err, errlen);
    if (rc == RT_ESHAPE) {
        /* an output of rows (a sequence of per-step values) does not take
         * one label per sample; a one-hot loss takes the output's shape */
        cfg.loss = RT_LOSS_CE;
        rc = rt_plan_compile(g, &cfg, &p, &rep, err, errlen);
        cfg.loss = RT_LOSS_MSE;
    }
    if (rc < 0)
        return rc;
    int64_t od[RT_MAX_DIMS], id[RT_MAX_DIMS];
    int on = rt_plan_output_shape(p, od), in = rt_plan_input_shape(p, id);
    rt_plan_release(p);
    cfg.label_ndim = on;
    memcpy(cfg.label_dims, od, sizeof od);
    if ((rc = rt_plan_compile(g, &cfg, &p, &rep, err, errlen)) < 0)
        return rc;
    *params = rep.param_count;
    if (max_params && rep.param_count > max_params) {
        rt_plan_release(p);
        return 1;
    }
    int64_t xn = 1, yn = 1;
    for (int i = 0; i < in; i++) xn *= id[i];
    for (int i = 0; i < on; i++) yn *= od[i];
    const int64_t n = 4;
    float *x = malloc(sizeof(float) * (size_t)(xn * n));
    float *y = malloc(sizeof(float) * (size_t)(yn * n));
    for (int64_t i = 0; i < xn * n; i++) x[i] = indices ? (float)(frand() > 0.0f) : frand();
    for (int64_t i = 0; i < yn * n; i++) y[i] = 0.5f * (frand() + 1.0f);
    rt_exec *e = NULL;
    rc = rt_exec_create(p, &e);
    rt_train_result r;
    memset(&r, 0, sizeof r);
    if (rc == 0) {
        rt_data d = {.x = x, .y = y, .y_dtype = RT_F32, .n = n};
        rc = rt_exec_train(e, &d, 2, &r, NULL, NULL, NULL);
        if (rc < 0)
            snprintf(err, errlen, "train: %s", rt_exec_errmsg(e));
        else if (r.steps_run != 2 || !(r.mean.loss >= 0) || r.mean.loss != r.mean.loss)
            rc = RT_EINTERNAL, snprintf(err, errlen, "epoch ran %lld steps, loss %g",
                                        (long long)r.steps_run, r.mean.loss);
    }
    *loss = r.mean.loss;
    rt_exec_destroy(e);
    rt_plan_release(p);
    free(x);
    free(y);
    return rc;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Every corpus file with a few bytes changed, 40 times each (fixed seed):
 * an error or a graph, never a crash (the sanitizer builds run this). */
static void fuzz_corpus(const char *dir)
{
    static const char alphabet[] = "{}[]\",:0123456789-nulltruefalse \\abcxyzLambdaInput";
    char path[1024], line[1024];
    snprintf(path, sizeof path, "%s/SOURCES", dir);
    FILE *src = fopen(path, "r");
    int runs = 0, ok = 0;
    while (src && fgets(line, sizeof line, src)) {
        char file[256];
        if (line[0] == '#' || sscanf(line, "%255s", file) != 1)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, file);
        size_t len;
        char *js = slurp(path, &len);
        char *m = js ? malloc(len + 1) : NULL;
        for (int r = 0; m && r < 40; r++) {
            memcpy(m, js, len + 1);
            int k = 1 + (int)((rng >> 7) % 4);
            for (int i = 0; i < k; i++) {
                frand();
                m[(rng >> 13) % len] = alphabet[(rng >> 33) % (sizeof alphabet - 1)];
            }
            rt_graph *g = NULL;
            static char err[4096];
            int rc = rt_keras_import(m, len, &g, err, sizeof err);
            if (rc == 0) ok++;
            else if (g != NULL) FAIL("%s: a graph came back with an error", file);
            rt_graph_destroy(g);
            runs++;
        }
        free(m);
        free(js);
    }
    if (src) fclose(src);
    printf("fuzz: %d mutated imports, %d imported\n", runs, ok);
}

/* ----------------------------------------------------- the documented list */

/* Every entry of the importer's inert-field table appears in the doc as
 * `key`, so the list users read is the one the importer applies. */
static void check_doc(const char *doc_path)
{
    size_t len;
    char *doc = slurp(doc_path, &len);
    if (!doc) {
        FAIL("cannot read %s", doc_path);
        return;
    }
    const char *when;
    int n = 0;
    for (int i = 0; rt_keras_inert_field(i, &when); i++, n++) {
        char tick[80];
        snprintf(tick, sizeof tick, "`%s`", rt_keras_inert_field(i, NULL));
        if (!strstr(doc, tick))
            FAIL("%s does not list the inert field %s", doc_path, tick);
    }
    printf("docs: %d inert fields listed\n", n);
    free(doc);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s <corpus dir> <keras-fields.md>\n", argv[0]);
        return 2;
    }
    check_doc(argv[2]);
    char path[1024];
    snprintf(path, sizeof path, "%s/SOURCES", argv[1]);
    FILE *src = fopen(path, "r");
    if (!src) {
        fprintf(stderr, "no %s\n", path);
        return 1;
    }
    int total = 0, trained = 0, foreign = 0, waiting = 0, outside = 0, varlen = 0, compiled_only = 0;
    const uint64_t max_params = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
    const int min_models = argc > 4 ? atoi(argv[4]) : 30;
    double big_ms = 0;
    size_t big_len = 0;
    char big[256] = "", line[1024];
    char *waiting_on = calloc(1, 8192);
    while (fgets(line, sizeof line, src)) {
        char file[256], repo[256], fpath[512], commit[64];
        if (line[0] == '#' || sscanf(line, "%255s %255s %511s %63s", file, repo, fpath, commit) != 4)
            continue;
        total++;
        snprintf(path, sizeof path, "%s/%s", argv[1], file);
        size_t len = 0;
        char *js = slurp(path, &len);
        if (!js) {
            FAIL("%s: cannot read", file);
            continue;
        }
        char cls[256][48];
        int ncls = 0, custom = 0, scope = 0, embedding = 0;
        char custom_names[256] = "", scope_names[128] = "";
        json_object *doc = json_tokener_parse(js);
        classes_of(doc, cls, &ncls, 256);
        json_object_put(doc);
        for (int i = 0; i < ncls; i++) {
            if (!in_list(BUILTIN, cls[i]) && !in_list(PENDING, cls[i])) {
                custom = 1;
                snprintf(custom_names + strlen(custom_names), sizeof custom_names - strlen(custom_names),
                         "%s%.40s", custom_names[0] ? "," : "", cls[i]);
            }
            if (!strcmp(cls[i], "Lambda"))
                custom = 1, snprintf(custom_names + strlen(custom_names),
                                     sizeof custom_names - strlen(custom_names), "%sLambda",
                                     custom_names[0] ? "," : "");
            embedding |= !strcmp(cls[i], "Embedding");
            if (in_list(OUT_OF_SCOPE, cls[i]))
                scope = 1, snprintf(scope_names, sizeof scope_names, "%.40s", cls[i]);
        }
        static char err[4096];
        rt_graph *g = NULL;
        double t0 = now_ms();
        int rc = rt_keras_import_ex(js, len, &g, err, sizeof err, on_field, NULL);
        if (rc == RT_EINVAL && strstr(err, "has a variable dimension")) {
            /* bind the first (sequence) dim; the input's rank is found by
             * trying each, as a wrong rank is refused by name */
            varlen++;
            int64_t bind[RT_MAX_DIMS] = {VARLEN_BIND};
            for (int n = 1; n < RT_MAX_DIMS; n++) {
                rc = rt_keras_import_dims(js, len, bind, n, &g, err, sizeof err, NULL, NULL);
                if (rc != RT_EINVAL || !strstr(err, "dims per sample"))
                    break;
            }
            if (rc == 0)
                printf("  variable len  %-44s first input dim bound to %d\n", file, VARLEN_BIND);
        }
        double t_import = now_ms() - t0;
        char names[512];
        if (rc < 0) {
            if (custom) {
                /* the error names the custom classes, or says Lambda holds code */
                if (!not_builtin(err) && !strstr(err, strtok(custom_names, ",")))
                    FAIL("%s: the error does not name the non-built-in layer %s: %.300s", file,
                         custom_names, err);
                foreign++;
                printf("  not built-in  %-44s %s: %.160s\n", file, custom_names, err);
            } else if (scope) {
                outside++;
                printf("  out of scope  %-44s %s (not in issue 11's list): %.120s\n", file,
                       scope_names, err);
            } else if (only_pending(err, names, sizeof names)) {
                waiting++;
                printf("  pending       %-44s layers %s\n", file, names);
                size_t wl = strlen(waiting_on);
                snprintf(waiting_on + wl, 8192 - wl, "%s%s: %s", wl ? "; " : "", file, names);
            } else {
                FAIL("%s: import: %s: %.600s", file, rt_err_name(rc), err);
            }
            free(js);
            continue;
        }
        uint64_t params = 0;
        double loss = 0;
        double t1 = now_ms();
        rc = train_one_epoch(g, err, sizeof err, &params, &loss, max_params, embedding);
        if (rc == 1) {
            compiled_only++;
            printf("  compiled      %-44s %9llu params: over the training budget\n", file,
                   (unsigned long long)params);
            rt_graph_destroy(g);
            free(js);
            continue;
        }
        double t_train = now_ms() - t1;
        if (rc < 0) {
            FAIL("%s: %s: %.600s", file, rt_err_name(rc), err);
        } else {
            trained++;
            printf("  trained       %-44s %9llu params, loss %.4g, import %.2f ms, "
                   "compile+epoch %.0f ms\n", file, (unsigned long long)params, loss,
                   t_import, t_train);
            if (len > big_len) {
                big_len = len;
                big_ms = t_import;
                snprintf(big, sizeof big, "%s", file);
            }
        }
        rt_graph_destroy(g);
        free(js);
    }
    fclose(src);
    fuzz_corpus(argv[1]);
    printf("\nfields by class (read / inert / unsupported):\n");
    static const char *const kn[3] = {"read", "inert", "UNSUPPORTED"};
    for (int i = 0; i < n_fields; i++)
        printf("  %-24s %-32s %s x%d\n", fields[i].cls, fields[i].key, kn[fields[i].kind],
               fields[i].count);
    if (compiled_only)
        printf("\n%d models over %llu parameters compiled but were not trained here\n",
               compiled_only, (unsigned long long)max_params);
    printf("\ncorpus: %d models; %d trained one epoch; %d hold non-built-in layers; "
           "%d use built-in layers outside issue 11's list; %d wait for layers on other "
           "branches; %d have a variable-length input (bound to a fixed length); "
           "%d failed\n", total, trained, foreign,
           outside, waiting, varlen, failures);
    if (waiting)
        printf("waiting: %s\n", waiting_on);
    if (big[0])
        printf("largest trained model: %s (%zu bytes), import %.2f ms\n", big, big_len, big_ms);
    free(waiting_on);
    if (total < min_models)
        FAIL("the corpus has %d models, fewer than %d", total, min_models);
    return failures ? 1 : 0;
}
