/*
 * test_determinism.c - the same seed gives the same bits: across runs,
 * across call boundaries (1x120 = 120x1 = 7+113 = 50+50+20 steps), across
 * a checkpoint save/load, with shuffling and dropout on; a different seed
 * gives different weights. Also the epoch bookkeeping seen by callbacks,
 * and the pause hook of the long passes over a data set.
 */
#include <pthread.h>

#include "rt_test.h"

static float X[600];
static int32_t Y[150];
static const int N = 105; /* 6 steps per epoch at batch 20, the last of 5 */

/* W-A with a Dropout(0.2) between the layers when dropout is set */
static rt_plan *compile_loss(uint64_t seed, int dropout, rt_loss_kind loss)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 4}, dw1[] = {4, 32}, db1[] = {32}, dw2[] = {32, 3}, db2[] = {3};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    REQUIRE(rt_graph_add_param(g, "w1", 2, dw1, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "b1", 1, db1, RT_INIT_ZEROS, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "w2", 2, dw2, RT_INIT_HE_NORMAL, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "b2", 1, db2, RT_INIT_ZEROS, 1, NULL) == 0);
    const char *i1[] = {"x", "w1", "b1"}, *i2[] = {"d1"}, *i3[] = {"r1"};
    const char *i4[] = {dropout ? "dr" : "r1", "w2", "b2"}, *i5[] = {"d2"};
    REQUIRE(rt_graph_add_node(g, "d1", "Dense", 3, i1, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "r1", "Relu", 1, i2, 0, NULL) == 0);
    rt_attr rate = {.name = "rate", .kind = RT_ATTR_FLOAT, .f = 0.2};
    if (dropout) REQUIRE(rt_graph_add_node(g, "dr", "Dropout", 1, i3, 1, &rate) == 0);
    REQUIRE(rt_graph_add_node(g, "d2", "Dense", 3, i4, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "probs", "Softmax", 1, i5, 0, NULL) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = loss;
    cfg.lr = 0.1f;
    cfg.batch_size = 20;
    cfg.seed = seed;
    cfg.clip_norm = 1.0f; /* exercise the clipping path too */
    rt_plan *p;
    char err[256];
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
    rt_graph_destroy(g);
    return p;
}

static rt_plan *compile(uint64_t seed, int dropout)
{
    return compile_loss(seed, dropout, RT_LOSS_LOGCOSH);
}

/* all parameters, concatenated */
static int weights(rt_exec *e, float *w)
{
    rt_plan *p = rt_exec_plan(e);
    int off = 0;
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        int64_t d[RT_MAX_DIMS];
        int nd = rt_plan_param_info(p, i, NULL, d, NULL);
        int64_t n = 1;
        for (int k = 0; k < nd; k++) n *= d[k];
        rt_exec_get_param(e, i, w + off);
        off += (int)n;
    }
    return off;
}

static int run_split(uint64_t seed, int dropout, const int *calls, int ncalls,
                     float *w, float *losses)
{
    rt_plan *p = compile(seed, dropout);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_data d = {.x = X, .y = Y, .y_dtype = RT_I32, .n = N};
    int done = 0;
    for (int c = 0; c < ncalls; c++) {
        rt_train_result r;
        CHECK_RC(rt_exec_train(e, &d, calls[c], &r, NULL, NULL, losses + done));
        CHECK(r.steps_run == calls[c]);
        done += calls[c];
        CHECK(r.global_step == done);
    }
    int n = weights(e, w);
    rt_exec_destroy(e);
    rt_plan_release(p);
    return n;
}

/* one shared plan, an exec per thread */
typedef struct thr {
    rt_plan *p;
    float w[1024];
    int rc;
} thr;

static void *thr_main(void *arg)
{
    thr *t = arg;
    rt_exec *e;
    t->rc = rt_exec_create(t->p, &e);
    if (t->rc) return NULL;
    rt_data d = {.x = X, .y = Y, .y_dtype = RT_I32, .n = N};
    for (int k = 0; k < 4 && !t->rc; k++) t->rc = rt_exec_train(e, &d, 30, NULL, NULL, NULL, NULL);
    weights(e, t->w);
    rt_exec_destroy(e);
    return NULL;
}

static int pauses;
static void on_pause(void) { pauses++; }

/* 6 steps over 100,000 rows (iris repeated), in two calls, with or
 * without the pause hook: the weights into w, the pauses counted. */
