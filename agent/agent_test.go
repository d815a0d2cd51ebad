package main

// The agent's routes on a real socket pair, as the host reaches them (tests/unit/test_guest_router.py,
// test_guest_http1.py, test_guest_spawner.py and test_guest_fsops.py's ground, for this agent).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() {
	closeOnExecAll()
	procTable = newProcTable()
	sigchld := make(chan os.Signal, 1)
	go reap(sigchld)
}

type host struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func newHost(t *testing.T) *host {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, _ := net.FileConn(os.NewFile(uintptr(fds[0]), "host"))
	theirs, _ := net.FileConn(os.NewFile(uintptr(fds[1]), "agent"))
	go serveConn(&Channel{}, theirs)
	h := &host{t: t, conn: ours, r: bufio.NewReader(ours)}
	t.Cleanup(func() { ours.Close() })
	return h
}

type answer struct {
	status  int
	headers map[string]string
	body    []byte
}

func (h *host) send(method, target string, body []byte, chunked bool) {
	var head string
	if chunked {
		head = fmt.Sprintf("%s %s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", method, target)
		h.conn.Write([]byte(head))
		for len(body) > 0 {
			n := 100000
			if n > len(body) {
				n = len(body)
			}
			fmt.Fprintf(h.conn, "%x\r\n", n)
			h.conn.Write(body[:n])
			h.conn.Write([]byte("\r\n"))
			body = body[n:]
		}
		h.conn.Write([]byte("0\r\n\r\n"))
		return
	}
	head = fmt.Sprintf("%s %s HTTP/1.1\r\nContent-Length: %d\r\n\r\n", method, target, len(body))
	h.conn.Write(append([]byte(head), body...))
}

func (h *host) ask(method, target string, body interface{}) answer {
	var data []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		data = b
	default:
		data, _ = json.Marshal(b)
	}
	h.send(method, target, data, false)
	return h.answer()
}

func (h *host) answer() answer {
	h.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := h.r.ReadString('\n')
	if err != nil {
		h.t.Fatalf("no answer: %v", err)
	}
	status, _ := strconv.Atoi(strings.Fields(line)[1])
	headers := map[string]string{}
	for {
		l, _ := h.r.ReadString('\n')
		if l == "\r\n" || l == "" {
			break
		}
		i := strings.IndexByte(l, ':')
		headers[strings.ToLower(strings.TrimSpace(l[:i]))] = strings.TrimSpace(l[i+1:])
	}
	var body []byte
	if headers["transfer-encoding"] == "chunked" {
		for {
			l, _ := h.r.ReadString('\n')
			n, _ := strconv.ParseInt(strings.TrimSpace(l), 16, 64)
			if n == 0 {
				h.r.ReadString('\n')
				break
			}
			part := make([]byte, n)
			io.ReadFull(h.r, part)
			body = append(body, part...)
			h.r.ReadString('\n')
		}
	} else {
		n, _ := strconv.Atoi(headers["content-length"])
		body = make([]byte, n)
		io.ReadFull(h.r, body)
	}
	return answer{status, headers, body}
}

func (a answer) obj(t *testing.T) map[string]interface{} {
	var m map[string]interface{}
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("not JSON: %q", a.body)
	}
	return m
}

func (a answer) events(t *testing.T) []map[string]interface{} {
	var out []map[string]interface{}
	for _, line := range strings.Split(strings.TrimSpace(string(a.body)), "\n") {
		var m map[string]interface{}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not an event: %q", line)
		}
		out = append(out, m)
	}
	return out
}

// refused: the answer's status and code, checking the status is the code's one.
func refused(t *testing.T, a answer) (int, string) {
	m := a.obj(t)
	code, _ := m["code"].(string)
	msg, _ := m["message"].(string)
	if a.headers["content-type"] != "application/json" || msg == "" {
		t.Fatalf("not an error answer: %v %q", a.headers, a.body)
	}
	if ErrorStatus[code] != a.status {
		t.Fatalf("%s answered %d, not its status %d", code, a.status, ErrorStatus[code])
	}
	return a.status, code
}

func needsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting as the box user needs root")
	}
}

