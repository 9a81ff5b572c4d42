// minfer trace viewer — plain JavaScript, no build step, no network.
// A trace: { graph: {nodes, tensors, copies}, steps: [{nodes: [{id, ms, stats, grid}], sample}] }
// (docs/TRACE.md). Compare mode loads a second trace of the same model and shows, per node,
// the largest difference of the output statistics, marking the first node that diverges.
'use strict';

const state = { a: null, b: null, step: 0, selected: null };
const COLORS = ['#4c6ef5', '#f08c00', '#2f9e44', '#ae3ec9', '#1098ad', '#e03131'];
const DIVERGE = 1e-3;  // relative difference of statistics that counts as diverged

const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v; else if (k === 'style') e.style.cssText = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
};
const fmt = (x, d = 4) => (x === null || x === undefined ? '–' : Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toExponential(2) : x.toFixed(d));

function backendColor(trace, name) {
  const backends = [...new Set(trace.graph.nodes.map((n) => n.backend))];
  return COLORS[backends.indexOf(name) % COLORS.length];
}

// The record of node id at the selected step (or undefined).
function record(trace, id, step = state.step) {
  const s = trace && trace.steps[step];
  return s && s.nodes.find((r) => r.id === id);
}

// Largest relative difference between the two traces' statistics for one node.
function statDiff(id) {
  const ra = record(state.a, id), nb = state.b && state.b.graph.nodes.find((n) => n.name === state.a.graph.nodes[id].name);
  const rb = nb && record(state.b, nb.id);
  if (!ra || !rb || !ra.stats || !rb.stats) return null;
  let worst = 0;
  for (const k of ['min', 'max', 'mean', 'std']) {
    const x = ra.stats[k], y = rb.stats[k];
    worst = Math.max(worst, Math.abs(x - y) / Math.max(1e-6, Math.abs(x), Math.abs(y)));
  }
  if (ra.stats.nan !== rb.stats.nan || ra.stats.inf !== rb.stats.inf) worst = Infinity;
  return worst;
}

function render() {
  const t = state.a;
  if (!t) return;
  const steps = t.steps;
  $('summary').textContent = `${t.model.name} (${t.model.arch}) · ${t.graph.nodes.length} nodes · ${steps.length} steps` +
    (t.dropped_steps ? ` (+${t.dropped_steps} not recorded)` : '') + (state.b ? ` · comparing with ${state.b.model.name}` : '');
  const sel = $('step');
  if (sel.options.length !== steps.length) {
    sel.innerHTML = '';
    steps.forEach((s, i) => sel.append(el('option', { value: i }, `${i}: ${s.kind}, ${s.n_tokens} tok @${s.n_past}, ${fmt(s.total_ms, 2)} ms`)));
  }
  sel.value = state.step;
  renderLegend(t);
  renderNodes(t);
  renderDetail();
  renderTimeline(t);
  renderTokens(t);
}

function renderLegend(t) {
  const backends = [...new Set(t.graph.nodes.map((n) => n.backend))];
  $('legend').replaceChildren(...backends.map((b) => el('span', {}, el('span', { class: 'chip', style: `background:${backendColor(t, b)}` }), b)));
}

