/*
 * itest.h - a tiny raw gRPC C-core client and test harness for the
 * integration tests. It deliberately does not use librtrain: it sends raw
 * bytes (garbage included) or packed protobuf-c messages to a method and
 * returns the status, the details and the response bytes.
 *
 *     itest_daemon d;
 *     itest_daemon_start(&d, argv[1], NULL);     // rtraind on 127.0.0.1:0
 *     itest_conn *c = itest_connect(d.addr);
 *     itest_res r;
 *     itest_unary_raw(c, "Ping", "\xff\xff", 2, &r);  // r.status == 3
 *     itest_res_free(&r);
 *     itest_disconnect(c);
 *     itest_daemon_stop(&d, SIGTERM);            // exit status
 */
#ifndef RTRAIN_ITEST_H
#define RTRAIN_ITEST_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include "rtrain.pb-c.h"

/* ----------------------------------------------------------------- checks */
extern int itest_failures, itest_checks, itest_tests, itest_failed_tests;
#include "itest_check.h"

/* ----------------------------------------------------------------- daemon */
typedef struct itest_daemon {
    pid_t pid;
    int port;
    char addr[128];
    char metrics[128]; /* host:port of --metrics-listen, "" without it */
} itest_daemon;

/* Start path with --listen 127.0.0.1:0 --log-level warn plus extra (NULL-
 * terminated, may be NULL) and wait for its "listening on" line (after
 * the "metrics on" line that --metrics-listen prints first). */
int itest_daemon_start(itest_daemon *d, const char *path, const char *const *extra);
/* The same, with the daemon's stderr (its log) appended to log_path. */
int itest_daemon_start_log(itest_daemon *d, const char *path, const char *const *extra,
                           const char *log_path);
/* Wait until log_path holds needle count times, or timeout_s passed;
 * returns how many times it holds it. */
int itest_wait_log(const char *log_path, const char *needle, int count, int timeout_s);
/* A metric's value from the daemon's /metrics (started with
 * --metrics-listen 127.0.0.1:0): the line "NAME VALUE"; -1 if absent. */
double itest_metric(const itest_daemon *d, const char *name);
/* Send sig (0 = none) and wait; returns the exit code, or 128+signal. */
int itest_daemon_stop(itest_daemon *d, int sig);
/* Until the daemon stopped itself (rtraind --pause-at-step: SIGSTOP; it
 * is this process's child, so waitpid(WUNTRACED) sees it). 0 once stopped;
 * -1 if it exited instead (d->pid is then 0) or *give_up (read atomically;
 * NULL: never) became nonzero first, e.g. the call that was to reach the
 * step ended. */
int itest_daemon_wait_paused(itest_daemon *d, const int *give_up);
/* Run path with args, capture stderr (up to len), return the exit code. */
int itest_run_capture(const char *path, const char *const *args, char *err, size_t len);

/* ------------------------------------------------------------------ calls */
typedef struct itest_conn itest_conn;

typedef struct itest_res {
    int status;          /* grpc_status_code; -1 if the call did not complete */
    char details[512];
    uint8_t *data;       /* response bytes (unary, upload), malloc'ed */
    size_t len;
    uint64_t rtt_ns;     /* client-measured round trip */
} itest_res;

/* Deadline of every call, in ms (default 120000). */
extern int itest_deadline_ms;

itest_conn *itest_connect(const char *addr);
/* TLS and a bearer token (all optional; PEM file paths). server_name
 * overrides the name checked against the daemon's certificate. */
typedef struct itest_conn_opts {
    const char *ca, *cert, *key, *token, *server_name;
    int gzip; /* compress every message sent (grpc-encoding: gzip) */
} itest_conn_opts;
itest_conn *itest_connect_opts(const char *addr, const itest_conn_opts *o);
void itest_disconnect(itest_conn *c);
void itest_res_free(itest_res *r);

/* method is the short name ("Ping"); "/x.Y/Z" is taken as a full path. */
int itest_unary_raw(itest_conn *c, const char *method, const void *req, size_t len,
                    itest_res *r);
