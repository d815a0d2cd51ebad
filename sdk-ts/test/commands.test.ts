// Commands: run (results, options, streaming callbacks, timeouts), spawn (stdin, signals, wait,
// detach and reattach with replay, a PTY), list and kill.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { ConflictError, type Process, Sandbox, SandboxError, SandboxTimeoutError, TimeoutError, ValidationError } from "@hutch/sdk";
import { SDK_DIR, box, cleanup, run, until } from "./support.js";

let sandbox: Sandbox;
before(async () => {
  sandbox = await box({ name: "commands", envVars: { FROM_BOX: "box" } });
});
after(cleanup);

describe("commands.run", () => {
  test("a result: stdout, stderr and a non-zero exit, which is not an error", async () => {
    const r = await sandbox.commands.run("echo out; echo err >&2; exit 3");
    assert.deepEqual(r, { stdout: "out\n", stderr: "err\n", exitCode: 3 });
  });

  test("cwd, env over the box's, and user", async () => {
    const r = await sandbox.commands.run('pwd; echo "$FROM_BOX $ONLY_HERE"; id -un', {
      cwd: "/tmp", env: { ONLY_HERE: "here" },
    });
    assert.equal(r.stdout, "/tmp\nbox here\nuser\n");
    assert.equal((await sandbox.commands.run("id -u", { user: "root" })).stdout, "0\n");
    assert.equal((await sandbox.commands.run("printenv ONLY_HERE")).exitCode, 1, "env is for that command only");
  });

  test("onStdout and onStderr get the output as it comes; the result holds all of it", async () => {
    const seen: { stream: string; text: string; at: number }[] = [];
    const started = Date.now();
    const r = await sandbox.commands.run("for i in 1 2 3; do echo $i; echo e$i >&2; sleep 0.4; done", {
      onStdout: (text) => { seen.push({ stream: "out", text, at: Date.now() - started }); },
      onStderr: async (text) => { // awaited: the next chunk waits for it
        await new Promise((resolve) => setTimeout(resolve, 5));
        seen.push({ stream: "err", text, at: Date.now() - started });
      },
    });
    assert.equal(r.stdout, "1\n2\n3\n");
    assert.equal(r.stderr, "e1\ne2\ne3\n");
    assert.equal(seen.filter((s) => s.stream === "out").map((s) => s.text).join(""), "1\n2\n3\n");
    assert.equal(seen.filter((s) => s.stream === "err").map((s) => s.text).join(""), "e1\ne2\ne3\n");
    const firstOut = seen.find((s) => s.stream === "out")!;
    const total = Date.now() - started;
    assert.ok(firstOut.at < total - 600, `the first line came at ${firstOut.at} ms of ${total}: streamed, not at the end`);
  });

  test("a callback that throws ends the call with its error", async () => {
    await assert.rejects(sandbox.commands.run("echo a; sleep 1; echo b", {
      onStdout: () => { throw new Error("no thanks"); },
    }), /no thanks/);
  });

  test("timeoutMs kills the command and throws SandboxTimeoutError with what it printed", async () => {
    const started = Date.now();
    await assert.rejects(sandbox.commands.run("echo partial; sleep 30", { timeoutMs: 1500 }), (e: unknown) => {
      assert.ok(e instanceof SandboxTimeoutError && e instanceof TimeoutError && e instanceof SandboxError);
      assert.equal(e.code, "command_timeout");
      assert.equal(e.stdout, "partial\n");
      return true;
    });
    assert.ok(Date.now() - started < 10_000);
    await assert.rejects(sandbox.commands.run("true", { timeoutMs: 0 }), ValidationError);
  });
});

