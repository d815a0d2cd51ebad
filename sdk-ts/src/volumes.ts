/**
 * `Volume`: a team's named storage that outlives boxes, which many boxes mount at once.
 *
 *     const vol = await Volume.create("repo", { sizeMib: 2048 })
 *     await vol.files.write("/README", "hello")                    // no box needed
 *     const box = await Sandbox.create({
 *       volumes: { "/mnt/repo": vol, "/srv/cache": { volume: "cache", readOnly: true } },
 *     })
 *     await (await Volume.get("repo")).delete()   // ConflictError "volume_in_use" while a box mounts it
 *
 * A volume's files calls are a sandbox's (`Files`), sent to the volume's own address with the API
 * key, as the Python SDK's (hutch/sdk/volumes.py, hutch/sdk/ops/volumes.py).
 */

import { type CallOptions, type ConnectionConfig, type ConnectionOptions, resolveConfig } from "./config.js";
import { ValidationError } from "./errors.js";
import { type FileContent, type FileOptions, Files } from "./files.js";
import { type Body, type Method, type Path, type Reply, call } from "./http.js";
import { controlHeaders, volumePlane } from "./plane.js";
import { type EntryInfo, type Schemas, type VolumeInfo, volumeInfo } from "./types.js";

/** A volume, or its id or name. */
export type VolumeRef = string | VolumeInfo | Volume;

/** A volume mounted read-only, or read-write as a bare volume is. */
export interface VolumeMount {
  volume: VolumeRef;
  readOnly?: boolean;
}

/** What `volumes` on a create, a boot from a snapshot or a fork takes: a path in the box (absolute)
 * -> a volume (`Volume`, `VolumeInfo`, id or name), or `{ volume, readOnly }`. At most 16. */
export type VolumeMounts = Record<string, VolumeRef | VolumeMount>;

/** What a call sends for a volume given as an object: its id (a string as it is). */
export function volumeRef(ref: VolumeRef): string {
  if (typeof ref === "string") return ref;
  if (typeof ref === "object" && ref !== null && typeof ref.id === "string") return ref.id; // a Volume or VolumeInfo
  throw new ValidationError("a volume is a Volume, a VolumeInfo, or a volume's id or name", { code: "invalid_argument" });
}

function isMount(value: object): value is VolumeMount {
  return !(value instanceof Volume) && "volume" in value;
}

/** A create's `volumes` as the server takes them: path -> id (or name), or { volume, read_only }. */
export function mountsBody(mounts: VolumeMounts | undefined): Schemas["CreateSandbox"]["volumes"] {
  if (mounts === undefined) return undefined;
  if (typeof mounts !== "object" || mounts === null || Array.isArray(mounts)) {
    throw new ValidationError("volumes maps a path in the box to a volume", { code: "invalid_argument" });
  }
  const body: NonNullable<Schemas["CreateSandbox"]["volumes"]> = {};
  for (const [path, value] of Object.entries(mounts)) {
    if (typeof value === "object" && value !== null && isMount(value)) {
      const unknown = Object.keys(value).filter((k) => k !== "volume" && k !== "readOnly");
      if (unknown.length || (value.readOnly !== undefined && typeof value.readOnly !== "boolean")) {
        throw new ValidationError(`volumes[${JSON.stringify(path)}] is a volume or { volume, readOnly: boolean }`,
          { code: "invalid_argument" });
      }
      body[path] = { volume: volumeRef(value.volume), read_only: value.readOnly ?? false };
    } else {
      body[path] = volumeRef(value);
    }
  }
  return body;
}

export interface VolumeCreateOptions extends ConnectionOptions, CallOptions {
  /** What its files may take, in MiB (16 to 1 048 576; default 1024): a write past it fails with
   * ENOSPC in a box, ServerError "insufficient_storage" through `files`. */
  sizeMib?: number;
  metadata?: Record<string, string>;
}

export interface VolumeListOptions extends ConnectionOptions, CallOptions {
  /** Every pair must match. */
  metadata?: Record<string, string>;
}

export interface VolumeFileListOptions extends FileOptions {
  /** How many levels down (1-16, default 1). */
  depth?: number;
}

