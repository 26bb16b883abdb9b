// Health interop: @grpc/grpc-js with the upstream grpc.health.v1 proto
// (shipped by the grpc-health-check package, loaded by @grpc/proto-loader)
// against a real rtraind. Checks that proto/health.proto matches upstream,
// Check/List/Watch answers, NOT_SERVING while draining on SIGTERM (with
// --drain-ms the daemon still takes calls), and that open Watch streams do
// not hold up a stop.
'use strict';
const path = require('path');
const { spawn } = require('child_process');
const assert = require('assert');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const root = path.resolve(__dirname, '..', '..');
const rtraind = process.argv[2];
if (!rtraind) {
  console.error('usage: node health.js RTRAIND');
  process.exit(2);
}
const upstreamProto = require.resolve('grpc-health-check/proto/health/v1/health.proto');
const loadOpts = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true };

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

function startDaemon(extra) {
  return new Promise((resolve, reject) => {
    const d = spawn(rtraind, ['--listen', '127.0.0.1:0', '--log-level', 'info', ...extra],
                    { stdio: ['ignore', 'pipe', 'pipe'] });
    const out = { stdout: '', stderr: '' };
    d.stderr.on('data', (c) => { out.stderr += c.toString(); });
    // until the daemon has logged a line matching re: a log line and a gRPC
    // answer come through different pipes, in either order
    out.logged = (re) => new Promise((res, rej) => {
      if (re.test(out.stderr)) return res();
      const t = setTimeout(() => rej(new Error(`no ${re} in: ${out.stderr}`)), 60000);
      const on = () => { if (re.test(out.stderr)) { clearTimeout(t); d.stderr.off('data', on); res(); } };
      d.stderr.on('data', on);
    });
    const exited = new Promise((res) => d.on('exit', (code, sig) => res({ code, sig })));
    d.stdout.on('data', (chunk) => {
      out.stdout += chunk.toString();
      const m = out.stdout.match(/rtraind listening on (\S+)/);
      if (m) resolve({ proc: d, addr: m[1], out, exited });
    });
    d.on('error', reject);
    exited.then(({ code }) => reject(new Error(`daemon exited early (${code}): ${out.stderr}`)));
  });
}

const unary = (client, method, req) => new Promise((resolve, reject) => {
  client[method](req, { deadline: Date.now() + 30000 }, (err, resp) => (err ? reject(err) : resolve(resp)));
});

// A Watch stream whose messages can be awaited one at a time.
function watch(client, service) {
  const call = client.Watch({ service });
  const queue = [], waiters = [];
  let end = null;
  const settle = () => {
    while (waiters.length && (queue.length || end)) {
      const w = waiters.shift();
      if (queue.length) w.resolve(queue.shift());
      else w.reject(end);
    }
  };
  call.on('data', (m) => { queue.push(m.status); settle(); });
  call.on('error', (e) => { end = e; settle(); });
  call.on('end', () => { if (!end) end = new Error('stream ended'); settle(); });
  return {
    call,
    next: () => new Promise((resolve, reject) => { waiters.push({ resolve, reject }); settle(); }),
    ended: () => new Promise((resolve) => {
      if (end) return resolve(end);
      call.on('error', resolve);
      call.on('end', () => resolve(end || new Error('stream ended')));
    }),
  };
}

// The wire contract of a package definition: every message's fields (name,
// number, type, label) and every enum's values, and the service's methods.
function contract(def) {
  const out = {};
  for (const [name, t] of Object.entries(def)) {
    if (!name.startsWith('grpc.health.v1.')) continue;
    if (t.format === 'Protocol Buffer 3 DescriptorProto') {
      out[name] = t.type.field.map((f) => [f.name, f.number, f.type, f.label, f.typeName].join(':'))
        .sort();
    } else if (t.format === 'Protocol Buffer 3 EnumDescriptorProto') {
      out[name] = t.type.value.map((v) => `${v.name}=${v.number}`).sort();
    } else if (t.Check) {
      out[name] = Object.values(t).map((m) => [m.path, m.requestStream, m.responseStream].join(':'))
        .sort();
    }
  }
  return out;
}

