/* rt_error.c - strings and gRPC mapping for the RT_ERRNO_MAP table. */
#include "rtrain/rt_error.h"

const char *rt_strerror(int err)
{
    switch (err) {
    case RT_OK: return "success";
#define RT__ERR_STR(name, val, grpc, text) case RT_##name: return text;
    RT_ERRNO_MAP(RT__ERR_STR)
#undef RT__ERR_STR
    }
    return "unknown error";
}

const char *rt_err_name(int err)
{
    switch (err) {
    case RT_OK: return "RT_OK";
#define RT__ERR_NAME(name, val, grpc, text) case RT_##name: return "RT_" #name;
    RT_ERRNO_MAP(RT__ERR_NAME)
#undef RT__ERR_NAME
    }
    return "RT_EUNKNOWN";
}

int rt_err_to_grpc(int err)
{
    switch (err) {
    case RT_OK: return 0;
#define RT__ERR_GRPC(name, val, grpc, text) case RT_##name: return grpc;
    RT_ERRNO_MAP(RT__ERR_GRPC)
#undef RT__ERR_GRPC
    }
    return 2; /* UNKNOWN */
}

int rt_err_from_grpc(int grpc_status)
{
    switch (grpc_status) {
    case 0: return RT_OK;
    case 1: return RT_ECANCELLED;
    case 3: return RT_EINVAL;
    case 4: return RT_ETIMEDOUT;
    case 5: return RT_ENOTFOUND;
    case 6: return RT_EEXIST;
    case 8: return RT_ETOOBIG;
    case 9: return RT_ESTATE;
    case 12: return RT_EUNIMPLEMENTED;
    case 13: return RT_EINTERNAL;
    case 14: return RT_EUNAVAILABLE;
    case 15: return RT_ECHECKSUM;
    case 16: return RT_EAUTH;
    default: return RT_EGRPC;
    }
}
