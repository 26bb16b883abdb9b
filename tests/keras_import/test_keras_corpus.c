/*
 * test_keras_corpus.c - real model.to_json() / TF.js model.json files from
 * public repositories (tests/fixtures/keras-corpus, sources in SOURCES;
 * also run on tests/fixtures/keras-derived, corpus files with recurrent
 * dropout and step masks switched on by its gen_derived.py):
 * every model whose layers are all ones the docs say are supported
 * (SUPPORTED below; each must be named in README.md or the docs folder) imports,
 * compiles and trains one epoch on synthetic data of its own input and
 * output shape. A model with any other class (a Lambda, a custom class, a
 * recorded TF op, a Keras layer the docs do not list) must fail with an
 * error naming it. Anything else is a failure of this test.
 *
 * A model whose input has a null (variable) dim, a sequence of any length,
 * is imported again with that dim bound (rt_keras_import_dims, as a compile
 * request's input_dims does) to VARLEN_BIND, and must train like the rest.
 * Every config field of every placed layer is classified through
 * rt_keras_import_ex's callback (read / inert / unsupported); the table is
 * printed, and an unsupported field in a model whose layers are all
 * supported fails the import and so the test.
 *
 *   test_keras_corpus <corpus dir> <docs/keras-fields.md> <max params>
 *                     <models> <trained> <compiled only> <not supported>
 *                     [<refused>]
 *
 * A model whose layers are all supported but which uses a setting rtrain
 * does not implement (a stateful RNN) is "refused" only when the corpus
 * dir's REFUSED file names it with a piece of the error it must give
 * ("<file> <text>", the rest of the line says why); any other failure of
 * such a model fails the test.
 *
 * The counts are exact: a model that stops importing or training, or
 * one added to SOURCES, changes them. Models with more parameters than max
 * params (unless SOURCES marks them "train") are imported and compiled but
 * not trained ("compiled only"):
 * ctest passes 7,000,000 so the suite stays fast (a 66M-parameter model's
 * epoch needs 1 GB); bench/keras_import trains them all.
 */
#include <ctype.h>
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

/* The Keras layer classes the docs say import (README.md's list,
 * docs/layers.md's table, docs/recurrent.md, the Keras 1 classes of
 * docs/keras-fields.md), each spelled as the docs spell it: check_doc
 * fails on a name the docs do not hold. */
static const char *const SUPPORTED[] = {
    "InputLayer", "Dense", "Activation", "Dropout", "Flatten", "Reshape", "Conv2D",
    "MaxPooling2D", "AveragePooling2D", "GlobalAveragePooling2D", "BatchNormalization",
    "SyncBatchNormalization", "Concatenate", "Rescaling", "Embedding", "SimpleRNN", "LSTM",
    "GRU", "CuDNNLSTM", "CuDNNGRU", "Bidirectional", "Masking", "TimeDistributed", "Add", "Subtract", "Multiply",
    "Average", "Maximum", "Minimum", "ZeroPadding1D", "ZeroPadding2D", "Cropping1D",
    "Cropping2D", "UpSampling1D", "UpSampling2D", "Permute", "RepeatVector", "Conv1D",
    "DepthwiseConv2D", "SeparableConv2D", "Conv2DTranspose", "MaxPooling1D",
    "AveragePooling1D", "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalAveragePooling1D",
    "LayerNormalization", "LeakyReLU", "PReLU", "ELU", "ReLU", "Softmax", "ThresholdedReLU",
    "SpatialDropout1D", "SpatialDropout2D", "GaussianNoise", "GaussianDropout",
    "ActivityRegularization", "Identity", "Normalization", "Convolution2D", "Merge",
    "AtrousConvolution2D", "MultiHeadAttention", "Dot", "Attention", "NotEqual",
    /* the random image preprocessing layers */
    "RandomFlip", "RandomRotation", "RandomTranslation", "RandomZoom", "RandomContrast",
    "RandomBrightness", NULL,
};

