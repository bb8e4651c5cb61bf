#!/usr/bin/env python3
"""A minimal dshd harness, standard library only, using the dshd Python client
(clients/python: `pip install ./clients/python`, or run from this repository).

It creates an agent, fetches the model tool definitions in OpenAI's format,
then runs a model loop: every tool call the model asks for is sent to
POST /agents/{id}/tools/{name} and the result is handed back to the model,
until the model stops calling tools.

The model is pluggable: any function model(tools, messages) -> list of tool
calls ({"id", "name", "arguments"}), returning an empty list when done.
arguments is passed on as the model gave it: an object, or the JSON string
OpenAI's APIs deliver. The built-in scripted model makes the kind of mistake
models make (a timeout of "30s", not milliseconds), reads the error result
dshd answers, and corrects the call: `echo "$DSH_SESSION_ID"` prints the
agent's own id.

A tool result with isError set is the model's to read, not the harness's
failure: dshd answers the model's mistakes (bad arguments, a missing
directory, an unknown job) that way and records them in the transcript.

Environment:
  DSHD_URL         base URL of the server (default http://127.0.0.1:7433,
                   dshd's default address)
  DSHD_TOKEN       bearer token; or
  DSHD_TOKEN_FILE  file holding it (default $DSH_HOME/server.token,
                   else ~/.dsh/server.token)

Prints progress to stderr and, last, one JSON line to stdout:
  {"agentId": ..., "results": [{callId, isError, text, jobId?, exitCode?}, ...]}
Exits non-zero when the harness fails (the server refuses a request, the
token is missing, the model never stops) or the last result is an error.
"""

import json
import os
import sys

try:
    from dshd import Client, Problem
except ImportError:  # not installed: use the client from this repository
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
    from dshd import Client, Problem


class DshdError(Exception):
    """A harness-level failure (the model misbehaved, the token is missing)."""


def scripted_model(tools, messages):
    """A stand-in for a real model: a mistaken bash call, its correction, done.

    tools is the OpenAI-format tool list; messages is the conversation so far
    (dicts with "role"). Returns the tool calls to make next, with arguments
    as a JSON string, as OpenAI's APIs give them.
    """
    names = {t["function"]["name"] for t in tools}
    if "bash" not in names:
        raise DshdError("server offers no bash tool")
    results = [m for m in messages if m["role"] == "tool"]
    command = {"command": 'echo "$DSH_SESSION_ID"', "description": "Print my own session id"}
    if not results:
        return [{"id": "call_scripted_1", "name": "bash", "arguments": json.dumps({**command, "timeout": "30s"})}]
    if len(results) == 1 and results[0]["is_error"]:
        # The error result says what was wrong: timeout is in milliseconds.
        return [{"id": "call_scripted_2", "name": "bash", "arguments": json.dumps({**command, "timeout": 30000})}]
    return []


def run(client, model, max_turns=8):
    """Create an agent and drive model until it stops; return the summary."""
    agent = client.create_agent()
    agent_id = agent["id"]
    print(f"agent {agent_id}", file=sys.stderr)
    tools = client.tools("openai")
    messages = [{"role": "user", "content": "Who am I?"}]
    results = []
    for _ in range(max_turns):
        calls = model(tools, messages)
        if not calls:
            break
        messages.append({"role": "assistant", "tool_calls": calls})
        for call in calls:
            res = client.call_tool(agent_id, call["name"], call["arguments"], call_id=call["id"])
            print(f"{call['name']} {json.dumps(call['arguments'])} -> {json.dumps(res)}", file=sys.stderr)
            results.append(res)
            # An error result goes back to the model like any other.
            messages.append({"role": "tool", "tool_call_id": res["callId"], "content": res["text"], "is_error": res["isError"]})
    else:
        raise DshdError(f"model still calling tools after {max_turns} turns")
    return {"agentId": agent_id, "results": results}


def read_token(env):
    token = env.get("DSHD_TOKEN", "").strip()
    if token:
        return token
    path = env.get("DSHD_TOKEN_FILE")
    if not path:
        home = env.get("DSH_HOME") or os.path.join(os.path.expanduser("~"), ".dsh")
        path = os.path.join(home, "server.token")
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise DshdError(f"no DSHD_TOKEN and cannot read token file {path}: {e}") from None
    if not token:
        raise DshdError(f"token file {path} is empty")
    return token


def main(env=os.environ, model=scripted_model):
    try:
        url = env.get("DSHD_URL", "").strip() or "http://127.0.0.1:7433"
        client = Client(url, read_token(env))
        summary = run(client, model)
    except (Problem, DshdError, OSError) as e:  # the harness's failure, not the model's
        print(f"harness: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    results = summary["results"]
    if results and results[-1].get("isError"):
        print("harness: the model ended on an error result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
