/* rt_absl.h - abseil settings for gRPC core (rt_absl.cc). */
#ifndef RTRAIN_ABSL_H
#define RTRAIN_ABSL_H

#ifdef __cplusplus
extern "C" {
#endif

/* abseil's lock-order (deadlock) graph off for the process: call before
 * grpc_init. */
void rt_absl_no_deadlock_graph(void);

#ifdef __cplusplus
}
#endif

#endif
