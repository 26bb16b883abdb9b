#!/usr/bin/python3
"""Export torchvision's inception_v3(aux_logits=False, init_weights=True)
to ONNX in training mode (BatchNormalization kept, not folded into the
convolutions), for rtrain to import and train.

Usage: export_torch_inception_v3.py OUT.onnx [SIZE] [CLASSES] [SEED]
    SIZE: the square input (default 75, torchvision's smallest), CLASSES:
    the logits (default 10), SEED: torch.manual_seed for the initial weights
    (default 1). The model outputs logits and takes NCHW: train it with
    `--loss cross_entropy` and, from decoded JPEGs, `--data-layout NHWC`.
"""
import sys

import torch
import torchvision


def model(classes, seed):
    torch.manual_seed(seed)
    # transform_input=False: the ImageNet re-normalisation belongs to the
    # pretrained weights only
    return torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=True,
                                           num_classes=classes, transform_input=False)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 75
    classes = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    m = model(classes, seed)
    m.train()
    x0 = torch.zeros(2, 3, size, size)
    torch.onnx.export(m, x0, sys.argv[1], opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


if __name__ == "__main__":
    main()
