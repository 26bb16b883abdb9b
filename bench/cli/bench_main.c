/* bench_main.c - `rtrain-bench`: the benchmarks of the command line
 * (bench_cli.h), run by `rtrain bench ...` with rtrain's own command line,
 * or directly:
 *
 *     rtrain-bench overhead [--max-k 1024] [--reps N] [--rtt 10ms] ...
 *     rtrain-bench story [--reps N] [--explain] ...
 *
 * The options are rtrain's (`rtrain bench overhead --help`). Exit codes as
 * rtrain's. */
#include "bench_cli.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    /* `rtrain-bench overhead ...` is `rtrain bench overhead ...` */
    char **av = argv;
    if (argc >= 2 && (!strcmp(argv[1], "overhead") || !strcmp(argv[1], "story"))) {
        if (!(av = malloc(sizeof *av * (size_t)(argc + 2)))) {
            fprintf(stderr, "rtrain-bench: out of memory\n");
            return CLI_EXIT_OTHER;
        }
        av[0] = argv[0];
        av[1] = "bench";
        memcpy(av + 2, argv + 1, sizeof *av * (size_t)argc); /* with argv's NULL */
        argc++;
    }
    cli_opts o;
    char err[512];
    int rc = cli_parse(argc, av, &o, err, sizeof err);
    if (rc == 0 && o.cmd == CLI_HELP && o.help_cmd == CLI_NONE) {
        printf("usage: rtrain-bench {overhead|story} [options] (or rtrain bench ...)\n\n");
        cli_usage_cmd(stdout, CLI_BENCH_OVERHEAD);
        printf("\n");
        cli_usage_cmd(stdout, CLI_BENCH_STORY);
        return 0;
    }
    if (rc < 0 || (o.cmd != CLI_BENCH_OVERHEAD && o.cmd != CLI_BENCH_STORY &&
                   !(o.cmd == CLI_HELP && (o.help_cmd == CLI_BENCH_OVERHEAD ||
                                           o.help_cmd == CLI_BENCH_STORY)))) {
        fprintf(stderr, "rtrain-bench: %s\n", rc < 0 ? err : "runs only the benchmarks");
        fprintf(stderr, "usage: rtrain-bench {overhead|story} [options]; "
                "rtrain bench overhead --help for the options\n");
        return CLI_EXIT_USAGE;
    }
    if (o.cmd == CLI_HELP) {
        cli_usage_cmd(stdout, o.help_cmd);
        return 0;
    }
    cli_install_sigint();
    /* A reader that stops early makes writes fail with EPIPE instead of
     * killing the process. */
    signal(SIGPIPE, SIG_IGN);
    return cli_with_relay(&o, o.cmd == CLI_BENCH_OVERHEAD ? cli_cmd_bench_overhead
                                                          : cli_cmd_bench_story);
}
