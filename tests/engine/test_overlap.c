/*
 * test_overlap.c - the reduce overlapped with the backward pass
 * (rt_replica.overlap/start/finish, rt_plan_bucket_ready), without MPI:
 *
 * 1. rt_plan_bucket_ready against a brute force over the plan: for every
 *    gradient float the last backward call whose output (dx, sized by the
 *    node's input shape) covers it; a bucket is ready after the latest of
 *    its floats. Plans: a Dense MLP (fused activations), Conv2D +
 *    BatchNorm, LSTM, Embedding, and one weight read by two MatMuls
 *    (accumulated gradient); bucket sizes 1, 7, 64, 1000.
 * 2. A one-replica rt_replica whose start keeps a copy of each bucket it
 *    is given: at finish every float of the gradient was given exactly
 *    once and each copy still equals the final gradient (nothing wrote
 *    into a bucket after it was handed over), and the buckets came in
 *    more than one segment where the model has several layers.
 * 3. Training with overlap gives the weights of a plain exec bit for bit.
 */
#include <stdint.h>

#include "import_keras.h"
#include "rt_engine_impl.h"
#include "rt_test.h"

/* ------------------------------------------------------------ the plans */

static const char MLP[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"mlp\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8], "
    "\"dtype\": \"float32\", \"name\": \"x\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d0\", \"units\": 16, "
    "\"activation\": \"relu\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d1\", \"units\": 16, "
    "\"activation\": \"tanh\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d2\", \"units\": 3}}]}}";

static const char CONV[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"conv\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 6, 6, 2], "
    "\"dtype\": \"float32\", \"name\": \"x\"}},"
    "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"c0\", \"filters\": 4, "
    "\"kernel_size\": [3, 3], \"activation\": \"relu\", \"padding\": \"same\"}},"
    "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\"}},"
    "{\"class_name\": \"MaxPooling2D\", \"config\": {\"name\": \"p\", \"pool_size\": [2, 2]}},"
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}]}}";

static const char LSTM[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"lstm\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 5, 3], "
    "\"dtype\": \"float32\", \"name\": \"x\"}},"
    "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"l\", \"units\": 6}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}]}}";

static const char EMBED[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"emb\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 6], "
    "\"dtype\": \"float32\", \"name\": \"x\"}},"
    "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"e\", \"input_dim\": 10, "
    "\"output_dim\": 4}},"
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}]}}";

/* h = relu(x W), z = h W + b, W (4, 4) read twice: its gradient is the
 * sum of two calls' writes */
static rt_graph *shared_graph(void)
{
    rt_graph *g = rt_graph_create();
    REQUIRE(g);
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, (int64_t[]){RT_BATCH, 4}) == 0);
    REQUIRE(rt_graph_add_param(g, "W", 2, (int64_t[]){4, 4}, RT_INIT_GLOROT_UNIFORM, 1,
                               NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "b", 1, (int64_t[]){4}, RT_INIT_ZEROS, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "V", 2, (int64_t[]){4, 3}, RT_INIT_GLOROT_UNIFORM, 1,
                               NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "a", "MatMul", 2, (const char *[]){"x", "W"}, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "h", "Relu", 1, (const char *[]){"a"}, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "z0", "MatMul", 2, (const char *[]){"h", "W"}, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "z", "Add", 2, (const char *[]){"z0", "b"}, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "y", "MatMul", 2, (const char *[]){"z", "V"}, 0, NULL) == 0);
    return g;
}

typedef struct model {
    const char *name;
    const char *json;  /* NULL: shared_graph */
    int64_t in;        /* input floats per sample */
    int index_in;      /* inputs are indices < 10 (Embedding) */
} model;

static const model MODELS[5] = {
    {"mlp", MLP, 8, 0}, {"conv+bn", CONV, 72, 0}, {"lstm", LSTM, 15, 0},
    {"embedding", EMBED, 6, 1}, {"shared weight", NULL, 4, 0},
};

static rt_plan *compile_model(int m, int64_t batch)
{
    const char *json = MODELS[m].json;
    rt_graph *g = NULL;
    char err[256];
    if (json) {
        if (rt_keras_import(json, strlen(json), &g, err, sizeof err) < 0) {
            fprintf(stderr, "%s: %s\n", MODELS[m].name, err);
            exit(1);
        }
    } else {
        g = shared_graph();
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.from_logits = 1;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 0.01f;
    cfg.batch_size = batch;
    cfg.seed = 3;
    rt_plan *p = NULL;
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "%s: compile: %s\n", MODELS[m].name, err);
        exit(1);
    }
    rt_graph_destroy(g);
    return p;
}

