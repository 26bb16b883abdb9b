/*
 * rtraind - the rtrain daemon.
 *
 *     rtraind --listen 127.0.0.1:0        # prints "rtraind listening on 127.0.0.1:PORT"
 *
 * Its options are the table in rt_options.h (each also an RTRAIND_*
 * environment variable); what it does with them is rt_daemon.c.
 *
 * Shared with others (docs/security.md):
 *
 *     rtraind --new-token alice >> tokens.txt   # prints the token on stderr
 *     rtraind --listen 0.0.0.0:7070 --tls-cert srv.pem --tls-key srv.key \
 *             --tokens tokens.txt
 */
#include "rt_daemon.h"
#include "rt_options.h"

int main(int argc, char **argv)
{
    rt_daemon_process_setup();
    rt_daemon_opts o;
    int status;
    if (rt_options_parse(&o, argc, argv, &status) < 0)
        return status; /* --help, --version, --new-token, or a bad option (2) */
    return rt_daemon_run(&o);
}
