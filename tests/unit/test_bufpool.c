/* test_bufpool.c - the daemon's upload buffer pool (server/rpc/rt_bufpool):
 * a buffer given back is kept (its memory already touched) and handed out
 * again, resized to the next request; the cap counts the bytes asked for,
 * so a buffer of exactly the cap is kept; over the cap or with no pooling
 * it is unmapped; the oldest idle buffer goes first; small buffers are
 * malloc'ed and never pooled. */
#include <stdint.h>
#include <string.h>

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

/* A smaller request reuses the idle buffer, shrunk; the pool then counts
 * the new size. Over the cap, a buffer is dropped. */
static void test_resize_and_over_cap(void)
{
    rt_bufpool_set_cap(64 * MiB);
    CHECK(rt_bufpool_idle_bytes() == 64 * MiB, "64 MiB idle from the test before");
    uint8_t *b = rt_bufpool_get(20 * MiB + 5);
    CHECK(b && aligned64(b), "get 20 MiB + 5");
    CHECK(rt_bufpool_idle_bytes() == 0, "the idle buffer was taken: %llu",
          (unsigned long long)rt_bufpool_idle_bytes());
    if (b) {
        memset(b, 1, 20 * MiB + 5);
        rt_bufpool_put(b);
    }
    CHECK(rt_bufpool_idle_bytes() == 20 * MiB + 5, "idle %llu",
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
    return itest_summary();
}
