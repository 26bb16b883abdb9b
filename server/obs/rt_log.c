/* rt_log.c - logging: the level, text and JSON log lines, escaping, and the
 * per-call access record. */
#include "rt_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rtrain/rt_error.h"

static int g_format = RT_LOG_FORMAT_TEXT;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static int g_level = RT_LOG_INFO;

int rt_obs_level_from_name(const char *name, rt_log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, level_names[i]) == 0) {
            *out = (rt_log_level)i;
            return 0;
        }
    return RT_EINVAL;
}

void rt_obs_set_level(rt_log_level lvl) { __atomic_store_n(&g_level, (int)lvl, __ATOMIC_RELAXED); }

rt_log_level rt_obs_level(void)
{
    return (rt_log_level)__atomic_load_n(&g_level, __ATOMIC_RELAXED);
}

static size_t escape(const char *in, char *out, size_t outlen, int backslash)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (!outlen)
        return 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        char e[5];
        size_t k = 0;
        if (*p == '\n') {
            e[k++] = '\\';
            e[k++] = 'n';
        } else if (*p == '\r') {
            e[k++] = '\\';
            e[k++] = 'r';
        } else if (*p == '\t') {
            e[k++] = '\\';
            e[k++] = 't';
        } else if (*p == '\\' && backslash) {
            e[k++] = '\\';
            e[k++] = '\\';
        } else if (*p < 0x20 || *p == 0x7f) {
            e[k++] = '\\';
            e[k++] = 'x';
            e[k++] = hex[*p >> 4];
            e[k++] = hex[*p & 15];
        } else {
            e[k++] = (char)*p;
        }
        if (o + k >= outlen)
            break;
        memcpy(out + o, e, k);
        o += k;
    }
    out[o] = 0;
    return o;
}

size_t rt_obs_escape(const char *in, char *out, size_t outlen)
{
    return escape(in, out, outlen, 1);
}

void rt_obs_log(rt_log_level lvl, const char *fmt, ...)
{
    if (rt_log_get_format() == RT_LOG_FORMAT_JSON) {
        va_list ap;
        va_start(ap, fmt);
        rt_log_vjson(lvl, fmt, ap);
        va_end(ap);
        return;
    }
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000, level_names[(int)lvl & 3]);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof line)
        escape(msg, line + n, sizeof line - (size_t)n, 0);
    /* One write per line so lines from different threads never interleave. */
    fprintf(stderr, "%s\n", line);
}

static const char *const code_names[17] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

int rt_log_format_from_name(const char *name, rt_log_format *out)
{
    if (name && strcmp(name, "text") == 0)
        *out = RT_LOG_FORMAT_TEXT;
    else if (name && strcmp(name, "json") == 0)
        *out = RT_LOG_FORMAT_JSON;
    else
        return RT_EINVAL;
    return 0;
}

void rt_log_set_format(rt_log_format f) { __atomic_store_n(&g_format, (int)f, __ATOMIC_RELAXED); }

rt_log_format rt_log_get_format(void)
{
    return (rt_log_format)__atomic_load_n(&g_format, __ATOMIC_RELAXED);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one. */
static int utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    int n;
    unsigned min;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0) {
        n = 2;
        min = 0x80;
        c &= 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3;
        min = 0x800;
        c &= 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        n = 4;
        min = 0x10000;
        c &= 0x07;
    } else
        return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    return n;
}

void rt_log_json_str(char *dst, size_t cap, size_t *len, const char *s)
{
    size_t o = *len;
    if (cap < o + 3) /* room for "" and the NUL */
        return;
    size_t end = cap - 2; /* keep the closing quote and the NUL */
    dst[o++] = '"';
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        char esc[8];
        const char *piece = esc;
        size_t n;
        int u = utf8_len(p);
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            n = 2;
            u = 1;
        } else if (*p == '\n' || *p == '\r' || *p == '\t') {
            esc[0] = '\\';
            esc[1] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
            n = 2;
            u = 1;
        } else if (*p < 0x20 || *p == 0x7f) {
            n = (size_t)snprintf(esc, sizeof esc, "\\u%04x", *p);
            u = 1;
        } else if (u == 0) {
            piece = "\\ufffd";
            n = 6;
            u = 1;
        } else {
            piece = (const char *)p;
            n = (size_t)u;
        }
        if (o + n > end)
            break;
        memcpy(dst + o, piece, n);
        o += n;
        p += u;
    }
    dst[o++] = '"';
    dst[o] = 0;
    *len = o;
}

