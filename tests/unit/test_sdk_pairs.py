"""The blocking and the asyncio SDK cannot drift: every call of one is a call of the other, with the
same parameters and docstring, awaited on the async side and returning the same thing."""

from __future__ import annotations

import inspect
import pydoc
import re
from typing import Any

import pytest

from hutch import AsyncProcess, AsyncSandbox, AsyncSecret, AsyncTemplate, Process, Provider, Sandbox, Secret, Template
from hutch.sdk.process import AsyncProcessStdin, ProcessStdin
from hutch.sdk.sandbox import AsyncCommands, AsyncFiles, Commands, Files

PAIRS: list[tuple[type, type]] = [(Sandbox, AsyncSandbox), (Commands, AsyncCommands), (Files, AsyncFiles),
                                  (Template, AsyncTemplate), (Secret, AsyncSecret), (Process, AsyncProcess),
                                  (ProcessStdin, AsyncProcessStdin)]
# Where the two shapes must differ: an iterator and an async iterator, of a watch or a build's log.
SHAPED = {(Files, "watch_dir"), (Template, "stream_build_logs")}
ASYNC_ONLY = {(AsyncProcess, "attach")}  # how both fronts attach to a process (commands.connect)


def calls(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))
            and (cls, name) not in ASYNC_ONLY}


def shown(annotation: Any) -> str:
    """A return annotation with the async classes' names read as the blocking ones'."""
    text = str(annotation)
    for sync, async_ in PAIRS:
        text = re.sub(rf"\b{async_.__name__}\b", sync.__name__, text)
    return text


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=lambda cls: cls.__name__)
def test_both_fronts_offer_the_same_calls(sync: type, async_: type) -> None:
    assert calls(sync) == calls(async_)


@pytest.mark.parametrize(("sync", "async_", "name"), [(s, a, name) for s, a in PAIRS for name in sorted(calls(s))],
                         ids=lambda value: value if isinstance(value, str) else value.__name__)
def test_a_call_is_written_once_for_both(sync: type, async_: type, name: str) -> None:
    blocking, awaited = getattr(sync, name), getattr(async_, name)
    assert inspect.signature(blocking).parameters == inspect.signature(awaited).parameters
    if (sync, name) in SHAPED:
        return
    assert blocking.__doc__ == awaited.__doc__
    assert shown(inspect.signature(blocking).return_annotation) == shown(inspect.signature(awaited).return_annotation)
    if blocking is not awaited:  # the same function where there is nothing to wait for (get_preview_url)
        assert not inspect.iscoroutinefunction(blocking) and inspect.iscoroutinefunction(awaited)


def test_a_providers_listing_is_the_same_call_both_ways() -> None:
    blocking, awaited = inspect.signature(Provider.list), inspect.signature(Provider.list_async)
    assert blocking == awaited and inspect.iscoroutinefunction(Provider.list_async)


@pytest.mark.parametrize("front", [Sandbox, AsyncSandbox])
def test_help_shows_a_calls_signature_and_docstring(front: Any) -> None:
    page = pydoc.plain(pydoc.render_doc(front.create))
    assert "Create a sandbox and return once it is ready for commands." in page
    assert "from_template: 'TemplateRef | None' = None" in page and f"-> '{front.__name__}'" in page
