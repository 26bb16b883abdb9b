/*
 * bench_plan.h - a compiled plan's kernel calls run one by one, on buffers
 * laid out like the exec's (one arena, the parameter and gradient blocks)
 * and filled with small random values: per-kernel times, and the
 * convolutions' rates by direction (forward, backward-data,
 * backward-weights) against the compute limit (bench_limit.h).
 * Include after bench_util.h, rt_engine.h and rt_engine_impl.h.
 */
#ifndef RTRAIN_BENCH_PLAN_H
#define RTRAIN_BENCH_PLAN_H

#include <string.h>

#include "bench_limit.h"

typedef struct bp_run {
    rt_plan *p;
    int nc;
    unsigned char *arena;
    float *wb, *gs;
    rt__run run;
    rt__kargs *k;
} bp_run;

static inline void bp_open(bp_run *b, rt_plan *p, int64_t n)
{
    uint64_t s = 11;
    memset(b, 0, sizeof *b);
    b->p = p;
    b->nc = p->n_fwd + p->n_bwd;
    b->arena = rt__aligned_alloc((size_t)p->arena_bytes);
    b->wb = rt__aligned_alloc(sizeof(float) * (size_t)(p->param_floats + p->train_floats));
    b->gs = rt__aligned_alloc(sizeof(float) * (size_t)p->gemm_scratch_floats + 64);
    for (uint64_t i = 0; i + 4 <= p->arena_bytes; i += 4) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
        memcpy(b->arena + i, &v, 4);
    }
    for (int i = 0; i < p->n_params; i++)
        rt__init_param(&p->params[i], i, 1, b->wb + p->params[i].off);
    b->run = (rt__run){.n = n, .training = 1, .seed = 1, .gemm_scratch = b->gs,
                       .gemm_scratch_floats = p->gemm_scratch_floats};
    b->k = calloc((size_t)b->nc, sizeof *b->k);
#define BP_RES(r) ((r).space == RT__SP_ARENA ? (float *)(b->arena + (r).off)           \
               : (r).space == RT__SP_PARAM ? b->wb + (r).off                          \
               : (r).space == RT__SP_GRAD ? b->wb + p->param_floats + (r).off : NULL)
    for (int c = 0; c < b->nc; c++) {
        const rt__call *cl = &p->calls[c];
        b->k[c].nd = cl->nd;
        b->k[c].r = &b->run;
        b->k[c].y = BP_RES(cl->y);
        b->k[c].dy = BP_RES(cl->dy);
        b->k[c].scratch = BP_RES(cl->scratch);
        b->k[c].ws = BP_RES(cl->ws);
        b->k[c].accum = cl->accum;
        for (int j = 0; j < cl->nd->n_in; j++) {
            b->k[c].x[j] = BP_RES(cl->x[j]);
            b->k[c].dx[j] = BP_RES(cl->dx[j]);
        }
    }
#undef BP_RES
}

static inline void bp_close(bp_run *b)
{
    free(b->k);
    free(b->arena);
    free(b->wb);
    free(b->gs);
}

/* per kernel call: medians over reps, printed */
static inline void bp_breakdown(bp_run *b, int reps)
{
    const int nc = b->nc;
    double *kt = calloc((size_t)nc * (size_t)reps, sizeof(double));
    for (int i = 0; i < reps; i++)
        for (int c = 0; c < nc; c++) {
            double t0 = now_s();
            b->p->calls[c].fn(&b->k[c]);
            kt[(size_t)c * (size_t)reps + (size_t)i] = now_s() - t0;
        }
    double sum = 0;
    for (int c = 0; c < nc; c++) {
        double m = median(kt + (size_t)c * (size_t)reps, reps) * 1e3;
        sum += m;
        printf("    %-4s %-12s %-10s %7.2f ms\n", b->p->calls[c].bwd ? "bwd" : "fwd",
               b->p->calls[c].nd->name, b->p->calls[c].nd->op->name, m);
    }
    printf("    kernels total %.2f ms; gather, loss and the optimizer take the rest\n", sum);
    free(kt);
}

/* a dense (group 1) Conv2D call */
static inline int bp_is_conv(const rt__call *cl)
{
    return cl->nd->op == &rt__op_conv2d && rt__conv_cp(cl->nd)->G <= 1;
}

/* The workload's convolutions by direction, for nv variants of one model
 * (the same graph compiled nv ways): every Conv2D call of each plan timed
 * alone (backward twice more: input gradient only, weight gradient only),
 * the variants interleaved call by call so that a loaded machine slows
 * them alike; medians over reps, summed over the layers. Fills ms[v][dir]
 * and fl[dir] (FLOPs per direction, the same for every variant). */
static int bp_layers; /* print every layer's times too */

