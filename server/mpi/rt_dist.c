/* rt_dist: data-parallel replicas over MPI (see rt_dist.h). */
#include "rt_dist.h"
#include "rt_clock.h"
#include "rt_errf.h"
#include "rt_random.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <mpi.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "import_graph.h"
#include "rt_data.h"
#include "import_keras.h"
#include "import_onnx.h"
#include "rt_log.h"
#include "rtrain/rt_error.h"
#include "rtrain.pb-c.h"

enum { CMD_EXIT = 1, CMD_COMPILE, CMD_TRAIN, CMD_FREE, CMD_SLOTS, CMD_HOLD, CMD_UNHOLD, CMD_ROWS };

/* What rank 0 broadcasts before each command; the payloads follow. */
typedef struct cmd_hdr {
    int32_t cmd;
    int32_t y_dtype;
    uint64_t prog;
    int64_t steps;
    uint64_t len;     /* COMPILE: payload bytes */
    uint8_t dkey[16]; /* TRAIN: content hash of x | y | sw */
    int64_t gstep;    /* TRAIN: rank 0's global step */
    int64_t n, x_floats, y_bytes;
    int32_t has_sw;
    int32_t streamed;   /* TRAIN: rank 0 scatters each batch's rows (feed) */
    uint64_t fill_id;   /* TRAIN, streamed: rank 0's rt_data.fill_id, as a token */
    int32_t send_state; /* TRAIN: rank 0's state was edited since the
                            * replicas last agreed: it follows */
    int32_t overlap;    /* TRAIN: rank 0's --overlap-reduce (every rank
                            * follows it: rt_dist_set_overlap) */
    int32_t shard;      /* COMPILE: rank 0 shards the program's optimizer
                            * state (--shard-optimizer) */
    int32_t gather;     /* TRAIN: rank 0 holds only its slice of a sharded
                            * state it sends: the slices come first */
    uint64_t held;      /* TRAIN: the held set trained on (rt_dist_hold), 0 none */
} cmd_hdr;

#define MAX_DATA 4 /* data sets a worker keeps, least recently used goes */
#define CHUNK ((int64_t)1 << 28)

typedef struct wdata {
    uint8_t key[16];
    float *x, *sw;
    void *y;
    int64_t n;
    int32_t y_dtype;
    uint64_t used;
} wdata;

#define OV_TRIAL 4 /* auto: steps timed each way */

/* A program's overlap choice (its rt_replica ctx). */
typedef struct ov_state {
    int mode;      /* 1 overlap, 0 not, -1 auto still timing */
    int cur;       /* this step's */
    int64_t asked; /* steps so far */
    uint64_t t0;   /* this step's backward start */
    int n[2];
    double t[2][OV_TRIAL]; /* rank 0: backward + reduce, ns, by cur */
    /* ZeRO stage 1 (--shard-optimizer): rank r updates the trainable
     * floats [dsp[r], dsp[r] + cnt[r]) */
    int sh, clip; /* sharded; clip_norm set (the reduce is whole) */
    int64_t T;    /* the program's trainable floats */
    int cnt[64 + 1], dsp[64 + 1];
} ov_state;

typedef struct prog_ent {
    uint64_t id;
    rt_exec *e;
    rt_plan *plan;   /* workers own theirs */
    uint64_t synced; /* rank 0: rt_exec_state_edits when the replicas last
                      * agreed on the state; UINT64_MAX unknown */
    ov_state *ov;    /* its rt_replica ctx */
} prog_ent;

typedef struct key_ent { /* rank 0: a data set's content hash, by identity */
    uint8_t key[16];
    const void *x, *y, *sw;
    int64_t n;
    uint8_t dkey[16];
} key_ent;

static struct {
    int on, rank, size;
    rt_dist_opts o;
    float *sbuf; /* sharded deterministic reduce: what goes out */
    size_t sbuf_cap;
    MPI_Comm comm;
    char (*hosts)[MPI_MAX_PROCESSOR_NAME];
    pthread_mutex_t mu; /* orders the collectives (rank 0) */
    int broken;         /* a wait timed out: no more collectives */
    char broken_msg[200];
    prog_ent *progs;
    int n_progs, cap_progs;
    uint64_t next_id;
    pthread_mutex_t tab_mu; /* progs and frees; never held across MPI */
    uint64_t *frees;
    int n_frees, cap_frees;
    key_ent keys[8];
    int n_keys;
    wdata data[MAX_DATA];
    uint64_t clock;
    float *gather; /* deterministic mode: all shard gradients */
    size_t gather_cap;
    double *gst;
    size_t gst_cap;
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .tab_mu = PTHREAD_MUTEX_INITIALIZER, .size = 1};

/* Held sets (--shard-data, rt_dist_hold): an in-memory data set's rows
 * spread over the ranks at upload, rank r keeping rows [n r/N, n (r+1)/N). */
typedef struct held_ent {
    rt_held pub; /* rank 0: the data layer's handle (first) */
    uint64_t id;
    int64_t n, per;  /* rows; floats a row */
    int64_t lo, hi;  /* this rank's block */
    float *x;        /* its rows */
    void *y;         /* workers: the labels of the last training */
    int64_t y_bytes; /* call (whole: 4 bytes a value), their dtype, */
    int32_t y_dtype; /* and its sample weights */
    float *sw;
    struct held_ent *next;
} held_ent;

static struct {
    held_ent *list; /* under G.tab_mu on rank 0 */
    uint64_t next_id;
    uint64_t *drop; /* rank 0: released, for the workers (CMD_UNHOLD) */
    int n_drop, cap_drop;
} H;

static int link_scan(int wait_ms);
static int guard_broken(char *err, size_t errlen);
static int job_broken(void);
static void job_stop(void);

static int mpi_fail(int mrc, const char *what, char *err, size_t errlen)
{
    /* a peer's death is what usually fails an MPI call: its link says
     * which rank it was (its close may trail MPI's error a little) */
    if (link_scan(200) >= 0)
        return guard_broken(err, errlen);
    char m[MPI_MAX_ERROR_STRING];
    int ml = 0;
    MPI_Error_string(mrc, m, &ml);
    G.broken = 1;
    snprintf(G.broken_msg, sizeof G.broken_msg, "MPI %s failed: %.120s", what, m);
    snprintf(err, errlen, "%s", G.broken_msg);
    job_stop();
    return RT_EUNAVAILABLE;
}

/* Poll a request until done. lim_ns 0: a worker waiting for its next
 * command (no timeout; after 256 polls it sleeps 50 us between them for
 * the first 100 ms, a client's calls come in bursts, then 1 ms: a worker
 * idle for long takes ~1.5 % of a core, bench/mpi --part idle); else a
 * replica that has not answered within lim_ns is taken as dead. */
static int wait_req(MPI_Request *r, uint64_t lim_ns, const char *what, char *err, size_t errlen)
{
    const uint64_t t0 = rt_now_ns();
    for (unsigned it = 0;; it++) {
        int done = 0;
        int mrc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(mrc, what, err, errlen);
        if (done)
            return 0;
        if (lim_ns && job_broken())
            return guard_broken(err, errlen);
        if (lim_ns && rt_now_ns() - t0 > lim_ns) {
            G.broken = 1;
            snprintf(G.broken_msg, sizeof G.broken_msg,
                     "a replica did not answer (%s) within %d ms: a rank died or hangs; "
                     "relaunch the MPI job",
                     what, G.o.timeout_ms);
            snprintf(err, errlen, "%s", G.broken_msg);
            job_stop();
            return RT_EUNAVAILABLE;
        }
        if (it < 256)
            continue;
        struct timespec ts = {0, lim_ns || rt_now_ns() - t0 < 100000000ull ? 50000 : 1000000};
        nanosleep(&ts, NULL);
    }
}

/* --------------------------------------------------------------- the guard
 *
 * Every collective but a worker's idle wait is a blocking MPI call, as fast
 * as OpenMPI's own, run inside a guard: a watchdog thread that sees the same
 * collective in flight for --dist-timeout-ms takes it as a dead or hung
 * replica (a lost link does the same at once), marks the job broken, and
 * the waiting thread jumps out of the MPI call back to the guard; the call
 * then fails with RT_EUNAVAILABLE and the error reaches the client. After
 * that no MPI call is made but MPI_Abort. The hot path pays a sigsetjmp
 * without the signal mask and two atomics.
 *
 * Where the jump starts matters. A blocking OpenMPI call spins in
 * opal_progress(), which runs the callbacks registered with
 * opal_progress_register between its polls, holding no lock: the thread
 * jumps from there (guard_progress), out of MPI's frames only. A signal
 * handler instead runs wherever the thread is, and a blocking call with a
 * dead peer is in MPI's error path, in malloc and stdio: a jump from there
 * left the thread's malloc arena locked, and its next malloc (answering the
 * failed call) waited forever (1 run in 4 of mpi_replicas_netns's sharded
 * host loss on a quiet machine; its gdb dump). It happened only on a quiet
 * machine: a signalled thread that is off its CPU (a loaded one's, in
 * sched_yield) takes the signal at that syscall's return, a safe point. The
 * signal stays only for an MPI library without the hook (looked up at run
 * time: MPICH has none). Either jump leaves the collective's requests and
 * OpenMPI's wait record (on the jumped-over stack, still listed as the
 * progress owner) behind: that is why no MPI call but MPI_Abort follows. */
#define GUARD_FIRED UINT64_MAX

static struct {
    uint64_t seq;     /* odd: a collective in flight; GUARD_FIRED */
    pthread_t thread; /* the thread in it */
    const char *what;
    char msg[200]; /* the watchdog's verdict, before it fires */
    pthread_t dog;
    int dog_on, stop;
    int hook; /* guard_progress is OpenMPI's progress callback: no signal */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} W = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static __thread sigjmp_buf *tl_jb;
static int comm_start(void);

/* The communication thread of a rank (overlap): it runs the jobs of an
 * overlapped step in the order they were queued, the same on every rank:
 * the gradient buckets and, with synchronised BatchNorm, the backward
 * pass's statistic sums. While one is queued the step's thread makes no
 * MPI call (MPI_THREAD_SERIALIZED); it waits for the queue in finish. */
typedef struct cjob {
    int sum; /* 0: float bucket, 1: double sum */
    void *v;
    int n;
} cjob;

static struct {
    pthread_t th;
    int on, stop;
    pthread_mutex_t mu;
    pthread_cond_t go, done_cv;
    cjob *q;
    int n, cap, next, done; /* queued, taken, ended */
    int rc;                 /* the first failure, its message in err */
    char err[200];
    int active; /* the step's thread: an overlapped step runs */
} C = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .go = PTHREAD_COND_INITIALIZER,
       .done_cv = PTHREAD_COND_INITIALIZER};

/* without the hook: the thread's signal (any point of the MPI call) */
static void guard_signal(int sig)
{
    (void)sig;
    if (tl_jb && __atomic_load_n(&W.seq, __ATOMIC_ACQUIRE) == GUARD_FIRED)
        siglongjmp(*tl_jb, 1);
}

/* OpenMPI's progress callback, run by the thread that waits in MPI between
 * its polls: a thread inside a guarded collective leaves it once the guard
 * has fired. Others (tl_jb NULL: a command's MPI_Test, MPI_Abort) pass. */
static int guard_progress(void)
{
    if (tl_jb && __atomic_load_n(&W.seq, __ATOMIC_ACQUIRE) == GUARD_FIRED)
        siglongjmp(*tl_jb, 1);
    return 0;
}

/* the thread in a collective, when the guard fires */
static void guard_kick(pthread_t th)
{
    if (!W.hook)
        pthread_kill(th, SIGRTMIN + 3);
}

/* the caller holds the collectives (G.mu, or is a worker) */
static int guard_broken(char *err, size_t errlen)
{
    if (__atomic_load_n(&W.seq, __ATOMIC_ACQUIRE) == GUARD_FIRED && !G.broken) {
        G.broken = 1;
        snprintf(G.broken_msg, sizeof G.broken_msg, "%s", W.msg);
    }
    snprintf(err, errlen, "%s", G.broken_msg);
    return RT_EUNAVAILABLE;
}

