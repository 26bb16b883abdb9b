/*
 * test_state.c - the state directory without a daemon (rt_state.h):
 * a checkpoint holds what rt_exec_save_state holds (written from spans,
 * without a copy) and restores an exec that continues bit-identically; the
 * last K are kept; a corrupt or torn newest one is skipped for the one
 * before it; a write that hits RLIMIT_FSIZE (a full disk) fails with
 * RT_ETOOBIG and "disk full", leaving the previous files as they were and
 * no temporary file.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_state.h"
#include "rt_program_impl.h"

#include "../lib/rt_check.h"

typedef int (*rt__ckpt_use_fn)(void *ud, const rt_ckpt_view *v, char *err, size_t errlen);
int rt__ckpt_load_newest(const char *dir, rt__ckpt_use_fn use, void *ud, int *warnings);

static float X[105 * 4];
static int32_t Y[105];

static rt_plan *compile(void)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 4}, dw1[] = {4, 16}, db1[] = {16}, dw2[] = {16, 3}, db2[] = {3};
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    REQUIRE(rt_graph_add_param(g, "w1", 2, dw1, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "b1", 1, db1, RT_INIT_ZEROS, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "w2", 2, dw2, RT_INIT_GLOROT_UNIFORM, 1, NULL) == 0);
    REQUIRE(rt_graph_add_param(g, "b2", 1, db2, RT_INIT_ZEROS, 1, NULL) == 0);
    const char *i1[] = {"x", "w1", "b1"}, *i2[] = {"d1"}, *i3[] = {"r1", "w2", "b2"},
               *i4[] = {"d2"};
    REQUIRE(rt_graph_add_node(g, "d1", "Dense", 3, i1, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "r1", "Relu", 1, i2, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "d2", "Dense", 3, i3, 0, NULL) == 0);
    REQUIRE(rt_graph_add_node(g, "probs", "Softmax", 1, i4, 0, NULL) == 0);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.opt = RT_OPT_ADAM;
    cfg.lr = 0.01f;
    cfg.batch_size = 20;
    cfg.seed = 7;
    cfg.label_dtype = RT_I32;
    rt_plan *p;
    char err[256];
    int rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
    rt_graph_destroy(g);
    return p;
}

static void train(rt_exec *e, int steps)
{
    rt_data d = {.x = X, .y = Y, .y_dtype = RT_I32, .n = 105};
    rt_train_result r;
    REQUIRE(rt_exec_train(e, &d, steps, &r, NULL, NULL, NULL) == 0);
}

static int n_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name), s = strlen(suffix);
        n += l > s && strcmp(e->d_name + l - s, suffix) == 0;
    }
    if (d)
        closedir(d);
    return n;
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
    if (fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static int64_t step_of(const rt_ckpt_view *v, rt_plan *p)
{
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    int64_t s = rt_exec_load_state(e, v->exec, v->exec_len) == 0 ? rt_exec_global_step(e) : -1;
    rt_exec_destroy(e);
    return s;
}

/* What rt__ckpt_load_newest handed over (the view lives only during the
 * call): its step, its record, whether its model is req; load (if any)
 * gets its state. A step above refuse_above is refused, as a restore
 * refuses a state that does not fit its program. */
typedef struct taken {
    rt_plan *plan;
    rt_exec *load;
    int64_t step, refuse_above;
    rt_ckpt_meta meta;
    const char *req;
    size_t req_len;
    int req_ok, calls;
} taken;

