/* Unlock and Lock. The pasted token is checked with one read (GET /v1/lanes) and kept in
 * this tab's sessionStorage only once the coordinator accepted it; Lock (or a 401 later)
 * forgets the token and every byte of data at once. */

import { HttpError, NetError, forgetToken, getLanes, keepToken, useToken } from './api.js';
import { checkCredential, clearCredential } from './credential.js';
import { $, h } from './dom.js';
import { refreshNow, resetState, state } from './state.js';
import { renderLive } from './view.js';

// the panels Lock empties
const PANELS = ['alerts', 'lanes', 'timeline', 'timeline-legend', 'log', 'log-counts',
  'log-shown', 'receipts', 'incidents', 'machines', 'evidence', 'connection-banner',
  'coordinator-name'];

function tokenProblem(token) {
  if (!token) return 'Paste the token first.';
  if (!/^[\x21-\x7e]+$/.test(token)) {
    return 'That is not a token: it may hold only printable ASCII characters, no spaces.';
  }
  return null;
}

export async function unlock(token) {
  const err = $('unlock-error');
  const problem = tokenProblem(token);
  if (problem) {
    showUnlockError(problem);
    return;
  }
  $('unlock').disabled = true;
  err.hidden = true;
  const gen = ++state.generation;
  useToken(token);
  try {
    const lanes = await getLanes();
    if (gen !== state.generation) return;
    keepToken();
    $('token').value = '';
    state.offset = lanes.now - Date.now() / 1000;
    showDashboard();
  } catch (e) {
    if (gen !== state.generation) return;
    useToken(null);
    if (e instanceof HttpError && e.status === 401) {
      showUnlockError('Wrong token: the coordinator refused it (401 unauthorized). ' +
        'Nothing was stored. Check you copied the whole token.');
    } else if (e instanceof NetError) {
      showUnlockError(`Could not reach the coordinator (${e.message}). Nothing was stored.`);
    } else {
      showUnlockError(`The coordinator answered with an error (${e.status || ''} ${e.code || ''}). ` +
        'Nothing was stored.');
    }
  } finally {
    $('unlock').disabled = false;
  }
}

function showUnlockError(text) {
  const err = $('unlock-error');
  err.replaceChildren(h('span', { 'aria-hidden': 'true', class: 'err-icon' }, '✗ '), text);
  err.hidden = false;
}

export function showDashboard() {
  $('unlock-panel').hidden = true;
  $('dashboard').hidden = false;
  $('lock').hidden = false;
  state.lastOkMs = 0;
  state.lastError = null;
  checkCredential().then(refreshNow); // which credential, once, before the first refresh
}

/** Lock: forget the token and every byte of data at once. */
export function lock(message) {
  forgetToken();
  resetState();
  clearCredential();
  for (const id of PANELS) $(id).replaceChildren();
  for (const id of ['log-lane', 'log-project']) {
    const sel = $(id);
    sel.replaceChildren(sel.options[0] ? h('option', { value: '' }, sel.options[0].text) : '');
    sel.value = '';
  }
  $('evidence-lane').replaceChildren();
  $('evidence-ticket').value = '';
  $('connection-banner').hidden = true;
  $('dashboard').hidden = true;
  $('lock').hidden = true;
  $('unlock-panel').hidden = false;
  if (message) showUnlockError(message);
  else $('unlock-error').hidden = true;
  renderLive();
  $('token').focus();
}
