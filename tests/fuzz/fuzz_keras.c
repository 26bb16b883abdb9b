/* fuzz_keras.c - the Keras model JSON importer (server/import/import_keras.c),
 * then the checks a Compile request runs on the graph it makes (the plan
 * key walks every node and attribute). Compiling the plan itself is left
 * out: it sizes the arena from the shapes, and a fuzzed Dense(2^30) is a
 * quota question, not a parser bug. */
#include <stdint.h>
#include <string.h>

#include "import_keras.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rt_graph *g = NULL;
    char err[256];
    int rc = rt_keras_import((const char *)data, size, &g, err, sizeof err);
    if (rc < 0) {
        if (g || strnlen(err, sizeof err) == sizeof err)
            __builtin_trap();
        return 0;
    }
    rt_train_config cfg;
    rt_train_config_init(&cfg);
    uint8_t key[16];
    rt_plan_key(g, &cfg, key);
    rt_graph_destroy(g);
    return 0;
}