static inline void bp_conv_dirs(bp_run *b, int nv, int reps, double ms[][3], double fl[3])
{
    double *t = malloc(sizeof(double) * (size_t)reps * (size_t)nv);
    memset(fl, 0, sizeof(double) * 3);
    for (int v = 0; v < nv; v++) ms[v][0] = ms[v][1] = ms[v][2] = 0;
    for (int c = 0; c < b[0].nc; c++) {
        const rt__call *cl = &b[0].p->calls[c];
        if (!bp_is_conv(cl)) continue;
        const rt__conv_params *cv = rt__conv_cp(cl->nd);
        const double macs = (double)b[0].run.n * (double)(cv->OH * cv->OW * cv->OC) *
                            (double)(cv->KH * cv->KW * cv->C);
        for (int dir = 0; dir < 3; dir++) {
            if ((dir == 0) != !cl->bwd) continue;
            if (dir == 1 && !b[0].k[c].dx[0]) continue;
            for (int i = -1; i < reps; i++)
                for (int v = 0; v < nv; v++) {
                    rt__kargs k = b[v].k[c];
                    if (dir == 1) k.dx[1] = k.dx[2] = NULL; /* backward-data alone */
                    else if (dir == 2) k.dx[0] = NULL;      /* weights and bias alone */
                    const double t0 = now_s();
                    b[v].p->calls[c].fn(&k);
                    if (i >= 0) t[v * reps + i] = now_s() - t0; /* i = -1: warm */
                }
            if (bp_layers) {
                static const char dc[3] = {'F', 'D', 'W'};
                printf("    %c %-10s %3lldx%-3lld %4lld->%-4lld k%lld s%lld:", dc[dir],
                       cl->nd->name, (long long)cv->H, (long long)cv->W, (long long)cv->C,
                       (long long)cv->OC, (long long)cv->KH, (long long)cv->SH);
            }
            for (int v = 0; v < nv; v++) {
                const double m = median(t + v * reps, reps);
                ms[v][dir] += m * 1e3;
                if (bp_layers) printf(" %7.2f ms %6.1f GF/s", m * 1e3, 2.0 * macs / m * 1e-9);
            }
            if (bp_layers) printf("\n");
            fl[dir] += 2.0 * macs;
        }
    }
    free(t);
}

/* The op type a call runs, for bp_op_profile: the op's name, a fused
 * reader's after a '+', a folded Pad's before one, and a Conv2D's kind
 * (depthwise: one input channel a group; grouped: more). */
static inline void bp_op_label(const rt__node *nd, char *out, size_t cap)
{
    const char *kind = "";
    if (nd->op->params == RT__P_CONV && nd->op == &rt__op_conv2d) {
        const rt__conv_params *cv = rt__conv_cp(nd);
        if (cv->G > 1) kind = cv->G == cv->C ? " depthwise" : " grouped";
    }
    const int folded = nd->pad_fold[0] || nd->pad_fold[1] || nd->pad_fold[2] || nd->pad_fold[3];
    snprintf(out, cap, "%s%s%s%s%s", folded ? "Pad + " : "", nd->op->name, nd->fused ? " + " : "",
             nd->fused ? nd->fused->name : "", kind);
}

#define BP_MAX_OPS 64

/* Per op type and direction, for nv plans of one graph (float32 and bf16,
 * say): every kernel call of each plan timed in passes of the whole call
 * list (the plans' passes interleaved, one warm pass first), each call's
 * median over reps, summed per op type (bp_op_label) and direction.
 * Prints a table of ms per step, one column per plan, and each column's
 * ratio to the first; tot[v] gets plan v's kernels' total. */
static inline void bp_op_profile(bp_run *b, int nv, const char *const *names, int reps, double *tot)
{
    struct { char name[64]; double ms[2][4]; } *agg = calloc(BP_MAX_OPS, sizeof *agg);
    int na = 0, maxc = 0;
    for (int v = 0; v < nv; v++) if (b[v].nc > maxc) maxc = b[v].nc;
    for (int v = 0; v < nv; v++) tot[v] = 0;
    double *tv = malloc(sizeof(double) * (size_t)nv * (size_t)maxc * (size_t)reps);
    for (int i = -1; i < reps; i++) /* i = -1: warm */
        for (int v = 0; v < nv; v++)
            for (int c = 0; c < b[v].nc; c++) {
                const double t0 = now_s();
                b[v].p->calls[c].fn(&b[v].k[c]);
                if (i >= 0)
                    tv[((size_t)v * (size_t)maxc + (size_t)c) * (size_t)reps + (size_t)i] =
                        now_s() - t0;
            }
    for (int v = 0; v < nv; v++)
        for (int c = 0; c < b[v].nc; c++) {
            const rt__call *cl = &b[v].p->calls[c];
            const double m =
                median(tv + ((size_t)v * (size_t)maxc + (size_t)c) * (size_t)reps, reps) * 1e3;
            char nm[64];
            bp_op_label(cl->nd, nm, sizeof nm);
            int a = 0;
            while (a < na && strcmp(agg[a].name, nm)) a++;
            if (a == na && na < BP_MAX_OPS) snprintf(agg[na++].name, sizeof agg->name, "%s", nm);
            if (a < na && v < 4) agg[a].ms[cl->bwd][v] += m;
            tot[v] += m;
        }
    printf("\n| op | direction |");
    for (int v = 0; v < nv && v < 4; v++) printf(" %s ms |", names[v]);
    for (int v = 1; v < nv && v < 4; v++) printf(" %s/%s |", names[v], names[0]);
    printf("\n| --- | --- |");
    for (int v = 1; v < 2 * nv && v < 8; v++) printf(" --- |");
    printf("\n");
    for (int a = 0; a < na; a++)
        for (int d = 0; d < 2; d++) {
            int any = 0;
            for (int v = 0; v < nv && v < 4; v++) any |= agg[a].ms[d][v] > 0;
            if (!any) continue;
            printf("| %s | %s |", agg[a].name, d ? "backward" : "forward");
            for (int v = 0; v < nv && v < 4; v++) printf(" %.2f |", agg[a].ms[d][v]);
            for (int v = 1; v < nv && v < 4; v++)
                printf(" %.2f |", agg[a].ms[d][0] > 0 ? agg[a].ms[d][v] / agg[a].ms[d][0] : 0);
            printf("\n");
        }
    printf("| all kernels | both |");
    for (int v = 0; v < nv && v < 4; v++) printf(" %.2f |", tot[v]);
    for (int v = 1; v < nv && v < 4; v++) printf(" %.3f |", tot[0] > 0 ? tot[v] / tot[0] : 0);
    printf("\n");
    free(tv);
    free(agg);
}

#endif
