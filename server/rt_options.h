/*
 * rt_options.h - rtraind's options: one row per flag.
 *
 * RT_DAEMON_OPTIONS is the only place a flag is written. Its row generates
 * the getopt_long parser, `rtraind --help`, the daemon's defaults, the
 * environment variable that sets it, the options table in
 * docs/operations.md and the option comments of deploy/rtraind.env
 * (rtraind_optdoc prints both; tests/ops/test_options.sh diffs them).
 *
 *     rt_daemon_opts o;
 *     int status;
 *     if (rt_options_parse(&o, argc, argv, &status) < 0)
 *         return status;           // --help, --version, or a bad value (2)
 *     ... o.srv is an rt_srv_config, o.dist the MPI options
 *
 * Precedence: the command line, then the environment (RTRAIND_ + the flag's
 * name in upper case, '-' as '_': --max-sessions is RTRAIND_MAX_SESSIONS;
 * an empty variable counts as unset), then the row's default.
 *
 * Adding a flag: a field (in rt_srv_config, rt_dist_opts or rt_daemon_opts)
 * and one row; then `cmake --build build --target options_docs` rewrites the
 * docs table and the env file.
 */
#ifndef RTRAIN_OPTIONS_H
#define RTRAIN_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rt_dist.h"
#include "rt_srv.h"
#include "rt_stream.h" /* RT_SPOOL_DIR_DEFAULT */

