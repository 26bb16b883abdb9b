/*
 * tfjs_predict.js - TensorFlow.js (@tensorflow/tfjs, its pure-JS CPU
 * backend) loads a TF.js layers folder and predicts: what a user of tfjs
 * does with a folder rtrain wrote (rtrain export --tfjs, fit --tfjs).
 *
 *   node tfjs_predict.js DIR ROWS.json     (run.sh --script tfjs_predict.js ...)
 *
 * ROWS.json: {"shape": [per-sample dims], "x": [flat float values]}. Prints
 * the predictions as a JSON array of the flat float32 values (several
 * outputs: each output's in turn). The folder is read as tfjs' http and
 * file loaders read one: model.json, then each group's shards concatenated
 * in the manifest's order (tf.io.fromMemory), and tf.loadLayersModel builds
 * the model and sets the weights by their names.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs');

async function main() {
  const [dir, rowsFile] = process.argv.slice(2);
  if (!dir || !rowsFile) {
    console.error('usage: tfjs_predict.js DIR ROWS.json');
    process.exit(2);
  }
  await tf.setBackend('cpu');
  const mj = JSON.parse(fs.readFileSync(path.join(dir, 'model.json'), 'utf8'));
  const data = Buffer.concat(mj.weightsManifest.flatMap(
      g => g.paths.map(p => fs.readFileSync(path.join(dir, p)))));
  const model = await tf.loadLayersModel(tf.io.fromMemory(
      mj.modelTopology, mj.weightsManifest.flatMap(g => g.weights),
      data.buffer.slice(data.byteOffset, data.byteOffset + data.length)));
  const rows = JSON.parse(fs.readFileSync(rowsFile, 'utf8'));
  const per = rows.shape.reduce((a, c) => a * c, 1), n = rows.x.length / per;
  const out = model.predict(tf.tensor(Float32Array.from(rows.x), [n, ...rows.shape]));
  const vals = (Array.isArray(out) ? out : [out]).flatMap(t => Array.from(t.dataSync()));
  console.log(JSON.stringify(vals));
}

main().catch(e => {
  console.error(e.stack || String(e));
  process.exit(1);
});
