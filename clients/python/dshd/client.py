"""The dshd HTTP client. Standard library only."""

import base64
import http.client
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Union, cast

from .contributors import Contributor, parse_contributor
from .transcript import Transcript, parse_transcript

JSON = Dict[str, Any]


class Problem(Exception):
    """An error answered by dshd: RFC 9457 problem details.

    ``status`` is the HTTP status, ``code`` the machine-readable code
    (``duplicate_contributor``, ``unauthorized``, ``too_many_jobs``, …),
    ``body`` the whole problem object (``errors``, ``owner``, ``contributor``,
    ``reason`` … when the server gives them). A failure to reach the server
    or an answer that is not problem+json is a Problem with code
    ``transport`` or ``unexpected_response``.
    """

    def __init__(self, status: int, code: str, title: str, detail: str = "", body: Optional[JSON] = None):
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.body = body or {}
        super().__init__(f"{status} {code}: {detail or title}")

    @property
    def retry_after(self) -> Optional[int]:
        """Seconds to wait before retrying (429), when the server said."""
        v = self.body.get("_retryAfter")
        return int(v) if v else None


@dataclass(frozen=True)
class OutputEvent:
    """One server-sent event of a job's output.

    ``event`` is ``stdout``, ``stderr`` or ``exit``. Output events carry the
    chunk's exact bytes in ``data``; the exit event carries the finished job
    in ``job``. ``id`` is the event id to resume from.
    """

    id: str
    event: str
    data: bytes = b""
    job: Optional[JSON] = None


class OutputStream:
    """An iterator over a job's output events, on one connection.

    ``last_event_id`` is the id of the last event read: pass it to
    ``Client.follow_output`` to resume on a new connection without losing
    or repeating a byte. ``close()`` drops the connection.
    """

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, last_event_id: Optional[str]):
        self._conn = conn
        self._resp = resp
        self.last_event_id = last_event_id
        self.done = resp.status == 204  # the job had ended at last_event_id

    def __iter__(self) -> Iterator[OutputEvent]:
        return self

    def __next__(self) -> OutputEvent:
        if self.done:
            raise StopIteration
        ev_id: Optional[str] = None
        name: Optional[str] = None
        data: List[str] = []
        while True:
            line = self._resp.readline()
            if not line:  # the connection ended before the exit event
                self.close()
                raise StopIteration
            line = line.rstrip(b"\r\n").decode("utf-8")
            if line == "":
                if name is None and not data:
                    continue  # comments and retry lines only
                break
            if line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "id":
                ev_id = value
            elif key == "event":
                name = value
            elif key == "data":
                data.append(value)
        payload: Any = json.loads("\n".join(data)) if data else None
        if ev_id is not None:
            self.last_event_id = ev_id
        if name == "exit":
            self.done = True
            self.close()
            return OutputEvent(ev_id or "", "exit", b"", payload)
        if isinstance(payload, str):
            chunk = payload.encode("utf-8")
        elif isinstance(payload, dict) and "base64" in payload:
            chunk = base64.b64decode(str(cast(JSON, payload)["base64"]))
        else:
            chunk = b""
        return OutputEvent(ev_id or "", name or "message", chunk)

    def close(self) -> None:
        self._conn.close()


@dataclass(frozen=True)
class WatchEvent:
    """One change of a watched directory (``Client.watch_files``).

    ``type`` is ``created``, ``modified``, ``deleted``, ``renamed`` (with
    ``from_path``) or ``overflow`` (events were lost: list the directory
    again; ``reason`` says why). ``path`` is relative to the watched
    directory. ``id`` is the event id to resume after.
    """

    id: str
    type: str
    path: str = ""
    from_path: str = ""
    is_dir: bool = False
    reason: str = ""


