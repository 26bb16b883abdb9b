/* rt_data.c - dataset formats (RAW, NPY, CSV, IDX[.gz]) and assembly. */
#include "rt_data.h"
#include "rt_random.h"
#include "rt_errf.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <xxhash.h>

#include "rt_example.h"
#include "rt_inflate.h"
#include "rt_stream.h"

/* Element types a source can hold. Parsers describe their bytes with one of
 * these and the converters below read them, so each format only parses its
 * header. */
typedef enum src_type { S_U8, S_I8, S_I16, S_I32, S_I64, S_F32, S_F64 } src_type;

typedef struct src_arr {
    src_type t;
    int big_endian;
    int ndim;
    int64_t dims[RT_MAX_DIMS];
    const uint8_t *data;
    void *owned;       /* decompressed or parsed buffer, freed after */
    int64_t label_col; /* CSV both: column index into each row, else -1 */
    int64_t row_cols;  /* CSV: values per row */
} src_arr;

static const size_t src_size[] = {1, 1, 2, 4, 8, 4, 8};

const char *rt_data_shape_str(int ndim, const int64_t *dims, char *buf, size_t len)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "(");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)dims[i]);
    if (o < len)
        snprintf(buf + o, len - o, ndim == 1 ? ",)" : ")");
    return buf;
}

/* Multiply with an overflow check against a cap. */
static int mul_cap(int64_t a, int64_t b, int64_t cap, int64_t *out)
{
    if (a < 0 || b < 0)
        return -1;
    if (a != 0 && b > cap / a)
        return -1;
    *out = a * b;
    return 0;
}

static double get_elem(const src_arr *s, int64_t i)
{
    const uint8_t *p = s->data + (size_t)i * src_size[s->t];
    uint8_t tmp[8];
    size_t sz = src_size[s->t];
    if (s->big_endian && sz > 1) {
        for (size_t k = 0; k < sz; k++)
            tmp[k] = p[sz - 1 - k];
        p = tmp;
    }
    switch (s->t) {
    case S_U8: return p[0];
    case S_I8: return (int8_t)p[0];
    case S_I16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case S_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case S_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    case S_F32: {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    case S_F64: {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    }
    return 0;
}

static int is_float_src(src_type t) { return t == S_F32 || t == S_F64; }

/* -------------------------------------------------------------------- RAW */
static int parse_raw(const rt_data_part *p, const uint8_t *b, size_t len, src_arr *s, char *err,
                     size_t errlen)
{
    switch (p->dtype) {
    case RT_F32: s->t = S_F32; break;
    case RT_I32: s->t = S_I32; break;
    case RT_I64: s->t = S_I64; break;
    case RT_U8: s->t = S_U8; break;
    default:
        return rt_errf(err, errlen, RT_EDATA, "RAW part needs a dtype (got %d)", (int)p->dtype);
    }
    if (p->ndim < 1 || p->ndim > RT_MAX_DIMS)
        return rt_errf(err, errlen, RT_EDATA, "RAW part needs a shape of 1..%d dims (got %d)",
                       RT_MAX_DIMS, p->ndim);
    int64_t n = 1;
    for (int i = 0; i < p->ndim; i++)
        if (mul_cap(n, p->dims[i], INT64_MAX / 8, &n) < 0)
            return rt_errf(err, errlen, RT_EDATA, "RAW shape dim %d is invalid", i);
    if ((uint64_t)n * src_size[s->t] != len)
        return rt_errf(err, errlen, RT_EDATA, "RAW part is %zu bytes but its shape needs %llu", len,
                       (unsigned long long)((uint64_t)n * src_size[s->t]));
    s->ndim = p->ndim;
    memcpy(s->dims, p->dims, sizeof(int64_t) * (size_t)p->ndim);
    s->data = b;
    return 0;
}

/* -------------------------------------------------------------------- NPY */
/* The NPY header is a Python dict literal, read strictly as numpy writes
 * it: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } then
 * spaces and a newline. Exactly these three keys, once each; anything
 * else (an unclosed tuple, a stray character, a key twice) is refused. */
typedef struct npy_rd {
    const char *p;
} npy_rd;

static void npy_ws(npy_rd *r)
{
    while (*r->p == ' ' || *r->p == '\t')
        r->p++;
}

/* A quoted string into out (up to n-1 chars); 0 or -1. */
static int npy_str(npy_rd *r, char *out, size_t n)
{
    char q = *r->p;
    if (q != '\'' && q != '"')
        return -1;
    const char *e = strchr(r->p + 1, q);
    if (!e || (size_t)(e - r->p - 1) >= n)
        return -1;
    memcpy(out, r->p + 1, (size_t)(e - r->p - 1));
    out[e - r->p - 1] = 0;
    r->p = e + 1;
    return 0;
}

static int parse_npy(const uint8_t *b, size_t len, src_arr *s, char *err, size_t errlen)
{
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return rt_errf(err, errlen, RT_EDATA, "NPY part lacks the \\x93NUMPY magic");
    int major = b[6];
    size_t hl, off;
    if (major == 1) {
        hl = (size_t)b[8] | ((size_t)b[9] << 8);
        off = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12)
            return rt_errf(err, errlen, RT_EDATA, "NPY header truncated");
        hl = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
        off = 12;
    } else {
        return rt_errf(err, errlen, RT_EDATA, "NPY version %d is not supported", major);
    }
    if (hl > len - off || hl > 65536)
        return rt_errf(err, errlen, RT_EDATA, "NPY header length %zu is past the data", hl);
    char h[65537];
    memcpy(h, b + off, hl);
    h[hl] = 0;
    if (strlen(h) != hl)
        return rt_errf(err, errlen, RT_EDATA, "NPY header holds a NUL byte");
    static const struct {
        const char *d;
        src_type t;
    } descrs[] = {
        {"<f4", S_F32}, {"<f8", S_F64}, {"<i4", S_I32}, {"<i8", S_I64},
        {"|u1", S_U8},  {"<u1", S_U8},  {"|i1", S_I8},  {"<i2", S_I16},
    };
    npy_rd r = {h};
    int seen = 0; /* 1 descr, 2 fortran_order, 4 shape */
    const char *bad = NULL;
    npy_ws(&r);
    if (*r.p++ != '{')
        bad = "it does not start with '{'";
    while (!bad) {
        npy_ws(&r);
        if (*r.p == '}') {
            r.p++;
            break;
        }
        if (!*r.p) {
            bad = "the dict is not closed";
            break;
        }
        char key[32], val[32];
        if (npy_str(&r, key, sizeof key) < 0) {
            bad = "a key is not a quoted string";
            break;
        }
        npy_ws(&r);
        if (*r.p++ != ':') {
            bad = "a key has no ':'";
            break;
        }
        npy_ws(&r);
        int bit = !strcmp(key, "descr")           ? 1
                  : !strcmp(key, "fortran_order") ? 2
                  : !strcmp(key, "shape")         ? 4
                                                  : 0;
        if (!bit || (seen & bit)) {
            snprintf(err, errlen, "NPY header has %s key '%.20s'",
                     bit ? "a repeated" : "an unknown", key);
            return RT_EDATA;
        }
        seen |= bit;
        if (bit == 1) {
            if (npy_str(&r, val, sizeof val) < 0) {
                bad = "descr is not a quoted string";
                break;
            }
            int found = 0;
            for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++)
                if (!strcmp(val, descrs[i].d)) {
                    s->t = descrs[i].t;
                    found = 1;
                }
            if (!found)
                return rt_errf(err, errlen, RT_EDATA,
                               "NPY dtype '%.16s' is not supported (use <f4, <f8, <i4, <i8 or |u1)",
                               val);
        } else if (bit == 2) {
            if (!strncmp(r.p, "True", 4))
                return rt_errf(err, errlen, RT_EDATA,
                               "NPY array is fortran_order; save it C-contiguous");
            if (strncmp(r.p, "False", 5)) {
                bad = "fortran_order is not True or False";
                break;
            }
            r.p += 5;
        } else {
            if (*r.p++ != '(') {
                bad = "the shape is not a tuple";
                break;
            }
            s->ndim = 0;
            for (;;) {
                npy_ws(&r);
                if (*r.p == ')')
                    break;
                if (*r.p < '0' || *r.p > '9') {
                    bad = *r.p ? "the shape holds something other than integers"
                               : "the shape tuple is not closed";
                    break;
                }
                char *end;
                errno = 0;
                long long v = strtoll(r.p, &end, 10);
                if (errno) {
                    bad = "a shape dimension overflows";
                    break;
                }
                if (s->ndim == RT_MAX_DIMS)
                    return rt_errf(err, errlen, RT_EDATA, "NPY array has more than %d dims",
                                   RT_MAX_DIMS);
                s->dims[s->ndim++] = v;
                r.p = end;
                npy_ws(&r);
                if (*r.p == ',')
                    r.p++;
                else if (*r.p != ')') {
                    bad = *r.p ? "the shape's dimensions are not separated by ','"
                               : "the shape tuple is not closed";
                    break;
                }
            }
            if (bad)
                break;
            r.p++; /* ')' */
        }
        npy_ws(&r);
        if (*r.p == ',')
            r.p++;
        else if (*r.p != '}') {
            bad = *r.p ? "entries are not separated by ','" : "the dict is not closed";
            break;
        }
    }
    if (!bad && seen != 7)
        bad = "it lacks descr, fortran_order or shape";
    while (!bad && *r.p) {
        if (*r.p != ' ' && *r.p != '\n' && *r.p != '\t') {
            bad = "something follows the dict";
            break;
        }
        r.p++;
    }
    if (bad)
        return rt_errf(err, errlen, RT_EDATA, "NPY header is malformed at byte %d: %s",
                       (int)(r.p - h), bad);
    if (s->ndim == 0)
        return rt_errf(err, errlen, RT_EDATA, "NPY array is a scalar; need samples first");
    size_t data_off = off + hl;
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        if (mul_cap(n, s->dims[i], INT64_MAX / 8, &n) < 0)
            return rt_errf(err, errlen, RT_EDATA, "NPY shape overflows");
    if ((uint64_t)n * src_size[s->t] != len - data_off)
        return rt_errf(err, errlen, RT_EDATA, "NPY data is %zu bytes but shape and dtype need %llu",
                       len - data_off, (unsigned long long)((uint64_t)n * src_size[s->t]));
    s->data = b + data_off;
    return 0;
}

