/*
 * rt_loss_torch.c - the PyTorch losses' checks at compile; the CPU backend
 * computes them in server/kernels/cpu/rt_kern_loss_torch.c.
 */
#include <stdio.h>

#include "rt_engine_impl.h"

int rt__loss_torch_check(const rt__lossinfo *L, char *err, size_t errlen)
{
    const char *nm = rt_loss_name(L->kind);
    if (L->kind == RT_LOSS_CROSS_ENTROPY || L->kind == RT_LOSS_NLL) {
        if (L->prob_target) {
            if (L->lab_numel != L->out_numel) {
                snprintf(err, errlen,
                         "%s: probability targets need the output's shape "
                         "(%lld values per sample), not %lld",
                         nm, (long long)L->out_numel, (long long)L->lab_numel);
                return RT_ESHAPE;
            }
            return 0;
        }
        if (L->lab_dt != RT_I32) {
            snprintf(err, errlen, "%s takes class indices as integers", nm);
            return RT_EDTYPE;
        }
        if (L->lab_numel != L->inner) {
            snprintf(err, errlen,
                     "%s: class-index targets have %lld values per sample; the "
                     "output has %lld classes (dim 1) at %lld positions",
                     nm, (long long)L->lab_numel, (long long)L->classes, (long long)L->inner);
            return RT_ESHAPE;
        }
        return 0;
    }
    if (L->lab_numel != L->out_numel) {
        snprintf(err, errlen,
                 "%s needs targets of the output's shape (%lld values per "
                 "sample), not %lld",
                 nm, (long long)L->out_numel, (long long)L->lab_numel);
        return RT_ESHAPE;
    }
    return 0;
}
