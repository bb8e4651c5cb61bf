// HTTP access to the dshd API. The page never holds the bearer token: it
// signs in once (a login code from "dshd ui", or the token pasted into the
// form, exchanged by POST /ui/session) for a session. The server keeps the
// session id in an HttpOnly cookie the page cannot read; the page keeps the
// session's key and sends it in a header with every call (the cookie alone
// authenticates nothing). A 401 forgets the key and tells the app, which
// shows the sign-in prompt.

const KEY_STORAGE = 'dshd.sessionKey';
const KEY_HEADER = 'X-Dshd-UI-Key';

// The UI is served under /ui/; the API lives one level up. Resolving against
// the page keeps working if a proxy mounts the server under a prefix.
const apiBase = new URL('../', document.baseURI);

let unauthorizedHandler = () => {};

/** Error for a 401: the session or the credential is missing, wrong or stale. */
export class UnauthorizedError extends Error {
  constructor() {
    super('The server rejected the session.');
    this.name = 'UnauthorizedError';
  }
}

/** Error for any other non-2xx answer; carries the problem+json fields. */
export class APIError extends Error {
  constructor(status, problem) {
    const what = problem.detail || problem.title || `HTTP ${status}`;
    super(problem.code ? `${what} (${problem.code})` : what);
    this.name = 'APIError';
    this.status = status;
    this.problem = problem;
  }
}

function sessionKey() {
  return localStorage.getItem(KEY_STORAGE) ?? '';
}

/** Whether the page holds a session (which the server may still refuse). */
export function hasSession() {
  return sessionKey() !== '';
}

/** Forgets the session's key (the cookie alone is of no use). */
export function forgetSession() {
  localStorage.removeItem(KEY_STORAGE);
}

/**
 * Signs in with {code} (a one-time login code) or {token} (the bearer
 * token) and keeps the session's key. Throws UnauthorizedError when the
 * server refuses the credential, APIError on other failures.
 */
export async function signIn(credential) {
  const res = await fetch(new URL('ui/session', apiBase), {
    method: 'POST',
    cache: 'no-store',
    credentials: 'same-origin',
    headers: { Accept: 'application/json', 'Content-Type': 'application/json' },
    body: JSON.stringify(credential),
  });
  if (res.status === 401) {
    forgetSession();
    throw new UnauthorizedError();
  }
  if (!res.ok) throw new APIError(res.status, await readProblem(res));
  const session = await res.json();
  localStorage.setItem(KEY_STORAGE, session.key);
}

/** Ends the session on the server (which clears the cookie) and forgets it. */
export async function signOut() {
  forgetSession();
  await fetch(new URL('ui/session', apiBase), { method: 'DELETE', cache: 'no-store', credentials: 'same-origin' });
}

/** Registers the function called after any 401. */
export function onUnauthorized(fn) {
  unauthorizedHandler = fn;
}

/** Joins path segments, escaping each one. */
export function path(...segments) {
  return '/' + segments.map((s) => encodeURIComponent(String(s))).join('/');
}

/**
 * Sends one request and returns the Response when it is 2xx.
 * Throws UnauthorizedError on 401 and APIError on other failures.
 */
export async function request(route, { method = 'GET', body, accept = 'application/json', headers = {}, signal } = {}) {
  const init = {
    method,
    signal,
    cache: 'no-store',
    credentials: 'same-origin',
    headers: { Accept: accept, [KEY_HEADER]: sessionKey(), ...headers },
  };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(new URL(route.replace(/^\//, ''), apiBase), init);
  if (res.status === 401) {
    forgetSession();
    unauthorizedHandler();
    throw new UnauthorizedError();
  }
  if (!res.ok) {
    throw new APIError(res.status, await readProblem(res));
  }
  return res;
}

/** GETs (or sends) JSON and decodes the answer; null for an empty body. */
export async function requestJSON(route, options) {
  const res = await request(route, options);
  const text = await res.text();
  return text === '' ? null : JSON.parse(text);
}

async function readProblem(res) {
  try {
    const problem = await res.json();
    if (problem && typeof problem === 'object') return problem;
  } catch {
    // Not JSON: fall through to a bare problem.
  }
  return { status: res.status, title: res.statusText };
}

/** True for errors a view should not report itself (the app handles them). */
export function isQuiet(err) {
  return err instanceof UnauthorizedError || err?.name === 'AbortError';
}
