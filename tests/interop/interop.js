// Interop test: @grpc/grpc-js + @grpc/proto-loader (a gRPC stack rtrain did
// not write) against a real rtraind on 127.0.0.1:0. Loads proto/rtrain.proto,
// calls GetInfo, Ping, CreateSession, an UploadDataset stream (XXH64 checksum
// computed here), Compile (Keras JSON) + RunSteps + Evaluate, and an error
// path, asserting real values.
'use strict';
const path = require('path');
const fs = require('fs');
const { spawn } = require('child_process');
const assert = require('assert');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const root = path.resolve(__dirname, '..', '..');
const rtraind = process.argv[2];
if (!rtraind) {
  console.error('usage: node interop.js RTRAIND');
  process.exit(2);
}

const { xxh64 } = require('./xxh64');

// ---------------------------------------------------------------- harness
let passed = 0, failed = 0;
async function test(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

function startDaemon() {
  return new Promise((resolve, reject) => {
    const d = spawn(rtraind, ['--listen', '127.0.0.1:0', '--log-level', 'warn'],
                    { stdio: ['ignore', 'pipe', 'inherit'] });
    let buf = '';
    const timer = setTimeout(() => reject(new Error('daemon did not start')), 30000);
    d.stdout.on('data', (chunk) => {
      buf += chunk.toString();
      const m = buf.match(/rtraind listening on (\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc: d, addr: m[1] });
      }
    });
    d.on('error', (e) => reject(e));
    d.on('exit', (code) => reject(new Error(`daemon exited early (${code})`)));
  });
}

const unary = (client, method, req) => new Promise((resolve, reject) => {
  client[method](req, { deadline: Date.now() + 60000 }, (err, resp) => (err ? reject(err) : resolve(resp)));
});

function checkTimings(t, what) {
  assert.ok(t, `${what}: no timings`);
  const parts = ['queue_ns', 'decode_ns', 'compile_ns', 'execute_ns', 'encode_ns', 'other_ns']
    .map((k) => BigInt(t[k]));
  const sum = parts.reduce((a, b) => a + b, 0n);
  assert.strictEqual(sum, BigInt(t.total_ns), `${what}: parts ${sum} != total ${t.total_ns}`);
  assert.ok(BigInt(t.total_ns) > 0n, `${what}: total is 0`);
}