/* -------------------------------------------------------------------- IDX */
static const size_t idx_elem[16] = {
    [0x08] = 1, [0x09] = 1, [0x0B] = 2, [0x0C] = 4, [0x0D] = 4, [0x0E] = 8};

/* Inflates an IDX header (magic and dims) from the gzip stream f into
 * hdr (room for 4 + 4 * RT_MAX_DIMS bytes): *hl its length. */
static int idx_gz_header(rt_inflater *f, uint8_t *hdr, size_t *hl, char *err, size_t errlen)
{
    size_t got;
    int rc = rt_inflate_read(f, hdr, 4, &got, err, errlen);
    if (rc < 0)
        return rc;
    if (got < 4)
        return rt_errf(err, errlen, RT_EDATA, "gzip data ends inside the IDX header");
    if (hdr[0] != 0 || hdr[1] != 0 || hdr[3] < 1 || hdr[3] > RT_MAX_DIMS)
        return rt_errf(err, errlen, RT_EDATA, "IDX header (inside the gzip) is invalid");
    size_t want = 4 + 4 * (size_t)hdr[3];
    if ((rc = rt_inflate_read(f, hdr + 4, want - 4, &got, err, errlen)) < 0)
        return rc;
    if (got < want - 4)
        return rt_errf(err, errlen, RT_EDATA, "gzip data ends inside the IDX header");
    *hl = want;
    return 0;
}

/* An IDX part's inflater: the dataset limit (0: none) and the ratio. */
static int idx_gz_begin(rt_inflater *f, const uint8_t *in, size_t len, uint64_t max_bytes,
                        uint32_t ratio, char *err, size_t errlen)
{
    const rt_zlimits lim = {max_bytes, "dataset limit", "--max-dataset-bytes", ratio};
    int rc = rt_inflate_begin(f, RT_Z_GZIP, len, &lim, "IDX", err, errlen);
    if (rc == 0)
        rt_inflate_input(f, in, len);
    return rc;
}

/* Gzip'ed IDX: inflate the header first, check the size it declares
 * against the limits, then inflate into a buffer of exactly that size. A
 * bomb is refused before anything large is allocated or inflated. */
static int gunzip_idx(const uint8_t *in, size_t len, uint64_t max_bytes, uint32_t ratio,
                      uint8_t **out, size_t *out_len, char *err, size_t errlen)
{
    rt_inflater f;
    int rc = idx_gz_begin(&f, in, len, max_bytes, ratio, err, errlen);
    if (rc < 0)
        return rc;
    uint8_t hdr[4 + 4 * RT_MAX_DIMS];
    size_t hl = 0, got = 0;
    uint8_t *buf = NULL;
    uint64_t need = 0;
    if ((rc = idx_gz_header(&f, hdr, &hl, err, errlen)) < 0)
        goto out;
    size_t esz = idx_elem[hdr[2] & 15];
    if (!esz || hdr[2] > 0x0E) {
        rc = rt_errf(err, errlen, RT_EDATA, "IDX type 0x%02x is unknown", hdr[2]);
        goto out;
    }
    int64_t n = 1;
    for (int i = 0; i < hdr[3]; i++) {
        const uint8_t *q = hdr + 4 + 4 * i;
        int64_t d = ((int64_t)q[0] << 24) | ((int64_t)q[1] << 16) | ((int64_t)q[2] << 8) | q[3];
        if (mul_cap(n, d, INT64_MAX / 8, &n) < 0) {
            rc = rt_errf(err, errlen, RT_EDATA, "IDX shape overflows");
            goto out;
        }
    }
    need = (uint64_t)n * esz + hl;
    if ((rc = rt_inflate_admit(&f, need, err, errlen)) < 0)
        goto out;
    buf = malloc((size_t)need);
    if (!buf) {
        rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating gzip");
        goto out;
    }
    memcpy(buf, hdr, hl);
    if ((rc = rt_inflate_read(&f, buf + hl, (size_t)need - hl, &got, err, errlen)) < 0)
        goto out;
    if (hl + got == need) {
        /* Full: more output means more than declared. */
        uint8_t extra;
        size_t more;
        if ((rc = rt_inflate_read(&f, &extra, 1, &more, err, errlen)) < 0)
            goto out;
        if (more) {
            rc = rt_errf(err, errlen, RT_EDATA,
                         "gzip data inflates past the %llu bytes its IDX header declares",
                         (unsigned long long)need);
            goto out;
        }
    }
    if ((rc = rt_inflate_finish(&f, err, errlen)) < 0)
        goto out;
    *out = buf;
    *out_len = hl + got; /* short of need: parse_idx says so */
    buf = NULL;
out:
    free(buf);
    rt_inflate_end(&f);
    return rc;
}

static int parse_idx(const rt_data_part *p, const uint8_t *b, size_t len, uint64_t max_bytes,
                     uint32_t ratio, src_arr *s, char *err, size_t errlen)
{
    if (len >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
        uint8_t *raw = NULL;
        size_t rl = 0;
        int rc = gunzip_idx(b, len, max_bytes, ratio, &raw, &rl, err, errlen);
        if (rc < 0)
            return rc;
        s->owned = raw;
        b = raw;
        len = rl;
    }
    if (len < 4 || b[0] != 0 || b[1] != 0)
        return rt_errf(err, errlen, RT_EDATA, "IDX part lacks the 00 00 magic");
    switch (b[2]) {
    case 0x08: s->t = S_U8; break;
    case 0x09: s->t = S_I8; break;
    case 0x0B: s->t = S_I16; break;
    case 0x0C: s->t = S_I32; break;
    case 0x0D: s->t = S_F32; break;
    case 0x0E: s->t = S_F64; break;
    default: return rt_errf(err, errlen, RT_EDATA, "IDX type 0x%02x is unknown", b[2]);
    }
    s->big_endian = 1;
    s->ndim = b[3];
    if (s->ndim < 1 || s->ndim > RT_MAX_DIMS)
        return rt_errf(err, errlen, RT_EDATA, "IDX has %d dims (1..%d allowed)", s->ndim,
                       RT_MAX_DIMS);
    size_t off = 4 + 4 * (size_t)s->ndim;
    if (len < off)
        return rt_errf(err, errlen, RT_EDATA, "IDX header truncated");
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) {
        const uint8_t *q = b + 4 + 4 * i;
        s->dims[i] = ((int64_t)q[0] << 24) | ((int64_t)q[1] << 16) | ((int64_t)q[2] << 8) | q[3];
        if (mul_cap(n, s->dims[i], INT64_MAX / 8, &n) < 0)
            return rt_errf(err, errlen, RT_EDATA, "IDX shape overflows");
    }
    if ((uint64_t)n * src_size[s->t] != len - off)
        return rt_errf(err, errlen, RT_EDATA, "IDX data is %zu bytes but its header needs %llu",
                       len - off, (unsigned long long)((uint64_t)n * src_size[s->t]));
    s->data = b + off;
    (void)p;
    return 0;
}

/* -------------------------------------------------------------------- CSV */
/* Numeric CSV, row by row: fn gets each row's k values (every row has the
 * first row's count). Empty lines are skipped; a trailing \r is ignored.
 * *rows and *cols say what was read. */
typedef int (*csv_row_fn)(void *ud, const double *v, int64_t k, char *err, size_t errlen);

