// A desktop box's screen and input (sandbox.desktop), as the Python SDK's tests
// (tests/integration/test_desktop.py): create at a resolution, a screenshot in one call, typing into
// an editor that the next screenshot shows, the pointer, the stream's private preview URL, and a box
// without a desktop. Skipped where the desktop's root is not built (`hutch build-base --desktop`);
// under CI=true that fails.
import assert from "node:assert/strict";
import { request } from "node:http";
import { after, describe, test } from "node:test";
import { inflateSync } from "node:zlib";
import { ConflictError, Sandbox, ValidationError } from "@hutch/sdk";
import { box, cleanup, desktopBuilt, needsInstalled, until } from "./support.js";

const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const skip = needsInstalled("the desktop's root (hutch build-base --desktop)", await desktopBuilt());

after(cleanup);

/** A PNG's width, height and its image data (the IDAT chunks inflated). */
function png(data: Uint8Array): { width: number; height: number; raw: Buffer } {
  const buf = Buffer.from(data);
  assert.ok(buf.subarray(0, 8).equals(PNG_MAGIC), "not a PNG");
  const idat: Buffer[] = [];
  for (let pos = 8; pos < buf.length;) {
    const length = buf.readUInt32BE(pos);
    const kind = buf.toString("latin1", pos + 4, pos + 8);
    if (kind === "IDAT") idat.push(buf.subarray(pos + 8, pos + 8 + length));
    pos += 12 + length;
  }
  return { width: buf.readUInt32BE(16), height: buf.readUInt32BE(20), raw: inflateSync(Buffer.concat(idat)) };
}

function differing(a: Buffer, b: Buffer): number {
  let n = Math.abs(a.length - b.length);
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) n++;
  return n;
}

async function editorWindow(sandbox: Sandbox): Promise<string> {
  let found = "";
  await until(async () => {
    found = (await sandbox.commands.run("xdotool search --onlyvisible --class mousepad || true")).stdout.trim();
    return found !== "";
  }, 60_000, "the editor's window");
  return found.split(/\s+/)[0]!;
}

/** A GET of a preview URL: to the proxy on loopback, with the URL's host in Host. */
function preview(url: string): Promise<{ status: number; location: string }> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port: target.port, path: target.pathname + target.search, agent: false,
      headers: { Host: target.host } }, (res) => {
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode ?? 0, location: String(res.headers.location ?? "") }));
    });
    req.on("error", reject);
    req.end();
  });
}

describe("sandbox.desktop", { skip }, () => {
  test("create at a resolution, screenshot, type into an editor, the pointer", async () => {
    const sandbox = await box({ name: "ts-desk", fromTemplate: "desktop", resolution: [800, 600] });
    const first = png(await sandbox.desktop.screenshot());
    assert.deepEqual([first.width, first.height], [800, 600]);
    assert.deepEqual(await sandbox.desktop.screenSize(), { width: 800, height: 600 });
    await sandbox.commands.spawn("mousepad");
    const window = await editorWindow(sandbox);
    await new Promise((r) => setTimeout(r, 1000));
    const empty = png(await sandbox.desktop.screenshot());
    await sandbox.desktop.click(400, 300);
    await sandbox.desktop.type("typed by the TypeScript SDK");
    await sandbox.desktop.key("Return");
    await until(async () => (await sandbox.commands.run(`xdotool getwindowname ${window}`)).stdout.startsWith("*"),
      20_000, "the edit");
    const typed = png(await sandbox.desktop.screenshot());
    assert.ok(differing(empty.raw, typed.raw) > 200, "the typing is on the screen");
    await sandbox.desktop.move(100, 200);
    assert.deepEqual(await sandbox.desktop.cursorPosition(), { x: 100, y: 200 });
    await sandbox.desktop.drag([300, 300], [500, 400]);
    assert.deepEqual(await sandbox.desktop.cursorPosition(), { x: 500, y: 400 });
    await sandbox.desktop.scroll("down", 3, { x: 400, y: 300 });
    await sandbox.desktop.click(undefined, undefined, { button: "right" });
    await sandbox.desktop.key("Escape");
    await sandbox.desktop.click(10, 10, { count: 2 });
    await sandbox.desktop.mouseDown();
    await sandbox.desktop.mouseUp();
    const ops = (await sandbox.getAuditLog()).entries.filter((e) => e.op === "desktop").map((e) => e.detail);
    assert.ok(ops.includes("xdotool key -- Return"), ops.join("\n"));
    await assert.rejects(sandbox.desktop.key("ctrl+s; rm -rf /"), ValidationError, "a key name is checked");
    await assert.rejects(sandbox.desktop.click(1), (e: unknown) => e instanceof ValidationError
      && e.code === "invalid_argument");
  });

  test("the live screen's private preview URL", async () => {
    const sandbox = await box({ name: "ts-desk-stream", fromTemplate: "desktop" });
    const url = await sandbox.desktop.streamUrl();
    assert.match(url, /hutch_preview=/);
    assert.match(url, /\/vnc\.html\?/);
    assert.deepEqual((await sandbox.listPreviewPorts()).map((p) => p.access), ["private"]);
    const stripped = new URL(url);
    stripped.search = "";
    assert.equal((await preview(stripped.toString())).status, 401, "private: no link, no page");
    const opened = await preview(url); // the signed link: a cookie for the port, and on to the page
    assert.ok(opened.status < 400, `the signed link answered ${opened.status}`);
  });

  test("a box without a desktop says so", async () => {
    const sandbox = await box({ name: "ts-no-desk" });
    await assert.rejects(sandbox.desktop.screenshot(), (e: unknown) => e instanceof ConflictError
      && e.code === "desktop_unavailable");
  });
});
