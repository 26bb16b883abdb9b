/* test_rpc.c - the RPC layer against a real rtraind: Ping, GetInfo,
 * sessions, timings, and the bad-input list that needs no model: garbage
 * bytes to every method, unknown ids, unknown method, over-limit message,
 * session limit. After each error the daemon still answers. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "rt_service.h"
#include "rt_version.h"

/* Every method of the .proto's service, streams included, with its request
 * type: from protoc-c's service descriptor, not a list kept by hand. */
static const char *method_name(int i) { return rt_service_method_name(i); }
static const char *req_name(int i) { return rt_service()->methods[i].input->short_name; }

static int ping_ok(itest_conn *c)
{
    Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
    itest_res r;
    int st = itest_unary(c, "Ping", &q.base, NULL, NULL, &r);
    itest_res_free(&r);
    return st == 0;
}

static void check_timings(const Rtrain__V1__Timings *t, uint64_t rtt, const char *what)
{
    CHECK(t != NULL, "%s: response has no timings", what);
    if (!t)
        return;
    uint64_t sum = t->queue_ns + t->decode_ns + t->compile_ns + t->execute_ns + t->encode_ns +
                   t->other_ns;
    CHECK(sum == t->total_ns, "%s: parts %llu != total %llu", what, (unsigned long long)sum,
          (unsigned long long)t->total_ns);
    CHECK(t->total_ns > 0, "%s: total is 0", what);
    CHECK(t->total_ns <= rtt, "%s: server total %llu > client round trip %llu", what,
          (unsigned long long)t->total_ns, (unsigned long long)rtt);
}

static void test_ping(itest_conn *c)
{
    uint8_t pay[5] = {1, 2, 3, 4, 5};
    size_t sizes[] = {0, 7, 65536, 900000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
        q.payload.data = pay;
        q.payload.len = sizeof pay;
        q.response_bytes = (uint32_t)sizes[i];
        Rtrain__V1__PingResponse *p = NULL;
        itest_res r;
        itest_unary(c, "Ping", &q.base, &rtrain__v1__ping_response__descriptor,
                    (ProtobufCMessage **)&p, &r);
        CHECK(r.status == 0 && p, "ping %zu: status %d %s", sizes[i], r.status, r.details);
        if (p) {
            CHECK(p->payload.len == sizes[i], "ping payload %zu != %zu", p->payload.len, sizes[i]);
            int same = 1;
            for (size_t k = 0; k < p->payload.len; k++)
                same &= p->payload.data[k] == pay[k % 5];
            CHECK(same, "ping payload does not echo the request bytes");
            check_timings(p->timings, r.rtt_ns, "Ping");
            protobuf_c_message_free_unpacked(&p->base, NULL);
        }
        itest_res_free(&r);
    }
}

static void test_get_info(itest_conn *c)
{
    Rtrain__V1__InfoRequest q = RTRAIN__V1__INFO_REQUEST__INIT;
    Rtrain__V1__InfoResponse *p = NULL;
    itest_res r;
    itest_unary(c, "GetInfo", &q.base, &rtrain__v1__info_response__descriptor,
                (ProtobufCMessage **)&p, &r);
    CHECK(r.status == 0 && p, "GetInfo: %d %s", r.status, r.details);
    if (p) {
        CHECK(strcmp(p->version, RT_VERSION_STRING) == 0, "version %s", p->version);
        CHECK(p->engine_version >= 1, "engine version %u", p->engine_version);
        CHECK(p->n_devices == 1 && !strcmp(p->devices[0]->kind, "cpu") &&
                  p->devices[0]->memory_bytes > (1ull << 28) && p->devices[0]->cores >= 1,
              "device info");
        /* the daemon's backend (docs/backends.md): the native one with its
         * oneDNN version, or the reference one (RT_BACKEND, -DRT_NATIVE=OFF) */
        CHECK(p->devices[0] && (strncmp(p->devices[0]->backend, "cpu+onednn-", 11) == 0 ||
                                strcmp(p->devices[0]->backend, "ref") == 0),
              "backend %s", p->devices[0]->backend);
        CHECK(p->limits && p->limits->max_message_bytes == (1 << 20) &&
                  p->limits->max_sessions == 4,
              "limits reflect the flags");
        int dense = 0, relu = 0;
        for (size_t i = 0; i < p->n_ops; i++) {
            dense |= !strcmp(p->ops[i], "Dense");
            relu |= !strcmp(p->ops[i], "Relu");
        }
        CHECK(dense && relu, "ops list lacks Dense/Relu (%zu ops)", p->n_ops);
        int npy = 0;
        for (size_t i = 0; i < p->n_formats; i++)
            npy |= !strcmp(p->formats[i], "npy");
        CHECK(npy, "formats lack npy");
        CHECK(p->n_losses >= 3 && p->n_optimizers >= 2, "losses %zu optimizers %zu",
              p->n_losses, p->n_optimizers);
        check_timings(p->timings, r.rtt_ns, "GetInfo");
        protobuf_c_message_free_unpacked(&p->base, NULL);
    }
    itest_res_free(&r);
}

