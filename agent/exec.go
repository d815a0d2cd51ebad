package main

// Starting a command in the box and pumping its output (launch.py, routes_exec.py): shared by exec
// and spawned processes. The box user's commands start with the user's ids straight from the
// agent (Go's fork-exec drops them in the child), so no helper process is needed.

import (
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
	"unsafe"
)

const (
	pingEvery   = 10 * time.Second
	exitGrace   = 100 * time.Millisecond // output still read after the command exits
	killGrace   = 2 * time.Second        // how long a command killed at its deadline has to be reported gone
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	ttyGID      = 5
	readSize    = 256 * 1024
)

var proxyEnv = func() []kv {
	proxy := "http://127.0.0.1:" + strconv.Itoa(ProxyPort)
	no := "localhost,127.0.0.1,::1,0.0.0.0"
	return []kv{{"HTTP_PROXY", proxy}, {"HTTPS_PROXY", proxy}, {"http_proxy", proxy}, {"https_proxy", proxy},
		{"NO_PROXY", no}, {"no_proxy", no}}
}()

// envMap is an environment that keeps its order of first insertion (as a Python dict does).
type envMap struct {
	keys []string
	vals map[string]string
}

func (e *envMap) set(k, v string) {
	if _, ok := e.vals[k]; !ok {
		e.keys = append(e.keys, k)
	}
	e.vals[k] = v
}

func (e *envMap) setDefault(k, v string) {
	if _, ok := e.vals[k]; !ok {
		e.set(k, v)
	}
}

func (e *envMap) list() []string {
	out := make([]string, 0, len(e.keys))
	for _, k := range e.keys {
		out = append(out, k+"="+e.vals[k])
	}
	return out
}

// pyStr is Python's str() of a JSON value, as the Python agent took env values.
func pyStr(v interface{}) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	default:
		return string(mustJSON(x))
	}
}

// commandEnv: a login-like environment for the command's user with the caller's variables on top,
// and that user's home.
func commandEnv(asRoot bool, extra interface{}) (*envMap, string) {
	home, user := BoxHome, BoxUser
	if asRoot {
		home, user = "/root", "root"
	}
	env := &envMap{vals: map[string]string{}}
	for _, p := range []kv{{"PATH", defaultPath}, {"HOME", home}, {"USER", user}, {"LOGNAME", user},
		{"SHELL", "/bin/sh"}, {"LANG", "C.UTF-8"}} {
		env.set(p.k, p.v.(string))
	}
	for _, p := range proxyEnv {
		env.set(p.k, p.v.(string))
	}
	for _, p := range trustEnv {
		env.set(p.k, p.v.(string))
	}
	switch x := extra.(type) {
	case map[string]interface{}:
		for _, k := range sortedKeys(x) {
			env.set(k, pyStr(x[k]))
		}
	case nil:
	case []interface{}:
		if len(x) > 0 {
			panic(errors.New("AttributeError"))
		}
	default:
		if truthy(x) {
			panic(errors.New("AttributeError"))
		}
	}
	return env, home
}

func truthy(v interface{}) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case []interface{}:
		return len(x) > 0
	case map[string]interface{}:
		return len(x) > 0
	default:
		s := pyStr(x)
		f, err := strconv.ParseFloat(s, 64)
		return err != nil || f != 0
	}
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// commandCwd: the request's cwd, else the user's home if it is there, else "/".
func commandCwd(req map[string]interface{}, home string) string {
	if cwd, ok := req["cwd"].(string); ok && cwd != "" {
		return cwd
	}
	if v := req["cwd"]; v != nil && truthy(v) {
		panic(errors.New("TypeError"))
	}
	if isDir(home) {
		return home
	}
	return "/"
}

// strerror: the C library's message for an errno, as Python shows it.
func strerror(e syscall.Errno) string {
	s := e.Error()
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// startProblem: the refusal for a command that could not start.
func startProblem(err error, cwd string) *Refusal {
	e := errnoOf(err)
	switch e {
	case syscall.ENOENT, syscall.ENOTDIR:
		return &Refusal{ErrBadCwd, "no such directory: " + cwd}
	case syscall.EACCES, syscall.EPERM:
		return &Refusal{ErrBadCwd, "no permission to enter " + cwd}
	}
	return &Refusal{ErrStartFailed, "could not start: [Errno " + strconv.Itoa(int(e)) + "] " + strerror(e)}
}

// Launched is a started command.
type Launched struct {
	pid     int
	exited  chan syscall.WaitStatus
	outputs []*output
	stdin   *os.File // the write end of its stdin pipe, or the terminal's master side
	pty     bool
}

type output struct {
	f    *os.File
	kind string
}

type winsize struct{ rows, cols, x, y uint16 }

func setSize(f *os.File, rows, cols int) error {
	ws := winsize{uint16(rows), uint16(cols), 0, 0}
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = conn.Control(func(fd uintptr) {
		_, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws)))
		if e != 0 {
			ierr = e
		}
	})
	if err != nil {
		return err
	}
	return ierr
}

