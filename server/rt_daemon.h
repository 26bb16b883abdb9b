/*
 * rt_daemon.h - rtraind's life after its options: the process settings,
 * MPI, the server, the HTTP endpoint and the libuv loop that owns the
 * signals (SIGTERM/SIGINT start a graceful stop, SIGHUP reloads the tokens
 * file) and the drain, grace and session-lease timers.
 *
 *     rt_daemon_process_setup();
 *     ... rt_options_parse(&o, argc, argv, &status) ...
 *     return rt_daemon_run(&o);   // the exit status
 */
#ifndef RTRAIN_DAEMON_H
#define RTRAIN_DAEMON_H

#include "rt_options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* malloc thresholds, SIGPIPE/SIGXFSZ ignored, the descriptor limit raised:
 * before anything else runs. */
void rt_daemon_process_setup(void);

/* Serves until a stop signal has run its course. Returns the exit status:
 * 0 after a graceful stop, 1 when the server or MPI cannot start. */
int rt_daemon_run(const rt_daemon_opts *o);

#ifdef __cplusplus
}
#endif

#endif
