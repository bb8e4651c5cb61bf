// The scenario both clients run, against the real server named by DSHD_URL
// and DSHD_TOKEN (TestTypeScriptClient in tests/clients_test.go starts one).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createDshdClient, must, ProblemError, type OutputEvent } from "../src/index.js";

const url = process.env.DSHD_URL!;
const token = process.env.DSHD_TOKEN!;

test("scenario", async () => {
  const c = createDshdClient(url, token);
  const { api } = c;

  const reg = must(await api.POST("/contributors", {
    body: {
      name: "ts.scenario",
      keys: [{ key: "DSH_TS_REPO", description: "Repository the harness works on." }],
      resolver: { kind: "static", values: { DSH_TS_REPO: "acme/widgets" } },
    },
  }));
  assert.equal(reg.name, "ts.scenario");
  // Contributors are a union told apart by kind: narrowing on it gives the
  // variant's resolver its own type (this only compiles because it does).
  assert.equal(reg.kind, "static");
  if (reg.kind !== "static") assert.fail("registered a static contributor");
  assert.deepEqual(reg.resolver.values, { DSH_TS_REPO: "acme/widgets" });
  const all = must(await api.GET("/contributors"));
  const home = all.find((c) => c.name === "dsh.home");
  assert.ok(home && home.kind === "builtin" && home.builtin);
  assert.equal("resolver" in home, false);
  const hook = must(await api.POST("/contributors", {
    body: { name: "ts.hook", keys: [{ key: "DSH_TS_HOOK", description: "d" }], resolver: { kind: "webhook", url: "http://127.0.0.1:9/facts", timeoutMs: 250 } },
  }));
  if (hook.kind !== "webhook") assert.fail(`webhook contributor came back as ${hook.kind}`);
  assert.equal(hook.resolver.url, "http://127.0.0.1:9/facts");
  assert.equal(hook.resolver.timeoutMs, 250);
  must(await api.DELETE("/contributors/{name}", { params: { path: { name: "ts.hook" } } }));
  const dup = await api.POST("/contributors", {
    body: { name: "ts.scenario", keys: [{ key: "DSH_TS_OTHER", description: "d" }], resolver: { kind: "static" } },
  });
  assert.equal(dup.response.status, 409);
  // The 409 is typed: error is the contract's Problem.
  assert.equal(dup.error?.code, "duplicate_contributor");

  const agent = must(await api.POST("/agents", { body: { cwd: mkdtempSync(path.join(tmpdir(), "dshd-ts-")) } }));
  const fg = must(await api.POST("/exec", { body: { command: "echo $DSH_SESSION_ID $DSH_TS_REPO", agentId: agent.id } }));
  assert.equal(fg.state, "exited");
  assert.equal(fg.stdout.text, `${agent.id} acme/widgets\n`);

  const n = 30;
  const bg = must(await api.POST("/exec", {
    body: { command: `for i in $(seq 1 ${n}); do echo line $i; sleep 0.02; done`, agentId: agent.id, background: true },
  }));
  const chunks: Uint8Array[] = [];
  const first = c.followOutput(bg.id);
  let lines = 0;
  for await (const ev of first) {
    if (ev.event !== "stdout") assert.fail(`unexpected ${ev.event} event before the output ended`);
    chunks.push(ev.data);
    lines += Buffer.from(ev.data).toString().split("\n").length - 1;
    if (lines >= 3) break; // the connection drops mid-stream
  }
  first.close();
  assert.ok(first.lastEventId);
  let exit: OutputEvent | undefined;
  for await (const ev of c.output(bg.id, first.lastEventId)) {
    if (ev.event === "exit") exit = ev;
    else chunks.push(ev.data);
  }
  const want = Array.from({ length: n }, (_, i) => `line ${i + 1}\n`).join("");
  assert.equal(Buffer.concat(chunks).toString(), want, "output lost or repeated across the reconnect");
  assert.ok(exit && exit.event === "exit");
  assert.equal(exit.job.state, "exited");
  assert.equal(exit.job.exitCode, 0);

  const res = must(await api.POST("/agents/{id}/tools/{name}", {
    params: { path: { id: agent.id, name: "bash" } },
    body: { callId: "call_ts_1", arguments: { command: "echo $DSH_SESSION_ID" } },
  }));
  assert.equal(res.isError, false);
  assert.equal(res.text, agent.id);

  const tr = await c.transcript(agent.id);
  assert.equal(tr.header.id, agent.id);
  const calls = tr.events.flatMap((e) => (e.type === "tool/call" ? [e.data] : []));
  const results = tr.events.flatMap((e) => (e.type === "tool/result" ? [e.data] : []));
  assert.deepEqual(calls.map((d) => [d.callId, d.name, d.arguments]), [["call_ts_1", "bash", { command: "echo $DSH_SESSION_ID" }]]);
  assert.deepEqual(results.map((d) => [d.callId, d.text, d.exitCode]), [["call_ts_1", agent.id, 0]]);

  const bad = createDshdClient(url, "wrong-token");
  const unauth = await bad.api.GET("/agents");
  assert.equal(unauth.response.status, 401);
  assert.equal(unauth.error?.code, "unauthorized");
  await assert.rejects(async () => must(await bad.api.GET("/agents")), (e: unknown) => e instanceof ProblemError && e.status === 401 && e.code === "unauthorized");
});
