/*
 * rtrain.h - the rtrain client library (librtrain).
 *
 * A client talks to one rtraind over gRPC. It creates a session, compiles a
 * model (a native graph built with rt_model_*, or a Keras JSON string) with
 * training options into a program, uploads a data set once (it stays on the
 * daemon, stored under its content hash), then trains with run_steps (K steps
 * per call), train_steps (a whole run of K-step calls) or fit (one call, a
 * stream of progress events), evaluates, predicts and reads or writes the
 * weights.
 *
 * Every call records where its time went: the daemon's phases (queue,
 * decode, compile, execute, encode, other) and the client's (encode, round
 * trip, decode). round trip - server total = wire + framework. Nothing is
 * hidden: what no named phase covers is reported as "unattributed".
 *
 *     rt_client *c;
 *     if (rt_client_create("127.0.0.1:7070", &c) < 0) return 1;
 *     // shared daemons: rt_client_connect with rt_client_opts (TLS, token)
 *     char sid[RT_ID_MAX];
 *     if (rt_client_session_create(c, "demo", sid) < 0)
 *         fprintf(stderr, "%s\n", rt_client_errmsg(c));  // names the address
 *
 *     rt_train_opts o;
 *     rt_train_opts_init(&o);                      // Keras defaults
 *     o.loss = "sparse_categorical_crossentropy";
 *     o.optimizer = "adam"; o.lr = 0.01f; o.batch_size = 20; o.seed = 1;
 *     rt_client_compile_result prog;
 *     rt_client_compile_keras(c, sid, keras_json, &o, &prog);
 *
 *     rt_client_array x = {xs, RT_DTYPE_F32, 2, {105, 4}};
 *     rt_client_array y = {ys, RT_DTYPE_I32, 1, {105}};
 *     rt_client_dataset ds;
 *     rt_client_upload(c, sid, "iris", &x, &y, &ds);   // chunked, deduplicated
 *
 *     rt_client_fit_params fp = {.session = sid, .program = prog.program_id,
 *                                .dataset = ds.id, .epochs = 20};
 *     rt_client_fit(c, &fp, on_event, NULL);  // on_event returns 1 to stop
 *
 *     rt_client_timings t;
 *     rt_client_last_timings(c, &t);
 *     printf("execute %llu ns, wire %llu ns\n",
 *            (unsigned long long)t.execute_ns, (unsigned long long)t.wire_ns);
 *
 *     rt_client_compile_result_free(&prog);
 *     rt_client_session_close(c, sid);
 *     rt_client_destroy(c);
 *
 * Errors: every function returning int returns 0 or a negative RT_E* code
 * (rt_error.h). The handle then holds a message (rt_client_errmsg), e.g.
 * "NOT_FOUND: unknown session 's-12'" or "cannot connect to 127.0.0.1:7070
 * (daemon down?)", and the gRPC status code (rt_client_grpc_status).
 *
 * Ownership: strings and arrays passed in are copied or only read during the
 * call. Result structs filled by the library own their heap members; free
 * them with the matching *_free function (which accepts NULL and zeroed
 * structs, and leaves the struct zeroed). A call fills its result struct
 * from scratch: free a filled struct before passing it again, or it leaks.
 * Ids are NUL-terminated strings of
 * fewer than RT_ID_MAX bytes, stored in caller buffers or result structs.
 *
 * Threads: an rt_client is used by one thread at a time, except
 * rt_client_cancel, which any thread (or a signal handler) may call.
 * Different clients are independent. rt_model and result structs are plain
 * data with no hidden sharing.
 */
#ifndef RTRAIN_RTRAIN_H
#define RTRAIN_RTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "rtrain/rt_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_ID_MAX 64          /* session, program and dataset ids, with NUL */
#define RT_CLIENT_MAX_DIMS 8
#define RT_DEFAULT_SERVER "127.0.0.1:7070"
#define RT_CLIENT_DEFAULT_TIMEOUT_MS 60000
#define RT_UPLOAD_CHUNK (1u << 20) /* bytes of data per UploadChunk message */

/* Values match proto DType. */
typedef enum rt_client_dtype {
    RT_DTYPE_F32 = 1,
    RT_DTYPE_I32 = 2,
    RT_DTYPE_I64 = 3,
    RT_DTYPE_U8 = 4,
} rt_client_dtype;

size_t rt_client_dtype_size(rt_client_dtype dt); /* 0 for an unknown dtype */
const char *rt_client_dtype_name(rt_client_dtype dt); /* "f32", ..., "?" */

/* A tensor the caller owns (input): data is only read during the call. */
typedef struct rt_client_array {
    const void *data;
    rt_client_dtype dtype;
    int ndim;
    int64_t shape[RT_CLIENT_MAX_DIMS];
} rt_client_array;

/* A tensor the library allocated (output). Free with rt_client_tensor_free. */
typedef struct rt_client_tensor {
    char *name;              /* "" if the daemon sent none; never NULL once filled */
    rt_client_dtype dtype;
    int ndim;
    int64_t shape[RT_CLIENT_MAX_DIMS];
    void *data;              /* nbytes bytes, little-endian row-major */
    size_t nbytes;
} rt_client_tensor;

void rt_client_tensor_free(rt_client_tensor *t);
/* Elements = product(shape); 1 for ndim 0. */
int64_t rt_client_tensor_numel(const rt_client_tensor *t);

/* ------------------------------------------------------------- timings */

/* One call's time account, all in ns. Server fields come from the response's
 * Timings (for a Fit stream: summed over its events). For a stream the round
 * trip is the stream's whole wall time. wire_ns = round_trip_ns
 * - server_total_ns (0 if the server reported more than the round trip).
 * unattributed_ns = the daemon's other_ns + any client time between the
 * phases measured here (client_total_ns - encode - round trip - decode). */
typedef struct rt_client_timings {
    const char *method;        /* "Ping", "Compile", ...; static string */
    uint64_t start_ns;         /* rt monotonic clock at call start */
    int has_server;            /* the response carried Timings */
    int cache_hit;             /* Compile: program came from the cache */
    uint64_t queue_ns, decode_ns, compile_ns, execute_ns, encode_ns;
    uint64_t server_other_ns;
    uint64_t server_total_ns;
    uint64_t client_encode_ns; /* protobuf pack into a byte buffer */
    uint64_t round_trip_ns;    /* batch start -> response and status in hand */
    uint64_t client_decode_ns; /* protobuf unpack + copy into result structs */
    uint64_t client_total_ns;  /* the whole library call */
    uint64_t wire_ns;          /* round trip - server total */
    uint64_t unattributed_ns;
    uint64_t bytes_sent, bytes_received; /* message payload bytes */
    /* Streams (UploadDataset, Fit): client work done while the stream was
     * open (reading, hashing and packing chunks; decoding events and running
     * callbacks). It overlaps the daemon's work, so it is part of
     * round_trip_ns (and of wire_ns), not of client encode/decode. */
    uint64_t client_stream_ns;
    /* Client streams (UploadDataset): of server_other_ns, the time the
     * daemon waited for the client's next message. */
    uint64_t server_stream_wait_ns;
    /* Of decode_ns, the token check (a daemon with --tokens); of
     * execute_ns, state written to disk and synced (--state-dir). 0 when
     * the feature is off. */
    uint64_t auth_ns, durable_ns;
} rt_client_timings;

