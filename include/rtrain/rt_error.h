/*
 * rt_error.h - rtrain's error codes, shared by the daemon, the engine and the
 * client library.
 *
 * Every rtrain function that can fail returns an int: 0 on success, one of the
 * negative RT_E* codes below on failure. The list is built from one X-macro
 * table and only ever grows: never renumber or reuse a code.
 *
 *     int rc = rt_client_ping(c, 0, NULL);
 *     if (rc < 0)
 *         fprintf(stderr, "ping: %s (%s): %s\n", rt_err_name(rc),
 *                 rt_strerror(rc), rt_client_errmsg(c));
 *
 * Each code maps to one gRPC status code (the third column) so the daemon
 * answers and the client reports with the same vocabulary.
 */
#ifndef RTRAIN_RT_ERROR_H
#define RTRAIN_RT_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* gRPC status codes (grpc_status_code); common/rt_mirror.c checks each
 * against gRPC's own enum at compile time. */
#define RT__GRPC_CANCELLED 1
#define RT__GRPC_UNKNOWN 2
#define RT__GRPC_INVALID_ARGUMENT 3
#define RT__GRPC_DEADLINE_EXCEEDED 4
#define RT__GRPC_NOT_FOUND 5
#define RT__GRPC_ALREADY_EXISTS 6
#define RT__GRPC_RESOURCE_EXHAUSTED 8
#define RT__GRPC_FAILED_PRECONDITION 9
#define RT__GRPC_ABORTED 10
#define RT__GRPC_UNIMPLEMENTED 12
#define RT__GRPC_INTERNAL 13
#define RT__GRPC_UNAVAILABLE 14
#define RT__GRPC_DATA_LOSS 15
#define RT__GRPC_UNAUTHENTICATED 16

/*      name            value  grpc status                    text */
#define RT_ERRNO_MAP(X)                                                        \
    X(EINVAL,          -1,  RT__GRPC_INVALID_ARGUMENT,     "invalid argument") \
    X(ENOMEM,          -2,  RT__GRPC_RESOURCE_EXHAUSTED,   "out of memory") \
    X(EGRAPH,          -3,  RT__GRPC_INVALID_ARGUMENT,     "invalid graph") \
    X(EUNKNOWN_OP,     -4,  RT__GRPC_INVALID_ARGUMENT,     "unknown op") \
    X(ECYCLE,          -5,  RT__GRPC_INVALID_ARGUMENT,     "graph has a cycle") \
    X(ESHAPE,          -6,  RT__GRPC_INVALID_ARGUMENT,     "shape mismatch") \
    X(EDTYPE,          -7,  RT__GRPC_INVALID_ARGUMENT,     "dtype mismatch") \
    X(EOVERFLOW,       -8,  RT__GRPC_INVALID_ARGUMENT,     "size overflow") \
    X(ENOTFOUND,       -9,  RT__GRPC_NOT_FOUND,            "not found") \
    X(EDATA,           -10, RT__GRPC_INVALID_ARGUMENT,     "invalid data") \
    X(ECHECKSUM,       -11, RT__GRPC_DATA_LOSS,            "checksum mismatch") \
    X(ETOOBIG,         -12, RT__GRPC_RESOURCE_EXHAUSTED,   "over a limit") \
    X(EIO,             -13, RT__GRPC_INTERNAL,             "i/o error") \
    X(EUNAVAILABLE,    -14, RT__GRPC_UNAVAILABLE,          "server unavailable") \
    X(ETIMEDOUT,       -15, RT__GRPC_DEADLINE_EXCEEDED,    "deadline exceeded") \
    X(ECANCELLED,      -16, RT__GRPC_CANCELLED,            "cancelled") \
    X(EPROTO,          -17, RT__GRPC_INVALID_ARGUMENT,     "malformed message") \
    X(EINTERNAL,       -18, RT__GRPC_INTERNAL,             "internal error") \
    X(EUNIMPLEMENTED,  -19, RT__GRPC_UNIMPLEMENTED,        "not implemented") \
    X(EEXIST,          -20, RT__GRPC_ALREADY_EXISTS,       "already exists") \
    X(ESTATE,          -21, RT__GRPC_FAILED_PRECONDITION,  "wrong state") \
    X(EAUTH,           -22, RT__GRPC_UNAUTHENTICATED,      "unauthenticated") \
    X(EUNKNOWN_LAYER,  -23, RT__GRPC_INVALID_ARGUMENT,     "unknown layer") \
    X(EJSON,           -24, RT__GRPC_INVALID_ARGUMENT,     "malformed json") \
    X(ENAN,            -25, RT__GRPC_INVALID_ARGUMENT,     "non-finite value") \
    X(ETRUNCATED,      -26, RT__GRPC_DATA_LOSS,            "truncated upload") \
    X(EGRPC,           -27, RT__GRPC_UNKNOWN,              "grpc error") \
    X(ERESTARTED,      -28, RT__GRPC_ABORTED,              "daemon restarted")

typedef enum rt_errno {
    RT_OK = 0,
#define RT__ERR_ENUM(name, val, grpc, text) RT_##name = (val),
    RT_ERRNO_MAP(RT__ERR_ENUM)
#undef RT__ERR_ENUM
} rt_errno;

/* Static strings; never NULL. Unknown codes give "unknown error". */
const char *rt_strerror(int err);
const char *rt_err_name(int err);

/* The gRPC status code (grpc_status_code value) that carries err. */
int rt_err_to_grpc(int err);
/* The rtrain code for a gRPC status received from a daemon. */
int rt_err_from_grpc(int grpc_status);

#ifdef __cplusplus
}
#endif
#endif
