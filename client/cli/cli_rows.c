/* cli_rows.c - `--data`/`--val` files as rows for the calls over more
 * than one upload holds (rt_client_fit_rows, rt_client_evaluate_rows,
 * rt_client_predict_rows): a .npy or IDX pair (features and labels, rows
 * of fixed size after a header), a numeric CSV with a label column (one
 * line a row), a CSV read as arrays (--label-columns, or predict's
 * features-only rows), TFRecord shards or an image folder, each with an
 * optional .npy of sample weights (--sample-weights), read here whole and
 * inflated when compressed (.gz, .zlib). A chunk holds the asked-for rows
 * in the asked-for order in the format of its file: the header written
 * again for its row count, then the rows' bytes as they are in the
 * (inflated) file, or the arrays' rows as RAW parts, so the daemon decodes
 * each row exactly as in one upload of the file; the weights' rows go
 * with their rows. */
#include "cli.h"

#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rtrain/rtrain_data.h"

typedef struct rows_file {
    char *buf; /* the file (inflated), or RAW: the arrays' f32 rows */
    size_t len;
    rt_client_format fmt; /* CSV, NPY, IDX or RAW */
    rt_client_role role;
    size_t hdr;   /* NPY, IDX: bytes before the rows; CSV: the header line */
    uint64_t row; /* NPY, IDX, RAW: bytes per row */
    char descr[16];
    int ndim;
    int64_t dims[RT_CLIENT_MAX_DIMS];
    uint64_t *off; /* CSV: each row's line (with its \n) */
    uint32_t *llen;
    char *out; /* the chunk */
    size_t cap;
} rows_file;

struct cli_rows {
    rt_client_record_rows *rec; /* TFRecord shards, an image folder */
    rt_client_example_spec *spec;
    rows_file f[4]; /* the parts: features (and labels), sample weights */
    int n_files;
    uint64_t n;
    int label_column, csv_header, normalize, storage;
    uint64_t shuffle_buffer;
};

/* NPY 1.0/2.0: little-endian f4, f8, i4, i8 or u1, C order */
static int npy_parse(rows_file *f, const char *path)
{
    const unsigned char *u = (const unsigned char *)f->buf;
    if (f->len < 12 || memcmp(f->buf, "\x93NUMPY", 6) || (u[6] != 1 && u[6] != 2))
        return -1;
    f->hdr = u[6] == 1 ? 10 + (size_t)(u[8] | u[9] << 8)
                       : 12 + (size_t)(u[8] | u[9] << 8 | u[10] << 16 | (size_t)u[11] << 24);
    if (f->hdr > f->len)
        return -1;
    char h[1024];
    const size_t at = u[6] == 1 ? 10 : 12;
    size_t hl = f->hdr - at < sizeof h - 1 ? f->hdr - at : sizeof h - 1;
    memcpy(h, f->buf + at, hl);
    h[hl] = 0;
    const char *d = strstr(h, "'descr':"), *fo = strstr(h, "'fortran_order':"),
               *sh = strstr(h, "'shape':");
    if (!d || !fo || !sh || !(d = strchr(d + 8, '\'')) || !(sh = strchr(sh, '(')))
        return -1;
    const char *de = strchr(d + 1, '\'');
    if (!de || de - d - 1 >= (long)sizeof f->descr)
        return -1;
    memcpy(f->descr, d + 1, (size_t)(de - d - 1));
    f->descr[de - d - 1] = 0;
    static const char *const ok[] = {"<f4", "<f8", "<i4", "<i8", "|u1"};
    static const int sizes[] = {4, 8, 4, 8, 1};
    int size = 0;
    for (int i = 0; i < 5; i++)
        if (!strcmp(f->descr, ok[i]))
            size = sizes[i];
    fo += strlen("'fortran_order':");
    if (!size || strncmp(fo + strspn(fo, " "), "False", 5)) {
        fprintf(stderr,
                "rtrain: %s: not a C-order .npy of float32, float64, int32, int64 or uint8\n",
                path);
        return RT_EDATA;
    }
    f->ndim = 0;
    for (const char *s = sh + 1; *s && *s != ')' && f->ndim < RT_CLIENT_MAX_DIMS;) {
        char *e;
        long long v = strtoll(s, &e, 10);
        if (e == s)
            break;
        f->dims[f->ndim++] = v;
        s = e + strspn(e, ", L");
    }
    if (f->ndim < 1 || f->dims[0] < 1)
        return -1;
    f->row = (uint64_t)size;
    for (int i = 1; i < f->ndim; i++)
        f->row *= (uint64_t)f->dims[i];
    return 0;
}

