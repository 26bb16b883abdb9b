/*
 * conv_force_dnnl.c - linked into a second build of test_conv_gradcheck and
 * test_conv_fixture: every Conv2D those tests compile runs through oneDNN's
 * convolution primitives (rt_kern_conv_dnnl.c), whatever the shape rule
 * would pick, so the finite-difference checks and the PyTorch fixture hold
 * that path to the same references as im2col's. Set before main runs.
 * RT_FORCE_DIRS (a compile definition): only those directions
 * (RT_KERN_DN_*), the others im2col's, for the mixed backward passes.
 */
#include "cpu/rt_kern_conv.h"

__attribute__((constructor)) static void rt__conv_force_dnnl(void)
{
#ifdef RT_FORCE_DIRS
    rt_kern_conv_impl = RT_KERN_CONV_DIRS | (RT_FORCE_DIRS);
#else
    rt_kern_conv_impl = RT_KERN_CONV_DNNL;
#endif
}
