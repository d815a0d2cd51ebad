// The seeds' TypeScript examples (examples/ts), run as users run them (with tsx) against the test
// server: the Superserve SDK guide's with only the import changed, and the Mastra guide's with the
// agent's model at hutch's scripted model (Mastra's OpenAI-compatible provider), so its bash,
// writeFile and readFile tools run in a real box. Mastra needs Node 22: scripts/test-ts installs
// one and names it in HUTCH_NODE22.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { after, describe, test } from "node:test";
import { Sandbox, Secret } from "@hutch/sdk";
import { PYTHON, REPO, run } from "./support.js";

const EXAMPLES = `${REPO}/examples/ts`;
const TSX = `${EXAMPLES}/node_modules/tsx/dist/cli.mjs`;
const NODE22 = process.env.HUTCH_NODE22;

function example(file: string, options: { node?: string; env?: NodeJS.ProcessEnv; args?: string[] } = {}) {
  return run(options.node ?? process.execPath, [TSX, file, ...(options.args ?? [])],
    { cwd: EXAMPLES, env: { ...process.env, ...options.env }, timeoutMs: 120_000 });
}

interface Model {
  url: string;
  /** Stop it; every tool result it was given. */
  stop(): Promise<string[]>;
}

/** hutch's scripted model (hutch/integrations/scripted_model.py) on loopback, with this script. */
async function scriptedModel(script: object[]): Promise<Model> {
  const child = spawn(PYTHON, [`${REPO}/sdk-ts/test/scripted_model.py`, JSON.stringify(script)], { cwd: REPO });
  const lines = createInterface({ input: child.stdout });
  const iterator = lines[Symbol.asyncIterator]();
  const first = await iterator.next();
  assert.ok(!first.done && first.value.startsWith("http://127.0.0.1:"), "the scripted model started");
  return {
    url: first.value,
    async stop() {
      child.stdin.end();
      const last = await iterator.next();
      return (JSON.parse(last.value as string) as { tool_results: string[] }).tool_results;
    },
  };
}

async function mastra(file: string, script: object[]): Promise<{ stdout: string; toolResults: string[] }> {
  const model = await scriptedModel(script);
  const ran = await example(file, { node: NODE22!, env: { HUTCH_SCRIPTED_MODEL_URL: model.url } })
    .catch(async (error: unknown) => {
      await model.stop();
      throw error;
    });
  const toolResults = await model.stop();
  assert.equal(ran.code, 0, ran.stderr);
  return { stdout: ran.stdout, toolResults };
}

const names = ["demo", "dev-box", "streaming", "research-agent", "restricted", "preview", "agent-runtime",
  "code-runner", "chat-session"];
after(async () => { // an example that failed half-way may leave its box
  for (const info of await Sandbox.list()) if (names.includes(info.name)) await Sandbox.killById(info.id);
  await Secret.deleteByName("anthropic-prod").catch(() => undefined);
});

describe("the Superserve SDK guide's examples, with only the import changed", () => {
  test("examples/ts is installed", () => assert.ok(existsSync(TSX), "scripts/test-ts installs examples/ts"));

  test("every example type-checks against the SDK's declarations (tsc --noEmit, as written)", async () => {
    const ran = await run(process.execPath, [`${EXAMPLES}/node_modules/typescript/bin/tsc`, "-p", "tsconfig.json"],
      { cwd: EXAMPLES });
    assert.equal(ran.code, 0, ran.stdout + ran.stderr);
  });

  test("quickstart", async () => {
    const ran = await example("quickstart.ts");
    assert.equal(ran.code, 0, ran.stderr);
    assert.equal(ran.stdout, "hello\n 0\ncontent\n");
  });

  test("persist and reconnect", async () => {
    const ran = await example("reconnect.ts");
    assert.equal(ran.code, 0, ran.stderr);
    assert.match(ran.stdout, /^exit \d+ active\n$/);
  });

  test("streaming and spawn", async () => {
    const ran = await example("streaming.ts");
    assert.equal(ran.code, 0, ran.stderr);
    assert.equal(ran.stdout, "fetch\ncompile\nlink\nexited 0 19\n4\n0\n");
  });

  test("secrets and network rules", async () => {
    const ran = await example("secrets-and-network.ts", { env: { ANTHROPIC_API_KEY: "sk-ant-not-a-real-key" } });
    assert.equal(ran.code, 0, ran.stderr);
    assert.match(ran.stdout, /^the box sees: hutch_standin_\S+\n/);
    assert.ok(!ran.stdout.includes("sk-ant-not-a-real-key"));
    assert.match(ran.stdout, /"denyOut":\["0\.0\.0\.0\/0"\]/);
  });

  test("preview URLs", async () => {
    const ran = await example("preview.ts");
    assert.equal(ran.code, 0, ran.stderr);
    assert.match(ran.stdout, /^http:\/\/8000-[0-9a-f-]+\.localhost:\d+\/?\?\S+\n\[ 'X-Hutch-Preview-Token' \] http:\/\/8000-/i);
  });

  test("error handling", async () => {
    const ran = await example("errors.ts");
    assert.equal(ran.code, 0, ran.stderr);
    assert.equal(ran.stdout, "gone: not_found 404\n");
  });
});

