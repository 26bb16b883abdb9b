/*
 * test_math.c - the vectorisable exp/log/log1p of rt_kern_math.h against
 * libm in double over the ranges the kernels use, 2 million points each.
 * Tolerance: relative error <= 4e-7 (a few ulp); exp clamps below -87.
 */
#include "cpu/rt_kern_math.h"
#include "rt_test.h"

int main(void)
{
    double worst_e = 0, worst_l = 0, worst_p = 0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.0f + 175.0f * (float)i / 2000000.0f;
        double r = exp((double)x), g = rt_kern_exp(x);
        double e = fabs(g - r) / r;
        if (e > worst_e) worst_e = e;
        float y = ldexpf(1.0f + (float)(i % 1000) / 1000.0f, (i / 1000) % 250 - 125);
        r = log((double)y);
        g = rt_kern_log(y);
        e = fabs(g - r) / fmax(fabs(r), 1e-3);
        if (e > worst_l) worst_l = e;
        float t = ldexpf((float)(i % 4096) / 4096.0f, -(i % 40));
        r = log1p((double)t);
        g = rt_kern_log1p(t);
        e = t > 0 ? fabs(g - r) / r : fabs(g);
        if (e > worst_p) worst_p = e;
    }
    printf("max relative error: exp %.3g, log %.3g, log1p %.3g\n", worst_e, worst_l, worst_p);
    CHECK(worst_e <= 4e-7);
    CHECK(worst_l <= 4e-7);
    CHECK(worst_p <= 4e-7);
    CHECK(rt_kern_exp(-1000.0f) < 1e-37f && rt_kern_exp(-1000.0f) >= 0.0f);
    CHECK(rt_kern_exp(0.0f) == 1.0f);
    CHECK(rt_kern_log(1.0f) == 0.0f);
    CHECK(rt_kern_log1p(0.0f) == 0.0f && rt_kern_log1p(1e-30f) == 1e-30f);
    return rt_test_done("test_math");
}
