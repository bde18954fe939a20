// verify.js checks one play in the browser, as `tresor verify-play` does
// (audit/verifyplay.go; docs/verify-play.md lists the two side by side):
// the same nine checks, by the same names, each pass, fail or skip. Every
// hash is WebCrypto's SHA-256 or HMAC-SHA256; the algorithms are those of
// docs/deck-format.md (deck, leaves, Merkle tree, proofs) and
// docs/scenario.md (the scenario and its evaluation).

const enc = new TextEncoder();
const subtle = globalThis.crypto && globalThis.crypto.subtle;
const TWO64 = 1n << 64n;

// The codes of tiers, symbols and directions (docs/deck-format.md §4,
// docs/scenario.md "The screen"): fixed, never renumbered.
export const TIERS = ['chandelier_x3', 'monkey_x3', 'sapphire_x3', 'skull_x3', 'chandelier_x2', 'monkey_x2', 'sapphire_x2', 'skull_x2', 'chandelier_x1', 'none'];
export const SYMBOLS = ['cross', 'chandelier', 'monkey', 'sapphire', 'skull'];
export const DIRECTIONS = ['N', 'NE', 'E', 'SE', 'S', 'SW', 'W', 'NW'];
const STEP = [[-1, 0], [-1, 1], [0, 1], [1, 1], [1, 0], [1, -1], [0, -1], [-1, -1]];
// Each tier's symbol code and count (docs/scenario.md "Evaluation").
const TIER_NEED = [[1, 3], [2, 3], [3, 3], [4, 3], [1, 2], [2, 2], [3, 2], [4, 2], [1, 1], [0, 0]];
const ROWS = 7, COLS = 7, THROWS = 4, CHESTS = 9;

export function hex(bytes) { return Array.from(bytes, b => b.toString(16).padStart(2, '0')).join(''); }
export function unhex(s) {
  if (typeof s !== 'string' || !/^([0-9a-fA-F]{2})*$/.test(s)) throw new Error('not hex: ' + String(s).slice(0, 20));
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}
function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}
function u32(n) { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, n); return b; }
function u64(n) { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, BigInt(n)); return b; }
function equal(a, b) { return a.length === b.length && a.every((x, i) => x === b[i]); }

