// Agents view: the lineage as nested lists, and the selected agent's transcript.

import { isQuiet, path, request, requestJSON } from './api.js';
import { badge, h, setMessage, setText, timeElement } from './dom.js';

const DETAIL_CHARS = 600;

export function createAgentsView() {
  const $ = (id) => document.getElementById(id);
  const tree = $('agents-tree');
  const error = $('agents-error');
  const table = $('transcript-table');
  const tbody = $('transcript-body');
  const caption = $('transcript-caption');
  const hint = $('transcript-hint');

  let selectedId = null;
  let transcriptController = null;

  $('agents-refresh').addEventListener('click', () => {
    load();
    if (selectedId) loadTranscript(selectedId);
  });

  async function load() {
    try {
      const agents = await requestJSON('/agents');
      renderTree(Array.isArray(agents) ? agents : []);
      setMessage(error, '');
    } catch (err) {
      if (isQuiet(err)) return;
      setMessage(error, `Could not list agents: ${err.message}`);
    }
  }

  function renderTree(agents) {
    const byId = new Map(agents.map((a) => [a.id, a]));
    const children = new Map();
    const roots = [];
    for (const a of agents) {
      if (a.parentId && byId.has(a.parentId)) {
        if (!children.has(a.parentId)) children.set(a.parentId, []);
        children.get(a.parentId).push(a);
      } else {
        roots.push(a);
      }
    }
    const byAge = (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
    const list = (items, level) => h('ul', { class: level === 0 ? 'tree' : 'tree-group' },
      items.sort(byAge).map((a) => node(a, level, byId, children.get(a.id) ?? [], list)));

    const hadFocus = tree.contains(document.activeElement) ? document.activeElement.dataset.agentButton : null;
    if (roots.length === 0) {
      tree.replaceChildren(h('p', { class: 'empty' }, 'No agents yet.'));
    } else {
      tree.replaceChildren(list(roots, 0));
      tree.firstChild.setAttribute('aria-labelledby', 'lineage-heading');
    }
    if (hadFocus) tree.querySelector(`[data-agent-button="${CSS.escape(hadFocus)}"]`)?.focus();
  }

  function node(agent, level, byId, kids, list) {
    const current = agent.id === selectedId;
    const orphan = agent.parentId && !byId.has(agent.parentId);
    return h('li', { 'data-agent-id': agent.id, 'data-testid': `agent-${agent.id}` },
      h('div', { class: `agent${current ? ' selected' : ''}` },
        h('button', {
          type: 'button', class: 'link', 'data-agent-button': agent.id,
          'aria-pressed': String(current),
          onclick: () => select(agent),
        }, h('code', {}, agent.id)),
        ' ', badge(agent.origin, `origin-${agent.origin}`),
        h('span', { class: 'muted' }, ` depth ${agent.depth}`),
        orphan ? h('span', { class: 'muted' }, ` (parent ${agent.parentId} not listed)`) : null,
        h('div', { class: 'agent-meta' }, h('span', { class: 'path' }, agent.cwd), ' · ', timeElement(agent.createdAt))),
      kids.length ? list(kids, level + 1) : null);
  }

  function select(agent) {
    selectedId = agent.id;
    for (const div of tree.querySelectorAll('.agent')) {
      const button = div.querySelector('[data-agent-button]');
      const on = button.dataset.agentButton === agent.id;
      div.classList.toggle('selected', on);
      button.setAttribute('aria-pressed', String(on));
    }
    loadTranscript(agent.id);
  }

  async function loadTranscript(id) {
    transcriptController?.abort();
    transcriptController = new AbortController();
    setText(hint, `Loading the transcript of ${id}…`);
    hint.hidden = false;
    try {
      const res = await request(path('agents', id, 'transcript'), {
        accept: 'application/x-ndjson', signal: transcriptController.signal,
      });
      const lines = (await res.text()).split('\n').filter((l) => l.trim() !== '');
      tbody.replaceChildren(...lines.map(eventRow));
      setText(caption, `Transcript of ${id}: ${lines.length} ${lines.length === 1 ? 'line' : 'lines'}`);
      table.hidden = false;
      hint.hidden = true;
    } catch (err) {
      if (isQuiet(err)) return;
      table.hidden = true;
      setText(hint, `Could not load the transcript of ${id}: ${err.message}`);
    }
  }

  return {
    show() {
      load();
      if (selectedId) loadTranscript(selectedId);
    },
    hide() {
      transcriptController?.abort();
    },
  };
}

function eventRow(line) {
  let ev;
  try {
    ev = JSON.parse(line);
  } catch {
    return h('tr', { class: 'bad' },
      h('td', {}), h('td', {}), h('td', {}, badge('unreadable', 'bad')), h('td', {}, h('code', {}, clip(line))));
  }
  if (ev.type === 'session') {
    const details = `${ev.origin ?? '?'} agent, depth ${ev.depth ?? '?'}, parent ${ev.parentId ?? 'none'}, cwd ${ev.cwd ?? '?'}`;
    return h('tr', { 'data-event-type': 'session' },
      h('td', { class: 'num' }, '—'),
      h('td', {}, timeElement(ev.createdAt)),
      h('td', {}, badge('session', 'session')),
      h('td', {}, h('code', { class: 'details' }, clip(details))));
  }
  return h('tr', { 'data-event-type': ev.type },
    h('td', { class: 'num' }, ev.seq ?? ''),
    h('td', {}, timeElement(ev.time)),
    h('td', {}, badge(ev.type ?? '?', 'event')),
    h('td', {}, h('code', { class: 'details' }, clip(summarize(ev)))));
}

function summarize(ev) {
  const d = ev.data ?? {};
  switch (ev.type) {
    case 'tool/call':
      return `${d.name ?? ''} ${JSON.stringify(d.arguments ?? {})}${d.ignored?.length ? ` (ignored: ${d.ignored.join(', ')})` : ''}`;
    case 'tool/result':
      return `${d.isError ? 'error: ' : ''}${d.text ?? ''}`;
    default:
      return JSON.stringify(d);
  }
}

function clip(text) {
  return text.length > DETAIL_CHARS ? `${text.slice(0, DETAIL_CHARS)}…` : text;
}
