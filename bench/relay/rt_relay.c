/* rt_relay.c - the latency-injecting TCP relay (see rt_relay.h for the
 * link model). One epoll thread; a timerfd armed at the earliest delivery
 * time; an eventfd to stop. */
#include "rt_relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define RELAY_READ_MAX (64 * 1024)

typedef struct relay_chunk {
    struct relay_chunk *next;
    uint64_t due_ns;
    size_t len, off;
    int eof;
    unsigned char data[];
} relay_chunk;

/* One direction of one connection: bytes read from side `from` are
 * written to the other side. */
typedef struct relay_dir {
    relay_chunk *head, *tail;
    uint64_t queued;
    uint64_t link_free_ns;   /* when the capped link finishes sending */
    uint64_t last_due_ns;    /* deliveries never go backwards */
    int read_eof;            /* the source is done (EOF read) */
    int wr_shut;             /* the EOF was delivered: shutdown(SHUT_WR) */
    int want_write;          /* the destination said EAGAIN */
    int paused;              /* queue over the cap: not reading */
} relay_dir;

typedef struct relay_conn relay_conn;

/* What an epoll event points at: one socket of one connection. */
typedef struct relay_end {
    relay_conn *c;
    int side;                /* 0 = client, 1 = target */
    int fd;
    uint32_t interest;
    int gone;                /* removed from epoll: done both ways */
} relay_end;

struct relay_conn {
    relay_conn *next, *prev;
    relay_end end[2];
    relay_dir dir[2];        /* dir[s] reads end[s], writes end[1 - s] */
    int connecting;          /* the target connect is in progress */
    uint64_t hold_until_ns;  /* emulated handshake: no byte arrives before */
};

struct rt_relay {
    rt_relay_config cfg;
    char target_str[256];
    char address[64];
    struct sockaddr_storage target;
    socklen_t target_len;
    int lfd, epfd, tfd, efd;
    uint64_t timer_armed_ns;
    relay_conn *conns;
    uint64_t rng;
    uint64_t queue_cap;
    pthread_t thread;
    int started;
    rt_relay_stats st;       /* fields updated with atomics */
};

/* Tags for the non-connection descriptors. */
static char tag_listen, tag_timer, tag_stop;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define ST_ADD(r, f, n) __atomic_add_fetch(&(r)->st.f, (n), __ATOMIC_RELAXED)
#define ST_SUB(r, f, n) __atomic_sub_fetch(&(r)->st.f, (n), __ATOMIC_RELAXED)

void rt_relay_config_init(rt_relay_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->listen = "127.0.0.1:0";
    cfg->seed = 0x5eed;
}

/* ------------------------------------------------------------- parsing */
static int split_hostport(const char *s, char *host, size_t hl, const char **port)
{
    const char *colon = strrchr(s, ':');
    if (!colon || !colon[1])
        return -1;
    const char *h = s;
    size_t n = (size_t)(colon - s);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= hl)
        return -1;
    memcpy(host, h, n);
    host[n] = 0;
    *port = colon + 1;
    return 0;
}

