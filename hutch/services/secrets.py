"""Secrets: what the secret routes, a sandbox's bindings and the egress proxy do with them.

A secret's value is sealed at rest (hutch.secrets.vault) and opened only by the egress proxy, at
the moment it swaps a stand-in on a request to one of the secret's hosts. No API call returns it
and nothing logs it. A binding gives one sandbox one env var holding a stand-in token, unique to
that sandbox and binding; commands started in the box get it, never the value.
"""

from __future__ import annotations

import logging
import secrets as random
import time
import uuid

from hutch.egress.inject import Injection, Swap
from hutch.egress.rules import domain_matches
from hutch.errors import ApiError, Code, not_found
from hutch.secrets.providers import DEFAULT_FORMAT, DEFAULT_HEADER, PROVIDERS
from hutch.secrets.vault import Vault, VaultError
from hutch.services.header_rules import Rules
from hutch.services.header_rules import injections as rule_injections
from hutch.services.models import (
    MAX_BOUND_SECRETS,
    CreateSecret,
    ProviderInfo,
    SecretAuditEntry,
    SecretAuditPage,
    SecretAuth,
    SecretBinding,
    SecretInfo,
    timestamp,
)
from hutch.store import BindingRecord, SandboxRecord, SecretRecord, Store

log = logging.getLogger("hutch.secrets")

STANDIN_PREFIX = "hutch_standin_"


def _bound_to(rec: SecretRecord) -> str:
    return f"{rec.team_id}/{rec.id}"


def covers(hosts: list[str], domains: tuple[str, ...]) -> bool:
    """Whether a secret of `hosts` (none: any) may go to every one of `domains` (rule patterns): a
    rule's wildcard only within the same wildcard, a name within any pattern that matches it."""
    return not hosts or all(any(h == d or (not d.startswith("*.") and domain_matches(h, d)) for h in hosts)
                            for d in domains)


def providers() -> list[ProviderInfo]:
    return [ProviderInfo(name=p.name, description=p.description, allowed_hosts=list(p.hosts),
                         auth=SecretAuth(header=p.header, format=p.format), env=p.env) for p in PROVIDERS.values()]


