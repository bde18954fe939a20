// common.js is what every page shares: the visitor's token (taken from
// the URL fragment or the form, kept for the tab only, never put in a URL
// a server sees), calls to the API, plain words for its refusals, and
// amounts and dates in the visitor's locale.

export const rules = JSON.parse(document.getElementById('rules').textContent);

const TOKEN = 'tresor.token';
// RETRIES bounds the waits on a 503 (about a minute): the API answers 503
// while it starts, and a retry is safe (same Idempotency-Key, same throw).
const RETRIES = 60;

const statusEl = () => document.getElementById('status');
export function say(text) { statusEl().textContent = text; }

// claims is the token's payload, or null when it is not shaped as a JWT:
// a pasted token is checked for its shape before the API is asked.
export function claims(token) {
  try {
    const p = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(p + '='.repeat((4 - p.length % 4) % 4)));
  } catch { return null; }
}

// token returns the visitor's token: from the fragment (#token=…), which
// it then removes from the address bar, or the one this tab already has.
export function token() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN);
}

// signIn shows who the token is for, as the API verified it (GET /v1/me:
// the identity provider's claims may have other names), or the form to
// paste one; it resolves to the token and that identity once the API takes
// a token.
export function signIn() {
  const who = document.getElementById('who');
  const form = document.getElementById('token-form');
  return new Promise(resolve => {
    const show = async t => {
      if (!claims(t)) {
        say('That is not a token: it has three parts separated by dots.');
        return false;
      }
      let me;
      try { me = await api(t, 'GET', '/v1/me'); } catch (e) { say(explain(e)); return false; }
      sessionStorage.setItem(TOKEN, t);
      form.hidden = true;
      showWho(me);
      say('');
      resolve({ token: t, claims: me });
      return true;
    };
    who.querySelector('button').addEventListener('click', () => { sessionStorage.removeItem(TOKEN); location.reload(); });
    const ask = () => { form.hidden = false; form.querySelector('input').focus(); };
    form.addEventListener('submit', async e => {
      e.preventDefault();
      const input = form.querySelector('input');
      const t = input.value.trim();
      input.value = '';
      if (!(await show(t))) ask();
    });
    const t = token();
    if (!t) { ask(); return; }
    show(t).then(ok => { if (!ok) { sessionStorage.removeItem(TOKEN); ask(); } });
  });
}

// showWho says, in the page's header, who me (GET /v1/me) is.
export function showWho(me) {
  const who = document.getElementById('who');
  const exp = me.expires_at ? new Date(me.expires_at).toLocaleString() : '';
  who.querySelector('span').textContent = `${me.role}${me.player ? ' ' + me.player : ''}${exp ? ' · until ' + exp : ''}`;
  who.hidden = false;
}

// Problem is a refusal of the API (RFC 9457 problem details).
export class Problem extends Error {
  constructor(status, body) {
    super(body && body.detail ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code ? body.code : 'internal';
  }
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

// api calls the API with the token. A 503 (starting, or not now) is
// retried after its Retry-After, at most RETRIES times, showing
// "starting…"; any other refusal is thrown as a Problem.
export async function api(token, method, path, { body, key } = {}) {
  for (let attempt = 0; ; attempt++) {
    const headers = { Authorization: 'Bearer ' + token };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    if (key) headers['Idempotency-Key'] = key;
    let resp;
    try {
      resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
    } catch (e) {
      if (attempt >= RETRIES) throw new Problem(0, { code: 'unavailable', detail: 'Tresor cannot be reached' });
      say('Tresor cannot be reached: trying again…');
      await sleep(1000);
      continue;
    }
    const type = resp.headers.get('Content-Type') || '';
    const data = type.includes('json') ? await resp.json() : await resp.text();
    if (resp.status === 503 && attempt < RETRIES) {
      say('Tresor is starting… (' + (data.detail || 'not ready yet') + ')');
      await sleep(1000 * Math.min(5, Number(resp.headers.get('Retry-After')) || 1));
      continue;
    }
    if (attempt > 0) say('');
    if (!resp.ok) throw new Problem(resp.status, data);
    return data;
  }
}

// publicGet reads an endpoint anyone may read (the commitments), null when
// it cannot be read.
export async function publicGet(path) {
  try {
    const resp = await fetch(path, { cache: 'no-cache' });
    return resp.ok ? await resp.json() : null;
  } catch { return null; }
}

// PLAIN says each refusal in plain words; the API's detail, which names
// the figures, follows it.
const PLAIN = {
  insufficient_funds: 'Your balance is too low for this stake.',
  limit_exceeded: 'This would go over your limit.',
  self_excluded: 'Your account is self-excluded: it cannot stake.',
  banned: 'Your account is under a ban: it cannot stake.',
  no_open_block: 'No block of this price is on sale right now: try another stake.',
  sales_suspended: 'The operator has suspended these sales for now: try another stake, or later.',
  invalid_stake: 'This stake is not one of the game\'s prices.',
  unauthorized: 'Your token is missing, invalid or expired: sign in with a fresh one.',
  forbidden: 'Your token does not allow this.',
  not_found: 'Nothing was found.',
  play_finished: 'This play is already over.',
  throw_out_of_turn: 'That throw is not the next one: reload the page.',
  rate_limited: 'Too many requests: wait a moment and try again.',
  unavailable: 'Tresor is not available right now: try again shortly.',
  conflict: 'This request conflicts with an earlier one.',
  invalid_request: 'The request was refused as malformed.',
  internal: 'Tresor failed to answer: try again.',
};
export function explain(err) {
  if (err instanceof Problem) return (PLAIN[err.code] || PLAIN.internal) + (err.message && !err.message.startsWith('HTTP') ? ` (${err.message})` : '');
  return 'Something went wrong: ' + err.message;
}

// newKey is a fresh Idempotency-Key.
export function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, x => x.toString(16).padStart(2, '0')).join('');
}

const EUR = new Intl.NumberFormat(undefined, { style: 'currency', currency: 'EUR' });
// euros writes an amount (a decimal string, exact) in the visitor's locale.
export function euros(amount) {
  if (amount == null) return '—';
  // Intl formats a decimal string exactly, without a float.
  return EUR.format(String(amount));
}
export function when(iso) { return iso ? new Date(iso).toLocaleString() : '—'; }
export function integer(n) { return new Intl.NumberFormat().format(n); }

// el builds an element: el('p', {class: 'x', 'data-y': 1}, 'text', child…).
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === false || v == null) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c != null) e.append(c instanceof Node ? c : String(c));
  return e;
}

export const TIER_TEXT = {
  chandelier_x3: '3 chandeliers', monkey_x3: '3 monkeys', sapphire_x3: '3 sapphires', skull_x3: '3 skulls',
  chandelier_x2: '2 chandeliers', monkey_x2: '2 monkeys', sapphire_x2: '2 sapphires', skull_x2: '2 skulls',
  chandelier_x1: '1 chandelier', none: 'no prize',
};
export const STATUS_TEXT = { in_progress: 'in progress', settled: 'settled', completed_by_system: 'completed by the system' };