static int csv_walk(const rt_data_part *p, const uint8_t *b, size_t len, csv_row_fn fn, void *ud,
                    int64_t *rows_out, int64_t *cols_out, char *err, size_t errlen)
{
    const char *c = (const char *)b, *end = c + len;
    size_t rcap = 64;
    double *row = malloc(rcap * sizeof *row);
    if (!row)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory parsing CSV");
    int64_t cols = -1, rows = 0, line = 0;
    int rc = 0;
    char num[128];
    while (c < end) {
        const char *eol = memchr(c, '\n', (size_t)(end - c));
        if (!eol)
            eol = end;
        line++;
        const char *le = eol;
        if (le > c && le[-1] == '\r')
            le--;
        int blank = 1;
        for (const char *q = c; q < le; q++)
            if (!isspace((unsigned char)*q))
                blank = 0;
        if (blank || (line == 1 && p->csv_header)) {
            c = eol + 1;
            continue;
        }
        int64_t k = 0;
        const char *f = c;
        for (;;) {
            const char *fe = memchr(f, ',', (size_t)(le - f));
            if (!fe)
                fe = le;
            size_t fl = (size_t)(fe - f);
            while (fl && isspace((unsigned char)*f)) {
                f++;
                fl--;
            }
            while (fl && isspace((unsigned char)f[fl - 1]))
                fl--;
            if (fl == 0 || fl >= sizeof num) {
                rc = rt_errf(err, errlen, RT_EDATA, "CSV line %lld, column %lld is %s",
                             (long long)line, (long long)k, fl ? "too long" : "empty");
                goto out;
            }
            memcpy(num, f, fl);
            num[fl] = 0;
            char *ne;
            double d = strtod(num, &ne);
            if (*ne) {
                rc = rt_errf(err, errlen, RT_EDATA,
                             "CSV line %lld, column %lld is not a number ('%.20s')%s",
                             (long long)line, (long long)k, num,
                             line == 1 ? "; set csv_header to skip a header line" : "");
                goto out;
            }
            if ((size_t)k == rcap) {
                double *nr =
                    (size_t)k < (size_t)1 << 24 ? realloc(row, rcap * 2 * sizeof *row) : NULL;
                if (!nr) {
                    rc = rt_errf(err, errlen, RT_ETOOBIG, "CSV line %lld has too many columns",
                                 (long long)line);
                    goto out;
                }
                row = nr;
                rcap *= 2;
            }
            row[k++] = d;
            if (fe == le)
                break;
            f = fe + 1;
        }
        if (cols < 0)
            cols = k;
        else if (k != cols) {
            rc = rt_errf(err, errlen, RT_EDATA, "CSV line %lld has %lld columns, expected %lld",
                         (long long)line, (long long)k, (long long)cols);
            goto out;
        }
        if ((rc = fn(ud, row, k, err, errlen)) < 0)
            goto out;
        rows++;
        c = eol + 1;
    }
    if (rows == 0)
        rc = rt_errf(err, errlen, RT_EDATA, "CSV part has no rows");
    *rows_out = rows;
    *cols_out = cols;
out:
    free(row);
    return rc;
}

typedef struct csv_all {
    double *v;
    size_t n, cap;
    uint64_t max_bytes;
} csv_all;

static int csv_append(void *ud, const double *v, int64_t k, char *err, size_t errlen)
{
    csv_all *a = ud;
    while (a->n + (size_t)k > a->cap) {
        if ((a->cap * 2) * sizeof(double) > a->max_bytes * 8 + 8192)
            return rt_errf(err, errlen, RT_ETOOBIG, "CSV is too large");
        double *nv = realloc(a->v, a->cap * 2 * sizeof *nv);
        if (!nv)
            return rt_errf(err, errlen, RT_ENOMEM, "out of memory parsing CSV");
        a->v = nv;
        a->cap *= 2;
    }
    memcpy(a->v + a->n, v, sizeof(double) * (size_t)k);
    a->n += (size_t)k;
    return 0;
}

/* Numeric CSV into an (rows, cols) f64 array. */
static int parse_csv(const rt_data_part *p, const uint8_t *b, size_t len, uint64_t max_bytes,
                     src_arr *s, char *err, size_t errlen)
{
    csv_all a = {.cap = 1024, .max_bytes = max_bytes};
    if (!(a.v = malloc(a.cap * sizeof *a.v)))
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory parsing CSV");
    int64_t rows = 0, cols = 0;
    int rc = csv_walk(p, b, len, csv_append, &a, &rows, &cols, err, errlen);
    if (rc < 0) {
        free(a.v);
        return rc;
    }
    s->t = S_F64;
    s->ndim = 2;
    s->dims[0] = rows;
    s->dims[1] = cols;
    s->data = (const uint8_t *)a.v;
    s->owned = a.v;
    s->row_cols = cols;
    return 0;
}

/* ----------------------------------------------------------- conversions */
/* The smallest double that float32 rounds to Inf: FLT_MAX plus half its
 * last place (a tie rounds to even, which is up from FLT_MAX's odd
 * significand). Rejected like Inf; a float cast of it is also UB in C. */
#define RT__F32_OVERFLOW ((double)FLT_MAX + 0x1p103)

static const char *nonfinite_name(double d) { return isnan(d) ? "NaN" : "Inf"; }

/* Index of the first NaN/Inf in x, or -1. The common all-finite case is
 * one branch-free pass over the exponent bits (it vectorizes); only a bad
 * array is scanned again for the index. */
static int64_t first_nonfinite(const float *x, int64_t n)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    if (bad)
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(x[i]))
                return i;
    return -1;
}

/* Features: f32 (n, per-sample...). For a CSV with a label column, that
 * column is skipped. If adopt is not NULL and the source is little-endian
 * f32 lying aligned in the caller's buffer, the dataset takes that buffer
 * (*adopt = NULL) instead of copying it: no second allocation, no page
 * faults on a fresh copy of a large upload. */
static int to_features(const src_arr *s, int normalize, int finite_known, rt_dataset *ds,
                       uint64_t max_bytes, uint8_t **adopt, char *err, size_t errlen)
{
    int64_t n = s->dims[0];
    int64_t per = rt_data_numel(s->ndim - 1, s->dims + 1);
    int64_t skip = s->label_col;
    if (skip >= 0)
        per -= 1;
    if (n <= 0 || per <= 0)
        return rt_errf(err, errlen, RT_EDATA, "features are empty (%lld samples of %lld values)",
                       (long long)n, (long long)per);
    int64_t total;
    if (mul_cap(n, per, (int64_t)(max_bytes * 4 + 4096) / 4, &total) < 0)
        return rt_errf(err, errlen, RT_ETOOBIG, "features are too large");
    if (adopt && *adopt && skip < 0 && s->t == S_F32 && !s->big_endian && !s->owned &&
        (uintptr_t)s->data % _Alignof(float) == 0) {
        const float *xs = (const float *)s->data;
        int64_t bad = finite_known ? -1 : first_nonfinite(xs, total);
        if (bad >= 0)
            return rt_errf(err, errlen, RT_ENAN, "features contain %s at sample %lld, column %lld",
                           nonfinite_name(xs[bad]), (long long)(bad / per), (long long)(bad % per));
        ds->x_owner = *adopt;
        *adopt = NULL;
        ds->x = (float *)s->data;
        goto shape;
    }
    float *x = malloc((size_t)total * sizeof(float));
    if (!x)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory for features");
    int scale = normalize && s->t == S_U8;
    int64_t in_per = skip >= 0 ? per + 1 : per;
    /* Fast paths for the common dense sources: one tight loop each, with
     * the finiteness check folded in. */
    if (skip < 0 && (s->t == S_U8 || (s->t == S_F32 && !s->big_endian))) {
        if (s->t == S_U8) {
            for (int64_t i = 0; i < total; i++)
                x[i] = scale ? (float)s->data[i] / 255.0f : (float)s->data[i];
        } else {
            memcpy(x, s->data, (size_t)total * sizeof(float));
            int64_t i = finite_known ? -1 : first_nonfinite(x, total);
            if (i >= 0) {
                double d = x[i];
                free(x);
                return rt_errf(err, errlen, RT_ENAN,
                               "features contain %s at sample %lld, column %lld", nonfinite_name(d),
                               (long long)(i / per), (long long)(i % per));
            }
        }
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t o = 0;
        for (int64_t j = 0; j < in_per; j++) {
            if (j == skip)
                continue;
            double d = get_elem(s, i * in_per + j);
            if (!isfinite(d)) {
                free(x);
                return rt_errf(err, errlen, RT_ENAN,
                               "features contain %s at sample %lld, column %lld", nonfinite_name(d),
                               (long long)i, (long long)o);
            }
            if (fabs(d) >= RT__F32_OVERFLOW) {
                free(x);
                return rt_errf(
                    err, errlen, RT_ENAN,
                    "features contain %g at sample %lld, column %lld: outside float32's range", d,
                    (long long)i, (long long)o);
            }
            x[i * per + o++] = scale ? (float)(d / 255.0) : (float)d;
        }
    }
done:
    ds->x = x;
shape:
    ds->n = n;
    if (skip >= 0 || s->ndim == 1) {
        ds->x_ndim = 1;
        ds->x_dims[0] = per;
    } else {
        ds->x_ndim = s->ndim - 1;
        memcpy(ds->x_dims, s->dims + 1, sizeof(int64_t) * (size_t)ds->x_ndim);
    }
    ds->bytes += (uint64_t)total * sizeof(float);
    return 0;
}

/* Labels: integer sources become i32, float sources f32. For a CSV with a
 * label column only that column is read. */
/* Keras' sample_weight: one finite weight >= 0 per sample, shape (n,) or
 * (n, 1), any numeric dtype, stored as f32. */
