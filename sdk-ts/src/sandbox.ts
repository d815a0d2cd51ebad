/**
 * `Sandbox`: a long-lived, isolated Linux box. Its lifecycle (create, connect, list, pause,
 * resume, kill), its snapshots and forks, its settings, logs, bound secrets and preview ports are
 * control-plane calls; its `commands` and `files` go to its data plane with its access token.
 */

import {
  type CodeContext, type CreateCodeContextOptions, type Execution, type RunCodeOptions, createCodeContext,
  listCodeContexts, removeCodeContext, restartCodeContext, runCode,
} from "./code.js";
import { Commands } from "./commands.js";
import { DESKTOP_TEMPLATES, Desktop, startDesktop } from "./desktop.js";
import { type CallOptions, type ConnectionConfig, type ConnectionOptions, resolveConfig } from "./config.js";
import { NotFoundError, ValidationError } from "./errors.js";
import { Files } from "./files.js";
import { call } from "./http.js";
import { type DataPlane, connectAccess, controlHeaders, dataPlaneOf } from "./plane.js";
import {
  type BootOptions, type SnapshotOptions, type SnapshotRef, bootSnapshot, forkSandbox, snapshotRef, takeSnapshot,
} from "./snapshots.js";
import {
  type AuditPage, type NetworkConfig, type NetworkLogPage, type PreviewAccess, type PreviewPort, type PreviewToken,
  type MountedVolume, type SandboxInfo, type SandboxStatus, type Schemas, type SecretBinding, type SnapshotInfo,
  auditPage, networkBody, networkLogPage, previewPort, sandboxInfo, secretBinding,
} from "./types.js";
import { type VolumeMounts, mountsBody } from "./volumes.js";

export interface SandboxCreateOptions extends ConnectionOptions, CallOptions {
  /** Default "sandbox". */
  name?: string;
  /** A Template, or a template's name or id (default hutch/base): the box takes its shape, env,
   * workdir and user, and create waits for its readyCmd. */
  fromTemplate?: string | { name: string };
  /** Pause the box after this long active. */
  timeoutSeconds?: number;
  /** Delete the box once it has been paused this long (0: on pause). */
  autoDeleteSeconds?: number;
  metadata?: Record<string, string>;
  /** Set in every process of the box (not for credentials: use `secrets`). */
  envVars?: Record<string, string>;
  /** Egress rules (default: any public address over HTTP(S); never private, loopback or link-local). */
  network?: NetworkConfig;
  /** Env var -> secret name: the box sees a stand-in token, swapped for the real value only on
   * requests to the secret's hosts. */
  secrets?: Record<string, string>;
  /** What ports published later get by default ("public" unless set). */
  previewAccess?: PreviewAccess;
  /** A snapshot, its id or its name, to boot the box from instead of a template: its processes
   * continue from where they were saved, with the snapshot's files, template, shape and env
   * (`envVars` on top); its egress rules and secrets are the snapshot's box's unless given here,
   * with new stand-ins. Not with `fromTemplate`. */
  fromSnapshot?: SnapshotRef;
  /** Volumes to mount: a path in the box -> a `Volume`, a volume's id or name, or `{ volume,
   * readOnly }` (`{ "/mnt/data": vol, "/srv/cache": { volume: "cache", readOnly: true } }`). Many
   * boxes may mount one volume at once; a file one box has closed is whole for the next to open it. */
  volumes?: VolumeMounts;
  /** The screen's [width, height] (default [1024, 768]): from the `desktop` template (or with a
   * resolution), create resolves once the desktop runs (Xvfb and XFCE); see `sandbox.desktop`. */
  resolution?: readonly [number, number];
  /** The desktop's dots per inch (default 96). */
  dpi?: number;
}

export interface ListOptions extends ConnectionOptions, CallOptions {
  /** Every pair must match. */
  metadata?: Record<string, string>;
  status?: SandboxStatus;
}

export interface UpdateOptions extends CallOptions {
  /** Replaced, not merged. */
  metadata?: Record<string, string> | null;
  /** null clears it. */
  timeoutSeconds?: number | null;
  autoDeleteSeconds?: number | null;
  /** Replaced; null: back to the default. Applies to the box's next connection. */
  network?: NetworkConfig | null;
}

