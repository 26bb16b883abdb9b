/*
 * rt_log.h - log formats: the classic text lines, or JSON (one object per
 * line) for log pipelines, plus the per-call access record.
 *
 *     rt_log_set_format(RT_LOG_FORMAT_JSON);   // --log-format json
 *     RT_LOG(RT_LOG_INFO, "listening on %s", addr);
 *       -> {"ts":"2026-12-02T20:01:02.123456Z","level":"info","msg":"listening on ..."}
 *
 *     rt_log_call_info ci = {.principal = "alice", .session = "s-1a2b3c",
 *                            .method = "/rtrain.v1.Trainer/RunSteps", .code = 0,
 *                            .duration_ns = 41000};
 *     rt_log_call(&ci);
 *       -> {"ts":...,"level":"info","principal":"alice","session":"s-1a2b3c",
 *           "method":"/rtrain.v1.Trainer/RunSteps","status":"OK","code":0,
 *           "duration_ms":0.041}
 *
 * In JSON every call is logged at info (an access log); in text a call line
 * is a debug line, so the default text output stays as quiet as before.
 * Strings are escaped for JSON; bytes that are not UTF-8 become U+FFFD.
 */
#ifndef RTRAIN_LOG_H
#define RTRAIN_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "rt_obs.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rt_log_format { RT_LOG_FORMAT_TEXT = 0, RT_LOG_FORMAT_JSON = 1 } rt_log_format;

/* "text" | "json". Returns 0 or RT_EINVAL. */
int rt_log_format_from_name(const char *name, rt_log_format *out);
void rt_log_set_format(rt_log_format f);
rt_log_format rt_log_get_format(void);

/* One JSON line for a general message (rt_obs_log calls this in JSON). */
void rt_log_vjson(rt_log_level lvl, const char *fmt, va_list ap);

typedef struct rt_log_call_info {
    const char *principal; /* who called; NULL = "anonymous" (refused
                                before its token was checked) */
    const char *session;   /* session id prefix, NULL or "" = none */
    const char *method;    /* "/rtrain.v1.Trainer/Ping" */
    int code;              /* gRPC status code */
    uint64_t duration_ns;  /* arrival to status */
    const char *error;     /* the status message, NULL if none */
} rt_log_call_info;

void rt_log_call(const rt_log_call_info *ci);

/* Append s to dst (capacity cap, current length *len) as a JSON string
 * with quotes; truncates at the capacity but always stays valid JSON
 * (a closing quote is kept) and NUL-terminated. For tests and callers
 * building JSON. */
void rt_log_json_str(char *dst, size_t cap, size_t *len, const char *s);

/* For logs: s with control characters, quotes and backslashes escaped (a
 * newline in a name cannot forge a log line), cut to fit buf. Returns buf. */
const char *rt_log_esc(const char *s, char *buf, size_t len);
/* For logs: the first 10 characters of an id ("s-1a2b3c4d"), enough to
 * follow one session through the log but not to use it. Returns buf. */
const char *rt_log_id(const char *id, char buf[16]);

#ifdef __cplusplus
}
#endif
#endif