static int to_sample_weights(const src_arr *s, rt_dataset *ds, char *err, size_t errlen)
{
    int64_t n = s->ndim >= 1 ? s->dims[0] : 0;
    if (s->ndim < 1 || rt_data_numel(s->ndim - 1, s->dims + 1) != 1)
        return rt_errf(err, errlen, RT_ESHAPE, "sample weights must have shape (n,) or (n, 1)");
    if (n != ds->n)
        return rt_errf(err, errlen, RT_EDATA, "features have %lld samples but sample weights %lld",
                       (long long)ds->n, (long long)n);
    float *w = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!w)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory for sample weights");
    for (int64_t i = 0; i < n; i++) {
        double d = get_elem(s, i);
        if (!isfinite(d) || d < 0 || d >= RT__F32_OVERFLOW) {
            free(w);
            return rt_errf(err, errlen, RT_EDATA,
                           "sample weight %g at sample %lld: weights must be finite and >= 0", d,
                           (long long)i);
        }
        w[i] = (float)d;
    }
    ds->sw = w;
    ds->bytes += (uint64_t)n * 4;
    return 0;
}

static int to_labels(const src_arr *s, rt_dataset *ds, char *err, size_t errlen)
{
    int64_t n = s->dims[0];
    int64_t per, stride, col0;
    if (s->label_col >= 0) {
        per = 1;
        stride = s->row_cols;
        col0 = s->label_col;
    } else {
        per = rt_data_numel(s->ndim - 1, s->dims + 1);
        stride = per;
        col0 = 0;
    }
    if (n <= 0 || per <= 0)
        return rt_errf(err, errlen, RT_EDATA, "labels are empty");
    int fl = is_float_src(s->t);
    void *y = malloc((size_t)(n * per) * 4);
    if (!y)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory for labels");
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < per; j++) {
            double d = get_elem(s, i * stride + col0 + j);
            if (fl) {
                if (!isfinite(d)) {
                    free(y);
                    return rt_errf(err, errlen, RT_ENAN,
                                   "labels contain %s at sample %lld, column %lld",
                                   nonfinite_name(d), (long long)i, (long long)j);
                }
                if (fabs(d) >= RT__F32_OVERFLOW) {
                    free(y);
                    return rt_errf(
                        err, errlen, RT_ENAN,
                        "labels contain %g at sample %lld, column %lld: outside float32's range", d,
                        (long long)i, (long long)j);
                }
                ((float *)y)[i * per + j] = (float)d;
            } else {
                if (d < -2147483648.0 || d > 2147483647.0) {
                    free(y);
                    return rt_errf(err, errlen, RT_EDATA,
                                   "label %lld at sample %lld does not fit in int32", (long long)d,
                                   (long long)i);
                }
                ((int32_t *)y)[i * per + j] = (int32_t)d;
            }
        }
    ds->y = y;
    ds->y_dtype = fl ? RT_F32 : RT_I32;
    if (s->label_col >= 0 || s->ndim == 1) {
        ds->y_ndim = 0;
    } else {
        ds->y_ndim = s->ndim - 1;
        memcpy(ds->y_dims, s->dims + 1, sizeof(int64_t) * (size_t)ds->y_ndim);
    }
    ds->bytes += (uint64_t)(n * per) * 4;
    return n == ds->n || ds->n == 0
               ? 0
               : rt_errf(err, errlen, RT_EDATA, "features have %lld samples but labels have %lld",
                         (long long)ds->n, (long long)n);
}

static const char *const fmt_names[] = {"RAW", "NPY", "CSV", "IDX", "TFRECORD"};

static rt_stream_config stream_cfg;
static char stream_dir[4096];

void rt_data_set_stream_config(const rt_stream_config *c)
{
    stream_cfg = *c;
    if (c->spool_dir) {
        snprintf(stream_dir, sizeof stream_dir, "%s", c->spool_dir);
        stream_cfg.spool_dir = stream_dir;
    }
}

const rt_stream_config *rt_data_stream_config(void) { return &stream_cfg; }

/* ------------------------------------------------------------- streamed */
/* RAW, NPY, CSV and IDX features streamed (rt_stream.h rows): written to
 * the spool as u8 rows (u8 sources) or as the f32 values to_features would
 * make, with its checks and messages, a chunk at a time, so the decoded
 * set never sits in memory; a gzip'ed IDX is inflated into the spool
 * chunk by chunk. */
typedef struct row_sink {
    rt_stream *st;
    src_type t;
    int big_endian;
    int64_t per;
    uint64_t elem; /* elements taken so far */
    float *f;      /* staging, SINK_CHUNK floats */
} row_sink;

#define SINK_CHUNK ((size_t)1 << 16)

static int sink_floats(row_sink *k, size_t m, char *err, size_t errlen)
{
    return rt_stream_write(k->st, k->f, m * sizeof(float), err, errlen);
}

/* count whole elements of k->t at data */
static int sink_elems(row_sink *k, const uint8_t *data, uint64_t count, char *err, size_t errlen)
{
    if (k->t == S_U8) {
        int rc = rt_stream_write(k->st, data, (size_t)count, err, errlen);
        k->elem += count;
        return rc;
    }
    const size_t es = src_size[k->t];
    for (uint64_t done = 0; done < count;) {
        size_t m = count - done < SINK_CHUNK ? (size_t)(count - done) : SINK_CHUNK;
        const uint8_t *q = data + done * es;
        if (k->t == S_F32 && !k->big_endian) {
            memcpy(k->f, q, m * 4);
            int64_t i = first_nonfinite(k->f, (int64_t)m);
            if (i >= 0) {
                uint64_t g = k->elem + (uint64_t)i;
                return rt_errf(err, errlen, RT_ENAN,
                               "features contain %s at sample %lld, column %lld",
                               nonfinite_name(k->f[i]), (long long)(g / (uint64_t)k->per),
                               (long long)(g % (uint64_t)k->per));
            }
        } else {
            src_arr a = {.t = k->t, .big_endian = k->big_endian, .data = q};
            for (size_t i = 0; i < m; i++) {
                double d = get_elem(&a, (int64_t)i);
                uint64_t g = k->elem + i;
                if (!isfinite(d))
                    return rt_errf(err, errlen, RT_ENAN,
                                   "features contain %s at sample %lld, column %lld",
                                   nonfinite_name(d), (long long)(g / (uint64_t)k->per),
                                   (long long)(g % (uint64_t)k->per));
                if (fabs(d) >= RT__F32_OVERFLOW)
                    return rt_errf(
                        err, errlen, RT_ENAN,
                        "features contain %g at sample %lld, column %lld: outside float32's range",
                        d, (long long)(g / (uint64_t)k->per), (long long)(g % (uint64_t)k->per));
                k->f[i] = (float)d;
            }
        }
        int rc = sink_floats(k, m, err, errlen);
        if (rc < 0)
            return rc;
        k->elem += m;
        done += m;
    }
    return 0;
}

static int stream_wanted(const rt_data_part *p, uint64_t decoded, const rt_stream_config *sc)
{
    return p->storage == RT_STORAGE_STREAM ||
           (p->storage == RT_STORAGE_AUTO && sc && sc->stream_above && decoded > sc->stream_above);
}

/* Open the rows stream of n samples of per values from t (u8 rows for a
 * u8 source, divided by 255 when the part says normalize; f32 rows
 * otherwise) and set ds's sample count. The spool's room is checked by
 * rt_stream_begin (--max-spool-bytes, the disk), not the in-memory cap. */
static int sink_open(row_sink *k, const rt_data_part *p, src_type t, int big_endian, int64_t n,
                     int64_t per, const rt_stream_config *sc, rt_dataset *ds, char *err,
                     size_t errlen)
{
    memset(k, 0, sizeof *k);
    k->t = t;
    k->big_endian = big_endian;
    k->per = per;
    const int u8 = t == S_U8;
    int64_t total;
    if (n <= 0 || per <= 0)
        return rt_errf(err, errlen, RT_EDATA, "features are empty (%lld samples of %lld values)",
                       (long long)n, (long long)per);
    if (mul_cap(n, per, INT64_MAX / 8, &total) < 0)
        return rt_errf(err, errlen, RT_ETOOBIG, "features are too large");
    if (!u8 && !(k->f = malloc(SINK_CHUNK * sizeof(float))))
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory");
    rt_stream_rows rows = {.per = per,
                           .u8_len = u8 ? per : 0,
                           .u8_kind = p->normalize ? RT_ROWS_U8_UNIT : RT_ROWS_U8_VALUE};
    int rc = rt_stream_begin(&rows, n, p->shuffle_buffer, sc, &ds->stream, err, errlen);
    if (rc < 0)
        return rc;
    k->st = ds->stream;
    ds->n = n;
    return 0;
}

/* Free the staging; with rc 0 check that every row came. */
static int sink_close(row_sink *k, int rc, char *err, size_t errlen)
{
    free(k->f);
    k->f = NULL;
    return rc == 0 && k->st ? rt_stream_end(k->st, err, errlen) : rc;
}

static void set_x_shape(rt_dataset *ds, int ndim, const int64_t *dims, int flat, int64_t per)
{
    if (flat || ndim == 1) {
        ds->x_ndim = 1;
        ds->x_dims[0] = per;
    } else {
        ds->x_ndim = ndim - 1;
        memcpy(ds->x_dims, dims + 1, sizeof(int64_t) * (size_t)ds->x_ndim);
    }
}

/* A gzip'ed IDX: its header inflated first (the declared size decides),
 * then the data inflated through the sink. */
