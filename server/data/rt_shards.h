/*
 * rt_shards.h - raw TFRecord shards kept by content on the daemon, so an
 * upload can name a shard the daemon already holds (by its XXH3-128)
 * instead of sending it again: adding a shard to a dataset sends one shard.
 *
 *     rt_shard_cache *sc = rt_shard_cache_create(1 << 30);
 *     rt_shard_cache_put(sc, hash, bytes, n);        // copies
 *     if (rt_shard_cache_copy(sc, hash, dst, n) == 0) ... // dst got the bytes
 *     rt_shard_cache_destroy(sc);
 *
 * The bytes are the shard file as uploaded (compressed if it was). Past
 * max_bytes the least recently used shards are dropped; a dropped shard is
 * simply sent again. Thread-safe.
 */
#ifndef RTRAIN_SHARDS_H
#define RTRAIN_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_shard_cache rt_shard_cache;

rt_shard_cache *rt_shard_cache_create(uint64_t max_bytes); /* NULL: out of memory */
void rt_shard_cache_destroy(rt_shard_cache *sc);           /* NULL is a no-op */

/* Keep a copy of n bytes under key (the XXH3-128 of the bytes); a shard
 * over max_bytes, or one already held, is not copied. */
void rt_shard_cache_put(rt_shard_cache *sc, const uint8_t key[16], const uint8_t *p, size_t n);
/* 1 when a shard of n bytes is held under key. */
int rt_shard_cache_has(rt_shard_cache *sc, const uint8_t key[16], uint64_t n);
/* Copy the shard into dst (n bytes): 0, or -1 when it is not held. */
int rt_shard_cache_copy(rt_shard_cache *sc, const uint8_t key[16], uint8_t *dst, uint64_t n);
uint64_t rt_shard_cache_bytes(rt_shard_cache *sc);

#ifdef __cplusplus
}
#endif
#endif