async function main() {
  const def = protoLoader.loadSync(path.join(root, 'proto', 'rtrain.proto'), {
    keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def).rtrain.v1;
  const { proc, addr } = await startDaemon();
  const client = new pkg.Trainer(addr, grpc.credentials.createInsecure(), {
    'grpc.max_receive_message_length': 64 << 20,
  });
  let sid = '', did = '', pid = '';

  await test('GetInfo', async () => {
    const r = await unary(client, 'GetInfo', {});
    assert.strictEqual(r.version, process.env.RT_VERSION, 'GetInfo version');
    assert.ok(r.engine_version >= 1);
    assert.strictEqual(r.devices.length, 1);
    assert.strictEqual(r.devices[0].kind, 'cpu');
    assert.ok(BigInt(r.devices[0].memory_bytes) > 1n << 28n);
    assert.ok(r.ops.includes('Dense') && r.ops.includes('Softmax'), `ops: ${r.ops}`);
    assert.ok(r.formats.includes('csv') && r.formats.includes('npy'));
    assert.ok(r.losses.includes('sparse_categorical_crossentropy'), `losses: ${r.losses}`);
    assert.ok(r.optimizers.includes('adam'));
    assert.strictEqual(BigInt(r.limits.max_message_bytes), 64n << 20n);
    checkTimings(r.timings, 'GetInfo');
  });

  await test('Ping echoes a payload of the asked size', async () => {
    const r = await unary(client, 'Ping', { payload: Buffer.from([7, 8, 9]), response_bytes: 1000 });
    assert.strictEqual(r.payload.length, 1000);
    for (let i = 0; i < 1000; i++) assert.strictEqual(r.payload[i], [7, 8, 9][i % 3]);
    checkTimings(r.timings, 'Ping');
  });

  await test('CreateSession', async () => {
    const r = await unary(client, 'CreateSession', { name: 'node-interop' });
    assert.match(r.session_id, /^s-[0-9a-f]{32}$/);
    sid = r.session_id;
  });

  await test('UploadDataset stream (iris CSV, XXH64 computed in JS)', async () => {
    const csv = fs.readFileSync(path.join(root, 'tests', 'integration', 'data', 'iris.csv'));
    const sum = xxh64(csv);
    const resp = await new Promise((resolve, reject) => {
      const call = client.UploadDataset((err, r) => (err ? reject(err) : resolve(r)));
      const chunk = 1024;
      for (let off = 0; off < csv.length; off += chunk) {
        const msg = { offset: String(off), data: csv.subarray(off, Math.min(off + chunk, csv.length)) };
        if (off === 0) {
          msg.header = {
            session_id: sid, name: 'iris',
            parts: [{ role: 'ROLE_BOTH', format: 'FORMAT_CSV', length: String(csv.length),
                      label_column: -1, csv_header: true }],
            total_bytes: String(csv.length),
          };
        }
        if (off + chunk >= csv.length) {
          msg.last = true;
          msg.checksum = sum.toString();
        }
        call.write(msg);
      }
      call.end();
    });
    assert.strictEqual(Number(resp.dataset.samples), 150);
    assert.deepStrictEqual(resp.dataset.x_shape.map(Number), [4]);
    assert.strictEqual(Number(resp.bytes_received), csv.length);
    assert.match(resp.dataset.dataset_id, /^d-[0-9a-f]{32}$/);
    did = resp.dataset.dataset_id;
    checkTimings(resp.timings, 'UploadDataset');
  });

  await test('UploadDataset with a wrong checksum is DATA_LOSS', async () => {
    const data = Buffer.from('1,2,3\n4,5,6\n');
    const err = await new Promise((resolve) => {
      const call = client.UploadDataset((e) => resolve(e));
      call.write({
        header: { session_id: sid, parts: [{ role: 'ROLE_BOTH', format: 'FORMAT_CSV', length: String(data.length), label_column: -1 }] },
        offset: '0', data, last: true, checksum: (xxh64(data) ^ 1n).toString(),
      });
      call.end();
    });
    assert.ok(err, 'expected an error');
    assert.strictEqual(err.code, grpc.status.DATA_LOSS);
    assert.match(err.details, /checksum/);
  });

  await test('Compile Keras JSON + RunSteps + Evaluate', async () => {
    const keras = fs.readFileSync(path.join(root, 'tests', 'integration', 'data', 'iris_sequential_keras2.json'), 'utf8');
    const config = { loss: 'sparse_categorical_crossentropy', optimizer: 'adam', learning_rate: 0.01,
                     batch_size: 16, seed: '3', metrics: ['accuracy'] };
    const c = await unary(client, 'Compile', { session_id: sid, keras_json: keras, config });
    assert.match(c.program_id, /^p-/);
    assert.strictEqual(Number(c.report.param_count), 4 * 32 + 32 + 32 * 3 + 3);
    assert.deepStrictEqual(c.report.output_shape.map(Number), [3]);
    pid = c.program_id;
    const e0 = await unary(client, 'Evaluate', { session_id: sid, program_id: pid, dataset_id: did });
    const r = await unary(client, 'RunSteps', { session_id: sid, program_id: pid, dataset_id: did,
                                                steps: '150', seq: '1', return_losses: true });
    assert.strictEqual(Number(r.global_step), 150);
    assert.strictEqual(r.losses.length, 150);
    const head = r.losses.slice(0, 10).reduce((a, b) => a + b) / 10;
    const tail = r.losses.slice(140).reduce((a, b) => a + b) / 10;
    assert.ok(tail < head, `loss did not fall: ${head} -> ${tail}`);
    checkTimings(r.timings, 'RunSteps');
    const again = await unary(client, 'RunSteps', { session_id: sid, program_id: pid, dataset_id: did,
                                                    steps: '150', seq: '1' });
    assert.strictEqual(again.replayed, true);
    assert.strictEqual(Number(again.global_step), 150);
    const e1 = await unary(client, 'Evaluate', { session_id: sid, program_id: pid, dataset_id: did });
    assert.ok(e1.metrics.loss < e0.metrics.loss, `eval loss ${e0.metrics.loss} -> ${e1.metrics.loss}`);
    assert.ok(e1.metrics.accuracy > 0.8, `accuracy ${e1.metrics.accuracy}`);
    console.log(`     keras iris via grpc-js: loss ${e0.metrics.loss.toFixed(3)} -> ${e1.metrics.loss.toFixed(3)}, accuracy ${e1.metrics.accuracy.toFixed(2)}`);
  });

  await test('Fit streams epoch ends', async () => {
    const events = await new Promise((resolve, reject) => {
      const got = [];
      const call = client.Fit({ session_id: sid, program_id: pid, dataset_id: did, epochs: 3, progress_every: 4 });
      call.on('data', (e) => got.push(e));
      call.on('error', reject);
      call.on('end', () => resolve(got));
    });
    const ends = events.filter((e) => e.event === 'epoch_end');
    assert.strictEqual(ends.length, 3);
    assert.ok(events[events.length - 1].done);
    checkTimings(events[events.length - 1].timings, 'Fit');
  });

  await test('errors: unknown session is NOT_FOUND naming it', async () => {
    await assert.rejects(unary(client, 'RunSteps', { session_id: 's-nope', program_id: pid, dataset_id: did, steps: '1' }),
                         (e) => e.code === grpc.status.NOT_FOUND && /s-nope/.test(e.details));
  });

  client.close();
  const code = await new Promise((resolve) => {
    proc.removeAllListeners('exit');
    proc.on('exit', (c) => resolve(c));
    proc.kill('SIGTERM');
  });
  await test('daemon exits 0 on SIGTERM', async () => assert.strictEqual(code, 0));
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.log(`FAIL setup: ${e && e.stack ? e.stack : e}`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