static int stream_idx_gz(const rt_data_part *p, const uint8_t *in, size_t len, uint32_t ratio,
                         const rt_stream_config *sc, rt_dataset *ds, int *done, char *err,
                         size_t errlen)
{
    /* Streamed sets are not bounded by the dataset limit (they live in the
     * spool), only by the ratio. */
    rt_inflater f;
    int rc = idx_gz_begin(&f, in, len, 0, ratio, err, errlen);
    if (rc < 0)
        return rc;
    uint8_t hdr[4 + 4 * RT_MAX_DIMS];
    size_t hl = 0;
    row_sink k;
    memset(&k, 0, sizeof k);
    uint8_t *buf = NULL;
    if ((rc = idx_gz_header(&f, hdr, &hl, err, errlen)) < 0)
        goto out;
    src_type t;
    switch (hdr[2]) {
    case 0x08: t = S_U8; break;
    case 0x09: t = S_I8; break;
    case 0x0B: t = S_I16; break;
    case 0x0C: t = S_I32; break;
    case 0x0D: t = S_F32; break;
    case 0x0E: t = S_F64; break;
    default: rc = rt_errf(err, errlen, RT_EDATA, "IDX type 0x%02x is unknown", hdr[2]); goto out;
    }
    int ndim = hdr[3];
    int64_t dims[RT_MAX_DIMS], cnt = 1;
    for (int i = 0; i < ndim; i++) {
        const uint8_t *q = hdr + 4 + 4 * i;
        dims[i] = ((int64_t)q[0] << 24) | ((int64_t)q[1] << 16) | ((int64_t)q[2] << 8) | q[3];
        if (mul_cap(cnt, dims[i], INT64_MAX / 8, &cnt) < 0) {
            rc = rt_errf(err, errlen, RT_EDATA, "IDX shape overflows");
            goto out;
        }
    }
    const uint64_t need = (uint64_t)cnt * src_size[t];
    int64_t per = rt_data_numel(ndim - 1, dims + 1);
    if (!stream_wanted(p, (uint64_t)cnt * 4, sc))
        goto out; /* in memory: parse_idx reads it again */
    *done = 1;
    if ((rc = rt_inflate_admit(&f, need + hl, err, errlen)) < 0)
        goto out;
    if ((rc = sink_open(&k, p, t, 1, dims[0], per, sc, ds, err, errlen)) < 0)
        goto out;
    enum { ZCH = 1 << 20 };
    if (!(buf = malloc(ZCH))) {
        rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory inflating gzip");
        goto out;
    }
    const size_t es = src_size[t];
    uint64_t out_total = 0;
    size_t carry = 0;
    for (;;) {
        size_t got, room = ZCH - carry;
        int zr = rt_inflate_read(&f, buf + carry, room, &got, err, errlen);
        if (zr < 0) {
            rc = zr;
            goto out;
        }
        size_t have = carry + got;
        out_total += got;
        if (out_total > need) {
            rc = rt_errf(err, errlen, RT_EDATA,
                         "gzip data inflates past the %llu bytes its IDX header declares",
                         (unsigned long long)(need + hl));
            goto out;
        }
        size_t whole = have / es * es;
        if (whole && (rc = sink_elems(&k, buf, whole / es, err, errlen)) < 0)
            goto out;
        carry = have - whole;
        memmove(buf, buf + whole, carry);
        if (zr == 1 || got < room)
            break; /* ended, or the input ran out */
    }
    if ((rc = rt_inflate_finish(&f, err, errlen)) < 0)
        goto out;
    if (out_total != need) {
        rc = rt_errf(err, errlen, RT_EDATA, "IDX data is %llu bytes but its header needs %llu",
                     (unsigned long long)out_total, (unsigned long long)need);
        goto out;
    }
    set_x_shape(ds, ndim, dims, 0, per);
out:
    rc = sink_close(&k, rc, err, errlen);
    free(buf);
    rt_inflate_end(&f);
    return rc;
}

typedef struct csv_stream {
    row_sink *k;
    int64_t lc, i; /* label column or -1, rows taken */
    double *labels;
    size_t used; /* floats staged in k->f */
} csv_stream;

static int csv_count(void *ud, const double *v, int64_t k, char *err, size_t errlen)
{
    (void)ud, (void)v, (void)k, (void)err, (void)errlen;
    return 0;
}

static int csv_to_sink(void *ud, const double *v, int64_t k, char *err, size_t errlen)
{
    csv_stream *c = ud;
    int64_t o = 0;
    for (int64_t j = 0; j < k; j++) {
        if (j == c->lc) {
            c->labels[c->i] = v[j];
            continue;
        }
        double d = v[j];
        if (!isfinite(d))
            return rt_errf(err, errlen, RT_ENAN, "features contain %s at sample %lld, column %lld",
                           nonfinite_name(d), (long long)c->i, (long long)o);
        if (fabs(d) >= RT__F32_OVERFLOW)
            return rt_errf(
                err, errlen, RT_ENAN,
                "features contain %g at sample %lld, column %lld: outside float32's range", d,
                (long long)c->i, (long long)o);
        o++;
        c->k->f[c->used++] = (float)d;
        if (c->used == SINK_CHUNK) {
            int rc = sink_floats(c->k, c->used, err, errlen);
            if (rc < 0)
                return rc;
            c->used = 0;
        }
    }
    c->i++;
    return 0;
}

/* A CSV: one pass to count rows and columns (the size decides), one to
 * write its rows; a label column goes to ds's labels. */
static int stream_csv(const rt_data_part *p, const uint8_t *b, size_t len,
                      const rt_stream_config *sc, rt_dataset *ds, int *done, char *err,
                      size_t errlen)
{
    int64_t rows = 0, cols = 0;
    int rc = csv_walk(p, b, len, csv_count, NULL, &rows, &cols, err, errlen);
    if (rc < 0)
        return rc;
    int64_t lc = -1;
    if (p->role == RT_ROLE_BOTH) {
        lc = p->label_column < 0 ? cols + p->label_column : p->label_column;
        if (lc < 0 || lc >= cols || cols < 2)
            return rt_errf(err, errlen, RT_EDATA, "CSV label_column %d is outside its %lld columns",
                           p->label_column, (long long)cols);
    }
    const int64_t per = cols - (lc >= 0);
    if (!stream_wanted(p, (uint64_t)rows * (uint64_t)per * 4, sc))
        return 0;
    *done = 1;
    row_sink k;
    csv_stream c = {.k = &k, .lc = lc};
    if (lc >= 0 && !(c.labels = malloc(sizeof(double) * (size_t)rows)))
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory for labels");
    rc = sink_open(&k, p, S_F32, 0, rows, per, sc, ds, err, errlen);
    if (rc == 0)
        rc = csv_walk(p, b, len, csv_to_sink, &c, &rows, &cols, err, errlen);
    if (rc == 0 && c.used)
        rc = sink_floats(&k, c.used, err, errlen);
    rc = sink_close(&k, rc, err, errlen);
    if (rc == 0) {
        ds->x_ndim = 1;
        ds->x_dims[0] = per;
    }
    if (rc == 0 && lc >= 0) {
        src_arr y = {.t = S_F64,
                     .ndim = 1,
                     .dims = {rows},
                     .data = (const uint8_t *)c.labels,
                     .label_col = -1};
        rc = to_labels(&y, ds, err, errlen);
    }
    free(c.labels);
    return rc;
}

/* The features part p streamed when its storage says so (or AUTO and its
 * decoded size is over the threshold): *done = 1 and ds has its stream
 * (and, for a CSV with a label column, its labels). Otherwise *done = 0
 * and nothing is kept. */
static int stream_features(const rt_data_part *p, const uint8_t *b, size_t len, uint64_t max_bytes,
                           uint32_t ratio, const rt_stream_config *sc, rt_dataset *ds, int *done,
                           char *err, size_t errlen)
{
    *done = 0;
    if (p->storage == RT_STORAGE_MEMORY)
        return 0;
    if (p->format == RT_FMT_CSV)
        return stream_csv(p, b, len, sc, ds, done, err, errlen);
    if (p->format == RT_FMT_IDX && len >= 2 && b[0] == 0x1f && b[1] == 0x8b)
        return stream_idx_gz(p, b, len, ratio, sc, ds, done, err, errlen);
    src_arr s;
    memset(&s, 0, sizeof s);
    s.label_col = -1;
    int rc;
    switch (p->format) {
    case RT_FMT_RAW: rc = parse_raw(p, b, len, &s, err, errlen); break;
    case RT_FMT_NPY: rc = parse_npy(b, len, &s, err, errlen); break;
    case RT_FMT_IDX: rc = parse_idx(p, b, len, max_bytes, ratio, &s, err, errlen); break;
    default: return 0;
    }
    if (rc < 0)
        return rc;
    const int64_t n = s.dims[0], per = rt_data_numel(s.ndim - 1, s.dims + 1);
    if (per < 0 || !stream_wanted(p, (uint64_t)n * (uint64_t)per * 4, sc))
        return 0;
    *done = 1;
    row_sink k;
    rc = sink_open(&k, p, s.t, s.big_endian, n, per, sc, ds, err, errlen);
    if (rc == 0)
        rc = sink_elems(&k, s.data, (uint64_t)n * (uint64_t)per, err, errlen);
    rc = sink_close(&k, rc, err, errlen);
    if (rc == 0)
        set_x_shape(ds, s.ndim, s.dims, 0, per);
    return rc;
}

/* TFRecord: every part is one shard of tf.train.Example records, read
 * under one feature spec (rt_example.c). */
