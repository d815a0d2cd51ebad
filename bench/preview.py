"""Preview URLs: what the preview proxy adds, beside the same server reached directly inside the
box, in the same run.

    .venv/bin/python -m bench.preview [-n 200]

A small keep-alive HTTP server runs in a box on port 8000. The same client loop (N sequential
GETs on one kept-alive connection; then 4 threads for 5 s, for requests per second) runs inside
the box against 127.0.0.1:8000 (direct) and on the host against the port's preview URL (through
the proxy, the agent's tunnel and the box's loopback). A GET on a new connection each time shows
what opening the tunnel costs.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TypedDict

from bench.common import bench_env, main_for, stats
from hutch import Sandbox
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR

SERVER = r"""
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""
# argv: address port host-header n threads seconds fresh(0/1)
CLIENT = r"""
import http.client, json, sys, threading, time
addr, host = sys.argv[1], sys.argv[3]
port, n, threads, seconds, fresh = int(sys.argv[2]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), sys.argv[7] == "1"
def get(c):
    c.request("GET", "/", headers={"Host": host}); r = c.getresponse(); r.read(); assert r.status == 200, r.status
c = http.client.HTTPConnection(addr, port, timeout=30)
get(c)
lat = []
for _ in range(n):
    t = time.perf_counter()
    if fresh:
        c.close(); c = http.client.HTTPConnection(addr, port, timeout=30)
    get(c)
    lat.append(time.perf_counter() - t)
done = [0] * threads
def load(i):
    k = http.client.HTTPConnection(addr, port, timeout=30); end = time.monotonic() + seconds
    while time.monotonic() < end:
        get(k); done[i] += 1
ts = [threading.Thread(target=load, args=(i,)) for i in range(threads)]
[t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps({"latency": lat, "rps": sum(done) / seconds}))
"""


class ClientResult(TypedDict):
    """What CLIENT prints: each GET's seconds, and the requests per second of the threads."""

    latency: list[float]
    rps: float


def measure(n: int) -> tuple[dict[str, dict[str, float]], list[tuple[str, str]], dict[str, float]]:
    rootfs = base_image.build(DEFAULT_CACHE_DIR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        preview_port = s.getsockname()[1]
    work = Path(tempfile.mkdtemp(prefix="hutch-p", dir="/tmp"))
    client = work / "client.py"
    client.write_text(CLIENT)
    with bench_env(rootfs, extra_args=("--preview-port", str(preview_port))) as (kw, _raw):
        sb = Sandbox.create(name="bench-preview", **kw)
        try:
            sb.files.write("/tmp/server.py", SERVER)
            sb.files.write("/tmp/client.py", CLIENT)
            sb.commands.spawn("python3 /tmp/server.py").close()
            url = sb.publish_preview_port(8000).url
            host = url.split("//", 1)[1]

            def boxed(fresh: bool) -> ClientResult:
                r = sb.commands.run(f"python3 /tmp/client.py 127.0.0.1 8000 localhost {n} 4 5 {int(fresh)}",
                                    timeout_seconds=300)
                assert r.exit_code == 0, r.stderr
                result: ClientResult = json.loads(r.stdout)
                return result

            def proxied(fresh: bool) -> ClientResult:
                r = subprocess.run([sys.executable, str(client), "127.0.0.1", str(preview_port), host, str(n), "4", "5",
                                    str(int(fresh))], capture_output=True, text=True, check=True, timeout=300)
                result: ClientResult = json.loads(r.stdout)
                return result

            for _ in range(50):  # the server in the box may take a moment to listen
                if sb.commands.run("python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8000))\"").exit_code == 0:
                    break
            direct, through = boxed(False), proxied(False)
            direct_new, through_new = boxed(True), proxied(True)
        finally:
            sb.kill()

    def lat(d: ClientResult) -> dict[str, float]:
        return stats(d["latency"])

    figures = {"preview_get_kept_alive": lat(through), "direct_get_kept_alive": lat(direct),
               "preview_get_new_connection": lat(through_new), "direct_get_new_connection": lat(direct_new)}
    extra = {"preview_requests_per_s_4_clients": float(through["rps"]),
             "direct_requests_per_s_4_clients": float(direct["rps"])}
    return figures, [("preview_get_kept_alive", "direct_get_kept_alive"),
                     ("preview_get_new_connection", "direct_get_new_connection")], extra


def main() -> None:
    main_for("preview", measure)


if __name__ == "__main__":
    main()
