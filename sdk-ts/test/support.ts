// What the tests share: the server scripts/test-ts started (HUTCH_BASE_URL, HUTCH_API_KEY), the
// boxes a test made (killed after it), and tiny HTTP servers of their own on loopback.
import { spawn } from "node:child_process";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { Sandbox, type SandboxCreateOptions } from "@hutch/sdk";

export const SDK_DIR = fileURLToPath(new URL("../..", import.meta.url));
export const REPO = fileURLToPath(new URL("../../..", import.meta.url));
export const PYTHON = `${REPO}/.venv/bin/python`;

export function server(): { baseUrl: string; apiKey: string } {
  const baseUrl = process.env.HUTCH_BASE_URL;
  const apiKey = process.env.HUTCH_API_KEY;
  if (!baseUrl || !apiKey) throw new Error("HUTCH_BASE_URL and HUTCH_API_KEY name the test server (scripts/test-ts sets them)");
  return { baseUrl, apiKey };
}

const made: Sandbox[] = [];

/** A box for this test file; `cleanup()` kills every one made. */
export async function box(options: SandboxCreateOptions = {}): Promise<Sandbox> {
  const sandbox = await Sandbox.create({ name: "ts-test", ...options });
  made.push(sandbox);
  return sandbox;
}

/** Boxes a test made otherwise (booted from a snapshot, forked), killed by `cleanup()` too. */
export function adopt(boxes: Sandbox[]): Sandbox[] {
  made.push(...boxes);
  return boxes;
}

export async function cleanup(): Promise<void> {
  await Promise.all(made.splice(0).map((s) => s.kill().catch(() => undefined)));
}

export interface Tiny {
  url: string;
  requests: { method: string; url: string; body: string }[];
  close(): Promise<void>;
}

/** An HTTP server of the test's own on loopback, answering with `handle`. */
export async function tiny(handle: (req: IncomingMessage, res: ServerResponse, n: number) => void): Promise<Tiny> {
  const requests: Tiny["requests"] = [];
  const http = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      requests.push({ method: req.method ?? "", url: req.url ?? "", body });
      handle(req, res, requests.length);
    });
  });
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise((resolve) => {
      http.closeAllConnections();
      http.close(() => resolve());
    }),
  };
}

export function json(res: ServerResponse, status: number, body: unknown): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) });
  res.end(data);
}

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Run a program to its end (killed past `timeoutMs`). */
export function run(command: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv;
  timeoutMs?: number; input?: string } = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env ?? process.env });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 120_000);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(options.input ?? "");
  });
}

export function until(predicate: () => boolean | Promise<boolean>, timeoutMs = 20_000, what = "condition"): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return (async () => {
    while (Date.now() < deadline) {
      if (await predicate()) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`timed out waiting for ${what}`);
  })();
}

/**
 * The reason to skip a test that needs `what`, which scripts/test installs, or false when it is
 * present (as tests/integration/support.py's needs_installed). Under CI=true a missing one throws
 * instead: there scripts/test has run, so it is a broken setup, and a skip would pass unseen.
 */
export function needsInstalled(what: string, present: boolean): string | false {
  if (present) return false;
  const message = `${what} is not installed (scripts/test installs it)`;
  if (process.env.CI === "true") throw new Error(message);
  return message;
}

/** Whether the server's host has built the system template root `root` (a name in hutch.node.base_image). */
async function rootBuilt(root: string): Promise<boolean> {
  const ran = await run(PYTHON, ["-c", "from hutch.node import base_image\n"
    + "from hutch.services.config import DEFAULT_CACHE_DIR\n"
    + `print(base_image.is_built(DEFAULT_CACHE_DIR, base_image.${root}))`], { cwd: REPO });
  if (ran.code !== 0) throw new Error(`could not ask whether ${root} is built: ${ran.stderr}`);
  return ran.stdout.trim() === "True";
}

/** Whether the server's host has built the code interpreter's root (`hutch build-base`), which
 * boxes of hutch/code-interpreter boot from. */
export function codeInterpreterBuilt(): Promise<boolean> {
  return rootBuilt("CODE_INTERPRETER");
}

/** Whether the server's host has built the desktop's root (`hutch build-base --desktop`). */
export function desktopBuilt(): Promise<boolean> {
  return rootBuilt("DESKTOP");
}
