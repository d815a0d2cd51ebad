package main

// PID 1 of every box (agent.py and channel.py). One process: it reaps every orphan as well as the
// commands it starts (one reaper for all), serves the host on the channel socket, and stops and
// starts listening around a pause. The box lives as long as this process does.

import (
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const wakePoll = 10 * time.Millisecond // how often a quiesced agent looks for the wake file

// --- the reaper -----------------------------------------------------------------------------------

var children = struct {
	sync.Mutex
	waiting map[int]chan syscall.WaitStatus
}{waiting: map[int]chan syscall.WaitStatus{}}

var reaperKick = make(chan struct{}, 1)

// forkExec starts a process and registers it with the reaper before the reaper can see its exit:
// its wait status arrives once on the channel returned.
func forkExec(argv0 string, argv []string, attr *syscall.ProcAttr) (int, chan syscall.WaitStatus, error) {
	children.Lock()
	pid, err := syscall.ForkExec(argv0, argv, attr)
	var ch chan syscall.WaitStatus
	if err == nil {
		ch = make(chan syscall.WaitStatus, 1)
		children.waiting[pid] = ch
	}
	children.Unlock()
	if err == nil {
		select {
		case reaperKick <- struct{}{}:
		default:
		}
	}
	return pid, ch, err
}

// reap waits for any child: the agent's own commands (their waiters hear it) and, as PID 1,
// every orphan of the box. With no child at all it sleeps until a spawn or a SIGCHLD.
func reap(sigchld chan os.Signal) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			select {
			case <-reaperKick:
			case <-sigchld:
			}
			continue
		}
		children.Lock()
		ch := children.waiting[pid]
		delete(children.waiting, pid)
		children.Unlock()
		if ch != nil {
			ch <- ws
		}
	}
}

// exitCode: a shell's view of how a process ended: its status, or 128 plus the signal that killed it.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// releaseHostStdio points stdin, stdout and stderr at /dev/null: PID 1 starts with the host's
// runsc.err behind them, which a box process writing into /proc/1/fd/2 could fill.
func releaseHostStdio() {
	null, err := syscall.Open("/dev/null", syscall.O_RDWR, 0)
	if err != nil {
		return
	}
	for fd := 0; fd < 3; fd++ {
		syscall.Dup3(null, fd, 0)
	}
	if null > 2 {
		syscall.Close(null)
	}
}

// --- the channel ----------------------------------------------------------------------------------

// Channel is the listener and every connection it accepted, so a pause can close them all: gVisor
// cannot checkpoint a socket bound to, or connected through, a host path.
type Channel struct {
	dir      string
	mu       sync.Mutex
	ln       net.Listener
	conns    map[net.Conn]struct{}
	stopping chan struct{}
	once     sync.Once
}

func (c *Channel) listen() error {
	sock := filepath.Join(c.dir, SocketName)
	os.Remove(sock)
	old := syscall.Umask(0o077) // only root in the box may talk to the agent
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		return err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	c.mu.Lock()
	c.ln = ln
	c.conns = map[net.Conn]struct{}{}
	c.stopping = make(chan struct{})
	c.once = sync.Once{}
	c.mu.Unlock()
	return nil
}

// serve accepts until a quiesce stops it.
func (c *Channel) serve() {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			select {
			case <-c.stopping:
				return
			default:
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c.mu.Lock()
		select {
		case <-c.stopping:
			c.mu.Unlock()
			conn.Close()
			return
		default:
		}
		c.conns[conn] = struct{}{}
		c.mu.Unlock()
		go func() {
			survive(func() { serveConn(c, conn) })
			c.mu.Lock()
			delete(c.conns, conn)
			c.mu.Unlock()
		}()
	}
}

// stop ends the accept loop at once (a quiesce).
func (c *Channel) stop() {
	c.once.Do(func() {
		c.mu.Lock()
		close(c.stopping)
		c.mu.Unlock()
		c.ln.Close()
	})
}

func (c *Channel) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ln.Close()
	for conn := range c.conns {
		conn.Close()
	}
	c.conns = map[net.Conn]struct{}{}
}

var (
	procTable *ProcTable
	trustEnv  []kv
)

// closeOnExecAll marks every descriptor past stdio close-on-exec: whatever the agent inherited
// reaches no command (Go's own are opened so; fork-exec closes nothing else, unlike close_fds).
func closeOnExecAll() {
	dir, err := os.Open("/proc/self/fd")
	if err != nil {
		return
	}
	names, _ := dir.Readdirnames(-1)
	dir.Close()
	for _, name := range names {
		if fd, err := strconv.Atoi(name); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

func main() {
	closeOnExecAll()
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	go reap(sigchld)
	ends := make(chan os.Signal, 1)
	signal.Notify(ends, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR2)
	go func() {
		s := <-ends
		os.Exit((-int(s.(syscall.Signal))) & 0xFF) // as the Python agent's PID 1 ended with its child
	}()
	wake := make(chan os.Signal, 1)
	signal.Notify(wake, syscall.SIGUSR1)
	if st, err := os.Stat(CABundle); err == nil && st.Mode().IsRegular() {
		trustEnv = []kv{{"SSL_CERT_FILE", CABundle}, {"REQUESTS_CA_BUNDLE", CABundle}, {"CURL_CA_BUNDLE", CABundle},
			{"GIT_SSL_CAINFO", CABundle}, {"PIP_CERT", CABundle}, {"NODE_EXTRA_CA_CERTS", CACert}}
	}
	procTable = newProcTable()
	relay := newRelay(ProxyPort, filepath.Join(ChannelDir, EgressSocket))
	relay.start()
	startSudo() // without it the box runs on; its `sudo` says the service is not there
	c := &Channel{dir: ChannelDir}
	theChannel = c
	for {
		if err := c.listen(); err != nil {
			os.Stderr.WriteString("hutch agent: cannot listen: " + err.Error() + "\n")
			os.Exit(1)
		}
		releaseHostStdio() // listening: a boot failure of the agent's is past
		c.serve()
		drain(wake) // a wake-up that came while serving is stale: wait for the one after restore
		c.closeAll()
		relay.quiesce(5 * time.Second)
		os.Remove(filepath.Join(c.dir, SocketName)) // the host waits for this
		wakeFile := filepath.Join(c.dir, WakeFile)
		ticker := time.NewTicker(wakePoll)
	waiting:
		for {
			if _, err := os.Lstat(wakeFile); err == nil {
				break
			}
			select {
			case <-wake:
				break waiting
			case <-ticker.C:
			}
		}
		ticker.Stop()
		os.Remove(wakeFile) // or the next quiesce would wake at once
		relay.wake()
	}
}

var theChannel *Channel

// survive runs fn; a bug of its does not end the agent (and with it the box), as a Python thread's
// exception ends the thread alone.
func survive(fn func()) {
	defer func() { recover() }()
	fn()
}

func drain(ch chan os.Signal) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// --- the routes about the channel itself ----------------------------------------------------------

func health(ex *Exchange) {
	ex.answerJSON(map[string]interface{}{"version": Version, "pid": os.Getpid()})
}

// quiesce answers, then stops listening; main closes every connection once the loop ends.
func quiesce(ex *Exchange) {
	ex.answerJSON(map[string]interface{}{"quiescing": true})
	ex.closeConn = true
	ex.srv.stop()
}
