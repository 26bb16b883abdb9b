/*
 * rt_bufpool.h - upload buffers that keep their memory: a buffer a dataset
 * or a finished upload gives back stays mapped (up to a cap) and the next
 * large upload reuses it. Fresh anonymous memory costs its page faults and
 * zeroing on first touch, which on a VM can be the slowest step of an
 * upload (about 0.5 GB/s on this project's machines, against 7+ GB/s for
 * memory already touched); reused pages cost nothing.
 *
 *     rt_bufpool_set_cap(1ull << 30);     // once, at start; 0 = no pooling
 *     rt_bufpool_set_arena(256ull << 20); // keep 256 MiB faulted in (optional)
 *     uint8_t *b = rt_bufpool_get(n);     // n usable bytes, or NULL
 *     ...
 *     rt_bufpool_put(b);                  // NULL is a no-op
 *
 * Process-wide and thread-safe. Large buffers (8 MiB and up) are mappings
 * of their own, asked for huge pages, resized with mremap to fit a
 * request; small ones are malloc'ed. A buffer must go back through
 * rt_bufpool_put, never free(). The cap counts the bytes each idle buffer
 * was asked for (its mapping is up to 2 MiB larger: header and huge-page
 * rounding), so a cap of 1 GiB keeps a 1 GiB dataset's buffer.
 */
#ifndef RTRAIN_BUFPOOL_H
#define RTRAIN_BUFPOOL_H

#include <stddef.h>
#include <stdint.h>

void rt_bufpool_set_cap(uint64_t cap);
void *rt_bufpool_get(size_t n);
void rt_bufpool_put(void *p);
/* Bytes held idle in the pool, as asked for (for metrics and tests). */
uint64_t rt_bufpool_idle_bytes(void);
/* The upload arena: a background thread (lowest priority) keeps at least
 * bytes idle in the pool with their pages already faulted in, mapping and
 * faulting in the shortfall at start and after an upload took from it
 * (while no upload runs: rt_bufpool_busy); a buffer larger than asked is split and the rest stays idle. The
 * cap is raised to at least bytes. 0 stops refilling. Returns 0, or -1
 * if the thread could not start. */
int rt_bufpool_set_arena(uint64_t bytes);
/* An upload starts (+1) or ends (-1): the arena thread faults memory in
 * only while none runs, so its page zeroing stays off uploads' path. */
void rt_bufpool_busy(int delta);
/* Bytes the arena thread faulted in since start (for metrics and tests). */
uint64_t rt_bufpool_prefaulted_bytes(void);
/* With the arena thread running, a mapping of 64 MiB or more that leaves
 * the pool (a buffer given back over the cap, or pushed out by one) is
 * unmapped by that thread, not by the caller: freeing the pages of a
 * 4 GiB upload's buffer takes from tens of ms (huge pages) to over a
 * second (4 KiB pages), and buffers are given back on completion-queue
 * threads. Bytes it unmapped since start (for tests). */
uint64_t rt_bufpool_unmapped_bytes(void);

#endif
