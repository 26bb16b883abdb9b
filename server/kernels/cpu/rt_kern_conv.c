/*
 * rt_kern_conv.c - Conv2D, NHWC, as im2col + GEMM over chunks of samples.
 *
 * Why chunks: the column matrix of a whole batch (W-B: 256 x 900 rows x 27)
 * is tens of MB and would be written to and read back from memory; a chunk
 * of a few thousand rows stays in L2 between im2col and the GEMM, and the
 * bias and fused activation run on the chunk's output while it is still
 * in cache. The kernel layout (KH,KW,C,OC) is Keras' and is already the
 * (K, OC) right-hand matrix of the GEMM, so weights are never reordered.
 */
#include <string.h>

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "cpu/rt_kern_conv.h"
#include "cpu/rt_kern_cpu.h"

/* o[0..n) = src[0..n): short runs (a 3-channel window row: 9 floats) as
 * fixed-size moves the compiler inlines, not a library call each */
static inline void rt__copy_run(float *restrict o, const float *restrict src, int64_t n)
{
    /* clang-format off */
    switch (n) {
#define RT__CP(N) case N: memcpy(o, src, sizeof(float) * N); return;
        RT__CP(1) RT__CP(2) RT__CP(3) RT__CP(4) RT__CP(5) RT__CP(6) RT__CP(7) RT__CP(8)
        RT__CP(9) RT__CP(10) RT__CP(11) RT__CP(12) RT__CP(13) RT__CP(14) RT__CP(15) RT__CP(16)
#undef RT__CP
    default:
        for (int64_t c = 0; c < n; c++)
            o[c] = src[c];
    }
    /* clang-format on */
}

/* x (B,H,W,C) -> col (rows, KH*KW*C) for samples [s0, s0+nb), output
 * lines [oh0, oh1) of each */
static void rt__im2col(const rt__conv_params *cv, const float *restrict x, int64_t s0, int64_t nb,
                       int64_t oh0, int64_t oh1, float *restrict col)
{
    const int64_t H = cv->H, W = cv->W, C = cv->C;
    const int64_t OH = cv->OH, OW = cv->OW;
    const int64_t KH = cv->KH, KW = cv->KW;
    const int64_t SH = cv->SH, SW = cv->SW;
    const int64_t DH = cv->DH, DW = cv->DW;
    const int64_t PT = cv->PT, PL = cv->PL;
    float *restrict o = col;
    (void)OH;
    for (int64_t b = s0; b < s0 + nb; b++) {
        const float *xb = x + b * H * W * C;
        for (int64_t oh = oh0; oh < oh1; oh++) {
            for (int64_t ow = 0; ow < OW; ow++) {
                const int64_t iw0 = ow * SW - PL;
                /* undilated window rows inside the image are KW*C
                 * contiguous floats of x (NHWC): one copy, not KW */
                const int row_in = DW == 1 && iw0 >= 0 && iw0 + KW <= W;
                for (int64_t i = 0; i < KH; i++) {
                    const int64_t ih = oh * SH - PT + i * DH;
                    if (ih < 0 || ih >= H) {
                        for (int64_t c = 0; c < KW * C; c++)
                            o[c] = 0.0f;
                        o += KW * C;
                        continue;
                    }
                    if (row_in) {
                        rt__copy_run(o, xb + (ih * W + iw0) * C, KW * C);
                        o += KW * C;
                        continue;
                    }
                    for (int64_t j = 0; j < KW; j++) {
                        const int64_t iw = iw0 + j * DW;
                        if (iw < 0 || iw >= W) {
                            for (int64_t c = 0; c < C; c++)
                                o[c] = 0.0f;
                        } else {
                            const float *restrict src = xb + (ih * W + iw) * C;
                            for (int64_t c = 0; c < C; c++)
                                o[c] = src[c];
                        }
                        o += C;
                    }
                }
            }
        }
    }
}

/* dx (B,H,W,C) += col (rows, KH*KW*C) for samples [s0, s0+nb), output
 * lines [oh0, oh1) of each */
static void rt__col2im_add(const rt__conv_params *cv, const float *restrict col, int64_t s0,
                           int64_t nb, int64_t oh0, int64_t oh1, float *restrict dx)
{
    const int64_t H = cv->H, W = cv->W, C = cv->C;
    const int64_t OH = cv->OH, OW = cv->OW;
    const int64_t KH = cv->KH, KW = cv->KW;
    const int64_t SH = cv->SH, SW = cv->SW;
    const int64_t DH = cv->DH, DW = cv->DW;
    const int64_t PT = cv->PT, PL = cv->PL;
    const float *restrict o = col;
    (void)OH;
    for (int64_t b = s0; b < s0 + nb; b++) {
        float *xb = dx + b * H * W * C;
        for (int64_t oh = oh0; oh < oh1; oh++) {
            for (int64_t ow = 0; ow < OW; ow++) {
                for (int64_t i = 0; i < KH; i++) {
                    const int64_t ih = oh * SH - PT + i * DH;
                    for (int64_t j = 0; j < KW; j++) {
                        const int64_t iw = ow * SW - PL + j * DW;
                        if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
                            float *restrict d = xb + (ih * W + iw) * C;
                            for (int64_t c = 0; c < C; c++)
                                d[c] += o[c];
                        }
                        o += C;
                    }
                }
            }
        }
    }
}

/* Below this many multiply-adds a convolution runs on one thread: a
 * parallel region costs microseconds, and on a loaded machine a whole
 * scheduler slice when a team member is not running. */
#define RT__PAR_MACS (INT64_C(1) << 24)

/* Row-major SGEMM, single-threaded when called from a parallel region
 * (oneDNN does not nest), and reentrant, unlike rt_kern_gemm's small-
 * matrix path that transposes into the exec's one shared buffer. */
