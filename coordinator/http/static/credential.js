/* Which credential unlocked the page (docs/operator.md#credentials). One GET /v1/whoami per
 * unlock (before the first refresh: a refresh stays one overview and one evidence read): its
 * name and role beside the coordinator's, and a plain warning when its role can write (driver,
 * admin) — the control room only reads, so a reader credential is the one to paste. An older
 * coordinator (no /v1/whoami) or a failed read says nothing. credTag() is the credential's
 * name on a row (render log, receipts, incidents): who wrote it. */

import { getWhoami, hasToken } from './api.js';
import { $, h } from './dom.js';

const MAKE_READER = 'lane-coordinator token add control-room --role reader --token-file PATH';

/** Ask the coordinator which credential this tab's token is; never throws. */
export async function checkCredential() {
  clearCredential();
  let me;
  try {
    me = await getWhoami();
  } catch (e) {
    return; // 404 from an older coordinator, or no answer: nothing to say
  }
  if (hasToken()) renderCredential(me); // not if the page locked meanwhile
}

function renderCredential(me) {
  const name = $('credential-name');
  name.textContent = `credential: ${me.name} (${me.role})`;
  name.dataset.role = me.role;
  const banner = $('credential-banner');
  if (!me.canWrite) {
    banner.replaceChildren();
    banner.hidden = true;
    return;
  }
  const power = me.role === 'admin' ? 'change any lane, as any machine'
    : `acquire, release and pause lanes${me.machine ? ` as ${me.machine}` : ' as any machine'}`;
  banner.replaceChildren(
    h('strong', null, '⚠ This tab was unlocked with a credential that can write. '),
    `“${me.name}” is a${me.role === 'admin' ? 'n' : ''} ${me.role} credential: anyone who `,
    `reads this tab's token can ${power}. The control room only reads — Lock, then unlock `,
    'with a reader credential (', h('code', null, MAKE_READER), ').');
  banner.hidden = false;
}

/** Forget what was shown (Lock, a new unlock). */
export function clearCredential() {
  const name = $('credential-name');
  name.textContent = '';
  delete name.dataset.role;
  const banner = $('credential-banner');
  banner.replaceChildren();
  banner.hidden = true;
}

/** The credential's name on a row, or nothing for a row that names none (the lane's clock
 * wrote it, or it was written before credentials). `label`: what it did ("released by"). */
export function credTag(name, label) {
  if (!name) return null;
  return h('span', { class: 'cred', 'data-credential': name, title: 'the credential that wrote it' },
    `${label || 'via'} ${name}`);
}
