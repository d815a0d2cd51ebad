"""A box's header rules: headers the egress proxy sets on the box's HTTPS requests to a domain,
a secret's value in them where a rule names one (E2B's network `rules` with their header
`transform`s, `${e2b.secrets.NAME}` standing for the value).

They are the egress proxy's secret swapping (hutch.egress.inject) with the header set rather than
a stand-in swapped: the same TLS interception for the rule's domain, the same value opened per
request, the same audit. The box never holds the value, not even a stand-in for it.

Kept in `sandboxes.header_rules` as {domain: {header (lower case): {"name", "format", "secret"}}}:
`format` holds "{value}" where the secret goes, `secret` names the team's secret (None: a literal
header).
"""

from __future__ import annotations

import re
from typing import Any

from hutch.egress.inject import Injection
from hutch.egress.rules import parse_domain
from hutch.errors import ApiError, Code

MAX_DOMAINS = 32
MAX_HEADERS = 16  # per domain
MAX_VALUE = 4096
PLACEHOLDER = re.compile(r"\$\{e2b\.([a-z]+)\.([^{}]*)\}")
HEADER = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}")
SECRET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# what says how a request is framed or routed: never the proxy's to set for a box
FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
                     "keep-alive", "proxy-authorization", "proxy-connection"})

Rules = dict[str, dict[str, dict[str, Any]]]


def _bad(message: str) -> ApiError:
    return ApiError(Code.INVALID_REQUEST, f"network.rules: {message}")


def _header(domain: str, name: object, value: object) -> dict[str, Any]:
    if not isinstance(name, str) or not HEADER.fullmatch(name) or name.lower() in FRAMING:
        raise _bad(f"{domain}: {str(name)[:64]!r} is not a header a rule may set")
    if not isinstance(value, str) or len(value) > MAX_VALUE or not all(" " <= ch <= "~" for ch in value):
        raise _bad(f"{domain}: the value of {name} must be printable ASCII, at most {MAX_VALUE} characters")
    if "{value}" in value:
        raise _bad(f"{domain}: the value of {name} holds the text {{value}}")
    found = PLACEHOLDER.findall(value)
    if any(kind != "secrets" for kind, _ in found):
        raise _bad(f"{domain}: {name} names a workload identity token; IAM tokens are not supported by hutch")
    if len(found) > 1:
        raise _bad(f"{domain}: {name} names {len(found)} secrets; hutch puts at most one secret in a header")
    if "${e2b." in PLACEHOLDER.sub("", value):
        raise _bad(f"{domain}: {name} holds a placeholder that is not ${{e2b.secrets.NAME}}")
    secret = found[0][1] if found else None
    if secret is not None and not SECRET_NAME.fullmatch(secret):
        raise _bad(f"{domain}: {secret[:64]!r} is not a secret's name")
    return {"name": name, "format": PLACEHOLDER.sub("{value}", value), "secret": secret}


def parse(given: object) -> Rules | None:
    """E2B's `rules` ({domain: [{"transform": {"headers": {name: value}}}]}) checked and kept as
    hutch's; None for none. A later rule's header replaces an earlier one's of the same name."""
    if given is None or given == {}:
        return None
    if not isinstance(given, dict) or len(given) > MAX_DOMAINS:
        raise _bad(f"rules map at most {MAX_DOMAINS} domains to lists of rules")
    out: Rules = {}
    for raw_domain, rules in given.items():
        try:
            domain = parse_domain(str(raw_domain))
        except ValueError as e:
            raise _bad(str(e)) from None
        if not isinstance(rules, list) or len(rules) > MAX_HEADERS:
            raise _bad(f"{domain}: a list of at most {MAX_HEADERS} rules")
        headers: dict[str, dict[str, Any]] = {}
        for rule in rules:
            if not isinstance(rule, dict) or set(rule) - {"transform"}:
                raise _bad(f"{domain}: a rule is {{\"transform\": {{\"headers\": {{...}}}}}}")
            transform = rule.get("transform") or {}
            if not isinstance(transform, dict) or set(transform) - {"headers"}:
                raise _bad(f"{domain}: a transform sets headers only")
            given_headers = transform.get("headers") or {}
            if not isinstance(given_headers, dict):
                raise _bad(f"{domain}: headers map names to values")
            for name, value in given_headers.items():
                headers[str(name).lower()] = _header(domain, name, value)
        if len(headers) > MAX_HEADERS:
            raise _bad(f"{domain}: at most {MAX_HEADERS} headers")
        if headers:
            out[domain] = {**out.get(domain, {}), **headers}
    return out or None


def as_e2b(rules: Rules | None) -> dict[str, list[dict[str, Any]]]:
    """Kept rules as E2B shows them: each domain's headers in one transform, placeholders back."""
    return {domain: [{"transform": {"headers": {
        h["name"]: h["format"].replace("{value}", f"${{e2b.secrets.{h['secret']}}}") if h["secret"] else h["format"]
        for h in headers.values()}}}] for domain, headers in (rules or {}).items()}


def injections(team_id: str, rules: Rules | None) -> tuple[Injection, ...]:
    """What the egress proxy sets for a box with these rules."""
    return tuple(Injection(secret_id="", secret_name=h["secret"] or "", team_id=team_id, env=f"rule {domain}"[:128],
                           standin=f"${{e2b.secrets.{h['secret']}}}" if h["secret"] else "", header=header,
                           format=h["format"], hosts=(domain,), set=True)
                 for domain, headers in (rules or {}).items() for header, h in headers.items())
