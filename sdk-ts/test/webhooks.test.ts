// Events and webhooks: a box's life read by cursor; an endpoint on loopback (the test server's
// operator allows 127.0.0.1) sent its events, signed, checked with verifyWebhook; bad input refused.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { after, describe, test } from "node:test";
import { Events, NotFoundError, ValidationError, Webhooks, verifyWebhook } from "@hutch/sdk";
import { box, cleanup, tiny } from "./support.js";

after(cleanup);

async function until(check: () => Promise<boolean> | boolean, what: string, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("Events and Webhooks", () => {
  test("a box's life is its events, delivered signed to a webhook", async () => {
    const headers: Record<string, string | string[] | undefined>[] = [];
    const receiver = await tiny((req, res) => {
      headers.push(req.headers);
      res.writeHead(204).end();
    });
    const hook = await Webhooks.create(`${receiver.url}/hooks`, { types: ["sandbox.created", "sandbox.killed"] });
    try {
      assert.ok(hook.secret?.startsWith("whsec_"));
      assert.equal((await Webhooks.get(hook.id)).secret, null, "the secret is shown once");
      const start = (await Events.list({ limit: 1000 })).next;
      const sandbox = await box({ name: "evented" });
      await sandbox.kill();
      const page = await Events.list({ after: start, sandboxId: sandbox.id });
      assert.deepEqual(page.events.map((e) => e.type), ["sandbox.created", "sandbox.killed"]);
      assert.equal(page.next, page.events[1].id);
      await until(() => receiver.requests.length === 2, "two deliveries");
      const delivered = receiver.requests.map((r, i) =>
        verifyWebhook(r.body, String(headers[i]["hutch-signature"]), hook.secret ?? ""));
      assert.deepEqual(delivered.map((e) => [e.type, e.sandbox_id]),
        [["sandbox.created", sandbox.id], ["sandbox.killed", sandbox.id]]);
      assert.throws(() => verifyWebhook(receiver.requests[0].body + " ", String(headers[0]["hutch-signature"]),
        hook.secret ?? ""), (e: unknown) => e instanceof ValidationError && e.code === "bad_webhook_signature");
      const attempts = await Webhooks.deliveries(hook.id);
      assert.deepEqual(attempts.map((d) => [d.ok, d.status, d.attempt]), [[true, 204, 1], [true, 204, 1]]);
      const off = await Webhooks.update(hook.id, { enabled: false, types: ["sandbox.paused"] });
      assert.deepEqual([off.enabled, off.types], [false, ["sandbox.paused"]]);
      assert.ok((await Webhooks.list()).some((w) => w.id === hook.id));
    } finally {
      await Webhooks.delete(hook.id);
      await receiver.close();
    }
    await assert.rejects(Webhooks.get(hook.id), NotFoundError);
  });

  test("the stream from a cursor gives a box's events as they were", async () => {
    const start = (await Events.list({ limit: 1000 })).next;
    const sandbox = await box({ name: "streamed" });
    await sandbox.kill();
    const got: string[] = [];
    for await (const e of Events.stream({ after: start, sandboxId: sandbox.id })) {
      got.push(e.type);
      if (got.length === 2) break;
    }
    assert.deepEqual(got, ["sandbox.created", "sandbox.killed"]);
  });

  test("a private destination and an unknown type are refused, and nothing is made", async () => {
    const before = (await Webhooks.list()).length;
    await assert.rejects(Webhooks.create("http://10.0.0.1/x"),
      (e: unknown) => e instanceof ValidationError && e.code === "webhook_url_refused");
    await assert.rejects(Webhooks.create("http://127.0.0.1:9/x", { types: ["sandbox.exploded"] }),
      (e: unknown) => e instanceof ValidationError && e.code === "invalid_request");
    assert.equal((await Webhooks.list()).length, before);
  });

  test("verifyWebhook takes what the server signs and refuses an old timestamp", () => {
    const body = JSON.stringify({ id: 3, type: "sandbox.killed" });
    const t = Math.floor(Date.now() / 1000);
    const sign = (stamp: number) => `t=${stamp},v1=${createHmac("sha256", "whsec_x").update(`${stamp}.${body}`).digest("hex")}`;
    assert.deepEqual(verifyWebhook(body, sign(t), "whsec_x"), { id: 3, type: "sandbox.killed" });
    assert.throws(() => verifyWebhook(body, sign(t - 600), "whsec_x"), ValidationError);
    assert.throws(() => verifyWebhook(body, "v1=00", "whsec_x"), ValidationError);
  });
});