/* ------------------------------------------------------------- the client */

typedef struct rt_client rt_client;

/* How to reach and prove who we are to a daemon (docs/security.md). Every
 * NULL field is taken from the environment unless no_env is set:
 *
 *     field        environment          meaning
 *     target       RTRAIN_SERVER        "host:port" (else RT_DEFAULT_SERVER)
 *     tls_ca       RTRAIN_TLS_CA        PEM file of the CA that signed the
 *                                       daemon's certificate: use TLS
 *     tls_cert     RTRAIN_TLS_CERT      PEM client certificate (mTLS)
 *     tls_key      RTRAIN_TLS_KEY       its PEM private key
 *     token        RTRAIN_TOKEN         bearer token, sent with every call
 *     token_file   RTRAIN_TOKEN_FILE    file whose first line is the token
 *
 *     rt_client_opts o;
 *     rt_client_opts_init(&o);
 *     o.target = "train.example.org:7070";
 *     o.tls_ca = "ca.pem";
 *     o.token_file = "/home/me/.rtrain-token";
 *     char err[256];
 *     if (rt_client_connect(&o, &c, err, sizeof err) < 0) -> err names the file
 *
 * Strings are only read during rt_client_connect. */
typedef struct rt_client_opts {
    const char *target;
    const char *tls_ca, *tls_cert, *tls_key;
    const char *tls_server_name; /* verify the certificate for this name
                                    instead of the target's host (tests) */
    const char *token, *token_file;
    int no_env;                  /* ignore the RTRAIN_* variables */
} rt_client_opts;

void rt_client_opts_init(rt_client_opts *o); /* all NULL / 0 */

/* Connect lazily with o (NULL = all from the environment). No I/O with the
 * daemon happens here; a daemon that is down (or a TLS handshake that
 * fails: wrong CA, missing client certificate) is reported by the first
 * call with RT_EUNAVAILABLE. Files are read now: a missing or unreadable
 * file, a certificate without its key or an empty token give RT_EINVAL or
 * RT_EIO with a message in err (may be NULL). *out is NULL on failure. */
int rt_client_connect(const rt_client_opts *o, rt_client **out, char *err,
                      size_t errlen);
/* rt_client_connect with only target set (NULL = $RTRAIN_SERVER or
 * RT_DEFAULT_SERVER); TLS and the token come from the environment.
 * Returns 0, RT_EINVAL, RT_EIO or RT_ENOMEM. */
int rt_client_create(const char *target, rt_client **out);
/* Whether c talks TLS to the daemon. */
int rt_client_is_tls(const rt_client *c);
/* Connect now and wait until the connection is ready (TCP, and the TLS and
 * HTTP/2 handshakes) or timeout_ms passed: RT_EUNAVAILABLE with a message
 * when the daemon cannot be reached. Calls do not need it (the first call
 * connects); it separates the connection's cost from the first call's. */
int rt_client_wait_ready(rt_client *c, int64_t timeout_ms);

/* What setting c up cost: library_init_ns the start of gRPC's process-wide
 * state when this client started it (library_started; else 0), channel_ns
 * the channel (credentials, arguments, method registration), ready_ns the
 * wait of rt_client_wait_ready (0 without one). */
typedef struct rt_client_connect_times {
    uint64_t library_init_ns, channel_ns, ready_ns;
    int library_started;
} rt_client_connect_times;
int rt_client_connect_timings(const rt_client *c, rt_client_connect_times *out);

/* gRPC's process-wide state (its threads) starts with the first client and
 * stops when the last one is destroyed; the next client starts it again,
 * and a channel alone starts and joins gRPC's event engine threads (on a
 * 2-vCPU machine about 0.2 ms of a connect, and more to destroy). A process
 * that connects again and again (a notebook's new connect(), a benchmark)
 * holds both in between. Holds nest; each needs its release (a release
 * without a hold does nothing), and the last release after the last client
 * stops it. */
void rt_client_library_hold(void);
void rt_client_library_release(void);

void rt_client_destroy(rt_client *c); /* NULL is a no-op */
const char *rt_client_target(const rt_client *c); /* owned by c */

/* The last error message, "" after a success. Owned by c, valid until the
 * next call on c. */
const char *rt_client_errmsg(const rt_client *c);
/* The gRPC status code of the last call (0 = OK; -1 = no call reached gRPC). */
int rt_client_grpc_status(const rt_client *c);

/* Deadline of every call from its start, default RT_CLIENT_DEFAULT_TIMEOUT_MS.
 * ms <= 0 means no deadline. */
void rt_client_set_timeout_ms(rt_client *c, int64_t ms);
/* Override the deadline for the next call only. */
void rt_client_next_timeout_ms(rt_client *c, int64_t ms);

/* Timings of the last completed call (also after a failed call, as far as it
 * got). Returns RT_ENOTFOUND if no call was made yet. */
int rt_client_last_timings(const rt_client *c, rt_client_timings *out);

/* Tracing: while enabled, every call's timings are kept (from the moment it
 * is enabled). rt_client_trace_calls gives them (owned by c, valid until the
 * next call or trace change). rt_client_trace_write writes a Chrome
 * trace-event JSON file: client phases on tid 1, server phases on tid 2
 * placed inside the round trip, the call itself on tid 0. */
void rt_client_trace_enable(rt_client *c, int on);
void rt_client_trace_clear(rt_client *c);
const rt_client_timings *rt_client_trace_calls(const rt_client *c, size_t *n);
int rt_client_trace_write(const rt_client *c, const char *path);
/* Write any list of timings (e.g. collected from several clients). */
int rt_client_trace_write_calls(const rt_client_timings *calls, size_t n,
                                const char *path);
/* A named stretch of time beside the calls (a phase of a run), on its own
 * row of the trace (one row per track name, in order of appearance), with
 * its attribution as the event's args. Times on the rt monotonic clock, as
 * rt_client_timings.start_ns. */
typedef struct rt_client_trace_span {
    const char *name, *track;
    uint64_t start_ns, dur_ns;
    uint64_t client_ns, wire_ns, server_ns, unattributed_ns;
    int has_server;             /* server_ns is measured (else not known) */
    const char *detail;         /* NULL or one line of sub-parts */
} rt_client_trace_span;
int rt_client_trace_write_spans(const rt_client_timings *calls, size_t n,
                                const rt_client_trace_span *spans, size_t n_spans,
                                const char *path);

/* Cancel the call in flight (Fit stream, upload, or any unary call) from any
 * thread or a signal handler. It only sets an atomic flag (so it is
 * async-signal-safe); the thread blocked in the call sees it within ~20 ms
 * and cancels the gRPC call. A Fit stream is then stopped by the daemon at a
 * step boundary. The cancelled call returns RT_ECANCELLED. The flag is
 * cleared when the next call starts (for rt_client_train_steps, when the
 * run starts: it stops the whole run). Returns 0. */
int rt_client_cancel(rt_client *c);

/* ------------------------------------------------------------- info, ping */

