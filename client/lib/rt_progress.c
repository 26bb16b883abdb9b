/* rt_progress.c - the Keras-style progress display (rt_progress.h). */
#include "rt_progress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rt_wire.h" /* rt_now_ns */

/* Keras' update interval: redrawing more often only costs the terminal (or
 * a notebook's output area) time. */
#define RT__DRAW_NS 50000000ull

static void fmt_time(char *buf, size_t len, double s)
{
    if (s >= 3600)
        snprintf(buf, len, "%d:%02d:%02d", (int)(s / 3600), (int)fmod(s / 60, 60),
                 (int)fmod(s, 60));
    else if (s >= 60)
        snprintf(buf, len, "%d:%02d", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, len, "%.0fs", s);
}

static void fmt_per_step(char *buf, size_t len, double s)
{
    if (s >= 1)
        snprintf(buf, len, "%.0fs/step", s);
    else if (s >= 1e-3)
        snprintf(buf, len, "%.0fms/step", s * 1e3);
    else if (s >= 1e-5)
        snprintf(buf, len, "%.0fus/step", s * 1e6);
    else /* tiny models: keep a digit rather than print 0us */
        snprintf(buf, len, "%.1fus/step", s * 1e6);
}

char *rt_progress_format(char *buf, size_t len, uint64_t done, uint64_t total, int bar_width,
                         double elapsed_s, double eta_s, double loss, double acc,
                         const char *metric, int has_val, double val_loss, double val_acc)
{
    size_t at = 0;
#define PUT(...)                                                           \
    do {                                                                   \
        int w_ = snprintf(buf + at, at < len ? len - at : 0, __VA_ARGS__); \
        if (w_ > 0)                                                        \
            at += (size_t)w_;                                              \
        if (at >= len)                                                     \
            at = len ? len - 1 : 0;                                        \
    } while (0)
    if (!len)
        return buf;
    buf[0] = 0;
    int digits = snprintf(NULL, 0, "%llu", (unsigned long long)total);
    PUT("%*llu/%llu", digits, (unsigned long long)done, (unsigned long long)total);
    if (bar_width > 0) {
        int filled = total ? (int)((double)done / (double)total * bar_width) : bar_width;
        if (filled > bar_width)
            filled = bar_width;
        PUT(" [");
        for (int i = 0; i < bar_width; i++) {
            char ch = i < filled ? '=' : '.';
            if (i == filled - 1 && done < total)
                ch = '>';
            PUT("%c", ch);
        }
        PUT("]");
    }
    char t[32], ps[32];
    if (done < total) {
        fmt_time(t, sizeof t, eta_s);
        PUT(" - ETA: %s", t);
    } else {
        fmt_time(t, sizeof t, elapsed_s);
        fmt_per_step(ps, sizeof ps, done ? elapsed_s / (double)done : 0);
        PUT(" - %s %s", t, ps);
    }
    if (!isnan(loss))
        PUT(" - loss: %.4f", loss);
    if (metric && !isnan(acc))
        PUT(" - %s: %.4f", metric, acc);
    if (has_val) {
        if (!isnan(val_loss))
            PUT(" - val_loss: %.4f", val_loss);
        if (metric && !isnan(val_acc))
            PUT(" - val_%s: %.4f", metric, val_acc);
    }
#undef PUT
    return buf;
}

void rt_progress_init(rt_progress *p, rt_progress_mode mode, uint32_t epochs,
                      uint64_t steps_per_epoch, const char *metric, rt_progress_write_fn write,
                      void *user)
{
    memset(p, 0, sizeof *p);
    p->mode = write ? mode : RT_PROGRESS_OFF;
    p->epochs = epochs;
    p->steps_per_epoch = steps_per_epoch;
    p->metric = metric;
    p->write = write;
    p->user = user;
    p->epoch = 1;
    p->t_epoch = rt_now_ns();
}

static int put(rt_progress *p, const char *s)
{
    if (p->failed)
        return -1;
    if (p->write(p->user, s) < 0) {
        p->failed = 1;
        return -1;
    }
    return 0;
}

static int header(rt_progress *p)
{
    if (p->mode != RT_PROGRESS_BAR)
        return p->failed ? -1 : 0;
    char line[64];
    snprintf(line, sizeof line, "Epoch %u/%u\n", p->epoch, p->epochs);
    return put(p, line);
}

int rt_progress_begin(rt_progress *p)
{
    p->t_epoch = rt_now_ns();
    return header(p);
}

/* "\r" + body, blanked over the rest of a longer bar drawn before (spaces,
 * not an escape sequence: notebooks show those as text), + end. */
