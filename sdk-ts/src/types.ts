/**
 * What the SDK hands out: the server's answers in TypeScript's shapes (camelCase, `Date`s), each
 * converted once from its wire schema in `openapi.ts`, so a field the server renames or retypes is
 * a compile error here rather than an `undefined` at a user's.
 */

import type { components } from "./openapi.js";

export type Schemas = components["schemas"];
export type SandboxStatus = Schemas["SandboxStatus"];
export type PreviewAccess = "public" | "private";
export type BoxUser = "user" | "root";

/** Egress rules. `allowOut`: CIDRs and domains ("*.example.com" matches any name below it, not the
 * apex); `denyOut`: CIDRs. Allow wins over deny, so `denyOut: ["0.0.0.0/0"]` with an allow list lets
 * only that list out. Private, loopback and link-local ranges (169.254.169.254 too) and the
 * server's own addresses are denied whatever the rules say. */
export interface NetworkConfig {
  allowOut?: string[];
  denyOut?: string[];
}

export function networkBody(network: NetworkConfig): Schemas["NetworkConfig"] {
  return { allow_out: [...(network.allowOut ?? [])], deny_out: [...(network.denyOut ?? [])] };
}

function network(d: Schemas["NetworkConfig"] | null | undefined): Required<NetworkConfig> | null {
  return d ? { allowOut: d.allow_out ?? [], denyOut: d.deny_out ?? [] } : null;
}

/** A secret bound to an env var of a sandbox (the box sees only a stand-in). */
export interface SecretBinding {
  env: string;
  secret: string;
  /** The secret was deleted: its stand-in is not swapped any more. */
  revoked: boolean;
  createdAt: Date;
}

export function secretBinding(d: Schemas["SecretBinding"]): SecretBinding {
  return { env: d.env, secret: d.secret, revoked: d.revoked, createdAt: new Date(d.created_at) };
}

/** The server's view of a sandbox at the moment it was asked. */
export interface SandboxInfo {
  id: string;
  name: string;
  status: SandboxStatus;
  template: string;
  metadata: Record<string, string>;
  timeoutSeconds: number | null;
  autoDeleteSeconds: number | null;
  vcpuCount: number;
  memoryMib: number;
  createdAt: Date;
  updatedAt: Date;
  failure: string | null;
  network: Required<NetworkConfig> | null;
  secrets: SecretBinding[];
  /** What a port published without an access of its own gets. */
  previewAccess: PreviewAccess;
  /** A published port's URL, "{port}" standing for the port. */
  previewUrlTemplate: string;
  /** The fleet node it runs or last ran on (null on a single host). */
  node: string | null;
  /** The volumes it mounts. */
  volumes: MountedVolume[];
}

export function sandboxInfo(d: Schemas["SandboxInfo"] | Schemas["SandboxAccess"]): SandboxInfo {
  return {
    id: d.id, name: d.name, status: d.status, template: d.template, metadata: { ...d.metadata },
    timeoutSeconds: d.timeout_seconds, autoDeleteSeconds: d.auto_delete_seconds,
    vcpuCount: d.vcpu_count, memoryMib: d.memory_mib,
    createdAt: new Date(d.created_at), updatedAt: new Date(d.updated_at),
    failure: d.failure ?? null, network: network(d.network),
    secrets: (d.secrets ?? []).map(secretBinding),
    previewAccess: d.preview_access ?? "public", previewUrlTemplate: d.preview_url_template ?? "",
    node: d.node ?? null, volumes: (d.volumes ?? []).map(mountedVolume),
  };
}

export interface CommandResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** A spawned process that is still running. */
export interface ProcessInfo {
  pid: number;
  command: string;
  user: BoxUser;
  pty: boolean;
  startedAt: Date;
}

export function processInfo(d: Schemas["ProcessInfo"]): ProcessInfo {
  return { pid: d.pid, command: d.command, user: d.user, pty: d.pty, startedAt: new Date(d.started_at) };
}

/** A file, directory or link in the box, as lstat sees it (a link is described, not followed). */
export interface EntryInfo {
  name: string;
  path: string;
  type: Schemas["FsEntry"]["type"];
  size: number;
  /** Permission bits, e.g. 0o644. */
  mode: number;
  /** As ls shows them: "-rw-r--r--". */
  permissions: string;
  owner: string;
  group: string;
  modifiedTime: Date;
  symlinkTarget: string | null;
  /** E2B's file metadata (its user.e2b.* xattrs), if the file has any; null if none. */
  metadata: Record<string, string> | null;
}

