/** `sandbox.files`: write, read and download; the filesystem calls; watching a directory. Paths are absolute. */

import type { CallOptions } from "./config.js";
import { NotFoundError, ValidationError } from "./errors.js";
import { bytes, call, events, lines, open } from "./http.js";
import { type DataPlane, dataHeaders, withToken } from "./plane.js";
import { type BoxUser, type EntryInfo, type FilesystemEvent, entryInfo } from "./types.js";

/** A transfer may take long; this is how long one may go on (the caller's signal can end it sooner). */
export const FILE_TIMEOUT_MS = 300_000;
/** A watch's stream carries keep-alives: a minute of silence means a dead stream. */
const WATCH_IDLE_MS = 60_000;

export type FileContent = string | Uint8Array | ArrayBuffer | Blob;

export interface FileOptions extends CallOptions {
  /** The most the call may take, in ms (else SandboxTimeoutError "request_timeout"). Default:
   * 300 000 for write, read, downloadDir, list and remove; the connection's `requestTimeoutMs` for
   * the others. */
  timeoutMs?: number;
}

export interface UserOptions extends FileOptions {
  /** Who the call acts as: the box user (default; the box's permissions apply) or "root". */
  user?: BoxUser;
}

export interface ListOptions extends UserOptions {
  /** How many levels down (1-16, default 1). */
  depth?: number;
}

export interface WatchOptions extends CallOptions {
  /** Also the directories below it (new ones too). */
  recursive?: boolean;
  /** Called when the watch ends: with nothing when the directory went or `close()` was called,
   * with the error when the stream broke. */
  onExit?: (error?: Error) => unknown;
}

async function asBytes(content: FileContent): Promise<Uint8Array | string> {
  if (typeof content === "string" || content instanceof Uint8Array) return content;
  if (content instanceof ArrayBuffer) return new Uint8Array(content);
  if (typeof Blob !== "undefined" && content instanceof Blob) return new Uint8Array(await content.arrayBuffer());
  throw new ValidationError("file content is a string, Uint8Array, ArrayBuffer or Blob", { code: "invalid_argument" });
}

/** How long a call may take: its `timeoutMs`, else `fallback`. */
function limit(options: FileOptions, fallback: number): number {
  const ms = options.timeoutMs;
  if (ms === undefined) return fallback;
  if (!(ms > 0)) throw new ValidationError(`timeoutMs is a positive number, not ${ms}`, { code: "invalid_argument" });
  return ms;
}

/** What is left of `ms` since `started` (at least 1 ms: then the read times out, as it should). */
function left(ms: number, started: number): number {
  return Math.max(1, ms - (Date.now() - started));
}

/**
 * A watched directory's changes: iterate it (`for await (const event of handle)`) or pass a
 * callback to `watchDir`; `close()` (or `stop()`) ends it. It ends by itself if the directory goes.
 */
export class WatchHandle implements AsyncIterable<FilesystemEvent> {
  private readonly buffered: FilesystemEvent[] = [];
  private wake: (() => void) | undefined;
  private ended = false;
  private error: Error | undefined;
  private readonly controller = new AbortController();
  /** Resolves when the watch has ended (rejects if its stream broke). */
  readonly done: Promise<void>;

  /** @internal */
  constructor(private readonly source: (signal: AbortSignal) => AsyncGenerator<FilesystemEvent>,
    private readonly onEvent: ((event: FilesystemEvent) => unknown) | undefined, onExit: WatchOptions["onExit"]) {
    this.done = this.pump().then(async () => {
      await onExit?.(this.error);
      if (this.error && !onExit) throw this.error;
    });
    this.done.catch(() => undefined);
  }

  private async pump(): Promise<void> {
    try {
      for await (const event of this.source(this.controller.signal)) {
        if (this.onEvent) await this.onEvent(event);
        else this.buffered.push(event);
        this.wake?.();
      }
    } catch (error) {
      if (!this.controller.signal.aborted) this.error = error as Error;
    } finally {
      this.ended = true;
      this.wake?.();
    }
  }