static void rt__gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    /* outside a parallel region oneDNN would start its own team for every
     * call; the kernels below decided how many threads the work is worth,
     * so a serial caller gets a serial GEMM */
    rt_kern_dnnl_sgemm(1, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

/* ---------------------------------------------------- small-K microkernel
 *
 * A convolution over few input channels (W-B's first layer: K = 3*3*3 = 27)
 * is a GEMM with a short inner dimension, where a library GEMM spends much
 * of its time packing. Here a block of RB rows keeps its RB x OC outputs
 * in vector registers while k runs, loading each row of W once per block,
 * and adds the bias and applies the activation before the single store.
 * GCC's vector extensions compile to AVX-512 (or AVX2 pairs) for the host.
 */
typedef float rt__v16 __attribute__((vector_size(64)));
typedef int32_t rt__i16 __attribute__((vector_size(64)));
#define RT__MK_RB 6 /* rows per block: RB * NB accumulators <= 24 registers */

static inline rt__v16 rt__ld16(const float *p)
{
    rt__v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* bit i: v[i] > 0 (relu'(y) of a ReLU output y, rt_kern_conv_plan.rmask) */
static inline uint16_t rt__mbits(rt__v16 v)
{
#ifdef __AVX512F__
    return (uint16_t)_mm512_cmp_ps_mask((__m512)v, _mm512_setzero_ps(), _CMP_GT_OQ);
#else
    uint16_t m = 0;
    for (int i = 0; i < 16; i++)
        m |= (uint16_t)((v[i] > 0.0f) << i);
    return m;
#endif
}

/* dy where bit i of m is set, 0 elsewhere */
static inline rt__v16 rt__mkeep(rt__v16 d, uint16_t m)
{
#ifdef __AVX512F__
    return (rt__v16)_mm512_maskz_mov_ps((__mmask16)m, (__m512)d);
#else
    for (int i = 0; i < 16; i++)
        d[i] = m >> i & 1 ? d[i] : 0.0f;
    return d;
#endif
}

/* rb <= RB rows of act(A w + bias) in registers: row i's k-th value is
 * x[kh*ls + i*rs + k'] for k = kh*KWC + k' (a column matrix: KH = 1, KWC =
 * rs = K; x read in place: rt__mk_conv_x) */
static inline __attribute__((always_inline)) void
rt__mk_rows_x(int NB, int64_t rb, int64_t KH, int64_t KWC, int64_t rs, int64_t ls, int64_t OC,
              const float *restrict x, const float *restrict w, const float *restrict bias,
              int relu, float *restrict y, uint16_t *restrict msk)
{
    rt__v16 acc[RT__MK_RB][4];
    for (int i = 0; i < RT__MK_RB; i++)
        for (int j = 0; j < NB; j++)
            acc[i][j] = bias ? rt__ld16(bias + 16 * j) : (rt__v16){0};
    for (int64_t kh = 0; kh < KH; kh++) {
        const float *restrict xr = x + kh * ls;
        const float *restrict wk = w + kh * KWC * OC;
        for (int64_t k = 0; k < KWC; k++) {
            rt__v16 wv[4];
            for (int j = 0; j < NB; j++)
                wv[j] = rt__ld16(wk + k * OC + 16 * j);
            /* hidden from the optimizer: it would otherwise keep the x
             * values a later k reuses (3 channels: pixel i's k+3 is pixel
             * i+1's k) in registers it then spills, in place of one
             * broadcast load each */
            const float *xk = xr + k;
            __asm__("" : "+r"(xk));
            for (int i = 0; i < RT__MK_RB; i++) {
                if (i >= rb)
                    break;
                const float av = xk[i * rs];
                for (int j = 0; j < NB; j++)
                    acc[i][j] += av * wv[j];
            }
        }
    }
    for (int i = 0; i < RT__MK_RB && i < rb; i++)
        for (int j = 0; j < NB; j++) {
            rt__v16 v = acc[i][j];
            if (relu)
                v = (rt__v16)((rt__i16)v & (v > (rt__v16){0}));
            memcpy(y + i * OC + 16 * j, &v, sizeof v);
            if (msk)
                msk[i * NB + j] = rt__mbits(v);
        }
}

/* y (rows, OC) = act(A (rows, K) w (K, OC) + bias); OC = 16 * NB, NB <= 4 */
static void rt__mk_gemm(int64_t rows, int64_t K, int64_t OC, const float *A, const float *w,
                        const float *bias, int relu, float *y)
{
    const int NB = (int)(OC / 16);
    for (int64_t r = 0; r < rows; r += RT__MK_RB) {
        const int64_t rb = rows - r < RT__MK_RB ? rows - r : RT__MK_RB;
        const float *a = A + r * K;
        float *o = y + r * OC;
        switch (NB) {
        case 1: rt__mk_rows_x(1, rb, 1, K, K, 0, OC, a, w, bias, relu, o, NULL); break;
        case 2: rt__mk_rows_x(2, rb, 1, K, K, 0, OC, a, w, bias, relu, o, NULL); break;
        case 3: rt__mk_rows_x(3, rb, 1, K, K, 0, OC, a, w, bias, relu, o, NULL); break;
        default: rt__mk_rows_x(4, rb, 1, K, K, 0, OC, a, w, bias, relu, o, NULL); break;
        }
    }
}

/* the microkernel pays when K is short and OC fills whole vectors */
static inline int rt__mk_fits(int64_t K, int64_t OC) { return K <= 64 && OC % 16 == 0 && OC <= 64; }

/* dW rows [k0, k0+kb), channels [c0, c0 + 16 NB) += A^T dz over rows of
 * A (rows, K): RB columns of A at a time against 16 NB channels held in
 * registers, so dz is read from cache once per block and dW written once.
 * RB x NB accumulators: 6 x 4 or 14 x 2 (28 of the 32 vector registers;
 * the rest hold dz and the broadcast). The columns are contiguous in A, so
 * a row's broadcasts are constant displacements from one pointer. FULL: kb
 * == RB. Each dW value sums the rows in order from zero whatever the
 * blocking. */
#define RT__DW_RBMAX 14
static inline __attribute__((always_inline)) void
rt__mk_dw_cols(int NB, int RB, int FULL, int64_t k0, int64_t kb, int64_t c0, int64_t rows,
               int64_t K, int64_t OC, const float *restrict A, const float *restrict dz,
               float *restrict dw)
{
    if (FULL)
        kb = RB;
    rt__v16 acc[RT__DW_RBMAX][4];
#pragma GCC unroll 16
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NB; j++)
            acc[i][j] = (rt__v16){0};
    dz += c0;
    const float *a = A + k0;
    for (int64_t r = 0; r < rows; r++) {
        rt__v16 d[4];
#pragma GCC unroll 4
        for (int j = 0; j < NB; j++)
            d[j] = rt__ld16(dz + 16 * j);
        dz += OC;
#pragma GCC unroll 16
        for (int i = 0; i < RB; i++) {
            if (!FULL && i >= kb)
                break;
            const float av = a[i];
#pragma GCC unroll 4
            for (int j = 0; j < NB; j++)
                acc[i][j] += av * d[j];
        }
        a += K;
    }
    float *dwc = dw + c0;
    for (int i = 0; i < RB && i < kb; i++)
        for (int j = 0; j < NB; j++) {
            rt__v16 v = rt__ld16(dwc + (k0 + i) * OC + 16 * j) + acc[i][j];
            memcpy(dwc + (k0 + i) * OC + 16 * j, &v, sizeof v);
        }
}

/* one block of rt__mk_dwa: NB, RB and FULL as constants */
#define RT__DW_FR(NB, RB, ...)                  \
    if (kb == (RB)) {                           \
        rt__mk_dw_cols(NB, RB, 1, __VA_ARGS__); \
    } else {                                    \
        rt__mk_dw_cols(NB, RB, 0, __VA_ARGS__); \
    }

/* dW (K, OC) += A^T (K x rows) dz (rows, OC) for OC = 16 NB <= 64. 32
 * channels, and 64 as two halves where K's blocks of 6 would leave more
 * registers idle (K = 27: 27 of 28 used, against 27 of 30), go in blocks
 * of 14 columns. */
static void rt__mk_dwa(int64_t rows, int64_t K, int64_t OC, const float *A, const float *dz,
                       float *dw)
{
    int NB = (int)(OC / 16), RB = 6;
    if (NB == 2 || (NB == 4 && (K + 5) / 6 * 6 > (K + 13) / 14 * 14))
        NB = 2, RB = 14;
    for (int64_t c0 = 0; c0 < OC; c0 += 16 * NB)
        for (int64_t k0 = 0; k0 < K; k0 += RB) {
            const int64_t kb = K - k0 < RB ? K - k0 : RB;
            switch (NB * 100 + RB) {
            case 214: RT__DW_FR(2, 14, k0, kb, c0, rows, K, OC, A, dz, dw); break;
            case 106: RT__DW_FR(1, 6, k0, kb, c0, rows, K, OC, A, dz, dw); break;
            case 306: RT__DW_FR(3, 6, k0, kb, c0, rows, K, OC, A, dz, dw); break;
            default: RT__DW_FR(4, 6, k0, kb, c0, rows, K, OC, A, dz, dw); break;
            }
        }
}

/* dz (rows, OC) = dy * relu'(y) (or dy), db (OC) += its column sums (rows
 * in order), one contiguous pass over dy and y (they come from memory), or
 * over dy and msk's bits of relu'(y) (rt_kern_conv_plan.rmask) */
static void rt__dz_form(int64_t rows, int64_t OC, const float *restrict dy, const float *restrict y,
                        const uint16_t *restrict msk, int relu, float *restrict dz,
                        float *restrict db)
{
    const int NB = (int)(OC / 16);
    rt__v16 bacc[4] = {{0}, {0}, {0}, {0}};
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < 4; j++) {
            if (j >= NB)
                break;
            /* the next call's rows (the next few lines) come from memory:
             * on their way while the microkernel works on these */
            __builtin_prefetch(dy + (r + rows) * OC + 16 * j);
            if (relu && !msk)
                __builtin_prefetch(y + (r + rows) * OC + 16 * j);
            rt__v16 d = rt__ld16(dy + r * OC + 16 * j);
            if (relu && msk)
                d = rt__mkeep(d, msk[r * NB + j]);
            else if (relu)
                d = (rt__v16)((rt__i16)d & (rt__ld16(y + r * OC + 16 * j) > (rt__v16){0}));
            memcpy(dz + r * OC + 16 * j, &d, sizeof d);
            bacc[j] += d;
        }
    if (db)
        for (int j = 0; j < NB; j++) {
            const rt__v16 v = rt__ld16(db + 16 * j) + bacc[j];
            memcpy(db + 16 * j, &v, sizeof v);
        }
}

/* ------------------------------------ the microkernels reading x in place
 *
 * Without dilation, row kh of a pixel's window is KW*C contiguous floats of
 * x (NHWC) when the window stays inside the image, and the next pixel's
 * starts SW*C floats on: the small-K microkernels can read x where they
 * would read the column matrix, and im2col (a write and a read of K floats
 * per output pixel, as much traffic as the GEMM's whole input) is skipped.
 * A padded layer (the 3x3x64 net's 'same' first layer) reads a zero-padded
 * copy of its chunk's samples instead, made in the column buffer: C floats
 * per input pixel against im2col's K per output pixel. The sums run in the
 * same order as over the column matrix, so the results are the same bits.
 * RT__XP_*: rt_kern_conv_plan.in_place. */
enum { RT__XP_NONE = 0, RT__XP_X, RT__XP_PADDED };

static int rt__mk_in_place(const rt__conv_params *cv, int64_t K, int64_t OC, int64_t col_floats,
                           int64_t chunk, int banded)
{
    if (cv->DH != 1 || cv->DW != 1 || !rt__mk_fits(K, OC) ||
        (cv->act != RT__ACT_NONE && cv->act != RT__ACT_RELU) || (cv->KH == 1 && cv->KW == 1))
        return RT__XP_NONE;
    const int64_t hp = (cv->OH - 1) * cv->SH + cv->KH, wp = (cv->OW - 1) * cv->SW + cv->KW;
    if (cv->PT == 0 && cv->PL == 0 && hp <= cv->H && wp <= cv->W)
        return RT__XP_X;
    /* the padded copy of a chunk's samples must fit where its columns would */
    return !banded && chunk * hp * wp * cv->C <= col_floats ? RT__XP_PADDED : RT__XP_NONE;
}

/* Layers with K > 64 take the dW microkernel too (rt__mk_dwa over im2col's
 * columns, a line at a time) in place of sgemm: a 64 -> 64 3x3 layer's
 * im2col GEMM sums over only a band's rows, and sgemm re-packs the band's
 * columns and reads and writes all of dW for every band (the 3x3x64 net's
 * second layer: 6-11% less time, bench/conv --layers). Under the engine's
 * own choice only: RT_KERN_CONV_IM2COL keeps sgemm, the reference the
 * tests and bench/conv compare with. rt_kern_conv_plan.dw_mk. */
static int rt__mk_dw_big(const rt__conv_params *cv, int64_t K, int64_t OC)
{
    return K > 64 && OC % 16 == 0 && OC <= 64 && rt_kern_conv_impl == RT_KERN_CONV_AUTO &&
           (cv->act == RT__ACT_NONE || cv->act == RT__ACT_RELU);
}

/* the zero-padded copy of samples [s0, s0+nb) of x into buf: hp lines of
 * wp pixels each, the image at line PT, pixel PL */
static void rt__x_pad(const rt__conv_params *cv, const float *x, int64_t s0, int64_t nb, int64_t hp,
                      int64_t wp, float *buf)
{
    const int64_t H = cv->H, W = cv->W, C = cv->C;
    float *o = buf;
    for (int64_t b = s0; b < s0 + nb; b++)
        for (int64_t h = 0; h < hp; h++) {
            const int64_t ih = h - cv->PT;
            if (ih < 0 || ih >= H) {
                memset(o, 0, sizeof(float) * (size_t)(wp * C));
                o += wp * C;
                continue;
            }
            /* zeros left of the image, its row, zeros right of it */
            const int64_t w0 = cv->PL < wp ? cv->PL : wp;
            const int64_t w1 = cv->PL + W < wp ? cv->PL + W : wp;
            memset(o, 0, sizeof(float) * (size_t)(w0 * C));
            if (w1 > w0)
                memcpy(o + w0 * C, x + ((b * H + ih) * W) * C,
                       sizeof(float) * (size_t)((w1 - w0) * C));
            memset(o + (w1 > w0 ? w1 : w0) * C, 0,
                   sizeof(float) * (size_t)((wp - (w1 > w0 ? w1 : w0)) * C));
            o += wp * C;
        }
}

/* what the in-place kernels read for samples [s0, s0+nb): x itself, or the
 * zero-padded copy made in buf; *g gets the geometry read (unpadded) and
 * *sb the first sample's index in what is returned */
static const float *rt__x_view(const rt_kern_conv_plan *kp, const rt__conv_params *cv,
                               const float *x, int64_t s0, int64_t nb, float *buf,
                               rt__conv_params *g, int64_t *sb)
{
    *g = *cv;
    *sb = s0;
    if (kp->in_place != RT__XP_PADDED)
        return x;
    const int64_t hp = (cv->OH - 1) * cv->SH + cv->KH, wp = (cv->OW - 1) * cv->SW + cv->KW;
    rt__x_pad(cv, x, s0, nb, hp, wp, buf);
    g->H = hp;
    g->W = wp;
    g->PT = g->PL = 0;
    *sb = 0;
    return buf;
}

/* The 3x3 window over 3 channels (RGB first layers: W-B's, the 3x3x64
 * net's) has K = 27 = three window rows of 9 contiguous floats of x. Its
 * weight gradient reads x in place: with the column blocks known at
 * compile time (two halves of 64 channels x blocks of 14 and 13 columns,
 * 27 of 28 accumulator rows used), every column is x at a constant
 * displacement from the pixel's window row, so no im2col and no offset
 * registers. Same sums in the same order as rt__mk_dwa over im2col's
 * columns. */
static inline int rt__x9_fits(const rt__conv_params *cv, const rt_kern_conv_plan *kp)
{
    return kp->in_place && cv->KH == 3 && cv->KW * cv->C == 9 && cv->OC == 64;
}

static inline __attribute__((always_inline)) void
rt__mk_dw_x9_blk(int K0, int KB, const rt__conv_params *g, int64_t c0, const float *restrict x,
                 int64_t s0, int64_t nb, int64_t oh0, int64_t oh1, const float *restrict dz,
                 float *restrict dw)
{
    enum { NB = 2 };
    const int64_t OC = g->OC, OW = g->OW, rs = g->SW * g->C, ls = g->W * g->C;
    rt__v16 acc[14][NB];
#pragma GCC unroll 16
    for (int i = 0; i < KB; i++)
#pragma GCC unroll 2
        for (int j = 0; j < NB; j++)
            acc[i][j] = (rt__v16){0};
    dz += c0;
    for (int64_t b = s0; b < s0 + nb; b++)
        for (int64_t oh = oh0; oh < oh1; oh++) {
            const float *xl = x + (b * g->H + oh * g->SH) * ls;
            for (int64_t ow = 0; ow < OW; ow++) {
                rt__v16 d[NB];
#pragma GCC unroll 2
                for (int j = 0; j < NB; j++)
                    d[j] = rt__ld16(dz + 16 * j);
                dz += OC;
                const float *a = xl + ow * rs;
#pragma GCC unroll 16
                for (int i = 0; i < KB; i++) {
                    const float av = a[(K0 + i) / 9 * ls + (K0 + i) % 9];
#pragma GCC unroll 2
                    for (int j = 0; j < NB; j++)
                        acc[i][j] += av * d[j];
                }
            }
        }
    float *dwc = dw + c0;
    for (int i = 0; i < KB; i++)
        for (int j = 0; j < NB; j++) {
            rt__v16 v = rt__ld16(dwc + (K0 + i) * OC + 16 * j) + acc[i][j];
            memcpy(dwc + (K0 + i) * OC + 16 * j, &v, sizeof v);
        }
}

/* dW (27, 64) += over lines [oh0, oh1) of samples [s0, s0+nb) of the
 * in-place view x (g: its geometry), dz read in pixel order */
static void rt__mk_dw_x9(const rt__conv_params *g, const float *x, int64_t s0, int64_t nb,
                         int64_t oh0, int64_t oh1, const float *dz, float *dw)
{
    for (int64_t c0 = 0; c0 < 64; c0 += 32) {
        rt__mk_dw_x9_blk(0, 14, g, c0, x, s0, nb, oh0, oh1, dz, dw);
        rt__mk_dw_x9_blk(14, 13, g, c0, x, s0, nb, oh0, oh1, dz, dw);
    }
}

/* y (rows of samples [s0, s0+nb), lines [oh0, oh1), OC) = act(conv + bias)
 * by rt__mk_rows_x, RB pixels of one output line at a time; g: x's
 * geometry (unpadded); msk (rows, OC / 16), unless NULL: ReLU's y > 0 bits */
static void rt__mk_conv_x(const rt__conv_params *g, const float *x, int64_t s0, int64_t nb,
                          int64_t oh0, int64_t oh1, const float *w, const float *bias, int relu,
                          float *y, uint16_t *msk)
{
    const int NB = (int)(g->OC / 16);
    const int64_t OC = g->OC, OW = g->OW, C = g->C;
    const int64_t KWC = g->KW * C, rs = g->SW * C, ls = g->W * C;
    /* a 3x3 window over 3 channels, stride 1, 64 channels out (RGB first
     * layers): every trip count and displacement a constant */
    const int rgb = NB == 4 && g->KH == 3 && g->KW == 3 && C == 3 && g->SW == 1;
    for (int64_t b = s0; b < s0 + nb; b++)
        for (int64_t oh = oh0; oh < oh1; oh++) {
            const float *xl = x + (b * g->H + oh * g->SH) * ls;
            for (int64_t ow = 0; ow < OW; ow += RT__MK_RB) {
                const int64_t rb = OW - ow < RT__MK_RB ? OW - ow : RT__MK_RB;
                const float *xb = xl + ow * rs;
                if (rgb && rb == RT__MK_RB) {
                    rt__mk_rows_x(4, RT__MK_RB, 3, 9, 3, ls, 64, xb, w, bias, relu, y, msk);
                    y += rb * OC;
                    msk = msk ? msk + rb * NB : NULL;
                    continue;
                }
                switch (NB) {
                case 1:
                    rt__mk_rows_x(1, rb, g->KH, KWC, rs, ls, OC, xb, w, bias, relu, y, msk);
                    break;
                case 2:
                    rt__mk_rows_x(2, rb, g->KH, KWC, rs, ls, OC, xb, w, bias, relu, y, msk);
                    break;
                case 3:
                    rt__mk_rows_x(3, rb, g->KH, KWC, rs, ls, OC, xb, w, bias, relu, y, msk);
                    break;
                default:
                    rt__mk_rows_x(4, rb, g->KH, KWC, rs, ls, OC, xb, w, bias, relu, y, msk);
                    break;
                }
                y += rb * OC;
                msk = msk ? msk + rb * NB : NULL;
            }
        }
}

/* ------------------------------------------------ the per-sample tap path
 *
 * Stride-1 layers with K > 64, at most 64 channels on either side and more
 * than 64 output pixels (the 3x3x64 net's second layer, ResNet-18's first
 * stage) take both backward directions a sample at a time, with no
 * im2col and no oneDNN primitive:
 *   - dz = dy * relu'(y) (or dy) is formed once per sample, a line at a
 *     time (the next line's dy and y prefetched), into a zero-bordered
 *     copy: KH-1-PT lines above the sample's dz, KW-1-PL pixels left of
 *     it. Both gradients read that copy from L2;
 *   - backward-data: dx is a stride-1 convolution of that copy with the
 *     flipped, transposed weights W'[kh][kw][oc][c] = W[KH-1-kh][KW-1-kw]
 *     [c][oc] (rt__mk_dx_blk: 6 pixels x 64 channels in registers over the
 *     KH KW OC sums, W' streamed from L2). im2col's way wrote dz W^T as K
 *     columns per pixel (a GEMM with an inner dimension of OC) and added
 *     them back into dx (col2im); oneDNN's backward-data primitive
 *     (jit:avx512_core) ran 15-20% slower than this on the 32x32x64 layer;
 *   - backward-weights reads x in place (a zero-padded copy of the sample
 *     for a padded layer): RB columns x 16 NB channels of dW in registers
 *     over a band of lines (rt__mk_dw_band), the band's dz in L1.
 * rt_kern_conv_plan.tap; under the engine's own choice only
 * (RT_KERN_CONV_IM2COL, the tests' and bench/conv's reference, keeps
 * im2col). Sums run in another order than im2col's: not the same bits. */
typedef struct {
    int64_t tp, lp, Hq, Wq; /* dz's zero-bordered copy: lines above, pixels left, size */
    int64_t pf;             /* its floats (a multiple of 16) */
    int xpad;               /* dW reads a zero-padded copy of x (else x itself) */
    int64_t xw, xf;         /* pixels per line of what dW reads; floats of the copy */
    int64_t L;              /* lines per dW band */
    int rb;                 /* dW columns per register block */
} rt__tapgeo;

/* floats of the two copies a thread holds at most (L2-sized: 32x32x64
 * layers need 148K) */
#define RT__TAP_MAX_FLOATS (192 * 1024)

static int rt__tap_fits(const rt__conv_params *cv, int64_t K)
{
    if (rt_kern_conv_impl != RT_KERN_CONV_AUTO || cv->G > 1 || K <= 64 || cv->SH != 1 ||
        cv->SW != 1 || cv->DH != 1 || cv->DW != 1 || (cv->KH == 1 && cv->KW == 1) ||
        (cv->act != RT__ACT_NONE && cv->act != RT__ACT_RELU))
        return 0;
    if (cv->OC % 16 || cv->OC > 64 || cv->C % 16 || cv->C > 64)
        return 0;
    /* every dz line and pixel lands inside the copy */
    const int64_t tp = cv->KH - 1 - cv->PT, lp = cv->KW - 1 - cv->PL;
    return tp >= 0 && lp >= 0 && cv->OH + tp <= cv->H + cv->KH - 1 &&
           cv->OW + lp <= cv->W + cv->KW - 1;
}

static rt__tapgeo rt__tap_geo(const rt__conv_params *cv)
{
    rt__tapgeo t;
    t.tp = cv->KH - 1 - cv->PT;
    t.lp = cv->KW - 1 - cv->PL;
    t.Hq = cv->H + cv->KH - 1;
    t.Wq = cv->W + cv->KW - 1;
    t.pf = (t.Hq * t.Wq * cv->OC + 15) & ~(int64_t)15;
    const int64_t hp = cv->OH - 1 + cv->KH, wp = cv->OW - 1 + cv->KW;
    t.xpad = cv->PT || cv->PL || hp > cv->H || wp > cv->W;
    t.xw = t.xpad ? wp : cv->W;
    t.xf = t.xpad ? (hp * wp * cv->C + 15) & ~(int64_t)15 : 0;
    /* a band's dz: 32 KiB */
    t.L = 8192 / (cv->OW * cv->OC);
    t.L = t.L < 1 ? 1 : t.L > cv->OH ? cv->OH : t.L;
    /* RB columns must not straddle window rows (KW C floats each) */
    const int64_t NB = cv->OC / 16, kwc = cv->KW * cv->C;
    t.rb = NB == 4 ? (kwc % 6 ? 4 : 6) : NB == 3 ? 8 : NB == 2 ? (kwc % 12 ? 8 : 12) : 8;
    return t;
}

/* W'[kh][kw][oc][c] = W[KH-1-kh][KW-1-kw][c][oc] */
static void rt__tap_wflip(const rt__conv_params *cv, const float *restrict w, float *restrict wf)
{
    const int64_t KH = cv->KH, KW = cv->KW, C = cv->C, OC = cv->OC;
    for (int64_t kh = 0; kh < KH; kh++)
        for (int64_t kw = 0; kw < KW; kw++) {
            const float *restrict s = w + ((KH - 1 - kh) * KW + (KW - 1 - kw)) * C * OC;
            float *restrict d = wf + (kh * KW + kw) * OC * C;
            for (int64_t oc = 0; oc < OC; oc++)
                for (int64_t c = 0; c < C; c++)
                    d[oc * C + c] = s[c * OC + oc];
        }
}

/* dW's RB columns (x at a, the next pixel as floats on, the next line al
 * on) x 16 NB channels (dz at dz, OC per pixel, the next line dl on) +=
 * their products over nl lines of OW pixels, in registers; dw at the
 * block's first column and channel */
static inline __attribute__((always_inline)) void
rt__mk_dw_band(int NB, int RB, int64_t nl, int64_t OW, const float *restrict a, int64_t as,
               int64_t al, const float *restrict dz, int64_t dl, int64_t OC, float *restrict dw)
{
    rt__v16 acc[12][4];
#pragma GCC unroll 12
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NB; j++)
            acc[i][j] = (rt__v16){0};
    for (int64_t l = 0; l < nl; l++) {
        const float *ap = a + l * al, *dp = dz + l * dl;
        for (int64_t ow = 0; ow < OW; ow++) {
            rt__v16 d[4];
#pragma GCC unroll 4
            for (int j = 0; j < NB; j++)
                d[j] = rt__ld16(dp + 16 * j);
            dp += OC;
#pragma GCC unroll 12
            for (int i = 0; i < RB; i++) {
                const float av = ap[i];
#pragma GCC unroll 4
                for (int j = 0; j < NB; j++)
                    acc[i][j] += av * d[j];
            }
            ap += as;
        }
    }
    for (int i = 0; i < RB; i++)
        for (int j = 0; j < NB; j++) {
            const rt__v16 v = rt__ld16(dw + i * OC + 16 * j) + acc[i][j];
            memcpy(dw + i * OC + 16 * j, &v, sizeof v);
        }
}

