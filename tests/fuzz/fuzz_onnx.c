/* fuzz_onnx.c - the ONNX importer (server/import/import_onnx.c): protobuf-c's
 * decode of a ModelProto, then the import, then the export of the same
 * bytes with every parameter read as zeros, and the plan key over the
 * graph (as a Compile request does). Compiling the plan is left out, as in
 * fuzz_keras.c: a fuzzed 2^30-wide Gemm is a quota question. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "import_onnx.h"

static int zeros(void *ud, const char *name, float *dst, int64_t numel)
{
    (void)ud;
    (void)name;
    memset(dst, 0, (size_t)numel * sizeof(float));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rt_graph *g = NULL;
    char err[768];
    int rc = rt_onnx_import(data, size, NULL, &g, err, sizeof err);
    if (rc < 0) {
        if (g || strnlen(err, sizeof err) == sizeof err || !err[0])
            __builtin_trap();
        return 0;
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    uint8_t key[16];
    rt_plan_key(g, &cfg, key);
    rt_graph_destroy(g);
    uint8_t *out = NULL;
    size_t len = 0;
    rc = rt_onnx_export(data, size, NULL, zeros, NULL, &out, &len, err, sizeof err);
    /* what imported exports, and the export imports again */
    if (rc < 0)
        __builtin_trap();
    rc = rt_onnx_import(out, len, NULL, &g, err, sizeof err);
    if (rc < 0)
        __builtin_trap();
    rt_graph_destroy(g);
    free(out);
    return 0;
}
