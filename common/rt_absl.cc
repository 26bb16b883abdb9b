/*
 * rt_absl.cc - the one C++ file: gRPC core's locks without abseil's
 * deadlock graph.
 *
 * gRPC core locks with absl::Mutex. Debian builds abseil without NDEBUG,
 * so every Mutex keeps a node in a global lock-order graph and every lock
 * taken while another is held adds an edge to it, under a global lock
 * (absl GraphCycles: GetId, InsertEdge, RemoveNode). A new connection
 * creates dozens of mutexes (channel, subchannel, transport, calls), so on
 * the 2-vCPU development machine the graph cost the story's run about
 * 110 us of the client's CPU and 35 us of the daemon's (connect, six
 * calls, close), some 9% of its wall time. It only reports lock-order
 * cycles to stderr (gRPC's own tests run it); rtraind and librtrain
 * switch it off before gRPC starts.
 */
#include <absl/synchronization/mutex.h>

#include "rt_absl.h"

extern "C" void rt_absl_no_deadlock_graph(void)
{
    /* an atomic store, read by every lock: cheap to repeat */
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}
