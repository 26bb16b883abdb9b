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
 * A parameter "dense/kernel" of the daemon belongs to layer "dense"; layers
 * are listed in the order of their first parameter. Loading follows Keras'
 * load_weights: the file's layers that have weights (a full model file's
 * /model_weights group too) are matched to the model's by order, and every
 * count and shape is checked. Layers without weights may be listed in a file
 * Keras wrote; they carry nothing and are skipped. */
#include "cli.h"
#include "rt_errf.h"

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

/* The layer of a parameter name: the text before its last '/'. */
static size_t layer_len(const char *name)
{
    const char *s = strrchr(name, '/');
    return s ? (size_t)(s - name) : strlen(name);
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

int cli_h5_load(const char *path, const rt_client_compile_result *prog, rt_client_weights *out,
                char *err, size_t errlen)
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
    if (H5Aexists(f, "layer_names") <= 0 && H5Lexists(f, "model_weights", H5P_DEFAULT) > 0)
        root = H5Gopen2(f, "model_weights", H5P_DEFAULT);
    char **names = NULL;
    size_t nn = 0, nf = 0;
    file_layer *fl = NULL;
    if (root < 0 || (rc = get_strings(root, "layer_names", &names, &nn)) < 0) {
        rc = rt_errf(err, errlen, rc < 0 ? rc : RT_EIO, "cannot read %s", path);
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
    /* The model's layers with weights, in the order of their parameters. */
    size_t nl = 0;
    for (size_t i = 0; i < prog->n_params; i++)
        if (i == 0 || layer_len(prog->params[i].name) != layer_len(prog->params[i - 1].name) ||
            strncmp(prog->params[i].name, prog->params[i - 1].name,
                    layer_len(prog->params[i].name)) != 0)
            nl++;
    if (nl != nf) {
        rc = rt_errf(err, errlen, RT_ESHAPE,
                     "%s holds weights for %zu layers but the model has %zu layers with "
                     "weights",
                     path, nf, nl);
        goto out;
    }
    out->t = calloc(prog->n_params ? prog->n_params : 1, sizeof *out->t);
    if (!out->t) {
        rc = RT_ENOMEM;
        goto out;
    }
    size_t p = 0;
    for (size_t l = 0; l < nf && rc == 0; l++) {
        size_t first = p, k = layer_len(prog->params[p].name);
        while (p < prog->n_params && layer_len(prog->params[p].name) == k &&
               !strncmp(prog->params[p].name, prog->params[first].name, k))
            p++;
        if (p - first != fl[l].n) {
            rc = rt_errf(err, errlen, RT_ESHAPE,
                         "layer '%s' of %s has %zu weights, the "
                         "model's '%.*s' %zu",
                         fl[l].name, path, fl[l].n, (int)k, prog->params[first].name, p - first);
            break;
        }
        hid_t g = H5Gopen2(root, fl[l].name, H5P_DEFAULT);
        for (size_t j = 0; j < fl[l].n && rc == 0; j++) {
            const rt_client_param_info *pi = &prog->params[first + j];
            rt_client_tensor *t = &out->t[out->n];
            hid_t ds = H5Dopen2(g, fl[l].weights[j], H5P_DEFAULT);
            if (ds < 0) {
                rc = rt_errf(err, errlen, RT_EDATA, "%s: no dataset '%s' in layer '%s'", path,
                             fl[l].weights[j], fl[l].name);
                break;
            }
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
            if (!same) {
                rc = rt_errf(err, errlen, RT_ESHAPE,
                             "%s: weight '%s' does not have the "
                             "shape of the model's %s",
                             path, fl[l].weights[j], pi->name);
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
                    rc = rt_errf(err, errlen, RT_EIO, "%s: cannot read '%s'", path,
                                 fl[l].weights[j]);
            }
            H5Sclose(sp);
            H5Dclose(ds);
        }
        H5Gclose(g);
    }
out:
    for (size_t i = 0; fl && i < nf; i++)
        free_strings(fl[i].weights, fl[i].n);
    free(fl);
    free_strings(names, nn);
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

int cli_h5_load(const char *path, const rt_client_compile_result *prog, rt_client_weights *out,
                char *err, size_t errlen)
{
    (void)prog;
    memset(out, 0, sizeof *out);
    return rt_errf(err, errlen, RT_EUNIMPLEMENTED,
                   "%s: this rtrain was built without "
                   "libhdf5 (scripts/deps.sh installs libhdf5-dev)",
                   path);
}

#endif
