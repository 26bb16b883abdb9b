/* fuzz_ckpt.c - the checkpoint parser (rt_ckpt_parse, rt_ckpt_apply_meta:
 * server/durable/rt_ckpt.c) and the exec-state loader (rt_exec_load_state:
 * server/engine/rt_exec.c), which RestoreCheckpoint and a restart from
 * --state-dir feed with bytes from outside.
 *
 * Structure-aware where it matters: the input's last 8 bytes are replaced
 * by the XXH3-64 of the rest before parsing, as an attacker recomputes it,
 * so a mutation reaches the fields instead of dying at the checksum. An
 * input starting "RTEXEC" is an exec-state blob on its own. What parses
 * is loaded into each of two fixture programs (a 4-16-3 MLP under Adam,
 * a 4-8-3 one under RMSprop with a cosine schedule); whichever takes it
 * then trains 2 steps. Checked:
 *  - a refusal has a known code and a message, and leaves the exec's state
 *    exactly as it was;
 *  - a load that succeeds trains without a sanitizer report, its step
 *    count moves by exactly 2, and, when every loaded float is moderate
 *    (|x| <= 16, the rate <= 1), its losses are finite: a loaded state
 *    cannot turn a step into NaN.
 *
 * Built with -DRT_FUZZ_CKPT_GEN it is instead fuzz_gen_ckpt_seeds, which
 * writes the seeds (tests/fuzz/ckpt) from the same fixtures:
 *     fuzz_gen_ckpt_seeds tests/fuzz/ckpt */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "rt_state.h"
#include "rt_program_impl.h"

static float X[45 * 4];
static int32_t Y[45];

typedef struct fixture {
    rt_plan *plan;
    rt_exec *e;
    size_t n;              /* its state's size */
    unsigned char *before; /* its state before a load, to compare */
} fixture;

static fixture F[2];

static rt_plan *mlp(int hidden, rt_opt_kind opt)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 4}, dw1[] = {4, hidden}, db1[] = {hidden}, dw2[] = {hidden, 3},
            db2[] = {3};
    const char *i1[] = {"x", "w1", "b1"}, *i2[] = {"d1"}, *i3[] = {"r1", "w2", "b2"},
               *i4[] = {"d2"};
    if (!g || rt_graph_add_input(g, "x", RT_F32, 2, in) < 0 ||
        rt_graph_add_param(g, "w1", 2, dw1, RT_INIT_GLOROT_UNIFORM, 1, NULL) < 0 ||
        rt_graph_add_param(g, "b1", 1, db1, RT_INIT_ZEROS, 1, NULL) < 0 ||
        rt_graph_add_param(g, "w2", 2, dw2, RT_INIT_GLOROT_UNIFORM, 1, NULL) < 0 ||
        rt_graph_add_param(g, "b2", 1, db2, RT_INIT_ZEROS, 1, NULL) < 0 ||
        rt_graph_add_node(g, "d1", "Dense", 3, i1, 0, NULL) < 0 ||
        rt_graph_add_node(g, "r1", "Relu", 1, i2, 0, NULL) < 0 ||
        rt_graph_add_node(g, "d2", "Dense", 3, i3, 0, NULL) < 0 ||
        rt_graph_add_node(g, "probs", "Softmax", 1, i4, 0, NULL) < 0)
        abort();
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_SPARSE_CE;
    cfg.opt = opt;
    cfg.lr = 0.01f;
    cfg.batch_size = 8;
    cfg.seed = 7;
    cfg.label_dtype = RT_I32;
    cfg.metrics = RT_METRIC_ACCURACY;
    if (opt == RT_OPT_RMSPROP) {
        cfg.sched = RT_SCHED_COSINE;
        cfg.total_steps = 100;
    }
    rt_plan *p;
    char err[256];
    if (rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_ckpt: %s\n", err);
        abort();
    }
    rt_graph_destroy(g);
    return p;
}

static rt_data data(void)
{
    return (rt_data){.x = X, .y = Y, .y_dtype = RT_I32, .n = 45};
}

static void setup(void)
{
    for (int i = 0; i < 45 * 4; i++)
        X[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < 45; i++)
        Y[i] = i % 3;
    const rt_opt_kind opt[2] = {RT_OPT_ADAM, RT_OPT_RMSPROP};
    const int hidden[2] = {16, 8};
    for (int k = 0; k < 2; k++) {
        F[k].plan = mlp(hidden[k], opt[k]);
        if (rt_exec_create(F[k].plan, &F[k].e) < 0)
            abort();
        F[k].n = rt_exec_state_size(F[k].e);
        F[k].before = malloc(F[k].n);
    }
}

/* every weight and slot float loaded into e within +-16, its rate <= 1 */
static int moderate(rt_exec *e, const uint8_t *blob, size_t len)
{
    unsigned char hdr[RT_EXEC_STATE_HDR];
    rt_exec_span sp[4];
    if (rt_exec_state_spans(e, hdr, sp) < 0 || !(rt_exec_lr_override(e) <= 1.0f))
        return 0;
    for (size_t o = sp[0].n; o + 4 <= len; o += 4) {
        float v;
        memcpy(&v, blob + o, 4);
        if (!(fabsf(v) <= 16.0f))
            return 0;
    }
    return 1;
}

