// The file routes (docs/files.md) with the bodies generation cannot type:
// bytes and tar streams in and out, from and to local files, and a
// directory's changes over SSE with resume. Paths are relative to the
// agent's cwd, or absolute; they may hold slashes.
import { createReadStream, createWriteStream } from "node:fs";
import { Readable, Writable } from "node:stream";
import type { components } from "./schema.js";
import { ProblemError, type Problem } from "./problem.js";
import { sseFrames } from "./sse.js";

type Schemas = components["schemas"];
export type FileWritten = Schemas["FileWritten"];
export type FileListing = Schemas["FileListing"];
export type FileStat = Schemas["FileStat"];
export type FileMade = Schemas["FileMade"];
export type FileMoved = Schemas["FileMoved"];
export type ArchiveUnpacked = Schemas["ArchiveUnpacked"];

/** A body to send: bytes, a stream of them, or `{ file }`: a local file, streamed. */
export type Upload = Uint8Array | ReadableStream<Uint8Array> | { file: string };

/** One change of a watched directory. `overflow`: events were lost, list again. */
export interface WatchEvent {
  id: string;
  type: "created" | "modified" | "deleted" | "renamed" | "overflow";
  /** Relative to the watched directory ("." for itself: removed, the stream ends). */
  path: string;
  /** renamed: the old path. */
  from?: string;
  isDir?: boolean;
  /** overflow: why. */
  reason?: string;
}

/** Events of one watch connection. `lastEventId` resumes after the last one read. */
export interface WatchStream extends AsyncIterable<WatchEvent> {
  lastEventId?: string;
  /** True once the watched directory itself was removed. */
  done: boolean;
  /** Drops the connection. */
  close(): void;
}

export interface DshdFiles {
  /** PUT …/files/{path}: write the body as the file, atomically. */
  upload(agentId: string, path: string, body: Upload, opts?: { mode?: number; parents?: boolean }): Promise<FileWritten>;
  /** GET …/files/{path}: the file's bytes (`range`: [first, last], inclusive). */
  download(agentId: string, path: string, opts?: { range?: [number, number] }): Promise<Uint8Array>;
  /** GET …/files/{path} as a stream of bytes, read as they come. */
  downloadStream(agentId: string, path: string): Promise<ReadableStream<Uint8Array>>;
  /** GET …/files/{path} into the local file `to`; resolves to the bytes written. */
  downloadTo(agentId: string, path: string, to: string): Promise<number>;
  /** GET …/files/{path} of a directory: its listing, `depth` levels down. */
  list(agentId: string, path?: string, depth?: number): Promise<FileListing>;
  /** GET …/files/{path}?stat=true. */
  stat(agentId: string, path: string): Promise<FileStat>;
  /** POST …/files/{path}?op=mkdir. */
  mkdir(agentId: string, path: string, opts?: { mode?: number; parents?: boolean }): Promise<FileMade>;
  /** POST …/files/{path}?op=move&to=: 409 path_exists unless `overwrite`. */
  move(agentId: string, path: string, to: string, opts?: { overwrite?: boolean; parents?: boolean }): Promise<FileMoved>;
  /** DELETE …/files/{path}. */
  remove(agentId: string, path: string, opts?: { recursive?: boolean }): Promise<void>;
  /** PUT …/archive/{path}: unpack a tar stream into the directory. */
  uploadArchive(agentId: string, path: string, tar: Upload, opts?: { parents?: boolean }): Promise<ArchiveUnpacked>;
  /** GET …/archive/{path}: the tree as a tar stream. */
  downloadArchive(agentId: string, path?: string): Promise<ReadableStream<Uint8Array>>;
  /** GET …/archive/{path} into the local file `to`; resolves to the bytes written. */
  downloadArchiveTo(agentId: string, path: string, to: string): Promise<number>;
  /**
   * One connection of GET …/files/{path}?watch=true, after `lastEventId`
   * when given. The watch is in place once `open()` resolves.
   */
  follow(agentId: string, path: string, opts?: { recursive?: boolean; lastEventId?: string; signal?: AbortSignal }): WatchStream & { open(): Promise<void> };
  /** The directory's changes for as long as the caller iterates, reconnecting with Last-Event-ID. */
  watch(agentId: string, path: string, opts?: { recursive?: boolean; lastEventId?: string }): AsyncGenerator<WatchEvent>;
}

