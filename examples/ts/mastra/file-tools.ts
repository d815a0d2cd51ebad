// The Mastra guide's "Run code with file tools", with only the import changed (and the model from
// ./_model, so it also runs offline against the scripted model).
import { Agent } from "@mastra/core/agent"
import { createTool } from "@mastra/core/tools"
import { Sandbox } from "@hutch/sdk"
import { z } from "zod"
import { model } from "./_model"

const sandbox = await Sandbox.create({ name: "code-runner" })

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

const writeFile = createTool({
  id: "write-file",
  description: "Write a text file in the sandbox. Use an absolute path.",
  inputSchema: z.object({ path: z.string(), content: z.string() }),
  execute: async ({ path, content }) => {
    await sandbox.files.write(path, content)
    return `Wrote ${content.length} characters to ${path}`
  },
})

const readFile = createTool({
  id: "read-file",
  description: "Read a text file from the sandbox. Use an absolute path.",
  inputSchema: z.object({ path: z.string() }),
  execute: async ({ path }) => ({ content: await sandbox.files.readText(path) }),
})

const agent = new Agent({
  id: "code-runner",
  name: "Code Runner",
  instructions:
    "You are a coding assistant. Save code under /home/user, run it with " +
    "the bash tool, and report the real output. Use python3, not python.",
  model: model("anthropic/claude-sonnet-5-5"),
  tools: { bash, writeFile, readFile },
})

try {
  const result = await agent.generate(
    "Write a Python script that prints the first 10 prime numbers, " +
      "run it, and show me the output.",
    { maxSteps: 10 },
  )
  for (const call of result.steps.flatMap((step) => step.toolCalls)) {
    console.log(`> ${call.payload.toolName}`, JSON.stringify(call.payload.args))
  }
  console.log(result.text)
} finally {
  await sandbox.kill()
}
