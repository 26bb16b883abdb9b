/* cli_conn.c - what every command that calls the daemon shares (rtrain's
 * and rtrain-bench's): connecting, error reporting, SIGINT. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

volatile sig_atomic_t cli_interrupted;
rt_client *volatile cli_active_client;

static void on_sigint(int sig)
{
    (void)sig;
    const int saved = errno; /* the interrupted code's, kept (signal() may set it) */
    cli_interrupted = 1;
    /* rt_client_cancel only stores an atomic flag: async-signal-safe. */
    rt_client *c = cli_active_client;
    if (c)
        rt_client_cancel(c);
    /* A second Ctrl-C ends the process the default way. */
    signal(SIGINT, SIG_DFL);
    errno = saved;
}

void cli_install_sigint(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

int cli_connect(const cli_opts *o, rt_client **c)
{
    rt_client_opts co;
    rt_client_opts_init(&co);
    co.target = o->server;
    co.tls_ca = o->tls_ca;
    co.tls_cert = o->tls_cert;
    co.tls_key = o->tls_key;
    co.token_file = o->token_file;
    char err[300];
    int rc = rt_client_connect(&co, c, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "rtrain: cannot create a client for %s: %s\n",
                o->server ? o->server : "(default)", err[0] ? err : rt_strerror(rc));
        return cli_exit_code(rc);
    }
    if (o->timeout_s > 0)
        rt_client_set_timeout_ms(*c, (int64_t)(o->timeout_s * 1000));
    cli_active_client = *c;
    return 0;
}

int cli_fail(rt_client *c, const char *what, int rc)
{
    if (rc == RT_ECANCELLED && cli_interrupted) {
        fprintf(stderr, "rtrain: %s: interrupted\n", what);
        return CLI_EXIT_INTERRUPTED;
    }
    const char *msg = c ? rt_client_errmsg(c) : "";
    if (!msg || !*msg)
        msg = rt_strerror(rc);
    /* The daemon names its request field; the user's knob is the flag. */
    const char *field = strstr(msg, "set csv_header");
    if (field)
        fprintf(stderr, "rtrain: %s failed: %.*sgive --csv-header%s\n", what, (int)(field - msg),
                msg, field + strlen("set csv_header"));
    else
        fprintf(stderr, "rtrain: %s failed: %s\n", what, msg);
    return cli_exit_code(rc);
}
