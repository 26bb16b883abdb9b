/* rt_tfjs.c - the TF.js layers format (tfjs' model.save, tensorflowjs_converter):
 * model.json holds the Keras model as "modelTopology" and a "weightsManifest"
 * naming .bin shards of little-endian float32 values, concatenated per group
 * in the order the group's "weights" list them. Read and written here for the
 * CLI and C callers as client/python/rtrain/saving.py does for Python:
 * float32 unquantized weights only, shard paths inside the model's folder,
 * one shard written (tfjs reads any split). */
#include "rt_client_impl.h"
#include "rt_errf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#define RT__TFJS_SHARD "group1-shard1of1.bin"
#define RT__TFJS_MAX_BYTES ((size_t)1 << 34) /* 16 GiB of shards */

/* the whole of a file; NULL with a message */
static char *slurp(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        rt_errf(err, errlen, RT_EIO, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char *b = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (size_t)n <= RT__TFJS_MAX_BYTES && (b = malloc((size_t)n + 1)) &&
        fread(b, 1, (size_t)n, f) == (size_t)n) {
        b[n] = 0;
        *len = (size_t)n;
    } else {
        rt_errf(err, errlen, b ? RT_EIO : RT_ENOMEM, "cannot read %s%s", path,
                n > 0 && (size_t)n > RT__TFJS_MAX_BYTES ? ": larger than 16 GiB" : "");
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

/* path's folder and model.json: path is either */
static int tfjs_paths(const char *path, char *dir, char *mj, size_t n)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, n, "%s", path);
        return snprintf(mj, n, "%s/model.json", path) < (int)n ? 0 : RT_EINVAL;
    }
    const char *sl = strrchr(path, '/');
    snprintf(dir, n, "%.*s", sl ? (int)(sl - path) : 1, sl ? path : ".");
    return snprintf(mj, n, "%s", path) < (int)n ? 0 : RT_EINVAL;
}

int rt_client_tfjs_is_model(const char *json)
{
    json_object *doc = json ? json_tokener_parse(json) : NULL, *v;
    int r = doc && json_object_is_type(doc, json_type_object) &&
            json_object_object_get_ex(doc, "modelTopology", &v) &&
            json_object_object_get_ex(doc, "weightsManifest", &v) &&
            json_object_is_type(v, json_type_array);
    json_object_put(doc);
    return r;
}

/* one manifest entry's tensor from the group's bytes at *at */
static int take_weight(json_object *e, const uint8_t *data, size_t len, size_t *at,
                       rt_client_tensor *t, char *err, size_t errlen)
{
    json_object *v;
    const char *name = json_object_object_get_ex(e, "name", &v) ? json_object_get_string(v) : NULL;
    if (!name)
        return rt_errf(err, errlen, RT_EINVAL, "a weight of the manifest has no name");
    const char *dt =
        json_object_object_get_ex(e, "dtype", &v) ? json_object_get_string(v) : "float32";
    if (strcmp(dt, "float32") || json_object_object_get_ex(e, "quantization", &v))
        return rt_errf(err, errlen, RT_EINVAL,
                       "weight %s: only float32 unquantized TF.js "
                       "weights are read (%s%s)",
                       name, dt,
                       json_object_object_get_ex(e, "quantization", &v) ? ", quantized" : "");
    json_object *sh;
    if (!json_object_object_get_ex(e, "shape", &sh) || !json_object_is_type(sh, json_type_array) ||
        json_object_array_length(sh) > RT_CLIENT_MAX_DIMS)
        return rt_errf(err, errlen, RT_EINVAL, "weight %s: a shape of at most %d dims is needed",
                       name, RT_CLIENT_MAX_DIMS);
    size_t numel = 1;
    t->ndim = (int)json_object_array_length(sh);
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = json_object_get_int64(json_object_array_get_idx(sh, (size_t)i));
        if (d < 0 || d > ((int64_t)1 << 32) || __builtin_mul_overflow(numel, (size_t)d, &numel))
            return rt_errf(err, errlen, RT_EINVAL, "weight %s: bad shape", name);
        t->shape[i] = d;
    }
    if (numel > (len - *at) / 4)
        return rt_errf(err, errlen, RT_EINVAL, "weight %s runs past the end of its shards", name);
    t->dtype = RT_DTYPE_F32;
    t->nbytes = 4 * numel;
    t->name = strdup(name);
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    if (!t->name || !t->data)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory");
    memcpy(t->data, data + *at, t->nbytes);
    *at += t->nbytes;
    return 0;
}

