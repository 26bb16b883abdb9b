#!/usr/bin/python3
"""Write a small image-folder dataset in the Keras image_dataset_from_directory
layout: OUT/{train,val}/{h_bar,square,v_bar}/NNNN.{jpg,png}, 16x16 RGB, the
shapes of gen_tfrecord.shape_image (position and colour jittered). Every
third file is a PNG, the rest JPEG (quality 90). With SIZE the images are
scaled up (bilinear) to SIZE x SIZE, all JPEG: a dataset whose decoded size
is large while its files stay small (the streaming test).

Usage: gen_images.py OUT [TRAIN_PER_CLASS] [VAL_PER_CLASS] [SIZE]
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_tfrecord import shape_image  # noqa: E402

CLASSES = ["h_bar", "v_bar", "square"]  # labels follow sorted names


def main():
    out = sys.argv[1]
    n_train = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    n_val = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    rng = random.Random(99)
    for split, n in (("train", n_train), ("val", n_val)):
        for cls, name in enumerate(CLASSES):
            d = os.path.join(out, split, name)
            os.makedirs(d, exist_ok=True)
            for i in range(n):
                im = shape_image(cls, rng)
                if size:
                    im.resize((size, size)).save(os.path.join(d, "%04d.jpg" % i), "JPEG",
                                                 quality=90)
                elif i % 3 == 2:
                    im.save(os.path.join(d, "%04d.png" % i), "PNG")
                else:
                    im.save(os.path.join(d, "%04d.jpg" % i), "JPEG", quality=90)


if __name__ == "__main__":
    main()
