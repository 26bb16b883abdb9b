/* import_keras_cfg.c - what the Keras importer's files share
 * (import_keras.h): a layer's config read field by field (each read marks
 * the field used), its failure message, its weights' initializers,
 * regularizers and constraints, and the names of its nodes. */
#include "import_keras.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "rt_engine_impl.h"

int rt_keras_fail(rt_keras_ctx *c, int code, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->err && c->errlen)
        snprintf(c->err, c->errlen, "%s (layer '%.64s')", msg, c->layer ? c->layer : "?");
    return code;
}

int rt_keras_channels_last(rt_keras_ctx *c)
{
    const char *fmt;
    int rc = rt_keras_cfg_str(c, "data_format", "channels_last", &fmt);
    if (rc < 0)
        return rc;
    if (strcmp(fmt, "channels_last") != 0)
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "data_format '%.20s' is not supported (channels_last, channels_first)",
                             fmt);
    return 0;
}

int rt_keras_last_axis(rt_keras_ctx *c, const char *what, int max)
{
    int64_t axis[RT_MAX_DIMS];
    int na = rt_keras_cfg_ints(c, "axis", axis, max < RT_MAX_DIMS ? max : RT_MAX_DIMS);
    if (na < 0)
        return na;
    if (na == 0)
        axis[0] = -1, na = 1;
    if (na != 1 || (axis[0] != -1 && axis[0] != c->in[0].ndim))
        return rt_keras_fail(c, RT_EUNIMPLEMENTED,
                             "%s over axis %lld: only the last axis is supported", what,
                             (long long)axis[0]);
    return 0;
}

int rt_keras_window_out(rt_keras_ctx *c, int64_t in, int64_t k, int64_t s, int64_t d, int same,
                        int64_t *out)
{
    *out = rt__window_out(in, k, s, d, same, NULL);
    if (*out < 0)
        return rt_keras_fail(c, RT_ESHAPE, "input %lld is smaller than the window %lld",
                             (long long)in, (long long)((k - 1) * d + 1));
    return 0;
}

static void cfg_mark(rt_keras_ctx *c, const char *key)
{
    const size_t n = strlen(key);
    if (n >= RT_KERAS_KEY_MAX)
        return;
    for (int i = 0; i < c->n_used; i++)
        if (strcmp(c->used[i], key) == 0)
            return;
    if (c->n_used < RT_KERAS_MAX_USED)
        memcpy(c->used[c->n_used++], key, n + 1);
}

void rt_keras_cfg_unused(rt_keras_ctx *c, const char *key) { cfg_mark(c, key); }

static json_object *cfg_get(rt_keras_ctx *c, const char *key)
{
    json_object *v = NULL;
    cfg_mark(c, key);
    if (!c->cfg || !json_object_object_get_ex(c->cfg, key, &v))
        return NULL;
    return v; /* JSON null comes back as NULL too: treated as missing */
}

json_object *rt_keras_cfg_get(rt_keras_ctx *c, const char *key) { return cfg_get(c, key); }

int rt_keras_cfg_int(rt_keras_ctx *c, const char *key, int64_t def, int64_t *out)
{
    json_object *v = cfg_get(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_int))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be an integer", key);
    *out = json_object_get_int64(v);
    return 0;
}

int rt_keras_cfg_float(rt_keras_ctx *c, const char *key, double def, double *out)
{
    json_object *v = cfg_get(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be a number", key);
    *out = json_object_get_double(v);
    /* json-c reads NaN, Infinity and 1e999; no Keras setting means them */
    if (!isfinite(*out))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be a finite number", key);
    return 0;
}

int rt_keras_cfg_bool(rt_keras_ctx *c, const char *key, int def, int *out)
{
    json_object *v = cfg_get(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_boolean))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be true or false", key);
    *out = json_object_get_boolean(v);
    return 0;
}

int rt_keras_cfg_str(rt_keras_ctx *c, const char *key, const char *def, const char **out)
{
    json_object *v = cfg_get(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_object_is_type(v, json_type_string))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be a string", key);
    *out = json_object_get_string(v);
    return 0;
}

