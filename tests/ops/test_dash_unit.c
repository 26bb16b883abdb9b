/* test_dash_unit.c - the dashboard's registry (server/obs/rt_dash.h) without
 * a daemon: what a principal's state holds, the Ping floor and K sweep,
 * a fit's points past its ring, fit slots, and JSON that parses (json-c,
 * a parser rtrain did not write) whatever bytes a name holds. */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_check.h"
#include "rt_dash.h"

/* The registry for principal, parsed. */
static json_object *state(const char *principal)
{
    rt_dash_buf b = {0};
    rt_dash_printf(&b, "{");
    rt_dash_registry_json(principal, &b);
    rt_dash_printf(&b, "}");
    CHECKF(!b.oom, "render ran out of memory");
    json_object *o = json_tokener_parse(b.p);
    CHECKF(o != NULL, "not JSON: %.200s", b.p);
    free(b.p);
    return o;
}

static json_object *get(json_object *o, const char *k)
{
    json_object *v = NULL;
    json_object_object_get_ex(o, k, &v);
    return v;
}

static Rtrain__V1__Timings timings(uint64_t total)
{
    Rtrain__V1__Timings t = RTRAIN__V1__TIMINGS__INIT;
    t.queue_ns = total / 10;
    t.decode_ns = total / 10;
    t.execute_ns = total / 2;
    t.encode_ns = total / 10;
    t.other_ns = total - t.queue_ns - t.decode_ns - t.execute_ns - t.encode_ns;
    t.total_ns = total;
    return t;
}

static void test_calls(void)
{
    static const uint64_t ping[] = {3000, 1000, 2000, 9000, 5000}; /* median 3000 */
    for (int i = 0; i < 5; i++) {
        Rtrain__V1__Timings t = timings(ping[i]);
        rt_dash_call("/rtrain.v1.Trainer/Ping", "alice", NULL, 0, 0, &t);
    }
    for (int i = 0; i < 3; i++) {
        Rtrain__V1__Timings t = timings(40000 + 1000 * (uint64_t)i);
        rt_dash_call("/rtrain.v1.Trainer/RunSteps", "alice", "s-0123456789abcdef", 0, 1, &t);
        t = timings(90000 + 1000 * (uint64_t)i);
        rt_dash_call("/rtrain.v1.Trainer/RunSteps", "alice", "s-0123456789abcdef", 0, 10, &t);
    }
    Rtrain__V1__Timings t = timings(777);
    rt_dash_call("/rtrain.v1.Trainer/Ping", "bob", NULL, 0, 0, &t);
    rt_dash_call("/rtrain.v1.Trainer/RunSteps", "bob", "s-feedfeedfeedfeed", 5, 1, NULL);

    json_object *a = state("alice"), *b = state("bob"), *all = state(NULL);
    json_object *ca = get(a, "calls"), *cb = get(b, "calls");
    CHECKF(json_object_array_length(ca) == 11, "alice has %zu calls", json_object_array_length(ca));
    CHECKF(json_object_array_length(cb) == 2, "bob has %zu calls", json_object_array_length(cb));
    CHECKF(json_object_array_length(get(all, "calls")) == 13, "everyone's: 13");
    for (size_t i = 0; i < json_object_array_length(ca); i++) {
        json_object *c = json_object_array_get_idx(ca, i);
        CHECKF(!strcmp(json_object_get_string(get(c, "principal")), "alice"), "a call of another");
    }
    /* ids are shown cut: "s-" and 8 hex digits */
    const char *sess = json_object_get_string(get(json_object_array_get_idx(ca, 5), "session"));
    CHECKF(sess && !strcmp(sess, "s-01234567"), "session shown as %s", sess ? sess : "null");
    json_object *t0 = get(json_object_array_get_idx(ca, 0), "timings");
    uint64_t sum = 0;
    static const char *parts[] = {"queue_ns", "decode_ns", "compile_ns", "execute_ns", "encode_ns",
                                  "other_ns"};
    for (int i = 0; i < 6; i++)
        sum += (uint64_t)json_object_get_int64(get(t0, parts[i]));
    CHECKF(sum == 3000 && json_object_get_int64(get(t0, "total_ns")) == 3000,
          "parts %llu of total 3000", (unsigned long long)sum);
    CHECKF(!strcmp(json_object_get_string(get(json_object_array_get_idx(ca, 0), "method")), "Ping"),
          "method name without its service");
    /* a failed call without timings: none shown, not zeros */
    CHECKF(get(json_object_array_get_idx(cb, 1), "timings") == NULL, "bob's failed call has timings");
    CHECKF(json_object_get_int(get(json_object_array_get_idx(cb, 1), "code")) == 5, "code 5");

    json_object *pf = get(a, "ping_floor");
    CHECKF(json_object_get_int64(get(pf, "median_ns")) == 3000, "alice's Ping floor %lld",
          (long long)json_object_get_int64(get(pf, "median_ns")));
    CHECKF(json_object_get_int64(get(get(b, "ping_floor"), "median_ns")) == 777, "bob's floor");
    json_object *ks = get(a, "k_sweep");
    CHECKF(json_object_array_length(ks) == 2, "two K");
    json_object *k1 = json_object_array_get_idx(ks, 0), *k10 = json_object_array_get_idx(ks, 1);
    CHECKF(json_object_get_int(get(k1, "k")) == 1 && json_object_get_int64(get(k1, "median_ns")) == 41000 &&
              json_object_get_int(get(k1, "calls")) == 3, "K=1");
    CHECKF(json_object_get_int(get(k10, "k")) == 10 && json_object_get_int64(get(k10, "median_ns")) == 91000,
          "K=10");
    /* bob's failed RunSteps has no timings: no K sweep */
    CHECKF(json_object_array_length(get(b, "k_sweep")) == 0, "bob's sweep is empty");
    json_object_put(a);
    json_object_put(b);
    json_object_put(all);
}

