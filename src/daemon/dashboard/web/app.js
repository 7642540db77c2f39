// gpusliced's dashboard (docs/dashboard.md). Plain JavaScript, no framework:
// the node's history comes from GET /v1/dashboard/history, then a "sample"
// event every second on GET /v1/events brings the current GPUs, groups and
// tenants and one more chart point. Controls appear only when GET /v1/whoami
// says the caller may change settings; they call the API's own routes.
'use strict';

const MAX_POINTS = 300;  // the daemon keeps as many (five minutes)
const MAX_EVENTS = 50;
const COLORS = ['#2a62c9', '#d9480f', '#2b8a3e', '#ae3ec9', '#e8590c', '#1098ad', '#c2255c',
                '#5f3dc4', '#74b816', '#495057'];

const state = {
  token: null,      // bearer token for TCP, from the URL fragment (#token=...)
  admin: false,
  points: [],       // the feed's points, oldest first
  sample: null,     // the last sample: {gpus, groups, tenants}
  lastSampleAt: 0,  // Date.now() of the last sample
  charts: new Map(),  // "<uuid>/<kind>" -> {plot, key}
};
// For people debugging and for the browser test: what the page holds.
window.gpusliceDashboard = state;

// ---- small helpers ----

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

function bytes(n) {
  if (n == null) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 2 : 1) : n) + ' ' + units[i];
}

function pct(v) { return v == null ? '–' : (Math.round(v * 10) / 10) + '%'; }

function colorOf(name) {
  let h = 0;
  for (const ch of name) h = (h * 31 + ch.codePointAt(0)) >>> 0;
  return COLORS[h % COLORS.length];
}

function notice(text) {
  const n = document.getElementById('notice');
  n.textContent = text || '';
  n.hidden = !text;
}

async function api(method, path, body) {
  const headers = {};
  if (state.token) headers.Authorization = 'Bearer ' + state.token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error((data.error && data.error.message) || res.status + ' ' + res.statusText);
  return data;
}

// ---- charts ----

// The charts of each GPU: the lines each plots (per group, or of the GPU).
const KINDS = {
  share: {title: 'compute share of each group (%): measured —, limit - -, request ···',
          y: {range: [0, 100]},
          lines: (uuid, groups) => groups.flatMap(g => [
            {label: g, color: colorOf(g), width: 2, key: p => p.groups[g]?.[uuid]?.share},
            {label: g + ' limit', color: colorOf(g), dash: [6, 4], key: p => p.groups[g]?.[uuid]?.limit},
            {label: g + ' request', color: colorOf(g), dash: [2, 3], key: p => p.groups[g]?.[uuid]?.request}])},
  memory: {title: 'memory of each group (GiB): used —, limit - -',
           y: {range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1]},
           lines: (uuid, groups) => groups.flatMap(g => [
             {label: g, color: colorOf(g), width: 2, key: p => gib(p.groups[g]?.[uuid]?.memory_used)},
             {label: g + ' limit', color: colorOf(g), dash: [6, 4], key: p => gib(p.groups[g]?.[uuid]?.memory_limit)}])},
  power: {title: 'power (W) and SM clock (MHz, right)',
          lines: uuid => [
            {label: 'power W', color: '#d9480f', width: 2, key: p => p.gpus[uuid]?.power_watts},
            {label: 'power limit W', color: '#d9480f', dash: [6, 4], key: p => p.gpus[uuid]?.power_limit_watts},
            {label: 'SM MHz', color: '#1098ad', scale: 'mhz', key: p => p.gpus[uuid]?.sm_mhz}]},
};

function gib(b) { return b == null ? null : b / 2 ** 30; }

