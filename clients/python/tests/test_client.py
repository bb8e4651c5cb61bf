"""Tests of the dshd Python client against a real server.

DSHD_URL and DSHD_TOKEN name the server (the Go test TestPythonClient starts
one and runs these tests).
"""

import io
import os
import sys
import tarfile
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from dshd import (  # noqa: E402
    BuiltinContributor,
    Client,
    KeySpec,
    Problem,
    StaticContributor,
    TemplateContributor,
    ToolCallEvent,
    ToolResultEvent,
    WebhookContributor,
)


def server() -> Client:
    return Client(os.environ["DSHD_URL"], os.environ["DSHD_TOKEN"], timeout=60)


class Scenario(unittest.TestCase):
    """The scenario both clients run: contributor (and its typed 409), agent,
    foreground command, background job followed over SSE with a forced
    reconnect, bash tool, typed transcript, typed 401."""

    def test_scenario(self):
        c = server()
        name = "py.scenario"
        reg = c.register_contributor(
            name, [{"key": "DSH_PY_REPO", "description": "Repository the harness works on."}],
            {"kind": "static", "values": {"DSH_PY_REPO": "acme/widgets"}})
        self.assertIsInstance(reg, StaticContributor)
        self.assertEqual((reg.name, reg.kind, reg.values), (name, "static", {"DSH_PY_REPO": "acme/widgets"}))
        self.assertEqual(reg.keys, [KeySpec("DSH_PY_REPO", "Repository the harness works on.")])
        with self.assertRaises(Problem) as dup:
            c.register_contributor(name, [{"key": "DSH_PY_OTHER", "description": "d"}], {"kind": "static"})
        self.assertEqual((dup.exception.status, dup.exception.code), (409, "duplicate_contributor"))

        agent = c.create_agent(tempfile.mkdtemp())
        fg = c.exec("echo $DSH_SESSION_ID $DSH_PY_REPO", agent_id=agent["id"])
        self.assertEqual(fg["state"], "exited")
        self.assertEqual(fg["stdout"]["text"], f"{agent['id']} acme/widgets\n")

        n = 30
        bg = c.exec(f"for i in $(seq 1 {n}); do echo line $i; sleep 0.02; done", agent_id=agent["id"], background=True)
        first = c.follow_output(bg["id"])
        got = b""
        for ev in first:
            self.assertEqual(ev.event, "stdout")
            got += ev.data
            if got.count(b"\n") >= 3:
                break
        first.close()  # the connection drops mid-stream
        resumed_from = first.last_event_id
        self.assertTrue(resumed_from)
        exit_job = None
        for ev in c.output(bg["id"], last_event_id=resumed_from):
            if ev.event == "exit":
                exit_job = ev.job
            else:
                got += ev.data
        want = "".join(f"line {i}\n" for i in range(1, n + 1)).encode()
        self.assertEqual(got, want, "output lost or repeated across the reconnect")
        self.assertEqual(exit_job["state"], "exited")
        self.assertEqual(exit_job["exitCode"], 0)

        res = c.call_tool(agent["id"], "bash", {"command": "echo $DSH_SESSION_ID"}, call_id="call_py_1")
        self.assertFalse(res["isError"])
        self.assertEqual(res["text"], agent["id"])

        tr = c.transcript(agent["id"])
        self.assertEqual(tr.header.id, agent["id"])
        calls = [e for e in tr.events if isinstance(e, ToolCallEvent)]
        results = [e for e in tr.events if isinstance(e, ToolResultEvent)]
        self.assertEqual([(e.call_id, e.name, e.arguments) for e in calls], [("call_py_1", "bash", {"command": "echo $DSH_SESSION_ID"})])
        self.assertEqual([(e.call_id, e.text, e.exit_code) for e in results], [("call_py_1", agent["id"], 0)])

        with self.assertRaises(Problem) as unauth:
            Client(os.environ["DSHD_URL"], "wrong-token").agents()
        self.assertEqual((unauth.exception.status, unauth.exception.code), (401, "unauthorized"))