/* {"ts":"...","level":"..." into line; returns the length. */
static size_t open_line(char *line, size_t cap, rt_log_level lvl)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, cap, "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ\",\"level\":\"%s\"",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000, level_names[(int)lvl & 3]);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* ,"key": then the JSON string s. */
static void put_field(char *line, size_t cap, size_t *len, const char *key, const char *s)
{
    int n = snprintf(line + *len, cap - *len, ",\"%s\":", key);
    if (n < 0 || (size_t)n >= cap - *len)
        return;
    *len += (size_t)n;
    rt_log_json_str(line, cap, len, s);
}

static void close_line(char *line, size_t cap, size_t len)
{
    if (len + 2 > cap)
        len = cap - 2; /* cannot happen: fields stop short of the end */
    line[len++] = '}';
    line[len] = 0;
    /* One write per line so lines from different threads never interleave. */
    fprintf(stderr, "%s\n", line);
}

void rt_log_vjson(rt_log_level lvl, const char *fmt, va_list ap)
{
    char msg[1024], line[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t len = open_line(line, sizeof line - 1, lvl);
    put_field(line, sizeof line - 1, &len, "msg", msg);
    close_line(line, sizeof line, len);
}

void rt_log_call(const rt_log_call_info *ci)
{
    int json = rt_log_get_format() == RT_LOG_FORMAT_JSON;
    rt_log_level lvl = json ? RT_LOG_INFO : RT_LOG_DEBUG;
    if ((int)lvl > (int)rt_obs_level())
        return;
    const char *status = ci->code >= 0 && ci->code < 17 ? code_names[ci->code] : "UNKNOWN";
    double ms = (double)ci->duration_ns / 1e6;
    if (!json) {
        rt_obs_log(lvl, "call %s %s %.3f ms principal=%s session=%s%s%s", ci->method, status, ms,
                   ci->principal ? ci->principal : "anonymous",
                   ci->session && *ci->session ? ci->session : "-", ci->error ? ": " : "",
                   ci->error ? ci->error : "");
        return;
    }
    char line[2048];
    size_t cap = sizeof line - 1;
    size_t len = open_line(line, cap, lvl);
    put_field(line, cap, &len, "principal", ci->principal ? ci->principal : "anonymous");
    put_field(line, cap, &len, "session", ci->session ? ci->session : "");
    put_field(line, cap, &len, "method", ci->method);
    put_field(line, cap, &len, "status", status);
    int n = snprintf(line + len, cap - len, ",\"code\":%d,\"duration_ms\":%.6f", ci->code, ms);
    if (n > 0 && (size_t)n < cap - len)
        len += (size_t)n;
    if (ci->error)
        put_field(line, cap, &len, "error", ci->error);
    close_line(line, sizeof line, len);
}

const char *rt_log_esc(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    if (!len)
        return buf;
    for (; s && *s && o + 5 < len; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '\\' || ch == '"') {
            buf[o++] = '\\';
            buf[o++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            o += (size_t)snprintf(buf + o, len - o, "\\x%02x", ch);
        } else {
            buf[o++] = (char)ch;
        }
    }
    buf[o] = 0;
    return buf;
}

const char *rt_log_id(const char *id, char buf[16])
{
    size_t n = id ? strlen(id) : 0;
    if (n > 10)
        n = 10;
    char tmp[11];
    memcpy(tmp, id ? id : "", n);
    tmp[n] = 0;
    rt_log_esc(tmp, buf, 16);
    return buf;
}
