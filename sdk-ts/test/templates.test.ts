// Templates: create queues a build, waitUntilReady follows its log to the end; boxes boot from it
// with its env, workdir and user; a failing step is a BuildError naming the step.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";
import { BuildError, type BuildLogLine, ConflictError, NotFoundError, Template } from "@hutch/sdk";
import { box, cleanup } from "./support.js";

const made: string[] = [];
after(async () => {
  await cleanup();
  await Promise.all(made.map((name) => Template.deleteByName(name).catch(() => undefined)));
});

describe("Template", () => {
  test("create, waitUntilReady with its log, and a sandbox from it", async () => {
    const name = `ts-${randomUUID().slice(0, 8)}`;
    made.push(name);
    const template = await Template.create({
      name,
      steps: [{ run: "echo built > /opt/marker" }, { env: { key: "GREETING", value: "hi" } }, { workdir: "/srv/app" },
        { user: { name: "user" } }],
      vcpu: 1, memoryMib: 512,
    }); // resolves once the build is queued
    assert.equal(template.name, name);
    assert.ok(template.latestBuild !== null);
    assert.notEqual(template.status, "ready");
    const log: BuildLogLine[] = [];
    await template.waitUntilReady({ onLog: (line) => { log.push(line); }, timeoutMs: 240_000 });
    assert.equal(template.status, "ready");
    assert.ok(log.length > 0 && log.every((l, i) => l.seq === i + 1), "every line once, in order");
    assert.ok(log.every((l) => l.time instanceof Date && ["system", "stdout", "stderr"].includes(l.stream)));
    assert.equal(template.details.env.GREETING, "hi");
    assert.equal(template.details.workdir, "/srv/app");
    assert.equal(template.details.memoryMib, 512);

    const sandbox = await box({ name: "from-template", fromTemplate: template });
    const r = await sandbox.commands.run('cat /opt/marker; echo "$GREETING"; pwd; id -un');
    assert.equal(r.stdout, "built\nhi\n/srv/app\nuser\n");
    assert.equal((await sandbox.getInfo()).template, name);
    assert.equal((await sandbox.getInfo()).memoryMib, 512);

    const again = await Template.get(name);
    assert.equal(again.id, template.id);
    assert.ok((await Template.list()).some((t) => t.name === name));
    assert.ok((await Template.list()).some((t) => t.name === "hutch/base" && t.details.system));
    assert.equal((await Template.get("hutch/base")).details.system, true);
    const [build] = await template.listBuilds();
    assert.equal(build?.status, "ready");
    assert.equal((await template.getBuild(build!.id)).stepsTotal, 4);
    const replayed: BuildLogLine[] = [];
    for await (const line of template.streamBuildLogs()) replayed.push(line);
    assert.deepEqual(replayed.map((l) => l.text), log.map((l) => l.text));
    await assert.rejects(template.cancelBuild(), (e: unknown) => e instanceof ConflictError && e.code === "build_finished");
    await assert.rejects(template.delete(), (e: unknown) => e instanceof ConflictError && e.code === "template_in_use");
    await sandbox.kill();
    await template.delete();
    await assert.rejects(Template.get(name), NotFoundError);
  });

  test("a failing step is a BuildError with the step's index and exit code", async () => {
    const name = `ts-fail-${randomUUID().slice(0, 8)}`;
    made.push(name);
    const template = await Template.create({ name, steps: [{ run: "true" }, { run: "echo broken >&2; exit 3" }] });
    await assert.rejects(template.waitUntilReady({ timeoutMs: 240_000 }), (e: unknown) => {
      assert.ok(e instanceof BuildError);
      assert.equal(e.code, "step_failed");
      assert.equal(e.step, 1);
      assert.equal(e.exitCode, 3);
      assert.equal(e.templateId, template.id);
      assert.equal(e.buildId, template.latestBuild?.id);
      return true;
    });
    assert.equal(template.status, "failed");
    const lines: string[] = [];
    for await (const line of template.streamBuildLogs({ follow: false })) lines.push(line.text);
    assert.ok(lines.some((t) => t.includes("broken")), lines.join("\n"));
    await Template.deleteByName(name);
  });
});
