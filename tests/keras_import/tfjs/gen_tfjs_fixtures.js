#!/usr/bin/env node
/*
 * gen_tfjs_fixtures.js - TensorFlow.js as the reference for rtrain's Keras
 * importer and engine (tests/keras_import/test_keras_tfjs.c holds rtrain to
 * the fixtures this writes; ctest does not need node).
 *
 * For every model of the corpora (tests/fixtures/keras-corpus and
 * keras-corpus-2, listed in their SOURCES) that tfjs' modelFromJSON
 * accepts, with at most MAX_PARAMS parameters:
 *   - rtrain draws the initial weights (test_keras_tfjs dump) and they are
 *     set in tfjs;
 *   - tfjs' predictions on a fixed batch, its evaluate loss, the metrics
 *     (Keras' definitions, computed with tfjs' ops from its predictions),
 *     and the losses and weights of 3 SGD steps and 3 Adam steps on fixed
 *     batches are written to <model>.json beside this script.
 * callbacks.json: EarlyStopping and ReduceLROnPlateau decisions on fixed
 * monitor sequences (see callbackCases).
 *
 * Setup and run (the pure-JS CPU backend; tfjs-node is not used):
 *   npm install --prefix build/tfjs @tensorflow/tfjs@4
 *   NODE_PATH=build/tfjs/node_modules node tests/keras_import/tfjs/gen_tfjs_fixtures.js \
 *       . build/tests/keras_import/test_keras_tfjs [model.json ... | --callbacks | --attn |
 *       --multi [model.json ...]]
 *
 * The data (inputs, labels) and the sampled weight positions follow the
 * rules in test_keras_tfjs.c's header comment.
 *
 * Where tfjs differs from Keras (keras-team/keras, keras/src/...), the
 * generator makes tfjs compute Keras' definition and says so here:
 *   - Adam: Keras adds epsilon to sqrt(v) (optimizers/adam.py: m * alpha /
 *     (sqrt(v) + eps), alpha = lr sqrt(1 - b2^t) / (1 - b1^t)); tfjs-core's
 *     adam_optimizer adds it to sqrt(v / (1 - b2^t)). Step t runs with tfjs'
 *     epsilon set to eps / sqrt(1 - b2^t), which is Keras' update.
 *   - precision, recall: tfjs-layers counts y_pred == 1 as positive; Keras
 *     thresholds y_pred > 0.5 (metrics/confusion_metrics.py), so tfjs is
 *     given the thresholded predictions.
 *   - top-k accuracy: tfjs-layers' topKCategoricalAccuracy throws
 *     NotImplementedError; it is computed with tfjs-core's topk as Keras'
 *     in_top_k (the target's score >= the k-th largest score).
 *   - AUC: not in tfjs (rtrain's stays tested by test_keras_metrics.c).
 *   - binary_crossentropy from probabilities: tfjs takes log(p / (1 - p))
 *     into the logits formula, Keras 3 -(y log p + (1-y) log(1-p)) after
 *     the same clip: equal up to rounding.
 *   - Keras 3 JSON: tfjs 4 reads Keras 2's InputLayer and dtype; the
 *     generator gives it batch_input_shape and the policy's name
 *     (tfjsCompat), and Zeros initializers (rtrain's weights are set).
 *
 * Choices that keep the comparison well-conditioned (each fixture records
 * them): Adam's epsilon 1e-3, SGD's rate scaled down when the first step
 * would move the weights by more than 0.05, batches of 4 where
 * BatchNormalization trains; dropout and noise at rate 0 (the fixture's
 * "derived" lists the layers).
 *   - EarlyStopping with a baseline and ReduceLROnPlateau: see
 *     callbackCases.
 */
'use strict';
const fs = require('fs');
const path = require('path');
const cp = require('child_process');
const tf = require('@tensorflow/tfjs');

/* ctest's training budget (keras_corpus trains up to 7M), raised to take in
 * the corpus' Keras 3 LSTM, whose Embedding is 8.8M */
const MAX_PARAMS = 9000000;
/* tfjs' pure-JS backend runs some 20 MFLOP/s here: models over 300 MFLOP a
 * sample per training step (rtrain's count) would take an hour each */
const MAX_FLOPS = 300e6;
const SAMPLES = 64;
/* Keras 3's losses (keras/src/losses/losses.py) from tfjs ops. tfjs' own
 * hinge and squared_hinge do not take {0, 1} labels as -1, 1 (Keras'
 * convert_binary_labels_to_hinge, when the whole batch is 0 and 1), and its
 * kullbackLeiblerDivergence multiplies by the unclipped y_true */
function hingeLabels(yt) {
  const v = yt.dataSync();
  return v.every(a => a === 0 || a === 1) ? tf.sub(tf.mul(yt, 2), 1) : yt;
}
const KERAS_LOSSES = {
  hinge: (yt, yp) => tf.mean(tf.relu(tf.sub(1, tf.mul(hingeLabels(yt), yp))), -1),
  squared_hinge: (yt, yp) =>
      tf.mean(tf.square(tf.relu(tf.sub(1, tf.mul(hingeLabels(yt), yp)))), -1),
  poisson: (yt, yp) => tf.mean(tf.sub(yp, tf.mul(yt, tf.log(tf.add(yp, 1e-7)))), -1),
  kl_divergence: (yt, yp) => {
    const y = tf.clipByValue(yt, 1e-7, 1), p = tf.clipByValue(yp, 1e-7, 1);
    return tf.sum(tf.mul(y, tf.log(tf.div(y, p))), -1);
  },
  huber: (yt, yp) => {
    /* Keras 3's where(|e| <= 1, e^2/2, |e| - 1/2) as Keras 2 wrote it
     * (tfjs has no gradient for where's condition) */
    const a = tf.abs(tf.sub(yp, yt)), q = tf.minimum(a, 1);
    return tf.mean(tf.add(tf.mul(0.5, tf.square(q)), tf.sub(a, q)), -1);
  },
};
const EXTRA_LOSSES = {
  'titanic_webnn_tfjs.json': [['hinge', 'binary'], ['squared_hinge', 'binary'],
                              ['poisson', 'float'], ['kl_divergence', 'float'],
                              ['huber', 'float']],
  'battery_status.json': [['huber', 'float'], ['hinge', 'binary']],
  'crypto_price_tfjs.json': [['hinge', 'binary'], ['squared_hinge', 'binary'],
                             ['huber', 'float']],
};
/* the models the other optimizers (Adagrad, Adadelta, Adamax) run on */
const OPT_MODELS = ['crypto_price_tfjs.json', 'titanic_webnn_tfjs.json', 'battery_status.json'];
const OUT = __dirname;

function mix(x) {
  x >>>= 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d) >>> 0;
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b) >>> 0;
  x ^= x >>> 16;
  return x >>> 0;
}

