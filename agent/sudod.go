package main

// The agent's sudo service (sudod.py): runs a command as root (or another user) for the box user's
// `sudo` (hutch/guest/sudo.py, the client, which stays Python). It listens on a Unix socket in the
// box's own abstract namespace. Each connection is one command: the credentials the kernel vouches
// for on its first bytes (SCM_CREDENTIALS) must be the box user's or root's; the request is bounded
// and checked; the command starts in a session of its own on the caller's stdin, stdout and stderr.
// The caller then sends signals for the command's process group and gets its exit; when the caller
// goes away first, the command's group is killed.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	maxSessions    = 128
	requestSeconds = 10 * time.Second
	maxSudoRequest = 4 << 20
	idMax          = 1<<32 - 2

	sudoPID, sudoErrno, sudoCwdErrno, sudoRefused, sudoExit = 1, 2, 3, 4, 5
)

var forwarded = map[syscall.Signal]bool{syscall.SIGHUP: true, syscall.SIGINT: true, syscall.SIGQUIT: true,
	syscall.SIGTERM: true, syscall.SIGUSR1: true, syscall.SIGUSR2: true, syscall.SIGALRM: true,
	syscall.SIGWINCH: true, syscall.SIGCONT: true}

type SudoService struct {
	name     string
	allowed  map[int]bool
	sessions int32
	max      int32
}

func startSudo() {
	s := &SudoService{name: SudoSocket, allowed: map[int]bool{0: true, BoxUID: true}, max: maxSessions}
	s.start()
}

func (s *SudoService) start() error {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.name, Net: "unix"})
	if err != nil {
		return err
	}
	if rc, err := ln.SyscallConn(); err == nil { // accepted sockets inherit it
		rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1) })
	}
	go func() {
		for {
			conn, err := ln.AcceptUnix()
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if atomic.AddInt32(&s.sessions, 1) > s.max {
				atomic.AddInt32(&s.sessions, -1)
				sudoAnswer(conn, sudoErrno, int32(syscall.EAGAIN))
				conn.Close()
				continue
			}
			go func() {
				defer atomic.AddInt32(&s.sessions, -1)
				survive(func() { s.session(conn) })
			}()
		}
	}()
	return nil
}

func sudoAnswer(conn net.Conn, kind byte, value int32) {
	var b [5]byte
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:], uint32(value))
	conn.Write(b[:])
}

type sudoRequest struct {
	argv   []string
	env    []string
	cwd    string
	uid    uint32
	gid    uint32
	groups []uint32
}

func (s *SudoService) session(conn *net.UnixConn) {
	defer conn.Close()
	if rc, err := conn.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1) })
	}
	conn.SetDeadline(time.Now().Add(requestSeconds))
	uid, req, fds, err := readSudoRequest(conn, s.allowed)
	if err != nil {
		return // a caller that sent nothing sensible in time gets nothing
	}
	if !s.allowed[uid] {
		sudoAnswer(conn, sudoRefused, 0)
		return
	}
	pid, exited, err := startSudoCommand(req, fds)
	for _, fd := range fds {
		syscall.Close(fd)
	}
	if err != nil {
		kind := byte(sudoErrno)
		if errors.Is(err, errCwd) {
			kind = sudoCwdErrno
		}
		sudoAnswer(conn, kind, int32(errnoOf(err)))
		return
	}
	conn.SetDeadline(time.Time{})
	sudoAnswer(conn, sudoPID, int32(pid))
	sudoFollow(conn, pid, exited)
}

var errCwd = errors.New("cwd")

type cwdError struct{ errno syscall.Errno }

func (e cwdError) Error() string        { return e.errno.Error() }
func (e cwdError) Is(target error) bool { return target == errCwd }
func (e cwdError) Unwrap() error        { return e.errno }

