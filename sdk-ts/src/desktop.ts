/**
 * `sandbox.desktop`: a desktop box's screen and input (a box of the `desktop` template), as the
 * Python SDK's (hutch/sdk/ops/desktop.py): start it, a screenshot in one call, click, move, type,
 * key, scroll, drag, the pointer and the screen's size, and the live screen's preview URL (noVNC).
 * Coordinates are the screen's pixels, (0, 0) its top left.
 */

import type { CallOptions } from "./config.js";
import { ValidationError } from "./errors.js";
import { bytes, call, open } from "./http.js";
import { type DataPlane, dataHeaders, withToken } from "./plane.js";
import type { PreviewAccess, PreviewPort, Schemas } from "./types.js";

/** XFCE's start, a long text typed at xdotool's pace. */
export const DESKTOP_TIMEOUT_MS = 180_000;
export const DEFAULT_RESOLUTION: readonly [number, number] = [1024, 768];
/** The server's desktop templates (hutch.services.system_templates): a create from one starts the desktop. */
export const DESKTOP_TEMPLATES: readonly string[] = ["desktop", "hutch/desktop"];
export type MouseButton = "left" | "middle" | "right";
export type ScrollDirection = "up" | "down" | "left" | "right";
const BUTTONS: readonly MouseButton[] = ["left", "middle", "right"];
const DIRECTIONS: readonly ScrollDirection[] = ["up", "down", "left", "right"];

export interface StartOptions extends CallOptions {
  /** [width, height], default [1024, 768]. */
  resolution?: readonly [number, number];
  /** Default 96. */
  dpi?: number;
}

export interface ClickOptions extends CallOptions {
  /** Default "left". */
  button?: MouseButton;
  /** 2: a double click (1-3, default 1). */
  count?: number;
}

export interface ScrollOptions extends CallOptions {
  /** Where to scroll (both or neither; default: where the pointer is). */
  x?: number;
  y?: number;
}

export interface StreamUrlOptions extends CallOptions {
  /** "private" (default: a signed link, which the browser trades for the port's cookie) or "public". */
  access?: PreviewAccess;
  /** How long the signed link may be opened (default 300). */
  expiresInSeconds?: number;
}

/** What `streamUrl` needs of its sandbox: its preview ports. */
export interface PreviewPorts {
  publishPreviewPort(port: number, options: CallOptions & { access?: PreviewAccess }): Promise<PreviewPort>;
  getSignedPreviewUrl(port: number, options: CallOptions & { expiresInSeconds?: number }): Promise<string>;
}

type Action = Schemas["Click"] | Schemas["Move"] | Schemas["TypeText"] | Schemas["Key"] | Schemas["Scroll"]
  | Schemas["Drag"] | Schemas["ButtonPress"];

function point(x: number | undefined, y: number | undefined): { x?: number; y?: number } {
  if ((x === undefined) !== (y === undefined)) {
    throw new ValidationError("give both x and y, or neither", { code: "invalid_argument" });
  }
  return x === undefined || y === undefined ? {} : { x, y };
}

function checkButton(button: MouseButton): MouseButton {
  if (!BUTTONS.includes(button)) {
    throw new ValidationError(`button is one of ${BUTTONS.join(", ")}, not ${JSON.stringify(button)}`,
      { code: "invalid_argument" });
  }
  return button;
}

/** The signed link (to the port's root, its signature in the query) pointed at the page. */
export function withPage(link: string, page: string): string {
  const [base, query = ""] = splitOnce(link, "?");
  const [path, pageQuery = ""] = splitOnce(page, "?");
  return base.replace(/\/+$/, "") + path + "?" + [query, pageQuery].filter(Boolean).join("&");
}

function splitOnce(text: string, sep: string): [string, string?] {
  const at = text.indexOf(sep);
  return at < 0 ? [text] : [text.slice(0, at), text.slice(at + sep.length)];
}

/** Start the desktop of a box (Xvfb and XFCE) unless it runs. */
export async function startDesktop(dp: DataPlane, options: StartOptions = {}): Promise<void> {
  const [width, height] = options.resolution ?? DEFAULT_RESOLUTION;
  await withToken(dp, options.signal, () => call("post", "/data/v1/sandboxes/{sandbox_id}/desktop/start", {
    base: dp.url, headers: dataHeaders(dp), json: { width, height, dpi: options.dpi ?? 96 },
    timeoutMs: DESKTOP_TIMEOUT_MS, signal: options.signal,
  }));
}

export class Desktop {
  /** @internal */
  constructor(private readonly dp: () => DataPlane, private readonly previews: PreviewPorts) {}

  /** Start the desktop (Xvfb and XFCE) at `resolution` (default 1024x768) unless it runs; a create
   * from the `desktop` template (or with `resolution`) has done it already. */
  async start(options: StartOptions = {}): Promise<void> {
    return startDesktop(this.dp(), options);
  }