export async function sha256(bytes) { return new Uint8Array(await subtle.digest('SHA-256', bytes)); }
async function hmacKey(key) { return subtle.importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']); }
async function hmac(key, msg) { return new Uint8Array(await subtle.sign('HMAC', key, msg)); }

// Stream is the random stream of docs/deck-format.md §5 (and of the
// scenario): HMAC-SHA256 in counter mode, four big-endian words a block.
class Stream {
  static async of(key) { const s = new Stream(); s.key = await hmacKey(key); s.block = 0; s.words = []; return s; }
  async next() {
    if (this.words.length === 0) {
      const b = await hmac(this.key, u64(this.block++));
      const dv = new DataView(b.buffer);
      this.words = [0, 8, 16, 24].map(o => dv.getBigUint64(o));
    }
    return this.words.shift();
  }
  // below is the unbiased bounded draw of §6.
  async below(n) {
    const N = BigInt(n), rem = TWO64 % N;
    for (;;) {
      const x = await this.next();
      if (rem === 0n || x < TWO64 - rem) return Number(x % N);
    }
  }
}

// generateScenario follows docs/scenario.md "Generation" step by step.
export async function generateScenario(salt, tier) {
  const st = await Stream.of(await hmac(await hmacKey(salt), enc.encode('tresor/v1/scenario')));
  const [sym, need] = TIER_NEED[tier];
  const idx = (r, c) => r * COLS + c;
  const start = await st.below(ROWS * COLS);
  const visited = [start];
  let r = Math.floor(start / COLS), c = start % COLS;
  const throws = [], landing = [];
  for (let i = 0; i < THROWS; i++) {
    const moves = [];
    for (let d = 0; d < 8; d++) for (let k = 1; k <= 3; k++) {
      const nr = r + k * STEP[d][0], nc = c + k * STEP[d][1];
      if (nr >= 0 && nr < ROWS && nc >= 0 && nc < COLS && !visited.includes(idx(nr, nc))) moves.push([d, k, nr, nc]);
    }
    const [d, k, nr, nc] = moves[await st.below(moves.length)];
    throws.push({ direction: d, steps: k });
    r = nr; c = nc;
    visited.push(idx(r, c));
    landing.push(idx(r, c));
  }
  const W = [1, 2, 3, 3, 2];
  let total = 0;
  for (let k = need; k <= 4; k++) total += W[k];
  const draw = await st.below(total);
  let k = need;
  for (let acc = W[need]; draw >= acc; acc += W[++k]);
  const opened = Array(need).fill(sym);
  while (opened.length < k) {
    const allowed = [0].concat([2, 3, 4].filter(s => !opened.includes(s)));
    opened.push(allowed[await st.below(allowed.length)]);
  }
  const slots = opened.concat(Array(4 - k).fill(-1));
  for (let i = 3; i >= 1; i--) {
    const j = await st.below(i + 1);
    [slots[i], slots[j]] = [slots[j], slots[i]];
  }
  const chests = [];
  for (let i = 0; i < THROWS; i++) if (slots[i] >= 0) chests.push({ cell: landing[i], symbol: slots[i] });
  const free = [];
  for (let i = 0; i < ROWS * COLS; i++) if (!visited.includes(i)) free.push(i);
  const others = CHESTS - k;
  for (let i = 0; i < others; i++) {
    const j = i + await st.below(free.length - i);
    [free[i], free[j]] = [free[j], free[i]];
  }
  const held = [0, 0, 0, 0, 0];
  for (const ch of chests) held[ch.symbol]++;
  for (let i = 0; i < others; i++) {
    const w = [3, 1, 2, 2, 2].map((x, s) => (s > 0 && held[s] >= 3 ? 0 : x));
    let x = await st.below(w.reduce((a, b) => a + b, 0)), s = 0;
    while (x >= w[s]) x -= w[s++];
    held[s]++;
    chests.push({ cell: free[i], symbol: s });
  }
  chests.sort((a, b) => a.cell - b.cell);
  return { start, chests, throws };
}

// play replays a scenario's throws (docs/scenario.md "Playing the
// throws"): each result names the pawn's cell and the chest it opened.
export function playScenario(s) {
  let r = Math.floor(s.start / COLS), c = s.start % COLS;
  const opened = new Set(), results = [];
  for (const t of s.throws) {
    r += t.steps * STEP[t.direction][0];
    c += t.steps * STEP[t.direction][1];
    if (r < 0 || r >= ROWS || c < 0 || c >= COLS) throw new Error('the pawn leaves the map');
    const i = s.chests.findIndex(ch => ch.cell === r * COLS + c);
    const opens = i >= 0 && !opened.has(i);
    if (opens) opened.add(i);
    results.push({ direction: t.direction, steps: t.steps, pawn: r * COLS + c, chest: opens ? i : null, symbol: opens ? s.chests[i].symbol : null });
  }
  return results;
}

// matches lists the tiers the opened symbols match (docs/scenario.md
// "Evaluation"), best first.
export function matches(opened) {
  const n = [0, 0, 0, 0, 0];
  for (const s of opened) n[s]++;
  const out = [];
  TIER_NEED.forEach(([s, need], t) => {
    if (t === 9) return;
    if (need === 3 ? n[s] >= 3 : n[s] === need) out.push(t);
  });
  return out.length ? out : [9];
}

// verifyProof is the proof check of docs/deck-format.md §11.
export async function verifyProof(root, units, unit, tier, salt, path) {
  if (!(unit < units) || tier < 0 || tier > 9) return false;
  let r = await sha256(concat([0], salt, u32(unit), [tier]));
  let fn = unit, sn = units - 1;
  for (const p of path) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = await sha256(concat([1], p, r));
      if (fn % 2 === 0) while (fn % 2 === 0 && fn !== 0) { fn >>= 1; sn >>= 1; }
    } else {
      r = await sha256(concat([1], r, p));
    }
    fn >>= 1; sn >>= 1;
  }
  return sn === 0 && equal(r, root);
}