/* dW (K, OC) += one sample's: xv what dW reads of it (x itself or its
 * padded copy, t->xw pixels per line), pz its dz copy */
static void rt__tap_dw(const rt__conv_params *cv, const rt__tapgeo *t, const float *xv,
                       const float *pz, float *dw)
{
    const int64_t C = cv->C, OC = cv->OC, OH = cv->OH, OW = cv->OW;
    const int64_t kwc = cv->KW * C, K = cv->KH * kwc, ls = t->xw * C, dl = t->Wq * OC;
    const int NB = (int)(OC / 16), RB = t->rb;
    for (int64_t l0 = 0; l0 < OH; l0 += t->L) {
        const int64_t nl = OH - l0 < t->L ? OH - l0 : t->L;
        const float *dz = pz + ((l0 + t->tp) * t->Wq + t->lp) * OC;
        for (int64_t k0 = 0; k0 < K; k0 += RB) {
            const float *ap = xv + (l0 + k0 / kwc) * ls + k0 % kwc;
            float *d = dw + k0 * OC;
            switch (NB * 100 + RB) {
            case 406: rt__mk_dw_band(4, 6, nl, OW, ap, C, ls, dz, dl, OC, d); break;
            case 404: rt__mk_dw_band(4, 4, nl, OW, ap, C, ls, dz, dl, OC, d); break;
            case 308: rt__mk_dw_band(3, 8, nl, OW, ap, C, ls, dz, dl, OC, d); break;
            case 212: rt__mk_dw_band(2, 12, nl, OW, ap, C, ls, dz, dl, OC, d); break;
            case 208: rt__mk_dw_band(2, 8, nl, OW, ap, C, ls, dz, dl, OC, d); break;
            default: rt__mk_dw_band(1, 8, nl, OW, ap, C, ls, dz, dl, OC, d); break;
            }
        }
    }
}