/* a group's shards, concatenated, into *out; 0 or a code with a message */
static int group_bytes(const char *dir, json_object *paths, uint8_t **out, size_t *len, char *err,
                       size_t errlen)
{
    uint8_t *all = NULL;
    *len = 0;
    *out = NULL;
    for (size_t k = 0; k < json_object_array_length(paths); k++) {
        const char *p = json_object_get_string(json_object_array_get_idx(paths, k));
        if (!p || p[0] == '/' || strstr(p, "..")) {
            free(all);
            return rt_errf(err, errlen, RT_EINVAL,
                           "weight shard path '%s' leaves the model's "
                           "folder",
                           p ? p : "");
        }
        char fp[8448];
        snprintf(fp, sizeof fp, "%s/%s", dir, p);
        size_t n;
        char *b = slurp(fp, &n, err, errlen);
        uint8_t *na = b && *len + n <= RT__TFJS_MAX_BYTES ? realloc(all, *len + n + 1) : NULL;
        if (!b && err && errlen) {
            /* slurp said which file and why; name the way out */
            size_t u = strlen(err);
            snprintf(err + u, errlen - u,
                     " (the weightsManifest of model.json names it: put its .bin shards "
                     "beside model.json, or drop weightsManifest to start from fresh weights)");
        }
        if (!na) {
            /* a shard that cannot be read is the input's fault, as a
             * model file that cannot be (the CLI's exit 4) */
            int rc =
                b ? rt_errf(err, errlen, RT_ENOMEM, "out of memory for the shards") : RT_EINVAL;
            free(b);
            free(all);
            return rc;
        }
        all = na;
        memcpy(all + *len, b, n);
        *len += n;
        free(b);
    }
    *out = all ? all : calloc(1, 1);
    return *out ? 0 : rt_errf(err, errlen, RT_ENOMEM, "out of memory");
}

int rt_client_tfjs_load(const char *path, char **model_json, rt_client_weights *w, char *err,
                        size_t errlen)
{
    memset(w, 0, sizeof *w);
    if (model_json)
        *model_json = NULL;
    char dir[4096], mj[4096];
    if (!path || tfjs_paths(path, dir, mj, sizeof dir) < 0)
        return rt_errf(err, errlen, RT_EINVAL, "bad TF.js model path");
    size_t len;
    char *text = slurp(mj, &len, err, errlen);
    if (!text)
        return RT_EIO;
    json_object *doc = json_tokener_parse(text), *topo, *man;
    int rc = 0;
    if (!doc || !json_object_object_get_ex(doc, "modelTopology", &topo) ||
        !json_object_is_type(topo, json_type_object))
        rc = rt_errf(err, errlen, RT_EINVAL,
                     "%s is not a TF.js layers model (no "
                     "modelTopology)",
                     mj);
    else if (!json_object_object_get_ex(doc, "weightsManifest", &man) ||
             !json_object_is_type(man, json_type_array))
        rc = rt_errf(err, errlen, RT_EINVAL, "%s has no weightsManifest", mj);
    size_t cap = 0;
    for (size_t g = 0; rc == 0 && g < json_object_array_length(man); g++) {
        json_object *grp = json_object_array_get_idx(man, g), *paths, *ws;
        if (!json_object_object_get_ex(grp, "paths", &paths) ||
            !json_object_is_type(paths, json_type_array) ||
            !json_object_object_get_ex(grp, "weights", &ws) ||
            !json_object_is_type(ws, json_type_array)) {
            rc = rt_errf(err, errlen, RT_EINVAL,
                         "%s: weightsManifest group %zu needs paths "
                         "and weights",
                         mj, g);
            break;
        }
        size_t n, at = 0;
        uint8_t *data;
        if ((rc = group_bytes(dir, paths, &data, &n, err, errlen)) < 0)
            break;
        for (size_t i = 0; rc == 0 && i < json_object_array_length(ws); i++) {
            if (w->n == cap) {
                cap = cap ? 2 * cap : 16;
                rt_client_tensor *nt = realloc(w->t, cap * sizeof *nt);
                if (!nt) {
                    rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory");
                    break;
                }
                w->t = nt;
            }
            memset(&w->t[w->n], 0, sizeof w->t[0]);
            rc = take_weight(json_object_array_get_idx(ws, i), data, n, &at, &w->t[w->n], err,
                             errlen);
            w->n++;
        }
        free(data);
    }
    json_object_put(doc);
    if (rc == 0 && model_json)
        *model_json = text;
    else
        free(text);
    if (rc < 0)
        rt_client_weights_free(w);
    return rc;
}