export interface PageOptions extends CallOptions {
  /** 1-1000, default 100. */
  limit?: number;
  /** An entry id: only older entries (a page's `nextBefore`). */
  before?: number;
}

export interface PauseOptions extends CallOptions {
  /** Accepted for the seed's `pause({ wait: true })`: hutch's pause always resolves once the
   * checkpoint is on disk. */
  wait?: boolean;
}

const PREVIEW_RELAY_PORT = 3128; // the box's egress relay: never published

function checkPort(port: number): number {
  if (!Number.isInteger(port) || port < 1024 || port > 65535 || port === PREVIEW_RELAY_PORT) {
    throw new ValidationError(`a preview port is an integer in 1024-65535 other than ${PREVIEW_RELAY_PORT}, not ${port}`,
      { code: "invalid_port" });
  }
  return port;
}

export class Sandbox {
  readonly commands: Commands;
  readonly files: Files;
  /** The screen and input of a box of the `desktop` template. */
  readonly desktop: Desktop;
  private info: SandboxInfo;

  /** @internal */
  constructor(access: Schemas["SandboxAccess"], private readonly cfg: ConnectionConfig,
    private readonly dp: DataPlane = dataPlaneOf(cfg, access)) {
    this.info = sandboxInfo(access);
    this.commands = new Commands(() => this.dp);
    this.files = new Files(() => this.dp);
    this.desktop = new Desktop(() => this.dp, this);
  }

  get id(): string {
    return this.info.id;
  }

  get name(): string {
    return this.info.name;
  }

  /** As of the last call that read it: `getInfo()` asks the server. */
  get status(): SandboxStatus {
    return this.info.status;
  }

  get metadata(): Record<string, string> {
    return { ...this.info.metadata };
  }

  /** The secrets bound to env vars, as of the last getInfo(), attach or detach. */
  get secrets(): SecretBinding[] {
    return [...this.info.secrets];
  }

  /** The volumes it mounts (path, volumeId, name, readOnly). */
  get volumes(): MountedVolume[] {
    return this.info.volumes.map((m) => ({ ...m }));
  }

