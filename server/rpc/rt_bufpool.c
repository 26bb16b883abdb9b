/* rt_bufpool.c - upload buffers that keep their memory (rt_bufpool.h). */
#include "rt_bufpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rt_clock.h"

#define RT__BP_LARGE (8u << 20)
#define RT__BP_HDR 64 /* keeps the data 64-byte aligned */
#define RT__BP_MAX 16 /* idle mappings kept */
/* Unmapping frees the pages there and then: 1 GiB took 21 ms in huge
 * pages and 346 ms in 4 KiB pages (a loaded 2-vCPU host), and a failed
 * upload's buffer is given back where its call is freed, on a
 * completion-queue thread. Mappings this large go to the arena thread to
 * unmap instead. */
#define RT__BP_ASYNC (64u << 20)

/* A mapping waiting for the arena thread to unmap it: the link lives in
 * its first bytes. */
typedef struct bp_gone {
    struct bp_gone *next;
    size_t len;
} bp_gone;

typedef struct bp_hdr {
    size_t map_len; /* 0: malloc'ed */
    size_t asked;   /* bytes asked for: what the cap counts */
} bp_hdr;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the arena thread waits here for a shortfall */
    uint64_t cap, idle;
    uint64_t arena;         /* idle bytes the arena thread keeps faulted in */
    uint64_t prefaulted;    /* bytes it faulted in, ever */
    int busy;               /* uploads in flight: the thread waits for 0 */
    int thread;             /* started */
    bp_gone *gone;          /* for the arena thread to unmap */
    uint64_t unmapped;      /* bytes it unmapped, ever */
    void *maps[RT__BP_MAX]; /* idle mappings, oldest first */
    size_t lens[RT__BP_MAX];
    size_t asked[RT__BP_MAX]; /* their bp_hdr.asked: what P.idle sums */
    int n;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .cap = 0};

void rt_bufpool_set_cap(uint64_t cap)
{
    pthread_mutex_lock(&P.mu);
    P.cap = cap > P.arena ? cap : P.arena;
    pthread_mutex_unlock(&P.mu);
}

/* one of the pool's counters, read under its lock */
static uint64_t read_locked(const uint64_t *field)
{
    pthread_mutex_lock(&P.mu);
    uint64_t v = *field;
    pthread_mutex_unlock(&P.mu);
    return v;
}

uint64_t rt_bufpool_idle_bytes(void) { return read_locked(&P.idle); }

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* Remove idle entry i (P.mu held). */
static void drop_at(int i)
{
    size_t k = (size_t)(P.n - i - 1);
    memmove(P.maps + i, P.maps + i + 1, sizeof P.maps[0] * k);
    memmove(P.lens + i, P.lens + i + 1, sizeof P.lens[0] * k);
    memmove(P.asked + i, P.asked + i + 1, sizeof P.asked[0] * k);
    P.n--;
}

static void idle_add(void *m, size_t len, size_t asked, void **drop, size_t *dlen, int *nd);

/* Write-fault every page of [m, m + len) in: the kernel zeroes them here,
 * on the arena thread, instead of under an upload's copy. */
static void populate(void *m, size_t len)
{
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
    if (madvise(m, len, MADV_POPULATE_WRITE) == 0)
        return;
    for (size_t o = 0; o < len; o += 4096) /* older kernels: touch each page */
        ((volatile char *)m)[o] = 0;
}

/* A 2 MiB-aligned anonymous mapping of len bytes (a multiple of 2 MiB),
 * asked for huge pages, or NULL. */
