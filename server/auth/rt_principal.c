/* rt_principal.c - principals, their quotas and the server memory budget. */
#include "rt_principal.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rtrain/rt_error.h"

struct rt_principal {
    rt_principal_set *set;
    char name[64];
    uint64_t limit[RT_Q__COUNT];
    uint64_t used[RT_Q__COUNT];
};

/* One mutex for every counter: reservations happen per session, program
 * or upload, never per step, so contention is not a concern and a charge
 * to a principal and to the budget stays one atomic decision. */
struct rt_principal_set {
    pthread_mutex_t mu;
    rt_principal **v;
    int n, cap;
    uint64_t budget, budget_used;
};

static const char *const q_names[RT_Q__COUNT] = {
#define RT__Q_NAME(k, name, mem) [RT_Q_##k] = name,
    RT_QUOTA_MAP(RT__Q_NAME)
#undef RT__Q_NAME
};
static const int q_mem[RT_Q__COUNT] = {
#define RT__Q_MEM(k, name, mem) [RT_Q_##k] = mem,
    RT_QUOTA_MAP(RT__Q_MEM)
#undef RT__Q_MEM
};

const char *rt_quota_name(rt_quota_kind k) { return (unsigned)k < RT_Q__COUNT ? q_names[k] : "?"; }

int rt_quota_from_name(const char *name)
{
    for (int i = 0; i < RT_Q__COUNT; i++)
        if (strcmp(q_names[i], name) == 0)
            return i;
    return -1;
}

void rt_quota_unlimited(uint64_t lim[RT_Q__COUNT])
{
    for (int i = 0; i < RT_Q__COUNT; i++)
        lim[i] = RT_QUOTA_UNLIMITED;
}

int rt_quota_parse(const char *s, uint64_t *out)
{
    if (strcmp(s, "unlimited") == 0) {
        *out = RT_QUOTA_UNLIMITED;
        return 0;
    }
    if (!isdigit((unsigned char)s[0]))
        return RT_EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return RT_EINVAL;
    int shift = 0;
    switch (*end) {
    case 0: break;
    case 'K':
    case 'k':
        shift = 10;
        end++;
        break;
    case 'M':
    case 'm':
        shift = 20;
        end++;
        break;
    case 'G':
    case 'g':
        shift = 30;
        end++;
        break;
    case 'T':
    case 't':
        shift = 40;
        end++;
        break;
    default: return RT_EINVAL;
    }
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return RT_EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

rt_principal_set *rt_principal_set_create(uint64_t budget)
{
    rt_principal_set *ps = calloc(1, sizeof *ps);
    if (!ps)
        return NULL;
    pthread_mutex_init(&ps->mu, NULL);
    ps->budget = budget;
    return ps;
}

void rt_principal_set_destroy(rt_principal_set *ps)
{
    if (!ps)
        return;
    for (int i = 0; i < ps->n; i++)
        free(ps->v[i]);
    free(ps->v);
    pthread_mutex_destroy(&ps->mu);
    free(ps);
}

static rt_principal *find_locked(rt_principal_set *ps, const char *name)
{
    for (int i = 0; i < ps->n; i++)
        if (strcmp(ps->v[i]->name, name) == 0)
            return ps->v[i];
    return NULL;
}

rt_principal *rt_principal_find(rt_principal_set *ps, const char *name)
{
    pthread_mutex_lock(&ps->mu);
    rt_principal *p = find_locked(ps, name);
    pthread_mutex_unlock(&ps->mu);
    return p;
}

int rt_principal_set_list(rt_principal_set *ps, rt_principal **v, int max)
{
    pthread_mutex_lock(&ps->mu);
    int n = ps->n < max ? ps->n : max;
    for (int i = 0; i < n; i++)
        v[i] = ps->v[i];
    pthread_mutex_unlock(&ps->mu);
    return n;
}

rt_principal *rt_principal_get(rt_principal_set *ps, const char *name,
                               const uint64_t lim[RT_Q__COUNT])
{
    pthread_mutex_lock(&ps->mu);
    rt_principal *p = find_locked(ps, name);
    if (!p) {
        if (ps->n == ps->cap) {
            int nc = ps->cap ? ps->cap * 2 : 8;
            rt_principal **nv = realloc(ps->v, sizeof *nv * (size_t)nc);
            if (!nv) {
                pthread_mutex_unlock(&ps->mu);
                return NULL;
            }
            ps->v = nv;
            ps->cap = nc;
        }
        p = calloc(1, sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&ps->mu);
            return NULL;
        }
        p->set = ps;
        snprintf(p->name, sizeof p->name, "%s", name);
        ps->v[ps->n++] = p;
    }
    memcpy(p->limit, lim, sizeof p->limit);
    pthread_mutex_unlock(&ps->mu);
    return p;
}

const char *rt_principal_name(const rt_principal *p) { return p ? p->name : "-"; }

int rt_principal_reserve(rt_principal *p, rt_quota_kind k, uint64_t n, char *err, size_t errlen)
{
    if (!p || n == 0)
        return 0;
    rt_principal_set *ps = p->set;
    pthread_mutex_lock(&ps->mu);
    uint64_t used = p->used[k], lim = p->limit[k];
    if (n > lim || used > lim - n) {
        pthread_mutex_unlock(&ps->mu);
        snprintf(err, errlen, "quota %s of principal %s exceeded: %llu in use + %llu asked > %llu",
                 q_names[k], p->name, (unsigned long long)used, (unsigned long long)n,
                 (unsigned long long)lim);
        return RT_ETOOBIG;
    }
    if (q_mem[k]) {
        uint64_t bu = ps->budget_used;
        if (n > ps->budget || bu > ps->budget - n) {
            pthread_mutex_unlock(&ps->mu);
            snprintf(err, errlen,
                     "server memory budget exceeded (%s for principal %s): %llu in use + %llu "
                     "asked > %llu bytes",
                     q_names[k], p->name, (unsigned long long)bu, (unsigned long long)n,
                     (unsigned long long)ps->budget);
            return RT_ETOOBIG;
        }
        ps->budget_used = bu + n;
    }
    p->used[k] = used + n;
    pthread_mutex_unlock(&ps->mu);
    return 0;
}

void rt_principal_unreserve(rt_principal *p, rt_quota_kind k, uint64_t n)
{
    if (!p || n == 0)
        return;
    rt_principal_set *ps = p->set;
    pthread_mutex_lock(&ps->mu);
    p->used[k] -= n < p->used[k] ? n : p->used[k];
    if (q_mem[k])
        ps->budget_used -= n < ps->budget_used ? n : ps->budget_used;
    pthread_mutex_unlock(&ps->mu);
}

uint64_t rt_principal_used(const rt_principal *p, rt_quota_kind k)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->set->mu);
    uint64_t u = p->used[k];
    pthread_mutex_unlock(&p->set->mu);
    return u;
}

uint64_t rt_principal_limit(const rt_principal *p, rt_quota_kind k)
{
    if (!p)
        return RT_QUOTA_UNLIMITED;
    pthread_mutex_lock(&p->set->mu);
    uint64_t l = p->limit[k];
    pthread_mutex_unlock(&p->set->mu);
    return l;
}

uint64_t rt_principal_set_budget(const rt_principal_set *ps) { return ps->budget; }

uint64_t rt_principal_set_budget_used(rt_principal_set *ps)
{
    pthread_mutex_lock(&ps->mu);
    uint64_t u = ps->budget_used;
    pthread_mutex_unlock(&ps->mu);
    return u;
}
