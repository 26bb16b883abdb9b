/* gen_rpc_seeds.c - writes the seed corpus of the RPC harness (tests/fuzz/rpc):
 * one valid request per method, and a few near misses, in fuzz_rpc.c's
 * input format (method index byte + packed request; framed chunks for the
 * upload). "@S", "@P", "@D" are the harness's fixture ids.
 *
 *     fuzz_gen_rpc_seeds tests/fuzz/rpc
 *
 * Built with the gcc build (not a test); rerun it when proto/rtrain.proto
 * or the method table changes, and commit what it writes. */
#include "rt_srv_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

static const char *outdir;

static int method_index(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/rtrain.v1.Trainer/%s", name);
    for (int i = 0; i < rt_n_methods; i++)
        if (!strcmp(rt_methods[i].path, path))
            return i;
    fprintf(stderr, "gen_rpc_seeds: no method %s\n", name);
    exit(1);
}

static void write_seed(const char *file, const uint8_t *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", outdir, file);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "gen_rpc_seeds: cannot write %s\n", path);
        exit(1);
    }
}

/* A unary (or server-streaming) seed: index byte + the packed message. */
static void unary(const char *file, const char *method, const void *msg)
{
    const ProtobufCMessage *m = msg;
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n + 1);
    buf[0] = (uint8_t)method_index(method);
    protobuf_c_message_pack(m, buf + 1);
    write_seed(file, buf, n + 1);
    free(buf);
}

/* An upload seed: index byte, then per chunk a 2-byte LE length + bytes. */
static void upload(const char *file, Rtrain__V1__UploadChunk **chunks, int n)
{
    uint8_t buf[8192];
    size_t o = 0;
    buf[o++] = (uint8_t)method_index("UploadDataset");
    for (int i = 0; i < n; i++) {
        size_t len = rtrain__v1__upload_chunk__get_packed_size(chunks[i]);
        if (o + 2 + len > sizeof buf)
            exit(1);
        buf[o++] = (uint8_t)(len & 0xff);
        buf[o++] = (uint8_t)(len >> 8);
        o += rtrain__v1__upload_chunk__pack(chunks[i], buf + o);
    }
    write_seed(file, buf, o);
}

static const char iris_csv[] =
    "sepal_length,sepal_width,petal_length,petal_width,species\n"
    "5.1,3.5,1.4,0.2,0\n7.0,3.2,4.7,1.4,1\n6.3,3.3,6.0,2.5,2\n";

