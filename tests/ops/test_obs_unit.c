/* test_obs_unit.c - JSON string escaping of log fields and the Prometheus
 * rendering of the metrics registry, without a daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_log.h"
#include "rt_metrics.h"

/* every check says what it found (CHECKF) */
#include "../lib/rt_check.h"

static const char *esc(const char *s, size_t cap)
{
    static char buf[256];
    size_t len = 0;
    rt_log_json_str(buf, cap, &len, s);
    CHECKF(len == strlen(buf), "length %zu vs strlen %zu", len, strlen(buf));
    return buf;
}

static void test_escape(void)
{
    CHECKF(!strcmp(esc("plain", 256), "\"plain\""), "%s", esc("plain", 256));
    CHECKF(!strcmp(esc("a\"b\\c", 256), "\"a\\\"b\\\\c\""), "%s", esc("a\"b\\c", 256));
    CHECKF(!strcmp(esc("l1\nl2\r\t", 256), "\"l1\\nl2\\r\\t\""), "%s", esc("l1\nl2\r\t", 256));
    CHECKF(!strcmp(esc("\x01\x1f\x7f", 256), "\"\\u0001\\u001f\\u007f\""), "%s",
          esc("\x01\x1f\x7f", 256));
    /* Valid UTF-8 passes through: e-acute, a CJK character, an emoji. */
    CHECKF(!strcmp(esc("\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", 256),
                  "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\""), "utf-8 kept");
    /* Not UTF-8: a stray byte, a cut sequence, an overlong '/', a surrogate. */
    CHECKF(!strcmp(esc("a\xff" "b", 256), "\"a\\ufffdb\""), "%s", esc("a\xff" "b", 256));
    CHECKF(!strcmp(esc("\xe4\xb8", 256), "\"\\ufffd\\ufffd\""), "%s", esc("\xe4\xb8", 256));
    CHECKF(!strcmp(esc("\xc0\xaf", 256), "\"\\ufffd\\ufffd\""), "%s", esc("\xc0\xaf", 256));
    CHECKF(!strcmp(esc("\xed\xa0\x80", 256), "\"\\ufffd\\ufffd\\ufffd\""), "%s",
          esc("\xed\xa0\x80", 256));
    CHECKF(!strcmp(esc(NULL, 256), "\"\""), "NULL is empty");
    /* Truncation never splits an escape or a character and keeps the
     * closing quote: every capacity from 3 up gives valid JSON. */
    const char *hard = "ab\"\xe4\xb8\xad\n\x01z";
    for (size_t cap = 3; cap < 40; cap++) {
        const char *r = esc(hard, cap);
        size_t n = strlen(r);
        CHECKF(n + 1 <= cap && r[0] == '"' && r[n - 1] == '"' && n >= 2,
              "cap %zu gave %s", cap, r);
        /* The kept prefix is a prefix of the full escape. */
        char full[64];
        snprintf(full, sizeof full, "%s", esc(hard, 256));
        r = esc(hard, cap);
        CHECKF(strncmp(full, r, n - 1) == 0, "cap %zu: %s is not a prefix of %s", cap, r, full);
    }
    size_t len = 0;
    char tiny[2] = "x";
    rt_log_json_str(tiny, sizeof tiny, &len, "abc");
    CHECKF(len == 0, "no room: nothing written");
}

static double value(const char *page, const char *series)
{
    const char *p = page;
    size_t n = strlen(series);
    while ((p = strstr(p, series)) != NULL) {
        if ((p == page || p[-1] == '\n') && p[n] == ' ')
            return atof(p + n + 1);
        p += n;
    }
    return -1;
}

