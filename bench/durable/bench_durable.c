/*
 * bench_durable.c - what durability costs, on W-C (784-512-512-10 MLP,
 * Adam: 669,706 parameters, so weights + two optimizer slots are 8.0 MB).
 * Against real daemons on loopback, medians, each beside its peer:
 *
 *   checkpoint    a Checkpoint(save) call's daemon-side time, with fsync and
 *                 with --checkpoint-no-fsync; peer: one W-C training step
 *   overhead      steps/s of RunSteps calls (K = 20) on a durable daemon
 *                 checkpointing every second, against an in-memory daemon;
 *                 scaled to the default interval (30 s)
 *   RSS           the daemon's peak RSS growth while a checkpoint is
 *                 written (VmHWM after clear_refs) against a pull, which
 *                 copies the state into its answer
 *   restart       SIGKILL, then spawn to "listening" and to a first answer,
 *                 with the W-C session and its 5 MB data set on disk; peer:
 *                 the same daemon on an empty state directory
 *
 *     bench_durable RTRAIND [REPS]
 */
#define RT_BENCH_NAME "bench_durable"
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rtrain/rtrain.h"

typedef struct dproc {
    pid_t pid;
    char addr[64];
    double spawn_to_listen_s;
} dproc;

/* rtraind ARGS... on addr (NULL: an ephemeral port); waits for its
 * listening line on stdout. */
static void spawn(dproc *d, const char *exe, const char *addr, const char *const *extra)
{
    int fd[2];
    if (pipe(fd) < 0)
        die("pipe", strerror(errno));
    const char *argv[24];
    int n = 0;
    argv[n++] = exe;
    argv[n++] = "--listen";
    argv[n++] = addr ? addr : "127.0.0.1:0";
    argv[n++] = "--log-level";
    argv[n++] = "error";
    for (int i = 0; extra && extra[i] && n < 22; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    close(fd[1]);
    char buf[512];
    size_t len = 0;
    for (;;) {
        ssize_t k = read(fd[0], buf + len, sizeof buf - 1 - len);
        if (k <= 0)
            die("rtraind", "exited before listening");
        len += (size_t)k;
        buf[len] = 0;
        char *p = strstr(buf, "rtraind listening on ");
        if (p && strchr(p, '\n')) {
            sscanf(p, "rtraind listening on %63s", d->addr);
            break;
        }
    }
    d->spawn_to_listen_s = now_s() - t0;
    d->pid = pid;
    /* its stdout: drained by nobody, it prints nothing more at this level */
}

static void kill_daemon(dproc *d, int sig)
{
    kill(d->pid, sig);
    waitpid(d->pid, NULL, 0);
}

static long status_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key)))
            sscanf(line + strlen(key), ":%ld", &v);
    if (f)
        fclose(f);
    return v;
}

static void reset_peak(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)pid);
    int fd = open(path, O_WRONLY);
    if (fd >= 0) {
        if (write(fd, "5", 1) < 0)
            perror("clear_refs");
        close(fd);
    }
}

#define CHECK(what, rc)                                                        \
    do {                                                                       \
        if ((rc) < 0)                                                          \
            die(what, rt_client_errmsg(c));                                    \
    } while (0)

typedef struct wc {
    rt_client *c;
    char sid[RT_ID_MAX];
    rt_client_compile_result prog;
    rt_client_dataset ds;
} wc;

static float *X;
static int32_t *Y;
#define WC_N 1536

static void wc_setup(wc *w, const char *addr)
{
    rt_client *c;
    if (rt_client_create(addr, &c) < 0)
        die("connect", addr);
    rt_client_set_timeout_ms(c, 0);
    w->c = c;
    CHECK("session", rt_client_session_create(c, "bench", w->sid));
    rt_model *m = rt_model_create();
    int64_t in[] = {-1, 784};
    rt_model_add_input(m, "x", RT_DTYPE_F32, 2, in);
    const char *h1, *h2, *o;
    rt_model_dense(m, "d1", "x", 784, 512, "relu", &h1);
    rt_model_dense(m, "d2", h1, 512, 512, "relu", &h2);
    rt_model_dense(m, "d3", h2, 512, 10, NULL, &o);
    rt_model_set_output(m, o);
    rt_train_opts t;
    rt_train_opts_init(&t);
    t.loss = "sparse_categorical_crossentropy";
    t.from_logits = 1;
    t.optimizer = "adam";
    t.lr = 1e-3f;
    t.batch_size = 128;
    t.seed = 1;
    CHECK("compile", rt_client_compile(c, w->sid, m, &t, &w->prog));
    rt_model_destroy(m);
    rt_client_array x = {X, RT_DTYPE_F32, 2, {WC_N, 784}};
    rt_client_array y = {Y, RT_DTYPE_I32, 1, {WC_N}};
    CHECK("upload", rt_client_upload(c, w->sid, "wc", &x, &y, &w->ds));
}