/* Keras' other spellings of those classes, and the model classes. */
static const char *const ALIASES[] = {
    "MaxPool2D", "AvgPool2D", "GlobalAvgPool2D", "MaxPool1D", "AvgPool1D", "GlobalMaxPool1D",
    "GlobalAvgPool1D", "GlobalMaxPool2D", "Convolution1D", "SeparableConvolution2D",
    "Convolution2DTranspose", "Deconvolution2D", "Sequential", "Functional", "Model", NULL,
};

static int in_list(const char *const *l, const char *s)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], s))
            return 1;
    return 0;
}

/* the layer classes of a model: every "layers" list and wrapper "layer"
 * (a file holding the model JSON as one JSON string: the string's model) */
static void classes_of(json_object *o, char names[][48], int *n, int max)
{
    if (json_object_is_type(o, json_type_string)) {
        json_object *in = json_tokener_parse(json_object_get_string(o));
        if (in && !json_object_is_type(in, json_type_string))
            classes_of(in, names, n, max);
        json_object_put(in);
        return;
    }
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
 * epoch of 2 batches of 2 (of the model's fixed batch size for a stateful
 * RNN, which the daemon's error names); returns 0 or a negative code (err
 * says why).
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
    const char *fixed = rc == RT_EINVAL ? strstr(err, "compile with batch_size ") : NULL;
    if (fixed) {
        cfg.batch_size = atoi(fixed + strlen("compile with batch_size "));
        rc = rt_plan_compile(g, &cfg, &p, &rep, err, errlen);
    }
    /* several outputs (a Functional model's output_layers): MSE on each,
     * the labels of each head in turn */
    const char *heads = rc == RT_EINVAL ? strstr(err, " losses for a model with ") : NULL;
    if (heads) {
        cfg.n_heads = atoi(heads + strlen(" losses for a model with "));
        for (int k = 0; k < cfg.n_heads && k < RT_MAX_HEADS; k++)
            cfg.heads[k].loss = RT_LOSS_MSE, cfg.heads[k].weight = 1.0f;
        rc = rt_plan_compile(g, &cfg, &p, &rep, err, errlen);
    }
    if (rc == RT_ESHAPE) {
        /* an output of rows (a sequence of per-step values, an image) does
         * not take one label per sample; a one-hot loss takes the output's
         * shape. Only its shape is read here, whatever the output ends in
         * (a tanh image), so the loss check is off for this probe */
        cfg.loss = RT_LOSS_CE;
        cfg.loss_check = 0;
        rc = rt_plan_compile(g, &cfg, &p, &rep, err, errlen);
        cfg.loss = RT_LOSS_MSE;
        cfg.loss_check = 1;
    }
    if (rc < 0)
        return rc;
    int64_t od[RT_MAX_DIMS], id[RT_MAX_DIMS];
    int on = rt_plan_output_shape(p, od), in = rt_plan_input_shape(p, id);
    int64_t head_numel = 0;
    for (int k = 0; k < rt_plan_n_heads(p); k++) {
        int64_t hd[RT_MAX_DIMS], lab = 0;
        rt_plan_head_shape(p, k, hd, &lab);
        head_numel += lab;
    }
    rt_plan_release(p);
    cfg.label_ndim = on;
    memcpy(cfg.label_dims, od, sizeof od);
    if (cfg.n_heads)
        cfg.label_ndim = 1, cfg.label_dims[0] = head_numel;
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
    if (cfg.n_heads)
        yn = head_numel;
    const int64_t n = 2 * cfg.batch_size;
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

/* Every SUPPORTED class is named in the docs: README.md and the docs folder,
 * read from the folder of doc_path and the one above it ("X1D/2D" names
 * both). */
static void check_supported_doc(const char *doc_path)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s", doc_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    static const char *const files[] = {"../README.md", "layers.md", "recurrent.md",
                                        "keras-import.md", "keras-fields.md"};
    size_t cap = 1, len = 0;
    char *all = calloc(1, 1);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        size_t n;
        char *t = slurp(path, &n);
        if (!t) {
            FAIL("cannot read %s", path);
            continue;
        }
        cap += n + 1;
        all = realloc(all, cap);
        memcpy(all + len, t, n);
        len += n;
        all[len++] = '\n';
        all[len] = 0;
        free(t);
    }
    int n = 0;
    for (int i = 0; SUPPORTED[i]; i++, n++) {
        const char *name = SUPPORTED[i];
        const size_t nl = strlen(name);
        int found = 0;
        for (const char *p = all; !found && (p = strstr(p, name)); p++) {
            const char before = p == all ? ' ' : p[-1], after = p[nl];
            found = !isalnum((unsigned char)before) && !isalnum((unsigned char)after);
        }
        /* "ZeroPadding1D/2D" names ZeroPadding2D */
        if (!found && nl > 2 && !strcmp(name + nl - 2, "2D")) {
            char both[80];
            snprintf(both, sizeof both, "%.*s1D/2D", (int)(nl - 2), name);
            found = strstr(all, both) != NULL;
        }
        if (!found)
            FAIL("the test counts %s as supported, but the docs do not name it", name);
    }
    printf("docs: %d supported layer classes named\n", n);
    free(all);
}

