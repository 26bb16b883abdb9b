#!/usr/bin/python3
"""Write Keras' InceptionV3 (keras.applications.inception_v3, weights=None,
include_top=True) as the JSON `model.to_json()` gives under Keras 2 (TF 2.x):
the published architecture (Szegedy et al. 2015, "Rethinking the Inception
Architecture"), laid out layer by layer as Keras' own builder does, with the
layer names Keras gives an unnamed layer (conv2d, conv2d_1, ...), so no
TensorFlow is needed to make it.

Usage: gen_keras_inception_v3.py OUT.json [SIZE] [CLASSES]
    SIZE: the square input (default 75, Keras' smallest for InceptionV3;
    the paper's 299), CLASSES: the softmax width (default 10).
"""
import json
import sys


class Builder:
    def __init__(self):
        self.layers = []
        self.counts = {}

    def name(self, base):
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return base if n == 0 else "%s_%d" % (base, n)

    def add(self, cls, base, config, inputs, name=None):
        name = name or self.name(base)
        cfg = {"name": name, "trainable": True, "dtype": "float32"}
        cfg.update(config)
        self.layers.append({"class_name": cls, "config": cfg, "name": name,
                            "inbound_nodes": [[[i, 0, 0, {}] for i in inputs]] if inputs else []})
        return name

    def conv2d_bn(self, x, filters, rows, cols, padding="same", strides=(1, 1), name=None):
        # keras.applications.inception_v3.conv2d_bn: Conv2D without bias,
        # BatchNormalization(scale=False), ReLU
        x = self.add("Conv2D", "conv2d", {
            "filters": filters, "kernel_size": [rows, cols], "strides": list(strides),
            "padding": padding, "data_format": "channels_last", "dilation_rate": [1, 1],
            "groups": 1, "activation": "linear", "use_bias": False,
            "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": None}},
            "bias_initializer": {"class_name": "Zeros", "config": {}},
            "kernel_regularizer": None, "bias_regularizer": None,
            "activity_regularizer": None, "kernel_constraint": None, "bias_constraint": None},
            [x], None if name is None else name + "_conv")
        x = self.add("BatchNormalization", "batch_normalization", {
            "axis": 3, "momentum": 0.99, "epsilon": 0.001, "center": True, "scale": False,
            "beta_initializer": {"class_name": "Zeros", "config": {}},
            "gamma_initializer": {"class_name": "Ones", "config": {}},
            "moving_mean_initializer": {"class_name": "Zeros", "config": {}},
            "moving_variance_initializer": {"class_name": "Ones", "config": {}},
            "beta_regularizer": None, "gamma_regularizer": None,
            "beta_constraint": None, "gamma_constraint": None},
            [x], None if name is None else name + "_bn")
        return self.add("Activation", "activation", {"activation": "relu"}, [x], name)

    def pool(self, cls, base, x, size, strides, padding):
        return self.add(cls, base, {"pool_size": [size, size], "padding": padding,
                                    "strides": [strides, strides],
                                    "data_format": "channels_last"}, [x])

    def maxpool(self, x):
        return self.pool("MaxPooling2D", "max_pooling2d", x, 3, 2, "valid")

    def avgpool(self, x):
        return self.pool("AveragePooling2D", "average_pooling2d", x, 3, 1, "same")

    def concat(self, xs, name=None):
        return self.add("Concatenate", "concatenate", {"axis": 3}, xs, name)


