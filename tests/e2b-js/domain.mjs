// The unmodified e2b JS SDK through E2B's host form alone: run by e2b.test.mjs in a process of its
// own whose environment holds only E2B_DOMAIN, E2B_API_KEY and NODE_EXTRA_CA_CERTS (Node reads the
// last at start), so nothing of hutch's path form can be what answers. Prints one JSON line.
import { Sandbox } from "e2b";

for (const name of ["E2B_API_URL", "E2B_SANDBOX_URL"]) {
  if (process.env[name]) throw new Error(`${name} is set: this client must use E2B_DOMAIN alone`);
}
const out = {};
const sbx = await Sandbox.create({ timeoutMs: 120_000 });
try {
  out.envdHost = sbx.getHost(49983);
  out.echo = (await sbx.commands.run("echo hello from $(whoami)")).stdout;
  await sbx.files.write("/tmp/note.txt", "written by the JS SDK");
  out.read = await sbx.files.read("/tmp/note.txt");
  const again = await Sandbox.connect(sbx.sandboxId);
  out.connected = (await again.commands.run("cat /tmp/note.txt")).stdout;
  await sbx.commands.run("cd /tmp && python3 -m http.server 8000 >/dev/null 2>&1", { background: true });
  for (let i = 0; i < 100; i++) {
    if ((await sbx.commands.run("ss -ltn 'sport = :8000' || true")).stdout.includes("LISTEN")) break;
  }
  out.port = await (await fetch(`https://${sbx.getHost(8000)}/note.txt`)).text();
} finally {
  out.killed = await sbx.kill();
}
console.log(JSON.stringify(out));
