package main

// Spawned processes (procs.py, routes_procs.py): long-lived commands with stdin, signals, an
// optional terminal, and output kept in a bounded buffer so a client can go away and come back
// (and the box can be paused).

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

const (
	bufferChars     = 1 << 20 // output kept per process for a client that attaches later
	eventCost       = 64      // what one buffered event costs beyond its text
	keepFinished    = 32
	stdinWait       = 10 * time.Second
	maxCommandShown = 1024
	maxStdinBody    = 1 << 20
	nsig            = 65
)

var maxRunning = 64 // a variable for the tests' sake

type seqEv struct {
	seq int
	ev  Ev
}

// Proc is one spawned process and its output buffer.
type Proc struct {
	pid       int
	cmd, user string
	pty       bool
	startedAt float64

	stdinMu sync.Mutex
	stdin   *os.File

	mu       sync.Mutex
	changed  chan struct{} // closed (and replaced) at every change
	events   []seqEv
	chars    int
	nextSeq  int
	dropped  int
	exitCode *int
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func (p *Proc) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Send takes an event of the pump's.
func (p *Proc) Send(ev Ev) {
	if ev.T == EvPing {
		return // readers make their own
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.appendEv(ev)
	for p.chars > bufferChars && len(p.events) > 1 {
		old := p.events[0]
		p.events[0] = seqEv{}
		p.events = p.events[1:]
		n := utf8.RuneCountInString(old.ev.D)
		p.chars -= n + eventCost
		p.dropped += n
	}
	p.notify()
}

func (p *Proc) appendEv(ev Ev) {
	ev.S, ev.HasS = p.nextSeq, true
	p.events = append(p.events, seqEv{p.nextSeq, ev})
	p.nextSeq++
	p.chars += utf8.RuneCountInString(ev.D) + eventCost
}

func (p *Proc) finish(code int) {
	p.stdinMu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.stdinMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.exitCode = &code
	p.appendEv(Ev{T: EvExit, Fields: []kv{{"code", code}, {"timed_out", false}}})
	p.notify()
}

// read: events from sequence `cursor` on (waiting up to `wait` for one), the cursor after them, and
// whether the exit is among them. A gap (dropped output) is said first.
func (p *Proc) read(cursor int, wait time.Duration) ([]Ev, int, bool) {
	p.mu.Lock()
	if p.nextSeq <= cursor && p.exitCode == nil {
		ch := p.changed
		p.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	first := p.nextSeq
	if len(p.events) > 0 {
		first = p.events[0].seq
	}
	var batch []Ev
	if cursor < first && p.dropped > 0 {
		batch = append(batch, Ev{T: EvDropped, Fields: []kv{{"chars", p.dropped}}})
	}
	skip := cursor - first
	if skip < 0 {
		skip = 0
	}
	for i := skip; i < len(p.events); i++ {
		batch = append(batch, p.events[i].ev)
	}
	return batch, p.nextSeq, p.exitCode != nil
}

func (p *Proc) info() map[string]interface{} {
	cmd := p.cmd
	if utf8.RuneCountInString(cmd) > maxCommandShown {
		r := []rune(cmd)
		cmd = string(r[:maxCommandShown])
	}
	p.mu.Lock()
	var code interface{}
	if p.exitCode != nil {
		code = *p.exitCode
	}
	p.mu.Unlock()
	return map[string]interface{}{"pid": p.pid, "command": cmd, "user": p.user, "pty": p.pty,
		"started_at": p.startedAt, "exit_code": code}
}

func (p *Proc) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitCode != nil
}

func (p *Proc) writeStdin(data []byte) {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		refuse(ErrStdinClosed, "the stdin of process %d is closed", p.pid)
	}
	p.stdin.SetWriteDeadline(time.Now().Add(stdinWait))
	n, err := p.stdin.Write(data)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			refuse(ErrStdinFull, "process %d has not read its stdin for %.0f s; %d of %d bytes went in",
				p.pid, stdinWait.Seconds(), n, len(data))
		}
		refuse(ErrStdinClosed, "stdin of process %d: %s", p.pid, strerror(errnoOf(err)))
	}
}

func (p *Proc) closeStdin() {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return
	}
	if p.pty { // a terminal's end of input (^D): closing its master would hang it up
		p.stdin.SetWriteDeadline(time.Now().Add(stdinWait))
		p.stdin.Write([]byte{4})
		return
	}
	p.stdin.Close()
	p.stdin = nil
}

