/*
 * rtraind - the rtrain daemon.
 *
 *     rtraind --listen 127.0.0.1:0        # prints "rtraind listening on 127.0.0.1:PORT"
 *
 * The main thread runs a libuv loop that owns signals (SIGTERM/SIGINT start
 * a graceful stop, SIGHUP reloads the tokens file) and the grace timer;
 * gRPC work runs on the server's completion-queue threads and the device
 * executor (server/rpc).
 *
 * Shared with others (docs/security.md):
 *
 *     rtraind --new-token alice >> tokens.txt   # prints the token on stderr
 *     rtraind --listen 0.0.0.0:7070 --tls-cert srv.pem --tls-key srv.key \
 *             --tokens tokens.txt
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <uv.h>

#include "rt_auth.h"
#include "rt_dist.h"
#include "rt_log.h"
#include "rt_metrics.h"
#include "rt_obs.h"
#include "rt_srv.h"
#include "rt_stream.h"
#include "rtrain/rt_error.h"

typedef struct daemon_state {
    uv_loop_t *loop;
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t grace;
    uv_timer_t drain;
    uv_timer_t idle;
    uint64_t idle_ms;
    uv_async_t drained;
    rt_srv *srv;
    uint64_t grace_ms;
    uint64_t drain_ms;
    int stopping;                /* 1 draining (--drain-ms), 2 stopping */
} daemon_state;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rtraind [options]\n"
            "  --listen ADDR            host:port to listen on (default 127.0.0.1:7070;\n"
            "                           port 0 picks a free port, printed on stdout)\n"
            "  --threads N              completion-queue threads (default 1 on hosts\n"
            "                           with 2 CPUs or fewer, else 2)\n"
            "  --max-message-bytes N    gRPC receive limit (default 67108864)\n"
            "  --max-sessions N         open sessions at once (default 64)\n"
            "  --max-dataset-bytes N    bytes of one dataset upload (default 4294967296)\n"
            "  --max-store-bytes N      bytes of all stored datasets; past it the least\n"
            "                           recently used unused ones are dropped\n"
            "                           (default half the RAM)\n"
            "  --inline-us N            run device jobs estimated under N us on the\n"
            "                           gRPC thread when the device is free; 0 = never\n"
            "                           (default 200)\n"
            "  --session-lease-s N      a session's lease: every call naming it renews\n"
            "                           it; one not renewed for N seconds is closed\n"
            "                           with its programs and its slot freed; 0 = never\n"
            "                           (default 3600; --session-idle-s is the old name)\n"
            "  --session-idle-s N       the old name of --session-lease-s\n"
            "  --slice-ms N             a long Fit/RunSteps yields the device at a step\n"
            "                           boundary after N ms when another client waits\n"
            "                           (default 20)\n"
            "  --compile-threads N      compile workers (default 1)\n"
            "  --compile-timeout S      a compile's time budget in seconds; 0 = none\n"
            "                           (default 60)\n"
            "  --max-exec-threads N     device jobs of different clients in flight\n"
            "                           (default 64)\n"
            "  --max-uploads N          uploads in flight, server-wide (default 16)\n"
            "  --max-upload-bytes N     bytes the uploads in flight hold: what arrived\n"
            "                           plus a window of N / (2 x --max-uploads) each\n"
            "                           (default 2 x --max-dataset-bytes)\n"
            "  --upload-stall-s N       cancel an upload that sent nothing for N s\n"
            "                           (default 60; 0 = never)\n"
            "  --upload-keep-s N        keep a broken upload's bytes N s for a resume,\n"
            "                           charged to its uploader (default 600; 0 = off)\n"
            "  --upload-pool-bytes N    idle upload buffers kept for reuse: their memory\n"
            "                           is already touched (default 1G; 0 = none)\n"
            "  --upload-arena-bytes N   idle upload memory a background thread keeps\n"
            "                           faulted in, so an upload does not pay the first\n"
            "                           touch of fresh pages (default 256M, none under\n"
            "                           an address-space limit; 0 = off)\n"
            "  --pipeline-hold-ms N     a pipelined RunSteps waits at most N ms for the\n"
            "                           call before it (after_seq) (default 30000)\n"
            "  --max-inflate-ratio N    gzip data may inflate to N x its size (default 100)\n"
            "  --keepalive-s N          ping idle connections every N s, close them if\n"
            "                           unanswered (default 60; 0 = off)\n"
            "  --keepalive-timeout-s N  how long a keepalive ping may go unanswered\n"
            "                           (default 20)\n"
            "  --handshake-timeout-ms N close connections that do not finish the HTTP/2\n"
            "                           handshake in N ms (default 10000)\n"
            "  --conn-idle-s N          close connections without calls for N s\n"
            "                           (default 3600; 0 = never)\n"
            "  --max-concurrent-streams N  calls one connection may have open at once,\n"
            "                           advertised in HTTP/2 SETTINGS (default 100)\n"
            "  --stream-queue N         messages queued per Fit stream before the Fit\n"
            "                           waits for its reader (default 64)\n"
            "  --grace-ms N             on SIGTERM/SIGINT, let running calls finish for\n"
            "                           N ms before cancelling them (default 5000)\n"
            "  --drain-ms N             on SIGTERM/SIGINT, first report NOT_SERVING on\n"
            "                           grpc.health.v1 for N ms while still taking\n"
            "                           calls, then stop as above (default 0)\n"
            "  --log-level LEVEL        error|warn|info|debug (default info)\n"
            "  --log-format FORMAT      text|json: json writes one object per line, and\n"
            "                           each finished call as an info line with\n"
            "                           principal, session prefix, method, status and\n"
            "                           duration (default text)\n"
            "  --metrics-listen ADDR    serve Prometheus metrics at http://ADDR/metrics\n"
            "                           (port 0 picks a free port, printed on stdout\n"
            "                           before the listening line; default off)\n"
            "MPI replicas (mpirun -n N rtraind ...; README \"More than one machine\"):\n"
            "  --deterministic-reduce M split each global batch into M micro-shards whose\n"
            "                           gradients are summed in a fixed order: runs with\n"
            "                           any N dividing M are bit-identical (default off)\n"
            "  --dist-timeout-ms N      a replica that does not answer a collective in N ms\n"
            "                           is taken as dead: the call fails UNAVAILABLE\n"
            "                           (default 30000)\n"
            "  --overlap-reduce on|off|auto  all-reduce each gradient bucket while the\n"
            "                           backward pass runs; auto times a program's first\n"
            "                           steps both ways and keeps the faster (default auto;\n"
            "                           the weights do not depend on it)\n"
            "  --reduce-bucket-floats N the all-reduce bucket (default 1048576, 4 MiB)\n"
            "Durable mode (docs/operations.md):\n"
            "  --state-dir DIR          keep sessions, datasets and checkpoints in DIR and\n"
            "                           restore them at start (default: state in memory);\n"
            "                           DIR must be the daemon user's, writable by no one\n"
            "                           else (0700)\n"
            "  --checkpoint-every-steps N  checkpoint a program after a call once N steps\n"
            "                           ran since the last one (default 0 = off)\n"
            "  --checkpoint-every-s N   ... or once N s passed (default 30; 0 = off); also\n"
            "                           at every Fit epoch end, on demand and at exit\n"
            "  --checkpoint-keep K      checkpoints kept per program (default 3)\n"
            "  --checkpoint-fail P      stop|continue: a failed checkpoint (disk full)\n"
            "                           fails the call, or is only logged (default stop)\n"
            "  --checkpoint-no-fsync    benchmarks only: no fsync (not crash-safe)\n"
            "  --pause-at-step N        tests only: the process stops itself (SIGSTOP) at\n"
            "                           the first step boundary at or past global step N,\n"
            "                           so a test kills it at a chosen step (default 0 = off)\n"
            "Security (docs/security.md):\n"
            "  --tls-cert FILE          PEM certificate chain: serve TLS (with --tls-key)\n"
            "  --tls-key FILE           PEM private key of --tls-cert\n"
            "  --tls-client-ca FILE     PEM CA: require client certificates it signed (mTLS)\n"
            "  --tokens FILE            bearer tokens: lines 'SHA256HEX PRINCIPAL [quota=N..]';\n"
            "                           reread on SIGHUP. Without it the daemon is\n"
            "                           single-user and listens on loopback only\n"
            "  --insecure               allow a non-loopback address without TLS\n"
            "  --new-token PRINCIPAL    print a tokens-file line for a new random token\n"
            "                           (the token itself goes to stderr) and exit\n"
            "  --max-memory-bytes N     program memory + stored datasets + upload buffers\n"
            "                           of everyone (default 3/4 of the RAM, or of an\n"
            "                           address-space limit below it); K/M/G allowed\n"
            "Datasets larger than memory (docs/data.md):\n"
            "  --spool-dir DIR          where streamed datasets' rows are kept on disk\n"
            "                           (default --state-dir if given, else "
            RT_SPOOL_DIR_DEFAULT ")\n"
            "  --stream-above N         stream a dataset whose decoded size is over N\n"
            "                           bytes (default a quarter of the memory budget);\n"
            "                           K/M/G allowed\n"
            "  --map-spool-below N      a spool file up to N bytes is mapped and read by\n"
            "                           the training step itself, a larger one by the\n"
            "                           decode workers (default an eighth of the memory\n"
            "                           budget; 0: never mapped); K/M/G allowed\n"
            "  --decode-threads N       decode workers per streamed dataset (default: CPUs)\n"
            "  --prefetch N             batches decoded ahead of training (default 4)\n"
            "  --shuffle-buffer N       streamed sets shuffle through N samples, as\n"
            "                           tf.data's shuffle(N) (default 10000)\n"
            "  --max-spool-bytes N      bytes all streamed datasets may hold on disk\n"
            "                           (default: the disk's room, keeping 1 GiB free)\n"
            "  Default quotas of a principal (the tokens file can set each per\n"
            "  principal; single-user: unlimited; K/M/G allowed):\n"
            "  --quota-sessions N       open sessions (default with --tokens: a quarter\n"
            "                           of --max-sessions)\n"
            "  --quota-programs N       compiled programs (default 64)\n"
            "  --quota-program-bytes N  programs' memory: parameters, gradients,\n"
            "                           optimizer state, arenas (default a quarter of\n"
            "                           the memory budget)\n"
            "  --quota-store-bytes N    stored datasets (default a quarter of\n"
            "                           --max-store-bytes)\n"
            "  --quota-uploads N        uploads in flight (default 4)\n"
            "  --quota-upload-bytes N   bytes its uploads in flight hold: what arrived\n"
            "                           plus a window each (default a quarter of the\n"
            "                           memory budget)\n"
            "  --quota-call-bytes N     memory one call may take for its answer\n"
            "                           (default a quarter of the memory budget)\n"
            "  --version                print the version and exit\n"
            "  --help                   this text\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