static int resolve(const char *s, int passive, struct sockaddr_storage *sa,
                   socklen_t *len)
{
    char host[200];
    const char *port;
    if (split_hostport(s, host, sizeof host, &port) < 0)
        return -1;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    if (getaddrinfo(host[0] ? host : NULL, port, &hints, &ai) != 0 || !ai)
        return -1;
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* ------------------------------------------------------------ the link */
static uint64_t rng_next(rt_relay *r)
{
    /* splitmix64: a fixed stream per seed, so runs are repeatable. */
    uint64_t z = (r->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* When a chunk of len bytes read now is delivered on the far side. */
static uint64_t due_time(rt_relay *r, relay_conn *c, relay_dir *d, size_t len,
                         uint64_t now)
{
    uint64_t start = now > d->link_free_ns ? now : d->link_free_ns;
    if (start < c->hold_until_ns)
        start = c->hold_until_ns;
    uint64_t tx = r->cfg.bandwidth_Bps
                      ? (uint64_t)((double)len * 1e9 / (double)r->cfg.bandwidth_Bps)
                      : 0;
    d->link_free_ns = start + tx;
    int64_t delay = (int64_t)r->cfg.delay_us * 1000;
    if (r->cfg.jitter_us) {
        uint64_t span = 2 * r->cfg.jitter_us * 1000 + 1;
        delay += (int64_t)(rng_next(r) % span) - (int64_t)r->cfg.jitter_us * 1000;
        if (delay < 0)
            delay = 0;
    }
    uint64_t due = d->link_free_ns + (uint64_t)delay;
    if (due < d->last_due_ns)
        due = d->last_due_ns;
    d->last_due_ns = due;
    return due;
}

static void update_interest(rt_relay *r, relay_end *e)
{
    relay_conn *c = e->c;
    relay_dir *rd = &c->dir[e->side], *wd = &c->dir[1 - e->side];
    uint32_t want = 0;
    if (e->gone)
        return;
    if (!rd->read_eof && !rd->paused && !c->connecting)
        want |= EPOLLIN;
    if (wd->want_write || (e->side == 1 && c->connecting))
        want |= EPOLLOUT;
    if (want == e->interest)
        return;
    struct epoll_event ev = {.events = want, .data.ptr = e};
    epoll_ctl(r->epfd, EPOLL_CTL_MOD, e->fd, &ev);
    e->interest = want;
}

static void conn_close(rt_relay *r, relay_conn *c)
{
    for (int s = 0; s < 2; s++) {
        if (c->end[s].fd >= 0) {
            if (!c->end[s].gone)
                epoll_ctl(r->epfd, EPOLL_CTL_DEL, c->end[s].fd, NULL);
            close(c->end[s].fd);
        }
        for (relay_chunk *k = c->dir[s].head, *n; k; k = n) {
            n = k->next;
            free(k);
        }
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        r->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
    ST_SUB(r, open, 1);
}

static int enqueue(rt_relay *r, relay_conn *c, int side, const void *buf, size_t n,
                   uint64_t now)
{
    relay_dir *d = &c->dir[side];
    relay_chunk *k = malloc(sizeof *k + n);
    if (!k)
        return -1;
    k->next = NULL;
    k->len = n;
    k->off = 0;
    k->eof = n == 0;
    if (n)
        memcpy(k->data, buf, n);
    k->due_ns = due_time(r, c, d, n, now);
    if (d->tail)
        d->tail->next = k;
    else
        d->head = k;
    d->tail = k;
    d->queued += n;
    if (d->queued >= r->queue_cap)
        d->paused = 1;
    return 0;
}

/* Read one chunk from side s. Returns -1 if the connection must close. */
static int on_readable(rt_relay *r, relay_conn *c, int s, uint64_t now)
{
    static __thread unsigned char buf[RELAY_READ_MAX];
    relay_dir *d = &c->dir[s];
    ssize_t n = read(c->end[s].fd, buf, sizeof buf);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (n == 0)
        d->read_eof = 1;
    return enqueue(r, c, s, buf, (size_t)n, now);
}

/* Deliver what is due in direction s. Returns -1 if the connection must
 * close. */
static int deliver(rt_relay *r, relay_conn *c, int s, uint64_t now)
{
    relay_dir *d = &c->dir[s];
    int fd = c->end[1 - s].fd;
    while (d->head && d->head->due_ns <= now && !d->want_write && !c->connecting) {
        relay_chunk *k = d->head;
        if (k->eof) {
            shutdown(fd, SHUT_WR);
            d->wr_shut = 1;
        } else {
            ssize_t w = send(fd, k->data + k->off, k->len - k->off, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EAGAIN || errno == EINTR) {
                    d->want_write = 1;
                    break;
                }
                return -1;
            }
            k->off += (size_t)w;
            d->queued -= (uint64_t)w;
            if (s == 0)
                ST_ADD(r, bytes_up, (uint64_t)w);
            else
                ST_ADD(r, bytes_down, (uint64_t)w);
            if (k->off < k->len) {
                d->want_write = 1;
                break;
            }
            ST_ADD(r, chunks, 1);
        }
        d->head = k->next;
        if (!d->head)
            d->tail = NULL;
        free(k);
    }
    if (d->paused && d->queued < r->queue_cap / 2)
        d->paused = 0;
    return 0;
}

static void accept_one(rt_relay *r, uint64_t now)
{
    int cfd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0)
        return;
    int tfd = socket(r->target.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    relay_conn *c = tfd >= 0 ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        if (tfd >= 0)
            close(tfd);
        close(cfd);
        return;
    }
    int one = 1;
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(tfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ST_ADD(r, connections, 1);
    ST_ADD(r, open, 1);
    c->next = r->conns;
    if (r->conns)
        r->conns->prev = c;
    r->conns = c;
    /* A real link spends one round trip on the TCP handshake before the
     * client's first byte can leave. */
    c->hold_until_ns = now + 2 * r->cfg.delay_us * 1000;
    for (int s = 0; s < 2; s++) {
        c->end[s].c = c;
        c->end[s].side = s;
        c->end[s].fd = s ? tfd : cfd;
        c->end[s].interest = 0;
        struct epoll_event ev = {.events = 0, .data.ptr = &c->end[s]};
        epoll_ctl(r->epfd, EPOLL_CTL_ADD, c->end[s].fd, &ev);
    }
    if (connect(tfd, (struct sockaddr *)&r->target, r->target_len) < 0 &&
        errno != EINPROGRESS) {
        ST_ADD(r, refused, 1);
        conn_close(r, c);
        return;
    }
    c->connecting = 1;
    update_interest(r, &c->end[0]);
    update_interest(r, &c->end[1]);
}

static void arm_timer(rt_relay *r)
{
    uint64_t next = UINT64_MAX;
    for (relay_conn *c = r->conns; c; c = c->next)
        for (int s = 0; s < 2; s++) {
            relay_dir *d = &c->dir[s];
            if (d->head && !d->want_write && !c->connecting && d->head->due_ns < next)
                next = d->head->due_ns;
        }
    if (next == r->timer_armed_ns)
        return;
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (next != UINT64_MAX) {
        its.it_value.tv_sec = (time_t)(next / 1000000000ull);
        its.it_value.tv_nsec = (long)(next % 1000000000ull);
        if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
            its.it_value.tv_nsec = 1;
    }
    timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    r->timer_armed_ns = next;
}

/* Deliver everything due, update interests, close finished connections. */
static void sweep(rt_relay *r, uint64_t now)
{
    for (relay_conn *c = r->conns, *n; c; c = n) {
        n = c->next;
        int bad = 0;
        for (int s = 0; s < 2 && !bad; s++)
            bad = deliver(r, c, s, now) < 0;
        if (bad || (c->dir[0].wr_shut && c->dir[1].wr_shut)) {
            conn_close(r, c);
            continue;
        }
        update_interest(r, &c->end[0]);
        update_interest(r, &c->end[1]);
    }
    arm_timer(r);
}

static void *relay_main(void *arg)
{
    rt_relay *r = arg;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(r->epfd, evs, 64, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        uint64_t now = mono_ns();
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &tag_stop)
                return NULL;
            if (p == &tag_listen) {
                accept_one(r, now);
                continue;
            }
            if (p == &tag_timer) {
                uint64_t x;
                (void)!read(r->tfd, &x, sizeof x);
                r->timer_armed_ns = 0;
                continue;
            }
            relay_end *e = p;
            relay_conn *c = e->c;
            /* A connection closed earlier in this batch: its ends were
             * freed, so the remaining events for it are skipped by
             * checking membership. */
            relay_conn *k = r->conns;
            while (k && k != c)
                k = k->next;
            if (!k)
                continue;
            uint32_t ev = evs[i].events;
            int bad = 0;
            if (e->side == 1 && c->connecting && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(e->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err) {
                    ST_ADD(r, refused, 1);
                    bad = 1;
                } else {
                    c->connecting = 0;
                }
            } else {
                relay_dir *rd = &c->dir[e->side], *wd = &c->dir[1 - e->side];
                if (ev & EPOLLOUT)
                    wd->want_write = 0;
                if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !rd->read_eof && !rd->paused)
                    bad = on_readable(r, c, e->side, now) < 0;
                /* HUP/ERR are reported whatever the interest: a socket done
                 * both ways leaves epoll, a reset one closes the pair. */
                if (!bad && (ev & (EPOLLHUP | EPOLLERR))) {
                    if (rd->read_eof && wd->wr_shut) {
                        epoll_ctl(r->epfd, EPOLL_CTL_DEL, e->fd, NULL);
                        e->interest = 0;
                        e->gone = 1;
                    } else if ((ev & EPOLLERR) || rd->read_eof || rd->paused) {
                        bad = 1;
                    }
                }
            }
            if (bad)
                conn_close(r, c);
        }
        sweep(r, mono_ns());
    }
    return NULL;
}