static void *map_aligned(size_t len)
{
    size_t al = 2u << 20;
    char *m = mmap(NULL, len + al, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    size_t head = (al - (uintptr_t)m % al) % al;
    if (head)
        munmap(m, head);
    if (al - head)
        munmap(m + head + len, al - head);
    m += head;
#ifdef MADV_HUGEPAGE
    madvise(m, len, MADV_HUGEPAGE);
#endif
    return m;
}

/* Faulting memory in holds the process's mmap lock, which every mmap,
 * munmap and mprotect (malloc growing an arena) waits for. So the arena
 * thread goes in pieces of one huge page, each followed by a pause three
 * times as long (at least 0.1 ms): the lock is never held for long and
 * the thread takes about a quarter of a core. It runs at the normal
 * priority: at nice 19 on a busy host a piece took seconds of wall time
 * with the lock held, and a cq thread's malloc waited that long (a Control
 * call stalled for 4 s). */
#define RT__BP_PIECE (2u << 20)

static void pause_after(uint64_t t0)
{
    int64_t ns = (int64_t)(rt_now_ns() - t0);
    ns = 3 * (ns < 100000 ? 100000 : ns);
    struct timespec d = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    nanosleep(&d, NULL);
}

/* The arena thread: whenever the idle pool holds less than P.arena bytes
 * (at start, and after an upload took a buffer that no freed dataset gave
 * back), it maps the shortfall and faults it in (paced, above) and adds it
 * to the pool. An upload then finds memory whose first-touch cost was paid
 * off its critical path. */
/* Unmap what waits for it (P.mu held; dropped meanwhile). */
static void unmap_gone_locked(void)
{
    bp_gone *g = P.gone;
    P.gone = NULL;
    pthread_mutex_unlock(&P.mu);
    uint64_t bytes = 0;
    while (g) {
        bp_gone *next = g->next;
        size_t len = g->len;
        munmap(g, len);
        bytes += len;
        g = next;
    }
    pthread_mutex_lock(&P.mu);
    P.unmapped += bytes;
}

static void *arena_main(void *arg)
{
    (void)arg;
    /* Background work: woken when an upload ends, it must not preempt
     * the thread that answers that upload (SCHED_BATCH: no wake-up
     * preemption; it runs at its nice level, on the next free slice). */
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
    pthread_mutex_lock(&P.mu);
    for (;;) {
        while (!P.gone && (P.idle >= P.arena || P.busy))
            pthread_cond_wait(&P.cv, &P.mu);
        if (P.gone) {
            unmap_gone_locked();
            continue;
        }
        size_t short_by = (size_t)(P.arena - P.idle), len = round_up(short_by, 2u << 20);
        pthread_mutex_unlock(&P.mu);
        void *m = map_aligned(len);
        /* In paced pieces (above; len is a whole number of them), each
         * only while no upload runs: zeroing pages takes the CPU (and on a
         * VM the host's) that the upload needs. */
        for (size_t o = 0; m && o < len; o += RT__BP_PIECE) {
            pthread_mutex_lock(&P.mu);
            while (P.busy || P.gone) {
                if (P.gone)
                    unmap_gone_locked();
                else
                    pthread_cond_wait(&P.cv, &P.mu);
            }
            pthread_mutex_unlock(&P.mu);
            const uint64_t t0 = rt_now_ns();
            populate((char *)m + o, RT__BP_PIECE);
            pause_after(t0);
        }
        void *drop[RT__BP_MAX + 1];
        size_t dlen[RT__BP_MAX + 1];
        int nd = 0;
        pthread_mutex_lock(&P.mu);
        if (!m) {
            pthread_mutex_unlock(&P.mu);
            sleep(1); /* out of address space: try again later */
            pthread_mutex_lock(&P.mu);
            continue;
        }
        P.prefaulted += len;
        /* counted as the shortfall it fills: idle reaches the arena
         * exactly, under the cap, so nothing older is pushed out */
        idle_add(m, len, short_by, drop, dlen, &nd);
        pthread_mutex_unlock(&P.mu);
        for (int i = 0; i < nd; i++)
            munmap(drop[i], dlen[i]);
        pthread_mutex_lock(&P.mu);
    }
    return NULL;
}

int rt_bufpool_set_arena(uint64_t bytes)
{
    pthread_mutex_lock(&P.mu);
    P.arena = bytes;
    if (P.cap < bytes)
        P.cap = bytes;
    int rc = 0;
    if (bytes && !P.thread) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &a, arena_main, NULL) == 0 ? 0 : -1;
        pthread_attr_destroy(&a);
        P.thread = rc == 0;
    }
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.mu);
    return rc;
}

void rt_bufpool_busy(int delta)
{
    pthread_mutex_lock(&P.mu);
    P.busy += delta;
    int wake = !P.busy;
    pthread_mutex_unlock(&P.mu);
    /* after the unlock: the arena thread woken does not block on P.mu
     * while the caller (an upload's last step) still holds it */
    if (wake)
        pthread_cond_broadcast(&P.cv);
}

uint64_t rt_bufpool_unmapped_bytes(void) { return read_locked(&P.unmapped); }

/* Unmap what idle_add dropped (P.mu not held): large mappings by the
 * arena thread when it runs. */
