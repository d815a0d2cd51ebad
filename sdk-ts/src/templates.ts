/**
 * `Template`: an image built once from a base and steps, that sandboxes boot from.
 *
 *     const template = await Template.create({ name: "py-env", steps: [{ run: "pip install numpy" }] })
 *     await template.waitUntilReady({ onLog: (line) => console.log(line.text) })   // BuildError if it fails
 *     await Sandbox.create({ name: "run-1", fromTemplate: template })
 *
 * Creating (or rebuilding) only queues a build; its log is an NDJSON stream that a reconnect
 * resumes after the last line seen.
 */

import { type CallOptions, type ConnectionConfig, type ConnectionOptions, resolveConfig } from "./config.js";
import { BuildError, NotFoundError, SandboxTimeoutError, ServerError, ValidationError, errorFor } from "./errors.js";
import { RETRIES, backoff, call, lines, open, sleep } from "./http.js";
import { controlHeaders } from "./plane.js";
import {
  type BuildErrorInfo, type BuildInfo, type BuildLogLine, type Schemas, type Step, type TemplateInfo, buildErrorInfo,
  buildInfo, templateInfo,
} from "./types.js";

export const BASE_TEMPLATE = "hutch/base";
/** The server may send nothing while a step is silent: a minute of it only means "ask again". */
const BUILD_LOG_IDLE_MS = 60_000;

export interface TemplateCreateOptions extends ConnectionOptions, CallOptions {
  name: string;
  /** "hutch/base" (default), another template (object, name or id), "docker://ref" (if the server
   * pulls from registries), or an image in a directory the server reads them from
   * ("oci-archive:/path.tar", "docker-archive:/path.tar", "oci:/layout[:tag]"). */
  from?: string | { name: string };
  /** Run in order; env, workdir and user also become its boxes' defaults. */
  steps?: Step[];
  /** Started in every box booted from it. */
  startCmd?: string;
  /** Polled until it exits 0 before a box is handed out (up to readyTimeoutSeconds). */
  readyCmd?: string;
  readyTimeoutSeconds?: number;
  /** Its boxes' shape: vcpu 1-4, memoryMib 256-4096, diskMib 1024-8192. */
  vcpu?: number;
  memoryMib?: number;
  diskMib?: number;
}

export interface WaitUntilReadyOptions extends CallOptions {
  /** Give up after this long (SandboxTimeoutError "wait_timeout"); the build goes on. */
  timeoutMs?: number;
  /** Each line of the build's log, as it comes (awaited if it returns a promise). */
  onLog?: (line: BuildLogLine) => unknown;
}

export interface BuildLogOptions extends CallOptions {
  /** Default: the latest build this object has seen. */
  buildId?: string;
  /** Go on until the build ends (default); without, stop at what was logged so far. */
  follow?: boolean;
}

const RANGES: [keyof TemplateCreateOptions, number, number][] = [
  ["readyTimeoutSeconds", 1, 3600], ["vcpu", 1, 4], ["memoryMib", 256, 4096], ["diskMib", 1024, 8192],
];

function stepOk(step: unknown): boolean {
  if (typeof step !== "object" || step === null) return false;
  const keys = Object.keys(step);
  if (keys.length !== 1) return false;
  const s = step as Record<string, unknown>;
  const v = s[keys[0]!] as Record<string, unknown> | string;
  switch (keys[0]) {
    case "run":
    case "workdir":
      return typeof v === "string" && v.length > 0;
    case "env":
      return typeof v === "object" && v !== null && typeof v.key === "string" && typeof v.value === "string";
    case "user":
      return typeof v === "object" && v !== null && typeof v.name === "string";
    case "copy":  // files uploaded for the build (E2B's Template.copy), by their hash
      return typeof v === "object" && v !== null && typeof v.files === "string" && typeof v.src === "string"
        && typeof v.dest === "string";
    default:
      return false;
  }
}