// BATCH bounds how many hashes are in flight at once in the deck check.
const BATCH = 4096;

async function inBatches(n, fn) {
  const out = new Array(n);
  for (let i = 0; i < n; i += BATCH) {
    const part = [];
    for (let j = i; j < Math.min(n, i + BATCH); j++) part.push(fn(j).then(v => { out[j] = v; }));
    await Promise.all(part);
  }
  return out;
}

// rebuildDeck rebuilds a block from its seed (docs/deck-format.md §3, §7–§9):
// the deck's tiers, the leaf key and the root. It hashes every unit: a few
// seconds for 450 000 units. progress(done, total) reports along the way.
export async function rebuildDeck(seed, lots, progress = () => {}) {
  const seedKey = await hmacKey(seed);
  const shuffle = await Stream.of(await hmac(seedKey, enc.encode('tresor/v1/shuffle')));
  const leafKey = await hmacKey(await hmac(seedKey, enc.encode('tresor/v1/leaf')));
  const n = lots.reduce((a, b) => a + b, 0);
  const deck = new Uint8Array(n);
  let at = 0;
  lots.forEach((count, t) => { deck.fill(t, at, at + count); at += count; });
  // The shuffle draws words in order; prefetch its HMAC blocks in batches.
  const words = [];
  const fetchWords = async (blocks) => {
    const base = shuffle.block;
    shuffle.block += blocks;
    const bs = await inBatches(blocks, j => hmac(shuffle.key, u64(base + j)));
    for (const b of bs) { const dv = new DataView(b.buffer); for (const o of [0, 8, 16, 24]) words.push(dv.getBigUint64(o)); }
  };
  let w = 0;
  for (let i = n - 1; i >= 1; i--) {
    const N = BigInt(i + 1), rem = TWO64 % N;
    for (;;) {
      if (w === words.length) await fetchWords(Math.max(1024, Math.ceil(i / 4)));
      const x = words[w++];
      if (rem === 0n || x < TWO64 - rem) { const j = Number(x % N); const t = deck[i]; deck[i] = deck[j]; deck[j] = t; break; }
    }
    if (i % 50000 === 0) progress(n - i, 3 * n);
  }
  const leaves = await inBatches(n, async i => {
    const salt = await hmac(leafKey, u32(i));
    return sha256(concat([0], salt, u32(i), [deck[i]]));
  });
  progress(2 * n, 3 * n);
  let level = leaves;
  while (level.length > 1) {
    const prev = level;
    const next = await inBatches(prev.length >> 1, m => sha256(concat([1], prev[2 * m], prev[2 * m + 1])));
    if (prev.length % 2 === 1) next.push(prev[prev.length - 1]);
    level = next;
  }
  progress(3 * n, 3 * n);
  return { deck, root: level[0], salt: i => hmac(leafKey, u32(i)) };
}

// Amounts are compared exactly, in cents.
function cents(s) {
  const m = /^(\d+)(?:\.(\d{1,2}))?$/.exec(String(s));
  if (!m) return null;
  return BigInt(m[1]) * 100n + BigInt((m[2] || '').padEnd(2, '0'));
}
function amount(c) { return `${c / 100n}.${String(c % 100n).padStart(2, '0')}`; }
const cellIndex = cell => (cell && Number.isInteger(cell.row) && Number.isInteger(cell.col) ? cell.row * COLS + cell.col : -1);
const cellText = i => `(${Math.floor(i / COLS)},${i % COLS})`;

