/* DOM builders. Every string from the server reaches the page as a text node through h()/s();
 * nothing here (or anywhere in the control room) parses HTML. */

import { SVG_NS } from './config.js';

export const $ = (id) => document.getElementById(id);

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

/** h('div', {class: 'x'}, 'text', child, [more]) — strings become text nodes, never HTML. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** The same for SVG elements. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

export function table(headers, rows, cls) {
  return h('table', { class: `tbl ${cls || ''}` },
    h('thead', null, h('tr', null, headers.map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', null, rows));
}

/** A row whose cells carry their column name, so phone-width cards can label them. */
export function row(headers, cells, attrs) {
  return h('tr', attrs, cells.map((c, i) =>
    h('td', { 'data-label': headers[i] }, h('div', { class: 'cell' }, c))));
}

export function empty(text) {
  return h('p', { class: 'empty' }, text);
}

/** A <select>'s options: "" (allLabel) then values; the choice is kept while it is offered. */
export function setOptions(sel, values, allLabel) {
  const want = ['', ...values];
  const have = Array.from(sel.options).map((o) => o.value);
  if (JSON.stringify(want) === JSON.stringify(have)) return;
  const current = sel.value;
  sel.replaceChildren(...want.map((v) => h('option', { value: v }, v === '' ? allLabel : v)));
  sel.value = want.includes(current) ? current : '';
}
