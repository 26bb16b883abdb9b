/* test_stream.c - streamed datasets (rt_stream.h): the shuffle buffer's
 * order, records spooled and read back equal to the in-memory dataset, bad
 * records reported or skipped the same way, and batches that do not depend
 * on the number of decode workers, the prefetch depth or the order in
 * which they are asked for.
 *
 * Usage: test_stream GENERATED_DIR SPOOL_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_example.h"
#include "rt_stream.h"
#include "rtrain/rt_error.h"

#include "../lib/rt_check.h"

static const char *gen_dir, *spool_dir;

static uint8_t *slurp(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", gen_dir, name);
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static rt_example_spec num_spec(rt_storage st)
{
    rt_example_spec s;
    memset(&s, 0, sizeof s);
    s.n = 2;
    s.f[0] = (rt_feat_spec){.key = "x", .kind = RT_FEAT_FLOAT, .ndim = 1, .dims = {4}};
    s.f[1] = (rt_feat_spec){.key = "label", .kind = RT_FEAT_INT64, .label = 1};
    s.storage = st;
    return s;
}

static int build(const rt_example_spec *s, const char *name, int threads, int prefetch,
                 rt_dataset **out, char *err, size_t errlen)
{
    size_t n;
    uint8_t *b = slurp(name, &n);
    rt_tfr_shard sh = {.data = b, .len = n, .compression = RT_TFR_NONE};
    rt_dataset *ds = calloc(1, sizeof *ds);
    pthread_mutex_init(&ds->mu, NULL);
    ds->refs = 1;
    /* threads 0: read from a mapping by the caller */
    rt_stream_config sc = {.spool_dir = spool_dir, .threads = threads, .prefetch = prefetch,
                           .map_max = threads ? 0 : UINT64_C(1) << 30};
    int rc = rt_example_build_ex(s, &sh, 1, 1 << 28, &sc, ds, err, errlen);
    free(b);
    if (rc < 0) {
        rt_dataset_release(ds);
        ds = NULL;
    }
    *out = ds;
    return rc;
}

static void test_order(void)
{
    enum { N = 1000 };
    static int64_t a[N], b[N];
    int seen[N];
    const int64_t bufs[] = {1, 2, 10, 100, N, 5 * N};
    for (size_t t = 0; t < sizeof bufs / sizeof bufs[0]; t++) {
        const int64_t buf = bufs[t];
        REQUIRE(rt_stream_order(N, buf, 7, 3, a) == 0);
        REQUIRE(rt_stream_order(N, buf, 7, 3, b) == 0);
        CHECK(!memcmp(a, b, sizeof a)); /* a pure function of (seed, epoch) */
        memset(seen, 0, sizeof seen);
        int perm = 1, window = 1, moved = 0;
        for (int64_t k = 0; k < N; k++) {
            if (a[k] < 0 || a[k] >= N || seen[a[k]]++)
                perm = 0;
            /* the buffer holds records < k + buf when the k-th is drawn */
            if (a[k] >= k + buf)
                window = 0;
            moved += a[k] != k;
        }
        CHECK(perm);
        CHECK(window);
        CHECK(buf == 1 ? moved == 0 : moved > N / 4);
        if (buf > 1) {
            REQUIRE(rt_stream_order(N, buf, 7, 4, b) == 0);
            CHECK(memcmp(a, b, sizeof a) != 0); /* reshuffled each epoch */
            REQUIRE(rt_stream_order(N, buf, 8, 3, b) == 0);
            CHECK(memcmp(a, b, sizeof a) != 0);
        }
    }
    /* a buffer as large as the set: sample 0 lands anywhere */
    int64_t pos_sum = 0;
    for (int e = 0; e < 200; e++) {
        REQUIRE(rt_stream_order(N, N, 1, e, a) == 0);
        for (int64_t k = 0; k < N; k++)
            if (a[k] == 0)
                pos_sum += k;
    }
    CHECK(pos_sum / 200 > N / 4 && pos_sum / 200 < 3 * N / 4);
}

