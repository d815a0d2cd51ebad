/**
 * `Snapshot`: a box's saved state (memory, processes and files, or its files only), which new
 * boxes boot from, any number of times.
 *
 *     const snap = await sandbox.snapshot({ name: "prepared" })          // the box runs on
 *     const boxes = await Sandbox.fromSnapshot(snap, { count: 3 })       // three boxes continuing from it
 *     await Snapshot.list({ metadata: { task: "t1" } })
 *     await (await Snapshot.get("prepared")).delete()
 *
 * Taking a snapshot, booting boxes from one and forking a box are `Sandbox`'s calls; their
 * requests are made here, as the Python SDK's (hutch/sdk/ops/snapshots.py).
 */

import { type CallOptions, type ConnectionConfig, type ConnectionOptions, resolveConfig } from "./config.js";
import { call } from "./http.js";
import { controlHeaders } from "./plane.js";
import {
  type NetworkConfig, type PreviewAccess, type Schemas, type SnapshotInfo, networkBody, snapshotInfo,
} from "./types.js";
import { type VolumeMounts, mountsBody } from "./volumes.js";

/** A snapshot, or its id or name. */
export type SnapshotRef = string | SnapshotInfo | Snapshot;

/** What a call sends for a snapshot given as an object: its id (a string as it is). */
export function snapshotRef(ref: SnapshotRef): string {
  return typeof ref === "string" ? ref : ref.id;
}

export interface SnapshotOptions extends CallOptions {
  /** Unique in the team (else ConflictError "snapshot_exists"); boots and lookups may use it. */
  name?: string;
  /** For `Snapshot.list({ metadata })`. */
  metadata?: Record<string, string>;
  /** false: only the files the box changed on its root filesystem (not /tmp, a tmpfs), read while
   * it runs, unpaused; its boxes boot afresh, with those files and no processes. Default true. */
  memory?: boolean;
}

/** What each box booted from a snapshot (or forked) gets; left out, the snapshot's. */
export interface BootOptions extends CallOptions {
  /** How many boxes, 1-20 (default 1): all of them, or none and the error. */
  count?: number;
  /** Default: the name of the box the snapshot was taken of. */
  name?: string;
  timeoutSeconds?: number;
  autoDeleteSeconds?: number;
  metadata?: Record<string, string>;
  /** On top of the snapshot's env. */
  envVars?: Record<string, string>;
  /** Replaces the snapshot's box's egress rules. */
  network?: NetworkConfig;
  /** Replaces the snapshot's box's bindings (each box gets stand-ins of its own either way). */
  secrets?: Record<string, string>;
  previewAccess?: PreviewAccess;
  /** Left out, the boxes mount the volumes the snapshot's box did (the live volumes, shared with
   * it); given, a path in the box -> a volume or `{ volume, readOnly }`. A box restored with its
   * memory needs a volume at each path its box had. */
  volumes?: VolumeMounts;
}

export interface SnapshotListOptions extends ConnectionOptions, CallOptions {
  /** Every pair must match. */
  metadata?: Record<string, string>;
  /** Only those taken of this box. */
  sandboxId?: string;
}

export async function takeSnapshot(cfg: ConnectionConfig, sandboxId: string,
  options: SnapshotOptions): Promise<SnapshotInfo> {
  const answer = await call("post", "/v1/sandboxes/{sandbox_id}/snapshots", {
    base: cfg.baseUrl, params: { sandbox_id: sandboxId }, headers: controlHeaders(cfg),
    json: { name: options.name, metadata: options.metadata, memory: options.memory },
    timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
  });
  return snapshotInfo(answer);
}

function bootBody(options: BootOptions): Schemas["BootSnapshot"] {
  return {
    count: options.count ?? 1, name: options.name, timeout_seconds: options.timeoutSeconds,
    auto_delete_seconds: options.autoDeleteSeconds, metadata: options.metadata, env_vars: options.envVars,
    network: options.network ? networkBody(options.network) : undefined, secrets: options.secrets,
    preview_access: options.previewAccess, volumes: mountsBody(options.volumes),
  };
}