static void test_fit_ring(void)
{
    int f = rt_dash_fit_begin("alice", "s-0123456789", "p-0123456789", 2000);
    CHECKF(f > 0, "no fit handle");
    for (int e = 1; e <= 2000; e++) {
        rt_dash_point p = {.epoch = e, .step = 10 * e, .loss = 1.0 / e, .acc = NAN,
                           .val_loss = NAN, .val_acc = NAN};
        rt_dash_fit_epoch(f, &p);
    }
    json_object *a = state("alice");
    json_object *fit = json_object_array_get_idx(get(a, "fits"), 0);
    CHECKF(json_object_get_boolean(get(fit, "running")), "running before its end");
    json_object *pts = get(fit, "points");
    size_t n = json_object_array_length(pts);
    CHECKF(n == 1024, "%zu points kept", n);
    int contiguous = 1, bad = -1;
    for (size_t i = 0; i < n; i++) {
        if (!contiguous && bad < 0)
            bad = (int)i - 1;
        json_object *p = json_object_array_get_idx(pts, i);
        contiguous &= json_object_get_int(get(p, "epoch")) == (int)(2000 - n + 1 + i);
        contiguous &= fabs(json_object_get_double(get(p, "loss")) - 1.0 / (2000 - n + 1 + i)) < 1e-12;
        json_object *acc = p;
        contiguous &= json_object_object_get_ex(p, "acc", &acc) && acc == NULL; /* null */
    }
    CHECKF(contiguous, "the last 1024 epochs, in order, NaN as null (point %d: %s)", bad,
          bad >= 0 ? json_object_to_json_string(json_object_array_get_idx(pts, (size_t)bad)) : "");
    json_object_put(a);
    rt_dash_fit_end(f, 1);
    a = state("alice");
    fit = json_object_array_get_idx(get(a, "fits"), 0);
    CHECKF(!json_object_get_boolean(get(fit, "running")) && json_object_get_int(get(fit, "code")) == 1,
          "ended with CANCELLED");
    json_object *b = state("bob");
    CHECKF(json_object_array_length(get(b, "fits")) == 0, "bob sees alice's fit");
    json_object_put(a);
    json_object_put(b);
}

static void test_fit_slots(void)
{
    /* 16 slots: running fits are never replaced, finished ones are */
    int h[16];
    for (int i = 0; i < 16; i++)
        h[i] = rt_dash_fit_begin("carol", "s-x", "p-x", 1);
    int all = 1;
    for (int i = 0; i < 16; i++)
        all &= h[i] > 0;
    CHECKF(all, "16 fits have slots (one reused from a finished fit)");
    CHECKF(rt_dash_fit_begin("carol", "s-x", "p-x", 1) == 0, "a 17th running fit has none");
    rt_dash_fit_end(h[3], 0);
    int again = rt_dash_fit_begin("carol", "s-y", "p-y", 1);
    CHECKF(again > 0, "a finished fit's slot is reused");
    json_object *c = state("carol");
    CHECKF(json_object_array_length(get(c, "fits")) == 16, "carol's 16 fits");
    /* running first, newest first */
    json_object *first = json_object_array_get_idx(get(c, "fits"), 0);
    CHECKF(json_object_get_int(get(first, "id")) == again, "the newest running fit first");
    json_object_put(c);
    for (int i = 0; i < 16; i++)
        rt_dash_fit_end(h[i], 0);
    rt_dash_fit_end(again, 0);
}

static void test_strings(void)
{
    rt_dash_buf b = {0};
    rt_dash_printf(&b, "[");
    rt_dash_str(&b, "q\"b\\s\n<script>\xff\xe4\xb8");
    rt_dash_printf(&b, ",");
    rt_dash_num(&b, NAN);
    rt_dash_printf(&b, ",");
    rt_dash_num(&b, 0.25);
    rt_dash_printf(&b, "]");
    json_object *o = json_tokener_parse(b.p);
    CHECKF(o != NULL, "not JSON: %s", b.p);
    if (o) {
        const char *s = json_object_get_string(json_object_array_get_idx(o, 0));
        CHECKF(!strcmp(s, "q\"b\\s\n<script>\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"),
              "round trip: %s", s);
            CHECKF(json_object_array_get_idx(o, 1) == NULL, "NaN is null");
        CHECKF(json_object_get_double(json_object_array_get_idx(o, 2)) == 0.25, "0.25");
        json_object_put(o);
    }
    free(b.p);
}

int main(void)
{
    test_calls();
    test_fit_ring();
    test_fit_slots();
    test_strings();
    printf("%d failed checks\n", failures);
    return failures ? 1 : 0;
}
