// Drives gpusliced's dashboard in headless Chromium (playwright-core, from
// the repository's node_modules) for dashboard_test.cc, which started the
// daemon and the tenants: a reader's page, its charts, an admin's controls,
// then what a person reads (events one line each in words; time-axis labels
// that do not overlap). Every check waits with a deadline; the first that
// fails ends the run with exit code 1 and says what it saw.
//
// Usage: node dashboard_browser.cjs --url http://127.0.0.1:PORT --token T
//          --chromium /usr/bin/chromium --screenshot OUT.png --group G --limit N
'use strict';
const { chromium } = require('playwright-core');

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].slice(2)] = process.argv[i + 1];
const { url, token, group } = args;
const limit = Number(args.limit);
const WAIT = { timeout: 30000 };  // per step: generous for a loaded CI machine

function check(ok, what) {
  if (!ok) throw new Error('check failed: ' + what);
}

function log(...a) { console.log('dashboard_browser:', ...a); }

// The daemon's API, seen from outside the page (over TCP, as any client).
async function apiGet(path) {
  const res = await fetch(url + path);
  check(res.ok, `GET ${path}: ${res.status}`);
  return res.json();
}

// Collects what must never happen on the page: script errors, console errors,
// Content-Security-Policy violations.
function watchProblems(page, problems) {
  page.on('pageerror', e => problems.push('page error: ' + e.message));
  page.on('console', m => { if (m.type() === 'error') problems.push('console error: ' + m.text()); });
  return page.addInitScript(() => document.addEventListener('securitypolicyviolation', e =>
    console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`)));
}

// The share chart of the first GPU: its number of points and each line's values.
function shareChart(page) {
  return page.evaluate(() => {
    const uuid = document.querySelector('article.gpu').dataset.uuid;
    const chart = window.gpusliceDashboard.charts.get(uuid + '/share');
    if (!chart) return { points: 0, lines: {} };
    const lines = {};
    chart.plot.series.forEach((s, i) => { if (i > 0) lines[s.label] = chart.plot.data[i]; });
    return { points: chart.plot.data[0].length, lines };
  });
}

async function openPage(browser, hash, problems) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1100 } });
  const page = await context.newPage();
  await watchProblems(page, problems);
  const response = await page.goto(url + '/' + hash);
  await page.waitForSelector('#conn.live', WAIT);
  await page.waitForFunction(g => document.querySelector(`article.gpu tr[data-group="${g}"]`), group, WAIT);
  return { page, response };
}

async function main() {
  const browser = await chromium.launch({ executablePath: args.chromium, args: ['--no-sandbox'] });
  const problems = [];
  try {
    // 1. A reader (over TCP without a token): the page loads, live, without controls.
    const { page, response } = await openPage(browser, '', problems);
    const h = response.headers();
    check(response.status() === 200, 'GET / status ' + response.status());
    check(await page.evaluate(() => typeof uPlot !== 'undefined'),
          'gpusliced was built without its chart library (node_modules/uplot): run scripts/setup, then build again');
    check(h['content-type'] === 'text/html; charset=utf-8', 'content-type ' + h['content-type']);
    check((h['content-security-policy'] || '').includes("script-src 'self'"), 'CSP ' + h['content-security-policy']);
    check(h['cache-control'] === 'no-cache', 'cache-control of / ' + h['cache-control']);
    const script = await page.getAttribute('script[src$="/app.js"]', 'src');
    const asset = await fetch(url + script);
    check(asset.ok && asset.headers.get('cache-control').includes('immutable'),
          `${script}: ${asset.status} ${asset.headers.get('cache-control')}`);
    check(await page.textContent('#role') === 'read-only', 'role ' + await page.textContent('#role'));
    const controls = await page.locator('.controls, button, input').count();
    check(controls === 0, `a reader sees ${controls} controls`);
    // The console reports the refusal: expected, so not counted as a problem.
    const reported = page.waitForEvent('console', { predicate: m => m.text().includes('403'), ...WAIT });
    const refused = await page.evaluate(g => fetch(`/v1/groups/${g}/pause`, { method: 'POST' }).then(r => r.status), group);
    check(refused === 403, 'a reader pausing a group got ' + refused);
    await reported;
    const expected = problems.findIndex(p => p.includes('status of 403'));
    if (expected >= 0) problems.splice(expected, 1);
    log('reader: page loaded, no controls, pause refused (403)');

    // 2. The charts follow the tenants: points are added and the measured share moves.
    const first = await shareChart(page);
    check(first.points > 0, 'no points in the share chart');
    await page.waitForFunction(n => {
      const uuid = document.querySelector('article.gpu').dataset.uuid;
      return window.gpusliceDashboard.charts.get(uuid + '/share').plot.data[0].length >= n;
    }, first.points + 3, WAIT);
    const later = await shareChart(page);
    const shares = (later.lines[group] || []).filter(v => v != null);
    check(shares.some(v => v > 5), `${group}'s measured share never above 5%: ${shares}`);
    // What it charts is the daemon's reading: the chart's last point is the
    // share of the last sample the page received (the daemon's GET
    // /v1/groups body in its event stream), whatever the share does.
    const last = await page.evaluate(g => {
      const s = window.gpusliceDashboard, uuid = document.querySelector('article.gpu').dataset.uuid;
      const plot = s.charts.get(uuid + '/share').plot;
      const i = plot.series.findIndex(x => x.label === g);
      const on = s.sample.groups.find(x => x.id === g).gpus.find(x => x.uuid === uuid);
      return { charted: plot.data[i][plot.data[i].length - 1], sampled: on.share * 100 };
    }, group);
    check(Math.abs(last.charted - last.sampled) < 1e-6,
          `${group}'s last charted share ${last.charted}% is not its last sample's ${last.sampled}%`);
    log(`charts: ${first.points} -> ${later.points} points; ${group} share ${shares.slice(-3)}`);
    await page.context().close();

    // 3. An admin (token in the fragment): controls that change a limit and pause.
    const admin = (await openPage(browser, '#token=' + encodeURIComponent(token), problems)).page;
    check(await admin.textContent('#role') === 'admin', 'admin role ' + await admin.textContent('#role'));
    check(await admin.evaluate(() => location.hash) === '', 'the token stays in the address bar');
    const row = admin.locator(`article.gpu tr[data-group="${group}"]`);
    await row.locator('input[name=compute]').fill(String(limit));
    await row.locator('button[type=submit]').click();
    await row.locator('.msg', { hasText: 'limit: done' }).waitFor(WAIT);
    await admin.waitForFunction(([g, l]) =>
      document.querySelector(`article.gpu tr[data-group="${g}"] td.limit`).textContent === l + '%', [group, limit], WAIT);
    const changed = await apiGet('/v1/groups/' + group);
    check(changed.limits.all && changed.limits.all.compute_percent === limit,
          'the API shows limits ' + JSON.stringify(changed.limits));
    await admin.waitForFunction(([g, l]) => {
      const uuid = document.querySelector('article.gpu').dataset.uuid;
      const plot = window.gpusliceDashboard.charts.get(uuid + '/share').plot;
      const i = plot.series.findIndex(s => s.label === g + ' limit');
      return i > 0 && plot.data[i][plot.data[i].length - 1] === l;
    }, [group, limit], WAIT);
    log(`admin: ${group}'s compute limit set to ${limit}% (API and chart agree)`);

    await row.locator('button.pause').click();
    await admin.waitForFunction(g =>
      document.querySelector(`article.gpu tr[data-group="${g}"] td.state`).textContent === 'paused', group, WAIT);
    check((await apiGet('/v1/groups/' + group)).paused === true, 'the API does not show the group paused');
    await row.locator('button.pause', { hasText: 'Resume' }).click();
    await admin.waitForFunction(g =>
      document.querySelector(`article.gpu tr[data-group="${g}"] td.state`).textContent === 'running', group, WAIT);
    check((await apiGet('/v1/groups/' + group)).paused === false, 'the API still shows the group paused');
    log(`admin: ${group} paused and resumed`);

    // 4. What a person reads. Each event is one line in words (never the
    // event's JSON): the pause just made reads so.
    await admin.waitForFunction(g => [...document.querySelectorAll('#events li')]
      .some(li => li.textContent.includes(`group ${g} paused`)), group, WAIT);
    const events = await admin.$$eval('#events li', lis => lis.map(li => {
      const range = document.createRange();
      range.selectNodeContents(li);
      const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      return { text: li.textContent, lines: tops.size };
    }));
    for (const e of events) {
      check(!/[{}]|":/.test(e.text), 'an event shown as JSON: ' + e.text);
      check(e.lines === 1, `an event on ${e.lines} lines: ${e.text}`);
    }
    // Event types the page has no sentence for read as their type and fields.
    const described = await admin.evaluate(() => window.gpusliceDashboard.describeEvent(
      'revert_failed', { gpu: 0, setting: 'power_limit', value: { watts: 300 }, attempts: 3 }));
    check(described === 'revert failed: gpu 0, setting power_limit, value.watts 300, attempts 3',
          'an unknown event reads: ' + described);
    log(`events: ${events.length}, one line each, e.g. "${events[0].text}"`);
    // No time-axis labels overlap: each label's widest line (measured in the
    // axis's font) fits between it and the next, on a chart made with the
    // page's own options at the narrowest width (300 px) and the page's, over
    // spans from the first seconds to the five minutes the daemon keeps (a
    // chart of its own, so that no sample redraws it meanwhile).
    const overlaps = await admin.evaluate(async () => {
      const out = [];
      const ctx = document.createElement('canvas').getContext('2d');
      const page = document.querySelector('.plot').clientWidth;
      const box = document.body.appendChild(document.createElement('div'));
      const now = Math.floor(Date.now() / 1000);
      for (const width of [300, page]) {
        for (const seconds of [10, 30, 60, 90, 120, 180, 300]) {
          const times = Array.from({ length: seconds + 1 }, (_, i) => now - seconds + i);
          const line = { label: 'share', color: '#888' };
          const u = new uPlot(window.gpusliceDashboard.chartOptions({}, [line], width),
                              [times, times.map(() => 50)], box);
          await new Promise(r => requestAnimationFrame(() => r()));  // drawn
          const axis = u.axes[0];
          ctx.font = axis.font[0];
          const scale = axis.font[1] / axis.font[2];  // device pixels per CSS pixel
          const labels = (axis._values || []).map((v, i) => v == null ? null : {
            v, x: u.valToPos(axis._splits[i], 'x'),
            w: Math.max(...String(v).split('\n').map(l => ctx.measureText(l).width)) / scale,
          }).filter(l => l);
          const where = `${width} px, ${seconds} s`;
          if (labels.length < 2) out.push(`${where}: ${labels.length} time-axis labels`);
          for (let i = 1; i < labels.length; i++) {
            const [a, b] = [labels[i - 1], labels[i]];
            if (b.x - a.x < (a.w + b.w) / 2 + 4) {
              out.push(`${where}: ${JSON.stringify(a.v)} at ${a.x.toFixed(0)} px and ` +
                       `${JSON.stringify(b.v)} at ${b.x.toFixed(0)} px`);
            }
          }
          u.destroy();
        }
      }
      box.remove();
      return out;
    });
    check(overlaps.length === 0, 'time-axis labels overlap:\n  ' + overlaps.join('\n  '));
    log('charts: no time-axis labels overlap');

    await admin.screenshot({ path: args.screenshot, fullPage: true });
    check(problems.length === 0, 'problems on the page:\n  ' + problems.join('\n  '));
  } finally {
    await browser.close();
  }
}

setTimeout(() => { console.error('dashboard_browser: gave up after 240 s'); process.exit(2); }, 240000).unref();
main().then(() => log('all checks passed'), e => { console.error('dashboard_browser: ' + e.message); process.exit(1); });