function renderNodes(t) {
  const groups = new Map();
  for (const n of t.graph.nodes) {
    const key = n.layer === null ? 'outside the layers' : `layer ${n.layer}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(n);
  }
  let firstDiverged = null;
  if (state.b)
    for (const n of t.graph.nodes) {
      const d = statDiff(n.id);
      if (d !== null && d > DIVERGE) { firstDiverged = n.id; break; }
    }
  const box = $('nodes');
  const open = new Set([...box.querySelectorAll('details[open]')].map((d) => d.dataset.key));
  box.replaceChildren();
  for (const [key, nodes] of groups) {
    const det = el('details', { 'data-key': key }, el('summary', {}, `${key} (${nodes.length})`));
    const bad = nodes.some((n) => { const r = record(t, n.id); return r && r.stats && (r.stats.nan || r.stats.inf); });
    if (open.has(key) || bad || (state.selected !== null && nodes.some((n) => n.id === state.selected)) || groups.size <= 3) det.open = true;
    for (const n of nodes) {
      const r = record(t, n.id);
      const classes = ['node'];
      if (n.id === state.selected) classes.push('selected');
      if (r && r.stats && (r.stats.nan || r.stats.inf)) classes.push('bad');
      if (n.id === firstDiverged) classes.push('diverged');
      const d = state.b ? statDiff(n.id) : null;
      det.append(el('div', { class: classes.join(' '), 'data-node': n.name, onclick: () => select(n.id) },
        el('span', { class: 'chip', style: `background:${backendColor(t, n.backend)}` }),
        el('span', {}, n.name, ' ', el('span', { class: 'op' }, n.op)),
        el('span', { class: 'ms' }, r ? `${fmt(r.ms, 3)} ms` : ''),
        el('span', { class: 'diff' }, d === null ? '' : `Δ ${d === Infinity ? 'NaN/Inf' : fmt(d, 2)}`)));
    }
    box.append(det);
  }
}

function select(id) {
  state.selected = id;
  render();
}

function heatmap(grid) {
  const scale = Math.max(4, Math.floor(256 / Math.max(grid.rows, grid.cols)));
  const c = el('canvas', { width: grid.cols * scale, height: grid.rows * scale, title: `${grid.rows} x ${grid.cols} cells (means)` });
  const ctx = c.getContext('2d');
  const finite = grid.values.filter((v) => v !== null && Number.isFinite(v));
  const m = Math.max(1e-12, ...finite.map(Math.abs));
  grid.values.forEach((v, i) => {
    const r = Math.floor(i / grid.cols), col = i % grid.cols;
    if (v === null || !Number.isFinite(v)) ctx.fillStyle = '#000';
    else {
      const x = v / m;  // diverging: blue (negative), white, red (positive)
      const a = Math.round(255 * (1 - Math.abs(x)));
      ctx.fillStyle = x >= 0 ? `rgb(255,${a},${a})` : `rgb(${a},${a},255)`;
    }
    ctx.fillRect(col * scale, r * scale, scale, scale);
  });
  return c;
}

function sparkline(t, id) {
  const ms = t.steps.map((s) => { const r = s.nodes.find((x) => x.id === id); return r ? r.ms : 0; });
  const w = 300, h = 40, m = Math.max(1e-9, ...ms);
  const pts = ms.map((v, i) => `${(i / Math.max(1, ms.length - 1)) * w},${h - (v / m) * (h - 4) - 2}`).join(' ');
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('width', w); svg.setAttribute('height', h);
  svg.innerHTML = `<polyline fill="none" stroke="#4c6ef5" stroke-width="1.5" points="${pts}"/>`;
  return svg;
}

function statsTable(rec, other) {
  const rows = [el('tr', {}, el('th', {}, ''), el('th', {}, 'this trace'), ...(other !== undefined ? [el('th', {}, 'compared'), el('th', {}, '|Δ|')] : []))];
  for (const k of ['min', 'max', 'mean', 'std', 'nan', 'inf', 'count']) {
    const a = rec && rec.stats ? rec.stats[k] : null, b = other && other.stats ? other.stats[k] : null;
    const f = (x) => (['nan', 'inf', 'count'].includes(k) && x !== null ? String(x) : fmt(x));
    rows.push(el('tr', {}, el('td', {}, k), el('td', {}, f(a)),
      ...(other !== undefined ? [el('td', {}, f(b)), el('td', {}, a === null || b === null ? '–' : f(Math.abs(a - b)))] : [])));
  }
  return el('table', { id: 'stats' }, ...rows);
}

function renderDetail() {
  const t = state.a, box = $('detail');
  if (state.selected === null) return;
  const n = t.graph.nodes[state.selected], rec = record(t, n.id);
  let other;
  if (state.b) {
    const nb = state.b.graph.nodes.find((x) => x.name === n.name);
    other = nb ? record(state.b, nb.id) : null;
  }
  box.replaceChildren(
    el('table', {},
      el('tr', {}, el('td', {}, 'node'), el('td', {}, n.name)),
      el('tr', {}, el('td', {}, 'op'), el('td', {}, n.op)),
      el('tr', {}, el('td', {}, 'backend'), el('td', {}, n.backend)),
      el('tr', {}, el('td', {}, 'inputs'), el('td', {}, n.inputs.join(', '))),
      el('tr', {}, el('td', {}, 'output'), el('td', {}, `${n.output.dtype} [${n.output.shape.join(', ')}]`)),
      el('tr', {}, el('td', {}, 'time this step'), el('td', {}, rec ? `${fmt(rec.ms, 3)} ms (${rec.clock} clock)` : '–'))),
    el('h3', {}, 'Time per step'), sparkline(t, n.id),
    el('h3', {}, 'Output statistics (this step)'), statsTable(rec, other),
    ...(rec && rec.grid ? [el('h3', {}, 'Heatmap (down-sampled: rows = tokens, columns = values)'), heatmap(rec.grid)] : [el('p', { class: 'hint' }, 'No value grid for this step (grids are kept for the first steps only).')]));
}

function renderTimeline(t) {
  const s = t.steps[state.step], svg = $('timeline');
  if (!s) return;
  const total = s.nodes.reduce((a, r) => a + r.ms, 0) || 1;
  const width = svg.clientWidth || 800;
  let x = 0, html = '';
  let slow = s.nodes[0];
  for (const r of s.nodes) {
    if (r.ms > slow.ms) slow = r;
    const w = (r.ms / total) * width, n = t.graph.nodes[r.id];
    html += `<rect x="${x}" y="6" width="${Math.max(0.5, w)}" height="40" fill="${backendColor(t, n.backend)}" stroke="#fff" stroke-width="0.5" data-id="${r.id}"><title>${n.name} (${n.op}): ${fmt(r.ms, 3)} ms</title></rect>`;
    x += w;
  }
  svg.innerHTML = html;
  svg.querySelectorAll('rect').forEach((rect) => rect.addEventListener('click', () => select(Number(rect.dataset.id))));
  if (slow) $('slowest').textContent = `slowest: ${t.graph.nodes[slow.id].name} (${fmt(slow.ms, 3)} ms of ${fmt(total, 2)} ms)`;
}

function renderTokens(t) {
  const s = t.steps[state.step], box = $('tokens');
  if (!s || !s.sample) { box.replaceChildren(el('p', { class: 'hint' }, 'No token was sampled after this step.')); return; }
  const maxp = Math.max(...s.sample.top.map((c) => c.p));
  box.replaceChildren(...s.sample.top.map((c) => el('div', { class: 'tok' },
    el('span', {}, JSON.stringify(c.text), ` #${c.id}`),
    el('div', { class: 'bar' + (c.id === s.sample.chosen ? ' chosen' : ''), style: `width:${(c.p / maxp) * 100}%` }),
    el('span', {}, `${(c.p * 100).toFixed(2)}%`))));
}

