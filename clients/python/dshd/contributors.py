"""Typed contributors, as /contributors returns them (the contract's
Contributor schema: a union told apart by ``kind``)."""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union


@dataclass(frozen=True)
class KeySpec:
    """A managed key a contributor declares."""

    key: str
    description: str


@dataclass(frozen=True)
class BuiltinContributor:
    """A contributor built into dshd (DSH_HOME, DSH_SHELL, DSH_SESSION_ID):
    no resolver, cannot be removed."""

    name: str
    keys: List[KeySpec]
    plugin: Optional[str]
    created_at: str
    expires_at: Optional[str]
    kind: str = "builtin"
    builtin: bool = True


@dataclass(frozen=True)
class StaticContributor:
    """A contributor with fixed values (key to value)."""

    name: str
    keys: List[KeySpec]
    plugin: Optional[str]
    created_at: str
    expires_at: Optional[str]
    values: Dict[str, str]
    kind: str = "static"
    builtin: bool = False


@dataclass(frozen=True)
class TemplateContributor:
    """A contributor whose values are templates over the execution's facts
    (key to template)."""

    name: str
    keys: List[KeySpec]
    plugin: Optional[str]
    created_at: str
    expires_at: Optional[str]
    values: Dict[str, str]
    kind: str = "template"
    builtin: bool = False


@dataclass(frozen=True)
class WebhookContributor:
    """A contributor whose values a webhook answers for each execution."""

    name: str
    keys: List[KeySpec]
    plugin: Optional[str]
    created_at: str
    expires_at: Optional[str]
    url: str
    timeout_ms: Optional[int]
    kind: str = "webhook"
    builtin: bool = False


@dataclass(frozen=True)
class UnknownContributor:
    """A contributor kind this client does not know (a newer server);
    ``data`` is the whole object."""

    name: str
    kind: str
    data: Dict[str, Any]


Contributor = Union[BuiltinContributor, StaticContributor, TemplateContributor, WebhookContributor, UnknownContributor]


def parse_contributor(c: Dict[str, Any]) -> Contributor:
    """Builds the typed contributor its ``kind`` names from the decoded JSON."""
    kind = c["kind"]
    keys: List[Dict[str, Any]] = c.get("keys") or []
    common = (
        c["name"],
        [KeySpec(k["key"], k["description"]) for k in keys],
        c.get("plugin"),
        c["createdAt"],
        c.get("expiresAt"),
    )
    r: Dict[str, Any] = c.get("resolver") or {}
    if kind == "builtin":
        return BuiltinContributor(*common)
    if kind == "static":
        return StaticContributor(*common, r.get("values") or {})
    if kind == "template":
        return TemplateContributor(*common, r.get("values") or {})
    if kind == "webhook":
        return WebhookContributor(*common, r.get("url", ""), r.get("timeoutMs"))
    return UnknownContributor(c["name"], kind, c)
