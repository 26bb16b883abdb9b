/* rt_wire.c - protobuf-c <-> grpc_byte_buffer. */
#include "rt_wire.h"

#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

/* Tag of field 15, wire type 2 (length-delimited): (15 << 3) | 2. */
#define RT__TAIL_TAG 0x7a

grpc_slice rt_wire_body(const ProtobufCMessage *msg)
{
    grpc_slice s = grpc_slice_malloc(protobuf_c_message_get_packed_size(msg));
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
    return s;
}

grpc_slice rt_wire_tail(const ProtobufCMessage *tail)
{
    size_t tlen = protobuf_c_message_get_packed_size(tail);
    grpc_slice s = grpc_slice_malloc(1 + rt_varint_size(tlen) + tlen);
    uint8_t *q = GRPC_SLICE_START_PTR(s);
    *q++ = RT__TAIL_TAG;
    q += rt_varint_put(q, tlen);
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

grpc_byte_buffer *rt_wire_pack(const ProtobufCMessage *msg, const ProtobufCMessage *tail)
{
    grpc_slice t;
    if (tail)
        t = rt_wire_tail(tail);
    return rt_wire_join(rt_wire_body(msg), tail ? &t : NULL);
}

ProtobufCMessage *rt_wire_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                                 ProtobufCAllocator *alloc)
{
    if (!bb)
        return NULL;
    if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE &&
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
    ProtobufCMessage *m =
        protobuf_c_message_unpack(desc, alloc, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}

/* A cursor over a slice buffer. */
typedef struct rt__rd {
    const grpc_slice *sl;
    size_t n, i, pos; /* slice i, byte pos in it */
} rt__rd;

static int rd_byte(rt__rd *r, uint8_t *b)
{
    while (r->i < r->n && r->pos == GRPC_SLICE_LENGTH(r->sl[r->i])) {
        r->i++;
        r->pos = 0;
    }
    if (r->i == r->n)
        return -1;
    *b = GRPC_SLICE_START_PTR(r->sl[r->i])[r->pos++];
    return 0;
}

static int rd_varint(rt__rd *r, uint64_t *v, uint8_t *raw, size_t *nraw)
{
    *v = 0;
    *nraw = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        uint8_t b;
        if (rd_byte(r, &b) < 0)
            return -1;
        raw[(*nraw)++] = b;
        *v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* Take n bytes at the cursor: copied to dst (if not NULL) or, with spans,
 * described in place. */
static int rd_take(rt__rd *r, uint64_t n, uint8_t *dst, rt_wire_span *spans, size_t *ns)
{
    while (n) {
        if (r->i == r->n)
            return -1;
        size_t room = GRPC_SLICE_LENGTH(r->sl[r->i]) - r->pos;
        if (!room) {
            r->i++;
            r->pos = 0;
            continue;
        }
        size_t k = n < room ? (size_t)n : room;
        const uint8_t *p = GRPC_SLICE_START_PTR(r->sl[r->i]) + r->pos;
        if (dst) {
            memcpy(dst, p, k);
            dst += k;
        } else if (spans) {
            spans[(*ns)++] = (rt_wire_span){p, k};
        }
        r->pos += k;
        n -= k;
    }
    return 0;
}

int rt_wire_split(grpc_byte_buffer *bb, uint32_t big, uint8_t **rest, size_t *rest_len,
                  rt_wire_span **spans, size_t *n_spans)
{
    *rest = NULL;
    *rest_len = 0;
    *spans = NULL;
    *n_spans = 0;
    if (!bb || bb->type != GRPC_BB_RAW || bb->data.raw.compression != GRPC_COMPRESS_NONE)
        return -1;
    grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
    size_t total = grpc_byte_buffer_length(bb);
    rt__rd r = {sb->slices, sb->count, 0, 0};
    /* The bulk field's pieces: at most one per slice. */
    *spans = malloc(sizeof **spans * (sb->count + 1));
    *rest = malloc(total < 4096 ? total + 1 : 4096);
    size_t cap = total < 4096 ? total + 1 : 4096, len = 0;
    if (!*spans || !*rest)
        return -1;
    int seen = 0;
    for (;;) {
        uint8_t raw[20];
        size_t nraw, nlen;
        uint64_t key, v;
        uint8_t b;
        if (rd_byte(&r, &b) < 0)
            break; /* the end, between fields */
        r.pos--;   /* rd_byte advanced within a slice: step back */
        if (rd_varint(&r, &key, raw, &nraw) < 0)
            return -1;
        uint32_t field = (uint32_t)(key >> 3), wt = (uint32_t)(key & 7);
        if (field == 0)
            return -1;
        if (field == big) {
            if (wt != 2 || seen)
                return -1;
            seen = 1;
            uint8_t lraw[10];
            if (rd_varint(&r, &v, lraw, &nlen) < 0 || rd_take(&r, v, NULL, *spans, n_spans) < 0)
                return -1;
            continue;
        }
        /* Copy the field: its key, then its value by wire type. */
        uint64_t vlen;
        uint8_t vraw[10];
        size_t nv = 0;
        switch (wt) {
        case 0:
            if (rd_varint(&r, &v, vraw, &nv) < 0)
                return -1;
            vlen = 0;
            break;
        case 1: vlen = 8; break;
        case 2:
            if (rd_varint(&r, &vlen, vraw, &nv) < 0)
                return -1;
            break;
        case 5: vlen = 4; break;
        default: return -1;
        }
        if (vlen > total)
            return -1;
        size_t need = len + nraw + nv + (size_t)vlen;
        if (need > cap) {
            size_t nc = cap * 2 > need ? cap * 2 : need;
            uint8_t *np = realloc(*rest, nc);
            if (!np)
                return -1;
            *rest = np;
            cap = nc;
        }
        memcpy(*rest + len, raw, nraw);
        len += nraw;
        memcpy(*rest + len, vraw, nv);
        len += nv;
        if (rd_take(&r, vlen, *rest + len, NULL, NULL) < 0)
            return -1;
        len += (size_t)vlen;
    }
    *rest_len = len;
    return 0;
}

size_t rt_wire_length(grpc_byte_buffer *bb) { return bb ? grpc_byte_buffer_length(bb) : 0; }

/* ------------------------------------------------------------ nesting */
static int pb_varint(const uint8_t *b, size_t end, size_t *pos, uint64_t *v)
{
    uint64_t x = 0;
    for (int sh = 0; sh < 64 && *pos < end; sh += 7) {
        uint8_t c = b[(*pos)++];
        x |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

int rt_wire_depth(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len, int max)
{
    /* one frame per open message: its type and where its bytes end */
    struct {
        const ProtobufCMessageDescriptor *d;
        size_t end;
    } st[RT_WIRE_MAX_DEPTH + 1];
    if (max < 1 || max > RT_WIRE_MAX_DEPTH)
        max = RT_WIRE_MAX_DEPTH;
    int top = 0, deepest = 1;
    st[0].d = desc;
    st[0].end = len;
    size_t pos = 0;
    for (;;) {
        while (pos == st[top].end) {
            if (top == 0)
                return deepest;
            top--;
        }
        uint64_t tag, v;
        if (pb_varint(buf, st[top].end, &pos, &tag) < 0 || (tag >> 3) == 0 ||
            (tag >> 3) > UINT32_MAX)
            return -1;
        size_t left = st[top].end - pos;
        switch (tag & 7) {
        case 0:
            if (pb_varint(buf, st[top].end, &pos, &v) < 0)
                return -1;
            break;
        case 1:
            if (left < 8)
                return -1;
            pos += 8;
            break;
        case 5:
            if (left < 4)
                return -1;
            pos += 4;
            break;
        case 2: {
            if (pb_varint(buf, st[top].end, &pos, &v) < 0 || v > st[top].end - pos)
                return -1;
            const ProtobufCFieldDescriptor *f =
                protobuf_c_message_descriptor_get_field(st[top].d, (unsigned)(tag >> 3));
            if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE) {
                pos += (size_t)v; /* bytes, strings, packed arrays, unknown fields */
                break;
            }
            /* a message field one level below the open one */
            if (top + 2 > max)
                return max + 1;
            if (top + 2 > deepest)
                deepest = top + 2;
            if (v == 0)
                break; /* empty: nothing inside it */
            top++;
            st[top].d = f->descriptor;
            st[top].end = pos + (size_t)v;
            break;
        }
        default: /* groups: protobuf-c does not decode them */ return -1;
        }
    }
}