/* ------------------------------------------------------------ lifecycle */
int rt_relay_start(const rt_relay_config *cfg, rt_relay **out, char *err,
                   size_t errlen)
{
    *out = NULL;
    if (!cfg->target) {
        snprintf(err, errlen, "relay: no target");
        return -EINVAL;
    }
    rt_relay *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->cfg = *cfg;
    snprintf(r->target_str, sizeof r->target_str, "%s", cfg->target);
    r->cfg.target = r->target_str;
    r->cfg.listen = NULL;
    r->lfd = r->epfd = r->tfd = r->efd = -1;
    r->rng = cfg->seed;
    r->queue_cap = cfg->queue_bytes;
    if (!r->queue_cap)
        r->queue_cap = (4u << 20) + (uint64_t)((double)cfg->bandwidth_Bps *
                                               (double)cfg->delay_us * 1e-6);
    int rc = -EINVAL;
    if (resolve(cfg->target, 0, &r->target, &r->target_len) < 0) {
        snprintf(err, errlen, "relay: cannot resolve target '%.100s' (HOST:PORT)",
                 cfg->target);
        goto fail;
    }
    struct sockaddr_storage la;
    socklen_t ll;
    const char *laddr = cfg->listen ? cfg->listen : "127.0.0.1:0";
    if (resolve(laddr, 1, &la, &ll) < 0) {
        snprintf(err, errlen, "relay: cannot resolve listen address '%.100s'", laddr);
        goto fail;
    }
    r->lfd = socket(la.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (r->lfd >= 0)
        setsockopt(r->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&la, ll) < 0 ||
        listen(r->lfd, 128) < 0) {
        rc = -errno;
        snprintf(err, errlen, "relay: cannot listen on %.100s: %s", laddr, strerror(errno));
        goto fail;
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    getsockname(r->lfd, (struct sockaddr *)&bound, &bl);
    char host[INET6_ADDRSTRLEN] = "?"; /* the address fits r->address with its port */
    int port = 0;
    if (bound.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&bound;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
        snprintf(r->address, sizeof r->address, "%s:%d", host, port);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&bound;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
        snprintf(r->address, sizeof r->address, "[%s]:%d", host, port);
    }
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->epfd < 0 || r->tfd < 0 || r->efd < 0) {
        rc = -errno;
        snprintf(err, errlen, "relay: %s", strerror(errno));
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &tag_listen};
    epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->lfd, &ev);
    ev.data.ptr = &tag_timer;
    epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->tfd, &ev);
    ev.data.ptr = &tag_stop;
    epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->efd, &ev);
    if ((rc = -pthread_create(&r->thread, NULL, relay_main, r)) != 0) {
        snprintf(err, errlen, "relay: cannot start its thread");
        goto fail;
    }
    r->started = 1;
    *out = r;
    return 0;
