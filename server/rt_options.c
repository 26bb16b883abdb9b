/* rt_options.c - rtraind's option table as data, and what is generated from
 * it: the parser (command line, environment, defaults), --help, the docs
 * table and the env file comments. */
#include "rt_options.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rt_auth.h"
#include "rt_principal.h"

extern char **environ;

/* ------------------------------------------------------------ the rows */
#define RT__T_STR(m) .type = RT_OPT_STR, .meta = m
#define RT__T_FLAG .type = RT_OPT_FLAG
#define RT__T_NUM(m, l, h) .type = RT_OPT_NUM, .meta = m, .lo = (l), .hi = (h), .scale = 1
#define RT__T_SCALED(m, l, h, k) .type = RT_OPT_NUM, .meta = m, .lo = (l), .hi = (h), .scale = (k)
#define RT__T_SIZE(m, l, h) .type = RT_OPT_SIZE, .meta = m, .lo = (l), .hi = (h), .scale = 1
#define RT__T_ONE_OF(words) .type = RT_OPT_ONE_OF, .meta = words
#define RT__T_ACTION(m) .type = RT_OPT_ACTION, .meta = m
#define RT__D_V(s) .def = s, .def_doc = s
#define RT__D_AUTO(s) .def = NULL, .def_doc = s
#define RT__D_NODEF .def = NULL, .def_doc = NULL
/* The largest value a field holds, from its C type. */
#define RT__FMAX(e)                                    \
    _Generic((e), int                                  \
             : (uint64_t)INT_MAX, unsigned             \
             : (uint64_t)UINT_MAX, long                \
             : (uint64_t)LONG_MAX, unsigned long       \
             : (uint64_t)ULONG_MAX, long long          \
             : (uint64_t)LLONG_MAX, unsigned long long \
             : (uint64_t)ULLONG_MAX, default           \
             : (uint64_t)0)
#define RT__OPT_ROW(id, nm, grp, ty, field, df, hl)                       \
    [RT_OPT_##id] = {.name = nm,                                          \
                     .group = RT_OPTG_##grp,                              \
                     RT__T_##ty,                                          \
                     .off = offsetof(rt_daemon_opts, field),              \
                     .size = sizeof(((rt_daemon_opts *)0)->field),        \
                     .field_max = RT__FMAX(((rt_daemon_opts *)0)->field), \
                     RT__D_##df,                                          \
                     .help = hl},
const rt_opt_desc rt_daemon_options[RT_OPT__COUNT] = {RT_DAEMON_OPTIONS(RT__OPT_ROW)};
#undef RT__OPT_ROW

#define RT__ALIAS_ROW(nm, id) {nm, RT_OPT_##id},
const rt_opt_alias rt_daemon_option_aliases[] = {RT_DAEMON_OPTION_ALIASES(RT__ALIAS_ROW)};
#undef RT__ALIAS_ROW
const int rt_daemon_option_n_aliases =
    (int)(sizeof rt_daemon_option_aliases / sizeof rt_daemon_option_aliases[0]);

static const char *const group_title[] = {
    [RT_OPTG_MAIN] = NULL,
    [RT_OPTG_MPI] = "MPI replicas (mpirun -n N rtraind ...; README \"More than one machine\")",
    [RT_OPTG_DURABLE] = "Durable mode (docs/operations.md)",
    [RT_OPTG_SECURITY] = "Security (docs/security.md)",
    [RT_OPTG_DATA] = "Datasets larger than memory (docs/data.md)",
    [RT_OPTG_QUOTA] = "Default quotas of a principal (the tokens file can set each per "
                      "principal; single-user: unlimited)",
    [RT_OPTG_OTHER] = NULL,
};

void rt_option_env_name(const rt_opt_desc *d, char *buf, size_t len)
{
    if (d->type == RT_OPT_ACTION) {
        buf[0] = 0;
        return;
    }
    int n = snprintf(buf, len, "RTRAIND_%s", d->name);
    for (int i = 8; i < n && (size_t)i < len; i++)
        buf[i] = buf[i] == '-' ? '_' : (char)toupper((unsigned char)buf[i]);
}

/* ------------------------------------------------------------ values */
static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