/* ---------------------------------------------------------- brute force */

static void check_ready(const rt_plan *p, const char *name, int64_t bucket)
{
    const int64_t T = p->train_floats, nb = (T + bucket - 1) / bucket;
    int *last = malloc(sizeof(int) * (size_t)T);
    int *want = malloc(sizeof(int) * (size_t)nb), *got = malloc(sizeof(int) * (size_t)nb);
    REQUIRE(last && want && got);
    for (int64_t i = 0; i < T; i++) last[i] = -1;
    for (int c = 0; c < p->n_bwd; c++) {
        const rt__call *call = &p->calls[p->n_fwd + c];
        for (int j = 0; j < call->nd->n_in; j++) {
            if (call->dx[j].space != RT__SP_GRAD) continue;
            const rt__shape *sh = call->nd->in_shape[j];
            REQUIRE(!sh->batched);
            const int64_t lo = (int64_t)call->dx[j].off, n = rt__shape_numel(sh);
            for (int64_t i = lo; i < lo + n && i < T; i++) last[i] = c;
        }
    }
    for (int64_t b = 0; b < nb; b++) {
        want[b] = -1;
        for (int64_t i = b * bucket; i < (b + 1) * bucket && i < T; i++)
            if (last[i] > want[b]) want[b] = last[i];
    }
    CHECK(rt_plan_bucket_ready(p, bucket, got, (int)nb) == (int)nb);
    int bad = 0;
    for (int64_t b = 0; b < nb; b++) bad += got[b] != want[b];
    if (bad)
        fprintf(stderr, "%s, bucket %lld: %d of %lld buckets ready at another call than the "
                "brute force's\n", name, (long long)bucket, bad, (long long)nb);
    CHECK(bad == 0);
    /* too small an array is refused */
    if (nb > 0) CHECK(rt_plan_bucket_ready(p, bucket, got, (int)nb - 1) == RT_EINVAL);
    free(last);
    free(want);
    free(got);
}

/* ------------------------------------------------- a one-replica overlap */

#define MAXB 4096

typedef struct fake {
    int64_t T;
    float *ptr[MAXB];   /* the buckets start was given this step */
    int64_t n[MAXB];
    float *copy;        /* their values then, back to back */
    int k;
    int64_t used;
    int bad;
} fake;

static int f_reduce(void *ctx, float *g, int64_t n, float *slots, int k, double *st, char *err,
                    size_t errlen)
{
    (void)ctx, (void)g, (void)n, (void)slots, (void)k, (void)st, (void)err, (void)errlen;
    return 0;
}

static int f_sum(void *ctx, double *v, int n, char *err, size_t errlen)
{
    (void)ctx, (void)v, (void)n, (void)err, (void)errlen;
    return 0;
}

static int f_overlap(void *ctx)
{
    (void)ctx;
    return 1;
}

static int f_start(void *ctx, float *g, int64_t n, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    fake *f = ctx;
    if (f->k == MAXB || f->used + n > f->T) {
        f->bad++;
        return 0;
    }
    f->ptr[f->k] = g;
    f->n[f->k++] = n;
    memcpy(f->copy + f->used, g, sizeof(float) * (size_t)n);
    f->used += n;
    return 0;
}

/* every float given once (bucket 0 starts the gradient) and unchanged since */
static int f_finish(void *ctx, double *st, char *err, size_t errlen)
{
    (void)st, (void)err, (void)errlen;
    fake *f = ctx;
    float *g0 = NULL;
    for (int i = 0; i < f->k; i++)
        if (!g0 || f->ptr[i] < g0) g0 = f->ptr[i];
    unsigned char *seen = calloc((size_t)f->T + 1, 1);
    REQUIRE(seen);
    int64_t o = 0;
    for (int i = 0; i < f->k; i++) {
        const int64_t off = f->ptr[i] - g0;
        for (int64_t j = 0; j < f->n[i]; j++) {
            if (off + j >= f->T || seen[off + j]++) f->bad++;
            else if (memcmp(&f->copy[o + j], &f->ptr[i][j], sizeof(float))) f->bad++;
        }
        o += f->n[i];
    }
    for (int64_t j = 0; j < f->T; j++) f->bad += !seen[j];
    free(seen);
    f->k = 0;
    f->used = 0;
    return 0;
}