// `volume.files` sends `Files`' calls (typed by the sandbox's data-plane paths) to the volume's
// /v1/volumes/{ref}/files...: this compiles only while the server's two sets of routes take and
// answer the same shapes.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Mirrors<V extends Path, S extends Path, M extends Method> =
  Same<Body<V, M>, Body<S, M>> & Same<Reply<V, M>, Reply<S, M>>;
true satisfies Mirrors<"/v1/volumes/{ref}/files", "/data/v1/sandboxes/{sandbox_id}/files", "put">
  & Mirrors<"/v1/volumes/{ref}/files", "/data/v1/sandboxes/{sandbox_id}/files", "get">
  & Mirrors<"/v1/volumes/{ref}/files", "/data/v1/sandboxes/{sandbox_id}/files", "delete">
  & Mirrors<"/v1/volumes/{ref}/files/stat", "/data/v1/sandboxes/{sandbox_id}/files/stat", "get">
  & Mirrors<"/v1/volumes/{ref}/files/list", "/data/v1/sandboxes/{sandbox_id}/files/list", "get">
  & Mirrors<"/v1/volumes/{ref}/files/mkdir", "/data/v1/sandboxes/{sandbox_id}/files/mkdir", "post">
  & Mirrors<"/v1/volumes/{ref}/files/move", "/data/v1/sandboxes/{sandbox_id}/files/move", "post">;

/** Only what a volume's files call takes (no `user`: what is written belongs to the box user). */
function only(options: FileOptions): FileOptions {
  return { signal: options.signal, timeoutMs: options.timeoutMs };
}

/**
 * `volume.files`: a sandbox's files calls, on the volume, with no box. Paths are absolute, from
 * the volume's root; what is written belongs to the box user; links in the volume are described,
 * never followed. `timeoutMs` on every call: the most it may take (else SandboxTimeoutError).
 */
export class VolumeFiles {
  private readonly files: Files;

  /** @internal */
  constructor(cfg: ConnectionConfig, volumeId: string) {
    const plane = volumePlane(cfg, volumeId);
    this.files = new Files(() => plane);
  }

  /** Write a file whole, making missing parent directories; a reader, in a box or here, never sees part of it. */
  async write(path: string, content: FileContent, options: FileOptions = {}): Promise<void> {
    return this.files.write(path, content, only(options));
  }

  async read(path: string, options: FileOptions = {}): Promise<Uint8Array> {
    return this.files.read(path, only(options));
  }

  /** A file's text (UTF-8). */
  async readText(path: string, options: FileOptions = {}): Promise<string> {
    return this.files.readText(path, only(options));
  }

  /** A directory's entries, `depth` (1-16) levels down, sorted; at most 10 000. */
  async list(path: string, options: VolumeFileListOptions = {}): Promise<EntryInfo[]> {
    return this.files.list(path, { ...only(options), depth: options.depth });
  }

  /** A file, directory or link (described, not followed). NotFoundError if there is none. */
  async getInfo(path: string, options: FileOptions = {}): Promise<EntryInfo> {
    return this.files.getInfo(path, only(options));
  }

  async exists(path: string, options: FileOptions = {}): Promise<boolean> {
    return this.files.exists(path, only(options));
  }

  /** A file or link (never its target), or a directory with everything in it. */
  async remove(path: string, options: FileOptions = {}): Promise<void> {
    return this.files.remove(path, only(options));
  }

  /** Move a file or directory (the destination's parent must exist); the destination's entry. */
  async rename(source: string, destination: string, options: FileOptions = {}): Promise<EntryInfo> {
    return this.files.rename(source, destination, only(options));
  }

  /** mkdir -p; false if it was a directory already (ConflictError if it is something else). */
  async makeDir(path: string, options: FileOptions = {}): Promise<boolean> {
    return this.files.makeDir(path, only(options));
  }
}

async function get(cfg: ConnectionConfig, ref: string, signal: AbortSignal | undefined): Promise<VolumeInfo> {
  return volumeInfo(await call("get", "/v1/volumes/{ref}", {
    base: cfg.baseUrl, params: { ref }, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal,
  }));
}