// verifyPlay runs the checks of `tresor verify-play` on a play document
// (the API's answer) with the rules (the page's rule set), and published,
// the block's commitment as GET /v1/commitments/{block} publishes it (null
// when it could not be read: the root is then the document's claim).
// progress is told how the deck check goes. It resolves to a verdict
// shaped as verify-play --json's.
export async function verifyPlay(doc, rules, published, from, progress) {
  const v = { play_id: doc.play_id, valid: true, root: '', root_source: 'none', seed_source: 'none', checks: [] };
  const add = (name, bad, passed) => v.checks.push(bad.length ? { name, status: 'fail', detail: bad.join('; ') } : { name, status: 'pass', detail: passed });
  const skip = (name, detail) => v.checks.push({ name, status: 'skip', detail });
  if (!subtle) {
    v.valid = false;
    v.checks.push({ name: 'document', status: 'fail', detail: 'this browser offers no WebCrypto here (it needs https or localhost): nothing was checked' });
    return v;
  }
  const proof = doc.proof || null;
  const tier = proof ? TIERS.indexOf(proof.tier) : -1;
  let salt = null, path = null;
  try { if (proof) { salt = unhex(proof.salt); path = proof.path.map(unhex); } } catch { salt = null; }

  // document
  const bad = [];
  const m = /^(.+)-U(\d{6})$/.exec(doc.play_id || '');
  if (!m || m[1] !== doc.block_id || Number(m[2]) !== doc.unit) bad.push(`play id ${doc.play_id} does not name block ${doc.block_id} unit ${doc.unit}`);
  // A play in progress is served without its proof, which would tell its
  // outcome before the chests are opened: what needs it waits.
  const pending = !proof && doc.status === 'in_progress';
  if (!proof && !pending) bad.push('the play carries no proof');
  else if (proof && proof.unit !== doc.unit) bad.push(`the proof is for unit ${proof.unit}, the play for unit ${doc.unit}`);
  if (proof && (tier < 0 || !salt || salt.length !== 32)) bad.push('the proof is malformed');
  add('document', bad, pending ? `play ${doc.play_id} is unit ${doc.unit} of block ${doc.block_id}, in progress: its proof comes with its settlement`
    : `play ${doc.play_id} is unit ${doc.unit} of block ${doc.block_id} and carries its proof`);

  // root
  const c = doc.block_commitment || null;
  let rootUsed = null;
  const rb = [];
  if (c && c.units !== rules.block_units) rb.push(`the commitment is for a block of ${c.units} units, the rules' blocks have ${rules.block_units}`);
  if (published) {
    v.root_source = 'independent'; v.root_from = from;
    rootUsed = published.commitment.root;
    if (c && c.root !== published.commitment.root) rb.push(`the document's block_commitment.root is ${c.root}, the published root is ${published.commitment.root}`);
    if (c && c.seed_hash !== published.commitment.seed_hash) rb.push(`the document's block_commitment.seed_hash is ${c.seed_hash}, the published one is ${published.commitment.seed_hash}`);
    if (published.commitment.units !== rules.block_units) rb.push(`the published commitment is for a block of ${published.commitment.units} units`);
    if (published.price !== doc.stake) rb.push(`the play's stake is ${doc.stake}, the published block's price ${published.price}`);
  } else if (c) {
    v.root_source = 'document'; rootUsed = c.root;
  } else {
    rb.push('no root: the document has no block_commitment and no published commitment could be read');
  }
  v.root = rootUsed || '';
  if (!rb.length && v.root_source === 'document') skip('root', 'the root is the document\'s own claim (block_commitment.root), not checked against the published commitment');
  else add('root', rb, `the document's commitment is the one published at ${from}: root ${v.root}`);

  if (pending) {
    progressChecks(doc, add, skip);
    v.valid = v.checks.every(ch => ch.status !== 'fail');
    return v;
  }

  // inclusion_proof
  if (!proof || !rootUsed || !salt) add('inclusion_proof', ['no proof or no root to check it against'], '');
  else {
    let ok = false;
    try { ok = await verifyProof(unhex(rootUsed), rules.block_units, proof.unit, tier, salt, path); } catch { ok = false; }
    add('inclusion_proof', ok ? [] : [`unit ${proof.unit} with tier ${proof.tier} and salt ${proof.salt} is not a leaf of root ${rootUsed}`],
      `unit ${proof.unit} with tier ${proof.tier} and salt ${proof.salt} is a leaf of root ${rootUsed}`);
  }

  // scenario, scenario_shown, throws
  if (!proof || !salt || tier < 0) {
    for (const name of ['scenario', 'scenario_shown', 'throws']) add(name, ['no proof to derive the scenario from'], '');
  } else {
    const s = await generateScenario(salt, tier);
    const results = playScenario(s);
    const opened = results.filter(r => r.symbol !== null).map(r => r.symbol);
    const got = matches(opened);
    add('scenario', got.length === 1 && got[0] === tier ? [] : [`the derived scenario opens chests worth ${got.map(t => TIERS[t]).join(' and ')}, want exactly ${proof.tier}`],
      `the scenario derived from the salt opens chests worth exactly ${proof.tier}`);
    const sb = [];
    if (!doc.map || doc.map.rows !== ROWS || doc.map.cols !== COLS) sb.push(`map ${doc.map && doc.map.rows}×${doc.map && doc.map.cols}, want 7×7`);
    if (cellIndex(doc.start) !== s.start) sb.push(`start ${doc.start ? cellText(cellIndex(doc.start)) : 'not shown'}, want ${cellText(s.start)}`);
    const chests = doc.chests || [];
    if (chests.length !== CHESTS) sb.push(`${chests.length} chests, want ${CHESTS}`);
    const over = doc.status !== 'in_progress';
    chests.slice(0, CHESTS).forEach((ch, i) => {
      const want = s.chests[i];
      if (cellIndex(ch.cell) !== want.cell) sb.push(`chests[${i}] on ${cellText(cellIndex(ch.cell))}, want ${cellText(want.cell)}`);
      if (ch.symbol != null && ch.symbol !== SYMBOLS[want.symbol]) sb.push(`chests[${i}] shows ${ch.symbol}, want ${SYMBOLS[want.symbol]}`);
      else if (ch.symbol == null && over) sb.push(`chests[${i}] hidden in a play that is over, want ${SYMBOLS[want.symbol]} shown`);
    });
    add('scenario_shown', sb, `the map, start ${cellText(s.start)} and ${CHESTS} chests shown are the derived scenario's`);
    const tb = [];
    const shown = doc.throws || [];
    const n = Math.min(shown.length, THROWS);
    if (shown.length > THROWS) tb.push(`${shown.length} throws, at most ${THROWS}`);
    for (let i = 0; i < n; i++) {
      const g = shown[i], w = results[i];
      const same = g.direction === DIRECTIONS[w.direction] && g.steps === w.steps && cellIndex(g.pawn) === w.pawn &&
        g.chest === w.chest && (g.symbol ?? null) === (w.symbol === null ? null : SYMBOLS[w.symbol]);
      if (!same) tb.push(`throws[${i}] is not the derived scenario's (${DIRECTIONS[w.direction]} ${w.steps} to ${cellText(w.pawn)})`);
    }
    if (doc.throws_left !== THROWS - shown.length) tb.push(`throws_left ${doc.throws_left} after ${shown.length} throws, want ${THROWS - shown.length}`);
    const pawn = n > 0 ? results[n - 1].pawn : s.start;
    if (cellIndex(doc.pawn) !== pawn) tb.push(`pawn on ${cellText(cellIndex(doc.pawn))}, want ${cellText(pawn)}`);
    if (doc.status === 'in_progress') { if (shown.length === THROWS) tb.push('status in_progress after the 4th throw'); }
    else if (doc.status === 'settled' || doc.status === 'completed_by_system') { if (shown.length !== THROWS) tb.push(`status ${doc.status} after ${shown.length} throws, want ${THROWS}`); }
    else tb.push(`status ${doc.status}, want in_progress, settled or completed_by_system`);
    add('throws', tb, `the ${shown.length} throws shown are the derived scenario's, pawn on ${cellText(pawn)}`);
  }

  // tier
  if (!proof) add('tier', ['no proof to read the unit\'s tier from'], '');
  else if (doc.status === 'in_progress' && doc.tier == null) skip('tier', 'the play is in progress: no tier yet');
  else if (doc.tier == null) add('tier', [`a play ${doc.status} without a tier`], '');
  else add('tier', doc.tier === proof.tier ? [] : [`the play settled on ${doc.tier}, the proven tier is ${proof.tier}`], `the play settled on the proven tier ${proof.tier}`);

  // prize
  const table = rules.tables.find(t => cents(t.price) === cents(doc.stake));
  if (!proof) add('prize', ['no proof to read the unit\'s tier from'], '');
  else if (!table || tier < 0) add('prize', [`stake ${doc.stake} is not a price of the rules`], '');
  else {
    const want = cents(table.lots[tier].amount);
    if (doc.status === 'in_progress' && doc.prize == null) skip('prize', `the play is in progress: it will pay ${amount(want)} (${proof.tier} at ${doc.stake})`);
    else if (doc.prize == null) add('prize', [`a play ${doc.status} without a prize, want ${amount(want)}`], '');
    else add('prize', cents(doc.prize) === want ? [] : [`prize ${doc.prize}, want ${amount(want)} (${proof.tier} at stake ${doc.stake}, rules ${rules.version})`],
      `prize ${amount(want)} is the rules' prize of ${proof.tier} at stake ${doc.stake} (rules ${rules.version})`);
  }

  // deck
  let seedHex = published && published.seed ? published.seed : null;
  v.seed_source = seedHex ? 'independent' : 'none';
  if (!seedHex && doc.block_seed) { seedHex = doc.block_seed; v.seed_source = 'document'; }
  if (!seedHex) skip('deck', 'the block\'s seed is not revealed yet (it is, once the block is closed)');
  else if (!table) add('deck', [`stake ${doc.stake} is not a price of the rules`], '');
  else {
    const db = [];
    const seed = unhex(seedHex);
    if (doc.block_seed && doc.block_seed !== seedHex) db.push('the document\'s block_seed is not the published seed');
    const sh = hex(await sha256(seed));
    if (c && sh !== c.seed_hash) db.push(`the seed hashes to ${sh}, the commitment's seed_hash is ${c.seed_hash}`);
    if (published && sh !== published.commitment.seed_hash) db.push(`the seed hashes to ${sh}, the published seed_hash is ${published.commitment.seed_hash}`);
    const built = await rebuildDeck(seed, table.lots.map(l => l.count), progress);
    if (rootUsed && hex(built.root) !== rootUsed) db.push(`the seed's deck has root ${hex(built.root)}, want ${rootUsed}`);
    if (proof && tier >= 0) {
      if (!(proof.unit < built.deck.length)) db.push(`unit ${proof.unit} is outside the deck of ${built.deck.length} units`);
      else {
        if (built.deck[proof.unit] !== tier) db.push(`the deck gives unit ${proof.unit} tier ${TIERS[built.deck[proof.unit]]}, the proof ${proof.tier}`);
        const s2 = hex(await built.salt(proof.unit));
        if (s2 !== proof.salt) db.push(`the deck gives unit ${proof.unit} salt ${s2}, the proof ${proof.salt}`);
      }
    }
    add('deck', db, `the seed (${v.seed_source}) hashes to the commitment, its deck has the root and gives the unit its tier and salt`);
  }
  v.valid = v.checks.every(ch => ch.status !== 'fail');
  return v;
}