/* The REFUSED entry for file: the text its error must hold, or NULL */
static const char *refused_text(const char *dir, const char *file, char *buf, size_t len)
{
    char path[1024], line[1024];
    snprintf(path, sizeof path, "%s/REFUSED", dir);
    FILE *f = fopen(path, "r");
    const char *found = NULL;
    while (f && !found && fgets(line, sizeof line, f)) {
        char name[256];
        int at = 0;
        if (line[0] == '#' || sscanf(line, "%255s %n", name, &at) != 1 || strcmp(name, file))
            continue;
        /* the text runs to " -- " (the reason follows) */
        char *end = strstr(line + at, " -- ");
        if (!end)
            end = line + at + strcspn(line + at, "\n");
        snprintf(buf, len, "%.*s", (int)(end - (line + at)), line + at);
        found = buf[0] ? buf : NULL;
    }
    if (f)
        fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: %s <corpus dir> <keras-fields.md> <max params> <models> "
                "<trained> <compiled only> <not supported>\n", argv[0]);
        return 2;
    }
    check_doc(argv[2]);
    check_supported_doc(argv[2]);
    char path[1024];
    snprintf(path, sizeof path, "%s/SOURCES", argv[1]);
    FILE *src = fopen(path, "r");
    if (!src) {
        fprintf(stderr, "no %s\n", path);
        return 1;
    }
    int total = 0, trained = 0, unsupported = 0, varlen = 0, compiled_only = 0, refused = 0;
    const int want_refused = argc > 8 ? atoi(argv[8]) : 0;
    const uint64_t max_params = strtoull(argv[3], NULL, 10);
    const int want_models = atoi(argv[4]), want_trained = atoi(argv[5]),
              want_compiled = atoi(argv[6]), want_unsupported = atoi(argv[7]);
    double big_ms = 0;
    size_t big_len = 0;
    char big[256] = "", line[1024];
    while (fgets(line, sizeof line, src)) {
        char file[256], repo[256], fpath[512], commit[64], opt[128] = "";
        if (line[0] == '#' || sscanf(line, "%255s %255s %511s %63s %127s", file, repo, fpath,
                                     commit, opt) < 4)
            continue;
        /* "bind=256,256,3": the input dims a user gives a fully convolutional
         * model whose image size is free (its skips need a multiple of 2^k) */
        int64_t ubind[RT_MAX_DIMS] = {0};
        int n_ubind = 0;
        for (const char *b = strncmp(opt, "bind=", 5) ? NULL : opt + 5; b && n_ubind < RT_MAX_DIMS;
             b = strchr(b, ',') ? strchr(b, ',') + 1 : NULL)
            ubind[n_ubind++] = strtoll(b, NULL, 10);
        total++;
        snprintf(path, sizeof path, "%s/%s", argv[1], file);
        size_t len = 0;
        char *js = slurp(path, &len);
        if (!js) {
            FAIL("%s: cannot read", file);
            continue;
        }
        char cls[256][48];
        int ncls = 0, embedding = 0;
        char other[256] = "";
        json_object *doc = json_tokener_parse(js);
        classes_of(doc, cls, &ncls, 256);
        json_object_put(doc);
        for (int i = 0; i < ncls; i++) {
            if (!in_list(SUPPORTED, cls[i]) && !in_list(ALIASES, cls[i]))
                snprintf(other + strlen(other), sizeof other - strlen(other), "%s%.40s",
                         other[0] ? "," : "", cls[i]);
            embedding |= !strcmp(cls[i], "Embedding");
        }
        static char err[4096];
        rt_graph *g = NULL;
        double t0 = now_ms();
        int rc = rt_keras_import_ex(js, len, &g, err, sizeof err, on_field, NULL);
        if (rc == RT_EINVAL && strstr(err, "has a variable dimension") && n_ubind) {
            varlen++;
            rc = rt_keras_import_dims(js, len, ubind, n_ubind, &g, err, sizeof err, NULL, NULL);
            if (rc == 0)
                printf("  variable dims %-44s input dims bound to %s\n", file, opt + 5);
        } else if (rc == RT_EINVAL && strstr(err, "has a variable dimension")) {
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
        if (rc < 0) {
            if (other[0]) {
                /* the error names a class the docs do not list, or says
                 * Lambda holds code */
                char first[64];
                snprintf(first, sizeof first, "%.*s", (int)strcspn(other, ","), other);
                if (!not_builtin(err) && !strstr(err, first))
                    FAIL("%s: the error does not name the unsupported layer %s: %.300s", file,
                         other, err);
                unsupported++;
                printf("  not supported %-44s %s: %.1000s\n", file, other, err);
            } else {
                char want[256];
                const char *why = refused_text(argv[1], file, want, sizeof want);
                if (why && strstr(err, why)) {
                    refused++;
                    printf("  refused       %-44s %.300s\n", file, err);
                } else {
                    FAIL("%s: every layer is one the docs list, yet the import fails: %s: %.600s",
                         file, rt_err_name(rc), err);
                }
            }
            free(js);
            continue;
        }
        uint64_t params = 0;
        double loss = 0;
        double t1 = now_ms();
        /* "train": trained whatever the budget; "compile": compiled only,
         * however few its parameters (large images: seconds of convolution
         * per step). SOURCES says why */
        const uint64_t budget = !strcmp(opt, "train") ? 0 : !strcmp(opt, "compile") ? 1 : max_params;
        rc = train_one_epoch(g, err, sizeof err, &params, &loss, budget, embedding);
        if (rc == 1) {
            compiled_only++;
            printf("  compiled      %-44s %9llu params: %s\n", file, (unsigned long long)params,
                   budget == 1 ? "compile only (SOURCES)" : "over the training budget");
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
    printf("\ncorpus: %d models; %d trained one epoch; %d compiled only; %d hold layers the docs "
           "do not list (Lambda, custom classes); %d refused for a setting (REFUSED); %d have a "
           "variable-length input (bound to a fixed length); %d failed\n", total, trained,
           compiled_only, unsupported, refused, varlen, failures);
    if (big[0])
        printf("largest trained model: %s (%zu bytes), import %.2f ms\n", big, big_len, big_ms);
    if (total != want_models || trained != want_trained || compiled_only != want_compiled ||
        unsupported != want_unsupported || refused != want_refused)
        FAIL("expected %d models: %d trained, %d compiled only, %d not supported, %d refused; "
             "got %d: %d, %d, %d, %d", want_models, want_trained, want_compiled,
             want_unsupported, want_refused, total, trained, compiled_only, unsupported, refused);
    return failures ? 1 : 0;
}
