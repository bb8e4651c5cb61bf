// The file helpers (c.files) against the real server named by DSHD_URL and
// DSHD_TOKEN: bytes and a local file up, a file and a tar stream down into
// local files, list, stat, mkdir, move, remove, an archive in, and a watch
// that sees the agent's commands and resumes after the last event it read.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execFileSync } from "node:child_process";
import { createDshdClient, must, ProblemError, type WatchEvent } from "../src/index.js";

const c = createDshdClient(process.env.DSHD_URL!, process.env.DSHD_TOKEN!);

const sh = async (agentId: string, command: string) => {
  const j = must(await c.api.POST("/exec", { body: { command, agentId } }));
  assert.equal(j.exitCode, 0, `${command}: ${j.stderr.text}`);
};

test("files: up and down, from and to local files, list, stat, mkdir, move, remove, archives", async () => {
  const dir = mkdtempSync(join(tmpdir(), "dshd-ts-files2-"));
  const local = mkdtempSync(join(tmpdir(), "dshd-ts-local-"));
  const agent = must(await c.api.POST("/agents", { body: { cwd: dir, sandbox: { policy: "workspace-write" } } }));
  const a = agent.id;

  const put = await c.files.upload(a, "sub/data.bin", new Uint8Array([0, 1, 255]), { parents: true, mode: 0o640 });
  assert.deepEqual([put.size, put.mode], [3, "0640"]);
  const big = join(local, "big.bin");
  writeFileSync(big, Buffer.alloc(3 << 20, 7));
  assert.equal((await c.files.upload(a, "big.bin", { file: big })).size, 3 << 20);
  assert.equal(statSync(join(dir, "big.bin")).size, 3 << 20);
  assert.deepEqual(await c.files.download(a, "sub/data.bin", { range: [1, 2] }), new Uint8Array([1, 255]));
  const back = join(local, "back.bin");
  assert.equal(await c.files.downloadTo(a, "big.bin", back), 3 << 20);
  assert.deepEqual(readFileSync(back), readFileSync(big));

  assert.equal((await c.files.stat(a, "sub")).type, "directory");
  assert.equal((await c.files.mkdir(a, "made/deep", { parents: true })).path, join(dir, "made/deep"));
  const listing = await c.files.list(a, "", 2);
  assert.ok(listing.entries.some((e) => e.path === "made/deep" && e.type === "directory"));

  assert.deepEqual(await c.files.move(a, "sub/data.bin", "made/data.bin"), { from: join(dir, "sub/data.bin"), path: join(dir, "made/data.bin") });
  await assert.rejects(c.files.move(a, "big.bin", "made/data.bin"), (e: unknown) => e instanceof ProblemError && e.code === "path_exists");
  await c.files.move(a, "big.bin", "made/data.bin", { overwrite: true });
  assert.equal(statSync(join(dir, "made/data.bin")).size, 3 << 20);

  // A tree out into a local tar file, and in again elsewhere, from the file.
  const tar = join(local, "tree.tar");
  assert.ok((await c.files.downloadArchiveTo(a, "made", tar)) > 3 << 20);
  const unpacked = await c.files.uploadArchive(a, "copy", { file: tar }, { parents: true });
  assert.equal(unpacked.entries, 2);
  assert.equal(statSync(join(dir, "copy/data.bin")).size, 3 << 20);
  const listed = execFileSync("tar", ["-tf", tar], { encoding: "utf8" }).split("\n").filter(Boolean).sort();
  assert.deepEqual(listed, ["data.bin", "deep/"]);

  await assert.rejects(c.files.remove(a, "made"), (e: unknown) => e instanceof ProblemError && e.code === "directory_not_empty");
  await c.files.remove(a, "made", { recursive: true });
  await assert.rejects(c.files.stat(a, "made"), (e: unknown) => e instanceof ProblemError && e.code === "path_not_found");
  await assert.rejects(c.files.upload(a, "/etc/dshd-ts-client", new Uint8Array([1])), (e: unknown) => e instanceof ProblemError && e.status === 403);
});

test("files: a watch sees the agent's commands and resumes after the last event read", async () => {
  const dir = mkdtempSync(join(tmpdir(), "dshd-ts-watch-"));
  const a = must(await c.api.POST("/agents", { body: { cwd: dir } })).id;
  const seen: string[] = [];
  const show = (e: WatchEvent) => (e.type === "renamed" ? `renamed ${e.from}>${e.path}` : `${e.type} ${e.path}`);
  const until = async (it: AsyncIterator<WatchEvent>, want: string) => {
    for (;;) {
      const r = await it.next();
      assert.ok(!r.done, `the stream ended before ${want}; saw ${seen}`);
      assert.notEqual(r.value.type, "overflow", r.value.reason);
      seen.push(show(r.value));
      if (show(r.value) === want) return r.value;
    }
  };
  const s = c.files.follow(a, "", { recursive: true });
  await s.open(); // the watch is in place
  const it = s[Symbol.asyncIterator]();
  await sh(a, "mkdir w && echo x > w/a && mv w/a w/b");
  await until(it, "created w");
  const last = await until(it, "renamed w/a>w/b");
  s.close();
  await sh(a, "rm w/b");
  const resumed = c.files.watch(a, "", { recursive: true, lastEventId: last.id });
  const first = await resumed.next();
  assert.deepEqual([first.value?.type, first.value?.path], ["deleted", "w/b"]);
  await resumed.return(undefined);
  await assert.rejects(c.files.follow(a, "/proc").open(), (e: unknown) => e instanceof ProblemError && e.code === "path_hidden");
});
