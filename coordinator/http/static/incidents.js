/* The Incidents panel: cooldowns, hash mismatches, expiries, collisions — every lane's,
 * newest first (the overview merged them). */

import { INCIDENTS } from './config.js';
import { credTag } from './credential.js';
import { empty, h } from './dom.js';
import { ticketLink } from './evidence.js';
import { clockTime, humanDur, shortHash } from './format.js';
import { patch } from './view.js';
import { laneName, whenCell } from './widgets.js';

const SHOWN = 40;

function incidentDetail(i) {
  const x = i.detail || {};
  switch (i.kind) {
    case 'provider-cooldown-started':
    case 'provider-cooldown-extended':
      return `${x.reasonCode || 'cooldown'} — paused until ${x.until ? clockTime(x.until) : 'unknown'}` +
        (x.retryAfterSeconds ? ` (${humanDur(x.retryAfterSeconds)})` : '');
    case 'provider-cooldown-ended':
      return `${x.reasonCode || 'cooldown'} pause is over` +
        (x.startedAt ? ` (lasted ${humanDur(i.at - x.startedAt)})` : '');
    case 'receipt-hash-mismatch':
      return `${x.phase || 'receipt'}: sent ${shortHash(x.sentHash)} ≠ computed ${shortHash(x.computedHash)}`;
    case 'lease-expired':
      return `no heartbeat before the lease ran out${x.fence ? ` (fence ${x.fence})` : ''}; next waiter promoted`;
    case 'waiter-abandoned':
      return `no keep-alive for ${humanDur(x.waiterTimeoutSeconds)}; dropped from the queue`;
    case 'duplicate-collision': {
      const o = x.owner || {};
      const r = x.requester || {};
      return `${r.machineId || 'unknown'} asked for ${x.project || '?'} / ${x.scene || '?'}, ` +
        `already owned by ${o.machineId || 'unknown'} — one ticket, owner only`;
    }
    case 'late-release':
      return `released after expiry; reported ${x.lateOutcome || 'no outcome'}`;
    default:
      return '';
  }
}

export function renderIncidents(d) {
  const list = d.incidents.slice(0, SHOWN);
  patch('incidents', list.map((i) => [i.lane, i.id]), () => {
    if (!list.length) return empty('No incidents. Quiet is good.');
    return h('ol', { class: 'incidents' }, list.map((i) => {
      const k = INCIDENTS[i.kind] || { icon: '•', label: i.kind, sev: 'info' };
      return h('li', { class: `incident sev-${k.sev}`, 'data-kind': i.kind },
        h('div', { class: 'inc-head' },
          h('span', { class: `chip sev-chip sev-${k.sev}` },
            h('span', { 'aria-hidden': 'true' }, k.icon), ` ${k.label}`),
          h('span', { class: 'inc-when' }, whenCell(i.at))),
        h('div', { class: 'inc-body' }, incidentDetail(i)),
        h('div', { class: 'inc-meta muted small' }, laneName(i.lane),
          i.machineId ? [' · ', h('strong', null, i.machineId)] : null,
          i.credential ? [' · ', credTag(i.credential)] : null,
          i.ticketId ? [' · ', ticketLink(i.lane, i.ticketId)] : null));
    }));
  });
}
