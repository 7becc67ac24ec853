/* The Lanes panel: one card per lane — who holds each slot, who waits, and for how long. */

import { empty, h, row, table } from './dom.js';
import { ticketLink } from './evidence.js';
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
  const total = st.queuedTotal ?? queued.length;
  let chip;
  if (st.pause) chip = h('span', { class: 'state-chip st-paused' }, '‖ paused');
  else if (held.length >= cap) chip = h('span', { class: 'state-chip st-busy' }, `● busy ${held.length}/${cap}`);
  else chip = h('span', { class: 'state-chip st-free' }, `○ ${cap - held.length} free slot${cap - held.length > 1 ? 's' : ''}`);

  const heldHeaders = ['Holder', 'Request', 'Lease ends in', 'Held for', 'Ticket'];
  const heldRows = held.map((t) => row(heldHeaders, [
    who(t.machineId, t.claimId), request(t.project, t.scene),
    until(t.leaseExpiresAt, 'num lease'), since(t.heldAt),
    [ticketLink(summary.lane, t.ticketId), h('span', { class: 'muted small fence' }, ` fence ${t.fence}`)],
  ], { class: 'held-row', 'data-ticket-row': t.ticketId }));
  const free = Math.max(0, cap - held.length);
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
    h('h4', null, `Holding (${held.length} of ${cap})`),
    table(heldHeaders, heldRows, 'tbl-held'),
    h('h4', null, total ? `Waiting (${total}) — in promotion order` : 'Waiting (0)'),
    queued.length ? table(qHeaders, qRows, 'tbl-queue') : empty('Nobody is waiting.'),
    total > queued.length ? h('p', { class: 'muted small' }, `+ ${total - queued.length} more waiting`) : null);
}
