/* rt_client_trace.c - Chrome trace-event JSON from per-call timings.
 *
 * Layout of one call starting at S and lasting T (client_total_ns):
 *   tid 0 "calls":   the call, [S, S+T]
 *   tid 1 "client":  encode at [S, S+enc]; round trip ending where decode
 *                    starts; decode at [S+T-dec, S+T]
 *   tid 2 "server":  the daemon's phases in their order (decode, queue,
 *                    compile, execute, encode, other), placed inside the round
 *                    trip with the wire time split evenly before and after.
 * The server's clock is not shared with the client's, so the server's
 * position inside the round trip is a layout, not a measurement; the
 * durations are measurements. Timestamps are microseconds from the first
 * call's start. */
#include "rt_client_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void ev(FILE *f, int *first, const char *name, const char *cat, int tid, double ts_us,
               double dur_us, const rt_client_timings *t)
{
    fprintf(f,
            "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,"
            "\"dur\":%.3f,\"pid\":1,\"tid\":%d",
            *first ? "" : ",", name, cat, ts_us, dur_us < 0 ? 0 : dur_us, tid);
    if (t)
        fprintf(f,
                ",\"args\":{\"method\":\"%s\",\"round_trip_us\":%.3f,"
                "\"server_total_us\":%.3f,\"wire_us\":%.3f,\"unattributed_us\":%.3f,"
                "\"client_in_stream_us\":%.3f,"
                "\"cache_hit\":%s,\"bytes_sent\":%llu,\"bytes_received\":%llu}",
                t->method ? t->method : "?", t->round_trip_ns / 1e3, t->server_total_ns / 1e3,
                t->wire_ns / 1e3, t->unattributed_ns / 1e3, t->client_stream_ns / 1e3,
                t->cache_hit ? "true" : "false", (unsigned long long)t->bytes_sent,
                (unsigned long long)t->bytes_received);
    fputc('}', f);
    *first = 0;
}

static void thread_name(FILE *f, int *first, int tid, const char *name)
{
    fprintf(f,
            "%s\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
            "\"args\":{\"name\":\"%s\"}}",
            *first ? "" : ",", tid, name);
    *first = 0;
}

/* JSON string contents: names and details are ours, but a quote or a
 * backslash in one must not break the file. */
static void json_str(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
}

static void span_ev(FILE *f, const rt_client_trace_span *sp, int tid, uint64_t t0)
{
    fputs(",\n{\"name\":\"", f);
    json_str(f, sp->name);
    fprintf(f,
            "\",\"cat\":\"phase\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,"
            "\"tid\":%d,\"args\":{\"client_us\":%.3f,\"wire_us\":%.3f,",
            (double)(sp->start_ns - t0) / 1e3, sp->dur_ns / 1e3, tid, sp->client_ns / 1e3,
            sp->wire_ns / 1e3);
    if (sp->has_server)
        fprintf(f, "\"server_us\":%.3f,", sp->server_ns / 1e3);
    else
        fputs("\"server_us\":null,", f);
    fprintf(f, "\"unattributed_us\":%.3f", sp->unattributed_ns / 1e3);
    if (sp->detail) {
        fputs(",\"detail\":\"", f);
        json_str(f, sp->detail);
        fputc('"', f);
    }
    fputs("}}", f);
}

int rt_client_trace_write_calls(const rt_client_timings *calls, size_t n, const char *path)
{
    return rt_client_trace_write_spans(calls, n, NULL, 0, path);
}

int rt_client_trace_write_spans(const rt_client_timings *calls, size_t n,
                                const rt_client_trace_span *spans, size_t n_spans, const char *path)
{
    if (!path || (n && !calls) || (n_spans && !spans))
        return RT_EINVAL;
    FILE *f = fopen(path, "w");
    if (!f)
        return RT_EIO;
    uint64_t t0 = n ? calls[0].start_ns : n_spans ? spans[0].start_ns : 0;
    for (size_t i = 0; i < n; i++)
        if (calls[i].start_ns < t0)
            t0 = calls[i].start_ns;
    for (size_t i = 0; i < n_spans; i++)
        if (spans[i].start_ns < t0)
            t0 = spans[i].start_ns;
    int first = 1;
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
    fprintf(f, "\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
               "\"args\":{\"name\":\"rtrain client + rtraind\"}}");
    first = 0;
    thread_name(f, &first, 0, "calls");
    thread_name(f, &first, 1, "client phases");
    thread_name(f, &first, 2, "server phases (rtraind)");
    for (size_t i = 0; i < n; i++) {
        const rt_client_timings *t = &calls[i];
        double s = (double)(t->start_ns - t0) / 1e3;
        double total = t->client_total_ns / 1e3;
        double enc = t->client_encode_ns / 1e3;
        double dec = t->client_decode_ns / 1e3;
        double rtt = t->round_trip_ns / 1e3;
        double rtt_start = s + total - dec - rtt;
        if (rtt_start < s + enc)
            rtt_start = s + enc;
        ev(f, &first, t->method ? t->method : "call", "call", 0, s, total, t);
        ev(f, &first, "client encode", "client", 1, s, enc, NULL);
        ev(f, &first, "round trip", "client", 1, rtt_start, rtt, NULL);
        ev(f, &first, "client decode", "client", 1, rtt_start + rtt, dec, NULL);
        if (!t->has_server)
            continue;
        double pos = rtt_start + (t->wire_ns / 1e3) / 2;
        ev(f, &first, "server total", "server", 2, pos, t->server_total_ns / 1e3, NULL);
        const struct {
            const char *name;
            uint64_t ns;
        } ph[] = {
            {"decode", t->decode_ns},   {"queue", t->queue_ns},   {"compile", t->compile_ns},
            {"execute", t->execute_ns}, {"encode", t->encode_ns}, {"other", t->server_other_ns},
        };
        /* Phases nest under "server total" as a second row by sharing the
         * tid: complete events that fit inside their parent stack. */
        for (size_t k = 0; k < sizeof ph / sizeof ph[0]; k++) {
            if (!ph[k].ns)
                continue;
            ev(f, &first, ph[k].name, "server", 2, pos, ph[k].ns / 1e3, NULL);
            pos += ph[k].ns / 1e3;
        }
    }
    /* Spans: one row per track, numbered after the calls' three. */
    const char *tracks[8];
    int nt = 0;
    for (size_t i = 0; i < n_spans; i++) {
        const char *tr = spans[i].track ? spans[i].track : "phases";
        int k = 0;
        while (k < nt && strcmp(tracks[k], tr) != 0)
            k++;
        if (k == nt && nt < 8) {
            tracks[nt++] = tr;
            fprintf(f,
                    ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
                    "\"args\":{\"name\":\"",
                    3 + k);
            json_str(f, tr);
            fputs("\"}}", f);
        }
        span_ev(f, &spans[i], 3 + (k < 8 ? k : 7), t0);
    }
    fputs("\n]}\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return RT_EIO;
    return 0;
}
