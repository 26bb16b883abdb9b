/*
 * bench_cli.h - `rtrain-bench`: the benchmarks of the `rtrain` command line
 * (`rtrain bench overhead|story`), a program of their own so that the
 * shipped `rtrain` links no benchmark code. `rtrain bench ...` runs it (the
 * `rtrain-bench` next to `rtrain`, else on PATH) with the same arguments;
 * both parse them with cli_parse (client/cli/cli_args.c).
 */
#ifndef RTRAIN_BENCH_CLI_H
#define RTRAIN_BENCH_CLI_H

#include "cli.h"

/* cli_explain.c: a run as a waterfall of phases (bench story --explain).
 * Each phase's wall time splits into client, wire and server time from the
 * calls that started inside it, and what is left (unattributed). */
#define CLI_PHASES_MAX 40
typedef struct cli_phase {
    char name[40];
    char detail[200];         /* one line of sub-parts, or "" */
    int sub;                  /* a part of the phase above it */
    uint64_t start_ns, wall_ns;
    uint64_t client_ns, wire_ns, server_ns, unattr_ns;
    uint64_t auth_ns, durable_ns; /* of server_ns: --tokens, --state-dir */
    int has_server;           /* server_ns was measured (else "-") */
} cli_phase;
typedef struct cli_waterfall {
    uint64_t t0;              /* the run's start */
    cli_phase ph[CLI_PHASES_MAX];
    int n;
    long preempted;           /* the caller's thread, in the run (-1: unknown) */
} cli_waterfall;
/* A phase (or with sub, a part of the last phase) of wall time wall from
 * start, zeroed; NULL when full. */
cli_phase *cli_wf_add(cli_waterfall *w, const char *name, int sub, uint64_t start,
                      uint64_t wall);
/* Add one call's account to p (client, wire, server). */
void cli_wf_account(cli_phase *p, const rt_client_timings *t);
/* p's unattributed time: its wall time less the three. */
void cli_wf_close(cli_phase *p);
/* A phase [from, to) made of the calls that started in it, with
 * extra_client_ns of client work the caller measured outside the calls. */
cli_phase *cli_wf_calls(cli_waterfall *w, const char *name, uint64_t from, uint64_t to,
                        const rt_client_timings *calls, size_t n, uint64_t extra_client_ns);
void cli_wf_print(FILE *f, const cli_waterfall *w, const char *title);
/* The phases as trace spans (phases on track, parts on sub_track); names
 * point into w. Returns how many. */
size_t cli_wf_spans(const cli_waterfall *w, const char *track, const char *sub_track,
                    rt_client_trace_span *out, size_t max);

/* The overhead plot. xs = K values, series of per-step times (us) with
 * names; ping_floor_us is drawn as the line ping/K. Returns 0 or RT_EIO. */
typedef struct cli_series {
    const char *name;
    const char *color;
    int dashed;
    const double *y;
} cli_series;
int cli_svg_plot(const char *path, const char *title, const char *xlabel,
                 const char *ylabel, const double *xs, size_t n,
                 const cli_series *series, size_t n_series);

/* cli_bench.c: the commands (return an exit code). */
int cli_cmd_bench_overhead(const cli_opts *o);
int cli_cmd_bench_story(const cli_opts *o);
/* cli_relay.c: run a bench command through bench/relay when o->relay:
 * start the relay towards the server, run cmd with --server pointed at
 * it, stop it. */
int cli_with_relay(const cli_opts *o, int (*cmd)(const cli_opts *o));

#endif
