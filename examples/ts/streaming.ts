// The Superserve SDK guide's "Streaming & interactive commands", with only the import changed.
// hutch/base has no npm, so the build's command is one that prints as it goes.
import { Sandbox } from "@hutch/sdk"

const sandbox = await Sandbox.create({ name: "streaming" })
try {
  const r = await sandbox.commands.run("for step in fetch compile link; do echo $step; sleep 0.3; done", {
    onStdout: (data) => process.stdout.write(data),
    timeoutMs: 300_000,
  })
  console.log(`exited ${r.exitCode}`, r.stdout.length) // full stdout captured too

  // spawn(): stdin, signals, a REPL (hutch/base has python3, not python)
  const session = await sandbox.commands.spawn("python3 -i", {
    onStdout: (data) => process.stdout.write(data),
  })
  session.stdin.write("print(2 + 2)\n")
  session.stdin.close() // EOF, so the REPL exits
  console.log((await session.wait()).exitCode)
} finally {
  await sandbox.kill()
}