static void close_cb(uv_handle_t *h) { (void)h; }

static void on_drained_async(uv_async_t *a)
{
    daemon_state *d = a->data;
    RT_LOG(RT_LOG_INFO, "all calls finished; shutting down");
    uv_timer_stop(&d->grace);
    uv_timer_stop(&d->idle);
    uv_timer_stop(&d->drain);
    uv_close((uv_handle_t *)&d->idle, close_cb);
    uv_close((uv_handle_t *)&d->drain, close_cb);
    uv_close((uv_handle_t *)&d->sigterm, close_cb);
    uv_close((uv_handle_t *)&d->sigint, close_cb);
    uv_close((uv_handle_t *)&d->sighup, close_cb);
    uv_close((uv_handle_t *)&d->grace, close_cb);
    uv_close((uv_handle_t *)&d->drained, close_cb);
}

/* Called from a gRPC thread: only uv_async_send is allowed there. */
static void on_drained(void *ud)
{
    daemon_state *d = ud;
    uv_async_send(&d->drained);
}

static void on_idle_check(uv_timer_t *t)
{
    daemon_state *d = t->data;
    rt_srv_expire_sessions(d->srv, d->idle_ms);
}

static void on_grace(uv_timer_t *t)
{
    daemon_state *d = t->data;
    RT_LOG(RT_LOG_WARN, "grace period over: cancelling %d running call(s)",
           rt_srv_live_calls(d->srv));
    rt_srv_cancel_all(d->srv);
}

