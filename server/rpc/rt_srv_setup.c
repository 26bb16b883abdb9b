/* rt_srv_setup.c - the server's configuration defaults, its credentials
 * (TLS, mTLS) and bind, create, start, stop and destroy. */
#include "rt_srv_core.h"
#include "rt_random.h"
#include "rt_absl.h"

#include <errno.h>
#include <netdb.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zlib.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>

#include "rt_bufpool.h"
#include "rt_health.h"
#include "rt_stream.h"
#include "rt_state.h"
#include "rt_transport.h"

/* One completion-queue thread on hosts with 2 CPUs or fewer (the CPUs
 * this process may run on), else two. On 2 vCPUs a second cq thread costs
 * more than it gives: both take turns on the same sockets, each message of
 * a large upload wakes the other, and both compete with the upload's lane
 * thread and the client (bench/upload/README.md: 256 MiB uploads from
 * Python 1.6 against 2.0-2.2 GB/s), while K=1 round trips measure the same
 * either way. */
int rt_srv_default_threads(void)
{
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                         : sysconf(_SC_NPROCESSORS_ONLN);
    return n > 2 ? 2 : 1;
}

void rt_srv_config_init(rt_srv_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->listen = "127.0.0.1:7070";
    cfg->threads = 0; /* rt_srv_default_threads() */
    cfg->max_message_bytes = 64ull << 20;
    cfg->max_sessions = 64;
    cfg->ckpt_every_s = 30;
    cfg->ckpt_keep = 3;
    cfg->max_dataset_bytes = 4ull << 30;
    cfg->inline_ns = 200000;
    cfg->slice_ns = 20000000;
    cfg->max_exec_threads = 64;
    cfg->compile_threads = 1;
    cfg->compile_timeout_ms = 60000;
    cfg->max_uploads = 16;
    cfg->upload_stall_ms = 60000;
    cfg->upload_keep_ms = 600000;
    cfg->pipeline_hold_ms = 30000;
    cfg->upload_pool_bytes = 1ull << 30;
    cfg->upload_arena_bytes = UINT64_MAX; /* the default: rt_srv_arena_default */
    cfg->max_inflate_ratio = 100;
    cfg->keepalive_ms = 60000;
    cfg->keepalive_timeout_ms = 20000;
    cfg->handshake_timeout_ms = 10000;
    cfg->conn_idle_ms = 3600000;
    cfg->stream_queue_max = 64;
}

/* ---------------------------------------------------------------- setup */
/* Why a bind failed: gRPC only says "0". Try a plain bind to tell "in use"
 * from an unusable address. */
static void explain_bind(const char *addr, char *err, size_t errlen)
{
    char host[128];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host) {
        snprintf(err, errlen, "cannot listen on %s (expected HOST:PORT)", addr);
        return;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    char *h = host;
    if (h[0] == '[') {
        h++;
        char *e = strchr(h, ']');
        if (e)
            *e = 0;
    }
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(h[0] ? h : NULL, colon + 1, &hints, &ai) != 0 || !ai) {
        snprintf(err, errlen, "cannot listen on %s (unknown host or port)", addr);
        return;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0), e = 0;
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
            e = errno;
        close(fd);
    }
    freeaddrinfo(ai);
    if (e == EADDRINUSE)
        snprintf(err, errlen, "address %s already in use", addr);
    else
        snprintf(err, errlen, "cannot listen on %s (%s)", addr,
                 e ? strerror(e) : "gRPC refused it");
}

