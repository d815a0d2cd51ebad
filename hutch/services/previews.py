"""Preview ports: what the preview routes do, and what the preview proxy asks of the store and
the node (is this port published, and a tunnel to it)."""

from __future__ import annotations

import secrets
import time
from urllib.parse import quote

from hutch.errors import ApiError, Code
from hutch.http_relay import Answer, Upstream
from hutch.node.api import AgentUnreachable, ChannelError
from hutch.preview import access
from hutch.preview.access import PreviewKeys
from hutch.preview.proxy import PreviewProxy, PreviewSite, Published
from hutch.services.models import PreviewPort, PreviewToken, SignedPreviewUrl, timestamp
from hutch.services.sandboxes import Sandboxes
from hutch.store import PreviewPortRecord, SandboxRecord


class Previews:
    def __init__(self, sandboxes: Sandboxes, keys: PreviewKeys, site: PreviewSite) -> None:
        self.sandboxes, self.store, self.keys, self.site = sandboxes, sandboxes.store, keys, site
        self.proxy = PreviewProxy(site, self.lookup, keys, self.open_tunnel)

    def info(self, rec: PreviewPortRecord) -> PreviewPort:
        return PreviewPort(port=rec.port, access=rec.access, url=self.site.url(rec.sandbox_id, rec.port),  # type: ignore[arg-type]
                           created_at=timestamp(rec.created_at))

    def _port(self, box: SandboxRecord, port: int) -> PreviewPortRecord:
        rec = self.store.preview_port(box.id, port)
        if rec is None:
            raise ApiError(Code.PORT_NOT_PUBLISHED, f"port {port} of sandbox {box.id} is not published")
        return rec

    def publish(self, box: SandboxRecord, port: int, access_mode: str | None) -> PreviewPort:
        """Publish a port (or change its access, cutting its open connections); the box need not
        listen on it yet. A new publication starts from a random generation, so nothing issued
        for an earlier publication of the port opens it again."""
        mode = access_mode or box.preview_access or "public"
        before = self.store.preview_port(box.id, port)
        rec = self.store.publish_port(PreviewPortRecord(box.id, port, mode, secrets.randbelow(2**31), time.time()))
        if before is not None and before.access != rec.access:
            self.proxy.cut(box.id, port)
        return self.info(rec)

    def unpublish(self, box: SandboxRecord, port: int) -> None:
        self._port(box, port)
        self.store.unpublish_port(box.id, port)
        self.proxy.cut(box.id, port)

    def list(self, box: SandboxRecord) -> list[PreviewPort]:
        return [self.info(r) for r in self.store.preview_ports(box.id)]

    def token(self, box: SandboxRecord, port: int) -> PreviewToken:
        rec = self._port(box, port)
        return PreviewToken(token=self.keys.token(box.id, port, rec.generation), header=access.TOKEN_HEADER)

    def signed_url(self, box: SandboxRecord, port: int, seconds: int) -> SignedPreviewUrl:
        rec = self._port(box, port)
        expires = int(time.time()) + seconds
        link = self.keys.expiring("link", box.id, port, rec.generation, expires)
        return SignedPreviewUrl(url=f"{self.site.url(box.id, port)}/?{access.LINK_PARAM}={quote(link)}",
                                expires_at=timestamp(expires))

    def rotate(self, box: SandboxRecord, port: int) -> PreviewPort:
        """Void the port's links, cookies and token, and cut its open connections."""
        self._port(box, port)
        self.store.rotate_preview_port(box.id, port)
        self.proxy.cut(box.id, port)
        return self.info(self._port(box, port))

    # --- what the proxy asks ----------------------------------------------------------------------

    def lookup(self, sandbox_id: str, port: int) -> Published | None:
        found = self.store.published_port(sandbox_id, port)
        if found is None:
            return None
        rec, team_id = found
        return Published(sandbox_id, port, rec.access == "private", rec.generation, team_id)

    async def open_tunnel(self, sandbox_id: str, port: int) -> Upstream:
        """A stream to the port inside the box, resuming a paused box first."""
        rec = self.store.get_sandbox(sandbox_id)
        if rec is None:
            raise Answer(404, f"port {port} of this sandbox is not published")
        try:
            agent = await self.sandboxes.running_box(rec)
        except ApiError as e:
            raise Answer(503 if e.status >= 500 else e.status, e.message, reason=e.code) from None
        except ChannelError as e:
            raise Answer(502, f"the sandbox could not be reached: {e}") from None
        try:
            return await agent.open_tunnel(port)
        except AgentUnreachable as e:
            raise Answer(502, e.message) from None
        except ApiError as e:  # the agent's refusal (nothing listens on the port, say)
            raise Answer(502, e.message, reason=e.code) from None
        except ChannelError as e:
            raise Answer(502, f"the sandbox could not be reached: {e}") from None
