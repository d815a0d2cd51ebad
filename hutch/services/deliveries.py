"""Webhook deliveries: each enabled endpoint is sent its team's events in order, one at a time,
signed, retried with backoff for a bounded time, and disabled (an event itself) once one event
could not be delivered in that time. Every attempt is recorded with its status.

An endpoint is delivered by one task of its own, with a connection of its own, under its lease in
the store (hutch.store.webhooks): a slow or dead endpoint delays only its own deliveries, never
another's nor an API call, and in a fleet one API server delivers it at a time. A delivery is at
least once: a server that stops between an endpoint's answer and its cursor's step sends that
event again, with the same event id (what a receiver deduplicates on).

Webhook URLs are the host's egress, so where they lead is checked at every attempt (a name may
resolve elsewhere since it was registered), and the connection goes to the address checked: no
private, loopback, link-local or metadata address and none of the host's own, unless the
operator's `--webhook-allow` names the host or a network holding the address. No redirect is
followed, and no more than the answer's status is read.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import hmac
import ipaddress
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

import httpx

from hutch.egress.resolve import Resolver
from hutch.egress.rules import IPAddress, IPNetwork, NetworkRules, denied_name, normalize_host, parse_cidr
from hutch.secrets.vault import Vault
from hutch.store import EventRecord, Store, WebhookRecord
from hutch.store.events import on_event

log = logging.getLogger("hutch.services.deliveries")

POLL_SECONDS = 5.0  # how often the store is asked for the newest event with nothing told meanwhile
LOOK_GAP = 0.2  # the least time between two looks
SWEEP_SECONDS = 10.0  # how often endpoints are looked for with no new event
LEASE_SECONDS = 60.0  # an endpoint's lease, renewed before every attempt
BATCH = 100  # events read at once for one endpoint
ATTEMPT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
TEAM_LOOKUPS = 2  # a team's name lookups at once (its slow names hold only these threads)
ATTEMPT_DEADLINE = 30.0  # one attempt whole: lookup, connect, send, the answer's head
MOST_DELIVERING = 256  # endpoints delivered at once by one server (the rest at a later round)
RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0)  # then every 60 s, until the retry time is spent
SIGNATURE_TOLERANCE = 300  # seconds a receiver should accept a timestamp's age (what the SDK's verify uses)


class RefusedDestination(ValueError):
    """A webhook URL the host may not send to; the message says why."""


@dataclass(frozen=True)
class Destinations:
    """Where webhooks may go: public addresses, and what the operator's allow list names (host
    names exactly, or networks)."""

    names: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()
    host_addresses: Callable[[], Awaitable[frozenset[IPAddress]]] | None = None
    # names to addresses as the boxes' egress has them (its hosts map, the system's resolver if it
    # may), at most TEAM_LOOKUPS at once for one team (a lookup holds its slot until its thread
    # ends); None: only addresses are taken
    resolver: Resolver | None = None
    _lookups: dict[str, asyncio.Semaphore] = field(default_factory=dict)

    @classmethod
    def parse(cls, allowed: Iterable[str], host_addresses: Callable[[], Awaitable[frozenset[IPAddress]]] | None = None,
              resolver: Resolver | None = None) -> Destinations:
        """From `--webhook-allow` entries (a host name, an address or a CIDR each); ValueError
        naming a bad one."""
        names, networks = set(), []
        for entry in allowed:
            try:
                networks.append(parse_cidr(entry))
                continue
            except ValueError:
                pass
            name = normalize_host(entry.strip())
            if name is None:
                raise ValueError(f"{entry!r} is neither a host name nor an address or CIDR")
            names.add(name)
        return cls(frozenset(names), tuple(networks), host_addresses, resolver)

    def parsed(self, url: str) -> tuple[str, str, int]:
        """The URL's scheme, host (a normal-form name or an address's text) and port; refused if it
        is not an http(s) URL with a host and no user:password."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as e:
            raise RefusedDestination(f"not a URL: {e}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RefusedDestination("a webhook URL is http:// or https:// with a host")
        if parts.username is not None or parts.password is not None:
            raise RefusedDestination("a webhook URL carries no user or password (sign with the secret instead)")
        if any(c in url for c in "\r\n\t ") or not url.isascii():
            raise RefusedDestination("a webhook URL is ASCII, with no spaces or line breaks")
        host = parts.hostname
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            name = normalize_host(host)
            if name is None:
                raise RefusedDestination(f"not a host name: {host[:100]!r}") from None
            host = name
        return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)

    async def resolve(self, url: str, team: str = "") -> tuple[str, str, int, IPAddress]:
        """The URL's scheme, host and port, and the address to connect to: every address the host
        resolves to must be allowed (one that is not could be picked by the next lookup). The
        refusal says why without the addresses a name resolved to (no lookups through the host
        for a tenant to read)."""
        scheme, host, port = self.parsed(url)
        named = host in self.names
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            if not named and (refusal := denied_name(host)) is not None:
                raise RefusedDestination(f"{host} is a private name ({refusal.rule})") from None
            addresses = await self._lookup(host, team)
        own = await self.host_addresses() if self.host_addresses is not None else frozenset()
        for ip in addresses:
            if named or any(ip.version == net.version and ip in net for net in self.networks):
                continue
            if not NetworkRules().decide(None, ip, own).allowed:
                raise RefusedDestination(f"{host} leads to a private, loopback, link-local, metadata or reserved "
                                         "address, or this host's; an operator may allow it (--webhook-allow)")
        return scheme, host, port, addresses[0]

    async def _lookup(self, host: str, team: str) -> list[IPAddress]:
        if self.resolver is None:
            raise RefusedDestination(f"{host} does not resolve here")
        # kept for the server's life: one a team (operators make teams), and a slot is held until
        # its lookup's thread ends, so slots forgotten early would give a team more
        slots = self._lookups.setdefault(team, asyncio.Semaphore(TEAM_LOOKUPS))
        try:
            return await self.resolver.resolve(host, slots)
        except (OSError, LookupError, TimeoutError):
            raise RefusedDestination(f"{host} does not resolve") from None


