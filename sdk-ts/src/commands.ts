/** `sandbox.commands`: run a command to its end, or spawn a long-lived one and attach to it. */

import type { CallOptions } from "./config.js";
import { ConflictError, SandboxTimeoutError, ServerError, ValidationError } from "./errors.js";
import { call, events, lines, open } from "./http.js";
import { type DataPlane, dataHeaders, refreshToken, withToken } from "./plane.js";
import { type OutputCallback, Process, type PtySize, signalNumber } from "./process.js";
import { type BoxUser, type CommandResult, type ProcessInfo, processInfo } from "./types.js";

/** A command's stream carries a keep-alive every 10 s, so a minute of silence means a dead stream. */
export const STREAM_IDLE_MS = 60_000;

export interface RunOptions extends CallOptions {
  /** The directory it starts in (default: the box user's home, or the template's workdir). */
  cwd?: string;
  /** Variables for this command only, over the sandbox's own. */
  env?: Record<string, string>;
  /** "user" (uid 1000, the default) or "root". */
  user?: BoxUser;
  /** Past this the command's whole process group is killed and the call throws
   * SandboxTimeoutError (code "command_timeout"). None: it runs as long as it takes. */
  timeoutMs?: number;
  /** Output as it comes (awaited if it returns a promise); the result holds all of it too. */
  onStdout?: OutputCallback;
  onStderr?: OutputCallback;
}

export interface SpawnOptions extends CallOptions {
  cwd?: string;
  env?: Record<string, string>;
  user?: BoxUser;
  /** A terminal instead of pipes: stdout and stderr then arrive together as stdout. */
  pty?: PtySize;
  onStdout?: OutputCallback;
  onStderr?: OutputCallback;
}

export interface ConnectOptions extends CallOptions {
  onStdout?: OutputCallback;
  onStderr?: OutputCallback;
}

type SignalName = NodeJS.Signals;

export class Commands {
  /** @internal */
  constructor(private readonly dp: () => DataPlane) {}

  /**
   * Run `command` with /bin/sh in the sandbox and resolve once it ends, with its stdout, stderr
   * and exitCode; a non-zero exit is a result, not an error. Output goes to the callbacks as it
   * comes, over server-sent events.
   */
  async run(command: string, options: RunOptions = {}): Promise<CommandResult> {
    const dp = this.dp();
    const { signal } = options;
    if (options.timeoutMs !== undefined && !(options.timeoutMs > 0)) {
      throw new ValidationError(`timeoutMs is a positive number, not ${options.timeoutMs}`, { code: "invalid_argument" });
    }
    const opened = await withToken(dp, signal, () => open("post", "/data/v1/sandboxes/{sandbox_id}/commands/run", {
      base: dp.url, headers: { ...dataHeaders(dp), Accept: "text/event-stream" }, timeoutMs: STREAM_IDLE_MS, signal,
      json: {
        command, cwd: options.cwd, env: options.env, user: options.user,
        timeout_seconds: options.timeoutMs === undefined ? undefined : options.timeoutMs / 1000,
      },
    }));
    const stdout: string[] = [];
    const stderr: string[] = [];
    try {
      for await (const event of events(lines(opened, STREAM_IDLE_MS))) {
        const payload = JSON.parse(event.data) as Record<string, unknown>;
        if (event.event === "stdout" || event.event === "stderr") {
          const text = String(payload.data);
          (event.event === "stdout" ? stdout : stderr).push(text);
          const callback = event.event === "stdout" ? options.onStdout : options.onStderr;
          if (callback) await callback(text);
        } else if (event.event === "exit") {
          if (payload.timed_out) {
            const err = new SandboxTimeoutError("the command ran out of time and was killed with its process group",
              { code: "command_timeout" });
            err.stdout = stdout.join("");
            err.stderr = stderr.join("");
            throw err;
          }
          return { stdout: stdout.join(""), stderr: stderr.join(""), exitCode: Number(payload.exit_code) };
        } else if (event.event === "error") {
          const code = typeof payload.code === "string" ? payload.code : "error";
          const message = typeof payload.message === "string" ? payload.message : "the command failed";
          throw code === "sandbox_failed" ? new ConflictError(message, { code }) : new ServerError(message, { code });
        }
      }
    } catch (error) {
      if (error instanceof SandboxTimeoutError && error.code === "stream_timeout") {
        throw new SandboxTimeoutError("the command's stream went silent; the command may still be running in the "
          + "sandbox", { code: "stream_timeout", cause: error });
      }
      throw error;
    }
    throw new ServerError("the command's stream ended before it finished; the command may still be running in the "
      + "sandbox", { code: "stream_ended" });
  }

  /**
   * Start `command` (with /bin/sh) as a long-lived process and attach to it; resolves once it
   * runs. Its stdin is a pipe, or with `pty` a terminal. The process outlives this object and this
   * client: `close()` detaches, and `commands.connect(pid)` attaches again, replaying what it
   * printed meanwhile.
   */
  async spawn(command: string, options: SpawnOptions = {}): Promise<Process> {
    const dp = this.dp();
    const { signal } = options;
    const pty = options.pty;
    if (pty !== undefined && ![pty.rows, pty.cols].every((v) => Number.isInteger(v) && v >= 1 && v <= 1000)) {
      throw new ValidationError("pty takes rows and cols within 1..1000", { code: "invalid_argument" });
    }
    const info = await withToken(dp, signal, () => call("post", "/data/v1/sandboxes/{sandbox_id}/commands/spawn", {
      base: dp.url, headers: dataHeaders(dp), timeoutMs: dp.cfg.requestTimeoutMs, signal,
      json: { command, cwd: options.cwd, env: options.env, user: options.user, pty },
    }));
    try {
      return await this.connect(info.pid, options);
    } catch (error) {
      await this.kill(info.pid, 9).catch(() => undefined); // nobody could ever reach it: do not leave it running
      throw error;
    }
  }

  /** Attach to a spawned process: the output it kept since it started is replayed first. */
  async connect(pid: number, options: ConnectOptions = {}): Promise<Process> {
    const dp = this.dp();
    return Process.attach(dp, pid, () => refreshToken(dp, options.signal), options);
  }

  /** The spawned processes that are still running (not `run` ones). */
  async list(options: CallOptions = {}): Promise<ProcessInfo[]> {
    const dp = this.dp();
    const answer = await withToken(dp, options.signal, () => call("get", "/data/v1/sandboxes/{sandbox_id}/commands", {
      base: dp.url, headers: dataHeaders(dp), timeoutMs: dp.cfg.requestTimeoutMs, signal: options.signal,
    }));
    return answer.map(processInfo);
  }

  /** Signal a spawned process' group, attached or not (default SIGTERM); false if it had already ended. */
  async kill(pid: number, signal: number | SignalName = "SIGTERM", options: CallOptions = {}): Promise<boolean> {
    const dp = this.dp();
    const answer = await withToken(dp, options.signal, () => call("post",
      "/data/v1/sandboxes/{sandbox_id}/commands/{pid}/signal", {
        base: dp.url, params: { pid }, headers: dataHeaders(dp), timeoutMs: dp.cfg.requestTimeoutMs,
        signal: options.signal, json: { signal: signalNumber(signal) },
      }));
    return answer.signalled;
  }
}
