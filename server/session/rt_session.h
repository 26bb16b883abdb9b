/*
 * rt_session.h - sessions, their program instances, and the daemon-wide
 * program (plan) cache.
 *
 * A session owns programs; a program is one rt_exec (weights, optimizer
 * state, data cursor) over a plan that may be shared through the cache.
 *
 * Every session belongs to a principal (rt_principal.h). A lookup names the
 * principal asking, and another principal's session is simply not found:
 * the answer is the same as for an id that never existed. Ids carry 128
 * random bits from getrandom.
 *
 *     rt_session_table *t = rt_session_table_create(64);
 *     rt_session *s;
 *     rt_principal_reserve(who, RT_Q_SESSIONS, 1, ...);  // the caller's quota
 *     rt_session_open(t, "notebook", who, &s);      // takes that reservation
 *     rt_program *p;
 *     rt_session_add_program(s, plan, exec, bytes, &p); // takes plan ref, exec
 *                                                       // and the reservation
 *     rt_session_release(s);
 *     ...
 *     rt_session *s2 = rt_session_find(t, id, who);  // retained or NULL
 *     rt_program *p2 = rt_session_get_program(s2, pid); // retained or NULL
 *     rt_program_release(p2);
 *
 * A program's lifetime: the session's list holds one reference and every
 * call that looked it up (rt_session_get_program, rt_session_lookup) one
 * more, released when the call ends, before its session reference. A
 * program leaves the list when its session is freed, or earlier by
 * rt_session_drop_program (DropProgram); it is freed by the last release,
 * so a call that found it before the drop still runs on valid memory.
 *
 * Threads: the table and each session have a mutex. A program's exec is
 * only used under the device lock (server/rpc), never concurrently.
 */
#ifndef RTRAIN_SESSION_H
#define RTRAIN_SESSION_H

#include <pthread.h>
#include <stdint.h>

#include "rt_engine.h"
#include "rt_principal.h"
#include "rt_program.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_SESSION_ID_LEN 40 /* "s-" / "p-" + 32 hex digits + NUL, padded */

typedef struct rt_session {
    char id[RT_SESSION_ID_LEN];
    char name[64];
    char token[RT_SESSION_ID_LEN]; /* "t-" + 32 random hex digits */
    rt_principal *owner;           /* NULL only for tools and tests */
    uint64_t last_used_ns;         /* atomic: rt_now_ns() of the last lookup */
    /* private */
    pthread_mutex_t mu;
    rt_program **progs;
    int n_progs, cap_progs;
    int refs;
} rt_session;

typedef struct rt_session_table rt_session_table;

rt_session_table *rt_session_table_create(int max_sessions);
/* Destroys every remaining session; NULL is a no-op. */
void rt_session_table_destroy(rt_session_table *t);

/* A new session with a random id, owned by owner, which already reserved
 * one RT_Q_SESSIONS: the session gives it back when it is freed, or at once
 * if opening fails. RT_ETOOBIG at max_sessions, RT_EIO if the system has
 * no random bytes. *out is retained for the caller. */
int rt_session_open(rt_session_table *t, const char *name, rt_principal *owner, rt_session **out);
/* The session with this id owned by who, retained, or NULL (also when
 * another principal owns it). */
rt_session *rt_session_find(rt_session_table *t, const char *id, const rt_principal *who);
/* Remove who's session from the table; it is freed when its last holder
 * releases it. RT_ENOTFOUND if unknown or not who's. */
int rt_session_close(rt_session_table *t, const char *id, const rt_principal *who);
int rt_session_count(rt_session_table *t);
/* Open sessions, their programs, and those programs' planned memory
 * (compile report: parameter/optimizer bytes and activation arenas). */
typedef struct rt_session_usage {
    uint64_t sessions, programs, param_bytes, arena_bytes;
} rt_session_usage;
void rt_session_table_usage(rt_session_table *t, rt_session_usage *u);
/* Close sessions not looked up for idle_ns (as of now_ns) and not in use by
 * a call. Writes up to max closed ids into ids (may be NULL); returns how
 * many were closed. */