/* IDX: 0 0 type ndim, big-endian u32 dims (uncompressed) */
static int idx_parse(rows_file *f)
{
    const unsigned char *u = (const unsigned char *)f->buf;
    if (f->len < 8 || u[0] || u[1] || u[3] < 1 || u[3] > RT_CLIENT_MAX_DIMS)
        return -1;
    static const struct {
        unsigned char t;
        int size;
    } types[] = {{0x08, 1}, {0x09, 1}, {0x0B, 2}, {0x0C, 4}, {0x0D, 4}, {0x0E, 8}};
    int size = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].t == u[2])
            size = types[i].size;
    f->ndim = u[3];
    f->hdr = 4 + 4 * (size_t)f->ndim;
    if (!size || f->len < f->hdr)
        return -1;
    f->row = (uint64_t)size;
    for (int i = 0; i < f->ndim; i++) {
        const unsigned char *p = u + 4 + 4 * i;
        f->dims[i] =
            (int64_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
        if (i)
            f->row *= (uint64_t)f->dims[i];
    }
    return f->dims[0] > 0 ? 0 : -1;
}

/* CSV: each line that is not blank (nor the header) is a row; the daemon
 * skips the same ones (rt_data.c csv_walk) */
static int csv_index(rows_file *f, int header, uint64_t *max_line)
{
    size_t cap = 1024, n = 0;
    f->off = malloc(cap * sizeof *f->off);
    f->llen = malloc(cap * sizeof *f->llen);
    if (!f->off || !f->llen)
        return RT_ENOMEM;
    *max_line = 0;
    int line = 0;
    for (size_t c = 0; c < f->len;) {
        const char *eol = memchr(f->buf + c, '\n', f->len - c);
        const size_t e = eol ? (size_t)(eol - f->buf) + 1 : f->len;
        int blank = 1;
        for (size_t q = c; q < e && blank; q++)
            blank = f->buf[q] == ' ' || f->buf[q] == '\t' || f->buf[q] == '\r' ||
                    f->buf[q] == '\n' || f->buf[q] == '\v' || f->buf[q] == '\f';
        if (line++ == 0 && header) {
            f->hdr = e;
        } else if (!blank) {
            if (e - c > UINT32_MAX - 1)
                return RT_EDATA;
            if (n == cap) {
                cap *= 2;
                uint64_t *o = realloc(f->off, cap * sizeof *o);
                if (o)
                    f->off = o;
                uint32_t *l = realloc(f->llen, cap * sizeof *l);
                if (l)
                    f->llen = l;
                if (!o || !l)
                    return RT_ENOMEM;
            }
            f->off[n] = c;
            f->llen[n] = (uint32_t)(e - c);
            if (e - c + 1 > *max_line)
                *max_line = e - c + 1; /* the last line gets a \n */
            n++;
        }
        c = e;
    }
    f->dims[0] = (int64_t)n;
    return n ? 0 : RT_EDATA;
}

char *cli_read_data(const char *path, size_t *len)
{
    char err[512];
    void *d;
    if (rt_client_read_data_file(path, &d, len, err, sizeof err) < 0) {
        fprintf(stderr, "rtrain: %s\n", err);
        return NULL;
    }
    char *t = realloc(d, *len + 1);
    if (!t) {
        free(d);
        fprintf(stderr, "rtrain: out of memory reading %s\n", path);
        return NULL;
    }
    t[*len] = 0;
    return t;
}

void cli_csv_free(cli_csv *a)
{
    free(a->x);
    free(a->y);
    memset(a, 0, sizeof *a);
}

