/*
 * rt_op_params.h - the typed parameters of each op, parsed from the node's
 * attributes and input shapes by the op's infer() (server/engine/op_*.c)
 * and read by every backend's kernels. They describe what the op computes,
 * never how a backend computes it: chunk sizes, thread counts and scratch
 * are the backend's (server/kernels/<backend>/), kept in rt__node.kdata.
 *
 *     // in an op's infer():
 *     rt__dense_params *p = rt__dense_p(nd);
 *     p->K = w->d[0];
 *     // in a kernel:
 *     const rt__dense_params *p = rt__dense_cp(a->nd);
 *
 * An accessor checks that the node's op declared that kind of parameters
 * (rt__op_def.params), so a kernel registered for the wrong op aborts at
 * its first call instead of reading another op's fields.
 */
#ifndef RTRAIN_OP_PARAMS_H
#define RTRAIN_OP_PARAMS_H

#include <stdint.h>

#define RT__MAX_IN 16 /* inputs per node (Concat is the widest) */

/* Activations an op applies to its output (Dense's and Conv2D's
 * "activation" attribute) */
enum { RT__ACT_NONE = 0, RT__ACT_RELU, RT__ACT_SIGMOID, RT__ACT_TANH };

typedef enum rt__pkind {
    RT__P_NONE = 0, /* Relu, Sigmoid, Tanh, Identity, Reshape, Flatten */
    RT__P_DENSE,    /* Dense, MatMul */
    RT__P_BCAST,    /* Add, Sub, Mul, Div, Max, Min, PRelu */
    RT__P_SOFTMAX,  /* Softmax, LogSoftmax */
    RT__P_DROPOUT,
    RT__P_CONV, /* Conv2D and the 2-D pools */
    RT__P_GAP,
    RT__P_BN,
    RT__P_CONCAT,
    RT__P_UNARY,    /* Elu, Selu, LeakyRelu, Gelu, ... (op_act.c) */
    RT__P_MAP,      /* Pad, Transpose, ReduceMean, ReduceSum */
    RT__P_LN,       /* LayerNormalization */
    RT__P_UPSAMPLE, /* Upsample */
    RT__P_RNN,      /* SimpleRNN, LSTM, GRU */
    RT__P_EMBED,    /* Embedding */
    RT__P_ACTREG,   /* ActivityReg */
    RT__P_SEQMASK,  /* SequenceMask, Masking */
    RT__P_BMM,      /* BatchMatMul */
    RT__P_BAND,     /* BandMask */
    RT__P_IMAGE,    /* RandomFlip, RandomRotation, ... (op_image.c) */
} rt__pkind;

/* Dense/MatMul: x (R,K) times W (K,N); act: Dense's own activation */
typedef struct rt__dense_params {
    int64_t K, N;
    int act;
} rt__dense_params;

/* Add/Sub/Mul with numpy broadcasting, over the output's R dims (the
 * batch counted; dim 0 is the runtime batch when batched, d[0] = -1) */
#define RT__BC_MAXR 9
typedef struct rt__bcast_params {
    int R;
    int batched;
    int64_t d[RT__BC_MAXR];  /* output dims */
    int64_t sa[RT__BC_MAXR]; /* element strides of input 0 (0 = broadcast) */
    int64_t sb[RT__BC_MAXR]; /* ... of input 1 */
    int full[2];             /* input k has the output's shape */
    int flat;                /* both do: one flat loop */
} rt__bcast_params;

/* Softmax/LogSoftmax over the last axis of C */
typedef struct rt__softmax_params {
    int64_t C;
} rt__softmax_params;

/* Dropout and its relatives, all train-time only and keyed by the counter
 * RNG (seed, node, step, element): */
