/* rt_weights_file.c - the weights file written by `rtrain fit --save-weights`
 * and read by `rtrain eval/predict --weights` (format in rtrain.h). Written
 * to path.tmp, fsynced and renamed, so a crash never leaves half a file
 * under the real name. */
#include "rt_client_impl.h"
#include "rt_errf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#define RT__WMAGIC "RTWTS001"
#define RT__WMAX_TENSORS 100000u
#define RT__WMAX_NAME 4096u

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} wbuf;

static void put(wbuf *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* The file is little-endian; so is every host rtrain builds on (x86-64,
 * aarch64), which the static assert below pins down. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "little-endian host");

static void put_u32(wbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(wbuf *b, uint64_t v) { put(b, &v, 8); }

int rt_client_weights_save(const rt_client_weights *w, const char *path, char *errbuf,
                           size_t errlen)
{
    if (!w || !path || (w->n && !w->t))
        return rt_errf(errbuf, errlen, RT_EINVAL, "weights or path is NULL");
    wbuf b = {0};
    put(&b, RT__WMAGIC, 8);
    put_u32(&b, (uint32_t)w->n);
    put_u64(&b, w->global_step);
    for (size_t i = 0; i < w->n; i++) {
        const rt_client_tensor *t = &w->t[i];
        const char *name = t->name ? t->name : "";
        if (t->ndim < 0 || t->ndim > RT_CLIENT_MAX_DIMS) {
            free(b.p);
            return rt_errf(errbuf, errlen, RT_EINVAL, "tensor '%s' has ndim %d", name, t->ndim);
        }
        put_u32(&b, (uint32_t)strlen(name));
        put(&b, name, strlen(name));
        put_u32(&b, (uint32_t)t->dtype);
        put_u32(&b, (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++)
            put_u64(&b, (uint64_t)t->shape[d]);
        put_u64(&b, t->nbytes);
        if (t->nbytes)
            put(&b, t->data, t->nbytes);
    }
    if (b.oom) {
        free(b.p);
        return rt_errf(errbuf, errlen, RT_ENOMEM, "out of memory");
    }
    put_u64(&b, XXH64(b.p, b.n, 0));
    size_t tl = strlen(path) + 8;
    char *tmp = malloc(tl);
    if (!tmp || b.oom) {
        free(tmp);
        free(b.p);
        return rt_errf(errbuf, errlen, RT_ENOMEM, "out of memory");
    }
    snprintf(tmp, tl, "%s.tmp", path);
    int rc = 0;
    struct stat st;
    /* The file is written beside and renamed over path: a device, pipe or
     * directory there would be replaced, not written to. */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        free(tmp);
        free(b.p);
        return rt_errf(errbuf, errlen, RT_EINVAL, "%s is not a regular file", path);
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rc = rt_errf(errbuf, errlen, RT_EIO, "cannot write %s: %s", tmp, strerror(errno));
    } else {
        int ok = fwrite(b.p, 1, b.n, f) == b.n && fflush(f) == 0 && fsync(fileno(f)) == 0;
        ok = (fclose(f) == 0) && ok;
        if (!ok || rename(tmp, path) != 0) {
            rc = rt_errf(errbuf, errlen, RT_EIO, "cannot write %s: %s", path, strerror(errno));
            unlink(tmp);
        }
    }
    free(tmp);
    free(b.p);
    return rc;
}

typedef struct rbuf {
    const uint8_t *p;
    size_t n, at;
} rbuf;

static int get(rbuf *r, void *dst, size_t n)
{
    if (r->n - r->at < n)
        return -1;
    memcpy(dst, r->p + r->at, n);
    r->at += n;
    return 0;
}

int rt_client_weights_load(rt_client_weights *w, const char *path, char *errbuf, size_t errlen)
{
    if (!w || !path)
        return rt_errf(errbuf, errlen, RT_EINVAL, "weights or path is NULL");
    memset(w, 0, sizeof *w);
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_errf(errbuf, errlen, errno == ENOENT ? RT_ENOTFOUND : RT_EIO,
                       "cannot open %s: %s", path, strerror(errno));
    uint8_t *data = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            uint8_t *nd = realloc(data, cap);
            if (!nd) {
                free(data);
                fclose(f);
                return rt_errf(errbuf, errlen, RT_ENOMEM, "out of memory");
            }
            data = nd;
        }
        size_t got = fread(data + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int ioerr = ferror(f);
    fclose(f);
    int rc = 0;
    if (ioerr)
        rc = rt_errf(errbuf, errlen, RT_EIO, "reading %s failed", path);
    else if (n < 8 + 4 + 8 + 8 || memcmp(data, RT__WMAGIC, 8) != 0)
        rc = rt_errf(errbuf, errlen, RT_EDATA,
                     "%s is not an rtrain weights file "
                     "(magic %s)",
                     path, RT__WMAGIC);
    if (rc == 0) {
        uint64_t sum;
        memcpy(&sum, data + n - 8, 8);
        if (XXH64(data, n - 8, 0) != sum)
            rc = rt_errf(errbuf, errlen, RT_ECHECKSUM,
                         "%s: checksum mismatch "
                         "(file damaged or truncated)",
                         path);
    }
    rbuf r = {data, n - 8, 8};
    uint32_t count = 0;
    if (rc == 0 &&
        (get(&r, &count, 4) < 0 || get(&r, &w->global_step, 8) < 0 || count > RT__WMAX_TENSORS))
        rc = rt_errf(errbuf, errlen, RT_EDATA, "%s: bad header", path);
    if (rc == 0) {
        w->t = calloc(count ? count : 1, sizeof *w->t);
        if (!w->t)
            rc = rt_errf(errbuf, errlen, RT_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; rc == 0 && i < count; i++) {
        rt_client_tensor *t = &w->t[i];
        uint32_t nl, dt, nd;
        uint64_t nbytes = 0;
        if (get(&r, &nl, 4) < 0 || nl > RT__WMAX_NAME || r.n - r.at < nl) {
            rc = rt_errf(errbuf, errlen, RT_EDATA, "%s: tensor %u: bad name", path, i);
            break;
        }
        w->n++;
        t->name = malloc(nl + 1);
        if (!t->name) {
            rc = rt_errf(errbuf, errlen, RT_ENOMEM, "out of memory");
            break;
        }
        get(&r, t->name, nl);
        t->name[nl] = 0;
        if (get(&r, &dt, 4) < 0 || get(&r, &nd, 4) < 0 ||
            !rt_client_dtype_size((rt_client_dtype)dt) || nd > RT_CLIENT_MAX_DIMS) {
            rc = rt_errf(errbuf, errlen, RT_EDATA, "%s: tensor '%s': bad dtype or rank", path,
                         t->name);
            break;
        }
        t->dtype = (rt_client_dtype)dt;
        t->ndim = (int)nd;
        uint64_t want = rt_client_dtype_size(t->dtype);
        for (uint32_t d = 0; d < nd && rc == 0; d++) {
            uint64_t v = 0;
            if (get(&r, &v, 8) < 0 || (int64_t)v < 0 || (v && want > UINT64_MAX / v))
                rc = rt_errf(errbuf, errlen, RT_EDATA, "%s: tensor '%s': bad shape", path, t->name);
            t->shape[d] = (int64_t)v;
            want *= v;
        }
        if (rc < 0)
            break;
        if (get(&r, &nbytes, 8) < 0 || nbytes != want || r.n - r.at < nbytes) {
            rc = rt_errf(errbuf, errlen, RT_EDATA,
                         "%s: tensor '%s': %llu data bytes "
                         "do not match its shape or the file",
                         path, t->name, (unsigned long long)nbytes);
            break;
        }
        t->data = malloc(nbytes ? nbytes : 1);
        if (!t->data) {
            rc = rt_errf(errbuf, errlen, RT_ENOMEM, "out of memory");
            break;
        }
        get(&r, t->data, nbytes);
        t->nbytes = nbytes;
    }
    if (rc == 0 && r.at != r.n)
        rc = rt_errf(errbuf, errlen, RT_EDATA, "%s: %zu trailing bytes", path, r.n - r.at);
    free(data);
    if (rc < 0)
        rt_client_weights_free(w);
    return rc;
}
