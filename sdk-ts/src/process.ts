/**
 * A spawned process, attached over a WebSocket (`{dataPlaneUrl}/commands/{pid}/ws`, frames as in
 * the server's `hutch/server/attach.py`): its output and exit come in as JSON frames, stdin and
 * control requests go out, each acknowledged by id.
 *
 * The process does not depend on the attachment: closing it (or losing the connection) leaves the
 * process running in the box, and `commands.connect(pid)` attaches again, replaying the output kept
 * meanwhile. A pause ends every attachment (ConflictError "sandbox_paused").
 */

import WebSocket from "ws";
import type { CallOptions } from "./config.js";
import {
  AbortError, ConflictError, SandboxError, SandboxTimeoutError, ServerError, ValidationError, errorFor, errorFromBody,
} from "./errors.js";
import { call } from "./http.js";
import { type DataPlane, dataHeaders, withToken } from "./plane.js";
import type { CommandResult } from "./types.js";

export type OutputCallback = (data: string) => unknown;

export interface PtySize {
  rows: number;
  cols: number;
}

const REQUEST_TIMEOUT_MS = 60_000;
const MAX_FRAME = 16 * 2 ** 20;
const STDIN_PIECE = 256 * 2 ** 10; // a write goes in pieces: the server takes frames up to 1 MiB
const SIGNALS: Record<string, number> = {
  SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGUSR1: 10, SIGUSR2: 12, SIGTERM: 15, SIGCONT: 18,
  SIGSTOP: 19, SIGTSTP: 20, SIGWINCH: 28,
};

/** A signal's number in the box (Linux numbering), from 15 or "SIGTERM". */
export function signalNumber(signal: number | NodeJS.Signals): number {
  const n = typeof signal === "number" ? signal : SIGNALS[signal];
  if (n === undefined || !Number.isInteger(n) || n < 1 || n > 64) {
    throw new ValidationError(`not a signal: ${String(signal)}`, { code: "invalid_argument" });
  }
  return n;
}

interface Frame {
  t?: unknown;
  d?: unknown;
  id?: unknown;
  chars?: unknown;
  exit_code?: unknown;
  status?: unknown;
  code?: unknown;
  message?: unknown;
  signalled?: unknown;
}

interface Waiter {
  resolve: (frame: Frame) => void;
  reject: (error: unknown) => void;
  timer: NodeJS.Timeout;
}

/** Settled once; a rejection nobody waited for is not reported as unhandled. */
function quiet<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => undefined);
  return promise;
}

function openSocket(url: string, headers: Record<string, string>, signal: AbortSignal | undefined,
  pid: number): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new AbortError(signal.reason));
    const ws = new WebSocket(url, { headers, maxPayload: MAX_FRAME, handshakeTimeout: 30_000 });
    const onAbort = () => {
      ws.terminate();
      reject(new AbortError(signal?.reason));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const settle = () => signal?.removeEventListener("abort", onAbort);
    // An attachment by itself does not keep Node running (a program may end and leave its
    // processes running in the box); a wait() or a request on it does, while it is pending.
    ws.on("upgrade", (response) => response.socket.unref());
    ws.on("open", () => {
      settle();
      resolve(ws);
    });
    ws.on("unexpected-response", (request, response) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", () => {
        settle();
        reject(errorFromBody(response.statusCode ?? 500, Buffer.concat(chunks).toString()));
        request.destroy();
      });
    });
    ws.on("error", (error) => {
      settle();
      reject(new ServerError(`could not attach to process ${pid}: ${error.message}`,
        { code: "connection_error", cause: error }));
    });
  });
}

export class ProcessStdin {
  /** @internal */
  constructor(private readonly process: Process) {}

  /** Send to the process' stdin; resolves once the box took it (a pipe that is full waits). */
  write(data: string | Uint8Array): Promise<void> {
    const raw = typeof data === "string" ? Buffer.from(data) : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    const pieces: Promise<Frame>[] = [];
    for (let at = 0; at < raw.length || (at === 0 && raw.length === 0); at += STDIN_PIECE) {
      pieces.push(this.process._request({ t: "stdin", b: raw.subarray(at, at + STDIN_PIECE).toString("base64") }));
      if (raw.length === 0) break;
    }
    return quiet(Promise.all(pieces).then(() => undefined));
  }

  /** End of input: the pipe closes (on a terminal, ^D is sent). */
  close(): Promise<void> {
    return quiet(this.process._request({ t: "close_stdin" }).then(() => undefined));
  }
}

export interface WaitOptions extends CallOptions {
  /** Give up waiting after this long (SandboxTimeoutError "wait_timeout"); the process runs on. */
  timeoutMs?: number;
}

