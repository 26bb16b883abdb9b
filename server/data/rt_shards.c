/* rt_shards.c - raw TFRecord shards by content, LRU under a byte cap. */
#include "rt_shards.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct shard {
    uint8_t key[16];
    uint8_t *p;
    uint64_t n;
    uint64_t used; /* LRU clock */
} shard;

struct rt_shard_cache {
    pthread_mutex_t mu;
    shard *v;
    size_t n, cap;
    uint64_t bytes, max_bytes, clock;
};

rt_shard_cache *rt_shard_cache_create(uint64_t max_bytes)
{
    rt_shard_cache *sc = calloc(1, sizeof *sc);
    if (sc) {
        pthread_mutex_init(&sc->mu, NULL);
        sc->max_bytes = max_bytes;
    }
    return sc;
}

void rt_shard_cache_destroy(rt_shard_cache *sc)
{
    if (!sc)
        return;
    for (size_t i = 0; i < sc->n; i++)
        free(sc->v[i].p);
    free(sc->v);
    pthread_mutex_destroy(&sc->mu);
    free(sc);
}

static shard *find_locked(rt_shard_cache *sc, const uint8_t key[16], uint64_t n)
{
    for (size_t i = 0; i < sc->n; i++)
        if (sc->v[i].n == n && memcmp(sc->v[i].key, key, 16) == 0) {
            sc->v[i].used = ++sc->clock;
            return &sc->v[i];
        }
    return NULL;
}

void rt_shard_cache_put(rt_shard_cache *sc, const uint8_t key[16], const uint8_t *p, size_t n)
{
    if (!sc || n == 0 || n > sc->max_bytes)
        return;
    pthread_mutex_lock(&sc->mu);
    if (find_locked(sc, key, n)) {
        pthread_mutex_unlock(&sc->mu);
        return;
    }
    while (sc->bytes + n > sc->max_bytes && sc->n) {
        size_t lru = 0;
        for (size_t i = 1; i < sc->n; i++)
            if (sc->v[i].used < sc->v[lru].used)
                lru = i;
        sc->bytes -= sc->v[lru].n;
        free(sc->v[lru].p);
        sc->v[lru] = sc->v[--sc->n];
    }
    if (sc->n == sc->cap) {
        size_t nc = sc->cap ? sc->cap * 2 : 16;
        shard *nv = realloc(sc->v, nc * sizeof *nv);
        if (!nv) {
            pthread_mutex_unlock(&sc->mu);
            return;
        }
        sc->v = nv;
        sc->cap = nc;
    }
    uint8_t *copy = malloc(n);
    if (copy) {
        memcpy(copy, p, n);
        shard *s = &sc->v[sc->n++];
        memcpy(s->key, key, 16);
        s->p = copy;
        s->n = n;
        s->used = ++sc->clock;
        sc->bytes += n;
    }
    pthread_mutex_unlock(&sc->mu);
}

int rt_shard_cache_has(rt_shard_cache *sc, const uint8_t key[16], uint64_t n)
{
    if (!sc)
        return 0;
    pthread_mutex_lock(&sc->mu);
    int h = find_locked(sc, key, n) != NULL;
    pthread_mutex_unlock(&sc->mu);
    return h;
}

int rt_shard_cache_copy(rt_shard_cache *sc, const uint8_t key[16], uint8_t *dst, uint64_t n)
{
    if (!sc)
        return -1;
    pthread_mutex_lock(&sc->mu);
    shard *s = find_locked(sc, key, n);
    if (s)
        memcpy(dst, s->p, n);
    pthread_mutex_unlock(&sc->mu);
    return s ? 0 : -1;
}

uint64_t rt_shard_cache_bytes(rt_shard_cache *sc)
{
    pthread_mutex_lock(&sc->mu);
    uint64_t b = sc->bytes;
    pthread_mutex_unlock(&sc->mu);
    return b;
}
