/* cli_h5.c - Keras 2's HDF5 weights layout (the legacy h5 format of
 * keras.saving, as save_weights_to_hdf5_group writes it) for the CLI's
 * --save-weights, --checkpoint, --load-weights and --weights:
 *
 *   root attrs  layer_names    fixed-length strings, the layers with weights
 *               backend        "tensorflow"
 *               keras_version  "2.11.0"
 *   /<layer>    attr weight_names: fixed-length strings "dense/kernel:0", ...
 *               one float32 dataset per name, at /<layer>/<weight name>
 *
 * A parameter "dense/kernel" of the daemon belongs to layer "dense" (the
 * text before the first '/': "mha/query/kernel" to "mha", whose weights
 * Keras 2 writes as "mha/query/kernel:0" in group /mha); layers are listed
 * in the order of their first parameter. Loading follows Keras 2's
 * load_weights_from_hdf5_group: the file's layers that have weights (a full
 * model file's /model_weights group too) are matched to the model's by
 * order, each layer's weights in its weight_names order, and every count
 * and shape is checked. Layers without weights may be listed in a file
 * Keras wrote; they carry nothing and are skipped.
 *
 * Keras 3's .weights.h5 (keras/src/saving/saving_lib.py): no layer_names;
 * /layers/<snake case of the class>[_k]/vars/0..n per layer in
 * model.layers' order (_k counts earlier layers of that class), each
 * layer's variables in creation order (trainable first); layers nest:
 * an RNN's in cell/vars, Bidirectional's in forward_layer/cell/vars and
 * backward_layer/cell/vars, MultiHeadAttention's in query_dense/vars,
 * key_dense, value_dense, output_dense (_query_dense, ... before Keras
 * 3.1). The classes come from the model JSON. */
#include "cli.h"
#include "rt_errf.h"

#include <json-c/json.h>

#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int cli_is_h5(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return (n > 3 && strcasecmp(path + n - 3, ".h5") == 0) ||
           (n > 5 && strcasecmp(path + n - 5, ".hdf5") == 0);
}

/* The layer of a parameter name: the text before its first '/' (a layer's
 * weights may nest: MultiHeadAttention's "mha/query/kernel", Bidirectional's
 * "bi/forward_lstm/kernel"; Keras names hold no '/'). */
static size_t layer_len(const char *name)
{
    const char *s = strchr(name[0] == '/' ? name + 1 : name, '/');
    return s ? (size_t)(s - name) : strlen(name);
}

static int same_layer(const char *a, const char *b)
{
    size_t k = layer_len(a);
    return layer_len(b) == k && strncmp(a, b, k) == 0;
}

#ifdef RT_HAVE_HDF5
#include <hdf5.h>

/* Attribute attr of obj with type t and space sp holding buf; closes t and
 * sp. */
static int put_attr(hid_t obj, const char *attr, hid_t t, hid_t sp, const void *buf)
{
    hid_t a = H5Acreate2(obj, attr, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, t, buf);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return r < 0 ? RT_EIO : 0;
}

/* An attribute of n fixed-length strings (n == 0: h5py's empty array). */
static int put_strings(hid_t obj, const char *attr, const char *const *v, size_t n)
{
    size_t w = 1;
    for (size_t i = 0; i < n; i++)
        if (strlen(v[i]) > w)
            w = strlen(v[i]);
    char *buf = calloc(n ? n : 1, w);
    if (!buf)
        return RT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        memcpy(buf + i * w, v[i], strlen(v[i]));
    hsize_t dim = n;
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, w);
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    int rc = put_attr(obj, attr, t, H5Screate_simple(1, &dim, NULL), buf);
    free(buf);
    return rc;
}

/* Keras 2.11's save_weights_to_hdf5_group ends with the model's own
 * weights (none for Sequential and Functional models) in a group
 * top_level_model_weights whose weight_names is numpy's empty array: f64,
 * shape (0,). */