/**
 * A spawned process, attached. `stdout` and `stderr` hold what arrived so far (replayed output
 * included); `exitCode` is set once it ends. `await using` kills it and detaches on exit. The
 * attachment does not keep Node running by itself: a program that ends leaves the process running
 * in the box (`commands.connect(pid)` finds it); awaiting `wait()` keeps it running until the exit.
 */
export class Process {
  readonly pid: number;
  readonly stdin: ProcessStdin;
  /** Output the box's buffer dropped before this attachment saw it. */
  droppedChars = 0;
  /** The exit code (128 + N if signal N ended it) once it ended; null while it runs. */
  exitCode: number | null = null;

  private readonly parts = { stdout: [] as string[], stderr: [] as string[] };
  private readonly pending = new Map<number, Waiter>();
  private ids = 0;
  private queue: Promise<void> = Promise.resolve();
  private failure: SandboxError = new ServerError("the connection to the process ended before it exited; it may "
    + "still run: attach again with commands.connect(pid)", { code: "stream_ended" });
  private settled = false;
  private readonly done: Promise<number>;
  private settle!: (error: SandboxError | null) => void;
  private readonly closed: Promise<void>;
  private markClosed!: () => void;
  private holds = 0;
  private keepAlive: NodeJS.Timeout | undefined;

  private constructor(private readonly dp: DataPlane, private readonly ws: WebSocket, pid: number,
    private readonly callbacks: { onStdout?: OutputCallback | undefined; onStderr?: OutputCallback | undefined }) {
    this.pid = pid;
    this.stdin = new ProcessStdin(this);
    this.done = quiet(new Promise<number>((resolve, reject) => {
      this.settle = (error) => {
        if (this.settled) return;
        this.settled = true;
        if (error === null) resolve(this.exitCode ?? 0);
        else reject(error);
      };
    }));
    this.closed = new Promise((resolve) => (this.markClosed = resolve));
    ws.on("message", (data: Buffer) => {
      this.queue = this.queue.then(() => this.handle(data.toString()));
    });
    ws.on("error", () => undefined); // a close follows
    ws.on("close", () => {
      this.queue = this.queue.then(() => this.finish());
    });
  }

  /** @internal */
  static async attach(dp: DataPlane, pid: number, refresh: () => Promise<void>,
    options: { signal?: AbortSignal | undefined; onStdout?: OutputCallback | undefined;
      onStderr?: OutputCallback | undefined }): Promise<Process> {
    for (let attempt = 1; ; attempt++) {
      const url = `${dp.url.replace(/^http/, "ws")}/commands/${pid}/ws`;
      try {
        const ws = await openSocket(url, dataHeaders(dp), options.signal, pid);
        return new Process(dp, ws, pid, options);
      } catch (error) {
        if (attempt === 1 && error instanceof SandboxError && error.code === "invalid_access_token") {
          await refresh(); // the box resumed since: its token rotated
          continue;
        }
        throw error;
      }
    }
  }

  get stdout(): string {
    return this.parts.stdout.join("");
  }

  get stderr(): string {
    return this.parts.stderr.join("");
  }

  private async handle(text: string): Promise<void> {
    let frame: Frame;
    try {
      frame = JSON.parse(text) as Frame;
    } catch {
      return;
    }
    const kind = frame.t;
    if (kind === "stdout" || kind === "stderr") {
      const data = String(frame.d ?? "");
      this.parts[kind].push(data);
      const callback = kind === "stdout" ? this.callbacks.onStdout : this.callbacks.onStderr;
      if (!callback) return;
      try {
        await callback(data);
      } catch (error) {
        // a callback threw: the attachment ends, wait() says why (the process runs on)
        this.failure = error instanceof SandboxError ? error
          : new ServerError(`an output callback threw: ${String(error)}`, { code: "callback_error", cause: error });
        this.ws.terminate();
      }
    } else if (kind === "dropped") {
      this.droppedChars = Number(frame.chars ?? 0);
    } else if (kind === "exit") {
      this.exitCode = Number(frame.exit_code);
      this.settle(null);
    } else if (kind === "ack") {
      this.take(frame.id)?.resolve(frame);
    } else if (kind === "error") {
      const err = errorFor(Number(frame.status ?? 500), String(frame.code ?? "error"), String(frame.message ?? ""));
      const waiter = frame.id === undefined || frame.id === null ? undefined : this.take(frame.id);
      if (waiter) waiter.reject(err);
      else this.failure = err; // the attachment ends (the sandbox was paused, say)
    }
  }

  private take(id: unknown): Waiter | undefined {
    if (typeof id !== "number") return undefined;
    const waiter = this.pending.get(id);
    if (waiter) {
      clearTimeout(waiter.timer);
      this.pending.delete(id);
    }
    return waiter;
  }