async function remove(cfg: ConnectionConfig, ref: VolumeRef, signal: AbortSignal | undefined): Promise<void> {
  await call("delete", "/v1/volumes/{ref}", {
    base: cfg.baseUrl, params: { ref: volumeRef(ref) }, headers: controlHeaders(cfg),
    timeoutMs: cfg.requestTimeoutMs, signal,
  });
}

/** A volume, as it was last read; `files` reads and writes it with no box. */
export class Volume {
  readonly files: VolumeFiles;
  private current: VolumeInfo;

  /** @internal */
  constructor(info: VolumeInfo, private readonly cfg: ConnectionConfig) {
    this.current = info;
    this.files = new VolumeFiles(cfg, info.id);
  }

  get id(): string {
    return this.current.id;
  }

  get name(): string {
    return this.current.name;
  }

  get sizeMib(): number {
    return this.current.sizeMib;
  }

  /** What its files took when it was read (null: its node could not tell); `getInfo()` asks again. */
  get usedBytes(): number | null {
    return this.current.usedBytes;
  }

  get metadata(): Record<string, string> {
    return { ...this.current.metadata };
  }

  /** The live boxes (running or paused) that mounted it when it was read. */
  get mountedBy(): string[] {
    return [...this.current.mountedBy];
  }

  get createdAt(): Date {
    return this.current.createdAt;
  }

  /** The volume as it was last read (by `get`, `list`, `getInfo` or `updateMetadata`). */
  get info(): VolumeInfo {
    return this.current;
  }

  /** The same as `info` (the name `Snapshot` and `Secret` use). */
  get details(): VolumeInfo {
    return this.current;
  }

  /** An empty volume. `name` is unique in the team (letters, digits, ".", "_", "-"; else
   * ConflictError "volume_exists"), and mounts and lookups may use it. Never retried. */
  static async create(name: string, options: VolumeCreateOptions = {}): Promise<Volume> {
    const cfg = resolveConfig(options);
    const answer = await call("post", "/v1/volumes", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
      json: { name, size_mib: options.sizeMib, metadata: options.metadata },
    });
    return new Volume(volumeInfo(answer), cfg);
  }

  /** A volume by id or name (NotFoundError "volume_not_found" if the team has none such). */
  static async get(nameOrId: string, options: ConnectionOptions & CallOptions = {}): Promise<Volume> {
    const cfg = resolveConfig(options);
    return new Volume(await get(cfg, nameOrId, options.signal), cfg);
  }

  /** The team's volumes (those with all of `metadata`, if given), oldest first. */
  static async list(options: VolumeListOptions = {}): Promise<Volume[]> {
    const cfg = resolveConfig(options);
    const metadata = options.metadata && Object.keys(options.metadata).length
      ? new URLSearchParams(options.metadata).toString() : undefined;
    const answer = await call("get", "/v1/volumes", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
      query: { metadata },
    });
    return answer.map((d) => new Volume(volumeInfo(d), cfg));
  }

  /** As `delete`, by id or name (or a `Volume`). */
  static async deleteById(ref: VolumeRef, options: ConnectionOptions & CallOptions = {}): Promise<void> {
    await remove(resolveConfig(options), ref, options.signal);
  }

  /** The volume now: its use in bytes, and the boxes that mount it. */
  async getInfo(options: CallOptions = {}): Promise<VolumeInfo> {
    this.current = await get(this.cfg, this.id, options.signal);
    return this.current;
  }

  /** Replace its metadata (not merged). */
  async updateMetadata(metadata: Record<string, string>, options: CallOptions = {}): Promise<VolumeInfo> {
    const answer = await call("patch", "/v1/volumes/{ref}", {
      base: this.cfg.baseUrl, params: { ref: this.id }, headers: controlHeaders(this.cfg), json: { metadata },
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    this.current = volumeInfo(answer);
    return this.current;
  }

  /** The volume and its files; refused (ConflictError "volume_in_use") while a box, running or
   * paused, mounts it. */
  async delete(options: CallOptions = {}): Promise<void> {
    await remove(this.cfg, this.id, options.signal);
  }

  toJSON(): VolumeInfo {
    return this.current; // never the connection's key
  }
}
