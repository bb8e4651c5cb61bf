// Entry point: signing in and hash routing between the views.
//
// The fragment does two jobs. A login URL from "dshd ui" gives "#login=…"
// (optionally "&view=jobs"): the one-time code leaves the address bar at
// once and is exchanged for a session (see api.js). Without a session the
// page asks for the token, which it exchanges the same way and never keeps.
// Otherwise the fragment is the route: #/declarations, #/jobs, #/agents,
// #/hooks, with optional parameters after "?" (#/jobs?job=ID,
// #/jobs?agent=ID&state=running, #/agents?agent=ID) so views link to each other.

import { hasSession, onUnauthorized, signIn, signOut, UnauthorizedError } from './api.js';
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
 * Takes a "#login=…" fragment out of the URL (and an old "#token=…" one,
 * which is no longer honoured: the token does not belong in a URL).
 * Returns the login code, or '' when the fragment held none.
 */
function takeLoginFromFragment() {
  const hash = location.hash.slice(1);
  if (!hash.startsWith('login=') && !hash.startsWith('token=')) return '';
  const params = new URLSearchParams(hash);
  const code = params.get('login')?.trim() ?? '';
  const view = params.get('view');
  const route = view in views ? view : DEFAULT_ROUTE;
  history.replaceState(null, '', `${location.pathname}${location.search}#/${route}`);
  return code;
}

/** Signs in with a login code from the fragment, then shows the page. */
async function signInFromFragment() {
  const code = takeLoginFromFragment();
  if (!code) {
    render({ focus: true });
    return;
  }
  if (current) views[current].hide();
  current = null;
  try {
    await signIn({ code });
  } catch (err) {
    showPrompt(err instanceof UnauthorizedError
      ? 'This login link was used already or has expired (401). Run "dshd ui" for a new one, or paste the token.'
      : `Signing in failed: ${err.message}`);
    return;
  }
  render({ focus: true });
}

function routeFromFragment() {
  const match = /^#\/([a-z]+)(?:\?(.*))?$/.exec(location.hash);
  if (!match || !(match[1] in views)) return { route: DEFAULT_ROUTE, params: new URLSearchParams() };
  return { route: match[1], params: new URLSearchParams(match[2] ?? '') };
}

function render({ focus = false } = {}) {
  if (!hasSession()) {
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
  showPrompt('The server refused the session (401): it expired, or dshd restarted. Run "dshd ui" for a login link, or paste the token.');
});

tokenForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  const token = tokenInput.value.trim();
  if (!token) return;
  tokenInput.value = '';
  setMessage(tokenError, '');
  try {
    await signIn({ token });
  } catch (err) {
    showPrompt(err instanceof UnauthorizedError
      ? 'The server rejected the token (401). Paste the current token.'
      : `Signing in failed: ${err.message}`);
    return;
  }
  render({ focus: true });
});

forget.addEventListener('click', () => {
  // The key is forgotten at once, whether or not the server answers.
  signOut().catch(() => {});
  showPrompt();
});

window.addEventListener('hashchange', () => {
  if (location.hash.startsWith('#login=') || location.hash.startsWith('#token=')) {
    signInFromFragment();
    return;
  }
  render({ focus: true });
});

if (location.hash.startsWith('#login=') || location.hash.startsWith('#token=')) signInFromFragment();
else render();