  async *[Symbol.asyncIterator](): AsyncIterator<FilesystemEvent> {
    for (;;) {
      const event = this.buffered.shift();
      if (event) {
        yield event;
        continue;
      }
      if (this.ended) {
        if (this.error) throw this.error;
        return;
      }
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }

  /** Stop watching. */
  async close(): Promise<void> {
    this.controller.abort();
    await this.done.catch(() => undefined);
  }

  /** The same as `close()`. */
  stop(): Promise<void> {
    return this.close();
  }
}

export class Files {
  /** @internal */
  constructor(private readonly dp: () => DataPlane) {}

  /** Write a file, making missing parent directories; it belongs to `user`. A reader never sees half a file. */
  async write(path: string, content: FileContent, options: UserOptions = {}): Promise<void> {
    const dp = this.dp();
    const ms = limit(options, FILE_TIMEOUT_MS);
    const body = await asBytes(content);
    await withToken(dp, options.signal, () => call("put", "/data/v1/sandboxes/{sandbox_id}/files", {
      base: dp.url, headers: { ...dataHeaders(dp), "Content-Type": "application/octet-stream" }, body,
      query: { path, user: options.user }, timeoutMs: ms, signal: options.signal,
    }));
  }

  /** A file's bytes, read as the box user (with its rights) unless `user: "root"`. */
  async read(path: string, options: UserOptions = {}): Promise<Uint8Array> {
    const dp = this.dp();
    const [ms, started] = [limit(options, FILE_TIMEOUT_MS), Date.now()];
    const opened = await withToken(dp, options.signal, () => open("get", "/data/v1/sandboxes/{sandbox_id}/files", {
      base: dp.url, headers: dataHeaders(dp), query: { path, user: options.user }, timeoutMs: ms,
      signal: options.signal,
    }));
    return bytes(opened, left(ms, started));
  }

  /** A file's text (UTF-8), read as the box user unless `user: "root"`. */
  async readText(path: string, options: UserOptions = {}): Promise<string> {
    return new TextDecoder().decode(await this.read(path, options));
  }

  /** A directory and everything under it, as the bytes of a zip archive (as the box user sees it,
   * unless `user: "root"`). */
  async downloadDir(path: string, options: UserOptions = {}): Promise<Uint8Array> {
    const dp = this.dp();
    const [ms, started] = [limit(options, FILE_TIMEOUT_MS), Date.now()];
    const opened = await withToken(dp, options.signal, () => open("get", "/data/v1/sandboxes/{sandbox_id}/files/zip", {
      base: dp.url, headers: dataHeaders(dp), query: { path, user: options.user }, timeoutMs: ms,
      signal: options.signal,
    }));
    return bytes(opened, left(ms, started));
  }

  /** A directory's entries, `depth` (1-16) levels down, sorted; links are listed, not followed. */
  async list(path: string, options: ListOptions = {}): Promise<EntryInfo[]> {
    const depth = options.depth ?? 1;
    if (!Number.isInteger(depth) || depth < 1 || depth > 16) {
      throw new ValidationError(`depth is an integer in 1..16, not ${depth}`, { code: "invalid_argument" });
    }
    const dp = this.dp();
    const ms = limit(options, FILE_TIMEOUT_MS);
    const answer = await withToken(dp, options.signal, () => call("get", "/data/v1/sandboxes/{sandbox_id}/files/list", {
      base: dp.url, headers: dataHeaders(dp), query: { path, depth, user: options.user }, timeoutMs: ms,
      signal: options.signal,
    }));
    return answer.entries.map(entryInfo);
  }

  /** A file, directory or link (described, not followed). NotFoundError if there is none. */
  async getInfo(path: string, options: UserOptions = {}): Promise<EntryInfo> {
    const dp = this.dp();
    const ms = limit(options, dp.cfg.requestTimeoutMs);
    const answer = await withToken(dp, options.signal, () => call("get", "/data/v1/sandboxes/{sandbox_id}/files/stat", {
      base: dp.url, headers: dataHeaders(dp), query: { path, user: options.user }, timeoutMs: ms,
      signal: options.signal,
    }));
    return entryInfo(answer);
  }

