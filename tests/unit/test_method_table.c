/* test_method_table.c - the daemon's method table against the .proto's
 * service (protoc-c's descriptor): every method has a handler, paths and
 * request types come from the descriptor, and a method without a handler
 * (or a handler without a method) is reported by name. */
#include <stdlib.h>
#include <string.h>

#include "itest_unit.h"
#include "rt_srv_impl.h"

static void test_real_table(void)
{
    const ProtobufCServiceDescriptor *sd = rt_service();
    CHECK((int)sd->n_methods == RT_N_METHODS, "descriptor %u methods, RT_N_METHODS %d",
          sd->n_methods, RT_N_METHODS);
    rt_methods_init();
    CHECK(rt_n_methods == RT_N_METHODS, "%d", rt_n_methods);
    for (int i = 0; i < rt_n_methods; i++) {
        char want[RT_METHOD_PATH_MAX];
        snprintf(want, sizeof want, "/rtrain.v1.Trainer/%s", sd->methods[i].name);
        CHECK(!strcmp(rt_methods[i].path, want), "%s != %s", rt_methods[i].path, want);
        CHECK(rt_methods[i].req_desc == sd->methods[i].input, "%s request type", want);
        CHECK(rt_methods[i].handle != NULL, "%s handler", want);
        CHECK(rt_handlers[i].member && rt_service_name_match(rt_handlers[i].member,
                                                             sd->methods[i].name),
              "rt_handlers[%d] is %s, the .proto has %s", i, rt_handlers[i].member,
              sd->methods[i].name);
    }
    int ping = RT_METHOD_INDEX(ping), up = RT_METHOD_INDEX(upload_dataset),
        fit = RT_METHOD_INDEX(fit);
    CHECK(!strcmp(rt_methods[ping].path, "/rtrain.v1.Trainer/Ping"), "%s", rt_methods[ping].path);
    CHECK(!strcmp(rt_methods[ping].req_name, "PingRequest"), "%s", rt_methods[ping].req_name);
    CHECK(rt_methods[up].kind == RT_CLIENT_STREAM && rt_methods[up].end, "upload is a client stream");
    CHECK(rt_methods[fit].kind == RT_SERVER_STREAM, "fit is a server stream");
    CHECK(!strcmp(rt_service_method_name(RT_METHOD_INDEX(run_steps)), "RunSteps"), "name");
}

static void test_name_match(void)
{
    CHECK(rt_service_name_match("run_steps", "RunSteps"), "run_steps");
    CHECK(rt_service_name_match("get_info", "GetInfo"), "get_info");
    CHECK(rt_service_name_match("ping", "Ping"), "ping");
    CHECK(!rt_service_name_match("run_step", "RunSteps"), "prefix");
    CHECK(!rt_service_name_match("runsteps", "RunSteps"), "no underscore");
    CHECK(!rt_service_name_match("run_steps_x", "RunSteps"), "longer");
    CHECK(!rt_service_name_match("", "Ping"), "empty");
}

/* A .proto that gained a method the daemon has no handler for. */
static void test_method_without_handler(void)
{
    const ProtobufCServiceDescriptor *sd = rt_service();
    int n = (int)sd->n_methods + 1;
    ProtobufCMethodDescriptor *md = calloc((size_t)n, sizeof *md);
    memcpy(md, sd->methods, sd->n_methods * sizeof *md);
    md[n - 1].name = "Frobnicate";
    md[n - 1].input = &rtrain__v1__ping_request__descriptor;
    md[n - 1].output = &rtrain__v1__ping_response__descriptor;
    ProtobufCServiceDescriptor grown = *sd;
    grown.n_methods = (unsigned)n;
    grown.methods = md;
    rt_method out[64];
    char err[256] = "";
    int rc = rt_methods_bind(&grown, rt_handlers, RT_N_METHODS, out, 64, err, sizeof err);
    CHECK(rc < 0, "bound a method without a handler");
    CHECK(strstr(err, "rtrain.v1.Trainer/Frobnicate has no handler") != NULL, "err: %s", err);
    free(md);
}

/* A handler table with a hole (an entry never written). */
static void test_missing_handler(void)
{
    rt_method_handler h[RT_N_METHODS];
    memcpy(h, rt_handlers, sizeof h);
    memset(&h[RT_METHOD_INDEX(evaluate)], 0, sizeof h[0]);
    rt_method out[RT_N_METHODS];
    char err[256] = "";
    int rc = rt_methods_bind(rt_service(), h, RT_N_METHODS, out, RT_N_METHODS, err, sizeof err);
    CHECK(rc < 0, "bound with a hole");
    CHECK(strstr(err, "Evaluate has no handler") != NULL, "err: %s", err);

    /* A client stream without its end handler is incomplete too. */
    memcpy(h, rt_handlers, sizeof h);
    h[RT_METHOD_INDEX(upload_dataset)].end = NULL;
    rc = rt_methods_bind(rt_service(), h, RT_N_METHODS, out, RT_N_METHODS, err, sizeof err);
    CHECK(rc < 0 && strstr(err, "UploadDataset has no handler"), "err: %s", err);
}

/* A handler for a method the .proto does not have. */
static void test_handler_without_method(void)
{
    rt_method_handler h[RT_N_METHODS + 1];
    memcpy(h, rt_handlers, sizeof rt_handlers);
    h[RT_N_METHODS] = rt_handlers[0];
    h[RT_N_METHODS].member = "frobnicate";
    rt_method out[RT_N_METHODS];
    char err[256] = "";
    int rc = rt_methods_bind(rt_service(), h, RT_N_METHODS + 1, out, RT_N_METHODS, err,
                             sizeof err);
    CHECK(rc < 0, "bound a stray handler");
    CHECK(strstr(err, "handler frobnicate is not a method of rtrain.v1.Trainer") != NULL,
          "err: %s", err);
}

int main(void)
{
    RUN(test_real_table);
    RUN(test_name_match);
    RUN(test_method_without_handler);
    RUN(test_missing_handler);
    RUN(test_handler_without_method);
    return itest_summary();
}