/* as test_keras_tfjs.c's derive() */
function derive(o, names) {
  const drop = ['Dropout', 'SpatialDropout1D', 'SpatialDropout2D', 'SpatialDropout3D',
                'GaussianDropout', 'AlphaDropout'];
  const rnn = ['LSTM', 'GRU', 'SimpleRNN', 'CuDNNLSTM', 'CuDNNGRU'];
  const zero = (cfg, k) => {
    if (typeof cfg[k] === 'number' && cfg[k] !== 0) {
      cfg[k] = 0;
      return true;
    }
    return false;
  };
  if (Array.isArray(o)) {
    o.forEach(v => derive(v, names));
    return;
  }
  if (o === null || typeof o !== 'object') return;
  if (typeof o.class_name === 'string' && o.config && typeof o.config === 'object' &&
      !Array.isArray(o.config)) {
    const c = o.class_name, cfg = o.config;
    let changed = false;
    if (drop.includes(c)) changed = zero(cfg, 'rate') | zero(cfg, 'p');
    else if (c === 'GaussianNoise') changed = zero(cfg, 'stddev') | zero(cfg, 'sigma');
    else if (rnn.includes(c))
      changed = zero(cfg, 'dropout') | zero(cfg, 'recurrent_dropout') | zero(cfg, 'dropout_W') |
                zero(cfg, 'dropout_U');
    if (changed && cfg.name !== undefined) names.push(cfg.name);
  }
  for (const k of Object.keys(o)) derive(o[k], names);
}

/* What tfjs 4 cannot read of a Keras 3 file, rewritten in the Keras 2 form
 * it reads (the fixture lists what was rewritten): InputLayer's batch_shape
 * (batch_input_shape), DTypePolicy objects (their name), inbound_nodes in
 * Keras 3's args/keras_history form. */
function tfjsCompat(o, notes) {
  if (Array.isArray(o)) return o.map(v => tfjsCompat(v, notes));
  if (o === null || typeof o !== 'object') return o;
  const r = {};
  for (const k of Object.keys(o)) r[k] = tfjsCompat(o[k], notes);
  if (r.class_name === 'InputLayer' && r.config && r.config.batch_shape &&
      !r.config.batch_input_shape) {
    r.config.batch_input_shape = r.config.batch_shape;
    delete r.config.batch_shape;
    if (!notes.includes('batch_shape')) notes.push('batch_shape');
  }
  /* the weights are rtrain's, set after: tfjs' own draw is skipped (its
   * Orthogonal of a 512x2048 kernel takes minutes) */
  if (r.config && typeof r.config === 'object' && !Array.isArray(r.config))
    for (const k of Object.keys(r.config))
      if (k.endsWith('_initializer') && r.config[k] !== null)
        r.config[k] = {class_name: 'Zeros', config: {}};
  if (r.config && r.config.dtype && typeof r.config.dtype === 'object') {
    r.config.dtype = (r.config.dtype.config && r.config.dtype.config.name) || 'float32';
    if (!notes.includes('dtype_policy')) notes.push('dtype_policy');
  }
  return r;
}

function readDump(file) {
  const b = fs.readFileSync(file);
  if (b.toString('latin1', 0, 4) !== 'RTW1') throw new Error('bad dump ' + file);
  let o = 4;
  const n = b.readUInt32LE(o);
  o += 4;
  const params = [];
  for (let i = 0; i < n; i++) {
    const nl = b.readUInt32LE(o);
    o += 4;
    const name = b.toString('utf8', o, o + nl);
    o += nl;
    const trainable = b.readUInt32LE(o);
    const nd = b.readUInt32LE(o + 4);
    o += 8;
    const dims = [];
    for (let k = 0; k < nd; k++) dims.push(b.readInt32LE(o + 4 * k));
    o += 4 * nd;
    const cnt = dims.reduce((a, c) => a * c, 1);
    const v = new Float32Array(cnt);
    for (let k = 0; k < cnt; k++) v[k] = b.readFloatLE(o + 4 * k);
    o += 4 * cnt;
    params.push({name, trainable, dims, v});
  }
  return params;
}

/* shortest text that reads back as the same float32 */
function f32(x) {
  if (!isFinite(x)) return x; /* a NaN/Inf shows as null in JSON: a failure */
  for (let p = 6; p < 10; p++) {
    const s = Number(x.toPrecision(p));
    if (Math.fround(s) === x) return s;
  }
  return x;
}

function sampled(v) {
  const cnt = v.length;
  if (cnt <= SAMPLES) return Array.from(v, f32);
  const stride = Math.floor(cnt / SAMPLES), r = [];
  for (let k = 0; k < SAMPLES; k++)
    r.push(f32(v[Math.floor(k * cnt / SAMPLES) + (k * 131) % stride]));
  return r;
}

function rms(v) {
  let q = 0;
  for (let i = 0; i < v.length; i++) q += v[i] * v[i];
  return Math.sqrt(q / Math.max(1, v.length));
}

/* the activation that makes the output: through nested models and the
 * layers that only move values (a MobileNet ends in Activation, Reshape) */
function outputActivation(model) {
  let layer = model.outputs[0].sourceLayer;
  for (;;) {
    const cls = layer.getClassName();
    if (layer.outputs && layer.layers) {
      layer = layer.outputs[0].sourceLayer;
    } else if (['Reshape', 'Flatten', 'Dropout', 'Permute'].includes(cls)) {
      layer = layer.inboundNodes[0].inboundLayers[0];
    } else {
      break;
    }
  }
  if (layer.getClassName() === 'Softmax') return 'softmax';
  const act = layer.activation;
  if (act && act.getClassName) return act.getClassName();
  return 'linear';
}

function makeX(spec, per) {
  const total = per * spec.n, x = new Float32Array(total);
  for (let i = 0; i < total; i++) {
    const h = mix((i ^ 0x5eed0001) >>> 0);
    x[i] = spec.x.kind === 'index' ? h % spec.x.mod : ((h >>> 22) - 512) / 512;
  }
  return x;
}

function makeY(spec, od) {
  const per = od.reduce((a, c) => a * c, 1), total = per * spec.n, c = od[od.length - 1];
  if (spec.labels === 'sparse') {
    const y = new Float32Array(total / c);
    for (let j = 0; j < y.length; j++) y[j] = mix((j ^ 0x1abe1000) >>> 0) % spec.classes;
    return y;
  }
  const y = new Float32Array(total);
  if (spec.labels === 'onehot') {
    for (let j = 0; j < total / c; j++) y[j * c + mix((j ^ 0x1abe1000) >>> 0) % c] = 1;
  } else {
    for (let j = 0; j < total; j++) {
      const h = mix((j ^ 0x1abe1000) >>> 0);
      y[j] = spec.labels === 'binary' ? h >>> 31 : (h >>> 22) / 1024;
    }
  }
  return y;
}

function lossFn(spec) {
  if (spec.from_logits) {
    if (spec.loss === 'categorical_crossentropy')
      return (yt, yp) => tf.losses.softmaxCrossEntropy(yt, yp);
    if (spec.loss === 'binary_crossentropy')
      return (yt, yp) => tf.losses.sigmoidCrossEntropy(yt, yp);
    throw new Error('from_logits ' + spec.loss);
  }
  return {
    categorical_crossentropy: 'categoricalCrossentropy',
    sparse_categorical_crossentropy: 'sparseCategoricalCrossentropy',
    binary_crossentropy: 'binaryCrossentropy',
    mse: 'meanSquaredError',
    mae: 'meanAbsoluteError',
    logcosh: 'logcosh',
  }[spec.loss];
}

