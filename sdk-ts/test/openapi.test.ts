// One description of the API for both SDKs. The TypeScript SDK's wire types are generated from the
// server's OpenAPI document into src/openapi.ts, and its code reads and writes the wire only
// through them (the build fails on a field that is not there); this checks that the committed file
// is what the test server serves today. And the error codes are the server's catalogue, name for
// name, each mapped to the class the Python SDK gives it.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { AuthenticationError, BuildFailure, SandboxError, ServerCode } from "@hutch/sdk";
import { PYTHON, SDK_DIR, run, server } from "./support.js";

const CATALOGUE = `
import json
from hutch.errors import BuildFailure, Code
out = {"codes": {c.name: [c.value, c.status] for c in Code}, "build": {b.name: b.value for b in BuildFailure}}
try:
    from hutch.sdk.errors import error_for
    out["classes"] = {c.value: type(error_for(c.status, c.value, "")).__name__ for c in Code}
except ImportError:
    pass
print(json.dumps(out))
`;

describe("the SDK and the server's OpenAPI document", () => {
  test("src/openapi.ts is generated from the document the server serves", async () => {
    const { baseUrl } = server();
    const ran = await run(process.execPath, ["scripts/openapi.mjs", baseUrl, "--check"], { cwd: SDK_DIR });
    assert.equal(ran.code, 0, ran.stderr + ran.stdout);
  });

  test("every path the SDK calls is in the document, with the method it uses", async () => {
    const { baseUrl } = server();
    const doc = (await (await fetch(`${baseUrl}/openapi.json`)).json()) as { paths: Record<string, object> };
    const { readFileSync, readdirSync } = await import("node:fs");
    const used = new Set<string>();
    for (const file of readdirSync(`${SDK_DIR}/src`).filter((f) => f.endsWith(".ts") && f !== "openapi.ts")) {
      const text = readFileSync(`${SDK_DIR}/src/${file}`, "utf8");
      for (const m of text.matchAll(/(?:call|open)\("(get|post|put|patch|delete)",\s*"([^"]+)"/g)) used.add(`${m[1]} ${m[2]}`);
    }
    assert.ok(used.size >= 35, `found ${used.size} calls`);
    for (const entry of used) {
      const [method, path] = entry.split(" ") as [string, string];
      assert.ok(path in doc.paths && method in (doc.paths[path] as object), `${entry} is not in the server's document`);
    }
  });
});

describe("error codes", () => {
  test("ServerCode and BuildFailure are the server's catalogue, name for name", async () => {
    const ran = await run(PYTHON, ["-c", CATALOGUE]);
    assert.equal(ran.code, 0, ran.stderr);
    const server = JSON.parse(ran.stdout) as { codes: Record<string, [string, number]>; build: Record<string, string>;
      classes?: Record<string, string> };
    assert.deepEqual(Object.fromEntries(Object.entries(server.codes).map(([k, [v]]) => [k, v])), { ...ServerCode });
    assert.deepEqual(server.build, { ...BuildFailure });
    const errors = new URL("../../dist/errors.js", import.meta.url).href; // the SDK's one table (not exported)
    const { errorFor } = (await import(errors)) as { errorFor: (s: number, c: string, m: string) => SandboxError };
    for (const [value, status] of Object.values(server.codes)) {
      const err = errorFor(status, value, "");
      assert.ok(err instanceof SandboxError);
      assert.equal(err.statusCode, status);
      if (server.classes) assert.equal(err.name, server.classes[value], `${value} (${status})`);
    }
    assert.ok(errorFor(401, "invalid_api_key", "") instanceof AuthenticationError);
  });
});
