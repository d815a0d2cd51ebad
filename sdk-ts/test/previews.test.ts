// Preview ports: publish a port of the box, reach it through the preview proxy with its token,
// sign a link, rotate, unpublish.
import assert from "node:assert/strict";
import { request } from "node:http";
import { after, describe, test } from "node:test";
import { NotFoundError, type Sandbox } from "@hutch/sdk";
import { box, cleanup, until } from "./support.js";

after(cleanup);

/** A request to a preview URL: to the proxy on loopback, with the URL's host in Host (this
 * machine's resolver does not know *.localhost; browsers do). */
function preview(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port: target.port, path: target.pathname + target.search, agent: false,
      headers: { Host: target.host, ...headers } }, (res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

describe("preview ports", () => {
  test("publish, reach with the token, sign, rotate, list, unpublish", async () => {
    const sandbox: Sandbox = await box({ name: "preview", previewAccess: "private" });
    await sandbox.files.write("/home/user/site/index.html", "hello from the box");
    await sandbox.commands.spawn("cd /home/user/site && python3 -m http.server 8000");
    const url = sandbox.getPreviewUrl(8000);
    assert.match(url, new RegExp(`^http://8000-${sandbox.id}\\.localhost:\\d+$`));
    const port = await sandbox.publishPreviewPort(8000);
    assert.equal(port.access, "private", "the sandbox's default");
    assert.equal(port.url, url);
    assert.ok(port.createdAt instanceof Date);
    assert.equal((await preview(url)).status, 401, "private: no credential, no answer");
    const credential = await sandbox.getPreviewToken(8000);
    assert.equal(credential.header.toLowerCase(), "x-hutch-preview-token");
    await until(async () => (await preview(url, { [credential.header]: credential.token })).status === 200, 15_000,
      "the server in the box");
    assert.match((await preview(url, { [credential.header]: credential.token })).body, /hello from the box/);
    const signed = await sandbox.getSignedPreviewUrl(8000, { expiresInSeconds: 300 });
    assert.ok(signed.startsWith(url));
    const rotated = await sandbox.rotatePreviewToken(8000);
    assert.equal(rotated.port, 8000);
    assert.equal((await preview(url, { [credential.header]: credential.token })).status, 401, "the old token is void");
    const opened = await sandbox.publishPreviewPort(8000, { access: "public" });
    assert.equal(opened.access, "public");
    assert.equal((await preview(url)).status, 200);
    assert.deepEqual((await sandbox.listPreviewPorts()).map((p) => [p.port, p.access]), [[8000, "public"]]);
    await sandbox.unpublishPreviewPort(8000);
    assert.deepEqual(await sandbox.listPreviewPorts(), []);
    await assert.rejects(sandbox.getPreviewToken(8000), (e: unknown) => e instanceof NotFoundError && e.code === "port_not_published");
  });
});
