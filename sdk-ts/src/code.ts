/**
 * A sandbox's code interpreter (a box of hutch/code-interpreter): run code in a context's kernel,
 * its output, results and error streamed as NDJSON lines, and the contexts themselves (as the
 * Python SDK's `run_code` and `*_code_context`, hutch/sdk/ops/code.py).
 *
 * The stream's lines are the interpreter's (`stdout`, `stderr`, `result`, `error`,
 * `number_of_executions`, `keepalive`, `end_of_execution`), and hutch's own last one when the run
 * did not end by itself (`hutch_timeout`, `hutch_error`); see hutch/server/routes/code.py. They are
 * not in the OpenAPI document (an NDJSON answer), so they are typed here.
 */

import type { CallOptions } from "./config.js";
import { ConflictError, SandboxTimeoutError, ServerError, ValidationError } from "./errors.js";
import { call, lines, open } from "./http.js";
import { type DataPlane, dataHeaders, withToken } from "./plane.js";
import type { Schemas } from "./types.js";

/** The interpreter sends a keep-alive while a cell runs: a minute of silence means a dead stream. */
const CODE_IDLE_MS = 60_000;

/** A context: its own kernel (its own variables), started in `cwd`. */
export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
}

function codeContext(d: Schemas["CodeContext"]): CodeContext {
  return { id: d.id, language: d.language, cwd: d.cwd };
}

/** Each format a result may come in, in E2B's order (png, jpeg and pdf base64). */
export const RESULT_FORMATS = ["text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript",
  "data", "chart"] as const;
type Format = (typeof RESULT_FORMATS)[number];

/**
 * One output of a cell, in each format the kernel gave it (E2B's shape): `isMainResult` marks the
 * cell's value (its last expression), as opposed to a display (a chart, say). Formats with no name
 * of their own are in `extra`, by MIME type.
 */
export class Result {
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  png?: string;
  jpeg?: string;
  pdf?: string;
  latex?: string;
  json?: Record<string, unknown>;
  javascript?: string;
  data?: Record<string, unknown>;
  chart?: Record<string, unknown>;
  isMainResult = false;
  extra?: Record<string, unknown>;

  /** @internal */
  constructor(line: Record<string, unknown>) {
    const self = this as Record<Format, unknown>;
    for (const name of RESULT_FORMATS) if (line[name] !== undefined && line[name] !== null) self[name] = line[name];
    this.isMainResult = Boolean(line.is_main_result);
    const extra = line.extra as Record<string, unknown> | null | undefined;
    if (extra && Object.keys(extra).length) this.extra = extra;
  }

  /** The formats this result has, in E2B's order, then the extra MIME types. */
  formats(): string[] {
    const self = this as Record<Format, unknown>;
    return [...RESULT_FORMATS.filter((name) => self[name]), ...Object.keys(this.extra ?? {})];
  }

  toString(): string {
    return this.text ?? "";
  }
}

/** What the code printed, message by message, as it came. */
export interface Logs {
  stdout: string[];
  stderr: string[];
}

/** An exception the code raised: its class name, its message and the kernel's traceback. */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

/** What a `runCode` did: its results, its output, the error it raised (null if none) and the
 * kernel's execution count. */
export class Execution {
  results: Result[] = [];
  logs: Logs = { stdout: [], stderr: [] };
  error: ExecutionError | null = null;
  executionCount: number | null = null;

  /** The text of the cell's value (its main result), if it had one. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }

  toJSON(): { results: Result[]; logs: Logs; error: ExecutionError | null; executionCount: number | null } {
    return { results: this.results, logs: this.logs, error: this.error, executionCount: this.executionCount };
  }
}

export interface RunCodeOptions extends CallOptions {
  /** The default context of this language ("python", the default; "bash"; "javascript" or "js" and
   * "typescript" or "ts", Deno's; "r"); not with `context`. */
  language?: string;
  /** A context (or its id) from `createCodeContext`: its kernel, its variables. */
  context?: CodeContext | string;
  /** For this run only. */
  envs?: Record<string, string>;
  /** Past this the kernel is interrupted (its state stays) and the call throws SandboxTimeoutError
   * (code "execution_timeout"). None: it runs as long as it takes. */
  timeoutMs?: number;
  /** Output, results and the error as they come (each awaited if it returns a promise). */
  onStdout?: (text: string) => unknown;
  onStderr?: (text: string) => unknown;
  onResult?: (result: Result) => unknown;
  onError?: (error: ExecutionError) => unknown;
}

export interface CreateCodeContextOptions extends CallOptions {
  /** Where its kernel starts (default /home/user). */
  cwd?: string;
  /** Default "python". */
  language?: string;
}

function contextId(context: CodeContext | string): string {
  return typeof context === "string" ? context : context.id;
}