int rt_session_expire(rt_session_table *t, uint64_t now_ns, uint64_t idle_ns,
                      char (*ids)[RT_SESSION_ID_LEN], int max);

void rt_session_retain(rt_session *s);
void rt_session_release(rt_session *s); /* NULL is a no-op */

/* Add a program over plan (the session takes the caller's plan reference)
 * and exec (the session takes ownership). The caller reserved one
 * RT_Q_PROGRAMS and bytes of RT_Q_PROGRAM_BYTES for s->owner; they are
 * given back when the program is freed. On error everything is released
 * and given back. */
int rt_session_add_program(rt_session *s, rt_plan *plan, rt_exec *exec, uint64_t bytes,
                           rt_program **out);
/* Take back a program that a failed call added and never answered with:
 * removed from s, freed, its quota given back. No other holder may use p
 * (its id went to nobody). RT_ENOTFOUND if p is not s's. */
int rt_session_remove_program(rt_session *s, rt_program *p);
/* Fill dst with 128 random bits as prefix + 32 hex digits (len >= 35).
 * RT_EIO if getrandom fails: ids are never made from guessable values. */
int rt_random_id(char *dst, size_t len, const char *prefix);
/* DropProgram: p leaves s's list (later lookups answer RT_ENOTFOUND), is
 * marked dropped (rt_program_dropped) and loses the list's reference; the
 * caller's own reference keeps it until released. RT_ENOTFOUND if p is
 * not in s's list (dropped already). Called holding the device, so no call
 * runs on p meanwhile. */
int rt_session_drop_program(rt_session *s, rt_program *p);
/* The program with this id, retained (rt_program_release), or NULL. */
rt_program *rt_session_get_program(rt_session *s, const char *id);
/* The same, not retained: valid while s is held and nothing drops it (the
 * tools and tests; calls use rt_session_get_program). */
rt_program *rt_session_find_program(rt_session *s, const char *id);
/* A call's session sid (who's) and, with prog, its program pid: *sess is
 * retained (the caller releases it) also when the program is missing;
 * *prog is retained too (rt_program_release, before *sess). RT_EINVAL for an empty id,
 * RT_ENOTFOUND for an unknown one (another principal's session answers as
 * a missing one), err naming it. */
int rt_session_lookup(rt_session_table *t, const rt_principal *who, const char *sid,
                      const char *pid, rt_session **sess, rt_program **prog, char *err,
                      size_t errlen);
/* fn(ud, session, program) for every program of every session, under the
 * table's lock (for the exit checkpoint, when no call runs); returns the
 * sum of what fn returned. */
int rt_session_each_program(rt_session_table *t, int (*fn)(void *ud, rt_session *s, rt_program *p),
                            void *ud);

/* fn(ud, session) for every session, under the table's and the session's
 * locks (the dashboard copies what it shows: ids, names, owner, programs
 * and their compile reports, never the exec). Returns how many. */
int rt_session_each(rt_session_table *t, void (*fn)(void *ud, rt_session *s), void *ud);

/* ----------------------------------------------------------- plan cache */
typedef struct rt_plan_cache rt_plan_cache;

rt_plan_cache *rt_plan_cache_create(int capacity);
void rt_plan_cache_destroy(rt_plan_cache *c); /* NULL is a no-op */
/* A retained plan or NULL. */
rt_plan *rt_plan_cache_get(rt_plan_cache *c, const uint8_t key[16]);
/* Insert (retains plan). If the key is already there (two compiles raced),
 * the cached plan is returned retained in *winner; else *winner = plan
 * retained again. The caller releases its own reference either way. */
void rt_plan_cache_put(rt_plan_cache *c, const uint8_t key[16], rt_plan *plan, rt_plan **winner);
int rt_plan_cache_count(rt_plan_cache *c);

#ifdef __cplusplus
}
#endif
#endif