typedef struct rt_client_info {
    char *version;
    uint32_t engine_version;
    char *device_name, *device_kind, *backend; /* first device; "" if none */
    uint64_t device_memory_bytes;
    uint32_t device_cores;
    uint64_t max_message_bytes, max_dataset_bytes, max_dim, max_params,
        max_steps_per_call;
    uint32_t max_sessions;
    char **ops;        size_t n_ops;
    char **formats;    size_t n_formats;
    char **losses;     size_t n_losses;
    char **optimizers; size_t n_optimizers;
    /* MPI replicas (mpirun -n N rtraind): each one's host, rank order;
     * none for a single process. */
    char **replica_hosts; size_t n_replica_hosts;
    uint32_t deterministic_reduce; /* micro-shards per batch, 0 = off */
    char state[16];    /* "memory", or "disk" (durable: --state-dir); "" if older */
    uint64_t max_upload_bytes; /* the most one upload holds; 0 from an older daemon */
} rt_client_info;

int rt_client_info_get(rt_client *c, rt_client_info *out);
void rt_client_info_free(rt_client_info *info);

/* Ping with payload_bytes each way. *rtt_ns (may be NULL) = round trip. */
int rt_client_ping(rt_client *c, size_t payload_bytes, uint64_t *rtt_ns);

/* ------------------------------------------------------------- sessions */

/* id_out: a buffer of RT_ID_MAX bytes. name is free text (NULL = ""). */
int rt_client_session_create(rt_client *c, const char *name, char *id_out);
int rt_client_session_close(rt_client *c, const char *session);

/* ------------------------------------------------------------- models */

/* A native graph under construction (proto Graph). Builder calls copy their
 * arguments. Only rt_client_compile validates the graph (the daemon names
 * the faulty node). See server/engine/rt_engine.h for the ops. */
typedef struct rt_model rt_model;

typedef enum rt_model_init { /* values match proto Initializer */
    RT_MODEL_INIT_DEFAULT = 0, RT_MODEL_INIT_ZEROS, RT_MODEL_INIT_ONES,
    RT_MODEL_INIT_GLOROT_UNIFORM, RT_MODEL_INIT_GLOROT_NORMAL,
    RT_MODEL_INIT_HE_NORMAL, RT_MODEL_INIT_HE_UNIFORM,
} rt_model_init;

typedef enum rt_model_attr_kind {
    RT_MODEL_ATTR_INT, RT_MODEL_ATTR_FLOAT, RT_MODEL_ATTR_STR,
    RT_MODEL_ATTR_INTS, RT_MODEL_ATTR_FLOATS,
} rt_model_attr_kind;

typedef struct rt_model_attr {
    const char *name;
    rt_model_attr_kind kind;
    int64_t i;
    float f;
    const char *s;
    int n;                /* INTS, FLOATS */
    const int64_t *ints;
    const float *floats;
} rt_model_attr;

rt_model *rt_model_create(void);     /* NULL on out of memory */
void rt_model_destroy(rt_model *m);  /* NULL is a no-op */
/* The data input; shape[0] = -1 is the batch dimension. */
int rt_model_add_input(rt_model *m, const char *name, rt_client_dtype dt,
                       int ndim, const int64_t *shape);
/* value: NULL, or product(shape) floats used instead of init. */
int rt_model_add_param(rt_model *m, const char *name, int ndim,
                       const int64_t *shape, rt_model_init init, int trainable,
                       const float *value);
int rt_model_add_node(rt_model *m, const char *name, const char *op, int n_in,
                      const char *const *inputs, int n_attr,
                      const rt_model_attr *attrs);
int rt_model_set_output(rt_model *m, const char *name);
/* Convenience: Dense layer name with params name/kernel [in,units] and
 * name/bias [units], followed (if activation is not NULL/"linear") by a node
 * name/act applying "relu", "sigmoid", "tanh" or "softmax". out_name (may be
 * NULL) receives the name of the layer's output, a string owned by m. */
int rt_model_dense(rt_model *m, const char *name, const char *input,
                   int64_t in_features, int64_t units, const char *activation,
                   const char **out_name);

/* ------------------------------------------------------------- compile */

/* One output's loss of a model with several outputs (Keras' loss={...},
 * loss_weights, metrics={...}) */
#define RT_CLIENT_MAX_OUTPUTS 8
typedef struct rt_output_loss {
    const char *loss;            /* NULL/"": rt_train_opts.loss */
    int from_logits;
    int has_weight;              /* 0: weight 1 */
    float weight;
    const char *const *metrics;  /* this output's, e.g. {"accuracy"} */
    int n_metrics;
} rt_output_loss;

typedef struct rt_train_opts {
    const char *loss;        /* NULL = daemon default */
    int from_logits;
    const char *optimizer;   /* "sgd", "adam", "adamw", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "ftrl" */
    float lr;                /* 0 = optimizer default */
    float momentum;
    int nesterov;
    float beta1, beta2, eps; /* 0 = optimizer default */
    float weight_decay;
    float rho;
    float clip_norm;         /* 0 = no clipping */
    const char *schedule;    /* NULL/"constant", "step", "cosine", ... */
    uint32_t step_size;
    float gamma;
    uint32_t warmup_steps, total_steps;
    float min_lr;
    const char *const *metrics; /* e.g. {"accuracy"} */
    int n_metrics;
    uint32_t batch_size;
    uint64_t seed;
    int no_shuffle;
    rt_client_dtype label_dtype; /* 0 = daemon default (i32 for sparse losses) */
    int label_ndim;              /* per-sample label shape; 0 = scalar */
    int64_t label_shape[RT_CLIENT_MAX_DIMS];
    /* Not part of the config: a program of the session with the same
     * parameters (the model at another batch size) whose weights,
     * optimizer state, step and learning rate the new program starts
     * from. NULL/"": a fresh program. */
    const char *state_from;
    /* Keras models: the per-sample input dims (0 = keep the model's). They
     * fill null (variable) dims, e.g. a sequence length, and must match the
     * fixed ones. input_ndim 0: the model's shape as saved. */
    int input_ndim;
    int64_t input_shape[RT_CLIENT_MAX_DIMS];
    /* Keras models, input_ndim 0: the data's values per sample (a CSV
     * row's features); an input with one null dim takes it from this
     * count. 0: not given. */
    int64_t input_values;
    /* MPI replicas: every BatchNorm uses the global batch's statistics
     * (Keras' SyncBatchNormalization); one process: no effect */
    int sync_batchnorm;
    /* Keras' mixed precision: NULL/"" the model's own layer policies,
     * "mixed_bfloat16" (or "bf16": Dense, MatMul and Conv2D multiply in
     * bf16 with float32 accumulation; layers set to float32 stay so),
     * "float32" (every layer). The daemon refuses bf16 on a CPU without
     * bf16 instructions (RT_ESTATE, FAILED_PRECONDITION). */
    const char *precision;
    /* ONNX models: the layout of a 4-D input's data. NULL/"" or "NCHW": the
     * model's own (PyTorch's); "NHWC": channels last. Never guessed. */
    const char *data_layout;
    /* PyTorch's losses (loss "cross_entropy", "nll_loss", "bce_with_logits",
     * "binary_cross_entropy", "mse_loss", "l1_loss", "smooth_l1_loss",
     * "huber_loss"): */
    const char *reduction;      /* NULL = "mean", or "sum" */
    float label_smoothing;      /* cross_entropy */
    int has_ignore_index;       /* 0: PyTorch's -100 */
    int64_t ignore_index;       /* cross_entropy, nll_loss */
    int has_loss_beta;          /* 0: 1 */
    float loss_beta;            /* smooth_l1_loss beta (0: l1), huber_loss delta */
    const float *class_weight;  /* cross_entropy, nll_loss: one per class */
    int n_class_weight;
    const float *pos_weight;    /* bce_with_logits: one per class, or one */
    int n_pos_weight;
    /* The daemon refuses a loss that does not fit what the model's output
     * ends in (e.g. sparse_categorical_crossentropy on a LogSoftmax); 1
     * turns that check off. */
    int no_loss_check;
    /* torch.optim: SGD/Adam/RMSprop weight_decay (added to the gradient),
     * SGD dampening; 0: none */
    float l2_weight_decay, dampening;
    /* optimizer "ftrl": has_ftrl 1, the six numbers replace Keras'
     * defaults (learning_rate_power -0.5, initial_accumulator_value 0.1,
     * l1, l2, l2_shrinkage regularization strengths and beta 0) */
    int has_ftrl;
    float ftrl_power, ftrl_init, ftrl_l1, ftrl_l2, ftrl_shrink, ftrl_beta;
    /* a model with several outputs: one per output, in the model's order,
     * replacing what the model saved (n_outputs 0: loss and metrics above
     * for every output, or a Keras model's saved settings). History and
     * the metrics then carry each output's values under Keras' names
     * ("out1_loss", "out2_accuracy") in rt_client_metrics.values */
    const rt_output_loss *outputs;
    int n_outputs;
} rt_train_opts;