  private finish(): void {
    const exited = this.exitCode !== null;
    for (const id of [...this.pending.keys()]) {
      this.take(id)?.reject(exited
        ? new ConflictError(`process ${this.pid} has exited`, { statusCode: 409, code: "process_exited" })
        : this.failure);
    }
    this.settle(exited ? null : this.failure);
    this.markClosed();
  }

  /** Keep Node running until `promise` settles (the socket itself is unref'd). */
  private held<T>(promise: Promise<T>): Promise<T> {
    if (this.holds++ === 0) this.keepAlive = setInterval(() => undefined, 1 << 30);
    return promise.finally(() => {
      if (--this.holds === 0) clearInterval(this.keepAlive);
    });
  }

  /** @internal A control request; resolves with its ack. */
  _request(message: Record<string, unknown>): Promise<Frame> {
    if (this.settled || this.ws.readyState !== WebSocket.OPEN) {
      return Promise.reject(this.exitCode !== null
        ? new ConflictError(`process ${this.pid} has exited`, { statusCode: 409, code: "process_exited" })
        : this.failure);
    }
    const id = ++this.ids;
    return this.held(new Promise<Frame>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new SandboxTimeoutError("the sandbox did not answer in time", { code: "request_timeout" }));
      }, REQUEST_TIMEOUT_MS);
      this.pending.set(id, { resolve, reject, timer });
      this.ws.send(JSON.stringify({ ...message, id }), (error) => {
        if (error) this.take(id)?.reject(this.failure); // the close that follows says more
      });
    }));
  }

  /**
   * Resolves once the process exits, with its exit code (128 + N if signal N ended it) and all its
   * output. Rejects if the attachment ends first (ConflictError "sandbox_paused" when the box is
   * paused, ServerError "detached" after `close()`); the process then runs on.
   */
  async wait(options: WaitOptions = {}): Promise<CommandResult> {
    const { signal, timeoutMs } = options;
    const exitCode = await this.held(new Promise<number>((resolve, reject) => {
      if (signal?.aborted) return reject(new AbortError(signal.reason));
      const timer = timeoutMs === undefined ? undefined : setTimeout(() => reject(new SandboxTimeoutError(
        `process ${this.pid} is still running after ${timeoutMs} ms`, { code: "wait_timeout" })), timeoutMs);
      const onAbort = () => reject(new AbortError(signal?.reason));
      signal?.addEventListener("abort", onAbort, { once: true });
      this.done.then(resolve, reject).finally(() => {
        if (timer !== undefined) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      });
    }));
    return { exitCode, stdout: this.stdout, stderr: this.stderr };
  }

  /** Send `signal` (default SIGTERM) to the process' group; false if it had already exited.
   * Detached (after `close()` or a lost connection), the signal goes over HTTP instead. */
  async kill(signal: number | NodeJS.Signals = "SIGTERM", options: CallOptions = {}): Promise<boolean> {
    if (this.exitCode !== null) return false;
    const n = signalNumber(signal);
    if (this.settled || this.ws.readyState !== WebSocket.OPEN) {
      const dp = this.dp;
      const answer = await withToken(dp, options.signal, () => call("post",
        "/data/v1/sandboxes/{sandbox_id}/commands/{pid}/signal", {
          base: dp.url, params: { pid: this.pid }, headers: dataHeaders(dp), timeoutMs: dp.cfg.requestTimeoutMs,
          signal: options.signal, json: { signal: n },
        }));
      return answer.signalled;
    }
    try {
      return Boolean((await this._request({ t: "signal", signal: n })).signalled);
    } catch (error) {
      if (error instanceof ConflictError && error.code === "process_exited") return false;
      throw error;
    }
  }

  /** A terminal's new size; its foreground programs get SIGWINCH. */
  async resize(rows: number, cols: number): Promise<void> {
    await this._request({ t: "resize", rows, cols });
  }

  /** Detach: the process runs on in the box, its output kept for the next attach. */
  async close(): Promise<void> {
    if (!this.settled) {
      this.failure = new ServerError("detached from the process (close()); it runs on in the sandbox",
        { code: "detached" });
    }
    if (this.ws.readyState === WebSocket.CLOSED) return this.closed;
    this.ws.close(1000);
    const timer = setTimeout(() => this.ws.terminate(), 5_000);
    await this.closed;
    clearTimeout(timer);
  }

  /** `await using proc = await sandbox.commands.spawn(...)`: killed (SIGKILL) and detached at the block's end. */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      if (this.exitCode === null && !this.settled) await this.kill(9);
    } finally {
      await this.close();
    }
  }
}
