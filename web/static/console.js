// console.js is the console of operators, finance and regulators: the
// service's positions, every block with its chart (lots paid against the
// Article 3 table per tier, and the payout rate as sales progress), sales
// and prizes per day, the reconciliation with its differences, and CSV
// downloads. Each section is read with the visitor's token: a role the
// API refuses a section sees why instead.

import { api, signIn, explain, euros, when, integer, el, say, TIER_TEXT, rules, Problem } from './common.js';

const $ = id => document.getElementById(id);
const SVG = 'http://www.w3.org/2000/svg';
const REFRESH_MS = 5000;
// BLOCK_PAGES bounds the blocks the console lists (100 a page).
const BLOCK_PAGES = 10;
// SAMPLES_MAX bounds the payout-rate samples kept per block.
const SAMPLES_MAX = 500;

function svg(tag, attrs = {}, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children.flat()) if (c != null) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

const percent = x => `${(100 * x).toFixed(2)} %`;

async function main() {
  const { token, claims } = await signIn();
  if (!['operator', 'finance', 'regulator'].includes(claims.role)) {
    $('refusal').textContent = `The console is for operators, finance and regulators: a ${claims.role}'s token cannot open it.`;
    return;
  }
  $('console').hidden = false;
  $('ndjson').href = '/v1/commitments.ndjson';
  const refresh = async () => {
    await Promise.all([service(), blocks(token), days(token), reconciliation(token)]);
    // The other sections may have waited out a start while the service's
    // state was read first: it is read again, as fresh as the stamp.
    await service();
    $('updated').textContent = 'Updated ' + new Date().toLocaleTimeString();
  };
  for (const [id, scope] of [['csv-day', 'day'], ['csv-block', 'block'], ['csv-emission', 'emission']]) {
    $(id).addEventListener('click', () => downloadCSV(token, scope));
  }
  await refresh();
  setInterval(refresh, REFRESH_MS);
}

