/* rt_daemon.c - rtraind from its options to its exit: MPI, the server,
 * the HTTP endpoint, and the libuv loop on the main thread that owns the
 * signals and the timers; gRPC work runs on the server's completion-queue
 * threads and the device executor (server/rpc). */
#include "rt_daemon.h"

#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include <uv.h>

#include "rt_data.h"
#include "rt_engine.h"
#include "rt_log.h"
#include "rt_metrics.h"
#include "rt_obs.h"
#include "rt_train.h"
#include "rtrain/rt_error.h"

typedef struct daemon_state {
    uv_loop_t *loop;
    uv_poll_t sigpoll; /* the signalfd of SIGTERM, SIGINT and SIGHUP */
    int sigfd;
    uv_timer_t grace;
    uv_timer_t drain;
    uv_timer_t idle;
    uint64_t idle_ms;
    uv_async_t drained;
    rt_srv *srv;
    uint64_t grace_ms;
    uint64_t drain_ms;
    int stopping; /* 1 draining (--drain-ms), 2 stopping */
} daemon_state;

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
    uv_close((uv_handle_t *)&d->sigpoll, close_cb);
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

static void on_sighup(daemon_state *d)
{
    char err[300] = "";
    int n = 0;
    if (rt_srv_reload_tokens(d->srv, &n, err, sizeof err) < 0)
        RT_LOG(RT_LOG_ERROR, "SIGHUP: tokens not reloaded, the previous ones stay: %s", err);
    else
        RT_LOG(RT_LOG_INFO, "SIGHUP: tokens reloaded (%d accepted)", n);
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

static void on_drain(uv_timer_t *t) { begin_stop(t->data, "drain period over"); }

static void on_signal(daemon_state *d, int signum)
{
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

/* The daemon's signals are read here, on the main loop, from a signalfd:
 * rt_daemon_process_setup() blocks them before the first thread starts, so
 * every thread (gRPC's, OpenMP's, the executor's, MPI's) inherits the mask
 * and none is ever interrupted by one. A handler run on whichever thread the
 * kernel picked could land on a thread parked in a futex for good: under
 * ThreadSanitizer, which defers a handler until its thread next enters the
 * runtime, a SIGTERM was never acted on. */
static sigset_t daemon_signals;

static void on_sigfd(uv_poll_t *p, int status, int events)
{
    daemon_state *d = p->data;
    (void)status;
    (void)events;
    struct signalfd_siginfo si;
    while (read(d->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGHUP)
            on_sighup(d);
        else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
            on_signal(d, (int)si.ssi_signo);
    }
}

void rt_daemon_process_setup(void)
{
    /* Large upload chunks are malloc'ed per message; mmap for each would
     * halve upload throughput (docs/grpc-core.md). */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    signal(SIGPIPE, SIG_IGN);
    /* a file over RLIMIT_FSIZE is a write error (EFBIG), not a kill */
    signal(SIGXFSZ, SIG_IGN);
    sigemptyset(&daemon_signals); /* blocked before any thread exists (on_sigfd) */
    sigaddset(&daemon_signals, SIGTERM);
    sigaddset(&daemon_signals, SIGINT);
    sigaddset(&daemon_signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &daemon_signals, NULL);
    /* Every connection is a descriptor: take the hard limit, so a flood of
     * half-open connections (closed by the handshake timeout) does not
     * lock everyone out first. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* The loop's handles: signals, timers and the drained wake-up. */
static int loop_init(daemon_state *d)
{
    d->loop = uv_default_loop();
    d->sigfd = signalfd(-1, &daemon_signals, SFD_NONBLOCK | SFD_CLOEXEC);
    if (d->sigfd < 0 || uv_poll_init(d->loop, &d->sigpoll, d->sigfd) < 0) {
        fprintf(stderr, "rtraind: signalfd: %s\n", strerror(errno));
        return -1;
    }
    uv_timer_init(d->loop, &d->grace);
    uv_timer_init(d->loop, &d->idle);
    uv_timer_init(d->loop, &d->drain);
    uv_async_init(d->loop, &d->drained, on_drained_async);
    d->sigpoll.data = d->grace.data = d->drained.data = d->idle.data = d->drain.data = d;
    uv_poll_start(&d->sigpoll, UV_READABLE, on_sigfd);
    return 0;
}

/* Sessions past their lease are closed by a timer: checked a few times per
 * lease, at most once a minute. */
static void lease_timer_start(daemon_state *d)
{
    if (!d->idle_ms)
        return;
    uint64_t every = d->idle_ms / 4 < 60000 ? d->idle_ms / 4 : 60000;
    if (every < 100)
        every = 100;
    uv_timer_start(&d->idle, on_idle_check, every, every);
}

static void log_started(const rt_daemon_opts *o, rt_srv *srv)
{
    const rt_srv_config *cfg = &o->srv;
    printf("rtraind listening on %s\n", rt_srv_bound(srv));
    fflush(stdout);
    if (rt_dist_size() > 1)
        RT_LOG(RT_LOG_INFO, "%d MPI replicas%s", rt_dist_size(),
               o->dist.micro ? ", deterministic reduce" : "");
    RT_LOG(RT_LOG_INFO, "rtraind %s listening on %s (%d cq threads, inline below %llu us, %s, %s)",
           RT_VERSION_STRING, rt_srv_bound(srv),
           cfg->threads ? cfg->threads : rt_srv_default_threads(),
           (unsigned long long)(cfg->inline_ns / 1000),
           cfg->tls_cert ? (cfg->tls_client_ca ? "mTLS" : "TLS") : "plaintext",
           cfg->tokens_path ? "tokens" : "single-user");
    RT_LOG(RT_LOG_INFO, "backend %s (%s)", rt_backend_name(), rt_backend_describe());
    if (cfg->state_dir)
        RT_LOG(RT_LOG_INFO,
               "durable mode: state in %s (checkpoints every %u steps / %u s, "
               "keep %d)",
               cfg->state_dir, cfg->ckpt_every_steps, cfg->ckpt_every_s, cfg->ckpt_keep);
}

/* Rank 0 serves; under mpirun the other ranks follow it. */
int rt_daemon_run(const rt_daemon_opts *o)
{
    rt_obs_set_level((rt_log_level)o->log_level);
    rt_log_set_format((rt_log_format)o->log_format);
    daemon_state d;
    memset(&d, 0, sizeof d);
    d.grace_ms = o->grace_ms;
    d.drain_ms = o->drain_ms;
    d.idle_ms = o->idle_ms;
    char err[300] = "";
    /* every rank: --backend, else RT_BACKEND, else the best built */
    if (o->backend && rt_backend_select(o->backend) < 0) {
        fprintf(stderr, "rtraind: no backend '%s' in this build (built: %s)\n", o->backend,
                rt_backend_list());
        return 2;
    }
    if (!rt_backend_name()[0]) {
        fprintf(stderr, "rtraind: this build has no backend\n");
        return 2;
    }
    rt_metrics_backend(rt_backend_name(), rt_backend_describe());
    rt_dist_opts dist = o->dist;
    dist.stop_ms = o->grace_ms + 15000; /* the calls' grace, then MPI_Abort's */
    int rc = rt_dist_init(&dist, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "rtraind: %s\n", err);
        return 1;
    }
    if (rt_dist_rank() > 0)
        return rt_dist_worker();
    /* MPI plugs into the training use cases from here, not below them */
    rt_train_set_trainer(rt_dist_train);
    rt_data_set_holder(rt_dist_hold); /* --shard-data: rows spread at upload */
    rc = rt_srv_create(&o->srv, &d.srv, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "rtraind: %s\n", err[0] ? err : rt_strerror(rc));
        rt_dist_finalize();
        return 1;
    }
    if (loop_init(&d) < 0) {
        rt_srv_destroy(d.srv);
        rt_dist_finalize();
        return 1;
    }
    if ((rc = rt_srv_start(d.srv, on_drained, &d)) < 0) {
        fprintf(stderr, "rtraind: cannot start: %s\n", rt_strerror(rc));
        rt_dist_finalize();
        return 1;
    }
    lease_timer_start(&d);
    rt_metrics_server *metrics = NULL;
    if (o->http_listen) {
        if (rt_metrics_serve(o->http_listen, rt_srv_metrics_collect, d.srv, &metrics, err,
                             sizeof err) < 0) {
            fprintf(stderr, "rtraind: %s\n", err);
            rt_dist_finalize();
            return 1;
        }
        printf("rtraind metrics on http://%s/metrics\n", rt_metrics_bound(metrics));
    }
    log_started(o, d.srv);

    uv_run(d.loop, UV_RUN_DEFAULT);
    rt_metrics_server_stop(metrics); /* before the server its gauges read */
    rt_srv_destroy(d.srv);
    uv_loop_close(d.loop);
    close(d.sigfd);
    rt_dist_finalize();
    RT_LOG(RT_LOG_INFO, "stopped");
    return 0;
}
