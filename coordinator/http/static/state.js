/* The page's state and its refresh loop.
 *
 * A refresh costs a fixed number of requests whatever the number of lanes: one /v1/overview
 * (every lane's status, recent render log, receipts and projects, the incidents, the machines
 * and the chosen render log, each bounded) and one /v1/evidence (the selected lane and
 * ticket). It runs every REFRESH_MS; one at a time (a refresh asked for meanwhile runs next).
 *
 * What the loop does with an answer is set by the entry module (onRefresh): render the page,
 * lock it on a 401, show the error otherwise.
 */

import { HISTORY_PER_LANE, LOG_PAGE, REFRESH_MS } from './config.js';
import { HttpError, getEvidence, getOverview, hasToken } from './api.js';
import { $ } from './dom.js';

export const state = {
  generation: 0, // bumped by Lock: answers to older requests are dropped
  timer: null,
  running: false,
  pending: false,
  offset: 0, // server clock minus this computer's clock, seconds
  lastOkMs: 0,
  lastError: null,
  data: null,
  sigs: {}, // panel id -> JSON of the inputs it was last drawn from (see view.js patch())
  logLimit: LOG_PAGE,
  windowSec: 10800,
  evidenceLane: '',
  evidenceTicket: '',
};

/** The server's clock now, epoch seconds (this computer's clock plus the measured offset). */
export const nowS = () => Date.now() / 1000 + state.offset;

const hooks = {
  render: () => {},
  unauthorized: () => {},
  failed: () => {},
};

/** What a refresh calls: render() after new data, unauthorized() on a 401, failed() else. */
export function onRefresh(handlers) {
  Object.assign(hooks, handlers);
}

/** Forget every byte of data and stop the loop (answers on their way are dropped). */
export function resetState() {
  state.generation += 1;
  clearTimeout(state.timer);
  state.timer = null;
  state.running = false;
  state.pending = false;
  state.data = null;
  state.sigs = {};
  state.lastOkMs = 0;
  state.lastError = null;
  state.evidenceTicket = '';
}

/** Refresh now (or right after the refresh under way). */
export function refreshNow() {
  clearTimeout(state.timer);
  state.timer = null;
  if (state.running) {
    state.pending = true;
    return;
  }
  refresh();
}

async function refresh() {
  if (!hasToken()) return;
  const gen = state.generation;
  state.running = true;
  const logLane = $('log-lane').value;
  const project = $('log-project').value;
  const evLane = state.evidenceLane;
  const evTicket = state.evidenceTicket;
  try {
    const sent = Date.now();
    const ov = await getOverview(logLane, project);
    const got = Date.now();
    const lanes = Array.isArray(ov.lanes) ? ov.lanes : [];
    const enforced = lanes.filter((l) => l.enforced).map((l) => l.lane);
    const evidenceLane = enforced.includes(evLane) ? evLane : enforced[0] || '';
    const evidenceR = evidenceLane
      ? await getEvidence(evidenceLane, evLane === evidenceLane ? evTicket : '') : null;
    if (gen !== state.generation) return;
    state.offset = ov.now - (sent + got) / 2000;
    const incidents = Array.isArray(ov.incidents) ? ov.incidents : [];
    const limits = ov.limits || {};
    const byLane = {};
    for (const l of lanes) {
      byLane[l.lane] = {
        status: l, history: l.history || { entries: [], retained: 0 },
        historyLimit: limits.history ?? HISTORY_PER_LANE,
        incidents: incidents.filter((i) => i.lane === l.lane),
      };
    }
    state.data = {
      lanes, enforced, byLane, incidents, machines: ov.machines || [],
      log: ov.log || null, evidence: evidenceR,
      evidenceFor: { lane: evidenceLane, ticket: evLane === evidenceLane ? evTicket : '' },
      coordinator: ov.coordinator,
    };
    if (evidenceLane !== evLane && state.evidenceLane === evLane) {
      // the chosen lane is gone (or none was chosen yet): fall back to the first lane
      state.evidenceLane = evidenceLane;
      state.evidenceTicket = '';
    }
    state.lastOkMs = Date.now();
    state.lastError = null;
    hooks.render();
  } catch (e) {
    if (gen !== state.generation) return;
    if (e instanceof HttpError && e.status === 401) {
      hooks.unauthorized();
      return;
    }
    state.lastError = e;
    hooks.failed();
  } finally {
    if (gen === state.generation) {
      state.running = false;
      if (state.pending) {
        state.pending = false;
        refresh();
      } else {
        state.timer = setTimeout(refresh, REFRESH_MS);
      }
    }
  }
}