int rt_keras_cfg_ints(rt_keras_ctx *c, const char *key, int64_t *out, int max)
{
    json_object *v = cfg_get(c, key);
    if (!v)
        return 0;
    if (json_object_is_type(v, json_type_int)) {
        out[0] = json_object_get_int64(v);
        return 1;
    }
    if (!json_object_is_type(v, json_type_array))
        return rt_keras_fail(c, RT_EINVAL, "'%s' must be a list of integers", key);
    int n = (int)json_object_array_length(v);
    if (n > max)
        return rt_keras_fail(c, RT_EINVAL, "'%s' has more than %d entries", key, max);
    for (int i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(v, (size_t)i);
        if (!e || !json_object_is_type(e, json_type_int))
            return rt_keras_fail(c, RT_EINVAL, "'%s'[%d] must be an integer", key, i);
        out[i] = json_object_get_int64(e);
    }
    return n;
}

/* "GlorotUniform", "glorot_uniform" and "he_normal" all compare equal. */
static int name_eq(const char *a, const char *b)
{
    for (;;) {
        while (*a == '_')
            a++;
        while (*b == '_')
            b++;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
        if (!*a)
            return 1;
        a++;
        b++;
    }
}

/* ------------------------------------- initializers, regularizers, constraints */

/* A Keras object setting: a string, or {"class_name": ..., "config": {...}}
 * (Keras 2/3), or Keras 1's {"name": ..., fields...}. *ocfg is where its
 * fields are (NULL for a string). */
const char *rt_keras_obj_name(json_object *v, json_object **ocfg)
{
    json_object *cn;
    *ocfg = NULL;
    if (json_object_is_type(v, json_type_string))
        return json_object_get_string(v);
    if (!json_object_is_type(v, json_type_object))
        return NULL;
    if (json_object_object_get_ex(v, "class_name", &cn) &&
        json_object_is_type(cn, json_type_string)) {
        json_object *cf;
        if (json_object_object_get_ex(v, "config", &cf) &&
            json_object_is_type(cf, json_type_object))
            *ocfg = cf;
        return json_object_get_string(cn);
    }
    if (json_object_object_get_ex(v, "name", &cn) && json_object_is_type(cn, json_type_string)) {
        *ocfg = v;
        return json_object_get_string(cn);
    }
    return NULL;
}

/* fields of an initializer/regularizer/constraint config: the ones read,
 * plus ones that change nothing here; anything else is unsupported */
static int obj_fields_ok(rt_keras_ctx *c, const char *key, json_object *ocfg,
                         const char *const *known)
{
    if (!ocfg)
        return 0;
    json_object_object_foreach(ocfg, k, v)
    {
        (void)v;
        int ok = strcmp(k, "seed") == 0 || strcmp(k, "dtype") == 0 || strcmp(k, "name") == 0;
        for (int i = 0; !ok && known[i]; i++)
            ok = strcmp(k, known[i]) == 0;
        if (!ok)
            return rt_keras_fail(c, RT_EINVAL, "'%s' has an unsupported field '%.40s'", key, k);
    }
    return 0;
}

