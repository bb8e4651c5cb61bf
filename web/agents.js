// Agents view: the lineage as nested lists, and the selected agent's
// transcript. While visible it polls GET /agents and the selected transcript,
// so new agents and new events show up without a refresh. #/agents?agent=ID
// selects an agent.

import { isQuiet, path, request, requestJSON } from './api.js';
import { agentLabel, badge, formatBytes, h, setMessage, setText, timeElement, viewLink } from './dom.js';
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
      if (transcript && transcript.id === id && text.startsWith(transcript.text) && transcript.text.endsWith('\n')) {
        events = parseTranscript(text.slice(transcript.text.length));
      } else {
        transcript = { id, text: '', denied: new Set(), hooks: hookCommands ?? new Map(), running: new Map(), count: 0 };
        tbody.replaceChildren();
        events = parseTranscript(text);
      }
      transcript.text = text;
      transcript.count += events.length;
      for (const ev of events) tbody.append(eventRow(ev, transcript));
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
        loadTranscript(agent);
      }
      poll();
    },
    hide() {
      active = false;
      clearTimeout(timer);
      transcriptController?.abort();
    },
  };
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