/* dx rows (rb <= RB pixels, C = 16 NB channels, Co floats apart) (+)= their
 * window's products: pixel i's window row kh is pr[i] + kh ls, KWC floats
 * of dz's copy, against W' (KH KWC x Co) streamed once per block; add: the
 * rows start from dx, else from zero */
static inline __attribute__((always_inline)) void
rt__mk_dx_blk(int NB, int64_t rb, const float *const *pr, int64_t KH, int64_t KWC, int64_t ls,
              const float *restrict wf, int64_t Co, int add, float *restrict dx)
{
    rt__v16 acc[RT__MK_RB][4];
    for (int i = 0; i < RT__MK_RB; i++)
        for (int j = 0; j < NB; j++)
            acc[i][j] = add && i < rb ? rt__ld16(dx + i * Co + 16 * j) : (rt__v16){0};
    const float *p[RT__MK_RB];
    for (int i = 0; i < RT__MK_RB; i++)
        p[i] = pr[i < rb ? i : 0];
    for (int64_t kh = 0; kh < KH; kh++) {
        const float *restrict wk = wf + kh * KWC * Co;
        for (int64_t k = 0; k < KWC; k++) {
            rt__v16 wv[4];
            for (int j = 0; j < NB; j++)
                wv[j] = rt__ld16(wk + k * Co + 16 * j);
            for (int i = 0; i < RT__MK_RB; i++) {
                if (i >= rb)
                    break;
                const float av = p[i][kh * ls + k];
                for (int j = 0; j < NB; j++)
                    acc[i][j] += av * wv[j];
            }
        }
    }
    for (int i = 0; i < RT__MK_RB && i < rb; i++)
        for (int j = 0; j < NB; j++)
            memcpy(dx + i * Co + 16 * j, &acc[i][j], sizeof(rt__v16));
}

/* dx of one sample (H, W, C) (+)= the stride-1 convolution of its dz copy
 * pz with W' (wf), RB pixels at a time in registers over all KH KW OC
 * sums; blocks run on across line ends (a 32-pixel line would leave a
 * block of 2) */
static void rt__tap_dx(const rt__conv_params *cv, const rt__tapgeo *t, const float *pz,
                       const float *wf, int add, float *dx)
{
    const int64_t H = cv->H, W = cv->W, C = cv->C, OC = cv->OC;
    const int64_t KWC = cv->KW * OC, ls = t->Wq * OC, npx = H * W;
    const int NB = (int)(C / 16);
    for (int64_t p0 = 0; p0 < npx; p0 += RT__MK_RB) {
        const int64_t rb = npx - p0 < RT__MK_RB ? npx - p0 : RT__MK_RB;
        const float *pr[RT__MK_RB];
        for (int64_t i = 0; i < rb; i++)
            pr[i] = pz + ((p0 + i) / W * t->Wq + (p0 + i) % W) * OC;
        float *o = dx + p0 * C;
        switch (NB) {
        case 1: rt__mk_dx_blk(1, rb, pr, cv->KH, KWC, ls, wf, C, add, o); break;
        case 2: rt__mk_dx_blk(2, rb, pr, cv->KH, KWC, ls, wf, C, add, o); break;
        case 3: rt__mk_dx_blk(3, rb, pr, cv->KH, KWC, ls, wf, C, add, o); break;
        default: rt__mk_dx_blk(4, rb, pr, cv->KH, KWC, ls, wf, C, add, o); break;
        }
    }
}

/* the per-thread partial dW and db (at kp->dw_off in each thread's
 * scratch) into dW and db, in thread order, so a given thread count always
 * gives the same bits; dW and db accumulate or are overwritten as a asks */
static void rt__sum_partials(const rt__kargs *a, const rt_kern_conv_plan *kp, int team, int64_t m,
                             int64_t OC, float *dw, float *db)
{
    if (dw) {
        const float *p0 = a->scratch + kp->dw_off;
        if (!(a->accum & 2u))
            memcpy(dw, p0, sizeof(float) * (size_t)m);
        else
            for (int64_t i = 0; i < m; i++)
                dw[i] += p0[i];
        for (int t = 1; t < team; t++) {
            const float *restrict p = a->scratch + (int64_t)t * kp->tstride + kp->dw_off;
            for (int64_t i = 0; i < m; i++)
                dw[i] += p[i];
        }
    }
    if (db) {
        for (int t = 0; t < team; t++) {
            const float *restrict p = a->scratch + (int64_t)t * kp->tstride + kp->dw_off + m;
            if (t == 0 && !(a->accum & 4u))
                memcpy(db, p, sizeof(float) * (size_t)OC);
            else
                for (int64_t c = 0; c < OC; c++)
                    db[c] += p[c];
        }
    }
}

/* the backward pass of a tap layer (the gradients a asks for), threads
 * over whole samples */
static void rt__tap_bwd(const rt__kargs *a, const rt_kern_conv_plan *kp)
{
    const rt__conv_params *cv = rt__conv_cp(a->nd);
    const int64_t n = a->r->n, H = cv->H, W = cv->W, C = cv->C;
    const int64_t OH = cv->OH, OW = cv->OW, OC = cv->OC, K = cv->KH * cv->KW * C;
    const rt__tapgeo tg = rt__tap_geo(cv);
    float *dx = a->dx[0], *dw = a->dx[1];
    float *db = cv->bias ? a->dx[2] : NULL;
    const int relu = cv->act == RT__ACT_RELU, add = (a->accum & 1u) != 0;
    float *wf = a->scratch + (int64_t)kp->nt * kp->tstride;
    if (dx)
        rt__tap_wflip(cv, a->x[1], wf);
    int nt = kp->nt;
    if (n * OH * OW * K * OC < RT__PAR_MACS)
        nt = 1;
    else if (nt > n)
        nt = (int)n;
    int team = 1;
#pragma omp parallel num_threads(nt)
    {
        const int T = omp_get_num_threads(), t = omp_get_thread_num();
        if (t == 0)
            team = T;
        float *pz = a->scratch + (int64_t)t * kp->tstride, *px = pz + tg.pf;
        float *pdw = a->scratch + (int64_t)t * kp->tstride + kp->dw_off, *pdb = pdw + K * OC;
        /* the copy's borders stay zero: only its inside is written */
        memset(pz, 0, sizeof(float) * (size_t)tg.pf);
        if (dw)
            memset(pdw, 0, sizeof(float) * (size_t)(K * OC));
        if (db)
            memset(pdb, 0, sizeof(float) * (size_t)OC);
        for (int64_t s = n * t / T; s < n * (t + 1) / T; s++) {
            for (int64_t oh = 0; oh < OH; oh++) {
                const int64_t r = (s * OH + oh) * OW * OC;
                rt__dz_form(OW, OC, a->dy + r, relu ? a->y + r : NULL, NULL, relu,
                            pz + ((oh + tg.tp) * tg.Wq + tg.lp) * OC, db ? pdb : NULL);
            }
            if (dw) {
                const float *xv = a->x[0] + s * H * W * C;
                if (tg.xpad) {
                    rt__x_pad(cv, a->x[0], s, 1, OH - 1 + cv->KH, OW - 1 + cv->KW, px);
                    xv = px;
                }
                rt__tap_dw(cv, &tg, xv, pz, pdw);
            }
            if (dx)
                rt__tap_dx(cv, &tg, pz, wf, add, dx + s * H * W * C);
        }
    }
    rt__sum_partials(a, kp, team, K * OC, OC, dw, db);
}

/* z (rows, OC) = act(A (rows, K) w (K, OC) + bias) */
static void rt__conv_rows(const rt__node *nd, int64_t rows, int64_t K, int64_t OC, const float *A,
                          const float *w, const float *bias, float *z)
{
    const int act = rt__conv_cp(nd)->act;
    if (rt__mk_fits(K, OC) && (act == RT__ACT_NONE || act == RT__ACT_RELU)) {
        rt__mk_gemm(rows, K, OC, A, w, bias, act == RT__ACT_RELU, z);
        return;
    }
    rt__gemm(0, 0, rows, OC, K, A, K, w, OC, 0.0f, z, OC);
    if (bias) {
        for (int64_t r = 0; r < rows; r++) {
            float *restrict zr = z + r * OC;
            const float *restrict bb = bias;
            for (int64_t c = 0; c < OC; c++)
                zr[c] += bb[c];
        }
    }
    if (act)
        rt_kern_act_fwd(act, z, rows * OC);
}

rt_kern_mpool rt_kern_mpool_of(const rt__conv_params *cv, const rt__conv_params *pool)
{
    rt_kern_mpool g;
    g.OH = cv->OH, g.OW = cv->OW, g.OC = cv->OC, g.act = cv->act;
    g.KH = pool->KH, g.KW = pool->KW, g.PH = pool->OH, g.PW = pool->OW;
    return g;
}

typedef uint8_t rt__u8x16 __attribute__((vector_size(16)));

/* With ReLU, a window whose maximum is not above 0 passes no gradient
 * (relu'(y) = 0): its argmax byte is RT__POOL_DEAD instead, so the
 * backward pass routes by the argmax alone and never reads y (a 15 MB
 * stream at W-B's batch 256). Windows have fewer cells than that value. */
#define RT__POOL_DEAD 255
static inline int rt__pool_dead(const rt_kern_mpool *g)
{
    return g->act == RT__ACT_RELU && g->KH * g->KW < RT__POOL_DEAD;
}

/* one window's 16 channels: the first maximum and its cell */
static inline __attribute__((always_inline)) void rt__pool_win16(int64_t KH, int64_t KW, int64_t OW,
                                                                 int64_t OC, const float *z0,
                                                                 rt__v16 *mo, rt__i16 *io)
{
    rt__v16 mv = rt__ld16(z0);
    rt__i16 iv = {0};
    for (int64_t i = 0; i < KH; i++)
        for (int64_t j = 0; j < KW; j++) {
            const rt__v16 v = rt__ld16(z0 + (i * OW + j) * OC);
            const rt__i16 gt = v > mv;
            mv = (rt__v16)(((rt__i16)v & gt) | ((rt__i16)mv & ~gt));
            iv = (((rt__i16){0} + (int32_t)(i * KW + j)) & gt) | (iv & ~gt);
        }
    *mo = mv;
    *io = iv;
}

/* fused max pool, forward, one band: z (KH lines, OW, OC) -> y (PW, OC)
 * over non-overlapping KH x KW windows; idx (PW, OC) gets each window's
 * first maximum (scan order, as MaxPool2D) as its cell number i*KW+j, which
 * the backward pass routes the gradient through (RT__POOL_DEAD: none).
 * Sixteen channels at a time where OC allows (the same compares, so the
 * same results). */
