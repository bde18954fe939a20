// play.js is the player's screen (Articles 4.1 to 4.6): choose a stake,
// play, make the 4 throws, see the tier, the prize and the balance. The
// screen shows only what the API has answered: the map comes with the
// stake's answer, each chest's content with the throw that opens it.

import { api, signIn, explain, newKey, euros, el, say, TIER_TEXT } from './common.js';
import { GameMap, SYMBOL_TEXT } from './map.js';

const $ = id => document.getElementById(id);

// cents reads an amount as the API writes it ("5.00") in whole cents.
const cents = a => BigInt(String(a).replace('.', ''));

// againstStake says what a prize means against the stake, exactly.
function againstStake(prize, stake) {
  const p = cents(prize), s = cents(stake);
  if (p === 0n) return `Your stake of ${euros(stake)} is not returned.`;
  if (p === s) return `Your stake of ${euros(stake)} back.`;
  const times = p % s === 0n ? `${p / s} times your stake of ${euros(stake)}` : `for a stake of ${euros(stake)}`;
  return `${times}: ${euros(String(p - s).padStart(3, '0').replace(/(\d\d)$/, '.$1'))} more than you staked.`;
}

async function main() {
  const { token, claims } = await signIn();
  if (claims.role !== 'player') {
    $('refusal').textContent = 'This screen is for players: your token is a ' + claims.role + '\'s. Operators, finance and regulators use the console.';
    return;
  }
  $('game').hidden = false;
  const base = `/v1/players/${encodeURIComponent(claims.player)}`;
  let play = null, map = null, busy = false;

  // setBalance shows a balance, its text and its test hook together
  // (null: unknown).
  const setBalance = b => {
    $('balance').textContent = b == null ? '—' : euros(b);
    if (b == null) delete $('balance').dataset.balance; else $('balance').dataset.balance = b;
  };
  const showBalance = async seq => {
    try {
      const a = await api(token, 'GET', `${base}/account${seq ? '?min_seq=' + seq : ''}`);
      setBalance(a.balance);
    } catch (e) { setBalance(null); refuse(e); }
  };
  const refuse = e => { $('refusal').textContent = explain(e); };
  const inPlay = () => play && play.status === 'in_progress';
  const setBusy = b => {
    busy = b;
    $('play').disabled = b || inPlay();
    $('throw').disabled = b || !inPlay();
    // On a phone the stake's form gives way to the map while a play is on.
    if (inPlay()) $('game').dataset.playing = ''; else delete $('game').dataset.playing;
    if (play && !inPlay()) $('game').dataset.finished = ''; else delete $('game').dataset.finished;
  };

  // logThrow lists throw n, so that every throw stays readable after the
  // next one has moved the pawn.
  const logThrow = (n, t) => $('throw-log').append(el('li', { 'data-throw': n },
    `Throw ${n}: ${t.direction} ${t.steps}` + (t.symbol ? `, a chest: ${SYMBOL_TEXT[t.symbol]}.` : ', nothing opens.')));

  const show = p => {
    play = p;
    map = new GameMap($('map'), p);
    $('throw-log').replaceChildren();
    p.throws.forEach((t, i) => { map.throwTo(t); logThrow(i + 1, t); });
    $('throws-left').textContent = p.throws_left;
    $('result').replaceChildren();
    $('result').dataset.status = p.status;
    $('play-id').textContent = p.play_id;
    if (p.status !== 'in_progress') finish(p.tier, p.prize, p.status);
    setBusy(false);
  };

  const finish = (tier, prize, status) => {
    $('result').dataset.status = status;
    $('result').dataset.tier = tier;
    $('result').dataset.prize = prize;
    $('result').replaceChildren(
      el('p', { class: tier === 'none' ? 'lost' : 'won' }, tier === 'none' ? 'No prize this time.' : `You won ${euros(prize)}!`),
      el('p', { 'data-against-stake': '' }, againstStake(prize, play.stake)),
      el('p', {}, 'Tier: ', el('strong', { 'data-tier': tier }, TIER_TEXT[tier] || tier), ' · prize ', el('strong', { 'data-prize': prize }, euros(prize))));
  };

  // revealRest shows the chests no throw opened, faded, and outlines those
  // the throws found: after the play the player sees which were theirs.
  const revealRest = chests => {
    const found = new Set(play.throws.filter(t => t.chest != null).map(t => t.chest));
    chests.forEach((ch, i) => {
      if (ch.symbol && !map.chests[i].dataset.symbol) map.open(i, ch.symbol);
      map.chests[i].classList.add(found.has(i) ? 'found' : 'revealed');
      if (found.has(i)) map.chests[i].dataset.found = '';
    });
  };

  $('stake-form').addEventListener('submit', async e => {
    e.preventDefault();
    if (busy) return;
    const stake = new FormData(e.target).get('stake');
    $('refusal').textContent = '';
    setBusy(true);
    try {
      // One key per click: a retry of this request (503) is the same stake.
      const p = await api(token, 'POST', `${base}/plays`, { body: { stake }, key: newKey() });
      show(p);
      setBalance(p.balance);
      say(`Play ${p.play_id}: make your 4 throws.`);
      $('throw').focus();
    } catch (err) { refuse(err); setBusy(false); }
  });

  $('throw').addEventListener('click', async () => {
    if (busy || !play || play.status !== 'in_progress') return;
    const n = play.throws.length + 1;
    $('refusal').textContent = '';
    setBusy(true);
    try {
      const t = await api(token, 'POST', `${base}/plays/${play.play_id}/throws`, { body: { throw: n } });
      // A throw's answer names the chest it opened as an object; the
      // play's throws (and the map) as its index.
      const r = { direction: t.direction, steps: t.steps, pawn: t.pawn, chest: t.chest ? t.chest.index : null, symbol: t.chest ? t.chest.symbol : null };
      map.throwTo(r);
      play.throws.push(r);
      logThrow(t.throw, r);
      play.throws_left = t.throws_left;
      play.status = t.status;
      $('throws-left').textContent = t.throws_left;
      say(`Throw ${t.throw}: ${t.direction} ${t.steps}` + (t.chest ? `, a chest: ${t.chest.symbol}.` : ', nothing opens.'));
      if (t.status !== 'in_progress') {
        finish(t.tier, t.prize, t.status);
        // Once settled every chest shows its content; the balance has the prize.
        const whole = await api(token, 'GET', `${base}/plays/${play.play_id}?min_seq=${t.seq}`);
        revealRest(whole.chests);
        await showBalance(t.seq);
        $('play').focus();
      }
    } catch (err) { refuse(err); }
    setBusy(false);
  });

  await showBalance();
  try {
    const last = await api(token, 'GET', `${base}/plays/last`);
    if (last.status === 'in_progress') { show(last); say(`Your play ${last.play_id} is waiting for its throws.`); }
  } catch (err) { if (err.code !== 'not_found') refuse(err); }
  setBusy(false);
}

main();
