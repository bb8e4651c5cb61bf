// A TypeScript client for dshd. The request and response types are
// generated from api/openapi.yaml by openapi-typescript (src/schema.d.ts),
// and every operation is called through openapi-fetch. Hand-written here is
// only what generation cannot reach: following a job's output over SSE with
// resume, the transcript as typed events, the bodies that are not JSON (the
// contract as text, the metrics as text, the transcript as a stream of lines,
// a job's raw output as bytes), an agent's files (bytes and tar streams in and
// out, a directory's changes over SSE), and problems as typed errors.
import createClient, { type Client, type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema.js";
import { must, ProblemError, type Problem } from "./problem.js";
import { createFiles, type DshdFiles } from "./files.js";
import { sseFrames } from "./sse.js";

export type { components, paths };
export { listTools, type ToolFormat, type ToolFormats } from "./tools.js";
export { must, ProblemError, type Problem } from "./problem.js";
export type { DshdFiles, Upload, WatchEvent, WatchStream, FileWritten, FileListing, FileStat, FileMade, FileMoved, ArchiveUnpacked } from "./files.js";
export type Schemas = components["schemas"];
export type Job = Schemas["Job"];
export type Agent = Schemas["Agent"];
/** A contributor, told apart by `kind` (builtin, static, template, webhook). */
export type Contributor = Schemas["Contributor"];
export type ToolResult = Schemas["ToolResult"];
export type Transcript = Schemas["Transcript"];
export type TranscriptEvent = Schemas["TranscriptEvent"];
/** The transcript's first line: the agent's session header. */
export type TranscriptHeader = Transcript["header"];
/** One line of the transcript as stored: the header first, then events. */
export type TranscriptLine = TranscriptHeader | TranscriptEvent;

/** The typed openapi-fetch client, with the bearer token on every request. */
export type DshdFetch = Client<paths>;

export interface DshdClient {
  /** Every operation of the contract: `api.GET("/agents/{id}", {params: {path: {id}}})`. */
  api: DshdFetch;
  /** The transcript as typed events (Accept: application/json). */
  transcript(agentId: string): Promise<Transcript>;
  /**
   * The transcript as stored (application/x-ndjson), read as a stream: the
   * header, then each event, parsed one line at a time. A torn last line (no
   * newline: a crash while writing) is left out, as in the JSON form.
   */
  transcriptLines(agentId: string): AsyncGenerator<TranscriptLine>;
  /** This contract as the server serves it (application/yaml), as text. */
  openapiYAML(): Promise<string>;
  /** The Prometheus metrics (text/plain), as text. */
  metrics(): Promise<string>;
  /** The raw bytes of one of a job's streams from `offset` (application/octet-stream). */
  rawOutput(jobId: string, stream: "stdout" | "stderr", offset?: number): Promise<Uint8Array>;
  /** One SSE connection of a job's output, from `lastEventId` (undefined: the start). */
  followOutput(jobId: string, lastEventId?: string, signal?: AbortSignal): OutputStream;
  /** Every output event until `exit`, reconnecting with Last-Event-ID when a connection drops. */
  output(jobId: string, lastEventId?: string): AsyncGenerator<OutputEvent>;
  /** An agent's files: bytes and tar streams in and out (from and to local files too), list, stat, mkdir, move, remove, watch. */
  files: DshdFiles;
}

/** One event of a job's output: the chunk's exact bytes, or the finished job. */
export type OutputEvent =
  | { id: string; event: "stdout" | "stderr"; data: Uint8Array }
  | { id: string; event: "exit"; job: Job };

/** Events of one SSE connection. `lastEventId` resumes after the last one read. */
export interface OutputStream extends AsyncIterable<OutputEvent> {
  lastEventId?: string;
  /** True once the exit event was read (or the job had ended at lastEventId). */
  done: boolean;
  /** Drops the connection. */
  close(): void;
}

export function createDshdClient(baseUrl: string, token: string): DshdClient {
  const auth: Middleware = {
    onRequest({ request }) {
      request.headers.set("Authorization", `Bearer ${token}`);
      return request;
    },
  };
  const api = createClient<paths>({ baseUrl });
  api.use(auth);
  const base = baseUrl.replace(/\/$/, "");

  async function transcript(agentId: string): Promise<Transcript> {
    const r = await api.GET("/agents/{id}/transcript", {
      params: { path: { id: agentId } },
      headers: { Accept: "application/json" },
      parseAs: "json",
    });
    return must(r) as unknown as Transcript;
  }

  async function* transcriptLines(agentId: string): AsyncGenerator<TranscriptLine> {
    const r = await api.GET("/agents/{id}/transcript", {
      params: { path: { id: agentId } },
      headers: { Accept: "application/x-ndjson" },
      parseAs: "stream",
    });
    const body = must(r);
    if (!body) return;
    yield* ndjsonLines<TranscriptLine>(body);
  }

  async function openapiYAML(): Promise<string> {
    return must(await api.GET("/openapi.yaml", { parseAs: "text" })) ?? "";
  }

  async function metrics(): Promise<string> {
    return must(await api.GET("/metrics", { parseAs: "text" })) ?? "";
  }

  async function rawOutput(jobId: string, stream: "stdout" | "stderr", offset?: number): Promise<Uint8Array> {
    const r = await api.GET("/jobs/{id}/output", {
      params: { path: { id: jobId }, query: { stream, offset } },
      headers: { Accept: "application/octet-stream" },
      parseAs: "arrayBuffer",
    });
    const b = must(r);
    return b ? new Uint8Array(b) : new Uint8Array(0); // empty: no body at all
  }

  function followOutput(jobId: string, lastEventId?: string, signal?: AbortSignal): OutputStream {
    const ctrl = new AbortController();
    signal?.addEventListener("abort", () => ctrl.abort());
    const stream: OutputStream = {
      lastEventId,
      done: false,
      close: () => ctrl.abort(),
      async *[Symbol.asyncIterator]() {
        const headers: Record<string, string> = { Authorization: `Bearer ${token}`, Accept: "text/event-stream" };
        if (stream.lastEventId) headers["Last-Event-ID"] = stream.lastEventId;
        const res = await fetch(`${base}/jobs/${encodeURIComponent(jobId)}/output`, { headers, signal: ctrl.signal });
        if (res.status === 204) {
          stream.done = true;
          return;
        }
        if (!res.ok) throw new ProblemError((await res.json()) as Problem);
        try {
          for await (const f of sseFrames(res.body!)) {
            if (f.event === undefined && f.data.length === 0) continue;
            const ev = toEvent(f.id, f.event, f.data.join("\n"));
            if (f.id !== undefined) stream.lastEventId = f.id;
            if (ev) {
              if (ev.event === "exit") stream.done = true;
              yield ev;
              if (stream.done) return;
            }
          }
        } finally {
          ctrl.abort();
        }
      },
    };
    return stream;
  }

  async function* output(jobId: string, lastEventId?: string): AsyncGenerator<OutputEvent> {
    for (let attempt = 0; attempt < 10; attempt++) {
      const s = followOutput(jobId, lastEventId);
      let progressed = false;
      for await (const ev of s) {
        progressed = true;
        yield ev;
      }
      if (s.done) return;
      lastEventId = s.lastEventId;
      if (progressed) attempt = -1;
    }
    throw new Error(`output of ${jobId}: gave up reconnecting`);
  }

  return { api, transcript, transcriptLines, openapiYAML, metrics, rawOutput, followOutput, output, files: createFiles(base, token) };
}

/**
 * Parses a stream of newline-delimited JSON, yielding each complete line's
 * value as it arrives. A last line without its newline is torn and left out.
 */
export async function* ndjsonLines<T>(body: ReadableStream<Uint8Array>): AsyncGenerator<T> {
  const reader = body.getReader();
  const decoder = new TextDecoder("utf-8", { fatal: true });
  let buf = "";
  try {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      buf += decoder.decode(chunk.value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim() !== "") yield JSON.parse(line) as T;
      }
    }
  } finally {
    // Stopped early, or done: either way the connection is not needed.
    await reader.cancel().catch(() => {});
  }
}

/** One event of the output stream as the contract describes it (data decoded as JSON). */
export type JobOutputEvent = Schemas["JobOutputEvent"];

function toEvent(id: string | undefined, name: string | undefined, data: string): OutputEvent | undefined {
  if (name === "exit") return { id: id ?? "", event: "exit", job: JSON.parse(data) as Schemas["OutputExitEvent"]["data"] };
  if (name !== "stdout" && name !== "stderr") return undefined;
  const v = JSON.parse(data) as Schemas["OutputChunkEvent"]["data"];
  const bytes = typeof v === "string" ? new TextEncoder().encode(v) : Uint8Array.from(Buffer.from(v.base64, "base64"));
  return { id: id ?? "", event: name, data: bytes };
}
