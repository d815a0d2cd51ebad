// The Mastra guide's "Wire the sandbox into the agent", with only the import changed (and the
// model from ./_model, so it also runs offline against the scripted model).
import { Agent } from "@mastra/core/agent"
import { createTool } from "@mastra/core/tools"
import { Sandbox } from "@hutch/sdk"
import { z } from "zod"
import { model } from "./_model"

const sandbox = await Sandbox.create({ name: "agent-runtime" })

const bash = createTool({
  id: "bash",
  description: "Run a shell command in the sandbox.",
  inputSchema: z.object({ command: z.string() }),
  execute: async ({ command }) => {
    const { stdout, stderr, exitCode } = await sandbox.commands.run(command, {
      timeoutMs: 60_000,
    })
    return { stdout, stderr, exitCode }
  },
})

const agent = new Agent({
  id: "workspace-assistant",
  name: "Workspace Assistant",
  instructions: "Use the bash tool to inspect the sandbox before answering.",
  model: model("anthropic/claude-sonnet-5-5"),
  tools: { bash },
})

try {
  const result = await agent.generate(
    "List the files in /tmp and tell me how many there are.",
  )
  console.log(result.text)
} finally {
  await sandbox.kill()
}
