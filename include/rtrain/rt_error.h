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

/*      name            value  grpc status          text */
#define RT_ERRNO_MAP(X)                                                        \
    X(EINVAL,           -1,   3 /*INVALID_ARGUMENT*/,  "invalid argument")     \
    X(ENOMEM,           -2,   8 /*RESOURCE_EXHAUSTED*/, "out of memory")       \
    X(EGRAPH,           -3,   3,                      "invalid graph")         \
    X(EUNKNOWN_OP,      -4,   3,                      "unknown op")            \
    X(ECYCLE,           -5,   3,                      "graph has a cycle")     \
    X(ESHAPE,           -6,   3,                      "shape mismatch")        \
    X(EDTYPE,           -7,   3,                      "dtype mismatch")        \
    X(EOVERFLOW,        -8,   3,                      "size overflow")         \
    X(ENOTFOUND,        -9,   5 /*NOT_FOUND*/,        "not found")             \
    X(EDATA,            -10,  3,                      "invalid data")          \
    X(ECHECKSUM,        -11,  15 /*DATA_LOSS*/,       "checksum mismatch")     \
    X(ETOOBIG,          -12,  8,                      "over a limit")          \
    X(EIO,              -13,  13 /*INTERNAL*/,        "i/o error")             \
    X(EUNAVAILABLE,     -14,  14 /*UNAVAILABLE*/,     "server unavailable")    \
    X(ETIMEDOUT,        -15,  4 /*DEADLINE_EXCEEDED*/, "deadline exceeded")    \
    X(ECANCELLED,       -16,  1 /*CANCELLED*/,        "cancelled")             \
    X(EPROTO,           -17,  3,                      "malformed message")     \
    X(EINTERNAL,        -18,  13,                     "internal error")        \
    X(EUNIMPLEMENTED,   -19,  12 /*UNIMPLEMENTED*/,   "not implemented")       \
    X(EEXIST,           -20,  6 /*ALREADY_EXISTS*/,   "already exists")        \
    X(ESTATE,           -21,  9 /*FAILED_PRECONDITION*/, "wrong state")        \
    X(EAUTH,            -22,  16 /*UNAUTHENTICATED*/, "unauthenticated")       \
    X(EUNKNOWN_LAYER,   -23,  3,                      "unknown layer")         \
    X(EJSON,            -24,  3,                      "malformed json")        \
    X(ENAN,             -25,  3,                      "non-finite value")      \
    X(ETRUNCATED,       -26,  15,                     "truncated upload")      \
    X(EGRPC,            -27,  2 /*UNKNOWN*/,          "grpc error")

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