describe("the Mastra guide's examples, offline against the scripted model", { skip: NODE22 ? false : "HUTCH_NODE22 is not set (scripts/test-ts installs Node 22)" }, () => {
  test("a bash tool backed by the sandbox", async () => {
    const { stdout, toolResults } = await mastra("mastra/bash-tool.ts", [
      { call: "bash", args: { command: "touch /tmp/a /tmp/b; ls /tmp | wc -l" } },
      { answer_with_last_tool_result: "The tool said: " },
    ]);
    assert.deepEqual(toolResults.map((r) => JSON.parse(r)), [{ stdout: "2\n", stderr: "", exitCode: 0 }]);
    assert.match(stdout, /The tool said: .*"stdout":"2\\n"/);
  });

  test("file tools: write a script, run it, read what it wrote", async () => {
    const primes = "n = [p for p in range(2, 30) if all(p % d for d in range(2, p))]\n"
      + "open('/home/user/primes.txt', 'w').write(str(n[:10]))\nprint(n[:10])\n";
    const { stdout, toolResults } = await mastra("mastra/file-tools.ts", [
      { call: "writeFile", args: { path: "/home/user/primes.py", content: primes } },
      { call: "bash", args: { command: "python3 /home/user/primes.py" } },
      { call: "readFile", args: { path: "/home/user/primes.txt" } },
      { answer: "The first 10 primes are [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]." },
    ]);
    assert.equal(toolResults[0], `Wrote ${primes.length} characters to /home/user/primes.py`);
    assert.equal(JSON.parse(toolResults[1]!).stdout, "[2, 3, 5, 7, 11, 13, 17, 19, 23, 29]\n");
    assert.deepEqual(JSON.parse(toolResults[2]!), { content: "[2, 3, 5, 7, 11, 13, 17, 19, 23, 29]" });
    assert.match(stdout, /^> writeFile .*\n> bash \{"command":"python3 \/home\/user\/primes.py"\}\n> readFile /);
    assert.match(stdout, /The first 10 primes are/);
  });

  test("streamed tool calls", async () => {
    const { stdout } = await mastra("mastra/stream-tool-calls.ts", [
      { call: "bash", args: { command: "grep PRETTY_NAME /etc/os-release; python3 --version" } },
      { answer: "This machine runs Debian with Python 3." },
    ]);
    assert.match(stdout, /> bash \{"command":"grep PRETTY_NAME/);
    assert.match(stdout, /PRETTY_NAME=.*Python 3\.\d+/s);
    assert.match(stdout, /This machine runs Debian with Python 3\./);
  });

  test("one sandbox per conversation: connected each turn, paused between turns", async () => {
    const { stdout, toolResults } = await mastra("mastra/one-sandbox-per-conversation.ts", [
      { call: "bash", args: { command: "printf '1. milk\\n2. eggs\\n3. bread\\n' > /home/user/todo.txt" } },
      { answer: "Created the list." },
      { call: "bash", args: { command: "echo '4. tea' >> /home/user/todo.txt; cat /home/user/todo.txt" } },
      { answer_with_last_tool_result: "Now: " },
    ]);
    assert.equal(JSON.parse(toolResults[1]!).stdout, "1. milk\n2. eggs\n3. bread\n4. tea\n",
      "the second turn found the first turn's file after a pause and a connect");
    assert.match(stdout, /^Now: /);
  });
});
