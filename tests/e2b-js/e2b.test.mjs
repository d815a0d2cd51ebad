// The unmodified e2b JS SDK (npm e2b, pinned in package.json) and Mastra's E2B workspace sandbox
// (@mastra/e2b) against hutch's E2B API, on a real server that scripts/test-ts starts: E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY come from its client.env. Node's own test runner.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { CommandExitError, Sandbox, Secret, Template, Volume } from "e2b";
import { E2BSandbox } from "@mastra/e2b";

for (const name of ["E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"]) {
  assert.ok(process.env[name], `${name} is set (scripts/test-ts sets it)`);
}

/** Whether `check()` comes true within `ms`: a wait on state, not a fixed sleep. */
async function until(check, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return true;
}

describe("the e2b JS SDK", () => {
  const run = randomUUID();
  let sbx;

  before(async () => {
    sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: "e2b-js", run } });
  });
  after(async () => {
    await sbx?.kill().catch(() => {});
  });

  test("commands: foreground with callbacks, a failing exit, background, stdin", async () => {
    const seen = [];
    const r = await sbx.commands.run("echo out; echo err >&2", { onStdout: (d) => seen.push(`o:${d}`) });
    assert.deepEqual([r.stdout, r.stderr, r.exitCode], ["out\n", "err\n", 0]);
    assert.deepEqual(seen, ["o:out\n"]);
    await assert.rejects(sbx.commands.run("echo failing; exit 3"), (e) => e instanceof CommandExitError && e.exitCode === 3);
    const late = await sbx.commands.run("sleep 0.3; echo late", { background: true });
    assert.equal((await late.wait()).stdout, "late\n");
    const reader = await sbx.commands.run("read line; echo got $line", { background: true, stdin: true });
    await sbx.commands.sendStdin(reader.pid, "hello\n");
    assert.equal((await reader.wait()).stdout, "got hello\n");
    assert.equal((await sbx.commands.run("whoami", { user: "root" })).stdout, "root\n");
  });

  test("files: write, read, list, exists, remove", async () => {
    await sbx.files.write("/home/user/a.txt", "alpha");
    assert.equal(await sbx.files.read("/home/user/a.txt"), "alpha");
    const names = (await sbx.files.list("/home/user")).map((e) => e.name);
    assert.ok(names.includes("a.txt"), names.join(","));
    assert.equal(await sbx.files.exists("/home/user/a.txt"), true);
    await sbx.files.remove("/home/user/a.txt");
    assert.equal(await sbx.files.exists("/home/user/a.txt"), false);
  });

  test("a directory watch sees a file made in it", async () => {
    await sbx.files.makeDir("/home/user/watched");
    const events = [];
    const watch = await sbx.files.watchDir("/home/user/watched", (e) => events.push(e));
    try {
      await sbx.commands.run("echo x > /home/user/watched/made.txt");
      assert.ok(await until(() => events.some((e) => e.name === "made.txt")), JSON.stringify(events));
    } finally {
      await watch.stop();
    }
  });

  test("a PTY runs a shell, takes input and is killed", async () => {
    let output = "";
    const decoder = new TextDecoder();
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { output += decoder.decode(d); } });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode("echo pty-$((6*7))\n"));
    assert.ok(await until(() => output.includes("pty-42")), output);
    assert.equal(await sbx.pty.kill(pty.pid), true);
  });

  test("list by metadata", async () => {
    const found = await Sandbox.list({ query: { metadata: { run } } }).nextItems();
    assert.deepEqual(found.map((s) => s.sandboxId), [sbx.sandboxId]);
  });

  test("pause, then connect: the files and a running process are kept", async () => {
    await sbx.files.write("/home/user/kept.txt", "kept");
    const sleeper = await sbx.commands.run("sleep 1000", { background: true });
    assert.equal(await sbx.pause(), true);
    const info = await Sandbox.getInfo(sbx.sandboxId);
    assert.equal(info.state, "paused");
    const again = await Sandbox.connect(sbx.sandboxId);
    assert.equal(await again.files.read("/home/user/kept.txt"), "kept");
    const pids = (await again.commands.list()).map((p) => p.pid);
    assert.ok(pids.includes(sleeper.pid), `${sleeper.pid} in ${pids}`);
  });

  test("kill: the box is gone", async () => {
    const id = sbx.sandboxId;
    assert.equal(await sbx.kill(), true);
    assert.deepEqual(await Sandbox.list({ query: { metadata: { run } } }).nextItems(), []);
    await assert.rejects(Sandbox.connect(id));
    sbx = undefined;
  });
});

