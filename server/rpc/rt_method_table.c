/* rt_method_table.c - the server's method table: rt_handlers (one row per
 * method, the handlers in rt_h_*.c) joined with protoc-c's descriptor of
 * rtrain.v1.Trainer. */
#include "rt_handlers.h"

#include <stdio.h>
#include <stdlib.h>

_Static_assert(RT_N_METHODS > 0 && RT_N_METHODS <= 32,
               "rt_srv registers at most 32 methods (rt_srv.reg)");

int rt_methods_bind(const ProtobufCServiceDescriptor *sd, const rt_method_handler *h, int nh,
                    rt_method *out, int max, char *err, size_t errlen)
{
    if ((int)sd->n_methods > max) {
        snprintf(err, errlen, "%s has %u methods, the table holds %d", sd->name, sd->n_methods,
                 max);
        return -1;
    }
    for (int i = 0; i < (int)sd->n_methods; i++) {
        const ProtobufCMethodDescriptor *md = &sd->methods[i];
        const rt_method_handler *e = NULL;
        for (int k = 0; k < nh && !e; k++)
            if (h[k].member && rt_service_name_match(h[k].member, md->name))
                e = &h[k];
        if (!e || !e->handle || (e->kind == RT_CLIENT_STREAM && !e->end)) {
            snprintf(err, errlen, "method %s/%s has no handler", sd->name, md->name);
            return -1;
        }
        rt_method *m = &out[i];
        if (rt_service_path(sd, i, m->path, sizeof m->path) < 0) {
            snprintf(err, errlen, "method %s/%s: path too long", sd->name, md->name);
            return -1;
        }
        m->req_name = md->input->short_name;
        m->req_desc = md->input;
        m->kind = e->kind;
        m->handle = e->handle;
        m->end = e->end;
    }
    for (int k = 0; k < nh; k++) {
        int found = 0;
        for (int i = 0; i < (int)sd->n_methods && !found; i++)
            found = h[k].member && rt_service_name_match(h[k].member, sd->methods[i].name);
        if (!found) {
            snprintf(err, errlen, "handler %s is not a method of %s",
                     h[k].member ? h[k].member : "(unnamed)", sd->name);
            return -1;
        }
    }
    return 0;
}

static rt_method bound[RT_N_METHODS];
const rt_method *const rt_methods = bound;
const int rt_n_methods = RT_N_METHODS;

static void bind_or_abort(void)
{
    char err[256];
    if (rt_methods_bind(rt_service(), rt_handlers, RT_N_METHODS, bound, RT_N_METHODS, err,
                        sizeof err) < 0) {
        fprintf(stderr, "rtraind: the method table does not match proto/rtrain.proto: %s\n", err);
        abort();
    }
}

void rt_methods_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, bind_or_abort);
}

/* ------------------------------------------------------------ the table */

/* Indexed by the method's place in the .proto (RT_METHOD_INDEX), so a
 * method the .proto adds without an entry here leaves a hole that
 * rt_methods_init() reports at start; the request types and paths come
 * from protoc-c's service descriptor (rt_method_table.c). */
#define H(member, kind, handle, end) [RT_METHOD_INDEX(member)] = {#member, kind, handle, end}
const rt_method_handler rt_handlers[RT_N_METHODS] = {
    H(get_info, RT_UNARY, rt_h_get_info, NULL),
    H(ping, RT_UNARY, rt_h_ping, NULL),
    H(create_session, RT_UNARY, rt_h_create_session, NULL),
    H(close_session, RT_UNARY, rt_h_close_session, NULL),
    H(compile, RT_UNARY, rt_h_compile, NULL),
    H(upload_dataset, RT_CLIENT_STREAM, rt_h_upload_chunk, rt_h_upload_end),
    H(find_dataset, RT_UNARY, rt_h_find_dataset, NULL),
    H(run_steps, RT_UNARY, rt_h_run_steps, NULL),
    H(fit, RT_SERVER_STREAM, rt_h_fit, NULL),
    H(evaluate, RT_UNARY, rt_h_evaluate, NULL),
    H(predict, RT_UNARY, rt_h_predict, NULL),
    H(get_weights, RT_UNARY, rt_h_get_weights, NULL),
    H(set_weights, RT_UNARY, rt_h_set_weights, NULL),
    H(control, RT_UNARY, rt_h_control, NULL),
    H(export_onnx, RT_UNARY, rt_h_export_onnx, NULL),
    H(checkpoint, RT_UNARY, rt_h_checkpoint, NULL),
    H(restore_checkpoint, RT_UNARY, rt_h_restore_checkpoint, NULL),
    H(drop_program, RT_UNARY, rt_h_drop_program, NULL),
};
#undef H

const rt_service_hooks rt_service_life = {rt_h_state_open, rt_h_state_flush};