class EveryOperation(unittest.TestCase):
    """Every method once, against the real server."""

    def test_every_operation(self):
        c = server()
        self.assertEqual(c.health()["status"], "ok")
        self.assertIn("openapi: 3.0.3", c.openapi_yaml())
        self.assertEqual(c.openapi()["openapi"], "3.0.3")
        self.assertIn("dshd_", c.metrics())
        login = c.ui_login_url()
        self.assertIn("/ui/#login=", login["url"])
        self.assertNotIn(c.token, login["url"])
        self.assertEqual(c.declarations()["prefix"], "DSH_")

        plugin = c.open_plugin("py.plugin", lease_seconds=60)
        c.register_contributor("py.tmpl", [{"key": "DSH_PY_TAG", "description": "d"}],
                               {"kind": "template", "values": {"DSH_PY_TAG": "{agent.id}"}}, plugin=plugin["id"])
        self.assertEqual(c.plugin(plugin["id"])["contributors"], ["py.tmpl"])
        self.assertEqual(c.renew_plugin(plugin["id"], 120)["leaseSeconds"], 120)
        self.assertIn(plugin["id"], [p["id"] for p in c.plugins()])
        tmpl = c.contributor("py.tmpl")
        self.assertIsInstance(tmpl, TemplateContributor)
        self.assertEqual((tmpl.values, tmpl.plugin), ({"DSH_PY_TAG": "{agent.id}"}, plugin["id"]))
        self.assertIsNotNone(tmpl.expires_at)
        self.assertIn("py.tmpl", [x.name for x in c.contributors()])
        home = c.contributor("dsh.home")
        self.assertIsInstance(home, BuiltinContributor)
        self.assertEqual((home.kind, home.builtin, [k.key for k in home.keys]), ("builtin", True, ["DSH_HOME"]))
        hook = c.register_contributor("py.hook", [{"key": "DSH_PY_HOOK", "description": "d"}],
                                      {"kind": "webhook", "url": "http://127.0.0.1:9/facts", "timeoutMs": 250})
        self.assertIsInstance(hook, WebhookContributor)
        self.assertEqual((hook.url, hook.timeout_ms), ("http://127.0.0.1:9/facts", 250))
        c.delete_contributor("py.hook")
        c.register_contributor("py.gone", [{"key": "DSH_PY_GONE", "description": "d"}], {"kind": "static"})
        c.delete_contributor("py.gone")
        with self.assertRaises(Problem) as gone:
            c.contributor("py.gone")
        self.assertEqual(gone.exception.code, "contributor_not_found")
        c.close_plugin(plugin["id"])
        with self.assertRaises(Problem) as closed:
            c.plugin(plugin["id"])
        self.assertEqual(closed.exception.status, 404)

        a = c.create_agent()
        self.assertEqual(c.agent(a["id"])["origin"], "root")
        self.assertIn(a["id"], [x["id"] for x in c.agents()])
        self.assertEqual(c.resume_agent(a["id"])["id"], a["id"])
        self.assertEqual(c.fork_agent(a["id"])["origin"], "fork")
        child = c.spawn_agent(a["id"])
        self.assertEqual((child["parentId"], child["depth"]), (a["id"], 1))
        self.assertIn('"type":"session"', c.transcript_jsonl(a["id"]))

        self.assertEqual([t["name"] for t in c.tools()], ["bash", "job_output", "job_list", "job_kill", "write_stdin", "read_file", "write_file", "edit_file", "apply_patch"])
        self.assertEqual(c.tools("openai")[0]["type"], "function")
        self.assertIn("input_schema", c.tools("anthropic")[0])

        job = c.exec("sleep 30", background=True, idempotency_key="py-key-1")
        self.assertEqual(c.exec("sleep 30", background=True, idempotency_key="py-key-1")["id"], job["id"])
        self.assertIn(job["id"], [j["id"] for j in c.jobs(state="running")])
        self.assertEqual(c.job(job["id"], wait_ms=10)["state"], "running")
        with self.assertRaises(Problem) as plain:
            c.resize_job(job["id"], 80, 24)
        self.assertEqual((plain.exception.status, plain.exception.code), (409, "not_a_terminal"))
        self.assertIn(c.cancel_job(job["id"])["state"], ("running", "cancelled"))
        self.assertEqual(c.job(job["id"], wait_ms=10000)["state"], "cancelled")
        done = c.exec("printf 'a\\nb\\n'")
        self.assertEqual(c.job_output(done["id"], "stdout", 2), b"b\n")

        # Interactive jobs: input to an open pipe (text, then bytes and
        # close), a terminal resized and interrupted.
        piped = c.exec("cat", background=True, open_stdin=True)
        self.assertEqual(c.write_input(piped["id"], "hello ", timeout_ms=5000)["input"]["bytes"], 6)
        self.assertIsNone(c.write_input(piped["id"], "there ", minimal=True))
        c.write_input(piped["id"], b"\xffbin\n", close=True)
        self.assertEqual(c.job(piped["id"], wait_ms=10000)["state"], "exited")
        self.assertEqual(c.job_output(piped["id"], "stdout", 0), b"hello there \xffbin\n")
        term = c.exec("trap 'exit 5' INT; echo ready; while :; do sleep 0.05; done", background=True, tty=True,
                      cols=100, rows=30)
        self.assertEqual((term["terminal"]["cols"], term["terminal"]["rows"]), (100, 30))
        for _ in range(200):  # the trap is set once "ready" is out
            if b"ready" in c.job_output(term["id"], "stdout", 0):
                break
            time.sleep(0.05)
        resized = c.resize_job(term["id"], 132, 43)
        self.assertEqual((resized["terminal"]["cols"], resized["terminal"]["rows"]), (132, 43))
        c.signal_job(term["id"], "SIGINT")
        self.assertEqual(c.job(term["id"], wait_ms=10000)["exitCode"], 5)
        sandboxed = c.create_agent(sandbox={"policy": "unrestricted"})
        self.assertEqual(sandboxed["sandbox"]["policy"], "unrestricted")
        self.assertEqual(c.spawn_agent(sandboxed["id"], sandbox={"policy": "unrestricted"})["parentId"], sandboxed["id"])

        self.assertEqual(c.skills(), [])
        self.assertEqual(c.hooks(), [])
        with self.assertRaises(Problem) as bad:
            c.exec("true", env={"DSH_X": "1"})
        self.assertEqual((bad.exception.status, bad.exception.code), (400, "managed_key_in_env"))


