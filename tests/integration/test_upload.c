/* test_upload.c - UploadDataset and FindDataset against a real rtraind:
 * every format, dedup by content hash, and the bad-upload list (bad
 * checksum, truncated, missing bytes, NaN/Inf, fortran order, cancel
 * mid-stream, over the size limit, offset gaps), and resuming a broken
 * upload (only the rest is sent; the content hash still checks all), and
 * the content hash sent later in the stream (hash_later) with FindDataset's
 * probe by sample hash. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>
#include <zlib.h>

#include "itest.h"

static int ping_ok(itest_conn *c)
{
    Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
    itest_res r;
    int st = itest_unary(c, "Ping", &q.base, NULL, NULL, &r);
    itest_res_free(&r);
    return st == 0;
}

static Rtrain__V1__DataPart part(Rtrain__V1__DataRole role, Rtrain__V1__DataFormat fmt,
                                 uint64_t len)
{
    Rtrain__V1__DataPart p = RTRAIN__V1__DATA_PART__INIT;
    p.role = role;
    p.format = fmt;
    p.length = len;
    return p;
}

static Rtrain__V1__UploadResponse *upload_resp(itest_res *r)
{
    return r->status == 0 ? rtrain__v1__upload_response__unpack(NULL, r->len, r->data) : NULL;
}

static void test_csv_and_dedup(itest_conn *c, const char *sid)
{
    char path[512];
    snprintf(path, sizeof path, "%s/iris.csv", itest_data_dir());
    size_t len;
    uint8_t *csv = itest_read_file(path, &len);
    CHECK(csv != NULL, "cannot read %s", path);
    if (!csv)
        return;
    Rtrain__V1__DataPart p = part(RTRAIN__V1__DATA_ROLE__ROLE_BOTH, RTRAIN__V1__DATA_FORMAT__FORMAT_CSV, len);
    p.label_column = -1;
    p.csv_header = 1;
    Rtrain__V1__DataPart *pp[1] = {&p};
    char id1[40], id2[40];
    itest_res r;
    itest_upload(c, sid, pp, 1, csv, len, 1000, id1, &r);
    CHECK(r.status == 0, "iris csv upload: %d %s", r.status, r.details);
    Rtrain__V1__UploadResponse *u = upload_resp(&r);
    if (u) {
        CHECK(u->dataset->samples == 150, "samples %llu", (unsigned long long)u->dataset->samples);
        CHECK(u->dataset->n_x_shape == 1 && u->dataset->x_shape[0] == 4, "x shape");
        CHECK(u->dataset->y_dtype == RTRAIN__V1__DTYPE__F32 && u->dataset->n_y_shape == 0,
              "csv labels f32 scalar");
        CHECK(!u->dataset->deduplicated, "first upload deduplicated");
        CHECK(u->bytes_received == len, "bytes_received");
        CHECK(u->timings && u->timings->total_ns ==
                  u->timings->queue_ns + u->timings->decode_ns + u->timings->compile_ns +
                      u->timings->execute_ns + u->timings->encode_ns + u->timings->other_ns,
              "upload timings add up");
        /* the wait for the stream's messages is a part of other */
        CHECK(u->timings && u->timings->stream_wait_ns <= u->timings->other_ns,
              "upload stream wait %llu within other %llu",
              (unsigned long long)(u->timings ? u->timings->stream_wait_ns : 0),
              (unsigned long long)(u->timings ? u->timings->other_ns : 0));
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    }
    itest_res_free(&r);
    /* Again: stored under its content hash, nothing new kept. */
    itest_upload(c, sid, pp, 1, csv, len, 4096, id2, &r);
    u = upload_resp(&r);
    CHECK(u && u->dataset->deduplicated && !strcmp(id1, id2), "re-upload dedup (%s vs %s)", id1, id2);
    if (u)
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    itest_res_free(&r);
    /* FindDataset: one round trip instead of an upload. */
    XXH128_canonical_t h;
    XXH128_canonicalFromHash(&h, XXH3_128bits(csv, len));
    Rtrain__V1__DatasetHeader hd = RTRAIN__V1__DATASET_HEADER__INIT;
    hd.session_id = (char *)sid;
    hd.parts = pp;
    hd.n_parts = 1;
    hd.total_bytes = len;
    Rtrain__V1__FindDatasetRequest fq = RTRAIN__V1__FIND_DATASET_REQUEST__INIT;
    fq.session_id = (char *)sid;
    fq.content_hash.data = h.digest;
    fq.content_hash.len = 16;
    fq.header = &hd;
    Rtrain__V1__FindDatasetResponse *f = NULL;
    itest_unary(c, "FindDataset", &fq.base, &rtrain__v1__find_dataset_response__descriptor,
                (ProtobufCMessage **)&f, &r);
    CHECK(f && f->found && f->dataset && !strcmp(f->dataset->dataset_id, id1),
          "FindDataset finds the upload: %d %s", r.status, r.details);
    if (f)
        protobuf_c_message_free_unpacked(&f->base, NULL);
    itest_res_free(&r);
    /* The same bytes read another way (no header skip) are another dataset. */
    p.csv_header = 0;
    itest_unary(c, "FindDataset", &fq.base, &rtrain__v1__find_dataset_response__descriptor,
                (ProtobufCMessage **)&f, &r);
    CHECK(f && !f->found, "FindDataset with other parse settings must miss");
    if (f)
        protobuf_c_message_free_unpacked(&f->base, NULL);
    itest_res_free(&r);
    p.csv_header = 1;
    h.digest[0] ^= 1;
    itest_unary(c, "FindDataset", &fq.base, &rtrain__v1__find_dataset_response__descriptor,
                (ProtobufCMessage **)&f, &r);
    CHECK(f && !f->found, "FindDataset with another hash must miss");
    if (f)
        protobuf_c_message_free_unpacked(&f->base, NULL);
    itest_res_free(&r);
    /* Without the header line the first line is not a number. */
    p.csv_header = 0;
    itest_upload(c, sid, pp, 1, csv, len, 1 << 20, NULL, &r);
    CHECK(r.status == 3 && strstr(r.details, "not a number"), "csv header as data: %d '%s'",
          r.status, r.details);
    itest_res_free(&r);
    free(csv);
}

/* A v1 .npy file in memory. */
static uint8_t *npy(const char *descr, const char *shape, const void *data, size_t dlen,
                    int fortran, size_t *len)
{
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }",
                     descr, fortran ? "True" : "False", shape);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    int hl = n + pad + 1;
    uint8_t *b = malloc((size_t)(10 + hl) + dlen);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)(hl & 0xff);
    b[9] = (uint8_t)(hl >> 8);
    memcpy(b + 10, hdr, (size_t)n);
    memset(b + 10 + n, ' ', (size_t)pad);
    b[10 + hl - 1] = '\n';
    memcpy(b + 10 + hl, data, dlen);
    *len = (size_t)(10 + hl) + dlen;
    return b;
}