int cli_csv_read(const char *path, int header, long first, long last, cli_csv *out)
{
    memset(out, 0, sizeof *out);
    size_t len;
    char *text = cli_read_data(path, &len);
    if (!text)
        return RT_ENOTFOUND;
    size_t cx = 1024, cy = 1024, nx = 0, ny = 0;
    float *x = malloc(cx * sizeof *x), *y = malloc(cy * sizeof *y);
    long cols = -1, rows = 0;
    int rc = x && y ? 0 : RT_ENOMEM;
    char *save = NULL;
    int line_no = 0;
    for (char *line = strtok_r(text, "\n", &save); line && rc == 0;
         line = strtok_r(NULL, "\n", &save)) {
        if (line_no++ == 0 && header)
            continue;
        if (strspn(line, " \t\r") == strlen(line))
            continue;
        long col = 0;
        for (char *f = line;; col++) {
            char *end;
            float v = strtof(f, &end);
            if (end == f) {
                rc = RT_EINVAL;
                break;
            }
            int is_label = first >= 0 && col >= first && col <= last;
            float **dst = is_label ? &y : &x;
            size_t *n = is_label ? &ny : &nx, *cap = is_label ? &cy : &cx;
            if (*n == *cap) {
                float *grown = realloc(*dst, 2 * *cap * sizeof **dst);
                if (!grown) {
                    rc = RT_ENOMEM;
                    break;
                }
                *dst = grown;
                *cap *= 2;
            }
            (*dst)[(*n)++] = v;
            while (*end == ' ' || *end == '\t' || *end == '\r')
                end++;
            if (*end != ',')
                break;
            f = end + 1;
        }
        if (rc)
            break;
        if (cols < 0)
            cols = col + 1;
        if (col + 1 != cols || (first >= 0 && last >= cols)) {
            rc = RT_EINVAL;
            break;
        }
        rows++;
    }
    if (rc == 0 && (rows == 0 || (first >= 0 && last - first + 1 >= cols)))
        rc = RT_EINVAL;
    free(text);
    if (rc == RT_EINVAL)
        fprintf(stderr, "rtrain: %s: not a numeric CSV with %s\n", path,
                first >= 0 ? "those label columns" : "rows of equal length");
    else if (rc == RT_ENOMEM)
        fprintf(stderr, "rtrain: out of memory reading %s\n", path);
    if (rc < 0) {
        free(x);
        free(y);
        return rc;
    }
    const long k = first >= 0 ? last - first + 1 : 0;
    *out = (cli_csv){.x = x, .y = y, .rows = rows, .nx = cols - k, .ny = k};
    return 0;
}

static int room(rows_file *f, size_t need)
{
    if (need <= f->cap)
        return 0;
    char *b = realloc(f->out, need);
    if (!b)
        return RT_ENOMEM;
    f->out = b;
    f->cap = need;
    return 0;
}

/* f's rows[0..k) as a file of its format in f->out; its length */
static int chunk_of(rows_file *f, const uint64_t *rows, uint64_t k, size_t *len)
{
    size_t at = 0;
    if (f->fmt == RT_FORMAT_CSV) {
        size_t need = f->hdr;
        for (uint64_t i = 0; i < k; i++)
            need += f->llen[rows[i]] + 1;
        if (room(f, need) < 0)
            return RT_ENOMEM;
        memcpy(f->out, f->buf, f->hdr);
        at = f->hdr;
        for (uint64_t i = 0; i < k; i++) {
            memcpy(f->out + at, f->buf + f->off[rows[i]], f->llen[rows[i]]);
            at += f->llen[rows[i]];
            if (f->out[at - 1] != '\n')
                f->out[at++] = '\n';
        }
        *len = at;
        return 0;
    }
    if (room(f, 256 + k * f->row) < 0)
        return RT_ENOMEM;
    if (f->fmt == RT_FORMAT_RAW) {
        at = 0;
    } else if (f->fmt == RT_FORMAT_IDX) {
        memcpy(f->out, f->buf, f->hdr);
        unsigned char *p = (unsigned char *)f->out + 4;
        p[0] = (unsigned char)(k >> 24);
        p[1] = (unsigned char)(k >> 16);
        p[2] = (unsigned char)(k >> 8);
        p[3] = (unsigned char)k;
        at = f->hdr;
    } else { /* NPY 1.0, the header padded to 64 bytes as numpy writes it */
        char shape[256];
        int sl = snprintf(shape, sizeof shape, "(%llu", (unsigned long long)k);
        for (int i = 1; i < f->ndim; i++)
            sl += snprintf(shape + sl, sizeof shape - (size_t)sl, ", %lld", (long long)f->dims[i]);
        snprintf(shape + sl, sizeof shape - (size_t)sl, "%s", f->ndim == 1 ? ",)" : ")");
        char dict[320];
        int dl =
            snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     f->descr, shape);
        size_t hl = (size_t)dl + 1;
        hl += (64 - (10 + hl) % 64) % 64;
        memcpy(f->out, "\x93NUMPY\x01\x00", 8);
        f->out[8] = (char)(hl & 0xff);
        f->out[9] = (char)(hl >> 8);
        memcpy(f->out + 10, dict, (size_t)dl);
        memset(f->out + 10 + dl, ' ', hl - (size_t)dl - 1);
        f->out[10 + hl - 1] = '\n';
        at = 10 + hl;
    }
    for (uint64_t i = 0; i < k; i++)
        memcpy(f->out + at + i * f->row, f->buf + f->hdr + rows[i] * f->row, f->row);
    *len = at + k * f->row;
    return 0;
}