/** Boxes booted from a snapshot: every one, or none (the server kills those that started when
 * one did not). Never retried. */
export async function bootSnapshot(cfg: ConnectionConfig, ref: SnapshotRef,
  options: BootOptions): Promise<Schemas["SandboxAccess"][]> {
  return call("post", "/v1/snapshots/{ref}/sandboxes", {
    base: cfg.baseUrl, params: { ref: snapshotRef(ref) }, headers: controlHeaders(cfg), json: bootBody(options),
    timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
  });
}

/** Boxes continuing from a running box, from a snapshot the server takes for them and does not keep. */
export async function forkSandbox(cfg: ConnectionConfig, sandboxId: string,
  options: BootOptions): Promise<Schemas["SandboxAccess"][]> {
  return call("post", "/v1/sandboxes/{sandbox_id}/fork", {
    base: cfg.baseUrl, params: { sandbox_id: sandboxId }, headers: controlHeaders(cfg), json: bootBody(options),
    timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
  });
}

async function remove(cfg: ConnectionConfig, ref: SnapshotRef, signal: AbortSignal | undefined): Promise<void> {
  await call("delete", "/v1/snapshots/{ref}", {
    base: cfg.baseUrl, params: { ref: snapshotRef(ref) }, headers: controlHeaders(cfg),
    timeoutMs: cfg.requestTimeoutMs, signal,
  });
}

/** A saved state of a box, as it was read. */
export class Snapshot {
  /** @internal */
  constructor(private readonly info: SnapshotInfo, private readonly cfg: ConnectionConfig) {}

  get id(): string {
    return this.info.id;
  }

  get name(): string | null {
    return this.info.name;
  }

  get metadata(): Record<string, string> {
    return { ...this.info.metadata };
  }

  /** false: files only. */
  get memory(): boolean {
    return this.info.memory;
  }

  get sizeBytes(): number {
    return this.info.sizeBytes;
  }

  get sourceSandboxId(): string | null {
    return this.info.sourceSandboxId;
  }

  get createdAt(): Date {
    return this.info.createdAt;
  }

  get details(): SnapshotInfo {
    return this.info;
  }

  /** A snapshot by id or name (NotFoundError "snapshot_not_found" if the team has none such). */
  static async get(ref: string, options: ConnectionOptions & CallOptions = {}): Promise<Snapshot> {
    const cfg = resolveConfig(options);
    const answer = await call("get", "/v1/snapshots/{ref}", {
      base: cfg.baseUrl, params: { ref }, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs,
      signal: options.signal,
    });
    return new Snapshot(snapshotInfo(answer), cfg);
  }

  /** The team's snapshots, newest first: those with all of `metadata`, of box `sandboxId`. */
  static async list(options: SnapshotListOptions = {}): Promise<Snapshot[]> {
    const cfg = resolveConfig(options);
    const metadata = options.metadata && Object.keys(options.metadata).length
      ? new URLSearchParams(options.metadata).toString() : undefined;
    const answer = await call("get", "/v1/snapshots", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
      query: { metadata, sandbox_id: options.sandboxId },
    });
    return answer.map((d) => new Snapshot(snapshotInfo(d), cfg));
  }

  /** Delete a snapshot (by id or name) and its image; refused (ConflictError "snapshot_in_use")
   * while boxes boot from it. Boxes booted from it run on. */
  static async deleteById(ref: SnapshotRef, options: ConnectionOptions & CallOptions = {}): Promise<void> {
    await remove(resolveConfig(options), ref, options.signal);
  }

  /** As `deleteById`. */
  async delete(options: CallOptions = {}): Promise<void> {
    await remove(this.cfg, this.id, options.signal);
  }

  toJSON(): SnapshotInfo {
    return this.info; // never the connection's key
  }
}
