/* rt_session.c - session table, programs, plan cache. */
#include "rt_session.h"
#include "rt_clock.h"
#include "rt_errf.h"
#include "rt_random.h"
#include "rt_program_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct rt_session_table {
    pthread_mutex_t mu;
    rt_session **v;
    int n, cap, max;
    uint64_t next_prog;
};

/* Ids are random so one client cannot guess another's session; they are
 * also checked against the owner, so a leaked id alone is not enough. */
int rt_random_id(char *dst, size_t len, const char *prefix)
{
    uint8_t r[16];
    if (rt_random_bytes(r, sizeof r) < 0)
        return RT_EIO;
    static const char hex[] = "0123456789abcdef";
    size_t pl = strlen(prefix);
    if (len < pl + 2 * sizeof r + 1)
        return RT_EINVAL;
    memcpy(dst, prefix, pl);
    for (size_t i = 0; i < sizeof r; i++) {
        dst[pl + 2 * i] = hex[r[i] >> 4];
        dst[pl + 2 * i + 1] = hex[r[i] & 15];
    }
    dst[pl + 2 * sizeof r] = 0;
    return 0;
}

rt_session_table *rt_session_table_create(int max_sessions)
{
    rt_session_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    pthread_mutex_init(&t->mu, NULL);
    t->max = max_sessions > 0 ? max_sessions : 64;
    return t;
}

void rt_session_table_destroy(rt_session_table *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n; i++)
        rt_session_release(t->v[i]);
    free(t->v);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int rt_session_open(rt_session_table *t, const char *name, rt_principal *owner, rt_session **out)
{
    *out = NULL;
    rt_session *s = calloc(1, sizeof *s);
    if (!s) {
        rt_principal_unreserve(owner, RT_Q_SESSIONS, 1);
        return RT_ENOMEM;
    }
    int rc;
    if ((rc = rt_random_id(s->id, sizeof s->id, "s-")) < 0 ||
        (rc = rt_random_id(s->token, sizeof s->token, "t-")) < 0) {
        free(s);
        rt_principal_unreserve(owner, RT_Q_SESSIONS, 1);
        return rc;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->refs = 2; /* the table's and the caller's */
    s->owner = owner;
    s->last_used_ns = rt_now_ns();
    snprintf(s->name, sizeof s->name, "%s", name ? name : "");
    pthread_mutex_lock(&t->mu);
    if (t->n >= t->max) {
        pthread_mutex_unlock(&t->mu);
        pthread_mutex_destroy(&s->mu);
        free(s);
        rt_principal_unreserve(owner, RT_Q_SESSIONS, 1);
        return RT_ETOOBIG;
    }
    if (t->n == t->cap) {
        int nc = t->cap ? t->cap * 2 : 16;
        rt_session **nv = realloc(t->v, sizeof *nv * (size_t)nc);
        if (!nv) {
            pthread_mutex_unlock(&t->mu);
            pthread_mutex_destroy(&s->mu);
            free(s);
            rt_principal_unreserve(owner, RT_Q_SESSIONS, 1);
            return RT_ENOMEM;
        }
        t->v = nv;
        t->cap = nc;
    }
    t->v[t->n++] = s;
    pthread_mutex_unlock(&t->mu);
    *out = s;
    return 0;
}

rt_session *rt_session_find(rt_session_table *t, const char *id, const rt_principal *who)
{
    rt_session *s = NULL;
    if (!id)
        return NULL;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n; i++)
        if (t->v[i]->owner == who && strcmp(t->v[i]->id, id) == 0) {
            s = t->v[i];
            rt_session_retain(s);
            __atomic_store_n(&s->last_used_ns, rt_now_ns(), __ATOMIC_RELAXED);
            break;
        }
    pthread_mutex_unlock(&t->mu);
    return s;
}

int rt_session_expire(rt_session_table *t, uint64_t now, uint64_t idle_ns,
                      char (*ids)[RT_SESSION_ID_LEN], int max)
{
    int closed = 0;
    rt_session *gone[64];
    int n_gone = 0;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n && n_gone < 64;) {
        rt_session *s = t->v[i];
        uint64_t last = __atomic_load_n(&s->last_used_ns, __ATOMIC_RELAXED);
        /* refs == 1: only the table holds it, so no call is using it; new
         * references are only taken under t->mu. */
        if (now > last && now - last > idle_ns &&
            __atomic_load_n(&s->refs, __ATOMIC_ACQUIRE) == 1) {
            if (ids && closed < max)
                memcpy(ids[closed], s->id, sizeof ids[closed]);
            closed++;
            gone[n_gone++] = s;
            t->v[i] = t->v[--t->n];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < n_gone; i++)
        rt_session_release(gone[i]);
    return closed;
}

