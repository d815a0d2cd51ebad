"""Drives the real, unmodified e2b SDK's volumes (2.63) against hutch; prints what happened as one
JSON object.

Run by tests/integration/test_e2b.py with an SDK line's own python and only E2B_API_KEY,
E2B_API_URL, E2B_SANDBOX_URL and E2B_VOLUME_API_URL set: `python volumes.py <sync|async> <tag>`.
Standard library and e2b.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from e2b import AsyncSandbox, AsyncVolume, Sandbox, Volume

MODE, TAG = sys.argv[1], sys.argv[2]
out: dict[str, Any] = {}


async def caught(fn: Callable[[], Any]) -> str:
    try:
        result = fn()
        if isinstance(result, Awaitable):
            await result
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:200]
    return "none"


async def maybe(value: Any) -> Any:
    return await value if isinstance(value, Awaitable) else value


async def main() -> None:
    vol_cls: Any = AsyncVolume if MODE == "async" else Volume
    box_cls: Any = AsyncSandbox if MODE == "async" else Sandbox
    vol = await maybe(vol_cls.create(f"e2b-{TAG}"))
    out["created"] = {"id_set": bool(vol.volume_id), "name": vol.name, "token_set": bool(vol.token)}
    stat = await maybe(vol.write_file("/dir/a.txt", "hello volume"))
    out["written"] = {"type": str(stat.type.value), "size": stat.size, "path": stat.path}
    out["made"] = str((await maybe(vol.make_dir("/made/deep", force=True))).type.value)
    out["made_no_force"] = await caught(lambda: vol.make_dir("/nothing/below"))
    out["listed"] = sorted(e.name for e in await maybe(vol.list("/")))
    out["listed_deep"] = sorted(e.path for e in await maybe(vol.list("/", depth=2)))
    out["info"] = {"type": str((await maybe(vol.get_info("/dir/a.txt"))).type.value)}
    out["exists"] = [await maybe(vol.exists("/dir/a.txt")), await maybe(vol.exists("/no/such"))]
    out["read"] = await maybe(vol.read_file("/dir/a.txt"))
    out["read_bytes"] = len(await maybe(vol.read_file("/dir/a.txt", format="bytes")))
    out["chmod"] = (await maybe(vol.update_metadata("/dir/a.txt", mode=0o600))).mode
    out["missing"] = await caught(lambda: vol.read_file("/no/such"))

    sbx = await maybe(box_cls.create(volume_mounts={"/mnt/vol": vol}, metadata={"tag": TAG}))
    try:
        r = await maybe(sbx.commands.run("cat /mnt/vol/dir/a.txt; echo from-box > /mnt/vol/from-box.txt"))
        out["box_read"] = r.stdout
        out["api_read"] = await maybe(vol.read_file("/from-box.txt"))
        info = await maybe(box_cls.get_info(sbx.sandbox_id))
        out["mounts"] = info.volume_mounts
        out["destroy_in_use"] = await caught(lambda: vol_cls.destroy(vol.volume_id))
    finally:
        await maybe(sbx.kill())
    out["connected"] = (await maybe(vol_cls.connect(vol.volume_id))).name
    out["in_list"] = vol.volume_id in [v.volume_id for v in await maybe(vol_cls.list())]
    await maybe(vol.remove("/dir"))
    out["removed"] = await maybe(vol.exists("/dir/a.txt"))
    out["destroyed"] = [await maybe(vol_cls.destroy(vol.volume_id)), await maybe(vol_cls.destroy(vol.volume_id))]
    out["after"] = await caught(lambda: vol_cls.get_info(vol.volume_id))


asyncio.run(main())
print(json.dumps(out), flush=True)
os._exit(0)  # as client.py: e2b 2.63's Rust transport may abort at interpreter exit