const pendingWhy = 'the play is in progress: its proof, which fixes its outcome, comes with its settlement (the fourth throw or the system\'s completion); verify it again then';

// progressChecks checks what a play in progress shows without its proof,
// as tresor verify-play does: as many throws as it says, the pawn where the
// last one left it, each opened chest showing what its throw found and no
// other, no tier or prize yet.
function progressChecks(doc, add, skip) {
  for (const name of ['inclusion_proof', 'scenario', 'scenario_shown']) skip(name, pendingWhy);
  const bad = [];
  const shown = doc.throws || [], chests = doc.chests || [];
  const n = shown.length;
  if (n >= THROWS) bad.push(`status in_progress after ${n} throws`);
  if (doc.throws_left !== THROWS - n) bad.push(`throws_left ${doc.throws_left} after ${n} throws, want ${THROWS - n}`);
  const pawn = n > 0 ? cellIndex(shown[n - 1].pawn) : cellIndex(doc.start);
  if (pawn < 0 || cellIndex(doc.pawn) !== pawn) bad.push(`pawn on ${cellText(cellIndex(doc.pawn))}, want ${pawn < 0 ? 'the start' : cellText(pawn)}`);
  const opened = new Map();
  shown.forEach((t, i) => {
    if (t.chest === -1 || t.chest == null) return;
    if (!(t.chest >= 0 && t.chest < chests.length) || cellIndex(chests[t.chest].cell) !== cellIndex(t.pawn)) bad.push(`throws[${i}] opens chest ${t.chest}, which is not on ${cellText(cellIndex(t.pawn))}`);
    else opened.set(t.chest, t.symbol);
  });
  chests.forEach((c, i) => {
    if (c.symbol == null) return;
    if (!opened.has(i)) bad.push(`chests[${i}] shows ${c.symbol} before it is opened`);
    else if (opened.get(i) !== c.symbol) bad.push(`chests[${i}] shows ${c.symbol}, its throw found ${opened.get(i)}`);
  });
  if (doc.tier != null || doc.prize != null) bad.push('a tier or a prize shown before the settlement');
  add('throws', bad, `${n} throws made, pawn on ${cellText(cellIndex(doc.pawn))}, only the chests opened shown`);
  for (const name of ['tier', 'prize', 'deck']) skip(name, pendingWhy);
}

