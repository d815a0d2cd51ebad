// Snapshots and forks, against the real server: a running box saved and booted again (its process
// continuing, its files there, each box its own from then on), forked, listed by metadata, deleted
// (a typed not-found after); a files-only snapshot boots afresh with the files and no process.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";
import { AbortError, NotFoundError, Sandbox, ServerCode, Snapshot } from "@hutch/sdk";
import { adopt, box, cleanup, until } from "./support.js";

const COUNTER = "nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done' >/dev/null 2>&1 &";

const taken: string[] = [];
after(async () => {
  await cleanup();
  await Promise.all(taken.map((id) => Snapshot.deleteById(id).catch(() => undefined)));
});

/** The counter's value (a read between its truncate and its write is empty: read again). */
async function count(sandbox: Sandbox): Promise<number> {
  let value = Number.NaN;
  await until(async () => {
    value = Number.parseInt((await sandbox.commands.run("cat /tmp/count 2>/dev/null")).stdout, 10);
    return Number.isInteger(value);
  }, 20_000, "the counter to be readable");
  return value;
}

/** The counter runs in `sandbox` from at least `from` on. */
async function continues(sandbox: Sandbox, from: number): Promise<void> {
  const first = await count(sandbox);
  assert.ok(first >= from, `the counter continues from the saved value (${from}), not from 0: ${first}`);
  await until(async () => (await count(sandbox)) > first, 20_000, "the counter to go on");
}

describe("Snapshot", () => {
  test("boxes from a snapshot continue its process and files and go their own ways; fork, list, delete", async () => {
    const tag = randomUUID();
    const source = await box({ name: "snap-source" });
    await source.files.write("/home/user/work.txt", "prepared");
    await source.commands.run(COUNTER);
    await until(async () => (await count(source)) > 0, 20_000, "the source's counter");
    const before = await count(source);

    const snap = await source.snapshot({ name: `prepared-${tag.slice(0, 8)}`, metadata: { tag } });
    taken.push(snap.id);
    assert.equal(snap.sourceSandboxId, source.id);
    assert.equal(snap.memory, true);
    assert.ok(snap.sizeBytes > 0 && snap.createdAt instanceof Date);
    assert.deepEqual(snap.metadata, { tag });
    assert.equal((await source.getInfo()).status, "active", "the source runs on");

    const boxes = adopt(await Sandbox.fromSnapshot(snap, { count: 2, metadata: { from: "snapshot" } }));
    assert.equal(new Set([source.id, ...boxes.map((b) => b.id)]).size, 3);
    for (const b of boxes) {
      assert.equal(b.name, "snap-source", "the name defaults to the snapshot's box's");
      assert.deepEqual(b.metadata, { from: "snapshot" });
      await continues(b, before);
      assert.equal(await b.files.readText("/home/user/work.txt"), "prepared");
    }
    await boxes[0]!.files.write("/home/user/work.txt", "changed in box 0");
    assert.equal(await boxes[1]!.files.readText("/home/user/work.txt"), "prepared", "a box's write is its own");
    assert.equal(await source.files.readText("/home/user/work.txt"), "prepared");

    const single = await box({ name: "by-name", fromSnapshot: snap.name! });
    assert.equal(await single.files.readText("/home/user/work.txt"), "prepared");
    await continues(single, before);

    const [forked, ...more] = adopt(await source.fork({ count: 1, name: "forked" }));
    assert.equal(more.length, 0);
    assert.equal(forked!.name, "forked");
    await continues(forked!, before);
    assert.equal(await forked!.files.readText("/home/user/work.txt"), "prepared");
    assert.deepEqual((await Snapshot.list({ sandboxId: source.id })).map((s) => s.id), [snap.id],
      "a fork's own snapshot is not kept");

    const listed = await Snapshot.list({ metadata: { tag } });
    assert.deepEqual(listed.map((s) => s.id), [snap.id]);
    assert.equal(listed[0]!.name, snap.name);
    assert.deepEqual(await Snapshot.list({ metadata: { tag, other: "x" } }), [], "every pair must match");
    await (await Snapshot.get(snap.name!)).delete();
    await assert.rejects(Snapshot.get(snap.id), (e: unknown) => e instanceof NotFoundError
      && e.code === ServerCode.SNAPSHOT_NOT_FOUND && e.statusCode === 404);
    await assert.rejects(Sandbox.fromSnapshot(snap), (e: unknown) => e instanceof NotFoundError
      && e.code === ServerCode.SNAPSHOT_NOT_FOUND);
    assert.equal((await boxes[1]!.commands.run("cat /home/user/work.txt")).stdout, "prepared",
      "boxes live on without their snapshot");
  });

  test("a files-only snapshot boots afresh with the box's files and no process", async () => {
    const source = await box({ name: "files-only" });
    await source.files.write("/home/user/kept.txt", "kept");
    await source.commands.run(COUNTER);
    await until(async () => (await count(source)) > 0, 20_000, "the source's counter");
    const snap = await source.snapshot({ memory: false });
    taken.push(snap.id);
    assert.equal(snap.memory, false);
    assert.equal((await source.getInfo()).status, "active");
    const [fresh] = adopt(await Sandbox.fromSnapshot(snap, { envVars: { EXTRA: "x" } }));
    assert.equal(await fresh!.files.readText("/home/user/kept.txt"), "kept");
    assert.equal(await fresh!.files.exists("/tmp/count"), false, "no process came with it");
    assert.equal((await fresh!.commands.run("echo $EXTRA")).stdout, "x\n");
    await Snapshot.deleteById(snap);
    await assert.rejects(Snapshot.deleteById(snap.id),
      (e: unknown) => e instanceof NotFoundError && e.code === ServerCode.SNAPSHOT_NOT_FOUND);
  });

  test("every call takes a signal", async () => {
    await assert.rejects(Snapshot.list({ signal: AbortSignal.abort("enough") }),
      (e: unknown) => e instanceof AbortError && e.cause === "enough");
  });
});
