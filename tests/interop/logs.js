// --log-format json, read by a program that did not write it: every stderr
// line of rtraind must be one JSON object; each finished call is a line
// with ts, level, principal, session (an id prefix), method, status, code
// and duration_ms; a client-chosen string in an error (a session id with
// quotes, a newline and a control character) stays inside its field.
'use strict';
const path = require('path');
const { spawn } = require('child_process');
const assert = require('assert');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const root = path.resolve(__dirname, '..', '..');
const rtraind = process.argv[2];
if (!rtraind) {
  console.error('usage: node logs.js RTRAIND');
  process.exit(2);
}

const unary = (client, method, req) => new Promise((resolve, reject) => {
  client[method](req, { deadline: Date.now() + 30000 }, (err, resp) => (err ? reject(err) : resolve(resp)));
});

async function main() {
  const def = protoLoader.loadSync(path.join(root, 'proto', 'rtrain.proto'), {
    keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  const Trainer = grpc.loadPackageDefinition(def).rtrain.v1.Trainer;
  const d = spawn(rtraind, ['--listen', '127.0.0.1:0', '--log-format', 'json'],
                  { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  d.stderr.on('data', (c) => { stderr += c.toString(); });
  const exited = new Promise((res) => d.on('exit', (code) => res(code)));
  const addr = await new Promise((resolve, reject) => {
    let out = '';
    d.stdout.on('data', (c) => {
      out += c.toString();
      const m = out.match(/rtraind listening on (\S+)/);
      if (m) resolve(m[1]);
    });
    exited.then((code) => reject(new Error(`daemon exited (${code}): ${stderr}`)));
  });
  const client = new Trainer(addr, grpc.credentials.createInsecure());
  await unary(client, 'Ping', { response_bytes: 4 });
  const s = await unary(client, 'CreateSession', { name: 'logs test' });
  const weird = 'x"y\n\u0001z\\w';
  await assert.rejects(unary(client, 'CloseSession', { session_id: weird }),
                       (e) => e.code === grpc.status.NOT_FOUND);
  await unary(client, 'CloseSession', { session_id: s.session_id });
  client.close();
  d.kill('SIGTERM');
  assert.strictEqual(await exited, 0);

  const lines = stderr.split('\n').filter((l) => l.length);
  assert.ok(lines.length >= 6, `too few log lines:\n${stderr}`);
  const recs = lines.map((l) => {
    try {
      return JSON.parse(l);
    } catch (e) {
      throw new Error(`not one JSON object: ${JSON.stringify(l)}`);
    }
  });
  for (const r of recs) {
    assert.match(r.ts, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    assert.ok(['error', 'warn', 'info', 'debug'].includes(r.level), r.level);
    assert.ok('msg' in r || 'method' in r, JSON.stringify(r));
  }
  const calls = recs.filter((r) => r.method);
  const by = (m) => calls.filter((r) => r.method === `/rtrain.v1.Trainer/${m}`);
  assert.strictEqual(by('Ping').length, 1);
  const ping = by('Ping')[0];
  assert.deepStrictEqual(Object.keys(ping).sort(),
                         ['code', 'duration_ms', 'level', 'method', 'principal', 'session',
                          'status', 'ts'].sort());
  assert.strictEqual(ping.status, 'OK');
  assert.strictEqual(ping.code, 0);
  assert.strictEqual(ping.level, 'info');
  // Without --tokens the daemon is single-user: every call is 'local'.
  assert.strictEqual(ping.principal, 'local');
  assert.strictEqual(ping.session, '');
  assert.ok(typeof ping.duration_ms === 'number' && ping.duration_ms >= 0);

  const prefix = s.session_id.slice(0, 8);
  assert.strictEqual(by('CreateSession')[0].session, prefix);
  const closes = by('CloseSession');
  assert.strictEqual(closes.length, 2);
  const bad = closes.find((r) => r.code !== 0);
  assert.strictEqual(bad.status, 'NOT_FOUND');
  assert.strictEqual(bad.code, 5);
  assert.strictEqual(bad.session, weird.slice(0, 8));
  assert.ok(bad.error.includes(weird), `error field: ${JSON.stringify(bad.error)}`);
  const good = closes.find((r) => r.code === 0);
  assert.strictEqual(good.session, prefix);
  assert.ok(!('error' in good));
  // The full session id (a capability) is never in a call line.
  for (const r of calls) assert.ok(!JSON.stringify(r).includes(s.session_id), JSON.stringify(r));
  console.log('1 passed, 0 failed');
}

main().catch((e) => {
  console.error(e);
  console.log('0 passed, 1 failed');
  process.exit(1);
});