static int run_big(int hook, float *w)
{
    enum { BIG = 100000 };
    float *x = malloc(sizeof(float) * 4 * BIG);
    int32_t *y = malloc(sizeof(int32_t) * BIG);
    REQUIRE(x && y);
    for (int i = 0; i < BIG; i++) {
        memcpy(x + 4 * i, X + 4 * (i % 150), 16);
        y[i] = Y[i % 150];
    }
    rt_plan *p = compile_loss(9, 0, RT_LOSS_SPARSE_CE);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_exec_set_pause_hook(hook ? on_pause : NULL);
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = BIG};
    CHECK_RC(rt_exec_train(e, &d, 3, NULL, NULL, NULL, NULL));
    /* the label check (sparse CE) and the first epoch's order: each pass
     * over 100,000 rows pauses at rows 16384 x 1..6 */
    CHECK(pauses == (hook ? 3 * 6 : 0));
    /* a second call on the same data: nothing is passed over again */
    CHECK_RC(rt_exec_train(e, &d, 3, NULL, NULL, NULL, NULL));
    CHECK(pauses == (hook ? 3 * 6 : 0));
    int n = weights(e, w);
    rt_exec_set_pause_hook(NULL);
    rt_exec_destroy(e);
    rt_plan_release(p);
    free(x);
    free(y);
    return n;
}

typedef struct cb_state {
    int calls, epoch_ends;
    int64_t last_epoch_samples;
    int bad;
} cb_state;

static int on_step(void *ud, const rt_step_info *in)
{
    cb_state *s = ud;
    s->calls++;
    if (in->steps_per_epoch != 6 || in->step_in_epoch < 1 || in->step_in_epoch > 6) s->bad++;
    if (in->epoch != (in->step - 1) / 6 + 1) s->bad++;
    if (in->epoch_end != (in->step_in_epoch == 6)) s->bad++;
    if (in->epoch_end) {
        s->epoch_ends++;
        s->last_epoch_samples = in->epoch_metrics.samples;
    }
    if (!isfinite(in->loss) || !isfinite(in->acc)) s->bad++;
    return in->step == 40; /* stop after step 40 */
}