export function entryInfo(d: Schemas["FsEntry"]): EntryInfo {
  return {
    name: d.name, path: d.path, type: d.type, size: d.size, mode: d.mode, permissions: d.permissions,
    owner: d.owner, group: d.group, modifiedTime: new Date(d.modified_time), symlinkTarget: d.symlink_target ?? null,
    metadata: d.metadata ? { ...d.metadata } : null,
  };
}

/** A change in a watched directory; `name` is relative to it. (Not in the OpenAPI document: the
 * watch is a stream of server-sent events, one of these a `data:` line.) */
export interface FilesystemEvent {
  name: string;
  type: "create" | "write" | "remove" | "rename" | "chmod";
}

export interface NetworkLogEntry {
  id: number;
  at: Date;
  host: string;
  port: number;
  ip: string | null;
  /** "allowed", "denied", or "failed" (allowed, but it could not be made). */
  verdict: Schemas["NetworkLogEntry"]["verdict"];
  /** What decided: "default", "allow_out:*.example.com", "deny_out:0.0.0.0/0", "always_denied:...". */
  rule: string;
  bytesOut: number;
  bytesIn: number;
  error: string | null;
  /** The secrets swapped into its requests. */
  secrets: string[] | null;
}

export interface NetworkLogPage {
  entries: NetworkLogEntry[];
  /** Pass as `before` for older entries; null at the end. */
  nextBefore: number | null;
}

export function networkLogPage(d: Schemas["NetworkLogPage"]): NetworkLogPage {
  return {
    entries: d.entries.map((e) => ({
      id: e.id, at: new Date(e.at), host: e.host, port: e.port, ip: e.ip, verdict: e.verdict, rule: e.rule,
      bytesOut: e.bytes_out, bytesIn: e.bytes_in, error: e.error ?? null, secrets: e.secrets ?? null,
    })),
    nextBefore: d.next_before,
  };
}

/** A command or file operation on a sandbox. */
export interface AuditEntry {
  id: number;
  at: Date;
  /** The client's address and what it calls itself (HUTCH_ACTOR, else its User-Agent). */
  actor: string;
  op: Schemas["AuditEntry"]["op"];
  /** The command, or the path. */
  detail: string;
  exitCode: number | null;
  /** "ok", or the error code the call ended with. */
  outcome: string;
}

export interface AuditPage {
  entries: AuditEntry[];
  nextBefore: number | null;
}

export function auditPage(d: Schemas["AuditPage"]): AuditPage {
  return {
    entries: d.entries.map((e) => ({
      id: e.id, at: new Date(e.at), actor: e.actor, op: e.op, detail: e.detail, exitCode: e.exit_code,
      outcome: e.outcome,
    })),
    nextBefore: d.next_before,
  };
}

export interface PreviewPort {
  port: number;
  access: PreviewAccess;
  url: string;
  createdAt: Date;
}

export function previewPort(d: Schemas["PreviewPort"]): PreviewPort {
  return { port: d.port, access: d.access, url: d.url, createdAt: new Date(d.created_at) };
}

/** A credential for machine clients: send `token` in the header named `header`. */
export interface PreviewToken {
  token: string;
  header: string;
}

// --- snapshots ----------------------------------------------------------------------------------

/** A saved state of a box (memory, processes and files; with `memory` false its files only),
 * which new boxes boot from. */
export interface SnapshotInfo {
  id: string;
  /** Unique in the team; boots and lookups may use it instead of the id. */
  name: string | null;
  metadata: Record<string, string>;
  /** The box it was taken of. */
  sourceSandboxId: string | null;
  template: string;
  vcpuCount: number;
  memoryMib: number;
  /** false: the box's changed files only (its boxes boot afresh, with no processes). */
  memory: boolean;
  sizeBytes: number;
  createdAt: Date;
}

export function snapshotInfo(d: Schemas["SnapshotInfo"]): SnapshotInfo {
  return {
    id: d.id, name: d.name, metadata: { ...d.metadata }, sourceSandboxId: d.source_sandbox_id, template: d.template,
    vcpuCount: d.vcpu_count, memoryMib: d.memory_mib, memory: d.memory, sizeBytes: d.size_bytes,
    createdAt: new Date(d.created_at),
  };
}

// --- volumes ----------------------------------------------------------------------------------