/* the watchdog: wakes every timeout/8 (5-250 ms) */
static void *guard_dog(void *arg)
{
    (void)arg;
    const uint64_t lim = (uint64_t)G.o.timeout_ms * 1000000ull;
    uint64_t per = lim / 8;
    if (per < 5000000ull)
        per = 5000000ull;
    if (per > 250000000ull)
        per = 250000000ull;
    uint64_t seen = 0, since = 0;
    pthread_mutex_lock(&W.mu);
    while (!W.stop) {
        struct timespec ts = rt_deadline(CLOCK_REALTIME, per);
        pthread_cond_timedwait(&W.cv, &W.mu, &ts);
        if (W.stop)
            break;
        uint64_t s = __atomic_load_n(&W.seq, __ATOMIC_ACQUIRE);
        if (s == GUARD_FIRED)
            break;
        if (!(s & 1) || s != seen) {
            seen = s;
            since = rt_now_ns();
            continue;
        }
        if (rt_now_ns() - since < lim)
            continue;
        /* the same collective, in flight for the whole timeout: a rank
         * whose link closed is named (link_lost fires the guard) */
        pthread_mutex_unlock(&W.mu);
        const int lost = link_scan(200);
        pthread_mutex_lock(&W.mu);
        if (lost >= 0 || __atomic_load_n(&W.seq, __ATOMIC_ACQUIRE) != s)
            continue;
        const char *what = __atomic_load_n(&W.what, __ATOMIC_ACQUIRE);
        pthread_t th = __atomic_load_n(&W.thread, __ATOMIC_ACQUIRE);
        snprintf(W.msg, sizeof W.msg,
                 "a replica did not answer (%s) within %d ms: a rank died or hangs; "
                 "relaunch the MPI job",
                 what, G.o.timeout_ms);
        if (__atomic_compare_exchange_n(&W.seq, &s, GUARD_FIRED, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            RT_LOG(RT_LOG_ERROR, "replica %d: %s", G.rank, W.msg);
            guard_kick(th);
            /* its work is done: the process may end by any path now
             * (MPI_Abort, the launcher) without joining it */
            W.dog_on = 0;
            pthread_detach(pthread_self());
            pthread_mutex_unlock(&W.mu);
            job_stop();
            return NULL;
        }
    }
    pthread_mutex_unlock(&W.mu);
    return NULL;
}

static int guard_start(void)
{
    /* libopen-pal's, loaded with libmpi when the library is OpenMPI */
    int (*reg)(int (*)(void)) = NULL;
    void *sym = dlsym(RTLD_DEFAULT, "opal_progress_register");
    memcpy(&reg, &sym, sizeof reg);
    W.hook = reg && reg(guard_progress) == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = guard_signal;
    sa.sa_flags = SA_NODEFER | SA_RESTART; /* not blocked: the jump keeps no mask */
    sigemptyset(&sa.sa_mask);
    if (!W.hook && sigaction(SIGRTMIN + 3, &sa, NULL) < 0)
        return -1;
    pthread_mutex_lock(&W.mu);
    W.dog_on = pthread_create(&W.dog, NULL, guard_dog, NULL) == 0;
    const int on = W.dog_on;
    pthread_mutex_unlock(&W.mu);
    return on ? 0 : -1;
}

static void guard_stop(void)
{
    pthread_mutex_lock(&W.mu);
    const int on = W.dog_on;
    W.dog_on = 0;
    W.stop = 1;
    pthread_cond_signal(&W.cv);
    pthread_mutex_unlock(&W.mu);
    if (on)
        pthread_join(W.dog, NULL);
}

/* MPI_Abort's own deadline: a thread that ends the process if it has not
 * ended by then. The guard may have jumped a thread out of an MPI call
 * (a collective with a dead peer), which can leave the library's state
 * such that MPI_Abort never returns nor ends the job (seen 1 run in 20
 * of mpi_replicas_netns's mid-call kill). A rank that exits nonzero ends
 * the job as well: mpirun then stops the others. */
#define ABORT_DEADLINE_S 15

static void *abort_deadline(void *arg)
{
    (void)arg;
    struct timespec ts = {ABORT_DEADLINE_S, 0};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        continue;
    RT_LOG(RT_LOG_ERROR, "MPI_Abort did not end the job within %d s: exiting", ABORT_DEADLINE_S);
    _exit(3);
    return NULL;
}

/* Ends the job from any rank's main or calling thread (the watchdog is
 * joined first: it has stopped, or stops now). */
static void job_abort(void)
{
    pthread_t th;
    if (pthread_create(&th, NULL, abort_deadline, NULL) == 0)
        pthread_detach(th);
    guard_stop();
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* Fails the collective in flight, if any, and every later one with msg
 * (as the watchdog does when it times one out); the first verdict stays. */
static void guard_fire(const char *msg)
{
    pthread_mutex_lock(&W.mu);
    uint64_t s = __atomic_load_n(&W.seq, __ATOMIC_ACQUIRE);
    while (s != GUARD_FIRED) {
        snprintf(W.msg, sizeof W.msg, "%s", msg);
        const pthread_t th = __atomic_load_n(&W.thread, __ATOMIC_ACQUIRE);
        if (__atomic_compare_exchange_n(&W.seq, &s, GUARD_FIRED, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            if (s & 1)
                guard_kick(th);
            break;
        }
    }
    pthread_cond_signal(&W.cv);
    pthread_mutex_unlock(&W.mu);
}

static int job_broken(void)
{
    return G.broken || __atomic_load_n(&W.seq, __ATOMIC_ACQUIRE) == GUARD_FIRED;
}

/* ------------------------------------------------------------- the links
 *
 * A dead replica must end the job at once, not after --dist-timeout-ms.
 * Besides MPI every worker holds one TCP connection to rank 0, made at
 * start and checked with a cookie rank 0 broadcasts; nothing is sent on
 * it. The kernel closes it when the worker's process ends, however it
 * ends, and keepalive probes (over the dist timeout) find a host that
 * vanished. Rank 0's link thread sees the close, fails the collective in
 * flight as the watchdog does, naming the rank, and stops the daemon by
 * SIGTERM's path: running calls end, a state dir gets its checkpoint of
 * the last whole step, then rt_dist_finalize ends the job (MPI_Abort).
 * The restart on the hosts that remain resumes from it. A broken worker
 * waits for that (its own MPI_Abort could end rank 0 before the
 * checkpoint); a worker whose link to rank 0 closes ends itself. A rank
 * that cannot reach rank 0 outside MPI keeps only the watchdog. */
#define LINK_ADDRS 16

typedef struct link_info {
    uint8_t cookie[16];
    uint16_t port; /* 0: rank 0 has no listener */
    uint16_t n;
    uint32_t addr[LINK_ADDRS]; /* rank 0's IPv4 addresses, network order */
} link_info;

typedef struct link_hello {
    uint8_t cookie[16];
    int32_t rank;
} link_hello;

static struct {
    int lfd;     /* rank 0: the listener, until every rank has linked */
    int *fd;     /* rank 0: each rank's link (-1 none); a worker: fd[0] */
    int wake[2]; /* wakes rank 0's link thread: 'c' close the listener */
    pthread_t th;
    int on;
    int ending; /* CMD_EXIT sent or received: a close is no loss */
    int lost;   /* the first rank found gone, -1 none */
    int stop_asked;
    link_info info;
} L = {.lfd = -1, .wake = {-1, -1}, .lost = -1};

/* The stop's own deadline: a broken job must end even when its stop does
 * not (a call that never returns: a thread stuck in MPI outside its
 * progress loop, or the signal's jump without OpenMPI's hook, the guard).
 * rt_dist_finalize's MPI_Abort has its deadline too; this one covers the
 * time before it. */
static void *stop_deadline(void *arg)
{
    (void)arg;
    const uint64_t ms = G.o.stop_ms ? G.o.stop_ms : 20000;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        continue;
    RT_LOG(RT_LOG_ERROR, "the broken MPI job did not stop within %llu ms: exiting",
           (unsigned long long)ms);
    _exit(3);
    return NULL;
}

/* rank 0: stop the daemon (rtraind reads SIGTERM from a signalfd; its
 * stop ends running calls, checkpoints, then rt_dist_finalize) */
static void job_stop(void)
{
    if (G.rank != 0 || __atomic_load_n(&L.ending, __ATOMIC_ACQUIRE) ||
        __atomic_exchange_n(&L.stop_asked, 1, __ATOMIC_ACQ_REL))
        return;
    RT_LOG(RT_LOG_ERROR, "the MPI job is broken: stopping rtraind");
    pthread_t th;
    if (pthread_create(&th, NULL, stop_deadline, NULL) == 0)
        pthread_detach(th);
    kill(getpid(), SIGTERM);
}

static void link_lost(int r)
{
    if (__atomic_load_n(&L.ending, __ATOMIC_ACQUIRE))
        return;
    int none = -1;
    if (!__atomic_compare_exchange_n(&L.lost, &none, r, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    char m[200];
    snprintf(m, sizeof m,
             "replica %d (host %.40s) was lost: the job stops; restart it on the "
             "hosts that remain",
             r, rt_dist_host(r));
    RT_LOG(RT_LOG_ERROR, "%s", m);
    guard_fire(m);
    job_stop();
}

static void link_keepalive(int fd)
{
    const int one = 1, t = G.o.timeout_ms / 1000;
    const int idle = t / 2 > 1 ? t / 2 : 1, intvl = t / 6 > 1 ? t / 6 : 1, cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

/* Rank 0: the first rank whose link closed (link_lost run for it), or -1.
 * wait_ms: how long to wait for one (an MPI error's peer). */
static int link_scan(int wait_ms)
{
    if (G.rank != 0 || !L.fd)
        return __atomic_load_n(&L.lost, __ATOMIC_ACQUIRE);
    struct pollfd p[64];
    int who[64], k = 0;
    for (int r = 1; r < G.size && k < 64; r++) {
        const int fd = __atomic_load_n(&L.fd[r], __ATOMIC_ACQUIRE);
        if (fd >= 0) {
            p[k] = (struct pollfd){.fd = fd, .events = POLLIN | POLLRDHUP};
            who[k++] = r;
        }
    }
    if (k && __atomic_load_n(&L.lost, __ATOMIC_ACQUIRE) < 0 && poll(p, (nfds_t)k, wait_ms) > 0)
        for (int i = 0; i < k; i++)
            if (p[i].revents)
                link_lost(who[i]);
    return __atomic_load_n(&L.lost, __ATOMIC_ACQUIRE);
}

/* rank 0: a connection on the listener; a worker's whose hello holds the
 * cookie becomes its link (then acknowledged) */
static void link_accept(void)
{
    int fd = accept4(L.lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    link_hello h;
    const uint8_t ack = 1;
    if (recv(fd, &h, sizeof h, MSG_WAITALL) == (ssize_t)sizeof h &&
        !memcmp(h.cookie, L.info.cookie, 16) && h.rank > 0 && h.rank < G.size &&
        __atomic_load_n(&L.fd[h.rank], __ATOMIC_ACQUIRE) < 0) {
        link_keepalive(fd);
        __atomic_store_n(&L.fd[h.rank], fd, __ATOMIC_RELEASE);
        if (send(fd, &ack, 1, MSG_NOSIGNAL) == 1)
            return;
        __atomic_store_n(&L.fd[h.rank], -1, __ATOMIC_RELEASE);
    }
    close(fd);
}

static void *link_main(void *arg)
{
    (void)arg;
    struct pollfd p[66];
    int who[66];
    for (;;) {
        int k = 0;
        p[k] = (struct pollfd){.fd = L.wake[0], .events = POLLIN};
        who[k++] = 0;
        if (L.lfd >= 0) {
            p[k] = (struct pollfd){.fd = L.lfd, .events = POLLIN};
            who[k++] = -1;
        }
        const int lost = __atomic_load_n(&L.lost, __ATOMIC_ACQUIRE);
        for (int r = 1; G.rank == 0 && lost < 0 && r < G.size && k < 66; r++)
            if (L.fd[r] >= 0) {
                p[k] = (struct pollfd){.fd = L.fd[r], .events = POLLIN | POLLRDHUP};
                who[k++] = r;
            }
        if (G.rank > 0) {
            p[k] = (struct pollfd){.fd = L.fd[0], .events = POLLIN | POLLRDHUP};
            who[k++] = 0;
        }
        if (poll(p, (nfds_t)k, -1) < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        if (G.rank == 0 && __atomic_load_n(&L.ending, __ATOMIC_ACQUIRE))
            return NULL;
        if (p[0].revents) {
            char c = 0;
            if (read(L.wake[0], &c, 1) <= 0 || c == 'q')
                return NULL;
            if (c == 'c' && L.lfd >= 0) {
                close(L.lfd);
                L.lfd = -1;
            }
        }
        for (int i = 1; i < k; i++) {
            if (!p[i].revents)
                continue;
            if (who[i] < 0) {
                link_accept();
            } else if (G.rank == 0) {
                link_lost(who[i]);
            } else if (!__atomic_load_n(&L.ending, __ATOMIC_ACQUIRE)) {
                /* rank 0 is gone: nothing will end this rank but itself */
                RT_LOG(RT_LOG_ERROR, "replica %d: rank 0 (host %s) was lost: ending", G.rank,
                       rt_dist_host(0));
                _exit(3);
            } else {
                return NULL;
            }
        }
    }
}

/* rank 0: listen on every interface, port 0; fills L.info */
static int link_listen(void)
{
    L.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t al = sizeof a;
    if (L.lfd < 0 || bind(L.lfd, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(L.lfd, G.size) < 0 || getsockname(L.lfd, (struct sockaddr *)&a, &al) < 0 ||
        rt_random_bytes(L.info.cookie, sizeof L.info.cookie) < 0)
        goto fail;
    L.info.port = ntohs(a.sin_port);
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i && L.info.n < LINK_ADDRS; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
                !(i->ifa_flags & IFF_LOOPBACK))
                L.info.addr[L.info.n++] = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        freeifaddrs(ifs);
    }
    return 0;
fail:
    if (L.lfd >= 0)
        close(L.lfd);
    L.lfd = -1;
    L.info.port = 0;
    return -1;
}

static int fcntl_blocking(int fd)
{
    const int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

/* a worker: connect to rank 0, on loopback when both name the same host,
 * else at its addresses in turn; the link's fd or -1 */
static int link_connect(void)
{
    uint32_t cand[LINK_ADDRS + 1];
    int nc = 0;
    if (!strcmp(rt_dist_host(0), rt_dist_host(G.rank)))
        cand[nc++] = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < L.info.n && i < LINK_ADDRS; i++)
        cand[nc++] = L.info.addr[i];
    const link_hello h = {.rank = G.rank};
    for (int i = 0; i < nc && L.info.port; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            return -1;
        struct sockaddr_in a = {
            .sin_family = AF_INET, .sin_port = htons(L.info.port), .sin_addr.s_addr = cand[i]};
        int rc = connect(fd, (struct sockaddr *)&a, sizeof a), e = 0;
        socklen_t el = sizeof e;
        if (rc < 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            rc = poll(&p, 1, 3000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 &&
                         e == 0
                     ? 0
                     : -1;
        }
        link_hello hh = h;
        memcpy(hh.cookie, L.info.cookie, 16);
        uint8_t ack = 0;
        struct timeval tv = {3, 0};
        if (rc == 0 && fcntl_blocking(fd) == 0 &&
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
            send(fd, &hh, sizeof hh, MSG_NOSIGNAL) == (ssize_t)sizeof hh &&
            recv(fd, &ack, 1, MSG_WAITALL) == 1 && ack == 1) {
            tv.tv_sec = 0;
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            link_keepalive(fd);
            return fd;
        }
        close(fd);
    }
    return -1;
}

/* every rank, in rt_dist_init (G.size > 1): the links; a rank without one
 * is logged */
static void link_start(void)
{
    const int n = G.rank == 0 ? G.size : 1;
    L.fd = malloc(sizeof(int) * (size_t)n);
    if (!L.fd)
        return;
    for (int i = 0; i < n; i++)
        L.fd[i] = -1;
    if (G.rank == 0 && (pipe2(L.wake, O_CLOEXEC) < 0 || link_listen() < 0))
        RT_LOG(RT_LOG_WARN,
               "no links to the replicas (a lost one is noticed by "
               "--dist-timeout-ms only): %s",
               strerror(errno));
    if (G.rank == 0 && L.lfd >= 0)
        L.on = pthread_create(&L.th, NULL, link_main, NULL) == 0;
    MPI_Bcast(&L.info, (int)sizeof L.info, MPI_BYTE, 0, G.comm);
    if (G.rank > 0)
        L.fd[0] = link_connect();
    int ok = G.rank == 0 || L.fd[0] >= 0,
        *all = G.rank == 0 ? malloc(sizeof(int) * (size_t)G.size) : NULL;
    MPI_Gather(&ok, 1, MPI_INT, all, 1, MPI_INT, 0, G.comm);
    if (G.rank == 0) {
        for (int r = 1; all && r < G.size; r++)
            if (!all[r])
                RT_LOG(RT_LOG_WARN,
                       "replica %d (host %s) has no link to rank 0: its loss is "
                       "noticed by --dist-timeout-ms only",
                       r, rt_dist_host(r));
        free(all);
        if (L.on && write(L.wake[1], "c", 1) != 1)
            RT_LOG(RT_LOG_WARN, "link thread: no wake");
    } else if (L.fd[0] >= 0) {
        L.on = pthread_create(&L.th, NULL, link_main, NULL) == 0;
    }
}

/* the job ends normally from here: the links' closes are no loss */
static void link_ending(void) { __atomic_store_n(&L.ending, 1, __ATOMIC_RELEASE); }

static void link_stop(void)
{
    link_ending();
    if (L.on && G.rank == 0 && write(L.wake[1], "q", 1) == 1)
        pthread_join(L.th, NULL);
    else if (L.on)
        pthread_detach(L.th); /* a worker's ends at rank 0's close */
    L.on = 0;
}

/* Entering and leaving a collective; enter fails once the job is broken.
 * The move to odd is a compare-and-swap: a guard_fire between the load and
 * the move (a link lost while no collective was in flight, so nobody was
 * signalled) must not be overwritten, or this thread would enter a
 * collective with a dead peer that nothing ends but the dist timeout. */
static int guard_enter(sigjmp_buf *jb, const char *what)
{
    uint64_t s = __atomic_load_n(&W.seq, __ATOMIC_ACQUIRE);
    if (s == GUARD_FIRED || G.broken)
        return -1;
    __atomic_store_n(&W.what, what, __ATOMIC_RELAXED);
    __atomic_store_n(&W.thread, pthread_self(), __ATOMIC_RELAXED);
    tl_jb = jb;
    if (!__atomic_compare_exchange_n(&W.seq, &s, s + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        tl_jb = NULL; /* fired meanwhile */
        return -1;
    }
    return 0;
}

static int guard_leave(int mrc, const char *what, char *err, size_t errlen)
{
    uint64_t s = __atomic_load_n(&W.seq, __ATOMIC_ACQUIRE);
    int ok = s != GUARD_FIRED &&
             __atomic_compare_exchange_n(&W.seq, &s, s + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    tl_jb = NULL;
    if (!ok)
        return guard_broken(err, errlen);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(mrc, what, err, errlen);
    return 0;
}

/* The start of a guarded collective's function: the watchdog's jump lands
 * here and returns the broken-world error. A macro, not a function:
 * sigsetjmp must run in the frame the jump returns into, the caller's. */
#define RT__GUARDED_FRAME(what, err, errlen) \
    sigjmp_buf jb;                           \
    if (sigsetjmp(jb, 0)) {                  \
        tl_jb = NULL;                        \
        return guard_broken(err, errlen);    \
    }                                        \
    if (guard_enter(&jb, what) < 0) {        \
        return guard_broken(err, errlen);    \
    }

/* The three blocking collectives under the guard (each its own frame:
 * nothing but err and errlen, never modified, is used after the jump). */
enum { G_BCAST, G_ALLREDUCE, G_ALLGATHER };

static int __attribute__((noinline))
guarded(int kind, const void *sbuf, void *buf, int cnt, MPI_Datatype dt, MPI_Op op,
        const char *what, char *err, size_t errlen)
{
    RT__GUARDED_FRAME(what, err, errlen)
    int mrc;
    switch (kind) {
    case G_BCAST: mrc = MPI_Bcast(buf, cnt, dt, 0, G.comm); break;
    case G_ALLREDUCE: mrc = MPI_Allreduce(sbuf, buf, cnt, dt, op, G.comm); break;
    default: mrc = MPI_Allgather(sbuf, cnt, dt, buf, cnt, dt, G.comm); break;
    }
    return guard_leave(mrc, what, err, errlen);
}

static int bcast(void *buf, int64_t len, const char *what, char *err, size_t errlen)
{
    for (int64_t off = 0; off < len || (len == 0 && off == 0); off += CHUNK) {
        int cnt = (int)(len - off < CHUNK ? len - off : CHUNK);
        int rc = guarded(G_BCAST, NULL, (char *)buf + off, cnt, MPI_BYTE, MPI_OP_NULL, what, err,
                         errlen);
        if (rc < 0)
            return rc;
        if (len == 0)
            break;
    }
    return 0;
}

/* MPI_Scatterv from rank 0 under the guard: rank 0 sends cnt[r] items of
 * dt at buf + dsp[r] to rank r and keeps its own in place; a worker
 * receives its rcnt at buf. */
static int __attribute__((noinline))
guarded_scatterv(void *buf, const int *cnt, const int *dsp, int rcnt, MPI_Datatype dt,
                 const char *what, char *err, size_t errlen)
{
    RT__GUARDED_FRAME(what, err, errlen)
    int mrc = G.rank == 0 ? MPI_Scatterv(buf, cnt, dsp, dt, MPI_IN_PLACE, 0, dt, 0, G.comm)
                          : MPI_Scatterv(NULL, NULL, NULL, dt, buf, rcnt, dt, 0, G.comm);
    return guard_leave(mrc, what, err, errlen);
}

/* The v-collectives of the sharded optimizer under the guard (floats). */
typedef struct vargs {
    const float *sb;
    float *rb;
    const int *sc, *sd, *rc, *rd;
    int n;
    int typed; /* counts in items of dt (a held set's rows), not floats */
    MPI_Datatype dt;
} vargs;
enum { V_ALLTOALLV, V_REDSCAT, V_ALLGATHERV, V_GATHERV };

static int __attribute__((noinline))
guarded_v(int kind, const vargs *a, const char *what, char *err, size_t errlen)
{
    RT__GUARDED_FRAME(what, err, errlen)
    int mrc;
    const MPI_Datatype t = a->typed ? a->dt : MPI_FLOAT;
    switch (kind) {
    case V_ALLTOALLV:
        mrc = MPI_Alltoallv(a->sb, a->sc, a->sd, t, a->rb, a->rc, a->rd, t, G.comm);
        break;
    case V_REDSCAT:
        mrc = MPI_Reduce_scatter(a->sb, a->rb, a->rc, MPI_FLOAT, MPI_SUM, G.comm);
        break;
    case V_ALLGATHERV:
        mrc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, a->rb, a->rc, a->rd, MPI_FLOAT, G.comm);
        break;
    default:
        mrc = G.rank == 0 ? MPI_Gatherv(MPI_IN_PLACE, 0, t, a->rb, a->rc, a->rd, t, 0, G.comm)
                          : MPI_Gatherv(a->sb, a->n, t, NULL, NULL, NULL, t, 0, G.comm);
        break;
    }
    return guard_leave(mrc, what, err, errlen);
}

/* A command header, the one non-blocking collective: a worker waits for it
 * idle, and MPI matches a non-blocking collective only with non-blocking
 * ones. Rank 0 polls it with the timeout. */
static int send_cmd(cmd_hdr *h, const char *what, char *err, size_t errlen)
{
    if (job_broken())
        return guard_broken(err, errlen);
    MPI_Request r;
    int mrc = MPI_Ibcast(h, (int)sizeof *h, MPI_BYTE, 0, G.comm, &r);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(mrc, what, err, errlen);
    return wait_req(&r, (uint64_t)G.o.timeout_ms * 1000000ull, what, err, errlen);
}

static int recv_cmd(cmd_hdr *h, char *err, size_t errlen)
{
    MPI_Request r;
    int mrc = MPI_Ibcast(h, (int)sizeof *h, MPI_BYTE, 0, G.comm, &r);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(mrc, "command", err, errlen);
    return wait_req(&r, 0, "command", err, errlen);
}

/* max over ranks of v[0..n) (flags) */
static int flags_max(int *v, int n, const char *what, char *err, size_t errlen)
{
    return guarded(G_ALLREDUCE, MPI_IN_PLACE, v, n, MPI_INT, MPI_MAX, what, err, errlen);
}

int rt_dist_rank(void) { return G.rank; }
int rt_dist_size(void) { return G.size; }
int rt_dist_micro(void) { return G.o.micro; }
const char *rt_dist_host(int i)
{
    if (!G.hosts || i < 0 || i >= G.size)
        return "";
    return G.hosts[i];
}

int rt_dist_init(const rt_dist_opts *o, char *err, size_t errlen)
{
    G.o = *o;
    /* 4 MiB buckets: on this machine 4 of them reduce 16 MiB faster than one call */
    if (G.o.bucket_floats <= 0)
        G.o.bucket_floats = (int64_t)1 << 20;
    if (G.o.timeout_ms <= 0)
        G.o.timeout_ms = 30000;
    const int launched =
        getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
    if (!launched)
        return 0;
    int prov = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &prov) != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI_Init_thread failed");
        return RT_EUNAVAILABLE;
    }
    if (prov < MPI_THREAD_SERIALIZED) {
        snprintf(err, errlen,
                 "the MPI library gives thread level %d, rtraind needs "
                 "MPI_THREAD_SERIALIZED",
                 prov);
        MPI_Finalize();
        return RT_EUNAVAILABLE;
    }
    G.on = 1;
    MPI_Comm_dup(MPI_COMM_WORLD, &G.comm);
    MPI_Comm_set_errhandler(G.comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(G.comm, &G.rank);
    MPI_Comm_size(G.comm, &G.size);
    if (G.o.micro > 0 && G.o.micro % G.size) {
        snprintf(err, errlen, "--deterministic-reduce %d: the replica count %d must divide it",
                 G.o.micro, G.size);
        return RT_EINVAL;
    }
    G.hosts = calloc((size_t)G.size, sizeof *G.hosts);
    char me[MPI_MAX_PROCESSOR_NAME] = "";
    int ml = 0;
    MPI_Get_processor_name(me, &ml);
    if (!G.hosts) {
        snprintf(err, errlen, "out of memory");
        return RT_ENOMEM;
    }
    MPI_Allgather(me, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, G.hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                  G.comm);
    if (G.size > 1 && guard_start() < 0) {
        snprintf(err, errlen, "cannot start the collectives' watchdog");
        return RT_EINTERNAL;
    }
    if (G.size > 1 && G.rank == 0 && !W.hook)
        RT_LOG(RT_LOG_WARN, "this MPI library has no opal_progress_register: a collective "
                            "with a lost replica is left by a signal (docs/architecture.md)");
    if (G.size > 1)
        link_start();
    if (G.size > 1 && G.o.micro == 0 && G.o.overlap != RT_DIST_OVERLAP_OFF && comm_start() < 0) {
        snprintf(err, errlen, "cannot start the reduce thread");
        return RT_EINTERNAL;
    }
    return 0;
}

/* ------------------------------------------------------------- the reduce */

int rt_dist_allreduce(float *buf, int64_t n, char *err, size_t errlen)
{
    if (G.size == 1)
        return 0;
    const int64_t B = G.o.bucket_floats;
    for (int64_t off = 0; off < n; off += B) {
        const int cnt = (int)(n - off < B ? n - off : B);
        int rc = guarded(G_ALLREDUCE, MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM,
                         "gradient all-reduce", err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ------------------------------------------------------------- overlap */

static void *comm_main(void *arg)
{
    (void)arg;
    /* the watchdog's signal must reach this thread in a collective */
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGRTMIN + 3);
    pthread_sigmask(SIG_UNBLOCK, &ss, NULL);
    char err[200];
    pthread_mutex_lock(&C.mu);
    for (;;) {
        while (!C.stop && C.next == C.n)
            pthread_cond_wait(&C.go, &C.mu);
        if (C.next == C.n)
            break;
        const cjob j = C.q[C.next++];
        const int failed = C.rc < 0;
        pthread_mutex_unlock(&C.mu);
        int rc = 0;
        err[0] = 0;
        /* after a failure the rest only end (the job is broken) */
        if (!failed)
            rc = j.sum ? guarded(G_ALLREDUCE, MPI_IN_PLACE, j.v, j.n, MPI_DOUBLE, MPI_SUM,
                                 "metric all-reduce", err, sizeof err)
                       : guarded(G_ALLREDUCE, MPI_IN_PLACE, j.v, j.n, MPI_FLOAT, MPI_SUM,
                                 "gradient all-reduce", err, sizeof err);
        pthread_mutex_lock(&C.mu);
        if (rc < 0 && C.rc == 0) {
            C.rc = rc;
            snprintf(C.err, sizeof C.err, "%s", err);
        }
        C.done++;
        pthread_cond_broadcast(&C.done_cv);
    }
    pthread_mutex_unlock(&C.mu);
    return NULL;
}

static int comm_start(void)
{
    C.on = pthread_create(&C.th, NULL, comm_main, NULL) == 0;
    return C.on ? 0 : -1;
}

static void comm_stop(void)
{
    if (!C.on)
        return;
    pthread_mutex_lock(&C.mu);
    C.stop = 1;
    pthread_cond_signal(&C.go);
    pthread_mutex_unlock(&C.mu);
    pthread_join(C.th, NULL);
    C.on = 0;
    free(C.q);
    C.q = NULL;
}

/* queue a job; returns its index or RT_ENOMEM */
static int comm_put(int sum, void *v, int n)
{
    pthread_mutex_lock(&C.mu);
    if (C.n == C.cap) {
        int cap = C.cap ? 2 * C.cap : 64;
        cjob *q = realloc(C.q, sizeof *q * (size_t)cap);
        if (!q) {
            pthread_mutex_unlock(&C.mu);
            return RT_ENOMEM;
        }
        C.q = q;
        C.cap = cap;
    }
    const int i = C.n++;
    C.q[i] = (cjob){.sum = sum, .v = v, .n = n};
    pthread_cond_signal(&C.go);
    pthread_mutex_unlock(&C.mu);
    return i;
}

/* wait until the jobs before `upto` ended; 0 or the first failure */
static int comm_wait(int upto, char *err, size_t errlen)
{
    pthread_mutex_lock(&C.mu);
    while (C.done < upto)
        pthread_cond_wait(&C.done_cv, &C.mu);
    const int rc = C.rc;
    if (rc < 0)
        snprintf(err, errlen, "%s", C.err);
    pthread_mutex_unlock(&C.mu);
    return rc;
}

static int cmp_dbl(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double med(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* rt_replica.overlap: this step's choice. Auto: the first step runs
 * without (it warms caches and MPI's buffers), then OV_TRIAL steps each
 * way, alternating; rank 0 times them, overlaps when that saves 5 % of the
 * medians, and its choice reaches every rank with the loss sums
 * (ov_stats). */
static int dist_overlap(void *ctx)
{
    ov_state *o = ctx;
    int m = 0;
    if (G.size > 1 && C.on) {
        if (G.o.overlap == RT_DIST_OVERLAP_ON)
            m = 1;
        else if (G.o.overlap == RT_DIST_OVERLAP_OFF)
            m = 0;
        else if (o->mode >= 0)
            m = o->mode;
        else
            m = o->asked > 0 && (o->asked & 1);
    }
    o->asked++;
    o->cur = m;
    o->t0 = rt_now_ns();
    C.active = m;
    return m;
}

/* after the gradient's reduce: the step's time, while auto times */
static void ov_timed(ov_state *o)
{
    if (!o || o->mode >= 0 || G.o.overlap != RT_DIST_OVERLAP_AUTO || o->asked < 2)
        return;
    if (o->n[o->cur] < OV_TRIAL)
        o->t[o->cur][o->n[o->cur]++] = (double)(rt_now_ns() - o->t0);
}

/* the loss sums over the ranks, with rank 0's overlap choice once it has
 * timed both ways (a third double: 0 none yet, 1 off, 2 on) */
static int ov_stats(ov_state *o, double *st, char *err, size_t errlen)
{
    double v[3] = {st[0], st[1], 0};
    if (o && G.rank == 0 && o->mode < 0 && o->n[0] == OV_TRIAL && o->n[1] == OV_TRIAL) {
        double on[OV_TRIAL], off[OV_TRIAL];
        memcpy(on, o->t[1], sizeof on);
        memcpy(off, o->t[0], sizeof off);
        const double mon = med(on, OV_TRIAL), moff = med(off, OV_TRIAL);
        /* a near tie keeps the simpler path: overlap must save 5 % */
        const int pick = mon < 0.95 * moff;
        v[2] = pick ? 2 : 1;
        RT_LOG(RT_LOG_INFO,
               "overlap-reduce auto: backward + reduce %.3f ms overlapped, "
               "%.3f ms not (medians of %d steps): %s",
               mon * 1e-6, moff * 1e-6, OV_TRIAL, pick ? "overlapping" : "not overlapping");
    }
    int rc = guarded(G_ALLREDUCE, MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_SUM, "metric all-reduce", err,
                     errlen);
    if (rc < 0)
        return rc;
    st[0] = v[0];
    st[1] = v[1];
    if (o && o->mode < 0 && v[2] > 0.5)
        o->mode = v[2] > 1.5;
    return 0;
}

/* rt_replica.start: a final bucket to the communication thread */
static int dist_start(void *ctx, float *g, int64_t n, char *err, size_t errlen)
{
    (void)ctx;
    if (comm_put(0, g, (int)n) < 0) {
        snprintf(err, errlen, "out of memory for the reduce queue");
        return RT_ENOMEM;
    }
    return 0;
}

/* rt_replica.finish: every bucket reduced, then the loss sums */
static int dist_finish(void *ctx, double *st, char *err, size_t errlen)
{
    ov_state *o = ctx;
    pthread_mutex_lock(&C.mu);
    const int n = C.n;
    pthread_mutex_unlock(&C.mu);
    int rc = comm_wait(n, err, errlen);
    pthread_mutex_lock(&C.mu);
    C.n = C.next = C.done = 0;
    C.rc = 0;
    pthread_mutex_unlock(&C.mu);
    C.active = 0;
    if (rc < 0)
        return rc;
    ov_timed(o);
    return ov_stats(o, st, err, errlen);
}

static prog_ent *find_exec(const rt_exec *e);
static int send_frees(char *err, size_t errlen);

void rt_dist_set_overlap(int mode)
{
    pthread_mutex_lock(&G.mu);
    G.o.overlap = mode;
    pthread_mutex_unlock(&G.mu);
}

int rt_dist_overlap_mode(const rt_exec *e)
{
    if (G.size == 1 || !C.on || G.o.micro > 0)
        return 0;
    pthread_mutex_lock(&G.mu);
    pthread_mutex_lock(&G.tab_mu);
    prog_ent *p = find_exec(e);
    const int m = G.o.overlap != RT_DIST_OVERLAP_AUTO ? G.o.overlap == RT_DIST_OVERLAP_ON
                  : p && p->ov                        ? p->ov->mode
                                                      : 0;
    pthread_mutex_unlock(&G.tab_mu);
    pthread_mutex_unlock(&G.mu);
    return m;
}

static int grow(void **p, size_t *cap, size_t need)
{
    if (*cap >= need)
        return 0;
    void *q = realloc(*p, need);
    if (!q)
        return RT_ENOMEM;
    *p = q;
    *cap = need;
    return 0;
}

/* k shards of n floats in one MPI message (counts are ints), or
 * RT_ETOOBIG naming the reduce (what). */
static int shards_fit(int k, int64_t n, const char *what, char *err, size_t errlen)
{
    if ((int64_t)k * n <= INT_MAX)
        return 0;
    return rt_errf(err, errlen, RT_ETOOBIG,
                   "%s reduce: %d shards of %lld floats exceed one MPI message", what, k,
                   (long long)n);
}

/* ZeRO stage 1: this rank's slice of the summed gradient, g[lo, lo + S).
 * Without micro-shards one MPI_Reduce_scatter; with them each rank sends
 * every other its slice of each of its k shard gradients (MPI_Alltoallv)
 * and sums the M it receives in shard order, the floats the whole sum
 * gives there (dist_reduce below), so sharding leaves the weights
 * bit-identical. */
static int shard_reduce(ov_state *o, float *g, int64_t n, float *slots, int k, double *st,
                        char *err, size_t errlen)
{
    const int r = G.rank, N = G.size, M = k * N;
    const int64_t lo = o->dsp[r], S = o->cnt[r];
    if (shards_fit(k, n, "sharded", err, errlen) < 0)
        return RT_ETOOBIG;
    if (grow((void **)&G.gather, &G.gather_cap, sizeof(float) * (size_t)(M * S + 1)) ||
        grow((void **)&G.gst, &G.gst_cap, sizeof(double) * 2 * (size_t)M) ||
        (slots && grow((void **)&G.sbuf, &G.sbuf_cap, sizeof(float) * (size_t)(k * n + 1)))) {
        snprintf(err, errlen, "out of memory for the sharded reduce");
        return RT_ENOMEM;
    }
    int sc[65], sd[65], rc[65], rd[65];
    if (!slots) {
        vargs a = {.sb = g, .rb = G.gather, .rc = o->cnt};
        int rc0 = guarded_v(V_REDSCAT, &a, "gradient reduce-scatter", err, errlen);
        if (rc0 < 0)
            return rc0;
        memcpy(g + lo, G.gather, sizeof(float) * (size_t)S);
        return ov_stats(o, st, err, errlen);
    }
    /* rank q's part: the k shards' [dsp[q], dsp[q] + cnt[q]), shard-major */
    for (int q = 0; q < N; q++) {
        sc[q] = k * o->cnt[q];
        sd[q] = k * o->dsp[q];
        for (int j = 0; j < k; j++)
            memcpy(G.sbuf + sd[q] + (int64_t)j * o->cnt[q], slots + (int64_t)j * n + o->dsp[q],
                   sizeof(float) * (size_t)o->cnt[q]);
        rc[q] = k * (int)S;
        rd[q] = q * k * (int)S;
    }
    vargs a = {.sb = G.sbuf, .sc = sc, .sd = sd, .rb = G.gather, .rc = rc, .rd = rd};
    int rc0 = guarded_v(V_ALLTOALLV, &a, "shard reduce", err, errlen);
    if (rc0 == 0)
        rc0 = guarded(G_ALLGATHER, st, G.gst, 2 * k, MPI_DOUBLE, MPI_OP_NULL, "shard gather", err,
                      errlen);
    if (rc0 < 0)
        return rc0;
    /* shard m = q*k + j of rank q: in shard order */
    float *gs = g + lo;
    memcpy(gs, G.gather, sizeof(float) * (size_t)S);
    for (int m = 1; m < M; m++) {
        const float *x = G.gather + (int64_t)m * S;
        for (int64_t i = 0; i < S; i++)
            gs[i] += x[i];
    }
    double l = G.gst[0], acc = G.gst[1];
    for (int m = 1; m < M; m++) {
        l += G.gst[2 * m];
        acc += G.gst[2 * m + 1];
    }
    st[0] = l;
    st[1] = acc;
    return 0;
}

/* rt_replica.gather: every rank's updated slice to every rank */
static int dist_gather_w(void *ctx, float *w, int64_t n, char *err, size_t errlen)
{
    (void)n;
    ov_state *o = ctx;
    vargs a = {.rb = w, .rc = o->cnt, .rd = o->dsp};
    return guarded_v(V_ALLGATHERV, &a, "weight all-gather", err, errlen);
}

/* ZeRO: the slices of the optimizer slots to rank 0 (every rank), which
 * then holds them whole until its checkpoint is written or its next step
 * (rt_exec_state_release): between them rank 0 keeps 1/N as the others. */
static int slots_gather(rt_exec *e, ov_state *o, char *err, size_t errlen)
{
    float *s[2];
    rt_exec_opt_slots(e, &s[0], &s[1]);
    for (int i = 0; i < 2; i++) {
        vargs a = {.sb = s[i] + o->dsp[G.rank],
                   .n = o->cnt[G.rank],
                   .rb = s[i],
                   .rc = o->cnt,
                   .rd = o->dsp};
        int rc = guarded_v(V_GATHERV, &a, "optimizer state gather", err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* What a step's end tells the workers (stop_cb): op STEP_FETCH asks for
 * program prog's slices (a checkpoint written in rank 0's step callback),
 * then another message follows; op 0 ends the step with stop. */
typedef struct step_msg {
    int32_t stop, op;
    uint64_t prog;
} step_msg;
enum { STEP_END = 0, STEP_FETCH = 1 };

/* rank 0's thread inside rt_dist_train: how a fetch reaches the workers */
enum { FETCH_CMD = 0, FETCH_TRAIN, FETCH_STEP, FETCH_NONE };
static __thread int tl_fetch;

/* rt_replica.fetch on rank 0: the workers' slices of e's slots, gathered
 * in place. Outside a training call a command asks the workers; in a step
 * callback the step's end does; before a call's state goes out the call's
 * header said so. */
static int dist_fetch(void *ctx, rt_exec *e, char *err, size_t errlen)
{
    ov_state *o = ctx;
    pthread_mutex_lock(&G.tab_mu);
    prog_ent *pe = find_exec(e);
    const uint64_t id = pe ? pe->id : 0;
    pthread_mutex_unlock(&G.tab_mu);
    if (!id || G.size == 1) {
        snprintf(err, errlen, "the program is no replica");
        return RT_EINTERNAL;
    }
    const int how = tl_fetch;
    if (how == FETCH_TRAIN)
        return slots_gather(e, o, err, errlen);
    if (how == FETCH_NONE) {
        snprintf(err, errlen, "the optimizer state's slices cannot be fetched here");
        return RT_EINTERNAL;
    }
    if (how == FETCH_STEP) {
        step_msg m = {.op = STEP_FETCH, .prog = id};
        int rc = bcast(&m, sizeof m, "step end", err, errlen);
        return rc < 0 ? rc : slots_gather(e, o, err, errlen);
    }
    pthread_mutex_lock(&G.mu);
    int rc = job_broken() ? guard_broken(err, errlen) : send_frees(err, errlen);
    cmd_hdr h = {.cmd = CMD_SLOTS, .prog = id};
    if (rc == 0)
        rc = send_cmd(&h, "fetch", err, errlen);
    if (rc == 0)
        rc = slots_gather(e, o, err, errlen);
    pthread_mutex_unlock(&G.mu);
    return rc;
}

static int dist_reduce(void *ctx, float *g, int64_t n, float *slots, int k, double *st, char *err,
                       size_t errlen)
{
    if (job_broken())
        return guard_broken(err, errlen);
    ov_state *o = ctx;
    if (o && o->sh && !o->clip)
        return shard_reduce(o, g, n, slots, k, st, err, errlen);
    if (!slots) {
        int rc = rt_dist_allreduce(g, n, err, errlen);
        if (rc < 0 || G.size == 1)
            return rc;
        ov_timed(ctx);
        return ov_stats(ctx, st, err, errlen);
    }
    /* Deterministic: every shard's gradient on every rank, summed in shard
     * order, so the sum's rounding is the same whatever the rank count. */
    const int M = k * G.size;
    const float *all = slots;
    const double *ast = st;
    if (G.size > 1) {
        if (shards_fit(k, n, "deterministic", err, errlen) < 0)
            return RT_ETOOBIG;
        if (grow((void **)&G.gather, &G.gather_cap, sizeof(float) * (size_t)M * (size_t)n) ||
            grow((void **)&G.gst, &G.gst_cap, sizeof(double) * 2 * (size_t)M)) {
            snprintf(err, errlen, "out of memory for %d shard gradients", M);
            return RT_ENOMEM;
        }
        int rc = guarded(G_ALLGATHER, slots, G.gather, (int)((int64_t)k * n), MPI_FLOAT,
                         MPI_OP_NULL, "shard gather", err, errlen);
        if (rc == 0)
            rc = guarded(G_ALLGATHER, st, G.gst, 2 * k, MPI_DOUBLE, MPI_OP_NULL, "shard gather",
                         err, errlen);
        if (rc < 0)
            return rc;
        all = G.gather;
        ast = G.gst;
    }
    memcpy(g, all, sizeof(float) * (size_t)n);
    for (int m = 1; m < M; m++) {
        const float *s = all + (int64_t)m * n;
        for (int64_t i = 0; i < n; i++)
            g[i] += s[i];
    }
    double l = ast[0], a = ast[1];
    for (int m = 1; m < M; m++) {
        l += ast[2 * m];
        a += ast[2 * m + 1];
    }
    st[0] = l;
    st[1] = a;
    return 0;
}

static int dist_sum(void *ctx, double *v, int n, char *err, size_t errlen)
{
    (void)ctx;
    if (G.size == 1)
        return 0;
    if (C.active) {
        /* a synchronised BatchNorm in an overlapped backward pass: in the
         * queue, between the buckets queued before it and after it */
        const int i = comm_put(1, v, n);
        if (i < 0) {
            snprintf(err, errlen, "out of memory for the reduce queue");
            return RT_ENOMEM;
        }
        return comm_wait(i + 1, err, errlen);
    }
    return guarded(G_ALLREDUCE, MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, "metric all-reduce", err,
                   errlen);
}

/* ---------------------------------------------------------- program table */

static prog_ent *find_prog(uint64_t id)
{
    for (int i = 0; i < G.n_progs; i++)
        if (G.progs[i].id == id)
            return &G.progs[i];
    return NULL;
}

static prog_ent *find_exec(const rt_exec *e)
{
    for (int i = 0; i < G.n_progs; i++)
        if (G.progs[i].e == e)
            return &G.progs[i];
    return NULL;
}

static int add_prog(uint64_t id, rt_exec *e, rt_plan *plan, ov_state *ov)
{
    if (G.n_progs == G.cap_progs) {
        int cap = G.cap_progs ? 2 * G.cap_progs : 16;
        prog_ent *p = realloc(G.progs, sizeof *p * (size_t)cap);
        if (!p)
            return RT_ENOMEM;
        G.progs = p;
        G.cap_progs = cap;
    }
    G.progs[G.n_progs++] =
        (prog_ent){.id = id, .e = e, .plan = plan, .synced = UINT64_MAX, .ov = ov};
    return 0;
}

static void drop_prog(prog_ent *p)
{
    free(p->ov);
    *p = G.progs[--G.n_progs];
}

/* an id onto a list for the next command (under tab_mu; out of memory:
 * dropped, the worker keeps what it names until the job ends) */
static void id_push(uint64_t **v, int *n, int *cap, uint64_t id)
{
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 16;
        uint64_t *p = realloc(*v, sizeof *p * (size_t)c);
        if (!p)
            return;
        *v = p;
        *cap = c;
    }
    (*v)[(*n)++] = id;
}

/* rank 0: an exec being destroyed; its replicas go with the next command */
static void on_destroy(void *ctx, rt_exec *e)
{
    (void)ctx;
    pthread_mutex_lock(&G.tab_mu);
    prog_ent *p = find_exec(e);
    uint64_t id = p ? p->id : 0;
    if (p)
        drop_prog(p);
    if (!id || G.size == 1) {
        pthread_mutex_unlock(&G.tab_mu);
        return;
    }
    id_push(&G.frees, &G.n_frees, &G.cap_frees, id);
    pthread_mutex_unlock(&G.tab_mu);
}

/* rank 0 under G.mu: the pending frees */
static int send_frees(char *err, size_t errlen)
{
    for (;;) {
        pthread_mutex_lock(&G.tab_mu);
        uint64_t id = G.n_frees ? G.frees[--G.n_frees] : 0;
        /* and the held sets released since */
        uint64_t hid = !id && H.n_drop ? H.drop[--H.n_drop] : 0;
        pthread_mutex_unlock(&G.tab_mu);
        if (!id && !hid)
            return 0;
        cmd_hdr h = {.cmd = id ? CMD_FREE : CMD_UNHOLD, .prog = id ? id : hid};
        int rc = send_cmd(&h, "free", err, errlen);
        if (rc < 0)
            return rc;
    }
}

static void shard_bounds(int64_t T, int q, int64_t *lo, int64_t *hi);

/* *ov: the program's overlap state, the replica's ctx (the caller keeps
 * it with the program, or frees it) */
static int make_replica(rt_exec *e, ov_state **ov, int shard, char *err, size_t errlen)
{
    *ov = calloc(1, sizeof **ov);
    if (!*ov) {
        snprintf(err, errlen, "out of memory");
        return RT_ENOMEM;
    }
    (*ov)->mode = -1; /* auto's; on and off (rank 0's, sent with each call) come first */
    rt_replica r = {.rank = G.rank,
                    .size = G.size,
                    .micro = G.o.micro,
                    .reduce = dist_reduce,
                    .sum = dist_sum,
                    .on_destroy = G.rank == 0 ? on_destroy : NULL,
                    .ctx = *ov,
                    /* overlap: replicas, no micro-shards, no sharding */
                    .bucket = G.size > 1 && G.o.micro == 0 && !shard ? G.o.bucket_floats : 0,
                    .overlap = dist_overlap,
                    .start = dist_start,
                    .finish = dist_finish};
    if (shard) {
        ov_state *o = *ov;
        const rt_plan *p = rt_exec_plan(e);
        o->sh = 1;
        o->T = (int64_t)rt_plan_report(p)->trainable_param_count;
        o->clip = rt_plan_config(p)->clip_norm > 0;
        for (int q = 0; q < G.size; q++) {
            int64_t lo, hi;
            shard_bounds(o->T, q, &lo, &hi);
            o->dsp[q] = (int)lo;
            o->cnt[q] = (int)(hi - lo);
        }
        r.shard_lo = o->dsp[G.rank];
        r.shard_hi = o->dsp[G.rank] + o->cnt[G.rank];
        r.gather = dist_gather_w;
        if (G.rank == 0)
            r.fetch = dist_fetch;
    }
    int rc = rt_exec_set_replica(e, &r);
    if (rc < 0) {
        snprintf(err, errlen, "%s", rt_exec_errmsg(e));
        free(*ov);
        *ov = NULL;
    }
    return rc;
}

/* ----------------------------------------------------- sharding's choice
 *
 * --shard-optimizer auto's cost model, per step at N replicas and T
 * trainable floats. In the ring model a reduce-scatter and an all-gather
 * move what one all-reduce moves (2 (N-1)/N 4T bytes a rank), so sharding
 * costs no bandwidth; it costs one more collective's latency (2 (N-1)
 * alpha), the overlap of the reduce with the backward pass (off when
 * sharded) and, per training call, rank 0's gather of the slices (s 4T
 * (N-1)/N bytes, s the optimizer's slots); it saves (N-1)/N of the update
 * (Adam: ~28 bytes a float through memory) and s 4T (N-1)/N bytes of
 * state on each rank > 0. With --deterministic-reduce it also cuts the
 * shard gather from k 4T (N-1) bytes a rank to k 4T (N-1)/N. Time is then
 * a wash or a loss for small models (the latency and the lost overlap
 * dominate) and the memory is what matters: auto shards when the state a
 * rank > 0 gives up, s 4T (N-1)/N, reaches SHARD_AUTO_BYTES (64 MiB: 4.2M
 * parameters of Adam at N = 2). One more cost keeps it a size rule: a
 * sharded job that loses a replica loses that replica's slice of the
 * state, so rank 0 writes no checkpoint on its way out and the restart
 * resumes from the last periodic one, not the last whole step. */
#define SHARD_AUTO_BYTES ((int64_t)64 << 20)

/* rank q's slice of T floats: cut at multiples of 64 floats (256 bytes),
 * so every slice starts aligned as the whole and each float meets the
 * same vector code as in an unsharded update */
static void shard_bounds(int64_t T, int q, int64_t *lo, int64_t *hi)
{
    *lo = q == 0 ? 0 : (T * q / G.size) & ~(int64_t)63;
    *hi = q == G.size - 1 ? T : (T * (q + 1) / G.size) & ~(int64_t)63;
}

static int opt_slots(const rt_train_config *c)
{
    if (c->opt == RT_OPT_ADAM || c->opt == RT_OPT_ADAMW)
        return 2;
    if (c->opt == RT_OPT_RMSPROP)
        return 1;
    return c->momentum != 0.0f ? 1 : 0;
}

/* rank 0: whether program e's optimizer state is sharded */
static int shard_choice(rt_exec *e)
{
    if (G.size < 2 || G.size > 64 || G.o.shard == RT_DIST_SHARD_OFF)
        return 0;
    const rt_plan *p = rt_exec_plan(e);
    const int64_t T = (int64_t)rt_plan_report(p)->trainable_param_count;
    /* every slice holds floats (at least 64 a rank: cut at multiples of 64) */
    if (T > INT_MAX || T < 64 * G.size)
        return 0;
    if (G.o.shard == RT_DIST_SHARD_ON)
        return 1;
    const int s = opt_slots(rt_plan_config(p));
    return s > 0 && (int64_t)s * 4 * T * (G.size - 1) / G.size >= SHARD_AUTO_BYTES;
}

/* ----------------------------------------------------- graphs on workers */

/* worker: compile payload = rt_train_config | packed CompileRequest */
static int worker_compile(uint64_t id, int shard, const uint8_t *buf, size_t len, char *err,
                          size_t errlen)
{
    rt_train_config cfg;
    if (len < sizeof cfg)
        return RT_EINVAL;
    memcpy(&cfg, buf, sizeof cfg);
    Rtrain__V1__CompileRequest *q =
        rtrain__v1__compile_request__unpack(NULL, len - sizeof cfg, buf + sizeof cfg);
    if (!q) {
        snprintf(err, errlen, "the compile request does not decode");
        return RT_EINVAL;
    }
    rt_graph *g = NULL;
    int rc;
    if (q->model_case == RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON) {
        rc = rt_keras_import_bind(q->keras_json, strlen(q->keras_json), q->input_dims,
                                  (int)q->n_input_dims, q->input_values, &g, err, errlen, NULL,
                                  NULL);
    } else if (q->model_case == RTRAIN__V1__COMPILE_REQUEST__MODEL_ONNX) {
        rt_onnx_opts io = {.output = q->onnx_output};
        rc = rt_onnx_layout_from_name(q->data_layout, &io.data_nhwc);
        if (rc < 0)
            snprintf(err, errlen, "unknown data_layout");
        else
            rc = rt_onnx_import_opts(q->onnx.data, q->onnx.len, &io, &g, err, errlen);
    } else {
        /* rank 0 built and validated this graph with the same builder */
        g = rt_graph_create();
        rc = g ? rt_graph_import_pb(q->graph, NULL, g, err, errlen) : RT_ENOMEM;
        if (rc == RT_ENOMEM && (!g || !err[0]))
            snprintf(err, errlen, "out of memory");
    }
    /* the config's weight arrays pointed into rank 0's plan: here they are
     * the request's (rank 0 compiled from the same values) */
    const Rtrain__V1__TrainConfig *tc = q->config;
    if (rc == 0 && (cfg.n_class_weight != (tc ? (int)tc->n_class_weight : 0) ||
                    cfg.n_pos_weight != (tc ? (int)tc->n_pos_weight : 0))) {
        snprintf(err, errlen, "the compile request's loss weights differ from the config");
        rc = RT_EINVAL;
    }
    cfg.class_weight = cfg.n_class_weight ? tc->class_weight : NULL;
    cfg.pos_weight = cfg.n_pos_weight ? tc->pos_weight : NULL;
    rt_plan *p = NULL;
    rt_exec *e = NULL;
    if (rc == 0)
        rc = rt_plan_compile(g, &cfg, &p, NULL, err, errlen);
    rtrain__v1__compile_request__free_unpacked(q, NULL);
    rt_graph_destroy(g);
    ov_state *ov = NULL;
    if (rc == 0 && (rc = rt_exec_create(p, &e)) < 0)
        snprintf(err, errlen, "out of memory");
    if (rc == 0)
        rc = make_replica(e, &ov, shard, err, errlen);
    /* this rank's slice of the optimizer slots is all it keeps */
    if (rc == 0 && ov->sh && ov->cnt[G.rank] > 0)
        rc = rt_exec_shard_slots(e, ov->dsp[G.rank], ov->dsp[G.rank] + ov->cnt[G.rank]);
    if (rc == 0 && (rc = add_prog(id, e, p, ov)) < 0)
        snprintf(err, errlen, "out of memory");
    if (rc < 0) {
        free(ov);
        rt_exec_destroy(e);
        rt_plan_release(p);
    }
    return rc;
}

int rt_dist_program(rt_exec *e, const uint8_t *req, size_t len, char *err, size_t errlen)
{
    if (!G.on && G.o.micro <= 0)
        return 0;
    pthread_mutex_lock(&G.mu);
    int rc = 0;
    if (job_broken()) {
        rc = guard_broken(err, errlen);
        goto out;
    }
    ov_state *ov;
    const int shard = shard_choice(e);
    if ((rc = make_replica(e, &ov, shard, err, errlen)) < 0)
        goto out;
    if (shard) {
        const int64_t T = ov->T, s = opt_slots(rt_plan_config(rt_exec_plan(e)));
        RT_LOG(RT_LOG_INFO,
               "optimizer state sharded over %d replicas: %d of %lld floats a "
               "slot on rank 0, %lld bytes of state on rank 0, %lld on rank 1 (%lld unsharded)",
               G.size, ov->cnt[0], (long long)T, (long long)(s * 4 * ov->cnt[0]),
               (long long)(s * 4 * ov->cnt[1]), (long long)(s * 4 * T));
    }
    pthread_mutex_lock(&G.tab_mu);
    const uint64_t id = ++G.next_id;
    rc = add_prog(id, e, NULL, ov);
    pthread_mutex_unlock(&G.tab_mu);
    if (rc < 0) {
        free(ov);
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (G.size == 1)
        goto out;
    if ((rc = send_frees(err, errlen)) < 0)
        goto out;
    const rt_train_config *cfg = rt_plan_config(rt_exec_plan(e));
    uint8_t *pl = malloc(sizeof *cfg + len);
    if (!pl) {
        snprintf(err, errlen, "out of memory");
        rc = RT_ENOMEM;
        goto out;
    }
    memcpy(pl, cfg, sizeof *cfg);
    memcpy(pl + sizeof *cfg, req, len);
    cmd_hdr h = {.cmd = CMD_COMPILE, .prog = id, .len = sizeof *cfg + len, .shard = shard};
    rc = send_cmd(&h, "compile", err, errlen);
    if (rc == 0)
        rc = bcast(pl, (int64_t)h.len, "compile", err, errlen);
    free(pl);
    int fl[1] = {0};
    if (rc == 0)
        rc = flags_max(fl, 1, "compile", err, errlen);
    if (rc == 0 && fl[0]) {
        snprintf(err, errlen, "a replica could not compile the program (see its log)");
        rc = RT_EINTERNAL;
    }
    /* rank 0 too keeps only its slice, once the replicas have the state
     * it holds now (its first training call sends it) */
    if (rc == 0 && shard && (rc = rt_exec_shard_slots(e, ov->dsp[0], ov->dsp[0] + ov->cnt[0])) < 0)
        snprintf(err, errlen, "%s", rt_exec_errmsg(e));
out:
    if (rc < 0) {
        rt_exec_set_replica(e, NULL);
        pthread_mutex_lock(&G.tab_mu);
        prog_ent *p = find_exec(e);
        if (p)
            drop_prog(p);
        pthread_mutex_unlock(&G.tab_mu);
    }
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* ---------------------------------------------------------------- training */

typedef struct stop_ctx {
    rt_step_cb cb;
    void *ud;
    int failed;
} stop_ctx;

/* After each step rank 0's decision (a cancel, a stream gone) reaches
 * every replica, so all run the same steps. */
static int stop_cb(void *ud, const rt_step_info *info)
{
    stop_ctx *s = ud;
    if (G.rank == 0)
        tl_fetch = FETCH_STEP; /* a checkpoint in the callback */
    int stop = s->cb ? s->cb(s->ud, info) : 0;
    if (G.rank == 0)
        tl_fetch = FETCH_NONE;
    if (G.size == 1)
        return stop;
    char err[200];
    step_msg m = {.stop = stop, .op = STEP_END};
    for (;;) {
        if (bcast(&m, sizeof m, "step end", err, sizeof err) < 0) {
            s->failed = 1;
            return 1;
        }
        if (G.rank == 0 || m.op != STEP_FETCH)
            break;
        /* a worker: rank 0 writes a checkpoint and wants the slices */
        pthread_mutex_lock(&G.tab_mu);
        prog_ent *p = find_prog(m.prog);
        pthread_mutex_unlock(&G.tab_mu);
        if (!p || !p->ov || !p->ov->sh || slots_gather(p->e, p->ov, err, sizeof err) < 0) {
            RT_LOG(RT_LOG_ERROR, "replica %d: fetch of program %llu's slices: %s", G.rank,
                   (unsigned long long)m.prog, p ? err : "unknown program");
            s->failed = 1;
            return 1;
        }
    }
    return m.stop;
}

static void data_key(const rt_data *d, int64_t xf, int64_t yb, uint8_t out[16])
{
    XXH3_state_t *s = XXH3_createState();
    XXH3_128bits_reset(s);
    XXH3_128bits_update(s, &d->n, sizeof d->n);
    XXH3_128bits_update(s, d->x, sizeof(float) * (size_t)xf);
    if (d->y)
        XXH3_128bits_update(s, d->y, (size_t)yb);
    if (d->sw)
        XXH3_128bits_update(s, d->sw, sizeof(float) * (size_t)d->n);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(s));
    XXH3_freeState(s);
    memcpy(out, c.digest, 16);
}

/* the average of the non-trainable parameters (BatchNorm's moving
 * statistics), so every replica ends a call with rank 0's weights */
static int sync_frozen(rt_exec *e, char *err, size_t errlen)
{
    rt_plan *p = rt_exec_plan(e);
    for (int i = 0; i < rt_plan_n_params(p); i++) {
        const char *name;
        int64_t dims[RT_MAX_DIMS];
        int tr, nd = rt_plan_param_info(p, i, &name, dims, &tr);
        if (nd < 0 || tr)
            continue;
        int64_t n = 1;
        for (int k = 0; k < nd; k++)
            n *= dims[k];
        float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
        if (!v)
            return RT_ENOMEM;
        rt_exec_get_param(e, i, v);
        int rc = rt_dist_allreduce(v, n, err, errlen);
        if (rc == 0) {
            for (int64_t k = 0; k < n; k++)
                v[k] /= (float)G.size;
            rt_exec_set_param(e, i, v);
        }
        free(v);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* A streamed data set over the replicas. Only rank 0 holds the spool: for
 * each step it fills the whole batch with the data set's own fill (the
 * rows, order and augmentation one process would get) and MPI_Scatterv
 * hands every replica the rows of its shards, [nb*r*k/M, nb*(r+1)*k/M),
 * at their places in its batch buffer (rt_data.fill's replica rule).
 * Workers never receive the data set. A fill that fails on rank 0 (a
 * read error, an input that is no Embedding index) is broadcast first, so
 * every replica fails that step alike and the job goes on. */
typedef struct feed {
    rt_batch_fill fill; /* rank 0: the data set's */
    void *ud;
    rt_exec *e;
    int64_t xr, yr;      /* bytes of a row's inputs and labels */
    MPI_Datatype xt, yt; /* one row of each */
    int *cnt, *dsp;      /* rows per replica, and where they start */
} feed;

/* every rank, before the training command's collectives; 0 or RT_ENOMEM */
static int feed_init(feed *f, rt_exec *e, rt_batch_fill fill, void *ud)
{
    memset(f, 0, sizeof *f);
    f->fill = fill;
    f->ud = ud;
    f->e = e;
    int64_t dims[RT_MAX_DIMS], in = 1, ln = 1;
    rt_plan *p = rt_exec_plan(e);
    int nd = rt_plan_input_shape(p, dims);
    for (int k = 0; k < nd; k++)
        in *= dims[k];
    nd = rt_plan_label_shape(p, dims);
    for (int k = 0; k < nd; k++)
        ln *= dims[k];
    f->xr = 4 * in;
    f->yr = 4 * ln;
    f->cnt = malloc(2 * sizeof(int) * (size_t)G.size);
    if (!f->cnt || f->xr > INT_MAX || f->yr > INT_MAX ||
        MPI_Type_contiguous((int)f->xr, MPI_BYTE, &f->xt) != MPI_SUCCESS) {
        free(f->cnt);
        f->cnt = NULL;
        return RT_ENOMEM;
    }
    if (MPI_Type_contiguous((int)f->yr, MPI_BYTE, &f->yt) != MPI_SUCCESS) {
        MPI_Type_free(&f->xt);
        free(f->cnt);
        f->cnt = NULL;
        return RT_ENOMEM;
    }
    MPI_Type_commit(&f->xt);
    MPI_Type_commit(&f->yt);
    f->dsp = f->cnt + G.size;
    return 0;
}

static void feed_free(feed *f)
{
    if (!f->cnt)
        return;
    if (!job_broken()) { /* a broken job makes no MPI call but MPI_Abort */
        MPI_Type_free(&f->xt);
        MPI_Type_free(&f->yt);
    }
    free(f->cnt);
    f->cnt = NULL;
}

/* the batch's rows from rank 0 to their replicas: inputs, labels, weights */
static int feed_scatter(feed *f, float *x, void *y, float *w, int64_t nb, char *err, size_t errlen)
{
    const int M = G.o.micro > 0 ? G.o.micro : G.size, k = M / G.size;
    for (int r = 0; r < G.size; r++) {
        const int64_t lo = nb * r * k / M, hi = nb * (r + 1) * k / M;
        f->dsp[r] = (int)lo;
        f->cnt[r] = (int)(hi - lo);
    }
    const int64_t lo = f->dsp[G.rank];
    const int n = f->cnt[G.rank];
    int rc = guarded_scatterv((char *)x + lo * f->xr, f->cnt, f->dsp, n, f->xt, "batch rows", err,
                              errlen);
    if (rc == 0)
        rc = guarded_scatterv((char *)y + lo * f->yr, f->cnt, f->dsp, n, f->yt, "batch rows", err,
                              errlen);
    if (rc == 0 && w)
        rc = guarded_scatterv(w + lo, f->cnt, f->dsp, n, MPI_FLOAT, "batch rows", err, errlen);
    return rc;
}

/* rank 0's rt_batch_fill: the whole batch, checked, then every replica's
 * rows */
static int feed_root(void *ud, int64_t epoch, int64_t pos, int64_t nb, float *x, void *y, float *w,
                     char *err, size_t errlen)
{
    feed *f = ud;
    int rc = f->fill(f->ud, epoch, pos, nb, x, y, w, err, errlen);
    if (rc == 0 && (rc = rt_exec_check_rows(f->e, x, nb)) < 0) {
        char m[256];
        snprintf(m, sizeof m, "%s", rt_exec_errmsg(f->e));
        snprintf(err, errlen, "%s", m);
    }
    int32_t st = rc < 0 ? rc : 0;
    char berr[200];
    int brc = bcast(&st, sizeof st, "batch", berr, sizeof berr);
    if (brc < 0) {
        snprintf(err, errlen, "%s", berr);
        return brc;
    }
    return rc < 0 ? rc : feed_scatter(f, x, y, w, nb, err, errlen);
}

/* a worker's rt_batch_fill: its rows from rank 0 */
static int feed_worker(void *ud, int64_t epoch, int64_t pos, int64_t nb, float *x, void *y,
                       float *w, char *err, size_t errlen)
{
    (void)epoch;
    (void)pos;
    int32_t st = 0;
    int rc = bcast(&st, sizeof st, "batch", err, errlen);
    if (rc < 0)
        return rc;
    if (st < 0) {
        snprintf(err, errlen, "rank 0 could not fill the batch (see its error)");
        return st;
    }
    return feed_scatter(ud, x, y, w, nb, err, errlen);
}

/* --shard-data: an in-memory set that stays on rank 0. Its fill takes
 * the batch's rows in the order the exec takes an in-memory set's
 * (rt_exec_epoch_order), so the replicas train on the rows, in the order,
 * of one process and the weights stay those of --deterministic-reduce's
 * one process; feed_root then sends each replica its rows of the batch.
 * A worker keeps none of the set (before: a whole copy each). */
#define DATA_AUTO_BYTES ((int64_t)64 << 20)

typedef struct memfill {
    const rt_data *d;
    rt_exec *e;
    int64_t in, ln, B; /* floats of a row's inputs; labels; the batch */
    int64_t *perm;     /* the epoch's order */
    int64_t epoch;     /* perm's, -1 none */
} memfill;

static int memfill_rows(void *ud, int64_t epoch, int64_t pos, int64_t nb, float *x, void *y,
                        float *w, char *err, size_t errlen)
{
    memfill *m = ud;
    if (m->epoch != epoch) {
        rt_exec_epoch_order(m->e, m->d->n, epoch, m->perm);
        m->epoch = epoch;
    }
    const int64_t *idx = m->perm + pos * m->B;
    if (pos * m->B + nb > m->d->n) {
        snprintf(err, errlen, "batch %lld of %lld rows past the data set's %lld", (long long)pos,
                 (long long)nb, (long long)m->d->n);
        return RT_EINTERNAL;
    }
    if (m->d->aug.img) {
        /* augmented by rank 0's backend, with one process's draws */
        int rc = rt_exec_rows(m->e, m->d, idx, nb, x, m->d->y ? y : NULL);
        if (rc < 0) {
            snprintf(err, errlen, "%s", rt_exec_errmsg(m->e));
            return rc;
        }
        for (int64_t i = 0; w && m->d->sw && i < nb; i++)
            w[i] = m->d->sw[idx[i]];
        return 0;
    }
    for (int64_t i = 0; i < nb; i++) {
        const int64_t r = idx[i];
        memcpy(x + i * m->in, m->d->x + r * m->in, sizeof(float) * (size_t)m->in);
        if (y && m->d->y)
            memcpy((char *)y + i * m->ln * 4, (const char *)m->d->y + r * m->ln * 4,
                   (size_t)(m->ln * 4));
        if (w && m->d->sw)
            w[i] = m->d->sw[r];
    }
    return 0;
}

/* rank 0: whether an in-memory set of these bytes stays on rank 0 */
static int data_stays(int64_t bytes)
{
    return G.size > 1 && (G.o.data == RT_DIST_SHARD_ON ||
                          (G.o.data == RT_DIST_SHARD_AUTO && bytes >= DATA_AUTO_BYTES));
}

/* ------------------------------------------------------------- held sets
 *
 * --shard-data: an in-memory set is spread over the ranks when it is
 * uploaded (rt_dist_hold, the data layer's holder): rank r keeps rows
 * [n r/N, n (r+1)/N) and rank 0 nothing more, so a rank holds 1/N of its
 * inputs (the labels and sample weights, 4 bytes a value, stay whole:
 * rank 0's in its data set, a worker's sent with its first training call).
 * A training step takes the batch's rows in one process's epoch order
 * (rt_exec_epoch_order, computed on every rank): every rank sends each
 * other the rows it holds of that rank's shards (MPI_Alltoallv), so the
 * weights stay bit-identical to one process under --deterministic-reduce.
 * Evaluation and prediction on rank 0 read rows in order: a command asks
 * the workers for theirs (MPI_Gatherv). */

static int64_t blk(int64_t n, int q) { return n * q / G.size; }

/* the rank holding row r of a set of n */
static int owner(int64_t n, int64_t r)
{
    int q = (int)(r * G.size / n);
    while (q + 1 < G.size && blk(n, q + 1) <= r)
        q++;
    while (q > 0 && blk(n, q) > r)
        q--;
    return q;
}

/* rank 0: by the data layer's handle; a worker: by id (under tab_mu on 0) */
static held_ent *held_find(const void *pub, uint64_t id)
{
    for (held_ent *h = H.list; h; h = h->next)
        if ((pub && (const void *)&h->pub == pub) || (!pub && h->id == id))
            return h;
    return NULL;
}

static void held_free(held_ent *h)
{
    free(h->x);
    free(h->y);
    free(h->sw);
    free(h);
}

static void held_unlink(held_ent *h)
{
    for (held_ent **p = &H.list; *p; p = &(*p)->next)
        if (*p == h) {
            *p = h->next;
            return;
        }
}

/* one row of per floats (the caller frees it; MPI_BYTE-free: floats) */
static int row_type(int64_t per, MPI_Datatype *t)
{
    if (per < 1 || per > INT_MAX || MPI_Type_contiguous((int)per, MPI_FLOAT, t) != MPI_SUCCESS)
        return RT_EINVAL;
    MPI_Type_commit(t);
    return 0;
}

/* rt_held.release on rank 0: its block goes now, the workers' with the
 * next command */
static void held_release(rt_held *pub)
{
    held_ent *h = (held_ent *)pub;
    pthread_mutex_lock(&G.tab_mu);
    held_unlink(h);
    id_push(&H.drop, &H.n_drop, &H.cap_drop, h->id);
    pthread_mutex_unlock(&G.tab_mu);
    held_free(h);
}

/* rows [s, s + nb) of h over the ranks: counts and places in rows */
static void rows_split(const held_ent *h, int64_t s, int64_t nb, int *cnt, int *dsp)
{
    for (int q = 0; q < G.size; q++) {
        int64_t a = blk(h->n, q), b = blk(h->n, q + 1);
        if (a < s)
            a = s;
        if (b > s + nb)
            b = s + nb;
        cnt[q] = b > a ? (int)(b - a) : 0;
        dsp[q] = b > a ? (int)(a - s) : 0;
    }
}

/* rt_held.rows on rank 0: rows [s, s + nb) in order into x */
static int held_rows(rt_held *pub, int64_t s, int64_t nb, float *x, char *err, size_t errlen)
{
    held_ent *h = (held_ent *)pub;
    if (tl_fetch != FETCH_CMD) {
        snprintf(err, errlen, "a held data set's rows cannot be read inside a training call");
        return RT_EINTERNAL;
    }
    if (nb > INT_MAX) {
        snprintf(err, errlen, "%lld rows in one read", (long long)nb);
        return RT_ETOOBIG;
    }
    int cnt[65], dsp[65];
    rows_split(h, s, nb, cnt, dsp);
    if (cnt[0])
        memcpy(x + (int64_t)dsp[0] * h->per, h->x + (s + dsp[0] - h->lo) * h->per,
               sizeof(float) * (size_t)(cnt[0] * h->per));
    MPI_Datatype t;
    pthread_mutex_lock(&G.mu);
    int rc = job_broken() ? guard_broken(err, errlen) : send_frees(err, errlen);
    cmd_hdr c = {.cmd = CMD_ROWS, .prog = h->id, .gstep = s, .steps = nb};
    if (rc == 0)
        rc = send_cmd(&c, "rows", err, errlen);
    if (rc == 0 && (rc = row_type(h->per, &t)) == 0) {
        vargs a = {.rb = x, .rc = cnt, .rd = dsp, .typed = 1, .dt = t};
        rc = guarded_v(V_GATHERV, &a, "data rows", err, errlen);
        if (!job_broken())
            MPI_Type_free(&t);
    }
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* a worker's CMD_ROWS */
static int worker_rows(const cmd_hdr *c, char *err, size_t errlen)
{
    held_ent *h = held_find(NULL, c->prog);
    if (!h) {
        RT_LOG(RT_LOG_ERROR, "replica %d: no held data set %llu", G.rank,
               (unsigned long long)c->prog);
        job_abort();
    }
    int cnt[65], dsp[65];
    rows_split(h, c->gstep, c->steps, cnt, dsp);
    MPI_Datatype t;
    int rc = row_type(h->per, &t);
    if (rc < 0)
        job_abort();
    vargs a = {.sb = h->x + (c->gstep + dsp[G.rank] - h->lo) * h->per,
               .n = cnt[G.rank],
               .typed = 1,
               .dt = t};
    rc = guarded_v(V_GATHERV, &a, "data rows", err, errlen);
    if (!job_broken())
        MPI_Type_free(&t);
    return rc;
}

/* every rank: the block scatter of CMD_HOLD (rank 0 sends from x) */
static int hold_scatter(held_ent *h, const float *x, char *err, size_t errlen)
{
    int cnt[65], dsp[65];
    for (int q = 0; q < G.size; q++) {
        cnt[q] = (int)(blk(h->n, q + 1) - blk(h->n, q));
        dsp[q] = (int)blk(h->n, q);
    }
    MPI_Datatype t;
    int rc = row_type(h->per, &t);
    if (rc < 0) {
        snprintf(err, errlen, "a row of %lld floats is too long", (long long)h->per);
        return rc;
    }
    rc = guarded_scatterv(G.rank == 0 ? (void *)x : h->x, cnt, dsp, cnt[G.rank], t, "data rows",
                          err, errlen);
    if (!job_broken())
        MPI_Type_free(&t);
    return rc;
}

int rt_dist_hold(const float *x, int64_t n, int64_t per, int64_t bytes, struct rt_held **out,
                 char *err, size_t errlen)
{
    *out = NULL;
    /* rows counted in ints, a row one MPI type */
    if (!G.on || G.size < 2 || G.size > 64 || G.rank != 0 || !data_stays(bytes) || n < G.size ||
        n > INT_MAX || per < 1 || per > INT_MAX)
        return 0;
    if (tl_fetch != FETCH_CMD) {
        snprintf(err, errlen, "a data set cannot be spread over the replicas inside a call");
        return RT_EINTERNAL;
    }
    held_ent *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return RT_ENOMEM;
    }
    h->n = n;
    h->per = per;
    h->hi = blk(n, 1);
    h->x = malloc(sizeof(float) * (size_t)(h->hi * per));
    if (!h->x) {
        free(h);
        snprintf(err, errlen, "out of memory for rank 0's rows");
        return RT_ENOMEM;
    }
    memcpy(h->x, x, sizeof(float) * (size_t)(h->hi * per));
    h->pub = (rt_held){.rows = held_rows, .release = held_release};
    pthread_mutex_lock(&G.mu);
    int rc = job_broken() ? guard_broken(err, errlen) : send_frees(err, errlen);
    h->id = ++H.next_id;
    cmd_hdr c = {.cmd = CMD_HOLD, .prog = h->id, .n = n, .x_floats = per};
    if (rc == 0)
        rc = send_cmd(&c, "hold", err, errlen);
    if (rc == 0)
        rc = hold_scatter(h, x, err, errlen);
    pthread_mutex_unlock(&G.mu);
    if (rc < 0) {
        held_free(h);
        return rc;
    }
    pthread_mutex_lock(&G.tab_mu);
    h->next = H.list;
    H.list = h;
    pthread_mutex_unlock(&G.tab_mu);
    *out = &h->pub;
    return 0;
}

/* a worker's CMD_HOLD and CMD_UNHOLD */
static int worker_hold(const cmd_hdr *c, char *err, size_t errlen)
{
    held_ent *h = calloc(1, sizeof *h);
    if (!h)
        abort(); /* the job cannot go on without it: rank 0 sees a dead replica */
    h->id = c->prog;
    h->n = c->n;
    h->per = c->x_floats;
    h->lo = blk(h->n, G.rank);
    h->hi = blk(h->n, G.rank + 1);
    h->x = malloc(sizeof(float) * (size_t)((h->hi - h->lo) * h->per + 1));
    if (!h->x) {
        RT_LOG(RT_LOG_ERROR, "replica %d: out of memory for a data set's rows", G.rank);
        abort();
    }
    int rc = hold_scatter(h, NULL, err, errlen);
    if (rc < 0) {
        held_free(h);
        return rc;
    }
    h->next = H.list;
    H.list = h;
    return 0;
}

static void worker_unhold(uint64_t id)
{
    held_ent *h = held_find(NULL, id);
    if (!h)
        return;
    held_unlink(h);
    held_free(h);
}

/* A training call's fill over a held set, on every rank: this rank's rows
 * of the step's batch, from whichever rank holds them. */
typedef struct hfill {
    held_ent *h;
    rt_exec *e;
    const void *y;   /* the labels, whole; ln values of 4 bytes a row */
    const float *sw; /* sample weights, whole, or NULL */
    int64_t ln, B;
    int64_t *perm; /* the epoch's order */
    int64_t epoch; /* perm's, -1 none */
    MPI_Datatype t;
    int t_on;
    float *sbuf, *rbuf; /* rows out and in, B rows each */
} hfill;

static int hfill_init(hfill *f, held_ent *h, rt_exec *e, const void *y, const float *sw)
{
    memset(f, 0, sizeof *f);
    f->h = h;
    f->e = e;
    f->y = y;
    f->sw = sw;
    f->epoch = -1;
    int64_t dims[RT_MAX_DIMS], ln = 1;
    int nd = rt_plan_label_shape(rt_exec_plan(e), dims);
    for (int k = 0; k < nd; k++)
        ln *= dims[k];
    f->ln = ln;
    f->B = rt_plan_config(rt_exec_plan(e))->batch_size;
    f->perm = malloc(sizeof(int64_t) * (size_t)h->n);
    f->sbuf = malloc(sizeof(float) * (size_t)(f->B * h->per));
    f->rbuf = malloc(sizeof(float) * (size_t)(f->B * h->per));
    if (!f->perm || !f->sbuf || !f->rbuf || row_type(h->per, &f->t) < 0)
        return RT_ENOMEM;
    f->t_on = 1;
    return 0;
}

static void hfill_free(hfill *f)
{
    if (f->t_on && !job_broken())
        MPI_Type_free(&f->t);
    free(f->perm);
    free(f->sbuf);
    free(f->rbuf);
    memset(f, 0, sizeof *f);
}

static int held_train_fill(void *ud, int64_t epoch, int64_t pos, int64_t nb, float *x, void *y,
                           float *w, char *err, size_t errlen)
{
    hfill *f = ud;
    const held_ent *h = f->h;
    const int64_t n = h->n, per = h->per;
    if (epoch < 0 || pos < 0 || nb < 1 || nb > f->B || pos * f->B + nb > n) {
        snprintf(err, errlen, "batch %lld of %lld rows is outside the held data set",
                 (long long)pos, (long long)nb);
        return RT_EINTERNAL;
    }
    if (f->epoch != epoch) {
        rt_exec_epoch_order(f->e, n, epoch, f->perm);
        f->epoch = epoch;
    }
    const int64_t *idx = f->perm + pos * f->B;
    const int N = G.size, me = G.rank, M = G.o.micro > 0 ? G.o.micro : N, k = M / N;
    int sc[65] = {0}, sd[65], rc[65] = {0}, rd[65], cur[65];
    /* what every rank q needs that this one holds, and what this one needs */
    for (int q = 0; q < N; q++)
        for (int64_t i = nb * q * k / M; i < nb * (q + 1) * k / M; i++) {
            const int o = owner(n, idx[i]);
            if (o == me)
                sc[q]++;
            if (q == me)
                rc[o]++;
        }
    sd[0] = rd[0] = 0;
    for (int q = 1; q < N; q++) {
        sd[q] = sd[q - 1] + sc[q - 1];
        rd[q] = rd[q - 1] + rc[q - 1];
    }
    for (int q = 0; q < N; q++) {
        int c = sd[q];
        for (int64_t i = nb * q * k / M; i < nb * (q + 1) * k / M; i++)
            if (owner(n, idx[i]) == me)
                memcpy(f->sbuf + (int64_t)c++ * per, h->x + (idx[i] - h->lo) * per,
                       sizeof(float) * (size_t)per);
    }
    vargs a = {.sb = f->sbuf,
               .sc = sc,
               .sd = sd,
               .rb = f->rbuf,
               .rc = rc,
               .rd = rd,
               .typed = 1,
               .dt = f->t};
    int r = guarded_v(V_ALLTOALLV, &a, "batch rows", err, errlen);
    if (r < 0)
        return r;
    const int64_t lo = nb * me * k / M, hi = nb * (me + 1) * k / M;
    memcpy(cur, rd, sizeof cur);
    for (int64_t i = lo; i < hi; i++) {
        const int o = owner(n, idx[i]);
        memcpy(x + i * per, f->rbuf + (int64_t)cur[o]++ * per, sizeof(float) * (size_t)per);
        if (y && f->y)
            memcpy((char *)y + i * f->ln * 4, (const char *)f->y + idx[i] * f->ln * 4,
                   (size_t)(f->ln * 4));
        if (w && f->sw)
            w[i] = f->sw[idx[i]];
    }
    /* the rows' check (an Embedding's indices), agreed: every replica
     * fails the step alike */
    char m[200] = "";
    int bad[1] = {0};
    if (hi > lo && rt_exec_check_rows(f->e, x + lo * per, hi - lo) < 0) {
        bad[0] = 1;
        snprintf(m, sizeof m, "%s", rt_exec_errmsg(f->e));
    }
    if ((r = flags_max(bad, 1, "batch rows", err, errlen)) < 0)
        return r;
    if (bad[0]) {
        snprintf(err, errlen, "%s",
                 m[0] ? m
                      : "a replica's rows of the batch failed the "
                        "input check (see rank 0's error on the same data)");
        return RT_EDATA;
    }
    return 0;
}

/* every rank: the common part of a training call once data and state agree */
static int train_all(rt_exec *e, const rt_data *d, int64_t steps, rt_train_result *res,
                     rt_step_cb cb, void *ud, float *losses, char *err, size_t errlen)
{
    stop_ctx s = {.cb = cb, .ud = ud};
    C.active = 0; /* a step that failed before its finish left it set */
    int rc = rt_exec_train(e, d, steps, res, stop_cb, &s, losses);
    if (s.failed || job_broken())
        return guard_broken(err, errlen);
    if (rc < 0) {
        snprintf(err, errlen, "%s", rt_exec_errmsg(e));
        return rc;
    }
    if (G.size > 1 && (rc = sync_frozen(e, err, errlen)) < 0)
        return rc;
    return 0;
}

static int64_t y_bytes(const rt_data *d, rt_exec *e)
{
    if (!d->y)
        return 0;
    int64_t dims[RT_MAX_DIMS], ln = 1;
    int nd = rt_plan_label_shape(rt_exec_plan(e), dims);
    for (int k = 0; k < nd; k++)
        ln *= dims[k];
    return d->n * ln * 4;
}

int rt_dist_train(rt_exec *e, const rt_data *d, const uint8_t key[16], int64_t steps,
                  rt_train_result *res, rt_step_cb cb, void *ud, float *losses, char *err,
                  size_t errlen)
{
    pthread_mutex_lock(&G.tab_mu);
    prog_ent *pe = find_exec(e);
    const uint64_t id = pe ? pe->id : 0;
    pthread_mutex_unlock(&G.tab_mu);
    if (!id || G.size == 1) {
        int rc = rt_exec_train(e, d, steps, res, cb, ud, losses);
        if (rc < 0)
            snprintf(err, errlen, "%s", rt_exec_errmsg(e));
        return rc;
    }
    pthread_mutex_lock(&G.mu);
    tl_fetch = FETCH_NONE; /* this thread holds the collectives: no command */
    int rc = 0, sent = 0;
    void *st = NULL;
    feed f = {0};
    memfill mf = {0};
    hfill hf = {0};
    uint64_t edits = 0;
    if (job_broken()) {
        rc = guard_broken(err, errlen);
        goto out;
    }
    /* bad data fails here, before any replica starts */
    if ((rc = rt_exec_check_data(e, d)) < 0) {
        snprintf(err, errlen, "%s", rt_exec_errmsg(e));
        goto out;
    }
    if ((rc = send_frees(err, errlen)) < 0)
        goto out;
    int64_t in_dims[RT_MAX_DIMS], in = 1;
    int ind = rt_plan_input_shape(rt_exec_plan(e), in_dims);
    for (int k = 0; k < ind; k++)
        in *= in_dims[k];
    const int64_t yb = y_bytes(d, e);
    /* a set held by the replicas (rt_dist_hold) trains from their blocks */
    pthread_mutex_lock(&G.tab_mu);
    held_ent *he = d->fill ? held_find(d->fill_id, 0) : NULL;
    pthread_mutex_unlock(&G.tab_mu);
    /* an in-memory set that stays on rank 0 goes as a streamed one; so
     * does an augmented one (its images stay on rank 0, whose gather
     * augments each batch's rows) */
    const int kept =
        !d->fill && (d->aug.img != NULL || data_stays(4 * d->n * in + yb + (d->sw ? 4 * d->n : 0)));
    const int streamed = (d->fill != NULL && !he) || kept;
    rt_data fd = *d; /* a streamed set's batches go through feed_root */
    if (he) {
        if ((rc = hfill_init(&hf, he, e, d->y, d->sw)) < 0) {
            snprintf(err, errlen, "out of memory for a held data set's batches");
            goto out;
        }
        fd.fill = held_train_fill;
        fd.fill_ud = &hf;
    }
    if (kept) {
        int64_t ld[RT_MAX_DIMS], ln = 1;
        int lnd = rt_plan_label_shape(rt_exec_plan(e), ld);
        for (int k = 0; k < lnd; k++)
            ln *= ld[k];
        mf = (memfill){.d = d,
                       .e = e,
                       .in = in,
                       .ln = ln,
                       .epoch = -1,
                       .B = rt_plan_config(rt_exec_plan(e))->batch_size,
                       .perm = malloc(sizeof(int64_t) * (size_t)(d->n ? d->n : 1))};
        if (!mf.perm) {
            snprintf(err, errlen, "out of memory for the data set's order");
            rc = RT_ENOMEM;
            goto out;
        }
        fd.fill_id = d->x; /* the set's identity, as its x is for the exec */
        fd.fill_sw = d->sw != NULL;
    }
    if (streamed) {
        if ((rc = kept ? feed_init(&f, e, memfill_rows, &mf)
                       : feed_init(&f, e, d->fill, d->fill_ud)) < 0) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        fd.fill = feed_root;
        fd.fill_ud = &f;
    }
    cmd_hdr h = {.cmd = CMD_TRAIN,
                 .prog = id,
                 .steps = steps,
                 .n = d->n,
                 .y_dtype = (int32_t)d->y_dtype,
                 .has_sw = d->sw != NULL,
                 .streamed = streamed,
                 .fill_id = (uint64_t)(uintptr_t)fd.fill_id};
    h.x_floats = d->n * in;
    h.y_bytes = yb;
    h.held = he ? he->id : 0;
    key_ent *ke = NULL, fresh;
    for (int i = 0; key && !streamed && !he && i < G.n_keys; i++) {
        key_ent *k = &G.keys[i];
        if (!memcmp(k->key, key, 16) && k->x == d->x && k->y == d->y && k->sw == d->sw &&
            k->n == d->n)
            ke = k;
    }
    if (!ke && !streamed && !he) {
        ke = key ? &G.keys[G.n_keys < 8 ? G.n_keys++ : (int)(G.clock++ % 8)] : &fresh;
        *ke = (key_ent){.x = d->x, .y = d->y, .sw = d->sw, .n = d->n};
        if (key)
            memcpy(ke->key, key, 16);
        data_key(d, h.x_floats, h.y_bytes, ke->dkey);
    }
    if (ke)
        memcpy(h.dkey, ke->dkey, 16);
    /* The replicas agree on the state after a call that succeeded on all
     * (they ran the same steps); an edit on rank 0 since (SetWeights, a
     * checkpoint, a learning rate, also one made while that call ran) or
     * a replica at another step sends rank 0's. */
    edits = rt_exec_state_edits(e);
    pthread_mutex_lock(&G.tab_mu);
    pe = find_exec(e);
    h.send_state = !pe || pe->synced != edits;
    pthread_mutex_unlock(&G.tab_mu);
    h.gstep = rt_exec_global_step(e);
    h.overlap = G.o.overlap;
    h.gather = !rt_exec_slots_held(e);
    sent = 1;
    if ((rc = send_cmd(&h, "train", err, errlen)) < 0)
        goto out;
    /* data missing (a held set's: its labels), state differs, program
     * unknown, held set unknown */
    int need[4] = {0, 0, 0, 0};
    if ((rc = flags_max(need, 4, "train", err, errlen)) < 0)
        goto out;
    if (need[2] || need[3]) {
        snprintf(err, errlen, "a replica does not hold %s %llu", need[2] ? "program" : "data set",
                 need[2] ? (unsigned long long)id : (unsigned long long)h.held);
        rc = RT_EINTERNAL;
        goto out;
    }
    if (need[0] && he) {
        if ((rc = bcast((void *)d->y, h.y_bytes, "labels", err, errlen)) < 0 ||
            (d->sw && (rc = bcast((void *)d->sw, 4 * d->n, "labels", err, errlen)) < 0))
            goto out;
    } else if (need[0]) {
        if ((rc = bcast((void *)d->x, 4 * h.x_floats, "data", err, errlen)) < 0 ||
            (h.y_bytes && (rc = bcast((void *)d->y, h.y_bytes, "data", err, errlen)) < 0) ||
            (d->sw && (rc = bcast((void *)d->sw, 4 * d->n, "data", err, errlen)) < 0))
            goto out;
        int bad[1] = {0};
        if ((rc = flags_max(bad, 1, "data", err, errlen)) < 0)
            goto out;
        if (bad[0]) {
            snprintf(err, errlen, "a replica received the data set with another content hash");
            rc = RT_EINTERNAL;
            goto out;
        }
    }
    if (need[1]) {
        const size_t sn = rt_exec_state_size(e);
        if (!(st = malloc(sn))) {
            /* the replicas wait for it: the job cannot go on */
            RT_LOG(RT_LOG_ERROR, "out of memory for a program's state");
            job_abort();
        }
        /* a sharded state: the workers' slices first (the header said so) */
        tl_fetch = h.gather ? FETCH_TRAIN : FETCH_NONE;
        rc = rt_exec_save_state(e, st, sn);
        tl_fetch = FETCH_NONE;
        if (rc < 0) {
            /* the replicas wait for it, and a failed gather broke the job */
            if (!job_broken()) {
                RT_LOG(RT_LOG_ERROR, "cannot read a program's state: %s", rt_exec_errmsg(e));
                job_abort();
            }
            snprintf(err, errlen, "%s", rt_exec_errmsg(e));
            goto out;
        }
        if ((rc = bcast(st, (int64_t)sn, "state", err, errlen)) < 0)
            goto out;
    }
    pthread_mutex_lock(&G.tab_mu);
    pe = find_exec(e);
    ov_state *pov = pe ? pe->ov : NULL;
    pthread_mutex_unlock(&G.tab_mu);
    rc = train_all(e, &fd, steps, res, cb, ud, losses, err, errlen);
    /* a slice of the optimizer state went with a lost replica: rank 0's
     * is not whole, so no checkpoint of it (the restart resumes from the
     * last one) */
    if (rc < 0 && pov && pov->sh && job_broken()) {
        rt_exec_set_torn(e);
        RT_LOG(RT_LOG_ERROR,
               "sharded optimizer state lost with the job: no checkpoint of "
               "this program after step %lld",
               (long long)h.gstep);
    }
out:
    feed_free(&f);
    hfill_free(&hf);
    free(mf.perm);
    free(st);
    pthread_mutex_lock(&G.tab_mu);
    if (sent && (pe = find_exec(e)))
        pe->synced = rc == 0 ? edits : UINT64_MAX;
    pthread_mutex_unlock(&G.tab_mu);
    tl_fetch = FETCH_CMD;
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* ----------------------------------------------------------------- workers */

static wdata *find_data(const uint8_t key[16])
{
    for (int i = 0; i < MAX_DATA; i++)
        if (G.data[i].x && !memcmp(G.data[i].key, key, 16))
            return &G.data[i];
    return NULL;
}

static void free_data(wdata *w)
{
    free(w->x);
    free(w->y);
    free(w->sw);
    memset(w, 0, sizeof *w);
}

static int worker_train(const cmd_hdr *h, char *err, size_t errlen)
{
    pthread_mutex_lock(&G.tab_mu);
    prog_ent *pe = find_prog(h->prog);
    rt_exec *pex = pe ? pe->e : NULL;
    pthread_mutex_unlock(&G.tab_mu);
    /* a streamed set stays on rank 0: its rows come with each step; a
     * held one's are in the ranks' blocks, its labels come once */
    held_ent *he = h->held ? held_find(NULL, h->held) : NULL;
    wdata *w = h->streamed || h->held ? NULL : find_data(h->dkey);
    void *st = NULL;
    G.o.overlap = h->overlap;
    feed f = {0};
    hfill hf = {0};
    const int labels = he && (!he->y || he->y_bytes != h->y_bytes || he->y_dtype != h->y_dtype ||
                              (h->has_sw && !he->sw));
    int need[4] = {h->held ? labels : !w && !h->streamed,
                   h->send_state || (pex && rt_exec_global_step(pex) != h->gstep), !pe,
                   h->held && !he};
    int rc = flags_max(need, 4, "train", err, errlen);
    if (rc < 0 || need[2] || need[3])
        goto out;
    if (need[0] && he) {
        free(he->y);
        free(he->sw);
        he->sw = NULL;
        he->y = malloc((size_t)(h->y_bytes ? h->y_bytes : 1));
        if (h->has_sw)
            he->sw = malloc(4 * (size_t)(h->n ? h->n : 1));
        if (!he->y || (h->has_sw && !he->sw)) {
            RT_LOG(RT_LOG_ERROR, "replica %d: out of memory for a data set's labels", G.rank);
            abort(); /* as for a data set: rank 0 sees a dead replica */
        }
        he->y_bytes = h->y_bytes;
        he->y_dtype = h->y_dtype;
        if ((rc = bcast(he->y, h->y_bytes, "labels", err, errlen)) < 0 ||
            (h->has_sw && (rc = bcast(he->sw, 4 * h->n, "labels", err, errlen)) < 0)) {
            free(he->y);
            he->y = NULL; /* sent again next time */
            goto out;
        }
    } else if (need[0]) {
        wdata nw = {.n = h->n, .y_dtype = h->y_dtype};
        wdata *slot = w;
        memcpy(nw.key, h->dkey, 16);
        nw.x = malloc(4 * (size_t)(h->x_floats ? h->x_floats : 1));
        nw.y = h->y_bytes ? malloc((size_t)h->y_bytes) : NULL;
        nw.sw = h->has_sw ? malloc(4 * (size_t)(h->n ? h->n : 1)) : NULL;
        if (!nw.x || (h->y_bytes && !nw.y) || (h->has_sw && !nw.sw)) {
            RT_LOG(RT_LOG_ERROR, "replica %d: out of memory for a data set", G.rank);
            abort(); /* the job cannot go on without it: rank 0 sees a dead replica */
        }
        if ((rc = bcast(nw.x, 4 * h->x_floats, "data", err, errlen)) < 0 ||
            (h->y_bytes && (rc = bcast(nw.y, h->y_bytes, "data", err, errlen)) < 0) ||
            (h->has_sw && (rc = bcast(nw.sw, 4 * h->n, "data", err, errlen)) < 0)) {
            free_data(&nw);
            goto out;
        }
        rt_data dd = {
            .x = nw.x, .y = nw.y, .y_dtype = (rt_dtype)nw.y_dtype, .n = nw.n, .sw = nw.sw};
        uint8_t got[16];
        data_key(&dd, h->x_floats, h->y_bytes, got);
        int bad[1] = {memcmp(got, h->dkey, 16) != 0};
        if ((rc = flags_max(bad, 1, "data", err, errlen)) < 0 || bad[0]) {
            if (bad[0])
                RT_LOG(RT_LOG_ERROR, "replica %d: data set hash mismatch", G.rank);
            free_data(&nw);
            goto out;
        }
        if (!slot) {
            slot = &G.data[0];
            for (int i = 0; i < MAX_DATA; i++) {
                if (!G.data[i].x) {
                    slot = &G.data[i];
                    break;
                }
                if (G.data[i].used < slot->used)
                    slot = &G.data[i];
            }
            free_data(slot);
        }
        *slot = nw;
        w = slot;
    }
    if (w)
        w->used = ++G.clock;
    if (need[1] && h->gather && (rc = slots_gather(pex, pe->ov, err, errlen)) < 0)
        goto out;
    if (need[1]) {
        size_t n = rt_exec_state_size(pex);
        if (!(st = malloc(n))) {
            RT_LOG(RT_LOG_ERROR, "replica %d: out of memory for a program's state", G.rank);
            abort();
        }
        if ((rc = bcast(st, (int64_t)n, "state", err, errlen)) < 0)
            goto out;
        if ((rc = rt_exec_load_state(pex, st, n)) < 0) {
            RT_LOG(RT_LOG_ERROR, "replica %d: state: %s", G.rank, rt_exec_errmsg(pex));
            abort();
        }
    }
    rt_data dd;
    if (he) {
        if (hfill_init(&hf, he, pex, he->y, he->sw) < 0) {
            RT_LOG(RT_LOG_ERROR, "replica %d: out of memory for a held data set", G.rank);
            abort();
        }
        dd = (rt_data){.y_dtype = (rt_dtype)h->y_dtype,
                       .n = h->n,
                       .fill = held_train_fill,
                       .fill_ud = &hf,
                       .fill_id = he,
                       .fill_sw = h->has_sw};
    } else if (h->streamed) {
        if (feed_init(&f, pex, NULL, NULL) < 0) {
            RT_LOG(RT_LOG_ERROR, "replica %d: out of memory for a streamed data set", G.rank);
            abort(); /* as for a data set: rank 0 sees a dead replica */
        }
        dd = (rt_data){.y_dtype = (rt_dtype)h->y_dtype,
                       .n = h->n,
                       .fill = feed_worker,
                       .fill_ud = &f,
                       .fill_id = (const void *)(uintptr_t)h->fill_id,
                       .fill_sw = h->has_sw};
    } else {
        dd = (rt_data){
            .x = w->x, .y = w->y, .y_dtype = (rt_dtype)w->y_dtype, .n = w->n, .sw = w->sw};
    }
    rt_train_result res;
    rc = train_all(pex, &dd, h->steps, &res, NULL, NULL, NULL, err, errlen);
out:
    feed_free(&f);
    hfill_free(&hf);
    free(st);
    return rc;
}

/* A broken worker: rank 0 ends the job once its stop has checkpointed
 * (the links); without a link to it, this rank ends the job. */
static void worker_broken(const char *err)
{
    RT_LOG(RT_LOG_ERROR, "replica %d: %s", G.rank, err);
    if (!L.on)
        job_abort();
    RT_LOG(RT_LOG_INFO, "replica %d: waiting for rank 0 to end the job", G.rank);
    for (;;)
        pause();
}

int rt_dist_worker(void)
{
    /* mpirun forwards SIGTERM/SIGINT to every rank: rank 0 drains its calls
     * and then ends the job (CMD_EXIT); a worker leaving first would fail
     * them. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    char err[256];
    for (;;) {
        cmd_hdr h;
        if (recv_cmd(&h, err, sizeof err) < 0)
            worker_broken(err);
        int rc = 0;
        err[0] = 0;
        switch (h.cmd) {
        case CMD_EXIT:
            link_stop();
            for (int i = 0; i < G.n_progs; i++) {
                rt_exec_destroy(G.progs[i].e);
                rt_plan_release(G.progs[i].plan);
            }
            for (int i = 0; i < MAX_DATA; i++)
                free_data(&G.data[i]);
            while (H.list)
                worker_unhold(H.list->id);
            while (G.n_progs)
                drop_prog(&G.progs[0]);
            free(G.progs);
            comm_stop();
            guard_stop();
            MPI_Comm_free(&G.comm);
            MPI_Finalize();
            return 0;
        case CMD_FREE: {
            prog_ent *p = find_prog(h.prog);
            if (p) {
                rt_exec_destroy(p->e);
                rt_plan_release(p->plan);
                drop_prog(p);
            }
            break;
        }
        case CMD_COMPILE: {
            uint8_t *pl = malloc(h.len ? h.len : 1);
            if (!pl)
                abort();
            rc = bcast(pl, (int64_t)h.len, "compile", err, sizeof err);
            int fl[1] = {0};
            if (rc == 0) {
                char cerr[256] = "";
                if (worker_compile(h.prog, h.shard, pl, h.len, cerr, sizeof cerr) < 0) {
                    RT_LOG(RT_LOG_ERROR, "replica %d: compile: %s", G.rank, cerr);
                    fl[0] = 1;
                }
                rc = flags_max(fl, 1, "compile", err, sizeof err);
            }
            free(pl);
            break;
        }
        case CMD_TRAIN: rc = worker_train(&h, err, sizeof err); break;
        case CMD_HOLD: rc = worker_hold(&h, err, sizeof err); break;
        case CMD_UNHOLD: worker_unhold(h.prog); break;
        case CMD_ROWS: rc = worker_rows(&h, err, sizeof err); break;
        case CMD_SLOTS: { /* rank 0 writes a checkpoint of a sharded state */
            prog_ent *p = find_prog(h.prog);
            if (!p || !p->ov || !p->ov->sh) {
                RT_LOG(RT_LOG_ERROR, "replica %d: no sharded program %llu", G.rank,
                       (unsigned long long)h.prog);
                job_abort();
            }
            rc = slots_gather(p->e, p->ov, err, sizeof err);
            break;
        }
        default: RT_LOG(RT_LOG_ERROR, "replica %d: unknown command %d", G.rank, h.cmd); job_abort();
        }
        if (rc < 0 && job_broken())
            worker_broken(err);
    }
}

void rt_dist_finalize(void)
{
    if (!G.on)
        return;
    pthread_mutex_lock(&G.mu);
    char err[200];
    if (job_broken()) {
        /* a replica is gone: a collective would wait for it forever */
        guard_broken(err, sizeof err);
        pthread_mutex_unlock(&G.mu);
        RT_LOG(RT_LOG_ERROR, "ending the MPI job: %s", err);
        job_abort();
        return;
    }
    pthread_mutex_unlock(&G.mu);
    link_ending();
    send_frees(err, sizeof err);
    cmd_hdr h = {.cmd = CMD_EXIT};
    if (G.size > 1 && send_cmd(&h, "exit", err, sizeof err) < 0) {
        RT_LOG(RT_LOG_ERROR, "ending the MPI job: %s", err);
        job_abort();
    }
    comm_stop();
    guard_stop();
    MPI_Comm_free(&G.comm);
    MPI_Finalize();
    link_stop();
    G.on = 0;
}
