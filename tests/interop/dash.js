// The dashboard in a real browser: Debian's headless chromium, driven by
// puppeteer-core, against a real rtraind (--tokens, two principals) while a
// real Fit runs, its calls made with @grpc/grpc-js. Checks:
//   - the page loads with no console error, failed request or page error;
//   - a running fit's curve gains each epoch's point, with the loss the
//     client received in that EpochEnd (waits for the client's events and
//     for the page, never a timer);
//   - a call's waterfall parts are the Timings the client received, and add
//     up to its total; client-side parts are shown as not reported;
//   - principal B (signed in through the login form's cookie) sees none of
//     principal A's sessions, programs, datasets or calls, in the page or
//     the JSON; no token: 401 and the login page;
//   - keyboard: skip link, Tab to a call's button, Enter shows its
//     breakdown; every button, link, image and input has a name.
// Screenshots and the measurements (page weight, first paint, epoch-to-point
// delay) go to $DASH_ARTIFACTS. Chromium missing is a failure, not a skip.
'use strict';
const path = require('path');
const fs = require('fs');
const os = require('os');
const crypto = require('crypto');
const http = require('http');
const { spawn } = require('child_process');
const assert = require('assert');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const puppeteer = require('puppeteer-core');
const { xxh64 } = require('./xxh64');
const { test, counts } = require('./harness');

const root = path.resolve(__dirname, '..', '..');
const rtraind = process.argv[2];
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
const artifacts = process.env.DASH_ARTIFACTS || fs.mkdtempSync(path.join(os.tmpdir(), 'rtrain-dash-'));
fs.mkdirSync(artifacts, { recursive: true });


