/* cli_explain.c - a run as a waterfall of phases (`rtrain bench story
 * --explain`).
 *
 * A phase is a stretch of the run measured by the caller (its wall time)
 * and the calls that started inside it (the client's trace). Its time is
 * split three ways from the calls' own accounts:
 *   server  the daemon's Timings: decode, queue, compile, execute, encode
 *           (its "other" is left unattributed);
 *   wire    round trip - server total - client work inside a stream: the
 *           network stack and gRPC on both sides, and thread wake-ups (the
 *           daemon's wait for a client stream's messages counts here);
 *   client  the library outside the round trip (encode, decode, reading
 *           and hashing files) and its work inside a stream, plus what the
 *           caller measured itself (extra_client_ns);
 * and the rest of the wall time is unattributed. */
#include "bench_cli.h"

#include <stdio.h>
#include <string.h>

cli_phase *cli_wf_add(cli_waterfall *w, const char *name, int sub, uint64_t start,
                      uint64_t wall)
{
    if (w->n >= CLI_PHASES_MAX)
        return NULL;
    cli_phase *p = &w->ph[w->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->sub = sub;
    p->start_ns = start;
    p->wall_ns = wall;
    return p;
}

static uint64_t sub0(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

void cli_wf_account(cli_phase *p, const rt_client_timings *t)
{
    /* The daemon's wait for a client stream's messages is in its other
     * time but is the stream's: wire, not server. */
    uint64_t wait = t->has_server ? t->server_stream_wait_ns : 0;
    uint64_t srv = t->has_server ? sub0(t->server_total_ns, wait) : 0;
    uint64_t other = t->has_server ? sub0(t->server_other_ns, wait) : 0;
    p->server_ns += sub0(srv, other);
    p->has_server |= t->has_server;
    p->auth_ns += t->auth_ns;
    p->durable_ns += t->durable_ns;
    p->wire_ns += sub0(t->round_trip_ns, srv + t->client_stream_ns);
    p->client_ns += sub0(t->client_total_ns, t->round_trip_ns) + t->client_stream_ns;
}

void cli_wf_close(cli_phase *p)
{
    p->unattr_ns = sub0(p->wall_ns, p->client_ns + p->wire_ns + p->server_ns);
}

cli_phase *cli_wf_calls(cli_waterfall *w, const char *name, uint64_t from, uint64_t to,
                        const rt_client_timings *calls, size_t n, uint64_t extra_client_ns)
{
    cli_phase *p = cli_wf_add(w, name, 0, from, to - from);
    if (!p)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (calls[i].start_ns >= from && calls[i].start_ns < to)
            cli_wf_account(p, &calls[i]);
    p->client_ns += extra_client_ns;
    cli_wf_close(p);
    /* What a feature that is on costs inside the daemon's time, summed
     * over the phase's calls: drawn from the phase's start. */
    static const char *const feat[2] = {"token checks (--tokens)",
                                        "state synced (--state-dir)"};
    uint64_t ns[2] = {p->auth_ns, p->durable_ns};
    uint64_t start = p->start_ns;
    for (int k = 0; k < 2; k++) {
        cli_phase *q = ns[k] ? cli_wf_add(w, feat[k], 1, start, ns[k]) : NULL;
        if (q) {
            q->server_ns = ns[k];
            q->has_server = 1;
        }
    }
    return p;
}

/* "1234.5" or "-" */
static const char *us(char *b, size_t n, uint64_t ns, int known)
{
    if (!known)
        snprintf(b, n, "-");
    else
        snprintf(b, n, "%.1f", ns / 1e3);
    return b;
}

void cli_wf_print(FILE *f, const cli_waterfall *w, const char *title)
{
    uint64_t end = w->t0;
    for (int i = 0; i < w->n; i++)
        if (w->ph[i].start_ns + w->ph[i].wall_ns > end)
            end = w->ph[i].start_ns + w->ph[i].wall_ns;
    double span = end > w->t0 ? (double)(end - w->t0) : 1.0;
    enum { BAR = 32 };
    fprintf(f, "%s\n", title);
    fprintf(f, "%-34s %9s %9s %9s %9s %9s %6s  %s\n", "phase", "start us", "wall us",
            "client", "wire", "server", "unatt", "waterfall");
    uint64_t tc = 0, tw = 0, ts = 0, tu = 0, twall = 0;
    for (int i = 0; i < w->n; i++) {
        const cli_phase *p = &w->ph[i];
        char a[24], b[24], c[24], name[40], bar[BAR + 1];
        int from = (int)((double)(p->start_ns - w->t0) / span * BAR + 0.5);
        int len = (int)((double)p->wall_ns / span * BAR + 0.5);
        if (from > BAR)
            from = BAR;
        if (len < 1)
            len = 1;
        if (from + len > BAR)
            len = BAR - from > 0 ? BAR - from : 0;
        for (int k = 0; k < BAR; k++)
            bar[k] = k >= from && k < from + len ? (p->sub ? '-' : '#') : ' ';
        bar[BAR] = 0;
        snprintf(name, sizeof name, "%s%s", p->sub ? "  " : "", p->name);
        double share = p->wall_ns ? 100.0 * (double)p->unattr_ns / (double)p->wall_ns : 0;
        char ua[16] = "";
        if (!p->sub)
            snprintf(ua, sizeof ua, "%.1f%%", share);
        fprintf(f, "%-34s %9.1f %9.1f %9s %9s %9s %6s |%s|\n", name,
                (double)(p->start_ns - w->t0) / 1e3, p->wall_ns / 1e3,
                us(a, sizeof a, p->client_ns, 1), us(b, sizeof b, p->wire_ns, 1),
                us(c, sizeof c, p->server_ns, p->has_server), ua, bar);
        if (p->detail[0])
            fprintf(f, "%-34s   %s\n", "", p->detail);
        if (!p->sub) {
            tc += p->client_ns;
            tw += p->wire_ns;
            ts += p->server_ns;
            tu += p->unattr_ns;
            twall += p->wall_ns;
        }
    }
    fprintf(f, "%-34s %9s %9.1f %9.1f %9.1f %9.1f %5.1f%%\n", "total (phases)", "",
            twall / 1e3, tc / 1e3, tw / 1e3, ts / 1e3,
            twall ? 100.0 * (double)tu / (double)twall : 0.0);
    fprintf(f, "run wall time %.1f us (from the first phase's start to the last one's "
            "end)\n", span / 1e3);
    /* What no clock in the run can attribute: the OS taking the CPU from
     * the caller between its marks and the library's calls (a busy
     * machine). Counted, not timed: the count is read outside the run. */
    if (w->preempted > 0)
        fprintf(f, "the client's thread was preempted %ld times in the run (a busy machine): "
                "its waits are in unattributed or wire\n", w->preempted);
}

size_t cli_wf_spans(const cli_waterfall *w, const char *track, const char *sub_track,
                    rt_client_trace_span *out, size_t max)
{
    size_t n = 0;
    for (int i = 0; i < w->n && n < max; i++) {
        const cli_phase *p = &w->ph[i];
        rt_client_trace_span *s = &out[n++];
        memset(s, 0, sizeof *s);
        s->name = p->name;
        s->track = p->sub ? sub_track : track;
        s->start_ns = p->start_ns;
        s->dur_ns = p->wall_ns;
        s->client_ns = p->client_ns;
        s->wire_ns = p->wire_ns;
        s->server_ns = p->server_ns;
        s->has_server = p->has_server;
        s->unattributed_ns = p->unattr_ns;
        s->detail = p->detail[0] ? p->detail : NULL;
    }
    return n;
}
