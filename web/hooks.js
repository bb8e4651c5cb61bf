// Hooks view: the configured hooks (GET /hooks) and the recent decisions
// hooks made, read from the hook/result events of the newest agents'
// transcripts. While visible it polls, and re-renders only what changed.

import { isQuiet, path, request, requestJSON } from './api.js';
import { agentLabel, h, setMessage, setText, timeElement, viewLink } from './dom.js';
import { hookBadge, hookDetails, parseTranscript } from './events.js';

// How far back "recent" reaches: the newest agents, and the newest decisions among them.
const AGENTS = 25;
const DECISIONS = 50;
const DETAIL_CHARS = 400;
const POLL_MS = 3000;

export function createHooksView() {
  const $ = (id) => document.getElementById(id);
  const body = $('hooks-body');
  const caption = $('hooks-caption');
  const decisionsBody = $('decisions-body');
  const decisionsCaption = $('decisions-caption');
  const error = $('hooks-error');

  let loading = null;
  let active = false;
  let timer = 0;
  let shownHooks = '';
  let shownDecisions = '';

  $('hooks-refresh').addEventListener('click', () => load());
  document.addEventListener('visibilitychange', () => {
    if (active && !document.hidden) load();
  });

  function load() {
    loading ??= fetchAll().finally(() => {
      loading = null;
    });
    return loading;
  }

  async function fetchAll() {
    clearTimeout(timer);
    try {
      const [hooks, agents] = await Promise.all([requestJSON('/hooks'), requestJSON('/agents')]);
      if (!active) return;
      const list = Array.isArray(hooks) ? hooks : [];
      const hooksKey = JSON.stringify(list);
      if (hooksKey !== shownHooks) {
        shownHooks = hooksKey;
        renderHooks(list);
      }
      // Agent ids sort by creation time: the newest come last.
      const newest = (Array.isArray(agents) ? agents : []).map((a) => a.id).sort().reverse().slice(0, AGENTS);
      const transcripts = await Promise.all(newest.map(async (id) => {
        try {
          const res = await request(path('agents', id, 'transcript'), { accept: 'application/x-ndjson' });
          return { id, events: parseTranscript(await res.text()) };
        } catch (err) {
          if (isQuiet(err)) throw err;
          return { id, events: [] }; // the agent went away meanwhile
        }
      }));
      if (!active) return;
      const byId = new Map((Array.isArray(agents) ? agents : []).map((a) => [a.id, a]));
      renderDecisions(transcripts, new Map(list.map((hk) => [hk.name, hk])), byId);
      setMessage(error, '');
    } catch (err) {
      if (isQuiet(err)) return;
      setMessage(error, `Could not list hooks: ${err.message}`);
    }
    if (active && !document.hidden) timer = setTimeout(load, POLL_MS);
  }

  function renderHooks(hooks) {
    body.replaceChildren(...(hooks.length === 0
      ? [h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No hooks are configured.'))]
      : hooks.map((hk) => h('tr', { 'data-hook': hk.name, 'data-testid': 'hook-row' },
        h('th', { scope: 'row', class: 'nowrap', 'data-label': 'Event' }, hk.event),
        h('td', { 'data-label': 'Dialect' }, hk.dialect),
        h('td', { 'data-label': 'Matcher' }, hk.matcher ? h('code', {}, hk.matcher) : h('span', { class: 'muted' }, 'every tool')),
        h('td', { 'data-label': 'Command' }, h('code', { class: 'details', title: hk.name }, hk.command)),
        h('td', { class: 'num', 'data-label': 'Timeout' }, `${hk.timeoutSeconds} s`)))));
    const dialects = new Set(hooks.map((hk) => hk.dialect));
    setText(caption, `Configured hooks: ${hooks.length}${dialects.size ? ` (${[...dialects].sort().join(', ')})` : ''}`);
  }

  function renderDecisions(transcripts, byName, agents) {
    const results = [];
    for (const { id, events } of transcripts) {
      for (const ev of events) {
        if (ev.type === 'hook/result' && ev.data) results.push({ agent: id, ev });
      }
    }
    results.sort((a, b) => (a.ev.time < b.ev.time ? 1 : a.ev.time > b.ev.time ? -1 : 0));
    const shown = results.slice(0, DECISIONS);
    // Unchanged decisions are left alone, so focus and selection stay.
    const key = `${results.length} ${shown.map(({ agent, ev }) => `${agent}:${ev.seq}`).join(',')} ${[...byName.keys()].join()}`;
    if (key === shownDecisions) return;
    shownDecisions = key;
    decisionsBody.replaceChildren(...(shown.length === 0
      ? [h('tr', {}, h('td', { colspan: 6, class: 'empty' }, 'No hook has run for these agents.'))]
      : shown.map(({ agent, ev }) => {
        const d = ev.data;
        const hk = byName.get(d.handler);
        const details = hookDetails(d);
        return h('tr', { 'data-testid': 'decision-row', 'data-decision': d.decision || 'none', 'data-call-id': d.callId ?? null },
          h('td', { 'data-label': 'Time' }, timeElement(ev.time)),
          h('td', { 'data-label': 'Decision' }, hookBadge(d)),
          h('td', { class: 'nowrap', 'data-label': 'Event' }, d.event ?? '?'),
          h('td', { 'data-label': 'Hook' }, hk ? h('code', { class: 'details', title: d.handler }, hk.command) : h('code', {}, d.handler ?? '?'),
            h('span', { class: 'muted' }, ` ${d.dialect ?? ''}`)),
          h('td', { 'data-label': 'Agent' }, viewLink('agents', { agent }, h('code', { class: 'id' }, agent)),
            agents.has(agent) ? [' ', h('span', { class: 'agent-label' }, agentLabel(agents.get(agent)))] : null),
          h('td', { 'data-label': 'Details' }, details.length > DETAIL_CHARS ? `${details.slice(0, DETAIL_CHARS)}…` : details));
      })));
    const blocked = results.filter(({ ev }) => ev.data.decision === 'deny').length;
    setText(decisionsCaption, `Recent hook decisions: ${shown.length} of ${results.length} (${blocked} blocked)`);
  }

  return {
    show() {
      active = true;
      load();
    },
    hide() {
      active = false;
      clearTimeout(timer);
    },
  };
}
