"""One box per conversation: found again by a metadata tag, resumed for a turn, paused after it.

    with conversation_sandbox({"agent_id": agent.id}) as sandbox:   # or `async with` the async one
        ...one turn of the agent, its tools bound to `sandbox`...
    # paused: files and installed packages wait for the next turn, no box runs meanwhile

    kill_conversations({"agent_id": agent.id})   # when the conversation is over
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from hutch.sdk import AsyncSandbox, Sandbox, SandboxInfo


def _reusable(found: list[SandboxInfo]) -> SandboxInfo | None:
    """The newest of the tagged boxes that can still be resumed."""
    alive = [i for i in found if i.status != "failed"]
    return max(alive, key=lambda i: i.created_at) if alive else None


@contextmanager
def conversation_sandbox(tag: dict[str, str], *, name: str = "conversation", **create: Any) -> Iterator[Sandbox]:
    """The conversation's box (created with `tag` as its metadata the first time), paused on exit."""
    info = _reusable(Sandbox.list(metadata=tag))
    sandbox = Sandbox.connect(info.id) if info else Sandbox.create(name, metadata=tag, **create)
    try:
        yield sandbox
    finally:
        sandbox.pause()
        sandbox.close()


@asynccontextmanager
async def async_conversation_sandbox(tag: dict[str, str], *, name: str = "conversation",
                                     **create: Any) -> AsyncIterator[AsyncSandbox]:
    info = _reusable(await AsyncSandbox.list(metadata=tag))
    sandbox = await AsyncSandbox.connect(info.id) if info else await AsyncSandbox.create(name, metadata=tag, **create)
    try:
        yield sandbox
    finally:
        await sandbox.pause()
        await sandbox.close()


def kill_conversations(tag: dict[str, str]) -> int:
    """Kill every box with this tag; how many there were."""
    found = Sandbox.list(metadata=tag)
    for info in found:
        Sandbox.kill_by_id(info.id)
    return len(found)
