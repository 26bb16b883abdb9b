/*
 * import_graph.h - the native graph message (rtrain.v1.Graph, a
 * CompileRequest's `graph`) -> rt_graph. The one validated builder: the
 * daemon's Compile (server/rpc) and the MPI worker ranks rebuilding rank
 * 0's program (server/mpi) both use it, so a graph means the same thing on
 * every rank.
 *
 *     rt_graph *g = rt_graph_create();
 *     char err[512];
 *     int rc = rt_graph_import_pb(q->graph, NULL, g, err, sizeof err);
 *     if (rc < 0)
 *         ... err names the input, param, node or output, or is "" when an
 *             allocation through the allocator failed ...
 *
 * Checks before the graph builder sees a value: at most RT_MAX_DIMS dims on
 * inputs and params, param dims in 1..RT_MAX_DIM_LIMIT, a param of at most
 * RT_MAX_PARAMS_LIMIT elements, an initial value of exactly that many f32s,
 * every attribute with a value. The builder's own errors (duplicate names,
 * unknown ops, ...) come back prefixed with what they are about
 * ("node 'd1': ...").
 *
 * alloc (NULL: malloc/free) holds the temporaries: a parameter's value
 * (copied for alignment) and a node's attribute array; the graph copies
 * what it keeps. The daemon passes its per-call arena, which charges the
 * caller's quota; when that allocation fails the function returns
 * RT_ENOMEM and leaves err empty, so the caller can say why.
 */
#ifndef RTRAIN_IMPORT_GRAPH_H
#define RTRAIN_IMPORT_GRAPH_H

#include <stddef.h>

#include "rt_engine.h"
#include "rtrain.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest dimension and parameter (elements) a request may give, as
 * Capabilities reports them (limits.max_dim, limits.max_params). */
#define RT_MAX_DIM_LIMIT (1ll << 31)
#define RT_MAX_PARAMS_LIMIT (1ull << 31)

/* 0, or a negative RT_E* code with a message in err (see above). pg must
 * not be NULL; g is what rt_graph_create returned and is left partly built
 * on failure (the caller destroys it). */
int rt_graph_import_pb(const Rtrain__V1__Graph *pg, ProtobufCAllocator *alloc, rt_graph *g,
                       char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