/* Zero everything, then: metrics {"accuracy"}, batch_size 32. Names left
 * NULL let the daemon choose (its defaults are Keras's). That "accuracy" is
 * a default, not asked for (also as an entry of a caller's own list, the
 * same pointer): a model with several outputs gets it only on the outputs
 * whose loss is a classification loss. A list of the caller's own strings
 * applies to every output, as Keras' compile(metrics=[...]). */
void rt_train_opts_init(rt_train_opts *o);

typedef struct rt_client_param_info {
    char *name;
    int ndim;
    int64_t shape[RT_CLIENT_MAX_DIMS];
    int trainable;
} rt_client_param_info;

#define RT_CLIENT_MAX_PASSES 16

/* one compiled node: its name, op ("Dense+Relu" with a fused reader) and
 * the precision its kernels compute in ("float32", "mixed_bfloat16") */
typedef struct rt_client_op_info {
    char *name;
    char op[48];
    char precision[16];
} rt_client_op_info;

typedef struct rt_client_compile_result {
    char program_id[RT_ID_MAX];
    uint64_t param_count, trainable_param_count, flops_per_step;
    uint64_t arena_bytes, naive_bytes, compile_ns;
    int cache_hit;
    uint32_t kernels;
    int input_ndim, output_ndim;
    int64_t input_shape[RT_CLIENT_MAX_DIMS], output_shape[RT_CLIENT_MAX_DIMS];
    rt_client_param_info *params;
    size_t n_params;
    /* The compile's passes in the order they ran (validate, infer_shapes,
     * fuse, backward, choose_kernels, plan_memory, report) with their
     * times; a cache hit reports the original compile's. */
    int n_passes;
    char pass_name[RT_CLIENT_MAX_PASSES][24];
    uint64_t pass_ns[RT_CLIENT_MAX_PASSES];
    /* "NCHW" when the program takes its data NCHW (an ONNX 4-D input), else "" */
    char data_layout[8];
    /* the daemon's backend the program runs on ("cpu", "ref") */
    char backend[32];
    /* the compiled nodes in order with their precision; how many are bf16 */
    rt_client_op_info *ops;
    size_t n_ops;
    uint32_t bf16_ops;
} rt_client_compile_result;

int rt_client_compile(rt_client *c, const char *session, const rt_model *m,
                      const rt_train_opts *o, rt_client_compile_result *out);
/* keras_json: the output of Keras model.to_json() (NUL-terminated). */
int rt_client_compile_keras(rt_client *c, const char *session,
                            const char *keras_json, const rt_train_opts *o,
                            rt_client_compile_result *out);
/* onnx: len bytes of a serialized ONNX ModelProto (torch.onnx.export,
 * opsets 11-17), imported on the daemon; its initializers are the initial
 * weights. output: the graph output to train, NULL for the single one. A
 * 4-D (NCHW) model takes NCHW data, as PyTorch holds it, unless
 * o->data_layout is "NHWC" (docs/onnx.md). */
int rt_client_compile_onnx(rt_client *c, const char *session, const void *onnx,
                           size_t len, const char *output, const rt_train_opts *o,
                           rt_client_compile_result *out);
/* The ONNX model program was compiled from (the same bytes and output),
 * with the program's current weights as its initializers: *out (malloc'd,
 * the caller frees) of *outlen bytes. */
int rt_client_export_onnx(rt_client *c, const char *session, const char *program,
                          const void *onnx, size_t len, const char *output,
                          uint8_t **out, size_t *outlen);
void rt_client_compile_result_free(rt_client_compile_result *r);

/* ------------------------------------------------------------- datasets */

typedef struct rt_client_dataset {
    char id[RT_ID_MAX];
    uint64_t samples;
    int x_ndim;
    int64_t x_shape[RT_CLIENT_MAX_DIMS]; /* per sample */
    rt_client_dtype y_dtype;
    int y_ndim;
    int64_t y_shape[RT_CLIENT_MAX_DIMS]; /* per sample */
    uint64_t bytes;
    int deduplicated;   /* the daemon already held it (FindDataset hit, or
                           the upload matched stored content) */
    uint64_t bytes_sent; /* data bytes this client streamed (0 on a Find hit) */
    uint64_t bytes_resumed; /* data bytes a broken upload of the same data
                               left on the daemon, not sent again */
    uint64_t records_skipped;  /* TFRecord, bad records skipped (rtrain_data.h) */
    char first_skipped[160];   /* the first one's error */
    int streamed;              /* kept on the daemon's disk, decoded per
                                  batch (rtrain_data.h) */
    uint64_t spool_bytes;      /* streamed: the daemon's spool file */
} rt_client_dataset;

typedef enum rt_client_role {       /* values match proto DataRole */
    RT_ROLE_FEATURES = 0, RT_ROLE_LABELS = 1, RT_ROLE_BOTH = 2,
    RT_ROLE_SAMPLE_WEIGHTS = 3,     /* RAW/NPY (n,): Keras' sample_weight */
} rt_client_role;

typedef enum rt_client_format {     /* values match proto DataFormat */
    RT_FORMAT_RAW = 0, RT_FORMAT_NPY = 1, RT_FORMAT_CSV = 2, RT_FORMAT_IDX = 3,
    RT_FORMAT_TFRECORD = 4,         /* rtrain_data.h */
} rt_client_format;

/* One part of a data set: bytes from memory (data/nbytes) or a file (path,
 * streamed as is; the daemon parses the format). */