function startDaemon(args) {
  return new Promise((resolve, reject) => {
    const d = spawn(rtraind, ['--listen', '127.0.0.1:0', '--metrics-listen', '127.0.0.1:0',
                              '--log-level', 'warn', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let buf = '';
    const exited = new Promise((r) => d.on('exit', r));
    // a failed check ends this process: the daemon goes with it
    process.on('exit', () => d.kill('SIGKILL'));
    d.stdout.on('data', (chunk) => {
      buf += chunk.toString();
      const a = buf.match(/rtraind listening on (\S+)/);
      const m = buf.match(/rtraind metrics on http:\/\/(\S+)\/metrics/);
      if (a && m) resolve({ proc: d, addr: a[1], http: m[1], exited });
    });
    d.on('error', reject);
    exited.then((code) => reject(new Error(`daemon exited early (${code})`)));
  });
}

const unary = (client, method, req, md) => new Promise((resolve, reject) => {
  client[method](req, md, { deadline: Date.now() + 60000 }, (err, resp) => (err ? reject(err) : resolve(resp)));
});

function token() {
  const t = crypto.randomBytes(32).toString('hex');
  return { token: t, hash: crypto.createHash('sha256').update(t).digest('hex') };
}

// A fetch from node (not the page), with optional headers.
async function get(http, url, headers) {
  const r = await fetch(`http://${http}${url}`, { headers: headers || {}, redirect: 'manual' });
  return { status: r.status, headers: r.headers, text: await r.text() };
}

async function main() {
  if (!fs.existsSync(chromium)) {
    console.log(`FAIL setup: ${chromium} is not installed (scripts/deps.sh --test installs Debian's chromium)`);
    process.exit(1);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rtrain-dash-'));
  const alice = token(), bob = token();
  const tokens = path.join(dir, 'tokens.txt');
  fs.writeFileSync(tokens, `${alice.hash} alice\n${bob.hash} bob\n`);
  const d = await startDaemon(['--tokens', tokens]);
  const def = protoLoader.loadSync(path.join(root, 'proto', 'rtrain.proto'), {
    keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def).rtrain.v1;
  const client = new pkg.Trainer(d.addr, grpc.credentials.createInsecure());
  const mdA = new grpc.Metadata(), mdB = new grpc.Metadata();
  mdA.set('authorization', `Bearer ${alice.token}`);
  mdB.set('authorization', `Bearer ${bob.token}`);

  // ---- alice: a session, iris, a program, Pings and RunSteps at two K
  const sa = await unary(client, 'CreateSession', { name: 'alice-private-notebook' }, mdA);
  const sidA = sa.session_id;
  const csv = fs.readFileSync(path.join(root, 'tests', 'integration', 'data', 'iris.csv'));
  const up = await new Promise((resolve, reject) => {
    const call = client.UploadDataset(mdA, (err, r) => (err ? reject(err) : resolve(r)));
    call.write({ header: { session_id: sidA, name: 'iris',
                           parts: [{ role: 'ROLE_BOTH', format: 'FORMAT_CSV', length: String(csv.length),
                                     label_column: -1, csv_header: true }],
                           total_bytes: String(csv.length) },
                 offset: '0', data: csv, last: true, checksum: xxh64(csv).toString() });
    call.end();
  });
  const didA = up.dataset.dataset_id;
  const keras = fs.readFileSync(path.join(root, 'tests', 'integration', 'data', 'iris_sequential_keras2.json'), 'utf8');
  const comp = await unary(client, 'Compile', { session_id: sidA, keras_json: keras, config: {
    loss: 'sparse_categorical_crossentropy', optimizer: 'adam', learning_rate: 0.01, batch_size: 128,
    seed: '3', metrics: ['accuracy'] } }, mdA);
  const pidA = comp.program_id;
  for (let i = 0; i < 5; i++) await unary(client, 'Ping', {}, mdA);
  let seq = 1;
  for (const k of [1, 1, 1, 10, 10, 10])
    await unary(client, 'RunSteps', { session_id: sidA, program_id: pidA, dataset_id: didA, steps: String(k), seq: String(seq++) }, mdA);
  // ---- bob: a session of his own
  const sb = await unary(client, 'CreateSession', { name: 'bob-notebook' }, mdB);
  await unary(client, 'Ping', {}, mdB);

  // ---- alice's long fit, stopped by Control once the checks are done
  const epochs = [];          // EpochEnds as the client received them
  const waiters = [];
  const fitDone = new Promise((resolve, reject) => {
    const call = client.Fit({ session_id: sidA, program_id: pidA, dataset_id: didA, epochs: 500,
                              steps_per_epoch: 20000, progress_every: 0 }, mdA);
    call.on('data', (e) => {
      if (e.event !== 'epoch_end') return;
      epochs.push({ epoch: Number(e.epoch_end.epoch), loss: e.epoch_end.train.loss, t: Date.now() });
      for (const w of waiters.splice(0)) w();
    });
    call.on('error', reject);
    call.on('end', resolve);
  });
  let fitErr = null;
  fitDone.catch((e) => { fitErr = e; for (const w of waiters.splice(0)) w(); });
  const epochAfter = (n) => new Promise((resolve, reject) => {
    const check = () => {
      if (fitErr) return reject(fitErr);
      return epochs.length > n ? resolve(epochs[n]) : waiters.push(check);
    };
    check();
  });

  // A Ping, once the page shows it (its state names the call by its total).
  const pingShown = async (page) => {
    const r = await unary(client, 'Ping', {}, mdA);
    await page.waitForFunction((tot) => window.__rt.state &&
      window.__rt.state.calls.some((x) => x.method === 'Ping' && x.timings && x.timings.total_ns === tot),
    {}, Number(r.timings.total_ns));
  };

  const browser = await puppeteer.launch({
    executablePath: chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-extensions'],
  });
  const problems = [];
  const watch = (page, who) => {
    page.on('console', (m) => { if (m.type() === 'error') problems.push(`${who} console: ${m.text()}`); });
    page.on('pageerror', (e) => problems.push(`${who} page error: ${e.message}`));
    page.on('requestfailed', (r) => {
      // the event stream is cut when the page goes away; nothing else may fail
      if (!r.url().endsWith('/api/events')) problems.push(`${who} request failed: ${r.url()} ${r.failure() && r.failure().errorText}`);
    });
  };
  const base = `http://${d.http}`;
  const measures = {};

  // ---------------------------------------------------------------- alice
  const pa = await browser.newPage();
  watch(pa, 'alice');
  await pa.setViewport({ width: 1280, height: 1400 });
  await pa.setExtraHTTPHeaders({ Authorization: `Bearer ${alice.token}` });
  await test('the page loads with no console error (alice, token in a header)', async () => {
    const r = await pa.goto(base + '/', { waitUntil: 'load' });
    assert.strictEqual(r.status(), 200);
    await pa.waitForFunction(() => window.__rt && window.__rt.renders > 0 && window.uPlot);
    await pa.waitForFunction(() => document.getElementById('live').textContent === 'live');
    const who = await pa.$eval('#who', (e) => e.textContent);
    assert.match(who, /^alice/);
    const perf = await pa.evaluate(() => {
      const nav = performance.getEntriesByType('navigation')[0];
      const res = performance.getEntriesByType('resource').filter((e) => !e.name.endsWith('/api/events'));
      const paint = Object.fromEntries(performance.getEntriesByType('paint').map((e) => [e.name, e.startTime]));
      return { doc: nav.encodedBodySize, assets: res.map((e) => [new URL(e.name).pathname, e.encodedBodySize]), paint };
    });
    // what the first load fetched: the page, its files and the first state
    const once = new Map();
    for (const [p, n] of perf.assets) if (!once.has(p)) once.set(p, n);
    measures.page_files = [['/', perf.doc], ...once];
    measures.page_bytes = measures.page_files.reduce((a, [, n]) => a + n, 0);
    measures.first_paint_ms = perf.paint['first-paint'];
    measures.first_contentful_paint_ms = perf.paint['first-contentful-paint'];
    assert.deepStrictEqual(problems, []);
  });

  await test("alice's page shows her session, program (with compile passes) and dataset", async () => {
    await pa.waitForFunction((p) => document.getElementById('prog-table').textContent.includes(p), {}, pidA.slice(0, 10));
    const text = await pa.evaluate(() => document.body.innerText);
    assert.ok(text.includes(sidA.slice(0, 10)), 'session id prefix');
    assert.ok(text.includes('alice-private-notebook'));
    assert.ok(text.includes(didA.slice(0, 10)), 'dataset id prefix');
    for (const pass of ['validate', 'infer_shapes', 'fuse', 'backward', 'choose_kernels', 'plan_memory'])
      assert.ok(text.includes(pass), `compile pass ${pass}`);
    assert.ok(!text.includes(sidA), 'the full session id (a capability) is never shown');
    const st = await pa.evaluate(() => window.__rt.state);
    assert.strictEqual(Number(st.programs[0].report.param_count), 4 * 32 + 32 + 32 * 3 + 3);
    assert.deepStrictEqual(st.k_sweep.map((k) => [k.k, k.calls]), [[1, 3], [10, 3]]);
    assert.ok(st.ping_floor.calls >= 5);
  });

  await test("a running fit's curve gains each epoch's point with the client's loss", async () => {
    const first = await epochAfter(0);
    assert.strictEqual(first.epoch, 1);
    await pa.waitForFunction(() => document.querySelector('.fit[data-state="running"] .chart[data-points]'));
    const seen = [];
    for (let i = 0; i < 4; i++) {
      // the next epoch the client will receive, then the page's point for it
      const n = epochs.length;
      const e = await epochAfter(n);
      await pa.waitForFunction((k) => {
        const c = document.querySelector('.fit[data-state="running"] .chart');
        return c && Number(c.dataset.lastEpoch) >= k;
      }, {}, e.epoch);
      const got = await pa.evaluate((k) => {
        const f = window.__rt.state.fits.find((x) => x.running);
        const ch = window.__rt.charts[f.id];
        const i = ch.data[0].indexOf(k);
        const p = f.points.find((x) => x.epoch === k);
        return { xs: ch.data[0], loss: ch.data[1][i], seen: window.__rt.pointSeen[f.id][k], t_ms: p.t_ms,
                 state: document.getElementById('fit-' + f.id).dataset.state };
      }, e.epoch);
      assert.strictEqual(got.state, 'running');
      // every epoch from the first, in order: none left out
      assert.deepStrictEqual(got.xs, Array.from({ length: got.xs.length }, (_, j) => j + 1));
      assert.ok(got.xs.length >= e.epoch, `epoch ${e.epoch}: ${got.xs.length} points`);
      assert.strictEqual(got.loss, e.loss, `epoch ${e.epoch}: the page's loss is not the client's`);
      seen.push({ epoch: e.epoch, daemon_to_page_ms: got.seen - got.t_ms, client_to_page_ms: got.seen - e.t });
    }
    measures.epoch_to_point = seen;
  });

  await test('the waterfall of a Ping adds up to the Timings the client received', async () => {
    const t0 = process.hrtime.bigint();
    const r = await unary(client, 'Ping', { payload: Buffer.alloc(100) }, mdA);
    const rtt = process.hrtime.bigint() - t0;
    const t = r.timings;
    const total = BigInt(t.total_ns);
    assert.ok(total > 0n && total <= rtt, `daemon total ${total} within the client's round trip ${rtt}`);
    const callSeq = await pa.waitForFunction((tot) => {
      const c = window.__rt.state && window.__rt.state.calls.findLast((x) => x.method === 'Ping' && x.timings && x.timings.total_ns === tot);
      return c && c.seq;
    }, { timeout: 20000 }, Number(t.total_ns)).then((h) => h.jsonValue()).catch(async (e) => {
      const st = await pa.evaluate(() => window.__rt.state && window.__rt.state.calls.slice(-3));
      throw new Error(`no Ping of total ${t.total_ns} on the page; its last calls: ${JSON.stringify(st)} (${e.message})`);
    });
    // by keyboard: focus its button, Enter
    await pa.focus(`#call-table tr[data-seq="${callSeq}"] button`);
    await pa.keyboard.press('Enter');
    await pa.waitForFunction((s) => document.getElementById('wf').dataset.seq === String(s), {}, callSeq);
    const wf = await pa.evaluate(() => {
      const parts = [...document.querySelectorAll('#wf rect[data-part]')].map((r) => ({
        part: r.dataset.part, ns: r.dataset.ns, x: Number(r.getAttribute('x')), w: Number(r.getAttribute('width')) }));
      const tot = document.querySelector('#wf rect[data-total-ns]');
      const nr = [...document.querySelectorAll('#wf [data-reported="false"]')].map((e) => e.dataset.part);
      return { parts, total: tot.dataset.totalNs, totalW: Number(tot.getAttribute('width')), x0: Number(tot.getAttribute('x')), nr };
    });
    const want = { queue: t.queue_ns, decode: t.decode_ns, compile: t.compile_ns, execute: t.execute_ns, encode: t.encode_ns, other: t.other_ns };
    assert.deepStrictEqual(Object.fromEntries(wf.parts.map((p) => [p.part, p.ns])), want);
    const sum = wf.parts.reduce((a, p) => a + BigInt(p.ns), 0n);
    assert.strictEqual(sum, total, `parts ${sum} != total ${total}`);
    assert.strictEqual(BigInt(wf.total), total);
    assert.deepStrictEqual(wf.nr, ['client_encode', 'wire']);
    // drawn end to end: each part starts where the one before ended
    let x = wf.x0;
    for (const p of wf.parts) {
      assert.ok(Math.abs(p.x - x) < 1e-6, `${p.part} starts at ${p.x}, not ${x}`);
      x += Number(p.ns) === 0 ? 0 : p.w;
    }
    assert.ok(Math.abs(x - (wf.x0 + wf.totalW)) <= 0.5 * wf.parts.length, `parts end at ${x}, total at ${wf.x0 + wf.totalW}`);
    measures.ping = { client_round_trip_ns: Number(rtt), daemon_total_ns: Number(total) };
    await pa.screenshot({ path: path.join(artifacts, 'dashboard-alice.png'), fullPage: true });
  });

  await test('keyboard: the skip link comes first, every control and image has a name', async () => {
    // a fresh load: the first Tab starts from the top of the document
    await pa.goto(base + '/', { waitUntil: 'load' });
    await pa.waitForFunction(() => window.__rt && window.__rt.renders > 0 && document.querySelector('#call-table tr[data-seq] button'));
    await pa.keyboard.press('Tab');
    const first = await pa.evaluate(() => document.activeElement.textContent);
    assert.strictEqual(first, 'Skip to content');
    await pa.keyboard.press('Enter');
    await pa.waitForFunction(() => location.hash === '#main');
    // Tab reaches a call's button, and Space on it shows that call
    let found = null;
    for (let i = 0; i < 100 && !found; i++) {
      await pa.keyboard.press('Tab');
      found = await pa.evaluate(() => {
        const a = document.activeElement;
        const tr = a && a.closest('#call-table tr[data-seq]');
        return tr ? tr.dataset.seq : null;
      });
    }
    assert.ok(found, 'Tab never reached a call button');
    // the page redraws for new calls: the focus stays where it was
    for (let i = 0; i < 2; i++) await pingShown(pa);
    const still = await pa.evaluate(() => {
      const tr = document.activeElement && document.activeElement.closest('#call-table tr[data-seq]');
      return tr ? tr.dataset.seq : null;
    });
    assert.strictEqual(still, found, 'a redraw took the focus away');
    await pa.keyboard.press('Space');
    await pa.waitForFunction((s) => document.getElementById('wf').dataset.seq === s, {}, found);
    const snap = await pa.accessibility.snapshot({ interestingOnly: true });
    const nameless = [];
    const walk = (n) => {
      if (['button', 'link', 'img', 'textbox', 'table'].includes(n.role) && !(n.name && n.name.trim())) nameless.push(n.role);
      for (const c of n.children || []) walk(c);
    };
    walk(snap);
    assert.deepStrictEqual(nameless, []);
    const imgs = await pa.$$eval('[role="img"]', (es) => es.map((e) => e.getAttribute('aria-label') || ''));
    assert.ok(imgs.length >= 2 && imgs.every((l) => l.length > 10), `images: ${JSON.stringify(imgs)}`);
    assert.ok(imgs.some((l) => /^Loss per epoch/.test(l)) && imgs.some((l) => /^Waterfall/.test(l)));
  });

  // ------------------------------------------------------------------ bob
  const pb = await browser.newPage();
  watch(pb, 'bob');
  await pb.setViewport({ width: 1280, height: 1000 });
  await test('without a token the page sends to the login form; a bad token is refused', async () => {
    const r = await pb.goto(base + '/', { waitUntil: 'load' });
    assert.strictEqual(new URL(pb.url()).pathname, '/login');
    assert.strictEqual(r.status(), 200);
    const label = await pb.$eval('label[for="token"]', (e) => e.textContent);
    assert.match(label, /Token/);
    await pb.screenshot({ path: path.join(artifacts, 'dashboard-login.png') });
    const bad = await get(d.http, '/login', {});
    assert.strictEqual(bad.status, 200);
    const anon = await get(d.http, '/api/state');
    assert.strictEqual(anon.status, 401);
    const wrong = await get(d.http, '/api/state', { Authorization: `Bearer ${'0'.repeat(64)}` });
    assert.strictEqual(wrong.status, 401);
    const post = await fetch(`${base}/login`, { method: 'POST', body: 'token=nope', redirect: 'manual',
                                                headers: { 'Content-Type': 'application/x-www-form-urlencoded' } });
    assert.strictEqual(post.status, 401);
    assert.strictEqual(post.headers.get('set-cookie'), null);
    assert.match(await post.text(), /role="alert"[^>]*>That token is not accepted/);
  });

  await test("bob (signed in by the form's cookie) cannot see alice's session, page or JSON", async () => {
    await pb.type('#token', bob.token);
    await Promise.all([pb.waitForNavigation({ waitUntil: 'load' }), pb.keyboard.press('Enter')]);
    assert.strictEqual(new URL(pb.url()).pathname, '/');
    const cookies = await pb.cookies();
    const c = cookies.find((x) => x.name === 'rt_token');
    assert.ok(c && c.httpOnly && c.sameSite === 'Strict', `cookie ${JSON.stringify(c)}`);
    assert.strictEqual(await pb.evaluate(() => document.cookie), '', 'the page script cannot read the token');
    await pb.waitForFunction(() => window.__rt && window.__rt.renders > 0);
    await pb.waitForFunction((s) => document.getElementById('sess-table').textContent.includes(s), {}, sb.session_id.slice(0, 10));
    const secrets = [sidA.slice(0, 10), pidA.slice(0, 10), didA.slice(0, 10), 'alice'];
    const text = await pb.evaluate(() => document.body.innerText);
    const json = await pb.evaluate(() => fetch('/api/state').then((r) => r.text()));
    const viaHeader = (await get(d.http, '/api/state', { Authorization: `Bearer ${bob.token}` })).text;
    for (const s of secrets)
      for (const [what, body] of [['page', text], ['JSON (cookie)', json], ['JSON (header)', viaHeader]])
        assert.ok(!body.includes(s), `bob's ${what} shows ${s}`);
    const st = JSON.parse(json);
    assert.strictEqual(st.principal, 'bob');
    assert.deepStrictEqual(st.sessions.map((s) => s.name), ['bob-notebook']);
    assert.deepStrictEqual(st.fits, []);
    assert.ok(st.calls.length >= 2 && st.calls.every((x) => x.principal === 'bob'));
    // alice's view has her own session and not bob's
    const a = JSON.parse((await get(d.http, '/api/state', { Authorization: `Bearer ${alice.token}` })).text);
    assert.ok(a.sessions.some((s) => s.name === 'alice-private-notebook'));
    assert.ok(!JSON.stringify(a).includes(sb.session_id.slice(0, 10)));
    await pb.screenshot({ path: path.join(artifacts, 'dashboard-bob.png'), fullPage: true });
    // signing out: the cookie goes, and the page asks for a token again
    await Promise.all([pb.waitForNavigation({ waitUntil: 'load' }), pb.click('#logout')]);
    assert.strictEqual(new URL(pb.url()).pathname, '/login');
    assert.ok(!(await pb.cookies()).some((x) => x.name === 'rt_token'), 'the cookie is still there');
    await pb.goto(base + '/', { waitUntil: 'load' });
    assert.strictEqual(new URL(pb.url()).pathname, '/login');
  });

  await test('the dashboard is read-only: no method but GET (and the login form)', async () => {
    for (const m of ['POST', 'PUT', 'DELETE']) {
      const r = await fetch(`${base}/api/state`, { method: m, headers: { Authorization: `Bearer ${alice.token}` } });
      assert.strictEqual(r.status, 405, m);
    }
  });

  // ---- stop the fit; the page shows it ended
  await test('a stopped fit shows as ended', async () => {
    const r = await unary(client, 'Control', { session_id: sidA, program_id: pidA, stop: true }, mdA);
    assert.strictEqual(r.running, true);
    await fitDone;
    await pa.bringToFront(); // a page in the background is not animated: raf polling stops
    await pa.waitForFunction(() => document.querySelector('.fit') && !document.querySelector('.fit[data-state="running"]'));
    assert.deepStrictEqual(problems, []);
  });

  fs.writeFileSync(path.join(artifacts, 'measurements.json'), JSON.stringify(measures, null, 2) + '\n');
  const delays = (measures.epoch_to_point || []).map((x) => x.daemon_to_page_ms.toFixed(1)).join(', ');
  console.log(`     page weight ${measures.page_bytes} bytes (${(measures.page_files || []).map(([p, n]) => `${p} ${n}`).join(', ')})`);
  console.log(`     first paint ${measures.first_paint_ms} ms, first contentful paint ${measures.first_contentful_paint_ms} ms`);
  console.log(`     epoch end (daemon) to point drawn: ${delays} ms; artifacts in ${artifacts}`);

  await browser.close();
  client.close();
  d.proc.kill('SIGTERM');
  const code = await d.exited;
  await test('daemon exits 0 on SIGTERM with the page open before', async () => assert.strictEqual(code, 0));
  // ---- without --tokens: single-user, loopback peers and names only
  const d2 = await startDaemon([]);
  const hostGet = (host) => new Promise((resolve, reject) => {
    const [h, port] = d2.http.split(':');
    http.get({ host: h, port, path: '/api/state', headers: { Host: host } }, (r) => {
      let body = '';
      r.on('data', (c) => { body += c; });
      r.on('end', () => resolve({ status: r.statusCode, body }));
    }).on('error', reject);
  });
  await test('without --tokens the page is everyone\'s on loopback, and refused to another Host', async () => {
    const ok = await hostGet(d2.http);
    assert.strictEqual(ok.status, 200);
    assert.strictEqual(JSON.parse(ok.body).principal, 'local');
    assert.strictEqual((await hostGet(`localhost:${d2.http.split(':')[1]}`)).status, 200);
    const rebound = await hostGet('rebound.example:80');
    assert.strictEqual(rebound.status, 403);
    assert.match(rebound.body, /loopback only/);
    const login = await fetch(`http://${d2.http}/login`, { method: 'POST', body: 'token=x' });
    assert.strictEqual(login.status, 405, 'no login without tokens');
  });
  d2.proc.kill('SIGTERM');
  await d2.exited;

  fs.rmSync(dir, { recursive: true, force: true });
  const { passed, failed } = counts();
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  const { passed, failed } = counts();
  console.log(`FAIL setup: ${e && e.stack ? e.stack : e}`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