enum {
    RT__DROP_PLAIN = 0, /* Dropout: inverted, as Keras */
    RT__DROP_SPATIAL,   /* SpatialDropout: one mask per (sample, channel) */
    RT__DROP_NOISE,     /* GaussianNoise: x + rate * N(0, 1) */
    RT__DROP_GAUSS,     /* GaussianDropout: x * N(1, rate / (1 - rate)) */
};
typedef struct rt__dropout_params {
    double rate; /* GaussianNoise: the stddev */
    int mode;    /* RT__DROP_* */
    int64_t C;   /* channels (last dim): the spatial mask's width */
    int64_t per; /* values per sample */
    /* Dropout's noise_shape (Keras): one mask value per element of the
     * mask's shape, broadcast over the dims where it is 1. R dims counting
     * the batch (0: no noise_shape, one draw per element); element i of
     * the batch has index (i_0..i_R-1) over d (d[0] the runtime batch) and
     * draws key sum over kept dims k of i_k * ms[k] */
    int R;
    int64_t d[9];  /* RT_MAX_DIMS + 1 */
    int64_t ms[9]; /* 0 where broadcast */
} rt__dropout_params;

/* Conv2D (NHWC, kernel (KH,KW,C/G,OC)), ConvTranspose (kernel (KH,KW,OC,C),
 * as Keras' Conv2DTranspose; OH/OW/PT/PL from its padding and
 * output_padding) and MaxPool2D/AvgPool2D (OC = C, dilation 1). Padding as TensorFlow: PT/PL cells before, the rest after. */
typedef struct rt__conv_params {
    int64_t H, W, C;    /* input per sample */
    int64_t OH, OW, OC; /* output per sample */
    int64_t KH, KW;     /* kernel / pool window */
    int64_t SH, SW;     /* strides */
    int64_t DH, DW;     /* dilations */
    int64_t PT, PL;     /* padding before, top and left */
    int bias;           /* Conv2D: has a bias input */
    int act;            /* Conv2D: its activation attribute */
    int64_t G;          /* groups (Conv2D: 0 or 1 dense) */
} rt__conv_params;

/* GlobalAvgPool: (B,H,W,C) -> (B,C) */
typedef struct rt__gap_params {
    int64_t HW, C;
} rt__gap_params;

/* BatchNorm over the last axis of C */
typedef struct rt__bn_params {
    int64_t C;
    int frozen;   /* inference mode also while training */
    int unbiased; /* moving_var takes var * R / (R - 1) (PyTorch) */
    int sync;     /* MPI replicas: the global batch's statistics */
    double momentum, eps;
} rt__bn_params;

/* Concat of k inputs along one axis: outer rows per sample (the dims
 * before the axis), the output's inner size, and each input's (its axis
 * dim times the dims after the axis) */
typedef struct rt__concat_params {
    int k;
    int64_t outer, inner;
    int64_t in_inner[RT__MAX_IN];
} rt__concat_params;

/* Elementwise unary functions with up to three constants (op_act.c has
 * each kind's formula) */
enum {
    RT__U_ELU = 0,
    RT__U_SELU,
    RT__U_LEAKY,
    RT__U_GELU,
    RT__U_GELU_TANH,
    RT__U_ERF,
    RT__U_SOFTPLUS,
    RT__U_SOFTSIGN,
    RT__U_HARDSIGMOID,
    RT__U_SWISH,
    RT__U_CLIP,
    RT__U_THRESH,
    RT__U_KRELU,
    RT__U_EXP,
    RT__U_SCALE,
    RT__U_MISH,
    RT__U_HARDSWISH,
    RT__U_LOGSIGMOID,
    RT__U_SQRT,
    RT__U_ABS,
    RT__U_LOG,
};
typedef struct rt__unary_params {
    int kind; /* RT__U_* */
    float alpha, beta, gamma;
} rt__unary_params;

/* Pad/Transpose/Reduce{Mean,Sum,Max,Min,Prod} as one index map from the input's
 * per-sample elements to the output's: input dim i (of R, batch excluded)
 * moves the output offset by os[i] per step; only inputs with lo[i] <=
 * index < hi[i] in every dim land (Pad's negative pads crop); base is the
 * output offset of input index 0. Reduce: several inputs land on one
 * output (os[i] = 0 along a reduced dim), each times scale. Pad fills the
 * rest of the output with value. ReduceMax/Min/Prod combine the landing
 * inputs with comb instead of adding them (scale 1). */
