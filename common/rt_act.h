/* rt_act.h - the Keras activation names that become one graph op of
 * their own, and those ops: the one table the Keras importer (Activation
 * layers, a layer's activation=) and the client's model builder
 * (rt_model_dense) share. "linear" is no op: callers skip it first.
 * Header-only, no library. */
#ifndef RTRAIN_ACT_H
#define RTRAIN_ACT_H

#include <stddef.h>
#include <string.h>

/* The op for a Keras activation name, or NULL when it has none here. */
static inline const char *rt_act_op(const char *keras)
{
    static const struct {
        const char *keras, *op;
    } acts[] = {
        {"relu", "Relu"},       {"sigmoid", "Sigmoid"},        {"tanh", "Tanh"},
        {"softmax", "Softmax"}, {"log_softmax", "LogSoftmax"},
    };
    for (size_t i = 0; keras && i < sizeof acts / sizeof acts[0]; i++)
        if (strcmp(keras, acts[i].keras) == 0)
            return acts[i].op;
    return NULL;
}

#endif
