/*
 * rt_wire.h - the few helpers the daemon and the client library share for
 * moving protobuf-c messages through gRPC core byte buffers, plus a clock.
 *
 *     grpc_byte_buffer *bb = rt_wire_pack(&resp.base, NULL);  // one slice
 *     ...
 *     Rtrain__V1__PingRequest *req = (Rtrain__V1__PingRequest *)
 *         rt_wire_unpack(bb, &rtrain__v1__ping_request__descriptor, NULL);
 *     if (!req) -> malformed (garbage bytes)
 *     protobuf_c_message_free_unpacked(&req->base, NULL);
 */
#ifndef RTRAIN_WIRE_H
#define RTRAIN_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <protobuf-c/protobuf-c.h>

#include "rt_clock.h"
#include "rtrain.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An upload's sample (DatasetHeader.sample_hash): the first
 * RT_SAMPLE_BYTES of every RT_SAMPLE_EVERY bytes of the stream. Both ends
 * hash it, the client before it sends (a FindDataset probe costs a
 * 256th of a full hash), the daemon as the data lands. */
#define RT_SAMPLE_EVERY (1u << 20)
#define RT_SAMPLE_BYTES (4u << 10)

/* The first sampled run in stream bytes [pos, pos + n): its start, as an
 * offset from pos, in *at; returns its length (0: none in the range). */
static inline size_t rt_sample_run(uint64_t pos, size_t n, size_t *at)
{
    uint64_t in = pos % RT_SAMPLE_EVERY;
    uint64_t start = in < RT_SAMPLE_BYTES ? 0 : RT_SAMPLE_EVERY - in;
    if (start >= n)
        return 0;
    uint64_t run = RT_SAMPLE_BYTES - (in + start) % RT_SAMPLE_EVERY;
    *at = (size_t)start;
    return run < n - start ? (size_t)run : n - (size_t)start;
}

/* Protobuf's base-128 varint: its length in bytes, and writing it at p
 * (returns the bytes written, at most 10). The one copy for both ends:
 * the tail below, the client's upload headers and its TFRecord writer. */
static inline size_t rt_varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline size_t rt_varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* Pack msg into a new one-slice raw byte buffer. If tail is not NULL, its
 * packed bytes are appended as field 15 (the Timings field every response
 * has), after msg's own bytes: protobuf merges repeated occurrences of a
 * message field, so this is a valid encoding, and it lets the daemon time
 * the packing of everything else. The caller owns the result
 * (grpc_byte_buffer_destroy), NULL on out of memory. */
grpc_byte_buffer *rt_wire_pack(const ProtobufCMessage *msg, const ProtobufCMessage *tail);

/* The parts of rt_wire_pack, for callers that time the body's packing
 * before they fill the tail (the daemon's Timings):
 *   rt_wire_body: msg packed into a new slice of exactly its size;
 *   rt_wire_tail: tail as field 15 (tag, varint length, bytes), a new slice
 *     of exactly that size, so a tail of any length is framed correctly;
 *   rt_wire_join: a byte buffer of body then *tail (tail may be NULL); it
 *     takes the caller's slice references. */
grpc_slice rt_wire_body(const ProtobufCMessage *msg);
grpc_slice rt_wire_tail(const ProtobufCMessage *tail);
grpc_byte_buffer *rt_wire_join(grpc_slice body, const grpc_slice *tail);

/* Unpack bb as desc. NULL if bb is NULL or the bytes are not a valid
 * message (garbage). The caller frees with protobuf_c_message_free_unpacked
 * using the same allocator (NULL = malloc). */
ProtobufCMessage *rt_wire_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                                 ProtobufCAllocator *alloc);

/* One piece of a field's bytes, lying in a slice of the byte buffer. */
typedef struct rt_wire_span {
    const uint8_t *p;
    size_t n;
} rt_wire_span;

/* Split an uncompressed raw bb without copying the bulk: every field but
 * the length-delimited field number big goes, copied, into *rest (malloc'ed,
 * *rest_len bytes; a message of its own to unpack), and big's bytes are
 * described, in place, by *spans (malloc'ed, *n_spans pieces, valid while
 * bb lives). Returns 0, or -1 when the bytes are not well-formed protobuf,
 * big is not length-delimited or appears twice, or out of memory; the
 * caller frees *rest and *spans either way (NULL when nothing was made). */
int rt_wire_split(grpc_byte_buffer *bb, uint32_t big, uint8_t **rest, size_t *rest_len,
                  rt_wire_span **spans, size_t *n_spans);

/* How deep the message fields of the packed message buf (of type desc)
 * nest, found without recursion and without allocating: 1 for a message
 * whose set fields hold no message. protobuf-c's decode recurses once per
 * level, so a type that can contain itself (ONNX's GraphProto inside an
 * AttributeProto inside a NodeProto) must be measured before it is
 * decoded: a small input nested 100,000 deep overflows any thread's
 * stack. Counting stops past max (<= RT_WIRE_MAX_DEPTH): the result is
 * then max + 1. -1 when the bytes are not well-formed protobuf (the decode
 * then refuses them). */
#define RT_WIRE_MAX_DEPTH 256
int rt_wire_depth(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len, int max);

/* Total payload bytes of bb (0 for NULL). */
size_t rt_wire_length(grpc_byte_buffer *bb);

#ifdef __cplusplus
}
#endif
#endif
