#!/bin/sh
# torchvision's resnet18 and mobilenet_v2 (python3-torchvision), exported by
# torch.onnx.export in training mode at 32x32, train in rtrain as in
# PyTorch's own loop: gen_onnx_fixtures.py builds them from their seeds and
# trains them (1 step of 8, SGD and Adam) into a scratch folder (their
# weights make ~45 MB, too much to commit), test_onnx_parity compares.
#     torchvision.sh <test_onnx_parity> <source dir>
set -u
parity=$1 src=$2
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
if ! /usr/bin/python3 "$src/tests/onnx/gen_onnx_fixtures.py" "$dir" r18 mv2 >"$dir/gen.out" 2>&1
then
  echo "FAIL gen_onnx_fixtures.py r18 mv2"; tail -20 "$dir/gen.out"; exit 1
fi
grep -v -i warn "$dir/gen.out" | grep "losses"
"$parity" "$dir" r18 mv2
