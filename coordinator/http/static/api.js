/* HTTP, reads only: the bearer token and the four GET endpoints the page may call.
 *
 * - The token lives in this module (memory) and in this tab's sessionStorage, nowhere else;
 *   it goes only into the Authorization header of same-origin requests, never into a URL.
 * - GET /v1/lanes checks a pasted token, GET /v1/whoami names its credential (once per
 *   unlock); a refresh is GET /v1/overview + GET /v1/evidence.
 *   There is no mutating call here, and no request body is ever sent.
 */

import {
  FETCH_TIMEOUT_MS, HISTORY_PER_LANE, INCIDENTS_LIMIT, QUEUED_PER_LANE, RECEIPTS_SHOWN, logLimitFor,
} from './config.js';

const TOKEN_KEY = 'laneControlRoom.token';

let token = null;

export const hasToken = () => token !== null;
/** The token requests use from now on (null: none). */
export function useToken(value) {
  token = value || null;
}
/** The token this tab kept (sessionStorage), or null. */
export const savedToken = () => sessionStorage.getItem(TOKEN_KEY);
/** Keep the token in use for this tab (after the coordinator accepted it). */
export function keepToken() {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
}
/** Forget the token: this tab's copy and the one in use. */
export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  token = null;
}

export class HttpError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

export class NetError extends Error {}

async function get(path) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
  const init = {
    method: 'GET',
    headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' },
    signal: ctrl.signal, cache: 'no-store', credentials: 'omit',
    referrerPolicy: 'no-referrer', redirect: 'error', mode: 'same-origin',
  };
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new NetError(ctrl.signal.aborted ? 'no answer within 8 s' : 'connection failed');
  } finally {
    clearTimeout(timer);
  }
  let json = null;
  try {
    json = await res.json();
  } catch (e) {
    json = null;
  }
  if (!res.ok) {
    const err = (json && json.error) || {};
    throw new HttpError(res.status, err.code, err.message);
  }
  if (!json || typeof json !== 'object') throw new HttpError(res.status, 'bad-reply', 'not JSON');
  return json;
}

export const getLanes = () => get('/v1/lanes');

/** The credential this tab's token is: name, role, machine, canWrite (never a secret). */
export const getWhoami = () => get('/v1/whoami');

/** The whole refresh in one read: its size is bounded, its count is one, for any lane count. */
export const getOverview = (logLane, project) =>
  get(`/v1/overview?history=${HISTORY_PER_LANE}&queued=${QUEUED_PER_LANE}` +
    `&receipts=${RECEIPTS_SHOWN}&incidents=${INCIDENTS_LIMIT}&limit=${logLimitFor(logLane)}` +
    (logLane ? `&lane=${encodeURIComponent(logLane)}` : '') +
    (project ? `&project=${encodeURIComponent(project)}` : ''));

export const getEvidence = (lane, ticket) =>
  get(`/v1/evidence?lane=${encodeURIComponent(lane)}` +
    (ticket ? `&ticketId=${encodeURIComponent(ticket)}` : ''));