static int put_top_level(hid_t f)
{
    hid_t g = H5Gcreate2(f, "top_level_model_weights", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0)
        return RT_EIO;
    hsize_t dim = 0;
    hid_t sp = H5Screate_simple(1, &dim, NULL);
    hid_t a =
        sp < 0 ? -1 : H5Acreate2(g, "weight_names", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 ? RT_EIO : 0;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    H5Gclose(g);
    return rc;
}

static int put_string(hid_t obj, const char *attr, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v));
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    return put_attr(obj, attr, t, H5Screate(H5S_SCALAR), v);
}

/* A string-array attribute as malloc'd NUL-terminated strings; *n = 0 for
 * one that is absent or holds no strings (h5py's empty float array). */
static int get_strings(hid_t obj, const char *attr, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (H5Aexists(obj, attr) <= 0)
        return 0;
    hid_t a = H5Aopen(obj, attr, H5P_DEFAULT);
    if (a < 0)
        return RT_EIO;
    hid_t ft = H5Aget_type(a), sp = H5Aget_space(a);
    int rc = 0;
    hssize_t cnt = H5Sget_simple_extent_npoints(sp);
    if (H5Tget_class(ft) != H5T_STRING || cnt <= 0)
        goto done;
    char **v = calloc((size_t)cnt, sizeof *v);
    if (!v) {
        rc = RT_ENOMEM;
        goto done;
    }
    if (H5Tis_variable_str(ft) > 0) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        char **raw = calloc((size_t)cnt, sizeof *raw);
        if (raw && H5Aread(a, mt, raw) >= 0) {
            for (hssize_t i = 0; i < cnt; i++)
                v[i] = strdup(raw[i] ? raw[i] : "");
            H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, raw);
        } else {
            rc = RT_EIO;
        }
        free(raw);
        H5Tclose(mt);
    } else {
        size_t w = H5Tget_size(ft);
        char *buf = calloc((size_t)cnt, w);
        if (buf && H5Aread(a, ft, buf) >= 0) {
            /* Fixed-length, NUL-padded (or full to the last byte). */
            for (hssize_t i = 0; i < cnt; i++)
                if ((v[i] = malloc(w + 1))) {
                    memcpy(v[i], buf + (size_t)i * w, w);
                    v[i][w] = 0;
                }
        } else {
            rc = RT_EIO;
        }
        free(buf);
    }
    for (hssize_t i = 0; rc == 0 && i < cnt; i++)
        if (!v[i])
            rc = RT_ENOMEM;
    if (rc < 0) {
        for (hssize_t i = 0; i < cnt; i++)
            free(v[i]);
        free(v);
    } else {
        *out = v;
        *n = (size_t)cnt;
    }
done:
    H5Sclose(sp);
    H5Tclose(ft);
    H5Aclose(a);
    return rc;
}

