/* Lane control room — a read-only view of the coordinator (SPEC §4.9).
 *
 * Rules this file keeps:
 * - It calls read endpoints only: GET /v1/lanes (to check a pasted token), GET /v1/overview
 *   and GET /v1/evidence. Nothing else.
 * - A refresh costs a fixed number of requests whatever the number of lanes: one
 *   /v1/overview (every lane's status, recent render log, receipts and projects, the
 *   incidents, the machines and the chosen render log, each bounded) and one /v1/evidence
 *   (the selected lane and ticket).
 * - The bearer token lives in this tab's sessionStorage only, goes only into the
 *   Authorization header of same-origin requests, never into a URL.
 * - Every string from the server reaches the page through textContent (the h()/s() builders
 *   below); no innerHTML anywhere.
 * - Wire times are epoch seconds with a fraction; the page measures its offset to the
 *   server's clock on every refresh and counts down against the server's time.
 */
'use strict';

(() => {
  const TOKEN_KEY = 'laneControlRoom.token';
  const REFRESH_MS = 2500;
  const STALE_AFTER_MS = 9000;
  const FETCH_TIMEOUT_MS = 8000;
  const HISTORY_PER_LANE = 50; // render-log rows per lane for the timeline
  const QUEUED_PER_LANE = 50; // waiters listed per lane card (the card says how many more)
  // rows of the render log: of one chosen lane (one read), or newest of every lane (a read
  // of that many rows per lane on the server, so fewer)
  const LOG_LIMIT_LANE = 500;
  const LOG_LIMIT_ALL = 100;
  const logLimitFor = (logLane) => (logLane ? LOG_LIMIT_LANE : LOG_LIMIT_ALL);
  const INCIDENTS_LIMIT = 200;
  const ONLINE_SECONDS = 180;
  const RECEIPTS_SHOWN = 6;
  const PHASES = ['lease-acquired', 'references-applied', 'provider-submitted', 'provider-terminal'];
  const SVG_NS = 'http://www.w3.org/2000/svg';

  const OUTCOMES = {
    completed: { icon: '✓', label: 'completed' },
    failed: { icon: '✗', label: 'failed' },
    timeout: { icon: '◷', label: 'timeout' },
    'lease-lost': { icon: '↯', label: 'lease lost' },
    expired: { icon: '◔', label: 'expired' },
    'not-submitted': { icon: '↩', label: 'not submitted' },
    'slot-busy': { icon: '⊘', label: 'slot busy' },
    abandoned: { icon: '∅', label: 'abandoned' },
    null: { icon: '–', label: 'no outcome' },
  };

  const INCIDENTS = {
    'provider-cooldown-started': { icon: '‖', label: 'Cooldown started', sev: 'warn' },
    'provider-cooldown-extended': { icon: '‖', label: 'Cooldown extended', sev: 'warn' },
    'provider-cooldown-ended': { icon: '▶', label: 'Cooldown ended', sev: 'ok' },
    'receipt-hash-mismatch': { icon: '⚠', label: 'Receipt hash mismatch', sev: 'bad' },
    'lease-expired': { icon: '◔', label: 'Lease expired', sev: 'warn' },
    'waiter-abandoned': { icon: '∅', label: 'Waiter abandoned', sev: 'info' },
    'duplicate-collision': { icon: '⇄', label: 'Duplicate collision', sev: 'info' },
    'late-release': { icon: '↩', label: 'Late release', sev: 'info' },
  };

  // ------------------------------------------------------------------ state

  const state = {
    token: null,
    generation: 0, // bumped by Lock: answers to older requests are dropped
    timer: null,
    running: false,
    pending: false,
    offset: 0, // server clock minus this computer's clock, seconds
    lastOkMs: 0,
    lastError: null,
    data: null,
    sigs: {},
    logLimit: 25,
    windowSec: 10800,
    evidenceLane: '',
    evidenceTicket: '',
  };

  const $ = (id) => document.getElementById(id);
  const nowS = () => Date.now() / 1000 + state.offset;

  // ------------------------------------------------------------------ DOM builders

  /** h('div', {class: 'x'}, 'text', child, [more]) — strings become text nodes, never HTML. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function setAttrs(el, attrs) {
    if (!attrs) return;
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  /** Re-render a panel only when its inputs changed: no flicker, focus and hover survive. */
  function patch(id, inputs, build) {
    const sig = JSON.stringify(inputs);
    if (state.sigs[id] === sig) return;
    state.sigs[id] = sig;
    const el = $(id);
    el.replaceChildren(...[build()].flat().filter(Boolean));
    tick();
  }

  // ------------------------------------------------------------------ formatting

  const pad = (n) => String(n).padStart(2, '0');

  /** 75 -> "1:15", 3725 -> "1:02:05" (countdowns). */
  function clockDur(sec) {
    const t = Math.max(0, Math.floor(sec));
    const hh = Math.floor(t / 3600);
    const mm = Math.floor((t % 3600) / 60);
    const ss = t % 60;
    return hh > 0 ? `${hh}:${pad(mm)}:${pad(ss)}` : `${mm}:${pad(ss)}`;
  }

  /** 42 -> "42 s", 750 -> "12 min", 4000 -> "1 h 07 min" (spans). */
  function humanDur(sec) {
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

  function clockTime(epoch) {
    if (epoch === null || epoch === undefined) return 'unknown';
    const d = new Date(epoch * 1000);
    const t = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    const today = new Date(nowS() * 1000);
    if (d.toDateString() === today.toDateString()) return t;
    return `${d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' })} ${t}`;
  }

  function hhmm(epoch) {
    const d = new Date(epoch * 1000);
    return `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }

  const short = (v, n = 10) => (v && v.length > n + 1 ? `${v.slice(0, n)}…` : v || '');
  const shortHash = (v) => (v ? `${v.replace(/^sha256:/, '').slice(0, 10)}…` : 'unknown');

  // live time elements, refreshed every second by tick()
  const ago = (epoch) =>
    h('time', { 'data-ago': epoch, datetime: new Date(epoch * 1000).toISOString(),
      title: new Date(epoch * 1000).toLocaleString() });
  const until = (epoch, cls) => h('span', { 'data-until': epoch, class: cls || 'num' });
  const since = (epoch) => h('span', { 'data-since': epoch, class: 'num' });
  const etaIn = (epoch) => h('span', { 'data-eta': epoch, class: 'num', title: `expected at ${clockTime(epoch)}` });

  function whenCell(epoch) {
    return h('span', { class: 'when' }, h('span', { class: 'num' }, clockTime(epoch)), ' ',
      h('span', { class: 'muted small ago' }, ago(epoch)));
  }

  function outcomeChip(outcome, late) {
    const o = OUTCOMES[outcome === null || outcome === undefined ? 'null' : outcome] ||
      { icon: '•', label: String(outcome) };
    const cls = `chip o-${outcome || 'none'}`;
    return h('span', { class: cls },
      h('span', { class: 'chip-icon', 'aria-hidden': 'true' }, o.icon), ` ${o.label}`,
      late ? h('span', { class: 'chip-late' }, ` (late: ${late})`) : null);
  }

  function laneName(lane) {
    const i = lane.indexOf(':');
    if (i < 0) return h('span', { class: 'lane-name' }, lane);
    return h('span', { class: 'lane-name' },
      h('span', { class: 'lane-route' }, lane.slice(0, i)),
      h('span', { class: 'lane-sep' }, ':'),
      h('span', { class: 'lane-account' }, lane.slice(i + 1)));
  }

  function who(machine, claim) {
    return h('span', { class: 'who' },
      h('strong', { class: 'machine' }, machine || 'unknown'),
      claim ? [h('span', { class: 'sep', 'aria-hidden': 'true' }, ' · '),
        h('span', { class: 'claim mono', title: `claim ${claim}` }, short(claim, 8))] : null);
  }

  function request(project, scene) {
    return h('span', { class: 'req' },
      h('span', { class: 'project' }, project || 'unknown'),
      h('span', { class: 'slash', 'aria-hidden': 'true' }, ' / '),
      h('span', { class: 'scene' }, scene || 'unknown'));
  }

  /** A ticket id that selects the ticket for the Evidence panel (a local view change only). */
  function ticketLink(lane, ticketId) {
    if (!ticketId) return h('span', { class: 'muted' }, 'unknown');
    return h('button', {
      type: 'button', class: 'ticket mono', title: `${ticketId} — show its evidence`,
      'data-ticket': ticketId,
      onclick: () => selectEvidence(lane, ticketId, true),
    }, short(ticketId, 9));
  }

  function table(headers, rows, cls) {
    return h('table', { class: `tbl ${cls || ''}` },
      h('thead', null, h('tr', null, headers.map((x) => h('th', { scope: 'col' }, x)))),
      h('tbody', null, rows));
  }

  /** A row whose cells carry their column name, so phone-width cards can label them. */
  function row(headers, cells, attrs) {
    return h('tr', attrs, cells.map((c, i) =>
      h('td', { 'data-label': headers[i] }, h('div', { class: 'cell' }, c))));
  }

  function empty(text) {
    return h('p', { class: 'empty' }, text);
  }

  // ------------------------------------------------------------------ clock-driven text

  function tick() {
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

  // ------------------------------------------------------------------ HTTP (reads only)

  class HttpError extends Error {
    constructor(status, code, message) {
      super(message || `HTTP ${status}`);
      this.status = status;
      this.code = code;
    }
  }

  class NetError extends Error {}

  async function api(method, path, body) {
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
    const headers = { Authorization: `Bearer ${state.token}`, Accept: 'application/json' };
    const init = {
      method, headers, signal: ctrl.signal, cache: 'no-store', credentials: 'omit',
      referrerPolicy: 'no-referrer', redirect: 'error', mode: 'same-origin',
    };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify({ protocolVersion: 1, ...body });
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      throw new NetError(ctrl.signal.aborted ? 'no answer within 8 s' : 'connection failed');
    } finally {
      clearTimeout(timer);
    }
    let json = null;
    try {
      json = await res.json();
    } catch (e) {
      json = null;
    }
    if (!res.ok) {
      const err = (json && json.error) || {};
      throw new HttpError(res.status, err.code, err.message);
    }
    if (!json || typeof json !== 'object') throw new HttpError(res.status, 'bad-reply', 'not JSON');
    return json;
  }

  const getLanes = () => api('GET', '/v1/lanes');
  /** The whole refresh in one read: its size is bounded, its count is one, for any lane count. */
  const getOverview = (logLane, project) =>
    api('GET', `/v1/overview?history=${HISTORY_PER_LANE}&queued=${QUEUED_PER_LANE}` +
      `&receipts=${RECEIPTS_SHOWN}&incidents=${INCIDENTS_LIMIT}&limit=${logLimitFor(logLane)}` +
      (logLane ? `&lane=${encodeURIComponent(logLane)}` : '') +
      (project ? `&project=${encodeURIComponent(project)}` : ''));
  const getEvidence = (lane, ticket) =>
    api('GET', `/v1/evidence?lane=${encodeURIComponent(lane)}` +
      (ticket ? `&ticketId=${encodeURIComponent(ticket)}` : ''));

  // ------------------------------------------------------------------ unlock / lock

  function tokenProblem(token) {
    if (!token) return 'Paste the token first.';
    if (!/^[\x21-\x7e]+$/.test(token)) {
      return 'That is not a token: it may hold only printable ASCII characters, no spaces.';
    }
    return null;
  }

  async function unlock(token) {
    const err = $('unlock-error');
    const problem = tokenProblem(token);
    if (problem) {
      showUnlockError(problem);
      return;
    }
    $('unlock').disabled = true;
    err.hidden = true;
    const gen = ++state.generation;
    state.token = token;
    try {
      const lanes = await getLanes();
      if (gen !== state.generation) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      $('token').value = '';
      state.offset = lanes.now - Date.now() / 1000;
      showDashboard();
    } catch (e) {
      if (gen !== state.generation) return;
      state.token = null;
      if (e instanceof HttpError && e.status === 401) {
        showUnlockError('Wrong token: the coordinator refused it (401 unauthorized). ' +
          'Nothing was stored. Check you copied the whole token.');
      } else if (e instanceof NetError) {
        showUnlockError(`Could not reach the coordinator (${e.message}). Nothing was stored.`);
      } else {
        showUnlockError(`The coordinator answered with an error (${e.status || ''} ${e.code || ''}). ` +
          'Nothing was stored.');
      }
    } finally {
      $('unlock').disabled = false;
    }
  }

  function showUnlockError(text) {
    const err = $('unlock-error');
    err.replaceChildren(h('span', { 'aria-hidden': 'true', class: 'err-icon' }, '✗ '), text);
    err.hidden = false;
  }

  function showDashboard() {
    $('unlock-panel').hidden = true;
    $('dashboard').hidden = false;
    $('lock').hidden = false;
    state.lastOkMs = 0;
    state.lastError = null;
    refreshNow();
  }

  /** Lock: forget the token and every byte of data at once. */
  function lock(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    state.generation += 1;
    clearTimeout(state.timer);
    state.timer = null;
    state.running = false;
    state.pending = false;
    state.data = null;
    state.sigs = {};
    state.lastOkMs = 0;
    state.lastError = null;
    state.evidenceTicket = '';
    for (const id of ['alerts', 'lanes', 'timeline', 'timeline-legend', 'log', 'log-counts',
      'log-shown', 'receipts', 'incidents', 'machines', 'evidence', 'connection-banner',
      'coordinator-name']) {
      $(id).replaceChildren();
    }
    for (const id of ['log-lane', 'log-project']) {
      const sel = $(id);
      sel.replaceChildren(sel.options[0] ? h('option', { value: '' }, sel.options[0].text) : '');
      sel.value = '';
    }
    $('evidence-lane').replaceChildren();
    $('evidence-ticket').value = '';
    $('connection-banner').hidden = true;
    $('dashboard').hidden = true;
    $('lock').hidden = true;
    $('unlock-panel').hidden = false;
    if (message) showUnlockError(message);
    else $('unlock-error').hidden = true;
    renderLive();
    $('token').focus();
  }

  // ------------------------------------------------------------------ refresh loop

  function refreshNow() {
    clearTimeout(state.timer);
    state.timer = null;
    if (state.running) {
      state.pending = true;
      return;
    }
    refresh();
  }

  async function refresh() {
    if (!state.token) return;
    const gen = state.generation;
    state.running = true;
    const logLane = $('log-lane').value;
    const project = $('log-project').value;
    const evLane = state.evidenceLane;
    const evTicket = state.evidenceTicket;
    try {
      const sent = Date.now();
      const ov = await getOverview(logLane, project);
      const got = Date.now();
      const lanes = Array.isArray(ov.lanes) ? ov.lanes : [];
      const enforced = lanes.filter((l) => l.enforced).map((l) => l.lane);
      const evidenceLane = enforced.includes(evLane) ? evLane : enforced[0] || '';
      const evidenceR = evidenceLane
        ? await getEvidence(evidenceLane, evLane === evidenceLane ? evTicket : '') : null;
      if (gen !== state.generation) return;
      state.offset = ov.now - (sent + got) / 2000;
      const incidents = Array.isArray(ov.incidents) ? ov.incidents : [];
      const limits = ov.limits || {};
      const byLane = {};
      for (const l of lanes) {
        byLane[l.lane] = {
          status: l, history: l.history || { entries: [], retained: 0 },
          historyLimit: limits.history ?? HISTORY_PER_LANE,
          incidents: incidents.filter((i) => i.lane === l.lane),
        };
      }
      state.data = {
        lanes, enforced, byLane, incidents, machines: ov.machines || [],
        log: ov.log || null, evidence: evidenceR,
        evidenceFor: { lane: evidenceLane, ticket: evLane === evidenceLane ? evTicket : '' },
        coordinator: ov.coordinator,
      };
      if (evidenceLane !== evLane && state.evidenceLane === evLane) {
        // the chosen lane is gone (or none was chosen yet): fall back to the first lane
        state.evidenceLane = evidenceLane;
        state.evidenceTicket = '';
      }
      state.lastOkMs = Date.now();
      state.lastError = null;
      render();
    } catch (e) {
      if (gen !== state.generation) return;
      if (e instanceof HttpError && e.status === 401) {
        lock('The coordinator no longer accepts this token (401 unauthorized), so the page ' +
          'locked itself. Paste a current token.');
        return;
      }
      state.lastError = e;
      renderLive();
    } finally {
      if (gen === state.generation) {
        state.running = false;
        if (state.pending) {
          state.pending = false;
          refresh();
        } else {
          state.timer = setTimeout(refresh, REFRESH_MS);
        }
      }
    }
  }

  // ------------------------------------------------------------------ live indicator

  function renderLive() {
    const live = $('live');
    const text = $('live-text');
    const banner = $('connection-banner');
    let cls = 'live-locked';
    let label = 'Locked';
    let bannerText = null;
    if (state.token) {
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

  // ------------------------------------------------------------------ render

  function render() {
    const d = state.data;
    if (!d) return;
    $('coordinator-name').textContent = d.coordinator ? `coordinator: ${d.coordinator}` : '';
    renderFilters(d);
    renderAlerts(d);
    renderLanes(d);
    renderTimeline(d, false);
    renderLog(d);
    renderReceipts(d);
    renderIncidents(d);
    renderMachines(d);
    renderEvidence(d);
    tick();
  }

  function setOptions(sel, values, allLabel) {
    const want = ['', ...values];
    const have = Array.from(sel.options).map((o) => o.value);
    if (JSON.stringify(want) === JSON.stringify(have)) return;
    const current = sel.value;
    sel.replaceChildren(...want.map((v) => h('option', { value: v }, v === '' ? allLabel : v)));
    sel.value = want.includes(current) ? current : '';
  }

  /** The projects the render-log filter offers: the chosen lane's own, or every lane's. */
  function logProjects(d, laneF) {
    const projects = new Set();
    for (const lane of laneF ? [laneF] : d.enforced) {
      const x = d.byLane[lane];
      if (!x) continue;
      for (const p of x.status.projects || []) projects.add(p);
    }
    return [...projects].sort();
  }

  function renderFilters(d) {
    const laneSel = $('log-lane');
    const projectSel = $('log-project');
    const before = [laneSel.value, projectSel.value];
    setOptions(laneSel, d.enforced, 'all lanes');
    setOptions(projectSel, logProjects(d, laneSel.value), 'all projects');
    // a filter fell back to "all" (its lane is gone, or the project is not the lane's): read again
    if (laneSel.value !== before[0] || projectSel.value !== before[1]) refreshNow();
    const evSel = $('evidence-lane');
    const evWant = d.enforced;
    const evHave = Array.from(evSel.options).map((o) => o.value);
    if (JSON.stringify(evWant) !== JSON.stringify(evHave)) {
      evSel.replaceChildren(...evWant.map((v) => h('option', { value: v }, v)));
    }
    if (evSel.value !== state.evidenceLane) evSel.value = state.evidenceLane;
  }

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

  function allReceipts(d) {
    const out = [];
    for (const lane of d.enforced) {
      for (const r of laneReceipts(d.byLane[lane].status)) out.push({ lane, ...r });
    }
    return out;
  }

  function renderAlerts(d) {
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

  function pauseText(p) {
    return [`paused — ${p.reasonCode} reported by `, h('strong', null, p.machineId),
      ', ends in ', until(p.until), h('span', { class: 'muted' }, ` (at ${clockTime(p.until)})`)];
  }

  // ---- lanes

  function renderLanes(d) {
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

  // ---- render log

  /** The render log the overview read for the current filters; null while it is on its way. */
  function logScope(d) {
    const laneF = $('log-lane').value;
    const project = $('log-project').value;
    const log = d.log;
    if (!log || (log.lane || '') !== laneF || (log.project || '') !== project) return null;
    const entries = log.entries || [];
    return {
      entries, counts: log.counts || {}, retained: log.retained || 0, fetched: entries.length,
      laneF, project,
    };
  }

  function renderLog(d) {
    const scope = logScope(d);
    patch('log-counts', scope && [scope.counts, scope.laneF, scope.project], () => {
      if (!scope) return h('span', { class: 'muted' }, 'Loading…');
      const keys = Object.keys(scope.counts).sort((a, b) => scope.counts[b] - scope.counts[a]);
      const total = Object.values(scope.counts).reduce((a, b) => a + b, 0);
      return [h('span', { class: 'count-total' }, h('strong', null, String(total)),
        ` render${total === 1 ? '' : 's'}`),
      ...keys.map((k) => h('span', { class: 'count', 'data-outcome': k },
        outcomeChip(k === 'null' ? null : k), h('strong', { class: 'count-n' }, String(scope.counts[k]))))];
    });
    const headers = ['Ended', 'Lane', 'Request', 'Machine', 'Outcome', 'Waited', 'Held', 'Ticket'];
    const shown = scope ? scope.entries.slice(0, state.logLimit) : [];
    patch('log', scope && [shown, state.logLimit], () => {
      if (!scope) return empty('Loading…');
      if (!scope.entries.length) {
        return empty(scope.project ? `No finished renders for project “${scope.project}”.`
          : 'No finished renders yet.');
      }
      return table(headers, shown.map((e) => row(headers, [
        whenCell(e.endedAt), laneName(e.lane),
        [request(e.project, e.scene),
          e.providerJobId || e.note ? h('div', { class: 'muted small' },
            e.providerJobId ? `job ${e.providerJobId}` : '', e.providerJobId && e.note ? ' · ' : '',
            e.note ? `“${e.note}”` : '') : null],
        who(e.machineId, e.claimId), outcomeChip(e.outcome, e.lateOutcome),
        h('span', { class: 'num' }, e.waitSeconds === null ? '—' : clockDur(e.waitSeconds)),
        h('span', { class: 'num' }, e.holdSeconds === null ? 'never held' : clockDur(e.holdSeconds)),
        ticketLink(e.lane, e.ticketId),
      ], { class: `log-row o-row-${e.outcome || 'none'}`, 'data-project': e.project })), 'tbl-log');
    });
    const more = $('log-more');
    if (scope) {
      const n = scope.entries.length;
      $('log-shown').textContent = n
        ? `Showing ${Math.min(n, state.logLimit)} of ${n}` +
          (scope.fetched >= logLimitFor(scope.laneF) && scope.retained > scope.fetched
            ? ` (the newest ${scope.fetched} read; ${scope.retained} kept)` : '')
        : '';
      more.hidden = n <= state.logLimit;
    } else {
      $('log-shown').textContent = '';
      more.hidden = true;
    }
  }

  // ---- receipts

  function renderReceipts(d) {
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
          h('span', { class: 'stack' }, h('strong', null, r.machineId), ticketLink(lane, r.ticketId)),
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

  function verdict(v) {
    if (v === true) return h('span', { class: 'chip v-ok' }, '✓ verified');
    if (v === false) return h('span', { class: 'chip v-bad', role: 'img', 'aria-label': 'warning: hash mismatch' }, '⚠ HASH MISMATCH');
    return h('span', { class: 'chip v-unknown' }, '? not checked');
  }

  // ---- incidents

  function mergedIncidents(d) {
    return d.incidents; // every lane's, newest first (the overview merged them)
  }

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

  function renderIncidents(d) {
    const list = mergedIncidents(d).slice(0, 40);
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
            i.ticketId ? [' · ', ticketLink(i.lane, i.ticketId)] : null));
      }));
    });
  }

  // ---- computers

  function renderMachines(d) {
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

  // ---- evidence

  function selectEvidence(lane, ticketId, scroll) {
    state.evidenceLane = lane;
    state.evidenceTicket = ticketId;
    $('evidence-ticket').value = ticketId;
    $('evidence-lane').value = lane;
    if (state.data) renderEvidence(state.data);
    if (scroll) $('evidence-title').scrollIntoView({ behavior: 'smooth', block: 'start' });
    refreshNow();
  }

  function renderEvidence(d) {
    const lane = state.evidenceLane;
    const ticket = state.evidenceTicket;
    const fresh = d.evidenceFor && d.evidenceFor.lane === lane && d.evidenceFor.ticket === ticket;
    const ev = fresh ? d.evidence : null;
    patch('evidence', [lane, ticket, ev && ev.coordinatorEvidence, ev && ev.jobEvidence], () => {
      if (!lane) return empty('No enforced lane yet.');
      if (!ev) return empty('Loading evidence…');
      return [coordinatorEvidence(lane, ev.coordinatorEvidence), jobEvidence(lane, ticket, ev.jobEvidence)];
    });
  }

  function coordinatorEvidence(lane, c) {
    c = c || {};
    const seen = c.machinesSeen || [];
    const col = c.collision;
    return h('div', { class: 'ev-box', 'data-evidence': 'coordinator' },
      h('h3', { class: 'sub' }, 'Coordinator evidence · ', laneName(lane)),
      h('dl', { class: 'kv' },
        h('dt', null, 'Distinct machines (last hour)'),
        h('dd', null, h('strong', { class: 'ev-distinct' }, String(c.distinctMachines ?? 'unknown')),
          seen.length ? [' — ', seen.map((m, i) => [i ? ', ' : '', h('strong', null, m.machineId), ' (',
            ago(m.lastSeenAt), ')'])] : ''),
        h('dt', null, 'Latest deduplicated collision'),
        h('dd', { class: 'ev-collision' }, col
          ? [h('strong', null, (col.requester || {}).machineId || 'unknown'), ' asked for ',
            request(col.project, col.scene), ' already owned by ',
            h('strong', null, (col.owner || {}).machineId || 'unknown'), ' → one ticket ',
            ticketLink(lane, col.ticketId), col.granted ? ', held by its owner only' : ', still queued',
            h('span', { class: 'muted small' }, ' · ', ago(col.at))]
          : h('span', { class: 'muted' }, 'none recorded'))));
  }

  function jobEvidence(lane, ticket, j) {
    const box = (...children) => h('div', { class: 'ev-box', 'data-evidence': 'job' },
      h('h3', { class: 'sub' }, 'Job evidence', ticket ? [' · ', h('span', { class: 'mono' }, ticket)] : ''),
      ...children);
    if (!ticket) {
      return box(h('p', { class: 'muted' }, 'No ticket selected. Job evidence is shown for one ' +
        'exact ticket only — click a ticket id anywhere on the page.'));
    }
    // Never borrow: evidence is shown only when it is for exactly this ticket.
    if (!j || j.ticketId !== ticket) return box(h('p', { class: 'muted' }, 'unknown'));
    if (!j.found) {
      return box(h('p', { class: 'ev-missing' }, `This ticket is unknown to ${lane}: identity unknown, ` +
        'receipts unknown.'), h('p', null, h('span', { class: 'chip v-unknown' }, '? incomplete')));
    }
    const id = j.identity;
    const idRows = id === 'unknown' || !id
      ? [h('dt', null, 'Identity'), h('dd', null, 'unknown')]
      : [['Project', id.project], ['Scene', id.scene], ['Prompt hash', id.promptHash],
        ['Machine', id.machineId], ['Claim', id.claimId]].map(([k, v]) =>
        [h('dt', null, k), h('dd', { class: k === 'Prompt hash' || k === 'Claim' ? 'mono' : '' }, v ?? 'unknown')]);
    const phases = PHASES.map((p) => {
      const recs = j.receipts ? j.receipts[p] : 'unknown';
      if (!Array.isArray(recs)) {
        return h('li', { class: 'phase-row missing', 'data-phase': p },
          h('span', { class: 'phase-mark', 'aria-hidden': 'true' }, '?'), h('span', { class: 'phase' }, p),
          h('span', { class: 'muted' }, 'unknown'));
      }
      const bad = recs.some((r) => r.contentHashVerified === false);
      return h('li', { class: `phase-row ${bad ? 'row-bad' : 'present'}`, 'data-phase': p },
        h('span', { class: 'phase-mark', 'aria-hidden': 'true' }, bad ? '⚠' : '✓'), h('span', { class: 'phase' }, p),
        h('span', null, recs.map((r, i) => [i ? '; ' : '', clockTime(r.createdAt), ' by ',
          h('strong', null, r.machineId), ' ', h('span', { class: 'mono', title: r.contentHash }, shortHash(r.contentHash)),
          ' ', verdict(r.contentHashVerified)])));
    });
    const missing = PHASES.filter((p) => !j.receipts || !Array.isArray(j.receipts[p]));
    return box(
      h('dl', { class: 'kv' }, idRows,
        h('dt', null, 'State'), h('dd', null, j.state || 'unknown',
          j.outcome ? [' · ', outcomeChip(j.outcome)] : '', j.fence ? ` · fence ${j.fence}` : '')),
      h('h4', null, 'Receipts by phase'),
      h('ul', { class: 'phases' }, phases),
      h('p', { class: 'ev-complete' }, j.complete
        ? h('span', { class: 'chip v-ok' }, '✓ complete — all four phases recorded')
        : h('span', { class: 'chip v-unknown' }, `? incomplete — missing: ${missing.join(', ')}`)));
  }

  // ------------------------------------------------------------------ timeline (inline SVG)

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

  function renderTimeline(d, force) {
    const container = $('timeline');
    const width = Math.max(300, Math.floor(container.clientWidth || 900));
    const now = nowS();
    const ws = now - state.windowSec;
    const inputs = [width, state.windowSec, Math.floor(now / 5), d.enforced.map((l) => {
      const x = d.byLane[l];
      return [l, x.status.held.map((t) => t.ticketId), (x.history.entries || []).length,
        (x.history.entries || [])[0]?.ticketId, x.incidents.length, x.status.pause];
    })];
    if (force) delete state.sigs.timeline;
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
        const o = b.live ? { icon: '▶', label: 'holding now' } : (OUTCOMES[b.outcome === 'none' ? 'null' : b.outcome] || { icon: '•', label: b.outcome });
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

  // ------------------------------------------------------------------ wiring

  function init() {
    $('unlock-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      unlock($('token').value.trim());
    });
    $('lock').addEventListener('click', () => lock());
    $('log-project').addEventListener('change', () => {
      state.logLimit = 25;
      if (state.data) renderLog(state.data);
      refreshNow();
    });
    $('log-lane').addEventListener('change', () => {
      state.logLimit = 25;
      if (state.data) {
        // offer only the chosen lane's projects at once (a project of another lane resets)
        setOptions($('log-project'), logProjects(state.data, $('log-lane').value), 'all projects');
        renderLog(state.data);
      }
      refreshNow();
    });
    $('log-more').addEventListener('click', () => {
      state.logLimit += 50;
      if (state.data) renderLog(state.data);
    });
    for (const b of document.querySelectorAll('#timeline-window button')) {
      b.addEventListener('click', () => {
        state.windowSec = Number(b.getAttribute('data-window'));
        for (const o of document.querySelectorAll('#timeline-window button')) {
          o.setAttribute('aria-pressed', String(o === b));
        }
        if (state.data) renderTimeline(state.data, true);
      });
    }
    $('evidence-lane').addEventListener('change', () => {
      selectEvidence($('evidence-lane').value, '', false);
    });
    $('evidence-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      selectEvidence($('evidence-lane').value, $('evidence-ticket').value.trim(), false);
    });
    let resizeTimer = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => { if (state.data) renderTimeline(state.data, true); }, 150);
    });
    setInterval(tick, 1000);
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) {
      state.token = saved;
      showDashboard();
    } else {
      renderLive();
      $('token').focus();
    }
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
