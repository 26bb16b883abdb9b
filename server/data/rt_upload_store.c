/* rt_upload_store.c - broken uploads kept for a resume, and the probe
 * table (rt_upload_store.h). */
#include "rt_upload_store.h"

#include <stdlib.h>
#include <string.h>

#include "rt_clock.h"

void rt_upload_store_init(rt_upload_store *st, uint64_t keep_ms)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_init(&st->mu, NULL);
    st->keep_ns = keep_ms * 1000000ull;
}

void rt_upload_store_fini(rt_upload_store *st)
{
    while (rt_upload_store_drop_one(st, NULL))
        ;
    pthread_mutex_destroy(&st->mu);
}

void rt_upload_kept_free(rt_upload_kept *k)
{
    if (!k)
        return;
    rt_principal_unreserve(k->who, RT_Q_UPLOAD_BYTES, k->bytes);
    k->st_free(k->st);
    free(k);
}

void rt_upload_store_put(rt_upload_store *st, rt_upload_kept *k)
{
    k->expires_ns = rt_now_ns() + st->keep_ns;
    rt_upload_kept *old = rt_upload_store_take(st, k->who, k->key);
    pthread_mutex_lock(&st->mu);
    k->next = st->kept;
    st->kept = k;
    st->kept_bytes += k->bytes;
    pthread_mutex_unlock(&st->mu);
    rt_upload_kept_free(old);
}

rt_upload_kept *rt_upload_store_take(rt_upload_store *st, const rt_principal *who,
                                     const uint8_t key[16])
{
    pthread_mutex_lock(&st->mu);
    rt_upload_kept *k = NULL;
    for (rt_upload_kept **pp = &st->kept; *pp; pp = &(*pp)->next)
        if ((*pp)->who == who && memcmp((*pp)->key, key, 16) == 0) {
            k = *pp;
            *pp = k->next;
            k->next = NULL;
            st->kept_bytes -= k->bytes;
            break;
        }
    pthread_mutex_unlock(&st->mu);
    return k;
}

uint64_t rt_upload_store_offset(rt_upload_store *st, const rt_principal *who, const uint8_t key[16])
{
    uint64_t off = 0;
    pthread_mutex_lock(&st->mu);
    for (rt_upload_kept *k = st->kept; k; k = k->next)
        if (k->who == who && memcmp(k->key, key, 16) == 0)
            off = k->offset;
    pthread_mutex_unlock(&st->mu);
    return off;
}

int rt_upload_store_has_probe(rt_upload_store *st, const rt_principal *who, const uint8_t probe[16])
{
    int found = 0;
    pthread_mutex_lock(&st->mu);
    for (rt_upload_kept *k = st->kept; k && !found; k = k->next)
        found = k->who == who && k->has_probe && memcmp(k->probe, probe, 16) == 0;
    pthread_mutex_unlock(&st->mu);
    return found;
}

int rt_upload_store_drop_one(rt_upload_store *st, const rt_principal *who)
{
    pthread_mutex_lock(&st->mu);
    rt_upload_kept **last = NULL;
    for (rt_upload_kept **pp = &st->kept; *pp; pp = &(*pp)->next)
        if (!who || (*pp)->who == who)
            last = pp;
    rt_upload_kept *k = last ? *last : NULL;
    if (k) {
        *last = k->next;
        st->kept_bytes -= k->bytes;
    }
    pthread_mutex_unlock(&st->mu);
    rt_upload_kept_free(k);
    return k != NULL;
}

void rt_upload_store_expire(rt_upload_store *st, uint64_t now)
{
    rt_upload_kept *gone = NULL;
    pthread_mutex_lock(&st->mu);
    for (rt_upload_kept **pp = &st->kept; *pp;) {
        rt_upload_kept *k = *pp;
        if (now >= k->expires_ns) {
            *pp = k->next;
            st->kept_bytes -= k->bytes;
            k->next = gone;
            gone = k;
        } else {
            pp = &k->next;
        }
    }
    pthread_mutex_unlock(&st->mu);
    while (gone) {
        rt_upload_kept *n = gone->next;
        rt_upload_kept_free(gone);
        gone = n;
    }
}

void rt_upload_store_make_room(rt_upload_store *st, uint64_t in_flight, uint64_t bytes,
                               uint64_t cap)
{
    pthread_mutex_lock(&st->mu);
    while (st->kept && (bytes > cap || in_flight + st->kept_bytes > cap - bytes)) {
        rt_upload_kept **pp = &st->kept;
        while ((*pp)->next)
            pp = &(*pp)->next;
        rt_upload_kept *k = *pp;
        *pp = NULL;
        st->kept_bytes -= k->bytes;
        rt_upload_kept_free(k);
    }
    pthread_mutex_unlock(&st->mu);
}

uint64_t rt_upload_store_bytes(rt_upload_store *st)
{
    pthread_mutex_lock(&st->mu);
    uint64_t b = st->kept_bytes;
    pthread_mutex_unlock(&st->mu);
    return b;
}

void rt_upload_store_probe_put(rt_upload_store *st, const uint8_t probe[16], const uint8_t key[16])
{
    pthread_mutex_lock(&st->mu);
    int i;
    for (i = 0; i < st->n_probes; i++)
        if (memcmp(st->probes[i][0], probe, 16) == 0 && memcmp(st->probes[i][1], key, 16) == 0)
            break;
    if (i == st->n_probes) { /* new: into the next slot, over the oldest */
        i = st->probe_next;
        st->probe_next = (st->probe_next + 1) % RT_UPLOAD_PROBES;
        if (st->n_probes < RT_UPLOAD_PROBES)
            st->n_probes++;
        memcpy(st->probes[i][0], probe, 16);
        memcpy(st->probes[i][1], key, 16);
    }
    pthread_mutex_unlock(&st->mu);
}

int rt_upload_store_probe_keys(rt_upload_store *st, const uint8_t probe[16], uint8_t (*keys)[16],
                               int max)
{
    int n = 0;
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < st->n_probes && n < max; i++)
        if (memcmp(st->probes[i][0], probe, 16) == 0)
            memcpy(keys[n++], st->probes[i][1], 16);
    pthread_mutex_unlock(&st->mu);
    return n;
}
