"""keras.utils pieces that need no daemon."""
import numpy as _np

__all__ = ["to_categorical", "PyDataset", "Sequence"]


def to_categorical(x, num_classes=None):
    """Class indices as one-hot rows, as keras.utils.to_categorical
    (keras/src/utils/numerical_utils.py): a trailing axis of 1 is dropped
    first, num_classes defaults to max + 1, float32."""
    x = _np.asarray(x)
    if x.dtype.kind == "f" and not _np.all(_np.floor(x) == x):
        raise ValueError("to_categorical takes whole class indices")
    x = x.astype(_np.int64)
    shape = x.shape
    if len(shape) > 1 and shape[-1] == 1:
        shape = shape[:-1]
    x = x.reshape(-1)
    if num_classes is None:
        num_classes = int(x.max()) + 1 if x.size else 0
    if x.size and (x.min() < 0 or x.max() >= num_classes):
        raise ValueError("class indices must be in [0, %d), got %d..%d"
                         % (num_classes, x.min(), x.max()))
    out = _np.zeros((x.size, num_classes), dtype=_np.float32)
    out[_np.arange(x.size), x] = 1
    return out.reshape(shape + (num_classes,))


class PyDataset:
    """keras.utils.PyDataset (keras.utils.Sequence): __len__ batches, each
    from __getitem__(i) as (x, y) or (x, y, sample_weight); on_epoch_begin
    and on_epoch_end are called around every epoch of a fit. fit(shuffle=
    True) shuffles the order of the batches each epoch, as Keras. workers,
    use_multiprocessing and max_queue_size are taken and not used: batches
    are made in order in this process."""

    def __init__(self, workers=1, use_multiprocessing=False, max_queue_size=10):
        self.workers = workers
        self.use_multiprocessing = use_multiprocessing
        self.max_queue_size = max_queue_size

    def __getitem__(self, index):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError

    @property
    def num_batches(self):
        return len(self)

    def on_epoch_begin(self):
        pass

    def on_epoch_end(self):
        pass


Sequence = PyDataset