static void test_npy_raw(itest_conn *c, const char *sid)
{
    float x[30 * 4];
    int64_t y[30];
    for (int i = 0; i < 30; i++) {
        for (int j = 0; j < 4; j++)
            x[i * 4 + j] = (float)(i + j) * 0.25f;
        y[i] = i % 3;
    }
    size_t xl, yl;
    uint8_t *xb = npy("<f4", "(30, 4)", x, sizeof x, 0, &xl);
    uint8_t *yb = npy("<i8", "(30,)", y, sizeof y, 0, &yl);
    uint8_t *all = malloc(xl + yl);
    memcpy(all, xb, xl);
    memcpy(all + xl, yb, yl);
    Rtrain__V1__DataPart px = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DATA_FORMAT__FORMAT_NPY, xl);
    Rtrain__V1__DataPart py = part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS, RTRAIN__V1__DATA_FORMAT__FORMAT_NPY, yl);
    Rtrain__V1__DataPart *pp[2] = {&px, &py};
    itest_res r;
    itest_upload(c, sid, pp, 2, all, xl + yl, 100, NULL, &r);
    Rtrain__V1__UploadResponse *u = upload_resp(&r);
    CHECK(u && u->dataset->samples == 30 && u->dataset->y_dtype == RTRAIN__V1__DTYPE__I32,
          "npy upload: %d %s", r.status, r.details);
    if (u)
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    itest_res_free(&r);

    /* fortran_order is rejected with a clear message. */
    uint8_t *fb = npy("<f4", "(30, 4)", x, sizeof x, 1, &xl);
    px.length = xl;
    Rtrain__V1__DataPart *p1[1] = {&px};
    itest_upload(c, sid, p1, 1, fb, xl, 1 << 20, NULL, &r);
    CHECK(r.status == 3 && strstr(r.details, "fortran"), "fortran npy: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    free(fb);

    /* Inf in NPY features. */
    x[7 * 4 + 2] = INFINITY;
    uint8_t *ib = npy("<f4", "(30, 4)", x, sizeof x, 0, &xl);
    px.length = xl;
    itest_upload(c, sid, p1, 1, ib, xl, 1 << 20, NULL, &r);
    CHECK(r.status == 3 && strstr(r.details, "Inf at sample 7, column 2"), "inf npy: %d '%s'",
          r.status, r.details);
    itest_res_free(&r);
    free(ib);
    x[7 * 4 + 2] = 1;

    /* RAW f32 + u8 labels with explicit shapes. */
    uint8_t yl8[30];
    for (int i = 0; i < 30; i++)
        yl8[i] = (uint8_t)(i % 3);
    uint8_t *raw = malloc(sizeof x + 30);
    memcpy(raw, x, sizeof x);
    memcpy(raw + sizeof x, yl8, 30);
    Rtrain__V1__DataPart rx = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DATA_FORMAT__FORMAT_RAW, sizeof x);
    Rtrain__V1__DataPart ry = part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS, RTRAIN__V1__DATA_FORMAT__FORMAT_RAW, 30);
    int64_t xs[2] = {30, 4}, ys[1] = {30};
    rx.dtype = RTRAIN__V1__DTYPE__F32;
    rx.shape = xs;
    rx.n_shape = 2;
    ry.dtype = RTRAIN__V1__DTYPE__U8;
    ry.shape = ys;
    ry.n_shape = 1;
    Rtrain__V1__DataPart *pr[2] = {&rx, &ry};
    itest_upload(c, sid, pr, 2, raw, sizeof x + 30, 64, NULL, &r);
    u = upload_resp(&r);
    CHECK(u && u->dataset->samples == 30 && u->dataset->x_shape[0] == 4 &&
              u->dataset->y_dtype == RTRAIN__V1__DTYPE__I32,
          "raw upload: %d %s", r.status, r.details);
    if (u)
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    itest_res_free(&r);
    /* A RAW shape that does not match the byte count. */
    xs[0] = 31;
    itest_upload(c, sid, pr, 2, raw, sizeof x + 30, 64, NULL, &r);
    CHECK(r.status == 3 && strstr(r.details, "RAW"), "raw shape mismatch: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    /* Features and labels with different sample counts. */
    xs[0] = 30;
    ys[0] = 15;
    ry.dtype = RTRAIN__V1__DTYPE__U8;
    ry.n_shape = 2;
    int64_t ys2[2] = {15, 2};
    ry.shape = ys2;
    itest_upload(c, sid, pr, 2, raw, sizeof x + 30, 64, NULL, &r);
    CHECK(r.status == 3 && strstr(r.details, "30 samples but labels have 15"),
          "sample count mismatch: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    free(raw);
    free(xb);
    free(yb);
    free(all);
}

static size_t gzip_mem(const uint8_t *in, size_t n, uint8_t *out, size_t cap)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    deflate(&z, Z_FINISH);
    size_t o = cap - z.avail_out;
    deflateEnd(&z);
    return o;
}

static void test_idx(itest_conn *c, const char *sid)
{
    /* idx3 u8 images (12, 5, 5), gzipped; idx1 u8 labels, plain. */
    uint8_t img[16 + 12 * 25], lab[8 + 12];
    memcpy(img, "\x00\x00\x08\x03\x00\x00\x00\x0c\x00\x00\x00\x05\x00\x00\x00\x05", 16);
    for (int i = 0; i < 12 * 25; i++)
        img[16 + i] = (uint8_t)(i * 7);
    memcpy(lab, "\x00\x00\x08\x01\x00\x00\x00\x0c", 8);
    for (int i = 0; i < 12; i++)
        lab[8 + i] = (uint8_t)(i % 10);
    uint8_t gz[1024];
    size_t gl = gzip_mem(img, sizeof img, gz, sizeof gz);
    uint8_t all[2048];
    memcpy(all, gz, gl);
    memcpy(all + gl, lab, sizeof lab);
    Rtrain__V1__DataPart px = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DATA_FORMAT__FORMAT_IDX, gl);
    Rtrain__V1__DataPart py = part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS, RTRAIN__V1__DATA_FORMAT__FORMAT_IDX, sizeof lab);
    px.normalize = 1;
    Rtrain__V1__DataPart *pp[2] = {&px, &py};
    itest_res r;
    itest_upload(c, sid, pp, 2, all, gl + sizeof lab, 50, NULL, &r);
    Rtrain__V1__UploadResponse *u = upload_resp(&r);
    CHECK(u && u->dataset->samples == 12 && u->dataset->n_x_shape == 2 &&
              u->dataset->x_shape[0] == 5 && u->dataset->x_shape[1] == 5 &&
              u->dataset->y_dtype == RTRAIN__V1__DTYPE__I32,
          "idx.gz upload: %d %s", r.status, r.details);
    if (u)
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    itest_res_free(&r);
    /* Corrupt gzip. */
    all[gl / 2] ^= 0x55;
    all[gl / 2 + 1] ^= 0x55;
    itest_upload(c, sid, pp, 2, all, gl + sizeof lab, 50, NULL, &r);
    CHECK(r.status == 3 && strstr(r.details, "IDX"), "corrupt idx.gz: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    CHECK(ping_ok(c), "ping after idx");
}