/** A volume: storage that outlives boxes, which many boxes mount at once. */
export interface VolumeInfo {
  id: string;
  /** Unique in the team; mounts and lookups may use it instead of the id. */
  name: string;
  /** What its files may take. */
  sizeMib: number;
  /** What its files take now (null: its node cannot tell from here). */
  usedBytes: number | null;
  metadata: Record<string, string>;
  createdAt: Date;
  /** The live sandboxes (running or paused) that mount it. */
  mountedBy: string[];
}

export function volumeInfo(d: Schemas["VolumeInfo"]): VolumeInfo {
  return {
    id: d.id, name: d.name, sizeMib: d.size_mib, usedBytes: d.used_bytes ?? null, metadata: { ...d.metadata },
    createdAt: new Date(d.created_at), mountedBy: [...d.mounted_by],
  };
}

/** A volume a sandbox mounts, at `path` in the box. */
export interface MountedVolume {
  volumeId: string;
  name: string;
  path: string;
  readOnly: boolean;
}

export function mountedVolume(d: Schemas["MountedVolume"]): MountedVolume {
  return { volumeId: d.volume_id, name: d.name, path: d.path, readOnly: d.read_only };
}

// --- secrets ------------------------------------------------------------------------------------

/** Where clients send the credential: a header, and its value with "{value}" for the credential
 * ("Bearer {value}"). The stand-in is swapped only there. */
export interface SecretAuth {
  header: string;
  format?: string;
}

export interface SecretInfo {
  name: string;
  provider: string | null;
  allowedHosts: string[];
  auth: Required<SecretAuth>;
  /** 1, and one more with each rotation. */
  version: number;
  createdAt: Date;
  updatedAt: Date;
}

export function secretInfo(d: Schemas["SecretInfo"]): SecretInfo {
  return {
    name: d.name, provider: d.provider, allowedHosts: [...d.allowed_hosts],
    auth: { header: d.auth.header, format: d.auth.format ?? "{value}" }, version: d.version,
    createdAt: new Date(d.created_at), updatedAt: new Date(d.updated_at),
  };
}

/** A service whose auth scheme and hosts a secret takes by name (`provider: "openai"`). */
export interface ProviderInfo {
  name: string;
  description: string;
  allowedHosts: string[];
  auth: Required<SecretAuth>;
  /** The variable its client libraries read. */
  env: string;
}

export function providerInfo(d: Schemas["ProviderInfo"]): ProviderInfo {
  return {
    name: d.name, description: d.description, allowedHosts: [...d.allowed_hosts],
    auth: { header: d.auth.header, format: d.auth.format ?? "{value}" }, env: d.env,
  };
}

export interface SecretAuditEntry {
  id: number;
  at: Date;
  sandboxId: string;
  env: string;
  host: string;
  method: string;
  path: string;
  /** null: no answer came. */
  status: number | null;
}

export interface SecretAuditPage {
  entries: SecretAuditEntry[];
  nextBefore: number | null;
}

export function secretAuditPage(d: Schemas["SecretAuditPage"]): SecretAuditPage {
  return {
    entries: d.entries.map((e) => ({
      id: e.id, at: new Date(e.at), sandboxId: e.sandbox_id, env: e.env, host: e.host, method: e.method,
      path: e.path, status: e.status,
    })),
    nextBefore: d.next_before,
  };
}

// --- templates ----------------------------------------------------------------------------------

/** A build step, as the API takes it: an object with exactly one of these keys. `run` runs a shell
 * command (as root unless a user step came before); `env`, `workdir` and `user` also become the
 * template's boxes' defaults. */
export type Step = Schemas["RunStep"] | Schemas["EnvStep"] | Schemas["WorkdirStep"] | Schemas["UserStep"]
  | Schemas["CopyStep"];
export type BuildStatus = Schemas["BuildStatus"];

export interface BuildErrorInfo {
  /** step_failed, image_not_found, image_pull_failed, ready_timeout, cancelled, build_failed, ... */
  code: string;
  message: string;
  /** The index (from 0) into the template's steps of the one at fault; null: none's. */
  step: number | null;
  exitCode: number | null;
}

export interface BuildInfo {
  id: string;
  templateId: string;
  /** The template's name. */
  template: string;
  status: BuildStatus;
  error: BuildErrorInfo | null;
  stepsTotal: number;
  /** Taken from an earlier build's layers instead of run again. */
  stepsCached: number;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
}

export function buildErrorInfo(d: Schemas["BuildErrorInfo"] | null | undefined): BuildErrorInfo | null {
  return d ? { code: d.code, message: d.message, step: d.step ?? null, exitCode: d.exit_code ?? null } : null;
}

