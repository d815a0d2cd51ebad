// The Superserve SDK guide's "Preview URLs", with only the import changed (and the box killed at the end).
import { Sandbox } from "@hutch/sdk"

const sandbox = await Sandbox.create({
  name: "preview",
  previewAccess: "private",
})
try {
  await sandbox.commands.spawn("python3 -m http.server 8000")
  await sandbox.publishPreviewPort(8000, { access: "private" })
  const url = await sandbox.getSignedPreviewUrl(8000, {
    expiresInSeconds: 300,
  })
  console.log(url)

  // For a machine client or reverse proxy, mint a token and send the returned header instead:
  const credential = await sandbox.getPreviewToken(8000)
  const headers = { [credential.header]: credential.token }
  console.log(Object.keys(headers), sandbox.getPreviewUrl(8000))
} finally {
  await sandbox.kill()
}
