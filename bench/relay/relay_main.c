/* relay_main.c - `rtrain_relay`: the latency-injecting relay on its own.
 *
 *     rtrain_relay --target 127.0.0.1:7070 --rtt 10ms [--jitter 1ms]
 *                  [--bandwidth 1gbit] [--listen 127.0.0.1:0]
 *
 * Prints "relay listening on HOST:PORT" once bound, relays until SIGINT or
 * SIGTERM, then prints what it carried. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rt_relay.h"
#include "rt_units.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: rtrain_relay --target HOST:PORT [--rtt D | --delay D] [--jitter D]\n"
               "                    [--bandwidth R] [--listen HOST:PORT]\n"
               "  --rtt D        round trip added: D/2 each way (10ms, 500us, 0.05s)\n"
               "  --delay D      one-way delay, each direction\n"
               "  --jitter D     each chunk's delay varies uniformly by +-D (never reorders)\n"
               "  --bandwidth R  cap per direction: 100mbit, 1gbit, 50MB (per second)\n"
               "  --listen ADDR  default 127.0.0.1:0 (a free port)\n");
}

int main(int argc, char **argv)
{
    rt_relay_config cfg;
    rt_relay_config_init(&cfg);
    static const struct option opts[] = {
        {"target", 1, 0, 't'}, {"rtt", 1, 0, 'r'},    {"delay", 1, 0, 'd'},
        {"jitter", 1, 0, 'j'}, {"bandwidth", 1, 0, 'b'}, {"listen", 1, 0, 'l'},
        {"help", 0, 0, 'h'},   {0, 0, 0, 0}};
    int o;
    uint64_t v;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 't': cfg.target = optarg; break;
        case 'l': cfg.listen = optarg; break;
        case 'r':
        case 'd':
            if (rt_parse_duration_us(optarg, &v) < 0)
                goto bad;
            cfg.delay_us = o == 'r' ? v / 2 : v;
            break;
        case 'j':
            if (rt_parse_duration_us(optarg, &cfg.jitter_us) < 0)
                goto bad;
            break;
        case 'b':
            if (rt_parse_rate_Bps(optarg, &cfg.bandwidth_Bps) < 0)
                goto bad;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        continue;
    bad:
        fprintf(stderr, "rtrain_relay: bad value '%s'\n", optarg);
        return 2;
    }
    if (!cfg.target || optind < argc) {
        usage(stderr);
        return 2;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* the relay thread inherits it */
    rt_relay *r;
    char err[256];
    if (rt_relay_start(&cfg, &r, err, sizeof err) < 0) {
        fprintf(stderr, "rtrain_relay: %s\n", err);
        return 1;
    }
    printf("relay listening on %s\n", rt_relay_address(r));
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    rt_relay_stats st;
    rt_relay_get_stats(r, &st);
    rt_relay_stop(r);
    printf("relay: %llu connection(s), %llu bytes up, %llu bytes down\n",
           (unsigned long long)st.connections, (unsigned long long)st.bytes_up,
           (unsigned long long)st.bytes_down);
    return 0;
}