// service shows readiness and positions (GET /v1/ready, public).
async function service() {
  try {
    const resp = await fetch('/v1/ready', { cache: 'no-store' });
    const r = await resp.json();
    const dl = $('service');
    dl.dataset.status = r.status;
    dl.replaceChildren(...[
      ['Readiness', r.status + (r.reason ? ` (${r.reason})` : '')],
      ['Writer position', integer(r.writer_seq)],
      ['Projections position', integer(r.projection_seq)],
      ['Projection lag', `${integer(r.lag)} event(s)`],
      ['Head at start', integer(r.start_seq)],
      ['Last seal', r.seal_seq ? `stream position ${integer(r.seal_seq)} (the signed chain head; tresor audit checks every seal)` : 'none applied since this process started'],
    ].flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
    if (r.status !== 'ready') say('Tresor is starting… the figures below are not final yet.');
  } catch (e) { say('Tresor cannot be reached.'); }
}

// section runs fn, or shows in the section why the API refused it.
async function section(id, fn) {
  const box = $(id);
  try { await fn(box); box.querySelector('.refused')?.remove(); }
  catch (e) {
    const text = e instanceof Problem && e.code === 'forbidden' ? 'Your role does not read this.' : explain(e);
    box.querySelector('.content').replaceChildren(el('p', { class: 'refused' }, text));
  }
}

async function blocks(token) {
  await section('blocks', async box => {
    let all = [], after = '';
    for (let i = 0; i < BLOCK_PAGES; i++) {
      const page = await api(token, 'GET', `/v1/blocks?limit=100${after ? '&after=' + after : ''}`);
      all = all.concat(page.blocks);
      if (!page.next) break;
      after = page.next;
    }
    const order = { open: 0, exhausted: 1, closed: 2 };
    all.sort((a, b) => order[a.state] - order[b.state] || a.id.localeCompare(b.id));
    box.querySelector('.content').replaceChildren(...(all.length ? all.map(blockView) : [el('p', {}, 'No block yet: an operator opens an emission (POST /v1/emissions).')]));
  });
}

// samples keeps, per block, the payout rate seen at each count of units
// sold while the console is open: the read models keep no history of it.
function samples(b) {
  const key = 'tresor.rate.' + b.id;
  const list = JSON.parse(sessionStorage.getItem(key) || '[]');
  if (b.sold > 0 && (!list.length || list[list.length - 1][0] !== b.sold)) list.push([b.sold, Number(b.payout_rate)]);
  while (list.length > SAMPLES_MAX) list.splice(1, 1);
  sessionStorage.setItem(key, JSON.stringify(list));
  return list;
}

function blockView(b) {
  const table = rules.tables.find(t => t.price === b.price);
  const target = table ? Number(table.total) / (Number(b.price) * rules.block_units) : 0.7;
  return el('section', { class: 'block', 'data-block': b.id, 'data-state': b.state, 'data-sold': b.sold, 'aria-labelledby': 'h-' + b.id },
    el('h3', { id: 'h-' + b.id }, `Block ${b.id} · ${euros(b.price)} · ${b.state}`),
    el('dl', { class: 'figures' },
      el('dt', {}, 'Sold'), el('dd', {}, `${integer(b.sold)} of ${integer(b.units)} (${integer(b.left)} left)`),
      el('dt', {}, 'Sales'), el('dd', {}, euros(b.sales)),
      el('dt', {}, 'Prizes paid'), el('dd', {}, euros(b.prizes_paid)),
      el('dt', {}, 'Payout rate'), el('dd', { 'data-payout-rate': b.payout_rate }, `${percent(Number(b.payout_rate))} (Article 3: ${percent(target)} once sold out)`),
      el('dt', {}, 'Opened'), el('dd', {}, `${when(b.opened_at)} (stream position ${integer(b.opened_seq)})`),
      b.closed_at ? el('dt', {}, 'Closed') : null, b.closed_at ? el('dd', {}, when(b.closed_at)) : null),
    el('div', { class: 'charts' }, tierChart(b), rateChart(b, samples(b), target)));
}

// tierChart draws, per tier, the lots paid as a share of the Article 3
// lots (the bar), the share of the block sold (the dashed line: where an
// even pace would be), and the figures in text.
function tierChart(b) {
  const W = 560, row = 22, top = 24, left = 130, width = 300;
  const h = top + row * b.tiers.length + 8;
  const pace = b.units ? b.sold / b.units : 0;
  const g = svg('svg', { viewBox: `0 0 ${W} ${h}`, class: 'chart tiers', role: 'img', 'data-chart': 'tiers',
    'aria-label': `Lots paid per tier against the Article 3 table, block ${b.id}` });
  g.append(svg('title', {}, `Lots paid per tier against the Article 3 table, block ${b.id}`),
    svg('text', { x: left, y: 14, class: 'axis' }, 'lots paid / Article 3 lots'),
    svg('text', { x: left + width + 10, y: 14, class: 'axis' }, 'paid of lots'));
  b.tiers.forEach((t, i) => {
    const y = top + i * row;
    const share = t.lots ? t.paid / t.lots : 0;
    g.append(svg('g', { 'data-tier': t.tier, 'data-paid': t.paid, 'data-lots': t.lots },
      svg('text', { x: left - 8, y: y + 14, 'text-anchor': 'end' }, TIER_TEXT[t.tier] || t.tier),
      svg('rect', { x: left, y: y + 3, width, height: 14, class: 'track' }),
      svg('rect', { x: left, y: y + 3, width: Math.max(share > 0 ? 1 : 0, width * share), height: 14, class: 'bar' }),
      svg('text', { x: left + width + 10, y: y + 14 }, `${integer(t.paid)} / ${integer(t.lots)}`)));
  });
  const x = left + width * pace;
  g.append(svg('line', { x1: x, x2: x, y1: top - 2, y2: h - 6, class: 'pace' }),
    svg('text', { x: Math.min(x + 4, left + width - 60), y: h - 1, class: 'axis' }, `${percent(pace)} sold`));
  return g;
}

// rateChart draws the payout rate against the units sold: the samples
// seen, the rate the Article 3 table pays once sold out, and the legal
// bounds (62 % to 75 %), with their values in text.
function rateChart(b, points, target) {
  const W = 560, H = 220, L = 68, R = 16, T = 16, B = 36;
  const min = Number(rules.payout_rate_min), max = Number(rules.payout_rate_max);
  const yMax = Math.max(0.9, ...points.map(p => p[1] * 1.1));
  const X = s => L + (W - L - R) * s / b.units;
  const Y = r => T + (H - T - B) * (1 - r / yMax);
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart rate', role: 'img', 'data-chart': 'payout-rate',
    'aria-label': `Payout rate as sales progress, block ${b.id}: ${percent(Number(b.payout_rate))} after ${b.sold} units` });
  g.append(svg('title', {}, `Payout rate as sales progress, block ${b.id}`),
    svg('line', { x1: L, x2: L, y1: T, y2: H - B, class: 'axis-line' }),
    svg('line', { x1: L, x2: W - R, y1: H - B, y2: H - B, class: 'axis-line' }),
    svg('text', { x: L, y: H - 8, class: 'axis' }, '0'),
    svg('text', { x: W - R, y: H - 8, class: 'axis', 'text-anchor': 'end' }, `${integer(b.units)} units sold`),
    svg('text', { x: L - 6, y: Y(0) + 4, class: 'axis', 'text-anchor': 'end' }, '0 %'),
    svg('text', { x: L - 6, y: Y(yMax) + 4, class: 'axis', 'text-anchor': 'end' }, percent(yMax)));
  // The three lines lie close together: their labels go above (the
  // maximum), below (the minimum and, at the left, the table's rate).
  for (const [r, cls, label, x, dy, anchor] of [[min, 'bound', `legal min ${percent(min)}`, W - R - 4, 13, 'end'],
    [max, 'bound', `legal max ${percent(max)}`, W - R - 4, -4, 'end'], [target, 'target', `Article 3 ${percent(target)}`, L + 60, 11, 'start']]) {
    g.append(svg('line', { x1: L, x2: W - R, y1: Y(r), y2: Y(r), class: cls }),
      svg('text', { x, y: Y(r) + dy, class: 'axis', 'text-anchor': anchor }, label));
  }
  if (points.length) {
    g.append(svg('polyline', { points: points.map(p => `${X(p[0])},${Y(p[1])}`).join(' '), class: 'line' }));
    const [s, r] = points[points.length - 1];
    g.append(svg('circle', { cx: X(s), cy: Y(r), r: 4, class: 'dot' }),
      svg('text', { x: Math.min(X(s) + 6, W - R - 90), y: Y(r) - 6 }, percent(r)));
  } else {
    g.append(svg('text', { x: L + 8, y: T + 16 }, 'no sale yet'));
  }
  return g;
}

