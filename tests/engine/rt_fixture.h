/*
 * rt_fixture.h - the reader for PyTorch reference fixtures ("RTRF" files
 * written by tests/fixtures/gen_fixtures.py and tests/conv/gen_conv_fixture.py)
 * and the tolerance check the reference tests compare with.
 *
 * File layout (little-endian): u32 magic "RTRF", u32 version 1, u32 count,
 * then per tensor: char name[64], u32 dtype, u32 ndim, u32 dims[4]
 * (unused dims are 1), count * 4 bytes of data.
 *
 *     rt_fixture_load(RT_SOURCE_DIR "/tests/fixtures/engine_ref.bin");
 *     const rt_ref_tensor *t = rt_fixture_find("wa/init/d1/kernel");
 */
#ifndef RTRAIN_TEST_FIXTURE_H
#define RTRAIN_TEST_FIXTURE_H

#include <stdint.h>

#include "rt_test.h"

#define RT_FIXTURE_MAX 256

typedef struct rt_ref_tensor {
    char name[64];
    uint32_t dtype, ndim, dims[4];
    void *data;
    size_t count;
} rt_ref_tensor;

static rt_ref_tensor rt_fixture_refs[RT_FIXTURE_MAX];
static int rt_fixture_n;

/* Loads every tensor of path; a missing or malformed file ends the test. */
static inline void rt_fixture_load(const char *path)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    uint32_t hdr[3];
    REQUIRE(fread(hdr, 4, 3, f) == 3);
    REQUIRE(hdr[0] == 0x46525452u); /* "RTRF" */
    REQUIRE(hdr[1] == 1);           /* version */
    REQUIRE(hdr[2] <= RT_FIXTURE_MAX - (uint32_t)rt_fixture_n);
    for (uint32_t i = 0; i < hdr[2]; i++) {
        rt_ref_tensor *t = &rt_fixture_refs[rt_fixture_n++];
        REQUIRE(fread(t->name, 1, 64, f) == 64);
        t->name[63] = 0;
        REQUIRE(fread(&t->dtype, 4, 1, f) == 1 && fread(&t->ndim, 4, 1, f) == 1);
        REQUIRE(fread(t->dims, 4, 4, f) == 4);
        t->count = 1;
        for (int d = 0; d < 4; d++) t->count *= t->dims[d];
        t->data = malloc(t->count * 4);
        REQUIRE(t->data && fread(t->data, 4, t->count, f) == t->count);
    }
    fclose(f);
}

static inline void rt_fixture_free(void)
{
    for (int i = 0; i < rt_fixture_n; i++) free(rt_fixture_refs[i].data);
    rt_fixture_n = 0;
}

/* The tensor called name; a missing one ends the test. */
static inline const rt_ref_tensor *rt_fixture_find(const char *name)
{
    for (int i = 0; i < rt_fixture_n; i++)
        if (strcmp(rt_fixture_refs[i].name, name) == 0) return &rt_fixture_refs[i];
    fprintf(stderr, "fixture has no tensor '%s'\n", name);
    exit(1);
}

/* 1 if some element breaks |got - want| <= atol + rtol |want| (NaN breaks
 * it), printing the worst; 0 otherwise. Counts nothing: callers do. */
static inline int rt_fixture_compare(const char *what, const float *got,
                                     const float *want, size_t n, double atol,
                                     double rtol)
{
    double worst = 0;
    size_t wi = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        double lim = atol + rtol * fabs(want[i]);
        if (!(d <= lim)) {
            if (!bad || d - lim > worst) {
                worst = d - lim;
                wi = i;
            }
            bad = 1;
        }
    }
    if (bad)
        fprintf(stderr, "%s: element %zu is %.8g, torch %.8g\n", what, wi,
                (double)got[wi], (double)want[wi]);
    return bad;
}

#endif
