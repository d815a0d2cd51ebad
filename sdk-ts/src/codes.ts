/**
 * The codes a `SandboxError.code` holds: the server's, mirrored name for name from hutch's
 * catalogue (`hutch/errors.py`, `hutch.sdk.codes` in the Python SDK), and the SDK's own.
 * test/codes.test.ts keeps `ServerCode` and `BuildFailure` equal to the server's lists.
 */

/** What the server answers in `{"error": {"code": ...}}`; its HTTP status picks the error class. */
export const ServerCode = {
  // the request itself
  INVALID_REQUEST: "invalid_request",
  WEBHOOK_URL_REFUSED: "webhook_url_refused",
  INVALID_JSON: "invalid_json",
  INVALID_PATH: "invalid_path",
  INVALID_SPEC: "invalid_spec",
  INVALID_MESSAGE: "invalid_message",
  UNKNOWN_PROVIDER: "unknown_provider",
  METHOD_NOT_ALLOWED: "method_not_allowed",
  PAYLOAD_TOO_LARGE: "payload_too_large",
  OUTPUT_TOO_LARGE: "output_too_large",

  // who is asking
  UNAUTHORIZED: "unauthorized",
  INVALID_API_KEY: "invalid_api_key",
  INVALID_ACCESS_TOKEN: "invalid_access_token",
  INVALID_SIGNATURE: "invalid_signature",
  SIGNATURE_EXPIRED: "signature_expired",
  FORBIDDEN: "forbidden",

  // what is asked for
  NOT_FOUND: "not_found",
  TEMPLATE_NOT_FOUND: "template_not_found",
  BUILD_NOT_FOUND: "build_not_found",
  PORT_NOT_PUBLISHED: "port_not_published",
  CONTEXT_NOT_FOUND: "context_not_found",
  SNAPSHOT_NOT_FOUND: "snapshot_not_found",
  VOLUME_NOT_FOUND: "volume_not_found",
  WEBHOOK_NOT_FOUND: "webhook_not_found",

  // the state of things
  CONFLICT: "conflict",
  SANDBOX_PAUSED: "sandbox_paused",
  SANDBOX_FAILED: "sandbox_failed",
  SANDBOX_NOT_RUNNING: "sandbox_not_running",
  ALREADY_PAUSED: "already_paused",
  INVALID_STATE: "invalid_state",
  TEMPLATE_EXISTS: "template_exists",
  TEMPLATE_IN_USE: "template_in_use",
  TEMPLATE_NOT_READY: "template_not_ready",
  TEMPLATE_ROOT_GONE: "template_root_gone",
  SYSTEM_TEMPLATE: "system_template",
  BUILD_FINISHED: "build_finished",
  SECRET_EXISTS: "secret_exists",
  INTERPRETER_UNAVAILABLE: "interpreter_unavailable",
  DESKTOP_UNAVAILABLE: "desktop_unavailable",
  SNAPSHOT_EXISTS: "snapshot_exists",
  SNAPSHOT_IN_USE: "snapshot_in_use",
  VOLUME_EXISTS: "volume_exists",
  VOLUME_IN_USE: "volume_in_use",
  VOLUMES_UNAVAILABLE: "volumes_unavailable",

  // quotas
  RATE_LIMITED: "rate_limited",
  TOO_MANY_SANDBOXES: "too_many_sandboxes",
  NO_CAPACITY: "no_capacity",
  CHECKPOINT_BUDGET: "checkpoint_budget",
  TOO_MANY_SNAPSHOTS: "too_many_snapshots",
  TOO_MANY_VOLUMES: "too_many_volumes",
  TOO_MANY_WEBHOOKS: "too_many_webhooks",
  TOO_MANY_WATCHERS: "too_many_watchers",
  TOO_MANY_TEMPLATES: "too_many_templates",
  TOO_MANY_BUILDS: "too_many_builds",

  // the server, the node and the box
  SERVER_ERROR: "server_error",
  AGENT_ERROR: "agent_error",
  BOOT_FAILED: "boot_failed",
  LIMITS_UNAVAILABLE: "limits_unavailable",
  PAUSE_FAILED: "pause_failed",
  SNAPSHOT_FAILED: "snapshot_failed",
  RESUME_FAILED: "resume_failed",
  SANDBOX_UNREACHABLE: "sandbox_unreachable",
  COMMAND_START_FAILED: "command_start_failed",
  TEMPLATE_START_FAILED: "template_start_failed",
  STORE_UNAVAILABLE: "store_unavailable",
  NODE_UNREACHABLE: "node_unreachable",
  READY_TIMEOUT: "ready_timeout",
  INSUFFICIENT_STORAGE: "insufficient_storage",

  // the guest agent's own, passed on by the server
  FILE_NOT_FOUND: "file_not_found",
  PROCESS_NOT_FOUND: "process_not_found",
  IS_A_DIRECTORY: "is_a_directory",
  NOT_A_DIRECTORY: "not_a_directory",
  NOT_A_REGULAR_FILE: "not_a_regular_file",
  UNSAFE_PATH: "unsafe_path",
  INVALID_CWD: "invalid_cwd",
  IO_ERROR: "io_error",
  NOT_A_TERMINAL: "not_a_terminal",
  TOO_MANY_ENTRIES: "too_many_entries",
  PERMISSION_DENIED: "permission_denied",
  ALREADY_EXISTS: "already_exists",
  STDIN_CLOSED: "stdin_closed",
  STDIN_FULL: "stdin_full",
  TOO_MANY_PROCESSES: "too_many_processes",
  PORT_NOT_LISTENING: "port_not_listening",
} as const;

