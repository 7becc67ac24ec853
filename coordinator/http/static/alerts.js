/* The banners above the panels: receipts that failed the hash check, and paused lanes. */

import { h } from './dom.js';
import { ticketLink } from './evidence.js';
import { allReceipts } from './receipts.js';
import { patch } from './view.js';
import { laneName, pauseText } from './widgets.js';

export function renderAlerts(d) {
  const mismatches = allReceipts(d).filter((r) => r.contentHashVerified === false);
  const paused = d.enforced.filter((l) => d.byLane[l].status.pause);
  const inputs = { m: mismatches.map((r) => r.receiptId), p: paused.map((l) => d.byLane[l].status.pause) };
  patch('alerts', inputs, () => {
    const out = [];
    if (mismatches.length) {
      out.push(h('div', { class: 'banner banner-bad', role: 'alert', 'data-alert': 'hash-mismatch' },
        h('strong', null, `⚠ ${mismatches.length} receipt${mismatches.length > 1 ? 's' : ''} ` +
          'failed the hash check'),
        ' — the hash the machine sent does not match the payload the coordinator received: ',
        mismatches.slice(0, 3).map((r, i) => [i ? '; ' : '', laneName(r.lane), ' · ',
          r.phase, ' by ', h('strong', null, r.machineId), ' on ', ticketLink(r.lane, r.ticketId)]),
        mismatches.length > 3 ? ` and ${mismatches.length - 3} more` : '',
        '. See Receipts below.'));
    }
    for (const lane of paused) {
      const p = d.byLane[lane].status.pause;
      out.push(h('div', { class: 'banner banner-warn', 'data-alert': 'paused' },
        h('strong', null, '‖ Paused'), ' ', laneName(lane), ': ',
        pauseText(p)));
    }
    return out;
  });
}
