// index.js takes a token from the URL fragment if one came with the link,
// so that the other pages of this tab find it, and says who it is for, as
// the API verified it.

import { token, api, showWho } from './common.js';

const t = token();
if (t) {
  api(t, 'GET', '/v1/me').then(me => {
    showWho(me);
    document.querySelector('#who button').addEventListener('click', () => { sessionStorage.clear(); location.reload(); });
  }, () => {});
}
