/* rt_wire.c - protobuf-c <-> grpc_byte_buffer. */
#include "rt_wire.h"

#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

/* Tag of field 15, wire type 2 (length-delimited): (15 << 3) | 2. */
#define RT__TAIL_TAG 0x7a

static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

static size_t varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) { p[n++] = (uint8_t)(v | 0x80); v >>= 7; }
    p[n++] = (uint8_t)v;
    return n;
}

grpc_slice rt_wire_body(const ProtobufCMessage *msg)
{
    grpc_slice s = grpc_slice_malloc(protobuf_c_message_get_packed_size(msg));
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    return s;
}

grpc_slice rt_wire_tail(const ProtobufCMessage *tail)
{
    size_t tlen = protobuf_c_message_get_packed_size(tail);
    grpc_slice s = grpc_slice_malloc(1 + varint_size(tlen) + tlen);
    uint8_t *q = GRPC_SLICE_START_PTR(s);
    *q++ = RT__TAIL_TAG;
    q += varint_put(q, tlen);
    protobuf_c_message_pack(tail, q);
    return s;
}

grpc_byte_buffer *rt_wire_join(grpc_slice body, const grpc_slice *tail)
{
    grpc_slice s[2] = {body, tail ? *tail : grpc_empty_slice()};
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, tail ? 2 : 1);
    grpc_slice_unref(s[0]);
    if (tail)
        grpc_slice_unref(s[1]);
    return bb;
}

grpc_byte_buffer *rt_wire_pack(const ProtobufCMessage *msg,
                               const ProtobufCMessage *tail)
{
    grpc_slice t;
    if (tail)
        t = rt_wire_tail(tail);
    return rt_wire_join(rt_wire_body(msg), tail ? &t : NULL);
}

ProtobufCMessage *rt_wire_unpack(grpc_byte_buffer *bb,
                                 const ProtobufCMessageDescriptor *desc,
                                 ProtobufCAllocator *alloc)
{
    if (!bb)
        return NULL;
    if (bb->type == GRPC_BB_RAW &&
        bb->data.raw.compression == GRPC_COMPRESS_NONE &&
        bb->data.raw.slice_buffer.count == 1) {
        grpc_slice s = bb->data.raw.slice_buffer.slices[0];
        return protobuf_c_message_unpack(desc, alloc, GRPC_SLICE_LENGTH(s),
                                         GRPC_SLICE_START_PTR(s));
    }
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return NULL;
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    ProtobufCMessage *m = protobuf_c_message_unpack(
        desc, alloc, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}

size_t rt_wire_length(grpc_byte_buffer *bb)
{
    return bb ? grpc_byte_buffer_length(bb) : 0;
}