/** Run code to its end, passing output, results and the error to the callbacks as they come. */
export async function runCode(dp: DataPlane, code: string, options: RunCodeOptions): Promise<Execution> {
  const { signal } = options;
  if (options.language !== undefined && options.context !== undefined) {
    throw new ValidationError("give a context or a language, not both (a context has its language)",
      { code: "invalid_argument" });
  }
  if (options.timeoutMs !== undefined && !(options.timeoutMs > 0)) {
    throw new ValidationError(`timeoutMs is a positive number, not ${options.timeoutMs}`, { code: "invalid_argument" });
  }
  const opened = await withToken(dp, signal, () => open("post", "/data/v1/sandboxes/{sandbox_id}/code/execute", {
    base: dp.url, headers: { ...dataHeaders(dp), Accept: "application/x-ndjson" }, timeoutMs: CODE_IDLE_MS, signal,
    json: {
      code, language: options.language, env: options.envs,
      context_id: options.context === undefined ? undefined : contextId(options.context),
      timeout_seconds: options.timeoutMs === undefined ? undefined : options.timeoutMs / 1000,
    },
  }));
  const execution = new Execution();
  try {
    for await (const line of lines(opened, CODE_IDLE_MS)) {
      if (!line.trim()) continue;
      let item: Record<string, unknown>;
      try {
        item = JSON.parse(line) as Record<string, unknown>;
      } catch {
        throw new ServerError("the code's stream sent a line that is not JSON", { code: "stream_ended" });
      }
      if (await take(item, execution, options)) return execution;
    }
  } catch (error) {
    if (error instanceof SandboxTimeoutError && error.code === "stream_timeout") {
      throw new SandboxTimeoutError("the code's stream went silent; the code may still be running in the sandbox",
        { code: "stream_timeout", cause: error });
    }
    throw error;
  }
  throw new ServerError("the code's stream ended before it finished", { code: "stream_ended" });
}

/** Take one line into the execution; true at its end. */
async function take(item: Record<string, unknown>, execution: Execution, options: RunCodeOptions): Promise<boolean> {
  const kind = item.type;
  if (kind === "stdout" || kind === "stderr") {
    const text = String(item.text ?? "");
    execution.logs[kind].push(text);
    const callback = kind === "stdout" ? options.onStdout : options.onStderr;
    if (callback) await callback(text);
  } else if (kind === "result") {
    const result = new Result(item);
    execution.results.push(result);
    if (options.onResult) await options.onResult(result);
  } else if (kind === "error") {
    execution.error = { name: String(item.name ?? ""), value: String(item.value ?? ""),
      traceback: String(item.traceback ?? "") };
    if (options.onError) await options.onError(execution.error);
  } else if (kind === "number_of_executions") {
    execution.executionCount = typeof item.execution_count === "number" ? item.execution_count : null;
  } else if (kind === "end_of_execution") {
    return true;
  } else if (kind === "hutch_timeout") {
    throw new SandboxTimeoutError(String(item.message ?? "the code ran out of time"), { code: "execution_timeout" });
  } else if (kind === "hutch_error") {
    const code = typeof item.code === "string" ? item.code : "error";
    const message = String(item.message ?? "the code's stream broke off");
    throw code === "sandbox_failed" ? new ConflictError(message, { code }) : new ServerError(message, { code });
  }
  return false; // a keep-alive, and what a newer server may add
}

/** A new context: its own kernel, so its own variables. */
export async function createCodeContext(dp: DataPlane, options: CreateCodeContextOptions): Promise<CodeContext> {
  const answer = await withToken(dp, options.signal, () => call("post", "/data/v1/sandboxes/{sandbox_id}/code/contexts", {
    base: dp.url, headers: dataHeaders(dp), json: { cwd: options.cwd, language: options.language },
    timeoutMs: CODE_IDLE_MS, signal: options.signal, // a kernel starts first
  }));
  return codeContext(answer);
}

export async function listCodeContexts(dp: DataPlane, options: CallOptions): Promise<CodeContext[]> {
  const answer = await withToken(dp, options.signal, () => call("get", "/data/v1/sandboxes/{sandbox_id}/code/contexts", {
    base: dp.url, headers: dataHeaders(dp), timeoutMs: dp.cfg.requestTimeoutMs, signal: options.signal,
  }));
  return answer.map(codeContext);
}

export async function restartCodeContext(dp: DataPlane, context: CodeContext | string,
  options: CallOptions): Promise<void> {
  await withToken(dp, options.signal, () => call("post",
    "/data/v1/sandboxes/{sandbox_id}/code/contexts/{context_id}/restart", {
      base: dp.url, params: { context_id: contextId(context) }, headers: dataHeaders(dp),
      timeoutMs: CODE_IDLE_MS, signal: options.signal, // a kernel starts
    }));
}

export async function removeCodeContext(dp: DataPlane, context: CodeContext | string,
  options: CallOptions): Promise<void> {
  await withToken(dp, options.signal, () => call("delete",
    "/data/v1/sandboxes/{sandbox_id}/code/contexts/{context_id}", {
      base: dp.url, params: { context_id: contextId(context) }, headers: dataHeaders(dp),
      timeoutMs: dp.cfg.requestTimeoutMs, signal: options.signal,
    }));
}
