/**
 * The SDK's one error tree and the one table that maps an HTTP answer onto it (as the Python SDK's
 * `hutch.sdk.errors`, with the same codes).
 *
 *     SandboxError                 statusCode, code
 *     ├── AuthenticationError      401, 403
 *     ├── ValidationError          400, 413, 422 (and bad arguments caught before any request)
 *     ├── NotFoundError            404
 *     ├── ConflictError            409
 *     ├── SandboxTimeoutError      a request or a command ran out of time (also exported as TimeoutError)
 *     ├── RateLimitError           429
 *     ├── ServerError              5xx, or the server could not be reached
 *     ├── BuildError               a template's build ended without an image: code, buildId, templateId, step, exitCode
 *     └── AbortError               the call's AbortSignal fired (code "aborted", `cause` the signal's reason)
 */

export interface SandboxErrorOptions {
  statusCode?: number | undefined;
  code?: string;
  details?: unknown;
  cause?: unknown;
}

export class SandboxError extends Error {
  /** The HTTP status of the answer, when there was one. */
  readonly statusCode: number | undefined;
  /** A stable, machine-readable code: the server's (see `ServerCode`) or the SDK's own (`SdkCode`). */
  readonly code: string;
  readonly details: unknown;

  constructor(message: string, options: SandboxErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.statusCode = options.statusCode;
    this.code = options.code ?? "error";
    this.details = options.details;
  }
}

export class AuthenticationError extends SandboxError {}
export class ValidationError extends SandboxError {}
export class NotFoundError extends SandboxError {}
export class ConflictError extends SandboxError {}
export class RateLimitError extends SandboxError {}
export class ServerError extends SandboxError {}

/** A request timed out, or a command hit its `timeoutMs` (code "command_timeout"; what it printed
 * until then is in `stdout` and `stderr`). */
export class SandboxTimeoutError extends SandboxError {
  stdout = "";
  stderr = "";
}

/** Thrown by `waitUntilReady` when the build failed or was cancelled; no HTTP status, the request
 * itself went well. `step`: the index (from 0) into the template's steps of the one at fault
 * (null: no step's), `exitCode` its command's. The build's log tells the rest. */
export class BuildError extends SandboxError {
  readonly buildId: string;
  readonly templateId: string;
  readonly step: number | null;
  readonly exitCode: number | null;

  constructor(message: string, options: { code: string; buildId: string; templateId: string;
    step?: number | null; exitCode?: number | null }) {
    super(message, { code: options.code });
    this.buildId = options.buildId;
    this.templateId = options.templateId;
    this.step = options.step ?? null;
    this.exitCode = options.exitCode ?? null;
  }
}

/** The call's AbortSignal fired; `cause` is the signal's reason. Its name is "AbortError", as
 * fetch's, so `err.name === "AbortError"` checks keep working. */
export class AbortError extends SandboxError {
  constructor(reason: unknown) {
    super("the call was aborted", { code: "aborted", cause: reason });
  }
}

type ErrorClass = new (message: string, options?: SandboxErrorOptions) => SandboxError;

const BY_STATUS: Record<number, ErrorClass> = {
  400: ValidationError, 401: AuthenticationError, 403: AuthenticationError, 404: NotFoundError,
  408: SandboxTimeoutError, 409: ConflictError, 413: ValidationError, 422: ValidationError,
  429: RateLimitError, 504: SandboxTimeoutError,
};

/** The typed error for an answer with this status and code. */
export function errorFor(status: number, code: string, message: string, details?: unknown): SandboxError {
  const cls = BY_STATUS[status] ?? (status >= 500 ? ServerError : SandboxError);
  return new cls(message, { statusCode: status, code, details });
}

/** The typed error for a failure answer's body: the server's `{"error": {"code", "message"}}`,
 * or `http_<status>` for anything else (a proxy's page, say). */
export function errorFromBody(status: number, body: string): SandboxError {
  try {
    const parsed: unknown = JSON.parse(body);
    const err = (parsed as { error?: { code?: unknown; message?: unknown; details?: unknown } }).error;
    if (err && typeof err.code === "string" && typeof err.message === "string") {
      return errorFor(status, err.code, err.message, err.details);
    }
  } catch {
    // not JSON: below
  }
  return errorFor(status, `http_${status}`, body.slice(0, 500) || `HTTP ${status}`);
}
