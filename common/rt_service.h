/*
 * rt_service.h - the rtrain.v1.Trainer service as protoc-c describes it.
 * This is the one source of the method list: the daemon's handler table and
 * the client library's call table are indexed by it and checked against it,
 * so a method added to proto/rtrain.proto without a handler stops the build
 * (the count) or the daemon's start (the names).
 *
 *     enum { M_PING = RT_METHOD_INDEX(ping) };            // 1, .proto order
 *     char path[RT_METHOD_PATH_MAX];
 *     rt_service_path(M_PING, path, sizeof path);        // "/rtrain.v1.Trainer/Ping"
 *     const char *name = rt_service_method_name(M_PING); // "Ping"
 */
#ifndef RTRAIN_SERVICE_H
#define RTRAIN_SERVICE_H

#include <stddef.h>

#include "rtrain.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* protoc-c gives the service struct one function pointer per method, in
 * .proto order, after the ProtobufCService base: the count and each
 * method's index are compile-time constants. */
#define RT__SVC_FN_SIZE sizeof(void (*)(void))
#define RT_N_METHODS \
    ((int)((sizeof(Rtrain__V1__Trainer_Service) - sizeof(ProtobufCService)) / RT__SVC_FN_SIZE))
/* member: protoc-c's name for the method (get_info, run_steps, ...). */
#define RT_METHOD_INDEX(member)                                                         \
    ((int)((offsetof(Rtrain__V1__Trainer_Service, member) - sizeof(ProtobufCService)) / \
           RT__SVC_FN_SIZE))

/* Longest "/package.Service/Method" path, with its NUL. */
#define RT_METHOD_PATH_MAX 96

/* The service descriptor (protoc-c's rtrain__v1__trainer__descriptor). */
const ProtobufCServiceDescriptor *rt_service(void);

/* The method's name as the .proto spells it ("RunSteps"); i must be in
 * [0, RT_N_METHODS). Static storage. */
const char *rt_service_method_name(int i);

/* The method's gRPC path into buf: "/rtrain.v1.Trainer/RunSteps".
 * Returns the length, or -1 if it does not fit (buf then holds ""). */
int rt_service_path(const ProtobufCServiceDescriptor *sd, int i, char *buf, size_t len);

/* 1 if snake (protoc-c's member name, "run_steps") is the C spelling of
 * camel (the .proto name, "RunSteps"), else 0. */
int rt_service_name_match(const char *snake, const char *camel);

#ifdef __cplusplus
}
#endif
#endif
