// The Mastra guide's "One sandbox per conversation", with only the import changed (and the model
// from ./_model, so it also runs offline against the scripted model).
import { Agent } from "@mastra/core/agent"
import { RequestContext } from "@mastra/core/request-context"
import { createTool } from "@mastra/core/tools"
import { Sandbox } from "@hutch/sdk"
import { z } from "zod"
import { model } from "./_model"

// Sandboxes with a turn in progress, keyed by ID. They stay in your process.
const sandboxes = new Map<string, Promise<Sandbox>>()

const bash = createTool({
  id: "bash",
  description: "Run a shell command in the sandbox.",
  inputSchema: z.object({ command: z.string() }),
  requestContextSchema: z.object({ sandboxId: z.string() }),
  execute: async ({ command }, { requestContext }) => {
    const sandbox = await sandboxes.get(requestContext.get("sandboxId"))
    if (!sandbox) throw new Error("No sandbox is connected for this turn.")
    const { stdout, stderr, exitCode } = await sandbox.commands.run(command, {
      timeoutMs: 60_000,
    })
    return { stdout, stderr, exitCode }
  },
})

const agent = new Agent({
  id: "workspace-assistant",
  name: "Workspace Assistant",
  instructions: "Use the bash tool to work in the sandbox.",
  model: model("anthropic/claude-sonnet-5-5"),
  tools: { bash },
})

async function runTurn(sandboxId: string, prompt: string) {
  // The turn pauses the sandbox when it ends, so allow one turn at a time.
  if (sandboxes.has(sandboxId)) throw new Error("A turn is already running.")
  // Resumes the sandbox if it is paused.
  const connecting = Sandbox.connect(sandboxId)
  sandboxes.set(sandboxId, connecting)
  try {
    const sandbox = await connecting
    const requestContext = new RequestContext<{ sandboxId: string }>()
    requestContext.set("sandboxId", sandboxId)
    try {
      const result = await agent.generate(prompt, { requestContext, maxSteps: 10 })
      return result.text
    } finally {
      // Pause between turns. Files and memory are kept until the next connect.
      await sandbox.pause()
    }
  } finally {
    sandboxes.delete(sandboxId)
  }
}

const { id } = await Sandbox.create({ name: "chat-session" })

try {
  await runTurn(id, "Create /home/user/todo.txt with three short items.")
  console.log(
    await runTurn(id, "Add a fourth item to /home/user/todo.txt, then print the file."),
  )
} finally {
  await Sandbox.killById(id)
}