/* All batches of an epoch (RT_EPOCH_EVAL: in order) into x and y. */
static int read_epoch(rt_dataset *ds, const rt_stream_use *u, int64_t epoch, float *x, int32_t *y,
                      char *err, size_t errlen)
{
    const int64_t B = u->batch, per = 4;
    for (int64_t pos = 0; pos * B < ds->n; pos++) {
        int64_t nb = ds->n - pos * B < B ? ds->n - pos * B : B;
        int rc = rt_stream_fill((void *)u, epoch, pos, nb, x + pos * B * per, y + pos * B, NULL, err,
                                errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void test_records(void)
{
    char err[256];
    rt_dataset *m, *s1, *s3;
    rt_example_spec sm = num_spec(RT_STORAGE_MEMORY), ss = num_spec(RT_STORAGE_STREAM);
    REQUIRE(build(&sm, "num.tfrecord", 0, 0, &m, err, sizeof err) == 0);
    REQUIRE(build(&ss, "num.tfrecord", 1, 1, &s1, err, sizeof err) == 0);
    REQUIRE(build(&ss, "num.tfrecord", 3, 2, &s3, err, sizeof err) == 0);
    rt_dataset *smap;
    REQUIRE(build(&ss, "num.tfrecord", 0, 0, &smap, err, sizeof err) == 0);
    CHECK(rt_stream_mapped(smap->stream) && !rt_stream_mapped(s1->stream));
    CHECK(!m->stream && s1->stream && !s1->x && s1->n == 100 && s1->x_ndim == 1 &&
          s1->x_dims[0] == 4 && s1->y_dtype == RT_I32);
    CHECK(!memcmp(s1->y, m->y, 400));
    CHECK(rt_stream_file_bytes(s1->stream) > 0 && rt_stream_threads(s3->stream) == 3);

    float x[400], x3[400];
    int32_t y[100], y3[100];
    rt_stream_use u1 = {.st = s1->stream, .seed = 5, .batch = 16, .shuffle = 1, .y = s1->y,
                        .lab_per = 1};
    rt_stream_use u3 = u1;
    u3.st = s3->stream;
    u3.y = s3->y;
    /* evaluation order is the file's: the in-memory arrays */
    CHECK(read_epoch(s1, &u1, RT_EPOCH_EVAL, x, y, err, sizeof err) == 0);
    CHECK(!memcmp(x, m->x, sizeof x) && !memcmp(y, m->y, sizeof y));
    /* training epochs follow the shuffle buffer's order, the same with 1
     * worker and 1 batch ahead as with 3 workers and 2 */
    int64_t order[100];
    for (int64_t e = 0; e < 3; e++) {
        CHECK(read_epoch(s1, &u1, e, x, y, err, sizeof err) == 0);
        CHECK(read_epoch(s3, &u3, e, x3, y3, err, sizeof err) == 0);
        CHECK(!memcmp(x, x3, sizeof x) && !memcmp(y, y3, sizeof y));
        rt_stream_use um = u1;
        um.st = smap->stream;
        um.y = smap->y;
        CHECK(read_epoch(smap, &um, e, x3, y3, err, sizeof err) == 0);
        CHECK(!memcmp(x, x3, sizeof x) && !memcmp(y, y3, sizeof y));
        REQUIRE(rt_stream_order(100, rt_stream_shuffle_buffer(s1->stream), 5, e, order) == 0);
        int rows_ok = 1;
        for (int k = 0; k < 100; k++)
            if (memcmp(x + k * 4, m->x + order[k] * 4, 16) ||
                y[k] != ((int32_t *)m->y)[order[k]])
                rows_ok = 0;
        CHECK(rows_ok);
    }
    /* asking out of sequence restarts there: batch 3 of epoch 1 again */
    float xb[64];
    int32_t yb[16];
    CHECK(rt_stream_fill(&u1, 1, 3, 16, xb, yb, NULL, err, sizeof err) == 0);
    REQUIRE(rt_stream_order(100, rt_stream_shuffle_buffer(s1->stream), 5, 1, order) == 0);
    CHECK(!memcmp(xb, m->x + order[48] * 4, 16) && yb[0] == ((int32_t *)m->y)[order[48]]);
    /* a smaller last batch, and rows past the set refused */
    CHECK(rt_stream_fill(&u1, 0, 6, 4, xb, yb, NULL, err, sizeof err) == 0);
    CHECK(rt_stream_fill(&u1, 0, 7, 4, xb, yb, NULL, err, sizeof err) == RT_EINVAL);
    CHECK(rt_stream_fill(&u1, 0, 6, 5, xb, yb, NULL, err, sizeof err) == RT_EINVAL);
    rt_dataset_release(m);
    rt_dataset_release(s1);
    rt_dataset_release(s3);
    rt_dataset_release(smap);
}

static void test_bad(void)
{
    /* the same messages and counts as in memory */
    const char *files[] = {"bad_datacrc.tfrecord", "bad_type.tfrecord", "bad_truncated.tfrecord",
                           "bad_missing.tfrecord", "bad_count.tfrecord"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char em[256] = "", es[256] = "";
        rt_dataset *m, *s;
        rt_example_spec sm = num_spec(RT_STORAGE_MEMORY), ss = num_spec(RT_STORAGE_STREAM);
        int rm = build(&sm, files[i], 2, 0, &m, em, sizeof em);
        int rs = build(&ss, files[i], 2, 0, &s, es, sizeof es);
        CHECK(rm < 0 && rm == rs && !strcmp(em, es));
        if (strcmp(em, es))
            fprintf(stderr, "  %s: '%s' vs '%s'\n", files[i], em, es);
        sm.skip_bad = ss.skip_bad = 1;
        rm = build(&sm, files[i], 2, 0, &m, em, sizeof em);
        rs = build(&ss, files[i], 2, 0, &s, es, sizeof es);
        CHECK(rm == 0 && rs == 0);
        if (rm == 0 && rs == 0) {
            CHECK(m->n == s->n && m->skipped == s->skipped && s->skipped >= 1 &&
                  !strcmp(m->skip_msg, s->skip_msg) && !memcmp(m->y, s->y, (size_t)m->n * 4));
            float x[400];
            int32_t y[100];
            rt_stream_use u = {.st = s->stream, .batch = 10, .y = s->y, .lab_per = 1};
            CHECK(read_epoch(s, &u, RT_EPOCH_EVAL, x, y, es, sizeof es) == 0);
            CHECK(!memcmp(x, m->x, sizeof(float) * (size_t)m->n * 4));
        }
        rt_dataset_release(m);
        rt_dataset_release(s);
    }
    /* a spool dir that does not exist is named */
    char err[256];
    rt_dataset *s;
    rt_example_spec ss = num_spec(RT_STORAGE_STREAM);
    const char *keep = spool_dir;
    spool_dir = "/nonexistent/spool";
    CHECK(build(&ss, "num.tfrecord", 1, 1, &s, err, sizeof err) == RT_EIO);
    CHECK(strstr(err, "spool dir /nonexistent/spool") != NULL);
    spool_dir = keep;
    /* --max-spool-bytes counts every stream's file, and what a released
     * dataset held is given back */
    {
        size_t n;
        uint8_t *b = slurp("num.tfrecord", &n);
        rt_tfr_shard sh = {.data = b, .len = n};
        rt_dataset *ds[3];
        uint64_t one = 0;
        for (int k = 0; k < 3; k++) {
            ds[k] = calloc(1, sizeof *ds[k]);
            pthread_mutex_init(&ds[k]->mu, NULL);
            ds[k]->refs = 1;
            rt_stream_config sc = {.spool_dir = spool_dir,
                                   .max_spool_bytes = one ? 2 * one : (uint64_t)n};
            int rc = rt_example_build_ex(&ss, &sh, 1, 1 << 28, &sc, ds[k], err, sizeof err);
            if (k == 0) {
                CHECK(rc == 0);
                one = rt_stream_file_bytes(ds[0]->stream);
            } else if (k == 1) {
                CHECK(rc == 0);
            } else {
                CHECK(rc == RT_ETOOBIG && strstr(err, "over --max-spool-bytes") != NULL);
            }
        }
        rt_dataset_release(ds[1]);
        rt_dataset *again = calloc(1, sizeof *again);
        pthread_mutex_init(&again->mu, NULL);
        again->refs = 1;
        rt_stream_config sc = {.spool_dir = spool_dir, .max_spool_bytes = 2 * one};
        CHECK(rt_example_build_ex(&ss, &sh, 1, 1 << 28, &sc, again, err, sizeof err) == 0);
        rt_dataset_release(again);
        rt_dataset_release(ds[0]);
        rt_dataset_release(ds[2]);
        free(b);
    }
    /* AUTO streams past the threshold only */
    rt_example_spec sa = num_spec(RT_STORAGE_AUTO);
    size_t n;
    uint8_t *b = slurp("num.tfrecord", &n);
    rt_tfr_shard sh = {.data = b, .len = n};
    for (int k = 0; k < 2; k++) {
        rt_dataset *ds = calloc(1, sizeof *ds);
        pthread_mutex_init(&ds->mu, NULL);
        ds->refs = 1;
        /* 100 records decode to 2000 bytes */
        rt_stream_config sc = {.spool_dir = spool_dir, .stream_above = k ? 1999 : 2000};
        CHECK(rt_example_build_ex(&sa, &sh, 1, 1 << 28, &sc, ds, err, sizeof err) == 0);
        CHECK(!!ds->stream == k);
        rt_dataset_release(ds);
    }
    free(b);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s GENERATED_DIR SPOOL_DIR\n", argv[0]);
        return 2;
    }
    gen_dir = argv[1];
    spool_dir = argv[2];
    test_order();
    test_records();
    test_bad();
    if (failures) {
        fprintf(stderr, "test_stream: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_stream: ok\n");
    return 0;
}