typedef struct rt_client_upload_part {
    rt_client_role role;
    rt_client_format format;
    const char *path;          /* file source, or NULL */
    const void *data;          /* memory source when path is NULL */
    size_t nbytes;
    rt_client_dtype dtype;     /* RAW */
    int ndim;                  /* RAW: full shape, first dim = samples */
    int64_t shape[RT_CLIENT_MAX_DIMS];
    int label_column;          /* CSV: column index; -1 = last */
    int csv_header;            /* CSV: skip the first line */
    int normalize;             /* u8 features: / 255 on the daemon */
    int compression;           /* TFRECORD: 0 none, 1 GZIP, 2 ZLIB */
    const struct rt_client_example_spec *spec; /* TFRECORD: the same in every part */
    int storage;               /* features part of RAW/NPY/CSV/IDX: RT_STORAGE_*
                                  (rtrain_data.h): 0 auto, 1 memory, 2 streamed
                                  from the daemon's disk */
    uint64_t shuffle_buffer;   /* streamed: samples; 0 = the daemon's default */
} rt_client_upload_part;

/* Storage of the next RAW/NPY/CSV/IDX upload's features part (the wrappers
 * below take no storage argument; a part that sets its own wins): 0 auto,
 * 1 memory, 2 streamed, and the shuffle buffer (0: the daemon's). It
 * applies to the next upload only. RT_EINVAL for another storage. */
int rt_client_next_upload_storage(rt_client *c, int storage, uint64_t shuffle_buffer);

/* Upload 1..16 parts as one data set: first FindDataset by the XXH3-128
 * hash of all part bytes (canonical big-endian 16 bytes; a hit costs one
 * round trip and sets out->deduplicated), else stream UploadDataset in
 * RT_UPLOAD_CHUNK chunks with offsets; the content hash checks the data.
 * When an earlier upload of the same data broke, the daemon kept what it
 * received (--upload-keep-s) and only the rest is sent (bytes_resumed).
 * Files are read twice (hash, then send), never whole into memory. The last
 * timings are those of the UploadDataset call (or of FindDataset on a hit). */
int rt_client_upload_parts(rt_client *c, const char *session, const char *name,
                           const rt_client_upload_part *parts, size_t n_parts,
                           rt_client_dataset *out);
/* x and y from memory as RAW parts (y may be NULL for an unlabelled set). */
int rt_client_upload(rt_client *c, const char *session, const char *name,
                     const rt_client_array *x, const rt_client_array *y,
                     rt_client_dataset *out);
/* The same with Keras' sample_weight: sw holds one weight per sample
 * (shape (n,), finite, >= 0; NULL: none); it needs y. */
int rt_client_upload_weighted(rt_client *c, const char *session, const char *name,
                              const rt_client_array *x, const rt_client_array *y,
                              const rt_client_array *sw, rt_client_dataset *out);
/* A numeric CSV file; label_column -1 = last. */
int rt_client_upload_csv(rt_client *c, const char *session, const char *name,
                         const char *path, int label_column, int header,
                         rt_client_dataset *out);
/* .npy pair (labels_path may be NULL). */
int rt_client_upload_npy(rt_client *c, const char *session, const char *name,
                         const char *x_path, const char *y_path,
                         rt_client_dataset *out);
/* IDX pair, gzipped or not; normalize divides u8 images by 255. */
int rt_client_upload_idx(rt_client *c, const char *session, const char *name,
                         const char *images_path, const char *labels_path,
                         int normalize, rt_client_dataset *out);

/* ------------------------------------------------------------- training */

#define RT_CLIENT_MAX_METRICS 48
typedef struct rt_client_metrics {
    double loss;      /* several outputs: the total, sum of weighted losses */
    double accuracy;  /* NaN when not computed (always, several outputs) */
    uint64_t samples;
    /* the other requested metrics (auc, mae, ...), Keras' names; a model
     * with several outputs: each output's own, as Keras names them in
     * History ("out1_loss" unweighted, "out1_accuracy", "out2_mae") */
    int n_values;
    char value_name[RT_CLIENT_MAX_METRICS][72];
    double values[RT_CLIENT_MAX_METRICS];
} rt_client_metrics;

typedef struct rt_client_epoch {
    uint64_t epoch;    /* 1-based */
    rt_client_metrics train;
    int has_val;
    rt_client_metrics val;
    uint64_t steps;    /* global step count at the end of the epoch */
    uint64_t execute_ns;
} rt_client_epoch;

typedef struct rt_client_steps_result {
    uint64_t global_step;
    rt_client_metrics last, mean;
    int replayed;          /* seq already applied; nothing ran now */
    int stopped;           /* rt_client_control's stop ended it early */
    int recorded;          /* replayed, and the numbers are that call's */
    uint64_t recorded_step; /* recorded: the global step that call ended at */
    uint64_t boot_id;      /* the daemon's start (changes when it restarts) */
    float *losses;         /* n_losses, when return_losses */
    size_t n_losses;
    rt_client_epoch *epochs; /* epochs completed inside this call */
    size_t n_epochs;
    int has_val;           /* val_at_end: val holds the validation */
    rt_client_metrics val;
} rt_client_steps_result;

typedef struct rt_client_steps_params {
    const char *session, *program, *dataset;
    const char *val_dataset; /* NULL/"": no validation */
    uint64_t steps;
    uint64_t seq;            /* 0 = the client's own increasing counter */
    uint64_t after_seq;      /* pipelining: the daemon runs this call once
                                the call with this seq (same program) has
                                completed, and not at all if it failed;
                                0 = no predecessor */
    int val_at_end;          /* validate val_dataset once, after the last
                                step (result.val), not at engine epoch ends */
    int return_losses;
    float learning_rate;     /* > 0: the program's rate from this call on, in
                                place of its config's (Keras setting
                                optimizer.learning_rate); 0: unchanged */
    int checkpoint;          /* durable daemon: checkpoint before answering */
    uint64_t boot_id;        /* refuse (RT_ERESTARTED) if the daemon restarted
                                since an answer with this boot id; 0 = no check */
    /* durable daemon: checkpoint after this call once this many steps or
     * seconds passed since the program's last one; 0 = the daemon's
     * --checkpoint-every-steps / --checkpoint-every-s */
    uint32_t checkpoint_every_steps, checkpoint_every_s;
} rt_client_steps_params;

int rt_client_run_steps(rt_client *c, const rt_client_steps_params *p,
                        rt_client_steps_result *out);
void rt_client_steps_result_free(rt_client_steps_result *r);

typedef enum rt_client_fit_kind {
    RT_FIT_PROGRESS = 1, RT_FIT_EPOCH_END = 2, RT_FIT_DONE = 3,
    /* rt_client_train_steps or rt_client_fit reattached after the daemon
     * restarted (or was unreachable): epoch and step say where training
     * resumes (epoch: 1-based within this call's run, step: the program's
     * global step). Callers print "daemon restarted; resuming at epoch E
     * step S". */
    RT_FIT_RESUMED = 4,
} rt_client_fit_kind;

