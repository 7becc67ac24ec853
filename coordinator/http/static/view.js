/* Drawing bookkeeping shared by the panels: patch() redraws a panel only when its inputs
 * changed, tick() updates the clock-driven text every second, renderLive() the live
 * indicator (live, stale after STALE_AFTER_MS, down) and the connection banner. */

import { STALE_AFTER_MS } from './config.js';
import { NetError, hasToken } from './api.js';
import { $ } from './dom.js';
import { clockDur, clockTime, humanDur } from './format.js';
import { nowS, state } from './state.js';

/** Re-render a panel only when its inputs changed: no flicker, focus and hover survive. */
export function patch(id, inputs, build) {
  const sig = JSON.stringify(inputs);
  if (state.sigs[id] === sig) return;
  state.sigs[id] = sig;
  const el = $(id);
  el.replaceChildren(...[build()].flat().filter(Boolean));
  tick();
}

/** Forget a panel's inputs, so its next patch() draws it again. */
export function unpatch(id) {
  delete state.sigs[id];
}

export function tick() {
  const now = nowS();
  for (const el of document.querySelectorAll('[data-ago]')) {
    const d = now - Number(el.getAttribute('data-ago'));
    el.textContent = d < 1.5 ? 'just now' : `${humanDur(d)} ago`;
  }
  for (const el of document.querySelectorAll('[data-since]')) {
    el.textContent = clockDur(now - Number(el.getAttribute('data-since')));
  }
  for (const el of document.querySelectorAll('[data-until]')) {
    const left = Number(el.getAttribute('data-until')) - now;
    el.textContent = left > 0 ? clockDur(left) : '0:00';
    el.classList.toggle('due', left <= 60);
  }
  for (const el of document.querySelectorAll('[data-eta]')) {
    const left = Number(el.getAttribute('data-eta')) - now;
    el.textContent = left >= 1 ? `≈ ${humanDur(left)}` : '≈ now';
  }
  renderLive();
}

export function renderLive() {
  const live = $('live');
  const text = $('live-text');
  const banner = $('connection-banner');
  let cls = 'live-locked';
  let label = 'Locked';
  let bannerText = null;
  if (hasToken()) {
    const age = state.lastOkMs ? (Date.now() - state.lastOkMs) / 1000 : null;
    if (state.lastError) {
      const e = state.lastError;
      const what = e instanceof NetError
        ? `Coordinator unreachable (${e.message})`
        : `Coordinator error ${e.status || ''}${e.code ? ` ${e.code}` : ''}`;
      cls = 'live-down';
      label = `${what}`;
      bannerText = age === null
        ? `${what}. No data yet; retrying every few seconds.`
        : `${what}. Showing data from ${clockTime(state.lastOkMs / 1000 + state.offset)} ` +
          `(${humanDur(age)} old); retrying every few seconds.`;
    } else if (age === null) {
      cls = 'live-wait';
      label = 'Loading…';
    } else if (age * 1000 > STALE_AFTER_MS) {
      cls = 'live-stale';
      label = `Stale — last update ${humanDur(age)} ago`;
    } else {
      cls = 'live-ok';
      label = `Live — updated ${age < 1.5 ? 'just now' : `${Math.round(age)} s ago`}`;
    }
  }
  live.className = `live ${cls}`;
  if (text.textContent !== label) text.textContent = label;
  const stale = cls === 'live-down' || cls === 'live-stale';
  $('dashboard').classList.toggle('is-stale', stale);
  if (bannerText) {
    if (banner.textContent !== `⚠ ${bannerText}`) banner.textContent = `⚠ ${bannerText}`;
    banner.hidden = false;
  } else {
    banner.hidden = true;
  }
}
