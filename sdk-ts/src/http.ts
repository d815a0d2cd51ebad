/**
 * The SDK's one transport: every request goes through `call` (a JSON answer) or `open` (an answer
 * whose body is read by the caller: bytes, server-sent events, NDJSON). Both are typed by the
 * server's OpenAPI document (`openapi.ts`): the path must be one the server serves with that method,
 * the JSON body must be the operation's request schema, and the answer is its response schema.
 *
 * GET and DELETE are retried on connection errors, timeouts and 429/502/503/504, with doubling
 * backoff and jitter; POST, PUT and PATCH never are (they may have taken effect). Every request
 * honours the caller's AbortSignal and a timeout of its own.
 */

import { VERSION } from "./config.js";
import { AbortError, SandboxError, SandboxTimeoutError, ServerError, errorFromBody } from "./errors.js";
import type { paths } from "./openapi.js";

export type Method = "get" | "post" | "put" | "patch" | "delete";
export type Path = keyof paths;

type Op<P extends Path, M extends Method> = Exclude<paths[P][M], undefined>;
/** The paths the server serves with method M. */
export type PathsWith<M extends Method> = { [P in Path]: [Op<P, M>] extends [never] ? never : P }[Path];
type JsonBody<O> = O extends { requestBody: { content: { "application/json": infer B } } } ? B
  : O extends { requestBody?: { content: { "application/json": infer B } } } ? B | undefined : undefined;
type JsonOf<X> = X extends { content: { "application/json": infer J } } ? J : undefined;
type Responses<O> = O extends { responses: infer R } ? R : never;
/** What a successful call answers: the JSON of its 200, 201 or 202 (undefined for a 204). */
export type Answer<O> = Responses<O> extends { 200: infer X } ? JsonOf<X>
  : Responses<O> extends { 201: infer X } ? JsonOf<X>
  : Responses<O> extends { 202: infer X } ? JsonOf<X> : undefined;
type QueryOf<O> = O extends { parameters: { query?: infer Q } } ? ([Q] extends [never] ? undefined : Q) : undefined;
type PathParamsOf<O> = O extends { parameters: { path: infer PP } } ? PP : undefined;

export type Body<P extends Path, M extends Method> = JsonBody<Op<P, M>>;
export type Reply<P extends Path, M extends Method> = Answer<Op<P, M>>;

export interface Request<P extends Path, M extends Method> {
  /** The control plane's base URL, or a sandbox's data-plane URL for the /data/v1/sandboxes/{sandbox_id} paths. */
  base: string;
  params?: Partial<PathParamsOf<Op<P, M>>>;
  query?: QueryOf<Op<P, M>>;
  json?: JsonBody<Op<P, M>>;
  /** A raw body (a file's bytes) instead of JSON. */
  body?: Uint8Array | string;
  headers: Record<string, string>;
  /** For `call`, the whole request; for `open`, until the answer's headers. None: no limit. */
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

const DATA_PREFIX = "/data/v1/sandboxes/{sandbox_id}";
export const RETRY_STATUSES = new Set([429, 502, 503, 504]);
export const RETRIES = 3;
const USER_AGENT = `hutch-sdk-ts/${VERSION} node/${process.version}`;

/** Milliseconds before retry number `attempt`: doubling from 200 up to 4000, with jitter. */
export function backoff(attempt: number): number {
  return Math.min(4000, 200 * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2);
}

export function url<P extends Path, M extends Method>(path: P, request: Request<P, M>): string {
  let tail: string = path;
  if (tail.startsWith(DATA_PREFIX)) tail = tail.slice(DATA_PREFIX.length);
  const params = (request.params ?? {}) as Record<string, string | number>;
  tail = tail.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = params[name];
    if (value === undefined) throw new Error(`no value for {${name}} in ${path}`);
    return encodeURIComponent(String(value));
  });
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries((request.query ?? {}) as Record<string, unknown>)) {
    if (value !== undefined && value !== null) query.set(key, String(value));
  }
  const qs = query.toString();
  return request.base + tail + (qs ? `?${qs}` : "");
}

/**
 * One attempt's abort scope: the caller's signal, a timeout, and (for a stream) an idle timer,
 * all ending one AbortController; `failure` says which of them ended it, as a typed error.
 */
export class Scope {
  readonly controller = new AbortController();
  timedOut = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly onAbort = () => this.controller.abort(this.user?.reason);

  constructor(private readonly user?: AbortSignal) {
    if (user?.aborted) this.controller.abort(user.reason);
    else user?.addEventListener("abort", this.onAbort, { once: true });
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get aborted(): boolean {
    return this.user?.aborted ?? false;
  }

  /** (Re)start the timer: `ms` from now the scope ends as timed out. */
  arm(ms: number | undefined): void {
    this.disarm();
    if (ms === undefined) return;
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort(new Error("timed out"));
    }, ms);
  }

  disarm(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  dispose(): void {
    this.disarm();
    this.user?.removeEventListener("abort", this.onAbort);
  }

  /** The typed error for an exception thrown while the scope was live. */
  failure(error: unknown, timeout: () => SandboxError, broken: () => SandboxError): SandboxError {
    if (error instanceof SandboxError) return error;
    if (this.aborted) return new AbortError(this.user?.reason);
    if (this.timedOut) return timeout();
    const err = broken();
    return Object.assign(err, { cause: error });
  }
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new AbortError(signal.reason));
    const done = () => {
      signal?.removeEventListener("abort", stop);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const stop = () => {
      clearTimeout(timer);
      reject(new AbortError(signal?.reason));
    };
    signal?.addEventListener("abort", stop, { once: true });
  });
}

