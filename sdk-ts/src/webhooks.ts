/**
 * `Events`: what happened to the team's boxes, snapshots and builds, in order, by cursor; and
 * `Webhooks`: endpoints those events are POSTed to as they happen, signed, with `verifyWebhook`,
 * the receiver's check. As the Python SDK's (hutch/sdk/events.py, hutch/sdk/webhooks.py).
 *
 *     const hook = await Webhooks.create("https://example.com/hooks/hutch", { types: ["sandbox.killed"] })
 *     // in the receiver, with the body's bytes as they came:
 *     const event = verifyWebhook(body, request.headers["hutch-signature"], secret)
 */

import { createHmac, timingSafeEqual } from "node:crypto";

import { type CallOptions, type ConnectionOptions, resolveConfig } from "./config.js";
import { SandboxError, ServerError, ValidationError } from "./errors.js";
import { type Opened, call, lines, open, sleep } from "./http.js";
import { controlHeaders } from "./plane.js";
import {
  type Event, type EventPage, type Schemas, type WebhookDelivery, type WebhookInfo, event, webhookDelivery,
  webhookInfo,
} from "./types.js";

export interface EventListOptions extends ConnectionOptions, CallOptions {
  /** The cursor: events past this id (default 0: every event kept). */
  after?: number;
  /** Only these types. */
  types?: string[];
  sandboxId?: string;
  /** At most this many (1-1000, default 100). */
  limit?: number;
}

export interface EventStreamOptions extends ConnectionOptions {
  /** The cursor: events past this id (default: from now on). */
  after?: number;
  /** Only these types. */
  types?: string[];
  sandboxId?: string;
  /** Ends the stream (its `for await` loop throws an AbortError). */
  signal?: AbortSignal;
}

const EVENTS_IDLE_MS = 45_000; // the server says something every 15 s
const RECONNECT_MS = 120_000; // a stream that cannot be opened again for this long is given up
const MAX_EVENT = 1 << 20; // characters of one event's data lines

export class Events {
  /** Events past the cursor `after`, oldest first; the page's `next` is the cursor to ask from next. */
  static async list(options: EventListOptions = {}): Promise<EventPage> {
    const cfg = resolveConfig(options);
    const answer = await call("get", "/v1/events", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
      query: {
        after: options.after ?? 0, limit: options.limit ?? 100, sandbox_id: options.sandboxId,
        types: options.types?.length ? [options.types.join(",")] : undefined,
      },
    });
    return { events: answer.events.map(event), next: answer.next };
  }

  /**
   * The team's events as they happen, for as long as you iterate (`for await`), from past the
   * cursor `after` (default: from now on). A connection that breaks or goes silent is opened again
   * from the last event seen: none is missed and none comes twice.
   */
  static async *stream(options: EventStreamOptions = {}): AsyncGenerator<Event, void, undefined> {
    const cfg = resolveConfig(options);
    let cursor = options.after;
    let failures = 0;
    let downSince: number | undefined;
    for (;;) {
      let opened: Opened;
      try {
        opened = await open("get", "/v1/events/stream", {
          base: cfg.baseUrl, headers: { ...controlHeaders(cfg), Accept: "text/event-stream" },
          timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
          query: {
            after: cursor === undefined ? undefined : String(cursor), sandbox_id: options.sandboxId,
            types: options.types?.length ? [options.types.join(",")] : undefined,
          },
        });
      } catch (error) {
        // down or restarting (no answer, 429, 5xx): again, for a while
        const status = error instanceof SandboxError ? error.statusCode : undefined;
        if (options.signal?.aborted || !(error instanceof SandboxError)
          || (status !== undefined && status !== null && status < 500 && status !== 429)) throw error;
        downSince ??= Date.now();
        if (Date.now() - downSince > RECONNECT_MS) throw error;
        failures += 1;
        await sleep(Math.min(4000, 200 * 2 ** failures), options.signal);
        continue;
      }
      downSince = undefined;
      try {
        let data: string[] = [];
        let size = 0;
        for await (const line of lines(opened, EVENTS_IDLE_MS)) {
          if (line.startsWith(":")) {
            const at = line.startsWith(": events past ") ? line.slice(14).trim() : "";
            if (/^[0-9]{1,19}$/.test(at)) {
              failures = 0; // it opened: a later break starts its backoff again
              if (cursor === undefined) cursor = Number(at); // from now on: where now is
            }
            continue;
          }
          if (line.startsWith("data:")) {
            size += line.length;
            if (size > MAX_EVENT) throw new ServerError("an event of the stream is too large", { code: "stream_ended" });
            data.push(line.slice(5).replace(/^ /, ""));
          } else if (line === "" && data.length) {
            const e = event(JSON.parse(data.join("\n")) as Schemas["EventInfo"]);
            data = [];
            size = 0;
            cursor = e.id;
            yield e;
          }
        }
      } catch (error) {
        const code = error instanceof SandboxError ? error.code : "";
        if (options.signal?.aborted || (code !== "stream_timeout" && code !== "stream_ended")
          || (error instanceof ServerError && error.message.includes("too large"))) throw error;
      }
      failures += 1;
      await sleep(Math.min(4000, 200 * 2 ** Math.min(failures, 3)), options.signal);
    }
  }
}