/* Pack req, call, unpack the reply as resp_desc into *resp (NULL on error
 * status). Free *resp with protobuf_c_message_free_unpacked(.., NULL). */
int itest_unary(itest_conn *c, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                itest_res *r);

/* Client stream: send n packed messages; if cancel_after >= 0, cancel the
 * call after that many instead of half-closing. */
int itest_client_stream(itest_conn *c, const char *method, ProtobufCMessage *const *msgs,
                        int n, int cancel_after, itest_res *r);

/* Server stream: send req, call on_msg for each message (its packed bytes);
 * on_msg returning nonzero cancels the call. */
typedef int (*itest_msg_fn)(void *ud, const uint8_t *data, size_t len);
int itest_server_stream(itest_conn *c, const char *method, const ProtobufCMessage *req,
                        itest_msg_fn on_msg, void *ud, itest_res *r);

/* A client stream left open: begin, send messages, then cancel (1) or
 * finish (0: half-close and wait for the status), or (2) only wait for the
 * status the daemon ends the call with. */
typedef struct itest_stream itest_stream;
itest_stream *itest_stream_begin(itest_conn *c, const char *method);
int itest_stream_send(itest_stream *s, const ProtobufCMessage *msg); /* 1 = sent */
int itest_stream_finish(itest_stream *s, int cancel, itest_res *r); /* frees s */

/* ---------------------------------------------------------------- helpers */
/* Upload bytes as one dataset (chunked, with the XXH64 checksum). parts
 * describe the bytes; returns the grpc status and, on success, a copy of
 * the dataset id in id (>= 40 bytes). */
int itest_upload(itest_conn *c, const char *session, Rtrain__V1__DataPart **parts, int n_parts,
                 const uint8_t *data, size_t len, size_t chunk, char *id, itest_res *r);
/* Ping; returns the grpc status (0: the daemon answers). */
int itest_ping(itest_conn *c);
/* A CSV part of len bytes: a header line, labels in the last column. */
void itest_csv_part(Rtrain__V1__DataPart *p, uint64_t len);
/* Upload tests/integration/data/iris.csv (header, label last) -> id
 * (>= 40 bytes); returns the grpc status, the details in r. */
int itest_upload_iris(itest_conn *c, const char *session, char *id, itest_res *r);
/* A RAW data part: role, dtype, shape (nd dims) and its length in bytes. */
Rtrain__V1__DataPart itest_raw_part(Rtrain__V1__DataRole role, Rtrain__V1__DType dt,
                                    int64_t *shape, size_t nd, size_t len);
/* CreateSession -> id (>= 40 bytes); returns the grpc status. */
int itest_session(itest_conn *c, const char *name, char *id);
/* Read a whole file (tests/integration/data/...) into memory; NULL if missing. */
uint8_t *itest_read_file(const char *path, size_t *len);
/* The data directory (from the environment or next to the source). */
const char *itest_data_dir(void);
uint64_t itest_now_ns(void);

/* The iris MLP (4 -> hidden relu -> 3 softmax) as a native graph, and its
 * training config (sparse CE, Adam 0.01, batch 16, seed 7, accuracy). The
 * graph lives in static storage: one at a time, not thread-safe. */
Rtrain__V1__Graph *itest_iris_graph(int hidden);
void itest_iris_config(Rtrain__V1__TrainConfig *c);

/* GetWeights of a program; a failure is a failed check (and NULL). The
 * caller frees the response. */
Rtrain__V1__GetWeightsResponse *itest_get_weights(itest_conn *c, const char *sid,
                                                  const char *pid);

/* A program's weights' bytes, concatenated (malloc'ed), for bit-exact
 * comparisons; NULL if GetWeights fails (status in r when given). keep:
 * also hand back the response (caller frees); NULL frees it. */
uint8_t *itest_weights_blob(itest_conn *c, const char *sid, const char *pid, size_t *len,
                            Rtrain__V1__GetWeightsResponse **keep, itest_res *r);

#endif