/* Keras' metrics from tfjs' predictions p of all n samples */
function metrics(spec, y, p, yShape) {
  const r = {};
  const mean = t => t.mean().dataSync()[0];
  const yt = tf.tensor(y, yShape);
  const thresholded = tf.cast(tf.greater(p, 0.5), 'float32');
  if (spec.labels === 'sparse') {
    r.accuracy = r.sparse_categorical_accuracy = mean(tf.metrics.sparseCategoricalAccuracy(yt, p));
  } else if (spec.labels === 'onehot') {
    r.accuracy = r.categorical_accuracy = mean(tf.metrics.categoricalAccuracy(yt, p));
    r.precision = tf.metrics.precision(yt, thresholded).dataSync()[0];
    r.recall = tf.metrics.recall(yt, thresholded).dataSync()[0];
  } else if (spec.labels === 'binary') {
    r.binary_accuracy = mean(tf.metrics.binaryAccuracy(yt, p));
    /* Keras' "accuracy" is binary only for one output value, else
     * categorical (is_binary_or_sparse_categorical in
     * keras/src/trainers/compile_utils.py); tfjs-layers picks binary from
     * the loss, as Keras 2.2 did */
    r.accuracy = p.shape[p.shape.length - 1] === 1 ? r.binary_accuracy
                                                   : mean(tf.metrics.categoricalAccuracy(yt, p));
    r.precision = tf.metrics.precision(yt, thresholded).dataSync()[0];
    r.recall = tf.metrics.recall(yt, thresholded).dataSync()[0];
  } else {
    r.mae = mean(tf.metrics.meanAbsoluteError(yt, p));
    r.mse = mean(tf.metrics.meanSquaredError(yt, p));
    r.rmse = Math.sqrt(r.mse);
  }
  const c = p.shape[p.shape.length - 1];
  if ((spec.labels === 'sparse' || spec.labels === 'onehot') && c > 5) {
    /* Keras' in_top_k: the target's score is at least the 5th largest */
    const p2 = p.reshape([-1, c]);
    const kth = tf.topk(p2, 5).values.slice([0, 4], [-1, 1]);
    const target = spec.labels === 'sparse' ? tf.tensor(y, [y.length], 'int32')
                                            : tf.argMax(yt.reshape([-1, c]), -1);
    const score = tf.sum(tf.mul(p2, tf.oneHot(target, c)), -1, true);
    const hit = mean(tf.cast(tf.greaterEqual(score, kth), 'float32'));
    r[spec.labels === 'sparse' ? 'sparse_top_k_categorical_accuracy'
                               : 'top_k_categorical_accuracy'] = hit;
  }
  for (const k of Object.keys(r)) r[k] = f32(Math.fround(r[k]));
  return r;
}

/* tfjs' Adadelta divides by sqrt(the accumulated squared gradient before
 * this step's + eps) (tfjs-core adadelta_optimizer.ts); Keras by the one
 * after it (keras/src/optimizers/adadelta.py: accumulated_grad is assigned
 * first, then rms(accumulated_grad)): at step 1 tfjs moves a weight by lr g,
 * Keras by lr g sqrt(eps / ((1 - rho) g^2 + eps)). This is tfjs' own
 * update with Keras' order. */
class KerasAdadelta extends tf.AdadeltaOptimizer {
  applyGradients(variableGradients) {
    const names = Array.isArray(variableGradients) ? variableGradients.map(v => v.name)
                                                   : Object.keys(variableGradients);
    names.forEach((name, i) => {
      const value = tf.engine().registeredVariables[name];
      if (this.accumulatedGrads[i] == null)
        this.accumulatedGrads[i] = {originalName: `${name}/accum_grad`,
                                    variable: tf.tidy(() => tf.zerosLike(value).variable(false))};
      if (this.accumulatedUpdates[i] == null)
        this.accumulatedUpdates[i] = {originalName: `${name}/accum_var`,
                                      variable: tf.tidy(() => tf.zerosLike(value).variable(false))};
      const g = Array.isArray(variableGradients) ? variableGradients[i].tensor
                                                 : variableGradients[name];
      if (g == null) return;
      const ag = this.accumulatedGrads[i].variable, au = this.accumulatedUpdates[i].variable;
      tf.tidy(() => {
        const nag = tf.add(tf.mul(ag, this.rho), tf.mul(tf.square(g), 1 - this.rho));
        const d = tf.mul(tf.div(tf.sqrt(tf.add(au, this.epsilon)), tf.sqrt(tf.add(nag, this.epsilon))), g);
        ag.assign(nag);
        au.assign(tf.add(tf.mul(au, this.rho), tf.mul(tf.square(d), 1 - this.rho)));
        value.assign(tf.add(tf.mul(d, -this.learningRate), value));
      });
    });
    this.incrementIterations();
  }
}

function setInit(model, params) {
  const byName = new Map(params.map(p => [p.name, p]));
  const ws = model.weights.map(w => {
    const p = byName.get(w.originalName);
    if (!p) throw new Error('rtrain has no parameter ' + w.originalName);
    if (p.dims.join('x') !== w.shape.join('x'))
      throw new Error(`${w.originalName}: rtrain ${p.dims} tfjs ${w.shape}`);
    return tf.tensor(p.v, w.shape);
  });
  if (ws.length !== params.length)
    throw new Error(`tfjs has ${ws.length} weights, rtrain ${params.length}`);
  model.setWeights(ws);
  ws.forEach(t => t.dispose());
}

function weightsOf(model) {
  return model.weights.map(w => {
    const v = w.read().dataSync();
    return {name: w.originalName, rms: f32(Math.fround(rms(v))), values: sampled(v)};
  });
}

/* Whether the nudged run parted from the first by more than the test's
 * tolerances (test_keras_tfjs.c) through amplification: the weights start
 * 1e-6 apart, so weights 1e-4 apart are a hundredfold growth; a loss moves
 * with the nudge from the first step (a function of the weights, not of
 * rounding), so only a loss gap that grows tenfold past the first step's
 * counts */
function unstable(la, lb, wa, wb) {
  const gap = k => Math.abs(la[k] - lb[k]) / Math.abs(la[k]);
  for (let k = 1; k < la.length; k++)
    if (!(gap(k) <= 1e-5) && !(gap(k) <= 10 * gap(0)))
      return `tfjs' step ${k + 1} loss moves from ${la[k]} to ${lb[k]} when the initial ` +
             `weights move by 1e-6 (relative), step 1's by ${gap(0).toExponential(1)}`;
  const rmsOf = new Map(wa.map(p => [p.name, p.rms]));
  for (let i = 0; i < wa.length; i++) {
    let floor = wa[i].rms;
    const m = wa[i].name.match(/^(.*)\/moving_mean$/);
    if (m && rmsOf.has(m[1] + '/moving_variance'))
      floor = Math.max(floor, Math.sqrt(rmsOf.get(m[1] + '/moving_variance')));
    for (let k = 0; k < wa[i].values.length; k++) {
      const a = wa[i].values[k], b = wb[i].values[k];
      if (!(Math.abs(a - b) <= 1e-4 * Math.max(Math.abs(a), floor)))
        return `tfjs' ${wa[i].name} moves from ${a} to ${b} when the initial weights move ` +
               `by 1e-6 (relative)`;
    }
  }
  return null;
}

