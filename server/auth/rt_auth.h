/*
 * rt_auth.h - bearer tokens: who is calling.
 *
 * With a tokens file every call must carry the metadata
 * `authorization: Bearer <token>`. The file holds SHA-256 hashes of the
 * tokens, never the tokens, each with the principal it stands for and that
 * principal's quotas (docs/security.md has the format):
 *
 *     # sha256 of the token, 64 hex digits   principal  quotas (optional)
 *     0f1e...(64 hex digits)...9a8b         alice      sessions=8 store-bytes=2G
 *
 *     rt_auth *a;  char err[256];
 *     rt_auth_create("tokens.txt", defaults, principals, &a, err, sizeof err);
 *     rt_principal *who = rt_auth_check_bearer(a, n, value, len, &why);  // NULL: UNAUTHENTICATED
 *     ...SIGHUP: rt_auth_reload(a, &n, err, sizeof err);  // a bad file keeps the old table
 *     rt_auth_destroy(a);
 *
 * Without a tokens file (path NULL) the daemon is single-user: every call
 * is the principal "local", whatever it sends.
 *
 * Tokens are compared by their SHA-256 with CRYPTO_memcmp over every entry,
 * and are never logged or copied beyond the hash computation. Threads:
 * rt_auth_check_bearer runs on any gRPC thread concurrently with a reload.
 */
#ifndef RTRAIN_AUTH_H
#define RTRAIN_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "rt_principal.h"

typedef struct rt_auth rt_auth;

/* tokens_path NULL: single-user. defaults: the quotas of a principal whose
 * lines name none. ps owns the principals and must outlive a. Returns 0, or
 * a negative code with a message naming the file, line and problem. */
int rt_auth_create(const char *tokens_path, const uint64_t defaults[RT_Q__COUNT],
                   rt_principal_set *ps, rt_auth **out, char *err, size_t errlen);
void rt_auth_destroy(rt_auth *a); /* NULL is a no-op */

/* Whether calls need a token (a tokens file was given). */
int rt_auth_required(const rt_auth *a);
/* Read the tokens file again. On success *n_tokens is the number of tokens
 * now accepted; on error the previous table stays in force. */
int rt_auth_reload(rt_auth *a, int *n_tokens, char *err, size_t errlen);

/* The principal that a call's bearer token stands for, or NULL with *why
 * set to a static reason (which never includes the token). n_vals: how
 * many `authorization` metadata the call carries (the transport reads
 * them), s and n the first one's value. */
rt_principal *rt_auth_check_bearer(rt_auth *a, int n_vals, const char *s, size_t n,
                                   const char **why);
/* The same for the token itself (the dashboard's header or cookie). */
rt_principal *rt_auth_check_token(rt_auth *a, const char *tok, size_t n, const char **why);

/* A new token: 256 random bits as 64 hex digits into tok (>= 65 bytes),
 * and its SHA-256 in hex into hash_hex. RT_EIO without random bytes. */
int rt_auth_new_token(char tok[65], char hash_hex[65]);
/* SHA-256 of data as 64 lowercase hex digits and a NUL. */
void rt_sha256_hex(const void *data, size_t n, char out[65]);

#endif