enum { RT__COMB_SUM = 0, RT__COMB_MAX, RT__COMB_MIN, RT__COMB_PROD };
typedef struct rt__map_params {
    int R;
    int64_t d[8];         /* input per-sample dims (RT_MAX_DIMS) */
    int64_t os[8];        /* output stride per input dim */
    int64_t lo[8], hi[8]; /* landing range per input dim */
    int64_t base;
    int64_t in_numel, out_numel; /* per sample */
    int reduce;                  /* outputs accumulate */
    int fill;                    /* Pad: some outputs get value */
    int comb;                    /* reduce: RT__COMB_* */
    float scale, value;
} rt__map_params;

/* LayerNormalization over the last axis of C: rows normalised to mean 0,
 * variance 1 (biased), then times gamma (scale) plus beta (center) */
typedef struct rt__ln_params {
    int64_t C;
    double eps;
    int scale, center; /* which of gamma (input 1), beta (next) exist */
} rt__ln_params;

/* Upsample (NHWC): nearest repeats each cell SH x SW times; bilinear
 * interpolates with half-pixel centres (tf.image.resize, as Keras'
 * UpSampling2D(interpolation='bilinear')) */
typedef struct rt__upsample_params {
    int64_t H, W, C, SH, SW;
    int bilinear;
} rt__upsample_params;
/* Activations inside a recurrent cell; each derivative is a function of
 * the activation's output (rt_kern_rnn.c). HARD_SIGMOID is Keras 1/2's
 * clip(0.2 x + 0.5, 0, 1); HARD_SIGMOID_V3 is Keras 3's relu6(x + 3) / 6;
 * ELU is Keras' elu (alpha 1): x > 0 ? x : exp(x) - 1, whose derivative
 * is 1 or y + 1. */
enum {
    RT__RA_LINEAR = 0,
    RT__RA_TANH,
    RT__RA_SIGMOID,
    RT__RA_RELU,
    RT__RA_HARD_SIGMOID,
    RT__RA_HARD_SIGMOID_V3,
    RT__RA_ELU,
};
enum { RT__RNN_SIMPLE = 1, RT__RNN_LSTM, RT__RNN_GRU };

/* SimpleRNN/LSTM/GRU over x (B,T,F) with Keras' weights: kernel (F,G*U),
 * recurrent kernel (U,G*U), bias (G*U), or (2,G*U) for GRU reset_after
 * (input bias row, recurrent bias row). Gates: LSTM i,f,c,o (G 4), GRU
 * z,r,h (G 3), SimpleRNN one (G 1). Output (B,U), or (B,T,U) with seq;
 * with ret_state (B,orows+S,U): that output's rows, then the final h (and
 * LSTM's final c), S states. Initial states (h0): inputs (B,U) each.
 * backwards: steps run from t = T-1 down to 0 (Keras go_backwards). A
 * sequence output holds step s at position s, or at T-1-s with rev_out
 * (Bidirectional reverses its backward half's sequence so that position t
 * is the state after reading input t). */
typedef struct rt__rnn_params {
    int cell; /* RT__RNN_* */
    int64_t T, F, U, G;
    int act, ract; /* RT__RA_* */
    int seq, backwards, rev_out, reset_after, bias;
    float drop, rdrop; /* Keras' dropout / recurrent_dropout, [0, 1) */
    int mask;          /* input index of the (B,T) step mask, 0: none */
    int zero_masked;   /* sequence output 0 at masked steps (else the
                            * carried output) */
    int64_t stateful;  /* Keras' stateful: the fixed batch size; the final
                        * states of a batch start the next one (rt__kargs.
                        * state). 0: every batch starts from zeros */
    int h0;            /* input index of the initial state h (LSTM's c is
                        * h0 + 1), 0: the states start from zeros */
    int ret_state;     /* Keras' return_state: the final states are rows of
                        * the output after the layer's own (below) */
    int64_t orows;     /* rows of U in a sample's output that are the
                        * layer's own: T with seq, else 1 */
    int64_t yrows;     /* rows of U in a sample's output: orows, then h
                        * and LSTM's c with ret_state */
} rt__rnn_params;

/* SequenceMask / Masking: x (B,T,...) with R values per step; a step is
 * kept when any of them differs from value */
typedef struct rt__seqmask_params {
    int64_t T, R;
    float value;
} rt__seqmask_params;