class Workspaces(unittest.TestCase):
    """Snapshot workspaces, where the server says they work here."""

    def test_snapshot_fork_changes_apply_drop(self):
        c = server()
        ws = (c.health().get("details") or {}).get("workspaces") or {}
        if not ws.get("snapshot"):
            self.skipTest("snapshot workspaces unavailable: " + ws.get("reason", "not reported"))
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "f.txt"), "w") as f:
            f.write("base\n")
        parent = c.create_agent(cwd=d)
        one = c.fork_agent(parent["id"], workspace="snapshot")
        two = c.spawn_agent(parent["id"], workspace="snapshot")
        self.assertEqual(one["workspace"]["mode"], "snapshot")
        c.exec("echo one > f.txt", agent_id=one["id"])
        c.exec("echo two > f.txt", agent_id=two["id"])
        changes = c.workspace_changes(one["id"], diff=True)["changes"]
        self.assertEqual([(x["kind"], x["path"]) for x in changes], [("modified", "f.txt")])
        self.assertIn("+one", changes[0]["diff"])
        self.assertEqual(c.apply_workspace(one["id"])["parentId"], parent["id"])
        with self.assertRaises(Problem) as conflict:
            c.apply_workspace(two["id"])
        self.assertEqual((conflict.exception.code, conflict.exception.body.get("paths")), ("workspace_conflict", ["f.txt"]))
        self.assertEqual(c.exec("cat f.txt", agent_id=parent["id"])["stdout"]["text"], "one\n")
        c.drop_workspace(two["id"])
        with self.assertRaises(Problem) as dropped:
            c.exec("true", agent_id=two["id"])
        self.assertEqual(dropped.exception.code, "workspace_dropped")

    def test_checkpoints_rewind_fork_from(self):
        c = server()
        ws = (c.health().get("details") or {}).get("workspaces") or {}
        if not ws.get("snapshot"):
            self.skipTest("snapshot workspaces unavailable: " + ws.get("reason", "not reported"))
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "f.txt"), "w") as f:
            f.write("base\n")
        a = c.create_agent(cwd=d, workspace="snapshot")
        for i in (1, 2):
            c.call_tool(a["id"], "bash", {"command": "echo %d > f.txt" % i}, call_id="call_%d" % i)
        cps = c.checkpoints(a["id"], diff=True)["checkpoints"]
        self.assertEqual([x["callId"] for x in cps], ["call_1", "call_2"])
        self.assertIn("+2", cps[1]["changes"][0]["diff"])
        back = c.checkpoint_diff(a["id"], from_call_id="call_2", to_call_id="call_1", diff=True)["changes"]
        self.assertEqual([(x["kind"], x["path"]) for x in back], [("modified", "f.txt")])
        self.assertIn("-2\n+1", back[0]["diff"])
        c.rewind(a["id"], "call_2")
        self.assertEqual(c.exec("cat f.txt", agent_id=a["id"])["stdout"]["text"], "1\n")
        c.rewind(a["id"], undo=True)
        self.assertEqual(c.exec("cat f.txt", agent_id=a["id"])["stdout"]["text"], "2\n")
        child = c.fork_agent(a["id"], workspace="snapshot", from_call_id="call_1")
        self.assertEqual(c.exec("cat f.txt", agent_id=child["id"])["stdout"]["text"], "1\n")
        with open(os.path.join(d, "f.txt")) as f:
            self.assertEqual(f.read(), "base\n")


