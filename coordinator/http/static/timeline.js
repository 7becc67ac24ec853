/* The Timeline panel (inline SVG): who held each slot when, pauses, and the idle gaps in
 * between, over the chosen window; drawn again when the window or the page width changes. */

import { $, empty, h, s } from './dom.js';
import { clockTime, hhmm, humanDur } from './format.js';
import { nowS, state } from './state.js';
import { patch, unpatch } from './view.js';
import { laneName, outcomeChip, outcomeOf } from './widgets.js';

/** Merge [start, end] intervals. */
function merge(intervals) {
  const xs = intervals.filter((i) => i[1] > i[0]).sort((a, b) => a[0] - b[0]);
  const out = [];
  for (const iv of xs) {
    const last = out[out.length - 1];
    if (last && iv[0] <= last[1]) last[1] = Math.max(last[1], iv[1]);
    else out.push([iv[0], iv[1]]);
  }
  return out;
}

function pauseIntervals(incidents, pause, now) {
  const ivs = [];
  for (const i of incidents) {
    const x = i.detail || {};
    if (i.kind === 'provider-cooldown-started' || i.kind === 'provider-cooldown-extended') {
      ivs.push([i.at, Math.min(typeof x.until === 'number' ? x.until : i.at, now)]);
    } else if (i.kind === 'provider-cooldown-ended' && typeof x.startedAt === 'number') {
      ivs.push([x.startedAt, i.at]);
    }
  }
  if (pause) ivs.push([pause.startedAt, Math.min(pause.until, now)]);
  return merge(ivs);
}

/** The lane's holds in the window, each placed on a slot row (interval partitioning). */
function laneTimeline(x, now, ws) {
  const st = x.status;
  const cap = Math.max(1, st.capacity || 1);
  const holds = [];
  for (const e of x.history.entries || []) {
    if (e.heldAt === null || e.heldAt === undefined) continue; // never held: no bar
    const end = e.endedAt ?? now;
    if (end < ws) continue;
    holds.push({ start: e.heldAt, end, outcome: e.outcome || 'none', e, live: false });
  }
  for (const t of st.held || []) {
    holds.push({ start: t.heldAt, end: now, outcome: 'holding', e: t, live: true });
  }
  holds.sort((a, b) => a.start - b.start);
  const slots = Array.from({ length: Math.min(cap, 8) }, () => ({ end: -Infinity, bars: [] }));
  for (const b of holds) {
    let slot = slots.find((sl) => sl.end <= b.start + 0.001);
    if (!slot) slot = slots.reduce((a, c) => (c.end < a.end ? c : a));
    slot.bars.push(b);
    slot.end = Math.max(slot.end, b.end);
  }
  const entries = x.history.entries || [];
  // Idle is counted from the lane's first recorded request on. If the history read was cut
  // at its limit, the time before its oldest row is not known either.
  let first = now;
  for (const e of entries) first = Math.min(first, e.enqueuedAt ?? e.heldAt ?? now);
  for (const t of [...(st.held || []), ...(st.queued || [])]) first = Math.min(first, t.enqueuedAt);
  if (entries.length >= x.historyLimit) {
    first = entries.reduce((m, e) => Math.min(m, e.heldAt ?? e.endedAt ?? now), now);
  }
  const knownFrom = Math.min(now, Math.max(ws, first));
  const pauses = pauseIntervals(x.incidents, st.pause, now)
    .map(([a, b]) => [Math.max(a, ws), Math.min(b, now)]).filter(([a, b]) => b > a);
  // idle gaps per slot row
  let busy = 0;
  let longest = null;
  let idleTotal = 0;
  for (const sl of slots) {
    sl.gaps = [];
    let cursor = knownFrom;
    for (const b of sl.bars) {
      const a = Math.max(b.start, ws);
      if (a - cursor > 0.5) sl.gaps.push([cursor, a]);
      busy += Math.max(0, Math.min(b.end, now) - a);
      cursor = Math.max(cursor, Math.min(b.end, now));
    }
    if (now - cursor > 0.5) sl.gaps.push([cursor, now]);
    for (const g of sl.gaps) {
      idleTotal += g[1] - g[0];
      if (!longest || g[1] - g[0] > longest[1] - longest[0]) longest = g;
    }
  }
  const span = Math.max(1, (now - knownFrom) * slots.length);
  const pausedSec = pauses.reduce((a, [p, q]) => a + (q - p), 0);
  return { slots, pauses, busy, idleTotal, longest, span, pausedSec, knownFrom, cap };
}

function tickStep(windowSec, width) {
  const steps = [300, 600, 900, 1800, 3600, 7200, 10800, 21600];
  const maxTicks = Math.max(2, Math.floor(width / 80));
  return steps.find((st) => windowSec / st <= maxTicks) || 21600;
}