static int parse_tfrecord(const rt_data_part *parts, int n_parts, const uint8_t *buf, size_t len,
                          uint64_t max_bytes, uint32_t ratio, rt_dataset **out, char *err,
                          size_t errlen)
{
    if (n_parts > RT_DATA_MAX_PARTS)
        return rt_errf(err, errlen, RT_EDATA, "a TFRecord dataset has at most %d shards, got %d",
                       RT_DATA_MAX_PARTS, n_parts);
    rt_tfr_shard sh[RT_DATA_MAX_PARTS];
    uint64_t off = 0;
    for (int i = 0; i < n_parts; i++) {
        const rt_data_part *p = &parts[i];
        if (p->format != RT_FMT_TFRECORD || p->role != RT_ROLE_BOTH)
            return rt_errf(err, errlen, RT_EDATA,
                           "part %d: a TFRecord dataset is TFRecord shards of role BOTH only", i);
        if (!p->spec)
            return rt_errf(err, errlen, RT_EDATA, "TFRecord parts need a feature spec");
        if ((int)p->compression < RT_TFR_NONE || p->compression > RT_TFR_ZLIB)
            return rt_errf(err, errlen, RT_EDATA, "part %d has unknown compression %d", i,
                           (int)p->compression);
        if (p->length > len - off)
            return rt_errf(err, errlen, RT_EDATA,
                           "parts add up to more than the %zu bytes uploaded", len);
        sh[i] = (rt_tfr_shard){.data = buf + off,
                               .len = (size_t)p->length,
                               .compression = p->compression,
                               .ratio = ratio};
        off += p->length;
    }
    if (off != len)
        return rt_errf(err, errlen, RT_EDATA, "parts add up to %llu bytes but %zu were uploaded",
                       (unsigned long long)off, len);
    rt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory");
    pthread_mutex_init(&ds->mu, NULL);
    ds->refs = 1;
    int rc =
        rt_example_build_ex(parts[0].spec, sh, n_parts, max_bytes, &stream_cfg, ds, err, errlen);
    if (rc < 0) {
        rt_dataset_release(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

int rt_data_parse_take(const rt_data_part *parts, int n_parts, uint8_t **bufp, size_t len,
                       uint64_t max_bytes, uint32_t max_inflate_ratio, void (*take_free)(void *),
                       rt_dataset **out, char *err, size_t errlen)
{
    const uint8_t *buf = *bufp;
    *out = NULL;
    if (n_parts >= 1 && parts[0].format == RT_FMT_TFRECORD)
        return parse_tfrecord(parts, n_parts, buf, len, max_bytes, max_inflate_ratio, out, err,
                              errlen);
    if (n_parts < 1 || n_parts > 3)
        return rt_errf(err, errlen, RT_EDATA,
                       "a dataset has 1 to 3 parts (features [+ labels] [+ sample weights]); "
                       "got %d",
                       n_parts);
    uint64_t sum = 0;
    for (int i = 0; i < n_parts; i++)
        sum += parts[i].length;
    if (sum != len)
        return rt_errf(err, errlen, RT_EDATA, "parts add up to %llu bytes but %zu were uploaded",
                       (unsigned long long)sum, len);
    int have_x = 0, have_y = 0, have_w = 0;
    for (int i = 0; i < n_parts; i++) {
        if (parts[i].role == RT_ROLE_SAMPLE_WEIGHTS) {
            if (parts[i].format != RT_FMT_RAW && parts[i].format != RT_FMT_NPY)
                return rt_errf(err, errlen, RT_EDATA,
                               "part %d: sample weights are a RAW or NPY array", i);
            have_w++;
            continue;
        }
        if ((int)parts[i].role < 0 || parts[i].role > RT_ROLE_BOTH)
            return rt_errf(err, errlen, RT_EDATA, "part %d has an unknown role %d", i,
                           (int)parts[i].role);
        if ((int)parts[i].format < 0 || parts[i].format > RT_FMT_TFRECORD)
            return rt_errf(err, errlen, RT_EDATA, "part %d has an unknown format %d", i,
                           (int)parts[i].format);
        if (parts[i].role == RT_ROLE_BOTH && parts[i].format != RT_FMT_CSV)
            return rt_errf(err, errlen, RT_EDATA,
                           "part %d: only a CSV part can hold features and labels", i);
        have_x += parts[i].role != RT_ROLE_LABELS;
        have_y += parts[i].role != RT_ROLE_FEATURES;
    }
    if (have_x != 1 || have_y > 1 || have_w > 1)
        return rt_errf(err, errlen, RT_EDATA,
                       "a dataset needs exactly one features part and at most one labels part "
                       "and one sample weights part");
    if (have_w && !have_y)
        return rt_errf(err, errlen, RT_EDATA, "sample weights need labels");

    rt_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return rt_errf(err, errlen, RT_ENOMEM, "out of memory");
    pthread_mutex_init(&ds->mu, NULL);
    ds->refs = 1;
    ds->x_free = take_free; /* for an adopted *bufp */
    /* Features first so labels can be checked against the sample count. */
    const uint8_t *ptrs[3];
    uint64_t off = 0;
    for (int i = 0; i < n_parts; i++) {
        ptrs[i] = buf + off;
        off += parts[i].length;
    }
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        for (int i = 0; i < n_parts && rc == 0; i++) {
            const rt_data_part *p = &parts[i];
            int is_x = p->role != RT_ROLE_LABELS && p->role != RT_ROLE_SAMPLE_WEIGHTS;
            if ((pass == 0) != is_x)
                continue;
            src_arr s;
            memset(&s, 0, sizeof s);
            s.label_col = -1;
            size_t plen = (size_t)p->length;
            int streamed = 0;
            if (is_x)
                rc = stream_features(p, ptrs[i], plen, max_bytes, max_inflate_ratio, &stream_cfg,
                                     ds, &streamed, err, errlen);
            if (rc == 0 && !streamed)
                switch (p->format) {
                case RT_FMT_RAW: rc = parse_raw(p, ptrs[i], plen, &s, err, errlen); break;
                case RT_FMT_NPY: rc = parse_npy(ptrs[i], plen, &s, err, errlen); break;
                case RT_FMT_IDX:
                    rc = parse_idx(p, ptrs[i], plen, max_bytes, max_inflate_ratio, &s, err, errlen);
                    break;
                case RT_FMT_CSV:
                    rc = parse_csv(p, ptrs[i], plen, max_bytes, &s, err, errlen);
                    break;
                case RT_FMT_TFRECORD: /* whole-dataset format, dispatched above */
                    rc = rt_errf(err, errlen, RT_EDATA,
                                 "TFRecord parts cannot mix with other formats");
                    break;
                }
            if (rc == 0 && !streamed && p->role == RT_ROLE_BOTH) {
                int64_t lc = p->label_column < 0 ? s.row_cols + p->label_column : p->label_column;
                if (lc < 0 || lc >= s.row_cols || s.row_cols < 2) {
                    rc = rt_errf(err, errlen, RT_EDATA,
                                 "CSV label_column %d is outside its %lld columns", p->label_column,
                                 (long long)s.row_cols);
                } else {
                    s.label_col = lc;
                }
            }
            if (p->role == RT_ROLE_SAMPLE_WEIGHTS) {
                if (rc == 0)
                    rc = to_sample_weights(&s, ds, err, errlen);
                if (rc < 0 && err && errlen) {
                    char tmp[256];
                    snprintf(tmp, sizeof tmp, "%s sample weights part: %s", fmt_names[p->format],
                             err);
                    snprintf(err, errlen, "%s", tmp);
                }
                free(s.owned);
                continue;
            }
            if (rc == 0 && is_x && !streamed)
                rc = to_features(&s, p->normalize, p->format == RT_FMT_RAW && p->finite_checked, ds,
                                 max_bytes, take_free ? bufp : NULL, err, errlen);
            if (rc == 0 && !streamed && p->role != RT_ROLE_FEATURES) {
                if (p->role == RT_ROLE_LABELS)
                    s.label_col = -1;
                rc = to_labels(&s, ds, err, errlen);
            }
            if (rc < 0 && err && errlen) {
                /* Say which part failed, keeping the message short. */
                char tmp[256];
                snprintf(tmp, sizeof tmp, "%s %s part: %s", fmt_names[p->format],
                         p->role == RT_ROLE_LABELS ? "labels" : "features", err);
                snprintf(err, errlen, "%s", tmp);
            }
            free(s.owned);
        }
    }
    if (rc < 0) {
        rt_dataset_release(ds);
        return rc;
    }
    *out = ds;
    return 0;
}

void rt_data_key(const uint8_t content_hash[16], const rt_data_part *parts, int n_parts,
                 uint8_t key[16])
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, content_hash, 16);
    for (int i = 0; i < n_parts; i++) {
        /* Field by field: struct padding must not enter the key. */
        int64_t f[6 + RT_MAX_DIMS];
        memset(f, 0, sizeof f);
        f[0] = parts[i].role;
        f[1] = parts[i].format;
        f[2] = (int64_t)parts[i].length;
        f[3] = parts[i].format == RT_FMT_RAW ? parts[i].dtype : 0;
        f[4] = parts[i].format == RT_FMT_CSV
                   ? ((int64_t)parts[i].label_column * 2 +
                      (parts[i].csv_header != 0)) /* * 2: << of -1 is UB */
                   : 0;
        f[5] = parts[i].normalize != 0;
        if (parts[i].format == RT_FMT_RAW)
            for (int d = 0; d < parts[i].ndim && d < RT_MAX_DIMS; d++)
                f[6 + d] = parts[i].dims[d];
        if (parts[i].format == RT_FMT_TFRECORD)
            f[3] = parts[i].compression;
        XXH3_128bits_update(st, f, sizeof f);
        if (parts[i].storage || parts[i].shuffle_buffer) {
            /* kept apart from an AUTO upload with the default buffer, whose
             * key stays what it was */
            int64_t sb[2] = {parts[i].storage, parts[i].shuffle_buffer};
            XXH3_128bits_update(st, sb, sizeof sb);
        }
        if (parts[i].format == RT_FMT_TFRECORD && parts[i].spec) {
            uint8_t sh[16];
            rt_example_spec_hash(parts[i].spec, sh);
            XXH3_128bits_update(st, sh, sizeof sh);
        }
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(key, c.digest, 16);
}

int rt_dataset_set_key(rt_dataset *ds, const uint8_t key[16])
{
    uint8_t r[16];
    if (rt_random_bytes(r, sizeof r) < 0)
        return RT_EIO;
    memcpy(ds->key, key, 16);
    strcpy(ds->id, "d-");
    for (int i = 0; i < 16; i++)
        snprintf(ds->id + 2 + 2 * i, 3, "%02x", r[i]);
    return 0;
}

void rt_dataset_set_owner(rt_dataset *ds, rt_principal *owner, uint64_t charged)
{
    ds->owner = owner;
    ds->charged = charged;
}

void rt_dataset_retain(rt_dataset *ds) { __atomic_add_fetch(&ds->refs, 1, __ATOMIC_RELAXED); }

static rt_data_holder data_holder;

void rt_data_set_holder(rt_data_holder h) { data_holder = h; }

int rt_data_hold(rt_dataset *ds, char *err, size_t errlen)
{
    /* in memory and without augmentation (which reads every row's image) */
    if (!data_holder || !ds->x || ds->stream || ds->img)
        return 0;
    rt_held *h = NULL;
    int rc = data_holder(ds->x, ds->n, rt_data_numel(ds->x_ndim, ds->x_dims), (int64_t)ds->bytes,
                         &h, err, errlen);
    if (rc < 0 || !h)
        return rc;
    /* rank 0's block is the holder's copy now */
    if (ds->x_owner && ds->x_free)
        ds->x_free(ds->x_owner);
    else
        free(ds->x_owner ? ds->x_owner : (void *)ds->x);
    ds->x_owner = NULL;
    ds->x_free = NULL;
    ds->x = NULL;
    ds->held = h;
    return 1;
}

void rt_dataset_release(rt_dataset *ds)
{
    if (!ds || __atomic_sub_fetch(&ds->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (ds->held)
        ds->held->release(ds->held);
    if (ds->x_owner && ds->x_free)
        ds->x_free(ds->x_owner);
    else
        free(ds->x_owner ? ds->x_owner : (void *)ds->x);
    free(ds->y);
    free(ds->sw);
    free(ds->y_conv);
    free(ds->img);
    rt_stream_destroy(ds->stream);
    rt_principal_unreserve(ds->owner, RT_Q_STORE_BYTES, ds->charged);
    pthread_mutex_destroy(&ds->mu);
    free(ds);
}

int rt_dataset_labels_as(rt_dataset *ds, rt_dtype dtype, const void **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!ds->y)
        return rt_errf(err, errlen, RT_EDATA, "dataset %s has no labels", ds->id);
    if (dtype == ds->y_dtype) {
        *out = ds->y;
        return 0;
    }
    if (dtype != RT_F32 && dtype != RT_I32)
        return rt_errf(err, errlen, RT_EDTYPE, "labels can be f32 or i32, not dtype %d",
                       (int)dtype);
    int rc = 0;
    pthread_mutex_lock(&ds->mu);
    if (ds->y_conv && ds->y_conv_dtype == dtype) {
        *out = ds->y_conv;
        goto done;
    }
    int64_t m = ds->n * rt_data_numel(ds->y_ndim, ds->y_dims);
    void *c = malloc((size_t)m * 4);
    if (!c) {
        rc = rt_errf(err, errlen, RT_ENOMEM, "out of memory converting labels");
        goto done;
    }
    if (dtype == RT_F32) {
        for (int64_t i = 0; i < m; i++)
            ((float *)c)[i] = (float)((const int32_t *)ds->y)[i];
    } else {
        for (int64_t i = 0; i < m; i++) {
            float f = ((const float *)ds->y)[i];
            if (f != floorf(f) || f < -2147483648.0f || f >= 2147483648.0f) {
                free(c);
                rc = rt_errf(err, errlen, RT_EDTYPE,
                             "the program needs integer labels but label %lld is %g", (long long)i,
                             (double)f);
                goto done;
            }
            ((int32_t *)c)[i] = (int32_t)f;
        }
    }
    free(ds->y_conv);
    ds->y_conv = c;
    ds->y_conv_dtype = dtype;
    /* Readers (the store's accounting, DatasetInfo) hold other locks or
     * none: the count is atomic. */
    __atomic_add_fetch(&ds->bytes, (uint64_t)m * 4, __ATOMIC_RELAXED);
    *out = c;
done:
    pthread_mutex_unlock(&ds->mu);
    return rc;
}

/* ------------------------------------------------------------------ store */
struct rt_data_store {
    pthread_mutex_t mu;
    rt_dataset **v;
    uint64_t *used;    /* LRU clock per entry */
    uint64_t *charged; /* per entry: its bytes as counted in bytes */
    size_t n, cap;
    uint64_t clock;
    uint64_t bytes, max_bytes; /* held / cap (0 = no cap) */
    uint64_t evicted;
    rt_shard_cache *shards;
};

rt_data_store *rt_data_store_create(uint64_t max_bytes)
{
    rt_data_store *s = calloc(1, sizeof *s);
    if (s) {
        pthread_mutex_init(&s->mu, NULL);
        s->max_bytes = max_bytes;
        s->shards = rt_shard_cache_create(max_bytes ? max_bytes / 4 : UINT64_C(1) << 30);
        if (!s->shards) {
            pthread_mutex_destroy(&s->mu);
            free(s);
            return NULL;
        }
    }
    return s;
}

void rt_data_store_destroy(rt_data_store *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        rt_dataset_release(s->v[i]);
    free(s->v);
    free(s->used);
    free(s->charged);
    rt_shard_cache_destroy(s->shards);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static rt_dataset *find_locked(rt_data_store *s, const rt_principal *who, const uint8_t key[16])
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i]->owner == who && memcmp(s->v[i]->key, key, 16) == 0) {
            s->used[i] = ++s->clock;
            return s->v[i];
        }
    return NULL;
}

