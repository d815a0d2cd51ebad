package main

// The box's way out (relay.py): an HTTP proxy address (127.0.0.1:3128) that relays each connection,
// byte for byte, to the host's egress proxy on the channel directory's egress socket. A pause
// closes every connection to the host and holds new ones until the box is woken. And the tunnel
// route (routes_channel.py): a channel connection becomes bytes to a port in the box.

import (
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

const tunnelGrace = 30 * time.Second // after the host ends a tunnel, how long the box's server may still answer

var unavailable = []byte("HTTP/1.1 502 Bad Gateway\r\nX-Hutch-Egress: unavailable\r\nContent-Type: text/plain\r\n" +
	"Content-Length: 38\r\nConnection: close\r\n\r\nhutch egress: this box has no way out\n")

type Relay struct {
	port       int
	hostSocket string
	mu         sync.Mutex
	cond       *sync.Cond
	open       bool
	toHost     map[net.Conn]struct{}
}

func newRelay(port int, hostSocket string) *Relay {
	r := &Relay{port: port, hostSocket: hostSocket, open: true, toHost: map[net.Conn]struct{}{}}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *Relay) start() {
	ln, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(r.port))
	if err != nil {
		return
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			go survive(func() { r.relay(conn) })
		}
	}()
}

func (r *Relay) relay(conn net.Conn) {
	defer conn.Close()
	r.mu.Lock()
	for !r.open {
		r.cond.Wait()
	}
	r.mu.Unlock()
	host, err := net.Dial("unix", r.hostSocket)
	if err != nil {
		conn.Write(unavailable)
		return
	}
	r.mu.Lock()
	if !r.open { // a quiesce came meanwhile: it must find nothing of the host's
		r.mu.Unlock()
		host.Close()
		return
	}
	r.toHost[host] = struct{}{}
	r.mu.Unlock()
	outward := make(chan struct{})
	go func() {
		pipe(conn, host)
		close(outward)
	}()
	pipe(host, conn)
	<-outward
	host.Close()
	r.mu.Lock()
	delete(r.toHost, host)
	r.cond.Broadcast()
	r.mu.Unlock()
}

// quiesce cuts every connection to the host, holds new ones, and waits (a while) for each to go.
func (r *Relay) quiesce(wait time.Duration) {
	deadline := time.Now().Add(wait)
	r.mu.Lock()
	r.open = false
	for host := range r.toHost {
		host.Close()
	}
	r.mu.Unlock()
	for time.Now().Before(deadline) {
		r.mu.Lock()
		n := len(r.toHost)
		r.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *Relay) wake() {
	r.mu.Lock()
	r.open = true
	r.cond.Broadcast()
	r.mu.Unlock()
}

type closeWriter interface{ CloseWrite() error }

// pipe copies until the source ends, then ends the destination's sending side.
func pipe(src io.Reader, dst net.Conn) {
	buf := make([]byte, 64*1024)
	io.CopyBuffer(dst, src, buf)
	if cw, ok := dst.(closeWriter); ok {
		cw.CloseWrite()
	}
}

// tunnel connects to 127.0.0.1:port in the box and relays bytes both ways for the rest of this
// connection. A pause ends it (closeAll).
func tunnel(ex *Exchange) {
	port := ex.query()["port"]
	n, err := strconv.Atoi(port)
	if !isDigits(port) || err != nil || n <= 0 || n >= 65536 {
		refuse(ErrBadRequest, "port must be 1-65535")
	}
	target, err := net.DialTimeout("tcp4", "127.0.0.1:"+port, 5*time.Second)
	if err != nil {
		refuse(ErrPortClosed, "nothing listens on port %s in the box: %s", port, strerror(errnoOf(err)))
	}
	defer target.Close()
	ex.closeConn = true
	ex.sendResponse(200)
	ex.sendHeader("Content-Type", "application/octet-stream")
	ex.endHeaders()
	ex.flush()
	outward := make(chan struct{})
	go func() {
		pipe(target, ex.conn)
		close(outward)
	}()
	buf := make([]byte, chunkSize)
	io.CopyBuffer(target, ex.r, buf) // what the host sent, from the request's own buffer on
	target.(closeWriter).CloseWrite()
	select {
	case <-outward: // the box's server may still be answering
	case <-time.After(tunnelGrace):
		target.Close() // one that neither answers nor closes holds nothing for ever
		<-outward
	}
}
