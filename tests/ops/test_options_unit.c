/* test_options_unit.c - rtraind's option table (server/rt_options.h) without
 * a daemon: every row is well formed, its default is what rt_srv_config_init
 * sets, the quota rows match RT_QUOTA_MAP and the choice rows the enums
 * they store; the parser takes the command line over the environment over
 * the defaults; --help lists exactly the table's flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_check.h"
#include "rt_log.h"
#include "rt_obs.h"
#include "rt_options.h"
#include "rt_principal.h"

extern char **environ;

static const rt_opt_desc *row(const char *name)
{
    for (int i = 0; i < RT_OPT__COUNT; i++)
        if (!strcmp(rt_daemon_options[i].name, name))
            return &rt_daemon_options[i];
    return NULL;
}

static void test_rows(void)
{
    rt_daemon_opts o;
    char err[160], env[80];
    for (int i = 0; i < RT_OPT__COUNT; i++) {
        const rt_opt_desc *d = &rt_daemon_options[i];
        CHECK(d->name && d->name[0] && d->help && d->help[0]);
        /* one name, among rows and aliases */
        int seen = 0;
        for (int j = 0; j < RT_OPT__COUNT; j++)
            seen += !strcmp(rt_daemon_options[j].name, d->name);
        for (int a = 0; a < rt_daemon_option_n_aliases; a++)
            seen += !strcmp(rt_daemon_option_aliases[a].name, d->name);
        CHECK(seen == 1);
        rt_option_env_name(d, env, sizeof env);
        if (d->type == RT_OPT_ACTION) {
            CHECK(env[0] == 0);
            continue;
        }
        /* RTRAIND_ + the name, upper case, '_' for '-' */
        CHECK(!strncmp(env, "RTRAIND_", 8) && strlen(env) == 8 + strlen(d->name));
        for (size_t k = 0; d->name[k]; k++)
            CHECK(env[8 + k] == (d->name[k] == '-' ? '_' : d->name[k] - ('a' <= d->name[k] &&
                                                                         d->name[k] <= 'z'
                                                                         ? 'a' - 'A' : 0)));
        if (d->type == RT_OPT_STR) {
            CHECK(d->size == sizeof(char *) && d->meta);
        } else {
            CHECK(d->size == 4 || d->size == 8);
        }
        if (d->type == RT_OPT_NUM || d->type == RT_OPT_SIZE) {
            CHECK(d->meta && d->scale >= 1 && d->lo <= d->hi);
            /* the largest value fits its field once scaled */
            CHECK(d->field_max > 0 && d->hi <= d->field_max / d->scale);
            if (d->hi > d->field_max / d->scale)
                fprintf(stderr, "  --%s: %llu x %llu > %llu\n", d->name,
                        (unsigned long long)d->hi, (unsigned long long)d->scale,
                        (unsigned long long)d->field_max);
        }
        if (d->def) {
            memset(&o, 0, sizeof o);
            CHECK(rt_option_set(&o, (rt_opt_id)i, d->def, err, sizeof err) == 0);
        }
    }
    for (int a = 0; a < rt_daemon_option_n_aliases; a++)
        CHECK(rt_daemon_option_aliases[a].id < RT_OPT__COUNT &&
              rt_daemon_options[rt_daemon_option_aliases[a].id].type != RT_OPT_ACTION);
}

/* A default written as a value in the table is what rt_srv_config_init
 * sets: the library's callers and the daemon start alike. */
static void test_defaults_match_config_init(void)
{
    rt_srv_config ref;
    rt_srv_config_init(&ref);
    char err[160];
    int compared = 0;
    for (int i = 0; i < RT_OPT__COUNT; i++) {
        const rt_opt_desc *d = &rt_daemon_options[i];
        if (!d->def || d->off >= offsetof(rt_daemon_opts, srv) + sizeof(rt_srv_config))
            continue;
        rt_daemon_opts o;
        memset(&o, 0, sizeof o);
        REQUIRE(rt_option_set(&o, (rt_opt_id)i, d->def, err, sizeof err) == 0);
        const char *got = (const char *)&o + d->off;
        const char *want = (const char *)&ref + (d->off - offsetof(rt_daemon_opts, srv));
        if (d->type == RT_OPT_STR) {
            const char *g, *w;
            memcpy(&g, got, sizeof g);
            memcpy(&w, want, sizeof w);
            CHECK(g && w && !strcmp(g, w));
        } else {
            CHECK(!memcmp(got, want, d->size));
            if (memcmp(got, want, d->size))
                fprintf(stderr, "  --%s: default %s differs from rt_srv_config_init\n", d->name,
                        d->def);
        }
        compared++;
    }
    CHECK(compared >= 25);
}

