/* test_session.c - sessions and the program (plan) cache, linked directly
 * (server/session): reference counts, closing a session a call still holds,
 * the session limit, idle expiry (never of a session in use), and the
 * cache's dedup of racing compiles and LRU eviction.
 *
 * Plan references are counted by wrapping rt_plan_retain/rt_plan_release at
 * link time (-Wl,--wrap): every retain and release the session module, the
 * cache or this test makes passes through the counters below, so each check
 * states exactly how many references a plan has. */
#include <string.h>

#include "itest_unit.h"
#include "rt_session.h"
#include "rt_program_impl.h"
#include "rt_wire.h"

void __real_rt_plan_retain(rt_plan *p);
void __real_rt_plan_release(rt_plan *p);

#define MAX_TRACK 8
static struct {
    rt_plan *p;
    int refs;
} track[MAX_TRACK];

static int *refs_of(rt_plan *p)
{
    for (int i = 0; i < MAX_TRACK; i++)
        if (track[i].p == p)
            return &track[i].refs;
    return NULL;
}

void __wrap_rt_plan_retain(rt_plan *p)
{
    int *r = refs_of(p);
    if (r)
        ++*r;
    __real_rt_plan_retain(p);
}

void __wrap_rt_plan_release(rt_plan *p)
{
    int *r = p ? refs_of(p) : NULL;
    if (r)
        --*r;
    __real_rt_plan_release(p);
}

static int refs(rt_plan *p)
{
    int *r = refs_of(p);
    return r ? *r : -1;
}

/* A small compiled plan (Dense 4->units), refcount 1, tracked. */
static rt_plan *make_plan(int units)
{
    rt_graph *g = rt_graph_create();
    int64_t in[] = {RT_BATCH, 4}, w[] = {4, units}, b[] = {units};
    int rc = rt_graph_add_input(g, "x", RT_F32, 2, in);
    rc |= rt_graph_add_param(g, "d/kernel", 2, w, RT_INIT_GLOROT_UNIFORM, 1, NULL);
    rc |= rt_graph_add_param(g, "d/bias", 1, b, RT_INIT_ZEROS, 1, NULL);
    const char *din[] = {"x", "d/kernel", "d/bias"};
    rc |= rt_graph_add_node(g, "d", "Dense", 3, din, 0, NULL);
    rc |= rt_graph_set_output(g, "d");
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    cfg.loss = RT_LOSS_MSE;
    cfg.label_dtype = RT_F32;
    cfg.label_ndim = 1;
    cfg.label_dims[0] = units;
    cfg.metrics = 0;
    rt_plan *p = NULL;
    char err[256];
    if (!rc)
        rc = rt_plan_compile(g, &cfg, &p, NULL, err, sizeof err);
    rt_graph_destroy(g);
    CHECK(rc == 0 && p, "compile: %d %s", rc, rc ? err : "");
    for (int i = 0; p && i < MAX_TRACK; i++)
        if (!track[i].p) {
            track[i].p = p;
            track[i].refs = 1;
            break;
        }
    return p;
}

static void forget(rt_plan *p)
{
    for (int i = 0; i < MAX_TRACK; i++)
        if (track[i].p == p)
            track[i].p = NULL;
}

static int session_refs(rt_session *s) { return __atomic_load_n(&s->refs, __ATOMIC_ACQUIRE); }