function date(value: string | null | undefined): Date | null {
  return value ? new Date(value) : null;
}

export function buildInfo(d: Schemas["BuildInfo"]): BuildInfo {
  return {
    id: d.id, templateId: d.template_id, template: d.template, status: d.status, error: buildErrorInfo(d.error),
    stepsTotal: d.steps_total, stepsCached: d.steps_cached, createdAt: new Date(d.created_at),
    startedAt: date(d.started_at), finishedAt: date(d.finished_at),
  };
}

/** The server's view of a template. `status` is "ready" once any build succeeded (a rebuild keeps
 * it so), else "building" or "failed" as its latest build. */
export interface TemplateInfo {
  id: string;
  name: string;
  /** hutch/base and the like: every team's, never deleted. */
  system: boolean;
  status: Schemas["TemplateInfo"]["status"];
  /** null: a system template, built by the server itself. */
  from: string | null;
  steps: Step[];
  startCmd: string | null;
  readyCmd: string | null;
  readyTimeoutSeconds: number;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  /** What its boxes start with (from the last successful build). */
  env: Record<string, string>;
  workdir: string | null;
  user: string | null;
  createdAt: Date;
  latestBuild: BuildInfo | null;
}

export function templateInfo(d: Schemas["TemplateInfo"]): TemplateInfo {
  return {
    id: d.id, name: d.name, system: d.system, status: d.status, from: d.from, steps: d.steps,
    startCmd: d.start_cmd, readyCmd: d.ready_cmd, readyTimeoutSeconds: d.ready_timeout_seconds, vcpu: d.vcpu,
    memoryMib: d.memory_mib, diskMib: d.disk_mib, env: { ...d.env }, workdir: d.workdir, user: d.user,
    createdAt: new Date(d.created_at), latestBuild: d.latest_build ? buildInfo(d.latest_build) : null,
  };
}

/** A line of a build's log. (Not in the OpenAPI document: the log is NDJSON, one of these a line.) */
export interface BuildLogLine {
  /** Rises by one a line, from 1. */
  seq: number;
  time: Date;
  /** The index (from 0) of the step it belongs to; null: the builder's own lines. */
  step: number | null;
  stream: "system" | "stdout" | "stderr";
  text: string;
}

/** One change of state of the team's: `id` is its cursor (ids only grow, in the order the changes were made). */
export interface Event {
  id: number;
  /** sandbox.created, sandbox.paused, snapshot.deleted, template.build.ready, webhook.disabled, ... */
  type: string;
  at: Date;
  sandboxId: string | null;
  data: Record<string, unknown>;
}

export function event(d: Schemas["EventInfo"]): Event {
  return { id: d.id, type: d.type, at: new Date(d.at), sandboxId: d.sandbox_id ?? null, data: { ...d.data } };
}

export interface EventPage {
  events: Event[];
  /** The cursor to ask from next (`after`). */
  next: number;
}

/** An endpoint the team's events are POSTed to, signed. `secret` only in what `create` returned. */
export interface WebhookInfo {
  id: string;
  name: string;
  url: string;
  /** Empty: every type. */
  types: string[];
  enabled: boolean;
  /** Why hutch stopped its deliveries, if it did. */
  disabledReason: string | null;
  createdAt: Date;
  updatedAt: Date;
  secret: string | null;
}

export function webhookInfo(d: Schemas["WebhookInfo"]): WebhookInfo {
  return {
    id: d.id, name: d.name, url: d.url, types: [...d.types], enabled: d.enabled, disabledReason: d.disabled_reason ?? null,
    createdAt: new Date(d.created_at), updatedAt: new Date(d.updated_at), secret: d.secret ?? null,
  };
}

/** One attempt to deliver an event. */
export interface WebhookDelivery {
  id: number;
  eventId: number;
  eventType: string;
  /** 1, then each retry. */
  attempt: number;
  at: Date;
  /** The endpoint's answer (null: none came). */
  status: number | null;
  ok: boolean;
  error: string | null;
  durationMs: number;
}

export function webhookDelivery(d: Schemas["DeliveryInfo"]): WebhookDelivery {
  return {
    id: d.id, eventId: d.event_id, eventType: d.event_type, attempt: d.attempt, at: new Date(d.at),
    status: d.status ?? null, ok: d.ok, error: d.error ?? null, durationMs: d.duration_ms,
  };
}
