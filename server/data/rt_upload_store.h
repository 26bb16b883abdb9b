/*
 * rt_upload_store.h - what broken uploads leave for a resume, and
 * FindDataset's probe table.
 *
 * A broken upload that declared its content hash leaves its bytes (an
 * opaque st with its free function) for --upload-keep-s, so that the same
 * upload resumes where it stopped. Its bytes stay charged: to the server's
 * uploads in flight (--max-upload-bytes: kept ones make room for new
 * uploads, oldest first, rt_upload_store_make_room) and to who's
 * RT_Q_UPLOAD_BYTES, given back when the entry is freed.
 *
 * The probe table maps a stored upload's probe key (rt_data_key of its
 * sample hash and parts) to its content key: a ring, newest over oldest.
 *
 * Locking: the store has its own mutex and calls nothing outside this file
 * while holding it, except freeing entries (st_free, the quota give-back);
 * a caller may hold its own lock around any call (server/rpc's up_mu is
 * taken before this one, never after).
 */
#ifndef RTRAIN_UPLOAD_STORE_H
#define RTRAIN_UPLOAD_STORE_H

#include <pthread.h>
#include <stdint.h>

#include "rt_principal.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_UPLOAD_PROBES 256 /* probe table entries */

typedef struct rt_upload_kept {
    struct rt_upload_kept *next;
    rt_principal *who;
    uint8_t key[16]; /* rt_data_key of the content hash and parts */
    uint64_t offset; /* stream bytes held */
    uint64_t bytes;  /* charged */
    uint64_t expires_ns;
    uint8_t probe[16]; /* rt_data_key of the header's sample hash and parts */
    int has_probe;
    void *st; /* the upload's data (its handler's) */
    void (*st_free)(void *st);
} rt_upload_kept;

typedef struct rt_upload_store {
    /* private */
    pthread_mutex_t mu;
    uint64_t keep_ns;
    rt_upload_kept *kept; /* newest first; short (bounded by --max-upload-bytes) */
    uint64_t kept_bytes;
    uint8_t probes[RT_UPLOAD_PROBES][2][16];
    int n_probes, probe_next;
} rt_upload_store;

void rt_upload_store_init(rt_upload_store *st, uint64_t keep_ms);
/* Frees every entry, giving back their charges. */
void rt_upload_store_fini(rt_upload_store *st);

/* Takes k (an entry of the same who and key is replaced); it expires
 * after keep_ms. */
void rt_upload_store_put(rt_upload_store *st, rt_upload_kept *k);
/* Remove and return who's entry for key, or NULL; the caller owns it and
 * its charges. */
rt_upload_kept *rt_upload_store_take(rt_upload_store *st, const rt_principal *who,
                                     const uint8_t key[16]);
/* Stream bytes held for who's key; 0 = none. */
uint64_t rt_upload_store_offset(rt_upload_store *st, const rt_principal *who,
                                const uint8_t key[16]);
/* Whether who has an entry whose header had this probe key. */
int rt_upload_store_has_probe(rt_upload_store *st, const rt_principal *who,
                              const uint8_t probe[16]);
/* Drop the oldest entry (of who, or anyone's when who is NULL). Returns 1
 * if one was dropped. */
int rt_upload_store_drop_one(rt_upload_store *st, const rt_principal *who);
/* Entries past their time go (as of now_ns). */
void rt_upload_store_expire(rt_upload_store *st, uint64_t now_ns);
/* A new reservation of bytes beside in_flight reserved ones under cap:
 * entries are dropped, oldest first, while they stand in its way. */
void rt_upload_store_make_room(rt_upload_store *st, uint64_t in_flight, uint64_t bytes,
                               uint64_t cap);
/* Bytes the entries hold. */
uint64_t rt_upload_store_bytes(rt_upload_store *st);
/* Free an entry taken with rt_upload_store_take, giving back its charges
 * (NULL is a no-op). */
void rt_upload_kept_free(rt_upload_kept *k);

void rt_upload_store_probe_put(rt_upload_store *st, const uint8_t probe[16], const uint8_t key[16]);
/* The content keys stored for probe (at most max); returns how many. */
int rt_upload_store_probe_keys(rt_upload_store *st, const uint8_t probe[16], uint8_t (*keys)[16],
                               int max);

#ifdef __cplusplus
}
#endif
#endif
