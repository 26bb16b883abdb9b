/* main.c - `rtrain`: the command-line client. Parses, dispatches, and
 * implements the two small commands (info, ping). Exit codes in cli.h. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_version.h"
#include "rt_wire.h"

static void print_list(const char *label, char **v, size_t n)
{
    printf("%-12s", label);
    for (size_t i = 0; i < n; i++)
        printf("%s%s", i ? ", " : "", v[i]);
    printf("%s\n", n ? "" : "-");
}

int cli_cmd_info(const cli_opts *o)
{
    rt_client *c;
    int ex = cli_connect(o, &c);
    if (ex)
        return ex;
    rt_client_info in;
    int rc = rt_client_info_get(c, &in);
    if (rc < 0) {
        ex = cli_fail(c, "GetInfo", rc);
    } else {
        printf("server      %s\n", rt_client_target(c));
        printf("version     %s (engine %u)\n", in.version, in.engine_version);
        printf("device      %s (%s, %s), %u cores, %.1f GiB\n", in.device_name, in.device_kind,
               in.backend, in.device_cores, (double)in.device_memory_bytes / (1u << 30));
        printf("backend     %s\n", in.backend);
        printf("limits      message %llu B, dataset %llu B, upload %llu B, sessions %u, "
               "dim %llu, params %llu, steps/call %llu\n",
               (unsigned long long)in.max_message_bytes, (unsigned long long)in.max_dataset_bytes,
               (unsigned long long)in.max_upload_bytes, in.max_sessions,
               (unsigned long long)in.max_dim, (unsigned long long)in.max_params,
               (unsigned long long)in.max_steps_per_call);
        if (in.state[0])
            printf("state       %s%s\n", in.state,
                   strcmp(in.state, "disk") ? " (restarts lose sessions)"
                                            : " (durable: sessions survive restarts)");
        print_list("ops", in.ops, in.n_ops);
        print_list("formats", in.formats, in.n_formats);
        print_list("losses", in.losses, in.n_losses);
        print_list("optimizers", in.optimizers, in.n_optimizers);
        if (in.n_replica_hosts) {
            printf("replicas: %zu (MPI%s)\n", in.n_replica_hosts,
                   in.deterministic_reduce ? ", deterministic reduce" : "");
            for (size_t i = 0; i < in.n_replica_hosts; i++)
                printf("  rank %zu: %s\n", i, in.replica_hosts[i]);
            if (in.deterministic_reduce)
                printf("deterministic reduce: %u micro-shards per batch\n",
                       in.deterministic_reduce);
        }
        rt_client_info_free(&in);
        if (o->timings) {
            rt_client_timings t;
            rt_client_last_timings(c, &t);
            printf("\n");
            cli_print_timings(stdout, &t, 1);
        }
    }
    cli_active_client = NULL;
    rt_client_destroy(c);
    return ex;
}

int cli_cmd_ping(const cli_opts *o)
{
    rt_client *c;
    int ex = cli_connect(o, &c);
    if (ex)
        return ex;
    rt_client_trace_enable(c, o->trace != NULL);
    /* The first call opens the connection; it is reported apart. */
    uint64_t first;
    int rc = rt_client_ping(c, (size_t)o->size, &first);
    if (rc < 0) {
        ex = cli_fail(c, "Ping", rc);
        goto out;
    }
    double *rtt = malloc((size_t)o->count * sizeof *rtt);
    double *srv = malloc((size_t)o->count * sizeof *srv);
    if (!rtt || !srv) {
        free(rtt);
        free(srv);
        fprintf(stderr, "rtrain: out of memory\n");
        ex = CLI_EXIT_OTHER;
        goto out;
    }
    long n = 0;
    for (; n < o->count && !cli_interrupted; n++) {
        uint64_t ns;
        rc = rt_client_ping(c, (size_t)o->size, &ns);
        if (rc < 0) {
            ex = cli_fail(c, "Ping", rc);
            break;
        }
        rt_client_timings t;
        rt_client_last_timings(c, &t);
        rtt[n] = ns / 1e3;
        srv[n] = t.server_total_ns / 1e3;
    }
    if (!ex && n > 0) {
        double mean = 0;
        for (long i = 0; i < n; i++)
            mean += rtt[i];
        mean /= (double)n;
        double p50 = cli_percentile(rtt, (size_t)n, 50);
        double p99 = cli_percentile(rtt, (size_t)n, 99);
        double mn = rtt[0], mx = rtt[n - 1];
        double s50 = cli_percentile(srv, (size_t)n, 50);
        printf("ping %s: %ld calls, %ld B each way (first call, with connect: %.1f us)\n",
               rt_client_target(c), n, o->size, first / 1e3);
        printf("round trip us: min %.1f  p50 %.1f  p99 %.1f  max %.1f  mean %.1f\n", mn, p50, p99,
               mx, mean);
        printf("server total p50 %.1f us; wire+framework p50 ~%.1f us\n", s50, p50 - s50);
    }
    if (cli_interrupted && !ex)
        ex = CLI_EXIT_INTERRUPTED;
    free(rtt);
    free(srv);
    if (o->trace && rt_client_trace_write(c, o->trace) < 0)
        fprintf(stderr, "rtrain: cannot write the trace %s\n", o->trace);