static void range_text(const rt_opt_desc *d, char *buf, size_t len)
{
    if (d->hi == UINT64_MAX)
        snprintf(buf, len, d->type == RT_OPT_SIZE ? "%llu..unlimited" : "%llu or more",
                 (unsigned long long)d->lo);
    else
        snprintf(buf, len, "%llu..%llu", (unsigned long long)d->lo, (unsigned long long)d->hi);
}

/* The index of word in "a|b|c", or -1. */
static int one_of(const char *words, const char *word)
{
    size_t n = strlen(word);
    int i = 0;
    for (const char *p = words; *p; i++) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (n && len == n && !memcmp(p, word, n))
            return i;
        if (!e)
            break;
        p = e + 1;
    }
    return -1;
}

static void store(rt_daemon_opts *o, const rt_opt_desc *d, uint64_t v)
{
    char *p = (char *)o + d->off;
    if (d->size == 8) {
        memcpy(p, &v, 8);
    } else {
        uint32_t u = (uint32_t)v;
        memcpy(p, &u, 4);
    }
}

int rt_option_set(rt_daemon_opts *o, rt_opt_id id, const char *text, char *err, size_t errlen)
{
    const rt_opt_desc *d = &rt_daemon_options[id];
    char range[64];
    uint64_t v = 0;
    switch (d->type) {
    case RT_OPT_STR: memcpy((char *)o + d->off, &text, sizeof text); break;
    case RT_OPT_FLAG: /* the command line gives no text */
        if (!text || one_of("1|true|yes|on", text) >= 0)
            v = 1;
        else if (one_of("0|false|no|off", text) < 0) {
            snprintf(err, errlen, "not one of 1|0|true|false|yes|no|on|off");
            return -1;
        }
        store(o, d, v);
        break;
    case RT_OPT_NUM:
    case RT_OPT_SIZE:
        range_text(d, range, sizeof range);
        if (d->type == RT_OPT_NUM ? parse_u64(text, &v) < 0 : rt_quota_parse(text, &v) < 0) {
            snprintf(err, errlen,
                     d->type == RT_OPT_NUM ? "not a whole number (%s)"
                                           : "not a size (%s; K, M, G, T or unlimited allowed)",
                     range);
            return -1;
        }
        if (v < d->lo || v > d->hi) {
            snprintf(err, errlen, "out of range: %s", range);
            return -1;
        }
        if (v > d->field_max / d->scale) { /* a row wider than its field */
            snprintf(err, errlen, "too large for this build");
            return -1;
        }
        store(o, d, v * d->scale);
        break;
    case RT_OPT_ONE_OF: {
        int i = one_of(d->meta, text);
        if (i < 0) {
            snprintf(err, errlen, "not one of %s", d->meta);
            return -1;
        }
        store(o, d, (uint64_t)i);
        break;
    }
    case RT_OPT_ACTION: snprintf(err, errlen, "an action, not a setting"); return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ checks */
/* Loopback (or a unix socket): reachable only from this machine. */
static int is_local_addr(const char *listen)
{
    if (strncmp(listen, "unix:", 5) == 0)
        return 1;
    char host[128];
    const char *colon = strrchr(listen, ':');
    size_t n = colon ? (size_t)(colon - listen) : strlen(listen);
    if (n >= sizeof host)
        return 0;
    memcpy(host, listen, n);
    host[n] = 0;
    char *h = host;
    if (h[0] == '[') {
        h++;
        char *e = strchr(h, ']');
        if (e)
            *e = 0;
    }
    if (strcmp(h, "localhost") == 0)
        return 1;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, h, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

/* What no single row can check: the listen address against the security
 * flags. 0, or 2 (the exit status) with a message. */
static int check_listen(const rt_daemon_opts *o)
{
    const rt_srv_config *cfg = &o->srv;
    /* gRPC takes the port modulo 2^16 (99999 binds 34463): a port must be
     * a number from 0 to 65535, or a name. */
    if (strncmp(cfg->listen, "unix:", 5) != 0) {
        const char *colon = strrchr(cfg->listen, ':');
        const char *port = colon ? colon + 1 : "";
        char *end;
        long v = strtol(port, &end, 10);
        if (!*port || (*end == '\0' && (v < 0 || v > 65535 || end - port > 5))) {
            fprintf(stderr, "rtraind: --listen %s: the port must be 0..65535\n", cfg->listen);
            return 2;
        }
    }
    /* Refuse to be reachable from the network unprotected: other machines
     * need tokens (who is calling) and, unless --insecure, TLS. */
    if (!is_local_addr(cfg->listen)) {
        if (!cfg->tokens_path) {
            fprintf(stderr,
                    "rtraind: %s is not a loopback address: without --tokens the daemon "
                    "is single-user and listens on loopback only\n",
                    cfg->listen);
            return 2;
        }
        if (!cfg->tls_cert && !o->insecure) {
            fprintf(stderr,
                    "rtraind: %s is not a loopback address: give --tls-cert and "
                    "--tls-key (or --insecure behind a trusted TLS proxy)\n",
                    cfg->listen);
            return 2;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ actions */
static int new_token(const char *principal)
{
    char tok[65], hash[65];
    if (strlen(principal) > 63 || !principal[0] ||
        strspn(principal, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                          "0123456789._@-") != strlen(principal)) {
        fprintf(stderr, "rtraind: --new-token: a principal is 1-63 of A-Z a-z 0-9 . _ @ -\n");
        return 2;
    }
    if (rt_auth_new_token(tok, hash) < 0) {
        fprintf(stderr, "rtraind: no random bytes for a token\n");
        return 1;
    }
    fprintf(stderr, "token for %s (give it to the client; it is not stored): %s\n", principal, tok);
    printf("%s %s\n", hash, principal);
    return 0;
}

static int run_action(rt_opt_id id, const char *arg)
{
    switch (id) {
    case RT_OPT_NEW_TOKEN: return new_token(arg);
    case RT_OPT_VERSION: printf("rtraind %s (engine %d)\n", RT_VERSION_STRING, 1); return 0;
    case RT_OPT_HELP: rt_options_usage(stdout); return 0;
    default: return 2;
    }
}

/* ------------------------------------------------------------ parsing */
static int set_defaults(rt_daemon_opts *o)
{
    char err[160];
    memset(o, 0, sizeof *o);
    rt_srv_config_init(&o->srv); /* what AUTO rows leave to the server */
    for (int i = 0; i < RT_OPT__COUNT; i++) {
        const rt_opt_desc *d = &rt_daemon_options[i];
        if (d->def && rt_option_set(o, (rt_opt_id)i, d->def, err, sizeof err) < 0) {
            fprintf(stderr, "rtraind: the default of --%s: %s\n", d->name, err);
            return -1;
        }
    }
    return 0;
}

/* Variables no row reads: a misspelt one would otherwise be ignored. */
static void warn_unknown_env(void)
{
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "RTRAIND_", 8) != 0 || !strncmp(*e, "RTRAIND_OPTS=", 13))
            continue;
        size_t n = strcspn(*e, "=");
        int known = 0;
        char name[80];
        for (int i = 0; i < RT_OPT__COUNT && !known; i++) {
            rt_option_env_name(&rt_daemon_options[i], name, sizeof name);
            known = name[0] && strlen(name) == n && !strncmp(*e, name, n);
        }
        if (!known)
            fprintf(stderr, "rtraind: warning: %.*s sets no option (the names: rtraind --help)\n",
                    (int)n, *e);
    }
}

static int read_env(rt_daemon_opts *o)
{
    char name[80], err[160];
    for (int i = 0; i < RT_OPT__COUNT; i++) {
        const rt_opt_desc *d = &rt_daemon_options[i];
        rt_option_env_name(d, name, sizeof name);
        if (o->given[i] || !name[0])
            continue; /* the command line wins */
        const char *v = getenv(name);
        if (!v || !v[0])
            continue;
        if (rt_option_set(o, (rt_opt_id)i, v, err, sizeof err) < 0) {
            fprintf(stderr, "rtraind: %s=%s (--%s): %s\n", name, v, d->name, err);
            return -1;
        }
        o->given[i] = 1;
    }
    warn_unknown_env();
    return 0;
}

int rt_options_parse(rt_daemon_opts *o, int argc, char **argv, int *status)
{
    enum { FIRST = 256 }; /* past every char: getopt_long returns '?' for an unknown flag */
    struct option lo[RT_OPT__COUNT + 16 + 1];
    int n = 0;
    for (int i = 0; i < RT_OPT__COUNT; i++) {
        const rt_opt_desc *d = &rt_daemon_options[i];
        int arg = d->type == RT_OPT_FLAG || (d->type == RT_OPT_ACTION && !d->meta)
                      ? no_argument
                      : required_argument;
        lo[n++] = (struct option){d->name, arg, NULL, FIRST + i};
    }
    for (int i = 0; i < rt_daemon_option_n_aliases && i < 16; i++)
        lo[n++] = (struct option){rt_daemon_option_aliases[i].name,
                                  lo[rt_daemon_option_aliases[i].id].has_arg, NULL,
                                  FIRST + (int)rt_daemon_option_aliases[i].id};
    lo[n] = (struct option){0, 0, 0, 0};

    *status = 1;
    if (set_defaults(o) < 0)
        return -1;
    *status = 2;
    optind = 0; /* glibc: start over (tests parse more than once) */
    int c, oi = 0;
    char err[160];
    while ((c = getopt_long(argc, argv, "", lo, &oi)) != -1) {
        if (c < FIRST || c >= FIRST + RT_OPT__COUNT) {
            rt_options_usage(stderr);
            return -1;
        }
        rt_opt_id id = (rt_opt_id)(c - FIRST);
        const rt_opt_desc *d = &rt_daemon_options[id];
        if (d->type == RT_OPT_ACTION) {
            *status = run_action(id, optarg);
            return -1;
        }
        if (rt_option_set(o, id, d->type == RT_OPT_FLAG ? NULL : optarg, err, sizeof err) < 0) {
            fprintf(stderr, "rtraind: --%s %s: %s\n", lo[oi].name, optarg, err);
            return -1;
        }
        o->given[id] = 1;
    }
    if (optind < argc) {
        fprintf(stderr, "rtraind: unexpected argument '%s'\n", argv[optind]);
        rt_options_usage(stderr);
        return -1;
    }
    if (read_env(o) < 0)
        return -1;
    o->srv.map_spool_set = o->given[RT_OPT_MAP_SPOOL_BELOW];
    if ((*status = check_listen(o)) != 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------ texts */
/* Writes text wrapped at width columns; f is at column col, continuation
 * lines start with cont. */
static void wrap(FILE *f, const char *text, int col, const char *cont, int width)
{
    const int indent = (int)strlen(cont);
    int first = 1;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        size_t w = strcspn(p, " ");
        if (!w)
            break;
        if (!first && col + 1 + (int)w > width) {
            fprintf(f, "\n%s", cont);
            col = indent;
        } else if (!first) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, w, f);
        col += (int)w;
        p += w;
        first = 0;
    }
    fputc('\n', f);
}

/* "help (default X; K/M/G allowed)" */
static void help_text(const rt_opt_desc *d, char *buf, size_t len)
{
    int size = d->type == RT_OPT_SIZE;
    if (d->def_doc)
        snprintf(buf, len, "%s (default %s%s)", d->help, d->def_doc, size ? "; K/M/G allowed" : "");
    else
        snprintf(buf, len, "%s%s", d->help, size ? " (K/M/G allowed)" : "");
}

static void usage_line(FILE *f, const char *name, const char *meta, const char *text)
{
    char left[80];
    int n = snprintf(left, sizeof left, "  --%s%s%s", name, meta ? " " : "", meta ? meta : "");
    /* the text at column 27, or after two spaces past a long flag */
    n = fprintf(f, "%-*s", n < 25 ? 27 : n + 2, left);
    wrap(f, text, n, "                           ", 79);
}

void rt_options_usage(FILE *f)
{
    fprintf(f, "usage: rtraind [options]\n"
               "Each option may also come from the environment: RTRAIND_ and its name in\n"
               "upper case with '_' for '-' (--max-sessions 8: RTRAIND_MAX_SESSIONS=8);\n"
               "the command line wins.\n");
    int group = -1;
    char text[1024];
    for (int i = 0; i < RT_OPT__COUNT; i++) {
        const rt_opt_desc *d = &rt_daemon_options[i];
        if ((int)d->group != group && group_title[d->group]) {
            snprintf(text, sizeof text, "%s:", group_title[d->group]);
            wrap(f, text, 0, "  ", 79);
        }
        group = (int)d->group;
        help_text(d, text, sizeof text);
        usage_line(f, d->name, d->meta, text);
        for (int a = 0; a < rt_daemon_option_n_aliases; a++)
            if ((int)rt_daemon_option_aliases[a].id == i) {
                snprintf(text, sizeof text, "the old name of --%s", d->name);
                usage_line(f, rt_daemon_option_aliases[a].name, d->meta, text);
            }
    }
}

static const char *aliases_of(int i, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int a = 0; a < rt_daemon_option_n_aliases; a++)
        if ((int)rt_daemon_option_aliases[a].id == i && n < len)
            n += (size_t)snprintf(buf + n, len - n, "%s--%s", n ? ", " : "",
                                  rt_daemon_option_aliases[a].name);
    return buf;
}

/* "1..64", "0..86400 s", "size 1..unlimited", "error, warn, ..." */
static void value_text(const rt_opt_desc *d, char *buf, size_t len)
{
    char r[64];
    switch (d->type) {
    case RT_OPT_STR: snprintf(buf, len, "%s", d->meta); break;
    case RT_OPT_FLAG: snprintf(buf, len, "none (env: 1/0, true/false, yes/no, on/off)"); break;
    case RT_OPT_NUM:
        range_text(d, r, sizeof r);
        snprintf(buf, len, "%s", r);
        break;
    case RT_OPT_SIZE:
        range_text(d, r, sizeof r);
        snprintf(buf, len, "size %s", r);
        break;
    case RT_OPT_ONE_OF: {
        size_t n = 0;
        for (const char *p = d->meta; *p && n + 2 < len; p++)
            n += (size_t)snprintf(buf + n, len - n, *p == '|' ? ", " : "%c", *p);
        break;
    }
    case RT_OPT_ACTION: snprintf(buf, len, "%s", d->meta ? d->meta : "none"); break;
    }
}

static void md_cell(FILE *f, const char *s)
{
    for (; *s; s++)
        fputs(*s == '|' ? "\\|" : (char[2]){*s, 0}, f);
}

void rt_options_markdown(FILE *f)
{
    char env[80], val[160], al[160];
    int group = -1;
    for (int i = 0; i < RT_OPT__COUNT; i++) {
        const rt_opt_desc *d = &rt_daemon_options[i];
        if ((int)d->group != group) {
            const char *t = group_title[d->group];
            fprintf(f,
                    "%s**%s**\n\n| flag | environment | value | default | |\n"
                    "| --- | --- | --- | --- | --- |\n",
                    group < 0 ? "" : "\n",
                    t                          ? t
                    : d->group == RT_OPTG_MAIN ? "The daemon"
                                               : "Other");
            group = (int)d->group;
        }
        rt_option_env_name(d, env, sizeof env);
        value_text(d, val, sizeof val);
        fprintf(f, "| `--%s`", d->name);
        if (aliases_of(i, al, sizeof al)[0])
            fprintf(f, " (old name: `%s`)", al);
        fprintf(f, " | %s%s%s | ", env[0] ? "`" : "", env[0] ? env : "-", env[0] ? "`" : "");
        md_cell(f, val);
        fputs(" | ", f);
        md_cell(f, d->def_doc ? d->def_doc : "-");
        fputs(" | ", f);
        md_cell(f, d->help);
        fputs(" |\n", f);
    }
}

void rt_options_envfile(FILE *f)
{
    char env[80], text[1024];
    int group = -1;
    for (int i = 0; i < RT_OPT__COUNT; i++) {
        const rt_opt_desc *d = &rt_daemon_options[i];
        if (d->type == RT_OPT_ACTION && d->group == RT_OPTG_OTHER)
            continue; /* --help, --version */
        if ((int)d->group != group && group_title[d->group]) {
            snprintf(text, sizeof text, "%s:", group_title[d->group]);
            fputs("# ", f);
            wrap(f, text, 2, "#   ", 79);
        }
        group = (int)d->group;
        rt_option_env_name(d, env, sizeof env);
        fprintf(f, "#   --%s%s%s%s%s\n", d->name, d->meta ? " " : "", d->meta ? d->meta : "",
                env[0] ? ", " : "", env);
        help_text(d, text, sizeof text);
        fputs("#       ", f);
        wrap(f, text, 8, "#       ", 79);
        for (int a = 0; a < rt_daemon_option_n_aliases; a++)
            if ((int)rt_daemon_option_aliases[a].id == i)
                fprintf(f, "#   --%s: the old name of --%s\n", rt_daemon_option_aliases[a].name,
                        d->name);
    }
}
