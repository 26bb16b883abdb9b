/* rt_service.c - the Trainer service's method list, from protoc-c. */
#include "rt_service.h"

#include <ctype.h>
#include <stdio.h>

/* RT_N_METHODS and RT_METHOD_INDEX read the layout of protoc-c's service
 * struct; these hold for every protoc-c release, and if one ever changes it
 * the build stops here rather than indexing the wrong method. */
_Static_assert(offsetof(Rtrain__V1__Trainer_Service, get_info) == sizeof(ProtobufCService),
               "protoc-c service layout: the first method follows the base");
_Static_assert(RT_METHOD_INDEX(get_info) == 0 && RT_METHOD_INDEX(ping) == 1,
               "protoc-c service layout: one function pointer per method");

const ProtobufCServiceDescriptor *rt_service(void) { return &rtrain__v1__trainer__descriptor; }

const char *rt_service_method_name(int i)
{
    return rtrain__v1__trainer__descriptor.methods[i].name;
}

int rt_service_path(const ProtobufCServiceDescriptor *sd, int i, char *buf, size_t len)
{
    int n = snprintf(buf, len, "/%s/%s", sd->name, sd->methods[i].name);
    if (n < 0 || (size_t)n >= len) {
        if (len)
            buf[0] = 0;
        return -1;
    }
    return n;
}

int rt_service_name_match(const char *snake, const char *camel)
{
    for (const char *c = camel; *c; c++) {
        if (isupper((unsigned char)*c) && c != camel && *snake++ != '_')
            return 0;
        if (*snake++ != tolower((unsigned char)*c))
            return 0;
    }
    return *snake == 0;
}
