/* rt_example_pb.c - the wire ExampleSpec (proto/rtrain.proto) into an
 * rt_example_spec. */
#include <stdio.h>
#include <string.h>

#include "rt_errf.h"
#include "rt_example.h"
#include "rtrain.pb-c.h"
#include "rtrain/rt_error.h"

/* a bad spec: the message in err, RT_EINVAL (rt_errf, the one formatter) */
#define fail(err, errlen, ...) rt_errf((err), (errlen), RT_EINVAL, __VA_ARGS__)

static int per_channel(const float *v, size_t n, int c, float dflt, float out[3], const char *what,
                       char *err, size_t errlen)
{
    if (n != 0 && n != 1 && n != (size_t)c)
        return fail(err, errlen, "image %s has %zu values for %d channels", what, n, c);
    for (int ch = 0; ch < 3; ch++)
        out[ch] = n == 0 ? dflt : v[n == 1 ? 0 : (ch < c ? ch : 0)];
    return 0;
}

int rt_example_spec_from_pb(const Rtrain__V1__ExampleSpec *p, rt_example_spec *s, char *err,
                            size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (!p)
        return fail(err, errlen, "a TFRecord upload needs an example_spec");
    if (p->n_features < 1 || p->n_features > RT_SPEC_MAX_FEATURES)
        return fail(err, errlen, "example_spec has %zu features (1..%d)", p->n_features,
                    RT_SPEC_MAX_FEATURES);
    s->n = (int)p->n_features;
    s->sequence_example = p->sequence_example;
    s->skip_bad = p->on_bad_record == RTRAIN__V1__BAD_RECORD_POLICY__BAD_RECORD_SKIP;
    if ((int)p->storage < RT_STORAGE_AUTO || (int)p->storage > RT_STORAGE_STREAM)
        return fail(err, errlen, "unknown storage %d", (int)p->storage);
    s->storage = (rt_storage)p->storage;
    if (p->shuffle_buffer > (UINT64_C(1) << 31))
        return fail(err, errlen, "shuffle_buffer %llu is over 2^31",
                    (unsigned long long)p->shuffle_buffer);
    s->shuffle_buffer = (int64_t)p->shuffle_buffer;
    for (size_t i = 0; i < p->n_features; i++) {
        const Rtrain__V1__FeatureSpec *f = p->features[i];
        rt_feat_spec *o = &s->f[i];
        if (!f->key || strlen(f->key) >= RT_SPEC_KEY_MAX)
            return fail(err, errlen, "feature %zu: key is empty or over %d bytes", i,
                        RT_SPEC_KEY_MAX - 1);
        strcpy(o->key, f->key);
        o->kind = (rt_feat_kind)f->kind;
        o->label = f->label;
        o->sequence = f->sequence;
        if (f->n_shape > 2)
            return fail(err, errlen, "feature '%s' has %zu dims (0..2 allowed)", f->key,
                        f->n_shape);
        o->ndim = (int)f->n_shape;
        for (size_t d = 0; d < f->n_shape; d++)
            o->dims[d] = f->shape[d];
    }
    const Rtrain__V1__ImageSpec *m = p->image;
    if (m) {
        rt_image_spec *g = &s->img;
        if (m->height > 8192 || m->width > 8192 || m->channels > 3 || m->crop_pad > 8192)
            return fail(err, errlen, "image size %u x %u x %u is out of range", m->height, m->width,
                        m->channels);
        g->h = (int)m->height;
        g->w = (int)m->width;
        g->c = m->channels ? (int)m->channels : 3;
        g->resize = (rt_resize)m->resize;
        if ((int)g->resize < 0 || g->resize > RT_RESIZE_AREA)
            return fail(err, errlen, "unknown resize method %d", (int)m->resize);
        int rc = per_channel(m->mean, m->n_mean, g->c, 0.0f, g->mean, "mean", err, errlen);
        if (rc == 0)
            rc = per_channel(m->std, m->n_std, g->c, 1.0f, g->std, "std", err, errlen);
        if (rc < 0)
            return rc;
        g->crop_pad = (int)m->crop_pad;
        g->flip = m->flip;
        g->brightness = m->brightness;
        g->contrast = m->contrast;
    }
    return rt_example_spec_check(s, err, errlen);
}
