/* bench_stream.c - the peer of bench_upload.py: one bare gRPC
 * client-streaming call over loopback, gRPC core on both ends in this
 * process, no protobuf and no daemon. The client sends BYTES in CHUNK-byte
 * messages (one slice each, filled once); the server takes each message
 * and drops it. Prints one line: "bytes seconds GB/s".
 *
 *     bench_stream BYTES [CHUNK [plain|tuned]]
 *
 * The chunk defaults to 1 MiB (rtrain's); "tuned" (the default) gives both
 * ends the transport settings rtraind and librtrain use (rt_transport.h),
 * "plain" gRPC's defaults.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "rt_transport.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *tag(intptr_t t) { return (void *)t; }

static void wait_tag(grpc_completion_queue *cq, intptr_t t)
{
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_OP_COMPLETE && ev.tag == tag(t))
            return;
        if (ev.type != GRPC_OP_COMPLETE) {
            fprintf(stderr, "completion queue: event %d\n", (int)ev.type);
            exit(1);
        }
    }
}

typedef struct server {
    grpc_server *srv;
    grpc_completion_queue *cq;
    void *method;
    unsigned long long received;
} server;

/* Accept one call, read every message, answer OK. */
static void *server_main(void *arg)
{
    server *s = arg;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_metadata_array_init(&md);
    grpc_byte_buffer *first = NULL;
    grpc_server_request_registered_call(s->srv, s->method, &call, &deadline, &md, NULL, s->cq,
                                        s->cq, tag(1));
    wait_tag(s->cq, 1);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_INITIAL_METADATA;
    grpc_call_start_batch(call, &op, 1, tag(2), NULL);
    wait_tag(s->cq, 2);
    for (;;) {
        grpc_byte_buffer *bb = NULL;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &bb;
        grpc_call_start_batch(call, &op, 1, tag(3), NULL);
        wait_tag(s->cq, 3);
        if (!bb)
            break;
        s->received += grpc_byte_buffer_length(bb);
        grpc_byte_buffer_destroy(bb);
    }
    (void)first;
    int cancelled = 0;
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[0].data.recv_close_on_server.cancelled = &cancelled;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = GRPC_STATUS_OK;
    grpc_call_start_batch(call, ops, 2, tag(4), NULL);
    wait_tag(s->cq, 4);
    grpc_call_unref(call);
    grpc_metadata_array_destroy(&md);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s BYTES [CHUNK [plain|tuned]]\n", argv[0]);
        return 2;
    }
    unsigned long long total = strtoull(argv[1], NULL, 10);
    size_t chunk = argc > 2 ? strtoull(argv[2], NULL, 10) : (1u << 20);
    int tuned = argc <= 3 || strcmp(argv[3], "plain") != 0;
    /* As rtraind does (docs/grpc-core.md): 1 MiB buffers stay off mmap. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    grpc_init();
    server s = {0};
    grpc_arg a[1 + RT_TRANSPORT_NARGS];
    size_t na = tuned ? rt_transport_args(a) : 0;
    memset(&a[na], 0, sizeof a[na]);
    a[na].type = GRPC_ARG_INTEGER;
    a[na].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    a[na++].value.integer = 64 << 20;
    grpc_channel_args args = {na, a};
    s.srv = grpc_server_create(&args, NULL);
    s.cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s.srv, s.cq, NULL);
    s.method = grpc_server_register_method(s.srv, "/bench.S/Up", NULL,
                                           GRPC_SRM_PAYLOAD_NONE, 0);
    grpc_server_credentials *sc = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s.srv, "127.0.0.1:0", sc);
    grpc_server_credentials_release(sc);
    grpc_server_start(s.srv);
    pthread_t th;
    pthread_create(&th, NULL, server_main, &s);

    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    grpc_channel_credentials *cc = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, cc, &args);
    grpc_channel_credentials_release(cc);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_slice m = grpc_slice_from_static_string("/bench.S/Up");
    double t0 = now_s();
    grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
                                               gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_INITIAL_METADATA;
    grpc_call_start_batch(call, &op, 1, tag(10), NULL);
    wait_tag(cq, 10);
    grpc_slice data = grpc_slice_malloc(chunk);
    memset(GRPC_SLICE_START_PTR(data), 0x5a, chunk);
    unsigned long long sent = 0;
    while (sent < total) {
        size_t n = total - sent < chunk ? (size_t)(total - sent) : chunk;
        grpc_slice part = grpc_slice_sub(data, 0, n);
        grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&part, 1);
        grpc_slice_unref(part);
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = bb;
        grpc_call_start_batch(call, &op, 1, tag(11), NULL);
        wait_tag(cq, 11);
        grpc_byte_buffer_destroy(bb);
        sent += n;
    }
    grpc_status_code st;
    grpc_slice details;
    grpc_metadata_array trail, init;
    grpc_metadata_array_init(&trail);
    grpc_metadata_array_init(&init);
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &init;
    ops[2].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[2].data.recv_status_on_client.status = &st;
    ops[2].data.recv_status_on_client.status_details = &details;
    ops[2].data.recv_status_on_client.trailing_metadata = &trail;
    grpc_call_start_batch(call, ops, 3, tag(12), NULL);
    wait_tag(cq, 12);
    double dt = now_s() - t0;
    pthread_join(th, NULL);
    if (st != GRPC_STATUS_OK || s.received != total) {
        fprintf(stderr, "stream failed: status %d, received %llu of %llu\n", (int)st,
                s.received, total);
        return 1;
    }
    printf("%llu %.6f %.3f\n", total, dt, total / dt / 1e9);
    grpc_slice_unref(details);
    grpc_slice_unref(data);
    grpc_metadata_array_destroy(&trail);
    grpc_metadata_array_destroy(&init);
    grpc_call_unref(call);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_server_shutdown_and_notify(s.srv, s.cq, tag(99));
    wait_tag(s.cq, 99);
    grpc_server_destroy(s.srv);
    grpc_completion_queue_shutdown(s.cq);
    while (grpc_completion_queue_next(s.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(s.cq);
    grpc_shutdown();
    return 0;
}
