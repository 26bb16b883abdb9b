/* test_bufpool.c - the daemon's upload buffer pool (server/rpc/rt_bufpool):
 * a buffer given back is kept (its memory already touched) and handed out
 * again, resized to the next request; the cap counts the bytes asked for,
 * so a buffer of exactly the cap is kept; over the cap or with no pooling
 * it is unmapped; the oldest idle buffer goes first; small buffers are
 * malloc'ed and never pooled; with the arena thread running, a mapping of
 * 64 MiB or more is unmapped by it, not by the thread that gives it back. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "itest_unit.h"
#include "rt_bufpool.h"

#define MiB (1ull << 20)

static int aligned64(const void *p) { return ((uintptr_t)p & 63) == 0; }

static void test_no_pooling(void)
{
    rt_bufpool_set_cap(0);
    uint8_t *b = rt_bufpool_get(16 * MiB);
    CHECK(b && aligned64(b), "get 16 MiB: %p", (void *)b);
    if (b) {
        memset(b, 0xab, 16 * MiB);
        CHECK(b[16 * MiB - 1] == 0xab, "last byte written");
    }
    rt_bufpool_put(b);
    CHECK(rt_bufpool_idle_bytes() == 0, "nothing kept with cap 0: %llu",
          (unsigned long long)rt_bufpool_idle_bytes());
    rt_bufpool_put(NULL);
}

/* A buffer of exactly the cap is kept, and the next request of its size
 * gets the same memory back with what was written in it (not fresh,
 * zeroed pages). */
static void test_exact_cap_kept_and_reused(void)
{
    rt_bufpool_set_cap(64 * MiB);
    uint8_t *b = rt_bufpool_get(64 * MiB);
    CHECK(b != NULL, "get 64 MiB");
    if (!b)
        return;
    for (size_t i = 0; i < 64 * MiB; i += 4096)
        b[i] = (uint8_t)(i >> 12);
    rt_bufpool_put(b);
    CHECK(rt_bufpool_idle_bytes() == 64 * MiB, "idle %llu, want 64 MiB",
          (unsigned long long)rt_bufpool_idle_bytes());
    uint8_t *c = rt_bufpool_get(64 * MiB);
    CHECK(c == b, "the kept buffer is handed out again (%p vs %p)", (void *)c, (void *)b);
    int same = 1;
    for (size_t i = 0; c && i < 64 * MiB; i += 4096)
        same &= c[i] == (uint8_t)(i >> 12);
    CHECK(c && same, "its pages still hold what was written");
    CHECK(rt_bufpool_idle_bytes() == 0, "taken out of the pool");
    rt_bufpool_put(c);
}

/* A smaller request takes the front of the idle buffer (22 MiB of its
 * 66 MiB mapping: header and 2 MiB rounding) and the rest stays idle,
 * still holding what was written (the same pages, not fresh ones); both
 * come back. Over the cap, a buffer is dropped. */
static void test_resize_and_over_cap(void)
{
    rt_bufpool_set_cap(64 * MiB);
    CHECK(rt_bufpool_idle_bytes() == 64 * MiB, "64 MiB idle from the test before");
    uint8_t *b = rt_bufpool_get(20 * MiB + 5);
    CHECK(b && aligned64(b), "get 20 MiB + 5");
    uint64_t rest = 44 * MiB - 64;
    CHECK(rt_bufpool_idle_bytes() == rest, "the rest of the mapping stays idle: %llu",
          (unsigned long long)rt_bufpool_idle_bytes());
    CHECK(b && b[4096] == 1 && b[8192] == 2, "the front holds what the test before wrote");
    uint8_t *r = rt_bufpool_get(rest);
    CHECK(b && r == b + 22 * MiB, "the rest is handed out next (%p, front %p)", (void *)r,
          (void *)b);
    CHECK(r && r[4096] == (uint8_t)((22 * MiB + 4096) >> 12),
          "the rest holds what was written: its pages were kept");
    CHECK(rt_bufpool_idle_bytes() == 0, "both taken: %llu",
          (unsigned long long)rt_bufpool_idle_bytes());
    rt_bufpool_put(r);
    if (b) {
        memset(b, 1, 20 * MiB + 5);
        rt_bufpool_put(b);
    }
    CHECK(rt_bufpool_idle_bytes() == rest + 20 * MiB + 5, "idle %llu",
          (unsigned long long)rt_bufpool_idle_bytes());
    uint8_t *big = rt_bufpool_get(80 * MiB);
    CHECK(big != NULL, "get 80 MiB");
    if (big)
        big[80 * MiB - 1] = 7;
    rt_bufpool_put(big);
    CHECK(rt_bufpool_idle_bytes() <= 64 * MiB, "over the cap: not kept (%llu idle)",
          (unsigned long long)rt_bufpool_idle_bytes());
}

