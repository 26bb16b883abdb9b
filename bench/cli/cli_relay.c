/* cli_relay.c - `rtrain bench ... --rtt D`: the bench talks to the daemon
 * through bench/relay's latency-injecting relay, started in this process
 * on a free loopback port. The bench itself is unchanged: it only sees a
 * different --server. */
#include "bench_cli.h"

#include <stdlib.h>

#include "rt_relay.h"

static void print_link(const cli_opts *o, const char *target, const char *via)
{
    char bw[64] = "no cap";
    if (o->bandwidth_Bps)
        snprintf(bw, sizeof bw, "%.1f Mbit/s each way", o->bandwidth_Bps * 8 / 1e6);
    printf("link: %s -> relay %s -> %s: RTT %.3g ms (%.3g ms each way), jitter +-%.3g ms, "
           "%s\n", "client", via, target, o->rtt_us / 1e3, o->rtt_us / 2e3,
           o->jitter_us / 1e3, bw);
}

int cli_with_relay(const cli_opts *o, int (*cmd)(const cli_opts *o))
{
    if (!o->relay)
        return cmd(o);
    const char *target = o->server ? o->server : getenv("RTRAIN_SERVER");
    if (!target || !*target)
        target = RT_DEFAULT_SERVER;
    rt_relay_config rc;
    rt_relay_config_init(&rc);
    rc.target = target;
    rc.delay_us = o->rtt_us / 2;
    rc.jitter_us = o->jitter_us;
    rc.bandwidth_Bps = o->bandwidth_Bps;
    rt_relay *r;
    char err[256];
    if (rt_relay_start(&rc, &r, err, sizeof err) < 0) {
        fprintf(stderr, "rtrain: %s\n", err);
        return CLI_EXIT_CONNECT;
    }
    print_link(o, target, rt_relay_address(r));
    fflush(stdout);
    cli_opts via = *o;
    via.server = rt_relay_address(r);
    int ex = cmd(&via);
    rt_relay_stats st;
    rt_relay_get_stats(r, &st);
    printf("relay: %llu connection(s), %.1f KiB up, %.1f KiB down, %llu chunks\n",
           (unsigned long long)st.connections, st.bytes_up / 1024.0, st.bytes_down / 1024.0,
           (unsigned long long)st.chunks);
    rt_relay_stop(r);
    return ex;
}
