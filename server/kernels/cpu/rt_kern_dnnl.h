/*
 * rt_kern_dnnl.h - what the CPU backend's oneDNN kernels share (the
 * float32 convolutions of rt_kern_conv_dnnl.c, the bf16 matmuls and
 * convolutions of rt_kern_bf16.c): one engine, primitives built with a
 * user scratchpad (which lives in the node's scratch, so a call allocates
 * nothing), weight reorders, the execution of a primitive on memory the
 * engine owns, and a process-wide table of built primitive sets.
 */
#ifndef RTRAIN_KERN_DNNL_H
#define RTRAIN_KERN_DNNL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <oneapi/dnnl/dnnl.h>

#include "rt_engine_impl.h"

/* the process's CPU engine, made on first use; NULL when oneDNN has none */
dnnl_engine_t rt_kern_dnnl_engine(void);

/* floats of storage md needs, rounded up to 64 bytes */
int64_t rt_kern_dnnl_floats(const dnnl_memory_desc_t *md);

/* the primitive descriptor of op descriptor desc, with a user scratchpad
 * and post-ops po (or NULL), hint the forward's (or NULL). -1 when oneDNN
 * has no implementation, or with no_ref set only its reference one */
int rt_kern_dnnl_pd(const void *desc, const_dnnl_post_ops_t po, const_dnnl_primitive_desc_t hint,
                    int no_ref, dnnl_primitive_desc_t *pd);
/* the primitive of pd and its scratchpad's descriptor; destroys pd */
int rt_kern_dnnl_prim(dnnl_primitive_desc_t pd, dnnl_primitive_t *p, dnnl_memory_desc_t *sp);
/* a reorder src -> dst (dst += reordered src when sum); *p NULL when the
 * layouts are the same and no sum is asked */
int rt_kern_dnnl_reorder(const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int sum,
                         dnnl_primitive_t *p, dnnl_memory_desc_t *sp);
/* post-ops: a sum (dst +=) when sum, then activation act (RT__ACT_NONE,
 * RELU, SIGMOID, TANH); NULL when neither */
dnnl_post_ops_t rt_kern_dnnl_act_po(int act, int sum);

/* the arguments of one execution */
typedef struct rt_kern_dnnl_args {
    int n;
    dnnl_exec_arg_t a[8];
    dnnl_memory_t m[8];
} rt_kern_dnnl_args;

/* argument arg: md at ptr */
void rt_kern_dnnl_arg(rt_kern_dnnl_args *g, int arg, const dnnl_memory_desc_t *md, const void *ptr);
/* runs p with g's arguments and the scratchpad sp at spb, then releases
 * the arguments; serial: on the calling thread alone (a primitive built
 * serial, rt_kern_conv_dnnl.c) */
void rt_kern_dnnl_exec(dnnl_primitive_t p, rt_kern_dnnl_args *g, const dnnl_memory_desc_t *sp,
                       float *spb, int serial);
/* dst (layout dmd) = src (layout smd) through reorder r, or a copy when r
 * is NULL (the same layout) */
void rt_kern_dnnl_reord(dnnl_primitive_t r, const dnnl_memory_desc_t *smd, const void *src,
                        const dnnl_memory_desc_t *dmd, void *dst, const dnnl_memory_desc_t *sp,
                        float *spb, int serial);

/* a Conv2D at batch n, as the primitive tables key it (memset: memcmp);
 * G: groups, 1 for a dense convolution */
typedef struct rt_kern_dnnl_conv_key {
    int64_t n, H, W, C, OH, OW, OC, KH, KW, SH, SW, DH, DW, PT, PL;
    int64_t bias, act, G;
} rt_kern_dnnl_conv_key;
rt_kern_dnnl_conv_key rt_kern_dnnl_conv_key_of(const rt__conv_params *cv, int64_t n);
/* the engine's weights of k, (KH,KW,C/G,OC), as a oneDNN descriptor of
 * data type dt: hwio, or with groups (G, OC/G, C/G, KH, KW) on strides */
void rt_kern_dnnl_conv_wmd(const rt_kern_dnnl_conv_key *k, dnnl_data_type_t dt,
                           dnnl_memory_desc_t *md);

/* the data types of a convolution's tensors, indices of rt_kern_dnnl_conv_pds' dt */
enum {
    RT_KERN_DNNL_SRC,  /* the forward's and backward-weights' input */
    RT_KERN_DNNL_WEI,  /* the forward's and backward-data's weights */
    RT_KERN_DNNL_DST,  /* the forward's output */
    RT_KERN_DNNL_DSRC, /* backward-data's output */
    RT_KERN_DNNL_DDST, /* both backwards' output gradient */
    RT_KERN_DNNL_DWEI, /* backward-weights' output */
    RT_KERN_DNNL_NDT
};
/* The forward (with k's activation as a post-op), backward-data and
 * backward-weights primitive descriptors of convolution k into pd[0..2]:
 * activations NHWC as the engine stores them, weights in the layout each
 * prefers (format any), bias float32. -1 (none left to destroy) when
 * oneDNN refuses one, or with no_ref offers only its reference one. */
int rt_kern_dnnl_conv_pds(const rt_kern_dnnl_conv_key *k,
                          const dnnl_data_type_t dt[RT_KERN_DNNL_NDT], int no_ref,
                          dnnl_primitive_desc_t pd[3]);

/* The forward of convolution k (activation as a post-op) with every
 * tensor's layout left to oneDNN (format any): the blocked layouts its
 * kernels prefer on small images. -1 when it offers none or only its
 * reference one. */
int rt_kern_dnnl_conv_fwd_any(const rt_kern_dnnl_conv_key *k, dnnl_data_type_t sdt,
                              dnnl_data_type_t wdt, dnnl_data_type_t ddt,
                              dnnl_primitive_desc_t *pd);

/* A table of built primitive sets for the process, each entry starting
 * with its key (compared with memcmp: keys are memset before filling).
 * Entries live as long as the process; primitives are only read at
 * execution, so sessions on other threads share them. */
#define RT_KERN_DNNL_CACHE_MAX 256
typedef struct rt_kern_dnnl_cache {
    pthread_mutex_t mu;
    void *e[RT_KERN_DNNL_CACHE_MAX];
    int n;
} rt_kern_dnnl_cache;
#define RT_KERN_DNNL_CACHE_INIT         \
    {                                   \
        .mu = PTHREAD_MUTEX_INITIALIZER \
    }

/* the entry of key: found, or built (build(key), under the table's lock)
 * and kept; NULL when build gave none or the table is full */
void *rt_kern_dnnl_cache_get(rt_kern_dnnl_cache *t, const void *key, size_t klen,
                             void *(*build)(const void *key));

#endif
