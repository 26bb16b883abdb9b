/* rt_bufpool.c - upload buffers that keep their memory (rt_bufpool.h). */
#include "rt_bufpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define RT__BP_LARGE (8u << 20)
#define RT__BP_HDR 64 /* keeps the data 64-byte aligned */
#define RT__BP_MAX 16 /* idle mappings kept */

typedef struct bp_hdr {
    size_t map_len; /* 0: malloc'ed */
    size_t asked;   /* bytes asked for: what the cap counts */
} bp_hdr;

static struct {
    pthread_mutex_t mu;
    uint64_t cap, idle;
    void *maps[RT__BP_MAX]; /* idle mappings, oldest first */
    size_t lens[RT__BP_MAX];
    size_t asked[RT__BP_MAX]; /* their bp_hdr.asked: what P.idle sums */
    int n;
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .cap = 0};

void rt_bufpool_set_cap(uint64_t cap)
{
    pthread_mutex_lock(&P.mu);
    P.cap = cap;
    pthread_mutex_unlock(&P.mu);
}

uint64_t rt_bufpool_idle_bytes(void)
{
    pthread_mutex_lock(&P.mu);
    uint64_t v = P.idle;
    pthread_mutex_unlock(&P.mu);
    return v;
}

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
    if (best >= 0) {
        m = P.maps[best];
        mlen = P.lens[best];
        P.idle -= P.asked[best];
        drop_at(best);
    }
    pthread_mutex_unlock(&P.mu);
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
    size_t dlen[RT__BP_MAX + 1];
    int nd = 0;
    pthread_mutex_lock(&P.mu);
    if (asked > P.cap) {
        drop[nd] = h;
        dlen[nd++] = len;
    } else {
        /* Oldest first out, until this one fits under the cap. */
        while (P.n && (P.n == RT__BP_MAX || P.idle + asked > P.cap)) {
            drop[nd] = P.maps[0];
            dlen[nd++] = P.lens[0];
            P.idle -= P.asked[0];
            drop_at(0);
        }
        P.maps[P.n] = h;
        P.lens[P.n] = len;
        P.asked[P.n++] = asked;
        P.idle += asked;
    }
    pthread_mutex_unlock(&P.mu);
    for (int i = 0; i < nd; i++)
        munmap(drop[i], dlen[i]);
}