static const char keras_model[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4],"
    " \"name\": \"x\"}},"
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3,"
    " \"activation\": \"softmax\"}}]}}";

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    rt_methods_init();

    Rtrain__V1__InfoRequest info = RTRAIN__V1__INFO_REQUEST__INIT;
    unary("get_info", "GetInfo", &info);

    Rtrain__V1__PingRequest ping = RTRAIN__V1__PING_REQUEST__INIT;
    ping.payload.data = (uint8_t *)"abc";
    ping.payload.len = 3;
    ping.response_bytes = 10;
    unary("ping_echo", "Ping", &ping);
    ping.response_bytes = 2000000; /* over the harness's 1 MiB message limit */
    unary("ping_too_big", "Ping", &ping);

    Rtrain__V1__CreateSessionRequest cs = RTRAIN__V1__CREATE_SESSION_REQUEST__INIT;
    cs.name = "notebook";
    unary("create_session", "CreateSession", &cs);

    Rtrain__V1__CloseSessionRequest cl = RTRAIN__V1__CLOSE_SESSION_REQUEST__INIT;
    cl.session_id = "@S";
    unary("close_session", "CloseSession", &cl);
    cl.session_id = "s-unknown";
    unary("close_session_unknown", "CloseSession", &cl);

    /* Compile: Keras JSON with a full config, and a graph. */
    Rtrain__V1__LrSchedule sched = RTRAIN__V1__LR_SCHEDULE__INIT;
    sched.kind = "warmup_cosine";
    sched.warmup_steps = 5;
    sched.total_steps = 100;
    sched.min_lr = 1e-4f;
    char *metrics[1] = {"accuracy"};
    int64_t lshape[1] = {1};
    Rtrain__V1__TrainConfig cfg = RTRAIN__V1__TRAIN_CONFIG__INIT;
    cfg.loss = "sparse_categorical_crossentropy";
    cfg.optimizer = "adam";
    cfg.learning_rate = 0.01f;
    cfg.clip_norm = 1.0f;
    cfg.schedule = &sched;
    cfg.metrics = metrics;
    cfg.n_metrics = 1;
    cfg.batch_size = 16;
    cfg.seed = 7;
    cfg.label_dtype = RTRAIN__V1__DTYPE__I32;
    cfg.label_shape = lshape;
    cfg.n_label_shape = 1;
    Rtrain__V1__CompileRequest comp = RTRAIN__V1__COMPILE_REQUEST__INIT;
    comp.session_id = "@S";
    comp.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    comp.keras_json = (char *)keras_model;
    comp.config = &cfg;
    unary("compile_keras", "Compile", &comp);

    Rtrain__V1__ValueInfo in = RTRAIN__V1__VALUE_INFO__INIT;
    Rtrain__V1__ValueInfo *ins[1] = {&in};
    int64_t ish[2] = {-1, 4}, wsh[2] = {4, 3}, bsh[1] = {3};
    in.name = "x";
    in.dtype = RTRAIN__V1__DTYPE__F32;
    in.shape = ish;
    in.n_shape = 2;
    float wv[12];
    for (int i = 0; i < 12; i++)
        wv[i] = 0.1f * (float)(i - 6);
    Rtrain__V1__Tensor wt = RTRAIN__V1__TENSOR__INIT;
    wt.dtype = RTRAIN__V1__DTYPE__F32;
    wt.shape = wsh;
    wt.n_shape = 2;
    wt.data.data = (uint8_t *)wv;
    wt.data.len = sizeof wv;
    Rtrain__V1__Param w = RTRAIN__V1__PARAM__INIT, b = RTRAIN__V1__PARAM__INIT;
    Rtrain__V1__Param *ps[2] = {&w, &b};
    w.name = "w"; w.shape = wsh; w.n_shape = 2; w.trainable = 1; w.value = &wt;
    b.name = "b"; b.shape = bsh; b.n_shape = 1; b.trainable = 1;
    b.init = RTRAIN__V1__INITIALIZER__INIT_ZEROS;
    Rtrain__V1__Attr act = RTRAIN__V1__ATTR__INIT, axis = RTRAIN__V1__ATTR__INIT,
                     shp = RTRAIN__V1__ATTR__INIT, rate = RTRAIN__V1__ATTR__INIT;
    act.name = "activation";
    act.value_case = RTRAIN__V1__ATTR__VALUE_S;
    act.s = "relu";
    axis.name = "axis";
    axis.value_case = RTRAIN__V1__ATTR__VALUE_I;
    axis.i = -1;
    int64_t sv[1] = {3};
    Rtrain__V1__Attr__Ints ints = RTRAIN__V1__ATTR__INTS__INIT;
    ints.v = sv;
    ints.n_v = 1;
    shp.name = "shape";
    shp.value_case = RTRAIN__V1__ATTR__VALUE_INTS;
    shp.ints = &ints;
    rate.name = "rate";
    rate.value_case = RTRAIN__V1__ATTR__VALUE_F;
    rate.f = 0.25f;
    Rtrain__V1__Attr *dattrs[1] = {&act}, *sattrs[1] = {&axis}, *rattrs[1] = {&shp},
                     *drattrs[1] = {&rate};
    Rtrain__V1__Node d = RTRAIN__V1__NODE__INIT, r = RTRAIN__V1__NODE__INIT,
                     dr = RTRAIN__V1__NODE__INIT, s = RTRAIN__V1__NODE__INIT;
    Rtrain__V1__Node *ns[4] = {&d, &r, &dr, &s};
    char *din[3] = {"x", "w", "b"}, *rin[1] = {"d"}, *drin[1] = {"r"}, *sin[1] = {"drop"};
    d.name = "d"; d.op = "Dense"; d.inputs = din; d.n_inputs = 3;
    d.attrs = dattrs; d.n_attrs = 1;
    r.name = "r"; r.op = "Reshape"; r.inputs = rin; r.n_inputs = 1;
    r.attrs = rattrs; r.n_attrs = 1;
    dr.name = "drop"; dr.op = "Dropout"; dr.inputs = drin; dr.n_inputs = 1;
    dr.attrs = drattrs; dr.n_attrs = 1;
    s.name = "probs"; s.op = "Softmax"; s.inputs = sin; s.n_inputs = 1;
    s.attrs = sattrs; s.n_attrs = 1;
    Rtrain__V1__Graph g = RTRAIN__V1__GRAPH__INIT;
    g.inputs = ins; g.n_inputs = 1; g.params = ps; g.n_params = 2;
    g.nodes = ns; g.n_nodes = 4; g.output = "probs";
    comp.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_GRAPH;
    comp.graph = &g;
    unary("compile_graph", "Compile", &comp);
    comp.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL__NOT_SET;
    unary("compile_no_model", "Compile", &comp);

    /* ONNX: W-A as PyTorch exports it (tests/fuzz/onnx/ok_wa.onnx), then
     * an export of the fixture program with it (a near miss: that program
     * is the Keras iris model, whose parameters the ONNX model lacks) */
    char opath[512];
    snprintf(opath, sizeof opath, "%s/../onnx/ok_wa.onnx", outdir);
    FILE *of = fopen(opath, "rb");
    static uint8_t onnx[1 << 16];
    size_t on = of ? fread(onnx, 1, sizeof onnx, of) : 0;
    if (!of || on == 0 || on == sizeof onnx) {
        fprintf(stderr, "gen_rpc_seeds: cannot read %s\n", opath);
        return 1;
    }
    fclose(of);
    comp.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_ONNX;
    comp.onnx.data = onnx;
    comp.onnx.len = on;
    unary("compile_onnx", "Compile", &comp);
    Rtrain__V1__ExportOnnxRequest ex = RTRAIN__V1__EXPORT_ONNX_REQUEST__INIT;
    ex.session_id = "@S";
    ex.program_id = "@P";
    ex.onnx.data = onnx;
    ex.onnx.len = on;
    unary("export_onnx_other_model", "ExportOnnx", &ex);

    /* Upload: header, data, last chunk with the XXH64 of the data. */
    size_t clen = sizeof iris_csv - 1;
    Rtrain__V1__DataPart part = RTRAIN__V1__DATA_PART__INIT;
    Rtrain__V1__DataPart *parts[1] = {&part};
    part.role = RTRAIN__V1__DATA_ROLE__ROLE_BOTH;
    part.format = RTRAIN__V1__DATA_FORMAT__FORMAT_CSV;
    part.length = clen;
    part.label_column = -1;
    part.csv_header = 1;
    Rtrain__V1__DatasetHeader hdr = RTRAIN__V1__DATASET_HEADER__INIT;
    hdr.session_id = "@S";
    hdr.name = "iris.csv";
    hdr.parts = parts;
    hdr.n_parts = 1;
    hdr.total_bytes = clen;
    XXH128_canonical_t ch;
    XXH128_canonicalFromHash(&ch, XXH3_128bits(iris_csv, clen));
    hdr.content_hash.data = ch.digest;
    hdr.content_hash.len = 16;
    Rtrain__V1__UploadChunk c0 = RTRAIN__V1__UPLOAD_CHUNK__INIT,
                            c1 = RTRAIN__V1__UPLOAD_CHUNK__INIT,
                            c2 = RTRAIN__V1__UPLOAD_CHUNK__INIT;
    c0.header = &hdr;
    c0.data.data = (uint8_t *)iris_csv;
    c0.data.len = 40;
    c1.offset = 40;
    c1.data.data = (uint8_t *)iris_csv + 40;
    c1.data.len = clen - 40;
    c2.offset = clen;
    c2.last = 1;
    c2.checksum = XXH64(iris_csv, clen, 0);
    Rtrain__V1__UploadChunk *up[3] = {&c0, &c1, &c2};
    upload("upload_csv", up, 3);
    upload("upload_no_last", up, 2);
    c2.checksum ^= 1;
    upload("upload_bad_checksum", up, 3);

    /* FindDataset with the same header. */
    Rtrain__V1__FindDatasetRequest fd = RTRAIN__V1__FIND_DATASET_REQUEST__INIT;
    fd.session_id = "@S";
    fd.content_hash.data = ch.digest;
    fd.content_hash.len = 16;
    fd.header = &hdr;
    unary("find_dataset", "FindDataset", &fd);

    Rtrain__V1__RunStepsRequest rs = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    rs.session_id = "@S";
    rs.program_id = "@P";
    rs.dataset_id = "@D";
    rs.steps = 3;
    rs.return_losses = 1;
    rs.seq = 1;
    unary("run_steps", "RunSteps", &rs);
    rs.val_dataset_id = "@D";
    rs.steps = 20000000;
    unary("run_steps_over_limit", "RunSteps", &rs);

    Rtrain__V1__FitRequest fit = RTRAIN__V1__FIT_REQUEST__INIT;
    fit.session_id = "@S";
    fit.program_id = "@P";
    fit.dataset_id = "@D";
    fit.val_dataset_id = "@D";
    fit.epochs = 2;
    fit.steps_per_epoch = 3;
    fit.progress_every = 1;
    unary("fit", "Fit", &fit);
    fit.epochs = 10000000;
    unary("fit_over_limit", "Fit", &fit);

    Rtrain__V1__EvaluateRequest ev = RTRAIN__V1__EVALUATE_REQUEST__INIT;
    ev.session_id = "@S";
    ev.program_id = "@P";
    ev.dataset_id = "@D";
    unary("evaluate", "Evaluate", &ev);

    Rtrain__V1__PredictRequest pr = RTRAIN__V1__PREDICT_REQUEST__INIT;
    pr.session_id = "@S";
    pr.program_id = "@P";
    pr.input_case = RTRAIN__V1__PREDICT_REQUEST__INPUT_DATASET_ID;
    pr.dataset_id = "@D";
    unary("predict_dataset", "Predict", &pr);
    float xv[8] = {5.1f, 3.5f, 1.4f, 0.2f, 6.3f, 3.3f, 6.0f, 2.5f};
    int64_t xsh[2] = {2, 4};
    Rtrain__V1__Tensor x = RTRAIN__V1__TENSOR__INIT;
    x.name = "x";
    x.dtype = RTRAIN__V1__DTYPE__F32;
    x.shape = xsh;
    x.n_shape = 2;
    x.data.data = (uint8_t *)xv;
    x.data.len = sizeof xv;
    pr.input_case = RTRAIN__V1__PREDICT_REQUEST__INPUT_X;
    pr.x = &x;
    unary("predict_x", "Predict", &pr);

    Rtrain__V1__GetWeightsRequest gw = RTRAIN__V1__GET_WEIGHTS_REQUEST__INIT;
    gw.session_id = "@S";
    gw.program_id = "@P";
    unary("get_weights", "GetWeights", &gw);

    /* SetWeights: every parameter of the fixture program (iris 4-8-3). */
    static float vals[4 * 8 + 8 + 8 * 3 + 3];
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        vals[i] = 0.01f * (float)i;
    static int64_t s0[2] = {4, 8}, s1[1] = {8}, s2[2] = {8, 3}, s3[1] = {3};
    static const struct { const char *name; int64_t *shape; int nd; size_t off, n; } ws[4] = {
        {"d1/kernel", s0, 2, 0, 32}, {"d1/bias", s1, 1, 32, 8},
        {"d2/kernel", s2, 2, 40, 24}, {"d2/bias", s3, 1, 64, 3}};
    Rtrain__V1__Tensor wts[4];
    Rtrain__V1__Tensor *wp[4];
    for (int i = 0; i < 4; i++) {
        Rtrain__V1__Tensor t = RTRAIN__V1__TENSOR__INIT;
        t.name = (char *)ws[i].name;
        t.dtype = RTRAIN__V1__DTYPE__F32;
        t.shape = ws[i].shape;
        t.n_shape = (size_t)ws[i].nd;
        t.data.data = (uint8_t *)(vals + ws[i].off);
        t.data.len = ws[i].n * 4;
        wts[i] = t;
        wp[i] = &wts[i];
    }
    Rtrain__V1__SetWeightsRequest sw = RTRAIN__V1__SET_WEIGHTS_REQUEST__INIT;
    sw.session_id = "@S";
    sw.program_id = "@P";
    sw.weights = wp;
    sw.n_weights = 4;
    unary("set_weights", "SetWeights", &sw);
    sw.n_weights = 3;
    unary("set_weights_missing", "SetWeights", &sw);

    Rtrain__V1__ControlRequest ctl = RTRAIN__V1__CONTROL_REQUEST__INIT;
    ctl.session_id = "@S";
    ctl.program_id = "@P";
    ctl.learning_rate = 0.05f;
    ctl.stop = 1;
    unary("control", "Control", &ctl);

    Rtrain__V1__CheckpointRequest ck = RTRAIN__V1__CHECKPOINT_REQUEST__INIT;
    ck.session_id = "@S";
    ck.program_id = "@P";
    ck.session_token = "@T";
    ck.pull = 1;
    unary("checkpoint_pull", "Checkpoint", &ck);
    ck.session_token = "t-wrong";
    unary("checkpoint_bad_token", "Checkpoint", &ck);

    /* not a checkpoint file: fails when parsed (in the work, not run here) */
    static const uint8_t junk[] = "RTCKPT-not-really";
    Rtrain__V1__RestoreCheckpointRequest rq = RTRAIN__V1__RESTORE_CHECKPOINT_REQUEST__INIT;
    rq.session_id = "@S";
    rq.session_token = "@T";
    rq.state.data = (uint8_t *)junk;
    rq.state.len = sizeof junk - 1;
    unary("restore_checkpoint", "RestoreCheckpoint", &rq);
    rq.state.len = 0;
    unary("restore_checkpoint_empty", "RestoreCheckpoint", &rq);
    return 0;
}