static void free_strings(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

int cli_h5_save(const rt_client_weights *w, const char *path, char *err, size_t errlen)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return rt_errf(err, errlen, RT_EINVAL, "path too long");
    struct stat st;
    /* written beside and renamed over path: never replace a device, pipe
     * or directory */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return rt_errf(err, errlen, RT_EINVAL, "%s is not a regular file", path);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    size_t nl = 0;
    char **layers = calloc(w->n ? w->n : 1, sizeof *layers);
    if (!layers)
        return RT_ENOMEM;
    for (size_t i = 0; i < w->n; i++) {
        if (w->t[i].dtype != RT_DTYPE_F32) {
            free_strings(layers, nl);
            return rt_errf(err, errlen, RT_EDTYPE, "weight %s is not float32", w->t[i].name);
        }
        size_t k = layer_len(w->t[i].name);
        int seen = 0;
        for (size_t j = 0; j < nl && !seen; j++)
            seen = strlen(layers[j]) == k && !strncmp(layers[j], w->t[i].name, k);
        if (!seen && !(layers[nl++] = strndup(w->t[i].name, k))) {
            free_strings(layers, nl - 1);
            return RT_ENOMEM;
        }
    }
    int rc = 0;
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        free_strings(layers, nl);
        return rt_errf(err, errlen, RT_EIO, "cannot create %s", tmp);
    }
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    if ((rc = put_string(f, "backend", "tensorflow")) < 0 ||
        (rc = put_string(f, "keras_version", "2.11.0")) < 0 ||
        (rc = put_strings(f, "layer_names", (const char *const *)layers, nl)) < 0)
        goto out;
    for (size_t j = 0; j < nl && rc == 0; j++) {
        hid_t g = H5Gcreate2(f, layers[j], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) {
            rc = RT_EIO;
            break;
        }
        size_t k = strlen(layers[j]), nw = 0;
        char **names = calloc(w->n, sizeof *names);
        for (size_t i = 0; names && i < w->n && rc == 0; i++) {
            const rt_client_tensor *t = &w->t[i];
            if (layer_len(t->name) != k || strncmp(t->name, layers[j], k) != 0)
                continue;
            size_t len = strlen(t->name) + 3;
            if (!(names[nw] = malloc(len))) {
                rc = RT_ENOMEM;
                break;
            }
            snprintf(names[nw], len, "%s:0", t->name);
            hsize_t dims[RT_CLIENT_MAX_DIMS];
            for (int d = 0; d < t->ndim; d++)
                dims[d] = (hsize_t)t->shape[d];
            hid_t sp = t->ndim ? H5Screate_simple(t->ndim, dims, NULL) : H5Screate(H5S_SCALAR);
            hid_t ds = H5Dcreate2(g, names[nw], H5T_IEEE_F32LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
            if (ds < 0 ||
                H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->data) < 0)
                rc = RT_EIO;
            if (ds >= 0)
                H5Dclose(ds);
            H5Sclose(sp);
            nw++;
        }
        if (!names)
            rc = RT_ENOMEM;
        if (rc == 0)
            rc = put_strings(g, "weight_names", (const char *const *)names, nw);
        if (names)
            free_strings(names, nw);
        H5Gclose(g);
    }
    if (rc == 0)
        rc = put_top_level(f);
out:
    H5Pclose(lcpl);
    if (H5Fclose(f) < 0 && rc == 0)
        rc = RT_EIO;
    free_strings(layers, nl);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = RT_EIO;
    if (rc < 0) {
        remove(tmp);
        return rt_errf(err, errlen, rc, "cannot write %s: %s", path, rt_strerror(rc));
    }
    return 0;
}

typedef struct file_layer {
    char *name;
    char **weights;
    size_t n;
} file_layer;

/* prog's layers with weights in the order of their first parameter: layer
 * l's parameter indices are idx[start[l] .. start[l + 1]), in prog's order
 * (the trainable ones first, as Keras lists a layer's weights) */
typedef struct model_layers {
    size_t n;
    size_t *start, *idx;
} model_layers;

static void model_layers_free(model_layers *ml)
{
    free(ml->start);
    free(ml->idx);
}

static int group_layers(const rt_client_compile_result *prog, model_layers *ml)
{
    const size_t np = prog->n_params;
    memset(ml, 0, sizeof *ml);
    ml->start = calloc(np + 1, sizeof *ml->start);
    ml->idx = calloc(np ? np : 1, sizeof *ml->idx);
    char *done = calloc(np ? np : 1, 1);
    if (!ml->start || !ml->idx || !done) {
        free(done);
        model_layers_free(ml);
        return RT_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < np; i++) {
        if (done[i])
            continue;
        ml->start[ml->n++] = k;
        for (size_t j = i; j < np; j++)
            if (!done[j] && same_layer(prog->params[i].name, prog->params[j].name)) {
                done[j] = 1;
                ml->idx[k++] = j;
            }
    }
    ml->start[ml->n] = k;
    free(done);
    return 0;
}

/* Dataset name in group loc (where: its path, for messages) into out's next
 * tensor as prog's parameter pi, its shape checked. */