static void test_quota_rows(void)
{
    int quota_rows = 0;
    for (int i = 0; i < RT_OPT__COUNT; i++)
        quota_rows += !strncmp(rt_daemon_options[i].name, "quota-", 6);
    CHECK(quota_rows == RT_Q__COUNT);
    for (int k = 0; k < RT_Q__COUNT; k++) {
        char name[64];
        snprintf(name, sizeof name, "quota-%s", rt_quota_name((rt_quota_kind)k));
        const rt_opt_desc *d = row(name);
        CHECK(d != NULL);
        if (d)
            CHECK(d->off == offsetof(rt_daemon_opts, srv.quota) + k * sizeof(uint64_t) &&
                  d->type == RT_OPT_SIZE && d->lo == 1);
    }
}

/* The i-th word of a choice row is the enum value i of what it sets. */
static void test_choices(void)
{
    rt_daemon_opts o;
    char err[160];
    const char *lv[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        rt_log_level l;
        CHECK(rt_option_set(&o, RT_OPT_LOG_LEVEL, lv[i], err, sizeof err) == 0);
        CHECK(rt_obs_level_from_name(lv[i], &l) == 0 && (int)l == o.log_level);
    }
    const char *lf[] = {"text", "json"};
    for (int i = 0; i < 2; i++) {
        rt_log_format f;
        CHECK(rt_option_set(&o, RT_OPT_LOG_FORMAT, lf[i], err, sizeof err) == 0);
        CHECK(rt_log_format_from_name(lf[i], &f) == 0 && (int)f == o.log_format);
    }
    CHECK(rt_option_set(&o, RT_OPT_OVERLAP_REDUCE, "on", err, sizeof err) == 0 &&
          o.dist.overlap == RT_DIST_OVERLAP_ON);
    CHECK(rt_option_set(&o, RT_OPT_OVERLAP_REDUCE, "off", err, sizeof err) == 0 &&
          o.dist.overlap == RT_DIST_OVERLAP_OFF);
    CHECK(rt_option_set(&o, RT_OPT_OVERLAP_REDUCE, "auto", err, sizeof err) == 0 &&
          o.dist.overlap == RT_DIST_OVERLAP_AUTO);
    CHECK(rt_option_set(&o, RT_OPT_CHECKPOINT_FAIL, "continue", err, sizeof err) == 0 &&
          o.srv.ckpt_fail_continue == 1);
    CHECK(rt_option_set(&o, RT_OPT_CHECKPOINT_FAIL, "stop", err, sizeof err) == 0 &&
          o.srv.ckpt_fail_continue == 0);
    CHECK(rt_option_set(&o, RT_OPT_LOG_LEVEL, "inf", err, sizeof err) < 0 &&
          strstr(err, "error|warn|info|debug"));
    CHECK(rt_option_set(&o, RT_OPT_LOG_LEVEL, "", err, sizeof err) < 0);
}