#ifdef __cplusplus
extern "C" {
#endif

/* X(ID, "name", group, type, field of rt_daemon_opts, default, "help")
 *
 * type: STR(META)              a string, kept as given
 *       FLAG                   no argument: sets 1 (env: 1|0|true|false|yes|no|on|off)
 *       NUM(META, lo, hi)      a whole number in lo..hi
 *       SCALED(META, lo, hi, k) the same, stored times k (seconds as ms)
 *       SIZE(META, lo, hi)     a size: 123, 64K, 2G, 1T (powers of 1024) or unlimited
 *       ONE_OF("a|b|c")        stored as the index of the word
 *       ACTION(META)           does something and exits (no environment variable)
 * default: V("value")  parsed like the flag's own value at start
 *          AUTO("what") the server computes it (the field keeps rt_srv_config_init's)
 *          NODEF        none (unset)
 * help: one sentence, no default (printed from the default column). */
#define RT_DAEMON_OPTIONS(X)                                                                       \
    X(LISTEN, "listen", MAIN, STR("ADDR"), srv.listen, V("127.0.0.1:7070"),                        \
      "host:port to listen on; port 0 picks a free port, printed on stdout")                       \
    X(THREADS, "threads", MAIN, NUM("N", 1, 64), srv.threads,                                      \
      AUTO("1 on hosts with 2 CPUs or fewer, else 2"), "completion-queue threads")                 \
    X(MAX_MESSAGE_BYTES, "max-message-bytes", MAIN, NUM("N", 1024, INT32_MAX),                     \
      srv.max_message_bytes, V("67108864"), "gRPC receive limit")                                  \
    X(MAX_SESSIONS, "max-sessions", MAIN, NUM("N", 1, 1000000), srv.max_sessions, V("64"),         \
      "open sessions at once")                                                                     \
    X(MAX_DATASET_BYTES, "max-dataset-bytes", MAIN, NUM("N", 1, UINT64_MAX),                       \
      srv.max_dataset_bytes, V("4294967296"), "bytes of one dataset upload")                       \
    X(MAX_STORE_BYTES, "max-store-bytes", MAIN, NUM("N", 1, UINT64_MAX), srv.max_store_bytes,      \
      AUTO("half the RAM"),                                                                        \
      "bytes of all stored datasets; past it the least recently used unused ones are "             \
      "dropped")                                                                                   \
    X(INLINE_US, "inline-us", MAIN, SCALED("N", 0, 60000000, 1000), srv.inline_ns, V("200"),       \
      "run device jobs estimated under N us on the gRPC thread when the device is free; "          \
      "0 = never")                                                                                 \
    X(SESSION_LEASE_S, "session-lease-s", MAIN, SCALED("N", 0, 315360000, 1000), idle_ms,          \
      V("3600"),                                                                                   \
      "a session's lease: every call naming it renews it; one not renewed for N seconds "          \
      "is closed with its programs and its slot freed; 0 = never")                                 \
    X(SLICE_MS, "slice-ms", MAIN, SCALED("N", 1, 60000, 1000000), srv.slice_ns, V("20"),           \
      "a long Fit/RunSteps yields the device at a step boundary after N ms when another "          \
      "client waits")                                                                              \
    X(COMPILE_THREADS, "compile-threads", MAIN, NUM("N", 1, 64), srv.compile_threads, V("1"),      \
      "compile workers")                                                                           \
    X(COMPILE_TIMEOUT, "compile-timeout", MAIN, SCALED("S", 0, 86400, 1000),                       \
      srv.compile_timeout_ms, V("60"), "a compile's time budget in seconds; 0 = none")             \
    X(COMPILE_HOLD, "compile-hold", MAIN, NUM("N", 0, INT32_MAX), srv.compile_hold, V("0"),        \
      "tests only: the daemon's Nth compile on the pool waits until --compile-timeout "            \
      "answers it or its call ends, so a test sees the budget's answer at any speed; 0 = off")     \
    X(MAX_EXEC_THREADS, "max-exec-threads", MAIN, NUM("N", 1, 4096), srv.max_exec_threads,         \
      V("64"), "device jobs of different clients in flight")                                       \
    X(MAX_UPLOADS, "max-uploads", MAIN, NUM("N", 1, 1000000), srv.max_uploads, V("16"),            \
      "uploads in flight, server-wide")                                                            \
    X(MAX_UPLOAD_BYTES, "max-upload-bytes", MAIN, NUM("N", 1, UINT64_MAX), srv.max_upload_bytes,   \
      AUTO("2 x --max-dataset-bytes"),                                                             \
      "bytes the uploads in flight hold: what arrived plus a window of "                           \
      "N / (2 x --max-uploads) each")                                                              \
    X(UPLOAD_STALL_S, "upload-stall-s", MAIN, SCALED("N", 0, 86400, 1000), srv.upload_stall_ms,    \
      V("60"), "cancel an upload that sent nothing for N s; 0 = never")                            \
    X(UPLOAD_KEEP_S, "upload-keep-s", MAIN, SCALED("N", 0, 86400, 1000), srv.upload_keep_ms,       \
      V("600"),                                                                                    \
      "keep a broken upload's bytes N s for a resume, charged to its uploader; "                   \
      "0 = off")                                                                                   \
    X(UPLOAD_POOL_BYTES, "upload-pool-bytes", MAIN, SIZE("N", 0, UINT64_MAX),                      \
      srv.upload_pool_bytes, V("1G"),                                                              \
      "idle upload buffers kept for reuse: their memory is already touched; 0 = none")             \
    X(UPLOAD_ARENA_BYTES, "upload-arena-bytes", MAIN, SIZE("N", 0, UINT64_MAX),                    \
      srv.upload_arena_bytes, AUTO("256M, none under an address-space limit"),                     \
      "idle upload memory a background thread keeps faulted in, so an upload does not "            \
      "pay the first touch of fresh pages; 0 = off")                                               \
    X(PIPELINE_HOLD_MS, "pipeline-hold-ms", MAIN, NUM("N", 1, 3600000), srv.pipeline_hold_ms,      \
      V("30000"),                                                                                  \
      "a pipelined RunSteps waits at most N ms for the call before it "                            \
      "(after_seq)")                                                                               \
    X(MAX_INFLATE_RATIO, "max-inflate-ratio", MAIN, NUM("N", 1, 100000), srv.max_inflate_ratio,    \
      V("100"), "compressed data (gzip files, gRPC messages) may inflate to N x its size")         \
    X(KEEPALIVE_S, "keepalive-s", MAIN, SCALED("N", 0, 86400, 1000), srv.keepalive_ms, V("60"),    \
      "ping idle connections every N s, close them if unanswered; 0 = off")                        \
    X(KEEPALIVE_TIMEOUT_S, "keepalive-timeout-s", MAIN, SCALED("N", 1, 86400, 1000),               \
      srv.keepalive_timeout_ms, V("20"), "how long a keepalive ping may go unanswered")            \
    X(HANDSHAKE_TIMEOUT_MS, "handshake-timeout-ms", MAIN, NUM("N", 1, 3600000),                    \
      srv.handshake_timeout_ms, V("10000"),                                                        \
      "close connections that do not finish the HTTP/2 handshake in N ms")                         \
    X(CONN_IDLE_S, "conn-idle-s", MAIN, SCALED("N", 0, 315360000, 1000), srv.conn_idle_ms,         \
      V("3600"), "close connections without calls for N s; 0 = never")                             \
    X(MAX_CONCURRENT_STREAMS, "max-concurrent-streams", MAIN, NUM("N", 1, 1000000),                \
      srv.max_concurrent_streams, AUTO("100"),                                                     \
      "calls one connection may have open at once, advertised in HTTP/2 SETTINGS")                 \
    X(STREAM_QUEUE, "stream-queue", MAIN, NUM("N", 2, 1000000), srv.stream_queue_max, V("64"),     \
      "messages queued per Fit stream before the Fit waits for its reader")                        \
    X(GRACE_MS, "grace-ms", MAIN, NUM("N", 0, 3600000), grace_ms, V("5000"),                       \
      "on SIGTERM/SIGINT, let running calls finish for N ms before cancelling them")               \
    X(DRAIN_MS, "drain-ms", MAIN, NUM("N", 0, 3600000), drain_ms, V("0"),                          \
      "on SIGTERM/SIGINT, first report NOT_SERVING on grpc.health.v1 for N ms while still "        \
      "taking calls, then stop as --grace-ms says")                                                \
    X(LOG_LEVEL, "log-level", MAIN, ONE_OF("error|warn|info|debug"), log_level, V("info"),         \
      "the least severe lines logged (to stderr)")                                                 \
    X(LOG_FORMAT, "log-format", MAIN, ONE_OF("text|json"), log_format, V("text"),                  \
      "json writes one object per line, and each finished call as an info line with "              \
      "principal, session prefix, method, status and duration")                                    \
    X(HTTP_LISTEN, "http-listen", MAIN, STR("ADDR"), http_listen, AUTO("off"),                     \
      "serve Prometheus metrics at http://ADDR/metrics and the live dashboard at "                 \
      "http://ADDR/; port 0 picks a free port, printed on stdout before the listening line")       \
    X(BACKEND, "backend", MAIN, STR("NAME"), backend, AUTO("the best built: cpu, else ref"),       \
      "the kernels every program runs on: cpu (native, oneDNN) or ref (the portable "              \
      "reference); docs/backends.md")                                                              \
    X(DETERMINISTIC_REDUCE, "deterministic-reduce", MPI, NUM("M", 1, 4096), dist.micro,            \
      AUTO("off"),                                                                                 \
      "split each global batch into M micro-shards whose gradients are summed in a fixed "         \
      "order: runs with any N dividing M are bit-identical")                                       \
    X(DIST_TIMEOUT_MS, "dist-timeout-ms", MPI, NUM("N", 1, 86400000), dist.timeout_ms, V("30000"), \
      "a replica that does not answer a collective in N ms is taken as dead: "                     \
      "the call fails UNAVAILABLE")                                                                \
    X(OVERLAP_REDUCE, "overlap-reduce", MPI, ONE_OF("auto|on|off"), dist.overlap, V("auto"),       \
      "all-reduce each gradient bucket while the backward pass runs; auto times a "                \
      "program's first steps both ways and keeps the faster (the weights do not depend "           \
      "on it)")                                                                                    \
    X(REDUCE_BUCKET_FLOATS, "reduce-bucket-floats", MPI, NUM("N", 1, INT32_MAX),                   \
      dist.bucket_floats, V("1048576"), "the all-reduce bucket, in floats (4 bytes each)")         \
    X(SHARD_DATA, "shard-data", MPI, ONE_OF("auto|on|off"), dist.data, V("auto"),                  \
      "an in-memory data set stays on rank 0, which sends each replica its rows of every "         \
      "batch (in one process's order) instead of a whole copy; auto from 64 MiB")                  \
    X(SHARD_OPTIMIZER, "shard-optimizer", MPI, ONE_OF("auto|on|off"), dist.shard, V("auto"),       \
      "ZeRO stage 1: each replica keeps and updates the optimizer state of 1/N of the "            \
      "parameters (reduce-scatter, all-gather); auto when that saves a rank 64 MiB or "            \
      "more")                                                                                      \
    X(STATE_DIR, "state-dir", DURABLE, STR("DIR"), srv.state_dir, AUTO("state in memory"),         \
      "keep sessions, datasets and checkpoints in DIR and restore them at start; DIR must "        \
      "be the daemon user's, writable by no one else (0700)")                                      \
    X(CHECKPOINT_EVERY_STEPS, "checkpoint-every-steps", DURABLE, NUM("N", 0, UINT32_MAX),          \
      srv.ckpt_every_steps, V("0"),                                                                \
      "checkpoint a program after a call once N steps ran since the last one; 0 = off")            \
    X(CHECKPOINT_EVERY_S, "checkpoint-every-s", DURABLE, NUM("N", 0, UINT32_MAX),                  \
      srv.ckpt_every_s, V("30"),                                                                   \
      "... or once N s passed (0 = off); also at every Fit epoch end, on demand and at "           \
      "exit")                                                                                      \
    X(CHECKPOINT_KEEP, "checkpoint-keep", DURABLE, NUM("K", 1, 1000), srv.ckpt_keep, V("3"),       \
      "checkpoints kept per program")                                                              \
    X(CHECKPOINT_FAIL, "checkpoint-fail", DURABLE, ONE_OF("stop|continue"),                        \
      srv.ckpt_fail_continue, V("stop"),                                                           \
      "a failed checkpoint (disk full) fails the call, or is only logged")                         \
    X(CHECKPOINT_NO_FSYNC, "checkpoint-no-fsync", DURABLE, FLAG, srv.ckpt_no_fsync, NODEF,         \
      "benchmarks only: no fsync (not crash-safe)")                                                \
    X(PAUSE_AT_STEP, "pause-at-step", DURABLE, NUM("N", 0, INT64_MAX), srv.pause_at_step, V("0"),  \
      "tests only: the process stops itself (SIGSTOP) at the first step boundary "                 \
      "at or past global step N, so a test kills it at a chosen step; 0 = off")                    \
    X(TLS_CERT, "tls-cert", SECURITY, STR("FILE"), srv.tls_cert, NODEF,                            \
      "PEM certificate chain: serve TLS (with --tls-key)")                                         \
    X(TLS_KEY, "tls-key", SECURITY, STR("FILE"), srv.tls_key, NODEF,                               \
      "PEM private key of --tls-cert")                                                             \
    X(TLS_CLIENT_CA, "tls-client-ca", SECURITY, STR("FILE"), srv.tls_client_ca, NODEF,             \
      "PEM CA: require client certificates it signed (mTLS)")                                      \
    X(TOKENS, "tokens", SECURITY, STR("FILE"), srv.tokens_path, NODEF,                             \
      "bearer tokens: lines 'SHA256HEX PRINCIPAL [quota=N..]'; reread on SIGHUP. Without "         \
      "it the daemon is single-user and listens on loopback only")                                 \
    X(INSECURE, "insecure", SECURITY, FLAG, insecure, NODEF,                                       \
      "allow a non-loopback address without TLS")                                                  \
    X(NEW_TOKEN, "new-token", SECURITY, ACTION("PRINCIPAL"), action, NODEF,                        \
      "print a tokens-file line for a new random token (the token itself goes to stderr) "         \
      "and exit")                                                                                  \
    X(MAX_MEMORY_BYTES, "max-memory-bytes", SECURITY, SIZE("N", 1, UINT64_MAX),                    \
      srv.max_memory_bytes, AUTO("3/4 of the RAM, or of an address-space limit below it"),         \
      "program memory + stored datasets + upload buffers of everyone")                             \
    X(SPOOL_DIR, "spool-dir", DATA, STR("DIR"), srv.spool_dir,                                     \
      AUTO("--state-dir if given, else " RT_SPOOL_DIR_DEFAULT),                                    \
      "where streamed datasets' rows are kept on disk")                                            \
    X(STREAM_ABOVE, "stream-above", DATA, SIZE("N", 1, UINT64_MAX), srv.stream_above,              \
      AUTO("a quarter of the memory budget"),                                                      \
      "stream a dataset whose decoded size is over N bytes")                                       \
    X(MAP_SPOOL_BELOW, "map-spool-below", DATA, SIZE("N", 0, UINT64_MAX), srv.map_spool_below,     \
      AUTO("an eighth of the memory budget"),                                                      \
      "a spool file up to N bytes is mapped and read by the training step itself, a "              \
      "larger one by the decode workers; 0 = never mapped")                                        \
    X(DECODE_THREADS, "decode-threads", DATA, NUM("N", 1, 256), srv.decode_threads,                \
      AUTO("the CPUs"), "decode workers per streamed dataset")                                     \
    X(PREFETCH, "prefetch", DATA, NUM("N", 1, 1024), srv.prefetch, AUTO("4"),                      \
      "batches decoded ahead of training")                                                         \
    X(SHUFFLE_BUFFER, "shuffle-buffer", DATA, NUM("N", 1, 2147483648), srv.shuffle_buffer,         \
      AUTO("10000"), "streamed sets shuffle through N samples, as tf.data's shuffle(N)")           \
    X(MAX_SPOOL_BYTES, "max-spool-bytes", DATA, SIZE("N", 1, UINT64_MAX), srv.max_spool_bytes,     \
      AUTO("the disk's room, keeping 1 GiB free"), "bytes all streamed datasets may hold on disk") \
    RT__OPT_QUOTA(X, SESSIONS, "sessions", "with --tokens: a quarter of --max-sessions",           \
                  "open sessions")                                                                 \
    RT__OPT_QUOTA(X, PROGRAMS, "programs", "with --tokens: 64", "compiled programs")               \
    RT__OPT_QUOTA(X, PROGRAM_BYTES, "program-bytes",                                               \
                  "with --tokens: a quarter of the memory budget",                                 \
                  "programs' memory: parameters, gradients, optimizer state, arenas")              \
    RT__OPT_QUOTA(X, STORE_BYTES, "store-bytes", "with --tokens: a quarter of --max-store-bytes",  \
                  "stored datasets")                                                               \
    RT__OPT_QUOTA(X, UPLOADS, "uploads", "with --tokens: 4", "uploads in flight")                  \
    RT__OPT_QUOTA(X, UPLOAD_BYTES, "upload-bytes",                                                 \
                  "with --tokens: a quarter of the memory budget",                                 \
                  "bytes its uploads in flight hold: what arrived plus a window each")             \
    RT__OPT_QUOTA(X, CALL_BYTES, "call-bytes", "with --tokens: a quarter of the memory budget",    \
                  "memory one call may take for its answer")                                       \
    X(VERSION, "version", OTHER, ACTION(NULL), action, NODEF, "print the version and exit")        \
    X(HELP, "help", OTHER, ACTION(NULL), action, NODEF, "this text")

/* A row of a principal's default quota (RT_QUOTA_MAP's kind K): a size,
 * 1..unlimited, AUTO(def). */
#define RT__OPT_QUOTA(X, K, name, def, help)                                                     \
    X(QUOTA_##K, "quota-" name, QUOTA, SIZE("N", 1, UINT64_MAX), srv.quota[RT_Q_##K], AUTO(def), \
      help)

/* X(old name, ID of the flag it stands for): the same setting, no
 * environment variable of its own. */
#define RT_DAEMON_OPTION_ALIASES(X)      \
    X("session-idle-s", SESSION_LEASE_S) \
    X("metrics-listen", HTTP_LISTEN)

typedef enum rt_opt_id {
#define RT__OPT_ENUM(id, ...) RT_OPT_##id,
    RT_DAEMON_OPTIONS(RT__OPT_ENUM)
#undef RT__OPT_ENUM
        RT_OPT__COUNT
} rt_opt_id;

/* Where the rows write. */
typedef struct rt_daemon_opts {
    rt_srv_config srv;
    rt_dist_opts dist;
    uint64_t grace_ms, drain_ms;
    uint64_t idle_ms;        /* the session lease; 0 = never */
    const char *http_listen; /* NULL = no HTTP endpoint */
    const char *backend;     /* NULL = the best built (rt_backend_select) */
    int insecure;
    int log_level;                      /* rt_log_level */
    int log_format;                     /* rt_log_format */
    int action;                         /* ACTION rows write nothing here */
    unsigned char given[RT_OPT__COUNT]; /* set on the command line or the environment */
} rt_daemon_opts;

typedef enum rt_opt_type {
    RT_OPT_STR,
    RT_OPT_FLAG,
    RT_OPT_NUM,
    RT_OPT_SIZE,
    RT_OPT_ONE_OF,
    RT_OPT_ACTION
} rt_opt_type;

typedef enum rt_opt_group {
    RT_OPTG_MAIN,
    RT_OPTG_MPI,
    RT_OPTG_DURABLE,
    RT_OPTG_SECURITY,
    RT_OPTG_DATA,
    RT_OPTG_QUOTA,
    RT_OPTG_OTHER
} rt_opt_group;

/* A row, as data. */
typedef struct rt_opt_desc {
    const char *name;
    rt_opt_group group;
    rt_opt_type type;
    const char *meta;       /* "N", "FILE", "a|b|c"; NULL: no argument */
    uint64_t lo, hi, scale; /* NUM, SIZE: the range and the factor stored */
    size_t off, size;       /* the field in rt_daemon_opts */
    uint64_t field_max;     /* the largest value the field holds */
    const char *def;        /* parsed at start; NULL: none */
    const char *def_doc;    /* what the default is; NULL: none */
    const char *help;
} rt_opt_desc;

extern const rt_opt_desc rt_daemon_options[RT_OPT__COUNT];

typedef struct rt_opt_alias {
    const char *name;
    rt_opt_id id;
} rt_opt_alias;
extern const rt_opt_alias rt_daemon_option_aliases[];
extern const int rt_daemon_option_n_aliases;

/* "RTRAIND_MAX_SESSIONS" for a row; "" for an ACTION. */
void rt_option_env_name(const rt_opt_desc *d, char *buf, size_t len);

/* Fills o from the defaults, the environment and argv. Returns 0 when the
 * daemon should run, or -1 with *status the exit status: 0 after --help,
 * --version or --new-token; 2 for a bad flag or value (the message on
 * stderr names the flag or variable, the value and what it may be). */
int rt_options_parse(rt_daemon_opts *o, int argc, char **argv, int *status);

/* Sets one row from text ("--threads 8" or RTRAIND_THREADS=8): 0, or -1
 * with a message in err ("out of range 1..64"). */
int rt_option_set(rt_daemon_opts *o, rt_opt_id id, const char *text, char *err, size_t errlen);

/* `rtraind --help` */
void rt_options_usage(FILE *f);
/* The table of docs/operations.md and the comments of deploy/rtraind.env
 * (rtraind_optdoc prints them). */
void rt_options_markdown(FILE *f);
void rt_options_envfile(FILE *f);

#ifdef __cplusplus
}
#endif

#endif