async function main() {
  const upstream = protoLoader.loadSync(upstreamProto, loadOpts);
  const ours = protoLoader.loadSync(path.join(root, 'proto', 'health.proto'), loadOpts);
  const Health = grpc.loadPackageDefinition(upstream).grpc.health.v1.Health;
  const Trainer = grpc.loadPackageDefinition(
    protoLoader.loadSync(path.join(root, 'proto', 'rtrain.proto'), loadOpts)).rtrain.v1.Trainer;

  await test('proto/health.proto matches the upstream grpc.health.v1 definition', async () => {
    const a = contract(ours), b = contract(upstream);
    assert.ok(Object.keys(b).length >= 4, `upstream contract too small: ${Object.keys(b)}`);
    assert.deepStrictEqual(a, b);
  });

  // ---- a daemon that drains: NOT_SERVING while it still takes calls
  const d = await startDaemon(['--drain-ms', '600000', '--grace-ms', '600000']);
  const health = new Health(d.addr, grpc.credentials.createInsecure());
  const trainer = new Trainer(d.addr, grpc.credentials.createInsecure());

  await test('Check: the daemon and rtrain.v1.Trainer are SERVING', async () => {
    assert.strictEqual((await unary(health, 'Check', { service: '' })).status, 'SERVING');
    assert.strictEqual((await unary(health, 'Check', { service: 'rtrain.v1.Trainer' })).status,
                       'SERVING');
  });

  await test('Check of an unknown service is NOT_FOUND naming it', async () => {
    await assert.rejects(unary(health, 'Check', { service: 'no.such.Service' }), (e) => {
      assert.strictEqual(e.code, grpc.status.NOT_FOUND);
      assert.match(e.details, /no\.such\.Service/);
      return true;
    });
  });

  await test('List reports both services', async () => {
    const r = await unary(health, 'List', {});
    assert.deepStrictEqual(Object.keys(r.statuses).sort(), ['', 'rtrain.v1.Trainer']);
    for (const v of Object.values(r.statuses)) assert.strictEqual(v.status, 'SERVING');
  });

  const w = watch(health, '');
  const wu = watch(health, 'no.such.Service');
  await test('Watch sends the current status at once; an unknown service is SERVICE_UNKNOWN', async () => {
    assert.strictEqual(await w.next(), 'SERVING');
    assert.strictEqual(await wu.next(), 'SERVICE_UNKNOWN');
  });

  await test('SIGTERM: Watch sees NOT_SERVING, Check says NOT_SERVING, calls still work', async () => {
    d.proc.kill('SIGTERM');
    assert.strictEqual(await w.next(), 'NOT_SERVING');
    assert.strictEqual((await unary(health, 'Check', { service: '' })).status, 'NOT_SERVING');
    const r = await unary(health, 'List', {});
    assert.strictEqual(r.statuses[''].status, 'NOT_SERVING');
    const p = await unary(trainer, 'Ping', { payload: Buffer.from([1, 2, 3]), response_bytes: 3 });
    assert.deepStrictEqual([...p.payload], [1, 2, 3]);
    await d.out.logged(/draining/);
  });

  await test('a second SIGTERM stops it: Watch streams end UNAVAILABLE, exit 0', async () => {
    d.proc.kill('SIGTERM');
    for (const s of [w, wu]) {
      const e = await s.ended();
      assert.strictEqual(e.code, grpc.status.UNAVAILABLE, `ended with ${e.code}: ${e.message}`);
    }
    const { code } = await d.exited;
    assert.strictEqual(code, 0);
    // Open Watch streams must not have held the stop until the grace period.
    assert.doesNotMatch(d.out.stderr, /grace period over/);
  });
  health.close();
  trainer.close();

  // ---- no drain period: the Watch stream still sees NOT_SERVING first
  const d2 = await startDaemon(['--grace-ms', '600000']);
  const h2 = new Health(d2.addr, grpc.credentials.createInsecure());
  await test('SIGTERM without --drain-ms: NOT_SERVING, then UNAVAILABLE, prompt exit 0', async () => {
    const w2 = watch(h2, 'rtrain.v1.Trainer');
    assert.strictEqual(await w2.next(), 'SERVING');
    d2.proc.kill('SIGTERM');
    assert.strictEqual(await w2.next(), 'NOT_SERVING');
    const e = await w2.ended();
    assert.strictEqual(e.code, grpc.status.UNAVAILABLE);
    const { code } = await d2.exited;
    assert.strictEqual(code, 0);
    assert.doesNotMatch(d2.out.stderr, /grace period over/);
  });
  h2.close();

  // ---- with --tokens: the health service answers without a token (probes
  // and load balancers have none), Trainer calls still need one
  const os = require('os');
  const fs = require('fs');
  const { execFileSync } = require('child_process');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rtrain-health-'));
  const tokens = path.join(dir, 'tokens.txt');
  fs.writeFileSync(tokens, execFileSync(rtraind, ['--new-token', 'alice'],
                                        { stdio: ['ignore', 'pipe', 'ignore'] }));
  const d3 = await startDaemon(['--tokens', tokens]);
  const h3 = new Health(d3.addr, grpc.credentials.createInsecure());
  const t3 = new Trainer(d3.addr, grpc.credentials.createInsecure());
  await test('with --tokens, Check needs no token while Ping does', async () => {
    assert.strictEqual((await unary(h3, 'Check', { service: 'rtrain.v1.Trainer' })).status,
                       'SERVING');
    await assert.rejects(unary(t3, 'Ping', {}), (e) => e.code === grpc.status.UNAUTHENTICATED);
  });
  h3.close();
  t3.close();
  d3.proc.kill('SIGTERM');
  await d3.exited;
  fs.rmSync(dir, { recursive: true, force: true });

  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
