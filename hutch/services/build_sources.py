"""What a build starts from and makes: its parent (a template's root, or an OCI image unpacked
once per team and digest into the host's cache), then the builder's steps on it. While a build
reads a root, that root is kept from the collector (build_roots.py), and a template it builds on
from a delete.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import threading
from pathlib import Path

from hutch.errors import BuildFailure
from hutch.node import base_image
from hutch.services.config import ServerConfig
from hutch.services.system_templates import BASE_TEMPLATE, BASE_TEMPLATE_ID
from hutch.store import BuildRecord, Store
from hutch.templates import oci
from hutch.templates.buildlog import BuildLog
from hutch.templates.builds import Builder, BuildFailed, Built, Parent


class BuildSources:
    def __init__(self, config: ServerConfig, store: Store, builder: Builder, files_dir: Path) -> None:
        self.config, self.store, self.builder = config, store, builder
        self.images_dir = config.cache_dir / "images"
        self.files_dir = files_dir  # <team id>/<hash>: uploads for copy steps (E2B's COPY)
        self.building_from: dict[str, str] = {}  # build id -> the template id it builds on
        self.parent_roots: dict[str, str] = {}  # build id -> the root it builds on
        self._image_locks: dict[str, asyncio.Lock] = {}

    def reading(self) -> set[str]:
        """The roots builds here read now."""
        return set(self.parent_roots.values())

    def forget(self, build_id: str) -> None:
        """The build ended: what it built on is free again."""
        self.building_from.pop(build_id, None)
        self.parent_roots.pop(build_id, None)

    async def build(self, build: BuildRecord, blog: BuildLog) -> Built:
        parent = await self._parent(build, blog)
        self.parent_roots[build.id] = str(parent.root)  # kept while this build reads it
        if self.config.fleet is not None:  # and by every other host's collector
            self.store.update_build(build.id, parent_rootfs=str(parent.root))
        template = self.store.get_template(build.template_id)
        files = self.files_dir / template.team_id if template is not None and template.team_id else None
        return await self.builder.build(build.id, build.spec, parent, blog, no_cache=build.no_cache, files=files)

    async def _parent(self, build: BuildRecord, blog: BuildLog) -> Parent:
        """What the build starts from. Its cache key starts with the team: a layer of another
        team's is never reused (a cache hit would tell one team what another built, env values
        included)."""
        source = build.spec.get("from") or BASE_TEMPLATE
        rec = self.store.get_template(build.template_id)
        if rec is None or rec.team_id is None:
            raise BuildFailed(BuildFailure.BUILD_FAILED, "the template was deleted")
        try:
            image = oci.parse_source(source, allowed_dirs=self.config.allowed_image_dirs)
        except ValueError as e:
            raise BuildFailed(BuildFailure.INVALID_SPEC, f"from: {e}") from None
        if image is not None:
            parent = await self._image(image, blog, rec.team_id)
        else:
            found = self.store.get_template(source, rec.team_id)
            if found is None or found.rootfs is None:
                raise BuildFailed(BuildFailure.IMAGE_NOT_FOUND, f"template {source!r} does not exist or has no finished build")
            self.building_from[build.id] = found.id
            # a system template's layers are keyed by its recipe (its root's directory names it)
            system_key = base_image.BASE.key() if found.id == BASE_TEMPLATE_ID else Path(found.rootfs).parent.name
            key = f"template:{found.build_id or system_key}"
            parent = Parent(Path(found.rootfs), key, dict(found.env), found.workdir, found.user)
        parent.key = f"team:{rec.team_id}:{parent.key}"
        return parent

    async def _image(self, image: oci.ImageSource, blog: BuildLog, team_id: str) -> Parent:
        """An OCI image, unpacked once per team and digest into the host's cache (per team: one
        team's import can neither stand in for another's nor tell it was made)."""
        loop = asyncio.get_running_loop()
        cancel = threading.Event()

        def say(line: str) -> None:
            loop.call_soon_threadsafe(blog.system, line)

        images = self.images_dir / team_id
        images.mkdir(parents=True, exist_ok=True, mode=0o700)
        scratch = images / "tmp"
        try:
            digest = await asyncio.to_thread(oci.image_digest, image, scratch, cancel=cancel)
            lock = self._image_locks.setdefault(f"{team_id}:{digest}", asyncio.Lock())
            async with lock:
                dest = images / oci.cache_key(digest)
                config_file = dest / "config.json"
                if config_file.exists():
                    blog.system(f"image {digest[:19]} (unpacked before)")
                    config = oci.ImageConfig(**json.loads(config_file.read_text()))
                else:
                    blog.system(f"unpacking image {digest[:19]}")
                    await asyncio.to_thread(shutil.rmtree, dest, True)
                    config = await asyncio.to_thread(oci.import_image, image, dest / "rootfs", scratch, say, cancel)
                    if config.digest != digest:  # it changed between the two reads: never cache it as the first
                        await asyncio.to_thread(shutil.rmtree, dest, True)
                        raise BuildFailed(BuildFailure.IMAGE_PULL_FAILED, f"{image} changed while it was read; try again")
                    config_file.write_text(json.dumps(dataclasses.asdict(config)))  # written last: the mark
        except asyncio.CancelledError:
            cancel.set()  # the import's tools are killed
            raise
        except oci.ImageError as e:
            raise BuildFailed(e.code, e.message) from None
        user = "root" if config.user in ("root", "0", "0:0") else None
        return Parent(dest / "rootfs", f"image:{digest}", dict(config.env), config.workdir, user)

