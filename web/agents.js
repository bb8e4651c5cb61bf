// Agents view: the lineage as nested lists, and the selected agent's
// transcript. While visible it polls GET /agents and the selected transcript,
// so new agents and new events show up without a refresh. #/agents?agent=ID
// selects an agent. The selected agent's workspace shows above its
// transcript: its mode, and for a snapshot the changes since its fork, each
// text file's diff on request; then its checkpoints (web/checkpoints.js), a
// timeline of the calls that changed the snapshot, each call's result in the
// transcript marked with its checkpoint's number.

import { isQuiet, path, request, requestJSON } from './api.js';
import { createCheckpointsPanel } from './checkpoints.js';
import { agentLabel, badge, diffLines, formatBytes, h, setMessage, setText, timeElement, viewLink } from './dom.js';
import { hookBadge, hookDetails, parseTranscript } from './events.js';

const POLL_MS = 2000;
const DETAIL_CHARS = 600;

export function createAgentsView() {
  const $ = (id) => document.getElementById(id);
  const tree = $('agents-tree');
  const error = $('agents-error');
  const updated = $('agents-updated');
  const table = $('transcript-table');
  const tbody = $('transcript-body');
  const caption = $('transcript-caption');
  const hint = $('transcript-hint');

  let active = false;
  let timer = 0;
  let inflight = false;
  let selectedId = null;
  let lastAgents = ''; // the last /agents answer, to skip identical renders
  let agentsById = new Map(); // from that answer, for the agents' labels
  let transcript = null; // {id, text, denied: Set of callIds, count}
  let transcriptController = null;
  let hookCommands = null; // hook name → command, from GET /hooks
  const ws = createWorkspacePanel();
  let marks = new Map(); // call id → number of its checkpoint
  const cps = createCheckpointsPanel({
    onMarks: (m) => {
      marks = m;
      markCheckpoints(tbody.rows);
    },
    onRewound: () => {
      ws.refresh();
      poll();
    },
  });

  document.addEventListener('visibilitychange', () => {
    if (active && !document.hidden) poll();
  });

  // One poll at a time; the next is scheduled when this one ends.
  async function poll() {
    clearTimeout(timer);
    if (!active || document.hidden || inflight) return;
    inflight = true;
    try {
      if (!hookCommands) {
        const hooks = await requestJSON('/hooks');
        hookCommands = new Map((Array.isArray(hooks) ? hooks : []).map((hk) => [hk.name, hk.command]));
      }
      const text = await (await request('/agents')).text();
      if (!active) return;
      if (text !== lastAgents) {
        lastAgents = text;
        const agents = JSON.parse(text);
        agentsById = new Map((Array.isArray(agents) ? agents : []).map((a) => [a.id, a]));
        renderTree(Array.isArray(agents) ? agents : []);
      }
      if (selectedId) {
        ws.show(selectedId, agentsById.get(selectedId));
        cps.show(selectedId, agentsById.get(selectedId));
      }
      setMessage(error, '');
      setText(updated, `Updated ${new Date().toLocaleTimeString()}`);
      if (selectedId) await loadTranscript(selectedId);
    } catch (err) {
      if (isQuiet(err)) return;
      setMessage(error, `Could not list agents: ${err.message}`);
    } finally {
      inflight = false;
      if (active) timer = setTimeout(poll, POLL_MS);
    }
  }

  // The tree's nesting is the API's depth: a spawned child is drawn inside
  // its parent's group, one level in; a fork keeps its parent's depth (it
  // continues the same conversation, it is not a sub-agent), so it is drawn
  // at its parent's level, right after it, marked as a fork of it.
  function renderTree(agents) {
    const byId = new Map(agents.map((a) => [a.id, a]));
    const children = new Map(); // parent id → spawned children (and orphans' kin)
    const forks = new Map(); // parent id → its forks, drawn after it
    const roots = [];
    const push = (map, key, a) => {
      if (!map.has(key)) map.set(key, []);
      map.get(key).push(a);
    };
    for (const a of agents) {
      if (!a.parentId || !byId.has(a.parentId)) roots.push(a);
      else if (a.origin === 'fork') push(forks, a.parentId, a);
      else push(children, a.parentId, a);
    }
    const byAge = (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
    const withForks = (a, level) => [
      node(a, byId, children.get(a.id) ?? [], (kids) => list(kids, level + 1)),
      ...(forks.get(a.id) ?? []).sort(byAge).flatMap((f) => withForks(f, level)),
    ];
    const list = (items, level) => h('ul', { class: level === 0 ? 'tree' : 'tree-group' },
      items.sort(byAge).flatMap((a) => withForks(a, level)));

    const hadFocus = tree.contains(document.activeElement) ? document.activeElement.dataset.agentButton : null;
    if (roots.length === 0) {
      tree.replaceChildren(h('p', { class: 'empty' }, 'No agents yet.'));
    } else {
      tree.replaceChildren(list(roots, 0));
      tree.firstChild.setAttribute('aria-labelledby', 'lineage-heading');
    }
    if (hadFocus) tree.querySelector(`[data-agent-button="${CSS.escape(hadFocus)}"]`)?.focus();
  }

  function node(agent, byId, kids, list) {
    const current = agent.id === selectedId;
    const orphan = agent.parentId && !byId.has(agent.parentId);
    const forkOf = agent.origin === 'fork' && agent.parentId && !orphan;
    return h('li', { 'data-agent-id': agent.id, 'data-testid': `agent-${agent.id}`, class: forkOf ? 'is-fork' : null },
      h('div', { class: `agent${current ? ' selected' : ''}` },
        h('button', {
          type: 'button', class: 'link', 'data-agent-button': agent.id,
          'aria-pressed': String(current),
          onclick: () => select(agent.id),
        }, h('code', {}, agent.id), ' ',
        h('span', { class: 'agent-label', 'data-testid': `agent-label-${agent.id}` }, agentLabel(agent))),
        ' ', badge(agent.origin, `origin-${agent.origin}`), ' ',
        h('span', {
          class: 'muted', 'data-testid': `agent-depth-${agent.id}`,
          title: 'Spawn depth: 0 for a root, one more for each spawn; a fork keeps its parent\'s',
        }, `depth ${agent.depth}`),
        workspaceBadge(agent),
        forkOf ? h('span', { class: 'muted fork-of' }, ' · fork of ', h('code', {}, agent.parentId)) : null,
        orphan ? h('span', { class: 'muted' }, ` (parent ${agent.parentId} not listed)`) : null,
        h('div', { class: 'agent-meta' }, h('span', { class: 'path' }, agent.cwd), ' · ', timeElement(agent.createdAt),
          ' · ', viewLink('jobs', { agent: agent.id }, 'jobs')),
        h('div', { class: 'agent-meta', 'data-testid': `agent-bounds-${agent.id}` }, boundsText(agent))),
      kids.length ? list(kids) : null);
  }

  function select(id) {
    if (selectedId !== id) transcript = null;
    selectedId = id;
    for (const div of tree.querySelectorAll('.agent')) {
      const button = div.querySelector('[data-agent-button]');
      const on = button.dataset.agentButton === id;
      div.classList.toggle('selected', on);
      button.setAttribute('aria-pressed', String(on));
    }
    ws.show(id, agentsById.get(id));
    cps.show(id, agentsById.get(id));
    loadTranscript(id);
  }

  // Loads the transcript; when only new lines were appended since the last
  // load, only their rows are added, so focus and scroll stay put.
  async function loadTranscript(id) {
    transcriptController?.abort();
    const controller = new AbortController();
    transcriptController = controller;
    if (!transcript) {
      setText(hint, `Loading the transcript of ${id}…`);
      hint.hidden = false;
    }
    try {
      const res = await request(path('agents', id, 'transcript'), {
        accept: 'application/x-ndjson', signal: controller.signal,
      });
      const text = await res.text();
      if (controller.signal.aborted || id !== selectedId) return;
      if (transcript && transcript.id === id && text === transcript.text) return;
      let events;
      const appended = transcript && transcript.id === id && text.startsWith(transcript.text) && transcript.text.endsWith('\n');
      if (appended) {
        events = parseTranscript(text.slice(transcript.text.length));
      } else {
        transcript = { id, text: '', denied: new Set(), hooks: hookCommands ?? new Map(), running: new Map(), count: 0 };
        tbody.replaceChildren();
        events = parseTranscript(text);
      }
      transcript.text = text;
      transcript.count += events.length;
      // One by one: a hook's result takes its start's row out of the table.
      const rows = events.map((ev) => {
        const tr = eventRow(ev, transcript);
        tbody.append(tr);
        if (ev.type === 'workspace/rewind') cps.noteRewind(ev.data ?? {});
        return tr;
      });
      markCheckpoints(rows);
      // New calls may have made (or left pending) a checkpoint.
      if (appended) cps.load();
      const n = transcript.count;
      const agent = agentsById.get(id);
      setText(caption, `Transcript of ${id}${agent ? ` (${agentLabel(agent)})` : ''}: ${n} ${n === 1 ? 'line' : 'lines'}`);
      table.hidden = false;
      hint.hidden = true;
    } catch (err) {
      if (isQuiet(err) || controller.signal.aborted) return;
      table.hidden = true;
      transcript = null;
      setText(hint, `Could not load the transcript of ${id}: ${err.message}`);
      hint.hidden = false;
    }
  }

  return {
    show(params = new URLSearchParams()) {
      active = true;
      hookCommands = null; // the hooks may have changed
      const agent = params.get('agent');
      if (agent && agent !== selectedId) {
        transcript = null;
        selectedId = agent;
        lastAgents = ''; // re-render the tree with the selection
        ws.show(agent, agentsById.get(agent));
        cps.show(agent, agentsById.get(agent));
        loadTranscript(agent);
      }
      poll();
    },
    hide() {
      active = false;
      clearTimeout(timer);
      transcriptController?.abort();
      ws.abort();
      cps.abort();
    },
  };

  // Marks the results of the calls that made a checkpoint with its number
  // (rows: the transcript's rows to look at), and unmarks the others.
  function markCheckpoints(rows) {
    for (const tr of rows) {
      if (tr.dataset.eventType !== 'tool/result') continue;
      const n = marks.get(tr.dataset.callId);
      const old = tr.querySelector('.checkpoint-mark');
      if (old && old.dataset.n === String(n)) continue;
      old?.remove();
      if (n) {
        tr.querySelector('.call-id')?.append(h('span', {
          class: 'checkpoint-mark', 'data-n': String(n),
          title: `What this call changed is checkpoint ${n}, under Checkpoints`,
        }, ` · checkpoint ${n}`));
      }
    }
  }
}

// A snapshot agent's mark in the tree: "snapshot", or "dropped" once its
// workspace was dropped. A shared agent has none (that is the default).
function workspaceBadge(agent) {
  const w = agent.workspace;
  if (w?.mode !== 'snapshot') return null;
  return [' ', h('span', {
    class: `badge ${w.dropped ? 'badge-bad' : 'badge-workspace-snapshot'}`,
    'data-testid': `agent-workspace-${agent.id}`,
    title: w.dropped
      ? 'Its snapshot workspace was dropped: its commands are refused'
      : 'Works in a copy-on-write snapshot of its parent\'s workspace',
  }, w.dropped ? 'dropped' : 'snapshot')];
}

// The Workspace section of the selected agent: its mode and directory,
// and for a live snapshot the changes since the fork (GET
// /agents/{id}/workspace/changes). A file's diff is fetched only when asked
// for (?diff=true), once, until the changes are refreshed.
function createWorkspacePanel() {
  const $ = (id) => document.getElementById(id);
  const panel = $('workspace-panel');
  const facts = $('workspace-facts');
  const hint = $('workspace-hint');
  const refresh = $('workspace-refresh');
  const wrap = $('workspace-changes-wrap');
  const caption = $('workspace-changes-caption');
  const tbody = $('workspace-changes-body');

  let current = null; // {id, key: the agent's workspace as JSON, parentId}
  let diffs = null; // path → change with its diff, from ?diff=true
  let controller = null;

  refresh.addEventListener('click', () => {
    if (current) loadChanges(current.id);
  });

  function abort() {
    controller?.abort();
    controller = null;
  }

  // Draws the section for agent id; agent is its GET /agents entry (absent
  // until the list is loaded). Nothing is redrawn while the workspace is
  // the same, so an open diff and the focus stay put across polls.
  function show(id, agent) {
    const key = agent ? JSON.stringify(agent.workspace ?? null) : '';
    if (current && current.id === id && current.key === key) return;
    abort();
    current = { id, key };
    diffs = null;
    panel.hidden = false;
    wrap.hidden = true;
    tbody.replaceChildren();
    refresh.hidden = true;
    if (!agent) {
      facts.replaceChildren();
      setMessage(hint, `Loading the workspace of ${id}…`);
      return;
    }
    const w = agent.workspace ?? { mode: 'shared' };
    current.parentId = w.parentId ?? null;
    const items = [['Mode', badge(w.mode, `workspace-${w.mode}`)]];
    if (w.mode === 'snapshot') {
      items.push(['Directory', h('span', { class: 'path' }, w.path ?? agent.cwd)]);
      if (w.parentId) items.push(['Forked from', h('code', {}, w.parentId)]);
      items.push(['Layers', `${w.layers ?? 0} frozen under its own`]);
      if (w.dropped) items.push(['State', badge('dropped', 'bad')]);
    } else {
      items.push(['Directory', h('span', { class: 'path' }, agent.cwd)]);
      if (w.parentId) items.push(['Shares the view of', h('code', {}, w.parentId)]);
    }
    facts.replaceChildren(...items.map(([k, v]) => h('div', { 'data-fact': k }, h('dt', {}, k), h('dd', {}, v))));
    if (w.mode !== 'snapshot') {
      setMessage(hint, w.parentId
        ? `Its commands write to the snapshot of ${w.parentId}: the changes are listed there.`
        : 'Its commands write straight to the directory: there is no snapshot, so no changes to list.');
      return;
    }
    if (w.dropped) {
      setMessage(hint, 'The snapshot was dropped: its changes are gone and its commands are refused.');
      return;
    }
    refresh.hidden = false;
    loadChanges(id);
  }

  async function loadChanges(id) {
    abort();
    const c = new AbortController();
    controller = c;
    diffs = null;
    setMessage(hint, `Loading the changes of ${id}…`);
    try {
      const out = await requestJSON(path('agents', id, 'workspace', 'changes'), { signal: c.signal });
      if (c.signal.aborted || current?.id !== id) return;
      const changes = Array.isArray(out?.changes) ? out.changes : [];
      tbody.replaceChildren(...changes.map((ch, i) => changeRow(id, ch, i)));
      const n = changes.length;
      const since = current.parentId ? 'the fork' : 'the snapshot was made';
      setText(caption, `Changes in ${out?.path ?? ''} since ${since}: ${n} ${n === 1 ? 'path' : 'paths'}`);
      wrap.hidden = n === 0;
      setMessage(hint, n === 0 ? `No changes since ${since}.` : '');
    } catch (err) {
      if (isQuiet(err) || c.signal.aborted) return;
      wrap.hidden = true;
      setMessage(hint, `Could not list the changes of ${id}: ${err.message}`);
    }
  }

  function changeRow(id, ch, i) {
    const diffId = `workspace-diff-${i}`;
    let button = null;
    if (ch.type === 'file') {
      button = h('button', {
        type: 'button', class: 'link', 'aria-expanded': 'false', 'aria-controls': diffId,
        'data-testid': `workspace-diff-button-${ch.path}`,
        onclick: () => toggleDiff(id, ch, button, diffId),
      }, 'Show diff');
      button.append(h('span', { class: 'visually-hidden' }, ` of ${ch.path}`));
    }
    return h('tr', { 'data-change-path': ch.path, 'data-change-kind': ch.kind },
      cell('Change', {}, badge(ch.kind, `change-${ch.kind}`)),
      cell('Type', {}, ch.type),
      cell('Path', { class: 'path-cell' }, h('span', { class: 'path' }, ch.path)),
      cell('Size', { class: 'num', title: `${ch.size} bytes` }, formatBytes(ch.size ?? 0)),
      cell('Diff', { class: 'actions-cell' }, button));
  }

  async function toggleDiff(id, ch, button, diffId) {
    const row = button.closest('tr');
    const open = row.nextElementSibling?.id === diffId ? row.nextElementSibling : null;
    if (open) {
      open.remove();
      button.setAttribute('aria-expanded', 'false');
      button.firstChild.textContent = 'Show diff';
      return;
    }
    if (!diffs) {
      button.disabled = true;
      button.firstChild.textContent = 'Loading diff';
      try {
        const out = await requestJSON(`${path('agents', id, 'workspace', 'changes')}?diff=true`, { signal: controller?.signal });
        if (current?.id !== id) return;
        diffs = new Map((Array.isArray(out?.changes) ? out.changes : []).map((c) => [c.path, c]));
      } catch (err) {
        if (isQuiet(err)) return;
        setMessage(hint, `Could not load the diff of ${ch.path}: ${err.message}`);
        return;
      } finally {
        button.disabled = false;
        button.firstChild.textContent = 'Show diff';
      }
    }
    const got = diffs.get(ch.path);
    let body;
    if (got?.diff) {
      body = h('pre', {
        class: 'diff', tabindex: '0', role: 'region', 'aria-label': `Diff of ${ch.path}`,
        'data-testid': `workspace-diff-${ch.path}`,
      }, diffLines(got.diff));
    } else {
      const why = got?.diffOmitted ?? (got ? 'no difference in text' : 'the path is no longer changed; refresh the changes');
      body = h('p', { class: 'hint', 'data-testid': `workspace-diff-${ch.path}` }, `No diff: ${why}.`);
    }
    row.after(h('tr', { id: diffId, class: 'diff-row' }, h('td', { colspan: '5', class: 'diff-cell' }, body)));
    button.setAttribute('aria-expanded', 'true');
    button.firstChild.textContent = 'Hide diff';
  }

  // Lists a live snapshot's changes again (after a rewind, say).
  function reload() {
    if (current && !refresh.hidden) loadChanges(current.id);
  }

  return { show, abort, refresh: reload };
}

// eventRow renders one transcript event. ctx.denied collects the call ids a
// hook blocked, so the call's result row is marked blocked; ctx.hooks maps
// hook names to their commands; ctx.running holds the rows of hooks that
// started and have no result yet: a hook/result replaces its hook/invoked
// row, so a finished hook reads as one line.
function eventRow(ev, ctx) {
  const { denied } = ctx;
  const d0 = ev.data ?? {};
  const hookKey = `${d0.callId}\u0000${d0.event}\u0000${d0.handler}`;
  if (ev.type === 'hook/result') {
    ctx.running.get(hookKey)?.remove();
    ctx.running.delete(hookKey);
  }
  if (ev.unreadable !== undefined) {
    return h('tr', { class: 'is-error', 'data-event-type': 'unreadable' },
      cell('Seq', { class: 'num' }), cell('Time'), cell('Event', {}, badge('unreadable', 'bad')),
      cell('Details', {}, h('code', { class: 'details' }, clip(ev.unreadable))));
  }
  if (ev.type === 'session') {
    const details = `${ev.origin ?? '?'} agent, depth ${ev.depth ?? '?'}, parent ${ev.parentId ?? 'none'}, cwd ${ev.cwd ?? '?'}`;
    return h('tr', { 'data-event-type': 'session' },
      cell('Seq', { class: 'num' }, '—'),
      cell('Time', {}, timeElement(ev.createdAt)),
      cell('Event', {}, badge('session', 'session')),
      cell('Details', {}, h('code', { class: 'details' }, clip(details))));
  }
  const d = ev.data ?? {};
  const classes = [];
  const badges = [badge(ev.type ?? '?', 'event')];
  let details;
  switch (ev.type) {
    case 'tool/call':
      details = [callLine(d)];
      break;
    case 'tool/result': {
      const blocked = denied.has(d.callId) || /^\[blocked by /.test(d.text ?? '');
      if (blocked) {
        classes.push('is-blocked');
        badges.push(' ', badge('blocked', 'bad'));
      } else if (d.isError) {
        classes.push('is-error');
        badges.push(' ', badge('error', 'bad'));
      }
      details = [
        h('code', { class: 'details' }, clip(d.text ?? '')),
        d.jobId || d.exitCode !== undefined ? h('span', { class: 'result-meta' },
          d.jobId ? viewLink('jobs', { job: d.jobId }, `job ${d.jobId}`) : null,
          d.jobId && d.exitCode !== undefined ? ' · ' : null,
          d.exitCode !== undefined ? `exit ${d.exitCode}` : null) : null,
        h('span', { class: 'muted call-id' }, `call ${d.callId ?? '?'}`),
      ];
      break;
    }
    case 'hook/invoked':
      classes.push('is-hook');
      details = [h('span', {}, `${d.event ?? '?'} · ${d.dialect ?? '?'} · `, hookName(d, ctx.hooks), ' · started, no result yet'),
        h('span', { class: 'muted call-id' }, `call ${d.callId ?? '?'}`)];
      break;
    case 'hook/result': {
      classes.push('is-hook');
      if (d.decision === 'deny') {
        denied.add(d.callId);
        classes.push('is-blocked');
      }
      badges.push(' ', hookBadge(d));
      const more = hookDetails(d);
      details = [h('span', {}, `${d.event ?? '?'} · ${d.dialect ?? '?'} · `, hookName(d, ctx.hooks)),
        more ? h('span', { class: 'hook-details' }, clip(more)) : null,
        h('span', { class: 'muted call-id' }, `call ${d.callId ?? '?'}`)];
      break;
    }
    case 'session/resume':
      details = [h('span', {}, 'The session was resumed.')];
      break;
    case 'workspace/rewind':
      details = [h('span', {}, d.undo
        ? 'The last rewind of the workspace was undone.'
        : `The workspace was set back to ${d.to ?? 'before'} call ${d.callId ?? '?'}.`)];
      break;
    default:
      details = [h('code', { class: 'details' }, clip(JSON.stringify(d)))];
  }
  const tr = h('tr', {
    'data-event-type': ev.type, 'data-call-id': d.callId ?? null,
    'data-dialect': ev.type?.startsWith('hook/') ? d.dialect : null, class: classes.join(' ') || null,
  },
    cell('Seq', { class: 'num' }, ev.seq ?? ''),
    cell('Time', {}, timeElement(ev.time)),
    cell('Event', { class: 'nowrap' }, badges),
    cell('Details', { class: 'details-cell' }, details));
  if (ev.type === 'hook/invoked') ctx.running.set(hookKey, tr);
  return tr;
}

function callLine(d) {
  const args = d.arguments ?? {};
  const ignored = d.ignored?.length ? h('span', { class: 'muted' }, ` (ignored: ${d.ignored.join(', ')})`) : null;
  const call = h('span', { class: 'muted call-id' }, `call ${d.callId ?? '?'}`);
  if (d.name === 'bash' && typeof args.command === 'string') {
    const rest = Object.fromEntries(Object.entries(args).filter(([k]) => k !== 'command'));
    return [h('code', { class: 'details' }, clip(`bash $ ${args.command}`)),
      Object.keys(rest).length ? h('code', { class: 'details muted' }, clip(JSON.stringify(rest))) : null, ignored, call];
  }
  return [h('code', { class: 'details' }, clip(`${d.name ?? '?'} ${JSON.stringify(args)}`)), ignored, call];
}

// The hook's command when it is still configured, else its name in the file.
function hookName(d, hooks) {
  const command = hooks.get(d.handler);
  return h('code', { title: d.handler ?? null }, clip(command ?? d.handler ?? '?'));
}

function cell(label, props = {}, ...children) {
  return h('td', { 'data-label': label, ...props }, ...children);
}

function clip(text) {
  return text.length > DETAIL_CHARS ? `${text.slice(0, DETAIL_CHARS)}…` : text;
}

// What the harness bounded the agent's commands by at its creation: its
// sandbox policy and its limits (a child's are its parent's or tighter).
function boundsText(agent) {
  const sandbox = agent.sandbox?.policy
    ? `sandbox ${agent.sandbox.policy}, network ${agent.sandbox.network}`
    : 'sandbox: server default';
  const l = agent.limits ?? {};
  const limits = [
    l.pids ? `${l.pids} processes` : '',
    l.memoryBytes ? `${formatBytes(l.memoryBytes)} memory` : '',
    l.cpu ? `${l.cpu} CPU` : '',
  ].filter(Boolean);
  return `${sandbox} · ${limits.length ? `limits: ${limits.join(', ')}` : 'no limits'}`;
}