func (p *Proc) signal(sig int) bool {
	if p.ended() {
		return false
	}
	return killGroup(p.pid, syscall.Signal(sig))
}

func (p *Proc) resize(rows, cols int) {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if !p.pty || p.stdin == nil {
		refuse(ErrNotTTY, "process %d has no terminal", p.pid)
	}
	if err := setSize(p.stdin, rows, cols); err != nil {
		panic(err)
	}
}

// ProcTable holds the spawned processes, running and recently ended.
type ProcTable struct {
	mu    sync.Mutex
	procs map[int]*Proc
}

func newProcTable() *ProcTable { return &ProcTable{procs: map[int]*Proc{}} }

func dims(rows, cols interface{}) (int, int, bool) {
	r, ok1 := jsonInt(rows)
	c, ok2 := jsonInt(cols)
	if !ok1 || !ok2 || r < 1 || r > 1000 || c < 1 || c > 1000 {
		return 0, 0, false
	}
	return int(r), int(c), true
}

// jsonInt: a JSON number that Python reads as an int (no fraction, no exponent).
func jsonInt(v interface{}) (int64, bool) {
	n, ok := v.(jsonNumber)
	if !ok {
		return 0, false
	}
	s := string(n)
	if strings.ContainsAny(s, ".eE") {
		return 0, false
	}
	i, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return i, true
}

func (t *ProcTable) start(req map[string]interface{}) *Proc {
	cmd := req["cmd"].(string)
	size, hasSize := req["pty"]
	if size == nil {
		hasSize = false
	}
	rows, cols := 0, 0
	if hasSize {
		m, ok := size.(map[string]interface{})
		if ok {
			rows, cols, ok = dims(m["rows"], m["cols"])
		}
		if !ok {
			refuse(ErrBadRequest, "pty must be {rows, cols} within 1..1000")
		}
	}
	asRoot := req["user"] == "root"
	env, home := commandEnv(asRoot, req["env"])
	if hasSize {
		env.setDefault("TERM", "xterm-256color")
	}
	cwd := commandCwd(req, home)
	t.mu.Lock()
	defer t.mu.Unlock() // the count, the start and the entry at once: concurrent spawns cannot pass the cap
	running := 0
	for _, p := range t.procs {
		if !p.ended() {
			running++
		}
	}
	if running >= maxRunning {
		refuse(ErrTooManyProcs, "at most %d spawned processes run at once", maxRunning)
	}
	stdin := "pipe"
	if hasSize {
		stdin = "pty"
	}
	l, err := launch([]string{"/bin/sh", "-c", cmd}, cwd, env.list(), asRoot, stdin, rows, cols)
	if err != nil {
		panic(startProblem(err, cwd))
	}
	user := BoxUser
	if asRoot {
		user = "root"
	}
	p := &Proc{pid: l.pid, cmd: cmd, user: user, pty: hasSize, startedAt: now(), stdin: l.stdin,
		changed: make(chan struct{})}
	t.procs[p.pid] = p
	t.forgetOld()
	go func() {
		code := 255
		defer func() { p.finish(code) }()
		survive(func() { code, _ = pump(l, p.Send, 0) })
	}()
	return p
}

func (t *ProcTable) forgetOld() {
	var finished []*Proc
	for _, p := range t.procs {
		if p.ended() {
			finished = append(finished, p)
		}
	}
	sort.Slice(finished, func(i, j int) bool {
		if finished[i].startedAt != finished[j].startedAt {
			return finished[i].startedAt < finished[j].startedAt
		}
		return finished[i].pid < finished[j].pid
	})
	for i := 0; i < len(finished)-keepFinished; i++ {
		delete(t.procs, finished[i].pid)
	}
}

func (t *ProcTable) get(pid int) *Proc {
	t.mu.Lock()
	p := t.procs[pid]
	t.mu.Unlock()
	if p == nil {
		refuse(ErrNoProcess, "no process %d was spawned in this box (or it ended long ago)", pid)
	}
	return p
}

func (t *ProcTable) running() []*Proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*Proc
	for _, p := range t.procs {
		if !p.ended() {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].startedAt < out[j].startedAt })
	return out
}

