// The Superserve SDK guide's "Persist & reconnect across sessions", with only the import changed
// (and the two halves, "hours later, a different process", in one file; the box has no git
// checkout, so the command's non-zero exit is printed, not thrown).
import { Sandbox } from "@hutch/sdk"

const { id } = await Sandbox.create({ name: "dev-box", timeoutSeconds: 3600 })
// pause() to stop billing now, or the box auto-pauses once timeoutSeconds elapses
await (await Sandbox.connect(id)).pause()

// hours later, a different process — fresh token, auto-resumes if paused:
const sandbox = await Sandbox.connect(id)
const result = await sandbox.commands.run("git pull && npm test")
console.log(`exit ${result.exitCode}`, (await sandbox.getInfo()).status)
await Sandbox.killById(id)
