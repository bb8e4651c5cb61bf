// Entry point: token handling and hash routing between the views.
//
// The fragment does two jobs. On first load the server's startup line gives
// "#token=…"; the token moves to sessionStorage and leaves the address bar at
// once. Afterwards the fragment is the route: #/declarations, #/jobs,
// #/agents, #/hooks, with optional parameters after "?" (#/jobs?job=ID,
// #/jobs?agent=ID&state=running, #/agents?agent=ID) so views link to each other.

import { clearToken, getToken, onUnauthorized, setToken } from './api.js';
import { createAgentsView } from './agents.js';
import { createDeclarationsView } from './declarations.js';
import { setMessage, watchOverflow } from './dom.js';
import { createHooksView } from './hooks.js';
import { createJobsView } from './jobs.js';

const DEFAULT_ROUTE = 'declarations';

const views = {
  declarations: createDeclarationsView(),
  jobs: createJobsView(),
  agents: createAgentsView(),
  hooks: createHooksView(),
};

// A table box that scrolls sideways becomes a focusable, labelled region, so
// keyboard users can scroll it too.
for (const wrap of document.querySelectorAll('.table-wrap')) watchOverflow(wrap);

const $ = (id) => document.getElementById(id);
const tokenView = $('token-view');
const tokenForm = $('token-form');
const tokenInput = $('token-input');
const tokenError = $('token-error');
const nav = $('nav');
const forget = $('forget-token');

let current = null; // the route shown, or null while the prompt is up

/**
 * Moves a "#token=…" fragment into sessionStorage and out of the URL.
 * Returns whether the fragment held a token.
 */
function takeTokenFromFragment() {
  const hash = location.hash.slice(1);
  if (!hash.startsWith('token=')) return false;
  const params = new URLSearchParams(hash);
  const token = params.get('token')?.trim();
  const view = params.get('view');
  if (token) setToken(token);
  const route = view in views ? view : DEFAULT_ROUTE;
  history.replaceState(null, '', `${location.pathname}${location.search}#/${route}`);
  return Boolean(token);
}

function routeFromFragment() {
  const match = /^#\/([a-z]+)(?:\?(.*))?$/.exec(location.hash);
  if (!match || !(match[1] in views)) return { route: DEFAULT_ROUTE, params: new URLSearchParams() };
  return { route: match[1], params: new URLSearchParams(match[2] ?? '') };
}

function render({ focus = false } = {}) {
  if (!getToken()) {
    showPrompt();
    return;
  }
  tokenView.hidden = true;
  nav.hidden = false;
  forget.hidden = false;
  const { route, params } = routeFromFragment();
  for (const link of nav.querySelectorAll('a[data-route]')) {
    if (link.dataset.route === route) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  if (route === current) {
    views[route].show(params);
    return;
  }
  if (current) views[current].hide();
  for (const section of document.querySelectorAll('section[data-view]')) {
    section.hidden = section.dataset.view !== route;
  }
  current = route;
  document.title = `${$(`${route}-heading`).textContent} · dshd diagnostics`;
  views[route].show(params);
  if (focus) $(`${route}-heading`).focus();
}

function showPrompt(message = '') {
  if (current) views[current].hide();
  current = null;
  for (const section of document.querySelectorAll('section[data-view]')) section.hidden = true;
  nav.hidden = true;
  forget.hidden = true;
  tokenView.hidden = false;
  document.title = 'Connect · dshd diagnostics';
  setMessage(tokenError, message);
  tokenInput.focus();
}

onUnauthorized(() => {
  showPrompt('The server rejected the token (401). Paste the current token.');
});

tokenForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const token = tokenInput.value.trim();
  if (!token) return;
  setToken(token);
  tokenInput.value = '';
  setMessage(tokenError, '');
  render({ focus: true });
});

forget.addEventListener('click', () => {
  clearToken();
  showPrompt();
});

window.addEventListener('hashchange', () => {
  if (takeTokenFromFragment() && current) {
    // A new token: reload the view with it.
    views[current].hide();
    current = null;
  }
  render({ focus: true });
});

takeTokenFromFragment();
render();