static void test_values(void)
{
    rt_daemon_opts o;
    char err[160];
    memset(&o, 0, sizeof o);
    /* seconds stored as ms, ms as ns */
    CHECK(rt_option_set(&o, RT_OPT_UPLOAD_STALL_S, "7", err, sizeof err) == 0 &&
          o.srv.upload_stall_ms == 7000);
    CHECK(rt_option_set(&o, RT_OPT_SLICE_MS, "3", err, sizeof err) == 0 &&
          o.srv.slice_ns == 3000000);
    CHECK(rt_option_set(&o, RT_OPT_THREADS, "0", err, sizeof err) < 0 &&
          !strcmp(err, "out of range: 1..64"));
    CHECK(rt_option_set(&o, RT_OPT_THREADS, "65", err, sizeof err) < 0);
    CHECK(rt_option_set(&o, RT_OPT_THREADS, "-1", err, sizeof err) < 0 &&
          strstr(err, "not a whole number"));
    CHECK(rt_option_set(&o, RT_OPT_THREADS, "4x", err, sizeof err) < 0);
    CHECK(rt_option_set(&o, RT_OPT_THREADS, "64", err, sizeof err) == 0 && o.srv.threads == 64);
    /* sizes: K/M/G, unlimited; 0 where the row allows it */
    CHECK(rt_option_set(&o, RT_OPT_MAX_MEMORY_BYTES, "3G", err, sizeof err) == 0 &&
          o.srv.max_memory_bytes == 3ull << 30);
    CHECK(rt_option_set(&o, RT_OPT_MAX_MEMORY_BYTES, "0", err, sizeof err) < 0);
    CHECK(rt_option_set(&o, RT_OPT_MAX_MEMORY_BYTES, "lots", err, sizeof err) < 0 &&
          strstr(err, "not a size"));
    CHECK(rt_option_set(&o, RT_OPT_QUOTA_UPLOADS, "unlimited", err, sizeof err) == 0 &&
          o.srv.quota[RT_Q_UPLOADS] == UINT64_MAX);
    CHECK(rt_option_set(&o, RT_OPT_MAP_SPOOL_BELOW, "0", err, sizeof err) == 0);
    CHECK(rt_option_set(&o, RT_OPT_PAUSE_AT_STEP, "9223372036854775807", err, sizeof err) == 0 &&
          o.srv.pause_at_step == INT64_MAX);
    CHECK(rt_option_set(&o, RT_OPT_PAUSE_AT_STEP, "9223372036854775808", err, sizeof err) < 0);
    /* a flag from the environment */
    CHECK(rt_option_set(&o, RT_OPT_INSECURE, "yes", err, sizeof err) == 0 && o.insecure == 1);
    CHECK(rt_option_set(&o, RT_OPT_INSECURE, "off", err, sizeof err) == 0 && o.insecure == 0);
    CHECK(rt_option_set(&o, RT_OPT_INSECURE, "maybe", err, sizeof err) < 0);
    CHECK(rt_option_set(&o, RT_OPT_INSECURE, NULL, err, sizeof err) == 0 && o.insecure == 1);
}

static void clear_env(void)
{
    char *names[256];
    int n = 0;
    for (char **e = environ; *e && n < 256; e++)
        if (!strncmp(*e, "RTRAIND_", 8))
            names[n++] = strndup(*e, strcspn(*e, "="));
    for (int i = 0; i < n; i++) {
        unsetenv(names[i]);
        free(names[i]);
    }
}

#define ARGV(...) ((char *[]){"rtraind", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){"rtraind", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(o, st, ...) rt_options_parse(o, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), st)