/** The create request, checked for what is plain before any request: types and ranges. */
function createBody(options: TemplateCreateOptions): Schemas["CreateTemplate"] {
  if (typeof options.name !== "string" || !options.name) {
    throw new ValidationError("name is a non-empty string", { code: "invalid_spec" });
  }
  for (const [key, min, max] of RANGES) {
    const value = options[key];
    if (value !== undefined && (!Number.isInteger(value) || (value as number) < min || (value as number) > max)) {
      throw new ValidationError(`${key} is an integer in ${min}..${max}, not ${String(value)}`, { code: "invalid_spec" });
    }
  }
  const steps = options.steps;
  if (steps !== undefined && (!Array.isArray(steps) || !steps.every(stepOk))) {
    throw new ValidationError("steps is a list of objects of exactly one of run, env {key, value}, workdir, "
      + "user {name, sudo?}, copy {files, src, dest, user?, mode?}", { code: "invalid_spec" });
  }
  const from = typeof options.from === "object" ? options.from.name : options.from;
  return {
    name: options.name, from: from ?? BASE_TEMPLATE, steps, start_cmd: options.startCmd, ready_cmd: options.readyCmd,
    ready_timeout_seconds: options.readyTimeoutSeconds, vcpu: options.vcpu, memory_mib: options.memoryMib,
    disk_mib: options.diskMib,
  };
}

interface LogLine {
  done?: boolean;
  status?: Schemas["BuildStatus"];
  error?: Schemas["BuildErrorInfo"] | null;
  seq: number;
  time: string;
  step?: number | null;
  stream: BuildLogLine["stream"];
  text: string;
}

export class Template {
  private info: TemplateInfo;

  /** @internal */
  constructor(info: Schemas["TemplateInfo"] | TemplateInfo, private readonly cfg: ConnectionConfig) {
    this.info = "created_at" in info ? templateInfo(info) : info;
  }

  get id(): string {
    return this.info.id;
  }

  get name(): string {
    return this.info.name;
  }

  /** building, ready or failed: "ready" once any build succeeded (a rebuild keeps it so). */
  get status(): TemplateInfo["status"] {
    return this.info.status;
  }

  /** The template as last read (`refresh()`, `waitUntilReady()` and `rebuild()` read it again). */
  get details(): TemplateInfo {
    return this.info;
  }

  get latestBuild(): BuildInfo | null {
    return this.info.latestBuild;
  }