static void test_nan_csv(itest_conn *c, const char *sid)
{
    char csv[4096];
    size_t o = 0;
    for (int i = 0; i < 20; i++)
        o += (size_t)snprintf(csv + o, sizeof csv - o, "%d,%d,%d,%s,%d\n", i, i + 1, i + 2,
                              i == 12 ? "nan" : "0.5", i % 3);
    Rtrain__V1__DataPart p = part(RTRAIN__V1__DATA_ROLE__ROLE_BOTH, RTRAIN__V1__DATA_FORMAT__FORMAT_CSV, o);
    p.label_column = -1;
    Rtrain__V1__DataPart *pp[1] = {&p};
    itest_res r;
    itest_upload(c, sid, pp, 1, (uint8_t *)csv, o, 256, NULL, &r);
    CHECK(r.status == 3 && strstr(r.details, "features contain NaN at sample 12, column 3"),
          "NaN csv: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    CHECK(ping_ok(c), "ping after NaN");
}

/* RAW f32 features are checked for NaN/Inf as each block lands (fused
 * with the copy): a bad value cut in two by a chunk boundary, one in the
 * last float, and clean data (whose full check is skipped) in chunks of
 * odd sizes, each against the message naming the sample and column. */
static void test_nonfinite_raw(itest_conn *c, const char *sid)
{
    float x[40 * 3];
    for (int i = 0; i < 40 * 3; i++)
        x[i] = (float)i * 0.25f - 7.0f;
    int32_t y[40];
    for (int i = 0; i < 40; i++)
        y[i] = i % 2;
    uint8_t raw[sizeof x + sizeof y];
    Rtrain__V1__DataPart rx = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DATA_FORMAT__FORMAT_RAW, sizeof x);
    Rtrain__V1__DataPart ry = part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS, RTRAIN__V1__DATA_FORMAT__FORMAT_RAW, sizeof y);
    int64_t xs[2] = {40, 3}, ys[1] = {40};
    rx.dtype = RTRAIN__V1__DTYPE__F32;
    rx.shape = xs;
    rx.n_shape = 2;
    ry.dtype = RTRAIN__V1__DTYPE__I32;
    ry.shape = ys;
    ry.n_shape = 1;
    Rtrain__V1__DataPart *pr[2] = {&rx, &ry};
    static const struct {
        int at;         /* value index made bad, -1 none */
        float v;
        size_t chunk;   /* stream bytes per chunk */
        const char *want;
    } cases[] = {
        {17 * 3 + 2, INFINITY, 5, "features contain Inf at sample 17, column 2"},
        {39 * 3 + 2, NAN, 7, "features contain NaN at sample 39, column 2"},
        {0, -INFINITY, 3, "features contain Inf at sample 0, column 0"},
        /* the 64-byte vector body of a chunk, its scalar tail, and the
         * vector body of a chunk that starts mid-float */
        {16 * 3 + 2, NAN, 4096, "features contain NaN at sample 16, column 2"},
        {39 * 3 + 0, INFINITY, 4096, "features contain Inf at sample 39, column 0"},
        {28, NAN, 102, "features contain NaN at sample 9, column 1"},
        {-1, 0, 5, NULL},
        {-1, 0, 4096, NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float xx[40 * 3];
        memcpy(xx, x, sizeof x);
        if (cases[k].at >= 0)
            xx[cases[k].at] = cases[k].v;
        xx[5] = (float)k; /* new content each time: nothing is found already stored */
        memcpy(raw, xx, sizeof xx);
        memcpy(raw + sizeof xx, y, sizeof y);
        itest_res r;
        itest_upload(c, sid, pr, 2, raw, sizeof raw, cases[k].chunk, NULL, &r);
        if (cases[k].want) {
            CHECK(r.status == 3 && strstr(r.details, cases[k].want), "case %zu: %d '%s'", k,
                  r.status, r.details);
        } else {
            Rtrain__V1__UploadResponse *u = upload_resp(&r);
            CHECK(u && u->dataset->samples == 40 && u->dataset->n_x_shape == 1 &&
                      u->dataset->x_shape[0] == 3,
                  "case %zu (finite): %d '%s'", k, r.status, r.details);
            if (u)
                rtrain__v1__upload_response__free_unpacked(u, NULL);
        }
        itest_res_free(&r);
    }
    CHECK(ping_ok(c), "ping after non-finite RAW uploads");
}

/* Build the chunks of an upload by hand to break it in specific ways. */
static void test_broken_streams(itest_conn *c, const char *sid)
{
    static uint8_t data[3000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)i;
    Rtrain__V1__DataPart p = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DATA_FORMAT__FORMAT_RAW, sizeof data);
    int64_t shape[2] = {750, 1};
    p.dtype = RTRAIN__V1__DTYPE__U8;
    p.shape = shape;
    p.n_shape = 2;
    shape[0] = 3000;
    Rtrain__V1__DataPart *pp[1] = {&p};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = (char *)sid;
    h.parts = pp;
    h.n_parts = 1;
    h.total_bytes = sizeof data;
    Rtrain__V1__UploadChunk ch[3];
    for (int i = 0; i < 3; i++) {
        Rtrain__V1__UploadChunk init = RTRAIN__V1__UPLOAD_CHUNK__INIT;
        ch[i] = init;
        ch[i].offset = (uint64_t)i * 1000;
        ch[i].data.data = data + i * 1000;
        ch[i].data.len = 1000;
    }
    ch[0].header = &h;
    ProtobufCMessage *m[3] = {&ch[0].base, &ch[1].base, &ch[2].base};
    itest_res r;

    /* 1. A wrong checksum -> DATA_LOSS. */
    ch[2].last = 1;
    ch[2].checksum = XXH64(data, sizeof data, 0) ^ 1;
    itest_client_stream(c, "UploadDataset", m, 3, -1, &r);
    CHECK(r.status == 15 && strstr(r.details, "checksum"), "bad checksum: %d '%s'", r.status, r.details);
    itest_res_free(&r);

    /* 2. The stream ends without a last chunk -> DATA_LOSS (truncated). */
    ch[2].last = 0;
    itest_client_stream(c, "UploadDataset", m, 2, -1, &r);
    CHECK(r.status == 15 && strstr(r.details, "without a last chunk"), "no last: %d '%s'", r.status,
          r.details);
    itest_res_free(&r);

    /* 3. last=true but bytes missing -> DATA_LOSS. */
    ch[1].last = 1;
    ch[1].checksum = XXH64(data, 2000, 0);
    itest_client_stream(c, "UploadDataset", m, 2, -1, &r);
    CHECK(r.status == 15 && strstr(r.details, "2000 of 3000"), "missing bytes: %d '%s'", r.status,
          r.details);
    itest_res_free(&r);
    ch[1].last = 0;

    /* 4. A gap in the offsets. */
    ch[1].offset = 1500;
    ch[2].last = 1;
    ch[2].checksum = XXH64(data, sizeof data, 0);
    itest_client_stream(c, "UploadDataset", m, 3, -1, &r);
    CHECK(r.status == 3 && strstr(r.details, "offset 1500, expected 1000"), "offset gap: %d '%s'",
          r.status, r.details);
    itest_res_free(&r);
    ch[1].offset = 1000;

    /* 5. The client cancels mid-stream: nothing is kept. */
    itest_client_stream(c, "UploadDataset", m, 3, 2, &r);
    CHECK(r.status == 1, "cancelled upload: status %d", r.status);
    itest_res_free(&r);
    CHECK(ping_ok(c), "ping after a cancelled upload");
    XXH128_canonical_t hh;
    XXH128_canonicalFromHash(&hh, XXH3_128bits(data, sizeof data));
    Rtrain__V1__FindDatasetRequest fq = RTRAIN__V1__FIND_DATASET_REQUEST__INIT;
    fq.session_id = (char *)sid;
    fq.content_hash.data = hh.digest;
    fq.content_hash.len = 16;
    fq.header = &h;
    Rtrain__V1__FindDatasetResponse *f = NULL;
    itest_unary(c, "FindDataset", &fq.base, &rtrain__v1__find_dataset_response__descriptor,
                (ProtobufCMessage **)&f, &r);
    CHECK(f && !f->found, "a cancelled/broken upload must not be stored");
    if (f)
        protobuf_c_message_free_unpacked(&f->base, NULL);
    itest_res_free(&r);

    /* 6. Now the good one, with the optional content_hash, is stored. */
    h.content_hash.data = hh.digest;
    h.content_hash.len = 16;
    itest_client_stream(c, "UploadDataset", m, 3, -1, &r);
    CHECK(r.status == 0, "good upload: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    itest_unary(c, "FindDataset", &fq.base, &rtrain__v1__find_dataset_response__descriptor,
                (ProtobufCMessage **)&f, &r);
    CHECK(f && f->found && f->dataset->samples == 3000, "stored after a good upload");
    if (f)
        protobuf_c_message_free_unpacked(&f->base, NULL);
    itest_res_free(&r);
    /* 7. A content_hash that does not match the bytes -> DATA_LOSS. */
    uint8_t wrong[16];
    memcpy(wrong, hh.digest, 16);
    wrong[3] ^= 0xff;
    h.content_hash.data = wrong;
    data[5] ^= 1; /* other bytes, so this is not a dedup hit */
    ch[2].checksum = XXH64(data, sizeof data, 0);
    itest_client_stream(c, "UploadDataset", m, 3, -1, &r);
    CHECK(r.status == 15 && strstr(r.details, "content_hash"), "wrong content_hash: %d '%s'",
          r.status, r.details);
    itest_res_free(&r);
    data[5] ^= 1;
    h.content_hash.len = 0;

    /* 8. A first chunk without a header; an unknown session. */
    itest_client_stream(c, "UploadDataset", m + 1, 1, -1, &r);
    CHECK(r.status == 3 && strstr(r.details, "no header"), "headerless: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    h.session_id = "s-unknown";
    itest_client_stream(c, "UploadDataset", m, 3, -1, &r);
    CHECK(r.status == 5 && strstr(r.details, "s-unknown"), "unknown session: %d '%s'", r.status,
          r.details);
    itest_res_free(&r);
    /* 9. An empty stream. */
    itest_client_stream(c, "UploadDataset", m, 0, -1, &r);
    CHECK(r.status == 15, "empty upload stream: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    CHECK(ping_ok(c), "ping after broken uploads");
}

static void test_too_big(itest_conn *c, const char *sid)
{
    Rtrain__V1__DataPart p = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DATA_FORMAT__FORMAT_RAW, 5u << 20);
    Rtrain__V1__DataPart *pp[1] = {&p};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = (char *)sid;
    h.parts = pp;
    h.n_parts = 1;
    Rtrain__V1__UploadChunk ch = RTRAIN__V1__UPLOAD_CHUNK__INIT;
    ch.header = &h;
    ProtobufCMessage *m[1] = {&ch.base};
    itest_res r;
    itest_client_stream(c, "UploadDataset", m, 1, -1, &r);
    CHECK(r.status == 8 && strstr(r.details, "over the limit"), "over --max-dataset-bytes: %d '%s'",
          r.status, r.details);
    itest_res_free(&r);
}