static void load_and_train(const uint8_t *blob, size_t len)
{
    for (int k = 0; k < 2; k++) {
        fixture *x = &F[k];
        rt_exec_save_state(x->e, x->before, x->n);
        int rc = rt_exec_load_state(x->e, blob, len);
        if (rc < 0) {
            if ((rc != RT_EDATA && rc != RT_ENAN) || !rt_exec_errmsg(x->e)[0])
                __builtin_trap();
            unsigned char *now = malloc(x->n);
            rt_exec_save_state(x->e, now, x->n);
            if (memcmp(now, x->before, x->n)) /* a refusal changed the exec */
                __builtin_trap();
            free(now);
            continue;
        }
        const int64_t s0 = rt_exec_global_step(x->e);
        const int mod = moderate(x->e, blob, len);
        float losses[2];
        rt_train_result r;
        rt_data d = data();
        if (rt_exec_train(x->e, &d, 2, &r, NULL, NULL, losses) < 0 ||
            rt_exec_global_step(x->e) != s0 + 2)
            __builtin_trap();
        if (mod && (!isfinite(losses[0]) || !isfinite(losses[1])))
            __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data_in, size_t size)
{
    if (!F[0].e)
        setup();
    if (size >= 6 && memcmp(data_in, "RTEXEC", 6) == 0) {
        load_and_train(data_in, size);
        return 0;
    }
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data_in, size);
    if (size >= 8) {
        uint64_t h = XXH3_64bits(buf, size - 8);
        memcpy(buf + size - 8, &h, 8);
    }
    rt_ckpt_view v;
    char err[300];
    int rc = rt_ckpt_parse(buf, size, &v, err, sizeof err);
    if (rc < 0) {
        if ((rc != RT_EDATA && rc != RT_ECHECKSUM) || !err[0] ||
            strnlen(err, sizeof err) == sizeof err)
            __builtin_trap();
        free(buf);
        return 0;
    }
    if (v.req_len > size || v.exec_len > size || v.meta.n_fit_epochs > RT_FIT_RING)
        __builtin_trap();
    rt_program *p = calloc(1, sizeof *p);
    rt_ckpt_apply_meta(p, &v);
    free(p);
    load_and_train(v.exec, v.exec_len);
    free(buf);
    return 0;
}

#ifdef RT_FUZZ_CKPT_GEN
/* ------------------------------------------------------ the seed writer */
static const char *outdir;

static void write_seed(const char *file, const uint8_t *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", outdir, file);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "fuzz_gen_ckpt_seeds: cannot write %s\n", path);
        exit(1);
    }
}

/* fixture k's program after steps steps, as a checkpoint (a Fit record
 * when fit), and its exec blob on its own */
static void seed(const char *name, int k, int steps, int fit, float lr, const char *exec_name)
{
    rt_exec *e;
    if (rt_exec_create(F[k].plan, &e) < 0)
        abort();
    rt_data d = data();
    if (lr > 0 && rt_exec_set_lr(e, lr) < 0)
        abort();
    if (rt_exec_train(e, &d, steps, NULL, NULL, NULL, NULL) < 0)
        abort();
    rt_program p;
    memset(&p, 0, sizeof p);
    snprintf(p.id, sizeof p.id, "p-seed");
    p.exec = e;
    p.plan = F[k].plan;
    static const uint8_t req[] = "a packed CompileRequest";
    p.req = (uint8_t *)req;
    p.req_len = sizeof req;
    p.last_seq = 3;
    if (fit) {
        p.fit_epochs = 3;
        p.fit = (rt_fit_rec){.id = 0x5eed, .first_epoch = 1, .steps_done = 14, .spe = 6,
                             .epochs = 4, .aligned = 1};
        p.fit_ring[0] = (rt_fit_epoch){.epoch = 2, .steps = 6};
        p.fit_ring[1] = (rt_fit_epoch){.epoch = 3, .steps = 12};
    }
    size_t n = rt_ckpt_size(&p);
    uint8_t *b = malloc(n);
    if (rt_ckpt_build("s-seed", &p, b, n) < 0)
        abort();
    write_seed(name, b, n);
    if (!fit && k == 0) {
        /* a near miss: the counters near 2^63 and a cursor whose
         * position times the batch wraps (once a segfault in the daemon) */
        rt_ckpt_view v;
        char err[200];
        if (rt_ckpt_parse(b, n, &v, err, sizeof err) < 0)
            abort();
        uint8_t *x = b + (v.exec - b);
        const int64_t big = INT64_MAX, pos = INT64_MAX / 8;
        memcpy(x + 32, &big, 8); /* rt__state_hdr.step */
        memcpy(x + 48, &pos, 8); /* rt__state_hdr.pos */
        write_seed("regress_pos_overflow.rtck", b, n); /* the harness reseals it */
    }
    free(b);
    if (exec_name) {
        size_t m = rt_exec_state_size(e);
        uint8_t *x = malloc(m);
        rt_exec_save_state(e, x, m);
        write_seed(exec_name, x, m);
        free(x);
    }
    rt_exec_destroy(e);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    setup();
    seed("adam_step5.rtck", 0, 5, 0, 0, "adam_step5.exec");
    seed("adam_fit.rtck", 0, 14, 1, 0, NULL);
    seed("rmsprop_lr.rtck", 1, 9, 0, 0.05f, "rmsprop_lr.exec");
    printf("fuzz_gen_ckpt_seeds: wrote 6 seeds to %s\n", outdir);
    return 0;
}
#endif
