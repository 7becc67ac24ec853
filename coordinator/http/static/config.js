/* The control room's fixed numbers and vocabularies (no DOM, no state). */

export const REFRESH_MS = 2500;
export const STALE_AFTER_MS = 9000;
export const FETCH_TIMEOUT_MS = 8000;
export const HISTORY_PER_LANE = 50; // render-log rows per lane for the timeline
export const QUEUED_PER_LANE = 50; // waiters listed per lane card (the card says how many more)
// rows of the render log: of one chosen lane (one read), or newest of every lane (a read
// of that many rows per lane on the server, so fewer)
const LOG_LIMIT_LANE = 500;
const LOG_LIMIT_ALL = 100;
export const logLimitFor = (logLane) => (logLane ? LOG_LIMIT_LANE : LOG_LIMIT_ALL);
export const INCIDENTS_LIMIT = 200;
export const ONLINE_SECONDS = 180;
export const RECEIPTS_SHOWN = 6;
export const LOG_PAGE = 25; // render-log rows shown at first ("Show more" adds LOG_MORE)
export const LOG_MORE = 50;
export const PHASES = ['lease-acquired', 'references-applied', 'provider-submitted', 'provider-terminal'];
export const SVG_NS = 'http://www.w3.org/2000/svg';

export const OUTCOMES = {
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

export const INCIDENTS = {
  'provider-cooldown-started': { icon: '‖', label: 'Cooldown started', sev: 'warn' },
  'provider-cooldown-extended': { icon: '‖', label: 'Cooldown extended', sev: 'warn' },
  'provider-cooldown-ended': { icon: '▶', label: 'Cooldown ended', sev: 'ok' },
  'receipt-hash-mismatch': { icon: '⚠', label: 'Receipt hash mismatch', sev: 'bad' },
  'lease-expired': { icon: '◔', label: 'Lease expired', sev: 'warn' },
  'waiter-abandoned': { icon: '∅', label: 'Waiter abandoned', sev: 'info' },
  'duplicate-collision': { icon: '⇄', label: 'Duplicate collision', sev: 'info' },
  'late-release': { icon: '↩', label: 'Late release', sev: 'info' },
};
