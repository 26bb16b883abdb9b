/*
 * test_optim.c - optimizers, learning-rate schedules and gradient clipping
 * against the formulas (Keras' SGD/momentum/Nesterov, RMSprop, Adam and
 * AdamW: keras/src/optimizers/, eps added to sqrt(v), not to sqrt(v_hat)),
 * replayed in double in this test.
 * Each step: g = rt_exec_compute_grads at the current weights (the batch is
 * the whole data set, unshuffled, so the training step sees the same g),
 * then one rt_exec_train step, then the weights are compared with the
 * replay. Tolerance: |w - ref| <= 1e-6 + 1e-5 |ref|.
 * Also: plan keys, the compile report and the memory plan of a deeper net.
 */
#include <stdint.h>

#include "rt_test.h"

#define NP 6
#define NS 4

static float X[NS * NP], Y[NS];

static rt_plan *plan(const rt_train_config *cfg)
{
    /* y = sum_j x_j w_j + b, MSE */
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, NP}, dw[] = {NP, 1}, db[] = {1};
    const float w0[NP] = {0.5f, -0.3f, 0.8f, 0.1f, -0.7f, 0.2f}, b0 = 0.05f;
    REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
    REQUIRE(rt_graph_add_param(g, "w", 2, dw, RT_INIT_ZEROS, 1, w0) == 0);
    REQUIRE(rt_graph_add_param(g, "b", 1, db, RT_INIT_ZEROS, 1, &b0) == 0);
    const char *ins[] = {"x", "w", "b"};
    REQUIRE(rt_graph_add_node(g, "y", "Dense", 3, ins, 0, NULL) == 0);
    rt_plan *p;
    char err[256];
    int rc = rt_plan_compile(g, cfg, &p, NULL, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    REQUIRE(rc == 0);
    rt_graph_destroy(g);
    return p;
}

static double sched(const rt_train_config *c, int64_t step)
{
    const double lr = c->lr, lo = c->min_lr;
    switch (c->sched) {
    case RT_SCHED_STEP: return lr * pow(c->gamma, (double)(step / c->step_size));
    case RT_SCHED_COSINE: {
        double t = step < (int64_t)c->total_steps ? (double)step : c->total_steps;
        return lo + (lr - lo) * (1 + cos(M_PI * t / c->total_steps)) / 2;
    }
    case RT_SCHED_LINEAR_WARMUP: return lr * fmin(1.0, (double)(step + 1) / c->warmup_steps);
    case RT_SCHED_WARMUP_COSINE:
        if (step < (int64_t)c->warmup_steps) return lr * (double)(step + 1) / c->warmup_steps;
        {
            double span = c->total_steps - c->warmup_steps, t = fmin((double)(step - c->warmup_steps), span);
            return lo + (lr - lo) * (1 + cos(M_PI * t / span)) / 2;
        }
    default: return lr;
    }
}

