// Terminal view of a terminal job (started with tty: true): its output drawn
// by xterm.js as the program sent it (colours, cursor movement, line
// editing). It only shows until the person chooses to type: then every key
// goes to the job through POST /jobs/{id}/stdin, and the terminal is fitted
// to the panel (POST /jobs/{id}/resize) so what they type wraps where they
// see it. xterm.js is vendored from its pinned npm package
// (scripts/vendor-xterm.sh).

import { FitAddon } from './vendor/xterm/addon-fit.mjs';
import { Terminal } from './vendor/xterm/xterm.mjs';
import { isQuiet, path, requestJSON } from './api.js';

// A dark palette whatever the page's scheme; xterm.js raises any colour
// pair below minimumContrastRatio, so programs' own colours stay readable.
const THEME = {
  background: '#14161a',
  foreground: '#e6e6e6',
  cursor: '#e6e6e6',
  cursorAccent: '#14161a',
  selectionBackground: '#3a4a66',
  black: '#3b3f45',
  red: '#ff7b72',
  green: '#56d364',
  yellow: '#e3b341',
  blue: '#79c0ff',
  magenta: '#d2a8ff',
  cyan: '#56d4dd',
  white: '#d0d7de',
  brightBlack: '#8b949e',
  brightRed: '#ffa198',
  brightGreen: '#7ee787',
  brightYellow: '#f2cc60',
  brightBlue: '#a5d6ff',
  brightMagenta: '#e2c5ff',
  brightCyan: '#b3f0ff',
  brightWhite: '#ffffff',
};

/**
 * Opens a terminal for job in container. onState(text) reports what the
 * terminal is doing; onError(message) reports a key or resize the server
 * refused. Returns {write, setTyping, typing, ended, dispose}.
 */
export function createTerminal(container, job, { onState, onError }) {
  const term = new Terminal({
    cols: job.terminal?.cols ?? 80,
    rows: job.terminal?.rows ?? 24,
    disableStdin: true,
    cursorBlink: false,
    minimumContrastRatio: 4.5,
    scrollback: 5000,
    fontSize: 13,
    fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace',
    theme: THEME,
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(container);
  // Named for what it is, not xterm.js's default ("Terminal input").
  term.textarea?.setAttribute('aria-label', `Keys for job ${job.id}`);

  let typing = false;
  let running = job.state === 'running';
  let sending = Promise.resolve();
  let api = null;

  // Read-only, the terminal takes no key, so Tab moves on as anywhere else.
  // Typing, every key is the program's (Tab completes in a shell) except
  // Shift+Escape, which stops typing: the way out for keyboard users.
  term.attachCustomKeyEventHandler((ev) => {
    if (!typing) return false;
    if (ev.key === 'Escape' && ev.shiftKey) {
      if (ev.type === 'keydown') api.setTyping(false);
      return false;
    }
    return true;
  });

  // Keys go one request after another, in the order typed.
  term.onData((data) => {
    if (!typing || !running) return;
    sending = sending.then(() => send({ data }));
  });

  async function send(body) {
    try {
      // A key needs no job back (204 instead of the whole job, output included).
      await requestJSON(path('jobs', job.id, 'stdin'), { method: 'POST', body, headers: { Prefer: 'return=minimal' } });
    } catch (err) {
      if (!isQuiet(err)) onError(`Could not send keys to job ${job.id}: ${err.message}`);
    }
  }

  async function resizeToPanel() {
    const dims = fit.proposeDimensions();
    if (!dims || !Number.isFinite(dims.cols) || !Number.isFinite(dims.rows)) return;
    const cols = Math.max(2, Math.min(1000, dims.cols));
    const rows = Math.max(1, Math.min(1000, dims.rows));
    if (cols === term.cols && rows === term.rows) return;
    term.resize(cols, rows);
    try {
      await requestJSON(path('jobs', job.id, 'resize'), { method: 'POST', body: { cols, rows } });
    } catch (err) {
      if (!isQuiet(err)) onError(`Could not resize job ${job.id}: ${err.message}`);
    }
  }

  function report() {
    if (!running) onState('The job has ended; its terminal is read-only.');
    else if (typing) onState(`Typing into job ${job.id}: every key goes to it; Shift+Escape stops.`);
    else onState('Read-only: keys go nowhere until you choose to type.');
  }
  report();

  api = {
    /** Draws output: a string, or bytes (Uint8Array) that were not UTF-8. */
    write(chunk) {
      term.write(chunk);
    },
    /** Turns typing on or off; on, the keyboard focus moves into the terminal. */
    setTyping(on) {
      typing = Boolean(on) && running;
      term.options.disableStdin = !typing;
      term.options.cursorBlink = typing;
      if (typing) {
        resizeToPanel();
        term.focus();
      }
      report();
      return typing;
    },
    get typing() {
      return typing;
    },
    /** The job ended: no more keys. */
    ended() {
      running = false;
      api.setTyping(false);
    },
    dispose() {
      running = false;
      typing = false;
      term.dispose();
    },
  };
  return api;
}