static void test_open_find_close(void)
{
    rt_session_table *t = rt_session_table_create(8);
    rt_session *a = NULL, *b = NULL;
    CHECK(rt_session_open(t, "alpha", NULL, &a) == 0 && a, "open a");
    CHECK(rt_session_open(t, "beta", NULL, &b) == 0 && b, "open b");
    CHECK(strcmp(a->id, b->id) != 0 && !strncmp(a->id, "s-", 2), "ids %s %s", a->id, b->id);
    CHECK(session_refs(a) == 2, "a: table + caller, got %d", session_refs(a));
    CHECK(rt_session_count(t) == 2, "count %d", rt_session_count(t));

    rt_session *f = rt_session_find(t, a->id, NULL);
    CHECK(f == a && session_refs(a) == 3, "find retains: %d", session_refs(a));
    rt_session_release(f);
    CHECK(rt_session_find(t, "s-0000000000000000", NULL) == NULL, "unknown id");
    CHECK(rt_session_find(t, NULL, NULL) == NULL, "NULL id");

    /* Closing removes it from the table; the caller's reference keeps it. */
    char id[RT_SESSION_ID_LEN];
    memcpy(id, a->id, sizeof id);
    CHECK(rt_session_close(t, id, NULL) == 0, "close");
    CHECK(rt_session_find(t, id, NULL) == NULL, "closed session still found");
    CHECK(rt_session_count(t) == 1, "count after close %d", rt_session_count(t));
    CHECK(session_refs(a) == 1 && !strcmp(a->name, "alpha"), "held after close");
    CHECK(rt_session_close(t, id, NULL) == RT_ENOTFOUND, "second close");
    rt_session_release(a); /* the last reference: freed (ASan: no leak) */
    rt_session_release(NULL);

    rt_session_release(b);
    rt_session_table_destroy(t); /* releases b's table reference */
    rt_session_table_destroy(NULL);
}

static void test_limit(void)
{
    rt_session_table *t = rt_session_table_create(2);
    rt_session *s[3] = {NULL, NULL, NULL};
    CHECK(rt_session_open(t, "1", NULL, &s[0]) == 0, "1");
    CHECK(rt_session_open(t, "2", NULL, &s[1]) == 0, "2");
    CHECK(rt_session_open(t, "3", NULL, &s[2]) == RT_ETOOBIG && !s[2], "third of 2");
    rt_session_close(t, s[0]->id, NULL);
    CHECK(rt_session_open(t, "3", NULL, &s[2]) == 0, "a slot freed by close");
    for (int i = 0; i < 3; i++)
        rt_session_release(s[i]);
    rt_session_table_destroy(t);
}

static void test_idle_expiry(void)
{
    const uint64_t sec = 1000000000ull, t0 = 1000 * sec;
    rt_session_table *t = rt_session_table_create(8);
    rt_session *a, *b, *c;
    rt_session_open(t, "a", NULL, &a);
    rt_session_open(t, "b", NULL, &b);
    rt_session_open(t, "c", NULL, &c);
    a->last_used_ns = t0;
    b->last_used_ns = t0 + 5 * sec;
    c->last_used_ns = t0;
    char aid[RT_SESSION_ID_LEN], bid[RT_SESSION_ID_LEN], cid[RT_SESSION_ID_LEN];
    memcpy(aid, a->id, RT_SESSION_ID_LEN);
    memcpy(bid, b->id, RT_SESSION_ID_LEN);
    memcpy(cid, c->id, RT_SESSION_ID_LEN);
    /* c stays in use (a call holds it); a and b are only in the table. */
    rt_session_release(a);
    rt_session_release(b);

    char ids[4][RT_SESSION_ID_LEN];
    int n = rt_session_expire(t, t0 + 2 * sec, 3 * sec, ids, 4);
    CHECK(n == 0, "nothing idle for 3 s yet: %d", n);
    n = rt_session_expire(t, t0 + 4 * sec, 3 * sec, ids, 4);
    CHECK(n == 1 && !strcmp(ids[0], aid), "a idle 4 s: %d %s", n, n ? ids[0] : "");
    CHECK(rt_session_count(t) == 2, "count %d", rt_session_count(t));
    /* c has been idle as long as a, but a call holds it. */
    n = rt_session_expire(t, t0 + 100 * sec, 3 * sec, ids, 4);
    CHECK(n == 1 && !strcmp(ids[0], bid), "b: %d %s", n, n ? ids[0] : "");
    CHECK(rt_session_find(t, cid, NULL) != NULL, "c expired while in use");
    rt_session_release(c); /* the find above */
    /* A lookup is a use: c is fresh now. */
    n = rt_session_expire(t, rt_now_ns(), 3600 * sec, ids, 4);
    CHECK(n == 0, "c was just used: %d", n);
    rt_session_release(c); /* the open's reference: now only the table */
    n = rt_session_expire(t, rt_now_ns() + 3601 * sec, 3600 * sec, NULL, 0);
    CHECK(n == 1 && rt_session_count(t) == 0, "c once released: %d", n);
    rt_session_table_destroy(t);
}