/* Oldest out first: three 30 MiB buffers under a 64 MiB cap keep the
 * last two. */
static void test_oldest_out(void)
{
    /* empty the pool: take its one idle buffer, drop it with cap 0 */
    uint8_t *old = rt_bufpool_get(20 * MiB + 5);
    CHECK(old && rt_bufpool_idle_bytes() == 0, "pool emptied");
    rt_bufpool_set_cap(0);
    rt_bufpool_put(old);
    rt_bufpool_set_cap(64 * MiB);
    uint8_t *x = rt_bufpool_get(30 * MiB), *y = rt_bufpool_get(30 * MiB),
            *z = rt_bufpool_get(30 * MiB);
    CHECK(x && y && z, "three buffers");
    rt_bufpool_put(x);
    rt_bufpool_put(y);
    CHECK(rt_bufpool_idle_bytes() == 60 * MiB, "two kept: %llu",
          (unsigned long long)rt_bufpool_idle_bytes());
    rt_bufpool_put(z);
    CHECK(rt_bufpool_idle_bytes() == 60 * MiB, "the third pushes out the oldest: %llu",
          (unsigned long long)rt_bufpool_idle_bytes());
    uint8_t *v = rt_bufpool_get(30 * MiB), *w = rt_bufpool_get(30 * MiB);
    CHECK(v && w && v != w && (v == y || v == z) && (w == y || w == z),
          "the two kept are y and z (%p %p; x %p y %p z %p)", (void *)v, (void *)w, (void *)x,
          (void *)y, (void *)z);
    rt_bufpool_put(v);
    rt_bufpool_put(w);
}

/* The arena: a background thread keeps 32 MiB idle with its pages
 * already resident (mincore, before anything here touches them), and
 * refills it after a request takes from it. */
static int resident(const uint8_t *p, size_t n)
{
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
    size_t len = (size_t)((uintptr_t)p + n - a), pages = (len + 4095) / 4096;
    static unsigned char v[(64u << 20) / 4096];
    if (pages > sizeof v || mincore((void *)a, len, v) < 0)
        return 0;
    for (size_t i = 0; i < pages; i++)
        if (!(v[i] & 1))
            return 0;
    return 1;
}

static int wait_idle(uint64_t want)
{
    /* no time limit asserted: the thread paces itself (a quarter of a
     * core) and may share it on a busy machine; give up after a minute */
    for (int i = 0; i < 6000 && rt_bufpool_idle_bytes() < want; i++)
        usleep(10000);
    return rt_bufpool_idle_bytes() >= want;
}