static void replay(const char *name, rt_train_config cfg, int steps)
{
    cfg.batch_size = NS;
    cfg.shuffle = 0;
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.metrics = 0;
    rt_plan *p = plan(&cfg);
    rt_exec *e;
    REQUIRE(rt_exec_create(p, &e) == 0);
    rt_data d = {.x = X, .y = Y, .y_dtype = RT_F32, .n = NS};
    double w[NP + 1], m[NP + 1] = {0}, v[NP + 1] = {0};
    float wf[NP + 1], gf[NP + 1];
    rt_exec_get_param(e, 0, wf);
    rt_exec_get_param(e, 1, wf + NP);
    for (int i = 0; i <= NP; i++) w[i] = wf[i];
    int bad = 0;
    for (int s = 0; s < steps && !bad; s++) {
        double loss;
        CHECK_RC(rt_exec_compute_grads(e, &d, NS, &loss));
        rt_exec_get_grad(e, 0, gf);
        rt_exec_get_grad(e, 1, gf + NP);
        double g[NP + 1], norm = 0;
        for (int i = 0; i <= NP; i++) norm += (double)gf[i] * gf[i];
        norm = sqrt(norm);
        for (int i = 0; i <= NP; i++)
            g[i] = cfg.clip_norm > 0 && norm > cfg.clip_norm ? gf[i] * cfg.clip_norm / norm : gf[i];
        const double lr = sched(&cfg, s);
        const int64_t t = s + 1;
        for (int i = 0; i <= NP; i++) {
            g[i] += cfg.l2_decay * w[i]; /* torch.optim's weight_decay */
            switch (cfg.opt) {
            case RT_OPT_SGD:
                if (cfg.momentum != 0 && cfg.dampening > 0) {
                    /* torch.optim.SGD: buf = g, then mu buf + (1-d) g */
                    m[i] = t == 1 ? g[i] : cfg.momentum * m[i] + (1 - cfg.dampening) * g[i];
                    w[i] -= lr * m[i];
                } else if (cfg.momentum == 0) {
                    w[i] -= lr * g[i];
                } else {
                    m[i] = cfg.momentum * m[i] - lr * g[i];
                    w[i] += cfg.nesterov ? cfg.momentum * m[i] - lr * g[i] : m[i];
                }
                break;
            case RT_OPT_RMSPROP:
                v[i] = cfg.rho * v[i] + (1 - cfg.rho) * g[i] * g[i];
                w[i] -= lr * g[i] / sqrt(v[i] + cfg.eps);
                break;
            default: /* Adam, AdamW */
                if (cfg.opt == RT_OPT_ADAMW) w[i] *= 1 - lr * cfg.weight_decay;
                m[i] = cfg.beta1 * m[i] + (1 - cfg.beta1) * g[i];
                v[i] = cfg.beta2 * v[i] + (1 - cfg.beta2) * g[i] * g[i];
                if (cfg.adam_eps_vhat) /* torch.optim.Adam */
                    w[i] -= lr / (1 - pow(cfg.beta1, (double)t)) * m[i] /
                            (sqrt(v[i]) / sqrt(1 - pow(cfg.beta2, (double)t)) + cfg.eps);
                else
                    w[i] -= m[i] * (lr * sqrt(1 - pow(cfg.beta2, (double)t)) /
                                    (1 - pow(cfg.beta1, (double)t))) / (sqrt(v[i]) + cfg.eps);
                break;
            }
        }
        rt_train_result r;
        CHECK_RC(rt_exec_train(e, &d, 1, &r, NULL, NULL, NULL));
        CHECK(fabs(r.last.loss - loss) <= 1e-6 * (1 + fabs(loss)));
        CHECK(isnan(r.last.acc)); /* accuracy is not a metric here */
        rt_exec_get_param(e, 0, wf);
        rt_exec_get_param(e, 1, wf + NP);
        for (int i = 0; i <= NP; i++) {
            if (fabs(wf[i] - w[i]) > 1e-6 + 1e-5 * fabs(w[i])) {
                fprintf(stderr, "%s step %d: w[%d] = %.8g, want %.8g\n", name, s + 1, i,
                        (double)wf[i], w[i]);
                rt_test_failures++;
                bad = 1;
                break;
            }
            w[i] = wf[i]; /* replay from the engine's f32 state */
        }
    }
    printf("%-28s %s\n", name, bad ? "FAILED" : "ok");
    rt_exec_destroy(e);
    rt_plan_release(p);
}