static void test_programs_hold_plans(void)
{
    rt_plan *p = make_plan(3);
    rt_session_table *t = rt_session_table_create(8);
    rt_session *s;
    rt_session_open(t, "p", NULL, &s);
    rt_plan_retain(p); /* the session takes this reference */
    rt_program *pr = NULL;
    CHECK(rt_session_add_program(s, p, NULL, 0, &pr) == 0 && pr, "add");
    CHECK(refs(p) == 2, "test + session: %d", refs(p));
    CHECK(rt_session_find_program(s, pr->id) == pr, "find program");
    CHECK(rt_session_find_program(s, "p-none") == NULL, "unknown program");
    rt_session_close(t, s->id, NULL);
    CHECK(refs(p) == 2, "a closed session still held by a call keeps its plan: %d", refs(p));
    rt_session_release(s);
    CHECK(refs(p) == 1, "the last session reference released the plan: %d", refs(p));
    rt_plan_release(p);
    forget(p);
    rt_session_table_destroy(t);
}

static void test_plan_cache(void)
{
    uint8_t k1[16] = {1}, k2[16] = {2}, k3[16] = {3};
    rt_plan *p1 = make_plan(2), *p1b = make_plan(2), *p2 = make_plan(3), *p3 = make_plan(5);
    rt_plan_cache *c = rt_plan_cache_create(2);
    rt_plan *w = NULL;

    rt_plan_cache_put(c, k1, p1, &w);
    CHECK(w == p1 && refs(p1) == 3, "put: test + cache + winner = %d", refs(p1));
    rt_plan_release(w);
    /* Two compiles of the same model raced: the second gets the first's. */
    rt_plan_cache_put(c, k1, p1b, &w);
    CHECK(w == p1 && refs(p1) == 3 && refs(p1b) == 1, "race: %d %d", refs(p1), refs(p1b));
    rt_plan_release(w);

    CHECK(rt_plan_cache_get(c, k2) == NULL, "miss");
    rt_plan_cache_put(c, k2, p2, &w);
    rt_plan_release(w);
    CHECK(rt_plan_cache_count(c) == 2, "count %d", rt_plan_cache_count(c));
    /* Use k1 so k2 is the least recently used, then overflow. */
    rt_plan *g = rt_plan_cache_get(c, k1);
    CHECK(g == p1 && refs(p1) == 3, "get retains: %d", refs(p1));
    rt_plan_release(g);
    rt_plan_cache_put(c, k3, p3, &w);
    rt_plan_release(w);
    CHECK(rt_plan_cache_count(c) == 2, "capacity: %d", rt_plan_cache_count(c));
    CHECK(rt_plan_cache_get(c, k2) == NULL, "k2 (LRU) evicted");
    CHECK(refs(p2) == 1, "eviction dropped only the cache's reference: %d", refs(p2));
    CHECK(rt_plan_report(p2)->param_count == 4 * 3 + 3, "evicted plan still usable");
    g = rt_plan_cache_get(c, k1);
    CHECK(g == p1, "k1 kept");
    rt_plan_release(g);
    g = rt_plan_cache_get(c, k3);
    CHECK(g == p3, "k3 stored");
    rt_plan_release(g);

    rt_plan_cache_destroy(c);
    CHECK(refs(p1) == 1 && refs(p3) == 1 && refs(p2) == 1, "destroy released the cache's: %d %d %d",
          refs(p1), refs(p3), refs(p2));
    rt_plan_cache_destroy(NULL);
    rt_plan *all[] = {p1, p1b, p2, p3};
    for (int i = 0; i < 4; i++) {
        rt_plan_release(all[i]);
        CHECK(refs(all[i]) == 0, "plan %d: %d", i, refs(all[i]));
        forget(all[i]);
    }
}

