/*
 * rt_backend.c - the backend registry. The engine links no backend: the
 * program registers those it was built with (rtraind and the tests through
 * server/kernels/rt_backends.c), and compile takes the selected one
 * (rt__backend_current). Selection happens once, before any compile: the
 * daemon's --backend, or RT_BACKEND in the environment (the tests' way of
 * running one suite on each backend), else the highest rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_engine_impl.h"

#define RT__MAX_BACKENDS 8

static const rt__backend *rt__backends[RT__MAX_BACKENDS];
static int rt__n_backends;
static const rt__backend *rt__selected;

void rt__backend_register(const rt__backend *b)
{
    for (int i = 0; i < rt__n_backends; i++)
        if (rt__backends[i] == b)
            return;
    RT_ASSERT(rt__n_backends < RT__MAX_BACKENDS);
    /* kept in rank order, highest first */
    int i = rt__n_backends++;
    while (i > 0 && rt__backends[i - 1]->rank < b->rank) {
        rt__backends[i] = rt__backends[i - 1];
        i--;
    }
    rt__backends[i] = b;
}

static const rt__backend *rt__backend_find(const char *name)
{
    for (int i = 0; i < rt__n_backends; i++)
        if (strcmp(rt__backends[i]->name, name) == 0)
            return rt__backends[i];
    return NULL;
}

int rt_backend_select(const char *name)
{
    const rt__backend *b = name ? rt__backend_find(name) : NULL;
    if (!b)
        return RT_ENOTFOUND;
    rt__selected = b;
    return 0;
}

const rt__backend *rt__backend_current(void)
{
    if (!rt__selected) {
        const char *env = getenv("RT_BACKEND");
        if (env && *env) {
            rt__selected = rt__backend_find(env);
            if (!rt__selected) {
                /* a test run asked for a backend this build lacks: never
                 * train silently on another one */
                fprintf(stderr, "RT_BACKEND=%s: no such backend (built: %s)\n", env,
                        rt_backend_list());
                abort();
            }
        } else if (rt__n_backends > 0) {
            rt__selected = rt__backends[0];
        }
    }
    return rt__selected;
}

const char *rt_backend_name(void)
{
    const rt__backend *b = rt__backend_current();
    return b ? b->name : "";
}

const char *rt_backend_describe(void)
{
    const rt__backend *b = rt__backend_current();
    return b ? (b->describe ? b->describe(b->context) : b->name) : "";
}

const char *rt_backend_list(void)
{
    static char buf[RT__MAX_BACKENDS * 17];
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < rt__n_backends && o < sizeof buf; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? "," : "", rt__backends[i]->name);
    return buf;
}
