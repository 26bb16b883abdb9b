/* rt_hold.c - the thread's device-hold mark (rt_hold.h). */
#include "rt_hold.h"

#ifndef NDEBUG
__thread int rt_device_holds;
#else
typedef int rt_hold_unused; /* ISO C: a translation unit declares something */
#endif
