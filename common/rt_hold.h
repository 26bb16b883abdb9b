/* rt_hold.h - whether this thread holds the device (server/rpc's device
 * lock), for debug builds' assertions: the transport marks each hold on
 * the holding thread, and the session layer's [device] functions
 * (rt_program.h's locking rule) read the mark. A fact of the thread, kept
 * here so that neither layer calls the other for it; release builds
 * compile it away. */
#ifndef RTRAIN_HOLD_H
#define RTRAIN_HOLD_H

#ifndef NDEBUG
#include <assert.h>

/* holds of the device by this thread (0 or 1; rt_hold.c) */
extern __thread int rt_device_holds;
static inline void rt_device_hold_enter(void) { rt_device_holds++; }
static inline void rt_device_hold_leave(void)
{
    assert(rt_device_holds > 0);
    rt_device_holds--;
}
static inline int rt_device_held(void) { return rt_device_holds > 0; }
#else
static inline void rt_device_hold_enter(void) {}
static inline void rt_device_hold_leave(void) {}
#endif

#endif