int main(void)
{
    for (int i = 0; i < NS * NP; i++) X[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < NS; i++) Y[i] = (float)i - 1.5f;
    rt_train_config c;
    rt_train_config_init(&c);
    c.opt = RT_OPT_SGD;
    c.lr = 0.05f;
    replay("sgd", c, 12);
    c.momentum = 0.9f;
    replay("sgd momentum", c, 12);
    c.nesterov = 1;
    replay("sgd nesterov", c, 12);
    /* torch.optim.SGD's dampening and weight_decay, Adam's weight_decay */
    c.nesterov = 0;
    c.dampening = 0.3f;
    c.l2_decay = 0.05f;
    replay("sgd dampening, l2 (torch)", c, 12);
    rt_train_config_init(&c);
    c.lr = 0.02f;
    c.l2_decay = 0.1f;
    replay("adam l2 (torch)", c, 12);
    rt_train_config_init(&c);
    c.opt = RT_OPT_RMSPROP;
    c.lr = 0.01f;
    replay("rmsprop", c, 12);
    rt_train_config_init(&c);
    c.lr = 0.02f;
    replay("adam", c, 12);
    c.opt = RT_OPT_ADAMW;
    c.weight_decay = 0.1f;
    replay("adamw", c, 12);
    /* torch.optim.Adam's eps (ONNX models): a large eps shows the place */
    rt_train_config_init(&c);
    c.lr = 0.02f;
    c.eps = 1e-2f;
    replay("adam, Keras' eps 1e-2", c, 12);
    c.adam_eps_vhat = 1;
    replay("adam, torch's eps 1e-2", c, 12);

    rt_train_config_init(&c);
    c.opt = RT_OPT_SGD;
    c.lr = 0.05f;
    c.sched = RT_SCHED_STEP;
    c.step_size = 3;
    c.gamma = 0.5f;
    replay("sgd + step decay", c, 12);
    c.sched = RT_SCHED_COSINE;
    c.total_steps = 8;
    c.min_lr = 0.001f;
    replay("sgd + cosine", c, 12);
    c.sched = RT_SCHED_LINEAR_WARMUP;
    c.warmup_steps = 5;
    replay("sgd + linear warmup", c, 12);
    c.sched = RT_SCHED_WARMUP_COSINE;
    c.warmup_steps = 3;
    c.total_steps = 10;
    replay("sgd + warmup cosine", c, 12);
    rt_train_config_init(&c);
    c.opt = RT_OPT_SGD;
    c.lr = 0.05f;
    c.clip_norm = 0.5f;
    replay("sgd + clip by global norm", c, 12);
    c.opt = RT_OPT_ADAM;
    replay("adam + clip by global norm", c, 12);

    /* names */
    rt_loss_kind lk;
    rt_opt_kind ok;
    rt_sched_kind sk;
    CHECK(rt_loss_from_name("mse", &lk) == 0 && lk == RT_LOSS_MSE);
    CHECK(rt_loss_from_name("sparse_categorical_crossentropy", &lk) == 0 && lk == RT_LOSS_SPARSE_CE);
    CHECK(rt_loss_from_name("logcosh", &lk) == 0 && lk == RT_LOSS_LOGCOSH);
    CHECK(rt_loss_from_name("hinge", &lk) == 0 && lk == RT_LOSS_HINGE);
    CHECK(rt_loss_from_name("quantile", &lk) == RT_EINVAL);
    CHECK(rt_opt_from_name("AdamW", &ok) == 0 && ok == RT_OPT_ADAMW);
    CHECK(rt_opt_from_name("lbfgs", &ok) == RT_EINVAL);
    CHECK(rt_sched_from_name("cosine", &sk) == 0 && sk == RT_SCHED_COSINE);
    CHECK(rt_engine_loss_names()[0] && rt_engine_optimizer_names()[3]);
    int has_dense = 0;
    for (const char *const *n = rt_engine_op_names(); *n; n++) has_dense |= !strcmp(*n, "Dense");
    CHECK(has_dense);

    /* plan keys: equal graphs and configs give equal keys */
    {
        rt_graph *g1 = rt_test_wa_graph(NULL, NULL, NULL, NULL);
        rt_graph *g2 = rt_test_wa_graph(NULL, NULL, NULL, NULL);
        float w[128] = {0};
        rt_graph *g3 = rt_test_wa_graph(w, NULL, NULL, NULL);
        rt_train_config_init(&c);
        uint8_t k1[16], k2[16], k3[16], k4[16];
        CHECK_RC(rt_plan_key(g1, &c, k1));
        CHECK_RC(rt_plan_key(g2, &c, k2));
        CHECK_RC(rt_plan_key(g3, &c, k3));
        c.batch_size = 64;
        CHECK_RC(rt_plan_key(g1, &c, k4));
        CHECK(memcmp(k1, k2, 16) == 0);
        CHECK(memcmp(k1, k3, 16) != 0);
        CHECK(memcmp(k1, k4, 16) != 0);
        rt_graph_destroy(g1);
        rt_graph_destroy(g2);
        rt_graph_destroy(g3);
    }

    /* a deeper net: the report adds up and the memory plan reuses buffers */
    {
        rt_graph *g = rt_graph_create();
        int64_t in[] = {RT_BATCH, 32};
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
        const char *prev = "x";
        char names[8][3][16];
        for (int l = 0; l < 8; l++) {
            int64_t dw[] = {32, 32}, db[] = {32};
            snprintf(names[l][0], 16, "w%d", l);
            snprintf(names[l][1], 16, "d%d", l);
            snprintf(names[l][2], 16, "t%d", l);
            REQUIRE(rt_graph_add_param(g, names[l][0], 2, dw, RT_INIT_HE_NORMAL, 1, NULL) == 0);
            REQUIRE(rt_graph_add_param(g, "dummy", 1, db, RT_INIT_ONES, 0, NULL) == (l ? RT_OK : RT_OK));
            const char *ins[] = {prev, names[l][0]};
            REQUIRE(rt_graph_add_node(g, names[l][1], "Dense", 2, ins, 0, NULL) == 0);
            const char *ai[] = {names[l][1]};
            REQUIRE(rt_graph_add_node(g, names[l][2], "Tanh", 1, ai, 0, NULL) == 0);
            prev = names[l][2];
        }
        rt_train_config_init(&c);
        c.loss = RT_LOSS_SPARSE_CE;
        c.from_logits = 1;
        c.batch_size = 64;
        rt_plan *p;
        rt_compile_report rep;
        char err[256];
        /* "dummy" was added 8 times: a duplicate name */
        CHECK(rt_plan_compile(g, &c, &p, &rep, err, sizeof err) == RT_EGRAPH);
        rt_graph_destroy(g);
        g = rt_graph_create();
        REQUIRE(rt_graph_add_input(g, "x", RT_F32, 2, in) == 0);
        prev = "x";
        for (int l = 0; l < 8; l++) {
            int64_t dw[] = {32, 32};
            REQUIRE(rt_graph_add_param(g, names[l][0], 2, dw, RT_INIT_HE_NORMAL, 1, NULL) == 0);
            const char *ins[] = {prev, names[l][0]};
            REQUIRE(rt_graph_add_node(g, names[l][1], "Dense", 2, ins, 0, NULL) == 0);
            const char *ai[] = {names[l][1]};
            REQUIRE(rt_graph_add_node(g, names[l][2], "Tanh", 1, ai, 0, NULL) == 0);
            prev = names[l][2];
        }
        REQUIRE(rt_plan_compile(g, &c, &p, &rep, err, sizeof err) == 0);
        CHECK(rep.param_count == 8 * 32 * 32 && rep.trainable_param_count == rep.param_count);
        CHECK(rep.n_nodes == 16);
        CHECK(rep.arena_bytes < rep.naive_bytes / 2); /* activations and grads reuse */
        CHECK(rep.flops_per_step > 3ull * 2 * 64 * 32 * 32 * 8 - 2 * 64 * 32 * 32);
        printf("8-layer MLP: arena %llu B of naive %llu B, %llu FLOP/step, %u kernels\n",
               (unsigned long long)rep.arena_bytes, (unsigned long long)rep.naive_bytes,
               (unsigned long long)rep.flops_per_step, rep.n_kernels);
        /* it trains */
        rt_exec *e;
        REQUIRE(rt_exec_create(p, &e) == 0);
        float xs[64 * 32];
        int32_t ys[64];
        for (int i = 0; i < 64 * 32; i++) xs[i] = (float)((i * 13) % 17) / 8.0f - 1.0f;
        for (int i = 0; i < 64; i++) ys[i] = i % 32;
        rt_data d = {.x = xs, .y = ys, .y_dtype = RT_I32, .n = 64};
        rt_metrics m0, m1;
        CHECK_RC(rt_exec_evaluate(e, &d, &m0));
        CHECK_RC(rt_exec_train(e, &d, 50, NULL, NULL, NULL, NULL));
        CHECK_RC(rt_exec_evaluate(e, &d, &m1));
        CHECK(m1.loss < m0.loss);
        /* he_normal: truncated at 2 stddev of sqrt(2/32)/0.8796 */
        float w[32 * 32];
        rt_exec_destroy(e);
        REQUIRE(rt_exec_create(p, &e) == 0);
        rt_exec_get_param(e, 0, w);
        double mean = 0, var = 0, lim = 2 * sqrt(2.0 / 32) / 0.87962566103423978;
        for (int i = 0; i < 1024; i++) {
            mean += w[i] / 1024.0;
            CHECK(fabs(w[i]) <= lim * 1.0001);
        }
        for (int i = 0; i < 1024; i++) var += (w[i] - mean) * (w[i] - mean) / 1024.0;
        CHECK(fabs(mean) < 0.02 && fabs(sqrt(var) - sqrt(2.0 / 32)) < 0.02);
        rt_exec_destroy(e);
        rt_plan_release(p);
        rt_graph_destroy(g);
    }
    return rt_test_done("test_optim");
}
