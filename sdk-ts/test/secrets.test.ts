// Secrets: created once, bound to a box's env var as a stand-in, rotated, audited, deleted; providers.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, describe, test } from "node:test";
import { NotFoundError, Provider, Secret } from "@hutch/sdk";
import { box, cleanup } from "./support.js";

const made: string[] = [];
after(async () => {
  await cleanup();
  await Promise.all(made.map((name) => Secret.deleteByName(name).catch(() => undefined)));
});

describe("Secret", () => {
  test("a provider's secret: the box sees only a stand-in; rotate, list, get, audit, delete", async () => {
    const name = `anthropic-${randomUUID().slice(0, 8)}`;
    made.push(name);
    const secret = await Secret.create({ name, value: "sk-ant-real-value", provider: "anthropic" });
    assert.equal(secret.name, name);
    assert.equal(secret.provider, "anthropic");
    assert.ok(secret.allowedHosts.includes("api.anthropic.com"));
    assert.equal(secret.auth.header.toLowerCase(), "x-api-key");
    assert.equal(secret.version, 1);
    assert.ok(!JSON.stringify(secret.details).includes("sk-ant-real-value"), "no call returns the value");

    const sandbox = await box({ name: "secrets", secrets: { ANTHROPIC_API_KEY: name },
      network: { allowOut: ["api.anthropic.com"], denyOut: ["0.0.0.0/0"] } });
    const { stdout } = await sandbox.commands.run("printenv ANTHROPIC_API_KEY");
    assert.match(stdout, /^hutch_standin_/);
    assert.ok(!stdout.includes("sk-ant"));
    assert.deepEqual(sandbox.secrets.map((b) => [b.env, b.secret, b.revoked]), [["ANTHROPIC_API_KEY", name, false]]);

    await secret.rotate("sk-ant-second");
    assert.equal(secret.version, 2);
    assert.equal((await Secret.get(name)).version, 2);
    assert.ok((await Secret.list()).some((s) => s.name === name));
    const page = await secret.audit({ limit: 10, sandboxId: sandbox.id });
    assert.deepEqual(page.entries, []);
    assert.equal(page.nextBefore, null);
    assert.deepEqual((await Secret.auditByName(name)).entries, []);

    await secret.delete();
    await assert.rejects(Secret.get(name), NotFoundError);
    const info = await sandbox.getInfo();
    assert.equal(info.secrets[0]?.revoked, true, "the binding is revoked, the stand-in never swapped again");
  });

  test("a secret for any service; attach and detach on a live box", async () => {
    const name = `internal-${randomUUID().slice(0, 8)}`;
    made.push(name);
    const secret = await Secret.create({ name, value: "tok-123", allowedHosts: ["api.internal.example"],
      auth: { header: "authorization", format: "Token {value}" } });
    assert.deepEqual(secret.auth, { header: "authorization", format: "Token {value}" });
    const sandbox = await box({ name: "attach" });
    const bound = await sandbox.attachSecret("INTERNAL_TOKEN", name);
    assert.deepEqual(bound.map((b) => b.env), ["INTERNAL_TOKEN"]);
    assert.ok(bound[0]!.createdAt instanceof Date);
    assert.match((await sandbox.commands.run("printenv INTERNAL_TOKEN")).stdout, /^hutch_standin_/);
    assert.deepEqual(await sandbox.detachSecret("INTERNAL_TOKEN"), []);
    assert.equal((await sandbox.commands.run("printenv INTERNAL_TOKEN")).exitCode, 1);
    await Secret.deleteByName(name);
  });

  test("Provider.list names the services a secret can take by name", async () => {
    const providers = await Provider.list();
    const names = providers.map((p) => p.name);
    for (const wanted of ["anthropic", "openai", "github"]) assert.ok(names.includes(wanted), names.join(", "));
    const openai = providers.find((p) => p.name === "openai")!;
    assert.equal(openai.env, "OPENAI_API_KEY");
    assert.ok(openai.allowedHosts.length > 0 && openai.auth.format.includes("{value}"));
  });
});