static int read_param(hid_t loc, const char *name, const char *where, const char *path,
                      const rt_client_param_info *pi, rt_client_weights *out, char *err,
                      size_t errlen)
{
    rt_client_tensor *t = &out->t[out->n];
    hid_t ds = H5Lexists(loc, name, H5P_DEFAULT) > 0 ? H5Dopen2(loc, name, H5P_DEFAULT) : -1;
    if (ds < 0)
        return rt_errf(err, errlen, RT_EDATA, "%s: no dataset '%s' in '%s'", path, name, where);
    hid_t sp = H5Dget_space(ds);
    hsize_t dims[RT_CLIENT_MAX_DIMS];
    int nd = H5Sget_simple_extent_ndims(sp);
    int same = nd == pi->ndim && nd <= RT_CLIENT_MAX_DIMS;
    if (same)
        H5Sget_simple_extent_dims(sp, dims, NULL);
    size_t numel = 1;
    for (int d = 0; same && d < nd; d++) {
        same = dims[d] == (hsize_t)pi->shape[d];
        numel *= (size_t)pi->shape[d];
    }
    int rc = 0;
    if (!same) {
        rc = rt_errf(err, errlen, RT_ESHAPE,
                     "%s: weight '%s' of '%s' does not have the shape of the model's %s", path,
                     name, where, pi->name);
    } else {
        t->name = strdup(pi->name);
        t->data = malloc(numel * sizeof(float));
        t->dtype = RT_DTYPE_F32;
        t->ndim = pi->ndim;
        memcpy(t->shape, pi->shape, sizeof t->shape);
        t->nbytes = numel * sizeof(float);
        out->n++;
        if (!t->name || !t->data)
            rc = RT_ENOMEM;
        else if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->data) < 0)
            rc = rt_errf(err, errlen, RT_EIO, "%s: cannot read '%s' in '%s'", path, name, where);
    }
    H5Sclose(sp);
    H5Dclose(ds);
    return rc;
}

/* Keras 2's layout under root */
static int load_k2(hid_t root, const char *path, const rt_client_compile_result *prog,
                   const model_layers *ml, rt_client_weights *out, char *err, size_t errlen)
{
    char **names = NULL;
    size_t nn = 0, nf = 0;
    file_layer *fl = NULL;
    int rc = get_strings(root, "layer_names", &names, &nn);
    if (rc < 0) {
        rc = rt_errf(err, errlen, rc, "cannot read %s", path);
        goto out;
    }
    if (!names) {
        rc =
            rt_errf(err, errlen, RT_EDATA, "%s is not a Keras weights file (no layer_names)", path);
        goto out;
    }
    fl = calloc(nn, sizeof *fl);
    for (size_t i = 0; fl && i < nn && rc == 0; i++) {
        hid_t g = H5Gopen2(root, names[i], H5P_DEFAULT);
        if (g < 0) {
            rc = rt_errf(err, errlen, RT_EDATA, "%s: layer '%s' has no group", path, names[i]);
            break;
        }
        char **wn;
        size_t n;
        if ((rc = get_strings(g, "weight_names", &wn, &n)) == 0 && n) {
            fl[nf].name = names[i];
            fl[nf].weights = wn;
            fl[nf++].n = n;
        }
        H5Gclose(g);
    }
    if (!fl)
        rc = RT_ENOMEM;
    if (rc < 0)
        goto out;
    if (ml->n != nf) {
        rc = rt_errf(err, errlen, RT_ESHAPE,
                     "%s holds weights for %zu layers but the model has %zu layers with "
                     "weights",
                     path, nf, ml->n);
        goto out;
    }
    for (size_t l = 0; l < nf && rc == 0; l++) {
        const size_t first = ml->start[l], cnt = ml->start[l + 1] - first;
        const char *pn = prog->params[ml->idx[first]].name;
        if (cnt != fl[l].n) {
            rc = rt_errf(err, errlen, RT_ESHAPE,
                         "layer '%s' of %s has %zu weights, the model's '%.*s' %zu", fl[l].name,
                         path, fl[l].n, (int)layer_len(pn), pn, cnt);
            break;
        }
        hid_t g = H5Gopen2(root, fl[l].name, H5P_DEFAULT);
        for (size_t j = 0; j < cnt && rc == 0; j++)
            rc = read_param(g, fl[l].weights[j], fl[l].name, path,
                            &prog->params[ml->idx[first + j]], out, err, errlen);
        H5Gclose(g);
    }
out:
    for (size_t i = 0; fl && i < nf; i++)
        free_strings(fl[i].weights, fl[i].n);
    free(fl);
    free_strings(names, nn);
    return rc;
}

