/* The Evidence panel: the coordinator's evidence for the chosen lane, and the job evidence
 * of exactly one chosen ticket (never borrowed from another). ticketLink() is how every
 * panel lets a ticket be chosen: a local view change, then a refresh. */

import { PHASES } from './config.js';
import { $, empty, h } from './dom.js';
import { clockTime, short, shortHash } from './format.js';
import { refreshNow, state } from './state.js';
import { patch } from './view.js';
import { ago, laneName, outcomeChip, request, verdict } from './widgets.js';

/** A ticket id that selects the ticket for the Evidence panel (a local view change only). */
export function ticketLink(lane, ticketId) {
  if (!ticketId) return h('span', { class: 'muted' }, 'unknown');
  return h('button', {
    type: 'button', class: 'ticket mono', title: `${ticketId} — show its evidence`,
    'data-ticket': ticketId,
    onclick: () => selectEvidence(lane, ticketId, true),
  }, short(ticketId, 9));
}

export function selectEvidence(lane, ticketId, scroll) {
  state.evidenceLane = lane;
  state.evidenceTicket = ticketId;
  $('evidence-ticket').value = ticketId;
  $('evidence-lane').value = lane;
  if (state.data) renderEvidence(state.data);
  if (scroll) $('evidence-title').scrollIntoView({ behavior: 'smooth', block: 'start' });
  refreshNow();
}

/** The Evidence panel's lane picker: the enforced lanes, showing the chosen one. */
export function renderEvidenceLanes(d) {
  const evSel = $('evidence-lane');
  const evWant = d.enforced;
  const evHave = Array.from(evSel.options).map((o) => o.value);
  if (JSON.stringify(evWant) !== JSON.stringify(evHave)) {
    evSel.replaceChildren(...evWant.map((v) => h('option', { value: v }, v)));
  }
  if (evSel.value !== state.evidenceLane) evSel.value = state.evidenceLane;
}

export function renderEvidence(d) {
  const lane = state.evidenceLane;
  const ticket = state.evidenceTicket;
  const fresh = d.evidenceFor && d.evidenceFor.lane === lane && d.evidenceFor.ticket === ticket;
  const ev = fresh ? d.evidence : null;
  patch('evidence', [lane, ticket, ev && ev.coordinatorEvidence, ev && ev.jobEvidence], () => {
    if (!lane) return empty('No enforced lane yet.');
    if (!ev) return empty('Loading evidence…');
    return [coordinatorEvidence(lane, ev.coordinatorEvidence), jobEvidence(lane, ticket, ev.jobEvidence)];
  });
}

function coordinatorEvidence(lane, c) {
  c = c || {};
  const seen = c.machinesSeen || [];
  const col = c.collision;
  return h('div', { class: 'ev-box', 'data-evidence': 'coordinator' },
    h('h3', { class: 'sub' }, 'Coordinator evidence · ', laneName(lane)),
    h('dl', { class: 'kv' },
      h('dt', null, 'Distinct machines (last hour)'),
      h('dd', null, h('strong', { class: 'ev-distinct' }, String(c.distinctMachines ?? 'unknown')),
        seen.length ? [' — ', seen.map((m, i) => [i ? ', ' : '', h('strong', null, m.machineId), ' (',
          ago(m.lastSeenAt), ')'])] : ''),
      h('dt', null, 'Latest deduplicated collision'),
      h('dd', { class: 'ev-collision' }, col
        ? [h('strong', null, (col.requester || {}).machineId || 'unknown'), ' asked for ',
          request(col.project, col.scene), ' already owned by ',
          h('strong', null, (col.owner || {}).machineId || 'unknown'), ' → one ticket ',
          ticketLink(lane, col.ticketId), col.granted ? ', held by its owner only' : ', still queued',
          h('span', { class: 'muted small' }, ' · ', ago(col.at))]
        : h('span', { class: 'muted' }, 'none recorded'))));
}

function jobEvidence(lane, ticket, j) {
  const box = (...children) => h('div', { class: 'ev-box', 'data-evidence': 'job' },
    h('h3', { class: 'sub' }, 'Job evidence', ticket ? [' · ', h('span', { class: 'mono' }, ticket)] : ''),
    ...children);
  if (!ticket) {
    return box(h('p', { class: 'muted' }, 'No ticket selected. Job evidence is shown for one ' +
      'exact ticket only — click a ticket id anywhere on the page.'));
  }
  // Never borrow: evidence is shown only when it is for exactly this ticket.
  if (!j || j.ticketId !== ticket) return box(h('p', { class: 'muted' }, 'unknown'));
  if (!j.found) {
    return box(h('p', { class: 'ev-missing' }, `This ticket is unknown to ${lane}: identity unknown, ` +
      'receipts unknown.'), h('p', null, h('span', { class: 'chip v-unknown' }, '? incomplete')));
  }
  const id = j.identity;
  const idRows = id === 'unknown' || !id
    ? [h('dt', null, 'Identity'), h('dd', null, 'unknown')]
    : [['Project', id.project], ['Scene', id.scene], ['Prompt hash', id.promptHash],
      ['Machine', id.machineId], ['Claim', id.claimId]].map(([k, v]) =>
      [h('dt', null, k), h('dd', { class: k === 'Prompt hash' || k === 'Claim' ? 'mono' : '' }, v ?? 'unknown')]);
  const phases = PHASES.map((p) => {
    const recs = j.receipts ? j.receipts[p] : 'unknown';
    if (!Array.isArray(recs)) {
      return h('li', { class: 'phase-row missing', 'data-phase': p },
        h('span', { class: 'phase-mark', 'aria-hidden': 'true' }, '?'), h('span', { class: 'phase' }, p),
        h('span', { class: 'muted' }, 'unknown'));
    }
    const bad = recs.some((r) => r.contentHashVerified === false);
    return h('li', { class: `phase-row ${bad ? 'row-bad' : 'present'}`, 'data-phase': p },
      h('span', { class: 'phase-mark', 'aria-hidden': 'true' }, bad ? '⚠' : '✓'), h('span', { class: 'phase' }, p),
      h('span', null, recs.map((r, i) => [i ? '; ' : '', clockTime(r.createdAt), ' by ',
        h('strong', null, r.machineId), ' ', h('span', { class: 'mono', title: r.contentHash }, shortHash(r.contentHash)),
        ' ', verdict(r.contentHashVerified)])));
  });
  const missing = PHASES.filter((p) => !j.receipts || !Array.isArray(j.receipts[p]));
  return box(
    h('dl', { class: 'kv' }, idRows,
      h('dt', null, 'State'), h('dd', null, j.state || 'unknown',
        j.outcome ? [' · ', outcomeChip(j.outcome)] : '', j.fence ? ` · fence ${j.fence}` : '')),
    h('h4', null, 'Receipts by phase'),
    h('ul', { class: 'phases' }, phases),
    h('p', { class: 'ev-complete' }, j.complete
      ? h('span', { class: 'chip v-ok' }, '✓ complete — all four phases recorded')
      : h('span', { class: 'chip v-unknown' }, `? incomplete — missing: ${missing.join(', ')}`)));
}