static int rows_upload(rt_client *c, const char *session, const char *name, const uint64_t *rows,
                       uint64_t k, rt_client_dataset *out, void *user)
{
    cli_rows *r = user;
    rt_client_upload_part p[4];
    memset(p, 0, sizeof p);
    for (int i = 0; i < r->n_files; i++) {
        rows_file *f = &r->f[i];
        size_t len;
        if (chunk_of(f, rows, k, &len) < 0) {
            fprintf(stderr, "rtrain: out of memory gathering a chunk of %llu rows\n",
                    (unsigned long long)k);
            return RT_ENOMEM;
        }
        p[i].format = f->fmt;
        p[i].data = f->out;
        p[i].nbytes = len;
        p[i].role = f->role;
        p[i].label_column = r->label_column;
        p[i].csv_header = r->csv_header;
        /* as one upload: IDX features normalised, .npy ones not */
        p[i].normalize = f->fmt == RT_FORMAT_IDX && f->role == RT_ROLE_FEATURES && r->normalize;
        if (f->fmt == RT_FORMAT_RAW) {
            p[i].dtype = RT_DTYPE_F32;
            p[i].ndim = f->ndim;
            memcpy(p[i].shape, f->dims, sizeof p[i].shape);
            p[i].shape[0] = (int64_t)k;
        }
    }
    rt_client_next_upload_storage(c, r->storage, r->shuffle_buffer);
    return rt_client_upload_parts(c, session, name, p, (size_t)r->n_files, out);
}

void cli_rows_free(cli_rows *r)
{
    if (!r)
        return;
    rt_client_record_rows_free(r->rec);
    rt_client_example_spec_free(r->spec);
    for (int i = 0; i < 4; i++) {
        free(r->f[i].buf);
        free(r->f[i].off);
        free(r->f[i].llen);
        free(r->f[i].out);
    }
    free(r);
}

static uint64_t file_bytes(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
}

/* the files of an image folder's class folders (what they add framed is
 * small beside them) */
static uint64_t folder_bytes(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint64_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        n += depth ? folder_bytes(path, 0) : file_bytes(path);
    }
    closedir(d);
    return n;
}

static int compressed(const char *path)
{
    const size_t n = path ? strlen(path) : 0;
    return (n > 3 && !strcmp(path + n - 3, ".gz")) || (n > 5 && !strcmp(path + n - 5, ".zlib"));
}

/* a CSV read as arrays (--label-columns, predict's features-only rows) */
static int csv_as_arrays(const cli_opts *o) { return o->label_first >= 0 || o->csv_features; }

/* The f32 bytes of a CSV's values (its arrays' one upload), or 0 */
static uint64_t csv_array_bytes(const char *path, int header)
{
    size_t len;
    char *t = cli_read_data(path, &len);
    if (!t)
        return 0;
    uint64_t rows = 0, cols = 0;
    int line = 0;
    for (size_t c = 0; c < len;) {
        const char *eol = memchr(t + c, '\n', len - c);
        const size_t e = eol ? (size_t)(eol - t) + 1 : len;
        int blank = 1;
        uint64_t commas = 0;
        for (size_t q = c; q < e; q++) {
            blank &= t[q] == ' ' || t[q] == '\t' || t[q] == '\r' || t[q] == '\n';
            commas += t[q] == ',';
        }
        if (!(line++ == 0 && header) && !blank) {
            if (!rows)
                cols = commas + 1;
            rows++;
        }
        c = e;
    }
    free(t);
    return 4 * rows * cols;
}

/* a .zlib name: the daemon inflates a gzip'ed IDX only */
static int zlib_named(const char *path)
{
    const size_t n = path ? strlen(path) : 0;
    return n > 5 && !strcmp(path + n - 5, ".zlib");
}

int cli_rows_needed(const char *data, const char *labels, const char *weights)
{
    const cli_data_kind k = cli_data_kind_of(data);
    if (k == CLI_DATA_CSV || k == CLI_DATA_NPY)
        return compressed(data) || compressed(labels) || compressed(weights);
    if (k == CLI_DATA_IDX)
        return zlib_named(data) || zlib_named(labels) || compressed(weights);
    return 0;
}