class WatchStream:
    """An iterator over a watch's events, on one connection.

    ``last_event_id`` is the id of the last event read: pass it to
    ``Client.follow_watch`` to resume on a new connection. The iteration
    ends when the connection does, or after the ``deleted`` event of the
    watched directory itself (``done``). ``close()`` drops the connection.
    """

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, last_event_id: Optional[str]):
        self._conn = conn
        self._resp = resp
        self.last_event_id = last_event_id
        self.done = False

    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __next__(self) -> WatchEvent:
        if self.done:
            raise StopIteration
        ev_id: Optional[str] = None
        data: List[str] = []
        while True:
            try:
                line = self._resp.readline()
            except (OSError, ValueError):
                line = b""
            if not line:
                self.close()
                raise StopIteration
            text = line.rstrip(b"\r\n").decode("utf-8")
            if text == "":
                if not data:
                    continue
                break
            if text.startswith(":"):
                continue
            key, _, value = text.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "id":
                ev_id = value
            elif key == "data":
                data.append(value)
        d = cast(JSON, json.loads("\n".join(data)))
        if ev_id is not None:
            self.last_event_id = ev_id
        ev = WatchEvent(ev_id or "", str(d.get("type", "")), str(d.get("path", "")), str(d.get("from", "")),
                        bool(d.get("isDir", False)), str(d.get("reason", "")))
        if ev.type == "deleted" and ev.path == ".":
            self.done = True
        return ev

    def close(self) -> None:
        self._conn.close()