describe("the e2b JS SDK's volumes, secrets and templates built from code", () => {
  const run = randomUUID().slice(0, 8);

  test("a volume: files with no box, mounted in a box, refused deletion while mounted", async () => {
    const vol = await Volume.create(`js-${run}`);
    await vol.writeFile("/dir/a.txt", "from js");
    assert.equal(await vol.readFile("/dir/a.txt"), "from js");
    assert.deepEqual((await vol.list("/")).map((e) => e.name), ["dir"]);
    const sbx = await Sandbox.create({ volumeMounts: { "/mnt/v": vol }, timeoutMs: 120_000 });
    try {
      assert.equal((await sbx.commands.run("cat /mnt/v/dir/a.txt")).stdout, "from js");
      await assert.rejects(Volume.destroy(vol.volumeId));
    } finally {
      await sbx.kill();
    }
    assert.equal(await Volume.destroy(vol.volumeId), true);
  });

  test("a secret: made, updated, listed and destroyed; its value is never returned", async () => {
    const made = await Secret.create(`js-key-${run}`, "v1");
    assert.equal(made.version, 1);
    const updated = await Secret.update(`js-key-${run}`, "v2");
    assert.equal(updated.version, 2);
    assert.equal((await Secret.getInfo(made.secretId)).name, `js-key-${run}`);
    assert.ok(!JSON.stringify(await Secret.getInfo(made.secretId)).includes("v2"));
    assert.equal(await Secret.destroy(`js-key-${run}`), true);
    assert.equal(await Secret.destroy(`js-key-${run}`), false);
  });

  test("Template.build with a copy from the client's files, then a box of it", async () => {
    const context = mkdtempSync(join(tmpdir(), "hutch-js-ctx-"));
    mkdirSync(join(context, "app"));
    writeFileSync(join(context, "app", "main.txt"), "copied by js\n");
    const template = Template({ fileContextPath: context }).fromBaseImage()
      .copy("app", "/home/user/app/")
      .runCmd("echo js-built > /home/user/built");
    const logs = [];
    await Template.build(template, `js-tpl-${run}`, { onBuildLogs: (entry) => logs.push(String(entry.message)) });
    assert.ok(logs.length > 0);
    const sbx = await Sandbox.create(`js-tpl-${run}`, { timeoutMs: 120_000 });
    try {
      const r = await sbx.commands.run("cat /home/user/app/main.txt /home/user/built");
      assert.equal(r.stdout, "copied by js\njs-built\n");
    } finally {
      await sbx.kill();
    }
    await assert.rejects(Template.build(Template().fromBaseImage().runCmd("exit 4"), `js-bad-${run}`),
      (e) => /step 1/.test(String(e.message)));
  });
});

describe("E2B_DOMAIN alone", () => {
  test("a box made, a command, a file both ways, a second client by id, a port's URL, killed", () => {
    assert.ok(process.env.E2B_DOMAIN && process.env.NODE_EXTRA_CA_CERTS, "client.env names E2B's domain and its CA");
    const env = { PATH: process.env.PATH, E2B_API_KEY: process.env.E2B_API_KEY, E2B_DOMAIN: process.env.E2B_DOMAIN,
                  NODE_EXTRA_CA_CERTS: process.env.NODE_EXTRA_CA_CERTS };
    const stdout = execFileSync(process.execPath, [new URL("./domain.mjs", import.meta.url).pathname],
                                { env, encoding: "utf8", timeout: 240_000 });
    const out = JSON.parse(stdout.trim().split("\n").at(-1));
    assert.match(out.envdHost, new RegExp(`^49983-[0-9a-f-]+\\.${process.env.E2B_DOMAIN.replace(/[.]/g, "\\.")}$`));
    assert.deepEqual([out.echo, out.read, out.connected, out.port, out.killed],
                     ["hello from user\n", "written by the JS SDK", "written by the JS SDK", "written by the JS SDK", true]);
  });
});

describe("Mastra's E2B workspace sandbox", () => {
  test("starts a box, runs a command and writes files, then is destroyed", async () => {
    const sandbox = new E2BSandbox({ template: "base", timeout: 120_000 });
    await sandbox.start();
    const box = sandbox.e2b;
    try {
      assert.equal(await sandbox.isReady(), true);
      const r = await sandbox.executeCommand("echo", ["from", "mastra"]);
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout.trim(), "from mastra");
      await sandbox.writeFiles([{ path: "/home/user/m.txt", content: "written by mastra" }]);
      assert.equal(await box.files.read("/home/user/m.txt"), "written by mastra");
    } finally {
      await sandbox.destroy();
    }
    assert.equal(await Sandbox.list({ query: { metadata: { "mastra-sandbox-id": sandbox.id } } }).nextItems()
      .then((found) => found.length), 0);
  });
});