async function days(token) {
  await section('days', async box => {
    // The last 14 UTC days, today's included: days without activity have
    // no row.
    const from = new Date(Date.now() - 13 * 86400000).toISOString().slice(0, 10);
    const rows = (await api(token, 'GET', `/v1/reconciliation?scope=day&from=${from}`)).rows;
    if (!rows.length) { box.querySelector('.content').replaceChildren(el('p', {}, 'No sale in the last 14 days.')); return; }
    box.querySelector('.content').replaceChildren(el('table', {},
      el('caption', {}, 'Sales and prizes per day (UTC days, the last 14)'),
      el('thead', {}, el('tr', {}, ['Day', 'Units sold', 'Sales', 'Prizes paid', 'Payout'].map(h => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, rows.map(d => el('tr', { 'data-day': d.key },
        el('th', { scope: 'row' }, new Date(d.key + 'T00:00:00Z').toLocaleDateString(undefined, { timeZone: 'UTC' })),
        el('td', {}, integer(d.units_sold)), el('td', {}, euros(d.sales)), el('td', {}, euros(d.prizes_paid)),
        el('td', {}, Number(d.sales) > 0 ? percent(Number(d.prizes_paid) / Number(d.sales)) : '—'))))));
  });
}

async function reconciliation(token) {
  await section('reconciliation', async box => {
    const [em, bl] = await Promise.all([api(token, 'GET', '/v1/reconciliation?scope=emission'), api(token, 'GET', '/v1/reconciliation?scope=block')]);
    const rows = em.rows.concat(bl.rows);
    const cols = [['Sales', 'sales'], ['Prizes paid', 'prizes_paid'], ['Prizes owed', 'prizes_owed'], ['Prize fund left', 'prize_fund_left'], ['House margin', 'house_margin'], ['Difference', 'difference']];
    box.querySelector('.content').replaceChildren(rows.length ? el('table', {},
      el('caption', {}, 'Reconciliation per emission and per block: the difference adds every discrepancy, and is 0.00 when the books agree'),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Scope'), el('th', { scope: 'col' }, 'Key'), el('th', { scope: 'col' }, 'Units sold'), cols.map(([h]) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, rows.map(r => el('tr', { 'data-scope': r.scope, 'data-key': r.key, 'data-difference': r.difference, class: r.difference === '0.00' ? '' : 'differs' },
        el('td', {}, r.scope), el('th', { scope: 'row' }, r.key), el('td', {}, integer(r.units_sold)),
        cols.map(([, k]) => el('td', {}, k === 'difference' && r[k] !== '0.00' ? `≠ ${euros(r[k])}` : euros(r[k]))))))) : el('p', {}, 'No emission yet.'));
  });
}

// downloadCSV fetches a reconciliation as CSV with the token (a plain link
// could not carry it) and hands it to the browser as a file.
async function downloadCSV(token, scope) {
  try {
    const resp = await fetch(`/v1/reconciliation?scope=${scope}`, { headers: { Authorization: 'Bearer ' + token, Accept: 'text/csv' } });
    if (!resp.ok) throw new Problem(resp.status, await resp.json());
    const url = URL.createObjectURL(await resp.blob());
    const a = el('a', { href: url, download: `tresor-reconciliation-${scope}.csv` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) { say(explain(e)); }
}

main();
