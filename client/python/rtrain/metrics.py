"""Keras' metric objects (keras.metrics.*) for compile(metrics=[...]): each
names a metric the daemon accumulates over the epoch as Keras' metric
objects do (docs/keras-import.md, Metrics). Settings other than Keras'
defaults (AUC's 200 thresholds, a 0.5 threshold, k=5) are refused."""

__all__ = ["Metric", "Accuracy", "BinaryAccuracy", "CategoricalAccuracy",
           "SparseCategoricalAccuracy", "TopKCategoricalAccuracy",
           "SparseTopKCategoricalAccuracy", "MeanAbsoluteError", "MeanSquaredError",
           "RootMeanSquaredError", "AUC", "Precision", "Recall"]


class Metric:
    fn = None

    def __init__(self, name=None, dtype=None):
        self.name = name or self.fn


class Accuracy(Metric):
    """Keras' "accuracy" string: the accuracy the loss and shapes imply."""
    fn = "accuracy"


class BinaryAccuracy(Metric):
    fn = "binary_accuracy"

    def __init__(self, name=None, dtype=None, threshold=0.5):
        if threshold != 0.5:
            raise ValueError("threshold: the daemon's binary accuracy uses 0.5")
        super().__init__(name, dtype)


class CategoricalAccuracy(Metric):
    fn = "categorical_accuracy"


class SparseCategoricalAccuracy(Metric):
    fn = "sparse_categorical_accuracy"


class _TopK(Metric):
    def __init__(self, k=5, name=None, dtype=None):
        if k != 5:
            raise ValueError("k: the daemon's top-k accuracy uses k=5")
        super().__init__(name, dtype)


class TopKCategoricalAccuracy(_TopK):
    fn = "top_k_categorical_accuracy"


class SparseTopKCategoricalAccuracy(_TopK):
    fn = "sparse_top_k_categorical_accuracy"


class MeanAbsoluteError(Metric):
    fn = "mae"


class MeanSquaredError(Metric):
    fn = "mse"


class RootMeanSquaredError(Metric):
    fn = "rmse"


class AUC(Metric):
    fn = "auc"

    def __init__(self, num_thresholds=200, curve="ROC", name=None, dtype=None, **kw):
        if num_thresholds != 200 or curve != "ROC" or kw.get("from_logits") or \
                kw.get("multi_label"):
            raise ValueError("AUC: the daemon's is Keras' default (200 thresholds, "
                             "ROC, probabilities, one label)")
        super().__init__(name, dtype)


class _Thresholded(Metric):
    def __init__(self, thresholds=None, top_k=None, class_id=None, name=None, dtype=None):
        if thresholds not in (None, 0.5) or top_k is not None or class_id is not None:
            raise ValueError("%s: the daemon's uses Keras' default threshold 0.5 "
                             "over every class" % type(self).__name__)
        super().__init__(name, dtype)


class Precision(_Thresholded):
    fn = "precision"


class Recall(_Thresholded):
    fn = "recall"