// The time axis: 24-hour labels, HH:MM:SS while a step of 30 s or less
// leaves room for them, else HH:MM on steps of a minute or more. `space` (the
// least distance uPlot leaves between two labels) is the label's width and a
// gap, so labels never overlap however narrow the chart or long the span.
const TIME_LABEL_GAP = 10;  // CSS px between two labels
const labelWidths = new Map();  // pattern -> CSS px in the axis's font
function labelWidth(u, pattern) {
  if (!labelWidths.has(pattern)) {
    const axis = u.axes[0], ctx = document.createElement('canvas').getContext('2d');
    ctx.font = axis.font[0];
    labelWidths.set(pattern, ctx.measureText(pattern).width / (axis.font[1] / axis.font[2]));
  }
  return labelWidths.get(pattern);
}
function timeLabelSpace(u, axisIdx, min, max, dim) {
  const seconds = labelWidth(u, '88:88:88') + TIME_LABEL_GAP;
  const step30 = dim * 30 / Math.max(1, max - min);  // px between labels 30 s apart
  if (step30 >= seconds) return seconds;
  // Minutes: too little room for a step under a minute, so uPlot takes none.
  return Math.max(labelWidth(u, '88:88') + TIME_LABEL_GAP, step30 + 1);
}
function timeLabels(u, splits, axisIdx, space, incr) {
  const two = n => String(n).padStart(2, '0');
  return splits.map(v => {
    if (v == null) return null;
    const d = new Date(v * 1000), hm = `${two(d.getHours())}:${two(d.getMinutes())}`;
    return incr < 60 ? `${hm}:${two(d.getSeconds())}` : hm;
  });
}

// The groups present on `uuid` in any kept point, sorted.
function groupsOn(uuid) {
  const ids = new Set();
  for (const p of state.points) {
    for (const [g, on] of Object.entries(p.groups)) if (on[uuid]) ids.add(g);
  }
  return [...ids].sort();
}

// uPlot's options for a chart `width` px wide of `lines` (as KINDS' lines
// give them) by the spec of its kind (KINDS[kind]: its y range).
function chartOptions(spec, lines, width) {
  const axes = [{stroke: '#888', space: timeLabelSpace, values: timeLabels}, {stroke: '#888'}];
  if (lines.some(s => s.scale)) axes.push({scale: 'mhz', side: 1, stroke: '#888', grid: {show: false}});
  return {
    width, height: 200,
    scales: {x: {time: true}, y: spec.y || {}},
    series: [{}, ...lines.map(s => ({label: s.label, stroke: s.color, width: s.width || 1,
                                    dash: s.dash, scale: s.scale || 'y', points: {show: false}}))],
    axes,
    legend: {live: false},
  };
}
state.chartOptions = chartOptions;  // for the browser test

function drawChart(container, uuid, kind) {
  if (typeof uPlot === 'undefined') return;
  const spec = KINDS[kind];
  const groups = groupsOn(uuid);
  const lines = spec.lines(uuid, groups);
  const data = [state.points.map(p => p.t / 1000),
                ...lines.map(s => state.points.map(p => s.key(p) ?? null))];
  const id = uuid + '/' + kind, key = lines.map(s => s.label).join('\n');
  let chart = state.charts.get(id);
  if (chart && chart.key !== key) {  // other lines (a group came or went): a new chart
    chart.plot.destroy();
    chart = null;
  }
  if (!chart) {
    const plot = new uPlot(chartOptions(spec, lines, Math.max(300, container.clientWidth)), data,
                           container);
    chart = {plot, key};
    state.charts.set(id, chart);
  } else {
    chart.plot.setData(data);
  }
  container.dataset.points = String(data[0].length);
}

window.addEventListener('resize', () => {
  for (const [id, c] of state.charts) {
    const box = document.querySelector(`[data-chart="${CSS.escape(id)}"]`);
    if (box) c.plot.setSize({width: Math.max(300, box.clientWidth), height: 200});
  }
});

// ---- rendering ----

function gpuArticle(gpu) {
  let a = document.querySelector(`article.gpu[data-uuid="${CSS.escape(gpu.uuid)}"]`);
  if (a) return a;
  a = el('article', {class: 'gpu', 'data-uuid': gpu.uuid},
    el('h2', {}, `GPU ${gpu.index} · ${gpu.name} `, el('small', {}, gpu.uuid)),
    el('div', {class: 'stats'}),
    el('div', {class: 'charts'},
      ...Object.entries(KINDS).map(([kind, spec]) => el('div', {class: 'chart'},
        el('h3', {}, spec.title),
        el('div', {class: 'plot', 'data-chart': gpu.uuid + '/' + kind, 'data-kind': kind})))),
    el('table', {class: 'groups'},
      el('thead', {}, el('tr', {}, ...['group', 'state', 'share', 'limit', 'request', 'grant',
        'memory', 'members'].map(h => el('th', {}, h)),
        state.admin ? el('th', {}, 'change') : null)),
      el('tbody')));
  document.getElementById('gpus').append(a);
  return a;
}