# --- signing --------------------------------------------------------------------------------------

def hutch_signature(secret: str, timestamp: int, body: bytes) -> str:
    """`Hutch-Signature`'s value: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body under the
    secret>` (Stripe's scheme: the timestamp is signed too, so an old delivery cannot be replayed
    past the receiver's tolerance)."""
    mac = hmac.new(secret.encode(), b"%d." % timestamp + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def e2b_signature(secret: str, body: bytes) -> str:
    """E2B's `e2b-signature`: the SHA-256 of the secret followed by the body, base64 without padding."""
    return base64.b64encode(hashlib.sha256(secret.encode() + body).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class Flavor:
    """How a kind of webhook is shaped and signed: hutch's own, or E2B's (hutch.e2b.webhooks)."""

    types: frozenset[str] | None  # the hutch event types it is sent (None: every type)
    payload: Callable[[EventRecord], bytes]  # on a worker thread: it may read the store
    headers: Callable[[WebhookRecord, str, bytes, EventRecord, str], dict[str, str]]  # hook, secret, body, event, delivery


def hutch_headers(hook: WebhookRecord, secret: str, body: bytes, event: EventRecord, delivery: str) -> dict[str, str]:
    return {"Hutch-Webhook-Id": hook.id, "Hutch-Event-Id": str(event.id), "Hutch-Event-Type": event.type,
            "Hutch-Delivery-Id": delivery, "Hutch-Signature": hutch_signature(secret, int(time.time()), body)}


# --- delivering -----------------------------------------------------------------------------------

Outcome = Literal["delivered", "given_up", "stopped"]


class Deliverer:
    """Runs in every API server (`run`): finds endpoints with events past their cursor, and
    delivers each in a task of its own while it holds the endpoint's lease."""

    def __init__(self, store: Store, vault: Vault, destinations: Destinations, flavors: dict[str, Flavor],
                 retry_for: float, owner: str) -> None:
        self.store, self.vault, self.destinations = store, vault, destinations
        self.flavors, self.retry_for, self.owner = flavors, retry_for, owner
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._newest, self._swept = -1, float("-inf")  # the newest event when endpoints were last looked for
        self._wakes = asyncio.Event()
        # one TLS context for every delivery (loading the CA bundle takes ~50 ms: never per client)
        self._tls = httpx.create_ssl_context()

    def wake(self) -> None:
        """Look for endpoints to deliver now (a webhook made or enabled again)."""
        self._swept = float("-inf")
        self._wakes.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # woken by this process's events as they commit; another server's are found at the latest
        # after POLL_SECONDS (that server wakes its own deliverer, which takes the lease at once)
        def told() -> None:  # on the thread that committed
            loop.call_soon_threadsafe(self._wakes.set)

        unlisten = on_event(told)
        try:
            while True:
                try:
                    await self._start_due()
                except Exception:  # the store, for a moment: ask again
                    log.exception("finding webhooks to deliver")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakes.wait(), POLL_SECONDS)
                self._wakes.clear()
                await asyncio.sleep(LOOK_GAP)  # one look for a burst of events
        finally:
            unlisten()
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _start_due(self) -> None:
        if len(self._tasks) >= MOST_DELIVERING:
            return
        # the endpoints are looked for only when an event came, or now and then (a lease another
        # server let lapse, a webhook enabled again): an idle server asks one cheap thing a poll
        newest = await asyncio.to_thread(self.store.last_event_id)
        if newest == self._newest and time.monotonic() - self._swept < SWEEP_SECONDS:
            return
        self._newest, self._swept = newest, time.monotonic()
        due = await asyncio.to_thread(self.store.webhooks_behind, time.time(), self.owner)
        for hook in due:
            if hook.id not in self._tasks and hook.flavor in self.flavors and len(self._tasks) < MOST_DELIVERING:
                task = asyncio.get_running_loop().create_task(self._deliver_all(hook.id), name=f"webhook {hook.id}")
                self._tasks[hook.id] = task
                task.add_done_callback(functools.partial(self._done, hook.id))

    def _done(self, webhook_id: str, _: asyncio.Task[None]) -> None:
        self._tasks.pop(webhook_id, None)

    async def _lease(self, webhook_id: str, seconds: float = LEASE_SECONDS) -> WebhookRecord | None:
        return await asyncio.to_thread(self.store.lease_webhook, webhook_id, self.owner, time.time() + seconds)

    async def _deliver_all(self, webhook_id: str) -> None:
        """Deliver what is past the endpoint's cursor, in order, until it has caught up."""
        client: httpx.AsyncClient | None = None
        try:
            while (hook := await self._lease(webhook_id)) is not None:
                flavor = self.flavors[hook.flavor]
                newest = await asyncio.to_thread(self.store.last_event_id)
                types = _types_for(hook.types, flavor)
                found = [] if types is None else [
                    e for e in await asyncio.to_thread(self.store.events, hook.team_id, after=hook.cursor,
                                                       types=types, limit=BATCH) if e.id <= newest]
                for event in found:
                    if client is None:  # only once there is something to send
                        client = httpx.AsyncClient(timeout=ATTEMPT_TIMEOUT, follow_redirects=False, trust_env=False,
                                                   verify=self._tls, limits=httpx.Limits(max_connections=1))
                    outcome = await self._deliver(client, hook, flavor, event)
                    if outcome == "given_up":
                        reason = f"event {event.id} ({event.type}) was not delivered in {self.retry_for:.0f} s"
                        if await asyncio.to_thread(self.store.disable_webhook, hook.id, self.owner, reason):
                            log.warning("webhook %s of team %s disabled: %s", hook.id, hook.team_id, reason)
                        return
                    if outcome == "stopped" or not await asyncio.to_thread(
                            self.store.advance_webhook, hook.id, self.owner, event.id):
                        return
                if len(found) < BATCH:  # caught up: the events up to `newest` are all seen
                    await asyncio.to_thread(self.store.advance_webhook, hook.id, self.owner, newest)
                    return
        except asyncio.CancelledError:
            raise
        except Exception:  # the store went away mid-delivery: the lease runs out, and a later round goes on
            log.exception("delivering webhook %s", webhook_id)
        finally:
            with contextlib.suppress(Exception):
                if client is not None:
                    await asyncio.shield(client.aclose())
                await asyncio.shield(asyncio.to_thread(self.store.release_webhook, webhook_id, self.owner))

    async def _deliver(self, client: httpx.AsyncClient, hook: WebhookRecord, flavor: Flavor,
                       event: EventRecord) -> Outcome:
        """One event, retried until it is delivered or the retry time is spent. The lease is
        renewed to outlast each attempt and each wait, so no other server takes the endpoint
        while this one retries."""
        try:
            body = await asyncio.to_thread(flavor.payload, event)
        except Exception:  # it would fail every time: this event cannot be sent
            log.exception("webhook %s: event %d has no payload", hook.id, event.id)
            return "given_up"
        first = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            current = await self._lease(hook.id, ATTEMPT_DEADLINE + LEASE_SECONDS)  # and its URL or secret, now
            if current is None:
                return "stopped"
            ok = await self._attempt(client, current, flavor, event, body, attempt)
            if ok:
                return "delivered"
            delay = RETRY_DELAYS[min(attempt - 1, len(RETRY_DELAYS) - 1)]
            if time.monotonic() - first + delay > self.retry_for:
                return "given_up"
            if await self._lease(hook.id, delay + LEASE_SECONDS) is None:
                return "stopped"
            await asyncio.sleep(delay)

    async def _attempt(self, client: httpx.AsyncClient, hook: WebhookRecord, flavor: Flavor, event: EventRecord,
                       body: bytes, attempt: int) -> bool:
        started = time.monotonic()
        status: int | None = None
        error: str | None = None
        delivery = str(uuid.uuid4())
        try:
            async with asyncio.timeout(ATTEMPT_DEADLINE):  # a receiver trickling its answer is cut off
                secret = self.vault.open(hook.sealed, bound_to(hook.team_id, hook.id))
                scheme, host, port, ip = await self.destinations.resolve(hook.url, hook.team_id)
                headers = {"Content-Type": "application/json", "User-Agent": "hutch-webhooks/1",
                           **flavor.headers(hook, secret, body, event, delivery)}
                request = _pinned(client, hook.url, scheme, host, port, ip, headers, body)
                response = await client.send(request, stream=True)
                await response.aclose()  # its status is all we read
            status = response.status_code
            if not 200 <= status < 300:
                error = f"answered {status}"
        except RefusedDestination as e:
            error = f"refused: {e}"
        except TimeoutError:
            error = f"no answer within {ATTEMPT_DEADLINE:.0f} s"
        except httpx.HTTPError as e:
            error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        except Exception as e:  # a sealed secret that does not open, say: this attempt failed, the loop goes on
            log.exception("webhook %s: an attempt failed", hook.id)
            error = f"{type(e).__name__}"
        ok = error is None
        await asyncio.to_thread(self.store.add_delivery, webhook_id=hook.id, event_id=event.id, event_type=event.type,
                                attempt=attempt, at=time.time(), status=status, error=error, ok=ok,
                                duration_ms=int((time.monotonic() - started) * 1000))
        return ok


def _types_for(chosen: Sequence[str], flavor: Flavor) -> list[str] | None:
    """The event types an endpoint is sent: what it chose, within what its flavor can send ([]:
    every type; None: none at all, as when every type it chose is one its flavor cannot send)."""
    if flavor.types is None:
        return list(chosen)
    if not chosen:
        return sorted(flavor.types)
    return [t for t in chosen if t in flavor.types] or None


def _pinned(client: httpx.AsyncClient, url: str, scheme: str, host: str, port: int, ip: IPAddress,
            headers: dict[str, str], body: bytes) -> httpx.Request:
    """The POST to `url`, connecting to the address that was checked (not to what a second lookup
    might say), with the URL's host in its Host header and, over TLS, its SNI and certificate check."""
    target = httpx.URL(url).copy_with(host=str(ip))
    default = 443 if scheme == "https" else 80
    headers = {**headers, "Host": _bracketed(host) if port == default else f"{_bracketed(host)}:{port}"}
    extensions = {"sni_hostname": host} if scheme == "https" else {}
    return client.build_request("POST", target, headers=headers, content=body, extensions=extensions)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def bound_to(team_id: str, webhook_id: str) -> str:
    """What a webhook's sealed secret is bound to: it opens on its own row only."""
    return f"webhook:{team_id}:{webhook_id}"
