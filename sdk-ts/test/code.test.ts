// The code interpreter of a hutch/code-interpreter box, as the Python SDK's run_code tests
// (tests/integration/test_run_code.py): runCode's value, output, errors and charts as they come,
// envs for one run, contexts (create, list, restart, remove), a timeout and an abort that interrupt
// the kernel and keep its state, and a box without the interpreter. Skipped, as the Python tests
// are, where the interpreter's root is not built (`hutch build-base`); under CI=true that fails.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  AbortError, ConflictError, Execution, type ExecutionError, NotFoundError, Result, Sandbox, SandboxTimeoutError,
  ValidationError,
} from "@hutch/sdk";
import { box, cleanup, codeInterpreterBuilt, needsInstalled } from "./support.js";

const TEMPLATE = "hutch/code-interpreter";
const PNG_MAGIC = "iVBORw0KGgo"; // "\x89PNG\r\n\x1a\n", base64
const skip = needsInstalled("the code interpreter's root (hutch build-base)", await codeInterpreterBuilt());

after(cleanup);

describe("runCode", { skip }, () => {
  let sandbox: Sandbox;
  before(async () => {
    sandbox = await box({ name: "run-code", fromTemplate: TEMPLATE });
  });

  test("the cell's value, its output as it comes, and the kernel's state between calls", async () => {
    const seen: { text: string; at: number }[] = [];
    const started = Date.now();
    const ex = await sandbox.runCode("import time\nprint('hello', flush=True)\ntime.sleep(1)\nx = 40\nx + 2", {
      onStdout: (text) => { seen.push({ text, at: Date.now() - started }); },
    });
    const total = Date.now() - started;
    assert.ok(ex instanceof Execution);
    assert.equal(ex.text, "42");
    assert.equal(ex.error, null);
    assert.equal(typeof ex.executionCount, "number");
    assert.deepEqual(ex.logs, { stdout: ["hello\n"], stderr: [] });
    assert.deepEqual(seen.map((s) => s.text), ["hello\n"]);
    assert.ok(seen[0]!.at < total - 600, `the output came at ${seen[0]!.at} ms of ${total}: streamed, not at the end`);
    assert.deepEqual(ex.results.map((r) => [r.isMainResult, r.formats()]), [[true, ["text"]]]);
    assert.ok(ex.results[0] instanceof Result && String(ex.results[0]) === "42");
    assert.equal((await sandbox.runCode("x")).text, "40");
    assert.deepEqual((await sandbox.runCode("import sys; print('oops', file=sys.stderr)")).logs.stderr, ["oops\n"]);
    assert.deepEqual(JSON.parse(JSON.stringify(await sandbox.runCode("1"))).logs, { stdout: [], stderr: [] });
  });

  test("an error the code raised is in the execution, and goes to onError", async () => {
    const errors: ExecutionError[] = [];
    const failed = await sandbox.runCode("def f():\n    raise ValueError('bad value')\nf()", {
      onError: async (error) => { errors.push(error); }, // awaited, as the other callbacks
    });
    assert.ok(failed.error);
    assert.deepEqual([failed.error.name, failed.error.value], ["ValueError", "bad value"]);
    assert.match(failed.error.traceback, /raise ValueError\('bad value'\)/);
    assert.deepEqual(errors, [failed.error]);
    assert.equal(failed.text, undefined);
  });

  test("a chart is a result of its own, a PNG, passed to onResult", async () => {
    const shown: Result[] = [];
    const chart = await sandbox.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()", {
      onResult: (result) => { shown.push(result); },
    });
    assert.equal(chart.error, null);
    assert.equal(chart.results.length, 1);
    assert.deepEqual(shown, chart.results);
    const png = chart.results[0]!;
    assert.ok(!png.isMainResult && png.formats().includes("png"));
    assert.ok(png.png?.startsWith(PNG_MAGIC) && png.png.length > 1000);
  });

  test("envs hold for one run; the audit log has it", async () => {
    const code = "import os; os.environ.get('ONLY_NOW')";
    assert.equal((await sandbox.runCode(code, { envs: { ONLY_NOW: "given" } })).text, "given");
    assert.equal((await sandbox.runCode(`${code} is None`)).text, "True");
    const ops = (await sandbox.getAuditLog({ limit: 20 })).entries.map((e) => e.op);
    assert.ok(ops.includes("run_code"), JSON.stringify(ops));
  });

  test("contexts: each its own kernel and cwd; listed, restarted, removed", async () => {
    const ctx = await sandbox.createCodeContext({ cwd: "/tmp" });
    assert.deepEqual([ctx.language, ctx.cwd], ["python", "/tmp"]);
    assert.equal((await sandbox.runCode("import os; os.getcwd()", { context: ctx })).text, "/tmp");
    await sandbox.runCode("y = 7", { context: ctx });
    assert.equal((await sandbox.runCode("y")).error?.name, "NameError"); // the default context is another kernel
    assert.equal((await sandbox.runCode("y", { context: ctx.id })).text, "7");
    assert.ok((await sandbox.listCodeContexts()).some((c) => c.id === ctx.id));
    await sandbox.restartCodeContext(ctx);
    assert.equal((await sandbox.runCode("y", { context: ctx })).error?.name, "NameError"); // a fresh kernel
    await sandbox.removeCodeContext(ctx.id);
    assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === ctx.id));
    await assert.rejects(sandbox.runCode("1", { context: ctx }),
      (e: unknown) => e instanceof NotFoundError && e.code === "context_not_found" && e.statusCode === 404);
    await assert.rejects(sandbox.runCode("1", { context: ctx, language: "python" }),
      (e: unknown) => e instanceof ValidationError && e.code === "invalid_argument");
    await assert.rejects(sandbox.createCodeContext({ language: "cobol" }), // the interpreter's refusal, typed
      (e: unknown) => e instanceof ValidationError && e.code === "invalid_request" && /not available/.test(e.message));
  });

  test("timeoutMs interrupts the kernel, which keeps its state", async () => {
    await sandbox.runCode("kept = 'still here'");
    const started = Date.now();
    await assert.rejects(sandbox.runCode("import time\nfor _ in range(600): time.sleep(0.1)", { timeoutMs: 1000 }),
      (e: unknown) => e instanceof SandboxTimeoutError && e.code === "execution_timeout");
    assert.equal((await sandbox.runCode("kept")).text, "still here"); // the cell was interrupted: the kernel is free
    assert.ok(Date.now() - started < 15_000, "not after the cell's whole minute");
    await assert.rejects(sandbox.runCode("1", { timeoutMs: 0 }), ValidationError);
  });

  test("an aborted runCode rejects with AbortError and interrupts the cell", async () => {
    await sandbox.runCode("kept = 'after the abort'");
    const controller = new AbortController();
    const started = Date.now();
    const running = sandbox.runCode("import time\nprint('started', flush=True)\nfor _ in range(600): time.sleep(0.1)", {
      signal: controller.signal, onStdout: () => controller.abort(new Error("enough")),
    });
    await assert.rejects(running, (e: unknown) => e instanceof AbortError && e.name === "AbortError"
      && (e.cause as Error).message === "enough");
    assert.equal((await sandbox.runCode("kept")).text, "after the abort"); // the kernel took the next cell
    assert.ok(Date.now() - started < 15_000, "the cell did not run its whole minute first");
  });
});

describe("a box without the interpreter", () => {
  test("says so: ConflictError interpreter_unavailable", async () => {
    const plain = await box({ name: "no-interpreter" });
    await assert.rejects(plain.runCode("1"), (e: unknown) => e instanceof ConflictError
      && e.code === "interpreter_unavailable" && e.message.includes("hutch/code-interpreter"));
    await assert.rejects(plain.listCodeContexts(),
      (e: unknown) => e instanceof ConflictError && e.code === "interpreter_unavailable");
  });
});