  /** The screen as PNG bytes, the pointer drawn in: one call. */
  async screenshot(options: CallOptions = {}): Promise<Uint8Array> {
    const dp = this.dp();
    const started = Date.now();
    const opened = await withToken(dp, options.signal, () => open("get",
      "/data/v1/sandboxes/{sandbox_id}/desktop/screenshot", {
        base: dp.url, headers: dataHeaders(dp), timeoutMs: DESKTOP_TIMEOUT_MS, signal: options.signal,
      }));
    return bytes(opened, Math.max(1, DESKTOP_TIMEOUT_MS - (Date.now() - started)));
  }

  /** Click `button` `count` times (2: a double click) at (x, y), or where the pointer is. */
  async click(x?: number, y?: number, options: ClickOptions = {}): Promise<void> {
    await this.act({ action: "click", ...point(x, y), button: checkButton(options.button ?? "left"),
      count: options.count ?? 1 }, options);
  }

  /** Move the pointer to (x, y). */
  async move(x: number, y: number, options: CallOptions = {}): Promise<void> {
    await this.act({ action: "move", x, y }, options);
  }

  /** Type `text` into the focused window, as keystrokes. */
  async type(text: string, options: CallOptions = {}): Promise<void> {
    await this.act({ action: "type", text }, options);
  }

  /** Press a key or a combination, in xdotool's names: "Return", "ctrl+s", "ctrl+shift+t", "F5". */
  async key(combo: string, options: CallOptions = {}): Promise<void> {
    await this.act({ action: "key", combo }, options);
  }

  /** Turn the wheel `amount` notches, at (x, y) if given. */
  async scroll(direction: ScrollDirection = "down", amount = 1, options: ScrollOptions = {}): Promise<void> {
    if (!DIRECTIONS.includes(direction)) {
      throw new ValidationError(`direction is one of ${DIRECTIONS.join(", ")}, not ${JSON.stringify(direction)}`,
        { code: "invalid_argument" });
    }
    await this.act({ action: "scroll", direction, amount, ...point(options.x, options.y) }, options);
  }

  /** Press `button` at `start`, move to `end`, release. */
  async drag(start: readonly [number, number], end: readonly [number, number],
    options: CallOptions & { button?: MouseButton } = {}): Promise<void> {
    await this.act({ action: "drag", x: start[0], y: start[1], to_x: end[0], to_y: end[1],
      button: checkButton(options.button ?? "left") }, options);
  }

  async mouseDown(button: MouseButton = "left", options: CallOptions = {}): Promise<void> {
    await this.act({ action: "mouse_down", button: checkButton(button) }, options);
  }

  async mouseUp(button: MouseButton = "left", options: CallOptions = {}): Promise<void> {
    await this.act({ action: "mouse_up", button: checkButton(button) }, options);
  }

  /** Where the pointer is. */
  async cursorPosition(options: CallOptions = {}): Promise<{ x: number; y: number }> {
    const dp = this.dp();
    const answer = await withToken(dp, options.signal, () => call("get", "/data/v1/sandboxes/{sandbox_id}/desktop/cursor", {
      base: dp.url, headers: dataHeaders(dp), timeoutMs: DESKTOP_TIMEOUT_MS, signal: options.signal,
    }));
    return { x: answer.x, y: answer.y };
  }

  /** The screen's size in pixels. */
  async screenSize(options: CallOptions = {}): Promise<{ width: number; height: number }> {
    const dp = this.dp();
    const answer = await withToken(dp, options.signal, () => call("get", "/data/v1/sandboxes/{sandbox_id}/desktop/screen", {
      base: dp.url, headers: dataHeaders(dp), timeoutMs: DESKTOP_TIMEOUT_MS, signal: options.signal,
    }));
    return { width: answer.width, height: answer.height };
  }

  /** A browser's view of the live screen: noVNC's page at the box's preview URL (x11vnc and noVNC
   * started in the box, their port published). Private by default: the URL is a signed link, good
   * for `expiresInSeconds`, which the browser exchanges for a cookie for that port; `access:
   * "public"` publishes it for anyone with the URL. */
  async streamUrl(options: StreamUrlOptions = {}): Promise<string> {
    const dp = this.dp();
    const answer = await withToken(dp, options.signal, () => call("post", "/data/v1/sandboxes/{sandbox_id}/desktop/stream", {
      base: dp.url, headers: dataHeaders(dp), timeoutMs: DESKTOP_TIMEOUT_MS, signal: options.signal,
    }));
    const port = Number(answer.port);
    const page = String(answer.path);
    const access = options.access ?? "private";
    const published = await this.previews.publishPreviewPort(port, { access, signal: options.signal });
    if (access === "public") return published.url.replace(/\/+$/, "") + page;
    const link = await this.previews.getSignedPreviewUrl(port, {
      expiresInSeconds: options.expiresInSeconds ?? 300, signal: options.signal,
    });
    return withPage(link, page);
  }

  private async act(body: Action, options: CallOptions): Promise<void> {
    const dp = this.dp();
    await withToken(dp, options.signal, () => call("post", "/data/v1/sandboxes/{sandbox_id}/desktop/actions", {
      base: dp.url, headers: dataHeaders(dp), json: body, timeoutMs: DESKTOP_TIMEOUT_MS, signal: options.signal,
    }));
  }
}