async function train(model, spec, opt, x, y, xShape, yShape, adam, loss) {
  const b = spec.batch, perX = xShape.slice(1).reduce((a, c) => a * c, 1),
        perY = yShape.slice(1).reduce((a, c) => a * c, 1);
  model.compile({optimizer: opt, loss: loss || lossFn(spec)});
  const losses = [];
  for (let s = 0; s < 3; s++) {
    if (adam) opt.epsilon = spec.adam.epsilon / Math.sqrt(1 - Math.pow(spec.adam.beta_2, s + 1));
    const xb = tf.tensor(x.subarray(s * b * perX, (s + 1) * b * perX), [b, ...xShape.slice(1)]);
    const yb = tf.tensor(y.subarray(s * b * perY, (s + 1) * b * perY), [b, ...yShape.slice(1)]);
    const l = await model.trainOnBatch(xb, yb);
    losses.push(f32(Math.fround(Array.isArray(l) ? l[0] : l)));
    xb.dispose();
    yb.dispose();
  }
  return losses;
}

async function oneModel(root, tool, rel, index, summary) {
  const t0 = Date.now();
  const file = path.join(root, rel);
  let j = JSON.parse(fs.readFileSync(file, 'utf8'));
  const names = [];
  derive(j, names);
  if (j.modelTopology) j = j.modelTopology;
  if (j.model_config) j = j.model_config;
  const notes = [];
  j = tfjsCompat(j, notes);
  let model;
  try {
    model = await tf.models.modelFromJSON(j);
  } catch (e) {
    summary.refused.push(`${rel}: ${String(e.message).split('\n')[0].slice(0, 160)}`);
    return;
  }
  const count = model.countParams();
  if (count > MAX_PARAMS) {
    summary.over.push(`${rel}: ${count} parameters`);
    model.dispose();
    return;
  }
  const inShape = model.inputs[0].shape;
  /* a sequence of any length: 8 steps (tfjs' recurrent gradients are slow) */
  const bind = inShape.slice(1).some(d => d == null) ? 8 : 0;
  const tmp = path.join(require('os').tmpdir(), `tfjs_init_${process.pid}.bin`);
  let info;
  try {
    info = JSON.parse(cp.execFileSync(tool, ['dump', file, names.length ? '1' : '0',
                                             String(bind), tmp]).toString());
  } catch (e) {
    summary.rtrain.push(`${rel}: rtrain cannot import it`);
    model.dispose();
    return;
  }
  const out = path.join(OUT, path.basename(rel));
  if (info.flops_per_sample > MAX_FLOPS && !fs.existsSync(out)) {
    summary.over.push(`${rel}: ${(info.flops_per_sample / 1e6).toFixed(0)} MFLOP a sample`);
    model.dispose();
    fs.unlinkSync(tmp);
    return;
  }
  /* fixtures already made are kept (delete one to make it again) */
  if (fs.existsSync(out) && !process.env.FORCE) {
    summary.compared.push(rel);
    model.dispose();
    fs.unlinkSync(tmp);
    return;
  }
  if (info.derived !== names.join(','))
    throw new Error(`${rel}: derived ${info.derived} vs ${names}`);
  const params = readDump(tmp);
  fs.unlinkSync(tmp);
  setInit(model, params);

  const perX = info.input.reduce((a, c) => a * c, 1);
  const od = info.output, perY = od.reduce((a, c) => a * c, 1), c = od[od.length - 1];
  const text = JSON.stringify(j);
  const rnn = text.match(/"(LSTM|GRU|SimpleRNN)"/);
  /* batches of 2 for large inputs and RNNs (tfjs' CPU time), but 4 where
   * BatchNormalization trains: its statistics over 2 samples of a 2x2 map
   * are too ill-conditioned to compare after a step */
  const big = (perX > 20000 || rnn) && !text.includes('"BatchNormalization"');
  const spec = {model: rel, n: big ? 6 : 12, batch: big ? 2 : 4};
  const embeds = model.layers.find(l => l.getClassName() === 'Embedding');
  spec.x = embeds ? {kind: 'index', mod: Math.min(50, embeds.inputDim)} : {kind: 'uniform'};
  const act = outputActivation(model);
  if (act === 'softmax' && c > 1) {
    spec.loss = index % 2 ? 'sparse_categorical_crossentropy' : 'categorical_crossentropy';
    spec.labels = index % 2 ? 'sparse' : 'onehot';
    spec.classes = c;
  } else if (act === 'sigmoid' || act === 'softmax') {
    /* a softmax over one value is 1: its loss is taken as BCE's */
    spec.loss = 'binary_crossentropy';
    spec.labels = 'binary';
  } else if (c > 1) {
    spec.loss = 'categorical_crossentropy';
    spec.from_logits = 1;
    spec.labels = 'onehot';
    spec.classes = c;
  } else {
    spec.loss = ['mse', 'mae', 'logcosh'][index % 3];
    spec.labels = 'float';
  }
  if (bind) spec.bind = bind;
  spec.derived = names.join(',');
  if (notes.length) spec.tfjs_compat = notes;
  spec.sgd = {lr: 0.05, momentum: [0, 0.9, 0.9][index % 3], nesterov: index % 3 === 2 ? 1 : 0};
  /* epsilon 1e-3, not Keras' default 1e-7: Adam moves a weight by about
   * lr whatever its gradient's size once that is well above epsilon, so
   * with 1e-7 a gradient made of float rounding (a dead unit's) moves its
   * weights by +-lr in directions the two implementations draw
   * differently; 1e-3 keeps such steps small, and makes where epsilon is
   * added (Keras: to sqrt(v)) matter more, not less */
  spec.adam = {lr: 0.001, beta_1: 0.9, beta_2: 0.999, epsilon: 0.001};
  spec.init = params.map(p => {
    let s = 0, q = 0;
    for (let i = 0; i < p.v.length; i++) s += p.v[i], q += p.v[i] * p.v[i];
    return {name: p.name, sum: s, sumsq: q};
  });

  const x = makeX(spec, perX), y = makeY(spec, od);
  const xShape = [spec.n, ...info.input];
  const yShape = spec.labels === 'sparse' ? [spec.n, ...od.slice(0, -1), 1] : [spec.n, ...od];
  const xt = tf.tensor(x, xShape), yt = tf.tensor(y, yShape);
  const rows = perY > 256 ? 2 : 4;
  const p = model.predict(xt, {batchSize: spec.batch});
  spec.predict = {rows, values: Array.from(p.dataSync().subarray(0, rows * perY), f32)};
  model.compile({optimizer: tf.train.sgd(0), loss: lossFn(spec)});
  const ev = model.evaluate(xt, yt, {batchSize: spec.batch});
  spec.evaluate = {loss: f32((Array.isArray(ev) ? ev[0] : ev).dataSync()[0]),
                   metrics: metrics(spec, y, p, yShape)};
  if (spec.from_logits) delete spec.evaluate.metrics.precision, delete spec.evaluate.metrics.recall;

  /* SGD's rate: 0.05, or less where the first step would move the weights
   * by more than 0.05 (L2 over all of them): a MobileNet at batch 2 has
   * gradients of norm 1e3, and steps that large make the comparison chaotic
   * (tfjs and rtrain agree on that gradient to 1e-6; the trajectories then
   * part on float rounding) */
  {
    const probe = tf.train.sgd(1);
    model.compile({optimizer: probe, loss: lossFn(spec)});
    const before = model.trainableWeights.map(w => w.read().dataSync().slice());
    const b = spec.batch;
    const xb = tf.tensor(x.subarray(0, b * perX), [b, ...xShape.slice(1)]);
    const yb = tf.tensor(y.subarray(0, b * (yShape.slice(1).reduce((a, c) => a * c, 1))),
                         [b, ...yShape.slice(1)]);
    await model.trainOnBatch(xb, yb);
    let q = 0;
    model.trainableWeights.forEach((w, i) => {
      const a = w.read().dataSync();
      for (let k = 0; k < a.length; k++) q += (a[k] - before[i][k]) * (a[k] - before[i][k]);
    });
    const gnorm = Math.sqrt(q);
    if (gnorm > 1) spec.sgd.lr = f32(Math.fround(0.05 / gnorm));
    setInit(model, params);
    xb.dispose();
    yb.dispose();
  }
  /* Each training run twice: from rtrain's weights and from them moved by
   * one part in 1e6 (what float32 sums in another order differ by). Where
   * tfjs' own two runs
   * part by more than the test's tolerance, the trajectory is decided by
   * rounding (a ReLU flipping side in a deep BatchNormalization net), so
   * rtrain is not held to it: the fixture says so and keeps inference. */
  const makeOpt = {
    sgd: () => spec.sgd.momentum ? tf.train.momentum(spec.sgd.lr, spec.sgd.momentum,
                                                     !!spec.sgd.nesterov)
                                 : tf.train.sgd(spec.sgd.lr),
    adam: () => tf.train.adam(spec.adam.lr, spec.adam.beta_1, spec.adam.beta_2,
                              spec.adam.epsilon),
  };
  for (const kind of ['sgd', 'adam']) {
    setInit(model, params);
    const losses = await train(model, spec, makeOpt[kind](), x, y, xShape, yShape, kind === 'adam');
    const weights = weightsOf(model);
    const nudged = params.map(p => ({...p, v: p.v.map((v, i) => Math.fround(
      v * (1 + (i % 2 ? 1e-6 : -1e-6))))}));
    setInit(model, nudged);
    const l2 = await train(model, spec, makeOpt[kind](), x, y, xShape, yShape, kind === 'adam');
    const w2 = weightsOf(model);
    const why = unstable(losses, l2, weights, w2);
    if (why) {
      spec[kind].ill_conditioned = why;
      console.log(`  ${rel} ${kind}: not compared, ${why}`);
    } else {
      spec[kind].losses = losses;
      spec[kind].weights = weights;
    }
  }
  /* Keras' other optimizers that tfjs has (KerasAdadelta below for
   * tfjs' Adadelta), on a few small models: 3 steps
   * each from rtrain's weights. tfjs' updates are Keras 3's
   * (keras/src/optimizers/adagrad.py: the accumulator from 0.1, eps 1e-7
   * inside the sqrt, tfjs' backend epsilon; adadelta.py; adamax.py);
   * Adadelta at rate 1 (Keras' 0.001 hardly moves a weight) */
  if (OPT_MODELS.includes(path.basename(rel))) {
    spec.optimizers = [];
    const kinds = [
      {name: 'adagrad', lr: 0.01, epsilon: 1e-7, make: o => tf.train.adagrad(o.lr, 0.1)},
      {name: 'adadelta', lr: 1, rho: 0.95, epsilon: 1e-7,
       make: o => new KerasAdadelta(o.lr, o.rho, o.epsilon)},
      {name: 'adamax', lr: 0.01, beta_1: 0.9, beta_2: 0.999, epsilon: 1e-7,
       make: o => tf.train.adamax(o.lr, o.beta_1, o.beta_2, o.epsilon)},
    ];
    for (const k of kinds) {
      setInit(model, params);
      const losses = await train(model, spec, k.make(k), x, y, xShape, yShape, false);
      const {make, ...o} = k;
      spec.optimizers.push({...o, losses, weights: weightsOf(model)});
    }
  }
  /* Keras' other losses on the same models: the evaluate loss and 3 SGD
   * steps each, with their labels drawn as the fixture's rules say */
  const extra = EXTRA_LOSSES[path.basename(rel)];
  if (extra) {
    spec.extra_losses = [];
    for (const [name, labels] of extra) {
      const sp = {...spec, labels};
      const ye = makeY(sp, od), yeShape = [spec.n, ...od];
      const yt = tf.tensor(ye, yeShape);
      setInit(model, params);
      model.compile({optimizer: tf.train.sgd(0), loss: KERAS_LOSSES[name]});
      const ev = model.evaluate(xt, yt, {batchSize: spec.batch});
      const evaluate = f32((Array.isArray(ev) ? ev[0] : ev).dataSync()[0]);
      setInit(model, params);
      const losses = await train(model, sp, tf.train.sgd(spec.sgd.lr), x, ye, xShape, yeShape,
                                 false, KERAS_LOSSES[name]);
      spec.extra_losses.push({loss: name, labels, evaluate, sgd: {lr: spec.sgd.lr, losses,
                                                                  weights: weightsOf(model)}});
      yt.dispose();
    }
  }
  model.dispose();
  tf.disposeVariables();
  fs.writeFileSync(out, JSON.stringify(spec) + '\n');
  summary.compared.push(rel);
  console.log(`${rel}: ${spec.loss}${spec.derived ? ', rate 0 in ' + spec.derived : ''} ` +
              `(${((Date.now() - t0) / 1000).toFixed(0)} s)`);
}

