// index.js takes a token from the URL fragment if one came with the link,
// so that the other pages of this tab find it, and says who it is for.

import { token, claims } from './common.js';

const t = token();
const c = t && claims(t);
if (c) {
  const who = document.getElementById('who');
  who.querySelector('span').textContent = `${c.role}${c.player ? ' ' + c.player : ''}`;
  who.querySelector('button').addEventListener('click', () => { sessionStorage.clear(); location.reload(); });
  who.hidden = false;
}
