// Errors by type and code, an aborted call, and the transport's retries: GET and DELETE are retried
// on transient failures (against a tiny server of the test's own that answers 503 first), creates
// never are.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import {
  AbortError, AuthenticationError, ConflictError, NotFoundError, RateLimitError, Sandbox, SandboxError,
  SandboxTimeoutError, Secret, ServerError, ServerCode, Template, ValidationError,
} from "@hutch/sdk";
import { box, cleanup, json, server, tiny } from "./support.js";

after(cleanup);

const SANDBOX = {
  id: "00000000-0000-0000-0000-000000000001", name: "fake", status: "active", template: "hutch/base", metadata: {},
  timeout_seconds: null, auto_delete_seconds: null, vcpu_count: 1, memory_mib: 1024,
  created_at: "2026-01-01T00:00:00Z", updated_at: "2026-01-01T00:00:00Z", secrets: [], preview_access: "public",
  preview_url_template: "",
};

describe("errors by type", () => {
  test("every error is a SandboxError with statusCode and the server's code", async () => {
    await assert.rejects(Sandbox.connect("no-such-box"), (e: unknown) => {
      assert.ok(e instanceof NotFoundError && e instanceof SandboxError && e instanceof Error);
      assert.equal(e.statusCode, 404);
      assert.equal(e.code, ServerCode.NOT_FOUND);
      assert.equal(e.name, "NotFoundError");
      return true;
    });
    await assert.rejects(Sandbox.list({ apiKey: "hutch_wrong" }),
      (e: unknown) => e instanceof AuthenticationError && e.statusCode === 401 && e.code === "invalid_api_key");
    await assert.rejects(Sandbox.create({ name: "x".repeat(129) }),
      (e: unknown) => e instanceof ValidationError && e.statusCode === 400 && e.code === "invalid_request");
    await assert.rejects(Template.get("no-such-template"),
      (e: unknown) => e instanceof NotFoundError && e.code === "template_not_found");
    await assert.rejects(Template.deleteByName("hutch/base"), (e: unknown) => e instanceof ConflictError);
    const name = `dup-${Date.now()}`;
    await Secret.create({ name, value: "v", allowedHosts: ["api.example.com"] });
    try {
      await assert.rejects(Secret.create({ name, value: "v", allowedHosts: ["api.example.com"] }),
        (e: unknown) => e instanceof ConflictError && e.statusCode === 409 && e.code === "secret_exists");
    } finally {
      await Secret.deleteByName(name);
    }
  });

  test("what is wrong before any request: no key, a bad port, a bad template spec", async () => {
    const saved = process.env.HUTCH_API_KEY;
    delete process.env.HUTCH_API_KEY;
    try {
      await assert.rejects(Sandbox.list(), (e: unknown) => e instanceof AuthenticationError && e.code === "missing_api_key");
    } finally {
      process.env.HUTCH_API_KEY = saved;
    }
    const sandbox = await box();
    assert.throws(() => sandbox.getPreviewUrl(80), (e: unknown) => e instanceof ValidationError && e.code === "invalid_port");
    await assert.rejects(sandbox.publishPreviewPort(3128), ValidationError);
    await assert.rejects(Template.create({ name: "bad", vcpu: 9 }),
      (e: unknown) => e instanceof ValidationError && e.code === "invalid_spec");
  });

  test("the status table: 429 is a RateLimitError, 5xx a ServerError, a proxy's page http_<status>", async () => {
    const fake = await tiny((req, res, n) => {
      if (req.url?.startsWith("/v1/sandboxes/limited")) return json(res, 429, { error: { code: "too_many_sandboxes", message: "full" } });
      if (req.url?.startsWith("/v1/sandboxes/broken")) return json(res, 507, { error: { code: "insufficient_storage", message: "disk" } });
      res.writeHead(502, { "Content-Type": "text/html" });
      res.end(`<html>bad gateway ${n}</html>`);
    });
    try {
      const opts = { baseUrl: fake.url, apiKey: "k" };
      await assert.rejects(Sandbox.connect("limited", opts),
        (e: unknown) => e instanceof RateLimitError && e.code === "too_many_sandboxes" && e.statusCode === 429);
      await assert.rejects(Sandbox.connect("broken", opts),
        (e: unknown) => e instanceof ServerError && e.code === "insufficient_storage");
      await assert.rejects(Sandbox.connect("proxied", opts),
        (e: unknown) => e instanceof ServerError && e.code === "http_502" && /bad gateway/.test(e.message));
    } finally {
      await fake.close();
    }
  });
});

