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
} bp_hdr;

static struct {
    pthread_mutex_t mu;
    uint64_t cap, idle;
    void *maps[RT__BP_MAX]; /* idle mappings, oldest first */
    size_t lens[RT__BP_MAX];
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

void *rt_bufpool_get(size_t n)
{
    if (n + RT__BP_HDR < RT__BP_LARGE) {
        bp_hdr *h = malloc(RT__BP_HDR + (n ? n : 1));
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
        P.idle -= mlen;
        memmove(P.maps + best, P.maps + best + 1, sizeof P.maps[0] * (size_t)(P.n - best - 1));
        memmove(P.lens + best, P.lens + best + 1, sizeof P.lens[0] * (size_t)(P.n - best - 1));
        P.n--;
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
    size_t len = h->map_len;
    void *drop[RT__BP_MAX + 1];
    size_t dlen[RT__BP_MAX + 1];
    int nd = 0;
    pthread_mutex_lock(&P.mu);
    if (len > P.cap) {
        drop[nd] = h;
        dlen[nd++] = len;
    } else {
        /* Oldest first out, until this one fits under the cap. */
        while (P.n && (P.n == RT__BP_MAX || P.idle + len > P.cap)) {
            drop[nd] = P.maps[0];
            dlen[nd++] = P.lens[0];
            P.idle -= P.lens[0];
            memmove(P.maps, P.maps + 1, sizeof P.maps[0] * (size_t)(P.n - 1));
            memmove(P.lens, P.lens + 1, sizeof P.lens[0] * (size_t)(P.n - 1));
            P.n--;
        }
        P.maps[P.n] = h;
        P.lens[P.n++] = len;
        P.idle += len;
    }
    pthread_mutex_unlock(&P.mu);
    for (int i = 0; i < nd; i++)
        munmap(drop[i], dlen[i]);
}
