"""Scripts the egress tests and the egress benchmark run in boxes, and how they run one."""

from __future__ import annotations

from typing import Any

# WORKERS threads opening denied connections for SECONDS: the proxy's answer to each, by its
# X-Hutch-Egress tag.
FLOOD_FOR = r'''
import json, socket, sys, threading, time
seconds, workers = float(sys.argv[1]), int(sys.argv[2])
tags, lock = {}, threading.Lock()
def work(w):
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
        try:
            s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
            s.sendall(b"CONNECT flood%d-%d.test:443 HTTP/1.1\r\n\r\n" % (w, n))
            head = s.recv(4096).split(b"\r\n")
            s.close()
            tag = next((h.split(b":", 1)[1].strip().decode() for h in head if h.lower().startswith(b"x-hutch-egress:")),
                       head[0].decode(errors="replace") or "closed")
        except OSError as e:
            tag = type(e).__name__
        with lock:
            tags[tag] = tags.get(tag, 0) + 1
threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(tags))
'''

# N sequential GETs on new connections through the proxy: the seconds each took.
FETCHES = r'''
import json, sys, time, urllib.request
took = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    assert urllib.request.urlopen("http://example.test/", timeout=30).status == 200
    took.append(time.perf_counter() - t)
print(json.dumps(took))
'''


def run_script(box: Any, script: str, *args: object, timeout: float = 120) -> str:
    name = f"/tmp/script-{abs(hash(script))}.py"
    box.files.write(name, script)
    r = box.commands.run(" ".join(["python3", name, *map(str, args)]), timeout_seconds=timeout)
    assert r.exit_code == 0, r.stdout + r.stderr
    return str(r.stdout)