export function renderTimeline(d, force) {
  const container = $('timeline');
  const width = Math.max(300, Math.floor(container.clientWidth || 900));
  const now = nowS();
  const ws = now - state.windowSec;
  const inputs = [width, state.windowSec, Math.floor(now / 5), d.enforced.map((l) => {
    const x = d.byLane[l];
    return [l, x.status.held.map((t) => t.ticketId), (x.history.entries || []).length,
      (x.history.entries || [])[0]?.ticketId, x.incidents.length, x.status.pause];
  })];
  if (force) unpatch('timeline');
  patch('timeline-legend', ['legend'], legend);
  patch('timeline', inputs, () => {
    if (!d.enforced.length) return empty('No enforced lanes yet.');
    return d.enforced.map((lane, li) => timelineLane(lane, d.byLane[lane], now, ws, width, li));
  });
}

function legend() {
  const items = ['completed', 'failed', 'timeout', 'lease-lost', 'expired', 'not-submitted',
    'slot-busy', 'abandoned'].map((o) => outcomeChip(o));
  return [h('span', { class: 'chip o-holding' }, h('span', { 'aria-hidden': 'true' }, '▶'), ' holding now'),
    ...items,
    h('span', { class: 'chip lg-idle' }, h('span', { 'aria-hidden': 'true' }, '░'), ' idle'),
    h('span', { class: 'chip lg-pause' }, h('span', { 'aria-hidden': 'true' }, '‖'), ' paused')];
}

