#!/usr/bin/env node
/*
 * gen_crop_fixture.js - the reference for RandomCrop outside training
 * (tests/layers/test_layers_image.c reads what this writes; ctest does not
 * need node).
 *
 * Keras 2.6+'s RandomCrop (keras/layers/preprocessing/
 * image_preprocessing.py, RandomCrop.call; tf_keras in Keras 2.15) returns
 * image_utils.smart_resize(inputs, [height, width]) at inference and in
 * training when the input is smaller than (height, width). smart_resize
 * (keras/utils/image_utils.py) is transcribed in smartResize below: the
 * box of the target's aspect ratio, centred, in float32 arithmetic
 * truncated to int32, then tf.image.resize(method="bilinear"), which is
 * ResizeBilinear with half_pixel_centers (no antialias). The resize is
 * TensorFlow.js' own: tf.image.resizeBilinear(img, size, alignCorners
 * false, halfPixelCenters true), pure-JS CPU backend.
 *
 * Input: sample s, pixel (i, j), channel c of an (N, H, W, C) batch is
 * ((k * 37) % 101) / 10 - 5, k its flat index (the test makes the same).
 *
 * Run:
 *   npm install --prefix build/tfjs @tensorflow/tfjs@4
 *   NODE_PATH=build/tfjs/node_modules node tests/layers/tfjs/gen_crop_fixture.js \
 *       > tests/layers/data/random_crop_tfjs.json
 */
'use strict';
const tf = require('@tensorflow/tfjs');

const f32 = Math.fround;

function smartResize(img, H, W, oH, oW) {
    // crop_height = int32(float32(width * target_height) / target_width)
    let ch = Math.trunc(f32(f32(W * oH) / oW));
    let cw = Math.trunc(f32(f32(H * oW) / oH));
    ch = Math.min(H, ch);
    cw = Math.min(W, cw);
    const h0 = Math.trunc(f32(H - ch) / 2);
    const w0 = Math.trunc(f32(W - cw) / 2);
    const box = tf.slice(img, [0, h0, w0, 0], [-1, ch, cw, -1]);
    return {box: [h0, w0, ch, cw], y: tf.image.resizeBilinear(box, [oH, oW], false, true)};
}

// [N, H, W, C, height, width]: down, up, the same size, and boxes of
// another aspect ratio both ways
const cases = [
    [2, 7, 9, 2, 4, 4],
    [2, 5, 6, 2, 8, 7],
    [2, 6, 6, 2, 6, 6],
    [2, 10, 4, 2, 3, 5],
    [2, 3, 8, 2, 6, 2],
    [2, 9, 7, 1, 5, 3],
];

tf.setBackend('cpu').then(() => {
    const out = {tfjs: tf.version.tfjs, cases: []};
    for (const [N, H, W, C, oH, oW] of cases) {
        const x = new Float32Array(N * H * W * C);
        for (let k = 0; k < x.length; k++)
            x[k] = ((k * 37) % 101) / 10 - 5;
        const r = smartResize(tf.tensor4d(x, [N, H, W, C]), H, W, oH, oW);
        out.cases.push({N, H, W, C, height: oH, width: oW, box: r.box,
                        y: Array.from(r.y.dataSync())});
    }
    process.stdout.write(JSON.stringify(out) + '\n');
});
