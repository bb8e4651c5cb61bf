"""Typed transcript events, as GET /agents/{id}/transcript returns them with
Accept: application/json (the contract's Transcript schema)."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union


@dataclass(frozen=True)
class SessionHeader:
    """The first line of a transcript."""

    id: str
    created_at: str
    cwd: str
    parent_id: Optional[str]
    origin: str  # root | fork | spawn
    depth: int
    version: int


@dataclass(frozen=True)
class ToolCallEvent:
    """tool/call: a model tool call, recorded before it runs."""

    seq: int
    time: str
    call_id: str
    name: str
    # The arguments object as the model sent it; a string when it sent
    # something else (a string that holds no JSON object).
    arguments: Union[Dict[str, Any], str]
    ignored: List[str]
    type: str = "tool/call"


@dataclass(frozen=True)
class ToolResultEvent:
    """tool/result: what a tool call returned to the model."""

    seq: int
    time: str
    call_id: str
    is_error: bool
    text: str
    job_id: Optional[str] = None
    exit_code: Optional[int] = None
    additional_context: List[str] = field(default_factory=list[str])
    system_messages: List[str] = field(default_factory=list[str])
    type: str = "tool/result"


@dataclass(frozen=True)
class HookInvokedEvent:
    """hook/invoked: a hook about to run."""

    seq: int
    time: str
    call_id: str
    event: str
    handler: str
    dialect: str
    type: str = "hook/invoked"


@dataclass(frozen=True)
class HookResultEvent:
    """hook/result: what a hook answered."""

    seq: int
    time: str
    call_id: str
    event: str
    handler: str
    dialect: str
    decision: str
    exit_code: Optional[int]
    duration_ms: int
    reason: str = ""
    signal: str = ""
    timed_out: bool = False
    stderr: str = ""
    error: str = ""
    system_message: str = ""
    additional_context: str = ""
    type: str = "hook/result"


@dataclass(frozen=True)
class SessionResumeEvent:
    """session/resume: the agent was resumed."""

    seq: int
    time: str
    type: str = "session/resume"


@dataclass(frozen=True)
class UnknownEvent:
    """An event type this client does not know (a newer server)."""

    seq: int
    time: str
    type: str
    data: Dict[str, Any]


TranscriptEvent = Union[
    ToolCallEvent, ToolResultEvent, HookInvokedEvent, HookResultEvent, SessionResumeEvent, UnknownEvent
]


@dataclass(frozen=True)
class Transcript:
    header: SessionHeader
    events: List[TranscriptEvent]


def _event(e: Dict[str, Any]) -> TranscriptEvent:
    t, seq, time = e["type"], e["seq"], e["time"]
    d: Dict[str, Any] = e.get("data") or {}
    if t == "tool/call":
        return ToolCallEvent(seq, time, d["callId"], d["name"], d.get("arguments") or {}, d.get("ignored") or [])
    if t == "tool/result":
        return ToolResultEvent(
            seq, time, d["callId"], d["isError"], d["text"], d.get("jobId"), d.get("exitCode"),
            d.get("additionalContext") or [], d.get("systemMessages") or [],
        )
    if t == "hook/invoked":
        return HookInvokedEvent(seq, time, d["callId"], d["event"], d["handler"], d["dialect"])
    if t == "hook/result":
        return HookResultEvent(
            seq, time, d["callId"], d["event"], d["handler"], d["dialect"], d["decision"], d.get("exitCode"),
            d["durationMs"], d.get("reason", ""), d.get("signal", ""), d.get("timedOut", False),
            d.get("stderr", ""), d.get("error", ""), d.get("systemMessage", ""), d.get("additionalContext", ""),
        )
    if t == "session/resume":
        return SessionResumeEvent(seq, time)
    return UnknownEvent(seq, time, t, d)


def parse_transcript(doc: Dict[str, Any]) -> Transcript:
    """Builds a Transcript from the JSON form's decoded object."""
    h = doc["header"]
    header = SessionHeader(h["id"], h["createdAt"], h["cwd"], h.get("parentId"), h["origin"], h["depth"], h["version"])
    return Transcript(header, [_event(e) for e in doc["events"]])