/* ------------------------------------------------------------- callbacks */

/* Keras 3's EarlyStopping and ReduceLROnPlateau, transcribed from
 * keras/src/callbacks/early_stopping.py, reduce_lr_on_plateau.py and
 * monitor_callback.py (keras-team/keras): for the cases tfjs has no
 * callback for (ReduceLROnPlateau) or differs from Keras (EarlyStopping's
 * baseline: tfjs starts best at the baseline, Keras starts it at the first
 * value and only withholds the reset of wait). Cases without a baseline are
 * also run through tfjs' EarlyStopping, which must agree. */
function kerasEarlyStopping(c, values) {
  const less = (c.mode || 'min') === 'min';
  const md = less ? -Math.abs(c.min_delta || 0) : Math.abs(c.min_delta || 0);
  const op = less ? (a, b) => a < b : (a, b) => a > b;
  const better = (v, ref) => ref === null || op(v - md, ref);
  let wait = 0, best = null;
  for (let epoch = 0; epoch < values.length; epoch++) {
    const cur = values[epoch];
    if (epoch < (c.start_from_epoch || 0)) continue;
    wait += 1;
    if (better(cur, best)) {
      best = cur;
      if (c.baseline == null || better(cur, c.baseline)) wait = 0;
      continue;
    }
    if (wait >= c.patience && epoch > 0) return epoch;
  }
  return -1;
}

