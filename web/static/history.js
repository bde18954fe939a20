// history.js is the player's history (Article 4.2): plays newest first,
// the last play on top, each replayed throw by throw and verified in the
// browser (verify.js: the checks of `tresor verify-play`) against the
// block's commitment as published at GET /v1/commitments/{block}, and
// against the regulator's vault's cosignatures the operator relays at GET
// /v1/vault/cosignatures (the witness).

import { api, publicGet, signIn, explain, euros, when, el, say, TIER_TEXT, STATUS_TEXT, rules } from './common.js';
import { GameMap } from './map.js';
import { verifyPlay, witness } from './verify.js';

const $ = id => document.getElementById(id);
const PAGE = 20;

async function main() {
  const { token, claims } = await signIn();
  let player = claims.player;
  if (claims.role === 'finance') {
    $('refusal').textContent = 'Finance does not read players\' histories: the console has the blocks and the reconciliation.';
    return;
  }
  if (claims.role !== 'player') {
    // Operators and regulators read any player's history.
    $('player-form').hidden = false;
    $('player-form').addEventListener('submit', e => {
      e.preventDefault();
      player = new FormData(e.target).get('player').trim();
      $('plays').replaceChildren();
      load(player, '');
    });
    return;
  }
  load(player, '');

  async function load(p, before) {
    $('refusal').textContent = '';
    try {
      const page = await api(token, 'GET', `/v1/players/${encodeURIComponent(p)}/plays?limit=${PAGE}${before ? '&before=' + before : ''}`);
      const list = $('plays');
      if (!before && page.plays.length === 0) list.append(el('li', { class: 'empty' }, 'No play yet.'));
      page.plays.forEach((pl, i) => list.append(row(p, pl, !before && i === 0)));
      $('more').hidden = !page.next;
      $('more').onclick = () => load(p, page.next);
    } catch (err) { $('refusal').textContent = explain(err); }
  }

  function row(p, play, last) {
    const detail = el('div', { class: 'detail', hidden: true });
    const verdict = el('div', { class: 'verdict', 'aria-live': 'polite' });
    const li = el('li', { class: 'play', 'data-play-id': play.play_id },
      el('div', { class: 'summary' },
        last ? el('span', { class: 'badge' }, 'Last play') : null,
        el('time', { datetime: play.at }, when(play.at)),
        el('span', {}, 'stake ', euros(play.stake)),
        el('span', {}, STATUS_TEXT[play.status] || play.status),
        el('span', { 'data-tier': play.tier || '' }, play.tier ? TIER_TEXT[play.tier] : '—'),
        el('strong', { 'data-prize': play.prize || '' }, play.prize != null ? euros(play.prize) : '—'),
        el('button', { type: 'button', onclick: () => replay(play, detail) }, 'Replay'),
        el('button', { type: 'button', class: 'verify', onclick: e => verify(p, play, li, verdict, e.target) }, 'Verify')),
      detail, verdict);
    return li;
  }

  // replay shows the map as first dealt and steps through the throws.
  function replay(play, detail) {
    detail.hidden = false;
    const board = el('div');
    let step = 0;
    const caption = el('p', { 'aria-live': 'polite' });
    const prev = el('button', { type: 'button' }, 'Previous throw');
    const next = el('button', { type: 'button' }, 'Next throw');
    detail.replaceChildren(board, el('div', { class: 'controls' }, prev, next), caption);
    const map = new GameMap(board, { ...play, chests: play.chests.map(c => ({ cell: c.cell })) });
    const render = () => {
      map.hideAll();
      map.reset(play.start || play.pawn);
      play.throws.slice(0, step).forEach(t => map.throwTo(t));
      prev.disabled = step === 0;
      next.disabled = step === play.throws.length;
      const t = play.throws[step - 1];
      caption.textContent = step === 0 ? `Start: ${play.throws.length} throw(s) to replay.`
        : `Throw ${step}: ${t.direction} ${t.steps}` + (t.symbol ? `, a chest: ${t.symbol}.` : ', nothing opens.')
          + (step === play.throws.length && play.tier ? ` Result: ${TIER_TEXT[play.tier]}, ${euros(play.prize)}.` : '');
    };
    prev.onclick = () => { step--; render(); };
    next.onclick = () => { step++; render(); };
    render();
    next.focus();
  }

  // verify reads the play and its block's published commitment afresh,
  // runs the checks and marks the row data-verified. The checks prove the
  // play the page read again; the row check ties that proof to the row.
  async function verify(p, play, li, out, button) {
    const id = play.play_id;
    button.disabled = true;
    delete li.dataset.verified;
    out.replaceChildren(el('p', {}, 'Checking…'));
    try {
      const doc = await api(token, 'GET', `/v1/players/${encodeURIComponent(p)}/plays/${encodeURIComponent(id)}`);
      const from = `/v1/commitments/${encodeURIComponent(doc.block_id)}`;
      const published = await publicGet(from);
      const progress = (done, total) => { out.firstChild.textContent = `Rebuilding the block's deck from its seed… ${Math.round(100 * done / total)} %`; };
      const v = await verifyPlay(doc, rules, published, from, progress);
      const seen = await witness(await publicGet('/v1/vault/cosignatures'), doc);
      const checks = [rowCheck(p, play, doc), ...v.checks, seen];
      const valid = v.valid && checks[0].status === 'pass' && seen.status !== 'fail';
      li.dataset.verified = valid ? 'valid' : 'invalid';
      out.replaceChildren(
        el('p', { class: valid ? 'valid' : 'invalid' }, valid ? '✔ VALID: every check holds.' : '✘ INVALID: a check fails.'),
        el('p', { class: 'source' }, v.root_source === 'independent' ? `Root ${v.root}, as published at ${from}.`
          : v.root_source === 'document' ? `Root ${v.root}: the play's own claim (the published commitment could not be read).` : 'No root.'),
        el('ul', { class: 'checks' }, checks.map(c => el('li', { 'data-check': c.name, 'data-status': c.status },
          el('span', { class: 'status st-' + c.status }, c.status), ' ', el('code', {}, c.name), ' ', c.detail))));
      say(`Play ${id}: ${valid ? 'valid' : 'invalid'}.`);
    } catch (err) { out.replaceChildren(el('p', { class: 'invalid' }, explain(err))); }
    button.disabled = false;
  }

  // rowCheck says whether the play verified is the one its row shows: the
  // same id, the page's player, the same stake and, once the row shows the
  // play over (a settled play never changes), the same status, tier and
  // prize. A list answer that claimed more than the play, or another play
  // answered for this one, fails here whatever the other's proof.
  function rowCheck(p, play, doc) {
    const fields = ['play_id', 'stake'].concat(play.status === 'in_progress' ? [] : ['status', 'tier', 'prize']);
    const differ = fields.filter(f => (play[f] ?? null) !== (doc[f] ?? null)).map(f => `${f} ${play[f] ?? '—'} ≠ ${doc[f] ?? '—'}`);
    if (doc.player !== p) differ.unshift(`player ${p} ≠ ${doc.player ?? '—'}`);
    return {
      name: 'row', status: differ.length ? 'fail' : 'pass',
      detail: differ.length ? `the row shows another play than the one verified: ${differ.join(', ')}`
        : `the row shows the play verified (player, ${fields.join(', ')})`,
    };
  }
}

main();
