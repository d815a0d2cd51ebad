"""An OpenAI Agents SDK agent whose E2B sandbox persists its workspace with E2B's snapshots
(`workspace_persistence="snapshot"`), pointed at hutch: two runs, the second resumed from the first's
session state in a new box booted from the snapshot the first one's end took.

Run by tests/integration/test_e2b_snapshots.py with the python of .cache/e2b-openai-agents
(`openai-agents[e2b]==0.24.0`, e2b 2.31.0) and only the E2B variables and OPENAI_BASE_URL/
OPENAI_API_KEY set (the model is hutch's scripted model on loopback):
`python openai_agent_snapshot.py <tag> <state dir>` prints one JSON object.

Run one's session is the script's own (so its state can be kept): the runner uses it, and leaving
it stops it (persist_workspace: E2B's create_snapshot, the snapshot's id kept in the state dir) and
shuts it down (the box is killed: pause_on_exit is off). Run two resumes from the serialized state:
the extension finds the box gone, and hydrate_workspace boots a new one from the snapshot
(Sandbox.create(template=<snapshot id>)); at its end it takes another snapshot and kills that box.
The workspace root is /home/user/workspace, as in openai_agent.py (which says why).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agents import OpenAIChatCompletionsModel, RunConfig, Runner, set_tracing_disabled
from agents.extensions.sandbox.e2b import E2BSandboxClient, E2BSandboxClientOptions, E2BSandboxSessionState
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Shell
from agents.sandbox.entries import File
from agents.sandbox.snapshot import LocalSnapshotSpec
from openai import AsyncOpenAI

TAG, STATE_DIR = sys.argv[1], Path(sys.argv[2])
ROOT = "/home/user/workspace"


async def main() -> dict[str, Any]:
    set_tracing_disabled(True)  # traces would go to OpenAI; the scripted model is the only peer
    model = OpenAIChatCompletionsModel(model="scripted", openai_client=AsyncOpenAI(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]))
    manifest = Manifest(root=ROOT, entries={"greeting.txt": File(content=b"hello from the manifest\n")})
    agent = SandboxAgent(name="e2b-snapshots", instructions="Work in the sandbox.", model=model,
                         capabilities=[Shell()], default_manifest=manifest)
    client = E2BSandboxClient()
    options = E2BSandboxClientOptions(sandbox_type="e2b", timeout=300, metadata={"suite": "openai-agents-snapshot",
                                                                                 "tag": TAG},
                                      workspace_persistence="snapshot")
    session = await client.create(manifest=manifest, options=options,
                                  snapshot=LocalSnapshotSpec(base_path=STATE_DIR))
    async with session:
        first = await Runner.run(agent, "Take notes.", run_config=RunConfig(sandbox=SandboxRunConfig(session=session)))
        assert isinstance(session.state, E2BSandboxSessionState)
        first_box = session.state.sandbox_id
    kept = json.dumps(client.serialize_session_state(session.state))  # what an app keeps between runs
    state = client.deserialize_session_state(json.loads(kept))
    second = await Runner.run(agent, "Read the notes.",
                              run_config=RunConfig(sandbox=SandboxRunConfig(client=client, session_state=state)))
    return {"first": first.final_output, "second": second.final_output, "first_box": first_box}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())), flush=True)
    os._exit(0)  # not the interpreter's own exit: see code_interpreter.py
