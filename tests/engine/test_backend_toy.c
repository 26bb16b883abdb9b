/*
 * test_backend_toy.c - a new backend touches no engine or op file
 * (docs/backends.md). "toy" exists only in this file: ref's table with
 * its own name and a higher rank, each entry it wraps counting its calls
 * and passing them on to ref. This program links the engine and the ref
 * backend only (not rt_backends: it registers its backends itself), and
 *  - toy becomes the default by its rank, compiles and trains (the compile
 *    report names it), and every step's gather, kernels and update and
 *    every buffer go through its table (all buffers released at the end);
 *  - toy and ref train bit for bit alike (toy is ref), also through the
 *    augmenting gather;
 *  - ref's augmenting gather, written from the definition pixel by pixel,
 *    equals rt_aug_apply (the CPU backend's and the streamed rows' code)
 *    bit for bit, over crops, flips, brightness and contrast draws.
 */
#include <stdlib.h>

#include "rt_engine_impl.h"
#include "rt_test.h"

extern const rt__backend rt__backend_ref;

static struct {
    int gathers, augmented, updates, enters, leaves;
    int64_t calls, live;
} cnt;

static void *toy_alloc(void *ctx, size_t bytes)
{
    void *p = rt__backend_ref.alloc(ctx, bytes);
    if (p) cnt.live++;
    return p;
}
static void toy_release(void *ctx, void *buf)
{
    if (buf) cnt.live--;
    rt__backend_ref.release(ctx, buf);
}
static void toy_gather(void *ctx, const rt__gather_args *g)
{
    cnt.gathers++;
    cnt.augmented += g->aug != NULL;
    rt__backend_ref.gather(ctx, g);
}
static void toy_run(void *ctx, const rt__call *calls, const rt__kargs *args, int n)
{
    cnt.calls += n;
    rt__backend_ref.run(ctx, calls, args, n);
}
static void toy_update(void *ctx, const rt_train_config *c, float lr, int64_t t, float *w,
                       float *g, float *s1, float *s2, int64_t count)
{
    cnt.updates++;
    rt__backend_ref.update(ctx, c, lr, t, w, g, s1, s2, count);
}
static uint64_t toy_enter(void *ctx)
{
    (void)ctx;
    cnt.enters++;
    return 0x70e;
}
static void toy_leave(void *ctx, uint64_t saved)
{
    (void)ctx;
    cnt.leaves += saved == 0x70e;
}

static rt__backend toy;

enum { N = 96, B = 32, IMG = 4 * 4 * 3, IN = IMG + 2, STEPS = 6 };

/* a Dense classifier of IN inputs */
static rt_graph *graph(void)
{
    rt_graph *g = rt_graph_create();
    REQUIRE(g);
    const int64_t in[] = {RT_BATCH, IN}, dw[] = {IN, 3}, db[] = {3};
    int rc = rt_graph_add_input(g, "x", RT_F32, 2, in);
    rc |= rt_graph_add_param(g, "d/kernel", 2, dw, RT_INIT_GLOROT_UNIFORM, 1, NULL);
    rc |= rt_graph_add_param(g, "d/bias", 1, db, RT_INIT_ZEROS, 1, NULL);
    const char *i1[] = {"x", "d/kernel", "d/bias"}, *i2[] = {"d"};
    rc |= rt_graph_add_node(g, "d", "Dense", 3, i1, 0, NULL);
    rc |= rt_graph_add_node(g, "p", "Softmax", 1, i2, 0, NULL);
    rc |= rt_graph_set_output(g, "p");
    REQUIRE(rc == 0);
    return g;
}

static rt_train_config config(uint64_t seed)
{
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 0.01f;
    cfg.batch_size = B;
    cfg.seed = seed;
    return cfg;
}

/* STEPS steps of d on backend be (NULL: the default); the losses and
 * the kernel after them */
static void train(const char *be, const rt_data *d, float losses[STEPS], float w[IN * 3],
                  char backend[16])
{
    if (be) REQUIRE(rt_backend_select(be) == 0);
    rt_graph *g = graph();
    const rt_train_config cfg = config(11);
    rt_plan *p;
    rt_compile_report rep;
    char err[256];
    int rc = rt_plan_compile(g, &cfg, &p, &rep, err, sizeof err);
    if (rc < 0) fprintf(stderr, "compile: %s\n", err);
    REQUIRE(rc == 0);
    snprintf(backend, 16, "%s", rep.backend);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_plan_release(p);
    CHECK(rt_exec_train(e, d, STEPS, NULL, NULL, NULL, losses) == 0);
    CHECK(rt_exec_get_param(e, 0, w) >= 0);
    rt_exec_destroy(e);
    rt_graph_destroy(g);
}

static uint64_t rs = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 32);
}