out:
    cli_active_client = NULL;
    rt_client_destroy(c);
    return ex;
}

/* `rtrain bench ...`: the benchmarks are a program of their own
 * (rtrain-bench, bench/cli), so that this one links no benchmark code. It
 * runs with this command line, checked here first: the rtrain-bench next
 * to this program (the build tree and the package put them together), else
 * the one on PATH. Returns only when neither runs. */
static int run_bench(char **argv)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - sizeof "rtrain-bench");
    char *slash = n > 0 ? memrchr(self, '/', (size_t)n) : NULL;
    if (slash) {
        memcpy(slash + 1, "rtrain-bench", sizeof "rtrain-bench");
        argv[0] = self;
        execv(self, argv);
    }
    argv[0] = "rtrain-bench";
    execvp("rtrain-bench", argv);
    fprintf(stderr,
            "rtrain: bench runs rtrain-bench, which is neither next to rtrain nor on "
            "PATH (%s): build the target rtrain_bench, or install it beside rtrain\n",
            strerror(errno));
    return CLI_EXIT_OTHER;
}

int main(int argc, char **argv)
{
    cli_opts o;
    char err[512];
    if (cli_parse(argc, argv, &o, err, sizeof err) < 0) {
        fprintf(stderr, "rtrain: %s\n", err);
        fprintf(stderr, "usage: rtrain {info|ping|fit|eval|predict|export|bench overhead|"
                        "bench story} [options]; rtrain --help for more\n");
        return CLI_EXIT_USAGE;
    }
    if (o.cmd == CLI_BENCH_OVERHEAD || o.cmd == CLI_BENCH_STORY)
        return run_bench(argv);
    cli_install_sigint();
    /* A reader that stops early (`rtrain predict --out - | head`) makes
     * writes fail with EPIPE instead of killing the process. */
    signal(SIGPIPE, SIG_IGN);
    switch (o.cmd) {
    case CLI_HELP:
        if (o.help_cmd != CLI_NONE)
            cli_usage_cmd(stdout, o.help_cmd);
        else
            cli_usage(stdout);
        return 0;
    case CLI_VERSION: printf("rtrain %s\n", RT_VERSION_STRING); return 0;
    case CLI_INFO: return cli_cmd_info(&o);
    case CLI_PING: return cli_cmd_ping(&o);
    case CLI_FIT: return cli_cmd_fit(&o);
    case CLI_CKPT_PULL:
    case CLI_CKPT_PUSH: return cli_cmd_checkpoint(&o);
    case CLI_EVAL: return cli_cmd_eval(&o, 0);
    case CLI_PREDICT: return cli_cmd_eval(&o, 1);
    case CLI_EXPORT: return cli_cmd_export(&o);
    case CLI_BENCH_OVERHEAD:
    case CLI_BENCH_STORY: /* run_bench */
    case CLI_NONE: break;
    }
    return CLI_EXIT_USAGE;
}