/* Embedding: R indices per sample (float values, integral, in [0, V))
 * -> R rows of D; drop: Keras 1's Embedding(dropout), the rate at which
 * whole rows of W are dropped in training (0: none) */
typedef struct rt__embed_params {
    int64_t V, D, R;
    float drop;
} rt__embed_params;

/* ActivityReg: Keras' activity regularizer on its input, passed through:
 * the step's loss gains l1 sum|y| + l2 sum y^2 over the batch, divided by
 * the batch size when batch_mean (Keras 2; Keras 3 does not divide) */
typedef struct rt__actreg_params {
    double l1, l2;
    int batch_mean;
} rt__actreg_params;

/* BatchMatMul: G products per sample (G * batch when batched) of
 * op(a) (M,K) and op(b) (K,N), op a transpose when ta/tb; a is stored
 * (M,K) or, ta, (K,M); b (K,N) or, tb, (N,K); y (M,N) */
typedef struct rt__bmm_params {
    int64_t G, M, N, K;
    int ta, tb;
} rt__bmm_params;

/* BandMask: over the last two dims (T, S), element (i, j) is kept when
 * (not causal or i >= j) and (window 0 or |i - j| < window), else set to
 * -1e9 (Keras' attention masks: the causal one, the sliding window) */
typedef struct rt__band_params {
    int64_t T, S, window;
    int causal;
} rt__band_params;

/* Keras' random image layers on (B, H, W, C): the input unchanged unless
 * training; in training each sample's draws come from the counter RNG
 * (seed, node, step, 4 * sample + k), as dropout's masks (op_image.c,
 * rt_imgaug.c). The geometric ones sample the input as TensorFlow's
 * ImageProjectiveTransformV3 at the point the output pixel (y, x) maps
 * to: x' = m0 x + m1 y + m2, y' = m3 x + m4 y + m5 (no half-pixel
 * offset). */
enum {
    RT__IMG_FLIP = 0,  /* flip_h, flip_v: each drawn with probability 1/2
                        * (joint: one draw flips both, as Keras 3.6+) */
    RT__IMG_ROTATE,    /* angle in [lo[0], hi[0]] turns */
    RT__IMG_TRANSLATE, /* [0] height, [1] width: fractions of H, W */
    RT__IMG_ZOOM,      /* [0] height, [1] width: zoom 1 + draw */
    RT__IMG_CONTRAST,  /* factor in [1 - lo[0], 1 + hi[0]], clipped to v */
    RT__IMG_BRIGHT,    /* + draw in [lo[0], hi[0]] * (v1 - v0), clipped */
    RT__IMG_CROP,      /* (oH, oW) out: a window at a drawn offset when
                        * training and H >= oH, W >= oW (rnd), else
                        * Keras' smart_resize: the box (ch, cw) at (h0,
                        * w0) resized bilinearly with half-pixel centres */
};
enum { RT__FILL_REFLECT = 0, RT__FILL_WRAP, RT__FILL_CONSTANT, RT__FILL_NEAREST };
typedef struct rt__image_params {
    int kind; /* RT__IMG_* */
    int64_t H, W, C;
    int flip_h, flip_v, joint;
    double lo[2], hi[2];
    int same;     /* zoom without width_factor: the height draw for both */
    int fill;     /* RT__FILL_* */
    int bilinear; /* else nearest */
    double fill_value;
    double v0, v1; /* contrast, brightness: the value range */
    int64_t oH, oW, ch, cw, h0, w0;
    int rnd;
} rt__image_params;

typedef union rt__op_params {
    rt__dense_params dense;
    rt__bcast_params bcast;
    rt__softmax_params softmax;
    rt__dropout_params dropout;
    rt__conv_params conv;
    rt__gap_params gap;
    rt__bn_params bn;
    rt__concat_params concat;
    rt__unary_params unary;
    rt__map_params map;
    rt__ln_params ln;
    rt__upsample_params upsample;
    rt__rnn_params rnn;
    rt__embed_params embed;
    rt__actreg_params actreg;
    rt__seqmask_params seqmask;
    rt__bmm_params bmm;
    rt__band_params band;
    rt__image_params image;
} rt__op_params;

#endif
