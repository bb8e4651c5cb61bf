// A server-sent events parser over a fetch() body. EventSource cannot send
// an Authorization header, so the UI reads the stream itself.
// Follows https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation

/**
 * Yields {type, data, id} for each event in a text/event-stream body.
 * id is the last event id seen so far (it persists across events).
 */
export async function* readEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let type = '';
  let data = [];
  let lastId = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let start = 0;
      for (;;) {
        const end = lineEnd(buffer, start);
        if (end === null) break;
        const line = buffer.slice(start, end.index);
        start = end.index + end.length;
        if (line === '') {
          if (data.length > 0 || type !== '') {
            yield { type: type || 'message', data: data.join('\n'), id: lastId };
          }
          type = '';
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue; // comment / keep-alive
        const colon = line.indexOf(':');
        const field = colon === -1 ? line : line.slice(0, colon);
        let val = colon === -1 ? '' : line.slice(colon + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'event') type = val;
        else if (field === 'data') data.push(val);
        else if (field === 'id' && !val.includes('\0')) lastId = val;
      }
      buffer = buffer.slice(start);
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// Finds the next line terminator (CRLF, LF or CR) at or after start. A CR at
// the very end of the buffer may be the first half of a CRLF split across
// chunks, so it waits for more input.
function lineEnd(buffer, start) {
  for (let i = start; i < buffer.length; i++) {
    const c = buffer.charCodeAt(i);
    if (c === 10) return { index: i, length: 1 };
    if (c === 13) {
      if (i + 1 === buffer.length) return null;
      return { index: i, length: buffer.charCodeAt(i + 1) === 10 ? 2 : 1 };
    }
  }
  return null;
}
