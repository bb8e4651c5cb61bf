// The contract's bodies that are not JSON, read through the client against
// the real server named by DSHD_URL and DSHD_TOKEN (TestTypeScriptClient in
// tests/clients_test.go starts one): the contract and the metrics as text,
// the stored transcript as a stream of JSON lines, raw output as bytes, and
// the output's server-sent events.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createDshdClient, must, ndjsonLines, ProblemError, type TranscriptLine } from "../src/index.js";

const c = createDshdClient(process.env.DSHD_URL!, process.env.DSHD_TOKEN!);

test("the contract as YAML text", async () => {
  const yaml = await c.openapiYAML();
  assert.equal(typeof yaml, "string");
  assert.match(yaml, /^openapi: 3\.0\.3\n/);
  assert.match(yaml, /\n {2}title: dshd\n/);
});

test("the metrics as Prometheus text", async () => {
  must(await c.api.GET("/healthz"));
  const text = await c.metrics();
  assert.equal(typeof text, "string");
  assert.match(text, /^# HELP /m);
  assert.match(text, /^# TYPE dshd_\w+ (counter|gauge|histogram)$/m);
});

test("the transcript as a stream of JSON lines", async () => {
  const agent = must(await c.api.POST("/agents", { body: {} }));
  for (const word of ["one", "two"]) {
    must(await c.api.POST("/agents/{id}/tools/{name}", {
      params: { path: { id: agent.id, name: "bash" } },
      body: { arguments: { command: `echo ${word}` } },
    }));
  }
  const lines: TranscriptLine[] = [];
  for await (const l of c.transcriptLines(agent.id)) lines.push(l);
  const whole = await c.transcript(agent.id);
  assert.deepEqual(lines[0], whole.header);
  assert.equal(lines[0].type, "session");
  assert.deepEqual(lines.slice(1), whole.events);
  assert.deepEqual(lines.slice(1).map((l) => l.type), ["tool/call", "tool/result", "tool/call", "tool/result"]);

  // Stopping early is allowed: the stream is cancelled, not left open.
  for await (const l of c.transcriptLines(agent.id)) {
    assert.equal(l.type, "session");
    break;
  }
});

test("ndjsonLines: lines split anywhere, a torn last line left out", async () => {
  const text = '{"a":"é"}\n\n{"b":2}\n{"torn":';
  const bytes = new TextEncoder().encode(text);
  // One byte per chunk: lines and the two-byte é are split across reads.
  const body = new ReadableStream<Uint8Array>({
    start(ctrl) {
      for (const b of bytes) ctrl.enqueue(Uint8Array.of(b));
      ctrl.close();
    },
  });
  const got: unknown[] = [];
  for await (const v of ndjsonLines(body)) got.push(v);
  assert.deepEqual(got, [{ a: "é" }, { b: 2 }]);
});

test("raw output as bytes, and the same bytes over SSE", async () => {
  // Bytes that are not UTF-8: a text read would change them.
  const job = must(await c.api.POST("/exec", { body: { command: String.raw`printf 'a\377\000b\n'; printf 'e\376' >&2` } }));
  assert.equal(job.state, "exited");
  assert.deepEqual(await c.rawOutput(job.id, "stdout"), Uint8Array.of(0x61, 0xff, 0x00, 0x62, 0x0a));
  assert.deepEqual(await c.rawOutput(job.id, "stdout", 2), Uint8Array.of(0x00, 0x62, 0x0a));
  assert.deepEqual(await c.rawOutput(job.id, "stdout", 99), new Uint8Array(0));
  assert.deepEqual(await c.rawOutput(job.id, "stderr"), Uint8Array.of(0x65, 0xfe));

  const out: number[] = [], err: number[] = [];
  let exit = false;
  for await (const ev of c.output(job.id)) {
    if (ev.event === "exit") exit = true;
    else (ev.event === "stdout" ? out : err).push(...ev.data);
  }
  assert.ok(exit, "no exit event");
  assert.deepEqual(Uint8Array.from(out), Uint8Array.of(0x61, 0xff, 0x00, 0x62, 0x0a));
  assert.deepEqual(Uint8Array.from(err), Uint8Array.of(0x65, 0xfe));
});

test("the file routes: bytes in and out, a listing, a refusal as a typed problem", async () => {
  const { mkdtempSync, readFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const dir = mkdtempSync(join(tmpdir(), "dshd-ts-files-"));
  const agent = must(await c.api.POST("/agents", { body: { cwd: dir } }));
  const bytes = new Uint8Array([0, 1, 2, 255, 10]);
  const put = must(await c.api.PUT("/agents/{id}/files/{path}", {
    params: { path: { id: agent.id, path: "sub/data.bin" }, query: { parents: true, mode: "0640" } },
    body: bytes as unknown as string,
    bodySerializer: (b: unknown) => b as BodyInit,
    headers: { "Content-Type": "application/octet-stream" },
  }));
  assert.deepEqual([put.size, put.mode], [5, "0640"]);
  assert.deepEqual(new Uint8Array(readFileSync(join(dir, "sub/data.bin"))), bytes);
  const got = must(await c.api.GET("/agents/{id}/files/{path}", {
    params: { path: { id: agent.id, path: "sub/data.bin" } },
    headers: { Accept: "application/octet-stream" },
    parseAs: "arrayBuffer",
  }));
  assert.deepEqual(new Uint8Array(got as ArrayBuffer), bytes);
  const listing = must(await c.api.GET("/agents/{id}/files/{path}", {
    params: { path: { id: agent.id, path: "sub" } },
    parseAs: "json",
  })) as unknown as { entries: { path: string; type: string }[] };
  assert.deepEqual(listing.entries.map((e) => [e.path, e.type]), [["data.bin", "file"]]);
  const r = await c.api.DELETE("/agents/{id}/files/{path}", { params: { path: { id: agent.id, path: "sub" } } });
  assert.throws(() => must(r), (e: unknown) => e instanceof ProblemError && e.problem.code === "directory_not_empty");
});