function renderGpus() {
  const {gpus, groups} = state.sample;
  for (const gpu of gpus) {
    const a = gpuArticle(gpu);
    const m = gpu.memory, p = gpu.power, c = gpu.clocks;
    a.querySelector('.stats').replaceChildren(
      'utilization ', el('b', {}, pct(gpu.utilization.gpu_percent)),
      ' · memory ', el('b', {}, `${bytes(m.used_bytes)} / ${bytes(m.total_bytes)}`),
      ' · power ', el('b', {}, `${p.draw_watts.toFixed(0)} / ${p.limit_watts.toFixed(0)} W`),
      ' · clocks ', el('b', {}, `SM ${c.sm_mhz} / ${c.max_sm_mhz} MHz, memory ${c.memory_mhz} MHz`),
      ' · ', el('b', {}, `${gpu.temperature_c} °C`), ' · MPS ', el('b', {}, gpu.mps));
    for (const box of a.querySelectorAll('.plot')) drawChart(box, gpu.uuid, box.dataset.kind);
    const tbody = a.querySelector('table.groups tbody');
    const rows = [];
    for (const g of groups) {
      const on = g.gpus.find(x => x.uuid === gpu.uuid);
      if (on) rows.push(groupRow(tbody, g, on, gpu));
    }
    // Rows stay where they are (an admin may be typing in one); new ones go in order.
    rows.forEach((row, i) => { if (tbody.children[i] !== row) tbody.insertBefore(row, tbody.children[i] || null); });
    while (tbody.children.length > rows.length) tbody.lastChild.remove();
  }
}

// The row of group `g` on `gpu` in `tbody`, made on first sight, its cells
// brought up to date; row.group is the latest view of the group.
function groupRow(tbody, g, on, gpu) {
  let row = [...tbody.children].find(r => r.dataset.group === g.id);
  if (!row) {
    const swatch = el('span', {class: 'swatch'});
    swatch.style.background = colorOf(g.id);
    row = el('tr', {'data-group': g.id}, el('td', {}, swatch, g.id),
      ...['state', 'share', 'limit', 'request', 'grant', 'memory', 'members'].map(c => el('td', {class: c})));
    if (state.admin) row.append(el('td', {class: 'controls'}, ...controlsFor(row, gpu)));
  }
  row.group = g;
  const s = on.schedule || {};
  // The group's memory limit on this GPU, else its members' lowest (as charted).
  const memLimit = state.points.at(-1)?.groups[g.id]?.[gpu.uuid]?.memory_limit ?? on.limit.memory_bytes;
  const used = on.memory_used_bytes;
  const bar = el('span', {class: 'bar' + (memLimit && used > memLimit ? ' over' : '')}, el('span'));
  bar.firstChild.style.width = (Math.min(1, used / (memLimit || gpu.memory.total_bytes)) * 100).toFixed(1) + '%';
  const cell = c => row.querySelector('td.' + c);
  cell('state').textContent = g.paused ? 'paused' : 'running';
  cell('state').classList.toggle('state-paused', g.paused);
  cell('share').textContent = pct(on.share * 100);
  cell('limit').textContent = pct(s.limit);
  cell('request').textContent = pct(s.request);
  cell('grant').textContent = pct(on.grant_percent);
  cell('memory').replaceChildren(bar, `${bytes(used)} / ${memLimit ? bytes(memLimit) : '–'}`);
  cell('members').textContent = String(g.members.length);
  const pause = row.querySelector('button.pause');
  if (pause) pause.textContent = g.paused ? 'Resume' : 'Pause';
  return row;
}

// Pause/resume and a limit form for the group of `row` on `gpu` (admins only).
function controlsFor(row, gpu) {
  const msg = el('span', {class: 'msg'});
  const act = async (what, fn) => {
    msg.className = 'msg';
    msg.textContent = what + '…';
    try {
      await fn();
      msg.textContent = what + ': done';
    } catch (e) {
      msg.className = 'msg error';
      msg.textContent = what + ': ' + e.message;
    }
  };
  const pause = el('button', {type: 'button', class: 'pause', onclick: () => {
    const g = row.group, verb = g.paused ? 'resume' : 'pause';
    act(verb, () => api('POST', `/v1/groups/${encodeURIComponent(g.id)}/${verb}`));
  }}, 'Pause');
  const compute = el('input', {name: 'compute', type: 'number', min: '1', max: '100',
                               placeholder: 'compute %', 'aria-label': 'compute limit %'});
  const memory = el('input', {name: 'memory', placeholder: 'memory', 'aria-label': 'memory limit'});
  const form = el('form', {class: 'limit', onsubmit: ev => {
    ev.preventDefault();
    act('limit', () => setLimit(row.group, gpu, compute.value.trim(), memory.value.trim()));
  }}, compute, ' ', memory, ' ', el('button', {type: 'submit'}, 'Set limit'));
  return [pause, ' ', form, msg];
}