export function createFiles(base: string, token: string): DshdFiles {
  const auth = { Authorization: `Bearer ${token}` };

  function url(agentId: string, route: "files" | "archive", path: string, query: Record<string, string | number | boolean | undefined> = {}): string {
    const p = path.split("/").map(encodeURIComponent).join("/");
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) {
      if (v === undefined || v === false) continue;
      q.set(k, String(v));
    }
    const qs = q.toString();
    return `${base}/agents/${encodeURIComponent(agentId)}/${route}/${p}${qs ? "?" + qs : ""}`;
  }

  async function send(method: string, u: string, init: { body?: Upload; headers?: Record<string, string>; signal?: AbortSignal } = {}): Promise<Response> {
    const headers: Record<string, string> = { ...auth, ...init.headers };
    let body: BodyInit | undefined;
    if (init.body instanceof Uint8Array) {
      body = init.body as unknown as BodyInit;
    } else if (init.body && "file" in init.body) {
      body = Readable.toWeb(createReadStream(init.body.file)) as unknown as BodyInit;
    } else if (init.body) {
      body = init.body as unknown as BodyInit;
    }
    const res = await fetch(u, { method, headers, body, signal: init.signal, ...(body && !(body instanceof Uint8Array) ? { duplex: "half" } : {}) } as RequestInit);
    if (!res.ok) {
      const text = await res.text();
      let p: Problem;
      try {
        p = JSON.parse(text) as Problem;
      } catch {
        p = { type: "about:blank", title: text || res.statusText, status: res.status, code: "unexpected_response" } as Problem;
      }
      throw new ProblemError(p);
    }
    return res;
  }

  async function toFile(res: Response, to: string): Promise<number> {
    let n = 0;
    const counter = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, ctrl) {
        n += chunk.length;
        ctrl.enqueue(chunk);
      },
    });
    await res.body!.pipeThrough(counter).pipeTo(Writable.toWeb(createWriteStream(to)) as WritableStream<Uint8Array>);
    return n;
  }

  const mode = (m?: number) => (m === undefined ? undefined : m.toString(8).padStart(4, "0"));

  function follow(agentId: string, path: string, opts: { recursive?: boolean; lastEventId?: string; signal?: AbortSignal } = {}) {
    const ctrl = new AbortController();
    opts.signal?.addEventListener("abort", () => ctrl.abort());
    let opened: Promise<Response> | undefined;
    const open = () => {
      opened ??= send("GET", url(agentId, "files", path, { watch: true, recursive: opts.recursive }), {
        headers: { Accept: "text/event-stream", ...(opts.lastEventId ? { "Last-Event-ID": opts.lastEventId } : {}) },
        signal: ctrl.signal,
      });
      return opened;
    };
    const stream: WatchStream & { open(): Promise<void> } = {
      lastEventId: opts.lastEventId,
      done: false,
      close: () => ctrl.abort(),
      open: async () => {
        await open();
      },
      async *[Symbol.asyncIterator]() {
        const res = await open();
        try {
          for await (const f of sseFrames(res.body!)) {
            if (f.data.length === 0) continue;
            const d = JSON.parse(f.data.join("\n")) as Omit<WatchEvent, "id">;
            if (f.id !== undefined) stream.lastEventId = f.id;
            const ev: WatchEvent = { id: f.id ?? "", ...d, path: d.path ?? "" };
            if (ev.type === "deleted" && ev.path === ".") stream.done = true;
            yield ev;
            if (stream.done) return;
          }
        } finally {
          ctrl.abort();
        }
      },
    };
    return stream;
  }

  return {
    async upload(agentId, path, body, opts = {}) {
      const res = await send("PUT", url(agentId, "files", path, { mode: mode(opts.mode), parents: opts.parents }), {
        body,
        headers: { "Content-Type": "application/octet-stream" },
      });
      return (await res.json()) as FileWritten;
    },
    async download(agentId, path, opts = {}) {
      const headers: Record<string, string> = { Accept: "application/octet-stream" };
      if (opts.range) headers.Range = `bytes=${opts.range[0]}-${opts.range[1]}`;
      return new Uint8Array(await (await send("GET", url(agentId, "files", path), { headers })).arrayBuffer());
    },
    async downloadStream(agentId, path) {
      return (await send("GET", url(agentId, "files", path), { headers: { Accept: "application/octet-stream" } })).body!;
    },
    async downloadTo(agentId, path, to) {
      return toFile(await send("GET", url(agentId, "files", path), { headers: { Accept: "application/octet-stream" } }), to);
    },
    async list(agentId, path = "", depth) {
      return (await (await send("GET", url(agentId, "files", path, { depth }), { headers: { Accept: "application/json" } })).json()) as FileListing;
    },
    async stat(agentId, path) {
      return (await (await send("GET", url(agentId, "files", path, { stat: true }))).json()) as FileStat;
    },
    async mkdir(agentId, path, opts = {}) {
      return (await (await send("POST", url(agentId, "files", path, { op: "mkdir", mode: mode(opts.mode), parents: opts.parents }))).json()) as FileMade;
    },
    async move(agentId, path, to, opts = {}) {
      return (await (await send("POST", url(agentId, "files", path, { op: "move", to, overwrite: opts.overwrite, parents: opts.parents }))).json()) as FileMoved;
    },
    async remove(agentId, path, opts = {}) {
      await send("DELETE", url(agentId, "files", path, { recursive: opts.recursive }));
    },
    async uploadArchive(agentId, path, tar, opts = {}) {
      const res = await send("PUT", url(agentId, "archive", path, { parents: opts.parents }), {
        body: tar,
        headers: { "Content-Type": "application/x-tar" },
      });
      return (await res.json()) as ArchiveUnpacked;
    },
    async downloadArchive(agentId, path = "") {
      return (await send("GET", url(agentId, "archive", path))).body!;
    },
    async downloadArchiveTo(agentId, path, to) {
      return toFile(await send("GET", url(agentId, "archive", path)), to);
    },
    follow,
    async *watch(agentId, path, opts = {}) {
      let lastEventId = opts.lastEventId;
      for (let attempt = 0; attempt < 10; attempt++) {
        const s = follow(agentId, path, { recursive: opts.recursive, lastEventId });
        let progressed = false;
        try {
          for await (const ev of s) {
            progressed = true;
            yield ev;
          }
        } catch (e) {
          if (e instanceof ProblemError) throw e;
        } finally {
          s.close();
        }
        if (s.done) return;
        lastEventId = s.lastEventId;
        if (progressed) attempt = -1;
      }
      throw new Error(`watch of ${path}: gave up reconnecting`);
    },
  };
}
