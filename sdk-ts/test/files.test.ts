// Files: write and read (text and bytes), the filesystem calls, a directory's zip, and watching.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { AuthenticationError, ConflictError, type FilesystemEvent, NotFoundError, Sandbox, ValidationError } from "@hutch/sdk";
import { box, cleanup, until } from "./support.js";

let sandbox: Sandbox;
before(async () => {
  sandbox = await box({ name: "files" });
});
after(cleanup);

describe("files", () => {
  test("write makes the parents and the file is the box user's; read and readText get it back", async () => {
    await sandbox.files.write("/home/user/deep/er/notes.txt", "héllo\n");
    assert.equal(await sandbox.files.readText("/home/user/deep/er/notes.txt"), "héllo\n");
    const raw = await sandbox.files.read("/home/user/deep/er/notes.txt");
    assert.ok(raw instanceof Uint8Array);
    assert.deepEqual([...raw], [...new TextEncoder().encode("héllo\n")]);
    const info = await sandbox.files.getInfo("/home/user/deep/er/notes.txt");
    assert.equal(info.owner, "user");
    assert.equal(info.type, "file");
    assert.equal(info.size, raw.length);
    assert.equal(info.permissions, "-rw-r--r--");
    assert.ok(info.modifiedTime instanceof Date);
  });

  test("bytes of every value, from a Uint8Array, an ArrayBuffer and a Blob", async () => {
    const all = new Uint8Array(256).map((_, i) => i);
    await sandbox.files.write("/tmp/all.bin", all);
    assert.deepEqual(await sandbox.files.read("/tmp/all.bin"), all);
    await sandbox.files.write("/tmp/buffer.bin", all.buffer);
    assert.equal((await sandbox.commands.run("md5sum < /tmp/buffer.bin")).stdout,
      (await sandbox.commands.run("md5sum < /tmp/all.bin")).stdout);
    await sandbox.files.write("/tmp/blob.txt", new Blob(["from a blob"]));
    assert.equal(await sandbox.files.readText("/tmp/blob.txt"), "from a blob");
    const big = new Uint8Array(3 * 2 ** 20).map((_, i) => i % 251);
    await sandbox.files.write("/tmp/big.bin", big);
    assert.deepEqual(await sandbox.files.read("/tmp/big.bin"), big);
  });

  test("as root or as the box user, who is held to its rights by the filesystem calls", async () => {
    await sandbox.files.write("/etc/hutch-ts.conf", "x", { user: "root" });
    assert.equal((await sandbox.files.getInfo("/etc/hutch-ts.conf")).owner, "root");
    await assert.rejects(sandbox.files.remove("/etc/hutch-ts.conf"),
      (e: unknown) => e instanceof AuthenticationError && e.code === "permission_denied" && e.statusCode === 403);
    await sandbox.files.remove("/etc/hutch-ts.conf", { user: "root" });
    assert.equal(await sandbox.files.exists("/etc/hutch-ts.conf"), false);
  });

  test("read, readText and downloadDir as the box user, held to its rights, or as root", async () => {
    await sandbox.files.write("/root/secret.txt", "root's", { user: "root" });
    await sandbox.commands.run("chmod 600 /root/secret.txt", { user: "root" });
    // one call at a time: a rejection not yet awaited would be an unhandled one
    for (const reading of [() => sandbox.files.read("/root/secret.txt"), () => sandbox.files.readText("/root/secret.txt"),
      () => sandbox.files.downloadDir("/root")]) {
      await assert.rejects(reading(), (e: unknown) => e instanceof AuthenticationError && e.code === "permission_denied");
    }
    assert.equal(await sandbox.files.readText("/root/secret.txt", { user: "root" }), "root's");
    assert.equal(new TextDecoder().decode(await sandbox.files.read("/root/secret.txt", { user: "root" })), "root's");
    const zip = await sandbox.files.downloadDir("/root", { user: "root" });
    assert.deepEqual([...zip.subarray(0, 2)], [0x50, 0x4b]);
  });

  test("an entry's metadata: E2B's user.e2b.* xattrs, however they were set; null without", async () => {
    await sandbox.files.write("/home/user/meta.txt", "m");
    assert.equal((await sandbox.files.getInfo("/home/user/meta.txt")).metadata, null);
    await sandbox.commands.run("python3 -c \"import os; os.setxattr('/home/user/meta.txt', 'user.e2b.author', b'mish')\"");
    assert.deepEqual((await sandbox.files.getInfo("/home/user/meta.txt")).metadata, { author: "mish" });
    const listed = await sandbox.files.list("/home/user");
    assert.deepEqual(listed.find((e) => e.name === "meta.txt")?.metadata, { author: "mish" });
  });

  test("list, exists, makeDir, rename, remove", async () => {
    assert.equal(await sandbox.files.makeDir("/home/user/tree/a/b"), true);
    assert.equal(await sandbox.files.makeDir("/home/user/tree/a/b"), false);
    await sandbox.files.write("/home/user/tree/a/one.txt", "1");
    await sandbox.files.write("/home/user/tree/a/b/two.txt", "22");
    const top = await sandbox.files.list("/home/user/tree");
    assert.deepEqual(top.map((e) => [e.name, e.type]), [["a", "dir"]]);
    const deep = await sandbox.files.list("/home/user/tree", { depth: 3 });
    assert.deepEqual(deep.map((e) => e.path).sort(),
      ["/home/user/tree/a", "/home/user/tree/a/b", "/home/user/tree/a/b/two.txt", "/home/user/tree/a/one.txt"]);
    await assert.rejects(sandbox.files.list("/home/user/tree", { depth: 17 }), ValidationError);
    assert.equal(await sandbox.files.exists("/home/user/tree/a/one.txt"), true);
    assert.equal(await sandbox.files.exists("/home/user/tree/nope"), false);
    const moved = await sandbox.files.rename("/home/user/tree/a/one.txt", "/home/user/tree/uno.txt");
    assert.equal(moved.path, "/home/user/tree/uno.txt");
    assert.equal(await sandbox.files.readText("/home/user/tree/uno.txt"), "1");
    await assert.rejects(sandbox.files.makeDir("/home/user/tree/uno.txt"), ConflictError);
    await sandbox.files.remove("/home/user/tree/a");
    assert.equal(await sandbox.files.exists("/home/user/tree/a/b/two.txt"), false);
    await assert.rejects(sandbox.files.getInfo("/home/user/tree/a"), NotFoundError);
    await assert.rejects(sandbox.files.readText("relative.txt"), ValidationError);
  });

  test("downloadDir: a zip of the directory", async () => {
    await sandbox.files.write("/home/user/zipme/a.txt", "a");
    const zip = await sandbox.files.downloadDir("/home/user/zipme");
    assert.deepEqual([...zip.subarray(0, 4)], [0x50, 0x4b, 0x03, 0x04]); // "PK\3\4"
  });

  test("watchDir: changes as they happen, by iterating or by callback; close() ends it", async () => {
    await sandbox.files.makeDir("/home/user/watched/sub");
    const handle = await sandbox.files.watchDir("/home/user/watched", { recursive: true });
    const seen: FilesystemEvent[] = [];
    const reading = (async () => {
      for await (const event of handle) {
        seen.push(event);
        if (event.name === "sub/deep.txt") break;
      }
    })();
    await sandbox.files.write("/home/user/watched/new.txt", "x");
    await sandbox.files.write("/home/user/watched/sub/deep.txt", "y");
    await reading;
    await handle.close();
    assert.ok(seen.some((e) => e.name === "new.txt" && (e.type === "create" || e.type === "write")), JSON.stringify(seen));

    const events: FilesystemEvent[] = [];
    let ended = false;
    const watch = await sandbox.files.watchDir("/home/user/watched", (event) => { events.push(event); },
      { onExit: () => { ended = true; } });
    await sandbox.files.remove("/home/user/watched/new.txt");
    await until(() => events.some((e) => e.name === "new.txt" && e.type === "remove"), 10_000, "the remove event");
    await watch.stop();
    assert.ok(ended);
  });
});
