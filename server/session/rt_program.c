/* rt_program.c - a program's training state between calls: replay
 * records, run/stop generations, the resumable Fit, the step estimate and
 * the checkpoint marks. The locking rule is in rt_program.h. */
#include "rt_program_impl.h"

#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_clock.h"
#include "rt_hold.h"

#ifndef NDEBUG
/* the transport marks the thread that holds the device (rt_hold.h) */
#define DEVICE_HELD() assert(rt_device_held() && "rt_program: [device] call without the device")
#else
#define DEVICE_HELD() ((void)0)
#endif

#define HEAD_AT(f) (offsetof(struct rt_program, f) == offsetof(rt_program_head, f))
_Static_assert(HEAD_AT(id) && HEAD_AT(charged_bytes) && HEAD_AT(plan) && HEAD_AT(exec) &&
                   sizeof(((struct rt_program *)0)->id) == sizeof(((rt_program_head *)0)->id),
               "rt_program_head must match the start of struct rt_program");
#undef HEAD_AT
rt_program_pipe *rt_program_pipe_marks(rt_program *p) { return &p->pipe; }

const rt_view_spec *rt_program_view(const rt_program *p) { return &p->view; }

int rt_program_output_shape(const rt_program *p, int64_t *dims)
{
    if (p->out_n > 0)
        memcpy(dims, p->out, sizeof(int64_t) * (size_t)p->out_n);
    return p->out_n;
}

int rt_program_set_lr(rt_program *p, float lr)
{
    if (!(lr > 0.0f))
        return 0;
    if (lr != rt_exec_lr_override(p->exec))
        __atomic_store_n(&p->ckpt_dirty, 1, __ATOMIC_RELEASE);
    return rt_exec_set_lr(p->exec, lr);
}

void rt_program_mark_dirty(rt_program *p) { __atomic_store_n(&p->ckpt_dirty, 1, __ATOMIC_RELEASE); }

int rt_program_control(rt_program *p, int stop)
{
    uint64_t gen = __atomic_load_n(&p->run_gen, __ATOMIC_ACQUIRE);
    if (stop && gen)
        __atomic_store_n(&p->stop_gen, gen, __ATOMIC_RELEASE);
    return gen != 0;
}

double rt_program_step_ns(const rt_program *p)
{
    /* Read on a cq thread while work under the device lock may update it:
     * atomic (rt_program_note_steps is the only writer). */
    double est;
    __atomic_load(&p->step_ns, &est, __ATOMIC_RELAXED);
    if (est > 0)
        return est;
    return (double)rt_plan_report(p->plan)->flops_per_step * 0.5 + 2000.0;
}

uint64_t rt_program_run_begin(rt_program *p)
{
    DEVICE_HELD();
    static uint64_t next_gen;
    uint64_t g = __atomic_add_fetch(&next_gen, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&p->run_gen, g, __ATOMIC_RELEASE);
    return g;
}

void rt_program_run_end(rt_program *p)
{
    DEVICE_HELD();
    __atomic_store_n(&p->run_gen, 0, __ATOMIC_RELEASE);
}

int rt_program_stop_asked(const rt_program *p, uint64_t gen)
{
    return __atomic_load_n(&p->stop_gen, __ATOMIC_ACQUIRE) == gen;
}

int rt_program_replay(const rt_program *p, uint64_t seq, rt_seq_rec *out)
{
    if (!seq || seq > p->last_seq)
        return 0;
    const rt_seq_rec *rec = &p->ring[seq % RT_SEQ_RING];
    if (rec->seq == seq)
        *out = *rec;
    else
        *out = (rt_seq_rec){.seq = 0, .last = p->last_metrics, .mean = p->last_mean};
    return 1;
}

void rt_program_run_done(rt_program *p, uint64_t seq, const rt_metrics *last,
                         const rt_metrics *mean)
{
    DEVICE_HELD();
    p->ckpt_partial = 0;
    p->last_metrics = *last;
    p->last_mean = *mean;
    if (seq) {
        p->last_seq = seq;
        p->ring[seq % RT_SEQ_RING] = (rt_seq_rec){
            .seq = seq, .global_step = rt_exec_global_step(p->exec), .last = *last, .mean = *mean};
    }
}

void rt_program_set_partial(rt_program *p, int partial)
{
    DEVICE_HELD();
    p->ckpt_partial = partial;
}

