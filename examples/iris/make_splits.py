#!/usr/bin/python3
"""Derive the iris CSV splits used by examples/iris and `rtrain bench story`.

Source: sklearn's copy of the iris data set
(/usr/lib/python3/dist-packages/sklearn/datasets/data/iris.csv; first line is
"150,4,setosa,versicolor,virginica", then 150 rows of 4 features + class).

Outputs (no header; columns sepal_length, sepal_width, petal_length,
petal_width, class 0..2; the label is the last column):
  train.csv / val.csv                    the story's split: the first 70% /
                                         last 30% without shuffling, so val
                                         holds only class 2 (val accuracy 0 by
                                         construction, as in the story)
  train_shuffled.csv / val_shuffled.csv  stratified shuffled 70/30 split
                                         (35 + 15 per class, seed 0)
Usage: /usr/bin/python3 examples/iris/make_splits.py [iris.csv]
"""
import csv
import os
import random
import sys

SRC = "/usr/lib/python3/dist-packages/sklearn/datasets/data/iris.csv"


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else SRC
    with open(src) as f:
        rows = list(csv.reader(f))
    n, nfeat = int(rows[0][0]), int(rows[0][1])
    data = [r for r in rows[1:] if r]
    assert len(data) == n and all(len(r) == nfeat + 1 for r in data), "unexpected iris.csv"
    out = os.path.dirname(os.path.abspath(__file__))

    def write(name, rs):
        with open(os.path.join(out, name), "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            for r in rs:
                w.writerow(r)

    cut = int(round(0.7 * n))  # 105
    write("train.csv", data[:cut])
    write("val.csv", data[cut:])

    rng = random.Random(0)
    train, val = [], []
    for cls in sorted({r[-1] for r in data}):
        members = [r for r in data if r[-1] == cls]
        rng.shuffle(members)
        k = int(round(0.7 * len(members)))
        train += members[:k]
        val += members[k:]
    rng.shuffle(train)
    rng.shuffle(val)
    write("train_shuffled.csv", train)
    write("val_shuffled.csv", val)
    print("train %d, val %d, train_shuffled %d, val_shuffled %d"
          % (cut, n - cut, len(train), len(val)))


if __name__ == "__main__":
    main()
