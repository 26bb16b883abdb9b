/*
 * rt_transport.h - the HTTP/2 transport settings for bulk streams, shared
 * by the daemon, the client library and the bare-stream benchmark peer
 * (bench/upload), so both sides of an upload and the peer it is measured
 * against run the same transport.
 *
 *     grpc_arg args[RT_TRANSPORT_NARGS + ...];
 *     size_t na = rt_transport_args(args);   // fills the first few
 *
 * - lookahead: the initial per-stream flow-control window (gRPC's default
 *   is 64 KiB, grown by BDP probing over several round trips); a 1 MiB
 *   chunk then goes out without waiting for a WINDOW_UPDATE;
 * - max_frame_size: the largest DATA frame this end accepts, so a chunk
 *   travels in few frames instead of many 16 KiB ones.
 * The keys are gRPC core's channel args (grpc/impl/codegen/grpc_types.h).
 */
#ifndef RTRAIN_TRANSPORT_H
#define RTRAIN_TRANSPORT_H

#include <stddef.h>
#include <string.h>

#include <grpc/grpc.h>

#define RT_TRANSPORT_NARGS 2

static inline size_t rt_transport_args(grpc_arg *a)
{
    static const struct {
        const char *key;
        int v;
    } kv[RT_TRANSPORT_NARGS] = {
        {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 4 << 20},
        {GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (16 << 20) - 1},
    };
    for (size_t i = 0; i < RT_TRANSPORT_NARGS; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].type = GRPC_ARG_INTEGER;
        a[i].key = (char *)kv[i].key;
        a[i].value.integer = kv[i].v;
    }
    return RT_TRANSPORT_NARGS;
}

#endif