/** Why a template's build failed: a `BuildError.code` (the build's record says it, not an HTTP answer). */
export const BuildFailure = {
  STEP_FAILED: "step_failed",
  IMAGE_NOT_FOUND: "image_not_found",
  IMAGE_PULL_FAILED: "image_pull_failed",
  INVALID_IMAGE: "invalid_image",
  INVALID_SPEC: "invalid_spec",
  READY_TIMEOUT: "ready_timeout",
  START_FAILED: "start_failed",
  CANCELLED: "cancelled",
  BUILD_FAILED: "build_failed",
} as const;

/** The SDK's own: raised by the SDK itself, never sent by the server. */
export const SdkCode = {
  ERROR: "error", // an error that names no code
  HTTP_STATUS: "http_{status}", // an error answer that was not the server's JSON (a proxy's, say)
  MISSING_API_KEY: "missing_api_key",
  INVALID_ARGUMENT: "invalid_argument", // caught before any request
  INVALID_PORT: "invalid_port",
  CONNECTION_ERROR: "connection_error",
  REQUEST_TIMEOUT: "request_timeout",
  STREAM_TIMEOUT: "stream_timeout", // a command's or a watch's stream went silent
  STREAM_ENDED: "stream_ended", // a stream broke before its end
  COMMAND_TIMEOUT: "command_timeout", // a command hit its timeoutMs
  EXECUTION_TIMEOUT: "execution_timeout", // runCode hit its timeout
  WAIT_TIMEOUT: "wait_timeout", // a wait (a build's, a process') ran out of time
  PROCESS_EXITED: "process_exited",
  DETACHED: "detached", // the process was let go of with close()
  CALLBACK_ERROR: "callback_error", // an output callback threw
  BAD_WEBHOOK_SIGNATURE: "bad_webhook_signature", // a webhook delivery whose signature does not hold (verifyWebhook)
  ABORTED: "aborted", // the call's AbortSignal fired (TypeScript only: Python has no AbortSignal)
} as const;

export type ServerCodeValue = (typeof ServerCode)[keyof typeof ServerCode];
export type BuildFailureValue = (typeof BuildFailure)[keyof typeof BuildFailure];