// PUT /v1/groups/{id} replaces all of a group's limits: the ones it has are
// sent back with this GPU's (or, when it has none of its own, every GPU's) changed.
async function setLimit(g, gpu, compute, memory) {
  if (!compute && !memory) throw new Error('give a compute % or a memory size');
  const limits = structuredClone(g.limits || {});
  const key = limits[gpu.uuid] ? gpu.uuid : 'all';
  const limit = limits[key] || {};
  if (compute) limit.compute_percent = Number(compute);
  if (memory) { delete limit.memory_bytes; limit.memory = memory; }
  limits[key] = limit;
  await api('PUT', `/v1/groups/${encodeURIComponent(g.id)}`, {limits});
}

function renderTenants() {
  const rows = [];
  for (const t of state.sample.tenants) {
    const where = t.pod ? `${t.namespace}/${t.pod}/${t.container}` : (t.container || '–');
    const gpus = t.gpus.length ? t.gpus : [null];
    for (const g of gpus) {
      rows.push(el('tr', {'data-pid': String(t.host_pid)},
        el('td', {}, String(t.host_pid)), el('td', {}, t.group), el('td', {}, where),
        el('td', {}, t.tier_granted || t.tier),
        el('td', {}, g ? String(g.index) : '–'),
        el('td', {}, g ? bytes(g.memory_used_bytes) : '–'),
        el('td', {}, g && g.share != null ? pct(g.share * 100) : '–'),
        el('td', {}, g ? [g.limit.compute_percent != null ? g.limit.compute_percent + '%' : '–',
                          g.limit.memory_bytes != null ? bytes(g.limit.memory_bytes) : '–'].join(' · ') : '–')));
    }
  }
  document.querySelector('#tenants tbody').replaceChildren(...rows);
}

// ---- events, one line each, in words ----

// "snake_case" as words.
function words(s) { return String(s ?? '').replace(/_/g, ' '); }

// A GPU key of a group's limits or schedule: "every GPU" for "all", "GPU 1"
// for a UUID the page knows, else the key itself.
function gpuName(key) {
  if (key === 'all') return 'every GPU';
  const gpu = state.sample?.gpus.find(g => g.uuid === key);
  return gpu ? 'GPU ' + gpu.index : key;
}

// `entries` (by GPU key) as "every GPU: …; GPU 1: …", each by `part`.
function perGpu(entries, part) {
  return Object.entries(entries || {}).map(([k, v]) => `${gpuName(k)}: ${part(v) || 'none'}`)
    .join('; ');
}

function limitText(l) {
  return [l.compute_percent != null ? `compute ${l.compute_percent}%` : '',
          l.memory_bytes != null ? `memory ${bytes(l.memory_bytes)}` : ''].filter(x => x).join(', ');
}

function scheduleText(e) {
  return [e.request != null ? `request ${e.request}%` : '', e.priority || '',
          e.weight != null ? `weight ${e.weight}` : '',
          e.memory_request_bytes != null ? `memory request ${bytes(e.memory_request_bytes)}` : '']
    .filter(x => x).join(', ');
}

// Any other event's data as "key value" pairs (nested keys joined by '.',
// lists by ', '): readable whatever the event, never its JSON.
function fieldsText(data, prefix = '') {
  if (data == null || typeof data !== 'object') return String(data ?? '');
  const out = [];
  for (const [k, v] of Object.entries(data)) {
    const key = prefix + words(k);
    if (v == null || v === '') continue;
    if (Array.isArray(v)) out.push(`${key} ${v.map(x => typeof x === 'object' ? fieldsText(x) : x).join(', ')}`);
    else if (typeof v === 'object') { const inner = fieldsText(v, key + '.'); if (inner) out.push(inner); }
    else out.push(`${key} ${v}`);
  }
  return out.join(', ');
}