// readSudoRequest: the uid the kernel vouches for, the request and the caller's stdio (three
// descriptors), or an error. A caller not allowed is told so before anything of its request beyond
// the first bytes is read.
func readSudoRequest(conn *net.UnixConn, allowed map[int]bool) (int, *sudoRequest, []int, error) {
	head := make([]byte, 4)
	oob := make([]byte, syscall.CmsgSpace(3*4)+syscall.CmsgSpace(syscall.SizeofUcred))
	n, oobn, flags, _, err := conn.ReadMsgUnix(head, oob)
	var fds []int
	uid := -1
	if oobn > 0 {
		msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for _, m := range msgs {
				if m.Header.Level != syscall.SOL_SOCKET {
					continue
				}
				if m.Header.Type == syscall.SCM_RIGHTS {
					if got, err := syscall.ParseUnixRights(&m); err == nil {
						fds = append(fds, got...)
					}
				} else if m.Header.Type == syscall.SCM_CREDENTIALS {
					if cred, err := syscall.ParseUnixCredentials(&m); err == nil {
						uid = int(cred.Uid)
					}
				}
			}
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	if err != nil || n == 0 {
		closeAll()
		return uid, nil, nil, io.EOF
	}
	if !allowed[uid] {
		closeAll()
		return uid, nil, nil, nil
	}
	if flags&syscall.MSG_CTRUNC != 0 || len(fds) != 3 {
		closeAll()
		return uid, nil, nil, errors.New("not a request")
	}
	if _, err := io.ReadFull(conn, head[n:]); err != nil {
		closeAll()
		return uid, nil, nil, err
	}
	size := binary.BigEndian.Uint32(head)
	if size > maxSudoRequest {
		closeAll()
		return uid, nil, nil, errors.New("not a request")
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(conn, body); err != nil {
		closeAll()
		return uid, nil, nil, err
	}
	req, err := checkSudoRequest(body)
	if err != nil {
		closeAll()
		return uid, nil, nil, err
	}
	return uid, req, fds, nil
}

// checkSudoRequest: the request, unless it is not what sudo.py sends.
func checkSudoRequest(body []byte) (*sudoRequest, error) {
	bad := errors.New("not a request")
	v, err := parseAny(body)
	if err != nil {
		return nil, bad
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, bad
	}
	str := func(x interface{}) (string, bool) {
		s, ok := x.(string)
		return s, ok && !strings.ContainsRune(s, 0)
	}
	id := func(x interface{}) (uint32, bool) {
		i, ok := jsonInt(x)
		return uint32(i), ok && i >= 0 && i <= idMax
	}
	req := &sudoRequest{}
	argv, ok := m["argv"].([]interface{})
	if !ok || len(argv) == 0 {
		return nil, bad
	}
	for _, a := range argv {
		s, ok := str(a)
		if !ok {
			return nil, bad
		}
		req.argv = append(req.argv, s)
	}
	env, ok := m["env"].(map[string]interface{})
	if !ok {
		return nil, bad
	}
	for _, k := range sortedKeys(env) {
		val, ok := str(env[k])
		if _, kok := str(k); !ok || !kok || k == "" || strings.Contains(k, "=") {
			return nil, bad
		}
		req.env = append(req.env, k+"="+val)
	}
	if req.cwd, ok = str(m["cwd"]); !ok || !strings.HasPrefix(req.cwd, "/") {
		return nil, bad
	}
	if req.uid, ok = id(m["uid"]); !ok {
		return nil, bad
	}
	if req.gid, ok = id(m["gid"]); !ok {
		return nil, bad
	}
	groups, ok := m["groups"].([]interface{})
	if !ok || len(groups) > 65536 {
		return nil, bad
	}
	req.groups = []uint32{}
	for _, g := range groups {
		gid, ok := id(g)
		if !ok {
			return nil, bad
		}
		req.groups = append(req.groups, gid)
	}
	return req, nil
}

// lookPath finds a command as execvpe would in the request's PATH.
func lookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	path := "/bin:/usr/bin"
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			path = kv[5:]
		}
	}
	var first error
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		cand := dir + "/" + argv0
		st, err := os.Stat(cand)
		if err != nil {
			continue
		}
		if st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return cand, nil
		}
		if first == nil {
			first = syscall.EACCES
		}
	}
	if first != nil {
		return "", first
	}
	return "", syscall.ENOENT
}

// startSudoCommand: the command in a session of its own on the caller's stdio, as root, or with the
// requested user's ids and groups.
func startSudoCommand(req *sudoRequest, stdio []int) (int, chan syscall.WaitStatus, error) {
	if st, err := os.Stat(req.cwd); err != nil || !st.IsDir() {
		if err != nil {
			return 0, nil, cwdError{errnoOf(err)}
		}
		return 0, nil, cwdError{syscall.ENOTDIR}
	}
	argv0, err := lookPath(req.argv[0], req.env)
	if err != nil {
		return 0, nil, err
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	if req.uid != 0 || req.gid != 0 {
		sys.Credential = &syscall.Credential{Uid: req.uid, Gid: req.gid, Groups: req.groups}
	}
	files := []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2])}
	pid, exited, err := forkExec(argv0, req.argv, &syscall.ProcAttr{Dir: req.cwd, Env: req.env, Files: files, Sys: sys})
	if err != nil && (errnoOf(err) == syscall.EACCES) && req.uid != 0 {
		if _, serr := os.Stat(req.cwd); serr == nil && !canEnter(req.cwd, req.uid, req.gid, req.groups) {
			return 0, nil, cwdError{syscall.EACCES}
		}
	}
	return pid, exited, err
}

// canEnter: whether a user may search a directory (the mode bits; ACLs aside).
func canEnter(dir string, uid, gid uint32, groups []uint32) bool {
	var st syscall.Stat_t
	if syscall.Stat(dir, &st) != nil {
		return false
	}
	switch {
	case st.Uid == uid:
		return st.Mode&0o100 != 0
	case st.Gid == gid || contains(groups, st.Gid):
		return st.Mode&0o010 != 0
	}
	return st.Mode&0o001 != 0
}

func contains(xs []uint32, x uint32) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// sudoFollow passes the caller's signals to the command's process group and its exit to the
// caller; kills the group if the caller goes away first.
func sudoFollow(conn *net.UnixConn, pid int, exited chan syscall.WaitStatus) {
	var ended int32
	waited := make(chan struct{})
	go func() {
		ws := <-exited
		atomic.StoreInt32(&ended, 1)
		code := ws.ExitStatus()
		if ws.Signaled() {
			code = -int(ws.Signal())
		}
		sudoAnswer(conn, sudoExit, int32(code))
		close(waited)
	}()
	buf := make([]byte, 4)
	for {
		if _, err := io.ReadFull(conn, buf); err != nil {
			break
		}
		sig := syscall.Signal(int32(binary.BigEndian.Uint32(buf)))
		if forwarded[sig] && atomic.LoadInt32(&ended) == 0 {
			syscall.Kill(-pid, sig)
		}
	}
	if atomic.LoadInt32(&ended) == 0 { // the caller died (or was killed at its deadline): so does the command
		syscall.Kill(-pid, syscall.SIGKILL)
	}
	<-waited
}

var _ = json.Marshal
