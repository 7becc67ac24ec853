/* The Receipts panel: each lane's newest receipts and every hash mismatch among its recent
 * ones; the coordinator re-checks each hash. */

import { RECEIPTS_SHOWN } from './config.js';
import { credTag } from './credential.js';
import { empty, h, row, table } from './dom.js';
import { ticketLink } from './evidence.js';
import { shortHash } from './format.js';
import { patch } from './view.js';
import { laneName, verdict, whenCell } from './widgets.js';

/** The lane's newest receipts and every mismatch among its recent ones, newest first. */
function laneReceipts(st) {
  const seen = new Set();
  const out = [];
  for (const r of [...(st.recentReceipts || []), ...(st.receiptMismatches || [])]) {
    if (seen.has(r.receiptId)) continue;
    seen.add(r.receiptId);
    out.push(r);
  }
  return out.sort((a, b) => b.createdAt - a.createdAt);
}

/** Every enforced lane's receipts (laneReceipts), each with its lane. */
export function allReceipts(d) {
  const out = [];
  for (const lane of d.enforced) {
    for (const r of laneReceipts(d.byLane[lane].status)) out.push({ lane, ...r });
  }
  return out;
}

export function renderReceipts(d) {
  const inputs = d.enforced.map((l) => [l,
    laneReceipts(d.byLane[l].status).map((r) => [r.receiptId, r.contentHashVerified])]);
  patch('receipts', inputs, () => {
    const out = [];
    const headers = ['Recorded', 'Phase', 'Machine · ticket', 'Hash', 'Verdict'];
    const all = allReceipts(d);
    const failed = all.filter((r) => r.contentHashVerified === false).length;
    const unchecked = all.filter((r) => r.contentHashVerified !== true && r.contentHashVerified !== false).length;
    if (all.length) {
      out.push(h('p', { class: `receipts-summary ${failed ? 'is-bad' : 'is-ok'}`, 'data-summary': failed ? 'bad' : 'ok' },
        failed
          ? `⚠ ${failed} of ${all.length} recent receipts failed the hash check.`
          : `✓ All ${all.length - unchecked} checked recent receipts match their hashes.`,
        unchecked ? ` ${unchecked} were stored before hashes were checked.` : ''));
    }
    for (const lane of d.enforced) {
      const recs = laneReceipts(d.byLane[lane].status);
      const bad = recs.filter((r) => r.contentHashVerified === false).length;
      out.push(h('h3', { class: 'sub' }, laneName(lane),
        h('span', { class: 'muted small' }, ` — ${recs.length} recent`),
        bad ? h('span', { class: 'chip v-bad' }, `⚠ ${bad} mismatch${bad > 1 ? 'es' : ''}`) : null));
      if (!recs.length) {
        out.push(empty('No receipts recorded in this lane yet.'));
        continue;
      }
      // the newest few, and every mismatch among the lane's recent receipts
      out.push(h('div', { class: 'table-wrap' }, table(headers, recs.map((r) => row(headers, [
        whenCell(r.createdAt), h('span', { class: 'phase' }, r.phase),
        h('span', { class: 'stack' }, h('strong', null, r.machineId), ticketLink(lane, r.ticketId),
          credTag(r.credential)),
        h('span', { class: 'mono hash', title: r.contentHash }, shortHash(r.contentHash)),
        verdict(r.contentHashVerified),
      ], {
        class: r.contentHashVerified === false ? 'receipt-row row-bad' : 'receipt-row',
        'data-verified': String(r.contentHashVerified),
      })), 'tbl-receipts')));
    }
    if (!d.enforced.length) out.push(empty('No enforced lanes, so no receipts.'));
    else {
      out.push(h('p', { class: 'muted small' }, `The newest ${RECEIPTS_SHOWN} receipts of each ` +
        'lane, and every hash mismatch among its recent ones. A ticket\'s own receipts: click ' +
        'its id (Evidence).'));
    }
    return out;
  });
}
