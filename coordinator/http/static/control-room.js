/* Lane control room — a read-only view of the coordinator
 * (docs/protocol.md#control-room-reads). The entry module (<script type="module">); the page is native ES modules from the same folder, no build.
 *
 * Rules every module keeps:
 * - Read endpoints only (api.js): GET /v1/lanes (to check a pasted token), GET /v1/whoami
 *   (which credential it is, once per unlock: credential.js), GET /v1/overview and
 *   GET /v1/evidence. Nothing else; no request body.
 * - A refresh costs a fixed number of requests whatever the number of lanes: one
 *   /v1/overview and one /v1/evidence (state.js), every REFRESH_MS; the page shows itself
 *   stale after STALE_AFTER_MS without an answer (view.js).
 * - The bearer token lives in this tab's sessionStorage only, goes only into the
 *   Authorization header of same-origin requests, never into a URL (api.js, session.js).
 * - Every string from the server reaches the page through textContent (the h()/s() builders
 *   of dom.js); no innerHTML anywhere.
 * - Wire times are epoch seconds with a fraction; the page measures its offset to the
 *   server's clock on every refresh and counts down against the server's time.
 *
 * Modules: config (numbers, vocabularies) · api (token, reads) · state (state, refresh
 * loop) · dom (builders) · format (time, duration, id text) · view (patch, tick, live
 * indicator) · widgets (shared pieces) · session (unlock, lock) · credential (whoami, its
 * warning, the credential on a row) · one per panel: lanes,
 * timeline, log, receipts, alerts, incidents, computers, evidence.
 */

import { savedToken, useToken } from './api.js';
import { $ } from './dom.js';
import { renderAlerts } from './alerts.js';
import { renderMachines } from './computers.js';
import { renderEvidence, renderEvidenceLanes, selectEvidence } from './evidence.js';
import { renderIncidents } from './incidents.js';
import { renderLanes } from './lanes.js';
import { renderLog, renderLogFilters, wireLog } from './log.js';
import { renderReceipts } from './receipts.js';
import { lock, showDashboard, unlock } from './session.js';
import { onRefresh, state } from './state.js';
import { renderTimeline, wireTimeline } from './timeline.js';
import { renderLive, tick } from './view.js';

function render() {
  const d = state.data;
  if (!d) return;
  $('coordinator-name').textContent = d.coordinator ? `coordinator: ${d.coordinator}` : '';
  renderLogFilters(d);
  renderEvidenceLanes(d);
  renderAlerts(d);
  renderLanes(d);
  renderTimeline(d, false);
  renderLog(d);
  renderReceipts(d);
  renderIncidents(d);
  renderMachines(d);
  renderEvidence(d);
  tick();
}

function init() {
  onRefresh({
    render,
    unauthorized: () => lock('The coordinator no longer accepts this token (401 unauthorized), ' +
      'so the page locked itself. Paste a current token.'),
    failed: renderLive,
  });
  $('unlock-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    unlock($('token').value.trim());
  });
  $('lock').addEventListener('click', () => lock());
  wireLog();
  wireTimeline();
  $('evidence-lane').addEventListener('change', () => {
    selectEvidence($('evidence-lane').value, '', false);
  });
  $('evidence-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    selectEvidence($('evidence-lane').value, $('evidence-ticket').value.trim(), false);
  });
  setInterval(tick, 1000);
  const saved = savedToken();
  if (saved) {
    useToken(saved);
    showDashboard();
  } else {
    renderLive();
    $('token').focus();
  }
}

// a module script runs once the document is parsed; the check keeps it right if loaded late
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
else init();