/* a file's bytes in the upload: inflated here when only cli_rows reads
 * it (a compressed CSV or .npy, a zlib'ed IDX), else as it is */
static uint64_t sent_bytes(const char *path, int inflated)
{
    if (!path || !inflated || !compressed(path))
        return file_bytes(path);
    size_t len = 0;
    char *t = cli_read_data(path, &len);
    if (!t)
        return 0;
    free(t);
    return (uint64_t)len;
}

uint64_t cli_rows_bytes(const cli_opts *o, const char *data, const char *labels,
                        const char *weights)
{
    const cli_data_kind k = cli_data_kind_of(data);
    const int here = cli_rows_needed(data, labels, weights);
    uint64_t b = sent_bytes(weights, here);
    if (k == CLI_DATA_CSV && csv_as_arrays(o))
        return b + csv_array_bytes(data, o->csv_header);
    if (k == CLI_DATA_CSV || k == CLI_DATA_NPY || k == CLI_DATA_IDX)
        return b + sent_bytes(data, here) + sent_bytes(labels, here);
    if (k == CLI_DATA_IMAGES)
        return b + folder_bytes(data, 1);
    if (k != CLI_DATA_TFRECORD)
        return 0;
    glob_t g;
    if (glob(data, 0, NULL, &g) != 0)
        return 0;
    for (size_t i = 0; i < g.gl_pathc; i++)
        b += file_bytes(g.gl_pathv[i]);
    globfree(&g);
    return b;
}

/* TFRecord shards or an image folder: librtrain's records */
static int records_open(rt_client *c, const cli_opts *o, const char *data, cli_rows *r,
                        rt_client_rows *rr)
{
    rt_client_image_opts im;
    char err[256];
    if (cli_image_opts(o, &im, err, sizeof err) < 0) {
        fprintf(stderr, "rtrain: %s\n", err);
        return RT_EINVAL;
    }
    if (data == o->val) { /* validation sees plain images (cli_upload_tf) */
        im.crop_pad = im.flip = 0;
        im.brightness = im.contrast = 0;
    }
    const int skip = o->on_bad_record && !strcmp(o->on_bad_record, "skip");
    im.storage = !o->storage || !strcmp(o->storage, "auto") ? RT_STORAGE_AUTO
                 : !strcmp(o->storage, "memory")            ? RT_STORAGE_MEMORY
                                                            : RT_STORAGE_STREAM;
    im.shuffle_buffer = (uint64_t)o->shuffle_buffer;
    if (cli_data_kind_of(data) == CLI_DATA_IMAGES)
        return rt_client_image_folder_rows(c, data, &im, skip, &r->rec, rr);
    if (rt_client_example_spec_parse(o->features, o->label_key, &r->spec, err, sizeof err) < 0) {
        fprintf(stderr, "rtrain: --features: %s\n", err);
        return RT_EINVAL;
    }
    rt_client_example_spec_set_image(r->spec, &im);
    rt_client_example_spec_set_skip_bad(r->spec, skip);
    rt_client_example_spec_set_storage(r->spec, im.storage, im.shuffle_buffer);
    return rt_client_tfrecord_rows(c, data, r->spec, &r->rec, rr);
}

/* f: a file of fixed-size rows (.npy or IDX, inflated), or the CSV's
 * lines; 0 or RT_E* after saying why */
static int file_open(rows_file *f, cli_data_kind kind, const char *path, int header)
{
    if (!(f->buf = cli_read_data(path, &f->len)))
        return RT_ENOTFOUND;
    if (kind == CLI_DATA_CSV) {
        f->fmt = RT_FORMAT_CSV;
        uint64_t ml = 0;
        int rc = csv_index(f, header, &ml);
        if (rc == RT_EDATA)
            fprintf(stderr, "rtrain: %s: no data rows\n", path);
        f->row = ml;
        return rc;
    }
    f->fmt = kind == CLI_DATA_NPY ? RT_FORMAT_NPY : RT_FORMAT_IDX;
    int rc = kind == CLI_DATA_NPY ? npy_parse(f, path) : idx_parse(f);
    if (rc == -1 || (rc == 0 && f->len - f->hdr != (uint64_t)f->dims[0] * f->row)) {
        fprintf(stderr, "rtrain: %s: not a %s file whose size its header gives\n", path,
                kind == CLI_DATA_NPY ? ".npy" : "IDX");
        rc = RT_EDATA;
    }
    return rc;
}