if __name__ == "__main__":
    unittest.main()


class Files(unittest.TestCase):
    """The file routes: upload from bytes and from a file, download to one,
    list, stat, mkdir, remove, tar in and out, a refusal with its code."""

    def test_files(self):
        c = server()
        d = tempfile.mkdtemp()
        a = c.create_agent(cwd=d, sandbox={"policy": "workspace-write"})["id"]
        self.assertEqual(c.upload_file(a, "src/main.txt", b"hello\n", mode=0o640, parents=True)["mode"], "0640")
        with tempfile.TemporaryFile() as f:
            f.write(b"x" * 300000)
            f.seek(0)
            self.assertEqual(c.upload_file(a, "big.bin", f)["size"], 300000)
        self.assertEqual(c.download_file(a, "src/main.txt"), b"hello\n")
        self.assertEqual(c.download_file(a, "src/main.txt", byte_range=(1, 3)), b"ell")
        out = io.BytesIO()
        c.download_file(a, "big.bin", out=out)
        self.assertEqual(out.getvalue(), b"x" * 300000)
        self.assertEqual(c.exec("cat src/main.txt", agent_id=a)["stdout"]["text"], "hello\n")
        listing = c.list_files(a, "", depth=2)
        self.assertIn(("src/main.txt", "file"), [(e["path"], e["type"]) for e in listing["entries"]])
        self.assertEqual(c.stat_file(a, "src")["type"], "directory")
        self.assertEqual(c.make_dir(a, "made/deep", parents=True)["path"], os.path.join(d, "made/deep"))

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            info = tarfile.TarInfo("pkg/run.sh")
            info.mode, info.size = 0o755, 8
            tf.addfile(info, io.BytesIO(b"echo ok\n"))
        self.assertEqual(c.upload_archive(a, "unpacked", buf.getvalue(), parents=True)["entries"], 1)
        with tarfile.open(fileobj=io.BytesIO(c.download_archive(a, "unpacked"))) as tf:
            self.assertEqual({m.name: oct(m.mode) for m in tf.getmembers()}, {"pkg": "0o755", "pkg/run.sh": "0o755"})

        with self.assertRaises(Problem) as refused:
            c.upload_file(a, "/etc/dshd-python-client", b"x")
        self.assertEqual((refused.exception.status, refused.exception.code), (403, "path_not_writable"))
        with self.assertRaises(Problem) as full:
            c.remove_file(a, "made")
        self.assertEqual(full.exception.code, "directory_not_empty")
        c.remove_file(a, "made", recursive=True)
        self.assertFalse(os.path.exists(os.path.join(d, "made")))

        moved = c.move_file(a, "big.bin", "moved/big.bin", parents=True)
        self.assertEqual(moved, {"from": os.path.join(d, "big.bin"), "path": os.path.join(d, "moved/big.bin")})
        with self.assertRaises(Problem) as exists:
            c.move_file(a, "src/main.txt", "moved/big.bin")
        self.assertEqual((exists.exception.status, exists.exception.code), (409, "path_exists"))
        c.move_file(a, "src/main.txt", "moved/big.bin", overwrite=True)
        self.assertEqual(c.download_file(a, "moved/big.bin"), b"hello\n")

    def test_watch(self):
        c = server()
        d = tempfile.mkdtemp()
        a = c.create_agent(cwd=d, sandbox={"policy": "workspace-write"})["id"]
        seen = []

        def until(stream, want):
            for ev in stream:
                got = f"{ev.type} {ev.from_path}>{ev.path}" if ev.type == "renamed" else f"{ev.type} {ev.path}"
                self.assertNotEqual(ev.type, "overflow", ev.reason)
                seen.append(got)
                if got == want:
                    return ev
            self.fail(f"the stream ended before {want!r}; saw {seen}")

        stream = c.follow_watch(a, "", recursive=True)  # in place when it returns
        c.exec("mkdir w && echo x > w/a && mv w/a w/b", agent_id=a)
        until(stream, "created w")
        last = until(stream, "renamed w/a>w/b")
        stream.close()
        c.exec("rm w/b", agent_id=a)
        # Resumed after the rename: the removal made while away comes first.
        events = c.watch_files(a, "", recursive=True, last_event_id=last.id)
        ev = next(events)
        self.assertEqual((ev.type, ev.path), ("deleted", "w/b"))
        events.close()
        with self.assertRaises(Problem) as hidden:
            c.follow_watch(a, "/proc")
        self.assertEqual((hidden.exception.status, hidden.exception.code), (403, "path_hidden"))