static void rt__pool_band(const rt_kern_mpool *g, const float *z, float *y, uint8_t *idx)
{
    const int64_t OW = g->OW, OC = g->OC, OCv = OC & ~(int64_t)15;
    const int64_t KH = g->KH, KW = g->KW, PW = g->PW;
    const int dead = rt__pool_dead(g);
    for (int64_t pw = 0; pw < PW; pw++) {
        float *restrict m = y + pw * OC;
        uint8_t *restrict id = idx + pw * OC;
        const float *z0 = z + pw * KW * OC;
        for (int64_t c = 0; c < OCv; c += 16) {
            rt__v16 mv;
            rt__i16 iv;
            if (KH == 2 && KW == 2) /* constants: the loops unroll */
                rt__pool_win16(2, 2, OW, OC, z0 + c, &mv, &iv);
            else
                rt__pool_win16(KH, KW, OW, OC, z0 + c, &mv, &iv);
            if (dead)
                iv |= ~(mv > (rt__v16){0}) & RT__POOL_DEAD;
            memcpy(m + c, &mv, sizeof mv);
            const rt__u8x16 ib = __builtin_convertvector(iv, rt__u8x16);
            memcpy(id + c, &ib, sizeof ib);
        }
        if (OCv == OC)
            continue;
        memcpy(m + OCv, z0 + OCv, sizeof(float) * (size_t)(OC - OCv));
        memset(id + OCv, 0, (size_t)(OC - OCv));
        for (int64_t i = 0; i < KH; i++)
            for (int64_t j = 0; j < KW; j++) {
                const float *restrict v = z0 + (i * OW + j) * OC;
                const uint8_t cell = (uint8_t)(i * KW + j);
                for (int64_t c = OCv; c < OC; c++) {
                    const int gt = v[c] > m[c];
                    m[c] = gt ? v[c] : m[c];
                    id[c] = gt ? cell : id[c];
                }
            }
        if (dead)
            for (int64_t c = OCv; c < OC; c++)
                id[c] = m[c] > 0.0f ? id[c] : RT__POOL_DEAD;
    }
}

/* band by band (rt__pool_band) */
void rt_kern_mpool_fwd(const rt_kern_mpool *g, int64_t nb, const float *z, float *y, uint8_t *idx)
{
    const int64_t OW = g->OW, OC = g->OC, OH = g->OH, PH = g->PH, PW = g->PW;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t ph = 0; ph < PH; ph++) {
            const int64_t o = ((b * PH + ph) * PW) * OC;
            rt__pool_band(g, z + (b * OH + ph * g->KH) * OW * OC, y + o, idx + o);
        }
}

/* one window's 16 channels of dz: g in the argmax's cell, 0 elsewhere */
static inline __attribute__((always_inline)) void
rt__pool_route16(int64_t KH, int64_t KW, int64_t OW, int64_t OC, rt__v16 g, rt__i16 iv, float *z0)
{
    for (int64_t i = 0; i < KH; i++)
        for (int64_t j = 0; j < KW; j++) {
            const rt__v16 o = (rt__v16)((rt__i16)g & (iv == (int32_t)(i * KW + j)));
            memcpy(z0 + (i * OW + j) * OC, &o, sizeof o);
        }
}

/* fused max pool, backward, one band: dz (KH lines, OW, OC) of the
 * convolution from the pooled gradient dy (PW, OC) and the argmax the
 * forward pass kept (idx): each window's first maximum gets dy * act'(y),
 * y the pooled output (act(z) at the argmax), every other cell 0 (also
 * the cells right of the last window). Nothing of the convolution is
 * recomputed. tmp: OC floats. With no activation or ReLU, sixteen
 * channels at a time (the same arithmetic: a mask and adds in the same
 * order); with ReLU y is not read (RT__POOL_DEAD). The next band's dy and
 * argmax are prefetched: they come from memory, and the microkernel's
 * work on this band hides the wait. */
static void rt__pool_band_bwd(const rt_kern_mpool *pg, const float *dy, const float *y,
                              const uint8_t *idx, float *dz, float *tmp, float *restrict db)
{
    const int64_t OW = pg->OW, OC = pg->OC;
    const int64_t KH = pg->KH, KW = pg->KW, PW = pg->PW;
    const int dead = rt__pool_dead(pg);
    const int vec = pg->act == RT__ACT_NONE || dead;
    const int64_t OCv = vec ? OC & ~(int64_t)15 : 0;
    for (int64_t i = 0; i < PW * OC; i += 16)
        __builtin_prefetch(dy + PW * OC + i);
    for (int64_t i = 0; i < PW * OC; i += 64)
        __builtin_prefetch(idx + PW * OC + i);
    float *restrict g = tmp;
    for (int64_t pw = 0; pw < PW; pw++) {
        const float *restrict d = dy + pw * OC;
        const float *restrict m = y ? y + pw * OC : NULL;
        const uint8_t *restrict id = idx + pw * OC;
        float *z0 = dz + pw * KW * OC;
        for (int64_t c = 0; c < OCv; c += 16) {
            rt__v16 v = rt__ld16(d + c);
            rt__u8x16 ib;
            memcpy(&ib, id + c, sizeof ib);
            const rt__i16 iv = __builtin_convertvector(ib, rt__i16);
            if (db) {
                const rt__v16 gv = dead ? (rt__v16)((rt__i16)v & (iv != RT__POOL_DEAD)) : v;
                const rt__v16 sv = rt__ld16(db + c) + gv;
                memcpy(db + c, &sv, sizeof sv);
            }
            if (KH == 2 && KW == 2)
                rt__pool_route16(2, 2, OW, OC, v, iv, z0 + c);
            else
                rt__pool_route16(KH, KW, OW, OC, v, iv, z0 + c);
        }
        if (OCv == OC)
            continue;
        for (int64_t c = OCv; c < OC; c++) {
            float v = d[c];
            switch (pg->act) {
            case RT__ACT_RELU: v = m[c] > 0.0f ? v : 0.0f; break;
            case RT__ACT_SIGMOID: v = v * m[c] * (1.0f - m[c]); break;
            case RT__ACT_TANH: v = v * (1.0f - m[c] * m[c]); break;
            default: break;
            }
            g[c] = v;
        }
        /* the only nonzero of each window and channel: db's sum */
        if (db)
            for (int64_t c = OCv; c < OC; c++)
                db[c] += g[c];
        for (int64_t i = 0; i < KH; i++)
            for (int64_t j = 0; j < KW; j++) {
                const uint8_t cell = (uint8_t)(i * KW + j);
                float *restrict out = z0 + (i * OW + j) * OC;
                for (int64_t c = OCv; c < OC; c++)
                    out[c] = id[c] == cell ? g[c] : 0.0f;
            }
    }
    /* cells right of the last window feed nothing */
    for (int64_t i = 0; i < KH; i++)
        memset(dz + (i * OW + PW * KW) * OC, 0, sizeof(float) * (size_t)((OW - PW * KW) * OC));
}

/* band by band (rt__pool_band_bwd), and zeros for the lines below the
 * last windows */
void rt_kern_mpool_bwd(const rt_kern_mpool *g, int64_t nb, const float *dy, const float *y,
                       const uint8_t *idx, float *dz, float *tmp, float *db)
{
    const int64_t OW = g->OW, OC = g->OC, OH = g->OH, PH = g->PH, PW = g->PW;
    for (int64_t b = 0; b < nb; b++) {
        float *zb = dz + b * OH * OW * OC;
        for (int64_t ph = 0; ph < PH; ph++) {
            const int64_t o = ((b * PH + ph) * PW) * OC;
            rt__pool_band_bwd(g, dy + o, y ? y + o : NULL, idx + o, zb + ph * g->KH * OW * OC, tmp,
                              db);
        }
        memset(zb + PH * g->KH * OW * OC, 0, sizeof(float) * (size_t)((OH - PH * g->KH) * OW * OC));
    }
}

/* The weight gradient of an RGB 3x3 stride-1 layer under a fused 2x2 max
 * pool (W-B's first layer) from the pooled gradient alone: a window passes
 * its gradient to one cell (the argmax the forward pass kept; none when
 * dead), so of the dense dz only a quarter is nonzero, and routing it out
 * to a dz the size of the convolution's output cost a third of the time.
 * Here each window's x values at its 4 cells for one column k are 4 floats
 * from two input lines (cell (i, j) at line i, lane 3j of a 4-float load at
 * the window's column + k'), and one two-table permute with the channel's
 * cell (16 i + 3 j) picks each channel's x: one permute and one FMA per
 * column and 16 channels, where the dense kernel ran four FMAs. */
static inline int rt__pool2_fits(const rt__conv_params *cv, const rt_kern_conv_plan *kp)
{
    return kp->in_place && kp->pool == 2 && kp->poolw == 2 && cv->KH == 3 && cv->KW == 3 &&
           cv->C == 3 && cv->SH == 1 && cv->SW == 1 && cv->OC % 32 == 0 &&
           (cv->act == RT__ACT_NONE || cv->act == RT__ACT_RELU);
}

/* gm (nw, OC) = the windows' gradients (0 where dead), cb (nw, OC) their
 * argmax as a permute index (16 i + 3 j); db += the gradients, windows in
 * order (as rt__pool_band_bwd sums them). One contiguous pass. */
static void rt__pool2_prep(int64_t nw, int64_t OC, int dead, const float *restrict dy,
                           const uint8_t *restrict idx, float *restrict gm, int32_t *restrict cb,
                           float *restrict db)
{
    for (int64_t i = 0; i < nw * OC; i += 16) {
        rt__v16 v = rt__ld16(dy + i);
#ifdef __AVX512F__
        const rt__i16 iv =
            (rt__i16)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(idx + i)));
#else
        rt__u8x16 ib;
        memcpy(&ib, idx + i, sizeof ib);
        const rt__i16 iv = __builtin_convertvector(ib, rt__i16);
#endif
        if (dead)
            v = (rt__v16)((rt__i16)v & (iv != RT__POOL_DEAD));
        const rt__i16 pv = (iv >> 1) * 16 + (iv & 1) * 3;
        memcpy(gm + i, &v, sizeof v);
        memcpy(cb + i, &pv, sizeof pv);
        if (db) {
            float *d = db + i % OC;
            const rt__v16 s = rt__ld16(d) + v;
            memcpy(d, &s, sizeof s);
        }
    }
}

/* x at cell (i, j) of each channel's window: lane 3j of a (line i) or b
 * (line i + 1); the other lanes are never picked */
static inline rt__v16 rt__pick(const float *a, const float *b, rt__i16 cell)
{
#ifdef __AVX512F__
    return (rt__v16)_mm512_permutex2var_ps(_mm512_castps128_ps512(_mm_loadu_ps(a)), (__m512i)cell,
                                           _mm512_castps128_ps512(_mm_loadu_ps(b)));
#else
    rt__v16 v;
    for (int i = 0; i < 16; i++)
        v[i] = (cell[i] & 16 ? b : a)[cell[i] & 15];
    return v;
#endif
}

/* dW (27, OC) += over one sample's PH x PW windows: x the sample's view
 * (lines of ls floats), gm and cb from rt__pool2_prep. One pass per window
 * line kh and 32 channels: 9 x 2 accumulators. */