typedef struct rt_client_fit_event {
    rt_client_fit_kind kind;
    /* RT_FIT_PROGRESS */
    uint64_t step, epoch, step_in_epoch, steps_per_epoch;
    float loss, accuracy;   /* running means in this epoch */
    /* RT_FIT_EPOCH_END */
    rt_client_epoch epoch_end;
    /* RT_FIT_PROGRESS from rt_client_fit: the rate this step used. A step
     * whose rate differs from the previous step's (rt_client_control, a
     * request's learning_rate) is always reported, so `step` is then the
     * first step of the new rate. 0 from rt_client_train_steps. */
    float learning_rate;
    /* every event; with RT_FIT_DONE from rt_client_fit, stopped says that
     * rt_client_control's stop ended the fit (rt_client_fit returns 0) and
     * step is the program's global step at its end */
    int done, cancelled, stopped;
    /* rt_client_train_steps: the time account of the call this event
     * reports (its RunSteps for RT_FIT_PROGRESS, the Evaluate for an
     * RT_FIT_EPOCH_END of a daemon without val_at_end), valid during the
     * callback; NULL
     * otherwise, and always NULL from rt_client_fit. */
    const rt_client_timings *call;
    /* rt_client_train_steps, RT_FIT_PROGRESS: the steps per call in force
     * from here on (with auto, as chosen from the answers so far) and, with
     * auto only (0 otherwise), the estimates it was chosen from: the fixed
     * cost of a call and the time of one step, in ns. */
    uint64_t steps_per_call;
    double fixed_ns, step_ns;
} rt_client_fit_event;

/* Return nonzero to cancel the fit (at the next step boundary). */
typedef int (*rt_client_fit_cb)(const rt_client_fit_event *ev, void *user);

typedef struct rt_client_fit_params {
    const char *session, *program, *dataset;
    const char *val_dataset;   /* NULL/"": no validation */
    uint32_t epochs;
    uint32_t steps_per_epoch;  /* 0 = ceil(samples / batch) */
    uint32_t progress_every;   /* StepProgress every N steps; 0 = epoch ends only */
    float learning_rate;       /* as rt_client_steps_params.learning_rate */
    /* durable daemon: a checkpoint every N steps / T seconds of this fit,
     * in place of the daemon's default (0); its epoch ends always get one */
    uint32_t checkpoint_every_steps, checkpoint_every_s;
    /* dataset is a chunk of a larger set (rt_client_fit_rows sets them):
     * its first row's id in the whole set, a multiple of the batch size,
     * and the whole set's steps per epoch, so augmented images are drawn
     * as in one upload of the whole (FitRequest.rows_before); 0, 0: none */
    uint64_t rows_before, whole_steps_per_epoch;
} rt_client_fit_params;

/* Runs the Fit stream; cb (may be NULL) sees each event in order. Returns 0
 * when the daemon finished, RT_ECANCELLED when cb or rt_client_cancel
 * stopped it (the weights then hold the last completed step).
 *
 * Reattach: each fit has a random id. When the stream breaks because the
 * daemon went away (UNAVAILABLE, a restart's ABORTED, a stopping daemon's
 * CANCELLED), the fit waits for the daemon as rt_client_train_steps does
 * (rt_client_set_reattach_ms; needs the session token), delivers an
 * RT_FIT_RESUMED event (epoch: the epoch of this fit being resumed,
 * 1-based; step: the restored global step) and sends the Fit
 * again with its id and the count of epoch ends received. A daemon with
 * --state-dir continues the fit from its restored state: no step runs
 * twice or is lost, the epoch ends the client missed come again as they
 * were, and none comes twice. Progress events already passed (a step at
 * or below one reported) are not delivered again. */
int rt_client_fit(rt_client *c, const rt_client_fit_params *p,
                  rt_client_fit_cb cb, void *user);

/* The most bytes one upload may hold on this daemon: GetInfo's
 * max_upload_bytes (from an older daemon its max_dataset_bytes); 0: no
 * limit. */
int rt_client_upload_limit(rt_client *c, uint64_t *limit);

/* A fit on data larger than one upload (the daemon holds an upload whole
 * while it arrives, so one is at most GetInfo's max_upload_bytes): the
 * caller serves rows of its data in any order, as data sets of their own.
 * upload sends rows[0..k) (indices < n, in that order) as one data set. */
typedef int (*rt_client_rows_fn)(rt_client *c, const char *session, const char *name,
                                 const uint64_t *rows, uint64_t k, rt_client_dataset *out,
                                 void *user);

typedef struct rt_client_rows {
    uint64_t n;          /* rows */
    uint64_t bytes;      /* the upload of all n rows */
    uint64_t row_bytes;  /* the most one row adds to an upload */
    uint64_t fixed_bytes; /* what every upload carries besides rows (headers) */
    rt_client_rows_fn upload;
    void *user;
} rt_client_rows;

/* rt_client_fit on rows (rt_client_rows). When the training rows and the
 * validation rows each fit one upload (bytes <= the limit: GetInfo's
 * max_upload_bytes, or max_upload_bytes when not 0), each is one upload
 * and the fit one Fit stream. Otherwise:
 *   - Training rows over the limit go in chunks of whole batches
 *     (batch_size: the program's) of at most half of it. Each epoch takes
 *     an order of all rows: with shuffle a permutation drawn from (seed,
 *     epoch), the same for the same seed, else row order; its chunks are
 *     the order's consecutive slices, each gathered by upload and trained
 *     by one Fit of one pass. Unshuffled, a program trains on the batches
 *     of the one-upload fit in the same order and ends on the same
 *     weights, bit for bit; shuffled, an epoch's batches draw from all
 *     rows, as Keras shuffles arrays. (A shuffling program also shuffles
 *     inside each chunk: still a random order.) Image augmentation is
 *     drawn per chunk's data set (its rows' indices, its passes): it
 *     repeats by seed but is not the one-upload fit's draws.
 *   - Validation rows over the limit are evaluated after each epoch in
 *     chunks, their metrics combined.
 * cb sees progress as one epoch's (its running loss and accuracy over the
 * epoch so far), one RT_FIT_EPOCH_END per epoch and RT_FIT_DONE. An epoch
 * end's metrics are the whole epoch's: the chunks' sample-weighted means,
 * as Keras' trackers weigh each batch by its size (the loss: the mean of
 * the epoch's batch losses weighted by batch size), and the validation's
 * over all its rows (RMSE as the root of the mean square). Metrics that
 * are no means over samples (auc, precision, recall) do not combine and
 * are refused there. Chunked, fit.steps_per_epoch must be 0; each chunk's
 * Fit reattaches as rt_client_fit does. fit.dataset is not read; with
 * val.n 0, fit.val_dataset (an uploaded data set, or NULL) is evaluated
 * after each epoch. */
typedef struct rt_client_fit_rows_params {
    rt_client_fit_params fit;
    const char *name, *val_name; /* the uploads' names; NULL: "data", "val" */
    rt_client_rows train, val;   /* val.n 0: none (see fit.val_dataset) */
    uint32_t batch_size;
    int shuffle;
    uint64_t seed;
    uint32_t first_epoch; /* the orders continue at this epoch (0-based):
                             a fit of one epoch per call passes its count */
    uint64_t max_upload_bytes; /* 0: GetInfo's */
} rt_client_fit_rows_params;

int rt_client_fit_rows(rt_client *c, const rt_client_fit_rows_params *p, rt_client_fit_cb cb,
                       void *user);

/* Evaluate and Predict on rows (rt_client_rows) for a program: rows that
 * fit one upload (bytes <= max_upload_bytes, 0: GetInfo's) are one upload;
 * larger ones go in row order in chunks of whole batches (batch_size; 0:
 * single rows) of at most half the limit, each its own data set named
 * name (NULL: "data"). Evaluate's metrics are then the chunks' combined by
 * their samples, as rt_client_fit_rows combines validation chunks (RMSE
 * as the root of the mean square; auc, precision and recall refused);
 * Predict's outputs are the chunks' in row order, one tensor (free with
 * rt_client_tensor_free). */