/* A daemon with the default limits takes a raw f32 upload of 6 MiB (over
 * the --max-dataset-bytes of main's first daemon) in 1 MiB chunks: the
 * dataset has its shape and every byte. (Upload throughput is measured by
 * bench/upload, not by a test.) */
/* n bytes of f32 features, 64 a sample (i % mod / 1000), as a RAW part
 * (shape points at the caller's two dims); NULL if out of memory. */
static uint8_t *f32_features(size_t n, unsigned mod, int64_t shape[2], Rtrain__V1__DataPart *p)
{
    uint8_t *b = malloc(n);
    CHECK(b, "malloc");
    if (!b)
        return NULL;
    float *f = (float *)b;
    for (size_t i = 0; i < n / 4; i++)
        f[i] = (float)(i % mod) * 0.001f;
    *p = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DATA_FORMAT__FORMAT_RAW, n);
    shape[0] = (int64_t)(n / 256);
    shape[1] = 64;
    p->dtype = RTRAIN__V1__DTYPE__F32;
    p->shape = shape;
    p->n_shape = 2;
    return b;
}

static void test_default_limits(itest_conn *c, const char *sid)
{
    const size_t n = 6u << 20;
    Rtrain__V1__DataPart p;
    int64_t shape[2];
    uint8_t *b = f32_features(n, 1000, shape, &p);
    if (!b)
        return;
    Rtrain__V1__DataPart *pp[1] = {&p};
    itest_res r;
    itest_upload(c, sid, pp, 1, b, n, 1u << 20, NULL, &r);
    CHECK(r.status == 0, "6 MiB upload in 1 MiB chunks: %d %s", r.status, r.details);
    Rtrain__V1__UploadResponse *u = upload_resp(&r);
    if (u) {
        CHECK(u->dataset->samples == n / 256 && u->dataset->n_x_shape == 1 &&
                  u->dataset->x_shape[0] == 64,
              "6 MiB upload: %llu samples", (unsigned long long)u->dataset->samples);
        CHECK(u->bytes_received == n, "6 MiB upload: bytes_received %llu",
              (unsigned long long)u->bytes_received);
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    }
    itest_res_free(&r);
    free(b);
}

/* An upload of 12 MiB goes through its lane (hashing off the cq thread;
 * each of its 12 chunks holds the stream's next receive until the lane
 * takes it up, so this also checks that every held receive is resumed);
 * its checksum is checked once the lane has placed everything, after the
 * last chunk: a wrong one is DATA_LOSS naming both sums, the right one
 * stores the data, and the daemon answers after either. */
static void test_lane_checksum(itest_conn *c, const char *sid)
{
    enum { K = 12 };
    const size_t n = (size_t)K << 20;
    Rtrain__V1__DataPart p;
    int64_t shape[2];
    uint8_t *b = f32_features(n, 997, shape, &p);
    if (!b)
        return;
    Rtrain__V1__DataPart *pp[1] = {&p};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = (char *)sid;
    h.parts = pp;
    h.n_parts = 1;
    h.total_bytes = n;
    Rtrain__V1__UploadChunk ch[K];
    ProtobufCMessage *m[K];
    for (int i = 0; i < K; i++) {
        Rtrain__V1__UploadChunk init = RTRAIN__V1__UPLOAD_CHUNK__INIT;
        ch[i] = init;
        ch[i].offset = (uint64_t)i << 20;
        ch[i].data.data = b + ((size_t)i << 20);
        ch[i].data.len = 1u << 20;
        m[i] = &ch[i].base;
    }
    ch[0].header = &h;
    ch[K - 1].last = 1;
    const uint64_t sum = XXH64(b, n, 0);
    ch[K - 1].checksum = sum ^ 1;
    itest_res r;
    itest_client_stream(c, "UploadDataset", m, K, -1, &r);
    char want[96];
    snprintf(want, sizeof want, "XXH64 of the data is %016llx, the client sent %016llx",
             (unsigned long long)sum, (unsigned long long)(sum ^ 1));
    CHECK(r.status == GRPC_STATUS_DATA_LOSS && strstr(r.details, want),
          "12 MiB with a wrong checksum: %d %s", r.status, r.details);
    itest_res_free(&r);
    CHECK(ping_ok(c), "the daemon answers after the refused upload");
    ch[K - 1].checksum = sum;
    itest_client_stream(c, "UploadDataset", m, K, -1, &r);
    CHECK(r.status == 0, "12 MiB with the right checksum: %d %s", r.status, r.details);
    Rtrain__V1__UploadResponse *u = upload_resp(&r);
    if (u) {
        CHECK(u->dataset->samples == n / 256 && u->bytes_received == n,
              "12 MiB upload: %llu samples, %llu bytes", (unsigned long long)u->dataset->samples,
              (unsigned long long)u->bytes_received);
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    }
    itest_res_free(&r);
    free(b);
}