const EVENT_TEXT = {
  tenant_registered: d => `tenant ${d.host_pid} joined group ${d.group}` +
    (d.pod ? ` (pod ${d.namespace ? d.namespace + '/' : ''}${d.pod})` : ''),
  tenant_exited: d => `tenant ${d.host_pid} left group ${d.group} (${words(d.reason)})`,
  registration_refused: d => `pid ${d.pid} was refused in group ${d.group}: ${d.reason}`,
  group_limits_changed: d => `group ${d.id} limits: ${perGpu(d.limits, limitText) || 'none'}`,
  group_schedule_changed: d => `group ${d.group} schedule: ${perGpu(d.schedule, scheduleText) || 'none'}`,
  group_paused: d => `group ${d.group} paused`,
  group_resumed: d => `group ${d.group} resumed`,
  group_forgotten: d => `group ${d.group} forgotten`,
  group_removed: d => `group ${d.group} removed (${words(d.reason)})`,
};

// One line for an event of `type`: the known types in a sentence, any other
// as its type in words and its fields.
function describeEvent(type, data) {
  const text = EVENT_TEXT[type];
  if (text && data && typeof data === 'object') return text(data);
  const fields = fieldsText(data);
  return words(type) + (fields ? ': ' + fields : '');
}
state.describeEvent = describeEvent;  // for the browser test

// Shows an event (`data`: its JSON, parsed) at the top of the list, one line
// (the whole text in its tooltip when the line is cut).
function addEvent(t, type, data) {
  const text = describeEvent(type, data);
  const list = document.getElementById('events');
  list.prepend(el('li', {'data-type': type, title: text},
                  el('time', {}, new Date(t).toLocaleTimeString()), text));
  while (list.children.length > MAX_EVENTS) list.lastChild.remove();
}

function onSample(sample) {
  state.sample = sample;
  state.lastSampleAt = Date.now();
  const last = state.points[state.points.length - 1];
  if (!last || sample.point.t > last.t) state.points.push(sample.point);
  if (state.points.length > MAX_POINTS) state.points.splice(0, state.points.length - MAX_POINTS);
  document.getElementById('clock').textContent = new Date(sample.t).toLocaleTimeString();
  renderGpus();
  renderTenants();
  setConn(true);
}

function setConn(live) {
  const c = document.getElementById('conn');
  c.textContent = live ? 'live' : 'reconnecting…';
  c.className = 'pill ' + (live ? 'live' : 'down');
}

// ---- the event stream: fetch, so that every event type comes through ----

function onEvent(block) {
  let type = 'message', data = '';
  for (const line of block.split('\n')) {
    if (line.startsWith('event:')) type = line.slice(6).trim();
    else if (line.startsWith('data:')) data += line.slice(5).trim();
  }
  if (!data) return;  // a comment (keep-alive)
  if (type === 'sample') onSample(JSON.parse(data));
  else if (type !== 'gpu') addEvent(Date.now(), type, JSON.parse(data));  // GPU readings: in samples
}

async function stream() {
  for (;;) {
    try {
      const history = await api('GET', '/v1/dashboard/history');
      state.points = history.points.slice(-MAX_POINTS);
      document.getElementById('events').replaceChildren();
      for (const e of history.events) addEvent(e.t, e.type, e.data);
      const res = await fetch('/v1/events', {headers: {Accept: 'text/event-stream'}});
      if (!res.ok || !res.body) throw new Error('event stream: ' + res.status);
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          onEvent(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (e) {
      console.warn('dashboard: ' + e.message);
    }
    setConn(false);
    await new Promise(r => setTimeout(r, 2000));
  }
}

// A stream that stalls (no sample for 5 s) is shown as down.
setInterval(() => { if (Date.now() - state.lastSampleAt > 5000) setConn(false); }, 1000);

async function start() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem('gpuslice-token', decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);  // off the address bar
  }
  state.token = sessionStorage.getItem('gpuslice-token');
  const messages = [];
  if (typeof uPlot === 'undefined') {
    messages.push('Charts unavailable: gpusliced was built without its chart library ' +
                  '(run scripts/setup, then build again).');
  }
  try {
    const who = await api('GET', '/v1/whoami');
    state.admin = who.admin;
    const role = document.getElementById('role');
    role.textContent = who.admin ? 'admin' : 'read-only';
    role.className = 'pill' + (who.admin ? ' admin' : '');
    role.title = who.reason || 'may pause, resume and change limits';
    if (!who.admin) {
      messages.push('Read-only: ' + who.reason +
        (who.transport === 'tcp' ? '. An admin opens this page as …/#token=TOKEN.' : '.'));
    }
  } catch (e) {
    messages.push('Cannot tell who you are: ' + e.message);
  }
  notice(messages.join(' '));
  stream();
}

start();
