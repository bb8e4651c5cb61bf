// Server-sent events, read from a response body: the framing both the job
// output stream and the file watch use.

/** One server-sent event: its id and name when sent, and its data lines. */
export interface SSEFrame {
  id?: string;
  event?: string;
  data: string[];
}

/**
 * sseFrames yields the events of body, comments skipped. It ends when the
 * body ends or a read fails (the connection dropped, or the caller aborted
 * it): the caller resumes from the last id it saw.
 */
export async function* sseFrames(body: ReadableStream<Uint8Array>): AsyncGenerator<SSEFrame> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let frame: SSEFrame = { data: [] };
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch {
      return;
    }
    if (chunk.done) return;
    buf += decoder.decode(chunk.value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (frame.id !== undefined || frame.event !== undefined || frame.data.length > 0) yield frame;
        frame = { data: [] };
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const key = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (key === "id") frame.id = value;
      else if (key === "event") frame.event = value;
      else if (key === "data") frame.data.push(value);
    }
  }
}