int rt_client_evaluate_rows(rt_client *c, const char *session, const char *program,
                            const char *name, const rt_client_rows *rows, uint32_t batch_size,
                            uint64_t max_upload_bytes, rt_client_metrics *out);
int rt_client_predict_rows(rt_client *c, const char *session, const char *program,
                           const char *name, const rt_client_rows *rows, uint32_t batch_size,
                           uint64_t max_upload_bytes, rt_client_tensor *out);

/* rt_client_fit_rows on arrays in memory (x and y, sample_weights
 * optional: rows first; x, y and the weights together are a row's bytes),
 * gathered here for each chunk. fit.val_dataset is evaluated after each
 * epoch. */
typedef struct rt_client_fit_arrays_params {
    rt_client_fit_params fit;
    const char *name; /* the uploads' name; NULL: "data" */
    const rt_client_array *x, *y, *sample_weights;
    uint32_t batch_size;
    uint64_t max_upload_bytes; /* 0: GetInfo's */
    int shuffle;               /* over one upload: a permutation per epoch */
    uint64_t seed;
} rt_client_fit_arrays_params;

int rt_client_fit_arrays(rt_client *c, const rt_client_fit_arrays_params *p,
                         rt_client_fit_cb cb, void *user);

/* The steps-per-call training loop, the one every client uses (the CLI's
 * `fit --steps-per-call K`, Python's fit(steps_per_execution=K)): a run of
 * epochs x steps_per_epoch steps made of RunSteps calls of at most K steps,
 * what a Keras loop with steps_per_execution = K does against a remote
 * device. Its semantics:
 *   - An epoch is steps_per_epoch steps (>= 1; the caller knows the data
 *     set's ceil(samples / batch)). Epochs are numbered 1..epochs in the
 *     events, whatever the program trained before.
 *   - Each RunSteps call runs min(K, steps left in the epoch) steps: a call
 *     never spans an epoch end, so an epoch takes ceil(steps_per_epoch / K)
 *     calls, and K >= steps_per_epoch means one call per epoch.
 *   - K = 0 is "auto": the first call runs one step alone and measures the
 *     fixed cost of a call (round trip - execute - time queued on the
 *     daemon) and the time of a step; K then splits an epoch into the most
 *     equal calls whose fixed costs stay at <= 5% of the epoch's time (one
 *     call per epoch when even that costs more), re-chosen every 16 calls
 *     and at each epoch start from running estimates. Events carry the K
 *     in force.
 *   - Pipelining: up to `window` calls are in flight at once (0 =
 *     RT_TRAIN_WINDOW; 1 = one at a time), each with its own sequence
 *     number, so the daemon computes while answers and the next requests
 *     travel. The first call of a run goes alone; the window drains at
 *     every epoch end. Answers are taken, and events delivered, in the
 *     order the calls were sent. Calls that reach the daemon together may
 *     start in either order; a call the daemon then reports as replayed (a
 *     later one of the same run, with a higher seq, ran first) ran nothing:
 *     its steps are sent again after the others, so every epoch still runs
 *     exactly steps_per_epoch steps (a RunSteps call runs the program's
 *     next steps, so the training is the same; only how an epoch's steps
 *     split into calls differs). A run whose first call is replayed (the
 *     program's sequence numbers are ahead of this client's: another
 *     client trains it) fails with RT_ESTATE.
 *   - With val_dataset, each epoch's last RunSteps call validates on it
 *     after its last step (val_at_end): no round trip of its own. A daemon
 *     that does not answer it gets one Evaluate after the epoch instead.
 *   - Calls are pipelined within an epoch only: an epoch's end (and the
 *     callback's chance to stop) comes before the next epoch's first call.
 *   - An epoch's train metrics are the sample-weighted means of its calls'
 *     means: the daemon's own epoch metrics when steps_per_epoch is the data
 *     set's, as in a Fit stream of the same run.
 *   - cb (may be NULL) sees, in order: RT_FIT_PROGRESS after each RunSteps
 *     that ran (step = the program's global step: its count before the run
 *     plus the steps run since, so it only grows; step_in_epoch,
 *     steps_per_epoch, loss and accuracy = the epoch's running means), RT_FIT_EPOCH_END after each epoch
 *     (epoch_end.steps = global step, execute_ns = the daemon's execute time
 *     of the epoch's calls), and last an RT_FIT_DONE event with done = 1.
 *     ev->call is the account of the call behind the event.
 *   - Stopping: cb returning nonzero or rt_client_cancel (also between two
 *     calls) ends the run with RT_ECANCELLED. A failed call ends it with its
 *     error (message, status and last timings are the failed call's). Either
 *     way no call is sent after it and every call still in flight is
 *     cancelled at once: the daemon drops those it has not started and
 *     stops a running one at a step boundary, so the weights hold the steps
 *     done (with window > 1, possibly some steps of calls sent after the
 *     last event).
 *   - Deadlines: each call gets the client's timeout; a value set with
 *     rt_client_next_timeout_ms just before applies to every call of the
 *     run (0: no deadline).
 * Every call is recorded as usual (last timings, trace). */
#define RT_TRAIN_WINDOW 8   /* RunSteps calls in flight by default */
#define RT_TRAIN_MAX_WINDOW 64

typedef struct rt_client_train_params {
    const char *session, *program, *dataset;
    const char *val_dataset;   /* NULL/"": no validation */
    uint32_t epochs;
    uint64_t steps_per_epoch;  /* >= 1 */
    uint64_t steps_per_call;   /* K >= 1; 0 = auto */
    uint32_t window;           /* calls in flight, <= RT_TRAIN_MAX_WINDOW;
                                  0 = RT_TRAIN_WINDOW */
    float learning_rate;       /* as rt_client_steps_params.learning_rate */
    int across_epochs;         /* keep the window full across epoch ends: the
                                  next epoch's calls go out before this one's
                                  answers are in (one round trip per run, not
                                  per epoch). A stop from cb at an epoch end
                                  then comes after up to window - 1 later
                                  calls ran. 0 = calls wait at each epoch end */
    /* every call's rt_client_steps_params.checkpoint_every_* (0: the
     * daemon's); epoch ends always get a checkpoint */
    uint32_t checkpoint_every_steps, checkpoint_every_s;
} rt_client_train_params;

int rt_client_train_steps(rt_client *c, const rt_client_train_params *p,
                          rt_client_fit_cb cb, void *user);

/* Control: change the training running on a program (or its next one) at
 * the next step boundary, without recompiling and keeping the optimizer
 * state. learning_rate > 0 sets the program's rate from the next step on
 * (kept for later calls; 0: unchanged); stop ends the RunSteps or Fit call
 * running on it after its current step: rt_client_fit then returns 0 with
 * a RT_FIT_DONE event whose stopped is 1, rt_client_run_steps a result
 * with stopped = 1. A stop with no call running does nothing (*running =
 * 0). The daemon answers at once, without device time; the boundary is the
 * first step boundary after the Control call reaches it, so a Fit stream
 * reports the step (rt_client_fit_event.learning_rate).
 *
 * May be called from inside an rt_client_fit or rt_client_train_steps
 * callback, on the client running the stream: the stream's time account
 * and cancellation are kept. running (may be NULL) gets whether a call was
 * running on the program. RT_ENOTFOUND for an unknown session or program,
 * RT_EINVAL for a negative or non-finite rate.
 *
 * reset_states: Keras' model.reset_states(), zeroing the carried states of
 * the program's stateful RNNs before its next step (or, with reset_layer,
 * layer.reset_states() of that layer: RT_EINVAL when it names no stateful
 * RNN). */
