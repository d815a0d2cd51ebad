/**
 * `Secret`: credentials stored once with the server, never seen by a box.
 *
 *     await Secret.create({ name: "anthropic-prod", value: key, provider: "anthropic" })
 *     await Sandbox.create({ name: "agent", secrets: { ANTHROPIC_API_KEY: "anthropic-prod" } })
 *
 * Inside the box the variable holds a stand-in token; the server's egress proxy swaps it for the
 * value only on requests to the secret's allowed hosts.
 */

import { type CallOptions, type ConnectionConfig, type ConnectionOptions, resolveConfig } from "./config.js";
import { call } from "./http.js";
import { controlHeaders } from "./plane.js";
import {
  type ProviderInfo, type SecretAuditPage, type SecretAuth, type SecretInfo, providerInfo, secretAuditPage, secretInfo,
} from "./types.js";

export interface SecretCreateOptions extends ConnectionOptions, CallOptions {
  name: string;
  value: string;
  /** "anthropic", "openai", ... (see `Provider.list()`): sets the auth scheme and hosts. */
  provider?: string;
  /** Set or override the provider's hosts (required without a provider). */
  allowedHosts?: string[];
  /** Set or override the provider's scheme (default without one: "authorization: Bearer {value}"). */
  auth?: SecretAuth;
}

export interface SecretAuditOptions extends CallOptions {
  limit?: number;
  before?: number;
  sandboxId?: string;
}

async function audit(cfg: ConnectionConfig, name: string, options: SecretAuditOptions): Promise<SecretAuditPage> {
  return secretAuditPage(await call("get", "/v1/secrets/{name}/audit", {
    base: cfg.baseUrl, params: { name }, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs,
    query: { limit: options.limit ?? 100, before: options.before, sandbox_id: options.sandboxId },
    signal: options.signal,
  }));
}

async function remove(cfg: ConnectionConfig, name: string, signal: AbortSignal | undefined): Promise<void> {
  await call("delete", "/v1/secrets/{name}", {
    base: cfg.baseUrl, params: { name }, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal,
  });
}

/** A stored credential (its value is never returned). */
export class Secret {
  private info: SecretInfo;

  /** @internal */
  constructor(info: SecretInfo, private readonly cfg: ConnectionConfig) {
    this.info = info;
  }

  get name(): string {
    return this.info.name;
  }

  get provider(): string | null {
    return this.info.provider;
  }

  get allowedHosts(): string[] {
    return [...this.info.allowedHosts];
  }

  get auth(): Required<SecretAuth> {
    return { ...this.info.auth };
  }

  get version(): number {
    return this.info.version;
  }

  get details(): SecretInfo {
    return this.info;
  }

  /** Store a credential (sealed at rest; no call ever returns it). Never retried. */
  static async create(options: SecretCreateOptions): Promise<Secret> {
    const cfg = resolveConfig(options);
    const answer = await call("post", "/v1/secrets", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
      json: {
        name: options.name, value: options.value, provider: options.provider, allowed_hosts: options.allowedHosts,
        auth: options.auth ? { header: options.auth.header, format: options.auth.format } : undefined,
      },
    });
    return new Secret(secretInfo(answer), cfg);
  }

  static async get(name: string, options: ConnectionOptions & CallOptions = {}): Promise<Secret> {
    const cfg = resolveConfig(options);
    const answer = await call("get", "/v1/secrets/{name}", {
      base: cfg.baseUrl, params: { name }, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs,
      signal: options.signal,
    });
    return new Secret(secretInfo(answer), cfg);
  }

  static async list(options: ConnectionOptions & CallOptions = {}): Promise<Secret[]> {
    const cfg = resolveConfig(options);
    const answer = await call("get", "/v1/secrets", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
    });
    return answer.map((d) => new Secret(secretInfo(d), cfg));
  }

  /** Boxes bound to it keep a stand-in that is never swapped again (their binding: revoked). */
  static async deleteByName(name: string, options: ConnectionOptions & CallOptions = {}): Promise<void> {
    await remove(resolveConfig(options), name, options.signal);
  }

  /** The uses of the secret of that name, a deleted one's too. */
  static async auditByName(name: string, options: ConnectionOptions & SecretAuditOptions = {}): Promise<SecretAuditPage> {
    return audit(resolveConfig(options), name, options);
  }

  /** A new value, used from the next request out of any box. */
  async rotate(value: string, options: CallOptions = {}): Promise<void> {
    const answer = await call("post", "/v1/secrets/{name}/rotate", {
      base: this.cfg.baseUrl, params: { name: this.name }, headers: controlHeaders(this.cfg), json: { value },
      timeoutMs: this.cfg.requestTimeoutMs, signal: options.signal,
    });
    this.info = secretInfo(answer);
  }

  async delete(options: CallOptions = {}): Promise<void> {
    await remove(this.cfg, this.name, options.signal);
  }

  /** Every request it was swapped into, newest first: when, which box, host, method, path, status. */
  async audit(options: SecretAuditOptions = {}): Promise<SecretAuditPage> {
    return audit(this.cfg, this.name, options);
  }
}

/** The services a secret can name as its provider: their auth scheme, hosts and usual env var. */
export const Provider = {
  async list(options: ConnectionOptions & CallOptions = {}): Promise<ProviderInfo[]> {
    const cfg = resolveConfig(options);
    const answer = await call("get", "/v1/providers", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
    });
    return answer.map(providerInfo);
  },
};
