// The Superserve SDK guide's "Secrets" and "Network egress control", with only the import changed
// (and the boxes killed at the end).
import { Secret, Sandbox } from "@hutch/sdk"

// 1. Store the credential once — a provider shortcut sets the auth scheme + allowed hosts.
await Secret.create({
  name: "anthropic-prod",
  value: process.env.ANTHROPIC_API_KEY!,
  provider: "anthropic",
})

// 2. Bind it: env var → secret name. Pair with egress lockdown for defense in depth.
const sandbox = await Sandbox.create({
  name: "research-agent",
  secrets: { ANTHROPIC_API_KEY: "anthropic-prod" },
  network: { allowOut: ["api.anthropic.com"], denyOut: ["0.0.0.0/0"] },
})

const restricted = await Sandbox.create({
  name: "restricted",
  network: {
    allowOut: ["api.openai.com", "*.github.com", "140.82.112.0/20"],
    denyOut: ["0.0.0.0/0"],
  },
})

try {
  const { stdout } = await sandbox.commands.run("printenv ANTHROPIC_API_KEY")
  console.log("the box sees:", stdout.trim()) // a stand-in, useless anywhere else
  console.log("rules:", JSON.stringify((await restricted.getInfo()).network))
} finally {
  await Promise.all([sandbox.kill(), restricted.kill(), Secret.deleteByName("anthropic-prod")])
}