function timelineLane(lane, x, now, ws, width, li) {
  const tl = laneTimeline(x, now, ws);
  const labelW = width < 560 ? 0 : 64;
  const plotW = width - labelW - 8;
  const rowH = 28;
  const top = 18;
  const rowsH = tl.slots.length * (rowH + 6) - 6;
  const axisY = top + rowsH + 6;
  const height = axisY + 20;
  const tx = (t) => labelW + ((Math.min(Math.max(t, ws), now) - ws) / (now - ws)) * plotW;
  const idleId = `tl-idle-${li}`;
  const pauseId = `tl-pause-${li}`;
  const liveId = `tl-live-${li}`;
  const g = [];
  g.push(s('defs', null,
    s('pattern', { id: idleId, width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
      s('rect', { width: 6, height: 6, class: 'tl-idle-bg' }), s('line', { x1: 0, y1: 0, x2: 0, y2: 6, class: 'tl-idle-line' })),
    s('pattern', { id: pauseId, width: 8, height: 8, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(-45)' },
      s('rect', { width: 8, height: 8, class: 'tl-pause-bg' }), s('line', { x1: 0, y1: 0, x2: 0, y2: 8, class: 'tl-pause-line' })),
    s('pattern', { id: liveId, width: 10, height: 10, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
      s('rect', { width: 10, height: 10, class: 'tl-live-bg' }), s('line', { x1: 0, y1: 0, x2: 0, y2: 10, class: 'tl-live-line' }))));
  // unknown (before the oldest fetched row)
  if (tl.knownFrom > ws) {
    g.push(s('rect', { x: labelW, y: top, width: tx(tl.knownFrom) - labelW, height: rowsH, class: 'tl-unknown' },
      s('title', null, 'before the first recorded request (not counted as idle)')));
  }
  // grid first, so bars and gaps are drawn over it
  const step = tickStep(state.windowSec, plotW);
  const ticks = [];
  for (let t = Math.ceil(ws / step) * step; t <= now; t += step) ticks.push(t);
  for (const t of ticks) {
    g.push(s('line', { x1: tx(t), y1: top - 2, x2: tx(t), y2: axisY, class: 'tl-grid' }));
  }
  tl.slots.forEach((sl, i) => {
    const y = top + i * (rowH + 6);
    if (labelW) g.push(s('text', { x: 0, y: y + rowH / 2 + 4, class: 'tl-label' }, `slot ${i + 1}`));
    g.push(s('rect', { x: tx(tl.knownFrom), y, width: Math.max(0, tx(now) - tx(tl.knownFrom)), height: rowH, class: 'tl-row' }));
    for (const [a, b] of sl.gaps) {
      const x0 = tx(a);
      const w = tx(b) - x0;
      if (w < 1) continue;
      g.push(s('rect', { x: x0, y: y + 4, width: w, height: rowH - 8, fill: `url(#${idleId})`, class: 'tl-idle', 'data-idle-seconds': Math.round(b - a) },
        s('title', null, `idle ${humanDur(b - a)} (${clockTime(a)}–${clockTime(b)})`)));
      if (w > 70) {
        g.push(s('text', { x: x0 + w / 2, y: y + rowH / 2 + 4, class: 'tl-idle-text', 'text-anchor': 'middle' },
          `idle ${humanDur(b - a)}`));
      }
    }
    for (const b of sl.bars) {
      const x0 = tx(b.start);
      const w = Math.max(2, tx(b.end) - x0);
      const o = b.live ? { icon: '▶', label: 'holding now' } : outcomeOf(b.outcome === 'none' ? null : b.outcome);
      const e = b.e;
      const tip = `${e.machineId} · ${e.project} / ${e.scene} — ${o.label}\n` +
        `${clockTime(b.start)}–${b.live ? 'now' : clockTime(b.end)} (${humanDur(b.end - b.start)})`;
      g.push(s('rect', {
        x: x0, y, width: w, height: rowH, rx: 3,
        class: `tl-bar o-${b.outcome}`, fill: b.live ? `url(#${liveId})` : null,
        'data-ticket': e.ticketId, 'data-outcome': b.outcome,
      }, s('title', null, tip)));
      if (w > 26) {
        const chars = Math.floor((w - 10) / 7);
        const label = `${o.icon} ${e.machineId}`;
        g.push(s('text', { x: x0 + 5, y: y + rowH / 2 + 4, class: `tl-bar-text${b.live ? ' live' : ''}` },
          label.length > chars ? `${label.slice(0, Math.max(1, chars - 1))}…` : label));
      }
    }
  });
  for (const [a, b] of tl.pauses) {
    const x0 = tx(a);
    const w = Math.max(2, tx(b) - x0);
    g.push(s('rect', { x: x0, y: top - 14, width: w, height: rowsH + 14, fill: `url(#${pauseId})`, class: 'tl-pause', 'data-pause': `${a}-${b}` },
      s('title', null, `paused ${clockTime(a)}–${clockTime(b)} (${humanDur(b - a)})`)));
    g.push(s('text', { x: x0 + 3, y: top - 4, class: 'tl-pause-text' }, w > 70 ? `‖ paused ${humanDur(b - a)}` : '‖'));
  }
  // axis
  g.push(s('line', { x1: labelW, y1: axisY, x2: labelW + plotW, y2: axisY, class: 'tl-axis' }));
  for (const t of ticks) {
    const x0 = tx(t);
    g.push(s('line', { x1: x0, y1: axisY, x2: x0, y2: axisY + 4, class: 'tl-axis' }));
    if (x0 < tx(now) - 44 && x0 > labelW + 14) {
      g.push(s('text', { x: x0, y: axisY + 16, class: 'tl-tick', 'text-anchor': 'middle' }, hhmm(t)));
    }
  }
  g.push(s('line', { x1: tx(now), y1: top - 14, x2: tx(now), y2: axisY + 4, class: 'tl-now' }));
  g.push(s('text', { x: tx(now) - 3, y: axisY + 16, class: 'tl-tick tl-now-text', 'text-anchor': 'end' }, 'now'));

  const pct = Math.round((100 * tl.busy) / tl.span);
  const summary = h('p', { class: 'tl-summary' },
    h('span', { class: 'tl-stat', 'data-stat': 'busy' }, h('strong', null, `${pct}%`), ' busy'),
    h('span', { class: 'tl-stat', 'data-stat': 'idle' }, 'idle ', h('strong', null, humanDur(tl.idleTotal)),
      tl.slots.length > 1 ? ` across ${tl.slots.length} slots` : ''),
    tl.longest ? h('span', { class: 'tl-stat', 'data-stat': 'longest-gap' }, 'longest idle gap ',
      h('strong', null, humanDur(tl.longest[1] - tl.longest[0])),
      ` (${hhmm(tl.longest[0])}–${tl.longest[1] >= now - 1 ? 'now' : hhmm(tl.longest[1])})`) : null,
    tl.pausedSec > 0 ? h('span', { class: 'tl-stat', 'data-stat': 'paused' }, 'paused ',
      h('strong', null, humanDur(tl.pausedSec))) : null,
    tl.knownFrom > ws + 1 ? h('span', { class: 'tl-stat muted' },
      `first recorded request at ${clockTime(tl.knownFrom)}; nothing counted before it`) : null);
  return h('div', { class: 'tl-lane', 'data-lane': lane },
    h('div', { class: 'tl-head' }, h('h3', { class: 'sub' }, laneName(lane),
      h('span', { class: 'muted small' }, ` · capacity ${tl.cap}`)), summary),
    s('svg', { width, height, viewBox: `0 0 ${width} ${height}`, class: 'tl-svg', role: 'img',
      'aria-label': `Timeline of ${lane} over the last ${humanDur(state.windowSec)}: ${pct}% busy, idle ${humanDur(tl.idleTotal)}` }, g));
}

/** The window buttons, and a redraw after the page width changed. */
export function wireTimeline() {
  for (const b of document.querySelectorAll('#timeline-window button')) {
    b.addEventListener('click', () => {
      state.windowSec = Number(b.getAttribute('data-window'));
      for (const o of document.querySelectorAll('#timeline-window button')) {
        o.setAttribute('aria-pressed', String(o === b));
      }
      if (state.data) renderTimeline(state.data, true);
    });
  }
  let resizeTimer = null;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (state.data) renderTimeline(state.data, true); }, 150);
  });
}