/* keras/src/utils/naming.py to_snake_case: drop non-word characters,
 * (.)([A-Z][a-z]+) -> \1_\2 (matches taken from the left, not
 * overlapping), ([a-z])([A-Z]) -> \1_\2, lower case */
static void snake_case(const char *cls, char *dst, size_t cap)
{
    char a[128], b[256];
    size_t k = 0, m = 0, from = 0;
    for (const char *p = cls; *p && k + 1 < sizeof a; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '_')
            a[k++] = *p;
    a[k] = 0;
#define UP(ch) ((ch) >= 'A' && (ch) <= 'Z')
#define LO(ch) ((ch) >= 'a' && (ch) <= 'z')
    for (size_t i = 0; i < k; i++) {
        if (i >= 1 && i - 1 >= from && UP(a[i]) && LO(a[i + 1])) {
            b[m++] = '_';
            size_t j = i;
            b[m++] = a[j++];
            while (j < k && LO(a[j]))
                b[m++] = a[j++];
            from = j;
            i = j - 1;
            continue;
        }
        b[m++] = a[i];
    }
    size_t o = 0;
    for (size_t i = 0; i < m && o + 2 < cap; i++) {
        if (i > 0 && LO(b[i - 1]) && UP(b[i]))
            dst[o++] = '_';
        dst[o++] = UP(b[i]) ? (char)(b[i] - 'A' + 'a') : b[i];
    }
    dst[o] = 0;
#undef UP
#undef LO
}

static const char *jstr(json_object *o, const char *key)
{
    json_object *v;
    return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
               ? json_object_get_string(v)
               : NULL;
}

/* The model JSON's layer list (Keras, or a TF.js model.json's topology)
 * and whether it is a Sequential's */
static json_object *json_layers(json_object *doc, int *seq)
{
    json_object *t, *v;
    if (json_object_object_get_ex(doc, "modelTopology", &t))
        doc = json_object_object_get_ex(t, "model_config", &v) ? v : t;
    const char *cls = jstr(doc, "class_name");
    *seq = cls && strcmp(cls, "Sequential") == 0;
    if (!json_object_object_get_ex(doc, "config", &v))
        return NULL;
    if (json_object_is_type(v, json_type_array))
        return v;
    return json_object_object_get_ex(v, "layers", &t) && json_object_is_type(t, json_type_array)
               ? t
               : NULL;
}

/* The h5 path of the layer named lname: layers/<snake case>[_k], k
 * counting the listed layers of the same class before it (Sequential
 * lists no InputLayer). cls receives its class. */
static int k3_layer_path(json_object *lays, int seq, const char *lname, char *dst, size_t cap,
                         char *cls, size_t ccap)
{
    size_t n = json_object_array_length(lays);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(lays, i), *cfg = NULL;
        const char *c = jstr(e, "class_name");
        json_object_object_get_ex(e, "config", &cfg);
        const char *nm = jstr(e, "name") ? jstr(e, "name") : jstr(cfg, "name");
        if (!c || !nm || strcmp(nm, lname) != 0)
            continue;
        char base[160], other[160];
        snake_case(c, base, sizeof base);
        int k = 0;
        for (size_t j = 0; j < i; j++) {
            const char *oc = jstr(json_object_array_get_idx(lays, j), "class_name");
            if (!oc || (seq && strcmp(oc, "InputLayer") == 0))
                continue;
            snake_case(oc, other, sizeof other);
            k += strcmp(other, base) == 0;
        }
        if (k)
            snprintf(dst, cap, "layers/%s_%d", base, k);
        else
            snprintf(dst, cap, "layers/%s", base);
        snprintf(cls, ccap, "%s", c);
        return 0;
    }
    return RT_EINVAL;
}

/* The vars groups of a layer of class cls at p: (group, the weights' suffix
 * prefix after "<layer>/", or "" for all) */
typedef struct k3_group {
    char path[360], alt[360];
    const char *prefix;
} k3_group;