  async exists(path: string, options: UserOptions = {}): Promise<boolean> {
    try {
      await this.getInfo(path, options);
      return true;
    } catch (error) {
      if (error instanceof NotFoundError) return false;
      throw error;
    }
  }

  /** A file or link (never its target), or a directory with everything in it. */
  async remove(path: string, options: UserOptions = {}): Promise<void> {
    const dp = this.dp();
    const ms = limit(options, FILE_TIMEOUT_MS);
    await withToken(dp, options.signal, () => call("delete", "/data/v1/sandboxes/{sandbox_id}/files", {
      base: dp.url, headers: dataHeaders(dp), query: { path, user: options.user }, timeoutMs: ms,
      signal: options.signal,
    }));
  }

  /** Move a file or directory (the destination's parent must exist); the destination's entry. */
  async rename(source: string, destination: string, options: UserOptions = {}): Promise<EntryInfo> {
    const dp = this.dp();
    const ms = limit(options, dp.cfg.requestTimeoutMs);
    const answer = await withToken(dp, options.signal, () => call("post", "/data/v1/sandboxes/{sandbox_id}/files/move", {
      base: dp.url, headers: dataHeaders(dp), json: { source, destination, user: options.user },
      timeoutMs: ms, signal: options.signal,
    }));
    return entryInfo(answer);
  }

  /** mkdir -p, owned by `user`; false if it was a directory already (ConflictError if it is something else). */
  async makeDir(path: string, options: UserOptions = {}): Promise<boolean> {
    const dp = this.dp();
    const ms = limit(options, dp.cfg.requestTimeoutMs);
    const answer = await withToken(dp, options.signal, () => call("post", "/data/v1/sandboxes/{sandbox_id}/files/mkdir", {
      base: dp.url, headers: dataHeaders(dp), json: { path, user: options.user }, timeoutMs: ms,
      signal: options.signal,
    }));
    return answer.created;
  }

  /**
   * Watch a directory (create, write, remove, rename, chmod); resolves once the watch is in place.
   * Events go to `onEvent` if given, else iterate the handle. `close()` it when done.
   */
  async watchDir(path: string, onEvent?: (event: FilesystemEvent) => unknown, options?: WatchOptions): Promise<WatchHandle>;
  async watchDir(path: string, options?: WatchOptions): Promise<WatchHandle>;
  async watchDir(path: string, onEventOrOptions?: ((event: FilesystemEvent) => unknown) | WatchOptions,
    maybeOptions: WatchOptions = {}): Promise<WatchHandle> {
    const onEvent = typeof onEventOrOptions === "function" ? onEventOrOptions : undefined;
    const options = (typeof onEventOrOptions === "function" ? maybeOptions : onEventOrOptions) ?? {};
    const dp = this.dp();
    const opened = await withToken(dp, options.signal, () => open("get", "/data/v1/sandboxes/{sandbox_id}/files/watch", {
      base: dp.url, headers: dataHeaders(dp), query: { path, recursive: options.recursive ?? false },
      timeoutMs: dp.cfg.requestTimeoutMs, signal: options.signal,
    }));
    async function* source(stop: AbortSignal): AsyncGenerator<FilesystemEvent> {
      const abort = () => opened.scope.controller.abort(stop.reason);
      stop.addEventListener("abort", abort, { once: true });
      try {
        for await (const event of events(lines(opened, WATCH_IDLE_MS))) {
          const d = JSON.parse(event.data) as FilesystemEvent;
          yield { name: d.name, type: d.type };
        }
      } catch (error) {
        if (stop.aborted) return; // close()
        throw error;
      } finally {
        stop.removeEventListener("abort", abort);
      }
    }
    return new WatchHandle(source, onEvent, options.onExit);
  }
}
