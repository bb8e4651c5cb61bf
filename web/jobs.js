// Jobs view: polls GET /jobs (filtered by agent and state) while visible,
// streams the selected job's output over SSE, and cancels running jobs with
// DELETE /jobs/{id}. The filters and the selected job live in the route
// (#/jobs?agent=ID&state=running&job=ID), so other views link here and the
// browser's back closes a job. At phone width the selected job replaces the
// list (style.css), with a button back to it.

import { isQuiet, path, request, requestJSON } from './api.js';
import { agentLabel, badge, formatBytes, formatDuration, h, setMessage, setText, timeElement, viewLink } from './dom.js';
import { readEvents } from './sse.js';
import { createTerminal } from './terminal.js';

const POLL_MS = 1000;
// The agent filter's choices come from GET /agents, refreshed every this many polls.
const AGENTS_EVERY = 5;
const STATES = ['running', 'exited', 'timed_out', 'cancelled', 'lost'];
const RETRY_MS = 1000;
// The output pane is for reading, not archiving: past this many characters it
// stops appending and says so. The whole stream stays on the output route.
const MAX_OUTPUT_CHARS = 1 << 20;
// The width at which the selected job replaces the list (as in style.css).
const NARROW = window.matchMedia('(max-width: 600px)');

export function createJobsView() {
  const $ = (id) => document.getElementById(id);
  const view = $('view-jobs');
  const back = $('job-back');
  const body = $('jobs-body');
  const caption = $('jobs-caption');
  const error = $('jobs-error');
  const updated = $('jobs-updated');
  const panel = $('job-output-panel');
  const output = $('job-output');
  const outputStatus = $('job-output-status');
  const outputCommand = $('job-output-command');
  const outputHeading = $('job-output-heading');
  const envBody = $('job-env-body');
  const envCaption = $('job-env-caption');
  const facts = $('job-facts');
  const limitsBody = $('job-limits-body');
  const limitsWrap = $('job-limits-wrap');
  const terminalPanel = $('job-terminal-panel');
  const terminalBox = $('job-terminal');
  const terminalType = $('job-terminal-type');
  const terminalState = $('job-terminal-state');
  const terminalWide = $('job-terminal-wide');
  // Overlay scrollbars (phones) do not show that the terminal's box scrolls
  // sideways: a line says so while its columns are wider than the box.
  const wideWatch = new ResizeObserver(() => {
    terminalWide.hidden = !terminal || terminalBox.scrollWidth <= terminalBox.clientWidth + 1;
  });
  let terminal = null; // the selected terminal job's view
  const limitsCaption = $('job-limits-caption');
  const agentFilter = $('jobs-agent');
  const stateFilter = $('jobs-state');

  // A filter change becomes a new route; the hashchange shows it.
  const navigate = () => {
    const params = new URLSearchParams();
    if (agentFilter.value) params.set('agent', agentFilter.value);
    if (stateFilter.value) params.set('state', stateFilter.value);
    if (selected) params.set('job', selected.id);
    const query = params.toString();
    location.hash = `#/jobs${query ? `?${query}` : ''}`;
  };
  agentFilter.addEventListener('change', navigate);
  stateFilter.addEventListener('change', navigate);
  $('jobs-filters').addEventListener('submit', (event) => event.preventDefault());

  const rows = new Map(); // job id → {tr, cells, job}
  let active = false;
  let timer = 0;
  let inflight = false;
  let again = false;
  let selected = null; // {id, controller}
  let polls = 0;
  let filterKey = '';
  let agentsById = new Map(); // from the last GET /agents, for the agents' labels

  document.addEventListener('visibilitychange', () => {
    if (active && !document.hidden) poll();
  });

  // One poll at a time: a poll asked for while one is in flight runs right
  // after it, so the timer chain never forks.
  async function poll() {
    if (inflight) {
      again = true;
      return;
    }
    clearTimeout(timer);
    if (!active || document.hidden) return;
    inflight = true;
    try {
      const query = new URLSearchParams();
      if (agentFilter.value) query.set('agentId', agentFilter.value);
      if (stateFilter.value) query.set('state', stateFilter.value);
      const key = query.toString();
      const [jobs, agents] = await Promise.all([
        requestJSON(`/jobs${key ? `?${key}` : ''}`),
        polls++ % AGENTS_EVERY === 0 ? requestJSON('/agents') : null,
      ]);
      if (agents) renderAgentChoices(Array.isArray(agents) ? agents : []);
      if (active && key === filterKey) {
        render(Array.isArray(jobs) ? jobs : []);
        setMessage(error, '');
        setText(updated, `Updated ${new Date().toLocaleTimeString()}`);
      }
    } catch (err) {
      if (isQuiet(err)) return;
      setMessage(error, `Could not list jobs: ${err.message}`);
    } finally {
      inflight = false;
    }
    if (!active) return;
    if (again) {
      again = false;
      poll();
    } else {
      timer = setTimeout(poll, POLL_MS);
    }
  }

  function renderAgentChoices(agents) {
    agentsById = new Map(agents.map((a) => [a.id, a]));
    const ids = agents.map((a) => a.id).sort().reverse();
    const current = agentFilter.value;
    if (current && !ids.includes(current)) ids.unshift(current);
    const texts = ids.map(agentChoice);
    const have = [...agentFilter.options].slice(1).map((o) => o.textContent);
    if (have.join('\n') === texts.join('\n')) return;
    agentFilter.replaceChildren(h('option', { value: '' }, 'Any agent'), ...ids.map((id, i) => h('option', { value: id }, texts[i])));
    agentFilter.value = current;
  }

  // An agent in the filter: its label, then its id.
  function agentChoice(id) {
    const agent = agentsById.get(id);
    return agent ? `${agentLabel(agent)} — ${id}` : id;
  }

  // Applies the route's parameters: filters, and the job to show.
  function applyParams(params) {
    const agent = params.get('agent') ?? '';
    const state = STATES.includes(params.get('state')) ? params.get('state') : '';
    if (agent && ![...agentFilter.options].some((o) => o.value === agent)) {
      agentFilter.append(h('option', { value: agent }, agentChoice(agent)));
    }
    agentFilter.value = agent;
    stateFilter.value = state;
    const key = new URLSearchParams([...(agent ? [['agentId', agent]] : []), ...(state ? [['state', state]] : [])]).toString();
    if (key !== filterKey) {
      filterKey = key;
      // Rows of the old filter go at once, not a poll later.
      for (const entry of rows.values()) entry.tr.remove();
      rows.clear();
      body.replaceChildren();
    }
    const job = params.get('job');
    if (job && job !== selected?.id) openJob(job);
    if (!job && selected) {
      // The route left the job (the browser's back): the list again, the
      // keyboard focus on the job's row if it was in the closed detail.
      const lost = panel.contains(document.activeElement) || document.activeElement === document.body;
      const id = closeJob();
      if (lost) focusRow(id);
    }
  }

  // Closes the selected job's detail; returns the id it showed.
  function closeJob() {
    const id = selected?.id;
    selected?.controller.abort();
    selected = null;
    terminal?.dispose();
    terminal = null;
    terminalBox.replaceChildren();
    wideWatch.disconnect();
    panel.hidden = true;
    delete view.dataset.jobOpen;
    for (const entry of rows.values()) updateRow(entry, entry.job);
    return id;
  }

  function focusRow(id) {
    const button = rows.get(id)?.cells.select;
    if (button) button.focus();
    else $('jobs-heading').focus();
  }

  // Back to the list: the job leaves the route.
  back.addEventListener('click', () => {
    const id = closeJob();
    navigate();
    focusRow(id);
  });

  async function openJob(id) {
    try {
      selectJob(await requestJSON(path('jobs', id)));
    } catch (err) {
      if (isQuiet(err)) return;
      setMessage(error, `Could not show job ${id}: ${err.message}`);
    }
  }

  function render(jobs) {
    // Ids are time-sortable; newest first.
    jobs.sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
    const seen = new Set();
    jobs.forEach((job, i) => {
      seen.add(job.id);
      let entry = rows.get(job.id);
      if (!entry) {
        entry = createRow(job);
        rows.set(job.id, entry);
      }
      updateRow(entry, job);
      // Move only rows that are out of place, so a focused button keeps focus.
      const at = body.children[i];
      if (at !== entry.tr) body.insertBefore(entry.tr, at ?? null);
    });
    for (const [id, entry] of rows) {
      if (!seen.has(id)) {
        entry.tr.remove();
        rows.delete(id);
      }
    }
    const placeholder = body.querySelector('.placeholder');
    if (jobs.length === 0 && !placeholder) {
      const text = filterKey ? 'No job matches the filters.' : 'No jobs yet.';
      body.append(h('tr', { class: 'placeholder' }, h('td', { colspan: 7, class: 'empty' }, text)));
    } else if (jobs.length > 0 && placeholder) {
      placeholder.remove();
    }
    const running = jobs.filter((j) => j.state === 'running').length;
    const filters = [agentFilter.value && `agent ${agentFilter.value}`, stateFilter.value && `state ${stateFilter.value}`].filter(Boolean);
    setText(caption, `Jobs${filters.length ? ` of ${filters.join(', ')}` : ''}, newest first: ${jobs.length} (${running} running)`);
  }

  function createRow(job) {
    const select = h('button', {
      type: 'button', class: 'link command', 'data-testid': `job-select-${job.id}`,
      'aria-pressed': 'false', title: job.command,
      onclick: () => {
        selectJob(rows.get(job.id)?.job ?? job, { focus: true });
        navigate();
      },
    }, job.command);
    const cancel = h('button', {
      type: 'button', class: 'danger', 'data-testid': `job-cancel-${job.id}`,
      'aria-label': `Cancel job ${job.id}`,
      onclick: () => cancelJob(job.id),
    }, 'Cancel');
    const cells = {
      agent: h('td', { 'data-label': 'Agent', class: 'agent-cell' }),
      state: h('td', { class: 'nowrap state-cell', 'data-testid': `job-state-${job.id}`, 'data-label': 'State' }),
      exit: h('td', { class: 'num exit-cell', 'data-testid': `job-exit-${job.id}`, 'data-label': 'Exit' }),
      duration: h('td', { class: 'num', 'data-label': 'Duration' }),
      started: h('td', { 'data-label': 'Started' }, timeElement(job.startedAt ?? job.createdAt)),
      actions: h('td', { class: 'actions-cell' }),
      select,
      cancel,
    };
    const tr = h('tr', { 'data-job-id': job.id, 'data-testid': 'job-row' },
      h('th', { scope: 'row', class: 'command-cell' }, select),
      cells.agent, cells.state, cells.exit, cells.duration, cells.started, cells.actions);
    return { tr, cells, job };
  }

  function updateRow(entry, job) {
    const { cells } = entry;
    const previous = entry.job;
    entry.job = job;
    const agent = job.agentId ? agentsById.get(job.agentId) : null;
    const label = agent ? agentLabel(agent) : '';
    if (!cells.agent.firstChild || previous.agentId !== job.agentId || cells.agent.dataset.agentLabel !== label) {
      cells.agent.dataset.agentLabel = label;
      cells.agent.replaceChildren(...(job.agentId
        ? [viewLink('agents', { agent: job.agentId }, h('code', { class: 'id' }, job.agentId)),
          label ? ' ' : null, label ? h('span', { class: 'agent-label' }, label) : null]
        : [h('span', { class: 'muted' }, 'none')]));
    }
    if (cells.state.dataset.state !== job.state || cells.state.dataset.killedBy !== (job.killedBy ?? '')) {
      cells.state.dataset.state = job.state;
      cells.state.dataset.killedBy = job.killedBy ?? '';
      cells.state.replaceChildren(badge(job.state));
      if (job.background) cells.state.append(' ', h('span', { class: 'muted', title: 'background job' }, 'bg'));
      if (job.killedBy) cells.state.append(' ', h('span', { class: 'killed-by' }, `killed: ${killedByText(job.killedBy)}`));
    }
    setText(cells.exit, exitText(job) || (job.state === 'running' ? '…' : job.state === 'lost' ? 'none' : ''));
    if (job.state === 'lost') cells.state.title = 'dshd stopped while this job ran; its processes were stopped at the next start, its exit and output are unknown';
    cells.exit.classList.toggle('bad', job.state !== 'running' && job.state !== 'lost' && job.exitCode !== 0);
    setText(cells.duration, formatDuration(durationOf(job)));
    const running = job.state === 'running';
    // Between DELETE and the job's end (up to the grace period) the button
    // stays disabled, so it is not pressed twice.
    // aria-disabled, not disabled: a disabled button would drop keyboard focus.
    cells.cancel.setAttribute('aria-disabled', String(Boolean(entry.cancelling)));
    setText(cells.cancel, entry.cancelling ? 'Cancelling…' : 'Cancel');
    if (running && !cells.cancel.isConnected) cells.actions.append(cells.cancel);
    if (!running && cells.cancel.isConnected) {
      // Keep keyboard focus on the row when its button disappears.
      const hadFocus = document.activeElement === cells.cancel;
      cells.cancel.remove();
      if (hadFocus) cells.select.focus();
    }
    cells.select.setAttribute('aria-pressed', String(selected?.id === job.id));
    entry.tr.classList.toggle('selected', selected?.id === job.id);
  }

  async function cancelJob(id) {
    const entry = rows.get(id);
    if (!entry || entry.cancelling) return;
    entry.cancelling = true;
    updateRow(entry, entry.job);
    try {
      await request(path('jobs', id), { method: 'DELETE' });
    } catch (err) {
      entry.cancelling = false;
      updateRow(entry, entry.job);
      if (isQuiet(err)) return;
      setMessage(error, `Could not cancel job ${id}: ${err.message}`);
    }
    poll();
  }

  // Typing into a terminal job happens only when the person asks for it.
  terminalType.addEventListener('click', () => {
    if (!terminal) return;
    terminal.setTyping(!terminal.typing);
    updateTypeButton();
  });

  function updateTypeButton() {
    const on = Boolean(terminal?.typing);
    terminalType.setAttribute('aria-pressed', String(on));
    setText(terminalType, on ? 'Stop typing' : 'Type into the terminal');
  }

  // A terminal job's output goes to xterm.js; any other job's to the <pre>.
  function openTerminal(job) {
    terminal?.dispose();
    terminal = null;
    terminalBox.replaceChildren();
    const isTerminal = Boolean(job.terminal);
    terminalPanel.hidden = !isTerminal;
    output.hidden = isTerminal;
    wideWatch.disconnect();
    terminalWide.hidden = true;
    if (!isTerminal) return;
    terminal = createTerminal(terminalBox, job, {
      onState: (text) => {
        setText(terminalState, text);
        updateTypeButton();
      },
      onError: (message) => setMessage(error, message),
    });
    terminalType.setAttribute('aria-disabled', String(job.state !== 'running'));
    updateTypeButton();
    wideWatch.observe(terminalBox);
    if (terminalBox.firstElementChild) wideWatch.observe(terminalBox.firstElementChild);
  }

  // Shows a job's detail. focus: the person chose it here; at phone width,
  // where the detail replaces the list, the keyboard focus and the screen
  // go to the detail's heading.
  function selectJob(job, { focus = false } = {}) {
    selected?.controller.abort();
    selected = { id: job.id, controller: new AbortController() };
    for (const entry of rows.values()) updateRow(entry, entry.job);
    panel.hidden = false;
    view.dataset.jobOpen = '';
    setText(outputHeading, `Output of job ${job.id}`);
    setText(outputCommand, `$ ${job.command}`);
    output.replaceChildren();
    openTerminal(job);
    renderFacts(job);
    renderEnv(job);
    stream(job.id, selected.controller.signal);
    if (focus && NARROW.matches) {
      window.scrollTo({ top: 0 });
      outputHeading.focus({ preventScroll: true });
    }
  }

  // What else is known about the job: where it ran, its limits' outcome and
  // what it used (usage is null while it runs and for lost jobs).
  function renderFacts(job) {
    const items = [
      ['State', job.state],
      ['Agent', job.agentId ? `${job.agentId}${agentsById.has(job.agentId) ? ` (${agentLabel(agentsById.get(job.agentId))})` : ''}` : 'none'],
      ['Directory', job.cwd],
      ['Process group', job.pid ? String(job.pid) : ''],
      ['Timeout', job.timeoutMs ? formatDuration(job.timeoutMs) : 'none'],
      ['Sandbox', sandboxText(job.sandbox)],
      ['Killed by dshd', job.killedBy ? killedByText(job.killedBy) : (job.state === 'running' ? '' : 'no')],
      // No limits: one line here instead of an empty table.
      ['Limits', limitsOf(job).length ? '' : (job.state === 'lost' ? 'not recorded for a lost job' : 'none')],
      ['CPU time', job.usage ? formatDuration(job.usage.cpuMs) : ''],
      ['Peak memory', job.usage?.peakMemoryBytes ? formatBytes(job.usage.peakMemoryBytes) : ''],
    ].filter(([, v]) => v);
    facts.replaceChildren(...items.map(([k, v]) => h('div', { 'data-fact': k }, h('dt', {}, k), h('dd', {}, v))));
    renderLimits(job);
  }

  // The limits in effect (the request's, completed by the agent's or the
  // server's) and how this host enforced each one.
  // A job without limits has none of this table (its facts say so).
  function renderLimits(job) {
    const limits = job.limits ?? {};
    const set = limitsOf(job);
    limitsWrap.hidden = set.length === 0;
    limitsBody.replaceChildren(...set.map(({ key, label, format }) => {
      const how = limits.enforcement?.[key] ?? 'none';
      return h('tr', { 'data-limit': key, 'data-enforcement': how },
        h('th', { scope: 'row' }, label),
        h('td', { 'data-label': 'Value', class: 'num' }, format(limits[key])),
        h('td', { 'data-label': 'Enforced by', class: how === 'none' ? 'unenforced' : '' }, enforcementText(key, how)));
    }));
    setText(limitsCaption, `Limits of job ${job.id} and how this host enforced them: ${set.length}`);
  }

  function renderEnv(job) {
    const entries = Object.entries(job.managedEnv ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    envBody.replaceChildren(...(entries.length === 0
      ? [h('tr', {}, h('td', { colspan: 2, class: 'empty' }, 'No managed keys.'))]
      : entries.map(([key, value]) => h('tr', { 'data-key': key },
        h('th', { scope: 'row' }, h('code', {}, key)),
        h('td', { 'data-label': 'Value' }, h('code', {}, value))))));
    setText(envCaption, `The managed snapshot job ${job.id} received: ${entries.length} ${entries.length === 1 ? 'key' : 'keys'}`);
  }

  // Streams the output, resuming from the last event id if the connection
  // drops before the exit event.
  async function stream(id, signal) {
    let lastId = '';
    let size = 0;
    setText(outputStatus, 'Connecting…');
    while (!signal.aborted) {
      try {
        const headers = lastId ? { 'Last-Event-ID': lastId } : {};
        const res = await request(path('jobs', id, 'output'), { accept: 'text/event-stream', headers, signal });
        if (res.status === 204) {
          // Finished, and the exit event was already seen.
          finish(null);
          return;
        }
        setText(outputStatus, 'Streaming…');
        for await (const ev of readEvents(res.body)) {
          lastId = ev.id || lastId;
          if (ev.type === 'stdout' || ev.type === 'stderr') {
            if (terminal) terminal.write(decodeBytes(ev.data));
            else size = appendChunk(ev.type, decodeChunk(ev.data), size);
          } else if (ev.type === 'exit') {
            finish(decodeJob(ev.data));
            return;
          }
        }
        setText(outputStatus, 'Stream closed before the exit event; reconnecting…');
      } catch (err) {
        if (isQuiet(err) || signal.aborted) return;
        setText(outputStatus, `Stream interrupted: ${err.message}; retrying…`);
      }
      await delay(RETRY_MS, signal);
    }
  }

  function appendChunk(kind, text, size) {
    if (size >= MAX_OUTPUT_CHARS) return size;
    let chunk = text;
    if (size + chunk.length > MAX_OUTPUT_CHARS) {
      chunk = chunk.slice(0, MAX_OUTPUT_CHARS - size) + '\n[display limit reached; the full output is on the output route]\n';
    }
    // Follow the tail only if the reader has not scrolled up.
    const atBottom = output.scrollHeight - output.scrollTop - output.clientHeight < 40;
    const last = output.lastElementChild;
    if (last && last.classList.contains(kind)) last.append(chunk);
    else output.append(h('span', { class: kind }, chunk));
    if (atBottom) output.scrollTop = output.scrollHeight;
    return size + chunk.length;
  }

  function finish(job) {
    const state = job?.state ?? 'finished';
    const text = state === 'lost'
      ? 'dshd stopped while it ran; the next start stopped its processes, so its exit and output are unknown'
      : job ? exitText(job) : '';
    output.append(h('span', { class: 'marker', 'data-testid': 'job-output-exit' },
      `${output.textContent.endsWith('\n') || output.textContent === '' ? '' : '\n'}[${state}${text ? `: ${text}` : ''}]\n`));
    setText(outputStatus, `Finished (${state})`);
    if (terminal) {
      terminal.write(`\r\n\x1b[90m[${state}${text ? `: ${text}` : ''}]\x1b[0m\r\n`);
      terminal.ended();
      terminalType.setAttribute('aria-disabled', 'true');
    }
    if (job) {
      const entry = rows.get(job.id);
      if (entry) updateRow(entry, job);
      renderFacts(job);
    }
  }

  return {
    show(params = new URLSearchParams()) {
      active = true;
      polls = 0;
      applyParams(params);
      poll();
    },
    hide() {
      active = false;
      clearTimeout(timer);
      closeJob();
    },
  };
}

function exitText(job) {
  if (job.state === 'running') return '';
  if (job.signal) return job.signal;
  return job.exitCode === null || job.exitCode === undefined ? '' : String(job.exitCode);
}

const KILLED_BY = {
  timeout: 'timeout',
  cancelled: 'cancel request',
  shutdown: 'server shutdown',
  oom: 'memory limit',
  pids_limit: 'process limit',
};

// The limits set on a job, in LIMITS order.
function limitsOf(job) {
  const limits = job.limits ?? {};
  return LIMITS.filter(({ key }) => limits[key] !== undefined && limits[key] !== null);
}

function killedByText(reason) {
  return KILLED_BY[reason] ?? reason;
}

const LIMITS = [
  { key: 'pids', label: 'Processes', format: (n) => `${n} at once`, file: 'pids.max', v1File: 'pids.max' },
  { key: 'memoryBytes', label: 'Memory', format: (n) => formatBytes(n), file: 'memory.max', v1File: 'memory.limit_in_bytes' },
  { key: 'cpu', label: 'CPU', format: (n) => `${n} of one CPU`, file: 'cpu.max', v1File: 'cpu.cfs_quota_us' },
];

// How a limit was enforced, in words (LimitEnforcement in the contract).
function enforcementText(key, how) {
  switch (how) {
    case 'cgroup':
      return `kernel: cgroup ${LIMITS.find((l) => l.key === key)?.file ?? 'controller'}`;
    case 'cgroup_v1':
      return `kernel: cgroup v1 ${LIMITS.find((l) => l.key === key)?.v1File ?? 'controller'}`;
    case 'watcher':
      return key === 'cpu'
        ? 'dshd watcher: the job is frozen while past its share, checked every 50 ms'
        : 'dshd watcher: checked every 50 ms, the whole job killed past it';
    case 'rlimit':
      return 'RLIMIT_AS on each process: allocations past it fail';
    case 'none':
      return 'not enforced on this host';
    default:
      return how;
  }
}

const SANDBOX = {
  unrestricted: 'no confinement',
  'workspace-write': 'writes only in its directory, the agent\'s and a private /tmp',
  'read-only': 'writes only in a private /tmp',
};

// The sandbox policy a job ran under, with what it means; '' when unknown
// (a lost job, or a server older than policies).
function sandboxText(sandbox) {
  if (!sandbox?.policy) return '';
  const net = sandbox.network === 'off' ? 'network off' : 'network on';
  return `${sandbox.policy}, ${net} (${SANDBOX[sandbox.policy] ?? sandbox.policy}${sandbox.network === 'off' ? '; no network' : ''})`;
}


function durationOf(job) {
  if (job.durationMs !== null && job.durationMs !== undefined) return job.durationMs;
  const start = Date.parse(job.startedAt ?? job.createdAt);
  return job.state === 'running' && !Number.isNaN(start) ? Date.now() - start : null;
}

// Chunks are JSON strings per the contract, or {"base64": …} for bytes that
// are not UTF-8 (shown here with U+FFFD; the raw route has them exactly);
// tolerate plain text too.
function decodeChunk(data) {
  try {
    const value = JSON.parse(data);
    if (typeof value === 'string') return value;
    if (value && typeof value.base64 === 'string') {
      const bytes = Uint8Array.from(atob(value.base64), (c) => c.charCodeAt(0));
      return new TextDecoder().decode(bytes);
    }
  } catch {
    // plain text
  }
  return data;
}

// A chunk for the terminal: the string, or for bytes that are not UTF-8
// the bytes themselves (xterm.js decodes them across chunks).
function decodeBytes(data) {
  try {
    const value = JSON.parse(data);
    if (typeof value === 'string') return value;
    if (value && typeof value.base64 === 'string') return Uint8Array.from(atob(value.base64), (c) => c.charCodeAt(0));
  } catch {
    // plain text
  }
  return data;
}

function decodeJob(data) {
  try {
    const value = JSON.parse(data);
    return value && typeof value === 'object' ? value : null;
  } catch {
    return null;
  }
}

function delay(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });
}
