/* Text for times, durations and ids. Plain strings only: the DOM builders (dom.js) put them
 * on the page as text, so nothing needs HTML escaping. Wire times are epoch seconds with a
 * fraction, compared against the server's clock (state.js nowS()). */

import { nowS } from './state.js';

const pad = (n) => String(n).padStart(2, '0');

/** 75 -> "1:15", 3725 -> "1:02:05" (countdowns). */
export function clockDur(sec) {
  const t = Math.max(0, Math.floor(sec));
  const hh = Math.floor(t / 3600);
  const mm = Math.floor((t % 3600) / 60);
  const ss = t % 60;
  return hh > 0 ? `${hh}:${pad(mm)}:${pad(ss)}` : `${mm}:${pad(ss)}`;
}

/** 42 -> "42 s", 750 -> "12 min", 4000 -> "1 h 07 min" (spans). */
export function humanDur(sec) {
  if (sec === null || sec === undefined || Number.isNaN(sec)) return 'unknown';
  const t = Math.max(0, Math.round(sec));
  if (t < 60) return `${t} s`;
  if (t < 3600) {
    const m = Math.floor(t / 60);
    const r = t % 60;
    return m < 10 && r ? `${m} min ${pad(r)} s` : `${Math.round(t / 60)} min`;
  }
  const mins = Math.round(t / 60);
  return `${Math.floor(mins / 60)} h ${pad(mins % 60)} min`;
}

/** "14:05:09" today (server's today), "Nov 29 14:05:09" another day. */
export function clockTime(epoch) {
  if (epoch === null || epoch === undefined) return 'unknown';
  const d = new Date(epoch * 1000);
  const t = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  const today = new Date(nowS() * 1000);
  if (d.toDateString() === today.toDateString()) return t;
  return `${d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })} ${t}`;
}

export function hhmm(epoch) {
  const d = new Date(epoch * 1000);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export const short = (v, n = 10) => (v && v.length > n + 1 ? `${v.slice(0, n)}…` : v || '');
export const shortHash = (v) => (v ? `${v.replace(/^sha256:/, '').slice(0, 10)}…` : 'unknown');
