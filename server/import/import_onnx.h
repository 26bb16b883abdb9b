/*
 * import_onnx.h - ONNX ModelProto (torch.onnx.export, opsets 11-17) ->
 * rt_graph, and the way back: the same ModelProto with an exec's weights as
 * its initializers.
 *
 *     rt_graph *g; char err[256];
 *     if (rt_onnx_import(bytes, len, NULL, &g, err, sizeof err) < 0)
 *         ... err names every unsupported operator, or the problem ...
 *     rt_plan_compile(g, &cfg, ...);
 *
 * The messages are protoc-c's C for the onnx.proto that Debian's
 * libonnx-dev installs, generated at build time.
 *
 * Layout. ONNX image models are NCHW; the engine is NHWC. A rank-4 value
 * is kept channels-last and every layout change is folded into the
 * weights once, at import: Conv kernels (O,I,kh,kw) become (kh,kw,I,O),
 * Gemm weights (N,K) become (K,N), a Flatten of an NCHW value keeps the
 * engine's (h,w,c) order and the Gemm/MatMul reading it gets its weight
 * rows permuted from (c,h,w) to (h,w,c), and constants broadcast against
 * an NCHW value are permuted the same way. Inside the graph nothing is
 * transposed per step. The data input of a rank-4 model is taken as the
 * model declares it, NCHW: the graph's first op is a Transpose to NHWC,
 * run on each batch (a Reshape when C is 1: the same bytes). A caller that
 * holds NHWC data says so (rt_onnx_opts.data_nhwc) and the input is NHWC,
 * with no Transpose. An NCHW (or flattened NCHW) output is turned back to
 * NCHW, so predictions and labels read as PyTorch's.
 *
 * Weights. Float initializers become parameters named as the initializer,
 * with their values as the initial weights (PyTorch's own initialisation);
 * BatchNormalization's mean and var are non-trainable and move as PyTorch
 * moves them (momentum, unbiased variance). Values computed from shapes
 * (Shape -> Gather -> Unsqueeze -> Concat, as x.view(x.size(0), -1)
 * exports) are folded to constants, the batch kept symbolic.
 *
 * Errors: RT_EUNKNOWN_OP listing every unsupported operator at once
 * ("unsupported ONNX operators at opset 13: Foo (node 'n1'), ..."),
 * RT_EPROTO for bytes that are not a ModelProto, RT_EINVAL for external
 * data, an opset outside 11..17, a dynamic dimension other than the batch,
 * or an unsupported attribute (naming the node), RT_ESHAPE for shapes.
 */
#ifndef RTRAIN_IMPORT_ONNX_H
#define RTRAIN_IMPORT_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "rt_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_ONNX_OPSET_MIN 11
#define RT_ONNX_OPSET_MAX 18
/* Bounds on what a model may cost to decode (docs/security.md): messages
 * nested at most RT_ONNX_MAX_DEPTH deep (protobuf's own C++ parser stops
 * at 100 too; a plain model nests 7 deep, each If/Loop subgraph adds 3),
 * else RT_EINVAL; and at most RT_ONNX_DECODE_BUDGET(len) bytes of decoded
 * messages, else RT_ETOOBIG. */
#define RT_ONNX_MAX_DEPTH 100
#define RT_ONNX_DECODE_BUDGET(len) ((size_t)(len)*8 + ((size_t)16 << 20))

/* Parse len bytes of a serialized ModelProto into a new graph (*out, owned
 * by the caller). output: the graph output to train, NULL or "" for the
 * graph's output, or all of them (several outputs: each a head). Several
 * data inputs are taken packed, as a Keras model's: one graph input
 * "inputs" holding each input's values per sample in the graph's order
 * (float inputs with fixed dims; a rank-4 one NCHW, or NHWC with
 * data_nhwc), sliced and reshaped per input. Returns 0 or a negative code with a message
 * (< errlen) in err; *out is NULL on failure. */
int rt_onnx_import(const void *buf, size_t len, const char *output, rt_graph **out, char *err,
                   size_t errlen);

/* Import options: the output as rt_onnx_import's; data_nhwc: a rank-4
 * data input is fed NHWC (the engine's layout) instead of the model's
 * NCHW. nchw_input (out): the data input is taken NCHW (a rank-4 input
 * without data_nhwc). */
typedef struct rt_onnx_opts {
    const char *output;
    int data_nhwc;
    int nchw_input;
    /* out: the graph's outputs when it has several and output names none:
     * each is a head (rt_graph_set_outputs, named as the ONNX output), to
     * train with a loss each (rt_train_config.heads); 0 for one */
    int n_outputs;
} rt_onnx_opts;
int rt_onnx_import_opts(const void *buf, size_t len, rt_onnx_opts *o, rt_graph **out, char *err,
                        size_t errlen);
/* A data layout's name: NULL, "" or "NCHW" (the model's own) set *nhwc 0,
 * "NHWC" 1 (any case); RT_EINVAL for anything else. */
int rt_onnx_layout_from_name(const char *name, int *nhwc);

/* The value of one engine parameter (as rt_exec_get_param writes it):
 * fill numel floats into dst, return 0 or a negative code. */
typedef int (*rt_onnx_param_fn)(void *ud, const char *name, float *dst, int64_t numel);

/* Export: the model of buf (as imported with the same output) with every
 * initializer that became a parameter replaced by get()'s values, laid out
 * back in ONNX's order (raw little-endian floats). *out is malloc'd (free),
 * *outlen its size. Returns 0 or a negative code with a message. */
int rt_onnx_export(const void *buf, size_t len, const char *output, rt_onnx_param_fn get, void *ud,
                   uint8_t **out, size_t *outlen, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