describe("abort", () => {
  test("an aborted run rejects at once with AbortError (a SandboxError named AbortError)", async () => {
    const sandbox = await box();
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 300);
    const started = Date.now();
    await assert.rejects(sandbox.commands.run("sleep 30", { signal: controller.signal }), (e: unknown) => {
      assert.ok(e instanceof AbortError && e instanceof SandboxError);
      assert.equal(e.name, "AbortError");
      assert.equal(e.code, "aborted");
      return true;
    });
    assert.ok(Date.now() - started < 5_000);
    assert.equal((await sandbox.commands.run("echo still here")).stdout, "still here\n", "the sandbox is fine");
  });

  test("an already aborted signal sends nothing; AbortSignal.timeout ends a call that hangs", async () => {
    const fake = await tiny(() => undefined); // never answers
    try {
      const opts = { baseUrl: fake.url, apiKey: "k" };
      await assert.rejects(Sandbox.list({ ...opts, signal: AbortSignal.abort() }), AbortError);
      assert.equal(fake.requests.length, 0);
      const started = Date.now();
      await assert.rejects(Sandbox.list({ ...opts, signal: AbortSignal.timeout(300) }),
        (e: unknown) => e instanceof AbortError && (e.cause as Error).name === "TimeoutError");
      assert.ok(Date.now() - started < 3_000);
      assert.equal(fake.requests.length, 1, "an abort is not retried");
    } finally {
      await fake.close();
    }
  });

  test("aborting a spawn's wait, a watch, a file read and a pause", async () => {
    const sandbox = await box();
    const proc = await sandbox.commands.spawn("sleep 60");
    await assert.rejects(proc.wait({ signal: AbortSignal.timeout(200) }), AbortError);
    assert.equal(proc.exitCode, null, "the process runs on");
    await proc.kill(9);
    await assert.rejects(sandbox.files.read("/etc/hostname", { signal: AbortSignal.abort() }), AbortError);
    await assert.rejects(sandbox.files.watchDir("/tmp", { signal: AbortSignal.abort() }), AbortError);
    await assert.rejects(sandbox.pause({ signal: AbortSignal.abort() }), AbortError);
    assert.equal((await sandbox.getInfo()).status, "active");
  });

  test("a request timeout is a SandboxTimeoutError (request_timeout)", async () => {
    const fake = await tiny((req, res) => {
      if (req.method === "POST") setTimeout(() => json(res, 201, {}), 2_000);
    });
    try {
      await assert.rejects(Sandbox.create({ name: "slow", baseUrl: fake.url, apiKey: "k", requestTimeoutMs: 200 }),
        (e: unknown) => e instanceof SandboxTimeoutError && e.code === "request_timeout");
      assert.equal(fake.requests.length, 1, "a create is never retried");
    } finally {
      await fake.close();
    }
  });
});

describe("retries", () => {
  test("a GET that answers 503 once is sent again, and succeeds", async () => {
    const fake = await tiny((_req, res, n) => {
      if (n === 1) return json(res, 503, { error: { code: "store_unavailable", message: "busy" } });
      json(res, 200, [SANDBOX]);
    });
    try {
      const [info] = await Sandbox.list({ baseUrl: fake.url, apiKey: "k", metadata: { a: "b c" } });
      assert.equal(info?.id, SANDBOX.id);
      assert.equal(fake.requests.length, 2);
      assert.ok(fake.requests.every((r) => r.method === "GET" && r.url === "/v1/sandboxes?metadata=a%3Db%2Bc"));
    } finally {
      await fake.close();
    }
  });

  test("a DELETE is retried on 429, 502 and 504 with growing waits; three retries, then the error", async () => {
    const times: number[] = [];
    const fake = await tiny((_req, res) => {
      times.push(Date.now());
      json(res, [429, 502, 504, 503][times.length - 1] ?? 503, { error: { code: "sandbox_unreachable", message: "down" } });
    });
    try {
      await assert.rejects(Sandbox.killById("x", { baseUrl: fake.url, apiKey: "k" }),
        (e: unknown) => e instanceof ServerError && e.code === "sandbox_unreachable" && e.statusCode === 503);
      assert.equal(fake.requests.length, 4);
      const waits = times.slice(1).map((t, i) => t - times[i]!);
      assert.ok(waits[0]! >= 90 && waits[2]! >= 350, `waits ${waits}`); // 200, 400, 800 ms, each x 0.5-1
    } finally {
      await fake.close();
    }
  });

  test("a create (POST) that answers 503 is not sent again", async () => {
    const fake = await tiny((_req, res) => json(res, 503, { error: { code: "boot_failed", message: "no" } }));
    try {
      await assert.rejects(Sandbox.create({ name: "once", baseUrl: fake.url, apiKey: "k" }),
        (e: unknown) => e instanceof ServerError && e.code === "boot_failed");
      assert.equal(fake.requests.length, 1);
    } finally {
      await fake.close();
    }
  });

  test("a GET to a server that is not there is retried, then a ServerError (connection_error)", async () => {
    const fake = await tiny(() => undefined);
    const url = fake.url;
    await fake.close(); // the port is now closed
    const started = Date.now();
    await assert.rejects(Sandbox.list({ baseUrl: url, apiKey: "k" }),
      (e: unknown) => e instanceof ServerError && e.code === "connection_error");
    assert.ok(Date.now() - started >= 600, "three waits came first");
  });

  test("the real server's answers are not retried when they are not transient", async () => {
    const { baseUrl } = server();
    assert.ok(baseUrl.startsWith("http://127.0.0.1"));
    const started = Date.now();
    await assert.rejects(Sandbox.killById("no-such-box").then(() => Sandbox.connect("no-such-box")), NotFoundError);
    assert.ok(Date.now() - started < 2_000);
  });
});
