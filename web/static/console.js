// console.js is the console of operators, finance and regulators: the
// service's positions, the suspensions of sales (which an operator
// suspends and resumes from here), the adjustments awaiting the visitor's
// approval (which an operator or finance approves or rejects from here),
// the erasures of personal data awaiting an operator's approval (likewise),
// every block with its chart (lots paid against the
// Article 3 table per tier, and the payout rate as sales progress), sales
// and prizes per day, the reconciliation with its differences, and CSV
// downloads: the reconciliation, the report pack and players' statements. Each section is read with the visitor's token: a role the
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
    await Promise.all([service(), sales(token, claims), adjustments(token, claims), erasures(token, claims), blocks(token), days(token),
      reconciliation(token)]);
    // The other sections may have waited out a start while the service's
    // state was read first: it is read again, as fresh as the stamp.
    await service();
    $('updated').textContent = 'Updated ' + new Date().toLocaleTimeString();
  };
  if (claims.role === 'operator') {
    const form = $('suspend-form');
    form.hidden = false;
    form.addEventListener('submit', async e => {
      e.preventDefault();
      const body = { scope: form.scope.value.trim(), reason: form.reason.value.trim() };
      try {
        const x = await api(token, 'POST', '/v1/sales/suspensions', { body });
        say(`Sales of ${x.scope} are suspended (${x.id}).`);
        form.reset();
        await sales(token, claims);
      } catch (err) { say(explain(err)); }
    });
  }
  for (const [id, scope] of [['csv-day', 'day'], ['csv-block', 'block'], ['csv-emission', 'emission']]) {
    $(id).addEventListener('click', () => downloadCSV(token, `/v1/reconciliation?scope=${scope}`, `tresor-reconciliation-${scope}.csv`));
  }
  downloads(token);
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
    // Each figure with what it means, for readers who do not run Tresor.
    dl.replaceChildren(...[
      ['Readiness', r.status + (r.reason ? ` (${r.reason})` : ''), 'ready: every figure below is current and commands are taken'],
      ['Writer position', integer(r.writer_seq), 'how many events the ledger has recorded for good: the number of the last one'],
      ['Projections position', integer(r.projection_seq), 'the last of those events the figures on this page include'],
      ['Projection lag', `${integer(r.lag)} event(s)`, 'events recorded but not yet in these figures; 0: the page is up to date'],
      ['Head at start', integer(r.start_seq), 'where the ledger stood when this server started'],
      ['Last seal', r.seal_seq ? `stream position ${integer(r.seal_seq)}` : 'none applied since this process started',
        'the last point where the ledger was signed: no event up to it can change unnoticed (tresor audit checks every seal)'],
    ].flatMap(([k, v, meaning]) => [el('dt', {}, k), el('dd', {}, v, el('br'), el('small', { class: 'muted' }, meaning))]));
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

// sales lists the suspensions of sales, those in force first; an
// operator may resume one, with a reason.
async function sales(token, claims) {
  await section('sales', async box => {
    const list = (await api(token, 'GET', '/v1/sales/suspensions')).suspensions;
    list.sort((a, b) => (b.in_force - a.in_force) || (b.seq - a.seq));
    const inForce = list.filter(x => x.in_force).length;
    box.querySelector('.content').replaceChildren(
      el('p', { 'data-sales': inForce ? 'suspended' : 'open' }, inForce
        ? `${inForce} suspension(s) in force: stakes in their scopes are refused; plays already bought go on.`
        : 'Every sale is open: no suspension in force.'),
      list.length ? el('table', {},
        el('caption', {}, 'Suspensions of sales: in force, then the latest resumed'),
        el('thead', {}, el('tr', {}, ['Id', 'Scope', 'Since', 'By', 'Reason', 'Resumed', ''].map(h => el('th', { scope: 'col' }, h)))),
        el('tbody', {}, list.map(x => el('tr', { 'data-suspension': x.id, 'data-in-force': String(x.in_force), class: x.in_force ? 'differs' : '' },
          el('th', { scope: 'row' }, x.id), el('td', {}, x.scope), el('td', {}, when(x.at)), el('td', {}, x.by ? x.by.subject : '—'),
          el('td', {}, x.reason),
          el('td', {}, x.in_force ? 'in force' : `${when(x.resumed_at)} by ${x.resumed_by ? x.resumed_by.subject : '—'}: ${x.resume_reason}`),
          el('td', {}, x.in_force && claims.role === 'operator' ? resumeButton(token, claims, x) : null))))) : '');
  });
}

// resumeButton ends a suspension after asking why.
function resumeButton(token, claims, x) {
  const b = el('button', { type: 'button' }, 'Resume');
  b.addEventListener('click', async () => {
    const reason = (prompt(`Resume the sales of ${x.scope} (${x.id}): why?`) || '').trim();
    if (!reason) return;
    try {
      await api(token, 'DELETE', `/v1/sales/suspensions/${encodeURIComponent(x.id)}`, { body: { reason } });
      say(`Sales of ${x.scope} are resumed (${x.id}).`);
      await sales(token, claims);
    } catch (err) { say(explain(err)); }
  });
  return b;
}

// adjustments lists the pending adjustments: for an operator or finance
// those they may decide (proposed by someone else, not expired), each with
// its approval and rejection; for a regulator every pending one.
async function adjustments(token, claims) {
  const decides = ['operator', 'finance'].includes(claims.role);
  const what = {
    path: 'adjustments', noun: 'adjustment', refresh: () => adjustments(token, claims),
    whose: x => x.player,
    said: a => a.balance_after ? `: ${a.player}'s balance is now ${euros(a.balance_after)}.` : '.',
    headers: ['Player', 'Credit or debit', 'Kind', 'Amount', 'Reference', 'Reason'],
    cells: x => [x.player, x.direction, x.kind.replace('_', ' '), euros(x.amount), x.reference, x.reason],
  };
  await pending(token, decides, what);
}

