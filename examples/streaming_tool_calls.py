"""Streaming: see each tool call and its output as the agent runs (OpenAI Agents SDK, async).

    python examples/streaming_tool_calls.py [--offline]
"""

from __future__ import annotations

import asyncio

from _offline import agents_model, openai_base_url
from agents import Agent, Runner

from hutch import AsyncSandbox
from hutch.integrations.openai_agents import sandbox_tools
from hutch.integrations.scripted_model import answer, call

SCRIPT = [call("bash", command="for i in 1 2 3; do echo step $i; done"),
          call("bash", command="df -h / | tail -1"),
          answer("Counted to three and checked the disk.")]


async def main() -> None:
    sandbox = await AsyncSandbox.create("streaming-example")
    try:
        with openai_base_url(SCRIPT) as base_url:
            agent = Agent(name="runner", instructions="Use bash in the sandbox.", tools=sandbox_tools(sandbox),
                          model=agents_model(base_url))
            run = Runner.run_streamed(agent, "Count to three in the shell, then show the disk usage.")
            async for event in run.stream_events():
                if event.type == "run_item_stream_event" and event.name == "tool_called":
                    print("tool call:", event.item.raw_item.arguments)
                elif event.type == "run_item_stream_event" and event.name == "tool_output":
                    print("tool output:", str(event.item.output).splitlines()[:3])
        print("final:", run.final_output)
    finally:
        await sandbox.kill()


asyncio.run(main())
