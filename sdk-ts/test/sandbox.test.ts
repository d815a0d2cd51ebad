// The sandbox's lifecycle and settings, against the real server: create with every option,
// connect, list by metadata and status, getInfo, update, pause and resume (a running process
// kept), kill and killById, the network and audit logs.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { randomUUID } from "node:crypto";
import { NotFoundError, Sandbox } from "@hutch/sdk";
import { box, cleanup } from "./support.js";

after(cleanup);

describe("Sandbox", () => {
  test("create takes every option, and getInfo shows them", async () => {
    const tag = randomUUID();
    const sandbox = await box({
      name: "all-options", metadata: { suite: "ts", tag }, envVars: { MODE: "dev" }, timeoutSeconds: 3600,
      autoDeleteSeconds: 600, network: { allowOut: ["pypi.org"], denyOut: ["0.0.0.0/0"] }, previewAccess: "private",
    });
    assert.equal(sandbox.name, "all-options");
    assert.equal(sandbox.status, "active");
    assert.deepEqual(sandbox.metadata, { suite: "ts", tag });
    const info = await sandbox.getInfo();
    assert.equal(info.id, sandbox.id);
    assert.equal(info.template, "hutch/base");
    assert.equal(info.timeoutSeconds, 3600);
    assert.equal(info.autoDeleteSeconds, 600);
    assert.deepEqual(info.network, { allowOut: ["pypi.org"], denyOut: ["0.0.0.0/0"] });
    assert.equal(info.previewAccess, "private");
    assert.ok(info.createdAt instanceof Date && !Number.isNaN(info.createdAt.getTime()));
    assert.ok(info.vcpuCount >= 1 && info.memoryMib >= 256);
    assert.ok(info.previewUrlTemplate.includes("{port}"));
    assert.equal(info.node, null, "a single host runs its boxes on no fleet node");
    const { stdout } = await sandbox.commands.run("printenv MODE");
    assert.equal(stdout, "dev\n");
    assert.ok(!JSON.stringify(sandbox).includes("hat_"), "a sandbox never serializes its token");
  });

  test("list filters by metadata (every pair) and status; connect finds a box by id", async () => {
    const tag = randomUUID();
    const a = await box({ name: "list-a", metadata: { tag, role: "a" } });
    const b = await box({ name: "list-b", metadata: { tag, role: "b" } });
    const both = await Sandbox.list({ metadata: { tag } });
    assert.deepEqual(both.map((s) => s.id).sort(), [a.id, b.id].sort());
    const [onlyA, ...rest] = await Sandbox.list({ metadata: { tag, role: "a" } });
    assert.equal(onlyA?.id, a.id);
    assert.equal(rest.length, 0);
    assert.ok((await Sandbox.list({ status: "active" })).some((s) => s.id === b.id));
    assert.ok(!(await Sandbox.list({ status: "paused" })).some((s) => s.id === b.id));
    const again = await Sandbox.connect(a.id);
    assert.equal((await again.commands.run("echo again")).stdout, "again\n");
  });

  test("update replaces metadata, clears with null, and changes the rules at once", async () => {
    const sandbox = await box({ metadata: { a: "1", b: "2" }, timeoutSeconds: 600 });
    const info = await sandbox.update({ metadata: { c: "3" }, timeoutSeconds: null, network: { denyOut: ["10.0.0.0/8"] } });
    assert.deepEqual(info.metadata, { c: "3" });
    assert.equal(info.timeoutSeconds, null);
    assert.deepEqual(info.network, { allowOut: [], denyOut: ["10.0.0.0/8"] });
    assert.deepEqual(sandbox.metadata, { c: "3" });
    const cleared = await sandbox.update({ network: null, autoDeleteSeconds: 30 });
    assert.equal(cleared.network, null);
    assert.equal(cleared.autoDeleteSeconds, 30);
    assert.deepEqual(cleared.metadata, { c: "3" }, "what is not given is left as it is");
  });

  test("pause and resume keep a running process, its output and its stdin; a command resumes a paused box", async () => {
    const sandbox = await box({ name: "pause-resume" });
    await sandbox.files.write("/home/user/kept.txt", "kept");
    const proc = await sandbox.commands.spawn("cat");
    await proc.stdin.write("before\n");
    await sandbox.pause({ wait: true });
    assert.equal((await sandbox.getInfo()).status, "paused");
    await assert.rejects(proc.wait(), (e: Error & { code?: string }) => e.code === "sandbox_paused");
    await sandbox.pause(); // idempotent
    await sandbox.resume();
    assert.equal(sandbox.status, "active");
    const again = await sandbox.commands.connect(proc.pid);
    await again.stdin.write("after\n");
    await again.stdin.close();
    const result = await again.wait();
    assert.equal(result.exitCode, 0);
    assert.equal(result.stdout, "before\nafter\n");
    await sandbox.pause();
    // the access token rotated on resume; a data-plane call on a paused box resumes it and takes the new one
    assert.equal(await sandbox.files.readText("/home/user/kept.txt"), "kept");
    assert.equal((await sandbox.getInfo()).status, "active");
    await sandbox.pause();
    const reconnected = await Sandbox.connect(sandbox.id); // resumes
    assert.equal(reconnected.status, "active");
    assert.equal((await reconnected.commands.run("cat /home/user/kept.txt")).stdout, "kept");
  });

  test("kill and killById are idempotent; a killed box is gone", async () => {
    const sandbox = await Sandbox.create({ name: "kill-me" });
    await sandbox.kill();
    await sandbox.kill();
    await Sandbox.killById(sandbox.id);
    await assert.rejects(Sandbox.connect(sandbox.id), NotFoundError);
    await assert.rejects(sandbox.getInfo(), NotFoundError);
  });

  test("the audit log has every command and file operation; the network log every connection", async () => {
    const sandbox = await box({ name: "logs", network: { allowOut: [], denyOut: ["0.0.0.0/0"] } });
    await sandbox.commands.run("echo audited");
    await sandbox.files.write("/home/user/a.txt", "x");
    await sandbox.commands.run("curl -s -o /dev/null -m 5 http://93.184.215.14/ || true");
    const audit = await sandbox.getAuditLog({ limit: 50 });
    const ops = audit.entries.map((e) => `${e.op} ${e.detail}`);
    assert.ok(ops.includes("exec echo audited"), ops.join("; "));
    assert.ok(audit.entries.some((e) => e.op === "exit" && e.detail === "echo audited" && e.exitCode === 0));
    assert.ok(ops.includes("file_write /home/user/a.txt"));
    assert.ok(audit.entries[0]!.at instanceof Date && audit.entries[0]!.actor.length > 0);
    const first = await sandbox.getAuditLog({ limit: 1 });
    assert.equal(first.entries.length, 1);
    assert.ok(first.nextBefore !== null);
    const older = await Sandbox.getAuditLogById(sandbox.id, { limit: 1, before: first.nextBefore! });
    assert.ok(older.entries[0]!.id < first.entries[0]!.id);
    const net = await sandbox.getNetworkLog();
    const denied = net.entries.find((e) => e.host === "93.184.215.14");
    assert.ok(denied, JSON.stringify(net.entries));
    assert.equal(denied.verdict, "denied");
    assert.equal(denied.port, 80);
    assert.match(denied.rule, /deny_out:0\.0\.0\.0\/0/);
    assert.ok((await Sandbox.getNetworkLogById(sandbox.id)).entries.some((e) => e.id === denied.id));
  });

  test("the Letta guide's one sandbox per agent: found by its tag, paused between turns, killed at the end", async () => {
    const agentId = `agent-${randomUUID()}`;
    async function sandboxFor(id: string) {
      const [existing] = await Sandbox.list({ metadata: { letta_agent_id: id } });
      if (existing) return Sandbox.connect(existing.id); // Resumes it if paused.
      return Sandbox.create({ name: "letta-agent", metadata: { letta_agent_id: id } });
    }
    async function runTurn(id: string, command: string) {
      const sandbox = await sandboxFor(id);
      try {
        return (await sandbox.commands.run(command, { timeoutMs: 60_000 })).stdout;
      } finally {
        await sandbox.pause({ wait: true });
      }
    }
    try {
      await runTurn(agentId, "printf '1. a\\n2. b\\n3. c\\n' > /home/user/todo.txt");
      assert.equal(await runTurn(agentId, "echo '4. d' >> /home/user/todo.txt; cat /home/user/todo.txt"),
        "1. a\n2. b\n3. c\n4. d\n");
      const boxes = await Sandbox.list({ metadata: { letta_agent_id: agentId } });
      assert.equal(boxes.length, 1, "the second turn found the first turn's box");
      assert.equal(boxes[0]!.status, "paused");
    } finally {
      const sandboxes = await Sandbox.list({ metadata: { letta_agent_id: agentId } });
      await Promise.all(sandboxes.map(({ id }) => Sandbox.killById(id)));
    }
    assert.equal((await Sandbox.list({ metadata: { letta_agent_id: agentId } })).length, 0);
  });
});