/* With --max-store-bytes 100000, a second 60 KB dataset pushes the first
 * (unused) one out; the newest stays findable. */
static void test_store_cap(const char *rtraind)
{
    itest_daemon d;
    const char *extra[] = {"--max-store-bytes", "100000", NULL};
    if (itest_daemon_start(&d, rtraind, extra) < 0) {
        CHECK(0, "daemon start");
        return;
    }
    itest_conn *c = itest_connect(d.addr);
    char sid[40], ids[2][40];
    itest_session(c, "cap", sid);
    static float x[2][15000];
    uint8_t hashes[2][16];
    Rtrain__V1__DataPart p = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DATA_FORMAT__FORMAT_RAW, sizeof x[0]);
    int64_t shape[2] = {1500, 10};
    p.dtype = RTRAIN__V1__DTYPE__F32;
    p.shape = shape;
    p.n_shape = 2;
    Rtrain__V1__DataPart *pp[1] = {&p};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 15000; i++)
            x[k][i] = (float)(i + k * 7);
        itest_res r;
        itest_upload(c, sid, pp, 1, (uint8_t *)x[k], sizeof x[k], 16384, ids[k], &r);
        CHECK(r.status == 0, "upload %d: %d %s", k, r.status, r.details);
        itest_res_free(&r);
        XXH128_canonical_t h;
        XXH128_canonicalFromHash(&h, XXH3_128bits(x[k], sizeof x[k]));
        memcpy(hashes[k], h.digest, 16);
    }
    for (int k = 0; k < 2; k++) {
        Rtrain__V1__DatasetHeader hd = RTRAIN__V1__DATASET_HEADER__INIT;
        hd.session_id = sid;
        hd.parts = pp;
        hd.n_parts = 1;
        Rtrain__V1__FindDatasetRequest fq = RTRAIN__V1__FIND_DATASET_REQUEST__INIT;
        fq.session_id = sid;
        fq.content_hash.data = hashes[k];
        fq.content_hash.len = 16;
        fq.header = &hd;
        Rtrain__V1__FindDatasetResponse *f = NULL;
        itest_res r;
        itest_unary(c, "FindDataset", &fq.base, &rtrain__v1__find_dataset_response__descriptor,
                    (ProtobufCMessage **)&f, &r);
        CHECK(f && f->found == (k == 1), "dataset %d found=%d (the older one is evicted)", k,
              f ? f->found : -1);
        if (f)
            protobuf_c_message_free_unpacked(&f->base, NULL);
        itest_res_free(&r);
    }
    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "exit code");
}

/* ------------------------------------------------------------ resume */
#define RS_CHUNK 4096
#define RS_N 10

/* The RS_N chunks of RS_CHUNK bytes over data, the header on the first,
 * the last marked, and m[i] pointing at each. */
static void rs_chunks(Rtrain__V1__UploadChunk *ch, ProtobufCMessage **m, const void *data,
                      Rtrain__V1__DatasetHeader *h)
{
    for (int i = 0; i < RS_N; i++) {
        Rtrain__V1__UploadChunk init = RTRAIN__V1__UPLOAD_CHUNK__INIT;
        ch[i] = init;
        ch[i].offset = (uint64_t)i * RS_CHUNK;
        ch[i].data.data = (uint8_t *)data + (size_t)i * RS_CHUNK;
        ch[i].data.len = RS_CHUNK;
        m[i] = &ch[i].base;
    }
    ch[0].header = h;
    ch[RS_N - 1].last = 1;
}

static uint64_t find_resume(itest_conn *c, const char *sid, Rtrain__V1__DatasetHeader *h,
                            char *found_id)
{
    Rtrain__V1__FindDatasetRequest q = RTRAIN__V1__FIND_DATASET_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.content_hash = h->content_hash;
    q.header = h;
    Rtrain__V1__FindDatasetResponse *f = NULL;
    itest_res r;
    itest_unary(c, "FindDataset", &q.base, &rtrain__v1__find_dataset_response__descriptor,
                (ProtobufCMessage **)&f, &r);
    uint64_t off = 0;
    if (found_id)
        found_id[0] = 0;
    if (f) {
        off = f->resume_offset;
        if (f->found && found_id)
            snprintf(found_id, 40, "%s", f->dataset->dataset_id);
        protobuf_c_message_free_unpacked(&f->base, NULL);
    }
    itest_res_free(&r);
    return off;
}