/* f: rows x cols f32 values (taken) as a RAW part */
static void raw_part(rows_file *f, float *v, int64_t rows, int64_t cols, rt_client_role role)
{
    f->buf = (char *)v;
    f->fmt = RT_FORMAT_RAW;
    f->role = role;
    f->ndim = 2;
    f->dims[0] = rows;
    f->dims[1] = cols;
    f->row = 4 * (uint64_t)cols;
    f->len = (size_t)rows * f->row;
}

int cli_rows_open(rt_client *c, const cli_opts *o, const char *data, const char *labels,
                  const char *weights, cli_rows **out, rt_client_rows *rr)
{
    *out = NULL;
    cli_rows *r = calloc(1, sizeof *r);
    if (!r)
        return RT_ENOMEM;
    const cli_data_kind kind = cli_data_kind_of(data);
    if (kind == CLI_DATA_TFRECORD || kind == CLI_DATA_IMAGES) {
        int rc = records_open(c, o, data, r, rr);
        if (rc < 0)
            cli_rows_free(r);
        else
            *out = r;
        return rc;
    }
    r->label_column = (int)o->label_column;
    r->csv_header = o->csv_header;
    r->normalize = !o->no_normalize;
    r->storage = !o->storage || !strcmp(o->storage, "auto") ? 0
                 : !strcmp(o->storage, "memory")            ? 1
                                                            : 2;
    r->shuffle_buffer = (uint64_t)o->shuffle_buffer;
    memset(rr, 0, sizeof *rr);
    int rc = 0;
    const char *paths[3] = {data, data, weights};
    if (kind == CLI_DATA_CSV && csv_as_arrays(o)) {
        cli_csv a;
        rc = cli_csv_read(data, o->csv_header, o->csv_features ? -1 : o->label_first, o->label_last,
                          &a);
        if (rc == 0) {
            raw_part(&r->f[r->n_files++], a.x, a.rows, a.nx, RT_ROLE_FEATURES);
            if (a.ny)
                raw_part(&r->f[r->n_files++], a.y, a.rows, a.ny, RT_ROLE_LABELS);
            else
                free(a.y);
        }
    } else {
        const int two = kind != CLI_DATA_CSV && labels;
        paths[1] = labels;
        for (int i = 0; i < 1 + two && rc == 0; i++) {
            rows_file *f = &r->f[r->n_files++];
            f->role = kind == CLI_DATA_CSV ? RT_ROLE_BOTH : i ? RT_ROLE_LABELS : RT_ROLE_FEATURES;
            rc = file_open(f, kind, paths[i], o->csv_header);
        }
    }
    if (rc == 0 && weights) {
        rows_file *f = &r->f[r->n_files++];
        f->role = RT_ROLE_SAMPLE_WEIGHTS;
        rc = file_open(f, CLI_DATA_NPY, weights, 0);
    }
    uint64_t row = 0, fixed = 0;
    for (int i = 0; i < r->n_files && rc == 0; i++) {
        const rows_file *f = &r->f[i];
        if (f->dims[0] != r->f[0].dims[0]) {
            fprintf(stderr, "rtrain: %s has %lld rows but %s %lld\n", data,
                    (long long)r->f[0].dims[0], paths[i], (long long)f->dims[0]);
            rc = RT_ESHAPE;
        }
        row += f->row;
        fixed += f->fmt == RT_FORMAT_CSV ? f->hdr : 256;
        rr->bytes += f->len;
    }
    if (rc < 0) {
        cli_rows_free(r);
        return rc;
    }
    r->n = (uint64_t)r->f[0].dims[0];
    rr->n = r->n;
    rr->row_bytes = row;
    rr->fixed_bytes = fixed;
    rr->upload = rows_upload;
    rr->user = r;
    *out = r;
    return 0;
}

int cli_rows_upload(rt_client *c, const char *sid, const char *name, const cli_opts *o,
                    const char *data, const char *labels, const char *weights,
                    rt_client_dataset *out)
{
    cli_rows *r;
    rt_client_rows rr;
    int rc = cli_rows_open(c, o, data, labels, weights, &r, &rr);
    if (rc < 0)
        return rc;
    uint64_t *order = malloc(rr.n * sizeof *order);
    if (!order) {
        cli_rows_free(r);
        return RT_ENOMEM;
    }
    for (uint64_t i = 0; i < rr.n; i++)
        order[i] = i;
    rc = rr.upload(c, sid, name, order, rr.n, out, rr.user);
    free(order);
    cli_rows_free(r);
    return rc;
}