int main(int argc, char **argv)
{
    REQUIRE(rt_test_load_iris(argc > 1 ? argv[1] : "tests/fixtures/iris.csv", X, Y) == 150);
    /* train on a mixed subset so every batch has all classes */
    for (int i = 0; i < 150; i++) {
        int j = (i * 37) % 150;
        float t[4];
        memcpy(t, X + i * 4, 16);
        memcpy(X + i * 4, X + j * 4, 16);
        memcpy(X + j * 4, t, 16);
        int32_t ty = Y[i];
        Y[i] = Y[j];
        Y[j] = ty;
    }
    static float w_ref[1024], w[1024], l_ref[120], l[120];
    for (int dropout = 0; dropout < 2; dropout++) {
        const int one[] = {120};
        int n = run_split(42, dropout, one, 1, w_ref, l_ref);
        CHECK(n == 4 * 32 + 32 + 32 * 3 + 3);

        /* the same run again */
        run_split(42, dropout, one, 1, w, l);
        CHECK(memcmp(w, w_ref, sizeof(float) * (size_t)n) == 0);

        int ones[120];
        for (int i = 0; i < 120; i++) ones[i] = 1;
        run_split(42, dropout, ones, 120, w, l);
        CHECK(memcmp(w, w_ref, sizeof(float) * (size_t)n) == 0);
        CHECK(memcmp(l, l_ref, sizeof l) == 0);

        const int split[] = {7, 113};
        run_split(42, dropout, split, 2, w, l);
        CHECK(memcmp(w, w_ref, sizeof(float) * (size_t)n) == 0);

        const int split3[] = {50, 0, 50, 20};
        run_split(42, dropout, split3, 4, w, l);
        CHECK(memcmp(w, w_ref, sizeof(float) * (size_t)n) == 0);
        CHECK(memcmp(l, l_ref, sizeof l) == 0);

        /* another seed: other initial weights, other shuffles */
        run_split(43, dropout, one, 1, w, l);
        CHECK(memcmp(w, w_ref, sizeof(float) * (size_t)n) != 0);

        /* checkpoint at step 50, restore into a fresh exec, 70 more */
        {
            rt_plan *p = compile(42, dropout);
            rt_exec *e, *e2;
            REQUIRE(rt_exec_create(p, &e) == 0 && rt_exec_create(p, &e2) == 0);
            rt_data d = {.x = X, .y = Y, .y_dtype = RT_I32, .n = N};
            CHECK_RC(rt_exec_train(e, &d, 50, NULL, NULL, NULL, NULL));
            size_t sz = rt_exec_state_size(e);
            void *blob = malloc(sz);
            CHECK_RC(rt_exec_save_state(e, blob, sz));
            CHECK(rt_exec_load_state(e2, blob, sz - 1) == RT_EDATA);
            CHECK_RC(rt_exec_load_state(e2, blob, sz));
            /* a copy of the data at another address: the restored cursor
             * still refers to it */
            float *x2 = malloc(sizeof X);
            memcpy(x2, X, sizeof X);
            rt_data d2 = {.x = x2, .y = Y, .y_dtype = RT_I32, .n = N};
            CHECK_RC(rt_exec_train(e2, &d2, 70, NULL, NULL, NULL, NULL));
            CHECK(rt_exec_global_step(e2) == 120);
            weights(e2, w);
            CHECK(memcmp(w, w_ref, sizeof(float) * (size_t)n) == 0);
            free(x2);
            free(blob);
            rt_exec_destroy(e);
            rt_exec_destroy(e2);
            rt_plan_release(p);
        }
        printf("dropout %d: bit-identical across splits and checkpoint\n", dropout);
    }

    /* the pause hook changes no bit of the training */
    {
        int n = run_big(0, w_ref);
        CHECK(run_big(1, w) == n);
        CHECK(memcmp(w, w_ref, sizeof(float) * (size_t)n) == 0);
        printf("pauses: %d over 100,000 rows, bit-identical without them\n", pauses);
    }

    /* a plan shared by threads: each exec ends where a serial run ends */
    {
        rt_plan *p = compile(42, 1);
        const int one[] = {120};
        int n = run_split(42, 1, one, 1, w_ref, l_ref);
        thr t[3];
        pthread_t th[3];
        for (int i = 0; i < 3; i++) {
            t[i].p = p;
            REQUIRE(pthread_create(&th[i], NULL, thr_main, &t[i]) == 0);
        }
        for (int i = 0; i < 3; i++) {
            pthread_join(th[i], NULL);
            CHECK(t[i].rc == 0);
            CHECK(memcmp(t[i].w, w_ref, sizeof(float) * (size_t)n) == 0);
        }
        rt_plan_release(p);
    }

    /* callbacks: epochs of 6 steps, the 6th of 5 samples; stop at step 40 */
    {
        rt_plan *p = compile(1, 0);
        rt_exec *e;
        REQUIRE(rt_exec_create(p, &e) == 0);
        rt_data d = {.x = X, .y = Y, .y_dtype = RT_I32, .n = N};
        cb_state s = {0};
        rt_train_result r;
        CHECK_RC(rt_exec_train(e, &d, 100, &r, on_step, &s, NULL));
        CHECK(r.stopped && r.steps_run == 40 && s.calls == 40);
        CHECK(s.epoch_ends == 6 && s.last_epoch_samples == N);
        CHECK(s.bad == 0);
        CHECK(r.mean.samples == 6 * N + 4 * 20);
        /* evaluation does not move the cursor or the weights */
        rt_metrics m1, m2;
        CHECK_RC(rt_exec_evaluate(e, &d, &m1));
        CHECK_RC(rt_exec_evaluate(e, &d, &m2));
        CHECK(m1.loss == m2.loss && m1.acc == m2.acc && m1.samples == N);
        rt_exec_destroy(e);
        rt_plan_release(p);
    }
    /* a model above the parallel-optimizer threshold (>= 65536 trainable
     * floats, split over threads) and above the small-GEMM threshold
     * (oneDNN): 1x6 steps = 6x1 steps, bit for bit */
    {
        float *wbig[2];
        int64_t nw = 0;
        for (int run = 0; run < 2; run++) {
            rt_graph *g = rt_graph_create();
            int64_t in[] = {RT_BATCH, 64}, dw[] = {64, 1100}, dw2[] = {1100, 3};
            REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
            REQUIRE(rt_graph_add_param(g, "w", 2, dw, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
            REQUIRE(rt_graph_add_param(g, "w2", 2, dw2, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
            const char *i1[] = {"x", "w"}, *i2[] = {"h"}, *i3[] = {"t", "w2"};
            REQUIRE(rt_graph_add_node(g, "h", "Dense", 2, i1, 0, NULL) == 0);
            REQUIRE(rt_graph_add_node(g, "t", "Tanh", 1, i2, 0, NULL) == 0);
            REQUIRE(rt_graph_add_node(g, "y", "Dense", 2, i3, 0, NULL) == 0);
            rt_train_config cfg;
            rt_train_config_init(&cfg);
            cfg.from_logits = 1;
            cfg.batch_size = 48;
            cfg.seed = 5;
            rt_plan *p;
            REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, NULL, 0) == 0);
            rt_exec *e;
            REQUIRE(rt_exec_create(p, &e) == 0);
            static float xs[100 * 64];
            static int32_t ys[100];
            for (int i = 0; i < 100 * 64; i++) xs[i] = (float)((i * 31) % 23) / 11.0f - 1.0f;
            for (int i = 0; i < 100; i++) ys[i] = (i * 7) % 3;
            rt_data d = {.x = xs, .y = ys, .y_dtype = RT_I32, .n = 100};
            if (run == 0) {
                CHECK_RC(rt_exec_train(e, &d, 6, NULL, NULL, NULL, NULL));
            } else {
                for (int k = 0; k < 6; k++) CHECK_RC(rt_exec_train(e, &d, 1, NULL, NULL, NULL, NULL));
            }
            nw = 64 * 1100;
            wbig[run] = malloc(sizeof(float) * (size_t)nw);
            rt_exec_get_param(e, 0, wbig[run]);
            rt_exec_destroy(e);
            rt_plan_release(p);
            rt_graph_destroy(g);
        }
        CHECK(memcmp(wbig[0], wbig[1], sizeof(float) * (size_t)nw) == 0);
        free(wbig[0]);
        free(wbig[1]);
    }
    return rt_test_done("test_determinism");
}