/* steps/s of RunSteps calls of k steps over secs seconds */
static double steps_per_s(wc *w, int k, double secs)
{
    rt_client *c = w->c;
    rt_client_steps_params p = {.session = w->sid, .program = w->prog.program_id,
                                .dataset = w->ds.id, .steps = (uint64_t)k};
    rt_client_steps_result r;
    double t0 = now_s(), exec_s = 0;
    long steps = 0;
    while (now_s() - t0 < secs) {
        CHECK("RunSteps", rt_client_run_steps(c, &p, &r));
        rt_client_steps_result_free(&r);
        rt_client_timings tm;
        rt_client_last_timings(c, &tm);
        /* the daemon's execute time (steps and the checkpoint after them):
         * other processes' load moves wall time far more than this */
        exec_s += (double)tm.execute_ns / 1e9;
        steps += k;
    }
    return (double)steps / exec_s;
}

/* the dproc-side time of Checkpoint calls with flags, median of reps */
static double ckpt_ms(wc *w, int flags, int reps, long *peak_kb, pid_t pid)
{
    rt_client *c = w->c;
    double *t = calloc((size_t)reps, sizeof *t);
    *peak_kb = 0;
    for (int r = 0; r < reps; r++) {
        long before = status_kb(pid, "VmRSS");
        reset_peak(pid);
        rt_client_ckpt_info in;
        CHECK("Checkpoint", rt_client_checkpoint(c, w->sid, w->prog.program_id, flags, &in));
        free(in.state);
        rt_client_timings tm;
        rt_client_last_timings(c, &tm);
        t[r] = (double)tm.execute_ns / 1e6;
        long grow = status_kb(pid, "VmHWM") - before;
        if (grow > *peak_kb)
            *peak_kb = grow;
    }
    double m = median(t, reps);
    free(t);
    return m;
}

