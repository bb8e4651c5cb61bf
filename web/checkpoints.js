// The selected agent's checkpoints (GET /agents/{id}/checkpoints): a
// timeline, oldest first, of the tool calls that changed its snapshot view,
// each with the files it added, modified and deleted, and a text file's diff
// on request (?diff=true, fetched once for the agent). Each entry can set
// the view back to before or after its call (POST /agents/{id}/rewind),
// after a confirmation in place, and the last rewind can be undone. The
// list is fetched again when the agent's workspace or transcript changes;
// the entries that did not change stay as they are drawn, so an open diff
// and the focus stay put. Under the timeline, two pickers compare the view
// at one point with the view at another (GET
// /agents/{id}/checkpoints/diff?from=&to=): the paths that differ, and a
// text file's diff on request (&diff=true, fetched once for the pair).

import { APIError, isQuiet, path, request, requestJSON } from './api.js';
import { badge, diffLines, formatBytes, h, setMessage, setText, timeElement } from './dom.js';

/**
 * Creates the Checkpoints section. onMarks(map) gets, after each change of
 * the list, each listed call id with the number of its checkpoint (so the
 * transcript can mark the calls); onRewound() is called after a rewind or
 * an undo, whose files the other sections then list again.
 */
export function createCheckpointsPanel({ onMarks = () => {}, onRewound = () => {} } = {}) {
  const $ = (id) => document.getElementById(id);
  const panel = $('checkpoints-panel');
  const heading = $('checkpoints-heading');
  const hint = $('checkpoints-hint');
  const status = $('checkpoints-status');
  const error = $('checkpoints-error');
  const timeline = $('checkpoints-timeline');
  const pending = $('checkpoints-pending');
  const undo = $('checkpoints-undo');
  const compare = $('checkpoints-compare');
  const fromPicker = $('checkpoints-from');
  const toPicker = $('checkpoints-to');
  const compareStatus = $('checkpoints-compare-status');
  const compareList = $('checkpoints-compare-changes');

  let current = null; // {id, key: its workspace as JSON, own: has a view of its own, text: the last answer}
  let entries = []; // the drawn entries, oldest first: {json, li}
  let diffs = new Map(); // checkpoint key → path → change with its diff
  let controller = null;
  let busy = false; // a rewind or an undo is on its way
  let lastRewind = null; // the data of the agent's last workspace/rewind event
  let focusUndo = false; // a rewind was made: the next drawing focuses Undo
  let points = new Map(); // a picker's value → what it names ('': before the first checkpoint)
  let compared = null; // the comparison drawn: {id, from, to, diffs: path → change with its diff, or null}
  let compareController = null;

  undo.addEventListener('click', () => rewind({ undo: true }));
  $('checkpoints-compare-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    runCompare();
  });

  function abort() {
    controller?.abort();
    controller = null;
  }

  function clear() {
    abort();
    focusUndo = false;
    entries = [];
    timeline.replaceChildren();
    timeline.hidden = true;
    pending.hidden = true;
    undo.hidden = true;
    setMessage(status, '');
    setMessage(error, '');
    clearCompared();
    compare.hidden = true;
    points = new Map();
    onMarks(new Map());
  }

  function clearCompared() {
    compareController?.abort();
    compareController = null;
    compared = null;
    compareList.replaceChildren();
    compareList.hidden = true;
    setMessage(compareStatus, '');
  }

  // Draws the section for agent id (its GET /agents entry, absent until the
  // list is loaded). Only an agent with a snapshot view of its own has
  // checkpoints; one that shares such a view is pointed to it.
  function show(id, agent) {
    const w = agent?.workspace;
    const key = agent ? JSON.stringify(w ?? null) : '';
    if (current && current.id === id && current.key === key) return;
    if (current?.id !== id) {
      clear();
      diffs = new Map();
      noteRewind(null);
    }
    const own = w?.mode === 'snapshot' && !w.dropped;
    current = { id, key, own, text: current?.id === id ? current.text : '' };
    if (own) {
      panel.hidden = false;
      load();
      return;
    }
    clear();
    current.text = '';
    if (w?.mode === 'shared' && w.parentId) {
      panel.hidden = false;
      setMessage(hint, `Its calls write the view of ${w.parentId}: their checkpoints are listed there.`);
      return;
    }
    panel.hidden = true;
  }

  // An undo after an undo sets the view back to the rewound one: the
  // button says which it does, after the transcript's last rewind event.
  function noteRewind(d) {
    lastRewind = d;
    setText(undo, lastRewind?.undo ? 'Redo the rewind' : 'Undo the last rewind');
  }

  /** Fetches the list again (only an agent with a view of its own has one); draws it when it changed. */
  async function load() {
    if (!current?.own) return;
    const { id } = current;
    abort();
    const c = new AbortController();
    controller = c;
    if (!current.text) setMessage(hint, `Loading the checkpoints of ${id}…`);
    try {
      const res = await request(path('agents', id, 'checkpoints'), { signal: c.signal });
      const text = await res.text();
      if (c.signal.aborted || current?.id !== id || text === current.text) return;
      current.text = text;
      // What the last rewind said is stale once the list changed otherwise.
      if (!busy) {
        setMessage(status, '');
        setMessage(error, '');
      }
      render(JSON.parse(text));
    } catch (err) {
      if (isQuiet(err) || c.signal.aborted || current?.id !== id) return;
      clear();
      current.text = '';
      setMessage(hint, err instanceof APIError && err.status === 404
        ? `No checkpoints: ${err.message}`
        : `Could not list the checkpoints of ${id}: ${err.message}`);
    }
  }

  // Keeps the entries that are drawn as the answer has them (a new
  // checkpoint comes last; a rewind takes the last ones away) and draws the
  // rest anew.
  function render(out) {
    const cps = Array.isArray(out?.checkpoints) ? out.checkpoints : [];
    const jsons = cps.map((cp) => JSON.stringify(cp));
    let keep = 0;
    while (keep < entries.length && keep < cps.length && entries[keep].json === jsons[keep]) keep++;
    const hadFocus = panel.contains(document.activeElement);
    for (const e of entries.slice(keep)) e.li.remove();
    entries = entries.slice(0, keep);
    for (let i = keep; i < cps.length; i++) {
      const li = entryItem(cps[i], i + 1);
      timeline.append(li);
      entries.push({ json: jsons[i], li });
    }
    const n = cps.length;
    timeline.hidden = n === 0;
    setMessage(hint, n === 0
      ? 'No checkpoints yet: each tool call that changes files makes one.'
      : `${n} ${n === 1 ? 'checkpoint' : 'checkpoints'}, oldest first: one for each tool call that changed files.`);

    const waiting = Array.isArray(out?.pending) ? out.pending : [];
    pending.replaceChildren(...(waiting.length === 0 ? [] : [
      waiting.length === 1 ? 'Call ' : 'Calls ',
      ...waiting.flatMap((c, i) => [i ? ', ' : '', h('code', {}, c)]),
      ` ended while another job of the view ran: ${waiting.length === 1 ? 'its changes go' : 'their changes go'} into the next checkpoint.`,
    ]));
    pending.hidden = waiting.length === 0;
    undo.hidden = !out?.undo;
    // After a rewind the focus goes to Undo (whichever load draws the list
    // first since: another may have replaced the rewind's own); focus that
    // was on something now gone goes to the section's heading.
    if (focusUndo) {
      focusUndo = false;
      (undo.hidden ? heading : undo).focus();
    } else if (hadFocus && !panel.contains(document.activeElement)) {
      heading.focus();
    }

    drawPickers(cps);
    const marks = new Map();
    cps.forEach((cp, i) => {
      for (const c of Array.isArray(cp.callIds) ? cp.callIds : []) marks.set(c, i + 1);
    });
    onMarks(marks);
  }

  function entryItem(cp, n) {
    const ids = Array.isArray(cp.callIds) ? cp.callIds : [];
    const changes = Array.isArray(cp.changes) ? cp.changes : [];
    const titleId = `checkpoint-title-${n}`;
    const calls = ids.length === 0
      ? h('span', {}, 'changes a rewind set aside, of no call')
      : [ids.length === 1 ? 'call ' : 'calls ', ...ids.flatMap((c, i) => [i ? ', ' : '', h('code', {}, c)])];
    const actions = h('div', { class: 'checkpoint-actions' });
    if (cp.callId) drawActions(actions, cp);
    return h('li', {
      class: 'checkpoint', 'data-call-id': cp.callId || null, 'data-seq': cp.seq ?? null,
      'data-testid': `checkpoint-${cp.callId || n}`, 'aria-labelledby': titleId,
    },
    h('p', { class: 'checkpoint-head', id: titleId },
      h('span', { class: 'checkpoint-n' }, h('span', { class: 'visually-hidden' }, 'Checkpoint '), String(n)), ' ',
      h('span', { class: 'checkpoint-calls' }, calls)),
    h('p', { class: 'checkpoint-meta' },
      cp.seq ? `transcript seq ${cp.seq} · ` : '', timeElement(cp.time),
      ` · ${changes.length} ${changes.length === 1 ? 'path' : 'paths'}`,
      cp.compacted ? ' · compacted: only before its first call and after its last can be gone back to' : ''),
    changes.length ? h('ul', { class: 'checkpoint-changes' },
      changes.map((ch, j) => changeItem(cp, ch, `checkpoint-diff-${n}-${j}`))) : null,
    actions);
  }

  function changeItem(cp, ch, diffId) {
    return changeLine(ch, diffId, `checkpoint-diff-button-${cp.callId}-${ch.path}`, (button) => toggleDiff(cp, ch, button, diffId));
  }

  async function toggleDiff(cp, ch, button, diffId) {
    const item = button.closest('li');
    const open = document.getElementById(diffId);
    if (open) {
      open.remove();
      button.setAttribute('aria-expanded', 'false');
      button.firstChild.textContent = 'Show diff';
      return;
    }
    const key = checkpointKey(cp);
    if (!diffs.has(key)) {
      const id = current?.id;
      button.disabled = true;
      button.firstChild.textContent = 'Loading diff';
      try {
        const out = await requestJSON(`${path('agents', id, 'checkpoints')}?diff=true`, { signal: controller?.signal });
        if (current?.id !== id) return;
        for (const c of Array.isArray(out?.checkpoints) ? out.checkpoints : []) {
          const changes = Array.isArray(c.changes) ? c.changes : [];
          diffs.set(checkpointKey(c), new Map(changes.map((x) => [x.path, x])));
        }
      } catch (err) {
        if (isQuiet(err)) return;
        setMessage(error, `Could not load the diff of ${ch.path}: ${err.message}`);
        return;
      } finally {
        button.disabled = false;
        button.firstChild.textContent = 'Show diff';
      }
    }
    const got = diffs.get(key)?.get(ch.path);
    const label = `Diff of ${ch.path} in call ${cp.callId}`;
    let body;
    if (got?.diff) {
      body = h('pre', {
        id: diffId, class: 'diff', tabindex: '0', role: 'region', 'aria-label': label,
        'data-testid': `checkpoint-diff-${cp.callId}-${ch.path}`,
      }, diffLines(got.diff));
    } else {
      const why = got?.diffOmitted ?? (got ? 'no difference in text' : 'the checkpoint is no longer listed');
      body = h('p', { id: diffId, class: 'hint', 'data-testid': `checkpoint-diff-${cp.callId}-${ch.path}` }, `No diff: ${why}.`);
    }
    item.append(body);
    button.setAttribute('aria-expanded', 'true');
    button.firstChild.textContent = 'Hide diff';
  }

  // The two rewind buttons of an entry, each asking first.
  function drawActions(actions, cp) {
    const button = (to) => h('button', {
      type: 'button', 'data-testid': `rewind-${to}-${cp.callId}`,
      onclick: () => confirmRewind(actions, cp, to),
    }, `Rewind to ${to}`, h('span', { class: 'visually-hidden' }, ` call ${cp.callId}`));
    actions.replaceChildren(button('before'), ' ', button('after'));
  }

  // Asks in place before a rewind: a rewind sets the later changes aside,
  // and the next rewind drops what this one set aside.
  function confirmRewind(actions, cp, to) {
    if (busy) return;
    const questionId = `${actions.closest('li').getAttribute('aria-labelledby')}-confirm`;
    const question = h('span', { id: questionId, class: 'confirm-text' }, to === 'before'
      ? `Set the view back to before call ${cp.callId}? Its changes and all later ones are set aside: Undo brings them back, until the next rewind.`
      : `Set the view back to after call ${cp.callId}? All later changes are set aside: Undo brings them back, until the next rewind.`);
    const yes = h('button', {
      type: 'button', class: 'danger', 'aria-describedby': questionId,
      'data-testid': `rewind-confirm-${cp.callId}`,
      onclick: async () => {
        if (busy) return;
        yes.setAttribute('aria-disabled', 'true');
        yes.textContent = 'Rewinding…';
        const ok = await rewind({ callId: cp.callId, to });
        if (!actions.isConnected) return;
        drawActions(actions, cp);
        if (!ok) actions.querySelector(`[data-testid="rewind-${to}-${CSS.escape(cp.callId)}"]`)?.focus();
      },
    }, 'Rewind');
    const no = h('button', {
      type: 'button', 'data-testid': `rewind-cancel-${cp.callId}`,
      onclick: () => {
        drawActions(actions, cp);
        actions.querySelector(`[data-testid="rewind-${to}-${CSS.escape(cp.callId)}"]`)?.focus();
      },
    }, 'Keep the view');
    actions.replaceChildren(question, ' ', h('span', { class: 'confirm-buttons' }, yes, ' ', no));
    yes.focus();
  }

  // Sends a rewind ({callId, to}) or an undo ({undo: true}); says how it
  // went. Returns whether it was made.
  async function rewind(body) {
    if (!current || busy) return false;
    const { id } = current;
    const redo = Boolean(body.undo && lastRewind?.undo);
    busy = true;
    undo.setAttribute('aria-disabled', 'true');
    setMessage(error, '');
    try {
      const out = await requestJSON(path('agents', id, 'rewind'), { method: 'POST', body });
      if (current?.id !== id) return true;
      const left = out?.checkpoints ?? 0;
      const count = `${left} ${left === 1 ? 'checkpoint' : 'checkpoints'}`;
      setMessage(status, body.undo
        ? `${redo ? 'Redid the rewind' : 'Undid the last rewind'}: ${count} now.`
        : `Rewound the view to ${body.to} call ${body.callId}: ${count} left.`);
      current.text = '';
      focusUndo = true;
      await load();
      onRewound();
      return true;
    } catch (err) {
      if (!isQuiet(err)) setMessage(error, `Could not ${body.undo ? (redo ? 'redo the rewind' : 'undo the last rewind') : `rewind to ${body.to} call ${body.callId}`}: ${err.message}`);
      return false;
    } finally {
      busy = false;
      undo.removeAttribute('aria-disabled');
    }
  }

  // The two pickers of the comparison: From offers the view before the
  // first checkpoint and the view after each, To the view after each (the
  // route's edges: a call names the view after it). A choice still listed
  // is kept; To starts at the last checkpoint. A comparison whose points are
  // no longer listed (a rewind set them aside) goes.
  function drawPickers(cps) {
    const was = { from: fromPicker.value, to: toPicker.value, fresh: points.size === 0 };
    points = new Map([['', 'before checkpoint 1']]);
    cps.forEach((cp, i) => {
      if (cp.callId) points.set(cp.callId, `after checkpoint ${i + 1} (call ${cp.callId})`);
    });
    const option = (value, text) => h('option', { value }, text[0].toUpperCase() + text.slice(1));
    const after = [...points].filter(([v]) => v !== '');
    fromPicker.replaceChildren(...[...points].map(([v, text]) => option(v, text)));
    toPicker.replaceChildren(...after.map(([v, text]) => option(v, text)));
    fromPicker.value = points.has(was.from) ? was.from : '';
    const last = after.at(-1)?.[0] ?? '';
    toPicker.value = !was.fresh && points.has(was.to) && was.to !== '' ? was.to : last;
    compare.hidden = after.length === 0;
    if (compared && !(points.has(compared.from) && points.has(compared.to))) clearCompared();
  }

  function compareURL(id, from, to, diff) {
    const q = new URLSearchParams();
    if (from) q.set('from', from);
    if (to) q.set('to', to);
    if (diff) q.set('diff', 'true');
    return `${path('agents', id, 'checkpoints', 'diff')}?${q}`;
  }

  // Lists the paths that differ between the two views picked.
  async function runCompare() {
    if (!current?.own) return;
    const { id } = current;
    const from = fromPicker.value;
    const to = toPicker.value;
    clearCompared();
    const c = new AbortController();
    compareController = c;
    const what = `from the view ${points.get(from)} to the view ${points.get(to)}`;
    setMessage(compareStatus, `Comparing ${what}…`);
    try {
      const out = await requestJSON(compareURL(id, from, to, false), { signal: c.signal });
      if (c.signal.aborted || current?.id !== id) return;
      const changes = Array.isArray(out?.changes) ? out.changes : [];
      compared = { id, from, to, diffs: null };
      setMessage(compareStatus, changes.length === 0
        ? `Nothing differs ${what}.`
        : `${changes.length} ${changes.length === 1 ? 'path differs' : 'paths differ'} ${what}:`);
      compareList.replaceChildren(...changes.map((ch, j) => comparedItem(ch, `checkpoints-compare-diff-${j}`)));
      compareList.hidden = changes.length === 0;
    } catch (err) {
      if (isQuiet(err) || c.signal.aborted || current?.id !== id) return;
      setMessage(compareStatus, `Could not compare ${what}: ${err.message}`);
    }
  }

  function comparedItem(ch, diffId) {
    return changeLine(ch, diffId, `checkpoints-compare-diff-button-${ch.path}`, (button) => toggleComparedDiff(ch, button, diffId));
  }

  // A file's diff between the two views: the pair's diffs are fetched
  // once, at the first asked for.
  async function toggleComparedDiff(ch, button, diffId) {
    const item = button.closest('li');
    const open = document.getElementById(diffId);
    if (open) {
      open.remove();
      button.setAttribute('aria-expanded', 'false');
      button.firstChild.textContent = 'Show diff';
      return;
    }
    const pair = compared;
    if (!pair) return;
    if (!pair.diffs) {
      button.disabled = true;
      button.firstChild.textContent = 'Loading diff';
      try {
        const out = await requestJSON(compareURL(pair.id, pair.from, pair.to, true), { signal: compareController?.signal });
        const changes = Array.isArray(out?.changes) ? out.changes : [];
        pair.diffs = new Map(changes.map((x) => [x.path, x]));
      } catch (err) {
        if (!isQuiet(err)) setMessage(compareStatus, `Could not load the diff of ${ch.path}: ${err.message}`);
        return;
      } finally {
        button.disabled = false;
        button.firstChild.textContent = 'Show diff';
      }
      if (compared !== pair || !item.isConnected) return;
    }
    const got = pair.diffs.get(ch.path);
    const testid = `checkpoints-compare-diff-${ch.path}`;
    const body = got?.diff
      ? h('pre', {
        id: diffId, class: 'diff', tabindex: '0', role: 'region', 'aria-label': `Diff of ${ch.path} between the two views`,
        'data-testid': testid,
      }, diffLines(got.diff))
      : h('p', { id: diffId, class: 'hint', 'data-testid': testid }, `No diff: ${got?.diffOmitted ?? (got ? 'no difference in text' : 'the path differs no more')}.`);
    item.append(body);
    button.setAttribute('aria-expanded', 'true');
    button.firstChild.textContent = 'Hide diff';
  }

  return { show, load, abort, noteRewind };
}

// One changed path: its kind, path, type and size, and for a file a button
// (testid) that calls toggle(button) to show or hide its diff (diffId).
function changeLine(ch, diffId, testid, toggle) {
  let button = null;
  if (ch.type === 'file') {
    button = h('button', {
      type: 'button', class: 'link', 'aria-expanded': 'false', 'aria-controls': diffId,
      'data-testid': testid, onclick: () => toggle(button),
    }, 'Show diff');
    button.append(h('span', { class: 'visually-hidden' }, ` of ${ch.path}`));
  }
  return h('li', { 'data-change-path': ch.path, 'data-change-kind': ch.kind },
    h('span', { class: 'change-line' },
      badge(ch.kind, `change-${ch.kind}`), ' ',
      h('span', { class: 'path' }, ch.path), ' ',
      h('span', { class: 'muted', title: `${ch.size ?? 0} bytes` }, `${ch.type}, ${formatBytes(ch.size ?? 0)}`),
      button ? [' ', button] : null));
}

// A checkpoint's identity: its calls and its transcript seq (what a
// checkpoint holds never changes once it is made).
function checkpointKey(cp) {
  return `${(cp.callIds ?? []).join('\u0000')}\u0001${cp.seq ?? ''}`;
}
