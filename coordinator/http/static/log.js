/* The Render log panel: every finished render, newest first, with its lane and project
 * filters (the project filter offers the chosen lane's projects only) and outcome counts. */

import { LOG_MORE, LOG_PAGE, logLimitFor } from './config.js';
import { credTag } from './credential.js';
import { $, empty, h, row, setOptions, table } from './dom.js';
import { ticketLink } from './evidence.js';
import { clockDur } from './format.js';
import { refreshNow, state } from './state.js';
import { patch } from './view.js';
import { laneName, outcomeChip, request, who, whenCell } from './widgets.js';

/** The projects the render-log filter offers: the chosen lane's own, or every lane's. */
function logProjects(d, laneF) {
  const projects = new Set();
  for (const lane of laneF ? [laneF] : d.enforced) {
    const x = d.byLane[lane];
    if (!x) continue;
    for (const p of x.status.projects || []) projects.add(p);
  }
  return [...projects].sort();
}

export function renderLogFilters(d) {
  const laneSel = $('log-lane');
  const projectSel = $('log-project');
  const before = [laneSel.value, projectSel.value];
  setOptions(laneSel, d.enforced, 'all lanes');
  setOptions(projectSel, logProjects(d, laneSel.value), 'all projects');
  // a filter fell back to "all" (its lane is gone, or the project is not the lane's): read again
  if (laneSel.value !== before[0] || projectSel.value !== before[1]) refreshNow();
}

/** The render log the overview read for the current filters; null while it is on its way. */
function logScope(d) {
  const laneF = $('log-lane').value;
  const project = $('log-project').value;
  const log = d.log;
  if (!log || (log.lane || '') !== laneF || (log.project || '') !== project) return null;
  const entries = log.entries || [];
  return {
    entries, counts: log.counts || {}, retained: log.retained || 0, fetched: entries.length,
    laneF, project,
  };
}

export function renderLog(d) {
  const scope = logScope(d);
  patch('log-counts', scope && [scope.counts, scope.laneF, scope.project], () => {
    if (!scope) return h('span', { class: 'muted' }, 'Loading…');
    const keys = Object.keys(scope.counts).sort((a, b) => scope.counts[b] - scope.counts[a]);
    const total = Object.values(scope.counts).reduce((a, b) => a + b, 0);
    return [h('span', { class: 'count-total' }, h('strong', null, String(total)),
      ` render${total === 1 ? '' : 's'}`),
    ...keys.map((k) => h('span', { class: 'count', 'data-outcome': k },
      outcomeChip(k === 'null' ? null : k), h('strong', { class: 'count-n' }, String(scope.counts[k]))))];
  });
  const headers = ['Ended', 'Lane', 'Request', 'Machine', 'Outcome', 'Waited', 'Held', 'Ticket'];
  const shown = scope ? scope.entries.slice(0, state.logLimit) : [];
  patch('log', scope && [shown, state.logLimit], () => {
    if (!scope) return empty('Loading…');
    if (!scope.entries.length) {
      return empty(scope.project ? `No finished renders for project “${scope.project}”.`
        : 'No finished renders yet.');
    }
    return table(headers, shown.map((e) => row(headers, [
      whenCell(e.endedAt), laneName(e.lane),
      [request(e.project, e.scene),
        e.providerJobId || e.note ? h('div', { class: 'muted small' },
          e.providerJobId ? `job ${e.providerJobId}` : '', e.providerJobId && e.note ? ' · ' : '',
          e.note ? `“${e.note}”` : '') : null],
      [who(e.machineId, e.claimId), credentials(e)], outcomeChip(e.outcome, e.lateOutcome),
      h('span', { class: 'num' }, e.waitSeconds === null ? '—' : clockDur(e.waitSeconds)),
      h('span', { class: 'num' }, e.holdSeconds === null ? 'never held' : clockDur(e.holdSeconds)),
      ticketLink(e.lane, e.ticketId),
    ], { class: `log-row o-row-${e.outcome || 'none'}`, 'data-project': e.project })), 'tbl-log');
  });
  const more = $('log-more');
  if (scope) {
    const n = scope.entries.length;
    $('log-shown').textContent = n
      ? `Showing ${Math.min(n, state.logLimit)} of ${n}` +
        (scope.fetched >= logLimitFor(scope.laneF) && scope.retained > scope.fetched
          ? ` (the newest ${scope.fetched} read; ${scope.retained} kept)` : '')
      : '';
    more.hidden = n <= state.logLimit;
  } else {
    $('log-shown').textContent = '';
    more.hidden = true;
  }
}

/** A render-log row's credentials: the acquire's, and the release's when another made it done
 * (a hand release). */
function credentials(e) {
  const other = e.releasedBy && e.releasedBy !== e.credential;
  return h('div', { class: 'muted small creds' }, credTag(e.credential),
    other ? [' · ', credTag(e.releasedBy, 'released by')] : null);
}

/** The filters and "Show more": a filter change shows the first rows and reads again. */
export function wireLog() {
  $('log-project').addEventListener('change', () => {
    state.logLimit = LOG_PAGE;
    if (state.data) renderLog(state.data);
    refreshNow();
  });
  $('log-lane').addEventListener('change', () => {
    state.logLimit = LOG_PAGE;
    if (state.data) {
      // offer only the chosen lane's projects at once (a project of another lane resets)
      setOptions($('log-project'), logProjects(state.data, $('log-lane').value), 'all projects');
      renderLog(state.data);
    }
    refreshNow();
  });
  $('log-more').addEventListener('click', () => {
    state.logLimit += LOG_MORE;
    if (state.data) renderLog(state.data);
  });
}