class Client:
    """A client for one dshd server.

    ``base_url`` is ``http://host:port``; ``token`` the bearer token (the
    server's startup line says which file holds it). Methods return the JSON objects the contract
    describes (dicts with camelCase keys), raise Problem for every error, and
    take ids as strings.
    """

    def __init__(self, base_url: str, token: str, timeout: float = 660.0):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"base_url must be http://host:port, not {base_url!r}")
        self._host, self._port = u.hostname, u.port or 80
        self._prefix = u.path.rstrip("/")
        self.token = token
        self.timeout = timeout

    # -- plumbing -------------------------------------------------------

    def _connect(self, timeout: Optional[float] = None) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout or self.timeout)

    def _send(self, method: str, path: str, body: Any = None, query: Optional[JSON] = None,
              headers: Optional[Dict[str, str]] = None, auth: bool = True) -> "tuple[http.client.HTTPResponse, bytes]":
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                path += "?" + urllib.parse.urlencode(q)
        h = {"Accept": "application/json"}
        if auth:
            h["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        conn = self._connect()
        try:
            conn.request(method, self._prefix + path, body=data, headers=h)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Problem(0, "transport", f"{method} {path}: {e!r}") from None
        conn.close()
        if resp.status >= 400:
            raise _problem(resp, raw, method, path)
        return resp, raw

    def _json(self, method: str, path: str, body: Any = None, query: Optional[JSON] = None,
              headers: Optional[Dict[str, str]] = None, auth: bool = True) -> Any:
        _, raw = self._send(method, path, body, query, headers, auth)
        if not raw:
            return None
        return json.loads(raw)

    @staticmethod
    def _q(s: str) -> str:
        return urllib.parse.quote(s, safe="")

    # -- system ---------------------------------------------------------

    def health(self) -> JSON:
        """GET /healthz (no token needed)."""
        return self._json("GET", "/healthz", auth=False)

    def openapi_yaml(self) -> str:
        """GET /openapi.yaml: the contract as written."""
        return self._send("GET", "/openapi.yaml", auth=False)[1].decode("utf-8")

    def openapi(self) -> JSON:
        """GET /openapi.json: the contract as JSON."""
        return self._json("GET", "/openapi.json", auth=False)

    def metrics(self) -> str:
        """GET /metrics: Prometheus text."""
        return self._send("GET", "/metrics", headers={"Accept": "text/plain"})[1].decode("utf-8")

    def ui_login_url(self) -> JSON:
        """POST /ui/login-codes: ``{url, expiresAt}``, a one-time login URL of
        the diagnostics UI (its code works once, within 60 seconds)."""
        return self._json("POST", "/ui/login-codes")

    # -- environment ----------------------------------------------------

    def declarations(self) -> JSON:
        """GET /env/declarations: {prefix, declarations}. Runs no resolver."""
        return self._json("GET", "/env/declarations")

    def contributors(self) -> List[Contributor]:
        """GET /contributors, typed by kind (BuiltinContributor,
        StaticContributor, TemplateContributor, WebhookContributor)."""
        return [parse_contributor(c) for c in self._json("GET", "/contributors")]

    def register_contributor(self, name: str, keys: List[JSON], resolver: JSON,
                             plugin: Optional[str] = None) -> Contributor:
        """POST /contributors. keys: [{key, description}]; resolver: {kind:
        static|template|webhook, values? | url?, timeoutMs?}. Returns the typed
        contributor. Raises Problem 409 duplicate_contributor / key_owned, 422
        reserved_key / invalid_declaration, 404 plugin_not_found."""
        body: JSON = {"name": name, "keys": keys, "resolver": resolver}
        if plugin is not None:
            body["plugin"] = plugin
        return parse_contributor(self._json("POST", "/contributors", body))

    def contributor(self, name: str) -> Contributor:
        """GET /contributors/{name}, typed by kind."""
        return parse_contributor(self._json("GET", "/contributors/" + self._q(name)))

    def delete_contributor(self, name: str) -> None:
        self._send("DELETE", "/contributors/" + self._q(name))

    def plugins(self) -> List[JSON]:
        return self._json("GET", "/plugins")

    def open_plugin(self, name: str, lease_seconds: Optional[int] = None) -> JSON:
        body: JSON = {"name": name}
        if lease_seconds is not None:
            body["leaseSeconds"] = lease_seconds
        return self._json("POST", "/plugins", body)

    def plugin(self, plugin_id: str) -> JSON:
        return self._json("GET", "/plugins/" + self._q(plugin_id))

    def renew_plugin(self, plugin_id: str, lease_seconds: Optional[int] = None) -> JSON:
        body = {} if lease_seconds is None else {"leaseSeconds": lease_seconds}
        return self._json("POST", f"/plugins/{self._q(plugin_id)}/renew", body)

    def close_plugin(self, plugin_id: str) -> None:
        self._send("DELETE", "/plugins/" + self._q(plugin_id))

    # -- agents ---------------------------------------------------------

    def agents(self) -> List[JSON]:
        return self._json("GET", "/agents")

    def create_agent(self, cwd: Optional[str] = None, sandbox: Optional[JSON] = None,
                     limits: Optional[JSON] = None, workspace: Optional[str] = None) -> JSON:
        """POST /agents. sandbox: {policy?, network?}; limits: {pids?,
        memoryBytes?, cpu?} (see the contract). workspace "snapshot" gives the
        agent a copy-on-write view of cwd from its creation, with a checkpoint
        after each tool call. The answer's sessionStart holds what
        SessionStart hooks offered the model (additionalContext,
        systemMessages); the agent's next tool result carries it too."""
        return self._json("POST", "/agents", _body(cwd=cwd, sandbox=sandbox, limits=limits, workspace=workspace))

    def agent(self, agent_id: str) -> JSON:
        return self._json("GET", "/agents/" + self._q(agent_id))

    def resume_agent(self, agent_id: str) -> JSON:
        return self._json("POST", f"/agents/{self._q(agent_id)}/resume")

    def fork_agent(self, agent_id: str, boundary: Optional[int] = None, sandbox: Optional[JSON] = None,
                   limits: Optional[JSON] = None, workspace: Optional[str] = None,
                   from_call_id: Optional[str] = None) -> JSON:
        """POST /agents/{id}/fork. sandbox and limits may only tighten the
        parent's; workspace is "shared" (default) or "snapshot"; from_call_id
        (with workspace "snapshot") starts from that tool call's checkpoint."""
        return self._json("POST", f"/agents/{self._q(agent_id)}/fork",
                          _body(boundary=boundary, sandbox=sandbox, limits=limits, workspace=workspace,
                                fromCallId=from_call_id))

    def spawn_agent(self, agent_id: str, sandbox: Optional[JSON] = None, limits: Optional[JSON] = None,
                    workspace: Optional[str] = None, from_call_id: Optional[str] = None) -> JSON:
        """POST /agents/{id}/spawn. sandbox and limits may only tighten the
        parent's; workspace is "shared" (default) or "snapshot"; from_call_id
        as for fork_agent."""
        return self._json("POST", f"/agents/{self._q(agent_id)}/spawn",
                          _body(sandbox=sandbox, limits=limits, workspace=workspace, fromCallId=from_call_id))

    def checkpoints(self, agent_id: str, diff: bool = False) -> JSON:
        """GET /agents/{id}/checkpoints: a snapshot agent's checkpoints,
        oldest first, each with the changes its calls made."""
        return self._json("GET", f"/agents/{self._q(agent_id)}/checkpoints",
                          query={"diff": "true" if diff else None})

    def checkpoint_diff(self, agent_id: str, from_call_id: Optional[str] = None,
                        to_call_id: Optional[str] = None, diff: bool = False) -> JSON:
        """GET /agents/{id}/checkpoints/diff: what differs between the view
        after the call from_call_id (None: before the first checkpoint) and
        after to_call_id (None: after the last), either way round; with
        unified diffs of text files if diff."""
        return self._json("GET", f"/agents/{self._q(agent_id)}/checkpoints/diff",
                          query={"from": from_call_id, "to": to_call_id, "diff": "true" if diff else None})

    def rewind(self, agent_id: str, call_id: Optional[str] = None, to: Optional[str] = None,
               undo: Optional[bool] = None) -> JSON:
        """POST /agents/{id}/rewind: the agent's view as it was before (to
        "before", the default) or after ("after") the tool call call_id; or
        undo=True to undo the last rewind."""
        return self._json("POST", f"/agents/{self._q(agent_id)}/rewind", _body(callId=call_id, to=to, undo=undo))

    def workspace_changes(self, agent_id: str, diff: bool = False) -> JSON:
        """GET /agents/{id}/workspace/changes: what a snapshot agent changed
        since its fork (with unified diffs of text files if diff)."""
        return self._json("GET", f"/agents/{self._q(agent_id)}/workspace/changes",
                          query={"diff": "true" if diff else None})

    def apply_workspace(self, agent_id: str, directory: Optional[str] = None) -> JSON:
        """POST /agents/{id}/workspace/apply: the agent's changes onto its
        parent's view (or directory), all or nothing; a conflict raises
        with code workspace_conflict and the paths."""
        return self._json("POST", f"/agents/{self._q(agent_id)}/workspace/apply", _body(directory=directory))

    def drop_workspace(self, agent_id: str) -> None:
        """DELETE /agents/{id}/workspace: drop the agent's snapshot."""
        self._send("DELETE", f"/agents/{self._q(agent_id)}/workspace")

    def transcript(self, agent_id: str) -> Transcript:
        """GET /agents/{id}/transcript as typed events."""
        return parse_transcript(self._json("GET", f"/agents/{self._q(agent_id)}/transcript"))

    def transcript_jsonl(self, agent_id: str) -> str:
        """GET /agents/{id}/transcript as stored (JSON lines)."""
        return self._send("GET", f"/agents/{self._q(agent_id)}/transcript",
                          headers={"Accept": "application/x-ndjson"})[1].decode("utf-8")

    # -- tools ----------------------------------------------------------

    def tools(self, format: Optional[str] = None) -> List[JSON]:
        """GET /tools; format: generic (default), openai, openai-strict, openai-responses or anthropic."""
        return self._json("GET", "/tools", query={"format": format})

    def call_tool(self, agent_id: str, name: str, arguments: Union[JSON, str], call_id: Optional[str] = None) -> JSON:
        """POST /agents/{id}/tools/{name}: {callId, isError, text, jobId?,
        exitCode?, additionalContext?, systemMessages?}. ``arguments`` are the
        model's, an object or the JSON string OpenAI's APIs deliver; a mistake
        in them is a result with isError, for the model."""
        body: JSON = {"arguments": arguments}
        if call_id is not None:
            body["callId"] = call_id
        return self._json("POST", f"/agents/{self._q(agent_id)}/tools/{self._q(name)}", body)

    # -- jobs -----------------------------------------------------------

    def exec(self, command: str, agent_id: Optional[str] = None, cwd: Optional[str] = None,
             env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None, timeout_ms: Optional[int] = None,
             background: bool = False, yield_ms: Optional[int] = None, idempotency_key: Optional[str] = None,
             sandbox: Optional[JSON] = None, limits: Optional[JSON] = None, tty: bool = False,
             cols: Optional[int] = None, rows: Optional[int] = None, open_stdin: bool = False) -> JSON:
        """POST /exec: the finished (or yielded, or background) job. tty runs
        it in a pseudo-terminal of cols x rows; open_stdin keeps its stdin
        pipe open for write_input."""
        body: JSON = {"command": command}
        for k, v in (("agentId", agent_id), ("cwd", cwd), ("env", env), ("stdin", stdin),
                     ("timeoutMs", timeout_ms), ("yieldMs", yield_ms), ("sandbox", sandbox),
                     ("limits", limits), ("cols", cols), ("rows", rows)):
            if v is not None:
                body[k] = v
        for k, on in (("background", background), ("tty", tty), ("openStdin", open_stdin)):
            if on:
                body[k] = True
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self._json("POST", "/exec", body, headers=headers)

    def jobs(self, agent_id: Optional[str] = None, state: Optional[str] = None) -> List[JSON]:
        return self._json("GET", "/jobs", query={"agentId": agent_id, "state": state})

    def job(self, job_id: str, wait_ms: Optional[int] = None) -> JSON:
        """GET /jobs/{id}; with wait_ms, waits up to that long for it to end."""
        return self._json("GET", "/jobs/" + self._q(job_id), query={"waitMs": wait_ms})

    def cancel_job(self, job_id: str) -> JSON:
        return self._json("DELETE", "/jobs/" + self._q(job_id))

    def write_input(self, job_id: str, data: Union[str, bytes, None] = None, close: bool = False,
                    timeout_ms: Optional[int] = None, minimal: bool = False) -> Optional[JSON]:
        """POST /jobs/{id}/stdin: write data (text, or any bytes) to a running
        job started with tty or open_stdin, then with close end its input. The
        answer is the job, or None with minimal (Prefer: return=minimal: the
        server sends no job back, as for every key of a terminal). Raises
        Problem 409 input_blocked (the program did not take the bytes in
        time), input_closed, not_running ...."""
        body: JSON = {}
        if isinstance(data, bytes):
            body["base64"] = base64.b64encode(data).decode("ascii")
        elif data is not None:
            body["data"] = data
        if close:
            body["close"] = True
        if timeout_ms is not None:
            body["timeoutMs"] = timeout_ms
        headers = {"Prefer": "return=minimal"} if minimal else None
        return self._json("POST", f"/jobs/{self._q(job_id)}/stdin", body, headers=headers)

    def resize_job(self, job_id: str, cols: int, rows: int) -> JSON:
        """POST /jobs/{id}/resize: the terminal's new size (409 not_a_terminal
        for a job without one). The answer is the job."""
        return self._json("POST", f"/jobs/{self._q(job_id)}/resize", {"cols": cols, "rows": rows})

    def signal_job(self, job_id: str, signal: str) -> JSON:
        """POST /jobs/{id}/signal: send signal (SIGINT, SIGTERM, SIGKILL, ...)
        to the running job's processes. The answer is the job."""
        return self._json("POST", f"/jobs/{self._q(job_id)}/signal", {"signal": signal})

    def job_output(self, job_id: str, stream: str = "stdout", offset: int = 0) -> bytes:
        """GET /jobs/{id}/output?stream=&offset=: raw bytes written so far."""
        return self._send("GET", f"/jobs/{self._q(job_id)}/output", query={"stream": stream, "offset": offset},
                          headers={"Accept": "application/octet-stream"})[1]

    def follow_output(self, job_id: str, last_event_id: Optional[str] = None) -> OutputStream:
        """GET /jobs/{id}/output as server-sent events, from last_event_id
        (None: from the start). Iterate the stream for OutputEvents; it ends
        after the exit event. See also ``output``, which reconnects itself."""
        h = {"Authorization": "Bearer " + self.token, "Accept": "text/event-stream"}
        if last_event_id:
            h["Last-Event-ID"] = last_event_id
        path = f"/jobs/{self._q(job_id)}/output"
        conn = self._connect()
        try:
            conn.request("GET", self._prefix + path, headers=h)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Problem(0, "transport", f"GET {path}: {e!r}") from None
        if resp.status >= 400:
            raw = resp.read()
            conn.close()
            raise _problem(resp, raw, "GET", path)
        return OutputStream(conn, resp, last_event_id)

    def output(self, job_id: str, last_event_id: Optional[str] = None, max_reconnects: int = 10) -> Iterator[OutputEvent]:
        """Every output event of the job until its exit event, reconnecting
        with Last-Event-ID when a connection drops (at most max_reconnects
        times in a row without progress)."""
        failures = 0
        while True:
            stream = None
            try:
                stream = self.follow_output(job_id, last_event_id)
                for ev in stream:
                    failures = 0
                    yield ev
                if stream.done:
                    return
            except (OSError, http.client.HTTPException):
                pass
            except Problem as p:
                if p.code != "transport":
                    raise
            if stream is not None:
                last_event_id = stream.last_event_id
                stream.close()
            failures += 1
            if failures > max_reconnects:
                raise Problem(0, "transport", f"output of {job_id}: gave up after {max_reconnects} reconnects")

    # -- files ----------------------------------------------------------

    def _stream(self, method: str, path: str, body: Union[bytes, BinaryIO, None] = None,
                query: Optional[JSON] = None, headers: Optional[Dict[str, str]] = None,
                out: Optional[BinaryIO] = None) -> bytes:
        """Send bytes or a binary file (streamed) and return the answer's
        bytes, or with ``out`` copy them into it and return b""."""
        if query:
            q = {k: ("true" if v is True else v) for k, v in query.items() if v is not None and v is not False}
            if q:
                path += "?" + urllib.parse.urlencode(q)
        h = {"Authorization": "Bearer " + self.token}
        h.update(headers or {})
        conn = self._connect()
        try:
            conn.request(method, self._prefix + path, body=body, headers=h)
            resp = conn.getresponse()
            if resp.status >= 400:
                raise _problem(resp, resp.read(), method, path)
            if out is None:
                return resp.read()
            while True:
                chunk = resp.read(1 << 20)
                if not chunk:
                    return b""
                out.write(chunk)
        except (OSError, http.client.HTTPException) as e:
            raise Problem(0, "transport", f"{method} {path}: {e!r}") from None
        finally:
            conn.close()

    def _file_path(self, agent_id: str, route: str, path: str) -> str:
        # Slashes stay: {path} is a path, relative to the agent's cwd or absolute.
        return f"/agents/{self._q(agent_id)}/{route}/" + urllib.parse.quote(path, safe="/")

    def upload_file(self, agent_id: str, path: str, data: Union[bytes, BinaryIO], mode: Optional[int] = None,
                    parents: bool = False) -> JSON:
        """PUT /agents/{id}/files/{path}: write data (bytes, or a binary
        file streamed from where it stands) to path, atomically; mode is
        octal permission bits (0o755), parents makes the missing directories."""
        q: JSON = {"mode": None if mode is None else format(mode, "o"), "parents": parents}
        raw = self._stream("PUT", self._file_path(agent_id, "files", path), data, q,
                           {"Content-Type": "application/octet-stream"})
        return cast(JSON, json.loads(raw))

    def download_file(self, agent_id: str, path: str, out: Optional[BinaryIO] = None,
                      byte_range: Optional["tuple[int, int]"] = None) -> bytes:
        """GET /agents/{id}/files/{path}: a file's bytes (into ``out`` when
        given); byte_range=(first, last) asks for those bytes only."""
        h = {"Accept": "application/octet-stream"}
        if byte_range is not None:
            h["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        return self._stream("GET", self._file_path(agent_id, "files", path), headers=h, out=out)

    def list_files(self, agent_id: str, path: str = "", depth: Optional[int] = None) -> JSON:
        """GET /agents/{id}/files/{path} of a directory: its listing
        (``entries``, ``truncated``), depth levels down (default 1)."""
        return cast(JSON, json.loads(self._stream("GET", self._file_path(agent_id, "files", path), query={"depth": depth})))

    def stat_file(self, agent_id: str, path: str) -> JSON:
        """GET /agents/{id}/files/{path}?stat=true: what the path is."""
        return cast(JSON, json.loads(self._stream("GET", self._file_path(agent_id, "files", path), query={"stat": True})))

    def remove_file(self, agent_id: str, path: str, recursive: bool = False) -> None:
        """DELETE /agents/{id}/files/{path}: a file, a link, an empty
        directory, or with recursive a tree."""
        self._stream("DELETE", self._file_path(agent_id, "files", path), query={"recursive": recursive})

    def make_dir(self, agent_id: str, path: str, mode: Optional[int] = None, parents: bool = False) -> JSON:
        """POST /agents/{id}/files/{path}?op=mkdir."""
        q: JSON = {"op": "mkdir", "mode": None if mode is None else format(mode, "o"), "parents": parents}
        return cast(JSON, json.loads(self._stream("POST", self._file_path(agent_id, "files", path), query=q)))

    def move_file(self, agent_id: str, path: str, to: str, overwrite: bool = False, parents: bool = False) -> JSON:
        """POST /agents/{id}/files/{path}?op=move&to=: rename path to ``to``
        (409 path_exists when it exists, unless overwrite); the answer is
        ``{from, path}``."""
        q: JSON = {"op": "move", "to": to, "overwrite": overwrite, "parents": parents}
        return cast(JSON, json.loads(self._stream("POST", self._file_path(agent_id, "files", path), query=q)))

    def follow_watch(self, agent_id: str, path: str = "", recursive: bool = False,
                     last_event_id: Optional[str] = None) -> WatchStream:
        """GET /agents/{id}/files/{path}?watch=true: the directory's changes
        as a WatchStream on one connection, after last_event_id when given.
        The watch is in place when this returns. See also ``watch_files``,
        which reconnects itself."""
        h = {"Authorization": "Bearer " + self.token, "Accept": "text/event-stream"}
        if last_event_id:
            h["Last-Event-ID"] = last_event_id
        q = {"watch": "true"}
        if recursive:
            q["recursive"] = "true"
        target = self._file_path(agent_id, "files", path) + "?" + urllib.parse.urlencode(q)
        conn = self._connect()
        try:
            conn.request("GET", self._prefix + target, headers=h)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Problem(0, "transport", f"GET {target}: {e!r}") from None
        if resp.status >= 400:
            raw = resp.read()
            conn.close()
            raise _problem(resp, raw, "GET", target)
        return WatchStream(conn, resp, last_event_id)

    def watch_files(self, agent_id: str, path: str = "", recursive: bool = False,
                    last_event_id: Optional[str] = None, max_reconnects: int = 10) -> Iterator[WatchEvent]:
        """The directory's changes, for as long as the caller iterates,
        reconnecting with Last-Event-ID when a connection drops (at most
        max_reconnects times in a row without an event): what happened
        meanwhile comes on the new connection, or an ``overflow`` event
        when the server no longer has it."""
        failures = 0
        while True:
            stream = None
            try:
                stream = self.follow_watch(agent_id, path, recursive, last_event_id)
                for ev in stream:
                    failures = 0
                    yield ev
                if stream.done:
                    return
            except (OSError, http.client.HTTPException):
                pass
            except Problem as p:
                if p.code != "transport":
                    raise
            finally:
                if stream is not None:
                    last_event_id = stream.last_event_id
                    stream.close()
            failures += 1
            if failures > max_reconnects:
                raise Problem(0, "transport", f"watch of {path!r}: gave up after {max_reconnects} reconnects")

    def upload_archive(self, agent_id: str, path: str, tar: Union[bytes, BinaryIO], parents: bool = False) -> JSON:
        """PUT /agents/{id}/archive/{path}: unpack a tar stream (bytes or a
        binary file) into the directory path."""
        raw = self._stream("PUT", self._file_path(agent_id, "archive", path), tar, {"parents": parents},
                           {"Content-Type": "application/x-tar"})
        return cast(JSON, json.loads(raw))

    def download_archive(self, agent_id: str, path: str = "", out: Optional[BinaryIO] = None) -> bytes:
        """GET /agents/{id}/archive/{path}: the tree as a tar stream (into
        ``out`` when given)."""
        return self._stream("GET", self._file_path(agent_id, "archive", path), out=out)

    # -- configuration --------------------------------------------------

    def skills(self) -> List[JSON]:
        return self._json("GET", "/skills")

    def hooks(self) -> List[JSON]:
        return self._json("GET", "/hooks")


def _body(**fields: Any) -> JSON:
    """A request body of the fields given, without the None ones."""
    return {k: v for k, v in fields.items() if v is not None}


def _problem(resp: http.client.HTTPResponse, raw: bytes, method: str, path: str) -> Problem:
    try:
        parsed: Any = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or "code" not in parsed:
        return Problem(resp.status, "unexpected_response", f"{method} {path}: HTTP {resp.status}", raw[:200].decode("utf-8", "replace"))
    body = cast(JSON, parsed)
    if resp.getheader("Retry-After"):
        body["_retryAfter"] = resp.getheader("Retry-After")
    return Problem(resp.status, str(body["code"]), str(body.get("title", "")), str(body.get("detail", "")), body)