static void test_resume(itest_conn *c, const char *sid)
{
    static float x[RS_N * RS_CHUNK / 4];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = (float)i * 0.25f - 7.0f;
    const uint8_t *data = (const uint8_t *)x;
    Rtrain__V1__DataPart p = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES,
                                  RTRAIN__V1__DATA_FORMAT__FORMAT_RAW, sizeof x);
    int64_t shape[2] = {1024, 10};
    p.dtype = RTRAIN__V1__DTYPE__F32;
    p.shape = shape;
    p.n_shape = 2;
    Rtrain__V1__DataPart *pp[1] = {&p};
    XXH128_canonical_t hc;
    XXH128_canonicalFromHash(&hc, XXH3_128bits(x, sizeof x));
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = (char *)sid;
    h.name = "resume";
    h.parts = pp;
    h.n_parts = 1;
    h.content_hash.data = hc.digest;
    h.content_hash.len = 16;
    h.no_checksum = 1;
    Rtrain__V1__UploadChunk ch[RS_N];
    ProtobufCMessage *m[RS_N];
    rs_chunks(ch, m, data, &h);
    itest_res r;

    /* Nothing kept yet; a resume then is NOT_FOUND. */
    CHECK(find_resume(c, sid, &h, NULL) == 0, "nothing kept before the first try");
    h.resume_offset = 9 * RS_CHUNK;
    ch[9].header = &h;
    itest_client_stream(c, "UploadDataset", &m[9], 1, -1, &r);
    CHECK(r.status == GRPC_STATUS_NOT_FOUND && strstr(r.details, "send it all"),
          "resume with nothing kept: %d %s", r.status, r.details);
    itest_res_free(&r);
    ch[9].header = NULL;
    h.resume_offset = 0;

    /* Cut at 90%: nine chunks, and the stream ends without its last one
     * (the daemon has then read all nine: kept before the status). */
    itest_client_stream(c, "UploadDataset", m, RS_N - 1, -1, &r);
    CHECK(r.status == GRPC_STATUS_DATA_LOSS, "cut short: %d %s", r.status, r.details);
    itest_res_free(&r);
    uint64_t kept = find_resume(c, sid, &h, NULL);
    CHECK(kept == 9 * RS_CHUNK, "the daemon kept %llu bytes", (unsigned long long)kept);

    /* A resume at another offset is refused, naming what is held; the
     * kept bytes are gone with it (the client then sends everything). */
    h.resume_offset = 4 * RS_CHUNK;
    ch[4].header = &h;
    itest_client_stream(c, "UploadDataset", &m[4], RS_N - 4, -1, &r);
    CHECK(r.status == GRPC_STATUS_NOT_FOUND && strstr(r.details, "36864"),
          "resume at a wrong offset: %d %s", r.status, r.details);
    itest_res_free(&r);
    ch[4].header = NULL;
    CHECK(find_resume(c, sid, &h, NULL) == 0, "a refused resume drops the kept bytes");

    /* Cut again at 90%, resume with a wrong last chunk: the content hash
     * over kept + sent bytes catches it. */
    h.resume_offset = 0;
    itest_client_stream(c, "UploadDataset", m, RS_N - 1, -1, &r);
    itest_res_free(&r);
    CHECK(find_resume(c, sid, &h, NULL) == 9 * RS_CHUNK, "kept again");
    static uint8_t wrong[RS_CHUNK];
    memcpy(wrong, data + 9 * RS_CHUNK, RS_CHUNK);
    wrong[100] ^= 1;
    Rtrain__V1__UploadChunk bad = ch[9];
    bad.data.data = wrong;
    h.resume_offset = 9 * RS_CHUNK;
    bad.header = &h;
    ProtobufCMessage *mb[1] = {&bad.base};
    itest_client_stream(c, "UploadDataset", mb, 1, -1, &r);
    CHECK(r.status == GRPC_STATUS_DATA_LOSS && strstr(r.details, "content_hash"),
          "resumed with wrong bytes: %d %s", r.status, r.details);
    itest_res_free(&r);

    /* Cut at 90% once more, and resume right: only the last chunk goes. */
    h.resume_offset = 0;
    itest_client_stream(c, "UploadDataset", m, RS_N - 1, -1, &r);
    itest_res_free(&r);
    CHECK(find_resume(c, sid, &h, NULL) == 9 * RS_CHUNK, "kept a third time");
    h.resume_offset = 9 * RS_CHUNK;
    ch[9].header = &h;
    itest_client_stream(c, "UploadDataset", &m[9], 1, -1, &r);
    Rtrain__V1__UploadResponse *u = upload_resp(&r);
    CHECK(u && u->bytes_received == sizeof x && u->bytes_resumed == 9 * RS_CHUNK &&
              u->dataset->samples == 1024 && u->dataset->n_x_shape == 1 &&
              u->dataset->x_shape[0] == 10,
          "resumed: %d %s received %llu resumed %llu", r.status, r.details,
          u ? (unsigned long long)u->bytes_received : 0ull,
          u ? (unsigned long long)u->bytes_resumed : 0ull);
    /* Its content hash is the data's: FindDataset of the whole finds it. */
    char found[40];
    h.resume_offset = 0;
    find_resume(c, sid, &h, found);
    CHECK(u && found[0] && strcmp(found, u->dataset->dataset_id) == 0,
          "the resumed dataset is found by the data's hash (%s vs %s)", found,
          u ? u->dataset->dataset_id : "-");
    if (u)
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    itest_res_free(&r);
    ch[9].header = NULL;

    /* A refused chunk (an offset gap) keeps nothing; no_checksum and
     * resume_offset need the content hash. */
    XXH128_canonicalFromHash(&hc, XXH3_128bits(x, sizeof x - 4));
    p.length = sizeof x - 4;
    shape[0] = 1023;
    ch[RS_N - 1].data.len = RS_CHUNK - 4;
    ch[2].offset += 8;
    itest_client_stream(c, "UploadDataset", m, RS_N, -1, &r);
    CHECK(r.status == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "offset"),
          "offset gap: %d %s", r.status, r.details);
    itest_res_free(&r);
    ch[2].offset -= 8;
    CHECK(find_resume(c, sid, &h, NULL) == 0, "a refused stream is not kept");
    h.content_hash.len = 0;
    itest_client_stream(c, "UploadDataset", m, 1, -1, &r);
    CHECK(r.status == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "content_hash"),
          "no_checksum without a content hash: %d %s", r.status, r.details);
    itest_res_free(&r);
    CHECK(ping_ok(c), "daemon alive after resumes");
}

/* ------------------------------------------------- hash_later and probe */
/* FindDataset's probe: probable (0/1), or -1 on an error status. */
static int probe(itest_conn *c, const char *sid, Rtrain__V1__DatasetHeader *h,
                 const uint8_t sample[16])
{
    Rtrain__V1__FindDatasetRequest q = RTRAIN__V1__FIND_DATASET_REQUEST__INIT;
    q.session_id = (char *)sid;
    q.sample_hash.data = (uint8_t *)sample;
    q.sample_hash.len = 16;
    q.header = h;
    Rtrain__V1__FindDatasetResponse *f = NULL;
    itest_res r;
    itest_unary(c, "FindDataset", &q.base, &rtrain__v1__find_dataset_response__descriptor,
                (ProtobufCMessage **)&f, &r);
    int v = f ? f->probable && !f->found : -1;
    if (f)
        protobuf_c_message_free_unpacked(&f->base, NULL);
    itest_res_free(&r);
    return v;
}

/* The client streams before it knows the content hash (hash_later) and
 * sends it in a later chunk; a probe by sample hash says whether the
 * daemon holds something like the data. */
