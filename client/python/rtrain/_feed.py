"""fit, evaluate and predict on batches made in Python (a generator or a
keras.utils.Sequence), and fits whose learning rate is computed here
(PiecewiseConstantDecay, a callable rate).

Batches go to the daemon in uploads of at most CHUNK_BYTES: consecutive
batches of the program's batch size (the last of them may be smaller, as
an epoch's last batch) become one data set, which the program trains on
in order, one pass, unshuffled (the daemon starts a new pass at the first
batch of each new data set, rt_engine.h rt_exec_train). Nothing is held
beyond one chunk; a chunk's data set is the daemon's to evict once used.

Arrays larger than one upload can hold (Client._upload_limit: the
daemon's --max-dataset-bytes, its upload cap, the caller's upload quota and
half its memory budget, whichever is least) take the same path: ArrayRows
serves their rows as batches of the program's batch size, in order, or
with shuffle in a new permutation of all rows each epoch, as Keras
shuffles arrays, and the chunks are at most half that limit.

Epochs follow Keras 3's EpochIterator (keras/src/trainers/
epoch_iterator.py) and its PyDataset adapter (data_adapters/
py_dataset_adapter.py):
  * Sequence: steps_per_epoch defaults to len(seq); with a smaller one
    the next epoch continues where the last stopped and the order starts
    again after len(seq) batches (Keras warns that the input ran out when
    steps_per_epoch does not divide it). shuffle=True shuffles the order of
    the batches, random.Random(epoch).shuffle as Keras; on_epoch_begin and
    on_epoch_end are called around each epoch.
  * generator: steps_per_epoch batches per epoch from the same generator;
    without steps_per_epoch an epoch runs until the generator ends. A
    generator that runs out of data ends the fit after that epoch, with
    Keras' warning (Keras 2's behaviour; Keras 3 then replays the batches
    it peeked at, which rtrain does not).
An epoch's metrics are the sample-weighted means of its pieces' means
(the daemon's own for one piece), as Keras' loss tracker weighs each batch
by its size. auc, precision and recall cannot be combined that way and
are refused for such fits.
"""
import inspect as _inspect
import random as _random
import time as _time
import warnings as _warnings

import numpy as _np

# The most bytes (features, labels and weights) one upload of batches
# holds; a batch larger than this is uploaded on its own.
CHUNK_BYTES = 32 << 20

# metrics whose epoch value is not a mean over samples
_UNMERGEABLE = ("auc", "precision", "recall")

_RAN_OUT = ("Your input ran out of data; interrupting training. Make sure that your "
            "dataset or generator can generate at least `steps_per_epoch * epochs` "
            "batches.")


def is_batch_source(x):
    """A Python generator/iterator of batches, or a Sequence (rtrain.utils.
    Sequence, or anything with __len__, __getitem__ and on_epoch_end as
    keras.utils.Sequence has)."""
    from . import utils
    if x is None or isinstance(x, (list, tuple, dict, str, bytes)) or hasattr(x, "shape"):
        return False
    if isinstance(x, utils.Sequence):
        return True
    if _inspect.isgenerator(x) or (hasattr(x, "__next__") and hasattr(x, "__iter__")):
        return True
    return all(hasattr(x, a) for a in ("__len__", "__getitem__", "on_epoch_end"))


class Source:
    """The batches of a generator or Sequence, epoch by epoch (Keras'
    EpochIterator). epoch() yields one epoch's batches; afterwards
    ran_out says the data ended before the epoch's steps (a generator: the
    fit stops)."""

    def __init__(self, x, steps=None, shuffle=False, what="x"):
        self.what = what
        self.seq = None if (_inspect.isgenerator(x) or hasattr(x, "__next__")) else x
        self.gen = x if self.seq is None else None
        if steps is not None and (isinstance(steps, bool) or int(steps) <= 0):
            raise ValueError("steps for %s must be a positive int, got %r" % (what, steps))
        self.steps = None if steps is None else int(steps)
        self.shuffle = bool(shuffle)
        self.n = None
        if self.seq is not None:
            self.n = int(len(self.seq))
            if self.n <= 0:
                raise ValueError("%s: the Sequence has no batches (len 0)" % what)
        self._epoch = 0
        self._cur = None
        self._seen = 0
        self.ran_out = False
        self.warned = False

    def _order(self):
        # a generator function: the order is drawn at the first batch, with
        # the epoch count of that moment, as Keras' _finite_generator
        order = list(range(self.n))
        if self.shuffle:
            _random.Random(self._epoch).shuffle(order)
        for i in order:
            yield self.seq[i]

    def epoch(self):
        self.ran_out = False
        if self.seq is not None:
            begin = getattr(self.seq, "on_epoch_begin", None)
            if begin is not None:
                begin()
            if self._cur is None or self.steps is None:
                self._cur, self._seen = self._order(), 0
            for _ in range(self.steps or self.n):
                if self._seen >= self.n:
                    if self.steps:
                        _warnings.warn(_RAN_OUT, stacklevel=4)
                    break
                self._seen += 1
                yield next(self._cur)
            if self._seen >= self.n:
                self._cur, self._seen = self._order(), 0
            end = getattr(self.seq, "on_epoch_end", None)
            if end is not None:
                end()
            self._epoch += 1
            return
        k = 0
        while self.steps is None or k < self.steps:
            try:
                b = next(self.gen)
            except StopIteration:
                if self.steps is not None or k == 0:
                    self.ran_out = True
                    if not self.warned:
                        self.warned = True
                        _warnings.warn(_RAN_OUT, stacklevel=4)
                break
            k += 1
            yield b


