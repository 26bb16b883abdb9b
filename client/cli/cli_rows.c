/* cli_rows.c - `--data`/`--val` files as rows for a fit over one upload
 * (rt_client_fit_rows): a .npy or IDX pair (features and labels, rows of
 * fixed size after a header) or a numeric CSV with a label column (one
 * line a row), read here whole. A chunk is a file of the same format
 * holding the asked-for rows in the asked-for order: the header written
 * again for its row count, then the rows' bytes as they are in the file,
 * so the daemon decodes each row exactly as in one upload of the file. */
#include "cli.h"

#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rtrain/rtrain_data.h"

typedef struct rows_file {
    char *buf; /* the file */
    size_t len;
    rt_client_format fmt;
    size_t hdr;   /* NPY, IDX: bytes before the rows */
    uint64_t row; /* NPY, IDX: bytes per row */
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
    rows_file f[2];
    int n_files;
    uint64_t n;
    int label_column, csv_header, normalize, storage;
    uint64_t shuffle_buffer;
};

/* NPY 1.0/2.0: little-endian f4, i4, i8 or u1, C order */
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
    static const char *const ok[] = {"<f4", "<i4", "<i8", "|u1"};
    static const int sizes[] = {4, 4, 8, 1};
    int size = 0;
    for (int i = 0; i < 4; i++)
        if (!strcmp(f->descr, ok[i]))
            size = sizes[i];
    fo += strlen("'fortran_order':");
    if (!size || strncmp(fo + strspn(fo, " "), "False", 5)) {
        fprintf(stderr, "rtrain: %s: not a C-order .npy of float32, int32, int64 or uint8\n", path);
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
    if (f->fmt == RT_FORMAT_IDX) {
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
    rt_client_upload_part p[2];
    memset(p, 0, sizeof p);
    for (int i = 0; i < r->n_files; i++) {
        size_t len;
        if (chunk_of(&r->f[i], rows, k, &len) < 0) {
            fprintf(stderr, "rtrain: out of memory gathering a chunk of %llu rows\n",
                    (unsigned long long)k);
            return RT_ENOMEM;
        }
        p[i].format = r->f[i].fmt;
        p[i].data = r->f[i].out;
        p[i].nbytes = len;
        p[i].role = r->f[i].fmt == RT_FORMAT_CSV ? RT_ROLE_BOTH
                    : i == 0                     ? RT_ROLE_FEATURES
                                                 : RT_ROLE_LABELS;
        p[i].label_column = r->label_column;
        p[i].csv_header = r->csv_header;
        p[i].normalize = i == 0 && r->normalize;
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
    for (int i = 0; i < 2; i++) {
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

uint64_t cli_rows_bytes(const cli_opts *o, const char *data, const char *labels)
{
    const cli_data_kind k = cli_data_kind_of(data);
    const size_t n = strlen(data);
    const int gz = (n > 3 && !strcmp(data + n - 3, ".gz")) ||
                   (n > 5 && !strcmp(data + n - 5, ".zlib")) || (labels && strstr(labels, ".gz"));
    if (gz || (k == CLI_DATA_CSV && (o->label_first >= 0 || o->csv_features)) ||
        ((k == CLI_DATA_NPY || k == CLI_DATA_IDX) && !labels))
        return 0;
    if (k == CLI_DATA_CSV || k == CLI_DATA_NPY || k == CLI_DATA_IDX)
        return file_bytes(data) + file_bytes(labels);
    if (k == CLI_DATA_IMAGES)
        return folder_bytes(data, 1);
    if (k != CLI_DATA_TFRECORD)
        return 0;
    glob_t g;
    uint64_t b = 0;
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

int cli_rows_open(rt_client *c, const cli_opts *o, const char *data, const char *labels,
                  cli_rows **out, rt_client_rows *rr)
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
    const char *paths[2] = {data, labels};
    r->n_files = kind == CLI_DATA_CSV ? 1 : 2;
    r->label_column = (int)o->label_column;
    r->csv_header = o->csv_header;
    r->normalize = !o->no_normalize;
    r->storage = !o->storage || !strcmp(o->storage, "auto") ? 0
                 : !strcmp(o->storage, "memory")            ? 1
                                                            : 2;
    r->shuffle_buffer = (uint64_t)o->shuffle_buffer;
    memset(rr, 0, sizeof *rr);
    int rc = 0;
    uint64_t row = 0, fixed = 0;
    for (int i = 0; i < r->n_files && rc == 0; i++) {
        rows_file *f = &r->f[i];
        if (!(f->buf = cli_read_file(paths[i], &f->len)))
            rc = RT_ENOTFOUND;
        else if (kind == CLI_DATA_CSV) {
            f->fmt = RT_FORMAT_CSV;
            uint64_t ml = 0;
            rc = csv_index(f, o->csv_header, &ml);
            if (rc == RT_EDATA)
                fprintf(stderr, "rtrain: %s: no data rows\n", paths[i]);
            row += ml;
        } else {
            f->fmt = kind == CLI_DATA_NPY ? RT_FORMAT_NPY : RT_FORMAT_IDX;
            rc = kind == CLI_DATA_NPY ? npy_parse(f, paths[i]) : idx_parse(f);
            if (rc == -1 || (rc == 0 && f->len - f->hdr != (uint64_t)f->dims[0] * f->row)) {
                fprintf(stderr, "rtrain: %s: not a %s file whose size its header gives\n", paths[i],
                        kind == CLI_DATA_NPY ? ".npy" : "IDX");
                rc = RT_EDATA;
            }
            row += f->row;
        }
        fixed += kind == CLI_DATA_CSV ? f->hdr : 256;
        rr->bytes += f->len;
    }
    if (rc == 0 && r->n_files == 2 && r->f[0].dims[0] != r->f[1].dims[0]) {
        fprintf(stderr, "rtrain: %s has %lld rows but %s %lld\n", data, (long long)r->f[0].dims[0],
                labels, (long long)r->f[1].dims[0]);
        rc = RT_ESHAPE;
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
