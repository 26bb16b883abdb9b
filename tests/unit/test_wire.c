/* test_wire.c - the response framing the daemon and the client share
 * (common/rt_wire.c): a body, then the Timings as field 15 framed with its
 * real length. A Timings with many more fields than today's eight (here as
 * fields the reader does not know, as a newer daemon would send them) still
 * round-trips: the length is a full varint, not one byte of slack. */
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "itest_unit.h"
#include "rt_wire.h"

/* A Timings with the eight known fields plus n extra fixed64 fields
 * numbered 100.. (unknown to this reader). */
static void fill_timings(Rtrain__V1__Timings *t, int n, ProtobufCMessageUnknownField *u,
                         uint64_t *vals)
{
    rtrain__v1__timings__init(t);
    t->queue_ns = 1;
    t->decode_ns = 2;
    t->compile_ns = 3;
    t->execute_ns = 4;
    t->encode_ns = 5;
    t->total_ns = 1000000007ull;
    t->other_ns = 999999992ull;
    t->cache_hit = 1;
    for (int i = 0; i < n; i++) {
        vals[i] = 0x0123456789abcdefull + (uint64_t)i;
        u[i].tag = 100u + (uint32_t)i;
        u[i].wire_type = PROTOBUF_C_WIRE_TYPE_64BIT;
        u[i].len = 8;
        u[i].data = (uint8_t *)&vals[i];
    }
    t->base.n_unknown_fields = (unsigned)n;
    t->base.unknown_fields = n ? u : NULL;
}

static void round_trip(int extra)
{
    ProtobufCMessageUnknownField *u = calloc((size_t)extra + 1, sizeof *u);
    uint64_t *vals = calloc((size_t)extra + 1, sizeof *vals);
    Rtrain__V1__Timings t;
    fill_timings(&t, extra, u, vals);
    size_t tlen = rtrain__v1__timings__get_packed_size(&t);

    uint8_t pay[300];
    for (size_t i = 0; i < sizeof pay; i++)
        pay[i] = (uint8_t)(i * 7);
    Rtrain__V1__PingResponse r = RTRAIN__V1__PING_RESPONSE__INIT;
    r.payload.data = pay;
    r.payload.len = sizeof pay;
    size_t body = rtrain__v1__ping_response__get_packed_size(&r);

    grpc_byte_buffer *bb = rt_wire_pack(&r.base, &t.base);
    size_t vlen = tlen < 128 ? 1 : tlen < 16384 ? 2 : 3;
    CHECK(rt_wire_length(bb) == body + 1 + vlen + tlen, "%d extra: %zu bytes, want %zu", extra,
          rt_wire_length(bb), body + 1 + vlen + tlen);

    Rtrain__V1__PingResponse *p = (Rtrain__V1__PingResponse *)rt_wire_unpack(
        bb, &rtrain__v1__ping_response__descriptor, NULL);
    CHECK(p != NULL, "%d extra fields: unpack failed (%zu-byte Timings)", extra, tlen);
    if (p) {
        CHECK(p->payload.len == sizeof pay && !memcmp(p->payload.data, pay, sizeof pay),
              "payload");
        const Rtrain__V1__Timings *g = p->timings;
        CHECK(g && g->queue_ns == 1 && g->decode_ns == 2 && g->compile_ns == 3 &&
                  g->execute_ns == 4 && g->encode_ns == 5 && g->total_ns == 1000000007ull &&
                  g->other_ns == 999999992ull && g->cache_hit,
              "%d extra: known fields", extra);
        CHECK(g && (int)g->base.n_unknown_fields == extra, "%d extra: %u came back", extra,
              g ? g->base.n_unknown_fields : 0);
        for (int i = 0; g && i < (int)g->base.n_unknown_fields && i < extra; i++) {
            const ProtobufCMessageUnknownField *f = &g->base.unknown_fields[i];
            uint64_t v;
            memcpy(&v, f->data, 8);
            CHECK(f->tag == 100u + (uint32_t)i && f->len == 8 && v == vals[i],
                  "extra field %d: tag %u value %llx", i, f->tag, (unsigned long long)v);
        }
        protobuf_c_message_free_unpacked(&p->base, NULL);
    }
    grpc_byte_buffer_destroy(bb);
    free(u);
    free(vals);
}

static void test_timings_today(void) { round_trip(0); }
/* 12 extra fields: past the 96 bytes the daemon once reserved. */
static void test_timings_past_old_slack(void) { round_trip(12); }
/* 40 extra fields: the length needs a two-byte varint. */
static void test_timings_two_byte_length(void) { round_trip(40); }
/* 2000 extra fields: a three-byte varint. */
static void test_timings_three_byte_length(void) { round_trip(2000); }

static void test_body_only(void)
{
    Rtrain__V1__PingResponse r = RTRAIN__V1__PING_RESPONSE__INIT;
    uint8_t pay[3] = {1, 2, 3};
    r.payload.data = pay;
    r.payload.len = 3;
    grpc_byte_buffer *bb = rt_wire_join(rt_wire_body(&r.base), NULL);
    CHECK(rt_wire_length(bb) == rtrain__v1__ping_response__get_packed_size(&r), "length");
    Rtrain__V1__PingResponse *p = (Rtrain__V1__PingResponse *)rt_wire_unpack(
        bb, &rtrain__v1__ping_response__descriptor, NULL);
    CHECK(p && p->payload.len == 3 && !p->timings, "body only");
    if (p)
        protobuf_c_message_free_unpacked(&p->base, NULL);
    grpc_byte_buffer_destroy(bb);
}

int main(void)
{
    grpc_init();
    RUN(test_timings_today);
    RUN(test_timings_past_old_slack);
    RUN(test_timings_two_byte_length);
    RUN(test_timings_three_byte_length);
    RUN(test_body_only);
    grpc_shutdown();
    return itest_summary();
}
