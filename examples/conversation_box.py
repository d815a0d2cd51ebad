"""One box per conversation: the same box across two turns, paused in between, so files and
installed packages persist without an idle box running.

    python examples/conversation_box.py [--offline]
"""

from __future__ import annotations

import uuid

from _offline import agents_model, openai_base_url
from agents import Agent, Runner

from hutch import Sandbox
from hutch.integrations.conversation import conversation_sandbox, kill_conversations
from hutch.integrations.openai_agents import sandbox_tools
from hutch.integrations.scripted_model import answer, call

conversation = {"conversation_id": uuid.uuid4().hex}
TURNS = [("Remember that my favourite number is 7: write it to /home/user/memory.txt.",
          [call("write_file", path="/home/user/memory.txt", content="favourite number: 7\n"), answer("Noted.")]),
         ("What is my favourite number?",
          [call("read_file", path="/home/user/memory.txt"), answer("Your favourite number is 7.")])]

try:
    for question, script in TURNS:
        with conversation_sandbox(conversation) as sandbox, openai_base_url(script) as base_url:
            agent = Agent(name="assistant", instructions="Keep notes in /home/user/memory.txt in the sandbox.",
                          tools=sandbox_tools(sandbox), model=agents_model(base_url))
            print(f"user: {question}\nagent: {Runner.run_sync(agent, question).final_output}  (box {sandbox.id[:8]})")
        print("between turns the box is", Sandbox.list(metadata=conversation)[0].status)
finally:
    print("cleaned up", kill_conversations(conversation), "box")