/* A whole PEM file, NUL-terminated; NULL with err set on failure. */
static char *read_pem(const char *what, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read %s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = cap <= (16u << 20) ? realloc(buf, cap) : NULL;
            if (!nb) {
                snprintf(err, errlen, "%s %s is too large", what, path);
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t k = fread(buf + len, 1, 4096, f);
        len += k;
        if (k < 4096)
            break;
    }
    fclose(f);
    buf[len] = 0;
    if (!strstr(buf, "-----BEGIN ")) {
        snprintf(err, errlen, "%s %s is not a PEM file", what, path);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Insecure credentials, or TLS from the PEM files (mTLS with a client CA).
 * gRPC keeps its own copies of the PEM strings. */
static int server_creds(const rt_srv_config *cfg, grpc_server_credentials **out, char *err,
                        size_t errlen)
{
    *out = NULL;
    if (!cfg->tls_cert && !cfg->tls_key) {
        if (cfg->tls_client_ca) {
            snprintf(err, errlen, "--tls-client-ca needs --tls-cert and --tls-key");
            return RT_EINVAL;
        }
        *out = grpc_insecure_server_credentials_create();
        return 0;
    }
    if (!cfg->tls_cert || !cfg->tls_key) {
        snprintf(err, errlen, "TLS needs both --tls-cert and --tls-key");
        return RT_EINVAL;
    }
    char *cert = read_pem("certificate", cfg->tls_cert, err, errlen);
    char *key = cert ? read_pem("private key", cfg->tls_key, err, errlen) : NULL;
    char *ca =
        key && cfg->tls_client_ca ? read_pem("client CA", cfg->tls_client_ca, err, errlen) : NULL;
    int rc = RT_EINVAL;
    if (key && (ca || !cfg->tls_client_ca)) {
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        *out = grpc_ssl_server_credentials_create_ex(
            ca, &pair, 1,
            ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            NULL);
        if (*out)
            rc = 0;
        else
            snprintf(err, errlen, "gRPC refused the TLS certificate or key");
    }
    if (key)
        explicit_bzero(key, strlen(key)); /* the private key does not linger in freed memory */
    free(cert);
    free(key);
    free(ca);
    return rc;
}

int rt_srv_create(const rt_srv_config *cfg, rt_srv **out, char *err, size_t errlen)
{
    *out = NULL;
    rt_srv *s = calloc(1, sizeof *s);
    if (!s)
        return RT_ENOMEM;
    s->cfg = *cfg;
    s->tp = &rt__transport_ops; /* the scheduler's way back to the transport */
    rt__sched_pause_hook();
    if (s->cfg.threads < 1)
        s->cfg.threads = rt_srv_default_threads();
    pthread_mutex_init(&s->dev_mu, NULL);
    pthread_mutex_init(&s->q_mu, NULL);
    pthread_cond_init(&s->q_cv, NULL);
    pthread_cond_init(&s->cq_cv, NULL);
    pthread_cond_init(&s->z_cv, NULL);
    pthread_mutex_init(&s->up_mu, NULL);
    rt_upload_store_init(&s->upstore, s->cfg.upload_keep_ms);
    pthread_mutex_init(&s->pipe_mu, NULL);
    rt_bufpool_set_cap(cfg->upload_pool_bytes);
    uint64_t arena = cfg->upload_arena_bytes;
    if (arena == UINT64_MAX) {
        /* 256 MiB, unless the address space is limited (ulimit -v,
         * prlimit --as): there the arena's mapping would count against
         * the limit that training needs. */
        struct rlimit as;
        arena = getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY ? 0 : 256ull << 20;
        s->cfg.upload_arena_bytes = arena;
    }
    if (rt_bufpool_set_arena(arena) < 0)
        RT_LOG(RT_LOG_WARN, "upload arena: no thread to fault in memory; uploads fault their own");
    if (s->cfg.max_exec_threads < 1)
        s->cfg.max_exec_threads = 1;
    if (s->cfg.compile_threads < 1)
        s->cfg.compile_threads = 1;
    s->cap_lanes = s->cfg.max_exec_threads + s->cfg.compile_threads;
    s->lanes = calloc((size_t)s->cap_lanes, sizeof *s->lanes);
    if (!s->lanes) {
        free(s);
        return RT_ENOMEM;
    }
    if (s->cfg.stream_queue_max < 2)
        s->cfg.stream_queue_max = 2;
    s->shutdown_tag.fn = rt__on_shutdown;
    s->start_ns = rt_now_ns();
    while (!s->boot_id && rt_random_bytes(&s->boot_id, sizeof s->boot_id) < 0)
        ;
    s->sessions = rt_session_table_create(cfg->max_sessions);
    s->plans = rt_plan_cache_create(128);
    /* the memory the daemon may use: the RAM, or less under an address
     * space limit (prlimit --as, a container's ulimit) */
    uint64_t ram = 0;
    {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
        struct rlimit as;
        if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY &&
            (uint64_t)as.rlim_cur < ram)
            ram = (uint64_t)as.rlim_cur;
    }
    uint64_t store_cap = cfg->max_store_bytes ? cfg->max_store_bytes : ram / 2;
    s->data = rt_data_store_create(store_cap);
    uint64_t budget = cfg->max_memory_bytes ? cfg->max_memory_bytes
                      : ram                 ? ram / 4 * 3
                                            : RT_QUOTA_UNLIMITED;
    rt_stream_config sc = {
        /* durable mode spools under the state dir unless told otherwise */
        .spool_dir = cfg->spool_dir ? cfg->spool_dir : cfg->state_dir,
        .stream_above = cfg->stream_above              ? cfg->stream_above
                        : budget != RT_QUOTA_UNLIMITED ? budget / 4
                                                       : 0,
        .threads = cfg->decode_threads,
        .prefetch = cfg->prefetch,
        .shuffle_buffer = cfg->shuffle_buffer,
        .max_spool_bytes = cfg->max_spool_bytes,
        /* a mapped spool file's pages count in the RSS: an eighth of the
         * budget at most */
        .map_max = cfg->map_spool_set             ? cfg->map_spool_below
                   : budget != RT_QUOTA_UNLIMITED ? budget / 8
                                                  : 0,
    };
    rt_data_set_stream_config(&sc);
    s->principals = rt_principal_set_create(budget);
    if (!s->sessions || !s->plans || !s->data || !s->principals) {
        rt_srv_destroy(s);
        return RT_ENOMEM;
    }
    rt_methods_init(); /* aborts if a .proto method has no handler */
    rt_srv_obs_init();
    /* Default quotas. Single-user: only the server-wide limits apply. With
     * tokens no principal may take everything: a quarter of the sessions,
     * of the store and of the memory budget, 64 programs, 4 uploads in
     * flight, unless the flags or the tokens file say otherwise. */
    rt_quota_unlimited(s->quota);
    if (cfg->tokens_path) {
        uint64_t q4 = budget == RT_QUOTA_UNLIMITED ? budget : budget / 4;
        s->quota[RT_Q_SESSIONS] = s->cfg.max_sessions >= 4 ? (uint64_t)s->cfg.max_sessions / 4 : 1;
        s->quota[RT_Q_PROGRAMS] = 64;
        s->quota[RT_Q_PROGRAM_BYTES] = q4;
        s->quota[RT_Q_STORE_BYTES] = store_cap ? store_cap / 4 : q4;
        s->quota[RT_Q_UPLOADS] = 4;
        s->quota[RT_Q_UPLOAD_BYTES] = q4;
        s->quota[RT_Q_CALL_BYTES] = q4;
    }
    for (int k = 0; k < RT_Q__COUNT; k++)
        if (cfg->quota[k])
            s->quota[k] = cfg->quota[k];
    int rc = rt_auth_create(cfg->tokens_path, s->quota, s->principals, &s->auth, err, errlen);
    if (rc < 0 || (cfg->state_dir && (rc = rt_service_life.state_open(s, err, errlen)) < 0)) {
        rt_srv_destroy(s);
        return rc;
    }
    rt_absl_no_deadlock_graph(); /* gRPC's locks without the debug graph */
    grpc_init();
    /* gRPC inflates a compressed message before its size check (a 4 MB
     * gzip message became 4 GiB): per-message decompression is off, and
     * decode() in rt_srv.c inflates with the message limit as the cap. */
    grpc_arg args[12 + RT_TRANSPORT_NARGS];
    memset(args, 0, sizeof args);
    size_t na = rt_transport_args(args); /* bulk streams: rt_transport.h */
#define INT_ARG(k, v)                     \
    do {                                  \
        args[na].type = GRPC_ARG_INTEGER; \
        args[na].key = (char *)(k);       \
        args[na].value.integer = (v);     \
        na++;                             \
    } while (0)
#define MS(v) ((v) > INT32_MAX ? INT32_MAX : (int)(v))
    INT_ARG(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, MS(cfg->max_message_bytes));
    INT_ARG(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, -1);
    INT_ARG(GRPC_ARG_ALLOW_REUSEPORT, 0);
    INT_ARG(GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION, 0);
    /* A connection that never finishes its handshake (a bare TCP open)
     * is closed; keepalive pings find peers that vanished without a FIN. */
    if (cfg->handshake_timeout_ms)
        INT_ARG(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, MS(cfg->handshake_timeout_ms));
    if (cfg->keepalive_ms) {
        INT_ARG(GRPC_ARG_KEEPALIVE_TIME_MS, MS(cfg->keepalive_ms));
        INT_ARG(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, MS(cfg->keepalive_timeout_ms));
        INT_ARG(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
        INT_ARG(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    }
    if (cfg->conn_idle_ms)
        INT_ARG(GRPC_ARG_MAX_CONNECTION_IDLE_MS, MS(cfg->conn_idle_ms));
    /* advertised in SETTINGS: one connection cannot open calls without
     * bound (a client's extra streams wait for a free one) */
    INT_ARG(GRPC_ARG_MAX_CONCURRENT_STREAMS,
            cfg->max_concurrent_streams ? MS(cfg->max_concurrent_streams) : 100);
#undef INT_ARG
#undef MS
    grpc_channel_args ca = {na, args};
    s->server = grpc_server_create(&ca, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    for (int i = 0; i < rt_n_methods; i++)
        s->reg[i] = grpc_server_register_method(s->server, rt_methods[i].path, NULL,
                                                rt_methods[i].kind == RT_UNARY
                                                    ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER
                                                    : GRPC_SRM_PAYLOAD_NONE,
                                                0);
    rt_health_hooks hk = {rt__health_call_begin, rt__health_call_end, s};
    if (!(s->health = rt_health_create(s->server, s->cq, &hk))) {
        rt_srv_destroy(s);
        return RT_ENOMEM;
    }
    grpc_server_credentials *cr = NULL;
    if ((rc = server_creds(cfg, &cr, err, errlen)) < 0) {
        rt_srv_destroy(s);
        return rc;
    }
    int port = grpc_server_add_http2_port(s->server, cfg->listen, cr);
    grpc_server_credentials_release(cr);
    if (port <= 0) {
        explain_bind(cfg->listen, err, errlen);
        rt_srv_destroy(s);
        return RT_EUNAVAILABLE;
    }
    const char *colon = strrchr(cfg->listen, ':');
    int hl = colon ? (int)(colon - cfg->listen) : 0;
    snprintf(s->bound, sizeof s->bound, "%.*s:%d", hl > 100 ? 100 : hl, cfg->listen, port);
    rt_srv_dash_attach(s);
    *out = s;
    return 0;
}

const char *rt_srv_bound(const rt_srv *s) { return s->bound; }

/* A pool of n threads running fn(s); *started counts those that run, for
 * rt_srv_destroy to join. */
static int start_pool(rt_srv *s, pthread_t **v, int *started, int n, void *(*fn)(void *))
{
    *v = calloc((size_t)n, sizeof **v);
    if (!*v)
        return RT_ENOMEM;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&(*v)[i], NULL, fn, s) != 0)
            return RT_ENOMEM;
        (*started)++;
    }
    return 0;
}

int rt_srv_start(rt_srv *s, void (*on_drained)(void *ud), void *ud)
{
    s->on_drained = on_drained;
    s->drained_ud = ud;
    grpc_server_start(s->server);
    /* Several requests per method up front so bursts do not wait for a
     * re-post; each arrival posts its own replacement. */
    int per = 2 * s->cfg.threads + 2;
    for (int i = 0; i < rt_n_methods; i++)
        for (int k = 0; k < per; k++)
            rt__request_call(s, i);
    rt__request_generic(s);
    rt__request_generic(s);
    rt_health_start(s->health, 2);
    int rc =
        start_pool(s, &s->compile_threads, &s->n_compile, s->cfg.compile_threads, rt__compile_main);
    return rc < 0 ? rc : start_pool(s, &s->threads, &s->n_threads, s->cfg.threads, rt__cq_main);
}

void rt_srv_set_serving(rt_srv *s, int serving) { rt_health_set_serving(s->health, serving); }

void rt_srv_stop(rt_srv *s)
{
    if (__atomic_exchange_n(&s->stopping, 1, __ATOMIC_ACQ_REL))
        return;
    rt_health_shutdown(s->health);
    RT_TAG_POST(&s->shutdown_tag);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
}

int rt_srv_reload_tokens(rt_srv *s, int *n_tokens, char *err, size_t errlen)
{
    return rt_auth_reload(s->auth, n_tokens, err, errlen);
}

void rt_srv_quota_defaults(const rt_srv *s, uint64_t out[RT_Q__COUNT])
{
    memcpy(out, s->quota, sizeof s->quota);
}

int rt_srv_expire_sessions(rt_srv *s, uint64_t idle_ms)
{
    char ids[8][RT_SESSION_ID_LEN], sid[16];
    int n = rt_session_expire(s->sessions, rt_now_ns(), idle_ms * 1000000ull, ids, 8);
    for (int i = 0; i < n && i < 8; i++) {
        if (s->state)
            rt_state_session_remove(s->state, ids[i]);
        RT_LOG(RT_LOG_INFO, "session %s closed: idle for more than %llu s", rt_log_id(ids[i], sid),
               (unsigned long long)(idle_ms / 1000));
    }
    if (n > 8)
        RT_LOG(RT_LOG_INFO, "%d more idle sessions closed", n - 8);
    return n;
}

void rt_srv_cancel_all(rt_srv *s)
{
    __atomic_store_n(&s->hard_cancel, 1, __ATOMIC_RELEASE);
    grpc_server_cancel_all_calls(s->server);
}

void rt_srv_destroy(rt_srv *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->q_mu);
    s->q_stop = 1;
    pthread_cond_broadcast(&s->q_cv);
    pthread_cond_broadcast(&s->cq_cv);
    pthread_cond_broadcast(&s->z_cv);
    int n_exec = s->n_exec, n_z = s->n_z;
    pthread_mutex_unlock(&s->q_mu);
    /* No thread is added once q_stop is set (rt__enqueue and inflate_later
     * check it); the inflate threads finish what is queued first. */
    for (int i = 0; i < n_z; i++)
        pthread_join(s->z_threads[i], NULL);
    for (int i = 0; i < n_exec; i++)
        pthread_join(s->exec_threads[i], NULL);
    for (int i = 0; i < s->n_compile; i++)
        pthread_join(s->compile_threads[i], NULL);
    free(s->exec_threads);
    free(s->compile_threads);
    free(s->lanes);
    if (s->server && s->n_threads == 0) {
        /* Never started (bind failed or start failed early). */
        grpc_server_destroy(s->server);
        grpc_completion_queue_shutdown(s->cq);
        for (;;) {
            grpc_event ev =
                grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN)
                break;
            if (ev.type == GRPC_OP_COMPLETE) {
                rt__tag *t = ev.tag;
                RT_TAG_DONE(t);
                t->fn(t, 0);
            }
        }
        grpc_completion_queue_destroy(s->cq);
        grpc_shutdown();
    } else if (s->server) {
        if (!__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE)) {
            /* Not stopped through rt_srv_stop: do it now, without grace. */
            rt_srv_stop(s);
            grpc_server_cancel_all_calls(s->server);
        }
        grpc_completion_queue_shutdown(s->cq);
        for (int i = 0; i < s->n_threads; i++)
            pthread_join(s->threads[i], NULL);
        grpc_server_destroy(s->server);
        grpc_completion_queue_destroy(s->cq);
        grpc_shutdown();
    }
    rt_dash_detach(s);
    rt_health_destroy(s->health);
    free(s->threads);
    if (s->n_threads)
        rt_service_life.state_flush(s); /* no call runs any more */
    rt_state_close(s->state);
    rt_session_table_destroy(s->sessions);
    rt_plan_cache_destroy(s->plans);
    rt_data_store_destroy(s->data);
    rt_upload_store_fini(&s->upstore);
    /* Last: sessions and datasets gave back their charges above. */
    rt_auth_destroy(s->auth);
    rt_principal_set_destroy(s->principals);
    pthread_mutex_destroy(&s->dev_mu);
    pthread_mutex_destroy(&s->q_mu);
    pthread_cond_destroy(&s->q_cv);
    pthread_cond_destroy(&s->cq_cv);
    pthread_cond_destroy(&s->z_cv);
    pthread_mutex_destroy(&s->up_mu);
    pthread_mutex_destroy(&s->pipe_mu);
    free(s);
}
