// Volumes, against the real server: one volume mounted in two boxes at once (a file one writes, the
// other reads, and so do the files calls, with no box), read-only where asked, forks sharing it,
// refused deletion while a box mounts it, a typed not-found after; and, against a tiny server of the
// test's own, where a volume's files calls go and their timeoutMs.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";
import {
  ConflictError, NotFoundError, Sandbox, SandboxTimeoutError, ServerCode, ValidationError, Volume,
} from "@hutch/sdk";
import { adopt, box, cleanup, json, tiny } from "./support.js";

const made: Volume[] = [];
after(async () => {
  await cleanup(); // the boxes first: a volume is not deleted while a box mounts it
  await Promise.all(made.map((v) => v.delete().catch(() => undefined)));
});

async function volume(options: { sizeMib?: number; metadata?: Record<string, string> } = {}): Promise<Volume> {
  const vol = await Volume.create(`ts-vol-${randomUUID().slice(0, 8)}`, options);
  made.push(vol);
  return vol;
}

describe("Volume", () => {
  test("two boxes mount one volume: what one writes the other reads, and so does volume.files", async () => {
    const tag = randomUUID();
    const vol = await volume({ sizeMib: 64, metadata: { tag } });
    assert.equal(vol.sizeMib, 64);
    assert.deepEqual(vol.metadata, { tag });
    assert.deepEqual(vol.mountedBy, []);
    assert.ok(vol.createdAt instanceof Date);
    assert.equal(vol.info.id, vol.id);

    const a = await box({ name: "vol-a", volumes: { "/mnt/data": vol } });
    const b = await box({ name: "vol-b", volumes: { "/srv/shared": vol.name } });
    assert.deepEqual(a.volumes, [{ volumeId: vol.id, name: vol.name, path: "/mnt/data", readOnly: false }]);
    assert.deepEqual((await b.getInfo()).volumes,
      [{ volumeId: vol.id, name: vol.name, path: "/srv/shared", readOnly: false }]);
    assert.deepEqual(new Set((await Volume.get(vol.name)).mountedBy), new Set([a.id, b.id]));

    // a box writes and closes a file; the other box opens it whole, and so do the files calls
    const wrote = await a.commands.run("head -c 1048576 /dev/urandom > /mnt/data/blob && "
      + "sha256sum /mnt/data/blob | cut -c1-64 > /mnt/data/blob.sum && echo written by a > /mnt/data/note.txt");
    assert.equal(wrote.exitCode, 0, wrote.stderr);
    assert.equal((await b.commands.run("cat /srv/shared/note.txt")).stdout, "written by a\n");
    const [seen, sum] = (await b.commands.run("sha256sum /srv/shared/blob | cut -c1-64; cat /srv/shared/blob.sum"))
      .stdout.split("\n");
    assert.equal(seen, sum);
    assert.equal(await vol.files.readText("/note.txt"), "written by a\n");
    assert.equal((await vol.files.read("/blob")).length, 2 ** 20);
    assert.equal((await vol.files.readText("/blob.sum")).trim(), sum);

    // the files calls write with no box; the file is the box user's, and both boxes see it
    await vol.files.write("/from-api/note.txt", "written with no box");
    assert.equal((await a.commands.run("cat /mnt/data/from-api/note.txt")).stdout, "written with no box");
    assert.equal((await b.commands.run("stat -c %U /srv/shared/from-api/note.txt")).stdout, "user\n");
    assert.equal((await vol.files.getInfo("/from-api/note.txt")).owner, "user");
    const bytes = new Uint8Array(256).map((_, i) => i);
    await vol.files.write("/bytes.bin", bytes);
    assert.deepEqual(await vol.files.read("/bytes.bin"), bytes);

    // the rest of a sandbox's files calls, on the volume
    const listed = (await vol.files.list("/", { depth: 2 })).map((e) => [e.path, e.type]);
    for (const entry of [["/blob", "file"], ["/from-api", "dir"], ["/from-api/note.txt", "file"]]) {
      assert.ok(listed.some(([p, t]) => p === entry[0] && t === entry[1]), `${entry} in ${JSON.stringify(listed)}`);
    }
    assert.equal((await vol.files.getInfo("/from-api", { timeoutMs: 30_000 })).type, "dir");
    assert.equal(await vol.files.exists("/blob"), true);
    assert.equal(await vol.files.exists("/nothing"), false);
    assert.equal(await vol.files.makeDir("/d/e"), true);
    assert.equal(await vol.files.makeDir("/d/e"), false);
    assert.equal((await vol.files.rename("/blob.sum", "/d/e/sum")).path, "/d/e/sum");
    assert.equal((await a.commands.run("test -f /mnt/data/d/e/sum")).exitCode, 0);
    await vol.files.remove("/d");
    assert.equal(await vol.files.exists("/d/e/sum"), false);
    assert.equal((await b.commands.run("test -e /srv/shared/d")).exitCode, 1);
    await assert.rejects(vol.files.read("/d/e/sum"),
      (e: unknown) => e instanceof NotFoundError && e.code === ServerCode.FILE_NOT_FOUND);
    const used = (await vol.getInfo()).usedBytes;
    assert.ok(used !== null && used >= 2 ** 20, `used ${used}`);
    assert.equal(vol.usedBytes, used, "getInfo keeps what it read");

    // a fork mounts the same live volume (here, given again at the same path)
    const [forked] = adopt(await a.fork({ volumes: { "/mnt/data": vol } }));
    assert.deepEqual(forked!.volumes.map((m) => [m.path, m.volumeId]), [["/mnt/data", vol.id]]);
    assert.equal((await forked!.commands.run("echo from-fork > /mnt/data/fork.txt")).exitCode, 0);
    assert.equal(await vol.files.readText("/fork.txt"), "from-fork\n");
    assert.equal((await b.commands.run("cat /srv/shared/fork.txt")).stdout, "from-fork\n");

    // list by metadata, and replace it
    assert.deepEqual((await Volume.list({ metadata: { tag } })).map((v) => v.id), [vol.id]);
    assert.deepEqual(await Volume.list({ metadata: { tag, other: "x" } }), [], "every pair must match");
    assert.deepEqual((await vol.updateMetadata({ tag, more: "yes" })).metadata, { tag, more: "yes" });
    assert.deepEqual(vol.metadata, { tag, more: "yes" });
  });

  test("a read-only mount refuses writes; a volume is not deleted while a box mounts it", async () => {
    const vol = await volume({ sizeMib: 16 });
    const writer = await box({ name: "vol-writer", volumes: { "/work": vol } });
    await writer.commands.run("echo kept > /work/state");
    const reader = await box({ name: "vol-reader", volumes: { "/work": { volume: vol, readOnly: true } } });
    assert.deepEqual(reader.volumes.map((m) => [m.path, m.readOnly]), [["/work", true]]);
    assert.equal((await reader.commands.run("cat /work/state")).stdout, "kept\n");
    const refused = await reader.commands.run("echo x > /work/other", { user: "root" });
    assert.notEqual(refused.exitCode, 0);
    assert.match(refused.stderr, /Read-only/);
    assert.equal(await vol.files.exists("/other"), false);

    await assert.rejects(vol.delete(), (e: unknown) => e instanceof ConflictError
      && e.code === ServerCode.VOLUME_IN_USE && e.statusCode === 409);
    await assert.rejects(Volume.deleteById(vol.name),
      (e: unknown) => e instanceof ConflictError && e.code === ServerCode.VOLUME_IN_USE);
    await cleanup(); // both boxes gone: nothing mounts it now
    assert.equal(await vol.files.readText("/state"), "kept\n", "its files outlive its boxes");
    await vol.delete();
    await assert.rejects(Volume.get(vol.id), (e: unknown) => e instanceof NotFoundError
      && e.code === ServerCode.VOLUME_NOT_FOUND && e.statusCode === 404);
    await assert.rejects(Volume.get(`no-such-volume-${randomUUID().slice(0, 8)}`),
      (e: unknown) => e instanceof NotFoundError && e.code === ServerCode.VOLUME_NOT_FOUND);
    await assert.rejects(Sandbox.create({ name: "late", volumes: { "/v": vol.id } }),
      (e: unknown) => e instanceof NotFoundError && e.code === ServerCode.VOLUME_NOT_FOUND);
  });

  test("mounts are checked before any request", async () => {
    const bad = [{ "/v": { volume: "x", read_only: true } }, { "/v": { volume: "x", readOnly: "yes" } },
      { "/v": 42 }, { "/v": { name: "x" } }];
    for (const volumes of bad) {
      await assert.rejects(Sandbox.create({ name: "bad", volumes: volumes as never }),
        (e: unknown) => e instanceof ValidationError && e.code === "invalid_argument" && e.statusCode === undefined);
    }
    await assert.rejects(Sandbox.fromSnapshot("any", { volumes: { "/v": { volume: "x", ro: true } as never } }),
      (e: unknown) => e instanceof ValidationError && e.code === "invalid_argument");
  });

  test("a volume's files calls go to /v1/volumes/{id}/files with the API key, within their timeoutMs", async () => {
    const INFO = { id: "vol_1", name: "fake", size_mib: 16, used_bytes: 0, metadata: {},
      created_at: "2026-01-01T00:00:00Z", mounted_by: [] };
    const headers: (string | undefined)[] = [];
    const fake = await tiny((req, res) => {
      headers.push(req.headers.authorization);
      if (req.url === "/v1/volumes/fake") return json(res, 200, INFO);
      if (req.url?.startsWith("/v1/volumes/vol_1/files/stat")) {
        return json(res, 200, { name: "a", path: "/a", type: "file", size: 1, mode: 0o644, permissions: "-rw-r--r--",
          owner: "user", group: "user", modified_time: "2026-01-01T00:00:00Z" });
      }
      // anything else: never answered
    });
    try {
      const vol = await Volume.get("fake", { baseUrl: fake.url, apiKey: "k" });
      assert.equal((await vol.files.getInfo("/a")).path, "/a");
      assert.ok(fake.requests.some((r) => r.url === "/v1/volumes/vol_1/files/stat?path=%2Fa"),
        JSON.stringify(fake.requests));
      assert.ok(headers.every((h) => h === "Bearer k"), "the API key, never a token");
      const started = Date.now();
      await assert.rejects(vol.files.write("/slow", "x", { timeoutMs: 300 }),
        (e: unknown) => e instanceof SandboxTimeoutError && e.code === "request_timeout");
      assert.ok(Date.now() - started < 5_000);
      await assert.rejects(vol.files.read("/a", { timeoutMs: 0 }),
        (e: unknown) => e instanceof ValidationError && e.code === "invalid_argument");
    } finally {
      await fake.close();
    }
  });
});