void rt_program_note_steps(rt_program *p, uint64_t ns, int64_t steps)
{
    DEVICE_HELD();
    if (steps <= 0)
        return;
    double per = (double)ns / (double)steps, old;
    __atomic_load(&p->step_ns, &old, __ATOMIC_RELAXED);
    double v = old > 0 ? 0.8 * old + 0.2 * per : per;
    __atomic_store(&p->step_ns, &v, __ATOMIC_RELAXED);
}

uint64_t rt_program_epoch_clock_end(rt_program *p, uint64_t *mark)
{
    DEVICE_HELD();
    uint64_t now = rt_now_ns(), ns = p->epoch_exec_ns + (now - *mark);
    p->epoch_exec_ns = 0;
    *mark = now;
    return ns;
}

void rt_program_epoch_clock_pause(rt_program *p, uint64_t mark)
{
    DEVICE_HELD();
    p->epoch_exec_ns += rt_now_ns() - mark;
}

int64_t rt_program_ckpt_step(const rt_program *p) { return p->ckpt_step; }

int rt_program_ckpt_current(const rt_program *p)
{
    return p->ckpt_step == rt_exec_global_step(p->exec) &&
           !__atomic_load_n(&p->ckpt_dirty, __ATOMIC_ACQUIRE);
}

int rt_program_partial(const rt_program *p) { return p->ckpt_partial; }

int rt_program_checkpoint_due(const rt_program *p, uint32_t every_steps, uint32_t every_s)
{
    int64_t step = rt_exec_global_step(p->exec);
    if (step == p->ckpt_step)
        return 0;
    if (every_steps && step - p->ckpt_step >= (int64_t)every_steps)
        return 1;
    return every_s && rt_now_ns() - p->ckpt_ns >= (uint64_t)every_s * 1000000000ull;
}

uint64_t rt_program_last_seq(const rt_program *p) { return p->last_seq; }
int64_t rt_program_fit_epochs(const rt_program *p) { return p->fit_epochs; }
const rt_fit_rec *rt_program_fit(const rt_program *p) { return &p->fit; }

void rt_program_fit_begin(rt_program *p, uint64_t id, int64_t spe, uint32_t epochs, int aligned)
{
    DEVICE_HELD();
    memset(&p->fit, 0, sizeof p->fit);
    p->fit.aligned = aligned;
    if (id) {
        p->fit.id = id;
        p->fit.first_epoch = p->fit_epochs;
        p->fit.spe = spe;
        p->fit.epochs = epochs;
    }
}

void rt_program_fit_step(rt_program *p)
{
    DEVICE_HELD();
    p->fit.steps_done++;
}

int64_t rt_program_fit_epoch_end(rt_program *p)
{
    DEVICE_HELD();
    p->ckpt_partial = 0;
    return ++p->fit_epochs;
}

void rt_program_fit_keep_epoch(rt_program *p, const rt_fit_epoch *e)
{
    DEVICE_HELD();
    int64_t k = p->fit_epochs - p->fit.first_epoch;
    p->fit_ring[(k - 1) % RT_FIT_RING] = *e;
}

void rt_program_fit_end(rt_program *p, int stopped)
{
    DEVICE_HELD();
    p->fit.done = 1;
    p->fit.stopped = stopped;
}

const rt_fit_epoch *rt_program_fit_epoch(const rt_program *p, int64_t k)
{
    int64_t done = p->fit_epochs - p->fit.first_epoch;
    if (k < 1 || k > done || done - k >= RT_FIT_RING)
        return NULL;
    return &p->fit_ring[(k - 1) % RT_FIT_RING];
}

void rt_program_take_model(rt_program *p, uint8_t *buf, size_t len)
{
    free(p->req);
    p->req = buf;
    p->req_len = len;
}

const uint8_t *rt_program_model(const rt_program *p, size_t *len)
{
    *len = p->req ? p->req_len : 0;
    return p->req;
}

void rt_program_set_id(rt_program *p, const char *id) { snprintf(p->id, sizeof p->id, "%s", id); }

void rt_program_inherit(rt_program *p, const rt_program *from) { p->fit_epochs = from->fit_epochs; }

void rt_program_forget_client(rt_program *p)
{
    memset(&p->fit, 0, sizeof p->fit);
    p->last_seq = 0;
    p->pipe.done = p->pipe.seen = 0;
    memset(p->ring, 0, sizeof p->ring);
}
