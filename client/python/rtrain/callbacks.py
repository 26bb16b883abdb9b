"""Keras callbacks for rtrain fit().

fit(callbacks=[...]) runs the fit one epoch per remote run, so that every
callback sees each epoch's end before the next epoch starts on the daemon:
stopping (model.stop_training = True) ends training there, with no step of
the next epoch run. on_batch_end runs at the steps the daemon's progress
events report (every step with the Fit stream, coalesced when the client
falls behind; every call with steps_per_execution) while the remote run is
in progress, so it must not make remote calls itself.

Learning-rate callbacks set model.optimizer.learning_rate, with the
optimizer's state (moments, step count) kept, as Keras' callbacks setting
the optimizer's variable. A rate set between epochs goes with the next
epoch's run and is used from its first step. Inside a Fit stream, a rate or
model.stop_training set by on_batch_end goes to the daemon at once, as a
Control call, and takes effect at the daemon's next step boundary: the
first step that starts after the call reaches it. The daemon keeps
training while the events travel and the callback runs, so that is some
steps after the step the callback saw (Keras: the very next batch); the
stream reports the exact step (History.lr_changes: (global step, rate) for
each new rate; History.stopped_at_step). A stop ends the run without an
error (status "stopped") and without the partial epoch's on_epoch_end.
With steps_per_execution a rate goes with the next RunSteps call and a stop
cancels the calls in flight.
"""
import csv as _csv
import math as _math
import os as _os

import time as _time

import numpy as _np

__all__ = ["Callback", "CallbackList", "History", "EarlyStopping",
           "ModelCheckpoint", "LearningRateScheduler", "ReduceLROnPlateau",
           "CSVLogger", "TerminateOnNaN", "LambdaCallback", "TensorBoard"]


