// Reading transcript events: shared by the agents view (transcripts) and the
// hooks view (recent decisions).

import { badge, formatDuration } from './dom.js';

/**
 * The outcome of a hook/result event as a person would say it:
 * {label, kind} where kind picks the badge colour.
 */
export function hookOutcome(d) {
  switch (d.decision) {
    case 'deny':
      return { label: 'blocked', kind: 'bad' };
    case 'allow':
      return { label: 'allowed', kind: 'ok' };
    case 'ask':
      return { label: 'asked', kind: 'warn' };
    default:
      break;
  }
  if (d.timedOut) return { label: 'timed out', kind: 'warn' };
  if (d.error) return { label: 'failed', kind: 'warn' };
  if (d.signal || (d.exitCode !== null && d.exitCode !== undefined && d.exitCode !== 0)) {
    return { label: 'failed', kind: 'warn' };
  }
  return { label: 'no decision', kind: 'muted' };
}

/** A badge for a hook/result's outcome. */
export function hookBadge(d) {
  const { label, kind } = hookOutcome(d);
  return badge(label, kind);
}

/** "reason · exit 2 · 14 ms": what else a hook/result says, in a line. */
export function hookDetails(d) {
  const parts = [];
  if (d.reason) parts.push(d.reason);
  if (d.error) parts.push(d.error);
  if (d.timedOut) parts.push('timed out');
  if (d.signal) parts.push(`killed by ${d.signal}`);
  else if (d.exitCode !== null && d.exitCode !== undefined) parts.push(`exit ${d.exitCode}`);
  if (d.stderr && d.stderr.trim() !== (d.reason ?? '').trim()) parts.push(`stderr: ${d.stderr.trim()}`);
  if (d.durationMs !== undefined) parts.push(formatDuration(d.durationMs));
  return parts.join(' · ');
}

/** Parses a transcript's JSONL text into events; unreadable lines stay as {unreadable: line}. */
export function parseTranscript(text) {
  return text.split('\n').filter((l) => l.trim() !== '').map((line) => {
    try {
      const ev = JSON.parse(line);
      return ev && typeof ev === 'object' ? ev : { unreadable: line };
    } catch {
      return { unreadable: line };
    }
  });
}