export interface WebhookCreateOptions extends ConnectionOptions, CallOptions {
  /** Only these event types (default: every type). */
  types?: string[];
  name?: string;
  /** Sign with this (16-256 characters; default: hutch makes one, shown once in the answer). */
  secret?: string;
  enabled?: boolean;
}

export interface WebhookUpdateOptions extends ConnectionOptions, CallOptions {
  url?: string;
  types?: string[];
  name?: string;
  secret?: string;
  /** true after hutch disabled it: deliveries go on from the first event it was not delivered. */
  enabled?: boolean;
}

export class Webhooks {
  /** Register `url` for the team's events from now on; the answer's `secret` is shown this once. */
  static async create(url: string, options: WebhookCreateOptions = {}): Promise<WebhookInfo> {
    const cfg = resolveConfig(options);
    return webhookInfo(await call("post", "/v1/webhooks", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
      json: { url, types: options.types ?? [], name: options.name ?? "", secret: options.secret,
        enabled: options.enabled ?? true },
    }));
  }

  static async list(options: ConnectionOptions & CallOptions = {}): Promise<WebhookInfo[]> {
    const cfg = resolveConfig(options);
    const answer = await call("get", "/v1/webhooks", {
      base: cfg.baseUrl, headers: controlHeaders(cfg), timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
    });
    return answer.map(webhookInfo);
  }

  static async get(webhookId: string, options: ConnectionOptions & CallOptions = {}): Promise<WebhookInfo> {
    const cfg = resolveConfig(options);
    return webhookInfo(await call("get", "/v1/webhooks/{webhook_id}", {
      base: cfg.baseUrl, params: { webhook_id: webhookId }, headers: controlHeaders(cfg),
      timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
    }));
  }

  static async update(webhookId: string, options: WebhookUpdateOptions): Promise<WebhookInfo> {
    const cfg = resolveConfig(options);
    return webhookInfo(await call("patch", "/v1/webhooks/{webhook_id}", {
      base: cfg.baseUrl, params: { webhook_id: webhookId }, headers: controlHeaders(cfg),
      timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
      json: { url: options.url, types: options.types, name: options.name, secret: options.secret,
        enabled: options.enabled },
    }));
  }

  static async delete(webhookId: string, options: ConnectionOptions & CallOptions = {}): Promise<void> {
    const cfg = resolveConfig(options);
    await call("delete", "/v1/webhooks/{webhook_id}", {
      base: cfg.baseUrl, params: { webhook_id: webhookId }, headers: controlHeaders(cfg),
      timeoutMs: cfg.requestTimeoutMs, signal: options.signal,
    });
  }

  /** Its delivery attempts, newest first. */
  static async deliveries(webhookId: string, options: ConnectionOptions & CallOptions & { limit?: number } = {}
  ): Promise<WebhookDelivery[]> {
    const cfg = resolveConfig(options);
    const answer = await call("get", "/v1/webhooks/{webhook_id}/deliveries", {
      base: cfg.baseUrl, params: { webhook_id: webhookId }, headers: controlHeaders(cfg),
      timeoutMs: cfg.requestTimeoutMs, signal: options.signal, query: { limit: options.limit ?? 100 },
    });
    return answer.map(webhookDelivery);
  }
}

/** Seconds a delivery's timestamp may be off before `verifyWebhook` refuses it (a replay). */
export const WEBHOOK_TOLERANCE = 300;

/**
 * The delivered event, once its `Hutch-Signature` header (`t=<unix seconds>,v1=<hex>`) is checked:
 * the HMAC-SHA256 of `"<t>." + body` under the webhook's secret, no more than `tolerance` seconds
 * off. Throws ValidationError ("bad_webhook_signature") if it is not.
 */
export function verifyWebhook(body: string | Uint8Array, signature: string, secret: string,
  options: { tolerance?: number; now?: number } = {}): Record<string, unknown> {
  const raw = typeof body === "string" ? Buffer.from(body) : Buffer.from(body);
  const fields = new Map<string, string[]>();
  for (const part of signature.split(",")) {
    const at = part.indexOf("=");
    const key = (at < 0 ? part : part.slice(0, at)).trim();
    fields.set(key, [...(fields.get(key) ?? []), at < 0 ? "" : part.slice(at + 1)]);
  }
  const stamp = Number(fields.get("t")?.[0]);
  const refuse = (why: string) => new ValidationError(why, { code: "bad_webhook_signature" });
  if (!Number.isInteger(stamp)) throw refuse("the signature has no timestamp (t=)");
  const expected = createHmac("sha256", secret).update(`${stamp}.`).update(raw).digest();
  const matches = (fields.get("v1") ?? []).some((given) => {
    const bytes = Buffer.from(given, "hex");
    return bytes.length === expected.length && timingSafeEqual(bytes, expected);
  });
  if (!matches) throw refuse("the signature does not match the body and secret");
  const tolerance = options.tolerance ?? WEBHOOK_TOLERANCE;
  if (Math.abs((options.now ?? Date.now() / 1000) - stamp) > tolerance) {
    throw refuse(`the signature is older than ${tolerance} s`);
  }
  return JSON.parse(raw.toString("utf8")) as Record<string, unknown>;
}