/** An answer whose body is still to be read, with the scope that ends it (dispose it when done). */
export interface Opened {
  response: Response;
  scope: Scope;
}

async function send<P extends Path, M extends Method>(method: M, path: P, request: Request<P, M>,
  stream: boolean): Promise<Opened> {
  const idempotent = method === "get" || method === "delete";
  const target = url(path, request);
  const headers: Record<string, string> = { "User-Agent": USER_AGENT, ...request.headers };
  let body: string | Uint8Array | undefined = request.body;
  if (request.json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(request.json);
  }
  for (let attempt = 1; ; attempt++) {
    const scope = new Scope(request.signal);
    scope.arm(request.timeoutMs);
    let response: Response;
    try {
      response = await fetch(target, { method: method.toUpperCase(), headers, body, signal: scope.signal });
    } catch (error) {
      scope.dispose();
      const err = scope.failure(error,
        () => new SandboxTimeoutError(`${method.toUpperCase()} ${target}: the request timed out`,
          { code: "request_timeout" }),
        () => new ServerError(`could not reach the server: ${describe(error)}`, { code: "connection_error" }));
      if (idempotent && attempt <= RETRIES && !(err instanceof AbortError)) {
        await sleep(backoff(attempt), request.signal);
        continue;
      }
      throw err;
    }
    if (response.status < 400) {
      if (stream) scope.disarm(); // the reader arms its own idle timer
      return { response, scope };
    }
    let text: string;
    try {
      text = await response.text();
    } catch (error) {
      text = "";
      if (scope.aborted) {
        scope.dispose();
        throw new AbortError(request.signal?.reason);
      }
    }
    scope.dispose();
    if (idempotent && !stream && RETRY_STATUSES.has(response.status) && attempt <= RETRIES) {
      await sleep(backoff(attempt), request.signal);
      continue;
    }
    throw errorFromBody(response.status, text);
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}

/** Send a request and parse its JSON answer (undefined for an empty one). */
export async function call<P extends PathsWith<M>, M extends Method>(method: M, path: P,
  request: Request<P, M>): Promise<Reply<P, M>> {
  const { response, scope } = await send(method, path, request, false);
  try {
    const text = await response.text();
    return (text ? JSON.parse(text) : undefined) as Reply<P, M>;
  } catch (error) {
    throw scope.failure(error,
      () => new SandboxTimeoutError("the answer did not arrive in time", { code: "request_timeout" }),
      () => new ServerError(`the answer broke off: ${describe(error)}`, { code: "stream_ended" }));
  } finally {
    scope.dispose();
  }
}

/** Send a request whose answer the caller reads (bytes or a stream); the scope ends it. */
export async function open<P extends PathsWith<M>, M extends Method>(method: M, path: P,
  request: Request<P, M>): Promise<Opened> {
  return send(method, path, request, true);
}

/** A whole answer's bytes, within the scope's timeout. */
export async function bytes(opened: Opened, timeoutMs: number | undefined): Promise<Uint8Array> {
  opened.scope.arm(timeoutMs);
  try {
    return new Uint8Array(await opened.response.arrayBuffer());
  } catch (error) {
    throw opened.scope.failure(error,
      () => new SandboxTimeoutError("the download did not finish in time", { code: "request_timeout" }),
      () => new ServerError(`the download broke off: ${describe(error)}`, { code: "stream_ended" }));
  } finally {
    opened.scope.dispose();
  }
}

/**
 * The lines of a streamed answer, as they come. More than `idleMs` without a byte is a
 * SandboxTimeoutError (stream_timeout); a connection that breaks is a ServerError (stream_ended);
 * the caller's signal an AbortError. Leaving the loop early closes the stream.
 */
export async function* lines(opened: Opened, idleMs: number): AsyncGenerator<string, void, undefined> {
  const { response, scope } = opened;
  const body = response.body;
  if (body === null) {
    scope.dispose();
    return;
  }
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  try {
    for (;;) {
      scope.arm(idleMs);
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (error) {
        throw scope.failure(error,
          () => new SandboxTimeoutError(`the stream sent nothing for ${idleMs / 1000} s`, { code: "stream_timeout" }),
          () => new ServerError(`the stream broke: ${describe(error)}`, { code: "stream_ended" }));
      }
      scope.disarm();
      if (chunk.done) break;
      pending += decoder.decode(chunk.value, { stream: true });
      let at: number;
      while ((at = pending.indexOf("\n")) !== -1) {
        const line = pending.slice(0, at);
        pending = pending.slice(at + 1);
        yield line.endsWith("\r") ? line.slice(0, -1) : line;
      }
    }
    pending += decoder.decode();
    if (pending) yield pending;
  } finally {
    scope.dispose();
    reader.cancel().catch(() => undefined);
  }
}

export interface ServerSentEvent {
  event: string;
  data: string;
}

/** Server-sent events from a stream of lines; comments (keep-alives) are skipped. */
export async function* events(source: AsyncIterable<string>): AsyncGenerator<ServerSentEvent, void, undefined> {
  let event = "message";
  let data: string[] = [];
  for await (const line of source) {
    if (line.startsWith(":")) continue;
    if (line) {
      const colon = line.indexOf(":");
      const name = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (name === "event") event = value;
      else if (name === "data") data.push(value);
      continue;
    }
    if (data.length) yield { event, data: data.join("\n") };
    event = "message";
    data = [];
  }
}
