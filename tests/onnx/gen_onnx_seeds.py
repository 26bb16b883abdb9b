#!/usr/bin/python3
"""Writes the ONNX importer's bad- and odd-input cases: tests/fuzz/onnx/ok_*
and bad_* (also the seed corpus of tests/fuzz/fuzz_onnx.c, beside the
crash_* inputs the fuzzer found, kept as they are) and tests/onnx/cases.txt,
one line per file: "file<TAB>expected code<TAB>text the message must hold"
(RT_OK and an empty text for models that import). test_onnx_bad.c reads it.
Needs python3-onnx (not torch):

    /usr/bin/python3 tests/onnx/gen_onnx_seeds.py
"""
import os

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
from onnx import TensorProto as TP

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "tests", "fuzz", "onnx")
rng = np.random.RandomState(3)
cases = []


def vi(name, shape, t=TP.FLOAT):
    return oh.make_tensor_value_info(name, t, shape)


def f32(name, *shape):
    return onh.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name)


def i64(name, vals):
    return onh.from_array(np.array(vals, np.int64), name)


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = oh.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 7
    return m.SerializeToString()


def put(name, data, code="RT_OK", text=""):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    cases.append((name, code, text))


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):  # this script's files; crash_* reproducers stay
        if f.startswith(("ok_", "bad_")):
            os.remove(os.path.join(OUT, f))
    fix = os.path.join(HERE, "fixtures")
    for n in ("wa", "rb", "mx", "kx"):
        with open(os.path.join(fix, n + ".onnx"), "rb") as f:
            put("ok_%s.onnx" % n, f.read())
    with open(os.path.join(fix, "wa.onnx"), "rb") as f:
        wa = f.read()

    # x.view(x.size(0), -1) after a conv, and a MatMul reading it
    put("ok_shape_chain.onnx", model([
        oh.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        oh.make_node("Relu", ["c"], ["r"]),
        oh.make_node("Shape", ["r"], ["s"]),
        oh.make_node("Constant", [], ["zero"], value=oh.make_tensor("z", TP.INT64, [], [0])),
        oh.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        oh.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        oh.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
        oh.make_node("Reshape", ["r", "shape"], ["flat"]),
        oh.make_node("MatMul", ["flat", "w"], ["mm"]),
        oh.make_node("Add", ["mm", "bias"], ["y"]),
    ], [vi("x", ["N", 2, 3, 3])], [vi("y", ["N", 5])],
        [f32("cw", 4, 2, 3, 3), f32("cb", 4), i64("ax0", [0]), i64("minus1", [-1]),
         f32("w", 36, 5), f32("bias", 5)]))

    # elementwise ops, constants, Dropout, Squeeze/Unsqueeze, LogSoftmax
    put("ok_ops.onnx", model([
        oh.make_node("Gemm", ["x", "w", "b"], ["g"]),
        oh.make_node("Constant", [], ["k"], value_floats=[0.5, -0.5, 1.0]),
        oh.make_node("Sub", ["g", "k"], ["s"]),
        oh.make_node("Mul", ["s", "two"], ["m"]),
        oh.make_node("Tanh", ["m"], ["t"]),
        oh.make_node("Sigmoid", ["t"], ["sg"]),
        oh.make_node("Dropout", ["sg", "ratio"], ["d"]),
        oh.make_node("Identity", ["d"], ["i"]),
        oh.make_node("Unsqueeze", ["i", "ax2"], ["u"]),
        oh.make_node("Squeeze", ["u", "ax2"], ["q"]),
        oh.make_node("LogSoftmax", ["q"], ["y"], axis=-1),
    ], [vi("x", ["N", 4])], [vi("y", ["N", 3])],
        [f32("w", 4, 3), f32("b", 3), onh.from_array(np.array(2.0, np.float32), "two"),
         onh.from_array(np.array(0.25, np.float32), "ratio"), i64("ax2", [2])]))

    # strided padded conv, pools with padding, a channel Concat, a (C,1,1)
    # constant broadcast against NCHW, GlobalAveragePool, Flatten, Softmax
    put("ok_pool.onnx", model([
        oh.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        oh.make_node("Conv", ["x", "w2", "b2"], ["c2"], auto_pad="SAME_UPPER", strides=[2, 2]),
        oh.make_node("Concat", ["c1", "c2"], ["cat"], axis=1),
        oh.make_node("Add", ["cat", "chan"], ["a"]),
        oh.make_node("AveragePool", ["a"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        oh.make_node("MaxPool", ["ap"], ["mp"], kernel_shape=[2, 2], strides=[1, 1]),
        oh.make_node("BatchNormalization", ["mp", "g", "bb", "mu", "var"], ["bn"]),
        oh.make_node("GlobalAveragePool", ["bn"], ["gap"]),
        oh.make_node("Flatten", ["gap"], ["f"]),
        oh.make_node("Gemm", ["f", "fw"], ["l"], transB=1),
        oh.make_node("Softmax", ["l"], ["y"]),
    ], [vi("x", ["N", 3, 6, 6])], [vi("y", ["N", 4])],
        [f32("w1", 4, 3, 3, 3), f32("w2", 2, 3, 3, 3), f32("b2", 2), f32("chan", 6, 1, 1),
         f32("g", 6), f32("bb", 6), f32("mu", 6),
         onh.from_array(np.ones(6, np.float32), "var"), f32("fw", 4, 6)]))

    # a weight used twice through Identity (as PyTorch writes shared
    # weights): one trainable parameter "w" (test_onnx_bad checks)
    put("ok_identity_shared.onnx", model([
        oh.make_node("Identity", ["w"], ["w2"]),
        oh.make_node("MatMul", ["x", "w"], ["h"]),
        oh.make_node("Relu", ["h"], ["r"]),
        oh.make_node("MatMul", ["r", "w2"], ["y"]),
    ], [vi("x", ["N", 4])], [vi("y", ["N", 4])], [f32("w", 4, 4)]))

    # ----------------------------------------------------------- bad input
    put("bad_garbage.onnx", b"\x0a\xff\xff\xff\xff\x0f not protobuf", "RT_EPROTO",
        "not a serialized ONNX ModelProto")
    put("bad_truncated.onnx", wa[:len(wa) // 2], "RT_EPROTO", "not a serialized ONNX")
    put("bad_empty.onnx", b"", "RT_EINVAL", "imports no opset of the default")
    w = f32("w", 4, 3)
    mm = oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    put("bad_unsupported.onnx", model([
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        oh.make_node("Celu", ["h"], ["a"], name="act1"),
        oh.make_node("Hardmax", ["a"], ["y"], name="hm"),
    ], [vi("x", ["N", 4])], [vi("y", ["N", 3])], [w]), "RT_EUNKNOWN_OP",
        "2 unsupported operators at opset 13: Celu (node 'act1'), Hardmax (node 'hm')")
    put("bad_opset9.onnx", model([mm], [vi("x", ["N", 4])], [vi("y", ["N", 3])], [w], opset=9),
        "RT_EINVAL", "opset 9 is outside the supported 11..18")
    put("bad_opset19.onnx", model([mm], [vi("x", ["N", 4])], [vi("y", ["N", 3])], [w],
                                  opset=19), "RT_EINVAL", "opset 19 is outside")
    ext = onh.from_array(np.ones((4, 3), np.float32), "w")
    ext.ClearField("raw_data")
    ext.data_location = TP.EXTERNAL
    e = ext.external_data.add()
    e.key, e.value = "location", "w.bin"
    put("bad_external.onnx", model([mm], [vi("x", ["N", 4])], [vi("y", ["N", 3])], [ext]),
        "RT_EINVAL", "tensor 'w' uses external data")
    put("bad_dynamic.onnx", model([mm], [vi("x", ["N", "F"])], [vi("y", ["N", 3])], [w]),
        "RT_EINVAL", "input 'x' dimension 1 is dynamic ('F')")
    # several inputs are taken packed (one graph input), as Keras'
    put("ok_two_inputs.onnx", model([oh.make_node("Add", ["x", "z"], ["y"])],
                                    [vi("x", ["N", 3]), vi("z", ["N", 3])],
                                    [vi("y", ["N", 3])]))
    put("bad_int_input.onnx", model([mm], [vi("x", ["N", 4], TP.INT64)], [vi("y", ["N", 3])],
                                    [w]), "RT_EDTYPE", "input 'x' holds integers; they are only supported as the indices")
    put("bad_reshape_batch.onnx", model([
        oh.make_node("Reshape", ["x", "shp"], ["y"], name="rs"),
    ], [vi("x", ["N", 4])], [vi("y", [2, 2])], [i64("shp", [2, 2])]), "RT_EINVAL",
        "ONNX node 'rs' (Reshape): Reshape must keep the batch dimension first")
    put("bad_ceil.onnx", model([
        oh.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                     name="mp"),
        oh.make_node("Flatten", ["p"], ["y"]),
    ], [vi("x", ["N", 1, 5, 5])], [vi("y", ["N", 4])]), "RT_EINVAL",
        "ceil_mode=1 with a partial last window")
    put("bad_undefined.onnx", model([oh.make_node("Relu", ["nope"], ["y"], name="r")],
                                    [vi("x", ["N", 4])], [vi("y", ["N", 4])]),
        "RT_EGRAPH", "input 'nope' is not defined before this node")
    short = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=[4, 3], raw_data=b"\0" * 20)
    put("bad_raw_len.onnx", model([mm], [vi("x", ["N", 4])], [vi("y", ["N", 3])], [short]),
        "RT_EINVAL", "tensor 'w' has 20 bytes for 12 values")
    nan = onh.from_array(np.full((4, 3), np.nan, np.float32), "w")
    put("bad_nan.onnx", model([mm], [vi("x", ["N", 4])], [vi("y", ["N", 3])], [nan]),
        "RT_ENAN", "non-finite")
    # several outputs train together, each a head
    put("ok_two_outputs.onnx", model([
        oh.make_node("Relu", ["x"], ["a"]), oh.make_node("Sigmoid", ["x"], ["b"]),
    ], [vi("x", ["N", 4])], [vi("a", ["N", 4]), vi("b", ["N", 4])]))
    put("bad_shape.onnx", model([mm], [vi("x", ["N", 5])], [vi("y", ["N", 3])], [w]),
        "RT_ESHAPE", "weight 'w' expects 4 inputs, 'x' has 5")
    put("bad_convt_output_shape.onnx", model([
        oh.make_node("ConvTranspose", ["x", "w"], ["c"], output_shape=[8, 8], name="ct"),
        oh.make_node("Flatten", ["c"], ["y"]),
    ], [vi("x", ["N", 2, 4, 4])], [vi("y", ["N", 128])], [f32("w", 2, 2, 2, 2)]),
        "RT_EINVAL", "ONNX node 'ct' (ConvTranspose): output_padding 3 (as output_shape asks)")
    put("bad_resize_align_corners.onnx", model([
        oh.make_node("Resize", ["x", "", "sc"], ["r"], mode="linear",
                     coordinate_transformation_mode="align_corners", name="up"),
        oh.make_node("Flatten", ["r"], ["y"]),
    ], [vi("x", ["N", 2, 4, 4])], [vi("y", ["N", 128])],
        [onh.from_array(np.array([1, 1, 2, 2], np.float32), "sc")]),
        "RT_EINVAL", "ONNX node 'up' (Resize): linear with coordinate_transformation_mode "
        "'align_corners'")
    put("bad_resize_fraction.onnx", model([
        oh.make_node("Resize", ["x", "", "sc"], ["r"], mode="nearest", name="up"),
        oh.make_node("Flatten", ["r"], ["y"]),
    ], [vi("x", ["N", 2, 4, 4])], [vi("y", ["N", 48])],
        [onh.from_array(np.array([1, 1, 1.5, 1.5], np.float32), "sc")]),
        "RT_EINVAL", "ONNX node 'up' (Resize): scale 1.5 on axis 2: only integer factors")
    put("bad_gather_axis.onnx", model([
        oh.make_node("Gather", ["w", "x"], ["y"], axis=1, name="emb"),
    ], [vi("x", ["N", 3], TP.INT64)], [vi("y", ["N", 4, 3])], [f32("w", 4, 5)]),
        "RT_EINVAL", "ONNX node 'emb' (Gather): only a gather of rows (axis 0)")
    # a weight transposed (or sliced, concatenated) at import stays the
    # initializer's: trained and exported back through the fold
    put("ok_transposed_init.onnx", model([
        oh.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        oh.make_node("MatMul", ["x", "wt"], ["y"], name="mm"),
    ], [vi("x", ["N", 4])], [vi("y", ["N", 3])], [f32("w", 3, 4)]))
    # ... but not read whole by one node and sliced for another: two
    # parameters would train apart
    put("bad_init_whole_and_sliced.onnx", model([
        oh.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
        oh.make_node("Slice", ["w", "s0", "s1", "s2"], ["ws"], name="sl"),
        oh.make_node("MatMul", ["a", "ws"], ["y"], name="mm2"),
    ], [vi("x", ["N", 4])], [vi("y", ["N", 2])],
        [f32("w", 4, 4), i64("s0", [0]), i64("s1", [2]), i64("s2", [1])]), "RT_EINVAL",
        "ONNX node 'mm2' (MatMul): initializer 'w' is read whole and sliced")
    # F.interpolate(size=...): sizes computed from Shape(x), the batch kept
    put("ok_resize_sizes.onnx", model([
        oh.make_node("Shape", ["x"], ["s"]),
        oh.make_node("Slice", ["s", "z", "two"], ["nc"]),
        oh.make_node("Concat", ["nc", "hw"], ["sz"], axis=0),
        oh.make_node("Resize", ["x", "", "", "sz"], ["r"], mode="nearest",
                     coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        oh.make_node("Flatten", ["r"], ["y"]),
    ], [vi("x", ["N", 2, 4, 4])], [vi("y", ["N", 128])],
        [i64("z", [0]), i64("two", [2]), i64("hw", [8, 8])]))
    # LSTM: what the engine's RNNs cannot express is refused by name
    def lstm(extra_in, outs, y_out, **kw):
        nodes = [oh.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
                 oh.make_node("LSTM", ["xt", "W", "R", "B"] + extra_in, outs, hidden_size=2,
                              name="rnn", **kw),
                 oh.make_node("Squeeze", [y_out, "ax1"], ["ys"]),
                 oh.make_node("Transpose", ["ys"], ["yt"], perm=[1, 0, 2]),
                 oh.make_node("Flatten", ["yt"], ["y"])]
        inits = [f32("W", 1, 8, 3), f32("R", 1, 8, 2), f32("B", 1, 16), i64("ax1", [1]),
                 f32("P", 1, 6), onh.from_array(np.ones((1, 1, 2), np.float32), "h0")]
        return model(nodes, [vi("x", ["N", 4, 3])], [vi("y", ["N", 8])], inits)
    put("ok_lstm.onnx", lstm([], ["yy"], "yy"))
    put("bad_lstm_peephole.onnx", lstm(["", "", "", "P"], ["yy"], "yy"), "RT_EINVAL",
        "ONNX node 'rnn' (LSTM): input P (peepholes) is not supported")
    put("bad_lstm_initial_h.onnx", lstm(["", "h0"], ["yy"], "yy"), "RT_EINVAL",
        "ONNX node 'rnn' (LSTM): initial_h must be zeros")
    put("bad_lstm_y_h.onnx", lstm([], ["yy", "yh"], "yh"), "RT_EINVAL",
        "ONNX node 'rnn' (LSTM): output Y_h (the last state) is not supported")
    put("bad_lstm_clip.onnx", lstm([], ["yy"], "yy", clip=1.0), "RT_EINVAL",
        "ONNX node 'rnn' (LSTM): attribute clip is not supported")
    # several inputs and outputs: what does not fit the packed input, and
    # more heads than train together (no random draws: the cases above keep
    # their weights)
    put("bad_two_inputs_dynamic.onnx", model([oh.make_node("Add", ["x", "z"], ["y"])],
                                             [vi("x", ["N", 3]), vi("z", ["N", "F"])],
                                             [vi("y", ["N", 3])]),
        "RT_EINVAL", "input 'z' dimension 1 is dynamic ('F')")
    put("bad_two_inputs_int.onnx", model([oh.make_node("Add", ["x", "z"], ["y"])],
                                         [vi("x", ["N", 3]), vi("z", ["N", 3], TP.INT64)],
                                         [vi("y", ["N", 3])]),
        "RT_EDTYPE", "input 'z' holds integer indices; a model with several inputs takes "
        "float inputs only")
    put("bad_nine_outputs.onnx", model(
        [oh.make_node("Relu", ["x"], ["o%d" % k]) for k in range(9)],
        [vi("x", ["N", 4])], [vi("o%d" % k, ["N", 4]) for k in range(9)]), "RT_EINVAL",
        "the graph has 9 outputs; at most 8 train together (name the one to train)")
    # Abs, Log and the Max/Min/Prod reductions (axes an attribute below
    # opset 18, an input from 18), and a reduction over the batch
    def reductions(opset):
        def red(op, src, dst, axes):
            if opset >= 18:
                return oh.make_node(op, [src, "ax_" + dst], [dst], keepdims=0)
            return oh.make_node(op, [src], [dst], axes=axes, keepdims=0)
        nodes = [oh.make_node("Gemm", ["x", "w", "b"], ["g"]),
                 oh.make_node("Reshape", ["g", "shape"], ["r"]),
                 oh.make_node("Abs", ["r"], ["a"]),
                 oh.make_node("Add", ["a", "half"], ["ah"]),
                 oh.make_node("Log", ["ah"], ["l"]),
                 red("ReduceMax", "r", "mx", [1]), red("ReduceMin", "r", "mn", [1]),
                 red("ReduceProd", "l", "pr", [-1]),
                 oh.make_node("Concat", ["mx", "mn", "pr"], ["c"], axis=1),
                 oh.make_node("LogSoftmax", ["c"], ["y"], axis=-1)]
        inits = [onh.from_array(np.ones((4, 6), np.float32) * 0.25, "w"),
                 onh.from_array(np.linspace(-1, 1, 6).astype(np.float32), "b"),
                 i64("shape", [-1, 2, 3]), onh.from_array(np.array(0.5, np.float32), "half")]
        if opset >= 18:
            inits += [i64("ax_mx", [1]), i64("ax_mn", [1]), i64("ax_pr", [-1])]
        return model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 8])], inits, opset=opset)
    put("ok_reduce_abs_log.onnx", reductions(13))
    put("ok_reduce_abs_log_18.onnx", reductions(18))
    put("bad_reduce_max_batch.onnx", model(
        [oh.make_node("ReduceMax", ["x"], ["y"], axes=[0, 1], keepdims=0, name="rm")],
        [vi("x", ["N", 4])], [vi("y", [])]), "RT_EINVAL",
        "ONNX node 'rm' (ReduceMax): the batch dimension cannot be reduced")
    with open(os.path.join(HERE, "cases.txt"), "w") as f:
        f.write("# made by gen_onnx_seeds.py: file, expected code, text in the message\n")
        for c in cases:
            f.write("\t".join(c) + "\n")
    print("%d cases" % len(cases))


if __name__ == "__main__":
    main()
