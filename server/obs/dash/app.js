// The rtraind dashboard: reads /api/state when /api/events says it changed,
// and draws it. Data goes into the page only as text (textContent), never as
// markup. Read-only: nothing here sends anything but GETs.
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === 'class') e.className = attrs[k];
      else if (k === 'text') e.textContent = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    for (const c of kids) e.append(c);
    return e;
  };
  const SVG = 'http://www.w3.org/2000/svg';
  const svg = (tag, attrs) => {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  };
  const fmtNs = (ns) => {
    ns = Number(ns);
    if (ns >= 1e9) return (ns / 1e9).toFixed(2) + ' s';
    if (ns >= 1e6) return (ns / 1e6).toFixed(2) + ' ms';
    if (ns >= 1e3) return (ns / 1e3).toFixed(1) + ' µs';
    return ns + ' ns';
  };
  const fmtBytes = (b) => {
    b = Number(b);
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(1) : b) + ' ' + u[i];
  };
  const fmtNum = (n) => Number(n).toLocaleString('en');
  const CODES = ['OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND',
    'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED',
    'OUT_OF_RANGE', 'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED'];

  // What tests and people may inspect: the last state, the charts, and
  // when each fit's epoch was first drawn (ms since the Unix epoch).
  const rt = window.__rt = { state: null, charts: {}, pointSeen: {}, renders: 0, selected: null };

  // Only a change is written: a live region then speaks only news.
  function setText(e, t) { if (e.textContent !== t) e.textContent = t; }
  function fill(tbody, rows) {
    tbody.replaceChildren(...rows);
  }
  function td(text, cls) { return el('td', cls ? { class: cls, text } : { text }); }

  // ------------------------------------------------------------------ fits
  function renderFits(st) {
    const list = $('fit-list');
    $('fits-empty').hidden = st.fits.length > 0;
    const keep = new Set();
    for (const f of st.fits) {
      const key = 'fit-' + f.id;
      keep.add(key);
      let box = $(key);
      if (!box) {
        box = el('article', { id: key, class: 'fit', 'aria-labelledby': key + '-h' },
          el('h3', { id: key + '-h' }),
          el('p', { id: key + '-s', class: 'note' }),
          el('div', { id: key + '-c', class: 'chart', role: 'img' }));
        list.append(box);
      }
      const last = f.points[f.points.length - 1];
      $(key + '-h').textContent = `Fit ${f.id}: session ${f.session}, program ${f.program}`;
      const state = f.running ? 'running' : (f.code === 0 ? 'done' : 'ended: ' + (CODES[f.code] || f.code));
      box.dataset.state = state;
      box.dataset.session = f.session;
      $(key + '-s').textContent = `${state} · epoch ${last ? last.epoch : 0}` +
        (f.epochs ? ` (this fit asked for ${f.epochs})` : '') + ` · ${f.principal}`;
      drawFit(f, key + '-c');
    }
    for (const b of [...list.children]) if (!keep.has(b.id)) b.remove();
    // keep the running fits first
    for (const f of st.fits) list.append($('fit-' + f.id));
  }

  function drawFit(f, id) {
    const box = $(id);
    const pts = f.points;
    const x = pts.map((p) => p.epoch);
    const hasVal = pts.some((p) => p.val_loss !== null);
    const hasAcc = pts.some((p) => p.acc !== null);
    const data = [x, pts.map((p) => p.loss)];
    const series = [{ label: 'epoch' }, { label: 'loss', stroke: '#0969da', width: 2 }];
    if (hasVal) { data.push(pts.map((p) => p.val_loss)); series.push({ label: 'val loss', stroke: '#bf8700', width: 2 }); }
    if (hasAcc) { data.push(pts.map((p) => p.acc)); series.push({ label: 'accuracy', stroke: '#1a7f37', scale: 'acc', width: 1 }); }
    const last = pts[pts.length - 1];
    box.setAttribute('aria-label', last
      ? `Loss per epoch, ${pts.length} epochs shown; epoch ${last.epoch} loss ${last.loss === null ? 'not a number' : last.loss.toPrecision(4)}`
      : 'Loss per epoch: no epoch yet');
    box.dataset.points = String(pts.length);
    box.dataset.lastEpoch = String(last ? last.epoch : 0);
    const seen = rt.pointSeen[f.id] || (rt.pointSeen[f.id] = {});
    const now = performance.timeOrigin + performance.now();
    let chart = rt.charts[f.id];
    if (chart && chart.series.length !== series.length) { chart.destroy(); chart = null; }
    if (!window.uPlot) return;
    if (!chart) {
      const w = Math.max(320, Math.min(900, box.clientWidth || 600));
      chart = rt.charts[f.id] = new uPlot({
        width: w, height: 200, series,
        scales: { x: { time: false }, acc: { range: [0, 1] } },
        axes: [{ label: 'epoch' }, { label: 'loss' }, { scale: 'acc', side: 1, grid: { show: false } }],
        legend: { live: false },
      }, data, box);
    } else {
      chart.setData(data);
    }
    for (const e of x) if (!(e in seen)) seen[e] = now;
  }

  // ----------------------------------------------------------------- calls
  const PARTS = [
    ['client_encode', 'client encode'], ['wire', 'wire'], ['queue', 'queue'], ['decode', 'decode'],
    ['compile', 'compile'], ['execute', 'execute'], ['encode', 'encode'], ['other', 'unattributed'],
  ];

  // A call's row never changes: rows are kept, new ones go on top and old
  // ones leave at the bottom, so the focus (a keyboard user's place) stays
  // on its button while the list moves.
  function callRow(c) {
    const b = el('button', { type: 'button', 'aria-label': `Breakdown of ${c.method} call ${c.seq}`, text: c.method });
    b.addEventListener('click', () => { rt.selected = c.seq; renderBreakdown(); });
    return el('tr', { 'data-seq': String(c.seq) },
      td(new Date(c.t_ms).toLocaleTimeString('en-GB')), el('td', {}, b), td(c.session || '—'),
      td(c.steps ? String(c.steps) : ''), td(CODES[c.code] || String(c.code)),
      td(c.timings ? fmtNs(c.timings.total_ns) : 'no timings', 'num'));
  }

  function renderCalls(st) {
    const tb = $('call-table').tBodies[0];
    const calls = st.calls.slice(-60);
    const keep = new Set(calls.map((c) => String(c.seq)));
    for (const tr of [...tb.rows]) if (!keep.has(tr.dataset.seq)) tr.remove();
    const top = tb.rows.length ? Number(tb.rows[0].dataset.seq) : -1;
    for (const c of calls) if (c.seq > top) tb.prepend(callRow(c));
    const sw = $('sweep').tBodies[0];
    const rows = [el('tr', {}, el('th', { scope: 'row', text: 'Ping (floor)' }), td(String(st.ping_floor.calls), 'num'),
      td(st.ping_floor.calls ? fmtNs(st.ping_floor.median_ns) : 'no Ping yet', 'num'))];
    for (const k of st.k_sweep)
      rows.push(el('tr', {}, el('th', { scope: 'row', text: `RunSteps K=${k.k}` }), td(String(k.calls), 'num'), td(fmtNs(k.median_ns), 'num')));
    fill(sw, rows);
    if (rt.selected === null) {
      const withT = st.calls.filter((c) => c.timings);
      if (withT.length) rt.selected = withT[withT.length - 1].seq;
    }
    renderBreakdown();
  }

  function renderBreakdown() {
    const st = rt.state;
    const fig = $('wf');
    const c = st && st.calls.find((x) => x.seq === rt.selected);
    for (const tr of $('call-table').tBodies[0].rows) tr.className = Number(tr.dataset.seq) === rt.selected ? 'sel' : '';
    if (!c || !c.timings) {
      setText($('wf-title'), c ? `${c.method}: the daemon sent no timings (status ${CODES[c.code]})` : 'Choose a call.');
      fig.replaceChildren();
      $('wf-legend').replaceChildren();
      return;
    }
    const t = c.timings;
    const ns = { queue: t.queue_ns, decode: t.decode_ns, compile: t.compile_ns, execute: t.execute_ns,
      encode: t.encode_ns, other: t.other_ns };
    setText($('wf-title'), `${c.method} call ${c.seq}` + (c.steps ? ` (K=${c.steps})` : '') +
      `: ${fmtNs(t.total_ns)} in the daemon` + (t.cache_hit ? ', program cache hit' : ''));
    fig.dataset.seq = String(c.seq);
    fig.dataset.totalNs = String(t.total_ns);
    const W = 520, L = 110, rowH = 18, floor = st.ping_floor.calls ? st.ping_floor.median_ns : 0;
    const scale = (W - L - 10) / Math.max(t.total_ns, floor, 1);
    const rows = PARTS.length + 1 + (floor ? 1 : 0);
    const s = svg('svg', { width: W, height: rows * rowH + 4, role: 'img',
      'aria-label': `Waterfall of the ${c.method} call: ` + PARTS.filter(([k]) => k in ns)
        .map(([k, name]) => `${name} ${fmtNs(ns[k])}`).join(', ') + `; total ${fmtNs(t.total_ns)}` });
    let x = 0, y = 2;
    const legend = [];
    for (const [k, name0] of PARTS) {
      const name = k === 'compile' && t.cache_hit ? 'compile (cache hit)' : name0;
      const label = svg('text', { x: 0, y: y + 13, 'font-size': 12 });
      label.textContent = name;
      s.append(label);
      if (!(k in ns)) {
        const nr = svg('text', { x: L, y: y + 13, 'font-size': 12, fill: '#57606a', 'data-part': k, 'data-reported': 'false' });
        nr.textContent = 'not reported by the client';
        s.append(nr);
        legend.push(el('li', {}, el('span', { class: 'sw p-' + k, 'aria-hidden': 'true' }), `${name}: not reported`));
      } else {
        const w = Number(ns[k]) * scale;
        s.append(svg('rect', { x: L + x, y, width: Math.max(w, 0.5), height: rowH - 4, class: 'p-' + k,
          'data-part': k, 'data-ns': String(ns[k]) }));
        x += w;
        legend.push(el('li', { 'data-part': k, 'data-ns': String(ns[k]) },
          el('span', { class: 'sw p-' + k, 'aria-hidden': 'true' }), `${name}: ${fmtNs(ns[k])}`));
      }
      y += rowH;
    }
    const tl = svg('text', { x: 0, y: y + 13, 'font-size': 12, 'font-weight': 'bold' });
    tl.textContent = 'round trip';
    s.append(tl, svg('rect', { x: L, y, width: Number(t.total_ns) * scale, height: rowH - 4, fill: '#1b1f24', 'data-total-ns': String(t.total_ns) }));
    y += rowH;
    if (floor) {
      const fl = svg('text', { x: 0, y: y + 13, 'font-size': 12 });
      fl.textContent = 'Ping floor';
      s.append(fl, svg('rect', { x: L, y, width: floor * scale, height: rowH - 4, fill: 'none', stroke: '#1b1f24', 'stroke-dasharray': '3 2' }));
      legend.push(el('li', {}, `Ping floor (median of ${st.ping_floor.calls}): ${fmtNs(floor)}`));
    }
    // what a feature that is on costs inside a part (0 when it is off)
    if (Number(t.auth_ns)) legend.push(el('li', { 'data-part': 'auth', 'data-ns': String(t.auth_ns) }, `of decode, the token check (--tokens): ${fmtNs(t.auth_ns)}`));
    if (Number(t.durable_ns)) legend.push(el('li', { 'data-part': 'durable', 'data-ns': String(t.durable_ns) }, `of execute, state to disk and synced (--state-dir): ${fmtNs(t.durable_ns)}`));
    fig.replaceChildren(s);
    $('wf-legend').replaceChildren(...legend);
  }

  // -------------------------------------------------------- the other parts
  function renderTables(st) {
    fill($('sess-table').tBodies[0], st.sessions.map((s) => el('tr', {},
      td(s.id), td(s.name), td(s.principal), td(String(s.programs), 'num'), td((s.idle_ms / 1000).toFixed(0) + ' s', 'num'))));
    fill($('princ-table').tBodies[0], st.principals.map((p) => el('tr', {}, td(p.name),
      td(p.quotas.filter((q) => q.used || q.limit !== null)
        .map((q) => `${q.name} ${fmtNum(q.used)}/${q.limit === null ? '∞' : fmtNum(q.limit)}`).join(', ') || 'nothing used'))));
    fill($('prog-table').tBodies[0], st.programs.map((p) => {
      const r = p.report;
      if (!r) return el('tr', {}, td(p.id), td(p.session), td('no report'));
      const passes = r.passes.map((x) => `${x.name} ${fmtNs(x.ns)}`).join(', ');
      return el('tr', {}, td(p.id), td(p.session), td(fmtNum(r.param_count), 'num'), td(fmtNum(r.flops_per_step), 'num'),
        td(`${fmtBytes(r.arena_bytes)} (${fmtBytes(r.naive_bytes)})`, 'num'), td(`${r.nodes} / ${r.kernels}`, 'num'),
        td(`${fmtNs(r.compile_ns)}: ${passes}`));
    }));
    const dl = (id, pairs) => $(id).replaceChildren(...pairs.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })]));
    const e = st.executor;
    dl('exec-dl', [['Queue depth', String(e.queue_depth)], ['Device', e.device_held ? 'held' : 'free'],
      ['Waiting for the device', `${e.device_waiting} (short jobs ${e.short_waiting})`], ['Lanes (fair share keys)', String(e.lanes)],
      ['Slice', fmtNs(e.slice_ns)], ['Executor threads', `${e.threads} (idle ${e.idle_threads}, max ${e.max_threads})`],
      ['Live calls', String(e.live_calls)]]);
    const s = st.store, u = st.uploads, c = st.checkpoints;
    dl('store-dl', [['Store', `${fmtBytes(s.bytes)} in ${s.datasets} datasets` + (s.max_bytes ? ` of ${fmtBytes(s.max_bytes)}` : '')],
      ['Yours', fmtBytes(s.bytes_visible)], ['Spool (yours)', fmtBytes(s.spool_bytes_visible) + (s.max_spool_bytes ? ` of ${fmtBytes(s.max_spool_bytes)}` : '')],
      ['Uploads in flight', `${u.in_flight} (${fmtBytes(u.reserved_bytes)} reserved)`], ['Kept for resume', fmtBytes(u.kept_bytes)],
      ['Checkpoints', c.durable ? `${c.written} written (${fmtBytes(c.bytes)}), ${c.failed} failed` +
        (c.last_ms ? `, last ${new Date(c.last_ms).toLocaleTimeString('en-GB')}` : '') : 'not durable (no --state-dir)']]);
    fill($('ds-table').tBodies[0], st.datasets.map((d) => el('tr', {}, td(d.id), td(d.principal), td(fmtNum(d.samples), 'num'),
      td(d.x_shape), td(fmtBytes(d.bytes), 'num'), td(d.streamed ? fmtBytes(d.spool_bytes) : '—', 'num'))));
    fill($('rep-table').tBodies[0], st.replicas.map((r) => el('tr', {}, td(String(r.rank), 'num'), td(r.host || 'this process (no MPI)'))));
  }

  function render(st) {
    rt.state = st;
    $('who').textContent = `${st.principal}${st.auth ? '' : ' (single-user)'} · rtraind ${st.version} · up ${(st.uptime_ms / 1000).toFixed(0)} s`;
    $('logout').hidden = !st.auth;
    renderFits(st);
    renderCalls(st);
    renderTables(st);
    rt.renders++;
  }

  // ------------------------------------------------------------ updating
  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      do {
        again = false;
        const r = await fetch('/api/state', { credentials: 'same-origin', cache: 'no-store' });
        if (r.status === 401) { location.href = '/login'; return; }
        if (!r.ok) throw new Error('state: HTTP ' + r.status);
        render(await r.json());
      } while (again);
    } finally {
      busy = false;
    }
  }

  function connect() {
    const es = new EventSource('/api/events');
    es.onopen = () => setText($('live'), 'live');
    es.onmessage = () => { refresh().catch(() => { $('live').textContent = 'cannot read the state'; }); };
    es.onerror = () => setText($('live'), 'reconnecting…');
  }

  refresh().then(connect, () => { $('live').textContent = 'cannot read the state'; connect(); });
})();
