// Declarations view: every declared managed key with its resolver, and the
// open plugins with their leases counting down. It only ever GETs
// /env/declarations and /plugins, so it never runs a resolver.

import { isQuiet, requestJSON } from './api.js';
import { badge, formatDuration, h, setMessage, setText, timeElement } from './dom.js';

const REFRESH_MS = 5000;
const TICK_MS = 1000;

export function createDeclarationsView() {
  const $ = (id) => document.getElementById(id);
  const table = $('declarations-table');
  const caption = $('declarations-caption');
  const filter = $('declarations-filter');
  const group = $('declarations-group');
  const error = $('declarations-error');
  const pluginsBody = $('plugins-body');
  const pluginsCaption = $('plugins-caption');

  let data = { prefix: '', declarations: [] };
  let plugins = [];
  let timer = 0;
  let ticker = 0;
  let active = false;
  let loading = null;

  filter.addEventListener('input', render);
  group.addEventListener('change', render);
  $('declarations-refresh').addEventListener('click', load);

  function load() {
    loading ??= fetchAll().finally(() => {
      loading = null;
    });
    return loading;
  }

  async function fetchAll() {
    clearTimeout(timer);
    try {
      // One after the other: a stale token then costs one rejected request,
      // not two.
      const decls = await requestJSON('/env/declarations');
      const plugs = await requestJSON('/plugins').catch((err) => {
        if (isQuiet(err)) throw err;
        return { error: err };
      });
      data = decls ?? data;
      plugins = Array.isArray(plugs) ? plugs : [];
      setMessage(error, plugs?.error ? `Could not list plugins: ${plugs.error.message}` : '');
      render();
    } catch (err) {
      if (isQuiet(err)) return;
      setMessage(error, `Could not list declarations: ${err.message}`);
    }
    if (active) timer = setTimeout(load, REFRESH_MS);
  }

  function render() {
    const pluginById = new Map(plugins.map((p) => [p.id, p]));
    const all = data.declarations ?? [];
    const needle = filter.value.trim().toLowerCase();
    const shown = needle
      ? all.filter((d) => [d.key, d.description, d.contributor, d.kind].some((f) => String(f ?? '').toLowerCase().includes(needle)))
      : all;

    for (const body of table.querySelectorAll('tbody')) body.remove();
    if (shown.length === 0) {
      const text = all.length === 0 ? 'No keys are declared.' : 'No key matches the filter.';
      table.append(h('tbody', {}, h('tr', {}, h('td', { colspan: 6, class: 'empty' }, text))));
    } else if (group.checked) {
      const byContributor = new Map();
      for (const d of shown) {
        if (!byContributor.has(d.contributor)) byContributor.set(d.contributor, []);
        byContributor.get(d.contributor).push(d);
      }
      const names = [...byContributor.keys()].sort();
      for (const name of names) {
        const rows = byContributor.get(name);
        table.append(h('tbody', { 'data-contributor': name },
          h('tr', { class: 'group-row' },
            h('th', { scope: 'rowgroup', colspan: 6 }, name, ' ',
              h('span', { class: 'muted' }, `(${rows.length} ${rows.length === 1 ? 'key' : 'keys'})`))),
          rows.map((d) => row(d, pluginById))));
      }
    } else {
      table.append(h('tbody', {}, shown.map((d) => row(d, pluginById))));
    }

    const prefix = data.prefix ? ` in the ${data.prefix} namespace` : '';
    setText(caption, needle
      ? `Declared keys${prefix}: ${shown.length} of ${all.length} match “${filter.value.trim()}”`
      : `Declared keys${prefix}: ${all.length}`);
    renderPlugins();
  }

  function row(d, pluginById) {
    const plugin = d.plugin ? pluginById.get(d.plugin) : undefined;
    const expiresAt = d.expiresAt ?? plugin?.expiresAt ?? null;
    let source;
    if (d.builtin) source = badge('built-in', 'builtin');
    else if (d.plugin) source = h('span', {}, badge('plugin', 'plugin'), ' ', plugin?.name ?? d.plugin);
    else source = badge('durable', 'durable');
    return h('tr', { 'data-testid': 'declaration-row', 'data-key': d.key },
      h('th', { scope: 'row' }, h('code', {}, d.key)),
      h('td', { 'data-label': 'Description' }, d.description),
      h('td', { 'data-label': 'Contributor' }, d.contributor),
      h('td', { 'data-label': 'Resolver', class: 'resolver-cell' }, resolver(d)),
      h('td', { class: 'nowrap', 'data-label': 'Source' }, source),
      h('td', { class: 'nowrap', 'data-label': 'Lease expires' }, expiresAt ? lease(expiresAt) : h('span', { class: 'muted' }, 'no lease')));
  }

  // The resolver's kind, and how it makes the value: a template's text or a
  // webhook's URL (the server has cut its credentials and query). A static
  // value is not shown.
  function resolver(d) {
    const kind = d.kind ?? (d.builtin ? 'builtin' : '');
    if (!kind) return h('span', { class: 'muted' }, 'unknown');
    const label = kind === 'builtin' ? 'built-in' : kind;
    let detail = null;
    if (kind === 'template' && d.template) detail = h('code', { class: 'details' }, d.template);
    else if (kind === 'webhook' && d.webhookUrl) detail = h('code', { class: 'details' }, 'POST ', d.webhookUrl);
    return h('span', { 'data-kind': kind }, badge(label, `kind-${kind}`), detail ? ' ' : null, detail);
  }

  function lease(iso) {
    return h('span', {}, timeElement(iso), ' ',
      h('span', { class: 'muted countdown', 'data-expires': iso }, `(${leaseLeft(iso)})`));
  }

  // The lease countdowns move every second, between the fetches.
  function tick() {
    for (const el of document.querySelectorAll('#view-declarations [data-expires]')) {
      setText(el, `(${leaseLeft(el.dataset.expires)})`);
    }
  }

  function renderPlugins() {
    pluginsBody.replaceChildren(...(plugins.length === 0
      ? [h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No plugin is open.'))]
      : plugins.map((p) => h('tr', { 'data-plugin-id': p.id },
        h('th', { scope: 'row' }, p.name),
        h('td', { 'data-label': 'Id' }, h('code', { class: 'id' }, p.id)),
        h('td', { 'data-label': 'Lease' }, `${p.leaseSeconds} s`),
        h('td', { class: 'nowrap', 'data-label': 'Expires' }, lease(p.expiresAt)),
        h('td', { 'data-label': 'Contributors' }, (p.contributors ?? []).length ? p.contributors.join(', ') : h('span', { class: 'muted' }, 'none'))))));
    setText(pluginsCaption, `Open plugins: ${plugins.length}`);
  }

  return {
    show() {
      active = true;
      load();
      clearInterval(ticker);
      ticker = setInterval(tick, TICK_MS);
    },
    hide() {
      active = false;
      clearTimeout(timer);
      clearInterval(ticker);
    },
  };
}

function leaseLeft(iso) {
  const ms = Date.parse(iso) - Date.now();
  if (Number.isNaN(ms)) return '';
  return ms > 0 ? `expires in ${formatDuration(ms, { coarse: true })}` : 'expired';
}