func closedPort() int {
	l, _ := net.Listen("tcp4", "127.0.0.1:0")
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestEachRefusalIsAnsweredUnderItsCodesOneStatus(t *testing.T) {
	tmp := t.TempDir()
	os.WriteFile(filepath.Join(tmp, "file"), []byte("x"), 0o644)
	cases := []struct {
		method, target string
		body           interface{}
		status         int
		code           string
	}{
		{"GET", "/v1/nope", nil, 404, ErrNoRoute},
		{"PUT", RouteExec, nil, 404, ErrNoRoute},
		{"POST", RouteHealth, []byte("{}"), 404, ErrNoRoute},
		{"GET", RouteProcs + "/x1", nil, 404, ErrNoRoute},
		{"GET", RouteProcs + "/1234567890", nil, 404, ErrNoRoute},
		{"GET", RouteProcs + "/\xb2", nil, 400, ErrBadRequest},
		{"GET", RouteProcs + "/424242", nil, 404, ErrNoProcess},
		{"POST", RouteProcs + "/424242/" + ProcStdin, []byte("x"), 404, ErrNoProcess},
		{"POST", RouteExec, []byte("{"), 400, ErrBadRequest},
		{"POST", RouteExec, map[string]interface{}{"cmd": 1}, 400, ErrBadRequest},
		{"POST", RouteProcs, []string{"cmd"}, 400, ErrBadRequest},
		{"POST", RouteProcs, map[string]interface{}{"cmd": "true", "pty": map[string]int{"rows": 0, "cols": 80}}, 400, ErrBadRequest},
		{"GET", RouteFiles + "?path=relative", nil, 400, ErrBadPath},
		{"GET", RouteFsStat + "?path=/a/../b", nil, 400, ErrBadPath},
		{"GET", RouteFsStat + "?path=/no/such/thing/here&user=root", nil, 404, ErrNotFound},
		{"GET", RouteFiles + "?path=" + tmp + "&user=root", nil, 400, ErrIsDir},
		{"GET", RouteFiles + "?path=/dev/null&user=root", nil, 400, ErrNotRegular},
		{"GET", RouteFsList + "?path=" + tmp + "&depth=0&user=root", nil, 400, ErrBadRequest},
		{"GET", RouteFsList + "?path=" + tmp + "/file&user=root", nil, 400, ErrNotDir},
		{"PUT", RouteFiles + "?path=" + tmp + "&user=root", []byte("data"), 400, ErrIsDir},
		{"PUT", RouteFiles + "?path=" + tmp + "/file/under&user=root", []byte("data"), 400, ErrNotDir},
		{"PUT", RouteFiles + "?path=" + tmp + "/new&metadata=[]", []byte("data"), 400, ErrBadRequest},
		{"POST", RouteFsMkdir, []byte("[1]"), 400, ErrBadRequest},
		{"POST", RouteFsMkdir, map[string]interface{}{"path": 5}, 400, ErrBadPath},
		{"POST", RouteFsMove, map[string]interface{}{"source": "/a", "destination": "b"}, 400, ErrBadPath},
		{"POST", RouteFsMkdir, map[string]interface{}{"path": tmp + "/file", "user": "root"}, 409, ErrExists},
		{"POST", RouteFsRemove, map[string]interface{}{"path": tmp + "/gone", "user": "root"}, 404, ErrNotFound},
		{"POST", RouteTunnel + "?port=0", nil, 400, ErrBadRequest},
		{"POST", RouteTunnel + "?port=65536", nil, 400, ErrBadRequest},
		{"POST", RouteTunnel + "?port=" + strconv.Itoa(closedPort()), nil, 502, ErrPortClosed},
	}
	h := newHost(t) // one connection: each refusal leaves it serving
	for _, c := range cases {
		status, code := refused(t, h.ask(c.method, c.target, c.body))
		if status != c.status || code != c.code {
			t.Errorf("%s %s: %d %s, not %d %s", c.method, c.target, status, code, c.status, c.code)
		}
	}
	if a := h.ask("GET", RouteHealth, nil); a.status != 200 || a.obj(t)["version"].(float64) != Version {
		t.Fatalf("health after refusals: %d %s", a.status, a.body)
	}
}

func TestABodyLeftMidwayIsDiscardedAndTheConnectionServesOn(t *testing.T) {
	tmp := t.TempDir()
	for _, chunked := range []bool{false, true} {
		h := newHost(t)
		body := []byte(strings.Repeat("x", 5*chunkSize+17))
		h.send("PUT", RouteFiles+"?path="+tmp+"&user=root", body, chunked) // refused before a byte is read
		if _, code := refused(t, h.answer()); code != ErrIsDir {
			t.Fatalf("chunked=%v: %s", chunked, code)
		}
		if a := h.ask("GET", RouteHealth, nil); a.status != 200 {
			t.Fatalf("chunked=%v: the connection did not serve on: %d", chunked, a.status)
		}
	}
}

func TestBadRequestLinesAnd405EndTheConnection(t *testing.T) {
	h := newHost(t)
	h.conn.Write([]byte("NONSENSE\r\n\r\n"))
	if a := h.answer(); a.status != 400 || a.headers["connection"] != "close" {
		t.Fatalf("%d %v", a.status, a.headers)
	}
	h = newHost(t)
	if a := h.ask("DELETE", RouteHealth, nil); a.status != 405 {
		t.Fatalf("%d", a.status)
	}
}

func TestAWriteAndAReadOfAFile(t *testing.T) {
	tmp := t.TempDir()
	h := newHost(t)
	a := h.ask("PUT", RouteFiles+"?path="+tmp+"/f.txt&user=root", []byte("hello"))
	if a.status != 200 || a.obj(t)["size"].(float64) != 5 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	a = h.ask("GET", RouteFiles+"?path="+tmp+"/f.txt&user=root", nil)
	if a.status != 200 || string(a.body) != "hello" {
		t.Fatalf("%d %q", a.status, a.body)
	}
	entries, _ := os.ReadDir(tmp)
	if len(entries) != 1 { // no temp file left behind
		t.Fatalf("%v", entries)
	}
}

func run(t *testing.T, h *host, req map[string]interface{}) []map[string]interface{} {
	a := h.ask("POST", RouteExec, req)
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	return a.events(t)
}

func outputOf(evs []map[string]interface{}, kind string) string {
	var b strings.Builder
	for _, e := range evs {
		if e["t"] == kind {
			b.WriteString(e["d"].(string))
		}
	}
	return b.String()
}

func last(evs []map[string]interface{}) map[string]interface{} { return evs[len(evs)-1] }

func TestACommandRunsAsTheBoxUserAndReportsItsOutputAndExit(t *testing.T) {
	needsRoot(t)
	h := newHost(t)
	evs := run(t, h, map[string]interface{}{"cmd": "id -u; id -g; id -G; echo err >&2; exit 3", "cwd": "/"})
	if evs[0]["t"] != EvStart || outputOf(evs, EvStdout) != "1000\n1000\n1000\n" || outputOf(evs, EvStderr) != "err\n" {
		t.Fatalf("%v", evs)
	}
	if e := last(evs); e["t"] != EvExit || e["code"].(float64) != 3 || e["timed_out"] != false {
		t.Fatalf("%v", e)
	}
	evs = run(t, h, map[string]interface{}{"cmd": "id -u; echo $HOME $FOO", "user": "root", "env": map[string]string{"FOO": "bar"}})
	if outputOf(evs, EvStdout) != "0\n/root bar\n" {
		t.Fatalf("%v", evs)
	}
}

func TestNoDescriptorOfTheAgentsReachesACommand(t *testing.T) {
	needsRoot(t)
	h := newHost(t)
	evs := run(t, h, map[string]interface{}{"cmd": "ls /proc/self/fd", "user": "root"})
	if got := strings.Fields(outputOf(evs, EvStdout)); len(got) != 4 { // 0, 1, 2 and ls's own
		t.Fatalf("%v", got)
	}
}

func TestATimeoutKillsTheCommandAndWhatItLeftDoesNotHoldTheCall(t *testing.T) {
	needsRoot(t)
	h := newHost(t)
	start := time.Now()
	evs := run(t, h, map[string]interface{}{"cmd": "sleep 30", "timeout": 0.3, "user": "root"})
	if e := last(evs); e["code"] != nil || e["timed_out"] != true || time.Since(start) > 5*time.Second {
		t.Fatalf("%v after %v", e, time.Since(start))
	}
	start = time.Now()
	evs = run(t, h, map[string]interface{}{"cmd": "sleep 30 & echo started", "user": "root"})
	if e := last(evs); e["code"].(float64) != 0 || outputOf(evs, EvStdout) != "started\n" || time.Since(start) > 5*time.Second {
		t.Fatalf("%v after %v", evs, time.Since(start))
	}
}

func TestACommandThatCannotStartIsAnErrorEvent(t *testing.T) {
	needsRoot(t)
	h := newHost(t)
	evs := run(t, h, map[string]interface{}{"cmd": "true", "cwd": "/no/such/dir"})
	if len(evs) != 1 || evs[0]["t"] != EvError || evs[0]["code"] != ErrBadCwd {
		t.Fatalf("%v", evs)
	}
}

func TestASpawnedProcessTakesStdinSignalsAndReplaysItsOutput(t *testing.T) {
	needsRoot(t)
	h := newHost(t)
	a := h.ask("POST", RouteProcs, map[string]interface{}{"cmd": "cat; echo done", "user": "root"})
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	pid := int(a.obj(t)["pid"].(float64))
	base := RouteProcs + "/" + strconv.Itoa(pid)
	if a := h.ask("POST", base+"/"+ProcStdin, []byte("hi\n")); a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if a := h.ask("POST", base+"/"+ProcStdinClose, nil); a.status != 200 {
		t.Fatalf("%d", a.status)
	}
	evs := h.ask("GET", base+"/"+ProcEvents, nil).events(t)
	if outputOf(evs, EvStdout) != "hi\ndone\n" || last(evs)["t"] != EvExit || last(evs)["s"] == nil {
		t.Fatalf("%v", evs)
	}
	if _, code := refused(t, h.ask("POST", base+"/"+ProcStdin, []byte("x"))); code != ErrStdinClosed {
		t.Fatal(code)
	}
	if _, code := refused(t, h.ask("POST", base+"/"+ProcSignal, map[string]interface{}{"signal": 99})); code != ErrBadRequest {
		t.Fatal(code)
	}
	if _, code := refused(t, h.ask("POST", base+"/"+ProcResize, map[string]interface{}{"rows": 5, "cols": 5})); code != ErrNotTTY {
		t.Fatal(code)
	}
	if a := h.ask("POST", base+"/"+ProcSignal, map[string]interface{}{"signal": 15}); a.obj(t)["signalled"] != false {
		t.Fatalf("%s", a.body)
	}
	big := make([]byte, maxStdinBody+1)
	if _, code := refused(t, h.ask("POST", base+"/"+ProcStdin, big)); code != ErrBodyTooLarge {
		t.Fatal(code)
	}
}

func TestATerminalIsTheProcesssOwn(t *testing.T) {
	needsRoot(t)
	h := newHost(t)
	a := h.ask("POST", RouteProcs, map[string]interface{}{"cmd": "stty size; tty; echo $TERM", "pty": map[string]int{"rows": 30, "cols": 100}})
	pid := int(a.obj(t)["pid"].(float64))
	evs := h.ask("GET", RouteProcs+"/"+strconv.Itoa(pid)+"/"+ProcEvents, nil).events(t)
	out := outputOf(evs, EvStdout)
	if !strings.HasPrefix(out, "30 100\r\n/dev/pts/") || !strings.HasSuffix(out, "xterm-256color\r\n") {
		t.Fatalf("%q", out)
	}
}

func TestTooManySpawnedProcessesIs429(t *testing.T) {
	needsRoot(t)
	old := maxRunning
	maxRunning = 1
	defer func() { maxRunning = old }()
	h := newHost(t)
	a := h.ask("POST", RouteProcs, map[string]interface{}{"cmd": "sleep 30", "user": "root"})
	pid := int(a.obj(t)["pid"].(float64))
	defer killGroup(pid, syscall.SIGKILL)
	if status, code := refused(t, h.ask("POST", RouteProcs, map[string]interface{}{"cmd": "true"})); status != 429 || code != ErrTooManyProcs {
		t.Fatal(code)
	}
}

func TestUTF8IsDecodedAcrossReadsAndBadBytesAreReplacedAsPythonDoes(t *testing.T) {
	d := &u8dec{}
	euro := "\u20ac"
	if got := d.decode([]byte(euro[:2]), false) + d.decode([]byte(euro[2:]+"a"), false); got != euro+"a" {
		t.Fatalf("%q", got)
	}
	if got := d.decode([]byte("\xe2\x82a\xff"), false); got != "\ufffda\ufffd" {
		t.Fatalf("%q", got)
	}
	if got := d.decode([]byte("\xe2\x82"), false) + d.decode(nil, true); got != "\ufffd" {
		t.Fatalf("%q", got)
	}
}