static void test_parse(void)
{
    rt_daemon_opts o;
    int st = -1;
    clear_env();
    char *none[] = {"rtraind", NULL};
    REQUIRE(rt_options_parse(&o, 1, none, &st) == 0);
    CHECK(!strcmp(o.srv.listen, "127.0.0.1:7070") && o.srv.max_sessions == 64);
    CHECK(o.idle_ms == 3600000 && o.grace_ms == 5000 && o.drain_ms == 0);
    CHECK(o.log_level == RT_LOG_INFO && o.log_format == RT_LOG_FORMAT_TEXT);
    CHECK(o.dist.timeout_ms == 30000 && o.dist.bucket_floats == 1048576 && o.dist.micro == 0);
    CHECK(!o.http_listen && !o.insecure && !o.srv.map_spool_set);

    /* the environment over the defaults: an int with a range, a scaled
     * one, a flag, a choice, a size, a string */
    setenv("RTRAIND_MAX_SESSIONS", "8", 1);
    setenv("RTRAIND_SESSION_LEASE_S", "10", 1);
    setenv("RTRAIND_CHECKPOINT_NO_FSYNC", "true", 1);
    setenv("RTRAIND_LOG_FORMAT", "json", 1);
    setenv("RTRAIND_QUOTA_UPLOADS", "2K", 1);
    setenv("RTRAIND_HTTP_LISTEN", "127.0.0.1:0", 1);
    setenv("RTRAIND_MAP_SPOOL_BELOW", "0", 1);
    setenv("RTRAIND_STATE_DIR", "", 1); /* empty: unset */
    REQUIRE(rt_options_parse(&o, 1, none, &st) == 0);
    CHECK(o.srv.max_sessions == 8 && o.idle_ms == 10000 && o.srv.ckpt_no_fsync == 1);
    CHECK(o.log_format == RT_LOG_FORMAT_JSON && o.srv.quota[RT_Q_UPLOADS] == 2048);
    CHECK(o.http_listen && !strcmp(o.http_listen, "127.0.0.1:0"));
    CHECK(o.srv.map_spool_set == 1 && o.srv.map_spool_below == 0 && !o.srv.state_dir);

    /* the command line over the environment, an old name too */
    CHECK(PARSE(&o, &st, "--max-sessions", "9", "--session-idle-s", "5",
                "--metrics-listen=127.0.0.1:1") == 0);
    CHECK(o.srv.max_sessions == 9 && o.idle_ms == 5000 &&
          !strcmp(o.http_listen, "127.0.0.1:1"));
    /* a bad variable the command line overrides is not read */
    setenv("RTRAIND_THREADS", "65", 1);
    CHECK(PARSE(&o, &st, "--threads", "3") == 0 && o.srv.threads == 3);
    /* ... and one it does not stops the daemon: status 2 */
    st = -1;
    CHECK(rt_options_parse(&o, 1, none, &st) < 0 && st == 2);
    unsetenv("RTRAIND_THREADS");
    setenv("RTRAIND_CHECKPOINT_NO_FSYNC", "maybe", 1);
    st = -1;
    CHECK(rt_options_parse(&o, 1, none, &st) < 0 && st == 2);
    clear_env();

    st = -1;
    CHECK(PARSE(&o, &st, "--threads", "0") < 0 && st == 2);
    st = -1;
    CHECK(PARSE(&o, &st, "--frobnicate") < 0 && st == 2);
    st = -1;
    CHECK(PARSE(&o, &st, "stray") < 0 && st == 2);
    st = -1;
    CHECK(PARSE(&o, &st, "--listen", "127.0.0.1:99999") < 0 && st == 2);
    st = -1;
    CHECK(PARSE(&o, &st, "--listen", "10.1.2.3:7070") < 0 && st == 2);
    st = -1;
    CHECK(PARSE(&o, &st, "--version") < 0 && st == 0);
}

/* Flag lines of --help: "  --name ..." at the start of a line. */
static void test_help_lists_the_table(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    REQUIRE(f);
    rt_options_usage(f);
    fclose(f);
    int lines = 0;
    int seen[RT_OPT__COUNT + 16] = {0};
    for (char *p = buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, "  --", 4))
            continue;
        lines++;
        size_t n = strcspn(p + 4, " \n");
        int found = -1;
        for (int i = 0; i < RT_OPT__COUNT; i++)
            if (strlen(rt_daemon_options[i].name) == n &&
                !strncmp(rt_daemon_options[i].name, p + 4, n))
                found = i;
        for (int a = 0; a < rt_daemon_option_n_aliases && a < 16; a++)
            if (strlen(rt_daemon_option_aliases[a].name) == n &&
                !strncmp(rt_daemon_option_aliases[a].name, p + 4, n))
                found = RT_OPT__COUNT + a;
        CHECK(found >= 0 && !seen[found]);
        if (found >= 0)
            seen[found]++;
    }
    CHECK(lines == RT_OPT__COUNT + rt_daemon_option_n_aliases);
    free(buf);
}

int main(void)
{
    test_rows();
    test_defaults_match_config_init();
    test_quota_rows();
    test_choices();
    test_values();
    test_parse();
    test_help_lists_the_table();
    printf("%d option rows, %d aliases: %s\n", RT_OPT__COUNT, rt_daemon_option_n_aliases,
           failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
