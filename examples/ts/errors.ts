// The Superserve SDK guide's "Error handling", with only the import changed (and an id that names
// no sandbox, so the NotFoundError branch runs).
import { Sandbox, NotFoundError, AuthenticationError } from "@hutch/sdk"

const id = process.argv[2] ?? "no-such-sandbox"
try {
  const sandbox = await Sandbox.connect(id)
  console.log("connected to", sandbox.id)
} catch (e) {
  if (e instanceof NotFoundError) {
    /* gone — create a fresh one */
    console.log("gone:", e.code, e.statusCode)
  } else if (e instanceof AuthenticationError) {
    /* fix HUTCH_API_KEY */
  } else throw e
}