class Secrets:
    def __init__(self, store: Store, vault: Vault) -> None:
        self.store, self.vault = store, vault

    # --- the secrets themselves ------------------------------------------------------------------

    def info(self, rec: SecretRecord) -> SecretInfo:
        return SecretInfo(name=rec.name, provider=rec.provider, allowed_hosts=rec.hosts,
                          auth=SecretAuth(header=rec.header, format=rec.format), version=rec.version,
                          created_at=timestamp(rec.created_at), updated_at=timestamp(rec.updated_at))

    def get(self, team_id: str, name: str) -> SecretRecord:
        rec = self.store.get_secret(team_id, name)
        if rec is None:
            raise not_found("secret", name)
        return rec

    def create(self, team_id: str, req: CreateSecret) -> SecretRecord:
        provider = PROVIDERS.get(req.provider) if req.provider is not None else None
        if req.provider is not None and provider is None:
            raise ApiError(Code.UNKNOWN_PROVIDER, f"no provider {req.provider!r}; GET /v1/providers lists them")
        hosts = req.allowed_hosts or (list(provider.hosts) if provider else None)
        if not hosts:
            raise ApiError(Code.INVALID_REQUEST, "a secret without a provider needs allowed_hosts")
        auth = req.auth or (SecretAuth(header=provider.header, format=provider.format) if provider
                            else SecretAuth(header=DEFAULT_HEADER, format=DEFAULT_FORMAT))
        now = time.time()
        rec = SecretRecord(id=str(uuid.uuid4()), team_id=team_id, name=req.name, provider=req.provider,
                           header=auth.header.lower(), format=auth.format, hosts=sorted(set(hosts)), sealed=b"",
                           version=1, created_at=now, updated_at=now)
        rec.sealed = self.vault.seal(req.value, _bound_to(rec))
        if not self.store.insert_secret(rec):
            raise ApiError(Code.SECRET_EXISTS, f"a secret named {req.name!r} exists; rotate it or delete it first")
        return rec

    def create_unbound(self, team_id: str, name: str, value: str, metadata: dict[str, str] | None) -> SecretRecord:
        """A secret with no hosts of its own (E2B's): a box's header rules name where it goes."""
        now = time.time()
        rec = SecretRecord(id=str(uuid.uuid4()), team_id=team_id, name=name, provider=None, header=DEFAULT_HEADER,
                           format=DEFAULT_FORMAT, hosts=[], sealed=b"", version=1, created_at=now, updated_at=now,
                           metadata=metadata)
        rec.sealed = self.vault.seal(value, _bound_to(rec))
        if not self.store.insert_secret(rec):
            raise ApiError(Code.SECRET_EXISTS, f"a secret named {name!r} exists; update it or delete it first")
        return rec

    def find(self, team_id: str, ref: str) -> SecretRecord:
        """By id or by name."""
        rec = self.store.secret_by_id(ref)
        if rec is None or rec.team_id != team_id:
            rec = self.store.get_secret(team_id, ref)
        if rec is None:
            raise not_found("secret", ref)
        return rec

    def rotate(self, team_id: str, name: str, value: str, metadata: dict[str, str] | None = None) -> SecretRecord:
        """The new value is what the next request out of any box gets; `metadata`, if given,
        replaces the secret's."""
        rec = self.get(team_id, name)
        self.store.rotate_secret(rec.id, self.vault.seal(value, _bound_to(rec)), metadata)
        return self.get(team_id, name)

    def delete(self, team_id: str, name: str) -> None:
        """Its bindings stay, marked revoked; their stand-ins are never swapped again."""
        self.store.delete_secret(self.get(team_id, name).id)

    def audit(self, team_id: str, name: str, limit: int, before: int | None,
              sandbox_id: str | None) -> SecretAuditPage:
        """The uses of the secret of that name, including those of a deleted one: after a leak,
        deleting the secret must not hide how it was used."""
        rows = self.store.secret_audit(team_id, name, limit, before, sandbox_id)
        if not rows and before is None:
            self.get(team_id, name)  # neither a secret nor any history: 404
        internal = ("secret_id", "at", "team_id", "secret_name")
        entries = [SecretAuditEntry(**{k: v for k, v in r.__dict__.items() if k not in internal}, at=timestamp(r.at))
                   for r in rows]
        return SecretAuditPage(entries=entries, next_before=rows[-1].id if len(rows) == limit else None)

    # --- bindings -------------------------------------------------------------------------------

    def new_bindings(self, team_id: str, sandbox_id: str, wanted: dict[str, str]) -> list[BindingRecord]:
        """Bindings for env var -> secret name; a missing secret is a 404 and nothing is made."""
        out = []
        for env, name in wanted.items():
            rec = self.get(team_id, name)
            out.append(BindingRecord(sandbox_id=sandbox_id, env=env, secret_id=rec.id, secret_name=rec.name,
                                     standin=STANDIN_PREFIX + random.token_hex(20), created_at=time.time()))
        return out

    def attach(self, team_id: str, box: SandboxRecord, env: str, name: str) -> None:
        if env in box.env_vars:
            raise ApiError(Code.INVALID_REQUEST, f"{env} is an env var of this sandbox; a secret cannot be one too")
        bound = {b.env for b in self.store.bindings(box.id)}
        if env not in bound and len(bound) >= MAX_BOUND_SECRETS:
            raise ApiError(Code.INVALID_REQUEST, f"a sandbox has at most {MAX_BOUND_SECRETS} secrets")
        self.store.bind_secret(self.new_bindings(team_id, box.id, {env: name})[0])

    def detach(self, box: SandboxRecord, env: str) -> None:
        if not self.store.unbind_secret(box.id, env):
            raise ApiError(Code.NOT_FOUND, f"sandbox {box.id} has no secret on {env}")

    def bindings(self, sandbox_id: str) -> list[SecretBinding]:
        return self.bindings_of([sandbox_id]).get(sandbox_id, [])

    def bindings_of(self, sandbox_ids: list[str]) -> dict[str, list[SecretBinding]]:
        return {sid: [SecretBinding(env=b.env, secret=b.secret_name, revoked=b.revoked,
                                    created_at=timestamp(b.created_at)) for b in found]
                for sid, found in self.store.bindings_of(sandbox_ids).items()}

    def standins(self, sandbox_id: str) -> dict[str, str]:
        """The env of a command started now: each bound var holds its stand-in."""
        return {b.env: b.standin for b in self.store.bindings(sandbox_id)}

    # --- what the egress proxy asks -------------------------------------------------------------

    def injections(self, box: SandboxRecord) -> tuple[Injection, ...]:
        """The box's bound secrets, then its header rules (hutch.services.header_rules)."""
        bound = tuple(Injection(secret_id=rec.id, secret_name=rec.name, team_id=rec.team_id, env=b.env,
                                standin=b.standin, header=rec.header, format=rec.format, hosts=tuple(rec.hosts))
                      for b, rec in self.store.bound_secrets(box.id))
        return bound + rule_injections(box.team_id, box.header_rules)

    def reveal(self, injection: Injection) -> str | None:
        """The value to swap in for a stand-in, if its binding is still there, still to the same
        secret, and the secret exists. For a header rule: the value of the team's secret of that
        name now ("" for a rule that names none)."""
        if injection.set:
            if not injection.secret_name:
                return ""
            rec = self.store.get_secret(injection.team_id, injection.secret_name)
            if rec is not None and not covers(rec.hosts, injection.hosts):
                return None  # a secret with hosts of its own goes to those only, whatever a rule says
        else:
            rec = self.store.secret_for_standin(injection.standin, injection.secret_id)
        if rec is None:
            return None
        try:
            return self.vault.open(rec.sealed, _bound_to(rec))
        except VaultError:
            log.error("secret %s does not open with this data dir's key: not swapped in", rec.name)
            return None

    def check_rules(self, team_id: str, rules: Rules | None) -> None:
        """A header rule may put a secret made with hosts of its own only where those hosts are
        (E2B's secrets have none: a rule names where they go)."""
        for domain, headers in (rules or {}).items():
            for h in headers.values():
                rec = self.store.get_secret(team_id, h["secret"]) if h["secret"] else None
                if rec is not None and not covers(rec.hosts, (domain,)):
                    raise ApiError(Code.INVALID_REQUEST, f"network.rules: secret {rec.name!r} goes only to "
                                                         f"{', '.join(rec.hosts)}, not {domain}")

    def record(self, sandbox_id: str, host: str, swap: Swap) -> None:
        inj = swap.injection
        if not inj.secret_name:  # a header rule with no secret in it: nothing to audit
            return
        self.store.add_secret_audit(secret_id=inj.secret_id, at=time.time(), sandbox_id=sandbox_id, env=inj.env,
                                    host=host, method=swap.method[:32], path=swap.path, status=swap.status,
                                    team_id=inj.team_id, secret_name=inj.secret_name)