/* A stored dataset grows when a program converts its labels
 * (rt_dataset_labels_as, under the dataset's own lock): bring the total up
 * to date before comparing it with the cap. */
static void recount_locked(rt_data_store *s)
{
    for (size_t i = 0; i < s->n; i++) {
        uint64_t b = rt_dataset_bytes(s->v[i]);
        s->bytes += b - s->charged[i];
        s->charged[i] = b;
    }
}

/* Drop who's least recently used dataset that nobody but the store holds
 * (a running job or an upload reply keeps its own reference, and
 * references are only taken under this mutex, so refs == 1 is stable
 * here). A dataset in use is never dropped; its id simply stops resolving
 * once it is evicted and released. Another owner's datasets are never
 * candidates: one tenant's uploads cannot push out another's. The dropped
 * dataset is returned for release outside the mutex (its release gives
 * back its owner's quota), or NULL. */
static rt_dataset *evict_one_locked(rt_data_store *s, const rt_principal *who)
{
    size_t victim = s->n;
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i]->owner == who && __atomic_load_n(&s->v[i]->refs, __ATOMIC_ACQUIRE) == 1 &&
            (victim == s->n || s->used[i] < s->used[victim]))
            victim = i;
    if (victim == s->n)
        return NULL;
    rt_dataset *d = s->v[victim];
    s->bytes -= s->charged[victim];
    s->v[victim] = s->v[s->n - 1];
    s->used[victim] = s->used[s->n - 1];
    s->charged[victim] = s->charged[s->n - 1];
    s->n--;
    s->evicted++;
    return d;
}

int rt_data_store_evict_one(rt_data_store *s, const rt_principal *who)
{
    pthread_mutex_lock(&s->mu);
    rt_dataset *d = evict_one_locked(s, who);
    pthread_mutex_unlock(&s->mu);
    rt_dataset_release(d);
    return d != NULL;
}