static int obj_num(rt_keras_ctx *c, const char *key, json_object *ocfg, const char *f, double def,
                   double *out)
{
    json_object *v;
    *out = def;
    if (!ocfg || !json_object_object_get_ex(ocfg, f, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return rt_keras_fail(c, RT_EINVAL, "'%s': '%s' must be a number", key, f);
    *out = json_object_get_double(v);
    if (!isfinite(*out))
        return rt_keras_fail(c, RT_EINVAL, "'%s': '%s' must be finite", key, f);
    return 0;
}

static int obj_str(rt_keras_ctx *c, const char *key, json_object *ocfg, const char *f,
                   const char *def, const char **out)
{
    json_object *v;
    *out = def;
    if (!ocfg || !json_object_object_get_ex(ocfg, f, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_string))
        return rt_keras_fail(c, RT_EINVAL, "'%s': '%s' must be a string", key, f);
    *out = json_object_get_string(v);
    return 0;
}

/* Keras' initializers as rt_param_opts. The named ones are VarianceScaling
 * with Keras' scale, mode and distribution (glorot = fan_avg 1, he = fan_in
 * 2, lecun = fan_in 1; *_normal truncated, except Keras 1's untruncated);
 * Random* default to Keras' 0.05. */
static int parse_init(rt_keras_ctx *c, const char *key, json_object *v, rt_param_opts *o)
{
    json_object *oc;
    const char *name = rt_keras_obj_name(v, &oc);
    if (!name)
        return rt_keras_fail(c, RT_EINVAL, "'%s' is not an initializer", key);
    static const struct {
        const char *n;
        double scale;
        rt_fan_mode mode;
        rt_init_dist dist;
    } vs[] = {
        {"GlorotUniform", 1, RT_FAN_AVG, RT_DIST_UNIFORM},
        {"GlorotNormal", 1, RT_FAN_AVG, RT_DIST_TRUNCATED_NORMAL},
        {"HeUniform", 2, RT_FAN_IN, RT_DIST_UNIFORM},
        {"HeNormal", 2, RT_FAN_IN, RT_DIST_TRUNCATED_NORMAL},
        {"LecunUniform", 1, RT_FAN_IN, RT_DIST_UNIFORM},
        {"LecunNormal", 1, RT_FAN_IN, RT_DIST_TRUNCATED_NORMAL},
    };
    static const char *const none[] = {NULL};
    memset(o, 0, sizeof *o);
    int rc;
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
        if (name_eq(name, vs[i].n)) {
            o->init = RT_INIT_VARIANCE_SCALING;
            o->scale = vs[i].scale;
            o->mode = vs[i].mode;
            o->dist = vs[i].dist;
            if (c->keras1 && o->dist == RT_DIST_TRUNCATED_NORMAL)
                o->dist = RT_DIST_UNTRUNCATED_NORMAL;
            return obj_fields_ok(c, key, oc, none);
        }
    if (name_eq(name, "Zeros") || name_eq(name, "Zero") || name_eq(name, "Ones") ||
        name_eq(name, "One") || name_eq(name, "Constant")) {
        static const char *const k[] = {"value", NULL};
        o->init = RT_INIT_CONSTANT;
        int one = name_eq(name, "Ones") || name_eq(name, "One");
        if ((rc = obj_num(c, key, oc, "value", one ? 1 : 0, &o->scale)) < 0)
            return rc;
        return obj_fields_ok(c, key, oc, name_eq(name, "Constant") ? k : none);
    }
    if (name_eq(name, "VarianceScaling")) {
        static const char *const k[] = {"scale", "mode", "distribution", NULL};
        const char *mode, *dist;
        if ((rc = obj_num(c, key, oc, "scale", 1, &o->scale)) < 0 ||
            (rc = obj_str(c, key, oc, "mode", "fan_in", &mode)) < 0 ||
            (rc = obj_str(c, key, oc, "distribution", "truncated_normal", &dist)) < 0)
            return rc;
        o->init = RT_INIT_VARIANCE_SCALING;
        if (strcmp(mode, "fan_in") == 0)
            o->mode = RT_FAN_IN;
        else if (strcmp(mode, "fan_out") == 0)
            o->mode = RT_FAN_OUT;
        else if (strcmp(mode, "fan_avg") == 0)
            o->mode = RT_FAN_AVG;
        else
            return rt_keras_fail(c, RT_EINVAL, "'%s': unknown mode '%.20s'", key, mode);
        /* "normal" is Keras 2.0-2.2's name of the truncated normal */
        if (strcmp(dist, "truncated_normal") == 0 || strcmp(dist, "normal") == 0)
            o->dist = RT_DIST_TRUNCATED_NORMAL;
        else if (strcmp(dist, "untruncated_normal") == 0)
            o->dist = RT_DIST_UNTRUNCATED_NORMAL;
        else if (strcmp(dist, "uniform") == 0)
            o->dist = RT_DIST_UNIFORM;
        else
            return rt_keras_fail(c, RT_EINVAL, "'%s': unknown distribution '%.20s'", key, dist);
        if (!(o->scale > 0))
            return rt_keras_fail(c, RT_EINVAL, "'%s': scale must be > 0", key);
        return obj_fields_ok(c, key, oc, k);
    }
    if (name_eq(name, "RandomUniform") || name_eq(name, "Uniform")) {
        static const char *const k[] = {"minval", "maxval", NULL};
        o->init = RT_INIT_UNIFORM;
        if ((rc = obj_num(c, key, oc, "minval", -0.05, &o->a)) < 0 ||
            (rc = obj_num(c, key, oc, "maxval", 0.05, &o->b)) < 0)
            return rc;
        if (!(o->a <= o->b))
            return rt_keras_fail(c, RT_EINVAL, "'%s': minval > maxval", key);
        return obj_fields_ok(c, key, oc, k);
    }
    if (name_eq(name, "RandomNormal") || name_eq(name, "Normal") ||
        name_eq(name, "TruncatedNormal")) {
        static const char *const k[] = {"mean", "stddev", NULL};
        o->init = name_eq(name, "TruncatedNormal") ? RT_INIT_TRUNCATED_NORMAL : RT_INIT_NORMAL;
        if ((rc = obj_num(c, key, oc, "mean", 0, &o->a)) < 0 ||
            (rc = obj_num(c, key, oc, "stddev", 0.05, &o->b)) < 0)
            return rc;
        if (!(o->b >= 0))
            return rt_keras_fail(c, RT_EINVAL, "'%s': stddev < 0", key);
        return obj_fields_ok(c, key, oc, k);
    }
    /* Keras 3.0-3.3 wrote OrthogonalInitializer and IdentityInitializer
     * (keras/src/initializers/__init__.py keeps them as aliases) */
    if (name_eq(name, "Orthogonal") || name_eq(name, "Identity") ||
        name_eq(name, "OrthogonalInitializer") || name_eq(name, "IdentityInitializer")) {
        static const char *const k[] = {"gain", NULL};
        o->init = name_eq(name, "Orthogonal") || name_eq(name, "OrthogonalInitializer")
                      ? RT_INIT_ORTHOGONAL
                      : RT_INIT_IDENTITY;
        /* Keras 1's orthogonal scaled by 1.1 */
        double def = c->keras1 && o->init == RT_INIT_ORTHOGONAL ? 1.1 : 1.0;
        if ((rc = obj_num(c, key, oc, "gain", def, &o->scale)) < 0)
            return rc;
        return obj_fields_ok(c, key, oc, k);
    }
    return rt_keras_fail(c, RT_EINVAL, "unsupported initializer '%.40s' in '%s'", name, key);
}

int rt_keras_cfg_init(rt_keras_ctx *c, const char *key, rt_init def, rt_init *out)
{
    json_object *v = cfg_get(c, key);
    *out = def;
    if (!v && def != RT_INIT_ORTHOGONAL && def != RT_INIT_UNIFORM)
        return 0;
    rt_param_opts o;
    int rc = 0;
    if (v) {
        rc = parse_init(c, key, v, &o);
    } else {
        /* a parameterised default with Keras' numbers: Orthogonal (the
         * recurrent layers' recurrent_initializer) gain 1, Keras 1's scale
         * 1.1; "uniform" (Embedding's embeddings_initializer) [-0.05, 0.05],
         * Keras 1's uniform(scale=0.05) too */
        memset(&o, 0, sizeof o);
        o.init = def;
        o.scale = def == RT_INIT_ORTHOGONAL && c->keras1 ? 1.1 : 1.0;
        o.a = -0.05, o.b = 0.05;
    }
    if (rc < 0)
        return rc;
    int have = 0;
    for (int i = 0; i < c->n_inits && !have; i++)
        have = strcmp(c->inits[i].key, key) == 0;
    if (!have && c->n_inits < 8) {
        c->inits[c->n_inits].key = key;
        c->inits[c->n_inits++].o = o;
    }
    /* the exact Keras form is attached after the layer (param_opts_of) */
    *out = o.init == RT_INIT_CONSTANT && o.scale == 0   ? RT_INIT_ZEROS
           : o.init == RT_INIT_CONSTANT && o.scale == 1 ? RT_INIT_ONES
                                                        : RT_INIT_DEFAULT;
    return 0;
}

/* L1, L2, L1L2 (Keras 2/3 dicts, Keras 1 WeightRegularizer, the strings
 * "l1", "l2", "l1_l2" with Keras' 0.01). */
int rt_keras_cfg_reg(rt_keras_ctx *c, const char *key, json_object *v, rt_param_opts *o)
{
    json_object *oc;
    const char *name = rt_keras_obj_name(v, &oc);
    if (!name)
        return rt_keras_fail(c, RT_EINVAL, "'%s' is not a regularizer", key);
    static const char *const k[] = {"l1", "l2", NULL};
    int rc, is1 = name_eq(name, "L1"), is2 = name_eq(name, "L2");
    if (!is1 && !is2 && !name_eq(name, "L1L2") && !name_eq(name, "l1_l2") &&
        !name_eq(name, "WeightRegularizer") && !name_eq(name, "L1L2Regularizer"))
        return rt_keras_fail(c, RT_EINVAL, "unsupported regularizer '%.40s' in '%s'", name, key);
    /* a bare string means Keras' default 0.01; an L1L2 object's missing
     * coefficient is 0 */
    const double d1 = !oc && !is2 ? 0.01 : 0, d2 = !oc && !is1 ? 0.01 : 0;
    if ((rc = obj_num(c, key, oc, "l1", is1 && oc ? 0.01 : d1, &o->l1)) < 0 ||
        (rc = obj_num(c, key, oc, "l2", is2 && oc ? 0.01 : d2, &o->l2)) < 0)
        return rc;
    if (is1)
        o->l2 = 0;
    if (is2)
        o->l1 = 0;
    if (!(o->l1 >= 0) || !(o->l2 >= 0))
        return rt_keras_fail(c, RT_EINVAL, "'%s': negative coefficient", key);
    return obj_fields_ok(c, key, oc, k);
}

/* MaxNorm, NonNeg, UnitNorm, MinMaxNorm; axis (int or list, default 0)
 * becomes the bit set of the dims a norm runs over. */
static int parse_constraint(rt_keras_ctx *c, const char *key, json_object *v, int ndim,
                            rt_param_opts *o)
{
    json_object *oc;
    const char *name = rt_keras_obj_name(v, &oc);
    if (!name)
        return rt_keras_fail(c, RT_EINVAL, "'%s' is not a constraint", key);
    static const char *const k[] = {"max_value", "min_value", "rate", "axis", "m", NULL};
    int rc;
    if (name_eq(name, "NonNeg") || name_eq(name, "NonNegativity")) {
        o->constraint = RT_CONSTRAINT_NON_NEG;
        return obj_fields_ok(c, key, oc, k);
    }
    if (name_eq(name, "MaxNorm") || name_eq(name, "max_norm"))
        o->constraint = RT_CONSTRAINT_MAX_NORM;
    else if (name_eq(name, "UnitNorm"))
        o->constraint = RT_CONSTRAINT_UNIT_NORM;
    else if (name_eq(name, "MinMaxNorm"))
        o->constraint = RT_CONSTRAINT_MIN_MAX_NORM;
    else
        return rt_keras_fail(c, RT_EINVAL, "unsupported constraint '%.40s' in '%s'", name, key);
    double m;
    if ((rc = obj_num(c, key, oc, "m", 2, &m)) < 0 ||
        (rc = obj_num(c, key, oc, "max_value", o->constraint == RT_CONSTRAINT_MAX_NORM ? m : 1,
                      &o->c_max)) < 0 ||
        (rc = obj_num(c, key, oc, "min_value", 0, &o->c_min)) < 0 ||
        (rc = obj_num(c, key, oc, "rate", 1, &o->c_rate)) < 0)
        return rc;
    json_object *ax = NULL;
    int64_t axes[RT_MAX_DIMS];
    int na = 1;
    axes[0] = 0;
    if (oc && json_object_object_get_ex(oc, "axis", &ax) && ax) {
        if (json_object_is_type(ax, json_type_int)) {
            axes[0] = json_object_get_int64(ax);
        } else if (json_object_is_type(ax, json_type_array) &&
                   json_object_array_length(ax) <= RT_MAX_DIMS) {
            na = (int)json_object_array_length(ax);
            for (int i = 0; i < na; i++) {
                json_object *e = json_object_array_get_idx(ax, (size_t)i);
                if (!json_object_is_type(e, json_type_int))
                    return rt_keras_fail(c, RT_EINVAL, "'%s': axis must be integers", key);
                axes[i] = json_object_get_int64(e);
            }
        } else {
            return rt_keras_fail(c, RT_EINVAL, "'%s': axis must be an integer or a list", key);
        }
    }
    o->c_axes = 0;
    for (int i = 0; i < na; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + ndim : axes[i];
        if (a < 0 || a >= ndim)
            return rt_keras_fail(c, RT_EINVAL, "'%s': axis %lld outside the weight's %d dims", key,
                                 (long long)axes[i], ndim);
        o->c_axes |= 1u << a;
    }
    if (!(o->c_max >= 0) || !(o->c_min >= 0 && o->c_min <= o->c_max) ||
        !(o->c_rate >= 0 && o->c_rate <= 1))
        return rt_keras_fail(c, RT_EINVAL, "'%s': bad bounds", key);
    return obj_fields_ok(c, key, oc, k);
}

/* After a layer function: attach "<w>_initializer/_regularizer/_constraint"
 * to each parameter "<layer>/<w>" it added (entries first..g->n). */
int rt_keras_param_opts(rt_keras_ctx *c, int first)
{
    rt_graph *g = c->g;
    for (int i = first; i < g->n; i++) {
        const rt__entry *e = &g->e[i];
        if (e->kind != RT__T_PARAM || e->value)
            continue;
        const char *w = strrchr(e->name, '/');
        w = w ? w + 1 : e->name;
        char base[64];
        size_t wl = strlen(w);
        if (wl >= sizeof base - 16)
            continue;
        /* "depthwise_kernel" -> "depthwise", as Keras names the settings */
        memcpy(base, w, wl + 1);
        if (wl > 7 && strcmp(base + wl - 7, "_kernel") == 0)
            base[wl - 7] = 0;
        rt_param_opts o;
        memset(&o, 0, sizeof o);
        int any = 0, rc;
        static const char *const what[3] = {"initializer", "regularizer", "constraint"};
        for (int k = 0; k < 3; k++) {
            const char *stems[2] = {w, base};
            for (int s = 0; s < (strcmp(w, base) ? 2 : 1); s++) {
                char key[96];
                snprintf(key, sizeof key, "%s_%s", stems[s], what[k]);
                json_object *v;
                if (!c->cfg || !json_object_object_get_ex(c->cfg, key, &v)) {
                    /* read from another config (a wrapper's inner layer) */
                    for (int r = 0; k == 0 && r < c->n_inits; r++)
                        if (strcmp(c->inits[r].key, key) == 0) {
                            const rt_param_opts *t = &c->inits[r].o;
                            o.init = t->init, o.mode = t->mode, o.dist = t->dist;
                            o.scale = t->scale, o.a = t->a, o.b = t->b;
                            any = 1;
                        }
                    continue;
                }
                /* marked only where this config holds the key
                 * (a null value included) */
                json_object_object_foreach(c->cfg, ck, cv)
                {
                    (void)cv;
                    if (strcmp(ck, key) == 0) {
                        cfg_mark(c, ck);
                        break;
                    }
                }
                if (!v)
                    continue;
                rt_param_opts t = o;
                if (k == 0)
                    rc = parse_init(c, key, v, &t);
                else if (k == 1)
                    rc = rt_keras_cfg_reg(c, key, v, &t);
                else
                    rc = parse_constraint(c, key, v, e->shape.ndim, &t);
                if (rc < 0)
                    return rc;
                if (k == 0) {
                    o.init = t.init, o.mode = t.mode, o.dist = t.dist, o.scale = t.scale;
                    o.a = t.a, o.b = t.b;
                } else if (k == 1) {
                    o.l1 = t.l1, o.l2 = t.l2;
                } else {
                    o.constraint = t.constraint, o.c_min = t.c_min, o.c_max = t.c_max;
                    o.c_rate = t.c_rate, o.c_axes = t.c_axes;
                }
                any = 1;
            }
        }
        if (o.init == RT_INIT_IDENTITY && e->shape.ndim != 2)
            return rt_keras_fail(c, RT_EINVAL, "Identity initializer on the rank-%d weight '%s'",
                                 e->shape.ndim, w);
        if (o.init == RT_INIT_ORTHOGONAL && e->shape.ndim < 2)
            return rt_keras_fail(c, RT_EINVAL, "Orthogonal initializer on the rank-1 weight '%s'",
                                 w);
        if (any && (rc = rt_graph_set_param_opts(g, e->name, &o)) < 0)
            return rt_keras_fail(c, rc, "%s", rt_graph_errmsg(g));
    }
    return 0;
}

/* Names made of the layer name and a suffix, checked for length. */
int rt_keras_name(rt_keras_ctx *c, char *dst, const char *suffix)
{
    int n =
        snprintf(dst, RT_KERAS_NAME, "%s%s%s", c->layer, suffix ? "/" : "", suffix ? suffix : "");
    if (n < 0 || n >= RT_KERAS_NAME)
        return rt_keras_fail(c, RT_EINVAL, "layer name is too long");
    return 0;
}
