/**
 * hutch's TypeScript SDK: sandboxes, their commands, files, code interpreter and desktop, snapshots,
 * volumes, secrets and templates.
 *
 *     import { Sandbox } from "@hutch/sdk"          // reads HUTCH_API_KEY and HUTCH_BASE_URL
 *     const sandbox = await Sandbox.create({ name: "demo" })
 *     const { stdout, exitCode } = await sandbox.commands.run("echo hello")
 */

export { Sandbox } from "./sandbox.js";
export type { ListOptions, PageOptions, PauseOptions, SandboxCreateOptions, UpdateOptions } from "./sandbox.js";
export { Execution, Result } from "./code.js";
export type { CodeContext, CreateCodeContextOptions, ExecutionError, Logs, RunCodeOptions } from "./code.js";
export { Commands } from "./commands.js";
export type { ConnectOptions, RunOptions, SpawnOptions } from "./commands.js";
export { Process, ProcessStdin } from "./process.js";
export type { OutputCallback, PtySize, WaitOptions } from "./process.js";
export { Desktop } from "./desktop.js";
export type { ClickOptions, MouseButton, ScrollDirection, ScrollOptions, StartOptions, StreamUrlOptions } from "./desktop.js";
export { Files, WatchHandle } from "./files.js";
export type { FileContent, FileOptions, ListOptions as FileListOptions, UserOptions, WatchOptions } from "./files.js";
export { BASE_TEMPLATE, Template } from "./templates.js";
export type { BuildLogOptions, TemplateCreateOptions, WaitUntilReadyOptions } from "./templates.js";
export { Snapshot } from "./snapshots.js";
export type { BootOptions, SnapshotListOptions, SnapshotOptions, SnapshotRef } from "./snapshots.js";
export { Volume, VolumeFiles } from "./volumes.js";
export type {
  VolumeCreateOptions, VolumeFileListOptions, VolumeListOptions, VolumeMount, VolumeMounts, VolumeRef,
} from "./volumes.js";
export { Provider, Secret } from "./secrets.js";
export { Events, WEBHOOK_TOLERANCE, Webhooks, verifyWebhook } from "./webhooks.js";
export type { EventListOptions, EventStreamOptions, WebhookCreateOptions, WebhookUpdateOptions } from "./webhooks.js";
export type { SecretAuditOptions, SecretCreateOptions } from "./secrets.js";
export {
  AbortError, AuthenticationError, BuildError, ConflictError, NotFoundError, RateLimitError, SandboxError,
  SandboxTimeoutError, SandboxTimeoutError as TimeoutError, ServerError, ValidationError,
} from "./errors.js";
export { BuildFailure, SdkCode, ServerCode } from "./codes.js";
export { DEFAULT_BASE_URL, VERSION } from "./config.js";
export type { CallOptions, ConnectionOptions } from "./config.js";
export type {
  AuditEntry, AuditPage, BoxUser, BuildErrorInfo, BuildInfo, BuildLogLine, BuildStatus, CommandResult, EntryInfo,
  FilesystemEvent, MountedVolume, NetworkConfig, NetworkLogEntry, NetworkLogPage, PreviewAccess, PreviewPort,
  PreviewToken, ProcessInfo, ProviderInfo, SandboxInfo, SandboxStatus, SecretAuditEntry, SecretAuditPage, SecretAuth,
  SecretBinding, SecretInfo, SnapshotInfo, Step, TemplateInfo, VolumeInfo, Event, EventPage, WebhookDelivery,
  WebhookInfo,
} from "./types.js";
export type { components as OpenApiComponents, paths as OpenApiPaths } from "./openapi.js";
