/*
 * rt_backends.c - registers the backends this build has with the engine,
 * before main (an object library: every program that links rt_backends
 * gets this constructor). The engine selects among them
 * (rt_backend_select, RT_BACKEND, else the highest rank).
 */
#include "rt_engine_impl.h"

#ifdef RT_HAVE_BACKEND_CPU
extern const rt__backend rt__backend_cpu;
#endif
extern const rt__backend rt__backend_ref;

__attribute__((constructor)) static void rt__backends_register(void)
{
#ifdef RT_HAVE_BACKEND_CPU
    rt__backend_register(&rt__backend_cpu);
#endif
    rt__backend_register(&rt__backend_ref);
}