int rt_data_store_put(rt_data_store *s, rt_dataset *ds, rt_dataset **kept, int *dedup)
{
    *kept = NULL;
    *dedup = 0;
    pthread_mutex_lock(&s->mu);
    rt_dataset *old = find_locked(s, ds->owner, ds->key);
    if (old) {
        rt_dataset_retain(old);
        pthread_mutex_unlock(&s->mu);
        rt_dataset_release(ds);
        *kept = old;
        *dedup = 1;
        return 0;
    }
    /* Make room among the owner's own datasets first; if they cannot make
     * room, the upload is refused rather than anyone else's data dropped. */
    uint64_t need = rt_dataset_bytes(ds);
    recount_locked(s);
    while (s->max_bytes && (need > s->max_bytes || s->bytes > s->max_bytes - need)) {
        rt_dataset *d = evict_one_locked(s, ds->owner);
        if (!d) {
            pthread_mutex_unlock(&s->mu);
            rt_dataset_release(ds);
            return RT_ETOOBIG;
        }
        pthread_mutex_unlock(&s->mu);
        rt_dataset_release(d);
        pthread_mutex_lock(&s->mu);
        recount_locked(s);
    }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        rt_dataset **nv = realloc(s->v, nc * sizeof *nv);
        uint64_t *nu = nv ? realloc(s->used, nc * sizeof *nu) : NULL;
        uint64_t *nch = nu ? realloc(s->charged, nc * sizeof *nch) : NULL;
        if (nv)
            s->v = nv;
        if (nu)
            s->used = nu;
        if (nch)
            s->charged = nch;
        if (!nv || !nu || !nch) {
            /* Keep serving without storing: the caller still gets ds. */
            pthread_mutex_unlock(&s->mu);
            *kept = ds;
            *dedup = 0;
            return 0;
        }
        s->cap = nc;
    }
    s->v[s->n] = ds;
    s->used[s->n] = ++s->clock;
    s->charged[s->n] = need;
    s->bytes += need;
    s->n++;
    rt_dataset_retain(ds);
    pthread_mutex_unlock(&s->mu);
    *kept = ds;
    *dedup = 0;
    return 0;
}

rt_dataset *rt_data_store_find_key(rt_data_store *s, const rt_principal *who, const uint8_t key[16])
{
    pthread_mutex_lock(&s->mu);
    rt_dataset *d = find_locked(s, who, key);
    if (d)
        rt_dataset_retain(d);
    pthread_mutex_unlock(&s->mu);
    return d;
}

rt_dataset *rt_data_store_find_id(rt_data_store *s, const rt_principal *who, const char *id)
{
    rt_dataset *d = NULL;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i]->owner == who && strcmp(s->v[i]->id, id) == 0) {
            d = s->v[i];
            s->used[i] = ++s->clock;
            rt_dataset_retain(d);
            break;
        }
    pthread_mutex_unlock(&s->mu);
    return d;
}

int rt_data_store_lookup(rt_data_store *s, const rt_principal *who, const char *id,
                         const char *what, rt_dataset **out, char *err, size_t errlen)
{
    if (!id || !*id)
        return rt_errf(err, errlen, RT_EINVAL, "%s is empty", what);
    if (!(*out = rt_data_store_find_id(s, who, id)))
        return rt_errf(err, errlen, RT_ENOTFOUND, "unknown dataset '%.64s'", id);
    return 0;
}

uint64_t rt_dataset_bytes(const rt_dataset *ds)
{
    return __atomic_load_n(&ds->bytes, __ATOMIC_RELAXED);
}

uint64_t rt_data_store_bytes(rt_data_store *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t b = s->bytes;
    for (size_t i = 0; i < s->n; i++)
        b += rt_dataset_bytes(s->v[i]) - s->charged[i];
    pthread_mutex_unlock(&s->mu);
    return b;
}

rt_shard_cache *rt_data_store_shards(rt_data_store *s) { return s->shards; }

void rt_data_store_each(rt_data_store *s, void (*fn)(void *ud, const rt_dataset *ds), void *ud)
{
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n; i++)
        fn(ud, s->v[i]);
    pthread_mutex_unlock(&s->mu);
}

size_t rt_data_store_count(rt_data_store *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ------------------------------------------------------- held TFRecord parts */
/* The part whose values rt_data_place checks as they land: RAW f32
 * features, the layout an array upload sends. */
static int place_checks(const rt_data_part *p)
{
    return p->role == RT_ROLE_FEATURES && p->format == RT_FMT_RAW && p->dtype == RT_F32 && !p->held;
}

static uint32_t exp_all_ones(const uint8_t *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    return (u & 0x7f800000u) == 0x7f800000u;
}

/* Copy n bytes (whole floats) and OR "exponent all ones" over them, in
 * one pass: the check costs no second read of the block. The stores are
 * non-temporal (the whole buffer is far larger than the cache, and nothing
 * reads it before the upload ends): no read of the destination lines
 * first, and the cache keeps the block the hash just read; 1.6x the
 * speed of plain stores here into a large buffer. */
static uint32_t copy_check_f32(uint8_t *d, const uint8_t *s, size_t n)
{
    size_t i = 0;
    uint32_t bad = 0;
#ifdef __SSE2__
    for (; i + 4 <= n && (uintptr_t)(d + i) % 16; i += 4) { /* to a 16-byte boundary */
        memcpy(d + i, s + i, 4);
        bad |= exp_all_ones(s + i);
    }
    const __m128i m = _mm_set1_epi32(0x7f800000);
    __m128i acc = _mm_setzero_si128();
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i)),
                b = _mm_loadu_si128((const __m128i *)(s + i + 16)),
                c = _mm_loadu_si128((const __m128i *)(s + i + 32)),
                e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
        __m128i x = _mm_or_si128(_mm_cmpeq_epi32(_mm_and_si128(a, m), m),
                                 _mm_cmpeq_epi32(_mm_and_si128(b, m), m));
        __m128i y = _mm_or_si128(_mm_cmpeq_epi32(_mm_and_si128(c, m), m),
                                 _mm_cmpeq_epi32(_mm_and_si128(e, m), m));
        acc = _mm_or_si128(acc, _mm_or_si128(x, y));
    }
    _mm_sfence(); /* the stores are visible before anything after this */
    bad |= _mm_movemask_epi8(acc) != 0;
#endif
    for (; i + 4 <= n; i += 4) {
        memcpy(d + i, s + i, 4);
        bad |= exp_all_ones(s + i);
    }
    return bad;
}

/* Place take bytes at byte off of a RAW f32 part, checking each float
 * whose last byte lands here (a float cut by a chunk boundary is checked
 * once its last byte arrived). */
static uint32_t place_check(uint8_t *part, uint64_t off, const uint8_t *d, size_t take)
{
    uint32_t bad = 0;
    size_t head = (size_t)((4 - off % 4) % 4);
    if (head > take)
        head = take;
    if (head) {
        memcpy(part + off, d, head);
        if ((off + head) % 4 == 0)
            bad |= exp_all_ones(part + off + head - 4);
    }
    size_t body = (take - head) / 4 * 4;
    bad |= copy_check_f32(part + off + head, d + head, body);
    memcpy(part + off + head + body, d + head + body, take - head - body);
    return bad;
}

void rt_data_place_finite(rt_data_part *parts, int n_parts, const rt_data_cursor *cur)
{
    for (int i = 0; i < n_parts; i++)
        parts[i].finite_checked = place_checks(&parts[i]) && !cur->nonfinite;
}

void rt_data_place(const rt_data_part *parts, int n_parts, rt_data_cursor *cur, uint8_t *buf,
                   const uint8_t *d, size_t n)
{
    while (n) {
        while (cur->part < n_parts &&
               (parts[cur->part].held || cur->off == parts[cur->part].length)) {
            cur->base += parts[cur->part].length;
            cur->part++;
            cur->off = 0;
        }
        if (cur->part == n_parts)
            return; /* callers check the stream length against the parts */
        uint64_t room = parts[cur->part].length - cur->off;
        size_t take = n < room ? n : (size_t)room;
        if (place_checks(&parts[cur->part]))
            cur->nonfinite |= place_check(buf + cur->base, cur->off, d, take);
        else
            memcpy(buf + cur->base + cur->off, d, take);
        cur->off += take;
        d += take;
        n -= take;
    }
}

void rt_data_shard_key(const char *owner, const uint8_t hash[16], uint8_t key[16])
{
    /* the owner's name seeds the hash: keys differ per owner */
    XXH64_hash_t seed = owner ? XXH3_64bits(owner, strlen(owner)) : 0;
    XXH128_canonical_t h;
    XXH128_canonicalFromHash(&h, XXH3_128bits_withSeed(hash, 16, seed));
    memcpy(key, h.digest, 16);
}

int rt_data_fill_held(rt_shard_cache *sc, const char *owner, const rt_data_part *parts, int n_parts,
                      uint8_t *buf)
{
    uint64_t off = 0;
    for (int i = 0; i < n_parts; i++) {
        uint8_t key[16];
        if (parts[i].held)
            rt_data_shard_key(owner, parts[i].shard_hash, key);
        if (parts[i].held && rt_shard_cache_copy(sc, key, buf + off, parts[i].length) < 0)
            return i;
        off += parts[i].length;
    }
    return -1;
}

void rt_data_keep_shards(rt_shard_cache *sc, const char *owner, const rt_data_part *parts,
                         int n_parts, const uint8_t *buf)
{
    uint64_t off = 0;
    for (int i = 0; i < n_parts; i++) {
        if (parts[i].format == RT_FMT_TFRECORD && !parts[i].held) {
            /* the daemon's own hash: a client's shard_hash is not trusted */
            XXH128_canonical_t h;
            XXH128_canonicalFromHash(&h, XXH3_128bits(buf + off, parts[i].length));
            uint8_t key[16];
            rt_data_shard_key(owner, h.digest, key);
            rt_shard_cache_put(sc, key, buf + off, parts[i].length);
        }
        off += parts[i].length;
    }
}
