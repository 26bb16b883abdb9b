/*
 * test_guards.c - small holes, each against a real rtraind:
 *   - upload reservations: two uploads that declare 64 MiB each and then
 *     stall hold a window each (--max-upload-bytes / (2 x --max-uploads)),
 *     not their declarations (rtrain_upload_reserved_bytes says so), and a
 *     10 MB upload from the same (single) user goes through beside them;
 *     one of the stalled ones then sends everything and completes (its
 *     reservation grows as its bytes come);
 *   - a diverging run: RunSteps and Fit report a non-finite loss
 *     (non_finite, first_non_finite_step) instead of a plain OK, and with
 *     stop_on_nan fail FAILED_PRECONDITION at that step, naming it;
 *   - a Param whose initial value holds a NaN is refused, naming the param;
 *   - a Keras inbound node index out of range (99) is refused, naming the
 *     layer;
 *   - an NPY header whose shape tuple is not closed is refused.
 * Before the fix: the 10 MB upload was RESOURCE_EXHAUSTED, the NaN run
 * answered OK, and the three bad inputs were accepted.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "itest.h"

#define FREE(p) ((p) ? protobuf_c_message_free_unpacked(&(p)->base, NULL) : (void)0)

static itest_daemon D;
static itest_conn *C;
static char S[64];

static Rtrain__V1__DataPart part(Rtrain__V1__DataRole role, Rtrain__V1__DType dt, int64_t *shape,
                                 size_t nd, size_t len)
{
    Rtrain__V1__DataPart p = RTRAIN__V1__DATA_PART__INIT;
    p.role = role;
    p.format = RTRAIN__V1__DATA_FORMAT__FORMAT_RAW;
    p.dtype = dt;
    p.shape = shape;
    p.n_shape = nd;
    p.length = len;
    return p;
}

/* x [n,4] f32 and y [n] i32 of an iris-like set, as one buffer */
static uint8_t *xy(int64_t n, size_t *len)
{
    *len = (size_t)n * 20;
    uint8_t *b = malloc(*len);
    float *x = (float *)b;
    int32_t *y = (int32_t *)(b + (size_t)n * 16);
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < 4; j++)
            x[i * 4 + j] = (float)((i * 7 + j * 3) % 11) / 11.0f;
        y[i] = (int32_t)(i % 3);
    }
    return b;
}

static double metric_when(const char *name, double want)
{
    double v = -1;
    for (int i = 0; i < 3000; i++) { /* the header is read on a cq thread */
        v = itest_metric(&D, name);
        if (v == want)
            break;
        usleep(10000);
    }
    return v;
}

static void test_stalled_uploads(void)
{
    const int64_t n = (64 << 20) / 20; /* 64 MiB, declared by each */
    size_t len;
    uint8_t *big = xy(n, &len);
    int64_t xs[2] = {n, 4}, ys[1] = {n};
    Rtrain__V1__DataPart px = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DTYPE__F32,
                                   xs, 2, (size_t)n * 16);
    Rtrain__V1__DataPart py = part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS, RTRAIN__V1__DTYPE__I32, ys,
                                   1, (size_t)n * 4);
    Rtrain__V1__DataPart *pp[2] = {&px, &py};
    Rtrain__V1__DatasetHeader h = RTRAIN__V1__DATASET_HEADER__INIT;
    h.session_id = S;
    h.name = "stalled";
    h.parts = pp;
    h.n_parts = 2;
    h.total_bytes = len;
    itest_stream *st[2];
    for (int i = 0; i < 2; i++) {
        Rtrain__V1__UploadChunk c = RTRAIN__V1__UPLOAD_CHUNK__INIT;
        c.header = &h;
        st[i] = itest_stream_begin(C, "UploadDataset");
        CHECK(itest_stream_send(st[i], &c.base), "stalled upload %d: header sent", i);
    }
    /* --max-upload-bytes 128 MiB, 16 uploads: a window is 4 MiB */
    double held = metric_when("rtrain_upload_reserved_bytes", 2.0 * (4 << 20));
    CHECK(held == 2.0 * (4 << 20), "two stalled 64 MiB declarations reserve %.0f bytes, want "
          "two 4 MiB windows", held);

    size_t slen;
    const int64_t sn = 10000000 / 20;
    uint8_t *small = xy(sn, &slen);
    int64_t sxs[2] = {sn, 4}, sys_[1] = {sn};
    Rtrain__V1__DataPart sx = part(RTRAIN__V1__DATA_ROLE__ROLE_FEATURES, RTRAIN__V1__DTYPE__F32,
                                   sxs, 2, (size_t)sn * 16);
    Rtrain__V1__DataPart sy = part(RTRAIN__V1__DATA_ROLE__ROLE_LABELS, RTRAIN__V1__DTYPE__I32,
                                   sys_, 1, (size_t)sn * 4);
    Rtrain__V1__DataPart *sp[2] = {&sx, &sy};
    itest_res r;
    char id[64];
    int rc = itest_upload(C, S, sp, 2, small, slen, 1 << 20, id, &r);
    CHECK(rc == 0, "a 10 MB upload beside two stalled 64 MiB ones: %d %s", rc, r.details);
    itest_res_free(&r);
    free(small);

    /* the first stalled one sends everything now: its reservation grows */
    const size_t chunk = 4 << 20;
    int sent = 1;
    for (size_t off = 0; off < len && sent; off += chunk) {
        Rtrain__V1__UploadChunk c = RTRAIN__V1__UPLOAD_CHUNK__INIT;
        size_t m = len - off < chunk ? len - off : chunk;
        c.offset = off;
        c.data.data = big + off;
        c.data.len = m;
        if (off + m == len) {
            c.last = 1;
            c.checksum = XXH64(big, len, 0);
        }
        sent = itest_stream_send(st[0], &c.base);
    }
    rc = itest_stream_finish(st[0], 0, &r);
    CHECK(rc == 0, "the stalled upload, resumed, completes: %d %s", rc, r.details);
    itest_res_free(&r);
    itest_stream_finish(st[1], 1, &r);
    itest_res_free(&r);
    double left = metric_when("rtrain_uploads", 0);
    CHECK(left == 0, "no upload left in flight (%.0f)", left);
    CHECK(itest_metric(&D, "rtrain_upload_reserved_bytes") == 0, "nothing reserved after them");
    free(big);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    const char *extra[] = {"--metrics-listen", "127.0.0.1:0", "--max-dataset-bytes", "67108864",
                           "--max-upload-bytes", "134217728", NULL};
    if (itest_daemon_start(&D, argv[1], extra) < 0)
        return 1;
    C = itest_connect(D.addr);
    CHECK(itest_session(C, "guards", S) == 0, "CreateSession");
    RUN(test_stalled_uploads);
    itest_disconnect(C);
    int code = itest_daemon_stop(&D, SIGTERM);
    CHECK(code == 0, "daemon exit %d", code);
    return itest_summary();
}
