/*
 * rt_health.h - the standard grpc.health.v1.Health service (Check, Watch
 * and List, proto/health.proto) on the daemon's gRPC server and completion
 * queue.
 *
 * Known services: "" (the whole daemon) and "rtrain.v1.Trainer"; both are
 * SERVING until rt_health_set_serving(h, 0), which the daemon calls when it
 * starts draining (SIGTERM). Check of any other name is NOT_FOUND; Watch of
 * one answers SERVICE_UNKNOWN and stays open, as the protocol says.
 *
 *     rt_health_hooks hk = {call_begin, call_end, srv};
 *     rt_health *h = rt_health_create(server, cq, &hk);  // before grpc_server_start
 *     ... grpc_server_start(server);  rt_health_start(h, 4);
 *     rt_health_set_serving(h, 0);       // watchers get NOT_SERVING
 *     rt_health_shutdown(h);             // end the Watch streams, post no more
 *     ... after the completion queue is drained:  rt_health_destroy(h);
 *
 * Tags follow the server's convention (a struct whose first member is the
 * handler), so the daemon's cq threads run these calls like any other.
 * hooks.call_begin/call_end bracket every matched call, so the daemon can
 * count them as live calls while it drains.
 */
#ifndef RTRAIN_HEALTH_H
#define RTRAIN_HEALTH_H

#include <grpc/grpc.h>

typedef struct rt_health_hooks {
    void (*call_begin)(void *ud);
    void (*call_end)(void *ud);
    void *ud;
} rt_health_hooks;

typedef struct rt_health rt_health;

/* Registers /grpc.health.v1.Health/Check, /Watch and /List on server. NULL on out
 * of memory. */
rt_health *rt_health_create(grpc_server *server, grpc_completion_queue *cq,
                            const rt_health_hooks *hooks);
/* Post `per` requests for each method (after grpc_server_start). */
void rt_health_start(rt_health *h, int per);
void rt_health_set_serving(rt_health *h, int serving);
int rt_health_serving(rt_health *h);
/* NOT_SERVING, end every Watch stream (UNAVAILABLE after its last status
 * message), and stop re-posting requests. */
void rt_health_shutdown(rt_health *h);
/* After the server and its queue are shut down. NULL is a no-op. */
void rt_health_destroy(rt_health *h);

#endif