describe("commands.spawn", () => {
  test("stdin.write and stdin.close, then wait() with the exit code and output", async () => {
    const chunks: string[] = [];
    const proc = await sandbox.commands.spawn("python3 -i", { onStdout: (d) => { chunks.push(d); } });
    assert.ok(proc.pid > 0);
    proc.stdin.write("print(2 + 2)\n"); // not awaited, as in the seed: the writes keep their order
    proc.stdin.close();
    const result = await proc.wait();
    assert.equal(result.exitCode, 0);
    assert.equal(result.stdout, "4\n");
    assert.equal(chunks.join(""), "4\n");
    assert.match(result.stderr, /Python 3/);
    assert.equal(proc.exitCode, 0);
    await assert.rejects(proc.stdin.write("more"), (e: unknown) => e instanceof ConflictError && e.code === "process_exited");
  });

  test("bytes on stdin come out as they went in", async () => {
    const proc = await sandbox.commands.spawn("od -An -tx1");
    await proc.stdin.write(new Uint8Array([0, 1, 254, 255]));
    await proc.stdin.close();
    assert.equal((await proc.wait()).stdout.trim(), "00 01 fe ff");
  });

  test("kill(signal): SIGTERM by default (143), or the one given (SIGKILL: 137); false once it ended", async () => {
    const proc = await sandbox.commands.spawn("sleep 60");
    assert.equal(await proc.kill(), true);
    assert.equal((await proc.wait()).exitCode, 143);
    assert.equal(await proc.kill(), false);
    const other = await sandbox.commands.spawn("trap '' TERM; echo ready; sleep 60");
    await until(() => other.stdout === "ready\n", 10_000, "the trap to be set"); // a signal before it would end the shell
    await other.kill("SIGTERM");
    await assert.rejects(other.wait({ timeoutMs: 700 }), (e: unknown) => e instanceof SandboxTimeoutError && e.code === "wait_timeout");
    assert.equal(await other.kill("SIGKILL"), true);
    assert.equal((await other.wait()).exitCode, 137);
    const third = await sandbox.commands.spawn("sleep 60");
    assert.equal(await sandbox.commands.kill(third.pid, 9), true);
    assert.equal((await third.wait()).exitCode, 137);
  });

  test("close() detaches; list() shows it; connect(pid) replays what it printed and streams on", async () => {
    const proc = await sandbox.commands.spawn("echo one; read line; echo got $line; sleep 60");
    await until(() => proc.stdout === "one\n", 10_000, "the first line");
    await proc.close();
    await assert.rejects(proc.wait(), (e: unknown) => e instanceof SandboxError && e.code === "detached");
    const listed = await sandbox.commands.list();
    const info = listed.find((p) => p.pid === proc.pid);
    assert.ok(info, JSON.stringify(listed));
    assert.equal(info.pty, false);
    assert.equal(info.user, "user");
    assert.ok(info.startedAt instanceof Date);
    const replayed: string[] = [];
    const again = await sandbox.commands.connect(proc.pid, { onStdout: (d) => { replayed.push(d); } });
    await again.stdin.write("two\n");
    await until(() => again.stdout.includes("got two"), 10_000, "the reply");
    assert.equal(replayed.join(""), "one\ngot two\n");
    assert.equal(await proc.kill(), true, "a detached process is signalled over HTTP");
    assert.equal((await again.wait()).exitCode, 143);
    assert.ok(!(await sandbox.commands.list()).some((p) => p.pid === proc.pid));
  });

  test("an attachment alone does not keep Node running: the program ends, the process runs on", async () => {
    const script = `import { Sandbox } from "@hutch/sdk";
      const sandbox = await Sandbox.connect(${JSON.stringify(sandbox.id)});
      const proc = await sandbox.commands.spawn("sleep 20; echo late", { onStdout: () => {} });
      console.log(proc.pid);`;
    const started = Date.now();
    const ran = await run(process.execPath, ["--input-type=module", "-e", script], { cwd: SDK_DIR, timeoutMs: 15_000 });
    assert.equal(ran.code, 0, ran.stderr);
    assert.ok(Date.now() - started < 10_000, "it did not wait for the process");
    const pid = Number(ran.stdout.trim());
    assert.ok((await sandbox.commands.list()).some((p) => p.pid === pid), "the process runs on in the box");
    assert.equal(await sandbox.commands.kill(pid), true);
  });

  test("await using kills the process at the block's end", async () => {
    let pid = 0;
    {
      await using proc: Process = await sandbox.commands.spawn("sleep 60");
      pid = proc.pid;
      assert.ok((await sandbox.commands.list()).some((p) => p.pid === pid));
    }
    await until(async () => !(await sandbox.commands.list()).some((p) => p.pid === pid), 10_000, "the process to end");
  });

  test("a PTY: a real terminal, resized", async () => {
    const term = await sandbox.commands.spawn("bash", { pty: { rows: 24, cols: 80 } });
    await term.stdin.write("tty; stty size\n");
    await until(() => /24 80/.test(term.stdout), 10_000, "stty size");
    assert.match(term.stdout, /\/dev\/pts\/\d+/);
    await term.resize(40, 120);
    await term.stdin.write("stty size; exit 7\n");
    const result = await term.wait();
    assert.equal(result.exitCode, 7);
    assert.match(result.stdout, /40 120/);
    assert.equal(result.stderr, "", "a terminal's output all comes as stdout");
    await assert.rejects(sandbox.commands.spawn("bash", { pty: { rows: 0, cols: 80 } }), ValidationError);
  });
});