static int take(void *ud, const rt_ckpt_view *v, char *err, size_t errlen)
{
    taken *t = ud;
    t->calls++;
    int64_t s = step_of(v, t->plan);
    if (t->refuse_above && s > t->refuse_above) {
        snprintf(err, errlen, "step %lld refused", (long long)s);
        return RT_EDATA;
    }
    t->step = s;
    t->meta = v->meta;
    t->req_ok = v->req_len == t->req_len && memcmp(v->req, t->req, t->req_len) == 0;
    return t->load ? rt_exec_load_state(t->load, v->exec, v->exec_len) : 0;
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 2);
    for (int i = 0; i < 105 * 4; i++)
        X[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < 105; i++)
        Y[i] = i % 3;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/state", argv[1]);
    rt_state_config sc = {.dir = dir, .keep = 3};
    rt_state *st;
    char err[300];
    REQUIRE(rt_state_open(&sc, &st, err, sizeof err) == 0);

    rt_plan *plan = compile();
    rt_exec *e;
    REQUIRE(rt_exec_create(plan, &e) == 0);
    rt_program prog;
    memset(&prog, 0, sizeof prog);
    snprintf(prog.id, sizeof prog.id, "p-test");
    prog.exec = e;
    prog.plan = plan;
    static const char req[] = "a model record";
    prog.req = (uint8_t *)req;
    prog.req_len = sizeof req;
    prog.last_seq = 41;
    prog.ring[41 % RT_SEQ_RING] = (rt_seq_rec){.seq = 41, .global_step = 9,
                                               .mean = {.loss = 0.5, .acc = 0.25, .samples = 20}};

    /* spans = save_state's blob, byte for byte */
    unsigned char hdr[RT_EXEC_STATE_HDR];
    rt_exec_span sp[4];
    train(e, 5);
    REQUIRE(rt_exec_state_spans(e, hdr, sp) == 0);
    size_t n = rt_exec_state_size(e);
    CHECK(sp[0].n + sp[1].n + sp[2].n + sp[3].n == n);
    unsigned char *blob = malloc(n), *cat = malloc(n);
    REQUIRE(rt_exec_save_state(e, blob, n) == 0);
    memcpy(cat, sp[0].p, sp[0].n);
    memcpy(cat + sp[0].n, sp[1].p, sp[1].n);
    memcpy(cat + sp[0].n + sp[1].n, sp[2].p, sp[2].n);
    CHECK(memcmp(blob, cat, n) == 0);
    free(blob);
    free(cat);

    /* five checkpoints at steps 5, 10, ..., 25: the last three stay */
    for (int k = 0; k < 5; k++) {
        if (k)
            train(e, 5);
        CHECK(rt_state_checkpoint(st, "s-test", &prog, err, sizeof err) == 0);
        CHECK(prog.ckpt_step == 5 * (k + 1));
    }
    char pdir[700];
    snprintf(pdir, sizeof pdir, "%s/sessions/s-test/p-test", dir);
    CHECK(n_files(pdir, ".rtck") == 3);
    CHECK(n_files(pdir, ".tmp") == 0);

    /* the newest loads, with its counters, and continues bit-identically */
    rt_ckpt_view v;
    int warn = 0;
    rt_exec *e2;
    REQUIRE(rt_exec_create(plan, &e2) == 0);
    taken t = {.plan = plan, .load = e2, .req = req, .req_len = sizeof req};
    REQUIRE(rt__ckpt_load_newest(pdir, take, &t, &warn) == 0);
    CHECK(warn == 0 && t.calls == 1);
    CHECK(t.step == 25);
    CHECK(t.req_ok);
    CHECK(t.meta.last_seq == 41 && t.meta.ring[41 % RT_SEQ_RING].global_step == 9 &&
          t.meta.ring[41 % RT_SEQ_RING].mean.loss == 0.5);
    CHECK(strcmp(t.meta.program_id, "p-test") == 0);
    t.load = NULL;
    train(e, 13);
    train(e2, 13);
    size_t sn = rt_exec_state_size(e);
    unsigned char *a = malloc(sn), *b = malloc(sn);
    rt_exec_save_state(e, a, sn);
    rt_exec_save_state(e2, b, sn);
    CHECK(memcmp(a, b, sn) == 0);
    /* a refused blob (Adam's v negative: the last float) leaves e2 as it
     * was, weights and counters */
    const float neg = -1.0f;
    memcpy(a + sn - 4, &neg, 4);
    CHECK(rt_exec_load_state(e2, a, sn) == RT_EDATA);
    CHECK(strstr(rt_exec_errmsg(e2), "never negative") != NULL);
    unsigned char *c = malloc(sn);
    rt_exec_save_state(e2, c, sn);
    CHECK(memcmp(b, c, sn) == 0);
    free(c);
    free(a);
    free(b);
    rt_exec_destroy(e2);

    /* the newest corrupted (one byte), then the next torn (cut short):
     * each time the one before it is taken, with a warning */
    char paths[3][1200];
    {
        DIR *d = opendir(pdir);
        struct dirent *de;
        int k = 0;
        char names[3][300];
        while ((de = readdir(d)))
            if (strstr(de->d_name, ".rtck") && k < 3)
                snprintf(names[k++], sizeof names[0], "%s", de->d_name);
        closedir(d);
        REQUIRE(k == 3);
        for (int i = 0; i < 3; i++) /* ascending by name = by number */
            for (int j = i + 1; j < 3; j++)
                if (strcmp(names[j], names[i]) < 0) {
                    char t[300];
                    memcpy(t, names[i], sizeof t);
                    memcpy(names[i], names[j], sizeof t);
                    memcpy(names[j], t, sizeof t);
                }
        for (int i = 0; i < 3; i++)
            snprintf(paths[i], sizeof paths[i], "%.699s/%.299s", pdir, names[i]);
    }
    size_t l2;
    char *c2 = slurp(paths[2], &l2);
    c2[l2 / 2] ^= 0x40;
    FILE *f = fopen(paths[2], "wb");
    fwrite(c2, 1, l2, f);
    fclose(f);
    free(c2);
    warn = 0;
    REQUIRE(rt__ckpt_load_newest(pdir, take, &t, &warn) == 0);
    CHECK(warn == 1);
    CHECK(t.step == 20);
    /* one that parses but that the program refuses: the one before it */
    warn = 0;
    t.refuse_above = 15;
    REQUIRE(rt__ckpt_load_newest(pdir, take, &t, &warn) == 0);
    CHECK(warn == 2);
    CHECK(t.step == 15);
    t.refuse_above = 10;
    warn = 0;
    CHECK(rt__ckpt_load_newest(pdir, take, &t, &warn) == RT_ENOTFOUND);
    CHECK(warn == 3);
    t.refuse_above = 0;
    CHECK(truncate(paths[1], 100) == 0);
    warn = 0;
    REQUIRE(rt__ckpt_load_newest(pdir, take, &t, &warn) == 0);
    CHECK(warn == 2);
    CHECK(t.step == 15);
    {
        char e3[300];
        size_t l0;
        char *c0 = slurp(paths[0], &l0);
        CHECK(rt_ckpt_parse((const uint8_t *)c0, l0 - 1, &v, e3, sizeof e3) == RT_ECHECKSUM);
        CHECK(rt_ckpt_parse((const uint8_t *)c0, 5, &v, e3, sizeof e3) == RT_EDATA);
        free(c0);
    }

    /* a full disk: the write stops at RLIMIT_FSIZE */
    signal(SIGXFSZ, SIG_IGN);
    size_t before_len;
    char *before = slurp(paths[0], &before_len);
    struct rlimit rl = {4096, 4096}, old;
    getrlimit(RLIMIT_FSIZE, &old);
    rl.rlim_max = old.rlim_max;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    int64_t kept_step = prog.ckpt_step;
    train(e, 5);
    int rc = rt_state_checkpoint(st, "s-test", &prog, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(rc == RT_ETOOBIG);
    CHECK(strstr(err, "disk full") != NULL);
    CHECK(prog.ckpt_step == kept_step);
    CHECK(n_files(pdir, ".tmp") == 0);
    CHECK(n_files(pdir, ".rtck") == 3);
    size_t after_len;
    char *after = slurp(paths[0], &after_len);
    CHECK(before && after && before_len == after_len && !memcmp(before, after, before_len));
    free(before);
    free(after);

    /* due: by steps, not when nothing ran */
    rt_state_close(st);
    rt_state_config sc2 = {.dir = dir, .every_steps = 10};
    REQUIRE(rt_state_open(&sc2, &st, err, sizeof err) == 0);
    prog.ckpt_step = rt_exec_global_step(e);
    prog.ckpt_ns = 0;
    CHECK(!rt_state_checkpoint_due(st, &prog, 0, 0));
    train(e, 9);
    CHECK(!rt_state_checkpoint_due(st, &prog, 0, 0));
    CHECK(rt_state_checkpoint_due(st, &prog, 5, 0)); /* the call's own interval */
    train(e, 1);
    CHECK(rt_state_checkpoint_due(st, &prog, 0, 0));

    rt_state_close(st);
    rt_exec_destroy(e);
    rt_plan_release(plan);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("test_state: all checks passed\n");
    return failures ? 1 : 0;
}