def split_batch(b, what):
    """(x, y, sample_weight) of a batch: Keras' (x,), (x, y) or (x, y, sw)."""
    if isinstance(b, list):
        b = tuple(b)
    if isinstance(b, _np.ndarray) or not isinstance(b, tuple):
        b = (b,)
    if len(b) not in (1, 2, 3):
        raise ValueError("%s must give (x,), (x, y) or (x, y, sample_weight) tuples, got "
                         "a tuple of %d" % (what, len(b)))
    return b[0], (b[1] if len(b) > 1 else None), (b[2] if len(b) > 2 else None)


def _rows(a):
    return int(a.shape[0])


def chunk_bytes(cm):
    """The most bytes one upload of batches holds: CHUNK_BYTES, or half
    of what the daemon takes in one upload when that is less."""
    f = getattr(cm._client, "_upload_limit", None)
    lim = f() if f is not None else 0
    return max(1, min(CHUNK_BYTES, lim // 2)) if lim else CHUNK_BYTES


class ArrayRows:
    """Arrays (x and y packed as fit packs them, sample weights as fit
    computed them) as a Sequence of batches of batch_size rows: in order,
    or with shuffle a permutation of all rows drawn anew for each epoch
    (numpy's default_rng(seed), the compile's seed). Too large for one
    upload, they are sent a chunk at a time (_Chunker)."""

    packed = True

    def __init__(self, x, y, sw, batch_size, shuffle=False, seed=0, upload_kw=None):
        # lists index by rows only as arrays
        self.x, self.y, self.sw = (a if a is None or hasattr(a, "shape") else _np.asarray(a)
                                   for a in (x, y, sw))
        self.n, self.bs = _rows(self.x), int(batch_size)
        self._rng = _np.random.default_rng(seed) if shuffle else None
        self.upload_kw = upload_kw or {}  # each chunk's storage (HeldArrays)
        self.order = None
        self.on_epoch_end()

    def __len__(self):
        return -(-self.n // self.bs)

    def __getitem__(self, i):
        lo, hi = i * self.bs, min(self.n, (i + 1) * self.bs)
        rows = slice(lo, hi) if self.order is None else self.order[lo:hi]
        b = (self.x[rows],) if self.y is None else (self.x[rows], self.y[rows])
        return b if self.sw is None else b + (self.sw[rows],)

    def on_epoch_end(self):
        if self._rng is not None:
            self.order = self._rng.permutation(self.n)


class _Chunker:
    """Batches into uploads: (dataset info, label layout, batch sizes)."""

    def __init__(self, cm, what, name, class_weight=None, need_y=True, same_size=True,
                 packed=False):
        self.cm, self.what, self.name = cm, what, name
        self.class_weight, self.need_y, self.same_size = class_weight, need_y, same_size
        self.packed = packed  # ArrayRows: x and y packed, weights final
        self.limit = chunk_bytes(cm)
        self.bs = None

    def _prep(self, b):
        cm = self.cm
        x, y, sw = split_batch(b, self.what)
        if self.need_y and y is None:
            raise ValueError("%s gave a batch without targets; fit and evaluate need "
                             "(x, y) batches" % self.what)
        if self.packed:
            cm._bind(x)
            from . import _features
            xs = _features(x, cm.input_shape, "%s x" % self.what)
            if y is None or not self.need_y:
                return xs, None, None, None
            ys, label = cm._labels(y, xs.shape[0], "%s y" % self.what)
            return xs, ys, sw, label
        x = cm._pack_x(x, "%s x" % self.what)
        cm._bind(x)
        from . import _features
        xs = _features(x, cm.input_shape, "%s x" % self.what)
        n = xs.shape[0]
        if y is None or not self.need_y:
            return xs, None, None, None
        yp = cm._pack_y(y, "%s y" % self.what)
        ys, label = cm._labels(yp, n, "%s y" % self.what)
        w = None
        if sw is not None or self.class_weight is not None:
            w = cm._sample_weights(y if getattr(cm, "_multi", None) is None else yp, n,
                                   sw, self.class_weight, "%s y" % self.what)
        return xs, ys, w, label

    def chunks(self, batches):
        """Yields (xs, ys, sw, label, sizes) groups of batches."""
        group, size, label = [], 0, None

        def flush():
            xs = _np.concatenate([g[0] for g in group]) if len(group) > 1 else group[0][0]
            ys = None
            if group[0][1] is not None:
                ys = _np.concatenate([g[1] for g in group]) if len(group) > 1 else group[0][1]
            sw = None
            if any(g[2] is not None for g in group):
                sw = _np.concatenate([g[2] if g[2] is not None else
                                      _np.ones(_rows(g[0]), _np.float32) for g in group])
            return xs, ys, sw, label, [_rows(g[0]) for g in group]

        for b in batches:
            xs, ys, w, lab = self._prep(b)
            nb = _rows(xs)
            if nb == 0:
                raise ValueError("%s gave an empty batch" % self.what)
            nbytes = xs.nbytes + (ys.nbytes if ys is not None else 0) + 4 * nb
            if group:
                if lab != label:
                    raise ValueError("%s: a batch has labels %s, the ones before %s"
                                     % (self.what, lab, label))
                last = _rows(group[-1][0])
                # one pass at the program's batch size: a smaller batch is
                # its last; a larger one needs another program
                cut = self.same_size and (last != self.bs or nb > self.bs)
                if cut or size + nbytes > self.limit:
                    yield flush()
                    group, size = [], 0
            if not group and self.same_size and (self.bs is None or nb > self.bs):
                self.bs = nb
            label = lab
            group.append((xs, ys, w))
            size += nbytes
        if group:
            yield flush()


def _packed(src):
    return bool(getattr(src.seq, "packed", False))


def _upload_kw(src):
    """The storage each chunk of src is uploaded with (ArrayRows')."""
    return getattr(src.seq, "upload_kw", None) or {}


def _merge(parts, keys):
    """Sample-weighted means of [(samples, {key: value})]."""
    tot = sum(s for s, _ in parts)
    out = {}
    for k in keys:
        if k == "rmse":
            v = sum(s * d[k] ** 2 for s, d in parts) / tot
            out[k] = float(_np.sqrt(v))
        else:
            out[k] = float(sum(s * d[k] for s, d in parts) / tot)
    return out


def check_metrics(cm):
    bad = [m for m in getattr(cm, "_values", [])
           if m in _UNMERGEABLE or m.endswith(tuple("_" + u for u in _UNMERGEABLE))]
    if bad:
        raise ValueError("metric %s is not computed when fit or evaluate takes a generator, "
                         "a Sequence, arrays larger than one upload or a learning rate "
                         "computed in Python (its pieces' values cannot be combined); upload "
                         "the data (Client.upload) or leave it out" % bad[0])


def _eval_keys(cm):
    return ["loss"] + ([cm._metric] if cm._metric else []) + list(getattr(cm, "_values", []))


def evaluate_dataset(cm, ds_id):
    loss, acc, samples, vals = cm._prog.evaluate(ds_id)
    d = {"loss": loss}
    if cm._metric:
        d[cm._metric] = acc
    d.update((k, vals[k]) for k in getattr(cm, "_values", []) if k in vals)
    return samples, d


def evaluate_source(cm, src, timings=None):
    """Loss and metrics over one pass of src (validation_steps or all of a
    Sequence; a generator until it ends or for src.steps batches)."""
    check_metrics(cm)
    parts = []
    ch = _Chunker(cm, src.what, "evaluate", same_size=False, packed=_packed(src))
    for xs, ys, sw, label, _ in ch.chunks(src.epoch()):
        ds = cm._client._upload(xs, ys, "validation", sw, **_upload_kw(src))
        if timings is not None:
            timings.append(cm._client.last_timings)
        if cm._key[2] != label:
            cm._ensure(None, None, label)
        parts.append(evaluate_dataset(cm, ds["id"]))
    if not parts:
        raise ValueError("%s gave no batches to evaluate (a generator that ended: give "
                         "validation_steps and a generator that loops)" % src.what)
    return _merge(parts, _eval_keys(cm))


def predict_source(cm, src):
    outs = []
    ch = _Chunker(cm, src.what, "predict", need_y=False, same_size=False,
                  packed=_packed(src))
    for xs, _, _, _, _ in ch.chunks(src.epoch()):
        outs.append(cm._predict_rows(xs))
    if not outs:
        raise ValueError("%s gave no batches to predict" % src.what)
    return cm._unpack(outs[0] if len(outs) == 1 else _np.concatenate(outs))


class Driven:
    """One fit run here piece by piece: each piece is a data set and the
    steps to run on it, split into runs of one learning rate each (a rate
    computed here, or the one a callback set)."""

    def __init__(self, cm, hist, cbl, verbose):
        self.cm, self.hist, self.cbl, self.verbose = cm, hist, cbl, verbose
        self.sched = cm.optimizer._python_rate() if cm.optimizer is not None else None
        self.step = None  # the program's step count, read at the first run
        self.one = bool(cbl.batch_hooks())
        self.sent_lr = None

    def run(self, ds_id, steps, parts, batch0):
        """steps on ds_id from its cursor; (samples, logs) of each run into
        parts. Returns True when they all ran, False when model.
        stop_training ended them (the epoch ends there, as Keras'), None
        when the call was cancelled."""
        cm = self.cm
        left, batch = steps, batch0
        while left > 0:
            if cm._stop:
                return False
            seg = left
            if self.sched is not None:
                if self.step is None:
                    self.step = int(cm.global_step)
                span = self.sched._span(self.step)
                seg = min(seg, span) if span else seg
                lr = float(self.sched(self.step))
            else:
                lr = cm._lr_arg()
                lr = lr if lr and lr != self.sent_lr else 0.0
            if self.one:
                seg = 1
            if lr:
                self.sent_lr = lr
            tmp, seen = {}, {}

            def on_event(kind, info):
                if kind == "epoch":
                    seen.update(info)
                return None
            r = cm._prog.fit(ds_id, None, 1, seg, seg, 0, tmp, self.hist.timings, cm._metric, 1,
                             on_event=on_event, learning_rate=lr, **cm._ckpt)
            if r != "done" or not seen:
                return None
            if self.step is not None:
                self.step = int(seen["step"])
            logs = {k: v[-1] for k, v in tmp.items()}
            parts.append((int(seen["samples"]), logs))
            left -= seg
            batch += seg
            if self.cbl.callbacks:
                cm._in_batch_cb = True  # no call runs: a stop is seen before the next
                try:
                    self.cbl.on_batch_end(batch - 1, _merge(parts, list(logs)))
                finally:
                    cm._in_batch_cb = False
        return True


def fit_driven(cm, train, val, epochs, initial_epoch, cbl, hist, due, verbose,
               class_weight=None):
    """The fit loop for a Source (train) or an uploaded data set (train =
    (dataset id, label, steps per epoch)) when pieces are run from here.
    val: None, a data set id, or a Source. Returns the History status."""
    check_metrics(cm)
    d = Driven(cm, hist, cbl, verbose)
    cbl.on_train_begin()
    status = "done"
    chunker = None
    if isinstance(train, Source):
        chunker = _Chunker(cm, train.what, "train", class_weight=class_weight,
                           packed=_packed(train))
    for ep in range(initial_epoch, epochs):
        if cm._stop:
            status = "stopped"
            break
        t0 = _time.perf_counter()
        cbl.on_epoch_begin(ep)
        parts, batch, ok = [], 0, True
        if chunker is None:
            ok = d.run(train[0], train[2], parts, 0)
        else:
            for xs, ys, sw, label, sizes in chunker.chunks(train.epoch()):
                ds = cm._client._upload(xs, ys, "train", sw, **_upload_kw(train))
                hist.timings.append(cm._client.last_timings)
                cm._ensure(chunker.bs, False, label)
                ok = d.run(ds["id"], len(sizes), parts, batch)
                batch += len(sizes)
                if not ok:
                    break
        if ok is None:  # cancelled (client.cancel, Ctrl-C): the epoch is lost
            status = "stopped" if cm._stop else "cancelled"
            break
        if not parts:  # stopped before a step, or no data left
            status = "stopped" if cm._stop or (chunker is not None and train.ran_out) \
                else "done"
            break
        # a stop ends the epoch after its step; it counts, as in Keras
        logs = _merge(parts, list(parts[0][1]))
        if val is not None and due(ep):
            if isinstance(val, Source):
                vl = evaluate_source(cm, val, hist.timings)
            else:
                vl = _merge([evaluate_dataset(cm, val)], _eval_keys(cm))
            logs.update(("val_" + k, v) for k, v in vl.items())
        for k, v in logs.items():
            hist.setdefault(k, []).append(v)
        if verbose:
            print("Epoch %d/%d - %.0fs - %s" % (
                ep + 1, epochs, _time.perf_counter() - t0,
                " - ".join("%s: %.4f" % kv for kv in logs.items())), flush=True)
        cm._in_batch_cb = True
        try:
            cbl.on_epoch_end(ep, logs)
        finally:
            cm._in_batch_cb = False
        if chunker is not None and train.ran_out:
            status = "stopped"
            break
    else:
        if cm._stop:
            status = "stopped"
    cbl.on_train_end()
    return status