class Callback:
    """Keras' Callback: override the hooks you need. self.model is the
    model being fit, self.params fit's settings (epochs, steps, ...)."""

    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_batch_begin(self, batch, logs=None):
        pass

    def on_batch_end(self, batch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        self.on_batch_end(batch, logs)


class LambdaCallback(Callback):
    def __init__(self, on_epoch_begin=None, on_epoch_end=None,
                 on_batch_end=None, on_train_begin=None, on_train_end=None):
        super().__init__()
        for k, v in list(locals().items()):
            if k.startswith("on_") and v is not None:
                setattr(self, k, v)


class CallbackList:
    def __init__(self, callbacks, model, params):
        self.callbacks = list(callbacks or [])
        for c in self.callbacks:
            if not isinstance(c, Callback):
                raise TypeError("callbacks must be rtrain.callbacks.Callback "
                                "objects, got %r" % (c,))
            c.set_model(model)
            c.set_params(params)

    def _all(self, hook, *a):
        for c in self.callbacks:
            getattr(c, hook)(*a)

    def on_train_begin(self, logs=None):
        self._all("on_train_begin", logs)

    def on_train_end(self, logs=None):
        self._all("on_train_end", logs)

    def on_epoch_begin(self, epoch, logs=None):
        self._all("on_epoch_begin", epoch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._all("on_epoch_end", epoch, logs)

    def on_batch_end(self, batch, logs=None):
        self._all("on_train_batch_end", batch, logs)

    _BATCH_HOOKS = ("on_batch_end", "on_train_batch_end")

    def batch_hooks(self):
        """Whether a callback has a per-batch hook of its own (a method
        overriding Callback's, or one set on the instance, as
        LambdaCallback does): fit then gives it every batch."""
        return any(h in vars(c) or getattr(type(c), h) is not getattr(Callback, h)
                   for c in self.callbacks for h in self._BATCH_HOOKS)


class History(Callback):
    """Records each epoch's logs (fit's returned History does the same)."""

    def on_train_begin(self, logs=None):
        self.epoch = []
        self.history = {}

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)


def _monitor_op(monitor, mode):
    if mode not in ("auto", "min", "max"):
        mode = "auto"
    if mode == "min":
        return _np.less
    if mode == "max":
        return _np.greater
    if monitor.endswith("acc") or monitor.endswith("accuracy") or \
            monitor.endswith("auc"):
        return _np.greater
    return _np.less


class EarlyStopping(Callback):
    """Keras' EarlyStopping, with its arithmetic: an epoch improves when
    monitor_op(current - min_delta, best) (min_delta signed towards the
    better side); wait counts epochs since the last improvement (reset only
    when the value also beats baseline); training stops at the end of an
    epoch e > 0 that did not improve once wait >= patience.
    restore_best_weights sets the weights of the best epoch when it stops."""

    def __init__(self, monitor="val_loss", min_delta=0, patience=0,
                 verbose=0, mode="auto", baseline=None,
                 restore_best_weights=False, start_from_epoch=0):
        super().__init__()
        self.monitor = monitor
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.min_delta = abs(min_delta)
        self.wait = 0
        self.stopped_epoch = 0
        self.restore_best_weights = restore_best_weights
        self.best_weights = None
        self.start_from_epoch = start_from_epoch
        self.monitor_op = _monitor_op(monitor, mode)
        if self.monitor_op == _np.greater:
            self.min_delta *= 1
        else:
            self.min_delta *= -1

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = _np.Inf if self.monitor_op == _np.less else -_np.Inf
        self.best_weights = None
        self.best_epoch = 0

    def on_epoch_end(self, epoch, logs=None):
        current = (logs or {}).get(self.monitor)
        if current is None or epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()
        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self._is_improvement(current,
                                                             self.baseline):
                self.wait = 0
            # an improving epoch never stops training (Keras'
            # keras/src/callbacks/early_stopping.py returns here)
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                if self.verbose > 0:
                    print("Restoring model weights from the end of the best "
                          "epoch: %d." % (self.best_epoch + 1))
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose > 0:
            print("Epoch %d: early stopping" % (self.stopped_epoch + 1))

    def _is_improvement(self, monitor_value, reference_value):
        return self.monitor_op(monitor_value - self.min_delta,
                               reference_value)


class ModelCheckpoint(Callback):
    """Writes the weights (save_weights_only) or the model (model.save) to
    filepath on the client at epoch ends; filepath may hold {epoch:02d}
    and log keys ({val_loss:.4f}). save_best_only keeps the best by
    monitor. save_freq "epoch" only."""

    def __init__(self, filepath, monitor="val_loss", verbose=0,
                 save_best_only=False, save_weights_only=False, mode="auto",
                 save_freq="epoch", initial_value_threshold=None):
        super().__init__()
        if save_freq != "epoch":
            raise ValueError("ModelCheckpoint saves at epoch ends only "
                             "(save_freq='epoch')")
        self.filepath = _os.fspath(filepath)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self.monitor_op = _monitor_op(monitor, mode)
        if initial_value_threshold is not None:
            self.best = initial_value_threshold
        else:
            self.best = _np.Inf if self.monitor_op == _np.less else -_np.Inf

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        path = self.filepath.format(epoch=epoch + 1, **logs)
        if self.save_best_only:
            current = logs.get(self.monitor)
            if current is None or not self.monitor_op(current, self.best):
                return
            if self.verbose > 0:
                print("Epoch %d: %s improved from %.5f to %.5f, saving model "
                      "to %s" % (epoch + 1, self.monitor, self.best, current,
                                 path))
            self.best = current
        elif self.verbose > 0:
            print("Epoch %d: saving model to %s" % (epoch + 1, path))
        if self.save_weights_only:
            self.model.save_weights(path)
        else:
            self.model.save(path)


def _set_lr(model, lr):
    if not isinstance(lr, (float, int, _np.floating, _np.integer)):
        raise ValueError('The output of the "schedule" function should be '
                         'float, got %r' % (lr,))
    model.optimizer.learning_rate = float(lr)


class LearningRateScheduler(Callback):
    """schedule(epoch, lr) -> the learning rate of that epoch (set before
    it starts)."""

    def __init__(self, schedule, verbose=0):
        super().__init__()
        self.schedule = schedule
        self.verbose = verbose

    def on_epoch_begin(self, epoch, logs=None):
        lr = float(self.model.optimizer.learning_rate)
        try:
            lr = self.schedule(epoch, lr)
        except TypeError:  # Keras' old one-argument schedules
            lr = self.schedule(epoch)
        _set_lr(self.model, lr)
        if self.verbose > 0:
            print("\nEpoch %05d: LearningRateScheduler setting learning rate "
                  "to %s." % (epoch + 1, lr))

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(self.model.optimizer.learning_rate)


class ReduceLROnPlateau(Callback):
    """Keras' ReduceLROnPlateau: lr *= factor after patience epochs without
    an improvement of more than min_delta, then cooldown epochs of rest;
    never below min_lr."""

    def __init__(self, monitor="val_loss", factor=0.1, patience=10,
                 verbose=0, mode="auto", min_delta=1e-4, cooldown=0,
                 min_lr=0, **kwargs):
        super().__init__()
        if "epsilon" in kwargs:
            min_delta = kwargs.pop("epsilon")
        if kwargs:
            raise TypeError("unexpected arguments %s" % sorted(kwargs))
        if factor >= 1.0:
            raise ValueError("ReduceLROnPlateau does not support a factor "
                             ">= 1.0, got %s" % factor)
        self.monitor = monitor
        self.factor = factor
        self.min_lr = min_lr
        self.min_delta = min_delta
        self.patience = patience
        self.verbose = verbose
        self.cooldown = cooldown
        self.mode = mode if mode in ("auto", "min", "max") else "auto"
        self._reset()

    def _reset(self):
        if self.mode == "min" or (self.mode == "auto" and
                                  "acc" not in self.monitor):
            self.monitor_op = lambda a, b: _np.less(a, b - self.min_delta)
            self.best = _np.Inf
        else:
            self.monitor_op = lambda a, b: _np.greater(a, b + self.min_delta)
            self.best = -_np.Inf
        self.cooldown_counter = 0
        self.wait = 0

    def on_train_begin(self, logs=None):
        self._reset()

    def in_cooldown(self):
        return self.cooldown_counter > 0

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        logs["lr"] = float(self.model.optimizer.learning_rate)
        current = logs.get(self.monitor)
        if current is None:
            return
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self.monitor_op(current, self.best):
            self.best = current
            self.wait = 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                old_lr = float(self.model.optimizer.learning_rate)
                if old_lr > _np.float32(self.min_lr):
                    new_lr = max(old_lr * self.factor, self.min_lr)
                    _set_lr(self.model, new_lr)
                    if self.verbose > 0:
                        print("\nEpoch %05d: ReduceLROnPlateau reducing "
                              "learning rate to %s." % (epoch + 1, new_lr))
                    self.cooldown_counter = self.cooldown
                    self.wait = 0


class CSVLogger(Callback):
    """One CSV row per epoch: epoch, then the log keys sorted."""

    def __init__(self, filename, separator=",", append=False):
        super().__init__()
        self.filename = _os.fspath(filename)
        self.sep = separator
        self.append = append
        self.keys = None
        self._file = None
        self._writer = None

    def on_train_begin(self, logs=None):
        exists = self.append and _os.path.exists(self.filename) and \
            _os.path.getsize(self.filename) > 0
        self._header = not exists
        self._file = open(self.filename, "a" if self.append else "w",
                          newline="")
        self.keys = None
        self._writer = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.keys is None:
            self.keys = sorted(logs.keys())
        if self._writer is None:
            self._writer = _csv.DictWriter(
                self._file, fieldnames=["epoch"] + self.keys,
                delimiter=self.sep)
            if self._header:
                self._writer.writeheader()
        row = {"epoch": epoch}
        row.update((k, logs.get(k, "NA")) for k in self.keys)
        self._writer.writerow(row)
        self._file.flush()

    def on_train_end(self, logs=None):
        if self._file is not None:
            self._file.close()
            self._file = None
            self._writer = None


class TerminateOnNaN(Callback):
    """Stops at the step a NaN or infinite loss is reported."""

    def on_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and (_math.isnan(loss) or _math.isinf(loss)):
            print("Batch %d: Invalid loss, terminating training" % batch)
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        self.on_batch_end(0, {"loss": (logs or {}).get("loss")})


class TensorBoard(Callback):
    """Keras' TensorBoard callback: event files TensorBoard reads, in
    log_dir/train and log_dir/validation, with Keras' tags (epoch_loss,
    epoch_accuracy, ...; a "val_" name goes to validation/ without the
    prefix; step = the epoch). With write_timings (rtrain's own), every
    remote call of the fit adds its time account to train/ as
    timing/<Method>/<part>_ms (round_trip, client_encode, wire, queue,
    decode, compile, execute, encode, client_decode, unattributed; step =
    that method's call count). write_steps_per_second adds
    epoch_steps_per_second, as Keras. The files are written by librtrain
    (the CLI's --tensorboard uses the same code) and flushed at every value.
    No graph, histograms, images or profiles are written: histogram_freq,
    write_images, embeddings_freq and profile_batch must keep their
    defaults (write_graph is accepted and writes nothing)."""

    def __init__(self, log_dir="logs", histogram_freq=0, write_graph=True,
                 write_images=False, write_steps_per_second=False,
                 update_freq="epoch", profile_batch=0, embeddings_freq=0,
                 embeddings_metadata=None, write_timings=True):
        super().__init__()
        for v, n in ((histogram_freq, "histogram_freq"),
                     (write_images, "write_images"),
                     (profile_batch, "profile_batch"),
                     (embeddings_freq, "embeddings_freq"),
                     (embeddings_metadata, "embeddings_metadata")):
            if v:
                raise ValueError("TensorBoard(%s=%r): rtrain writes scalars "
                                 "only; leave %s at its default" % (n, v, n))
        if update_freq != "epoch":
            raise ValueError("TensorBoard(update_freq=%r): rtrain writes "
                             "once per epoch; use update_freq='epoch'"
                             % (update_freq,))
        self.log_dir = _os.fspath(log_dir)
        self.write_steps_per_second = bool(write_steps_per_second)
        self.write_timings = bool(write_timings)
        self._log = None
        self._seen = 0
        self._t0 = None

    def _timings(self):
        h = getattr(self.model, "history", None)
        return getattr(h, "timings", None) or []

    def _write_calls(self):
        if not self.write_timings:
            return
        from . import _rtrain
        calls = self._timings()
        for t in calls[self._seen:]:
            _rtrain.tb_call(self._log, t)
        self._seen = len(calls)

    def on_train_begin(self, logs=None):
        from . import _rtrain
        self._close()
        self._log = _rtrain.tb_open(self.log_dir)
        self._seen = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._t0 = _time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        from . import _rtrain
        logs = dict(logs or {})
        if self.write_steps_per_second and self._t0 is not None:
            steps = self.params.get("steps") or 0
            logs["steps_per_second"] = steps / max(
                _time.perf_counter() - self._t0, 1e-9)
        for k, v in logs.items():
            try:
                v = float(v)
            except (TypeError, ValueError):
                continue  # not a scalar: Keras writes scalars only too
            _rtrain.tb_epoch(self._log, int(epoch), k, v)
        self._write_calls()

    def on_train_end(self, logs=None):
        if self._log is not None:
            self._write_calls()
        self._close()

    def _close(self):
        if self._log is not None:
            from . import _rtrain
            log, self._log = self._log, None
            _rtrain.tb_close(log)