static void test_arena(void)
{
    /* empty the pool (the tests before left untouched buffers idle) */
    uint8_t *held[64];
    int nh = 0;
    while (rt_bufpool_idle_bytes() && nh < 64)
        held[nh++] = rt_bufpool_get(8 * MiB);
    rt_bufpool_set_cap(0);
    for (int i = 0; i < nh; i++)
        rt_bufpool_put(held[i]);
    CHECK(rt_bufpool_idle_bytes() == 0, "pool emptied: %llu",
          (unsigned long long)rt_bufpool_idle_bytes());
    CHECK(rt_bufpool_set_arena(32 * MiB) == 0, "arena thread started");
    CHECK(wait_idle(32 * MiB), "32 MiB faulted in and idle: %llu",
          (unsigned long long)rt_bufpool_idle_bytes());
    CHECK(rt_bufpool_prefaulted_bytes() >= 32 * MiB, "prefaulted %llu",
          (unsigned long long)rt_bufpool_prefaulted_bytes());
    uint8_t *b = rt_bufpool_get(16 * MiB);
    CHECK(b && resident(b, 16 * MiB), "an upload buffer from the arena is already resident");
    CHECK(wait_idle(32 * MiB), "refilled after the take: %llu idle",
          (unsigned long long)rt_bufpool_idle_bytes());
    CHECK(rt_bufpool_prefaulted_bytes() >= 48 * MiB, "prefaulted %llu",
          (unsigned long long)rt_bufpool_prefaulted_bytes());
    rt_bufpool_put(b);
    rt_bufpool_set_arena(0);
}

/* Whether the page at p is no longer mapped (mincore fails ENOMEM). */
static int unmapped(const void *p)
{
    unsigned char v;
    void *a = (void *)((uintptr_t)p & ~(uintptr_t)4095);
    return mincore(a, 4096, &v) < 0 && errno == ENOMEM;
}

/* After test_arena: its thread runs (arena 0 now, so it faults nothing in). */
static void test_async_unmap(void)
{
    rt_bufpool_set_cap(0);
    uint64_t before = rt_bufpool_unmapped_bytes();
    /* under 64 MiB: unmapped by the caller, at once */
    uint8_t *s = rt_bufpool_get(16 * MiB);
    CHECK(s != NULL, "16 MiB");
    memset(s, 1, 16 * MiB);
    rt_bufpool_put(s);
    CHECK(unmapped(s) && rt_bufpool_unmapped_bytes() == before,
          "a 16 MiB buffer is unmapped by the caller");
    /* 80 MiB: handed to the arena thread, which unmaps all of it */
    uint8_t *b = rt_bufpool_get(80 * MiB);
    CHECK(b != NULL, "80 MiB");
    memset(b, 2, 80 * MiB);
    rt_bufpool_put(b);
    for (int i = 0; i < 6000 && rt_bufpool_unmapped_bytes() < before + 80 * MiB; i++)
        usleep(10000);
    CHECK(rt_bufpool_unmapped_bytes() >= before + 80 * MiB,
          "the arena thread unmapped the 80 MiB buffer: %llu bytes",
          (unsigned long long)(rt_bufpool_unmapped_bytes() - before));
    CHECK(unmapped(b) && unmapped(b + 80 * MiB - 1), "its first and last pages are gone");
}

static void test_small_not_pooled(void)
{
    rt_bufpool_set_cap(64 * MiB);
    uint64_t idle = rt_bufpool_idle_bytes();
    uint8_t *s = rt_bufpool_get(100);
    CHECK(s && aligned64(s), "small buffer");
    if (s)
        memset(s, 3, 100);
    rt_bufpool_put(s);
    CHECK(rt_bufpool_idle_bytes() == idle, "small buffers are freed, not pooled");
    uint8_t *e = rt_bufpool_get(0);
    CHECK(e != NULL, "zero bytes: a valid buffer");
    rt_bufpool_put(e);
    rt_bufpool_set_cap(0);
}

int main(void)
{
    RUN(test_no_pooling);
    RUN(test_exact_cap_kept_and_reused);
    RUN(test_resize_and_over_cap);
    RUN(test_oldest_out);
    RUN(test_small_not_pooled);
    RUN(test_arena);
    RUN(test_async_unmap);
    return itest_summary();
}
