"""Client for the dshd HTTP API, standard library only.

    from dshd import Client, Problem
    c = Client("http://127.0.0.1:7433", token)
    agent = c.create_agent()
    job = c.exec("echo hi", agent_id=agent["id"])

Every operation of the contract (api/openapi.yaml) is a method. Errors are
raised as Problem (RFC 9457 problem details with a machine-readable
``code``). Job output is followed over server-sent events, resumable by
event id (``Client.follow_output``), and so are a directory's changes
(``Client.watch_files``); the transcript is read as typed
events (``Client.transcript``). Contributors are typed by kind
(``BuiltinContributor``, ``StaticContributor``, ``TemplateContributor``,
``WebhookContributor``).
"""

from .client import Client, OutputEvent, OutputStream, Problem, WatchEvent, WatchStream
from .contributors import (
    BuiltinContributor,
    Contributor,
    KeySpec,
    StaticContributor,
    TemplateContributor,
    UnknownContributor,
    WebhookContributor,
)
from .transcript import (
    HookInvokedEvent,
    HookResultEvent,
    SessionHeader,
    SessionResumeEvent,
    ToolCallEvent,
    ToolResultEvent,
    Transcript,
    TranscriptEvent,
    UnknownEvent,
)

__all__ = [
    "BuiltinContributor",
    "Client",
    "Contributor",
    "HookInvokedEvent",
    "HookResultEvent",
    "KeySpec",
    "OutputEvent",
    "OutputStream",
    "Problem",
    "SessionHeader",
    "SessionResumeEvent",
    "StaticContributor",
    "TemplateContributor",
    "ToolCallEvent",
    "ToolResultEvent",
    "Transcript",
    "TranscriptEvent",
    "UnknownContributor",
    "UnknownEvent",
    "WatchEvent",
    "WatchStream",
    "WebhookContributor",
]
