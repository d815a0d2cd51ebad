// hutch console: the few scripted parts (the terminal, a build's live log, a desktop box's screen,
// errors of htmx requests).
"use strict";

// An htmx request that failed (a CSRF refusal, a box that went, a volume still mounted): say so
// instead of doing nothing. The error page is parsed inert (DOMParser runs nothing) and only its
// message's text is shown, its entities decoded.
document.addEventListener("htmx:responseError", (ev) => {
  const flash = document.getElementById("flash");
  let text = ev.detail.xhr.statusText;
  const html = ev.detail.xhr.responseText || "";
  const found = html && new DOMParser().parseFromString(html, "text/html").getElementById("error-message");
  if (found) text = found.textContent;
  flash.textContent = `${ev.detail.xhr.status}: ${text}`;
  flash.hidden = false;
});

// A change the person asks for (not a part's refresh) clears the last one's error.
document.addEventListener("htmx:beforeRequest", (ev) => {
  if (ev.detail.requestConfig && ev.detail.requestConfig.verb !== "get") document.getElementById("flash").hidden = true;
});

// A volume made from the page's form: the form is emptied for the next.
document.addEventListener("htmx:afterRequest", (ev) => {
  if (ev.detail.elt.id === "new-volume" && ev.detail.successful) ev.detail.elt.reset();
});

// A login shell on a pseudo-terminal in the box, attached over the console's WebSocket.
async function hutchTerminal(button) {
  const el = document.getElementById("terminal");
  const box = el.dataset.box, csrf = document.body.dataset.csrf;
  button.disabled = true;
  const term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(el);
  fit.fit();
  const opened = await fetch(`/console/boxes/${box}/terminal?rows=${term.rows}&cols=${term.cols}`,
                             { method: "POST", headers: { "X-CSRF-Token": csrf } });
  if (!opened.ok) { term.write(`\r\n[could not open a shell: ${opened.status}]\r\n`); button.disabled = false; return; }
  const { pid } = await opened.json();
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}/console/boxes/${box}/processes/${pid}/ws?csrf=${encodeURIComponent(csrf)}`);
  ws.onmessage = (ev) => {
    const m = JSON.parse(ev.data);
    if (m.t === "stdout" || m.t === "stderr") term.write(m.d);
    else if (m.t === "exit") term.write(`\r\n[the shell exited: ${m.exit_code}]\r\n`);
    else if (m.t === "error") term.write(`\r\n[${m.code}: ${m.message}]\r\n`);
  };
  ws.onopen = () => { el.dataset.attached = "yes"; term.focus(); };
  ws.onclose = () => { el.dataset.attached = "closed"; button.disabled = false; };
  term.onData((d) => { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ t: "stdin", d })); });
  term.onResize(({ rows, cols }) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ t: "resize", rows, cols }));
  });
  window.addEventListener("resize", () => fit.fit());
}

// A build's log, one JSON object a line, followed to the build's end.
async function hutchBuildLog(pre) {
  const response = await fetch(pre.dataset.src);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let rest = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    rest += decoder.decode(value, { stream: true });
    const lines = rest.split("\n");
    rest = lines.pop();
    for (const line of lines) {
      if (!line.trim()) continue;
      const entry = JSON.parse(line);
      if (entry.done) {  // the badge the page was rendered with said queued or running
        const badge = document.getElementById("build-status");
        badge.textContent = entry.status;
        badge.className = `status ${entry.status}`;
      }
      const text = entry.done ? `— the build ended: ${entry.status} —` : String(entry.text ?? "");
      pre.append(document.createTextNode(text.endsWith("\n") ? text : text + "\n"));
    }
  }
  pre.dataset.ended = "yes";  // the stream ends with the build
}

// A desktop box's screen: a screenshot, reloaded SCREEN_EVERY_MS after the last one came (never two
// at once), while the page is shown. The next one loads off-screen and replaces the shown one whole.
const SCREEN_EVERY_MS = 1000;
function hutchScreen(img) {
  const status = document.getElementById("screen-status");
  let shown = img;
  const next = () => {
    if (document.hidden) { document.addEventListener("visibilitychange", next, { once: true }); return; }
    const fresh = new Image();
    fresh.id = shown.id;
    fresh.className = shown.className;
    fresh.alt = shown.alt;
    fresh.dataset.src = shown.dataset.src;
    fresh.onload = () => {
      fresh.dataset.loaded = String(Number(shown.dataset.loaded || 0) + 1);  // how many came (the tests read it)
      shown.replaceWith(fresh);
      shown = fresh;
      status.hidden = true;
      setTimeout(next, SCREEN_EVERY_MS);
    };
    fresh.onerror = () => {
      status.textContent = "No screen now: the box is not running, or its desktop is not (yet) up.";
      status.hidden = false;
      setTimeout(next, SCREEN_EVERY_MS * 3);
    };
    fresh.src = `${shown.dataset.src}?t=${Date.now()}`;
  };
  next();
}

// No inline script anywhere (the pages' Content-Security-Policy forbids it): the parts are wired here.
document.addEventListener("DOMContentLoaded", () => {
  const open = document.getElementById("open-terminal");
  if (open) open.addEventListener("click", () => hutchTerminal(open));
  const log = document.getElementById("build-log");
  if (log) hutchBuildLog(log);
  const screen = document.getElementById("screen");
  if (screen) hutchScreen(screen);
  const filters = document.getElementById("filters");
  if (filters) filters.addEventListener("submit", (ev) => ev.preventDefault());  // htmx filters as one types
});
