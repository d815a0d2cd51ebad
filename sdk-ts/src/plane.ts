/**
 * The two planes a call goes to. The control plane (/v1) takes the API key; a sandbox's data plane
 * (its commands and files) takes only its access token, which rotates when the box resumes: a
 * data-plane call answered `invalid_access_token` reconnects once for the new token and is sent again.
 * A volume's files calls are a sandbox's, sent to the volume's address with the API key (no token).
 */

import type { ConnectionConfig } from "./config.js";
import { AuthenticationError } from "./errors.js";
import { call } from "./http.js";
import type { Schemas } from "./types.js";

export interface DataPlane {
  url: string;
  token: string;
  readonly sandboxId: string;
  readonly cfg: ConnectionConfig;
  /** A volume's files (/v1/volumes/{ref}): sent with the API key, with no token to rotate. */
  readonly apiKey?: true;
}

function actor(cfg: ConnectionConfig): Record<string, string> {
  return cfg.actor ? { "X-Hutch-Actor": cfg.actor } : {};
}

export function controlHeaders(cfg: ConnectionConfig): Record<string, string> {
  return { Authorization: `Bearer ${cfg.apiKey}`, ...actor(cfg) };
}

export function dataHeaders(dp: DataPlane): Record<string, string> {
  return dp.apiKey ? controlHeaders(dp.cfg) : { "X-Access-Token": dp.token, ...actor(dp.cfg) };
}

export function dataPlaneOf(cfg: ConnectionConfig, access: Schemas["SandboxAccess"]): DataPlane {
  return { url: access.data_plane_url, token: access.access_token, sandboxId: access.id, cfg };
}

/** Where a volume's files calls go: its own address on the control plane, with the API key. */
export function volumePlane(cfg: ConnectionConfig, volumeId: string): DataPlane {
  const url = `${cfg.baseUrl}/v1/volumes/${encodeURIComponent(volumeId)}`;
  return { url, token: "", sandboxId: "", cfg, apiKey: true };
}

/** The sandbox and a fresh data-plane token; the server resumes a paused box first. */
export async function connectAccess(cfg: ConnectionConfig, sandboxId: string,
  signal: AbortSignal | undefined): Promise<Schemas["SandboxAccess"]> {
  return call("post", "/v1/sandboxes/{sandbox_id}/connect", {
    base: cfg.baseUrl, params: { sandbox_id: sandboxId }, headers: controlHeaders(cfg),
    timeoutMs: cfg.requestTimeoutMs, signal,
  });
}

/** Take the sandbox's current data-plane token (connect resumes it if it is paused). */
export async function refreshToken(dp: DataPlane, signal: AbortSignal | undefined): Promise<void> {
  const access = await connectAccess(dp.cfg, dp.sandboxId, signal);
  dp.url = access.data_plane_url;
  dp.token = access.access_token;
}

/** Run a data-plane request; if its token was rotated (the box resumed since), refresh it once
 * and run the request again. */
export async function withToken<T>(dp: DataPlane, signal: AbortSignal | undefined, send: () => Promise<T>): Promise<T> {
  if (dp.apiKey) return send();
  try {
    return await send();
  } catch (error) {
    if (!(error instanceof AuthenticationError) || error.code !== "invalid_access_token") throw error;
  }
  await refreshToken(dp, signal);
  return send();
}
