/*
 * rtrain_tb.h - TensorBoard event files, as keras.callbacks.TensorBoard
 * writes them, for the CLI's --tensorboard DIR and Python's
 * rtrain.callbacks.TensorBoard (one implementation for both).
 *
 * A log directory gets train/ and validation/ subdirectories (each made on
 * its first value), each holding one events.out.tfevents.<seconds>.<host>.
 * <pid>.<n>.v2 file: TFRecord frames (length, masked CRC32C of the length,
 * the data, masked CRC32C of the data) of TensorBoard's Event protos
 * (proto/tfevents.proto, the fields rtrain writes with TensorBoard's
 * numbers), the first one the file_version "brain.Event:2".
 *
 *     rt_tb_log *l;
 *     if (rt_tb_log_open("logs/run1", &l, err, sizeof err) < 0) -> err
 *     rt_tb_log_epoch(l, 0, "loss", 0.93);          // train/ epoch_loss
 *     rt_tb_log_epoch(l, 0, "val_loss", 1.02);      // validation/ epoch_loss
 *     rt_tb_log_call(l, &timings);                  // train/ timing/RunSteps/...
 *     rc = rt_tb_log_close(l);                      // first write error, if any
 *
 * Epoch values go under Keras' tags: "epoch_" + the name, step = the epoch
 * (0-based, as Keras' logs), names starting "val_" to validation/ without
 * that prefix. A call's time account (rt_client_timings) goes to train/ as
 * timing/<Method>/<part>_ms for part in round_trip, client_encode, wire,
 * queue, decode, compile, execute, encode, client_decode, unattributed (the
 * daemon's parts only when the call carried them), step = the count of
 * that method's calls logged before it. Values are simple_value scalars.
 * Every value is flushed at once, so TensorBoard sees a running fit.
 */
#ifndef RTRAIN_RTRAIN_TB_H
#define RTRAIN_RTRAIN_TB_H

#include <stddef.h>
#include <stdint.h>

#include "rtrain/rtrain.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_tb_log rt_tb_log;

/* Makes dir (and its parents). Files are opened on their first value.
 * RT_EINVAL / RT_EIO with a message in err (may be NULL). */
int rt_tb_log_open(const char *dir, rt_tb_log **out, char *err, size_t errlen);
int rt_tb_log_epoch(rt_tb_log *l, int64_t epoch, const char *name, double value);
int rt_tb_log_call(rt_tb_log *l, const rt_client_timings *t);
/* One scalar under any tag; run is "train" or "validation". */
int rt_tb_log_scalar(rt_tb_log *l, const char *run, const char *tag,
                     int64_t step, double value);
/* The last write error's message ("" if none); owned by l. */
const char *rt_tb_log_error(const rt_tb_log *l);
/* Closes the files; returns the first error any write met (0 if none).
 * NULL is a no-op. */
int rt_tb_log_close(rt_tb_log *l);

#ifdef __cplusplus
}
#endif
#endif