static void rt__mk_dw_pool2(int64_t PH, int64_t PW, int64_t OC, int64_t ls, const float *x,
                            const float *gm, const int32_t *cb, float *dw, const float *pf_dy,
                            const uint8_t *pf_idx)
{
    for (int64_t kh = 0; kh < 3; kh++)
        for (int64_t c0 = 0; c0 < OC; c0 += 32) {
            rt__v16 acc[9][2];
#pragma GCC unroll 9
            for (int t = 0; t < 9; t++)
                acc[t][0] = acc[t][1] = (rt__v16){0};
            for (int64_t ph = 0; ph < PH; ph++) {
                const float *xa = x + (2 * ph + kh) * ls;
                const float *gl = gm + ph * PW * OC + c0;
                const int32_t *cl = cb + ph * PW * OC + c0;
                for (int64_t pw = 0; pw < PW; pw++) {
                    if (pf_dy && kh == 0 && c0 == 0) {
                        /* the next sample's pooled gradient and argmax come
                         * from memory: on their way while this one runs */
                        const int64_t o = (ph * PW + pw) * OC;
                        for (int64_t i = 0; i < OC; i += 16)
                            __builtin_prefetch(pf_dy + o + i);
                        __builtin_prefetch(pf_idx + o);
                    }
                    const rt__v16 g0 = rt__ld16(gl + pw * OC), g1 = rt__ld16(gl + pw * OC + 16);
                    rt__i16 i0, i1;
                    memcpy(&i0, cl + pw * OC, sizeof i0);
                    memcpy(&i1, cl + pw * OC + 16, sizeof i1);
                    const float *ra = xa + pw * 6, *rb = ra + ls;
#pragma GCC unroll 9
                    for (int t = 0; t < 9; t++) {
                        acc[t][0] += rt__pick(ra + t, rb + t, i0) * g0;
                        acc[t][1] += rt__pick(ra + t, rb + t, i1) * g1;
                    }
                }
            }
            for (int t = 0; t < 9; t++)
                for (int j = 0; j < 2; j++) {
                    float *o = dw + (kh * 9 + t) * OC + c0 + 16 * j;
                    const rt__v16 v = rt__ld16(o) + acc[t][j];
                    memcpy(o, &v, sizeof v);
                }
        }
}

/* The forward pass of the same layers (rt__pool2_fits): WB windows of one
 * band (2 lines x 2 WB pixels) x 32 channels in 24 registers, bias, ReLU
 * and the pool applied to the registers, and only the pooled value and its
 * argmax stored: no pre-pool band written and read back. The sums, the
 * ReLU and the compares are rt__mk_rows_x's and rt__pool_band's, in the
 * same order, so the results are the same bits. x: the band's first line
 * at the first window's column; w, bias, y, idx: at channel c0. */
static inline __attribute__((always_inline)) void
rt__mk_pool2_blk(int WB, int64_t ls, int64_t OC, int relu, int dead, const float *restrict x,
                 const float *restrict w, const float *restrict bias, float *restrict y,
                 uint8_t *restrict idx)
{
    rt__v16 acc[12][2];
#pragma GCC unroll 12
    for (int p = 0; p < 4 * WB; p++)
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++)
            acc[p][j] = bias ? rt__ld16(bias + 16 * j) : (rt__v16){0};
    for (int64_t kh = 0; kh < 3; kh++) {
        const float *restrict wk = w + kh * 9 * OC;
        for (int64_t k = 0; k < 9; k++) {
            const rt__v16 w0 = rt__ld16(wk + k * OC), w1 = rt__ld16(wk + k * OC + 16);
            /* hidden from the optimizer, as in rt__mk_rows_x */
            const float *x0 = x + kh * ls + k;
            __asm__("" : "+r"(x0));
            const float *x1 = x0 + ls;
#pragma GCC unroll 12
            for (int p = 0; p < 4 * WB; p++) {
                const float av = (p < 2 * WB ? x0 : x1)[(p % (2 * WB)) * 3];
                acc[p][0] += av * w0;
                acc[p][1] += av * w1;
            }
        }
    }
#pragma GCC unroll 3
    for (int q = 0; q < WB; q++)
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++) {
            rt__v16 v[4];
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                v[c] = acc[(c >> 1) * 2 * WB + 2 * q + (c & 1)][j];
                if (relu)
                    v[c] = (rt__v16)((rt__i16)v[c] & (v[c] > (rt__v16){0}));
            }
            rt__v16 mv = v[0];
            rt__i16 iv = {0};
#pragma GCC unroll 3
            for (int c = 1; c < 4; c++) {
                const rt__i16 gt = v[c] > mv;
                mv = (rt__v16)(((rt__i16)v[c] & gt) | ((rt__i16)mv & ~gt));
                iv = (((rt__i16){0} + c) & gt) | (iv & ~gt);
            }
            if (dead)
                iv |= ~(mv > (rt__v16){0}) & RT__POOL_DEAD;
            memcpy(y + q * OC + 16 * j, &mv, sizeof mv);
            const rt__u8x16 ib = __builtin_convertvector(iv, rt__u8x16);
            memcpy(idx + q * OC + 16 * j, &ib, sizeof ib);
        }
}

/* the pooled band ph of one sample: x the sample's view (lines of ls
 * floats), y and idx the band's PW pooled values */
static void rt__mk_pool2_band(int64_t PW, int64_t OC, int64_t ls, int relu, int dead,
                              const float *x, const float *w, const float *bias, float *y,
                              uint8_t *idx)
{
    for (int64_t c0 = 0; c0 < OC; c0 += 32) {
        const float *bc = bias ? bias + c0 : NULL;
        int64_t pw = 0;
        for (; pw + 3 <= PW; pw += 3)
            rt__mk_pool2_blk(3, ls, OC, relu, dead, x + pw * 6, w + c0, bc, y + pw * OC + c0,
                             idx + pw * OC + c0);
        if (PW - pw == 2)
            rt__mk_pool2_blk(2, ls, OC, relu, dead, x + pw * 6, w + c0, bc, y + pw * OC + c0,
                             idx + pw * OC + c0);
        else if (PW - pw == 1)
            rt__mk_pool2_blk(1, ls, OC, relu, dead, x + pw * 6, w + c0, bc, y + pw * OC + c0,
                             idx + pw * OC + c0);
    }
}

/* A chunk's column matrix and its output (or dz) hold about this many
 * floats together (512 KiB), so they stay in one core's L2 between im2col,
 * the GEMM and the bias/activation, and dz between the dW column blocks */
#define RT__CONV_CHUNK_FLOATS rt_kern_conv_chunk_floats
int rt_kern_conv_chunk_floats = 128 * 1024;

/* Which directions run on oneDNN's primitives (RT_KERN_DN_*), by shape.
 * Measured per layer (bench/conv --convs --layers, ResNet-18 CIFAR, the
 * 3x3x64 net and W-B, CPU time at one thread, both paths interleaved):
 *   - forward: brgconv beats im2col + sgemm by 10-20% on 3x3 stride-1
 *     layers with 8x8 outputs or more; on 4x4 outputs it runs at half
 *     im2col's rate, and 1x1 and strided layers are a tie or worse;
 *   - backward-data: the primitive wins on 3x3 layers without an
 *     activation (4x4 outputs: 1.9x, im2col's chunks there are 16 rows); with
 *     one, dz = dy * act'(y) is a whole-tensor pass before it, which im2col
 *     forms per chunk in cache, and im2col (in bands of lines) wins from
 *     16x16 outputs on (the 3x3x64 net's 32x32 layer: 213 against 206
 *     GFLOP/s); 1x1 goes to im2col;
 *   - backward-weights: the primitive wins on stride-1 3x3 layers with at
 *     most 8x8 outputs (4x4: 1.8x); on larger ones it ties im2col without
 *     an activation and loses with one (dz is then a whole-tensor pass,
 *     where im2col forms it per chunk in cache); strided: im2col.
 * Never with a fused pool (the primitive would write the whole pre-pool
 * tensor that the fusion avoids), nor K <= 64 (the microkernel's shapes).
 * Prepare then takes both backward directions off the primitives for the
 * layers the tap path fits (stride 1, at most 64 channels each side, more
 * than 64 output pixels): on the 32x32x64 layer it ran backward-data at
 * 1.2x the primitive and 1.25x im2col, backward-weights at 1.1x im2col
 * (one thread, CPU time, loaded; bench/conv --convs --layers). */
static int rt__conv_dnnl_dirs(const rt__conv_params *cv, const rt_kern_conv_plan *kp, int64_t B)
{
    if (kp->pool || cv->G > 1 || rt_kern_conv_impl == RT_KERN_CONV_IM2COL)
        return 0;
    if (rt_kern_conv_impl == RT_KERN_CONV_DNNL)
        return RT_KERN_DN_F | RT_KERN_DN_D | RT_KERN_DN_W;
    if (rt_kern_conv_impl & RT_KERN_CONV_DIRS)
        return rt_kern_conv_impl & 7;
    /* On by default. The fault that kept it off (torchvision's resnet18 in
     * onnx_torchvision, gradients off from the first step with only the
     * 8x8 layers' forward passes on the primitives) was no fault of the
     * primitives: in that fixture one value (layer4.1's first BatchNorm,
     * sample 6, channel 398) lies 4e-6 from its batch mean, so float32
     * rounding anywhere upstream (oneDNN's forward is 2.1e-7 from a double
     * reference, im2col's 1.6e-7) flips its ReLU and that channel's
     * gradient (at other seeds im2col alone misses PyTorch at step 3).
     * That fixture now compares one step from seed 111, clear of such an
     * edge; conv_dnnl_resnet holds this rule to im2col over a whole
     * resnet18. */
    const int64_t K = cv->KH * cv->KW * cv->C, P = cv->OH * cv->OW;
    if (K <= 64 || cv->KH * cv->KW == 1 || B * P * K * cv->OC < RT__PAR_MACS)
        return 0;
    const int s1 = cv->SH == 1 && cv->SW == 1;
    int d = !cv->act || P <= 64 ? RT_KERN_DN_D : 0;
    if (s1 && P >= 64)
        d |= RT_KERN_DN_F;
    if (s1 && P <= 64)
        d |= RT_KERN_DN_W;
    return d;
}

/* Conv2D absorbs a following MaxPool2D with non-overlapping windows
 * (stride = window, 'valid') that fit its output. */
int rt_kern_conv2d_can_fuse_maxpool(const rt__node *conv, const rt__node *pool)
{
    const rt__conv_params *cv = rt__conv_cp(conv), *pp = rt__conv_cp(pool);
    if (cv->G > 1)
        return 0;
    return pp->SH == pp->KH && pp->SW == pp->KW && !pp->PT && !pp->PL && pp->KH * pp->KW <= 256 &&
           pp->OH * pp->KH <= cv->OH && pp->OW * pp->KW <= cv->OW;
}

/* The chunking, the threads and the scratch of one Conv2D: the only place
 * they are computed. Per thread (tstride floats): the column chunk (chunk
 * samples x P rows x K), dz (rows x OC), partial dW (K x OC) and db (OC),
 * and with a fused pool OC more for the backward's routed gradient. */