// erasures lists the pending erasures of personal data, as adjustments
// does: an operator decides them, a regulator reads them, finance does
// not see them.
async function erasures(token, claims) {
  if (!['operator', 'regulator'].includes(claims.role)) {
    $('erasures').hidden = true;
    return;
  }
  const whose = x => x.player || `staff key ${x.key_id}`;
  const what = {
    path: 'erasures', noun: 'erasure', refresh: () => erasures(token, claims), whose,
    said: a => a.state === 'approved' ? `: ${whose(a)}'s personal data reads "[erased]" from now on.` : '.',
    headers: ['Whose', 'Ground', 'Legal ground'],
    cells: x => [whose(x), x.ground.replace('_', ' '), x.legal_ground || '—'],
  };
  await pending(token, claims.role === 'operator', what);
}

// pending fills the section of a kind of proposal (what: its path, its
// noun, its columns) with those pending: those the visitor may decide,
// each with its approval and rejection, when they decide; every one
// otherwise.
async function pending(token, decides, what) {
  await section(what.path, async box => {
    const list = (await api(token, 'GET', `/v1/${what.path}?state=pending` + (decides ? '&awaiting=me' : '')))[what.path];
    box.querySelector('.content').replaceChildren(
      el('p', { 'data-awaiting': String(list.length) }, list.length
        ? `${list.length} ${what.noun}(s) await${decides ? ' your' : ''} approval.`
        : `No ${what.noun} awaits${decides ? ' your' : ''} approval.`),
      list.length ? el('table', {},
        el('caption', {}, `Pending ${what.noun}s, oldest first`),
        el('thead', {}, el('tr', {}, ['Id', ...what.headers, 'Proposed by', 'Expires', ''].map(h => el('th', { scope: 'col' }, h)))),
        el('tbody', {}, list.map(x => el('tr', { ['data-' + what.noun]: x.id, 'data-state': x.state },
          el('th', { scope: 'row' }, x.id), ...what.cells(x).map(c => el('td', {}, c)), el('td', {}, x.proposed_by.subject),
          el('td', {}, when(x.expires_at)),
          el('td', {}, decides && x.state === 'pending' ? decisionButtons(token, what, x) : null))))) : '');
  });
}

// decisionButtons approve a proposal, or reject it after asking why.
function decisionButtons(token, what, x) {
  const decide = async (verb, body) => {
    try {
      const a = await api(token, 'POST', `/v1/${what.path}/${encodeURIComponent(x.id)}/${verb}`, body ? { body } : {});
      say(`${what.noun[0].toUpperCase() + what.noun.slice(1)} ${a.id} is ${a.state}` + what.said(a));
      await what.refresh();
    } catch (err) { say(explain(err)); }
  };
  const approve = el('button', { type: 'button', 'data-decide': 'approve' }, 'Approve');
  approve.addEventListener('click', () => decide('approve'));
  const reject = el('button', { type: 'button', 'data-decide': 'reject' }, 'Reject');
  reject.addEventListener('click', () => {
    const reason = (prompt(`Reject ${what.noun} ${x.id} of ${what.whose(x)}: why?`) || '').trim();
    if (reason) decide('reject', { reason });
  });
  return [approve, ' ', reject];
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

// REPORTS are the report pack's kinds (GET /v1/reports/{kind}), named.
const REPORTS = [['blocks', 'blocks'], ['emissions', 'emissions'], ['days', 'days'], ['liability', 'liability'],
  ['large-wins', 'large wins'], ['suspensions', 'suspended sales'], ['adjustments', 'adjustments']];

// downloads wires the report pack's and the statements' downloads, over
// the days the form gives.
function downloads(token) {
  const form = $('report-form');
  const period = () => ['from', 'to'].filter(k => form[k].value).map(k => `${k}=${form[k].value}`).join('&');
  $('report-buttons').replaceChildren(...REPORTS.map(([kind, name]) => el('button', { type: 'button', 'data-report': kind,
    onclick: () => downloadCSV(token, `/v1/reports/${kind}?${period()}`, `tresor-report-${kind}.csv`) }, name)));
  $('statement-form').addEventListener('submit', e => {
    e.preventDefault();
    const player = e.target.player.value.trim();
    downloadCSV(token, `/v1/players/${encodeURIComponent(player)}/statement?limit=10000&${period()}`, `tresor-statement-${player}.csv`);
  });
}

// downloadCSV fetches a CSV with the token (a plain link could not carry
// it) and hands it to the browser as a file; #downloaded says what came,
// and whether a statement had more rows than one file holds.
async function downloadCSV(token, path, file) {
  try {
    const resp = await fetch(path, { headers: { Authorization: 'Bearer ' + token, Accept: 'text/csv' } });
    if (!resp.ok) throw new Problem(resp.status, await resp.json());
    const text = await resp.text();
    const url = URL.createObjectURL(new Blob([text], { type: 'text/csv' }));
    const a = el('a', { href: url, download: file });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    const lines = text.split('\n').filter(l => l !== '').length;
    const more = resp.headers.get('Tresor-Next') ? ' It holds the first 10,000 movements: choose fewer days for the rest.' : '';
    const box = $('downloaded');
    box.dataset.file = file;
    box.dataset.lines = lines;
    box.textContent = `Downloaded ${file}: ${integer(lines)} line(s).${more}`;
  } catch (e) { say(explain(e)); }
}

main();