def inception_v3(size, classes):
    b = Builder()
    c = b.conv2d_bn
    inp = b.add("InputLayer", "input", {"batch_input_shape": [None, size, size, 3],
                                        "sparse": False, "ragged": False}, [], "input_1")
    x = c(inp, 32, 3, 3, strides=(2, 2), padding="valid")
    x = c(x, 32, 3, 3, padding="valid")
    x = c(x, 64, 3, 3)
    x = b.maxpool(x)
    x = c(x, 80, 1, 1, padding="valid")
    x = c(x, 192, 3, 3, padding="valid")
    x = b.maxpool(x)
    # mixed 0, 1, 2: 35 x 35 x 256/288/288 (at 299)
    for i, pool_f in enumerate((32, 64, 64)):
        b1 = c(x, 64, 1, 1)
        b5 = c(x, 48, 1, 1)
        b5 = c(b5, 64, 5, 5)
        b3 = c(x, 64, 1, 1)
        b3 = c(b3, 96, 3, 3)
        b3 = c(b3, 96, 3, 3)
        bp = b.avgpool(x)
        bp = c(bp, pool_f, 1, 1)
        x = b.concat([b1, b5, b3, bp], "mixed%d" % i)
    # mixed 3: 17 x 17 x 768
    b3 = c(x, 384, 3, 3, strides=(2, 2), padding="valid")
    bd = c(x, 64, 1, 1)
    bd = c(bd, 96, 3, 3)
    bd = c(bd, 96, 3, 3, strides=(2, 2), padding="valid")
    bp = b.maxpool(x)
    x = b.concat([b3, bd, bp], "mixed3")
    # mixed 4, 5, 6, 7: 17 x 17 x 768
    for i, f in ((4, 128), (5, 160), (6, 160), (7, 192)):
        b1 = c(x, 192, 1, 1)
        b7 = c(x, f, 1, 1)
        b7 = c(b7, f, 1, 7)
        b7 = c(b7, 192, 7, 1)
        bd = c(x, f, 1, 1)
        bd = c(bd, f, 7, 1)
        bd = c(bd, f, 1, 7)
        bd = c(bd, f, 7, 1)
        bd = c(bd, 192, 1, 7)
        bp = b.avgpool(x)
        bp = c(bp, 192, 1, 1)
        x = b.concat([b1, b7, bd, bp], "mixed%d" % i)
    # mixed 8: 8 x 8 x 1280
    b3 = c(x, 192, 1, 1)
    b3 = c(b3, 320, 3, 3, strides=(2, 2), padding="valid")
    b7 = c(x, 192, 1, 1)
    b7 = c(b7, 192, 1, 7)
    b7 = c(b7, 192, 7, 1)
    b7 = c(b7, 192, 3, 3, strides=(2, 2), padding="valid")
    bp = b.maxpool(x)
    x = b.concat([b3, b7, bp], "mixed8")
    # mixed 9, 10: 8 x 8 x 2048
    for i in range(2):
        b1 = c(x, 320, 1, 1)
        b3 = c(x, 384, 1, 1)
        b31 = c(b3, 384, 1, 3)
        b32 = c(b3, 384, 3, 1)
        b3 = b.concat([b31, b32], "mixed9_%d" % i)
        bd = c(x, 448, 1, 1)
        bd = c(bd, 384, 3, 3)
        bd1 = c(bd, 384, 1, 3)
        bd2 = c(bd, 384, 3, 1)
        bd = b.concat([bd1, bd2])
        bp = b.avgpool(x)
        bp = c(bp, 192, 1, 1)
        x = b.concat([b1, b3, bd, bp], "mixed%d" % (9 + i))
    x = b.add("GlobalAveragePooling2D", "global_average_pooling2d",
              {"data_format": "channels_last", "keepdims": False}, [x], "avg_pool")
    out = b.add("Dense", "dense", {
        "units": classes, "activation": "softmax", "use_bias": True,
        "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": None}},
        "bias_initializer": {"class_name": "Zeros", "config": {}},
        "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
        "kernel_constraint": None, "bias_constraint": None}, [x], "predictions")
    return {"class_name": "Functional",
            "config": {"name": "inception_v3", "layers": b.layers,
                       "input_layers": [[inp, 0, 0]], "output_layers": [[out, 0, 0]]},
            "keras_version": "2.11.0", "backend": "tensorflow"}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 75
    classes = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    if size < 75:
        sys.exit("InceptionV3 needs an input of at least 75x75 (Keras refuses smaller)")
    with open(sys.argv[1], "w") as f:
        json.dump(inception_v3(size, classes), f)
        f.write("\n")


if __name__ == "__main__":
    main()
