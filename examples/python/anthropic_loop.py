#!/usr/bin/env python3
"""An agent loop: a model on the Anthropic Messages API, its tools run by dshd.

Standard library only (urllib for the model, the dshd Python client for dshd).
It creates a dshd agent, hands the model dshd's tools in Anthropic's format
(GET /tools?format=anthropic), and loops: each tool_use block the model sends
goes to POST /agents/{id}/tools/{name} with the block's id as callId, and the
result goes back as a tool_result (is_error set when dshd says the model's
call was wrong, so the model corrects itself), until the model stops asking.

    ANTHROPIC_API_KEY=... DSHD_TOKEN_FILE=~/.dsh/server.token \\
        python3 anthropic_loop.py "Which directory am I in?"

Environment:
  ANTHROPIC_API_KEY   the API key
  ANTHROPIC_BASE_URL  the API's base URL (default https://api.anthropic.com)
  ANTHROPIC_MODEL     the model (default claude-sonnet-4-5)
  DSHD_URL            dshd's base URL (default http://127.0.0.1:7433)
  DSHD_TOKEN          dshd's bearer token; or
  DSHD_TOKEN_FILE     the file holding it (default ~/.dsh/server.token)

Prints "agent <id>" first, each tool call and its result, then the model's
final text.
"""

import json
import os
import sys
import urllib.request
from typing import Any, Dict, List

try:
    from dshd import Client
except ImportError:  # not installed: use the client from this repository
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
    from dshd import Client

JSON = Dict[str, Any]


def create_message(base_url: str, api_key: str, body: JSON) -> JSON:
    """POST /v1/messages, and the decoded answer."""
    req = urllib.request.Request(
        base_url.rstrip("/") + "/v1/messages",
        data=json.dumps(body).encode("utf-8"),
        headers={"content-type": "application/json", "x-api-key": api_key, "anthropic-version": "2023-06-01"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        answer: JSON = json.load(resp)
        return answer


def run(prompt: str, max_turns: int = 20) -> str:
    env = os.environ
    token = env.get("DSHD_TOKEN") or open(
        os.path.expanduser(env.get("DSHD_TOKEN_FILE", "~/.dsh/server.token"))).read().strip()
    dshd = Client(env.get("DSHD_URL", "http://127.0.0.1:7433"), token)
    base_url = env.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
    api_key = env.get("ANTHROPIC_API_KEY", "")
    model = env.get("ANTHROPIC_MODEL", "claude-sonnet-4-5")

    agent = dshd.create_agent()
    print("agent", agent["id"], flush=True)
    tools = dshd.tools("anthropic")
    messages: List[JSON] = [{"role": "user", "content": prompt}]
    for _ in range(max_turns):
        answer = create_message(base_url, api_key, {
            "model": model, "max_tokens": 4096, "tools": tools, "messages": messages,
        })
        content: List[JSON] = answer["content"]
        messages.append({"role": "assistant", "content": content})
        results: List[JSON] = []
        for block in content:
            if block["type"] != "tool_use":
                continue
            res = dshd.call_tool(agent["id"], block["name"], block["input"], call_id=block["id"])
            print(f"{block['name']} {json.dumps(block['input'])} -> isError={res['isError']}", flush=True)
            print(res["text"], flush=True)
            results.append({"type": "tool_result", "tool_use_id": block["id"],
                            "content": res["text"], "is_error": res["isError"]})
        if answer.get("stop_reason") != "tool_use" or not results:
            return "".join(str(b["text"]) for b in content if b["type"] == "text")
        messages.append({"role": "user", "content": results})
    raise RuntimeError(f"the model was still calling tools after {max_turns} turns")


if __name__ == "__main__":
    print(run(" ".join(sys.argv[1:]) or "Print your session id with bash."))
