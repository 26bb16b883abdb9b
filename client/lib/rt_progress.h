/*
 * rt_progress.h - the training progress display of librtrain's clients,
 * shared by the rtrain CLI and the Python extension.
 *
 * Two modes, as Keras prints them:
 *   RT_PROGRESS_BAR    "Epoch 3/20" then a bar redrawn in place with '\r'
 *                      (at most every 50 ms) and a final line per epoch:
 *                      " 6/6 [==============================] - 0s 9.5us/step
 *                      - loss: 0.4242 - accuracy: 0.8571 - val_loss: ...";
 *                      for terminals and notebooks.
 *   RT_PROGRESS_LINES  one line per epoch and no '\r' (logs, pipes):
 *                      "Epoch 3/20 - 6/6 - 0s 9.5us/step - loss: 0.4242 ...".
 * Epochs are numbered 1..epochs within one run, whatever the daemon's count
 * for the program. Times are wall time since the epoch began.
 *
 *     static int out(void *user, const char *s) { return fputs(s, user) < 0 ? -1 : 0; }
 *
 *     rt_progress p;
 *     rt_progress_init(&p, isatty(1) ? RT_PROGRESS_BAR : RT_PROGRESS_LINES,
 *                      epochs, steps_per_epoch, "accuracy", out, stdout);
 *     rt_progress_begin(&p);
 *     ... rt_progress_event(&p, ev) from a rt_client_fit_cb ...
 *     rt_progress_finish(&p);   // ends a bar left half drawn (cancel, error)
 *
 * Text goes out only through write(user, text); a write that returns < 0
 * makes this and every later call return -1 without writing again.
 */
#ifndef RTRAIN_PROGRESS_H
#define RTRAIN_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "rtrain/rtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rt_progress_mode {
    RT_PROGRESS_OFF = 0,
    RT_PROGRESS_BAR = 1,
    RT_PROGRESS_LINES = 2,
} rt_progress_mode;

typedef int (*rt_progress_write_fn)(void *user, const char *text);

#define RT_PROGRESS_BAR_WIDTH 30

typedef struct rt_progress {
    rt_progress_mode mode;
    uint32_t epochs;
    uint64_t steps_per_epoch; /* 0: taken from the first progress event */
    const char *metric;       /* "accuracy" or NULL: printed under this name */
    rt_progress_write_fn write;
    void *user;
    /* state */
    uint32_t epoch;           /* the epoch in progress, 1-based */
    uint64_t t_epoch, t_draw; /* when it began; the last bar drawn */
    size_t bar_len;           /* length of the bar on screen, 0 = none */
    uint64_t k_shown;         /* auto steps per call last printed */
    int failed;
} rt_progress;

/* Set up p (no output). metric is not copied: it must outlive p. */
void rt_progress_init(rt_progress *p, rt_progress_mode mode, uint32_t epochs,
                      uint64_t steps_per_epoch, const char *metric, rt_progress_write_fn write,
                      void *user);
/* The run starts: the first epoch's header (BAR). */
int rt_progress_begin(rt_progress *p);
/* done of steps_per_epoch steps of the current epoch; loss and acc are the
 * epoch's running means (NaN acc: not shown). BAR only. */
int rt_progress_step(rt_progress *p, uint64_t done, double loss, double acc);
/* The current epoch ended with these metrics: its final line, then the next
 * epoch's header (BAR) when more epochs follow. */
int rt_progress_epoch_end(rt_progress *p, const rt_client_epoch *e);
/* Dispatch a fit or training-loop event to the two above. A training-loop
 * event whose auto steps per call differs from the last one printed first
 * prints a line: "steps per call: auto K = 37 (fixed cost 95 us per call,
 * 2.50 us per step)". */
int rt_progress_event(rt_progress *p, const rt_client_fit_event *ev);
/* Ends a bar left half drawn with a newline. */
int rt_progress_finish(rt_progress *p);

/* The line's body into buf (always NUL-terminated; returns buf):
 * "done/total [bar] - ETA: 3s - loss: ..." while done < total,
 * "done/total [bar] - 1s 12ms/step - loss: ..." when done == total.
 * bar_width 0 leaves the bar out. NaN loss or acc, or a NULL metric, leave
 * those out; so does has_val 0 for the val_ figures. */
char *rt_progress_format(char *buf, size_t len, uint64_t done, uint64_t total, int bar_width,
                         double elapsed_s, double eta_s, double loss, double acc,
                         const char *metric, int has_val, double val_loss, double val_acc);

#ifdef __cplusplus
}
#endif
#endif