static int k3_groups(const char *cls, const char *p, k3_group *g)
{
    static const char *const rnn[] = {"LSTM", "GRU", "SimpleRNN", NULL};
    int n = 0;
    if (strcmp(cls, "Bidirectional") == 0) {
        snprintf(g[0].path, sizeof g[0].path, "%s/forward_layer/cell/vars", p);
        snprintf(g[1].path, sizeof g[1].path, "%s/backward_layer/cell/vars", p);
        g[0].prefix = "forward_";
        g[1].prefix = "backward_";
        g[0].alt[0] = g[1].alt[0] = 0;
        return 2;
    }
    if (strcmp(cls, "MultiHeadAttention") == 0) {
        static const char *const sub[4][2] = {{"query_dense", "query/"},
                                              {"key_dense", "key/"},
                                              {"value_dense", "value/"},
                                              {"output_dense", "attention_output/"}};
        for (n = 0; n < 4; n++) {
            snprintf(g[n].path, sizeof g[n].path, "%s/%s/vars", p, sub[n][0]);
            snprintf(g[n].alt, sizeof g[n].alt, "%s/_%s/vars", p, sub[n][0]);
            g[n].prefix = sub[n][1];
        }
        return 4;
    }
    for (int i = 0; rnn[i]; i++)
        if (strcmp(cls, rnn[i]) == 0) {
            snprintf(g[0].path, sizeof g[0].path, "%s/cell/vars", p);
            g[0].alt[0] = 0;
            g[0].prefix = "";
            return 1;
        }
    snprintf(g[0].path, sizeof g[0].path, "%s/vars", p);
    g[0].alt[0] = 0;
    g[0].prefix = "";
    return 1;
}

/* Keras 3's .weights.h5 */
static int load_k3(hid_t f, const char *path, const rt_client_compile_result *prog,
                   const model_layers *ml, const char *model_path, rt_client_weights *out,
                   char *err, size_t errlen)
{
    if (!model_path)
        return rt_errf(err, errlen, RT_EINVAL,
                       "%s is Keras 3's .weights.h5, placed by the model JSON's layer classes: "
                       "give --model as a file",
                       path);
    size_t len;
    char *text = cli_read_file(model_path, &len);
    if (!text)
        return rt_errf(err, errlen, RT_EIO, "cannot read %s", model_path);
    json_object *doc = json_tokener_parse(text);
    free(text);
    int seq = 0, rc = 0;
    json_object *lays = doc ? json_layers(doc, &seq) : NULL;
    if (!lays) {
        json_object_put(doc);
        return rt_errf(err, errlen, RT_EINVAL,
                       "%s is Keras 3's .weights.h5, which needs a Keras model JSON (%s is not "
                       "one)",
                       path, model_path);
    }
    for (size_t l = 0; l < ml->n && rc == 0; l++) {
        const size_t first = ml->start[l], cnt = ml->start[l + 1] - first;
        const char *pn = prog->params[ml->idx[first]].name;
        const size_t ll = layer_len(pn);
        char lname[200], lp[300], cls[128];
        snprintf(lname, sizeof lname, "%.*s", (int)ll, pn);
        if (k3_layer_path(lays, seq, lname, lp, sizeof lp, cls, sizeof cls) < 0) {
            rc = rt_errf(err, errlen, RT_EINVAL, "layer '%s' is not in %s", lname, model_path);
            break;
        }
        k3_group gs[4];
        const int ng = k3_groups(cls, lp, gs);
        size_t placed = 0;
        for (int gi = 0; gi < ng && rc == 0; gi++) {
            /* the layer's weights in this group: trainable, then the others */
            size_t mine[64], nm = 0;
            for (int pass = 0; pass < 2; pass++)
                for (size_t j = 0; j < cnt && nm < 64; j++) {
                    const rt_client_param_info *pi = &prog->params[ml->idx[first + j]];
                    const char *sfx = pi->name + ll + (pi->name[ll] == '/');
                    if (!!pi->trainable == !pass &&
                        strncmp(sfx, gs[gi].prefix, strlen(gs[gi].prefix)) == 0)
                        mine[nm++] = ml->idx[first + j];
                }
            const char *gp = gs[gi].path;
            if (H5Lexists(f, gp, H5P_DEFAULT) <= 0 && gs[gi].alt[0] &&
                H5Lexists(f, gs[gi].alt, H5P_DEFAULT) > 0)
                gp = gs[gi].alt;
            hid_t g = H5Lexists(f, gp, H5P_DEFAULT) > 0 ? H5Gopen2(f, gp, H5P_DEFAULT) : -1;
            if (g < 0) {
                rc = rt_errf(err, errlen, RT_EDATA, "%s has no '%s' (layer '%s', a %s)", path, gp,
                             lname, cls);
                break;
            }
            H5G_info_t info = {0};
            if (H5Gget_info(g, &info) < 0 || info.nlinks != nm) {
                rc = rt_errf(err, errlen, RT_ESHAPE,
                             "%s: '%s' holds %llu weights, the model's '%s' %zu", path, gp,
                             (unsigned long long)info.nlinks, lname, nm);
            }
            for (size_t k = 0; k < nm && rc == 0; k++) {
                char ds[24];
                snprintf(ds, sizeof ds, "%zu", k);
                rc = read_param(g, ds, gp, path, &prog->params[mine[k]], out, err, errlen);
            }
            H5Gclose(g);
            placed += nm;
        }
        if (rc == 0 && placed != cnt)
            rc = rt_errf(err, errlen, RT_EUNIMPLEMENTED,
                         "%s: %zu weights of layer '%s' (a %s) have no place in Keras 3's layout "
                         "here",
                         path, cnt - placed, lname, cls);
    }
    json_object_put(doc);
    return rc;
}