static void test_render(void)
{
    static const char *const names[] = {"/t.S/A", "/t.S/B"};
    rt_metrics_init(names, 2);
    rt_obs_timing t;
    memset(&t, 0, sizeof t);
    t.arrival_ns = 1000000000ull;
    t.queue_ns = 3000;      /* 3 us: in le=5e-06 */
    t.execute_ns = 2000000; /* 2 ms: in le=0.0025 */
    for (int i = 0; i < 3; i++)
        rt_metrics_call(0, 0, &t, t.arrival_ns + 40000); /* 40 us total */
    rt_metrics_call(0, 5, &t, t.arrival_ns + 70000000000ull); /* 70 s: +Inf only */
    rt_metrics_call(7, 0, &t, 0);  /* out of range: ignored */
    rt_metrics_call(1, 17, &t, 0); /* out of range: ignored */
    rt_metrics_steps(10, 200);
    char *page;
    size_t len;
    CHECKF(rt_metrics_render(NULL, NULL, &page, &len) == 0, "render");
    CHECKF(strlen(page) == len, "length");
    CHECKF(value(page, "rtrain_calls_total{method=\"/t.S/A\",code=\"OK\"}") == 3, "A OK = 3");
    CHECKF(value(page, "rtrain_calls_total{method=\"/t.S/A\",code=\"NOT_FOUND\"}") == 1,
          "A NOT_FOUND = 1");
    CHECKF(value(page, "rtrain_calls_total{method=\"/t.S/B\",code=\"OK\"}") == 0, "B OK = 0");
    CHECKF(value(page, "rtrain_call_duration_seconds_bucket{method=\"/t.S/A\",le=\"2.5e-05\"}")
              == 0, "A under 25 us: 0");
    CHECKF(value(page, "rtrain_call_duration_seconds_bucket{method=\"/t.S/A\",le=\"5e-05\"}")
              == 3, "A under 50 us: 3 (cumulative)");
    CHECKF(value(page, "rtrain_call_duration_seconds_bucket{method=\"/t.S/A\",le=\"60\"}") == 3,
          "A under 60 s: 3");
    CHECKF(value(page, "rtrain_call_duration_seconds_bucket{method=\"/t.S/A\",le=\"+Inf\"}") == 4,
          "A +Inf: 4");
    CHECKF(value(page, "rtrain_call_duration_seconds_count{method=\"/t.S/A\"}") == 4, "count 4");
    double sum = value(page, "rtrain_call_duration_seconds_sum{method=\"/t.S/A\"}");
    CHECKF(sum > 70.000119 && sum < 70.000121, "sum %.9f", sum);
    CHECKF(strstr(page, "rtrain_call_duration_seconds_count{method=\"/t.S/B\"}") == NULL,
          "no histogram for a method never called");
    CHECKF(value(page, "rtrain_phase_duration_seconds_bucket{phase=\"queue\",le=\"2.5e-06\"}")
              == 0, "queue under 2.5 us: 0");
    CHECKF(value(page, "rtrain_phase_duration_seconds_bucket{phase=\"queue\",le=\"5e-06\"}") == 4,
          "queue under 5 us: 4");
    CHECKF(value(page, "rtrain_phase_duration_seconds_bucket{phase=\"execute\",le=\"0.0025\"}")
              == 4, "execute under 2.5 ms: 4");
    CHECKF(value(page, "rtrain_phase_duration_seconds_bucket{phase=\"compile\",le=\"1e-06\"}")
              == 4, "compile 0 counts in the first bucket");
    CHECKF(value(page, "rtrain_steps_total") == 10, "steps");
    CHECKF(value(page, "rtrain_samples_total") == 200, "samples");
    CHECKF(value(page, "rtrain_scrapes_total") == 1, "scrapes");
    /* Before any checkpoint: zeros, and the histogram is there empty. */
    CHECKF(value(page, "rtrain_checkpoints_total{result=\"ok\"}") == 0, "no checkpoints yet");
    CHECKF(value(page, "rtrain_checkpoint_duration_seconds_count") == 0, "empty histogram");
    CHECKF(value(page, "rtrain_checkpoint_last_success_timestamp_seconds") == 0, "never");
    free(page);

    /* Checkpoints (the hooks durable state calls) and upload bytes. */
    rt_metrics_checkpoint(3000000, 4096, 1);   /* 3 ms: in le=0.005 */
    rt_metrics_checkpoint(20000000, 8192, 1);  /* 20 ms: in le=0.025 */
    rt_metrics_checkpoint(700000, 999, 0);     /* failed: its bytes are not counted */
    rt_metrics_upload(1000, 0);
    rt_metrics_upload(300, 700);
    CHECKF(rt_metrics_render(NULL, NULL, &page, &len) == 0, "render 2");
    CHECKF(value(page, "rtrain_checkpoints_total{result=\"ok\"}") == 2, "2 ok");
    CHECKF(value(page, "rtrain_checkpoints_total{result=\"failed\"}") == 1, "1 failed");
    CHECKF(value(page, "rtrain_checkpoint_bytes_total") == 12288, "bytes of the ok ones");
    CHECKF(value(page, "rtrain_checkpoint_duration_seconds_bucket{le=\"0.0005\"}") == 0,
          "none under 0.5 ms");
    CHECKF(value(page, "rtrain_checkpoint_duration_seconds_bucket{le=\"0.001\"}") == 1,
          "the failed one under 1 ms");
    CHECKF(value(page, "rtrain_checkpoint_duration_seconds_bucket{le=\"0.005\"}") == 2,
          "2 under 5 ms (cumulative)");
    CHECKF(value(page, "rtrain_checkpoint_duration_seconds_bucket{le=\"0.025\"}") == 3,
          "3 under 25 ms");
    CHECKF(value(page, "rtrain_checkpoint_duration_seconds_bucket{le=\"+Inf\"}") == 3, "+Inf 3");
    CHECKF(value(page, "rtrain_checkpoint_duration_seconds_count") == 3, "count 3");
    sum = value(page, "rtrain_checkpoint_duration_seconds_sum");
    CHECKF(sum > 0.0236999 && sum < 0.0237001, "sum %.9f", sum);
    CHECKF(value(page, "rtrain_checkpoint_last_success_timestamp_seconds") > 1.7e9,
          "last success is a wall-clock time");
    CHECKF(strstr(page, "# TYPE rtrain_checkpoint_duration_seconds histogram\n") != NULL,
          "histogram TYPE line");
    CHECKF(value(page, "rtrain_upload_bytes_total") == 1300, "upload bytes");
    CHECKF(value(page, "rtrain_upload_resumed_bytes_total") == 700, "resumed bytes");
    free(page);
}

int main(void)
{
    test_escape();
    test_render();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