typedef struct rt_client_control_params {
    const char *session, *program;
    float learning_rate;
    int stop;
    int reset_states;
    const char *reset_layer; /* NULL: every stateful layer */
} rt_client_control_params;

int rt_client_control(rt_client *c, const rt_client_control_params *p,
                      int *running);

/* ------------------------------------------------------------- durability */

/* How long rt_client_train_steps and rt_client_fit keep reattaching when the daemon is
 * UNAVAILABLE (restarted, preempted, unreachable): retries with backoff
 * (50 ms doubling to 1 s) for up to ms, default RT_CLIENT_REATTACH_MS;
 * 0 = fail at once. Resuming is exact against a daemon with --state-dir:
 * no step is applied twice or lost, and each epoch is reported once. */
#define RT_CLIENT_REATTACH_MS 300000
void rt_client_set_reattach_ms(rt_client *c, int64_t ms);

/* Session tokens: CreateSession's second secret, kept by the client for
 * the sessions it created (the last 16); set one for a session created
 * elsewhere. Owned by c; NULL if unknown. */
const char *rt_client_session_token(const rt_client *c, const char *session);
int rt_client_set_session_token(rt_client *c, const char *session, const char *token);

typedef struct rt_client_ckpt_info {
    uint64_t global_step, last_seq;
    uint64_t epoch, step_in_epoch; /* the engine's cursor, epoch 1-based */
    uint64_t fit_epochs;
    /* the last Fit with an id (rt_client_fit's) and its epochs completed */
    uint64_t fit_id, fit_epochs_done;
    int saved, durable;
    uint64_t boot_id;
    unsigned char *state;          /* pull: the checkpoint (malloc'ed) */
    size_t state_len;
} rt_client_ckpt_info;

#define RT_CKPT_SAVE 1 /* write a checkpoint now (needs --state-dir) */
#define RT_CKPT_PULL 2 /* return the full training state in info->state */
/* The program's position; with flags, a checkpoint now and/or its bytes.
 * Free info->state with free(). */
int rt_client_checkpoint(rt_client *c, const char *session, const char *program, int flags,
                         rt_client_ckpt_info *info);
/* A pulled state resumed as a new program of session (on any daemon);
 * program_out: RT_ID_MAX bytes. */
int rt_client_restore_checkpoint(rt_client *c, const char *session, const void *state,
                                 size_t len, char *program_out, rt_client_ckpt_info *info);
/* A pulled state loaded into program, an existing program of session, in
 * place: no new program (a reload in a loop does not grow the session).
 * The state must be of the program's model (a state pulled from it, or
 * from a program compiled from the same CompileRequest): RT_ESTATE
 * (FAILED_PRECONDITION) otherwise; RT_ENOTFOUND for a program the session
 * does not have. A refused or corrupt state leaves the program as it was.
 * The program's RunSteps sequence records stay (its seq numbers go on);
 * its resumable Fit (fit_id) is forgotten. */
int rt_client_restore_checkpoint_into(rt_client *c, const char *session, const char *program,
                                      const void *state, size_t len, rt_client_ckpt_info *info);
/* Free program, a program of session, on the daemon now rather than when
 * the session closes (a model reloaded or recompiled in a loop). The drop
 * waits behind the session's calls sent before it; a call on the program
 * sent later, or one that had not reached the device, fails RT_ENOTFOUND,
 * and a RunSteps/Fit running on it stops at its next step. With
 * --state-dir its checkpoints are removed (a restart does not bring it
 * back). RT_ENOTFOUND for an unknown program or one dropped already (a
 * retried drop: take it as done); RT_EAUTH without the session's token
 * (a session this client opened or attached to has it). */
int rt_client_drop_program(rt_client *c, const char *session, const char *program);

int rt_client_evaluate(rt_client *c, const char *session, const char *program,
                       const char *dataset, rt_client_metrics *out);

/* Outputs for x (f32, first dim = samples) into *out (free with
 * rt_client_tensor_free). */
int rt_client_predict(rt_client *c, const char *session, const char *program,
                      const rt_client_array *x, rt_client_tensor *out);
int rt_client_predict_dataset(rt_client *c, const char *session,
                              const char *program, const char *dataset,
                              rt_client_tensor *out);

/* ------------------------------------------------------------- weights */

typedef struct rt_client_weights {
    rt_client_tensor *t;  /* f32, named, in parameter order */
    size_t n;
    uint64_t global_step;
    float learning_rate;  /* get_weights: the rate the next step uses */
} rt_client_weights;

int rt_client_get_weights(rt_client *c, const char *session,
                          const char *program, rt_client_weights *out);
/* All parameters, matched by name. */
int rt_client_set_weights(rt_client *c, const char *session,
                          const char *program, const rt_client_tensor *t,
                          size_t n);
void rt_client_weights_free(rt_client_weights *w);

/*
 * Weights file (little-endian), written atomically:
 *   magic "RTWTS001" (8 bytes), u32 count, u64 global_step, then per tensor:
 *   u32 name_len, name bytes (no NUL), u32 dtype, u32 ndim, i64 shape[ndim],
 *   u64 nbytes, data bytes; then u64 XXH64 (seed 0) of everything before it.
 * errbuf (may be NULL) receives a message of at most errlen bytes.
 */
int rt_client_weights_save(const rt_client_weights *w, const char *path,
                           char *errbuf, size_t errlen);
int rt_client_weights_load(rt_client_weights *w, const char *path,
                           char *errbuf, size_t errlen);

/*
 * The TF.js layers format (tfjs' model.save, tensorflowjs_converter): a
 * folder whose model.json holds the Keras model as "modelTopology" and a
 * "weightsManifest" naming .bin shards of little-endian float32 weights.
 * The daemon compiles such a model.json as it is (CompileRequest.keras_json);
 * its weights are the daemon's parameter names ("dense/kernel").
 *
 * rt_client_tfjs_load: path is model.json or its folder. w gets every
 * weight of the manifest, named, in its order (float32, unquantized; a
 * shard path that leaves the folder is refused); *model_json (when not
 * NULL) the file's text, to compile. Free with rt_client_weights_free and
 * free(). rt_client_tfjs_is_model: whether json is such a model.json.
 *
 * rt_client_tfjs_save: dir (made if missing) gets model.json, whose
 * modelTopology is model_json (a Keras model.to_json(), or a TF.js
 * model.json's own topology), and one shard of w's tensors, in order;
 * tf.loadLayersModel reads it. Files are written beside and renamed.
 */
int rt_client_tfjs_load(const char *path, char **model_json, rt_client_weights *w,
                        char *errbuf, size_t errlen);
int rt_client_tfjs_is_model(const char *json);
int rt_client_tfjs_save(const char *dir, const char *model_json, const rt_client_weights *w,
                        char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