static void wc_close(wc *w)
{
    rt_client_compile_result_free(&w->prog);
    rt_client_destroy(w->c);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        die("usage", "bench_durable RTRAIND [REPS]");
    const char *exe = argv[1];
    int reps = argc > 2 ? atoi(argv[2]) : 9;
    if (reps < 3)
        reps = 3;
    signal(SIGPIPE, SIG_IGN);
    X = malloc(sizeof(float) * WC_N * 784);
    Y = malloc(sizeof(int32_t) * WC_N);
    for (int i = 0; i < WC_N * 784; i++)
        X[i] = (float)((i * 2654435761u) >> 16 & 1023) / 512.0f - 1.0f;
    for (int i = 0; i < WC_N; i++)
        Y[i] = (int32_t)((i * 7919u) % 10);
    char dir[] = "/tmp/bench_durable.XXXXXX", sd[3][128];
    if (!mkdtemp(dir))
        die("mkdtemp", strerror(errno));
    for (int i = 0; i < 3; i++)
        snprintf(sd[i], sizeof sd[i], "%s/s%d", dir, i);

    /* --- checkpoint time and RSS */
    const char *fs[] = {"--state-dir", sd[0], "--checkpoint-every-s", "0", NULL};
    const char *nf[] = {"--state-dir", sd[1], "--checkpoint-every-s", "0",
                        "--checkpoint-no-fsync", NULL};
    dproc a, b, m;
    spawn(&a, exe, NULL, fs);
    spawn(&b, exe, NULL, nf);
    spawn(&m, exe, NULL, NULL);
    wc wa, wb, wm;
    wc_setup(&wa, a.addr);
    wc_setup(&wb, b.addr);
    wc_setup(&wm, m.addr);
    double step_s = 1.0 / steps_per_s(&wm, 20, 2.0);
    long rss_save, rss_nf, rss_pull, rss_q;
    double t_fsync = ckpt_ms(&wa, RT_CKPT_SAVE, reps, &rss_save, a.pid);
    double t_nof = ckpt_ms(&wb, RT_CKPT_SAVE, reps, &rss_nf, b.pid);
    double t_pull = ckpt_ms(&wm, RT_CKPT_PULL, reps, &rss_pull, m.pid);
    double t_q = ckpt_ms(&wm, 0, reps, &rss_q, m.pid);
    printf("W-C: 669,706 parameters; the full state (weights + Adam's two slots) 8.0 MB\n\n");
    printf("%-44s %10s %12s\n", "", "median ms", "vs one step");
    printf("%-44s %10.3f %12.2f\n", "one W-C training step (in memory)", step_s * 1e3, 1.0);
    printf("%-44s %10.3f %12.2f\n", "checkpoint, write + fsync + rename + dir fsync",
           t_fsync, t_fsync / (step_s * 1e3));
    printf("%-44s %10.3f %12.2f\n", "checkpoint, --checkpoint-no-fsync", t_nof,
           t_nof / (step_s * 1e3));
    printf("%-44s %10.3f %12.2f\n", "pull (state copied into the answer)", t_pull,
           t_pull / (step_s * 1e3));
    printf("%-44s %10.3f %12.2f\n", "position only (no save, no pull)", t_q,
           t_q / (step_s * 1e3));
    printf("\npeak RSS growth of the daemon during the call (max of %d)\n", reps);
    printf("%-44s %10.1f MB (%.2fx the state)\n", "checkpoint (fsync)", rss_save / 1024.0,
           rss_save / 1024.0 / 8.04);
    printf("%-44s %10.1f MB (%.2fx the state)\n", "checkpoint (no fsync)", rss_nf / 1024.0,
           rss_nf / 1024.0 / 8.04);
    printf("%-44s %10.1f MB (%.2fx the state)\n", "pull (peer: one copy in the answer)",
           rss_pull / 1024.0, rss_pull / 1024.0 / 8.04);
    wc_close(&wa);
    wc_close(&wb);
    kill_daemon(&a, SIGTERM);
    kill_daemon(&b, SIGTERM);

    /* --- step-time overhead: a checkpoint every second vs none */
    const char *every1[] = {"--state-dir", sd[2], "--checkpoint-every-s", "1", NULL};
    dproc d;
    spawn(&d, exe, NULL, every1);
    wc wd;
    wc_setup(&wd, d.addr);
    double *on = calloc((size_t)reps, sizeof *on), *off = calloc((size_t)reps, sizeof *off);
    for (int r = 0; r < reps; r++) { /* interleaved, so load changes hit both */
        off[r] = steps_per_s(&wm, 20, 3.0);
        on[r] = steps_per_s(&wd, 20, 3.0);
    }
    double son = median(on, reps), soff = median(off, reps);
    double ov1 = soff / son - 1;
    printf("\nstep-time overhead, RunSteps K=20 for 3 s x %d, interleaved; steps per second of\n"
           "the daemon's execute time (which includes the checkpoint written after a call)\n", reps);
    printf("%-44s %10.1f steps/s\n", "in-memory daemon (peer)", soff);
    printf("%-44s %10.1f steps/s   overhead %+.2f%%\n", "durable, a checkpoint every 1 s", son,
           100 * ov1);
    printf("%-44s %10s            overhead %+.3f%% (%.1f ms per 30 s)\n",
           "durable, default (every 30 s), from the above", "", 100 * t_fsync / 30000.0,
           t_fsync);
    wc_close(&wm);
    kill_daemon(&m, SIGTERM);

    /* --- restart to serving: SIGKILL, spawn on the same port and state */
    char port[64];
    snprintf(port, sizeof port, "%s", d.addr);
    double *lis = calloc((size_t)reps, sizeof *lis), *srv = calloc((size_t)reps, sizeof *srv);
    double *lis0 = calloc((size_t)reps, sizeof *lis0), *srv0 = calloc((size_t)reps, sizeof *srv0);
    wc_close(&wd);
    for (int r = 0; r < reps; r++) {
        kill_daemon(&d, SIGKILL);
        double t0 = now_s();
        spawn(&d, exe, port, every1);
        rt_client *c;
        rt_client_create(port, &c);
        rt_client_info in;
        CHECK("GetInfo", rt_client_info_get(c, &in));
        srv[r] = now_s() - t0;
        lis[r] = d.spawn_to_listen_s;
        rt_client_info_free(&in);
        rt_client_destroy(c);
        /* peer: an empty state directory */
        char empty[160];
        snprintf(empty, sizeof empty, "%s/empty%d", dir, r);
        const char *ef[] = {"--state-dir", empty, NULL};
        dproc e;
        t0 = now_s();
        spawn(&e, exe, NULL, ef);
        rt_client_create(e.addr, &c);
        CHECK("GetInfo", rt_client_info_get(c, &in));
        srv0[r] = now_s() - t0;
        lis0[r] = e.spawn_to_listen_s;
        rt_client_info_free(&in);
        rt_client_destroy(c);
        kill_daemon(&e, SIGKILL);
    }
    double ml = median(lis, reps), ms = median(srv, reps), ml0 = median(lis0, reps),
           ms0 = median(srv0, reps);
    printf("\nrestart after SIGKILL (W-C session, program, 4.8 MB data set on disk), %d runs\n",
           reps);
    printf("%-44s %10s %12s %8s\n", "", "listening", "1st answer", "ratio");
    printf("%-44s %8.1f ms %9.1f ms %8.2f\n", "empty state directory (peer)", ml0 * 1e3,
           ms0 * 1e3, 1.0);
    printf("%-44s %8.1f ms %9.1f ms %8.2f\n", "restore: dataset, session, compile, load",
           ml * 1e3, ms * 1e3, ms / ms0);
    kill_daemon(&d, SIGTERM);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_durable: could not remove %s\n", dir);
    return 0;
}