  /** Queue the build of a new template and resolve at once; `waitUntilReady()` waits for it. Never retried. */
  static async create(options: TemplateCreateOptions): Promise<Template> {
    const json = createBody(options);
    const cfg = resolveConfig(options);
    const answer = await call("post", "/v1/templates", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), json, timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
    });
    return new Template(answer, cfg);
  }

  /** A template by name or id ("hutch/base" too). */
  static async get(nameOrId: string, options: ConnectionOptions & CallOptions = {}): Promise<Template> {
    const cfg = resolveConfig(options);
    return new Template(await getTemplate(cfg, nameOrId, options.signal), cfg);
  }

  /** The team's templates and the system ones (hutch/base). */
  static async list(options: ConnectionOptions & CallOptions = {}): Promise<Template[]> {
    const cfg = resolveConfig(options);
    return (await listTemplates(cfg, options.signal)).map((info) => new Template(info, cfg));
  }

  /** Cancels its running build. A template that boxes (active or paused) or other builds use is a
   * ConflictError (template_in_use). */
  static async deleteByName(nameOrId: string, options: ConnectionOptions & CallOptions = {}): Promise<void> {
    const cfg = resolveConfig(options);
    const ref = nameOrId.includes("/") ? (await getTemplate(cfg, nameOrId, options.signal)).id : nameOrId;
    await call("delete", "/v1/templates/{ref}", {
      base: cfg.baseUrl, params: { ref }, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs,
      signal: options.signal,
    });
  }

  async refresh(options: CallOptions = {}): Promise<TemplateInfo> {
    this.info = templateInfo(await getTemplate(this.cfg, this.id, options.signal));
    return this.info;
  }

  async delete(options: CallOptions = {}): Promise<void> {
    await Template.deleteByName(this.id, { apiKey: this.cfg.apiKey, baseUrl: this.cfg.baseUrl, ...options });
  }

  /** Queue a new build of the same spec (`noCache`: run every step again); resolves at once. A
   * ready template stays usable, with its last good image, until the new build succeeds. */
  async rebuild(options: CallOptions & { noCache?: boolean } = {}): Promise<BuildInfo> {
    const answer = await call("post", "/v1/templates/{ref}/builds", {
      base: this.cfg.baseUrl, params: { ref: this.id }, headers: controlHeaders(this.cfg),
      json: options.noCache ? { no_cache: true } : {}, timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    const build = buildInfo(answer);
    this.info = { ...this.info, latestBuild: build, status: this.info.status === "ready" ? "ready" : "building" };
    return build;
  }

  /** Newest first. */
  async listBuilds(options: CallOptions = {}): Promise<BuildInfo[]> {
    const answer = await call("get", "/v1/templates/{ref}/builds", {
      base: this.cfg.baseUrl, params: { ref: this.id }, headers: controlHeaders(this.cfg),
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    return answer.map(buildInfo);
  }

  async getBuild(buildId: string, options: CallOptions = {}): Promise<BuildInfo> {
    return this.took(await getBuild(this.cfg, this.id, buildId, options.signal));
  }

  /** Stop a build (default: the latest); one that had ended is a ConflictError (build_finished). */
  async cancelBuild(buildId?: string, options: CallOptions = {}): Promise<BuildInfo> {
    const answer = await call("post", "/v1/templates/{ref}/builds/{build_id}/cancel", {
      base: this.cfg.baseUrl, params: { ref: this.id, build_id: this.buildId(buildId) },
      headers: controlHeaders(this.cfg), timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    return this.took(buildInfo(answer));
  }

  /** A build's log lines (default: the latest build's), from the first. */
  async *streamBuildLogs(options: BuildLogOptions = {}): AsyncGenerator<BuildLogLine, void, undefined> {
    const build = this.buildId(options.buildId);
    const logs = buildLogs(this.cfg, this.id, build, options.follow ?? true, undefined, options.signal);
    for (;;) {
      const next = await logs.next();
      if (next.done) return;
      yield next.value;
    }
  }

  /**
   * Resolves once the latest build ends well, passing its log lines to `onLog` as they come.
   * Throws BuildError if it failed or was cancelled, SandboxTimeoutError (wait_timeout) past
   * `timeoutMs` (the build goes on). Refreshes `status` and `latestBuild`.
   */
  async waitUntilReady(options: WaitUntilReadyOptions = {}): Promise<void> {
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
    let buildId = this.info.latestBuild?.id;
    if (buildId === undefined) {
      this.info = templateInfo(await getTemplate(this.cfg, this.id, options.signal));
      buildId = this.info.latestBuild?.id;
      if (buildId === undefined) return; // a system template: built by the server itself
    }
    const logs = buildLogs(this.cfg, this.id, buildId, true, deadline, options.signal);
    let end: { status: Schemas["BuildStatus"]; error: BuildErrorInfo | null } | undefined;
    for (;;) {
      const next = await logs.next();
      if (next.done) {
        end = next.value ?? undefined;
        break;
      }
      await options.onLog?.(next.value);
    }
    const build = await getBuild(this.cfg, this.id, buildId, options.signal);
    if (!["ready", "failed", "cancelled"].includes(build.status) && end !== undefined) {
      build.status = end.status; // the stream's last word came before the build's record
      build.error = end.error;
    }
    this.info = templateInfo(await getTemplate(this.cfg, this.id, options.signal));
    if (build.status === "ready") return;
    const error = build.error ?? {
      code: build.status === "cancelled" ? "cancelled" : "build_failed", message: `the build ended ${build.status}`,
      step: null, exitCode: null,
    };
    throw new BuildError(error.message, {
      code: error.code, buildId: build.id, templateId: build.templateId, step: error.step, exitCode: error.exitCode,
    });
  }

  private buildId(buildId: string | undefined): string {
    if (buildId !== undefined) return buildId;
    const latest = this.info.latestBuild;
    if (latest === null) throw new NotFoundError(`template ${this.name} has no build`, { code: "build_not_found" });
    return latest.id;
  }

  private took(build: BuildInfo): BuildInfo {
    if (this.info.latestBuild?.id === build.id) this.info = { ...this.info, latestBuild: build };
    return build;
  }
}

async function listTemplates(cfg: ConnectionConfig, signal: AbortSignal | undefined): Promise<Schemas["TemplateInfo"][]> {
  return call("get", "/v1/templates", {
    base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal,
  });
}

/** A name holding "/" (a system template's, "hutch/base") is looked up in the list: a path segment
 * cannot carry a slash through every router, escaped or not. */
async function getTemplate(cfg: ConnectionConfig, nameOrId: string,
  signal: AbortSignal | undefined): Promise<Schemas["TemplateInfo"]> {
  if (nameOrId.includes("/")) {
    const found = (await listTemplates(cfg, signal)).find((t) => t.name === nameOrId || t.id === nameOrId);
    if (!found) throw errorFor(404, "template_not_found", `template ${nameOrId} does not exist`);
    return found;
  }
  return call("get", "/v1/templates/{ref}", {
    base: cfg.baseUrl, params: { ref: nameOrId }, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal,
  });
}

async function getBuild(cfg: ConnectionConfig, ref: string, buildId: string,
  signal: AbortSignal | undefined): Promise<BuildInfo> {
  return buildInfo(await call("get", "/v1/templates/{ref}/builds/{build_id}", {
    base: cfg.baseUrl, params: { ref, build_id: buildId }, headers: controlHeaders(cfg),
    timeoutMs: cfg.requestTimeoutMs, signal,
  }));
}

/**
 * Each line of a build's log; returns how the build ended (undefined: it had not, and `follow` is
 * off). A stream that breaks, or is silent for a minute, is asked for again after the last line
 * seen, so no line comes twice; past `deadline` a SandboxTimeoutError (wait_timeout).
 */
async function* buildLogs(cfg: ConnectionConfig, ref: string, buildId: string, follow: boolean,
  deadline: number | undefined, signal: AbortSignal | undefined,
): AsyncGenerator<BuildLogLine, { status: Schemas["BuildStatus"]; error: BuildErrorInfo | null } | undefined> {
  let after = 0;
  let failures = 0;
  const checkDeadline = () => {
    if (deadline !== undefined && Date.now() >= deadline) {
      throw new SandboxTimeoutError("the build did not end in time (it goes on: wait again, or cancel it)",
        { code: "wait_timeout" });
    }
  };
  for (;;) {
    const idle = deadline === undefined ? BUILD_LOG_IDLE_MS
      : Math.max(100, Math.min(BUILD_LOG_IDLE_MS, deadline - Date.now()));
    const opened = await open("get", "/v1/templates/{ref}/builds/{build_id}/logs", {
      base: cfg.baseUrl, params: { ref, build_id: buildId }, headers: controlHeaders(cfg),
      query: { follow, after: after || undefined }, timeoutMs: cfg.requestTimeoutMs, signal,
    });
    let seen = false;
    let broken = false;
    let silent = false;
    try {
      for await (const text of lines(opened, idle)) {
        if (!text.trim()) continue; // a keep-alive, if the server sends them
        let d: LogLine;
        try {
          d = JSON.parse(text) as LogLine;
        } catch {
          broken = true; // the tail of a line cut short by a broken connection
          break;
        }
        if (d.done) return { status: d.status ?? "failed", error: buildErrorInfo(d.error) };
        if (d.seq <= after) continue;
        after = d.seq;
        seen = true;
        yield { seq: d.seq, time: new Date(d.time), step: d.step ?? null, stream: d.stream, text: d.text };
      }
    } catch (error) {
      if (error instanceof SandboxTimeoutError && error.code === "stream_timeout") silent = true;
      else if (error instanceof ServerError && error.code === "stream_ended") broken = true;
      else throw error;
    }
    if (!(follow || broken || silent)) return undefined; // the whole log so far, and the build goes on
    checkDeadline();
    if (silent) continue; // the server answered, the build is quiet: ask again at once
    failures = seen ? 0 : failures + 1;
    if (failures > RETRIES) {
      throw new ServerError("the build's log stream kept ending before the build did", { code: "stream_ended" });
    }
    await sleep(backoff(failures || 1), signal);
  }
}