int rt_kern_conv2d_prepare(rt__node *nd, int64_t B, rt__arena *A)
{
    const rt__conv_params *cv = rt__conv_cp(nd);
    if (cv->G > 1) { /* rt_kern_gconv_*: per thread dW, db and one dz row */
        const int64_t KW_ = cv->KH * cv->KW * (cv->C / cv->G) * cv->OC;
        nd->kdata = NULL;
        nd->scratch_floats = rt_kern_conv_threads() * ((KW_ + 2 * cv->OC + 15) & ~(int64_t)15);
        return 0;
    }
    rt_kern_conv_plan *kp = rt__arena_alloc(A, sizeof *kp);
    if (!kp)
        return RT_ENOMEM;
    const int64_t P = cv->OH * cv->OW, OC = cv->OC, K = cv->KH * cv->KW * cv->C;
    int64_t cs = RT__CONV_CHUNK_FLOATS / (P * (K + OC));
    if (cs < 1)
        cs = 1;
    if (cs > B)
        cs = B;
    kp->chunk = cs;
    /* a sample too large for the budget is cut into bands of output lines
     * (not with a fused pool, whose windows span lines): ResNet's and the
     * 3x3x64 net's 32x32x64 layers have 2.4 MB of columns per sample,
     * which went to memory and back between im2col and the GEMM */
    kp->lines = cv->OH;
    if (P * (K + OC) > RT__CONV_CHUNK_FLOATS && !nd->fused) {
        kp->lines = RT__CONV_CHUNK_FLOATS / (cv->OW * (K + OC));
        if (kp->lines < 1)
            kp->lines = 1;
        if (kp->lines > cv->OH)
            kp->lines = cv->OH;
    }
    kp->crows = kp->lines < cv->OH ? kp->lines * cv->OW : cs * P;
    kp->direct = cv->KH == 1 && cv->KW == 1 && cv->SH == 1 && cv->SW == 1;
    kp->nt = rt_kern_conv_threads();
    int64_t extra = 0;
    if (nd->fused) {
        RT_ASSERT(nd->fused == &rt__op_maxpool2d);
        const rt__conv_params *pp = &nd->fused_p->conv;
        kp->pool = pp->KH;
        kp->poolw = pp->KW;
        kp->ph = pp->OH;
        kp->pw = pp->OW;
        extra = OC;
        /* the argmax of every pooled value, one byte each, from the
         * forward pass to the backward */
        nd->ws_floats = (B * kp->ph * kp->pw * OC + 3) / 4;
    }
    kp->dw_off = kp->crows * (K + OC);
    kp->tstride = (kp->dw_off + K * OC + OC + extra + 15) & ~(int64_t)15;
    kp->in_place = kp->direct ? RT__XP_NONE
                              : rt__mk_in_place(cv, K, OC, kp->crows * K, cs, kp->lines < cv->OH);
    kp->dw_mk = rt__mk_fits(K, OC) || rt__mk_dw_big(cv, K, OC);
    nd->kdata = kp;
    nd->scratch_floats = kp->nt * kp->tstride;
    kp->B = B;
    kp->dn = NULL;
    kp->dn_dirs = rt__conv_dnnl_dirs(cv, kp, B);
    /* the per-sample tap path takes the backward directions the primitives
     * do not; a thread's two copies go where its columns would, its
     * partial dW after them, and W' after every thread's scratch */
    kp->tap = 0;
    if (!kp->pool && rt__tap_fits(cv, K) && cv->OH * cv->OW > 64) {
        const rt__tapgeo tg = rt__tap_geo(cv);
        if (tg.pf + tg.xf <= RT__TAP_MAX_FLOATS) {
            kp->tap = RT_KERN_DN_D | RT_KERN_DN_W;
            kp->dn_dirs &= ~(RT_KERN_DN_D | RT_KERN_DN_W);
            if (tg.pf + tg.xf > kp->dw_off)
                kp->dw_off = tg.pf + tg.xf;
            kp->tstride = (kp->dw_off + K * OC + OC + extra + 15) & ~(int64_t)15;
            nd->scratch_floats = kp->nt * kp->tstride + K * cv->C;
        }
    }
    /* a ReLU layer whose forward pass is the in-place microkernel keeps
     * relu'(y) as bits (1 MiB for the 3x3x64 net's first layer at batch
     * 128, against its 32 MiB y), so the weight gradient reads dy alone
     * from memory (rt__dz_form) */
    kp->rmask = !kp->pool && cv->act == RT__ACT_RELU && kp->in_place && kp->dw_mk &&
                !(kp->dn_dirs & RT_KERN_DN_F);
    if (kp->rmask)
        nd->ws_floats = (B * P * (OC / 16) + 1) / 2;
    if (kp->dn_dirs) {
        kp->dn = rt_kern_dconv_prepare(cv, B);
        /* the scratch also holds im2col's, for a smaller last batch whose
         * primitives would not fit */
        if (kp->dn) {
            const int64_t f = rt_kern_dconv_scratch(kp->dn, cv, B);
            if (f > nd->scratch_floats)
                nd->scratch_floats = f;
        }
    }
    return 0;
}

/* Chunk ch of a batch of n: samples [s0, s0+nb), output lines [oh0, oh1)
 * of each; its first row in the (n*OH*OW, .) matrices is r0 */
typedef struct {
    int64_t s0, nb, oh0, oh1, r0, rows;
} rt__cchunk;

/* chunks per sample (1 unless a sample is cut into bands of lines) */
static inline int64_t rt__cps(const rt_kern_conv_plan *kp, const rt__conv_params *cv)
{
    return kp->lines < cv->OH ? (cv->OH + kp->lines - 1) / kp->lines : 1;
}

static inline int64_t rt__nchunks(const rt_kern_conv_plan *kp, const rt__conv_params *cv, int64_t n)
{
    return kp->lines < cv->OH ? n * rt__cps(kp, cv) : (n + kp->chunk - 1) / kp->chunk;
}

static inline rt__cchunk rt__chunk_of(const rt_kern_conv_plan *kp, const rt__conv_params *cv,
                                      int64_t n, int64_t ch)
{
    rt__cchunk c;
    if (kp->lines < cv->OH) {
        const int64_t cps = rt__cps(kp, cv);
        c.s0 = ch / cps;
        c.nb = 1;
        c.oh0 = (ch % cps) * kp->lines;
        c.oh1 = c.oh0 + kp->lines < cv->OH ? c.oh0 + kp->lines : cv->OH;
    } else {
        c.s0 = ch * kp->chunk;
        c.nb = n - c.s0 < kp->chunk ? n - c.s0 : kp->chunk;
        c.oh0 = 0;
        c.oh1 = cv->OH;
    }
    c.r0 = c.s0 * cv->OH * cv->OW + c.oh0 * cv->OW;
    c.rows = c.nb * (c.oh1 - c.oh0) * cv->OW;
    return c;
}

/* y (B,OH,OW,OC) = act(im2col(x) W + b), one chunk of samples at a time,
 * chunks shared out among the threads */
void rt_kern_conv2d_fwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const rt__conv_params *cv = rt__conv_cp(nd);
    if (cv->G > 1) {
        rt_kern_gconv_fwd(a);
        return;
    }
    const rt_kern_conv_plan *kp = nd->kdata;
    if (kp->dn && (kp->dn_dirs & RT_KERN_DN_F) && rt_kern_dconv_fwd(a, kp->dn, kp->B) == 0)
        return;
    const int64_t n = a->r->n;
    const int64_t P = cv->OH * cv->OW, OC = cv->OC;
    const int64_t K = cv->KH * cv->KW * cv->C;
    const int64_t nch = rt__nchunks(kp, cv, n);
    const float *w = a->x[1];
    const float *bias = cv->bias ? a->x[2] : NULL;
    int nt = (int)kp->nt;
    if (n * P * K * OC < RT__PAR_MACS)
        nt = 1;
    else if (nt > nch)
        nt = (int)nch;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t ch = 0; ch < nch; ch++) {
        float *col = a->scratch + (int64_t)omp_get_thread_num() * kp->tstride;
        const rt__cchunk c = rt__chunk_of(kp, cv, n, ch);
        /* with a fused pool the convolution's rows go to scratch first */
        float *y = kp->pool ? col + kp->crows * K : a->y + c.r0 * OC;
        if (kp->in_place && kp->pool) {
            /* one band of pool windows at a time: its KH lines stay in L1
             * between the microkernel and the pool (a whole sample's went
             * to L2 and back); lines below the last windows feed nothing */
            rt__conv_params g;
            int64_t sb;
            const float *xv = rt__x_view(kp, cv, a->x[0], c.s0, c.nb, col, &g, &sb);
            const int64_t PP = kp->ph * kp->pw * OC;
            const rt_kern_mpool mg = rt_kern_mpool_of(cv, &nd->fused_p->conv);
            if (rt__pool2_fits(cv, kp)) {
                const int64_t ls = g.W * g.C, vs = g.H * ls;
                for (int64_t b = 0; b < c.nb; b++)
                    for (int64_t ph = 0; ph < kp->ph; ph++) {
                        const int64_t o = (c.s0 + b) * PP + ph * kp->pw * OC;
                        rt__mk_pool2_band(kp->pw, OC, ls, cv->act == RT__ACT_RELU,
                                          rt__pool_dead(&mg), xv + (sb + b) * vs + 2 * ph * ls, w,
                                          bias, a->y + o, (uint8_t *)a->ws + o);
                    }
                continue;
            }
            for (int64_t b = 0; b < c.nb; b++)
                for (int64_t ph = 0; ph < kp->ph; ph++) {
                    const int64_t o = (c.s0 + b) * PP + ph * kp->pw * OC;
                    rt__mk_conv_x(&g, xv, sb + b, 1, ph * kp->pool, (ph + 1) * kp->pool, w, bias,
                                  cv->act == RT__ACT_RELU, y, NULL);
                    rt__pool_band(&mg, y, a->y + o, (uint8_t *)a->ws + o);
                }
            continue;
        }
        if (kp->in_place) {
            rt__conv_params g;
            int64_t sb;
            const float *xv = rt__x_view(kp, cv, a->x[0], c.s0, c.nb, col, &g, &sb);
            rt__mk_conv_x(&g, xv, sb, c.nb, c.oh0, c.oh1, w, bias, cv->act == RT__ACT_RELU, y,
                          kp->rmask ? (uint16_t *)a->ws + c.r0 * (OC / 16) : NULL);
        } else {
            const float *A;
            if (kp->direct) {
                A = a->x[0] + c.r0 * K; /* 1x1, stride 1, unpadded: x is the column matrix */
            } else {
                rt__im2col(cv, a->x[0], c.s0, c.nb, c.oh0, c.oh1, col);
                A = col;
            }
            rt__conv_rows(nd, c.rows, K, OC, A, w, bias, y);
        }
        if (kp->pool) {
            const rt_kern_mpool mg = rt_kern_mpool_of(cv, &nd->fused_p->conv);
            rt_kern_mpool_fwd(&mg, c.nb, y, a->y + c.s0 * kp->ph * kp->pw * OC,
                              (uint8_t *)a->ws + c.s0 * kp->ph * kp->pw * OC);
        }
    }
}

/* floats of columns (or of dz, for x read in place) per sub-band of
 * rt__mk_dw_lines: 16 KiB, a third of L1 (at least one line; measured
 * within noise of 2 and 6 lines on the 64 -> 64 layer) */
#define RT__DW_SUB_FLOATS 4096

/* dW += im2col(x)^T dz over chunk c, dz = dy * relu'(y) (or dy) formed on
 * the way into dzo and summed into db: a few lines at a time, so dz (and
 * the columns) stay in L1 while the microkernel's blocks pass over them.
 * The RGB 3x3 layers read x in place (rt__mk_dw_x9), the rest im2col's
 * columns (or x itself for a 1x1 stride-1 layer). */
