// Small DOM helpers. Text always goes in as text nodes, never as markup.

/**
 * Creates an element. props sets attributes ("class", "data-*", aria-*),
 * event listeners ("onclick": fn) and, for "hidden"/"disabled", booleans.
 * Children may be nodes, strings, numbers, arrays, or null (skipped).
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      el.addEventListener(name.slice(2), value);
    } else if (value === true) {
      el.setAttribute(name, '');
    } else {
      el.setAttribute(name, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** Shows text in an element, or hides it when text is empty. */
export function setMessage(el, text) {
  el.textContent = text ?? '';
  el.hidden = !text;
}

/** Sets textContent only when it changed, so polling does not churn the DOM. */
export function setText(el, text) {
  const value = String(text ?? '');
  if (el.textContent !== value) el.textContent = value;
}

/** A <time> element with the local time and the full ISO value as a tooltip. */
export function timeElement(iso, text) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  return h('time', { datetime: iso, title: iso }, text ?? formatTime(iso));
}

/** A short badge, e.g. a job state or an agent origin. */
export function badge(text, kind = text) {
  return h('span', { class: `badge badge-${kind}` }, text);
}

/** Local time of day, with the date when it is not today. */
export function formatTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const time = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  const today = new Date().toDateString() === d.toDateString();
  return today ? time : `${d.toLocaleDateString()} ${time}`;
}

/**
 * A short name for an agent, to tell agents apart beside their ids: the
 * base name of its directory and its creation time ("myrepo · 14:02"; the
 * date too when it is not today).
 */
export function agentLabel(agent) {
  const base = String(agent?.cwd ?? '').replace(/\/+$/, '').split('/').pop() || '/';
  const d = new Date(agent?.createdAt);
  if (Number.isNaN(d.getTime())) return base;
  const time = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
  const today = new Date().toDateString() === d.toDateString();
  return `${base} · ${today ? time : `${d.toLocaleDateString([], { day: 'numeric', month: 'short' })} ${time}`}`;
}

/** "in 4m 12s" / "3s ago" relative to now. */
export function formatRelative(iso, now = Date.now()) {
  const ms = new Date(iso).getTime() - now;
  if (Number.isNaN(ms)) return '';
  const text = formatDuration(Math.abs(ms), { coarse: true });
  return ms >= 0 ? `in ${text}` : `${text} ago`;
}

/** 340 ms, 1.2 s, 4m 12s, 2h 5m. */
export function formatDuration(ms, { coarse = false } = {}) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '';
  if (ms < 1000) return coarse ? '<1s' : `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return coarse ? `${Math.round(s)}s` : `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${Math.floor(s % 60)}s`;
  return `${Math.floor(m / 60)}h ${m % 60}m`;
}

/**
 * Makes a scrolling box keyboard-reachable only while its content overflows:
 * then it is a focusable region named by the caption of the table inside.
 */
export function watchOverflow(wrap) {
  const update = () => {
    const overflows = wrap.scrollWidth > wrap.clientWidth + 1;
    if (overflows === wrap.hasAttribute('tabindex')) return;
    if (overflows) {
      const caption = wrap.querySelector('caption[id]');
      wrap.setAttribute('tabindex', '0');
      wrap.setAttribute('role', 'region');
      if (caption) wrap.setAttribute('aria-labelledby', caption.id);
    } else {
      wrap.removeAttribute('tabindex');
      wrap.removeAttribute('role');
      wrap.removeAttribute('aria-labelledby');
    }
  };
  const observer = new ResizeObserver(update);
  observer.observe(wrap);
  for (const child of wrap.children) observer.observe(child);
  update();
}

/** A link to another view, e.g. viewLink('jobs', {job: id}, text). */
export function viewLink(route, params, ...children) {
  const query = new URLSearchParams(params).toString();
  return h('a', { href: `#/${route}${query ? `?${query}` : ''}` }, ...children);
}

/** A byte count in binary units ("256 MiB"). */
export function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = -1;
  do {
    v /= 1024;
    i++;
  } while (v >= 1024 && i < units.length - 1);
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/** The lines of a unified diff, added and removed ones marked (as text). */
export function diffLines(diff) {
  return diff.split(/(?<=\n)/).map((line) => {
    let kind = null;
    if (line.startsWith('+++') || line.startsWith('---')) kind = 'diff-file';
    else if (line.startsWith('@@')) kind = 'diff-hunk';
    else if (line.startsWith('+')) kind = 'diff-add';
    else if (line.startsWith('-')) kind = 'diff-del';
    return kind ? h('span', { class: kind }, line) : line;
  });
}
