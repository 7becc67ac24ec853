/* The Computers panel: every machine that made a signed call, online for ONLINE_SECONDS
 * after its last one, and what it holds or waits for now. */

import { ONLINE_SECONDS } from './config.js';
import { empty, h, row, table } from './dom.js';
import { nowS } from './state.js';
import { patch } from './view.js';
import { whenCell } from './widgets.js';

export function renderMachines(d) {
  const doing = {};
  for (const lane of d.enforced) {
    const st = d.byLane[lane].status;
    for (const t of st.held || []) (doing[t.machineId] ||= []).push(`holds ${lane}`);
    for (const t of st.queued || []) (doing[t.machineId] ||= []).push(`waits #${t.position} in ${lane}`);
  }
  const now = nowS();
  const ms = d.machines.map((m) => ({ ...m, on: now - m.lastSeenAt <= ONLINE_SECONDS }));
  patch('machines', [ms.map((m) => [m.machineId, m.lastSeenAt, m.on, m.lanes]), doing], () => {
    if (!ms.length) return empty('No computer has made a signed call since the coordinator started.');
    const headers = ['Status', 'Computer', 'Last seen', 'Lanes', 'Now'];
    const online = ms.filter((m) => m.on).length;
    return [h('p', { class: 'small muted' }, `${online} of ${ms.length} online`),
      table(headers, ms.map((m) => row(headers, [
        m.on ? h('span', { class: 'chip m-on' }, '● online') : h('span', { class: 'chip m-off' }, '○ offline'),
        h('strong', null, m.machineId), whenCell(m.lastSeenAt),
        h('span', { class: 'small' }, (m.lanes || []).join(', ') || '—'),
        h('span', { class: 'small' }, (doing[m.machineId] || []).join('; ') || '—'),
      ], { class: m.on ? 'machine-row on' : 'machine-row off', 'data-machine': m.machineId })), 'tbl-machines')];
  });
}