func parseResize(req interface{}) (int, int) {
	m, ok := req.(map[string]interface{})
	if ok {
		if r, c, ok := dims(m["rows"], m["cols"]); ok {
			return r, c
		}
	}
	refuse(ErrBadRequest, "resize takes {rows, cols} within 1..1000")
	return 0, 0
}

func parseSignal(req interface{}) int {
	if m, ok := req.(map[string]interface{}); ok {
		if s, ok := jsonInt(m["signal"]); ok && s >= 1 && s < nsig {
			return int(s)
		}
	}
	refuse(ErrBadRequest, "signal must be a number in 1..%d", nsig-1)
	return 0
}

// --- routes -----------------------------------------------------------------------------------------

func spawnProc(ex *Exchange) {
	ex.answerJSON(procTable.start(commandRequest(ex)).info())
}

func listProcs(ex *Exchange) {
	list := []interface{}{}
	for _, p := range procTable.running() {
		list = append(list, p.info())
	}
	ex.answerJSON(map[string]interface{}{"procs": list})
}

// procRoute: a route under /procs/{pid}/ (or none: answered no_such_route).
func procRoute(ex *Exchange, method string) {
	rest := strings.TrimPrefix(ex.route(), RouteProcs+"/")
	pidText, action := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		pidText, action = rest[:i], rest[i+1:]
	}
	if !isDigits(pidText) || len(pidText) > 9 {
		if pidText != "" && len(pidText) <= 9 && latin1Digits(pidText) { // digits to Python's isdigit(), not to int()
			refuse(ErrBadRequest, "bad request: invalid literal for int() with base 10: %s", pyRepr(latin1(pidText)))
		}
		refuse(ErrNoRoute, "no such route")
	}
	pid, _ := strconv.Atoi(pidText)
	proc := procTable.get(pid)
	if method == "GET" && action == "" {
		ex.answerJSON(proc.info())
		return
	}
	if method == "GET" && action == ProcEvents {
		follow(ex, proc)
		return
	}
	if method != "POST" {
		refuse(ErrNoRoute, "no such route")
	}
	var body []byte
	buf := make([]byte, chunkSize)
	b := ex.Body()
	for {
		n, err := b.Read(buf)
		body = append(body, buf[:n]...)
		if len(body) > maxStdinBody {
			refuse(ErrBodyTooLarge, "requests are limited to %d bytes", maxStdinBody)
		}
		if err != nil {
			if err == errBodyEnded {
				panic(connGone{err})
			}
			if err.Error() != "EOF" {
				panic(err)
			}
			break
		}
	}
	switch action {
	case ProcStdin:
		proc.writeStdin(body)
		ex.answerJSON(map[string]interface{}{})
		return
	case ProcStdinClose:
		proc.closeStdin()
		ex.answerJSON(map[string]interface{}{})
		return
	}
	var req interface{} = map[string]interface{}{}
	if len(body) > 0 {
		var err error
		req, err = parseAny(body)
		if err != nil {
			refuse(ErrBadRequest, "bad request: %v", err)
		}
	}
	switch action {
	case ProcSignal:
		ex.answerJSON(map[string]interface{}{"signalled": proc.signal(parseSignal(req))})
	case ProcResize:
		r, c := parseResize(req)
		proc.resize(r, c)
		ex.answerJSON(map[string]interface{}{})
	default:
		refuse(ErrNoRoute, "no such route")
	}
}

// latin1Digits: whether each byte (a Latin-1 character of the request line) is a digit to Python's
// str.isdigit: 0-9, and the superscripts two, three and one.
func latin1Digits(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9') && c != 0xB2 && c != 0xB3 && c != 0xB9 {
			return false
		}
	}
	return true
}

func latin1(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = rune(s[i])
	}
	return string(r)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// follow replays the process' buffered output from `after`, then streams on until it exits.
func follow(ex *Exchange, proc *Proc) {
	after := ex.query()["after"]
	if after == "" {
		after = "-1"
	}
	cursor := 0
	if isDigits(strings.TrimLeft(after, "-")) {
		if n, err := strconv.Atoi(after); err == nil {
			cursor = n + 1
		}
	}
	stream := newEventStream(ex)
	done := false
	for stream.alive && !done {
		var batch []Ev
		batch, cursor, done = proc.read(cursor, pingEvery)
		for _, ev := range batch {
			stream.Send(ev)
		}
		if len(batch) == 0 {
			stream.Send(Ev{T: EvPing})
		}
	}
	stream.Close()
}

var _ = fmt.Sprintf
