/* The Lanes panel: one card per lane — who holds each slot (a held ticket, or an in-flight
 * provider job whose lease ended), who waits, for how long, and how far the lane's ETAs were
 * off. */

import { empty, h, row, table } from './dom.js';
import { ticketLink } from './evidence.js';
import { clockTime, humanDur } from './format.js';
import { patch } from './view.js';
import { etaIn, laneName, pauseText, request, since, until, who } from './widgets.js';

export function renderLanes(d) {
  const inputs = d.lanes.map((l) => {
    const x = d.byLane[l.lane];
    if (!x) return l;
    const st = x.status;
    return {
      l: l.lane, cap: st.capacity, pause: st.pause, qt: st.queuedTotal,
      held: st.held.map((t) => [t.ticketId, t.machineId, t.claimId, t.project, t.scene,
        t.heldAt, t.leaseExpiresAt, t.fence]),
      queued: st.queued.map((t) => [t.ticketId, t.machineId, t.claimId, t.project, t.scene,
        t.position, t.enqueuedAt, Math.round((st.now + t.etaSeconds) / 5)]),
      inFlight: (st.inFlight || []).map((j) => [j.ticketId, j.fence, j.machineId, j.claimId,
        j.project, j.scene, j.submittedAt, j.holdUntil]),
      etaError: st.etaError || null,
    };
  });
  patch('lanes', inputs, () => {
    if (!d.lanes.length) {
      return empty('No lanes yet. A lane appears here after its first acquire, or when the ' +
        'coordinator config names it.');
    }
    return d.lanes.map((l) => laneCard(l, d.byLane[l.lane]));
  });
}

function laneCard(summary, x) {
  if (!summary.enforced || !x) {
    return h('article', { class: 'lane-card', 'data-lane': summary.lane },
      h('header', { class: 'lane-head' }, h('h3', null, laneName(summary.lane)),
        h('span', { class: 'state-chip st-unenforced' }, '∞ unenforced')),
      h('p', { class: 'muted' }, 'No capacity is configured for this route: every request is ' +
        'granted at once and nothing queues here.'));
  }
  const st = x.status;
  const cap = st.capacity;
  const held = st.held || [];
  const queued = st.queued || [];
  const inFlight = st.inFlight || [];
  const taken = held.length + inFlight.length; // capacity counts both
  const total = st.queuedTotal ?? queued.length;
  let chip;
  if (st.pause) chip = h('span', { class: 'state-chip st-paused' }, '‖ paused');
  else if (taken >= cap) chip = h('span', { class: 'state-chip st-busy' }, `● busy ${taken}/${cap}`);
  else chip = h('span', { class: 'state-chip st-free' }, `○ ${cap - taken} free slot${cap - taken > 1 ? 's' : ''}`);

  const heldHeaders = ['Holder', 'Request', 'Lease ends in', 'Held for', 'Ticket'];
  const heldRows = held.map((t) => row(heldHeaders, [
    who(t.machineId, t.claimId), request(t.project, t.scene),
    until(t.leaseExpiresAt, 'num lease'), since(t.heldAt),
    [ticketLink(summary.lane, t.ticketId), h('span', { class: 'muted small fence' }, ` fence ${t.fence}`)],
  ], { class: 'held-row', 'data-ticket-row': t.ticketId }));
  for (const j of inFlight) heldRows.push(inFlightRow(heldHeaders, summary.lane, j));
  const free = Math.max(0, cap - taken);
  for (let i = 0; i < Math.min(free, 4); i += 1) {
    heldRows.push(h('tr', { class: 'free-row' },
      h('td', { colspan: 5 }, h('span', { class: 'free-slot' },
        st.pause ? '○ free slot — nothing is promoted while the lane is paused'
          : (total ? '○ free slot — being filled' : '○ free slot — nobody holds it')))));
  }
  if (free > 4) heldRows.push(h('tr', null, h('td', { colspan: 5, class: 'muted' }, `+ ${free - 4} more free slots`)));

  const qHeaders = ['#', 'Waiting', 'Request', 'Waiting for', 'ETA', 'Ticket'];
  const qRows = queued.map((t) => row(qHeaders, [
    h('span', { class: 'pos' }, `#${t.position}`), who(t.machineId, t.claimId),
    request(t.project, t.scene), since(t.enqueuedAt), etaIn(st.now + t.etaSeconds),
    ticketLink(summary.lane, t.ticketId),
  ], { class: 'queued-row', 'data-ticket-row': t.ticketId }));

  return h('article', { class: `lane-card${st.pause ? ' is-paused' : ''}`, 'data-lane': summary.lane },
    h('header', { class: 'lane-head' },
      h('h3', null, laneName(summary.lane)),
      h('span', { class: 'lane-meta muted' }, `capacity ${cap}`),
      chip),
    st.pause ? h('div', { class: 'pause-banner', role: 'status' },
      h('span', { class: 'pause-icon', 'aria-hidden': 'true' }, '‖'), ' ', pauseText(st.pause)) : null,
    h('h4', null, `Holding (${taken} of ${cap})` +
      (inFlight.length ? ` — ${inFlight.length} in-flight provider job${inFlight.length > 1 ? 's' : ''}` : '')),
    table(heldHeaders, heldRows, 'tbl-held'),
    h('h4', null, total ? `Waiting (${total}) — in promotion order` : 'Waiting (0)',
      ' ', etaErrorNote(st.etaError)),
    queued.length ? table(qHeaders, qRows, 'tbl-queue') : empty('Nobody is waiting.'),
    total > queued.length ? h('p', { class: 'muted small' }, `+ ${total - queued.length} more waiting`) : null);
}

/** An ended ticket whose provider job may still run: it keeps its slot until holdUntil. */
function inFlightRow(headers, lane, j) {
  return row(headers, [
    who(j.machineId, j.claimId), request(j.project, j.scene),
    h('span', {
      class: 'in-flight-note',
      title: 'The lease ended, but the provider may still run this job: its slot stays taken ' +
        'until then, or until a provider-terminal receipt or a reconcile ends the hold.',
    }, `provider job may still run — until ${clockTime(j.holdUntil)}`),
    h('span', { title: 'since its provider submit' }, since(j.submittedAt)),
    [ticketLink(lane, j.ticketId), j.fence === null || j.fence === undefined ? null
      : h('span', { class: 'muted small fence' }, ` fence ${j.fence}`)],
  ], { class: 'in-flight-row', 'data-ticket-row': j.ticketId });
}

/** How far the lane's ETAs were off over its last grants (docs/protocol.md#eta-error). */
function etaErrorNote(e) {
  if (!e) return h('span', { class: 'eta-error muted small' }, 'ETA error: no grants yet');
  const n = `${e.grants} grant${e.grants === 1 ? '' : 's'}`;
  return h('span', {
    class: 'eta-error muted small',
    title: `Over the last ${n}: half started within ${humanDur(e.medianSeconds)} of the ETA ` +
      `they were first given, nine in ten within ${humanDur(e.p90Seconds)}.`,
  }, `ETA ±${humanDur(e.medianSeconds)} (p90 ${humanDur(e.p90Seconds)}, ${n})`);
}