static void check_overlap(int m, int64_t bucket)
{
    const model *md = &MODELS[m];
    const int64_t B = 8, n = 28; /* the epoch's last batch has 4 rows */
    rt_plan *p = compile_model(m, B);
    float *x = malloc(sizeof(float) * (size_t)(n * md->in));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
    REQUIRE(x && y);
    for (int64_t i = 0; i < n * md->in; i++)
        x[i] = md->index_in ? (float)((i * 7) % 10)
                            : (float)((i * 2654435761u) % 1000) * 2e-3f - 1.0f;
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(i % 3);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = n};
    rt_exec *a, *b;
    REQUIRE(rt_exec_create(p, &a) == 0 && rt_exec_create(p, &b) == 0);
    fake f = {.T = p->train_floats};
    f.copy = malloc(sizeof(float) * (size_t)(f.T ? f.T : 1));
    REQUIRE(f.copy);
    rt_replica r = {.rank = 0, .size = 1, .reduce = f_reduce, .sum = f_sum, .ctx = &f,
                    .bucket = bucket, .overlap = f_overlap, .start = f_start,
                    .finish = f_finish};
    CHECK_RC(rt_exec_set_replica(a, &r));
    rt_train_result ra, rb;
    CHECK_RC(rt_exec_train(a, &d, 9, &ra, NULL, NULL, NULL));
    CHECK_RC(rt_exec_train(b, &d, 9, &rb, NULL, NULL, NULL));
    if (f.bad)
        fprintf(stderr, "%s, bucket %lld: %d gradient floats given twice, never, or changed "
                "after they were given\n", md->name, (long long)bucket, f.bad);
    CHECK(f.bad == 0);
    const size_t sn = rt_exec_state_size(a);
    void *sa = malloc(sn), *sb = malloc(sn);
    REQUIRE(sa && sb);
    rt_exec_save_state(a, sa, sn);
    rt_exec_save_state(b, sb, sn);
    const int same = !memcmp(sa, sb, sn);
    if (!same)
        fprintf(stderr, "%s, bucket %lld: the state after 9 overlapped steps differs from a "
                "plain exec's\n", md->name, (long long)bucket);
    CHECK(same);
    CHECK(rb.last.loss < 1e9 && ra.last.loss == rb.last.loss);
    free(sa);
    free(sb);
    free(f.copy);
    rt_exec_destroy(a);
    rt_exec_destroy(b);
    rt_plan_release(p);
    free(x);
    free(y);
}

/* a model of several layers finishes its buckets at more than one call */
static void check_segments(int m)
{
    rt_plan *p = compile_model(m, 8);
    const int64_t bucket = 7, nb = (p->train_floats + bucket - 1) / bucket;
    int *r = malloc(sizeof(int) * (size_t)nb);
    REQUIRE(r);
    REQUIRE(rt_plan_bucket_ready(p, bucket, r, (int)nb) == (int)nb);
    int distinct = 0;
    for (int64_t b = 0; b < nb; b++) {
        int seen = 0;
        for (int64_t c = 0; c < b; c++) seen |= r[c] == r[b];
        distinct += !seen;
    }
    printf("%s: %lld gradient floats, %d backward calls, buckets of 7 ready after %d "
           "different calls:", MODELS[m].name, (long long)p->train_floats, p->n_bwd, distinct);
    for (int64_t b = 0; b < nb; b++) printf(" %d", r[b]);
    printf("\n");
    CHECK(distinct > 1);
    free(r);
    rt_plan_release(p);
}

int main(void)
{
    const int64_t buckets[] = {1, 7, 64, 1000};
    for (int m = 0; m < (int)(sizeof MODELS / sizeof MODELS[0]); m++) {
        rt_plan *p = compile_model(m, 8);
        for (size_t k = 0; k < sizeof buckets / sizeof buckets[0]; k++)
            check_ready(p, MODELS[m].name, buckets[k]);
        rt_plan_release(p);
        for (size_t k = 0; k < sizeof buckets / sizeof buckets[0]; k++)
            check_overlap(m, buckets[k]);
        check_segments(m);
    }
    return rt_test_done("engine_overlap");
}