static void test_sessions(itest_conn *c)
{
    char ids[4][40];
    for (int i = 0; i < 4; i++)
        CHECK(itest_session(c, "t", ids[i]) == 0 && !strncmp(ids[i], "s-", 2), "session %d", i);
    CHECK(strcmp(ids[0], ids[1]) != 0, "session ids repeat");
    char extra[40];
    int st = itest_session(c, "over", extra);
    CHECK(st == 8, "5th session with --max-sessions 4: status %d (want RESOURCE_EXHAUSTED)", st);
    for (int i = 0; i < 4; i++) {
        Rtrain__V1__CloseSessionRequest q = RTRAIN__V1__CLOSE_SESSION_REQUEST__INIT;
        q.session_id = ids[i];
        itest_res r;
        itest_unary(c, "CloseSession", &q.base, NULL, NULL, &r);
        CHECK(r.status == 0, "close %s: %d %s", ids[i], r.status, r.details);
        itest_res_free(&r);
    }
    Rtrain__V1__CloseSessionRequest q = RTRAIN__V1__CLOSE_SESSION_REQUEST__INIT;
    q.session_id = ids[0];
    itest_res r;
    itest_unary(c, "CloseSession", &q.base, NULL, NULL, &r);
    CHECK(r.status == 5 && strstr(r.details, ids[0]), "close twice: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    CHECK(itest_session(c, "again", extra) == 0, "a session after closing all");
    q.session_id = extra;
    itest_unary(c, "CloseSession", &q.base, NULL, NULL, &r);
    itest_res_free(&r);
}

static void test_garbage(itest_conn *c)
{
    /* A field-1 tag with a length running past the end: never valid. */
    static const uint8_t junk[] = {0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02};
    for (int i = 0; i < RT_N_METHODS; i++) {
        itest_res r;
        itest_unary_raw(c, method_name(i), junk, sizeof junk, &r);
        char want[64];
        snprintf(want, sizeof want, "malformed %s", req_name(i));
        CHECK(r.status == 3 && strstr(r.details, want), "%s garbage: %d '%s'", method_name(i),
              r.status, r.details);
        CHECK(strlen(r.details) < 300, "details too long");
        itest_res_free(&r);
        CHECK(ping_ok(c), "ping after garbage to %s", method_name(i));
    }
}

static void test_unknown_ids(itest_conn *c)
{
    char sid[40];
    itest_session(c, "ids", sid);
    Rtrain__V1__RunStepsRequest q = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    q.session_id = "s-doesnotexist";
    q.program_id = "p-x";
    q.dataset_id = "d-y";
    q.steps = 1;
    itest_res r;
    itest_unary(c, "RunSteps", &q.base, NULL, NULL, &r);
    CHECK(r.status == 5 && strstr(r.details, "s-doesnotexist"), "unknown session: %d '%s'",
          r.status, r.details);
    itest_res_free(&r);
    q.session_id = sid;
    itest_unary(c, "RunSteps", &q.base, NULL, NULL, &r);
    CHECK(r.status == 5 && strstr(r.details, "p-x"), "unknown program: %d '%s'", r.status,
          r.details);
    itest_res_free(&r);
    Rtrain__V1__GetWeightsRequest g = RTRAIN__V1__GET_WEIGHTS_REQUEST__INIT;
    g.session_id = sid;
    g.program_id = "p-nope";
    itest_unary(c, "GetWeights", &g.base, NULL, NULL, &r);
    CHECK(r.status == 5 && strstr(r.details, "p-nope"), "GetWeights unknown program: %d '%s'",
          r.status, r.details);
    itest_res_free(&r);
    CHECK(ping_ok(c), "ping after unknown ids");
}

static void test_unknown_method(itest_conn *c)
{
    itest_res r;
    itest_unary_raw(c, "/rtrain.v1.Trainer/Frobnicate", "", 0, &r);
    CHECK(r.status == 12 && strstr(r.details, "Frobnicate"), "unknown method: %d '%s'", r.status,
          r.details);
    itest_res_free(&r);
    itest_unary_raw(c, "/other.Service/Ping", "", 0, &r);
    CHECK(r.status == 12, "other service: %d", r.status);
    itest_res_free(&r);
    CHECK(ping_ok(c), "ping after unknown method");
}

static void test_too_big(itest_conn *c)
{
    size_t n = (1 << 20) + 4096;
    uint8_t *big = calloc(1, n);
    Rtrain__V1__PingRequest q = RTRAIN__V1__PING_REQUEST__INIT;
    q.payload.data = big;
    q.payload.len = n;
    itest_res r;
    itest_unary(c, "Ping", &q.base, NULL, NULL, &r);
    CHECK(r.status == 8, "over --max-message-bytes: %d '%s'", r.status, r.details);
    itest_res_free(&r);
    free(big);
    CHECK(ping_ok(c), "ping after an over-limit message");
    /* Asking for a reply over the limit is refused too. */
    Rtrain__V1__PingRequest q2 = RTRAIN__V1__PING_REQUEST__INIT;
    q2.response_bytes = 100u << 20;
    itest_unary(c, "Ping", &q2.base, NULL, NULL, &r);
    CHECK(r.status == 8, "response_bytes over the limit: %d '%s'", r.status, r.details);
    itest_res_free(&r);
}

/* Random and mutated messages to every unary method (a fixed seed, so a
 * failure reproduces): each gets some status, never a crash, and the
 * daemon keeps serving. Mutations of valid messages reach the handlers
 * with odd field values, not just the decoder. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_fuzz_methods(itest_conn *c)
{
    char sid[40];
    itest_session(c, "fuzz", sid);
    /* Valid seeds: a RunSteps, a Compile with a tiny graph, a SetWeights. */
    Rtrain__V1__RunStepsRequest rs = RTRAIN__V1__RUN_STEPS_REQUEST__INIT;
    rs.session_id = sid;
    rs.program_id = "p-0";
    rs.dataset_id = "d-0";
    rs.steps = 3;
    Rtrain__V1__CompileRequest cq = RTRAIN__V1__COMPILE_REQUEST__INIT;
    cq.session_id = sid;
    cq.model_case = RTRAIN__V1__COMPILE_REQUEST__MODEL_KERAS_JSON;
    cq.keras_json = "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": "
                    "\"Dense\", \"config\": {\"name\": \"d\", \"units\": 2, \"batch_input_shape\": [null, 3]}}]}}";
    ProtobufCMessage *seeds[2] = {&rs.base, &cq.base};
    int served = 0;
    for (int round = 0; round < 400; round++) {
        uint8_t buf[512];
        size_t n;
        if (round % 2 == 0) {
            n = rng() % sizeof buf;
            for (size_t i = 0; i < n; i++)
                buf[i] = (uint8_t)rng();
        } else {
            ProtobufCMessage *m = seeds[(round / 2) % 2];
            n = protobuf_c_message_get_packed_size(m);
            if (n > sizeof buf)
                n = sizeof buf;
            uint8_t tmp[4096];
            protobuf_c_message_pack(m, tmp);
            memcpy(buf, tmp, n);
            for (int k = 0; k < 1 + (int)(rng() % 4); k++)
                buf[rng() % n] = (uint8_t)rng();
        }
        const char *method = method_name((int)(rng() % RT_N_METHODS));
        if (round % 2 == 1)
            method = (round / 2) % 2 ? "Compile" : "RunSteps";
        itest_res r;
        itest_unary_raw(c, method, buf, n, &r);
        served += r.status >= 0;
        CHECK(strlen(r.details) < 300, "%s: long details", method);
        itest_res_free(&r);
    }
    CHECK(served == 400, "every fuzzed call got a status (%d)", served);
    CHECK(ping_ok(c), "ping after fuzzing");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RTRAIND\n", argv[0]);
        return 2;
    }
    itest_daemon d;
    const char *extra[] = {"--max-message-bytes", "1048576", "--max-sessions", "4", NULL};
    if (itest_daemon_start(&d, argv[1], extra) < 0) {
        fprintf(stderr, "cannot start %s\n", argv[1]);
        return 1;
    }
    itest_conn *c = itest_connect(d.addr);
    RUN(test_ping, c);
    RUN(test_get_info, c);
    RUN(test_sessions, c);
    RUN(test_garbage, c);
    RUN(test_unknown_ids, c);
    RUN(test_unknown_method, c);
    RUN(test_too_big, c);
    RUN(test_fuzz_methods, c);
    itest_disconnect(c);
    int code = itest_daemon_stop(&d, SIGTERM);
    CHECK(code == 0, "daemon exit code %d after SIGTERM", code);
    return itest_summary();
}
