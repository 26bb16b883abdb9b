/* rt_auth.c - tokens file, SHA-256 token check, log escaping.
 *
 * SHA-256 comes from OpenSSL's libcrypto (EVP): gRPC core already links
 * libssl/libcrypto for TLS, so this adds no library to the process. */
#include "rt_auth.h"
#include "rt_random.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "rtrain/rt_error.h"

typedef struct tok_ent {
    uint8_t hash[32];
    rt_principal *who;
} tok_ent;

struct rt_auth {
    char *path; /* NULL: single-user */
    uint64_t defaults[RT_Q__COUNT];
    rt_principal_set *ps;
    rt_principal *local; /* single-user principal */
    EVP_MD *sha256;
    pthread_rwlock_t mu; /* guards v, n */
    tok_ent *v;
    int n;
};

static const char hexd[] = "0123456789abcdef";

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hexd[b[i] >> 4];
        out[2 * i + 1] = hexd[b[i] & 15];
    }
    out[2 * n] = 0;
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = tolower(ch);
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

static int sha256(rt_auth *a, const void *data, size_t n, uint8_t out[32])
{
    unsigned int len = 0;
    const EVP_MD *md = a && a->sha256 ? a->sha256 : EVP_sha256();
    return EVP_Digest(data, n, out, &len, md, NULL) == 1 && len == 32 ? 0 : RT_EINTERNAL;
}

void rt_sha256_hex(const void *data, size_t n, char out[65])
{
    uint8_t h[32];
    if (sha256(NULL, data, n, h) < 0)
        memset(h, 0, sizeof h);
    to_hex(h, 32, out);
}

int rt_auth_new_token(char tok[65], char hash_hex[65])
{
    uint8_t r[32];
    if (rt_random_bytes(r, sizeof r) < 0)
        return RT_EIO;
    to_hex(r, sizeof r, tok);
    rt_sha256_hex(tok, 64, hash_hex);
    return 0;
}

/* ---------------------------------------------------------- tokens file */
typedef struct line_ent {
    uint8_t hash[32];
    char name[64];
    int line;
} line_ent;

typedef struct who_ent {
    char name[64];
    uint64_t lim[RT_Q__COUNT];
} who_ent;

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._@-", *s))
            return 0;
    return 1;
}

/* The array *v of *cap elements of size elem, doubled (first when empty);
 * -1 when out of memory (*v and *cap unchanged). */
static int grow(void **v, int *cap, size_t elem, int first)
{
    int nc = *cap ? *cap * 2 : first;
    void *nv = realloc(*v, elem * (size_t)nc);
    if (!nv)
        return -1;
    *v = nv;
    *cap = nc;
    return 0;
}

#define PFAIL(...)                          \
    do {                                    \
        snprintf(err, errlen, __VA_ARGS__); \
        rc = RT_EINVAL;                     \
        goto out;                           \
    } while (0)

/* Parse the whole file first and only then touch the principals, so a file
 * with a mistake changes nothing. */
static int load(rt_auth *a, tok_ent **out_v, int *out_n, char *err, size_t errlen)
{
    int rc = 0;
    FILE *f = fopen(a->path, "r");
    line_ent *lines = NULL;
    who_ent *whos = NULL;
    int nl = 0, capl = 0, nw = 0, capw = 0;
    tok_ent *v = NULL;
    if (!f) {
        snprintf(err, errlen, "cannot read tokens file %s: %s", a->path, strerror(errno));
        return RT_EIO;
    }
    char buf[1024];
    int lineno = 0;
    while (fgets(buf, sizeof buf, f)) {
        lineno++;
        size_t bl = strlen(buf);
        if (bl == sizeof buf - 1 && buf[bl - 1] != '\n')
            PFAIL("tokens file %s line %d: line too long", a->path, lineno);
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = 0;
        char *save = NULL, *tok = strtok_r(buf, " \t\r\n", &save);
        if (!tok)
            continue;
        if (strlen(tok) != 64)
            PFAIL("tokens file %s line %d: expected the token's SHA-256 as 64 hex digits", a->path,
                  lineno);
        line_ent le;
        memset(&le, 0, sizeof le);
        le.line = lineno;
        for (int i = 0; i < 32; i++) {
            int hi = hexval(tok[2 * i]), lo = hexval(tok[2 * i + 1]);
            if (hi < 0 || lo < 0)
                PFAIL("tokens file %s line %d: the SHA-256 has a non-hex digit", a->path, lineno);
            le.hash[i] = (uint8_t)(hi << 4 | lo);
        }
        char *name = strtok_r(NULL, " \t\r\n", &save);
        if (!name || !valid_name(name))
            PFAIL("tokens file %s line %d: expected a principal name (1-63 of A-Z a-z 0-9 . _ @ -)",
                  a->path, lineno);
        snprintf(le.name, sizeof le.name, "%s", name);
        for (int i = 0; i < nl; i++)
            if (memcmp(lines[i].hash, le.hash, 32) == 0)
                PFAIL("tokens file %s line %d: the same token hash is on line %d", a->path, lineno,
                      lines[i].line);
        int w = 0;
        while (w < nw && strcmp(whos[w].name, le.name) != 0)
            w++;
        if (w == nw) {
            if (nw == capw && grow((void **)&whos, &capw, sizeof *whos, 8) < 0)
                PFAIL("out of memory reading %s", a->path);
            memset(&whos[nw], 0, sizeof whos[nw]);
            snprintf(whos[nw].name, sizeof whos[nw].name, "%s", le.name);
            memcpy(whos[nw].lim, a->defaults, sizeof whos[nw].lim);
            nw++;
        }
        for (char *kv; (kv = strtok_r(NULL, " \t\r\n", &save));) {
            char *eq = strchr(kv, '=');
            if (!eq)
                PFAIL("tokens file %s line %d: expected quota=value, got '%.40s'", a->path, lineno,
                      kv);
            *eq = 0;
            int k = rt_quota_from_name(kv);
            uint64_t val;
            if (k < 0)
                PFAIL("tokens file %s line %d: unknown quota '%.40s' (sessions, programs, "
                      "program-bytes, store-bytes, uploads, upload-bytes, call-bytes)",
                      a->path, lineno, kv);
            if (rt_quota_parse(eq + 1, &val) < 0)
                PFAIL("tokens file %s line %d: %s=%.40s is not a number (K/M/G/T suffix or "
                      "'unlimited' allowed)",
                      a->path, lineno, kv, eq + 1);
            whos[w].lim[k] = val;
        }
        if (nl == capl && grow((void **)&lines, &capl, sizeof *lines, 16) < 0)
            PFAIL("out of memory reading %s", a->path);
        lines[nl++] = le;
    }
    if (ferror(f))
        PFAIL("cannot read tokens file %s: %s", a->path, strerror(errno));
    v = calloc((size_t)(nl ? nl : 1), sizeof *v);
    if (!v)
        PFAIL("out of memory reading %s", a->path);
    for (int w = 0; w < nw; w++)
        if (!rt_principal_get(a->ps, whos[w].name, whos[w].lim))
            PFAIL("out of memory reading %s", a->path);
    for (int i = 0; i < nl; i++) {
        memcpy(v[i].hash, lines[i].hash, 32);
        v[i].who = rt_principal_find(a->ps, lines[i].name);
    }
    *out_v = v;
    *out_n = nl;
    v = NULL;
out:
    fclose(f);
    free(lines);
    free(whos);
    free(v);
    return rc;
}