static void on_sighup(uv_signal_t *s, int signum)
{
    daemon_state *d = s->data;
    char err[300] = "";
    int n = 0;
    if (rt_srv_reload_tokens(d->srv, &n, err, sizeof err) < 0)
        RT_LOG(RT_LOG_ERROR, "SIGHUP: tokens not reloaded, the previous ones stay: %s", err);
    else
        RT_LOG(RT_LOG_INFO, "SIGHUP: tokens reloaded (%d accepted)", n);
}

/* Loopback (or a unix socket): reachable only from this machine. */
static int is_local_addr(const char *listen)
{
    if (strncmp(listen, "unix:", 5) == 0)
        return 1;
    char host[128];
    const char *colon = strrchr(listen, ':');
    size_t n = colon ? (size_t)(colon - listen) : strlen(listen);
    if (n >= sizeof host)
        return 0;
    memcpy(host, listen, n);
    host[n] = 0;
    char *h = host;
    if (h[0] == '[') {
        h++;
        char *e = strchr(h, ']');
        if (e)
            *e = 0;
    }
    if (strcmp(h, "localhost") == 0)
        return 1;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, h, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

static void begin_stop(daemon_state *d, const char *why)
{
    d->stopping = 2;
    uv_timer_stop(&d->drain);
    RT_LOG(RT_LOG_INFO, "%s: stopping (grace %llu ms, %d call(s) running)", why,
           (unsigned long long)d->grace_ms, rt_srv_live_calls(d->srv));
    rt_srv_stop(d->srv);
    uv_timer_start(&d->grace, on_grace, d->grace_ms, 0);
}

static void on_drain(uv_timer_t *t)
{
    begin_stop(t->data, "drain period over");
}

static void on_signal(uv_signal_t *s, int signum)
{
    daemon_state *d = s->data;
    const char *name = signum == SIGTERM ? "SIGTERM" : "SIGINT";
    if (d->stopping == 2) {
        /* A second signal: do not wait for the grace period. */
        RT_LOG(RT_LOG_WARN, "second signal: cancelling running calls");
        rt_srv_cancel_all(d->srv);
        return;
    }
    if (d->stopping == 1) { /* a second signal while draining: stop now */
        begin_stop(d, name);
        return;
    }
    uv_timer_stop(&d->idle);
    /* Health says NOT_SERVING at once; with --drain-ms the daemon still
     * takes calls for that long, so load balancers and Kubernetes probes
     * see it and route new work elsewhere before the port closes. */
    rt_srv_set_serving(d->srv, 0);
    if (d->drain_ms) {
        d->stopping = 1;
        RT_LOG(RT_LOG_INFO, "%s: draining for %llu ms (health NOT_SERVING, calls still taken)",
               name, (unsigned long long)d->drain_ms);
        uv_timer_start(&d->drain, on_drain, d->drain_ms, 0);
        return;
    }
    begin_stop(d, name);
}

int main(int argc, char **argv)
{
    /* Large upload chunks are malloc'ed per message; mmap for each would
     * halve upload throughput (docs/grpc-core.md). */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    signal(SIGPIPE, SIG_IGN);
    /* a file over RLIMIT_FSIZE is a write error (EFBIG), not a kill */
    signal(SIGXFSZ, SIG_IGN);
    /* Every connection is a descriptor: take the hard limit, so a flood of
     * half-open connections (closed by the handshake timeout) does not
     * lock everyone out first. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    rt_srv_config cfg;
    rt_srv_config_init(&cfg);
    daemon_state d;
    memset(&d, 0, sizeof d);
    d.grace_ms = 5000;
    d.idle_ms = 3600ull * 1000;

    /* past every char: getopt_long returns '?' (63) for an unknown flag */
    enum { O_LISTEN = 256, O_THREADS, O_MAXMSG, O_MAXSESS, O_MAXDATA, O_INLINE, O_GRACE,
           O_LOG, O_VERSION, O_HELP, O_MAXSTORE, O_IDLE, O_TLS_CERT, O_TLS_KEY,
           O_TLS_CA, O_TOKENS, O_INSECURE, O_NEW_TOKEN, O_MAXMEM, O_LEASE, O_SLICE, O_CTHREADS,
           O_CTIMEOUT, O_XTHREADS, O_MAXUP, O_MAXUPB, O_STALL, O_RATIO, O_KEEPALIVE,
           O_HANDSHAKE, O_CONNIDLE, O_MAXSTREAMS, O_STREAMQ, O_KATIMEOUT, O_DRAIN,
           O_LOGFMT, O_METRICS, O_UPKEEP, O_PIPEHOLD, O_UPPOOL, O_UPARENA, O_DETRED, O_DISTTO,
           O_OVERLAP, O_BUCKET,
           O_SPOOL, O_STREAMABOVE, O_MAPBELOW, O_DTHREADS, O_PREFETCH, O_SHUFBUF, O_MAXSPOOL,
           O_STATE, O_CK_STEPS, O_CK_S, O_CK_KEEP, O_CK_FAIL,
           O_CK_NOSYNC, O_PAUSEAT,
           O_QUOTA /* + rt_quota_kind */ };
    static const struct option opts[] = {
        {"listen", required_argument, 0, O_LISTEN},
        {"threads", required_argument, 0, O_THREADS},
        {"max-message-bytes", required_argument, 0, O_MAXMSG},
        {"max-sessions", required_argument, 0, O_MAXSESS},
        {"max-dataset-bytes", required_argument, 0, O_MAXDATA},
        {"inline-us", required_argument, 0, O_INLINE},
        {"grace-ms", required_argument, 0, O_GRACE},
        {"log-level", required_argument, 0, O_LOG},
        {"version", no_argument, 0, O_VERSION},
        {"help", no_argument, 0, O_HELP},
        {"max-store-bytes", required_argument, 0, O_MAXSTORE},
        {"session-idle-s", required_argument, 0, O_IDLE},
        {"tls-cert", required_argument, 0, O_TLS_CERT},
        {"tls-key", required_argument, 0, O_TLS_KEY},
        {"tls-client-ca", required_argument, 0, O_TLS_CA},
        {"tokens", required_argument, 0, O_TOKENS},
        {"insecure", no_argument, 0, O_INSECURE},
        {"new-token", required_argument, 0, O_NEW_TOKEN},
        {"max-memory-bytes", required_argument, 0, O_MAXMEM},
        {"session-lease-s", required_argument, 0, O_LEASE},
        {"slice-ms", required_argument, 0, O_SLICE},
        {"compile-threads", required_argument, 0, O_CTHREADS},
        {"compile-timeout", required_argument, 0, O_CTIMEOUT},
        {"max-exec-threads", required_argument, 0, O_XTHREADS},
        {"max-uploads", required_argument, 0, O_MAXUP},
        {"max-upload-bytes", required_argument, 0, O_MAXUPB},
        {"upload-stall-s", required_argument, 0, O_STALL},
        {"max-inflate-ratio", required_argument, 0, O_RATIO},
        {"keepalive-s", required_argument, 0, O_KEEPALIVE},
        {"handshake-timeout-ms", required_argument, 0, O_HANDSHAKE},
        {"conn-idle-s", required_argument, 0, O_CONNIDLE},
        {"max-concurrent-streams", required_argument, 0, O_MAXSTREAMS},
        {"stream-queue", required_argument, 0, O_STREAMQ},
        {"keepalive-timeout-s", required_argument, 0, O_KATIMEOUT},
        {"drain-ms", required_argument, 0, O_DRAIN},
        {"log-format", required_argument, 0, O_LOGFMT},
        {"metrics-listen", required_argument, 0, O_METRICS},
        {"upload-keep-s", required_argument, 0, O_UPKEEP},
        {"pipeline-hold-ms", required_argument, 0, O_PIPEHOLD},
        {"upload-pool-bytes", required_argument, 0, O_UPPOOL},
        {"upload-arena-bytes", required_argument, 0, O_UPARENA},
        {"spool-dir", required_argument, 0, O_SPOOL},
        {"stream-above", required_argument, 0, O_STREAMABOVE},
        {"map-spool-below", required_argument, 0, O_MAPBELOW},
        {"decode-threads", required_argument, 0, O_DTHREADS},
        {"prefetch", required_argument, 0, O_PREFETCH},
        {"shuffle-buffer", required_argument, 0, O_SHUFBUF},
        {"max-spool-bytes", required_argument, 0, O_MAXSPOOL},
        {"deterministic-reduce", required_argument, 0, O_DETRED},
        {"dist-timeout-ms", required_argument, 0, O_DISTTO},
        {"overlap-reduce", required_argument, 0, O_OVERLAP},
        {"reduce-bucket-floats", required_argument, 0, O_BUCKET},
        {"state-dir", required_argument, 0, O_STATE},
        {"checkpoint-every-steps", required_argument, 0, O_CK_STEPS},
        {"checkpoint-every-s", required_argument, 0, O_CK_S},
        {"checkpoint-keep", required_argument, 0, O_CK_KEEP},
        {"checkpoint-fail", required_argument, 0, O_CK_FAIL},
        {"checkpoint-no-fsync", no_argument, 0, O_CK_NOSYNC},
        {"pause-at-step", required_argument, 0, O_PAUSEAT},
#define RT__Q_OPT(k, name, mem) {"quota-" name, required_argument, 0, O_QUOTA + RT_Q_##k},
        RT_QUOTA_MAP(RT__Q_OPT)
#undef RT__Q_OPT
        {0, 0, 0, 0},
    };
    const char *metrics_addr = NULL;
    rt_dist_opts dist = {0};
    int insecure = 0;
    int o, oi = 0;
    uint64_t v;
    while ((o = getopt_long(argc, argv, "", opts, &oi)) != -1) {
        if (o >= O_QUOTA && o < O_QUOTA + RT_Q__COUNT) {
            if (rt_quota_parse(optarg, &v) < 0 || v == 0)
                goto bad;
            cfg.quota[o - O_QUOTA] = v;
            continue;
        }
        switch (o) {
        case O_TLS_CERT: cfg.tls_cert = optarg; break;
        case O_TLS_KEY: cfg.tls_key = optarg; break;
        case O_TLS_CA: cfg.tls_client_ca = optarg; break;
        case O_TOKENS: cfg.tokens_path = optarg; break;
        case O_INSECURE: insecure = 1; break;
        case O_MAXMEM:
            if (rt_quota_parse(optarg, &v) < 0 || v == 0)
                goto bad;
            cfg.max_memory_bytes = v;
            break;
        case O_NEW_TOKEN: {
            char tok[65], hash[65];
            if (strlen(optarg) > 63 || !optarg[0] ||
                strspn(optarg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789._@-") != strlen(optarg)) {
                fprintf(stderr, "rtraind: --new-token: a principal is 1-63 of A-Z a-z 0-9 . _ @ -\n");
                return 2;
            }
            if (rt_auth_new_token(tok, hash) < 0) {
                fprintf(stderr, "rtraind: no random bytes for a token\n");
                return 1;
            }
            fprintf(stderr, "token for %s (give it to the client; it is not stored): %s\n",
                    optarg, tok);
            printf("%s %s\n", hash, optarg);
            return 0;
        }
        case O_LISTEN: cfg.listen = optarg; break;
        case O_THREADS:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 64)
                goto bad;
            cfg.threads = (int)v;
            break;
        case O_MAXMSG:
            if (parse_u64(optarg, &v) < 0 || v < 1024 || v > INT32_MAX)
                goto bad;
            cfg.max_message_bytes = v;
            break;
        case O_MAXSESS:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 1000000)
                goto bad;
            cfg.max_sessions = (int)v;
            break;
        case O_MAXDATA:
            if (parse_u64(optarg, &v) < 0 || v < 1)
                goto bad;
            cfg.max_dataset_bytes = v;
            break;
        case O_IDLE:
        case O_LEASE:
            if (parse_u64(optarg, &v) < 0 || v > 10ull * 365 * 86400)
                goto bad;
            d.idle_ms = v * 1000;
            break;
        case O_SLICE:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 60000)
                goto bad;
            cfg.slice_ns = v * 1000000;
            break;
        case O_CTHREADS:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 64)
                goto bad;
            cfg.compile_threads = (int)v;
            break;
        case O_CTIMEOUT:
            if (parse_u64(optarg, &v) < 0 || v > 86400)
                goto bad;
            cfg.compile_timeout_ms = v * 1000;
            break;
        case O_XTHREADS:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 4096)
                goto bad;
            cfg.max_exec_threads = (int)v;
            break;
        case O_MAXUP:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 1000000)
                goto bad;
            cfg.max_uploads = (int)v;
            break;
        case O_MAXUPB:
            if (parse_u64(optarg, &v) < 0 || v < 1)
                goto bad;
            cfg.max_upload_bytes = v;
            break;
        case O_STALL:
            if (parse_u64(optarg, &v) < 0 || v > 86400)
                goto bad;
            cfg.upload_stall_ms = v * 1000;
            break;
        case O_UPKEEP:
            if (parse_u64(optarg, &v) < 0 || v > 86400)
                goto bad;
            cfg.upload_keep_ms = v * 1000;
            break;
        case O_UPPOOL:
            if (rt_quota_parse(optarg, &v) < 0)
                goto bad;
            cfg.upload_pool_bytes = v;
            break;
        case O_UPARENA:
            if (rt_quota_parse(optarg, &v) < 0)
                goto bad;
            cfg.upload_arena_bytes = v;
            break;
        case O_PIPEHOLD:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 3600000)
                goto bad;
            cfg.pipeline_hold_ms = v;
            break;
        case O_RATIO:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 100000)
                goto bad;
            cfg.max_inflate_ratio = (uint32_t)v;
            break;
        case O_KEEPALIVE:
            if (parse_u64(optarg, &v) < 0 || v > 86400)
                goto bad;
            cfg.keepalive_ms = v * 1000;
            break;
        case O_KATIMEOUT:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 86400)
                goto bad;
            cfg.keepalive_timeout_ms = v * 1000;
            break;
        case O_HANDSHAKE:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 3600000)
                goto bad;
            cfg.handshake_timeout_ms = v;
            break;
        case O_CONNIDLE:
            if (parse_u64(optarg, &v) < 0 || v > 10ull * 365 * 86400)
                goto bad;
            cfg.conn_idle_ms = v * 1000;
            break;
        case O_MAXSTREAMS:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 1000000)
                goto bad;
            cfg.max_concurrent_streams = (uint32_t)v;
            break;
        case O_SPOOL: cfg.spool_dir = optarg; break;
        case O_STREAMABOVE:
            if (rt_quota_parse(optarg, &v) < 0 || v == 0)
                goto bad;
            cfg.stream_above = v;
            break;
        case O_MAPBELOW:
            if (!strcmp(optarg, "0"))
                v = 0;
            else if (rt_quota_parse(optarg, &v) < 0 || v == 0)
                goto bad;
            cfg.map_spool_below = v;
            cfg.map_spool_set = 1;
            break;
        case O_DTHREADS:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 256)
                goto bad;
            cfg.decode_threads = (int)v;
            break;
        case O_PREFETCH:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 1024)
                goto bad;
            cfg.prefetch = (int)v;
            break;
        case O_MAXSPOOL:
            if (rt_quota_parse(optarg, &v) < 0 || v == 0)
                goto bad;
            cfg.max_spool_bytes = v;
            break;
        case O_SHUFBUF:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > (1ull << 31))
                goto bad;
            cfg.shuffle_buffer = (int64_t)v;
            break;
        case O_STREAMQ:
            if (parse_u64(optarg, &v) < 0 || v < 2 || v > 1000000)
                goto bad;
            cfg.stream_queue_max = (int)v;
            break;
        case O_MAXSTORE:
            if (parse_u64(optarg, &v) < 0 || v < 1)
                goto bad;
            cfg.max_store_bytes = v;
            break;
        case O_INLINE:
            if (parse_u64(optarg, &v) < 0 || v > 60000000)
                goto bad;
            cfg.inline_ns = v * 1000;
            break;
        case O_DRAIN:
            if (parse_u64(optarg, &v) < 0 || v > 3600000)
                goto bad;
            d.drain_ms = v;
            break;
        case O_STATE:
            cfg.state_dir = optarg;
            break;
        case O_CK_STEPS:
        case O_CK_S:
            if (parse_u64(optarg, &v) < 0 || v > UINT32_MAX)
                goto bad;
            *(o == O_CK_STEPS ? &cfg.ckpt_every_steps : &cfg.ckpt_every_s) = (uint32_t)v;
            break;
        case O_CK_KEEP:
            if (parse_u64(optarg, &v) < 0 || v < 1 || v > 1000)
                goto bad;
            cfg.ckpt_keep = (int)v;
            break;
        case O_CK_FAIL:
            if (strcmp(optarg, "stop") && strcmp(optarg, "continue"))
                goto bad;
            cfg.ckpt_fail_continue = strcmp(optarg, "continue") == 0;
            break;
        case O_CK_NOSYNC:
            cfg.ckpt_no_fsync = 1;
            break;
        case O_PAUSEAT:
            if (parse_u64(optarg, &v) < 0 || v > INT64_MAX)
                goto bad;
            cfg.pause_at_step = (int64_t)v;
            break;
        case O_GRACE:
            if (parse_u64(optarg, &v) < 0 || v > 3600000)
                goto bad;
            d.grace_ms = v;
            break;
        case O_LOG: {
            rt_log_level lvl;
            if (rt_obs_level_from_name(optarg, &lvl) < 0)
                goto bad;
            rt_obs_set_level(lvl);
            break;
        }
        case O_LOGFMT: {
            rt_log_format f;
            if (rt_log_format_from_name(optarg, &f) < 0)
                goto bad;
            rt_log_set_format(f);
            break;
        }
        case O_METRICS: metrics_addr = optarg; break;
        case O_DETRED:
            if (parse_u64(optarg, &v) < 0 || v == 0 || v > 4096)
                goto bad;
            dist.micro = (int)v;
            break;
        case O_DISTTO:
            if (parse_u64(optarg, &v) < 0 || v == 0 || v > 86400000)
                goto bad;
            dist.timeout_ms = (int)v;
            break;
        case O_OVERLAP:
            if (!strcmp(optarg, "on")) dist.overlap = RT_DIST_OVERLAP_ON;
            else if (!strcmp(optarg, "off")) dist.overlap = RT_DIST_OVERLAP_OFF;
            else if (!strcmp(optarg, "auto")) dist.overlap = RT_DIST_OVERLAP_AUTO;
            else goto bad;
            break;
        case O_BUCKET:
            if (parse_u64(optarg, &v) < 0 || v == 0 || v > INT32_MAX)
                goto bad;
            dist.bucket_floats = (int64_t)v;
            break;
        case O_VERSION:
            printf("rtraind %s (engine %d)\n", RT_VERSION_STRING, 1);
            return 0;
        case O_HELP:
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        continue;
    bad:
        fprintf(stderr, "rtraind: bad value '%s' for --%s\n", optarg, opts[oi].name);
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "rtraind: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }

    /* gRPC takes the port modulo 2^16 (99999 binds 34463): a port must be
     * a number from 0 to 65535, or a name. */
    if (strncmp(cfg.listen, "unix:", 5) != 0) {
        const char *colon = strrchr(cfg.listen, ':');
        const char *port = colon ? colon + 1 : "";
        char *end;
        long v = strtol(port, &end, 10);
        if (!*port || (*end == '\0' && (v < 0 || v > 65535 || end - port > 5))) {
            fprintf(stderr, "rtraind: --listen %s: the port must be 0..65535\n", cfg.listen);
            return 2;
        }
    }

    /* Refuse to be reachable from the network unprotected: other machines
     * need tokens (who is calling) and, unless --insecure, TLS. */
    if (!is_local_addr(cfg.listen)) {
        if (!cfg.tokens_path) {
            fprintf(stderr, "rtraind: %s is not a loopback address: without --tokens the daemon "
                            "is single-user and listens on loopback only\n", cfg.listen);
            return 2;
        }
        if (!cfg.tls_cert && !insecure) {
            fprintf(stderr, "rtraind: %s is not a loopback address: give --tls-cert and "
                            "--tls-key (or --insecure behind a trusted TLS proxy)\n", cfg.listen);
            return 2;
        }
    }
    char err[300] = "";
    /* Under mpirun every rank gets here; ranks > 0 serve rank 0 only. */
    int rc = rt_dist_init(&dist, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "rtraind: %s\n", err);
        return 1;
    }
    if (rt_dist_rank() > 0)
        return rt_dist_worker();
    rc = rt_srv_create(&cfg, &d.srv, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "rtraind: %s\n", err[0] ? err : rt_strerror(rc));
        rt_dist_finalize();
        return 1;
    }
    d.loop = uv_default_loop();
    uv_signal_init(d.loop, &d.sigterm);
    uv_signal_init(d.loop, &d.sigint);
    uv_signal_init(d.loop, &d.sighup);
    uv_timer_init(d.loop, &d.grace);
    uv_timer_init(d.loop, &d.idle);
    uv_timer_init(d.loop, &d.drain);
    uv_async_init(d.loop, &d.drained, on_drained_async);
    d.sigterm.data = d.sigint.data = d.sighup.data = d.grace.data = d.drained.data =
        d.idle.data = &d;
    d.drain.data = &d;
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    uv_signal_start(&d.sighup, on_sighup, SIGHUP);

    if ((rc = rt_srv_start(d.srv, on_drained, &d)) < 0) {
        fprintf(stderr, "rtraind: cannot start: %s\n", rt_strerror(rc));
        rt_dist_finalize();
        return 1;
    }
    if (d.idle_ms) {
        /* Check a few times per idle period, at most once a minute. */
        uint64_t every = d.idle_ms / 4 < 60000 ? d.idle_ms / 4 : 60000;
        if (every < 100)
            every = 100;
        uv_timer_start(&d.idle, on_idle_check, every, every);
    }
    rt_metrics_server *metrics = NULL;
    if (metrics_addr) {
        if (rt_metrics_serve(metrics_addr, rt_srv_metrics_collect, d.srv, &metrics, err,
                             sizeof err) < 0) {
            fprintf(stderr, "rtraind: %s\n", err);
            rt_dist_finalize();
            return 1;
        }
        printf("rtraind metrics on http://%s/metrics\n", rt_metrics_bound(metrics));
    }
    printf("rtraind listening on %s\n", rt_srv_bound(d.srv));
    fflush(stdout);
    if (rt_dist_size() > 1)
        RT_LOG(RT_LOG_INFO, "%d MPI replicas%s", rt_dist_size(),
               dist.micro ? ", deterministic reduce" : "");
    RT_LOG(RT_LOG_INFO, "rtraind %s listening on %s (%d cq threads, inline below %llu us, %s, %s)",
           RT_VERSION_STRING, rt_srv_bound(d.srv), cfg.threads ? cfg.threads : rt_srv_default_threads(),
           (unsigned long long)(cfg.inline_ns / 1000),
           cfg.tls_cert ? (cfg.tls_client_ca ? "mTLS" : "TLS") : "plaintext",
           cfg.tokens_path ? "tokens" : "single-user");
    if (cfg.state_dir)
        RT_LOG(RT_LOG_INFO, "durable mode: state in %s (checkpoints every %u steps / %u s, "
               "keep %d)", cfg.state_dir, cfg.ckpt_every_steps, cfg.ckpt_every_s, cfg.ckpt_keep);

    uv_run(d.loop, UV_RUN_DEFAULT);
    rt_metrics_server_stop(metrics); /* before the server its gauges read */
    rt_srv_destroy(d.srv);
    uv_loop_close(d.loop);
    rt_dist_finalize();
    RT_LOG(RT_LOG_INFO, "stopped");
    return 0;
}
