// Declarations view: every declared managed key and the open plugins.
// It only ever GETs /env/declarations and /plugins, so it never runs a resolver.

import { isQuiet, requestJSON } from './api.js';
import { badge, formatRelative, h, setMessage, setText, timeElement } from './dom.js';

const REFRESH_MS = 5000;

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
      const [decls, plugs] = await Promise.all([
        requestJSON('/env/declarations'),
        requestJSON('/plugins').catch((err) => {
          if (isQuiet(err)) throw err;
          return { error: err };
        }),
      ]);
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
      ? all.filter((d) => [d.key, d.description, d.contributor].some((f) => String(f ?? '').toLowerCase().includes(needle)))
      : all;

    for (const body of table.querySelectorAll('tbody')) body.remove();
    if (shown.length === 0) {
      const text = all.length === 0 ? 'No keys are declared.' : 'No key matches the filter.';
      table.append(h('tbody', {}, h('tr', {}, h('td', { colspan: 5, class: 'empty' }, text))));
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
            h('th', { scope: 'rowgroup', colspan: 5 }, name, ' ',
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
      h('td', {}, d.description),
      h('td', {}, d.contributor),
      h('td', { class: 'nowrap' }, source),
      h('td', { class: 'nowrap' }, expiresAt ? lease(expiresAt) : h('span', { class: 'muted' }, 'no lease')));
  }

  function lease(iso) {
    return h('span', {}, timeElement(iso), ' ', h('span', { class: 'muted' }, `(${formatRelative(iso)})`));
  }

  function renderPlugins() {
    pluginsBody.replaceChildren(...(plugins.length === 0
      ? [h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No plugin is open.'))]
      : plugins.map((p) => h('tr', { 'data-plugin-id': p.id },
        h('th', { scope: 'row' }, p.name),
        h('td', {}, h('code', { class: 'id' }, p.id)),
        h('td', {}, `${p.leaseSeconds} s`),
        h('td', { class: 'nowrap' }, lease(p.expiresAt)),
        h('td', {}, (p.contributors ?? []).length ? p.contributors.join(', ') : h('span', { class: 'muted' }, 'none'))))));
    setText(pluginsCaption, `Open plugins: ${plugins.length}`);
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
