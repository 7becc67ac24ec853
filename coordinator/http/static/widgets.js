/* Small pieces several panels show: times that tick, outcome chips, lane names, holders,
 * requests, hash verdicts, pause text. (A ticket id that selects the ticket is evidence.js
 * ticketLink().) */

import { OUTCOMES } from './config.js';
import { h } from './dom.js';
import { clockTime, short } from './format.js';

// live time elements, refreshed every second by view.js tick()
export const ago = (epoch) =>
  h('time', { 'data-ago': epoch, datetime: new Date(epoch * 1000).toISOString(),
    title: new Date(epoch * 1000).toLocaleString() });
export const until = (epoch, cls) => h('span', { 'data-until': epoch, class: cls || 'num' });
export const since = (epoch) => h('span', { 'data-since': epoch, class: 'num' });
export const etaIn = (epoch) =>
  h('span', { 'data-eta': epoch, class: 'num', title: `expected at ${clockTime(epoch)}` });

export function whenCell(epoch) {
  return h('span', { class: 'when' }, h('span', { class: 'num' }, clockTime(epoch)), ' ',
    h('span', { class: 'muted small ago' }, ago(epoch)));
}

/** An outcome's icon and label ("no outcome" for null), for chips and timeline bars. */
export const outcomeOf = (outcome) =>
  OUTCOMES[outcome === null || outcome === undefined ? 'null' : outcome] ||
  { icon: '•', label: String(outcome) };

export function outcomeChip(outcome, late) {
  const o = outcomeOf(outcome);
  const cls = `chip o-${outcome || 'none'}`;
  return h('span', { class: cls },
    h('span', { class: 'chip-icon', 'aria-hidden': 'true' }, o.icon), ` ${o.label}`,
    late ? h('span', { class: 'chip-late' }, ` (late: ${late})`) : null);
}

export function laneName(lane) {
  const i = lane.indexOf(':');
  if (i < 0) return h('span', { class: 'lane-name' }, lane);
  return h('span', { class: 'lane-name' },
    h('span', { class: 'lane-route' }, lane.slice(0, i)),
    h('span', { class: 'lane-sep' }, ':'),
    h('span', { class: 'lane-account' }, lane.slice(i + 1)));
}

export function who(machine, claim) {
  return h('span', { class: 'who' },
    h('strong', { class: 'machine' }, machine || 'unknown'),
    claim ? [h('span', { class: 'sep', 'aria-hidden': 'true' }, ' · '),
      h('span', { class: 'claim mono', title: `claim ${claim}` }, short(claim, 8))] : null);
}

export function request(project, scene) {
  return h('span', { class: 'req' },
    h('span', { class: 'project' }, project || 'unknown'),
    h('span', { class: 'slash', 'aria-hidden': 'true' }, ' / '),
    h('span', { class: 'scene' }, scene || 'unknown'));
}

export function verdict(v) {
  if (v === true) return h('span', { class: 'chip v-ok' }, '✓ verified');
  if (v === false) {
    return h('span', { class: 'chip v-bad', role: 'img', 'aria-label': 'warning: hash mismatch' },
      '⚠ HASH MISMATCH');
  }
  return h('span', { class: 'chip v-unknown' }, '? not checked');
}

export function pauseText(p) {
  return [`paused — ${p.reasonCode} reported by `, h('strong', null, p.machineId),
    ', ends in ', until(p.until), h('span', { class: 'muted' }, ` (at ${clockTime(p.until)})`)];
}