static void unmap_dropped(void **drop, const size_t *dlen, int nd)
{
    for (int i = 0; i < nd; i++) {
        if (dlen[i] >= RT__BP_ASYNC) {
            pthread_mutex_lock(&P.mu);
            if (P.thread) {
                bp_gone *g = drop[i];
                g->next = P.gone;
                g->len = dlen[i];
                P.gone = g;
                pthread_cond_broadcast(&P.cv);
                pthread_mutex_unlock(&P.mu);
                continue;
            }
            pthread_mutex_unlock(&P.mu);
        }
        munmap(drop[i], dlen[i]);
    }
}

uint64_t rt_bufpool_prefaulted_bytes(void) { return read_locked(&P.prefaulted); }

void *rt_bufpool_get(size_t n)
{
    if (n + RT__BP_HDR < RT__BP_LARGE) {
        bp_hdr *h = aligned_alloc(RT__BP_HDR, round_up(RT__BP_HDR + (n ? n : 1), RT__BP_HDR));
        if (!h)
            return NULL;
        h->map_len = 0;
        return (char *)h + RT__BP_HDR;
    }
    size_t len = round_up(n + RT__BP_HDR, 2u << 20);
    /* The idle mapping nearest in size (the smallest that fits, else the
     * largest), resized to len: the pages it keeps are already touched. */
    void *m = NULL;
    size_t mlen = 0;
    pthread_mutex_lock(&P.mu);
    int best = -1;
    for (int i = 0; i < P.n; i++) {
        int fits = P.lens[i] >= len, bfits = best >= 0 && P.lens[best] >= len;
        if (best < 0 || (fits && (!bfits || P.lens[i] < P.lens[best])) ||
            (!fits && !bfits && P.lens[i] > P.lens[best]))
            best = i;
    }
    void *drop[RT__BP_MAX + 1];
    size_t dlen[RT__BP_MAX + 1] = {0};
    int nd = 0;
    if (best >= 0) {
        m = P.maps[best];
        mlen = P.lens[best];
        P.idle -= P.asked[best];
        drop_at(best);
        if (mlen > len && mlen - len >= RT__BP_LARGE) {
            /* Larger than needed (an arena's mapping): the rest stays
             * idle, its pages still faulted in. */
            idle_add((char *)m + len, mlen - len, mlen - len - RT__BP_HDR, drop, dlen, &nd);
            mlen = len;
        }
        if (P.arena)
            pthread_cond_broadcast(&P.cv);
    }
    pthread_mutex_unlock(&P.mu);
    unmap_dropped(drop, dlen, nd);
    if (m && mlen != len) {
        void *r = mremap(m, mlen, len, MREMAP_MAYMOVE);
        if (r == MAP_FAILED) {
            munmap(m, mlen);
            m = NULL;
        } else {
            m = r;
        }
    }
    if (!m) {
        m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
    }
#ifdef MADV_HUGEPAGE
    madvise(m, len, MADV_HUGEPAGE);
#endif
    ((bp_hdr *)m)->map_len = len;
    ((bp_hdr *)m)->asked = n;
    return (char *)m + RT__BP_HDR;
}

void rt_bufpool_put(void *p)
{
    if (!p)
        return;
    bp_hdr *h = (bp_hdr *)((char *)p - RT__BP_HDR);
    if (!h->map_len) {
        free(h);
        return;
    }
    size_t len = h->map_len, asked = h->asked;
    void *drop[RT__BP_MAX + 1];
    size_t dlen[RT__BP_MAX + 1] = {0};
    int nd = 0;
    pthread_mutex_lock(&P.mu);
    idle_add(h, len, asked, drop, dlen, &nd);
    pthread_mutex_unlock(&P.mu);
    unmap_dropped(drop, dlen, nd);
}

/* Keep mapping m idle (P.mu held); what must go is listed in drop for
 * munmap after the lock. */
static void idle_add(void *m, size_t len, size_t asked, void **drop, size_t *dlen, int *nd)
{
    if (asked > P.cap) {
        drop[*nd] = m;
        dlen[(*nd)++] = len;
        return;
    }
    /* Oldest first out, until this one fits under the cap. */
    while (P.n && (P.n == RT__BP_MAX || P.idle + asked > P.cap)) {
        drop[*nd] = P.maps[0];
        dlen[(*nd)++] = P.lens[0];
        P.idle -= P.asked[0];
        drop_at(0);
    }
    P.maps[P.n] = m;
    P.lens[P.n] = len;
    P.asked[P.n++] = asked;
    P.idle += asked;
}
