"""How the examples run without a model key: `--offline` (or no OPENAI_API_KEY) puts hutch's
scripted model on loopback in place of the LLM, replaying the tool calls the example expects.
With a key, the same example talks to the real model."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from hutch.integrations.scripted_model import Script, ScriptedModel

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4.1-mini")


def offline() -> bool:
    return "--offline" in sys.argv or not os.environ.get("OPENAI_API_KEY")


@contextlib.contextmanager
def openai_base_url(script: Script) -> Iterator[str | None]:
    """The base URL to give an OpenAI client: the scripted model's offline, None (the real API) online."""
    if not offline():
        yield None
        return
    with ScriptedModel(script) as model:
        yield model.url


def agents_model(base_url: str | None) -> Any:
    """An OpenAI Agents SDK model on Chat Completions, at `base_url` (None: api.openai.com)."""
    from agents import OpenAIChatCompletionsModel, set_tracing_disabled
    from openai import AsyncOpenAI

    if base_url is not None:
        set_tracing_disabled(True)  # offline: nothing leaves this machine
    client = AsyncOpenAI(base_url=base_url, api_key=None if base_url is None else "offline")
    return OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