int cli_h5_load(const char *path, const rt_client_compile_result *prog, const char *model_path,
                rt_client_weights *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (H5Fis_hdf5(path) <= 0)
        return rt_errf(err, errlen, RT_EDATA, "%s is not an HDF5 file", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return rt_errf(err, errlen, RT_EIO, "cannot open %s", path);
    hid_t root = f;
    int rc = 0;
    model_layers ml;
    memset(&ml, 0, sizeof ml);
    const int k3 = H5Aexists(f, "layer_names") <= 0 &&
                   H5Lexists(f, "model_weights", H5P_DEFAULT) <= 0 &&
                   H5Lexists(f, "layers", H5P_DEFAULT) > 0;
    if (!k3 && H5Aexists(f, "layer_names") <= 0 && H5Lexists(f, "model_weights", H5P_DEFAULT) > 0)
        root = H5Gopen2(f, "model_weights", H5P_DEFAULT);
    if (root < 0) {
        rc = rt_errf(err, errlen, RT_EIO, "cannot read %s", path);
        goto out;
    }
    if ((rc = group_layers(prog, &ml)) < 0)
        goto out;
    out->t = calloc(prog->n_params ? prog->n_params : 1, sizeof *out->t);
    if (!out->t) {
        rc = RT_ENOMEM;
        goto out;
    }
    rc = k3 ? load_k3(f, path, prog, &ml, model_path, out, err, errlen)
            : load_k2(root, path, prog, &ml, out, err, errlen);
out:
    model_layers_free(&ml);
    if (root >= 0 && root != f)
        H5Gclose(root);
    H5Fclose(f);
    if (rc < 0)
        rt_client_weights_free(out);
    return rc;
}

#else /* !RT_HAVE_HDF5 */

int cli_h5_save(const rt_client_weights *w, const char *path, char *err, size_t errlen)
{
    (void)w;
    return rt_errf(err, errlen, RT_EUNIMPLEMENTED,
                   "%s: this rtrain was built without "
                   "libhdf5 (scripts/deps.sh installs libhdf5-dev)",
                   path);
}

int cli_h5_load(const char *path, const rt_client_compile_result *prog, const char *model_path,
                rt_client_weights *out, char *err, size_t errlen)
{
    (void)prog;
    (void)model_path;
    memset(out, 0, sizeof *out);
    return rt_errf(err, errlen, RT_EUNIMPLEMENTED,
                   "%s: this rtrain was built without "
                   "libhdf5 (scripts/deps.sh installs libhdf5-dev)",
                   path);
}

#endif