// COSIGN_TAG opens the bytes a vault's cosignature signs (docs/vault.md,
// "Cosignatures").
const COSIGN_TAG = 'tresor-vault-cosignature-v1';

// cosignedBytes are the bytes a cosignature's signature covers:
// field(tag) ‖ field(chain) ‖ int(sequence) ‖ int(chain_seq) ‖ field(hash).
function cosignedBytes(c) {
  const field = b => concat(u32(b.length), b);
  return concat(field(enc.encode(COSIGN_TAG)), field(enc.encode(c.chain)), field(u64(c.sequence)), field(u64(c.chain_seq)), field(unhex(c.hash)));
}

// witness is the check `tresor verify-play --cosignatures` adds (vault's
// Witness), on a play document: a settled play is witnessed by the first
// cosignature of the regulator's vault at or after its settlement (its
// settled_seq, the last event of its life), a play in progress by the
// first at or after its stake (its seq), which fixes its outcome but does
// not show it. The signature of the cosignature the verdict names is
// verified with the vault's key that the answer names (the operator
// relays it: compare its key id with the one the regulator publishes).
// None yet is said plainly.
export async function witness(answer, doc) {
  const check = (status, detail) => ({ name: 'witness', status, detail });
  if (!answer || !Array.isArray(answer.cosignatures)) {
    return check('skip', 'the operator relays no cosignatures of the regulator\'s vault');
  }
  const pub = unhex(answer.public_key);
  const keyID = hex((await sha256(pub)).slice(0, 8));
  if (keyID !== answer.key_id) return check('fail', `the vault's key id ${answer.key_id} does not name its public key (${keyID})`);
  const stake = doc.seq || 0, settlement = doc.settled_seq || 0, inProgress = doc.status === 'in_progress';
  const odd = witnessSequences(stake, settlement, inProgress);
  if (odd) return check(odd[0], odd[1]);
  const [staked, latest] = covering(answer.cosignatures, stake);
  const [settled] = inProgress ? [null] : covering(answer.cosignatures, settlement);
  const cited = settled || staked;
  if (!cited) {
    const [seq, what] = inProgress ? [stake, 'its stake'] : [settlement, 'its settlement'];
    return check('skip', latest ? `no cosignature of the regulator's vault (key ${keyID}) covers sequence ${seq} (${what}) yet: the last covers up to ${latest.sequence}; verify again after the operator's next seal`
      : `no cosignature of the regulator's vault (key ${keyID}) yet: none covers sequence ${seq} (${what}); verify again after the operator's next seal`);
  }
  let ok = false;
  try {
    const key = await subtle.importKey('raw', pub, { name: 'Ed25519' }, false, ['verify']);
    ok = cited.key_id === keyID && await subtle.verify({ name: 'Ed25519' }, key, unhex(cited.signature), cosignedBytes(cited));
  } catch (err) {
    return check('skip', `this browser cannot check Ed25519 signatures (${err.message}): use tresor verify-play --cosignatures`);
  }
  if (!ok) return check('fail', `the cosignature of chain ${cited.chain} at ${cited.sequence} is not signed by the vault's key ${keyID}`);
  const verified = what => `the regulator's vault (key ${keyID}) verified the stream up to sequence ${cited.sequence}, ${what}, `
    + `and cosigned chain ${cited.chain}'s head there (position ${cited.chain_seq}, hash ${cited.hash})`;
  if (inProgress) {
    return check('pass', verified(`this play's stake at ${stake} included`)
      + ': it saw the same history up to the stake, which fixes the outcome; the play is in progress, so its settlement is not witnessed yet: verify again once it is settled');
  }
  if (settled) return check('pass', verified(`this play's stake at ${stake} and its settlement at ${settlement} included`) + ': it saw the same history, from the stake to the prize');
  return check('skip', `the regulator's vault (key ${keyID}) verified the stream up to sequence ${cited.sequence}, this play's stake at ${stake} included, not its settlement at ${settlement}: `
    + 'the outcome and prize shown are not witnessed yet; verify again after the operator\'s next seal');
}

// witnessSequences returns [status, detail] when the document's sequences
// cannot be looked for in the cosignatures, as the vault's Witness says.
function witnessSequences(stake, settlement, inProgress) {
  if (!stake) return ['skip', 'the document names no stream sequence to look for in the vault\'s cosignatures'];
  if (inProgress && settlement) return ['fail', `the play is in progress, yet its document names a settlement at sequence ${settlement}`];
  if (settlement && settlement <= stake) return ['fail', `the document's settlement at sequence ${settlement} is not after its stake at ${stake}`];
  if (!inProgress && !settlement) {
    return ['skip', 'the play is settled but its document names no settlement sequence (settled_seq: a document served before it was named, '
      + 'or from read models not rebuilt since): its outcome cannot be looked for in the vault\'s cosignatures'];
  }
  return null;
}

// covering returns the first cosignature of a head at or after seq (null
// for none) and the last cosignature (null when there is none).
function covering(cosignatures, seq) {
  let first = null, latest = null;
  for (const c of cosignatures) {
    if (c.sequence >= seq && (!first || c.sequence < first.sequence)) first = c;
    if (!latest || c.sequence > latest.sequence) latest = c;
  }
  return [first, latest];
}