function kerasReduceLR(c, values, lr0) {
  const less = (c.mode || 'min') === 'min';
  const md = less ? -Math.abs(c.min_delta) : Math.abs(c.min_delta);
  const op = less ? (a, b) => a < b : (a, b) => a > b;
  let wait = 0, cooldown = 0, best = null, lr = lr0;
  const lrs = [];
  for (let epoch = 0; epoch < values.length; epoch++) {
    const cur = values[epoch];
    if (cooldown > 0) {
      cooldown -= 1;
      wait = 0;
    }
    if (best === null || op(cur - md, best)) {
      best = cur;
      wait = 0;
    } else if (!(cooldown > 0)) {
      wait += 1;
      if (wait >= c.patience) {
        if (lr > Math.fround(c.min_lr)) {
          lr = Math.max(lr * c.factor, c.min_lr);
          cooldown = c.cooldown;
          wait = 0;
        }
      }
    }
    lrs.push(lr); /* the rate the next epoch uses */
  }
  return lrs;
}

async function tfjsEarlyStopping(c, values) {
  const cb = tf.callbacks.earlyStopping({monitor: 'loss', patience: c.patience,
                                         minDelta: c.min_delta || 0, mode: c.mode || 'min'});
  const fake = tf.sequential({layers: [tf.layers.dense({units: 1, inputShape: [1]})]});
  fake.compile({optimizer: 'sgd', loss: 'meanSquaredError'});
  fake.stopTraining = false;
  cb.setModel(fake);
  await cb.onTrainBegin();
  for (let epoch = 0; epoch < values.length; epoch++) {
    await cb.onEpochEnd(epoch, {loss: values[epoch]});
    if (fake.stopTraining) return epoch;
  }
  return -1;
}

