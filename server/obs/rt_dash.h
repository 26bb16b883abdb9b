/*
 * rt_dash.h - the live dashboard on the daemon's HTTP port (the one that
 * serves /metrics): what it records, and how it reads the rest.
 *
 * Recording (any thread, at a call's end and a Fit's epoch ends, never per
 * step): a short mutex over fixed rings, a copy of a few hundred bytes,
 * nothing allocated.
 *
 *     rt_dash_call("/rtrain.v1.Trainer/Ping", "alice", sid, 0, 0, &timings);
 *     int f = rt_dash_fit_begin("alice", sid, pid, epochs);
 *     rt_dash_fit_epoch(f, &point);   ...   rt_dash_fit_end(f, code);
 *
 * What the daemon owns (sessions, programs, datasets, lanes) comes from a
 * provider the server attaches (server/rpc/rt_srv_dash.c); the HTTP thread
 * asks it at render time, so the call path pays nothing for an open page.
 *
 * HTTP (rt_metrics.c hands it every URL but /metrics):
 *   GET  /                 the page (assets embedded in the binary)
 *   GET  /app.js /app.css /uplot.js /uplot.css
 *   GET  /api/state        JSON: what the caller may see
 *   GET  /api/events       server-sent events: {"seq":N} when it changed
 *   GET  /login, POST /login (token=...)   sets an HttpOnly cookie
 *   GET  /logout           clears it
 * With --tokens a request carries "Authorization: Bearer TOKEN" or the
 * cookie, and sees only its principal's sessions, programs, data, calls
 * and fits. Without tokens only loopback peers are served. Read-only.
 */
#ifndef RTRAIN_DASH_H
#define RTRAIN_DASH_H

#include <stddef.h>
#include <stdint.h>

#include "rtrain.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A growing text buffer for JSON; oom sticks once an append failed. */
typedef struct rt_dash_buf {
    char *p;
    size_t n, cap;
    int oom;
} rt_dash_buf;
void rt_dash_printf(rt_dash_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string, quoted and escaped ("null" for NULL). */
void rt_dash_str(rt_dash_buf *b, const char *s);
/* A double as JSON (null when not finite). */
void rt_dash_num(rt_dash_buf *b, double v);

typedef struct rt_dash_provider {
    void *ud;
    int auth_required; /* --tokens: every request names its principal */
    /* The principal token stands for: its name into out and 0, or < 0. */
    int (*who)(void *ud, const char *token, size_t len, char *out, size_t outlen);
    /* Members of the state object (no braces, each ending with a comma)
     * that principal may see; NULL = everything (single-user). */
    void (*state)(void *ud, const char *principal, rt_dash_buf *b);
} rt_dash_provider;

/* One provider per process (the daemon); detach names the ud attached. */
void rt_dash_attach(const rt_dash_provider *p);
void rt_dash_detach(void *ud);

/* A call's end: t is the Timings the client received (NULL: none was
 * sent, e.g. a call that failed); steps the RunSteps K (else 0). */
void rt_dash_call(const char *method, const char *principal, const char *session, int code,
                  uint64_t steps, const Rtrain__V1__Timings *t);

typedef struct rt_dash_point {
    int64_t epoch, step;
    double loss, acc;         /* acc NaN when not a metric */
    double val_loss, val_acc; /* NaN without validation */
    uint64_t execute_ns;
} rt_dash_point;

/* A Fit: begin returns its handle (> 0), or 0 (then the others ignore it). */
int rt_dash_fit_begin(const char *principal, const char *session, const char *program,
                      uint32_t epochs);
void rt_dash_fit_epoch(int fit, const rt_dash_point *pt);
void rt_dash_fit_end(int fit, int code);

/* The recorded part of /api/state as object members (no braces): seq,
 * now_ms, calls (the last 120), ping_floor, k_sweep, fits; principal's
 * only, or everyone's for NULL. */
void rt_dash_registry_json(const char *principal, rt_dash_buf *b);

/* The HTTP side, called by rt_metrics.c on its MHD thread. */
struct MHD_Connection;
struct MHD_Daemon;
typedef struct rt_dash_http rt_dash_http;
int rt_dash_http_start(rt_dash_http **out);
/* Before MHD_stop_daemon: resumes the suspended event streams. */
void rt_dash_http_stop(rt_dash_http *h);
void rt_dash_http_free(rt_dash_http *h);
int rt_dash_request(rt_dash_http *h, struct MHD_Connection *conn, const char *url,
                    const char *method, const char *upload_data, size_t *upload_data_size,
                    void **con_cls);
void rt_dash_request_done(void **con_cls);

#ifdef __cplusplus
}
#endif
#endif
