/*
 * rt_principal.h - who owns a session, a program or a dataset, and how much
 * of the daemon each owner may hold.
 *
 * A principal is a name ("alice") with a limit per quota kind and what it
 * uses now. The set of principals also holds the server-wide memory budget:
 * every byte kind (program memory, stored datasets, upload buffers) is
 * charged to the principal and to the budget together, so one reservation
 * either fits both or changes neither.
 *
 *     rt_principal_set *ps = rt_principal_set_create(8ull << 30);
 *     uint64_t lim[RT_Q__COUNT];
 *     rt_quota_unlimited(lim);
 *     lim[RT_Q_SESSIONS] = 4;
 *     rt_principal *p = rt_principal_get(ps, "alice", lim);   // owned by ps
 *     char err[200];
 *     if (rt_principal_reserve(p, RT_Q_SESSIONS, 1, err, sizeof err) < 0)
 *         -> RESOURCE_EXHAUSTED with err: "quota sessions of principal alice: ..."
 *     ...
 *     rt_principal_unreserve(p, RT_Q_SESSIONS, 1);
 *     rt_principal_set_destroy(ps);   // after everything that points at p
 *
 * Lifetime: principals live as long as their set, even after their token is
 * removed, so the sessions and datasets they own can always give back what
 * they hold. Threads: every function is safe to call from any thread.
 */
#ifndef RTRAIN_PRINCIPAL_H
#define RTRAIN_PRINCIPAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(kind, name in tokens files, flags and messages, charged to the memory
 * budget) */
#define RT_QUOTA_MAP(X)                  \
    X(SESSIONS, "sessions", 0)           \
    X(PROGRAMS, "programs", 0)           \
    X(PROGRAM_BYTES, "program-bytes", 1) \
    X(STORE_BYTES, "store-bytes", 1)     \
    X(UPLOADS, "uploads", 0)             \
    X(UPLOAD_BYTES, "upload-bytes", 1)   \
    X(CALL_BYTES, "call-bytes", 1)

typedef enum rt_quota_kind {
#define RT__Q_ENUM(k, name, mem) RT_Q_##k,
    RT_QUOTA_MAP(RT__Q_ENUM)
#undef RT__Q_ENUM
        RT_Q__COUNT
} rt_quota_kind;

#define RT_QUOTA_UNLIMITED UINT64_MAX

/* "sessions", "store-bytes", ...; "?" for an unknown kind. */
const char *rt_quota_name(rt_quota_kind k);
/* The kind for a name, or -1. */
int rt_quota_from_name(const char *name);
/* Fill lim with RT_QUOTA_UNLIMITED. */
void rt_quota_unlimited(uint64_t lim[RT_Q__COUNT]);
/* "123", "64K", "2G", "1T" (powers of 1024) or "unlimited" -> *out. */
int rt_quota_parse(const char *s, uint64_t *out);

typedef struct rt_principal rt_principal;
typedef struct rt_principal_set rt_principal_set;

/* budget: bytes of program memory, stored datasets and upload buffers
 * together (RT_QUOTA_UNLIMITED for none). */
rt_principal_set *rt_principal_set_create(uint64_t budget);
void rt_principal_set_destroy(rt_principal_set *ps); /* NULL is a no-op */

/* The principal called name, created on first use; its limits are set to
 * lim (a reload changes them; what is already held stays held). NULL when
 * out of memory. Owned by ps. */
rt_principal *rt_principal_get(rt_principal_set *ps, const char *name,
                               const uint64_t lim[RT_Q__COUNT]);
/* The principal called name, or NULL; limits unchanged. */
rt_principal *rt_principal_find(rt_principal_set *ps, const char *name);
/* The principals known (tokens file and "local"): up to max of them into
 * v; returns how many were written. Principals live as long as ps. */
int rt_principal_set_list(rt_principal_set *ps, rt_principal **v, int max);
const char *rt_principal_name(const rt_principal *p);

/* Take n of kind. Returns 0, or RT_ETOOBIG with a message naming the quota
 * (or the server memory budget) that would be exceeded; then nothing is
 * taken. NULL p is always granted (tests and tools without owners). */
int rt_principal_reserve(rt_principal *p, rt_quota_kind k, uint64_t n, char *err, size_t errlen);
/* Give back n of kind (never below 0). NULL p is a no-op. */
void rt_principal_unreserve(rt_principal *p, rt_quota_kind k, uint64_t n);
uint64_t rt_principal_used(const rt_principal *p, rt_quota_kind k);
uint64_t rt_principal_limit(const rt_principal *p, rt_quota_kind k);
/* The budget the set was created with (RT_QUOTA_UNLIMITED: none). */
uint64_t rt_principal_set_budget(const rt_principal_set *ps);
/* Bytes charged to the budget by all principals. */
uint64_t rt_principal_set_budget_used(rt_principal_set *ps);

#ifdef __cplusplus
}
#endif
#endif
