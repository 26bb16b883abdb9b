/* rt_call.c - the call object below the transport and the scheduler:
 * its arena, its error, its state's moves (the table at rt_call_state in
 * rt_srv_impl.h), whether it was cancelled, and the server's count of
 * live calls. Nothing here names gRPC's calls or a handler: rt_srv.c,
 * rt_sched.c and the handlers all use it, it uses none of them. */
#include "rt_srv_core.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ arena */
static void *arena_alloc(void *ud, size_t n) { return rt_call_alloc((rt_call *)ud, n); }
static void arena_free(void *ud, void *p)
{
    (void)ud;
    (void)p;
}

void rt__call_arena_init(rt_call *c)
{
    c->alloc.alloc = arena_alloc;
    c->alloc.free = arena_free;
    c->alloc.allocator_data = c;
}

void rt__call_arena_free(rt_call *c)
{
    for (rt__arena_blk *b = c->arena, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    c->arena = NULL;
    if (c->charged) /* only large blocks are charged (rt_call_alloc) */
        rt_principal_unreserve(c->who, RT_Q_CALL_BYTES, c->charged);
    c->charged = 0;
}

void *rt_call_alloc(rt_call *c, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    rt__arena_blk *b = c->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 8192 ? n : 8192;
        /* Small blocks are not worth a lock; a large one is charged before
         * it exists. */
        if (cap >= RT__CALL_CHARGE_MIN &&
            rt_principal_reserve(c->who, RT_Q_CALL_BYTES, cap, c->alloc_err, sizeof c->alloc_err) <
                0)
            return NULL;
        rt__arena_blk *nb = malloc(sizeof *nb + cap);
        if (!nb) {
            if (cap >= RT__CALL_CHARGE_MIN)
                rt_principal_unreserve(c->who, RT_Q_CALL_BYTES, cap);
            return NULL;
        }
        if (cap >= RT__CALL_CHARGE_MIN)
            c->charged += cap;
        nb->cap = cap;
        nb->used = 0;
        /* A big one-off block goes behind the current one so the current
         * block's free space stays usable. */
        if (b && n > 8192) {
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            c->arena = nb;
        }
        b = nb;
    }
    void *p = b->mem + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *rt_call_strdup(rt_call *c, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = rt_call_alloc(c, n);
    if (d)
        memcpy(d, s, n);
    return d;
}

int rt_call_fail(rt_call *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->err = code < 0 ? code : RT_EINTERNAL;
    return c->err;
}

/* ------------------------------------------------------------ call state */
#define M(st) (1u << RT_CS_##st)
static const unsigned call_moves[RT_CS__COUNT] = {
    [RT_CS_POSTED] = M(HANDLING),
    [RT_CS_HANDLING] = M(RECEIVING) | M(HELD) | M(QUEUED) | M(RUNNING) | M(FINISHED),
    [RT_CS_RECEIVING] = M(HANDLING) | M(FINISHED),
    [RT_CS_HELD] = M(QUEUED) | M(RUNNING) | M(FINISHED),
    [RT_CS_QUEUED] = M(RUNNING) | M(FINISHED),
    [RT_CS_RUNNING] = M(FINISHED),
    [RT_CS_FINISHED] = 0,
};
#undef M

void rt__call_to(rt_call *c, rt_call_state to)
{
    rt_call_state from = __atomic_load_n(&c->state, __ATOMIC_RELAXED);
    if (!(call_moves[from] & (1u << to))) {
        static const char *const names[RT_CS__COUNT] = {"POSTED", "HANDLING", "RECEIVING", "HELD",
                                                        "QUEUED", "RUNNING",  "FINISHED"};
        RT_LOG(RT_LOG_ERROR, "%s: call state %s -> %s is not in the table", c->m->path, names[from],
               names[to]);
        assert(!"rt_call: a state move outside the table");
    }
    __atomic_store_n(&c->state, to, __ATOMIC_RELAXED);
}

int rt_call_is_cancelled(rt_call *c)
{
    return __atomic_load_n(&c->cancelled, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(&c->srv->hard_cancel, __ATOMIC_ACQUIRE);
}

int rt_srv_live_calls(rt_srv *s) { return __atomic_load_n(&s->live, __ATOMIC_ACQUIRE); }
