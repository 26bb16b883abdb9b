/*
 * test_import_graph.c - rt_graph_import_pb, the builder the daemon's
 * Compile and the MPI worker ranks share: a well-formed Graph message
 * imports and compiles; each malformed one returns its code and the
 * message the daemon sends (tests/integration/test_robust.c checks the
 * same cases through gRPC); an allocator that says no gives RT_ENOMEM and
 * an empty message. Here with the heap allocator, as the worker ranks.
 */
#include "import_graph.h"
#include "rt_test.h"

/* A Dense(4 -> 3) + Softmax graph; the cases spoil one field of it. */
typedef struct msg {
    Rtrain__V1__Graph g;
    Rtrain__V1__ValueInfo in, *ins[1];
    Rtrain__V1__Param p[2], *pp[2];
    Rtrain__V1__Tensor bias_value;
    float bias[3];
    Rtrain__V1__Attr act, *attrs[1];
    Rtrain__V1__Node n[2], *np[2];
    int64_t in_shape[9], kernel_shape[2], bias_shape[1];
    char *d1_in[3], *sm_in[1];
} msg;

static void msg_init(msg *m)
{
    memset(m, 0, sizeof *m);
    m->g = (Rtrain__V1__Graph)RTRAIN__V1__GRAPH__INIT;
    m->in = (Rtrain__V1__ValueInfo)RTRAIN__V1__VALUE_INFO__INIT;
    m->in.name = "x";
    m->in.dtype = RTRAIN__V1__DTYPE__F32;
    m->in_shape[0] = -1;
    m->in_shape[1] = 4;
    m->in.shape = m->in_shape;
    m->in.n_shape = 2;
    m->ins[0] = &m->in;
    m->kernel_shape[0] = 4;
    m->kernel_shape[1] = 3;
    m->bias_shape[0] = 3;
    const char *pn[2] = {"d1/kernel", "d1/bias"};
    int64_t *ps[2] = {m->kernel_shape, m->bias_shape};
    for (int i = 0; i < 2; i++) {
        m->p[i] = (Rtrain__V1__Param)RTRAIN__V1__PARAM__INIT;
        m->p[i].name = (char *)pn[i];
        m->p[i].shape = ps[i];
        m->p[i].n_shape = (size_t)(2 - i);
        m->p[i].trainable = 1;
        m->pp[i] = &m->p[i];
    }
    m->bias_value = (Rtrain__V1__Tensor)RTRAIN__V1__TENSOR__INIT;
    m->bias[0] = 0.5f;
    m->bias[1] = -0.25f;
    m->bias[2] = 1.0f;
    m->bias_value.dtype = RTRAIN__V1__DTYPE__F32;
    m->bias_value.data.data = (uint8_t *)m->bias;
    m->bias_value.data.len = sizeof m->bias;
    m->p[1].value = &m->bias_value;
    m->act = (Rtrain__V1__Attr)RTRAIN__V1__ATTR__INIT;
    m->act.name = "activation";
    m->act.value_case = RTRAIN__V1__ATTR__VALUE_S;
    m->act.s = "relu";
    m->attrs[0] = &m->act;
    m->d1_in[0] = "x";
    m->d1_in[1] = "d1/kernel";
    m->d1_in[2] = "d1/bias";
    m->sm_in[0] = "d1";
    const char *nn[2] = {"d1", "probs"}, *ops[2] = {"Dense", "Softmax"};
    char **nin[2] = {m->d1_in, m->sm_in};
    for (int i = 0; i < 2; i++) {
        m->n[i] = (Rtrain__V1__Node)RTRAIN__V1__NODE__INIT;
        m->n[i].name = (char *)nn[i];
        m->n[i].op = (char *)ops[i];
        m->n[i].inputs = nin[i];
        m->n[i].n_inputs = (size_t)(i ? 1 : 3);
        m->np[i] = &m->n[i];
    }
    m->n[0].attrs = m->attrs;
    m->n[0].n_attrs = 1;
    m->g.inputs = m->ins;
    m->g.n_inputs = 1;
    m->g.params = m->pp;
    m->g.n_params = 2;
    m->g.nodes = m->np;
    m->g.n_nodes = 2;
    m->g.output = "probs";
}