static void test_hash_later(itest_conn *c, const char *sid)
{
    static float x[RS_N * RS_CHUNK / 4], y[RS_N * RS_CHUNK / 4];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
        x[i] = (float)i * 0.5f + 3.0f;
        y[i] = (float)i * -0.125f;
    }
    Rtrain__V1__DataPart p = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES,
                                  RTRAIN__V1__DATA_FORMAT__FORMAT_RAW, sizeof x);
    int64_t shape[2] = {1024, 10};
    p.dtype = RTRAIN__V1__DTYPE__F32;
    p.shape = shape;
    p.n_shape = 2;
    Rtrain__V1__DataPart *pp[1] = {&p};
    /* the sample: the first 4 KiB of every MiB, here the first 4 KiB */
    XXH128_canonical_t hx, hy, sx, sy;
    XXH128_canonicalFromHash(&hx, XXH3_128bits(x, sizeof x));
    XXH128_canonicalFromHash(&hy, XXH3_128bits(y, sizeof y));
    XXH128_canonicalFromHash(&sx, XXH3_128bits(x, 4096));
    XXH128_canonicalFromHash(&sy, XXH3_128bits(y, 4096));
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = (char *)sid;
    h.name = "later";
    h.parts = pp;
    h.n_parts = 1;
    h.no_checksum = 1;
    h.hash_later = 1;
    h.sample_hash.data = sx.digest;
    h.sample_hash.len = 16;
    Rtrain__V1__UploadChunk ch[RS_N];
    ProtobufCMessage *m[RS_N];
    rs_chunks(ch, m, x, &h);
    ch[3].content_hash.data = hx.digest; /* known after three chunks went */
    ch[3].content_hash.len = 16;
    itest_res r;

    CHECK(probe(c, sid, &h, sx.digest) == 0, "nothing like x held: not probable");
    itest_client_stream(c, "UploadDataset", m, RS_N, -1, &r);
    Rtrain__V1__UploadResponse *u = upload_resp(&r);
    CHECK(u && !u->dataset->deduplicated && u->dataset->samples == 1024 &&
              u->bytes_received == sizeof x,
          "hash_later upload: %d %s", r.status, r.details);
    char id[40] = "";
    if (u) {
        snprintf(id, sizeof id, "%s", u->dataset->dataset_id);
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    }
    itest_res_free(&r);
    /* Now the probe says probable, and the content hash finds it. */
    CHECK(probe(c, sid, &h, sx.digest) == 1, "x held: probable");
    CHECK(probe(c, sid, &h, sy.digest) == 0, "another sample: not probable");
    char found[40];
    Rtrain__V1__DatasetHeader hc = h;
    hc.hash_later = 0;
    hc.content_hash.data = hx.digest;
    hc.content_hash.len = 16;
    find_resume(c, sid, &hc, found);
    CHECK(id[0] && strcmp(found, id) == 0, "found by the content hash sent later (%s vs %s)",
          found, id);
    /* The same data streamed again without the probe: the chunk with the
     * content hash gets the stored dataset at once, the rest is unread. */
    ch[3].content_hash.len = 0;
    ch[1].content_hash.data = hx.digest;
    ch[1].content_hash.len = 16;
    itest_client_stream(c, "UploadDataset", m, RS_N, -1, &r);
    u = upload_resp(&r);
    CHECK(u && u->dataset->deduplicated && strcmp(u->dataset->dataset_id, id) == 0 &&
              u->bytes_received == RS_CHUNK,
          "answered at the hash: %d %s, received %llu", r.status, r.details,
          u ? (unsigned long long)u->bytes_received : 0ull);
    if (u)
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    itest_res_free(&r);
    CHECK(ping_ok(c), "daemon alive after an early answer");
    ch[1].content_hash.len = 0;
    ch[3].content_hash.len = 16;

    /* A content hash that is not the data's (nor a stored one's): DATA_LOSS,
     * nothing stored. */
    for (int i = 0; i < RS_N; i++)
        ch[i].data.data = (uint8_t *)y + (size_t)i * RS_CHUNK;
    h.sample_hash.data = sy.digest;
    uint8_t wrong[16];
    memcpy(wrong, hy.digest, 16);
    wrong[7] ^= 0x40;
    ch[3].content_hash.data = wrong;
    itest_client_stream(c, "UploadDataset", m, RS_N, -1, &r);
    CHECK(r.status == GRPC_STATUS_DATA_LOSS && strstr(r.details, "content_hash"),
          "wrong content hash sent later: %d %s", r.status, r.details);
    itest_res_free(&r);
    CHECK(probe(c, sid, &h, sy.digest) == 0, "a refused upload leaves no probe");
    /* A sample hash that is not the data's: DATA_LOSS. */
    ch[3].content_hash.data = hy.digest;
    h.sample_hash.data = sx.digest;
    itest_client_stream(c, "UploadDataset", m, RS_N, -1, &r);
    CHECK(r.status == GRPC_STATUS_DATA_LOSS && strstr(r.details, "sample_hash"),
          "wrong sample hash: %d %s", r.status, r.details);
    itest_res_free(&r);
    h.sample_hash.data = sy.digest;
    /* No chunk with the content hash: INVALID_ARGUMENT at the last. */
    ch[3].content_hash.len = 0;
    itest_client_stream(c, "UploadDataset", m, RS_N, -1, &r);
    CHECK(r.status == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "content_hash"),
          "hash_later without the hash: %d %s", r.status, r.details);
    itest_res_free(&r);
    /* hash_later and a content hash in the header; a chunk's hash
     * without hash_later; the hash twice. */
    h.content_hash.data = hy.digest;
    h.content_hash.len = 16;
    itest_client_stream(c, "UploadDataset", m, RS_N, -1, &r);
    CHECK(r.status == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "hash_later"),
          "hash_later with content_hash: %d %s", r.status, r.details);
    itest_res_free(&r);
    h.hash_later = 0;
    ch[3].content_hash.len = 16;
    itest_client_stream(c, "UploadDataset", m, RS_N, -1, &r);
    CHECK(r.status == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "hash_later"),
          "a chunk's hash without hash_later: %d %s", r.status, r.details);
    itest_res_free(&r);
    h.hash_later = 1;
    h.content_hash.len = 0;
    ch[5].content_hash = ch[3].content_hash;
    itest_client_stream(c, "UploadDataset", m, RS_N, -1, &r);
    CHECK(r.status == GRPC_STATUS_INVALID_ARGUMENT && strstr(r.details, "twice"),
          "the hash twice: %d %s", r.status, r.details);
    itest_res_free(&r);
    ch[5].content_hash.len = 0;

    /* Broken before the hash came: nothing kept. Broken after it: kept,
     * the probe says probable, and the classic resume sends the rest. */
    itest_client_stream(c, "UploadDataset", m, 3, -1, &r);
    itest_res_free(&r);
    hc.content_hash.data = hy.digest;
    CHECK(find_resume(c, sid, &hc, NULL) == 0, "broken before the hash: nothing kept");
    CHECK(probe(c, sid, &h, sy.digest) == 0, "broken before the hash: not probable");
    itest_client_stream(c, "UploadDataset", m, RS_N - 1, -1, &r);
    itest_res_free(&r);
    CHECK(probe(c, sid, &h, sy.digest) == 1, "broken after the hash: probable");
    CHECK(find_resume(c, sid, &hc, NULL) == 9 * RS_CHUNK, "broken after the hash: kept");
    hc.resume_offset = 9 * RS_CHUNK;
    hc.sample_hash.data = sy.digest;
    Rtrain__V1__UploadChunk rest = ch[9];
    rest.header = &hc;
    rest.content_hash.len = 0;
    ProtobufCMessage *mr[1] = {&rest.base};
    itest_client_stream(c, "UploadDataset", mr, 1, -1, &r);
    u = upload_resp(&r);
    CHECK(u && u->bytes_resumed == 9 * RS_CHUNK && u->dataset->samples == 1024,
          "resumed a hash_later upload: %d %s", r.status, r.details);
    if (u)
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    itest_res_free(&r);
    CHECK(ping_ok(c), "daemon alive after hash_later uploads");
}

/* One data set of RS_N chunks for test_broken_kept: its values start at
 * v0, h describes it (content hash included). */
typedef struct rs_set {
    float x[RS_N * RS_CHUNK / 4];
    int64_t shape[2];
    Rtrain__V1__DataPart p, *pp[1];
    XXH128_canonical_t hc;
    Rtrain__V1__DatasetHeader h;
    Rtrain__V1__UploadChunk ch[RS_N];
    ProtobufCMessage *m[RS_N];
} rs_set;

static void rs_set_init(rs_set *s, const char *sid, float v0)
{
    for (size_t i = 0; i < sizeof s->x / sizeof s->x[0]; i++)
        s->x[i] = v0 + (float)i * 0.5f;
    s->p = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DATA_FORMAT__FORMAT_RAW,
                sizeof s->x);
    s->shape[0] = 1024;
    s->shape[1] = 10;
    s->p.dtype = RTRAIN__V1__DTYPE__F32;
    s->p.shape = s->shape;
    s->p.n_shape = 2;
    s->pp[0] = &s->p;
    XXH128_canonicalFromHash(&s->hc, XXH3_128bits(s->x, sizeof s->x));
    Rtrain__V1__DatasetHeader hi = RTRAIN__V1__DATASET_HEADER__INIT;
    s->h = hi;
    s->h.session_id = (char *)sid;
    s->h.name = "kept";
    s->h.parts = s->pp;
    s->h.n_parts = 1;
    s->h.content_hash.data = s->hc.digest;
    s->h.content_hash.len = 16;
    s->h.no_checksum = 1;
    rs_chunks(s->ch, s->m, s->x, &s->h);
}