// openPty: a new terminal's master (pollable) and its slave.
func openPty() (*os.File, *os.File, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var n uint32
	var unlock int32
	conn, _ := master.SyscallConn()
	var ierr error
	conn.Control(func(fd uintptr) {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
			ierr = e
			return
		}
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
			ierr = e
		}
	})
	if ierr != nil {
		master.Close()
		return nil, nil, ierr
	}
	fd, err := syscall.Open("/dev/pts/"+strconv.Itoa(int(n)), syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, os.NewFile(uintptr(fd), "pts"), nil
}

// launch starts a command in its own session. Its stdin is /dev/null, a pipe, or (with "pty") a
// new terminal that is also its stdout, stderr and controlling terminal.
func launch(argv []string, cwd string, env []string, asRoot bool, stdin string, rows, cols int) (*Launched, error) {
	var theirs []*os.File
	defer func() {
		for _, f := range theirs {
			f.Close()
		}
	}()
	l := &Launched{}
	var stdio []uintptr
	fail := func(err error) (*Launched, error) {
		for _, o := range l.outputs {
			o.f.Close()
		}
		if l.stdin != nil && !l.pty {
			l.stdin.Close()
		}
		return nil, err
	}
	if stdin == "pty" {
		master, slave, err := openPty()
		if err != nil {
			return nil, err
		}
		theirs = append(theirs, slave)
		l.pty = true
		l.stdin = master
		l.outputs = []*output{{master, EvStdout}}
		if !asRoot { // the box user's own terminal, as a login would give it
			slave.Chown(BoxUID, ttyGID)
			slave.Chmod(0o620)
		}
		if rows == 0 {
			rows, cols = 24, 80
		}
		if err := setSize(master, rows, cols); err != nil {
			return fail(err)
		}
		stdio = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
	} else {
		outR, outW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		l.outputs = append(l.outputs, &output{outR, EvStdout})
		theirs = append(theirs, outW)
		errR, errW, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		l.outputs = append(l.outputs, &output{errR, EvStderr})
		theirs = append(theirs, errW)
		var in *os.File
		if stdin == "pipe" {
			inR, inW, err := os.Pipe()
			if err != nil {
				return fail(err)
			}
			in, l.stdin = inR, inW
		} else {
			in, err = os.Open(os.DevNull)
			if err != nil {
				return fail(err)
			}
		}
		theirs = append(theirs, in)
		stdio = []uintptr{in.Fd(), outW.Fd(), errW.Fd()}
	}
	sys := &syscall.SysProcAttr{Setsid: true, Setctty: l.pty, Ctty: 0}
	if !asRoot {
		sys.Credential = &syscall.Credential{Uid: BoxUID, Gid: BoxGID, Groups: []uint32{}}
	}
	pid, exited, err := forkExec(argv[0], argv, &syscall.ProcAttr{Dir: cwd, Env: env, Files: stdio, Sys: sys})
	if err != nil {
		if l.pty {
			l.stdin.Close()
			l.outputs = nil
		}
		return fail(err)
	}
	l.pid, l.exited = pid, exited
	return l, nil
}

// killGroup signals the command's whole process group (its session); false if it is gone.
func killGroup(pid int, sig syscall.Signal) bool {
	err := syscall.Kill(-pid, sig)
	return err != syscall.ESRCH
}

type piece struct {
	i    int
	data []byte
	eof  bool
}

// pump relays a command's output until it has exited and its output is drained; kills its process
// group at the deadline. Returns its exit code and whether it timed out; closes the outputs.
// Something it left in the background may hold the pipes open for ever: once the command itself
// has exited, what is left is read for a moment and the pipes are let go. A ping goes to the sink
// after 10 s of silence.
func pump(l *Launched, send func(Ev), timeout time.Duration) (int, bool) {
	pieces := make(chan piece)
	done := make(chan struct{})
	defer close(done)
	decoders := make([]*u8dec, len(l.outputs))
	for i, o := range l.outputs {
		decoders[i] = &u8dec{}
		go func(i int, f *os.File) {
			for {
				buf := make([]byte, readSize)
				n, err := f.Read(buf)
				if n > 0 {
					select {
					case pieces <- piece{i: i, data: buf[:n]}:
					case <-done:
						return
					}
				}
				if err != nil { // EOF, or EIO: a terminal whose every other end has closed
					select {
					case pieces <- piece{i: i, eof: true}:
					case <-done:
					}
					return
				}
			}
		}(i, o.f)
	}
	open := len(l.outputs)
	closed := make([]bool, len(l.outputs))
	code, exitKnown, timedOut := 0, false, false
	var deadline, killDeadline, graceEnd <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	} else if timeout < 0 {
		c := make(chan time.Time, 1)
		c <- time.Now()
		deadline = c
	}
	ping := time.NewTimer(pingEvery)
	defer ping.Stop()
	exited := l.exited