fail:
    rt_relay_stop(r);
    return rc;
}

const char *rt_relay_address(const rt_relay *r) { return r->address; }

void rt_relay_get_stats(rt_relay *r, rt_relay_stats *st)
{
    st->connections = __atomic_load_n(&r->st.connections, __ATOMIC_RELAXED);
    st->open = __atomic_load_n(&r->st.open, __ATOMIC_RELAXED);
    st->bytes_up = __atomic_load_n(&r->st.bytes_up, __ATOMIC_RELAXED);
    st->bytes_down = __atomic_load_n(&r->st.bytes_down, __ATOMIC_RELAXED);
    st->chunks = __atomic_load_n(&r->st.chunks, __ATOMIC_RELAXED);
    st->refused = __atomic_load_n(&r->st.refused, __ATOMIC_RELAXED);
}

void rt_relay_stop(rt_relay *r)
{
    if (!r)
        return;
    if (r->started) {
        uint64_t one = 1;
        (void)!write(r->efd, &one, sizeof one);
        pthread_join(r->thread, NULL);
    }
    while (r->conns)
        conn_close(r, r->conns);
    if (r->lfd >= 0)
        close(r->lfd);
    if (r->epfd >= 0)
        close(r->epfd);
    if (r->tfd >= 0)
        close(r->tfd);
    if (r->efd >= 0)
        close(r->efd);
    free(r);
}
