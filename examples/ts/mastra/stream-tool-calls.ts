// The Mastra guide's "Stream tool calls", with only the import changed (and the model from
// ./_model, so it also runs offline against the scripted model).
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
  const stream = await agent.stream(
    "Which Linux distribution and Python version does this machine run?",
  )
  for await (const chunk of stream.fullStream) {
    if (chunk.type === "text-delta") process.stdout.write(chunk.payload.text)
    if (chunk.type === "tool-call") {
      console.log(`\n> ${chunk.payload.toolName}`, JSON.stringify(chunk.payload.args))
    }
    if (chunk.type === "tool-result") {
      console.log(JSON.stringify(chunk.payload.result))
    }
  }
} finally {
  await sandbox.kill()
}