loop:
	for open > 0 || !exitKnown {
		select {
		case p := <-pieces:
			if p.eof {
				open--
				closed[p.i] = true
				l.outputs[p.i].f.Close()
				if tail := decoders[p.i].decode(nil, true); tail != "" {
					send(Ev{T: l.outputs[p.i].kind, D: tail})
				}
				continue
			}
			if text := decoders[p.i].decode(p.data, false); text != "" {
				send(Ev{T: l.outputs[p.i].kind, D: text})
				if !ping.Stop() {
					select {
					case <-ping.C:
					default:
					}
				}
				ping.Reset(pingEvery)
			}
		case ws := <-exited:
			code, exitKnown, exited = exitCode(ws), true, nil
			t := time.NewTimer(exitGrace)
			defer t.Stop()
			graceEnd = t.C
			killDeadline = nil
		case <-graceEnd:
			break loop
		case <-deadline:
			deadline = nil
			timedOut = true
			killGroup(l.pid, syscall.SIGKILL)
			if !exitKnown {
				t := time.NewTimer(killGrace)
				defer t.Stop()
				killDeadline = t.C
			}
		case <-killDeadline:
			code = 255 // killed, and its exit never reported: the call ends anyway
			break loop
		case <-ping.C:
			send(Ev{T: EvPing})
			ping.Reset(pingEvery)
		}
	}
	for i, o := range l.outputs { // held open by something in the background
		if !closed[i] {
			o.f.Close()
		}
	}
	return code, timedOut
}

// u8dec decodes UTF-8 incrementally, each invalid sequence's maximal part replaced by U+FFFD (as
// Python's decoder with errors="replace").
type u8dec struct{ pend []byte }

func (d *u8dec) decode(b []byte, final bool) string {
	data := b
	if len(d.pend) > 0 {
		data = append(d.pend, b...)
		d.pend = nil
	}
	if utf8.Valid(data) {
		return string(data)
	}
	var sb strings.Builder
	i := 0
	for i < len(data) {
		c := data[i]
		if c < 0x80 {
			sb.WriteByte(c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r != utf8.RuneError || size > 1 {
			sb.Write(data[i : i+size])
			i += size
			continue
		}
		n, incomplete := validPrefix(data[i:])
		if incomplete && !final {
			d.pend = append([]byte(nil), data[i:]...)
			break
		}
		sb.WriteString("\uFFFD")
		i += n
	}
	return sb.String()
}

// validPrefix: how many bytes from b[0] form the start of a well-formed sequence (at least 1), and
// whether b ends before the sequence could.
func validPrefix(b []byte) (int, bool) {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1, false
	}
	n := 1
	for k := 0; k < need; k++ {
		if n >= len(b) {
			return n, true
		}
		if b[n] < lo || b[n] > hi {
			return n, false
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n, false
}

// --- the exec route ---------------------------------------------------------------------------------

// commandRequest: the body of an exec or spawn, a JSON object with a string cmd (else refused).
func commandRequest(ex *Exchange) map[string]interface{} {
	req, err := ex.jsonBody()
	if err == nil {
		if _, ok := req["cmd"].(string); !ok {
			err = errors.New("a JSON object with a string cmd is needed")
		}
	}
	if err != nil {
		refuse(ErrBadRequest, "bad command request: %v", err)
	}
	return req
}

func timeoutOf(v interface{}) time.Duration {
	if v == nil || !truthy(v) {
		return 0
	}
	s := pyStr(v)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic(errors.New("TypeError"))
	}
	if math.IsNaN(f) || f >= float64(math.MaxInt64)/float64(time.Second) {
		return 0 // no deadline a clock could reach (the Python agent's never came due either)
	}
	d := time.Duration(f * float64(time.Second))
	if d == 0 {
		d = -1
	}
	return d
}

// runExec: start, exit and the output between as events. A command that cannot start is an error
// event, not an error answer: the stream has begun by then.
func runExec(ex *Exchange) {
	req := commandRequest(ex)
	asRoot := req["user"] == "root"
	env, home := commandEnv(asRoot, req["env"])
	cwd := commandCwd(req, home)
	timeout := timeoutOf(req["timeout"])
	stream := newEventStream(ex)
	l, err := launch([]string{"/bin/sh", "-c", req["cmd"].(string)}, cwd, env.list(), asRoot, "null", 0, 0)
	if err != nil {
		p := startProblem(err, cwd)
		stream.Send(Ev{T: EvError, Fields: []kv{{"code", p.Code}, {"message", p.Message}}})
		stream.Close()
		return
	}
	stream.Send(Ev{T: EvStart, Fields: []kv{{"pid", l.pid}}})
	code, timedOut := pump(l, stream.Send, timeout)
	var c interface{} = code
	if timedOut {
		c = nil
	}
	stream.Send(Ev{T: EvExit, Fields: []kv{{"code", c}, {"timed_out", timedOut}}})
	stream.Close()
}