int rt_auth_create(const char *tokens_path, const uint64_t defaults[RT_Q__COUNT],
                   rt_principal_set *ps, rt_auth **out, char *err, size_t errlen)
{
    *out = NULL;
    rt_auth *a = calloc(1, sizeof *a);
    if (!a)
        return RT_ENOMEM;
    memcpy(a->defaults, defaults, sizeof a->defaults);
    a->ps = ps;
    pthread_rwlock_init(&a->mu, NULL);
    /* Fetched once: the implicit fetch inside EVP_sha256() per digest costs
     * a lock and a lookup on every call. */
    a->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (!a->sha256) {
        snprintf(err, errlen, "libcrypto has no SHA-256");
        rt_auth_destroy(a);
        return RT_EINTERNAL;
    }
    if (!tokens_path) {
        a->local = rt_principal_get(ps, "local", defaults);
        if (!a->local) {
            rt_auth_destroy(a);
            return RT_ENOMEM;
        }
        *out = a;
        return 0;
    }
    a->path = strdup(tokens_path);
    int rc = a->path ? load(a, &a->v, &a->n, err, errlen) : RT_ENOMEM;
    if (rc < 0) {
        rt_auth_destroy(a);
        return rc;
    }
    *out = a;
    return 0;
}

void rt_auth_destroy(rt_auth *a)
{
    if (!a)
        return;
    free(a->v);
    free(a->path);
    EVP_MD_free(a->sha256);
    pthread_rwlock_destroy(&a->mu);
    free(a);
}

int rt_auth_required(const rt_auth *a) { return a && a->path; }

int rt_auth_reload(rt_auth *a, int *n_tokens, char *err, size_t errlen)
{
    if (!a->path) {
        snprintf(err, errlen, "no tokens file to reload (single-user daemon)");
        return RT_ESTATE;
    }
    tok_ent *v = NULL;
    int n = 0, rc = load(a, &v, &n, err, errlen);
    if (rc < 0)
        return rc;
    pthread_rwlock_wrlock(&a->mu);
    tok_ent *old = a->v;
    a->v = v;
    a->n = n;
    pthread_rwlock_unlock(&a->mu);
    free(old);
    if (n_tokens)
        *n_tokens = n;
    return 0;
}

rt_principal *rt_auth_check_bearer(rt_auth *a, int n_vals, const char *s, size_t n,
                                   const char **why)
{
    if (!a->path)
        return a->local;
    if (n_vals > 1) {
        *why = "more than one authorization header";
        return NULL;
    }
    if (n_vals < 1) {
        *why = "a token is required: send metadata 'authorization: Bearer <token>'";
        return NULL;
    }
    if (n < 8 || strncasecmp(s, "Bearer ", 7) != 0) {
        *why = "the authorization metadata must be 'Bearer <token>'";
        return NULL;
    }
    return rt_auth_check_token(a, s + 7, n - 7, why);
}

rt_principal *rt_auth_check_token(rt_auth *a, const char *tok, size_t n, const char **why)
{
    if (!a->path)
        return a->local;
    uint8_t h[32];
    if (sha256(a, tok, n, h) < 0) {
        *why = "cannot hash the token";
        return NULL;
    }
    /* Every entry is compared, in constant time per entry: how long the
     * check takes does not depend on which entry, if any, matched. */
    rt_principal *who = NULL;
    pthread_rwlock_rdlock(&a->mu);
    for (int i = 0; i < a->n; i++) {
        int eq = CRYPTO_memcmp(a->v[i].hash, h, 32) == 0;
        who = eq ? a->v[i].who : who;
    }
    pthread_rwlock_unlock(&a->mu);
    if (!who)
        *why = "token not accepted";
    return who;
}
