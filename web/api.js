// HTTP access to the dshd API. Every call sends the bearer token; a 401
// forgets the token and tells the app, which shows the token prompt.

const TOKEN_KEY = 'dshd.token';

// The UI is served under /ui/; the API lives one level up. Resolving against
// the page keeps working if a proxy mounts the server under a prefix.
const apiBase = new URL('../', document.baseURI);

let unauthorizedHandler = () => {};

/** Error for a 401: the token is missing, wrong or stale. */
export class UnauthorizedError extends Error {
  constructor() {
    super('The server rejected the token.');
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

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) ?? '';
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
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
    headers: { Accept: accept, Authorization: `Bearer ${getToken()}`, ...headers },
  };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(new URL(route.replace(/^\//, ''), apiBase), init);
  if (res.status === 401) {
    clearToken();
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
