/* rt_error.c - strings and gRPC mapping for the RT_ERRNO_MAP table. */
#include "rtrain/rt_error.h"
#include "rt_errf.h"

#include <stdarg.h>
#include <stdio.h>

const char *rt_strerror(int err)
{
    switch (err) {
    case RT_OK: return "success";
#define RT__ERR_STR(name, val, grpc, text) \
    case RT_##name: return text;
        RT_ERRNO_MAP(RT__ERR_STR)
#undef RT__ERR_STR
    }
    return "unknown error";
}

const char *rt_err_name(int err)
{
    switch (err) {
    case RT_OK: return "RT_OK";
#define RT__ERR_NAME(name, val, grpc, text) \
    case RT_##name: return "RT_" #name;
        RT_ERRNO_MAP(RT__ERR_NAME)
#undef RT__ERR_NAME
    }
    return "RT_EUNKNOWN";
}

int rt_err_to_grpc(int err)
{
    switch (err) {
    case RT_OK: return 0;
#define RT__ERR_GRPC(name, val, grpc, text) \
    case RT_##name: return grpc;
        RT_ERRNO_MAP(RT__ERR_GRPC)
#undef RT__ERR_GRPC
    }
    return RT__GRPC_UNKNOWN;
}

int rt_err_from_grpc(int grpc_status)
{
    switch (grpc_status) {
    case 0: return RT_OK;
    case RT__GRPC_CANCELLED: return RT_ECANCELLED;
    case RT__GRPC_INVALID_ARGUMENT: return RT_EINVAL;
    case RT__GRPC_DEADLINE_EXCEEDED: return RT_ETIMEDOUT;
    case RT__GRPC_NOT_FOUND: return RT_ENOTFOUND;
    case RT__GRPC_ALREADY_EXISTS: return RT_EEXIST;
    case RT__GRPC_RESOURCE_EXHAUSTED: return RT_ETOOBIG;
    case RT__GRPC_FAILED_PRECONDITION: return RT_ESTATE;
    case RT__GRPC_UNIMPLEMENTED: return RT_EUNIMPLEMENTED;
    case RT__GRPC_INTERNAL: return RT_EINTERNAL;
    case RT__GRPC_UNAVAILABLE: return RT_EUNAVAILABLE;
    case RT__GRPC_DATA_LOSS: return RT_ECHECKSUM;
    case RT__GRPC_UNAUTHENTICATED: return RT_EAUTH;
    case RT__GRPC_ABORTED: return RT_ERESTARTED;
    default: return RT_EGRPC;
    }
}

int rt_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}