/* path written whole beside and renamed into place */
static int write_file(const char *path, const void *p, size_t n, char *err, size_t errlen)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return rt_errf(err, errlen, RT_EIO, "cannot write %s: %s", tmp, strerror(errno));
    int ok = fwrite(p, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return rt_errf(err, errlen, RT_EIO, "cannot write %s: %s", path, strerror(e));
    }
    return 0;
}

int rt_client_tfjs_save(const char *dir, const char *model_json, const rt_client_weights *w,
                        char *err, size_t errlen)
{
    if (!dir || !model_json || !w || (w->n && !w->t))
        return rt_errf(err, errlen, RT_EINVAL, "dir, model or weights is NULL");
    json_object *src = json_tokener_parse(model_json), *topo = src, *v;
    if (!src || !json_object_is_type(src, json_type_object)) {
        json_object_put(src);
        return rt_errf(err, errlen, RT_EINVAL, "the model is not a JSON object");
    }
    /* a TF.js model.json given as the model: its topology */
    if (json_object_object_get_ex(src, "modelTopology", &v) &&
        json_object_is_type(v, json_type_object))
        topo = v;
    json_object *doc = json_object_new_object(), *man = json_object_new_array(),
                *grp = json_object_new_object(), *paths = json_object_new_array(),
                *ws = json_object_new_array();
    size_t total = 0;
    int rc = 0;
    for (size_t i = 0; i < w->n; i++) {
        const rt_client_tensor *t = &w->t[i];
        if (t->dtype != RT_DTYPE_F32 || !t->name) {
            rc = rt_errf(err, errlen, RT_EINVAL, "weight %zu is not a named float32 tensor", i);
            break;
        }
        json_object *e = json_object_new_object(), *sh = json_object_new_array();
        for (int d = 0; d < t->ndim; d++)
            json_object_array_add(sh, json_object_new_int64(t->shape[d]));
        json_object_object_add(e, "name", json_object_new_string(t->name));
        json_object_object_add(e, "shape", sh);
        json_object_object_add(e, "dtype", json_object_new_string("float32"));
        json_object_array_add(ws, e);
        total += t->nbytes;
    }
    json_object_array_add(paths, json_object_new_string(RT__TFJS_SHARD));
    json_object_object_add(grp, "paths", paths);
    json_object_object_add(grp, "weights", ws);
    json_object_array_add(man, grp);
    json_object_object_add(doc, "format", json_object_new_string("layers-model"));
    json_object_object_add(doc, "generatedBy", json_object_new_string("rtrain"));
    json_object_object_add(doc, "convertedBy", NULL);
    json_object_object_add(doc, "modelTopology", json_object_get(topo));
    json_object_object_add(doc, "weightsManifest", man);
    uint8_t *shard = rc == 0 ? malloc(total ? total : 1) : NULL;
    if (rc == 0 && !shard)
        rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory");
    for (size_t i = 0, at = 0; rc == 0 && i < w->n; at += w->t[i].nbytes, i++)
        memcpy(shard + at, w->t[i].data, w->t[i].nbytes);
    char fp[4200];
    if (rc == 0 && mkdir(dir, 0777) < 0 && errno != EEXIST)
        rc = rt_errf(err, errlen, RT_EIO, "cannot make %s: %s", dir, strerror(errno));
    if (rc == 0) {
        snprintf(fp, sizeof fp, "%s/%s", dir, RT__TFJS_SHARD);
        rc = write_file(fp, shard, total, err, errlen);
    }
    if (rc == 0) {
        /* model.json last: a folder with it is whole */
        const char *txt = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN);
        snprintf(fp, sizeof fp, "%s/model.json", dir);
        rc = write_file(fp, txt, strlen(txt), err, errlen);
    }
    free(shard);
    json_object_put(doc);
    json_object_put(src);
    return rc;
}
