/*
 * rt_loss_torch.c - the PyTorch losses' checks at compile; the CPU backend
 * computes them in server/kernels/cpu/rt_kern_loss_torch.c.
 */
#include <stdio.h>

#include "rt_engine_impl.h"
#include "rt_errf.h"

int rt__loss_torch_check(const rt__lossinfo *L, char *err, size_t errlen)
{
    const char *nm = rt_loss_name(L->kind);
    if (L->kind == RT_LOSS_CROSS_ENTROPY || L->kind == RT_LOSS_NLL) {
        if (L->prob_target) {
            if (L->lab_numel != L->out_numel)
                return rt_errf(err, errlen, RT_ESHAPE,
                               "%s: probability targets need the output's shape "
                               "(%lld values per sample), not %lld",
                               nm, (long long)L->out_numel, (long long)L->lab_numel);
            return 0;
        }
        if (L->lab_dt != RT_I32)
            return rt_errf(err, errlen, RT_EDTYPE, "%s takes class indices as integers", nm);
        if (L->lab_numel != L->inner)
            return rt_errf(err, errlen, RT_ESHAPE,
                           "%s: class-index targets have %lld values per sample; the "
                           "output has %lld classes (dim 1) at %lld positions",
                           nm, (long long)L->lab_numel, (long long)L->classes, (long long)L->inner);
        return 0;
    }
    if (L->lab_numel != L->out_numel)
        return rt_errf(err, errlen, RT_ESHAPE,
                       "%s needs targets of the output's shape (%lld values per "
                       "sample), not %lld",
                       nm, (long long)L->out_numel, (long long)L->lab_numel);
    return 0;
}