static int draw(rt_progress *p, const char *body, const char *end)
{
    char line[4400];
    size_t n = strlen(body);
    int pad = p->bar_len > n ? (int)(p->bar_len - n) : 0;
    snprintf(line, sizeof line, "\r%s%*s%s", body, pad, "", end);
    p->bar_len = *end ? 0 : n;
    return put(p, line);
}

int rt_progress_step(rt_progress *p, uint64_t done, double loss, double acc)
{
    if (p->mode != RT_PROGRESS_BAR)
        return p->failed ? -1 : 0;
    uint64_t now = rt_now_ns(), total = p->steps_per_epoch;
    if (p->bar_len && done < total && now - p->t_draw < RT__DRAW_NS)
        return p->failed ? -1 : 0;
    p->t_draw = now;
    double el = (double)(now - p->t_epoch) / 1e9;
    double eta = done && total > done ? el / (double)done * (double)(total - done) : 0;
    char body[512];
    rt_progress_format(body, sizeof body, done, total, RT_PROGRESS_BAR_WIDTH, el, eta, loss, acc,
                       p->metric, 0, NAN, NAN);
    return draw(p, body, "");
}

/* the epoch's other values after the line's loss and accuracy, as Keras
 * prints them: " - auc: 0.9", a model with several outputs "out1_loss: ...",
 * then the validation's with "val_" */
static void epoch_values(char *buf, size_t len, const rt_client_epoch *e)
{
    size_t at = strlen(buf);
    for (int v = 0; v < 1 + (e->has_val != 0); v++) {
        const rt_client_metrics *m = v ? &e->val : &e->train;
        for (int i = 0; i < m->n_values && at < len; i++) {
            int w = snprintf(buf + at, len - at, " - %s%s: %.4f", v ? "val_" : "", m->value_name[i],
                             m->values[i]);
            if (w < 0)
                return;
            at += (size_t)w;
        }
    }
}

int rt_progress_epoch_end(rt_progress *p, const rt_client_epoch *e)
{
    uint64_t now = rt_now_ns(), spe = p->steps_per_epoch;
    double el = (double)(now - p->t_epoch) / 1e9;
    char body[4096];
    int rc = p->failed ? -1 : 0;
    if (p->mode == RT_PROGRESS_BAR) {
        rt_progress_format(body, sizeof body, spe, spe, RT_PROGRESS_BAR_WIDTH, el, 0, e->train.loss,
                           e->train.accuracy, p->metric, e->has_val, e->val.loss, e->val.accuracy);
        epoch_values(body, sizeof body, e);
        rc = draw(p, body, "\n");
    } else if (p->mode == RT_PROGRESS_LINES) {
        char line[4200];
        rt_progress_format(body, sizeof body, spe, spe, 0, el, 0, e->train.loss, e->train.accuracy,
                           p->metric, e->has_val, e->val.loss, e->val.accuracy);
        epoch_values(body, sizeof body, e);
        snprintf(line, sizeof line, "Epoch %u/%u - %s\n", p->epoch, p->epochs, body);
        rc = put(p, line);
    }
    p->epoch++;
    p->t_epoch = now;
    p->t_draw = 0;
    if (rc == 0 && p->epoch <= p->epochs)
        rc = header(p);
    return rc;
}

/* Auto steps per call changed: say so on a line of its own. */
static int k_note(rt_progress *p, const rt_client_fit_event *ev)
{
    p->k_shown = ev->steps_per_call;
    if (p->mode == RT_PROGRESS_OFF)
        return p->failed ? -1 : 0;
    if (p->bar_len && rt_progress_finish(p) < 0)
        return -1;
    char line[160];
    snprintf(line, sizeof line,
             "steps per call: auto K = %llu (fixed cost %.0f us per "
             "call, %.2f us per step)\n",
             (unsigned long long)ev->steps_per_call, ev->fixed_ns / 1e3, ev->step_ns / 1e3);
    return put(p, line);
}

int rt_progress_event(rt_progress *p, const rt_client_fit_event *ev)
{
    if (ev->kind == RT_FIT_PROGRESS) {
        if (!p->steps_per_epoch)
            p->steps_per_epoch = ev->steps_per_epoch;
        if ((ev->fixed_ns > 0 || ev->step_ns > 0) && ev->steps_per_call != p->k_shown &&
            k_note(p, ev) < 0)
            return -1;
        return rt_progress_step(p, ev->step_in_epoch, ev->loss, ev->accuracy);
    }
    if (ev->kind == RT_FIT_EPOCH_END)
        return rt_progress_epoch_end(p, &ev->epoch_end);
    return p->failed ? -1 : 0;
}

int rt_progress_finish(rt_progress *p)
{
    if (!p->bar_len)
        return p->failed ? -1 : 0;
    p->bar_len = 0;
    return put(p, "\n");
}