int rt_session_close(rt_session_table *t, const char *id, const rt_principal *who)
{
    rt_session *s = NULL;
    if (!id)
        return RT_ENOTFOUND;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n; i++)
        if (t->v[i]->owner == who && strcmp(t->v[i]->id, id) == 0) {
            s = t->v[i];
            t->v[i] = t->v[--t->n];
            break;
        }
    pthread_mutex_unlock(&t->mu);
    if (!s)
        return RT_ENOTFOUND;
    rt_session_release(s);
    return 0;
}

int rt_session_count(rt_session_table *t)
{
    pthread_mutex_lock(&t->mu);
    int n = t->n;
    pthread_mutex_unlock(&t->mu);
    return n;
}

void rt_session_table_usage(rt_session_table *t, rt_session_usage *u)
{
    memset(u, 0, sizeof *u);
    pthread_mutex_lock(&t->mu);
    u->sessions = (uint64_t)t->n;
    for (int i = 0; i < t->n; i++) {
        rt_session *s = t->v[i];
        pthread_mutex_lock(&s->mu);
        for (int k = 0; k < s->n_progs; k++) {
            const rt_compile_report *r = rt_plan_report(s->progs[k]->plan);
            u->programs++;
            u->param_bytes += r->param_bytes;
            u->arena_bytes += r->arena_bytes;
        }
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&t->mu);
}

void rt_session_retain(rt_session *s) { __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED); }

/* p's memory and what it was charged as */
static void program_free(rt_program *p)
{
    rt_exec_destroy(p->exec);
    rt_plan_release(p->plan);
    rt_principal_unreserve(p->owner, RT_Q_PROGRAM_BYTES, p->charged_bytes);
    rt_principal_unreserve(p->owner, RT_Q_PROGRAMS, 1);
    free(p->req);
    free(p);
}

void rt_program_release(rt_program *p)
{
    if (p && __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) == 0)
        program_free(p);
}

int rt_program_dropped(const rt_program *p)
{
    return __atomic_load_n(&p->dropped, __ATOMIC_ACQUIRE);
}

void rt_session_release(rt_session *s)
{
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (int i = 0; i < s->n_progs; i++)
        rt_program_release(s->progs[i]);
    free(s->progs);
    rt_principal_unreserve(s->owner, RT_Q_SESSIONS, 1);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int rt_session_add_program(rt_session *s, rt_plan *plan, rt_exec *exec, uint64_t bytes,
                           rt_program **out)
{
    *out = NULL;
    int rc = RT_ENOMEM;
    rt_program *p = calloc(1, sizeof *p);
    if (!p)
        goto fail;
    if ((rc = rt_random_id(p->id, sizeof p->id, "p-")) < 0) {
        free(p);
        goto fail;
    }
    p->refs = 1; /* the session's list */
    p->owner = s->owner;
    p->charged_bytes = bytes;
    p->plan = plan;
    p->exec = exec;
    rt_view_spec_of(plan, &p->view);
    p->out_n = rt_plan_output_shape(plan, p->out);
    pthread_mutex_lock(&s->mu);
    if (s->n_progs == s->cap_progs) {
        int nc = s->cap_progs ? s->cap_progs * 2 : 4;
        rt_program **nv = realloc(s->progs, sizeof *nv * (size_t)nc);
        if (!nv) {
            pthread_mutex_unlock(&s->mu);
            free(p);
            rc = RT_ENOMEM;
            goto fail;
        }
        s->progs = nv;
        s->cap_progs = nc;
    }
    s->progs[s->n_progs++] = p;
    pthread_mutex_unlock(&s->mu);
    *out = p;
    return 0;
fail:
    rt_exec_destroy(exec);
    rt_plan_release(plan);
    rt_principal_unreserve(s->owner, RT_Q_PROGRAM_BYTES, bytes);
    rt_principal_unreserve(s->owner, RT_Q_PROGRAMS, 1);
    return rc;
}

/* p out of s's list (dropped: marked so, under s->mu), the list's
 * reference given back; RT_ENOTFOUND if p is not in it. */
static int unlist(rt_session *s, rt_program *p, int dropped)
{
    pthread_mutex_lock(&s->mu);
    int i = 0;
    while (i < s->n_progs && s->progs[i] != p)
        i++;
    if (i == s->n_progs) {
        pthread_mutex_unlock(&s->mu);
        return RT_ENOTFOUND;
    }
    memmove(s->progs + i, s->progs + i + 1, sizeof *s->progs * (size_t)(s->n_progs - i - 1));
    s->n_progs--;
    if (dropped)
        __atomic_store_n(&p->dropped, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->mu);
    rt_program_release(p);
    return 0;
}

int rt_session_remove_program(rt_session *s, rt_program *p) { return unlist(s, p, 0); }

/* the caller still holds its own reference */
int rt_session_drop_program(rt_session *s, rt_program *p) { return unlist(s, p, 1); }

/* the session's program named id, with a reference taken for the caller
 * when ref is set */
static rt_program *lookup(rt_session *s, const char *id, int ref)
{
    rt_program *p = NULL;
    if (!id)
        return NULL;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_progs; i++)
        if (strcmp(s->progs[i]->id, id) == 0) {
            p = s->progs[i];
            if (ref)
                __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
            break;
        }
    pthread_mutex_unlock(&s->mu);
    return p;
}