/* Resume s from kept bytes (0: the whole upload): the data set stored is
 * the data, found by its hash, and only the rest was sent. */
static void rs_resume(itest_conn *c, const char *sid, rs_set *s, uint64_t kept, const char *what)
{
    const int first = (int)(kept / RS_CHUNK);
    s->h.resume_offset = kept;
    s->ch[first].header = &s->h;
    itest_res r;
    itest_client_stream(c, "UploadDataset", &s->m[first], RS_N - first, -1, &r);
    s->ch[first].header = first ? NULL : &s->h;
    s->h.resume_offset = 0;
    Rtrain__V1__UploadResponse *u = upload_resp(&r);
    CHECK(u && u->bytes_received == sizeof s->x && u->bytes_resumed == kept &&
              u->dataset->samples == 1024,
          "%s: resumed at %llu: %d %s", what, (unsigned long long)kept, r.status, r.details);
    char found[40];
    find_resume(c, sid, &s->h, found);
    CHECK(u && found[0] && strcmp(found, u->dataset->dataset_id) == 0,
          "%s: the resumed data set is found by the data's hash", what);
    if (u)
        rtrain__v1__upload_response__free_unpacked(u, NULL);
    itest_res_free(&r);
}

/* How many "broke at N" lines the daemon's log holds; *last gets the last
 * one's N. */
static int broke_lines(const char *log, uint64_t *last)
{
    size_t len;
    char *text = (char *)itest_read_file(log, &len);
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, " broke at ")); p++) {
        unsigned long long v;
        if (sscanf(p, " broke at %llu", &v) == 1) {
            *last = v;
            n++;
        }
    }
    free(text);
    return n;
}

/* FindDataset until it reports want kept bytes (the daemon logs what it
 * keeps just before it files it), or a minute passed. */
static uint64_t kept_now(itest_conn *c, const char *sid, Rtrain__V1__DatasetHeader *h,
                         uint64_t want)
{
    uint64_t kept = 0;
    for (int i = 0; i < 6000 && (kept = find_resume(c, sid, h, NULL)) != want; i++)
        usleep(10000);
    return kept;
}

/* A broken upload keeps what the daemon had read, and says so in its log
 * ("upload ...: broke at N of M bytes: kept"). A client's cancel reaches
 * the daemon on the daemon's time, so the test waits for the call's access
 * record, logged after the daemon filed the kept bytes; then FindDataset
 * says what the log says (N, or 0 without such a line; a cancel on
 * loopback mostly lands before the daemon read the header), whole chunks,
 * and the rest resumes into the data. A client that goes silent after
 * nine chunks is stalled out by the daemon (--upload-stall-s 1), which has
 * read all nine by then: exactly nine are kept, and they resume. */
static void test_broken_kept(const char *rtraind)
{
    char dir[] = "/tmp/rt-upload-XXXXXX", log[64];
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp %s", dir);
        return;
    }
    snprintf(log, sizeof log, "%s/daemon.log", dir);
    itest_daemon d;
    const char *extra[] = {"--upload-stall-s", "1", "--log-level", "info", "--log-format", "json",
                           NULL};
    if (itest_daemon_start_log(&d, rtraind, extra, log) < 0) {
        CHECK(0, "daemon with --upload-stall-s 1 did not start");
        return;
    }
    itest_conn *c = itest_connect(d.addr);
    char sid[40];
    CHECK(itest_session(c, "kept", sid) == 0, "session");
    static rs_set a, b;
    itest_res r;

    rs_set_init(&a, sid, 3.0f);
    uint64_t logged = 0;
    const int lines0 = broke_lines(log, &logged);
    itest_client_stream(c, "UploadDataset", a.m, RS_N - 1, RS_N - 1, &r);
    itest_res_free(&r);
    /* the call's end, whichever came first: the client's cancel, or the
     * daemon's --upload-stall-s (a slow build, e.g. under TSan) */
    const char *rec = "\"method\":\"/rtrain.v1.Trainer/UploadDataset\",\"status\":\"";
    CHECK(itest_wait_log(log, rec, 1, 60) == 1, "no access record of the broken upload");
    const int lines1 = broke_lines(log, &logged);
    const uint64_t said = lines1 > lines0 ? logged : 0;
    uint64_t kept = find_resume(c, sid, &a.h, NULL);
    printf("  cancelled after nine chunks: the daemon kept %llu bytes\n",
           (unsigned long long)kept);
    CHECK(kept == said && kept % RS_CHUNK == 0 && kept <= 9 * RS_CHUNK,
          "kept after a cancel: %llu, the log says %llu", (unsigned long long)kept,
          (unsigned long long)said);
    rs_resume(c, sid, &a, kept, "cancelled");

    rs_set_init(&b, sid, -5.0f);
    itest_stream *st = itest_stream_begin(c, "UploadDataset");
    for (int i = 0; i < RS_N - 1; i++)
        CHECK(itest_stream_send(st, b.m[i]) == 1, "chunk %d sent", i);
    itest_stream_finish(st, 2, &r);
    CHECK(r.status == GRPC_STATUS_DEADLINE_EXCEEDED && strstr(r.details, "stalled"),
          "a silent upload: %d %s", r.status, r.details);
    itest_res_free(&r);
    CHECK(itest_wait_log(log, " broke at ", lines1 + 1, 60) == lines1 + 1,
          "the stalled upload kept nothing");
    broke_lines(log, &logged);
    CHECK(logged == 9 * RS_CHUNK, "the log says a stall kept %llu", (unsigned long long)logged);
    kept = kept_now(c, sid, &b.h, 9 * RS_CHUNK);
    CHECK(kept == 9 * RS_CHUNK, "kept after a stall: %llu", (unsigned long long)kept);
    rs_resume(c, sid, &b, kept, "stalled");

    itest_disconnect(c);
    CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "exit code");
    unlink(log);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    itest_daemon d;
    const char *extra[] = {"--max-dataset-bytes", "4194304", NULL};
    if (itest_daemon_start(&d, argv[1], extra) < 0)
        return 1;
    itest_conn *c = itest_connect(d.addr);
    char sid[40];
    CHECK(itest_session(c, "upload", sid) == 0, "session");
    RUN(test_csv_and_dedup, c, sid);
    RUN(test_npy_raw, c, sid);
    RUN(test_idx, c, sid);
    RUN(test_nan_csv, c, sid);
    RUN(test_nonfinite_raw, c, sid);
    RUN(test_broken_streams, c, sid);
    RUN(test_resume, c, sid);
    RUN(test_hash_later, c, sid);
    RUN(test_too_big, c, sid);
    itest_disconnect(c);
    RUN(test_store_cap, argv[1]);
    RUN(test_broken_kept, argv[1]);
    int code = itest_daemon_stop(&d, SIGTERM);
    CHECK(code == 0, "daemon exit %d", code);

    /* A daemon with the default limits. */
    if (itest_daemon_start(&d, argv[1], NULL) == 0) {
        c = itest_connect(d.addr);
        CHECK(itest_session(c, "default limits", sid) == 0, "session");
        RUN(test_default_limits, c, sid);
        RUN(test_lane_checksum, c, sid);
        itest_disconnect(c);
        CHECK(itest_daemon_stop(&d, SIGTERM) == 0, "daemon exit");
    } else {
        CHECK(0, "daemon with the default limits did not start");
    }
    return itest_summary();
}