static void rt__mk_dw_lines(const rt__conv_params *cv, const rt_kern_conv_plan *kp, const float *x,
                            const rt__cchunk *c, const float *dy, const float *y,
                            const uint16_t *msk, int relu, float *dzo, float *col, float *dw,
                            float *db)
{
    const int64_t K = cv->KH * cv->KW * cv->C, OC = cv->OC, OW = cv->OW;
    if (kp->direct) {
        rt__dz_form(c->rows, OC, dy, y, msk, relu, dzo, db);
        rt__mk_dwa(c->rows, K, OC, x + c->r0 * K, dzo, dw);
        return;
    }
    const int x9 = rt__x9_fits(cv, kp);
    rt__conv_params g;
    int64_t sb = 0;
    const float *xv = x9 ? rt__x_view(kp, cv, x, c->s0, c->nb, col, &g, &sb) : NULL;
    int64_t L = RT__DW_SUB_FLOATS * (x9 ? 2 : 1) / (OW * (x9 ? OC : K));
    if (L < 1)
        L = 1;
    int64_t r = 0;
    for (int64_t b = c->s0; b < c->s0 + c->nb; b++)
        for (int64_t l0 = c->oh0; l0 < c->oh1; l0 += L) {
            const int64_t l1 = l0 + L < c->oh1 ? l0 + L : c->oh1, rows = (l1 - l0) * OW;
            rt__dz_form(rows, OC, dy + r * OC, y + r * OC, msk ? msk + r * (OC / 16) : NULL, relu,
                        dzo + r * OC, db);
            if (x9) {
                rt__mk_dw_x9(&g, xv, sb + b - c->s0, 1, l0, l1, dzo + r * OC, dw);
            } else {
                rt__im2col(cv, x, b, 1, l0, l1, col);
                rt__mk_dwa(rows, K, OC, col, dzo + r * OC, dw);
            }
            r += rows;
        }
}

/* a's gradients split by direction (RT_KERN_DN_D: dx; _W: dW and db): those
 * in dirs into *in, the others into *out; 0 when *in asks for none */
static int rt__split(const rt__kargs *a, int dirs, rt__kargs *in, rt__kargs *out)
{
    *in = *out = *a;
    if (dirs & RT_KERN_DN_D)
        out->dx[0] = NULL;
    else
        in->dx[0] = NULL;
    if (dirs & RT_KERN_DN_W)
        out->dx[1] = out->dx[2] = NULL;
    else
        in->dx[1] = in->dx[2] = NULL;
    return in->dx[0] || in->dx[1] || in->dx[2];
}

/* Per chunk: dz = dy * act'(y); partial dW += col^T dz and db += sum_rows
 * dz per thread; dcol = dz W^T, scattered back into dx (col2im). The
 * partials are then summed in thread order, so a given thread count always
 * gives the same bits. */
void rt_kern_conv2d_bwd(const rt__kargs *a)
{
    const rt__node *nd = a->nd;
    const rt__conv_params *cv = rt__conv_cp(nd);
    if (cv->G > 1) {
        rt_kern_gconv_bwd(a);
        return;
    }
    const rt_kern_conv_plan *kp = nd->kdata;
    rt__kargs rest, rest2, k;
    /* the primitives take their directions, then the tap path its own,
     * im2col below the rest */
    if (kp->dn && rt__split(a, kp->dn_dirs, &k, &rest) &&
        rt_kern_dconv_bwd(&k, kp->dn, kp->B) == 0) {
        if (!rest.dx[0] && !rest.dx[1] && !rest.dx[2])
            return;
        a = &rest;
    }
    if (kp->tap) {
        if (rt__split(a, kp->tap, &k, &rest2))
            rt__tap_bwd(&k, kp);
        if (!rest2.dx[0] && !rest2.dx[1] && !rest2.dx[2])
            return;
        a = &rest2;
    }
    const int64_t n = a->r->n;
    const int64_t in_s = cv->H * cv->W * cv->C;
    const int64_t P = cv->OH * cv->OW, OC = cv->OC;
    const int64_t K = cv->KH * cv->KW * cv->C;
    const int64_t nch = rt__nchunks(kp, cv, n), cps = rt__cps(kp, cv);
    const int64_t CR = kp->crows; /* column rows a chunk holds */
    const int64_t TS = kp->tstride;
    const int direct = kp->direct != 0;
    float *dx = a->dx[0], *dw = a->dx[1];
    float *db = cv->bias ? a->dx[2] : NULL;
    int nt = (int)kp->nt;
    /* threads take whole samples when chunks are bands of lines: the
     * bands of one sample add into overlapping lines of its dx */
    if (n * P * K * OC < RT__PAR_MACS)
        nt = 1;
    else if (nt > nch / cps)
        nt = (int)(nch / cps);
    if (nt < 1)
        nt = 1;
    int team = 1;
#pragma omp parallel num_threads(nt)
    {
        const int T = omp_get_num_threads(), t = omp_get_thread_num();
        if (t == 0)
            team = T;
        float *col = a->scratch + (int64_t)t * TS;
        float *dzbuf = col + CR * K;
        float *pdw = a->scratch + (int64_t)t * TS + kp->dw_off, *pdb = pdw + K * OC;
        const int64_t c0 = cps > 1 ? n * t / T * cps : nch * t / T;
        const int64_t c1 = cps > 1 ? n * (t + 1) / T * cps : nch * (t + 1) / T;
        if (dw)
            memset(pdw, 0, sizeof(float) * (size_t)(K * OC));
        if (db)
            memset(pdb, 0, sizeof(float) * (size_t)OC);
        for (int64_t ch = c0; ch < c1; ch++) {
            const rt__cchunk c = rt__chunk_of(kp, cv, n, ch);
            const int64_t s0 = c.s0, nb = c.nb, rows = c.rows;
            const float *x = a->x[0] + c.r0 * K; /* direct only: the column matrix */
            const float *dz = a->dy + c.r0 * OC;
            if (kp->pool && !dx && dw && rt__mk_fits(K, OC)) {
                /* weights alone (a first layer): a band of pool windows at
                 * a time, its dz and columns formed in L1 and read there
                 * by the microkernel; the lines below the last windows
                 * have dz 0 and add nothing */
                const int64_t PP = kp->ph * kp->pw * OC, lb = kp->pool * cv->OW;
                const rt_kern_mpool mg = rt_kern_mpool_of(cv, &nd->fused_p->conv);
                const int x9 = rt__x9_fits(cv, kp), p2 = rt__pool2_fits(cv, kp);
                rt__conv_params g;
                int64_t sb = 0;
                const float *xv =
                    x9 || p2 ? rt__x_view(kp, cv, a->x[0], s0, nb, col, &g, &sb) : NULL;
                if (p2) {
                    /* the permute kernel, from the pooled gradient; its
                     * gradients and indices in dzbuf (prepare sizes dz for
                     * a whole sample: 2 PP floats fit) */
                    float *gm = dzbuf;
                    int32_t *cb = (int32_t *)(dzbuf + PP);
                    const int64_t vs = g.H * g.W * g.C;
                    for (int64_t b = s0; b < s0 + nb; b++) {
                        rt__pool2_prep(kp->ph * kp->pw, OC, rt__pool_dead(&mg), a->dy + b * PP,
                                       (const uint8_t *)a->ws + b * PP, gm, cb, db ? pdb : NULL);
                        const int more = b + 1 < n;
                        rt__mk_dw_pool2(kp->ph, kp->pw, OC, g.W * g.C, xv + (sb + b - s0) * vs, gm,
                                        cb, pdw, more ? a->dy + (b + 1) * PP : NULL,
                                        more ? (const uint8_t *)a->ws + (b + 1) * PP : NULL);
                    }
                    continue;
                }
                for (int64_t b = s0; b < s0 + nb; b++)
                    for (int64_t ph = 0; ph < kp->ph; ph++) {
                        const int64_t po = b * PP + ph * kp->pw * OC;
                        const int64_t l0 = ph * kp->pool, l1 = l0 + kp->pool;
                        rt__pool_band_bwd(&mg, a->dy + po, cv->act ? a->y + po : NULL,
                                          (const uint8_t *)a->ws + po, dzbuf, pdb + OC,
                                          db ? pdb : NULL);
                        if (x9) {
                            rt__mk_dw_x9(&g, xv, sb + b - s0, 1, l0, l1, dzbuf, pdw);
                        } else {
                            rt__im2col(cv, a->x[0], b, 1, l0, l1, col);
                            rt__mk_dwa(lb, K, OC, col, dzbuf, pdw);
                        }
                    }
                continue;
            }
            if (kp->pool) {
                /* dz in dzbuf from the pooled gradient and the argmax the
                 * forward pass kept (the pooled y gives act') */
                const int64_t po = s0 * kp->ph * kp->pw * OC;
                const rt_kern_mpool mg = rt_kern_mpool_of(cv, &nd->fused_p->conv);
                rt_kern_mpool_bwd(&mg, nb, a->dy + po, cv->act ? a->y + po : NULL,
                                  (const uint8_t *)a->ws + po, dzbuf, pdb + OC, db ? pdb : NULL);
                const float *A = x;
                if (dw && !direct) {
                    rt__im2col(cv, a->x[0], s0, nb, c.oh0, c.oh1, col);
                    A = col;
                }
                dz = dzbuf;
                if (dw) {
                    if (rt__mk_fits(K, OC))
                        rt__mk_dwa(rows, K, OC, A, dzbuf, pdw);
                    else
                        rt__gemm(1, 0, K, OC, rows, A, K, dz, OC, 1.0f, pdw, OC);
                }
                goto dx_part;
            }
            if (dw && kp->dw_mk && (cv->act == RT__ACT_NONE || cv->act == RT__ACT_RELU)) {
                /* one pass over dy and y for dz, db and dW's first columns;
                 * the columns a few lines at a time, so they stay in L1
                 * while the microkernel's blocks pass over them */
                rt__mk_dw_lines(cv, kp, a->x[0], &c, dz, a->y + c.r0 * OC,
                                kp->rmask ? (const uint16_t *)a->ws + c.r0 * (OC / 16) : NULL,
                                cv->act == RT__ACT_RELU, dzbuf, col, pdw, db ? pdb : NULL);
                dz = dzbuf;
                goto dx_part;
            }
            if (cv->act) {
                rt_kern_act_bwd(cv->act, dzbuf, dz, a->y + c.r0 * OC, rows * OC);
                dz = dzbuf;
            }
            if (dw) {
                const float *A = x;
                if (!direct) {
                    rt__im2col(cv, a->x[0], s0, nb, c.oh0, c.oh1, col);
                    A = col;
                }
                if (rt__mk_fits(K, OC))
                    rt__mk_dwa(rows, K, OC, A, dz, pdw);
                else
                    rt__gemm(1, 0, K, OC, rows, A, K, dz, OC, 1.0f, pdw, OC);
            }
            if (db) {
                for (int64_t r = 0; r < rows; r++) {
                    const float *restrict d = dz + r * OC;
                    float *restrict bb = pdb;
                    for (int64_t c = 0; c < OC; c++)
                        bb[c] += d[c];
                }
            }
        dx_part:
            if (dx) {
                if (direct) {
                    float *dxc = dx + c.r0 * K;
                    rt__gemm(0, 1, rows, K, OC, dz, OC, a->x[1], OC, (a->accum & 1u) ? 1.0f : 0.0f,
                             dxc, K);
                } else {
                    rt__gemm(0, 1, rows, K, OC, dz, OC, a->x[1], OC, 0.0f, col, K);
                    if (!(a->accum & 1u) && c.oh0 == 0) /* a sample's first band */
                        memset(dx + s0 * in_s, 0, sizeof(float) * (size_t)(nb * in_s));
                    rt__col2im_add(cv, col, s0, nb, c.oh0, c.oh1, dx);
                }
            }
        }
    }
    /* sum the per-thread partials in thread order */
    rt__sum_partials(a, kp, team, K * OC, OC, dw, db);
}