static void well_formed(void)
{
    msg m;
    msg_init(&m);
    rt_graph *g = rt_graph_create();
    REQUIRE(g);
    char err[512] = "unset";
    CHECK(rt_graph_import_pb(&m.g, NULL, g, err, sizeof err) == 0);
    /* the message is gone before the graph is used: the graph holds copies */
    memset(m.bias, 0, sizeof m.bias);
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.batch_size = 2;
    rt_plan *p = NULL;
    CHECK(rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err) == 0);
    rt_graph_destroy(g);
    rt_exec *e = NULL;
    REQUIRE(p && rt_exec_create(p, &e) == 0);
    float b[3] = {0};
    int bi = -1;
    for (int i = 0; i < 2; i++) {
        const char *name;
        if (rt_plan_param_info(p, i, &name, NULL, NULL) >= 0 && !strcmp(name, "d1/bias"))
            bi = i;
    }
    REQUIRE(bi >= 0);
    rt_exec_get_param(e, bi, b);
    CHECK(b[0] == 0.5f && b[1] == -0.25f && b[2] == 1.0f);
    rt_exec_destroy(e);
    rt_plan_release(p);
    printf("%-34s ok\n", "well-formed graph");
}

/* One spoiled message: want is the code, msg the whole message. */
static void expect(const char *what, const msg *m, int want, const char *text)
{
    rt_graph *g = rt_graph_create();
    REQUIRE(g);
    char err[512];
    memset(err, 'z', sizeof err);
    int rc = rt_graph_import_pb(&m->g, NULL, g, err, sizeof err);
    rt_graph_destroy(g);
    int ok = rc == want && memchr(err, 0, sizeof err) && !strcmp(err, text);
    printf("%-34s %-16s \"%s\"\n", what, rt_err_name(rc), memchr(err, 0, sizeof err) ? err : "?");
    if (!ok) {
        fprintf(stderr, "%s: want %s \"%s\"\n", what, rt_err_name(want), text);
        rt_test_failures++;
    }
}

static void malformed(void)
{
    msg m;
    msg_init(&m);
    m.in.n_shape = 9;
    expect("input rank 9", &m, RT_EINVAL, "input 'x' has 9 dims (max 8)");
    msg_init(&m);
    m.in.name = "";
    expect("input without a name", &m, RT_EINVAL, "input '': input: empty name");
    msg_init(&m);
    m.kernel_shape[1] = 0;
    expect("param dim 0", &m, RT_EINVAL, "param 'd1/kernel' dim 1 is 0");
    msg_init(&m);
    m.kernel_shape[0] = RT_MAX_DIM_LIMIT + 1;
    expect("param dim over the limit", &m, RT_EINVAL, "param 'd1/kernel' dim 0 is 2147483649");
    msg_init(&m);
    m.kernel_shape[0] = m.kernel_shape[1] = 1 << 16;
    expect("param over the size limit", &m, RT_ETOOBIG, "param 'd1/kernel' is over the size limit");
    msg_init(&m);
    m.bias_value.data.len = 8;
    expect("param value short", &m, RT_EINVAL,
           "param 'd1/bias' value must be 3 f32 values (8 bytes given)");
    msg_init(&m);
    m.bias_value.dtype = RTRAIN__V1__DTYPE__I32;
    expect("param value not f32", &m, RT_EINVAL,
           "param 'd1/bias' value must be 3 f32 values (12 bytes given)");
    msg_init(&m);
    m.act.value_case = RTRAIN__V1__ATTR__VALUE__NOT_SET;
    expect("attr without a value", &m, RT_EINVAL, "node 'd1' attr 'activation' has no value");
    msg_init(&m);
    m.n[1].op = "";
    expect("node without an op", &m, RT_EINVAL, "node 'probs': node 'probs': empty op");
    msg_init(&m);
    m.sm_in[0] = NULL;
    expect("node input NULL", &m, RT_EINVAL, "node 'probs': node 'probs': input 0 is NULL");
    char longname[200];
    memset(longname, 'o', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    msg_init(&m);
    m.g.output = longname;
    expect("output name too long", &m, RT_EINVAL, "output: output: name longer than 128 bytes");
}

static int refusals;
static void *refuse(void *ud, size_t n)
{
    refusals++;
    return NULL;
}
static void never_freed(void *ud, void *p) { abort(); }

static void out_of_memory(void)
{
    ProtobufCAllocator no = {refuse, never_freed, NULL};
    msg m;
    msg_init(&m);
    rt_graph *g = rt_graph_create();
    REQUIRE(g);
    char err[64] = "unset";
    CHECK(rt_graph_import_pb(&m.g, &no, g, err, sizeof err) == RT_ENOMEM);
    CHECK(err[0] == '\0' && refusals == 1);
    rt_graph_destroy(g);
    printf("%-34s ok\n", "allocator refuses");
}

int main(void)
{
    well_formed();
    malformed();
    out_of_memory();
    return rt_test_done("engine_import_graph");
}