  /** Create a sandbox; resolves once it is ready for commands. Never retried. */
  static async create(options: SandboxCreateOptions = {}): Promise<Sandbox> {
    const cfg = resolveConfig(options);
    const template = options.fromTemplate;
    const access = await call("post", "/v1/sandboxes", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
      json: {
        name: options.name ?? "sandbox",
        from_template: typeof template === "object" ? template.name : template,
        timeout_seconds: options.timeoutSeconds, auto_delete_seconds: options.autoDeleteSeconds,
        metadata: options.metadata, env_vars: options.envVars,
        network: options.network ? networkBody(options.network) : undefined,
        secrets: options.secrets, preview_access: options.previewAccess,
        from_snapshot: options.fromSnapshot === undefined ? undefined : snapshotRef(options.fromSnapshot),
        volumes: mountsBody(options.volumes),
      },
    });
    const sandbox = new Sandbox(access, cfg);
    const name = typeof template === "object" ? template.name : template;
    if (options.resolution !== undefined || (name !== undefined && DESKTOP_TEMPLATES.includes(name))) {
      try {
        await startDesktop(sandbox.dp, { resolution: options.resolution, dpi: options.dpi, signal: options.signal });
      } catch (error) {
        await sandbox.kill().catch(() => undefined); // a desktop box whose desktop cannot start is no use
        throw error;
      }
    }
    return sandbox;
  }

  /** `count` sandboxes (at most 20) booted at once from one snapshot, as `create({ fromSnapshot })`
   * makes one: all of them, or none and the error (`name` defaults to the snapshot's box's). Never retried. */
  static async fromSnapshot(snapshot: SnapshotRef, options: ConnectionOptions & BootOptions = {}): Promise<Sandbox[]> {
    const cfg = resolveConfig(options);
    return (await bootSnapshot(cfg, snapshot, options)).map((access) => new Sandbox(access, cfg));
  }

  /** A sandbox by id, with a fresh access token; a paused one is resumed first (one still pausing too). */
  static async connect(sandboxId: string, options: ConnectionOptions & CallOptions = {}): Promise<Sandbox> {
    const cfg = resolveConfig(options);
    return new Sandbox(await connectAccess(cfg, sandboxId, options.signal), cfg);
  }

  /** The team's sandboxes, filtered by status and by metadata (every pair must match). */
  static async list(options: ListOptions = {}): Promise<SandboxInfo[]> {
    const cfg = resolveConfig(options);
    const metadata = options.metadata && Object.keys(options.metadata).length
      ? new URLSearchParams(options.metadata).toString() : undefined;
    const answer = await call("get", "/v1/sandboxes", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
      query: { metadata, status: options.status },
    });
    return answer.map(sandboxInfo);
  }

  /** Delete a sandbox by id. Idempotent: one already gone is not an error. */
  static async killById(sandboxId: string, options: ConnectionOptions & CallOptions = {}): Promise<void> {
    await kill(resolveConfig(options), sandboxId, options.signal);
  }

  /** As `getNetworkLog`, without connecting (a paused box stays paused). */
  static async getNetworkLogById(sandboxId: string, options: ConnectionOptions & PageOptions = {}): Promise<NetworkLogPage> {
    return networkLog(resolveConfig(options), sandboxId, options);
  }

  /** As `getAuditLog`, without connecting (a paused box stays paused). */
  static async getAuditLogById(sandboxId: string, options: ConnectionOptions & PageOptions = {}): Promise<AuditPage> {
    return auditLog(resolveConfig(options), sandboxId, options);
  }

  /** The server's current view of the sandbox. */
  async getInfo(options: CallOptions = {}): Promise<SandboxInfo> {
    const answer = await call("get", "/v1/sandboxes/{sandbox_id}", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id }, headers: controlHeaders(this.cfg),
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    this.info = sandboxInfo(answer);
    return this.info;
  }

  /** Change what is given; null clears a lifetime or the network rules. Metadata and rules are
   * replaced, not merged. */
  async update(options: UpdateOptions): Promise<SandboxInfo> {
    const json: Schemas["UpdateSandbox"] = {};
    if (options.metadata !== undefined) json.metadata = options.metadata;
    if (options.timeoutSeconds !== undefined) json.timeout_seconds = options.timeoutSeconds;
    if (options.autoDeleteSeconds !== undefined) json.auto_delete_seconds = options.autoDeleteSeconds;
    if (options.network !== undefined) json.network = options.network === null ? null : networkBody(options.network);
    const answer = await call("patch", "/v1/sandboxes/{sandbox_id}", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id }, headers: controlHeaders(this.cfg), json,
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    this.info = sandboxInfo(answer);
    return this.info;
  }

  /** Checkpoint the whole box (memory, processes, files) to disk and free its memory; resolves
   * once it is paused. Any later command, file call or connect resumes it. Idempotent. */
  async pause(options: PauseOptions = {}): Promise<void> {
    await call("post", "/v1/sandboxes/{sandbox_id}/pause", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id }, headers: controlHeaders(this.cfg),
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    this.info = { ...this.info, status: "paused" };
  }

  /** Restore a paused box exactly where it was (a no-op if it is active); its access token
   * rotates, and this object takes the new one. */
  async resume(options: CallOptions = {}): Promise<void> {
    const access = await call("post", "/v1/sandboxes/{sandbox_id}/resume", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id }, headers: controlHeaders(this.cfg),
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    this.info = sandboxInfo(access);
    this.dp.url = access.data_plane_url;
    this.dp.token = access.access_token;
  }

  /** Save the box (memory, processes, files) as a snapshot that new boxes boot from, any number of
   * times. The box runs on: it is paused only while it is saved (its commands' and watches' streams
   * are cut then, as by a pause; its processes are not); a paused box stays paused. `memory: false`
   * saves the files it changed only, read while it runs (a paused one is resumed for it). */
  async snapshot(options: SnapshotOptions = {}): Promise<SnapshotInfo> {
    return takeSnapshot(this.cfg, this.id, options);
  }

  /** `count` new boxes (at most 20), each continuing from this box as it is now (a snapshot is
   * taken for them, and not kept); this box runs on. All of them, or none and the error. The forks
   * mount this box's volumes (the same live volumes: a write of one is every one's) unless
   * `volumes` puts another volume at each of those paths. */
  async fork(options: BootOptions = {}): Promise<Sandbox[]> {
    return (await forkSandbox(this.cfg, this.id, options)).map((access) => new Sandbox(access, this.cfg));
  }

  /** Delete the sandbox and everything in it. Idempotent. */
  async kill(options: CallOptions = {}): Promise<void> {
    await kill(this.cfg, this.id, options.signal);
  }

  /** The box's connection attempts, newest first; `page.nextBefore` asks for older ones. */
  async getNetworkLog(options: PageOptions = {}): Promise<NetworkLogPage> {
    return networkLog(this.cfg, this.id, options);
  }

  /** Every command and file operation on the box, newest first: who, when, what, exit code. */
  async getAuditLog(options: PageOptions = {}): Promise<AuditPage> {
    return auditLog(this.cfg, this.id, options);
  }

  /** Bind a secret to an env var (active or paused box); commands started afterwards see its
   * stand-in. Replaces a binding the variable had. */
  async attachSecret(env: string, secret: string, options: CallOptions = {}): Promise<SecretBinding[]> {
    const answer = await call("put", "/v1/sandboxes/{sandbox_id}/secrets/{env}", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id, env }, headers: controlHeaders(this.cfg),
      json: { secret }, timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    return this.bound(answer);
  }

  /** Commands started afterwards no longer get the variable. */
  async detachSecret(env: string, options: CallOptions = {}): Promise<SecretBinding[]> {
    const answer = await call("delete", "/v1/sandboxes/{sandbox_id}/secrets/{env}", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id, env }, headers: controlHeaders(this.cfg),
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    return this.bound(answer);
  }

  private bound(bindings: Schemas["SecretBinding"][]): SecretBinding[] {
    this.info = { ...this.info, secrets: bindings.map(secretBinding) };
    return this.secrets;
  }

  // --- preview ports ------------------------------------------------------------------------------

  /** The URL of a port at the preview proxy; no request is made (publish the port to make it answer). */
  getPreviewUrl(port: number): string {
    return this.info.previewUrlTemplate.replace("{port}", String(checkPort(port)));
  }

  /** Serve a port of the box at its preview URL. `access`: "public" (anyone with the URL) or
   * "private" (a signed link, its cookie, or the port's token); default: the sandbox's
   * `previewAccess`. Publishing again changes the access. */
  async publishPreviewPort(port: number, options: CallOptions & { access?: PreviewAccess } = {}): Promise<PreviewPort> {
    const answer = await call("post", "/v1/sandboxes/{sandbox_id}/preview-ports", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id }, headers: controlHeaders(this.cfg),
      json: { port: checkPort(port), access: options.access }, timeoutMs: this.cfg.requestTimeoutMs,
      signal: options.signal,
    });
    return previewPort(answer);
  }

  /** The proxy refuses the port again, and its open connections are cut. */
  async unpublishPreviewPort(port: number, options: CallOptions = {}): Promise<void> {
    await call("delete", "/v1/sandboxes/{sandbox_id}/preview-ports/{port}", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id, port: checkPort(port) }, headers: controlHeaders(this.cfg),
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
  }

  async listPreviewPorts(options: CallOptions = {}): Promise<PreviewPort[]> {
    const answer = await call("get", "/v1/sandboxes/{sandbox_id}/preview-ports", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id }, headers: controlHeaders(this.cfg),
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    return answer.map(previewPort);
  }

  /** A link to a private port: opened in a browser before it expires (default 60 s), it is
   * exchanged for a cookie for this port only. */
  async getSignedPreviewUrl(port: number, options: CallOptions & { expiresInSeconds?: number } = {}): Promise<string> {
    const answer = await call("post", "/v1/sandboxes/{sandbox_id}/preview-ports/{port}/signed-url", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id, port: checkPort(port) }, headers: controlHeaders(this.cfg),
      json: { expires_in_seconds: options.expiresInSeconds ?? 60 }, timeoutMs: this.cfg.requestTimeoutMs,
      signal: options.signal,
    });
    return answer.url;
  }

  /** A credential for machine clients: send `{ [credential.header]: credential.token }`. Valid until rotated. */
  async getPreviewToken(port: number, options: CallOptions = {}): Promise<PreviewToken> {
    const answer = await call("get", "/v1/sandboxes/{sandbox_id}/preview-ports/{port}/token", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id, port: checkPort(port) }, headers: controlHeaders(this.cfg),
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    return { token: answer.token, header: answer.header };
  }

  /** Void the port's links, cookies and token at once (and cut its open connections). */
  async rotatePreviewToken(port: number, options: CallOptions = {}): Promise<PreviewPort> {
    const answer = await call("post", "/v1/sandboxes/{sandbox_id}/preview-ports/{port}/rotate", {
      base: this.cfg.baseUrl, params: { sandbox_id: this.id, port: checkPort(port) }, headers: controlHeaders(this.cfg),
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    return previewPort(answer);
  }

  // --- the code interpreter (a box of hutch/code-interpreter) -----------------------------------

  /**
   * Run code in a kernel that keeps its state between calls: the default context of `language`
   * (Python), or `context`'s. Resolves with its results (the last expression's value is the main
   * one, `execution.text`), its stdout/stderr and the error it raised (null if none); output,
   * results and the error go to the callbacks as they come. `envs` hold for this run only. Past
   * `timeoutMs` the kernel is interrupted and the call throws SandboxTimeoutError
   * ("execution_timeout"); aborting the call interrupts it too. Needs a box of
   * hutch/code-interpreter (else ConflictError "interpreter_unavailable").
   */
  async runCode(code: string, options: RunCodeOptions = {}): Promise<Execution> {
    return runCode(this.dp, code, options);
  }

  /** A new context: its own kernel, so its own variables, started in `cwd` (default /home/user). */
  async createCodeContext(options: CreateCodeContextOptions = {}): Promise<CodeContext> {
    return createCodeContext(this.dp, options);
  }

  /** Every context in the box. */
  async listCodeContexts(options: CallOptions = {}): Promise<CodeContext[]> {
    return listCodeContexts(this.dp, options);
  }

  /** A fresh kernel for the context: its variables go (a running cell is interrupted first). */
  async restartCodeContext(context: CodeContext | string, options: CallOptions = {}): Promise<void> {
    return restartCodeContext(this.dp, context, options);
  }

  /** Stop the context's kernel. */
  async removeCodeContext(context: CodeContext | string, options: CallOptions = {}): Promise<void> {
    return removeCodeContext(this.dp, context, options);
  }

  toJSON(): { id: string; name: string; status: SandboxStatus } {
    return { id: this.id, name: this.name, status: this.status }; // never the token
  }
}

async function kill(cfg: ConnectionConfig, sandboxId: string, signal: AbortSignal | undefined): Promise<void> {
  try {
    await call("delete", "/v1/sandboxes/{sandbox_id}", {
      base: cfg.baseUrl, params: { sandbox_id: sandboxId }, headers: controlHeaders(cfg),
      timeoutMs: cfg.requestTimeoutMs, signal,
    });
  } catch (error) {
    if (!(error instanceof NotFoundError)) throw error;
  }
}

async function networkLog(cfg: ConnectionConfig, sandboxId: string, options: PageOptions): Promise<NetworkLogPage> {
  const answer = await call("get", "/v1/sandboxes/{sandbox_id}/network-log", {
    base: cfg.baseUrl, params: { sandbox_id: sandboxId }, headers: controlHeaders(cfg),
    query: { limit: options.limit ?? 100, before: options.before }, timeoutMs: cfg.requestTimeoutMs,
    signal: options.signal,
  });
  return networkLogPage(answer);
}

async function auditLog(cfg: ConnectionConfig, sandboxId: string, options: PageOptions): Promise<AuditPage> {
  const answer = await call("get", "/v1/sandboxes/{sandbox_id}/audit", {
    base: cfg.baseUrl, params: { sandbox_id: sandboxId }, headers: controlHeaders(cfg),
    query: { limit: options.limit ?? 100, before: options.before }, timeoutMs: cfg.requestTimeoutMs,
    signal: options.signal,
  });
  return auditPage(answer);
}