/* A session belongs to its principal: another one neither finds nor
 * closes it, and its charges (sessions, programs, program bytes) are given
 * back when it is freed. */
static void test_owners(void)
{
    rt_principal_set *ps = rt_principal_set_create(RT_QUOTA_UNLIMITED);
    uint64_t lim[RT_Q__COUNT];
    rt_quota_unlimited(lim);
    rt_principal *alice = rt_principal_get(ps, "alice", lim);
    rt_principal *bob = rt_principal_get(ps, "bob", lim);
    rt_session_table *t = rt_session_table_create(8);
    char err[200];
    rt_session *a = NULL;
    CHECK(rt_principal_reserve(alice, RT_Q_SESSIONS, 1, err, sizeof err) == 0, "reserve");
    CHECK(rt_session_open(t, "a", alice, &a) == 0 && a && a->owner == alice, "open");
    CHECK(strlen(a->id) == 34, "128 random bits: %s", a->id);
    CHECK(rt_session_find(t, a->id, bob) == NULL, "bob does not find alice's session");
    CHECK(rt_session_close(t, a->id, bob) == RT_ENOTFOUND, "bob cannot close it");
    rt_session *f = rt_session_find(t, a->id, alice);
    CHECK(f == a, "alice finds it");
    rt_session_release(f);
    CHECK(rt_principal_reserve(alice, RT_Q_PROGRAMS, 1, err, sizeof err) == 0 &&
              rt_principal_reserve(alice, RT_Q_PROGRAM_BYTES, 1000, err, sizeof err) == 0,
          "program charges");
    rt_plan *p = make_plan(3); /* the session takes this reference */
    rt_program *pr = NULL;
    CHECK(p && rt_session_add_program(a, p, NULL, 1000, &pr) == 0 && pr, "add");
    CHECK(rt_principal_used(alice, RT_Q_SESSIONS) == 1 &&
              rt_principal_used(alice, RT_Q_PROGRAMS) == 1 &&
              rt_principal_used(alice, RT_Q_PROGRAM_BYTES) == 1000 &&
              rt_principal_set_budget_used(ps) == 1000,
          "charged");
    CHECK(rt_session_close(t, a->id, alice) == 0, "alice closes it");
    CHECK(rt_principal_used(alice, RT_Q_SESSIONS) == 1, "held by the caller until released");
    rt_session_release(a);
    CHECK(rt_principal_used(alice, RT_Q_SESSIONS) == 0 &&
              rt_principal_used(alice, RT_Q_PROGRAMS) == 0 &&
              rt_principal_used(alice, RT_Q_PROGRAM_BYTES) == 0 &&
              rt_principal_set_budget_used(ps) == 0,
          "all given back");
    forget(p);
    /* A failed open gives the reservation back too. */
    rt_session_table *one = rt_session_table_create(1);
    rt_session *x = NULL, *y = NULL;
    rt_principal_reserve(bob, RT_Q_SESSIONS, 1, err, sizeof err);
    rt_session_open(one, "x", bob, &x);
    rt_principal_reserve(bob, RT_Q_SESSIONS, 1, err, sizeof err);
    CHECK(rt_session_open(one, "y", bob, &y) == RT_ETOOBIG, "table full");
    CHECK(rt_principal_used(bob, RT_Q_SESSIONS) == 1, "the failed open gave its session back");
    rt_session_release(x);
    rt_session_table_destroy(one);
    CHECK(rt_principal_used(bob, RT_Q_SESSIONS) == 0, "destroyed table gave it back");
    rt_session_table_destroy(t);
    rt_principal_set_destroy(ps);
}

int main(void)
{
    RUN(test_open_find_close);
    RUN(test_owners);
    RUN(test_limit);
    RUN(test_idle_expiry);
    RUN(test_programs_hold_plans);
    RUN(test_plan_cache);
    return itest_summary();
}