async function callbackCases() {
  const seqs = {
    plateau: [1.0, 0.8, 0.7, 0.7, 0.71, 0.69, 0.69, 0.7, 0.7, 0.7, 0.7, 0.7],
    noisy: [2.0, 1.5, 1.6, 1.4, 1.45, 1.41, 1.39, 1.5, 1.6, 1.38, 1.7, 1.8],
    tiny_gains: [1.0, 0.99995, 0.9999, 0.99985, 0.9998, 0.99975, 0.9997, 0.99965],
    rising: [0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    accuracy: [0.5, 0.6, 0.65, 0.64, 0.66, 0.66, 0.65, 0.67, 0.66, 0.66, 0.66],
  };
  const es = [], rl = [];
  const esConfigs = [
    {patience: 0}, {patience: 1}, {patience: 2}, {patience: 3, min_delta: 0.01},
    {patience: 2, min_delta: 1e-4}, {patience: 2, mode: 'max'},
    {patience: 1, mode: 'max', min_delta: 0.005},
    {patience: 2, baseline: 0.75}, {patience: 1, baseline: 1.45},
    {patience: 2, start_from_epoch: 3},
  ];
  for (const [name, v] of Object.entries(seqs)) {
    for (const c of esConfigs) {
      if ((c.mode === 'max') !== (name === 'accuracy')) continue;
      const keras = kerasEarlyStopping(c, v);
      const kase = {values: v, sequence: name, ...c, stopped_epoch: keras};
      if (c.baseline == null && !c.start_from_epoch) {
        const t = await tfjsEarlyStopping(c, v);
        if (t !== keras) throw new Error(`EarlyStopping ${name} ${JSON.stringify(c)}: tfjs ${t}, ` +
                                         `Keras ${keras}`);
        kase.reference = 'tfjs EarlyStopping (agrees with the Keras transcription)';
      } else {
        kase.reference = 'Keras transcription (tfjs has no start_from_epoch and starts best ' +
                         'at the baseline)';
      }
      es.push(kase);
    }
  }
  const rlConfigs = [
    {patience: 1, factor: 0.5, min_delta: 1e-4, cooldown: 0, min_lr: 0},
    {patience: 2, factor: 0.1, min_delta: 1e-4, cooldown: 1, min_lr: 1e-4},
    {patience: 1, factor: 0.2, min_delta: 0.02, cooldown: 2, min_lr: 0},
    {patience: 0, factor: 0.5, min_delta: 0, cooldown: 0, min_lr: 0.0001},
    {patience: 2, factor: 0.5, min_delta: 0.001, cooldown: 0, min_lr: 0, mode: 'max'},
  ];
  for (const [name, v] of Object.entries(seqs)) {
    for (const c of rlConfigs) {
      if ((c.mode === 'max') !== (name === 'accuracy')) continue;
      rl.push({values: v, sequence: name, ...c, lr: 0.001, lrs: kerasReduceLR(c, v, 0.001),
               reference: 'Keras transcription (tfjs has no ReduceLROnPlateau)'});
    }
  }
  fs.writeFileSync(path.join(OUT, 'callbacks.json'),
                   JSON.stringify({early_stopping: es, reduce_lr_on_plateau: rl}, null, 1) + '\n');
  console.log(`callbacks: ${es.length} EarlyStopping and ${rl.length} ReduceLROnPlateau cases`);
}

/* ------------------------------------------------ several inputs, outputs */

/* A loss given per output in compile_config, read as Keras reads it (a
 * list in output_layers' order or a dict by output name; one loss for
 * every output): [name in Keras' function spelling, from_logits] */
function kerasLossOf(entry) {
  if (entry && typeof entry === 'object') {
    const c = entry.config || {};
    const name = entry.class_name === 'function' ? String(entry.config) : entry.class_name;
    return [snake(name), c.from_logits ? 1 : 0];
  }
  return [snake(String(entry)), 0];
}
function snake(n) {
  const long = {mse: 'mean_squared_error', mae: 'mean_absolute_error'};
  const s = n.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();
  return long[s] || s;
}
function perOutput(v, k, name) {
  if (Array.isArray(v)) return v[k];
  if (v && typeof v === 'object' && !('class_name' in v)) return v[name];
  return v;
}

/* Keras' losses (keras/src/losses/losses.py) from tfjs ops: per sample,
 * then the batch mean */
function headLoss(h, yt, yp) {
  switch (h.loss) {
  case 'sparse_categorical_crossentropy':
    return tf.mean(tf.metrics.categoricalCrossentropy(
        tf.oneHot(tf.cast(yt.reshape([-1]), 'int32'), yp.shape[yp.shape.length - 1])
            .reshape(yp.shape).toFloat(), yp));
  case 'categorical_crossentropy':
    return h.from_logits ? tf.losses.softmaxCrossEntropy(yt, yp)
                         : tf.mean(tf.metrics.categoricalCrossentropy(yt, yp));
  case 'binary_crossentropy':
    return h.from_logits ? tf.mean(tf.mean(tf.losses.sigmoidCrossEntropy(
                               yt, yp, undefined, undefined, tf.Reduction.NONE), -1))
                         : tf.mean(tf.metrics.binaryCrossentropy(yt, yp));
  case 'mean_squared_error':
    return tf.mean(tf.metrics.meanSquaredError(yt, yp));
  case 'mean_absolute_error':
    return tf.mean(tf.metrics.meanAbsoluteError(yt, yp));
  }
  throw new Error('loss ' + h.loss);
}

/* Keras' total: sum over the outputs of loss_weight * loss
 * (keras/src/trainers/compile_utils.py, CompileLoss) */
function totalLoss(heads, ys, ps) {
  return tf.tidy(() => heads.reduce((t, h, k) =>
      tf.add(t, tf.mul(h.weight, headLoss(h, ys[k], ps[k]))), tf.scalar(0)));
}

/* tfjs' RNN.apply writes the initial states it takes from its inputs
 * (Keras 2's [x, h, c]) into the keyword arguments it was given; model.apply
 * shares one such object between its calls, so the next call of a layer
 * that reads states (each output's pass) finds them twice and throws "When
 * inputs is an array, neither initialState or constants should be
 * provided". Each call gets its own copy, without the states written there
 * by an earlier call: the inputs hold them, as Keras' RNN.__call__ passes
 * them. */
function isolateRnnKwargs(model) {
  for (const layer of model.layers) {
    const inner = layer.layer || layer; /* Bidirectional's */
    if (!('returnState' in inner)) continue;
    const orig = layer.apply.bind(layer);
    layer.apply = (inputs, kwargs) => {
      if (kwargs && Array.isArray(inputs)) {
        kwargs = {...kwargs};
        delete kwargs.initialState;
      }
      return orig(inputs, kwargs);
    };
  }
}

async function multiModel(root, tool, rel) {
  const file = path.join(root, rel), j = JSON.parse(fs.readFileSync(file, 'utf8'));
  const dumpFile = path.join(require('os').tmpdir(), `rt_multi_${process.pid}.bin`);
  const info = JSON.parse(cp.execFileSync(tool, ['dump-multi', file, dumpFile]).toString());
  const params = readDump(dumpFile);
  fs.unlinkSync(dumpFile);
  const model = await tf.models.modelFromJSON({class_name: j.class_name, config: j.config});
  isolateRnnKwargs(model);
  setInit(model, params);
  const cc = j.compile_config || {};
  const heads = model.outputNames.map((name, k) => {
    const [loss, fromLogits] = kerasLossOf(perOutput(cc.loss, k, name));
    const w = perOutput(cc.loss_weights, k, name);
    const h = {name, loss, from_logits: fromLogits, weight: w == null ? 1 : Math.fround(w),
               labels: {sparse_categorical_crossentropy: 'sparse',
                        categorical_crossentropy: 'onehot',
                        binary_crossentropy: 'binary'}[loss] || 'float',
               dims: model.outputs[k].shape.slice(1)};
    const r = info.heads[k];
    if (r.loss !== h.loss || r.from_logits !== h.from_logits ||
        Math.fround(r.weight) !== h.weight || r.dims.join() !== h.dims.join())
      throw new Error(`${rel}: output ${name}: rtrain reads ${JSON.stringify(r)}, ` +
                      `Keras' rules give ${JSON.stringify(h)}`);
    return h;
  });
  /* an input an Embedding reads takes indices below its input_dim */
  const index = model.inputNames.map(nm => {
    for (const l of j.config.layers)
      if (l.class_name === 'Embedding' &&
          JSON.stringify(l.inbound_nodes).includes(JSON.stringify(nm)))
        return l.config.input_dim;
    return 0;
  });
  const spec = {model: rel, n: 12, batch: 4,
                inputs: model.inputs.map(t => t.shape.slice(1)), heads};
  if (index.some(v => v)) spec.index = index;
  spec.init = params.map(p => {
    let s = 0, q = 0;
    for (let i = 0; i < p.v.length; i++) s += p.v[i], q += p.v[i] * p.v[i];
    return {name: p.name, sum: s, sumsq: q};
  });
  const n = spec.n;
  const xs = spec.inputs.map((d, k) => {
    const per = d.reduce((a, c) => a * c, 1), x = new Float32Array(per * n);
    for (let i = 0; i < x.length; i++) {
      const h = mix((i ^ (0x5eed0001 + k)) >>> 0);
      x[i] = index[k] ? h % index[k] : ((h >>> 22) - 512) / 512;
    }
    return {x, per, shape: d};
  });
  const ys = heads.map((h, k) => {
    const per = h.dims.reduce((a, c) => a * c, 1), C = h.dims[h.dims.length - 1];
    const rowsPer = h.labels === 'sparse' || h.labels === 'onehot' ? per / C : per;
    const shape = h.labels === 'sparse' ? [...h.dims.slice(0, -1), 1] : h.dims;
    const y = new Float32Array(n * shape.reduce((a, c) => a * c, 1));
    for (let j = 0; j < n * rowsPer; j++) {
      const v = mix((j ^ (0x1abe1000 + k)) >>> 0);
      if (h.labels === 'sparse') y[j] = v % C;
      else if (h.labels === 'onehot') y[j * C + v % C] = 1;
      else y[j] = h.labels === 'binary' ? v >>> 31 : (v >>> 22) / 1024;
    }
    return {y, per: y.length / n, shape};
  });
  const slice = (a, lo, cnt) => tf.tensor(a.x ? a.x.subarray(lo * a.per, (lo + cnt) * a.per)
                                              : a.y.subarray(lo * a.per, (lo + cnt) * a.per),
                                          [cnt, ...a.shape]);
  const rows = 4;
  const xin = xs.map(a => slice(a, 0, n)), yin = ys.map(a => slice(a, 0, n));
  const ps = model.predict(xin);
  spec.predict = {rows, values: ps.map((p, k) =>
      Array.from(p.dataSync().subarray(0, rows * heads[k].dims.reduce((a, c) => a * c, 1)), f32))};
  const ev = totalLoss(heads, yin, ps);
  spec.evaluate = {loss: f32(ev.dataSync()[0]),
                   head_losses: heads.map((h, k) => f32(headLoss(h, yin[k], ps[k]).dataSync()[0])),
                   /* each output's own metrics, as Keras' History names them
                    * "<output>_<metric>": the metrics of one output on its
                    * predictions (raw: a from_logits output's metrics see
                    * its logits, as Keras') */
                   head_metrics: heads.map((h, k) => metrics(h, ys[k].y, ps[k],
                                                             [n, ...ys[k].shape]))};
  const vars = model.trainableWeights.map(w => w.read());
  const run = (opt, adam) => {
    setInit(model, params);
    const losses = [];
    for (let st = 0; st < 3; st++) {
      if (adam) opt.epsilon = spec.adam.epsilon / Math.sqrt(1 - Math.pow(spec.adam.beta_2, st + 1));
      const xb = xs.map(a => slice(a, st * spec.batch, spec.batch));
      const yb = ys.map(a => slice(a, st * spec.batch, spec.batch));
      const cost = opt.minimize(() => {
        const out = model.apply(xb, {training: true});
        return totalLoss(heads, yb, Array.isArray(out) ? out : [out]);
      }, true, vars);
      losses.push(f32(cost.dataSync()[0]));
      tf.dispose([xb, yb, cost]);
    }
    return {losses, weights: weightsOf(model)};
  };
  spec.sgd = {lr: 0.05, momentum: 0};
  Object.assign(spec.sgd, run(tf.train.sgd(spec.sgd.lr), false));
  spec.adam = {lr: 0.001, beta_1: 0.9, beta_2: 0.999, epsilon: 0.001};
  Object.assign(spec.adam, run(tf.train.adam(spec.adam.lr, spec.adam.beta_1, spec.adam.beta_2,
                                             spec.adam.epsilon), true));
  const out = path.join(OUT, 'multi_' + path.basename(rel));
  fs.writeFileSync(out, JSON.stringify(spec) + '\n');
  console.log(`${rel}: ${heads.map(h => `${h.name} ${h.loss} x ${h.weight}`).join(', ')}`);
  model.dispose();
}

/* A TF.js model saved by tfjs with its own initial weights (model.json and
 * a weights shard, as tf.io's file handlers write them) and its
 * predictions on 4 rows of the fixed inputs: saved_<model>/ */
async function savedModel(root, rel) {
  let j = JSON.parse(fs.readFileSync(path.join(root, rel), 'utf8'));
  if (j.modelTopology) j = j.modelTopology;
  if (j.model_config) j = j.model_config;
  const model = await tf.models.modelFromJSON(tfjsCompat(j, []));
  /* tfjs' initializers draw from Math.random: weights of a fixed rule
   * instead, so that a rerun writes the same files */
  let i = 0;
  model.setWeights(model.weights.map(w => {
    const n = w.shape.reduce((a, c) => a * c, 1), v = new Float32Array(n);
    for (let k = 0; k < n; k++, i++) v[k] = ((mix((i ^ 0x77e1) >>> 0) >>> 22) - 512) / 2048;
    return tf.tensor(v, w.shape);
  }));
  const dir = path.join(OUT, 'saved_' + path.basename(rel, '.json'));
  fs.mkdirSync(dir, {recursive: true});
  await model.save(tf.io.withSaveHandler(async a => {
    const spec = a.weightSpecs, bin = Buffer.from(a.weightData);
    fs.writeFileSync(path.join(dir, 'group1-shard1of1.bin'), bin);
    fs.writeFileSync(path.join(dir, 'model.json'), JSON.stringify({
      modelTopology: a.modelTopology, format: a.format, generatedBy: a.generatedBy,
      convertedBy: a.convertedBy || null,
      weightsManifest: [{paths: ['group1-shard1of1.bin'], weights: spec}]}) + '\n');
    return {modelArtifactsInfo: {dateSaved: new Date(), modelTopologyType: 'JSON'}};
  }));
  const shape = model.inputs[0].shape.slice(1), per = shape.reduce((a, c) => a * c, 1);
  const x = new Float32Array(4 * per);
  for (let k = 0; k < x.length; k++) x[k] = ((mix((k ^ 0x5eed0001) >>> 0) >>> 22) - 512) / 512;
  const p = model.predict(tf.tensor(x, [4, ...shape]));
  fs.writeFileSync(path.join(dir, 'predictions.json'), JSON.stringify(
      {rows: 4, input: shape, values: Array.from(p.dataSync(), f32)}) + '\n');
  console.log(`${dir}: ${model.weights.length} weights`);
}

async function main() {
  const [root, tool, ...only] = process.argv.slice(2);
  if (!root || !tool) {
    console.error('usage: gen_tfjs_fixtures.js <repository root> <test_keras_tfjs> [model ...]');
    process.exit(2);
  }
  await tf.setBackend('cpu');
  if (only.length === 1 && only[0] === '--callbacks') {
    await callbackCases();
    return;
  }
  if (only.length === 1 && only[0] === '--saved') {
    for (const m of ['crypto_price_tfjs', 'titanic_webnn_tfjs'])
      await savedModel(path.resolve(root), `tests/fixtures/keras-corpus/${m}.json`);
    return;
  }
  if (only.length === 2 && only[0] === '--load') {
    /* a TF.js folder (rtrain's model.save(DIR, format="tfjs")): tfjs loads
     * it and prints its predictions on the fixed inputs' first 4 rows */
    const dir = only[1], mj = JSON.parse(fs.readFileSync(path.join(dir, 'model.json'), 'utf8'));
    const bin = mj.weightsManifest.map(g => g.paths.map(p => fs.readFileSync(path.join(dir, p))));
    const data = Buffer.concat(bin.flat());
    const model = await tf.loadLayersModel(tf.io.fromMemory(
        mj.modelTopology, mj.weightsManifest.flatMap(g => g.weights),
        data.buffer.slice(data.byteOffset, data.byteOffset + data.length)));
    const shape = model.inputs[0].shape.slice(1), per = shape.reduce((a, c) => a * c, 1);
    const x = new Float32Array(4 * per);
    for (let k = 0; k < x.length; k++) x[k] = ((mix((k ^ 0x5eed0001) >>> 0) >>> 22) - 512) / 512;
    console.log(JSON.stringify(Array.from(model.predict(tf.tensor(x, [4, ...shape])).dataSync())));
    return;
  }
  if (only.length === 1 && only[0] === '--attn') {
    /* Keras' Dot (tests/fixtures/keras-attn, written by
     * tests/keras_import/attn/gen_attn_fixtures.py models); its
     * MultiHeadAttention models have PyTorch's fixtures (tfjs' npm bundle
     * does not register that class) */
    const summary = {compared: [], refused: [], over: [], rtrain: []};
    for (const f of fs.readdirSync(path.join(root, 'tests/fixtures/keras-attn')).sort()) {
      if (!f.startsWith('dot_') || !f.endsWith('.json')) continue;
      let index = 0;
      for (const ch of f) index = (index * 31 + ch.charCodeAt(0)) % 1000003;
      await oneModel(path.resolve(root), path.resolve(tool), `tests/fixtures/keras-attn/${f}`,
                     index, summary);
    }
    console.log(JSON.stringify(summary, null, 1));
    return;
  }
  if (only.length >= 1 && only[0] === '--multi') {
    /* every model of keras-multi, or those named after --multi */
    for (const f of fs.readdirSync(path.join(root, 'tests/fixtures/keras-multi')).sort())
      if (f.endsWith('.json') && (only.length === 1 || only.includes(f)))
        await multiModel(path.resolve(root), path.resolve(tool), `tests/fixtures/keras-multi/${f}`);
    return;
  }
  const summary = {compared: [], refused: [], over: [], rtrain: []};
  for (const corpus of ['tests/fixtures/keras-corpus', 'tests/fixtures/keras-corpus-2']) {
    const src = path.join(root, corpus, 'SOURCES');
    if (!fs.existsSync(src)) continue;
    for (const line of fs.readFileSync(src, 'utf8').split('\n')) {
      const f = line.split(/\s+/)[0];
      if (!f || f.startsWith('#')) continue;
      const rel = `${corpus}/${f}`;
      if (only.length && !only.includes(f)) continue;
      /* the loss and optimizer variant by a hash of the name, so a run on one
       model makes what a full run makes */
      let index = 0;
      for (const ch of f) index = (index * 31 + ch.charCodeAt(0)) % 1000003;
      await oneModel(path.resolve(root), path.resolve(tool), rel, index, summary);
    }
  }
  if (!only.length) {
    await callbackCases();
    const lines = [`tfjs ${tf.version.tfjs}, backend ${tf.getBackend()}`,
                   `compared: ${summary.compared.length}`, ...summary.compared.map(s => '  ' + s),
                   `refused by tfjs: ${summary.refused.length}`, ...summary.refused.map(s => '  ' + s),
                   `over ${MAX_PARAMS} parameters or ${MAX_FLOPS / 1e6} MFLOP a sample: ` +
                   `${summary.over.length}`,
                   ...summary.over.map(s => '  ' + s),
                   `refused by rtrain: ${summary.rtrain.length}`, ...summary.rtrain.map(s => '  ' + s)];
    fs.writeFileSync(path.join(OUT, 'SUMMARY.txt'), lines.join('\n') + '\n');
    console.log(lines.join('\n'));
  }
}

main().catch(e => {
  console.error(e);
  process.exit(1);
});