int main(void)
{
    /* the engine alone has no backend: this program registers two */
    unsetenv("RT_BACKEND");
    CHECK(strcmp(rt_backend_list(), "") == 0);
    toy = rt__backend_ref;
    toy.name = "toy";
    toy.describe = NULL;
    toy.rank = rt__backend_ref.rank + 1;
    toy.alloc = toy_alloc;
    toy.release = toy_release;
    toy.gather = toy_gather;
    toy.run = toy_run;
    toy.update = toy_update;
    toy.enter = toy_enter;
    toy.leave = toy_leave;
    rt__backend_register(&rt__backend_ref);
    rt__backend_register(&toy);
    CHECK(strcmp(rt_backend_list(), "toy,ref") == 0);

    static float x[N * IN];
    static int32_t y[N];
    static uint8_t img[N * IMG];
    for (int i = 0; i < N * IN; i++) x[i] = (float)(rnd() % 2001) / 1000.0f - 1.0f;
    for (int i = 0; i < N; i++) y[i] = (int32_t)(rnd() % 3);
    for (int i = 0; i < N * IMG; i++) img[i] = (uint8_t)rnd();
    rt_data d = {.x = x, .y = y, .y_dtype = RT_I32, .n = N};

    /* the default by rank: toy, every step through its table */
    float lt[STEPS], lr[STEPS], wt[IN * 3], wr[IN * 3];
    char bt[16], br[16];
    train(NULL, &d, lt, wt, bt);
    CHECK(strcmp(rt_backend_name(), "toy") == 0);
    CHECK(strcmp(bt, "toy") == 0);
    CHECK(cnt.gathers == STEPS && cnt.augmented == 0 && cnt.updates == STEPS);
    CHECK(cnt.calls >= 2 * STEPS); /* forward and backward calls each step */
    CHECK(cnt.enters == 1 && cnt.leaves == 1);
    CHECK(cnt.live == 0);          /* every buffer was its, and went back */
    train("ref", &d, lr, wr, br);
    CHECK(strcmp(br, "ref") == 0);
    CHECK(cnt.gathers == STEPS);   /* ref's run does not pass through toy */
    CHECK(memcmp(lt, lr, sizeof lt) == 0 && memcmp(wt, wr, sizeof wt) == 0);

    /* the same with augmented images at floats 1 .. 48 of each row */
    d.aug = (rt_augment){.img = img, .h = 4, .w = 4, .c = 3, .off = 1,
                         .mean = {0.5f, 0.4f, 0.3f}, .std = {0.25f, 0.0f, 0.5f},
                         .crop_pad = 2, .flip = 1, .brightness = 0.2f, .contrast = 0.5f,
                         .epoch = 3};
    train("toy", &d, lt, wt, bt);
    CHECK(cnt.augmented == STEPS);
    train("ref", &d, lr, wr, br);
    CHECK(memcmp(lt, lr, sizeof lt) == 0 && memcmp(wt, wr, sizeof wt) == 0);

    /* ref's gather against rt_aug_apply, row by row, over four epochs'
     * draws; the floats around the image are the row's own */
    REQUIRE(rt_backend_select("ref") == 0);
    rt_graph *g = graph();
    const rt_train_config cfg = config(5);
    rt_plan *p;
    char err[256];
    REQUIRE(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    static float rows[B * IN], want[IMG];
    int32_t ly[B];
    int64_t idx[B];
    int crops = 0, flips = 0, rows_checked = 0;
    for (uint64_t ep = 0; ep < 4; ep++) {
        d.aug.epoch = ep;
        for (int s = 0; s < N / B; s++) {
            for (int i = 0; i < B; i++) idx[i] = (s * B + i * 7) % N;
            REQUIRE(rt_exec_rows(e, &d, idx, B, rows, ly) == 0);
            for (int i = 0; i < B; i++) {
                const int64_t r = idx[i];
                rt_aug_draw dr;
                rt_aug_draws(&d.aug, cfg.seed, (uint64_t)r, &dr);
                crops += dr.dx != 0 || dr.dy != 0;
                flips += dr.flip;
                rt_aug_apply(&d.aug, &dr, img + r * IMG, want);
                const float *row = rows + i * IN;
                CHECK(memcmp(row + 1, want, sizeof want) == 0);
                CHECK(row[0] == x[r * IN] && row[IN - 1] == x[r * IN + IN - 1]);
                CHECK(ly[i] == y[r]);
                rows_checked++;
            }
        }
    }
    printf("ref gather = rt_aug_apply on %d rows (%d cropped, %d flipped)\n", rows_checked,
           crops, flips);
    CHECK(crops > rows_checked / 2 && flips > rows_checked / 4);
    /* an image that does not fit the input is refused, not read past */
    d.aug.off = 3;
    CHECK(rt_exec_check_data(e, &d) == RT_EINVAL);
    CHECK(strstr(rt_exec_errmsg(e), "do not fit") != NULL);
    rt_exec_destroy(e);
    rt_plan_release(p);
    rt_graph_destroy(g);
    return rt_test_done("engine_backend_toy");
}