function load(which, text) {
  const t = JSON.parse(text);
  if (t.format !== 'minfer-trace') throw new Error('not a minfer trace');
  state[which] = t;
  if (which === 'a') { state.step = 0; state.selected = null; $('step').innerHTML = ''; }
  render();
}

for (const [id, which] of [['file-a', 'a'], ['file-b', 'b']])
  $(id).addEventListener('change', (e) => { const f = e.target.files[0]; if (f) f.text().then((txt) => load(which, txt)).catch((err) => alert(err)); });
$('step').addEventListener('change', (e) => { state.step = Number(e.target.value); render(); });

// ?trace=URL&compare=URL loads over HTTP; &select=NODE clicks a node; &autotest=1 reports what
// rendered into #test-result (the headless-browser test reads it).
(async () => {
  const q = new URLSearchParams(location.search);
  try {
    if (q.get('trace')) load('a', await (await fetch(q.get('trace'))).text());
    if (q.get('compare')) load('b', await (await fetch(q.get('compare'))).text());
    if (q.get('step')) { state.step = Number(q.get('step')); render(); }
    if (q.get('select')) {
      const row = document.querySelector(`[data-node="${q.get('select')}"]`);
      if (row) row.click();
    }
  } catch (err) {
    $('detail').textContent = 'could not load: ' + err;
  }
  if (q.get('autotest')) {
    const out = $('test-result');
    out.hidden = false;
    out.textContent = JSON.stringify({
      nodes_rendered: document.querySelectorAll('.node').length,
      selected: state.selected === null ? null : state.a.graph.nodes[state.selected].name,
      stats_rows: document.querySelectorAll('#stats tr').length,
      heatmap: !!document.querySelector('#detail canvas'),
      timeline_bars: document.querySelectorAll('#timeline rect').length,
      tokens: document.querySelectorAll('.tok').length,
      slowest: $('slowest').textContent,
      diverged: document.querySelectorAll('.node.diverged').length,
      diverged_node: (document.querySelector('.node.diverged') || {}).dataset ? document.querySelector('.node.diverged').dataset.node : null,
    });
  }
})();
