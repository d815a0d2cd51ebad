/** Where the SDK finds its server and key: the call's option, then the environment, then the default. */

import { AuthenticationError } from "./errors.js";

export const DEFAULT_BASE_URL = "http://127.0.0.1:7423";
export const VERSION = "0.1.0";

/** Accepted by every call that does not already hold a connection (`Sandbox.create`, `connect`, `list`, ...). */
export interface ConnectionOptions {
  /** Default: `HUTCH_API_KEY`. */
  apiKey?: string;
  /** Default: `HUTCH_BASE_URL`, else http://127.0.0.1:7423. */
  baseUrl?: string;
  /** How long one control-plane request may take, in ms (default 120 000: a create waits for the box to boot). */
  requestTimeoutMs?: number;
}

/** Accepted by every call: abort it with `controller.abort()` (it rejects with `AbortError`). */
export interface CallOptions {
  signal?: AbortSignal;
}

export interface ConnectionConfig {
  readonly apiKey: string;
  readonly baseUrl: string;
  readonly requestTimeoutMs: number;
  /** Who this client is, in sandboxes' audit logs (`HUTCH_ACTOR`). */
  readonly actor: string | undefined;
}

export function resolveConfig(options: ConnectionOptions = {}): ConnectionConfig {
  const apiKey = options.apiKey || process.env.HUTCH_API_KEY;
  if (!apiKey) {
    throw new AuthenticationError("no API key: pass apiKey or set HUTCH_API_KEY", { code: "missing_api_key" });
  }
  const baseUrl = (options.baseUrl || process.env.HUTCH_BASE_URL || DEFAULT_BASE_URL).replace(/\/+$/, "");
  return {
    apiKey,
    baseUrl,
    requestTimeoutMs: options.requestTimeoutMs ?? 120_000,
    actor: process.env.HUTCH_ACTOR || undefined,
  };
}