rt_program *rt_session_get_program(rt_session *s, const char *id) { return lookup(s, id, 1); }

rt_program *rt_session_find_program(rt_session *s, const char *id) { return lookup(s, id, 0); }

int rt_session_lookup(rt_session_table *t, const rt_principal *who, const char *sid,
                      const char *pid, rt_session **sess, rt_program **prog, char *err,
                      size_t errlen)
{
    if (!sid || !*sid)
        return rt_errf(err, errlen, RT_EINVAL, "session_id is empty");
    if (!(*sess = rt_session_find(t, sid, who)))
        return rt_errf(err, errlen, RT_ENOTFOUND, "unknown session '%.64s'", sid);
    if (!prog)
        return 0;
    if (!pid || !*pid)
        return rt_errf(err, errlen, RT_EINVAL, "program_id is empty");
    if (!(*prog = rt_session_get_program(*sess, pid)))
        return rt_errf(err, errlen, RT_ENOTFOUND, "unknown program '%.64s' in session %s", pid,
                       (*sess)->id);
    return 0;
}

/* ------------------------------------------------------------ plan cache */
typedef struct cache_ent {
    uint8_t key[16];
    rt_plan *plan;
    uint64_t used;
} cache_ent;

struct rt_plan_cache {
    pthread_mutex_t mu;
    cache_ent *v;
    int n, cap;
    uint64_t clock;
};

rt_plan_cache *rt_plan_cache_create(int capacity)
{
    rt_plan_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cap = capacity > 0 ? capacity : 128;
    c->v = calloc((size_t)c->cap, sizeof *c->v);
    if (!c->v) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void rt_plan_cache_destroy(rt_plan_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        rt_plan_release(c->v[i].plan);
    free(c->v);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

rt_plan *rt_plan_cache_get(rt_plan_cache *c, const uint8_t key[16])
{
    rt_plan *p = NULL;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (memcmp(c->v[i].key, key, 16) == 0) {
            p = c->v[i].plan;
            c->v[i].used = ++c->clock;
            rt_plan_retain(p);
            break;
        }
    pthread_mutex_unlock(&c->mu);
    return p;
}

void rt_plan_cache_put(rt_plan_cache *c, const uint8_t key[16], rt_plan *plan, rt_plan **winner)
{
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (memcmp(c->v[i].key, key, 16) == 0) {
            *winner = c->v[i].plan;
            rt_plan_retain(*winner);
            pthread_mutex_unlock(&c->mu);
            return;
        }
    int slot = c->n;
    if (c->n == c->cap) {
        /* Evict the least recently used; sessions using it keep their ref. */
        slot = 0;
        for (int i = 1; i < c->n; i++)
            if (c->v[i].used < c->v[slot].used)
                slot = i;
        rt_plan_release(c->v[slot].plan);
    } else {
        c->n++;
    }
    memcpy(c->v[slot].key, key, 16);
    c->v[slot].plan = plan;
    c->v[slot].used = ++c->clock;
    rt_plan_retain(plan);
    *winner = plan;
    rt_plan_retain(plan);
    pthread_mutex_unlock(&c->mu);
}

int rt_plan_cache_count(rt_plan_cache *c)
{
    pthread_mutex_lock(&c->mu);
    int n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

int rt_session_each(rt_session_table *t, void (*fn)(void *ud, rt_session *s), void *ud)
{
    pthread_mutex_lock(&t->mu);
    int n = t->n;
    for (int i = 0; i < t->n; i++) {
        rt_session *s = t->v[i];
        pthread_mutex_lock(&s->mu);
        fn(ud, s);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return n;
}

int rt_session_each_program(rt_session_table *t, int (*fn)(void *ud, rt_session *s, rt_program *p),
                            void *ud)
{
    int sum = 0;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n; i++) {
        rt_session *s = t->v[i];
        pthread_mutex_lock(&s->mu);
        for (int k = 0; k < s->n_progs; k++)
            sum += fn(ud, s, s->progs[k]);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return sum;
}
