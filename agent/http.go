package main

// Just enough HTTP/1.1 for the channel (hutch/guest/http1.py and exchange.py): request parsing,
// keep-alive, bodies by Content-Length or chunks, JSON and chunked answers, NDJSON event streams.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

const (
	maxLine    = 65536
	maxHeaders = 100
	chunkSize  = 256 * 1024
)

var reasons = map[int]string{200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}

var errBadRequest = errors.New("bad request")

// errBodyEnded: the host's body ended early (Python's ConnectionError): nobody is left to answer.
var errBodyEnded = errors.New("the body ended early")

// connGone ends a handler whose connection failed (panicked, recovered by serveConn).
type connGone struct{ err error }

// Exchange is one request and the ways to answer it.
type Exchange struct {
	conn      net.Conn
	r         *bufio.Reader
	w         *bufio.Writer
	method    string
	target    string
	headers   map[string]string
	closeConn bool
	bodyLeft  bool
	headSent  bool
	body      *bodyReader
	head      []string
	werr      error
	srv       *Channel
}

func (ex *Exchange) readLine() (string, error) {
	var b []byte
	for {
		part, err := ex.r.ReadSlice('\n')
		b = append(b, part...)
		if len(b) > maxLine {
			return "", errBadRequest
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if len(b) > 0 && err == io.EOF {
				return string(b), nil
			}
			return string(b), err
		}
		return string(b), nil
	}
}

// readHead reads the request line and headers; false at a clean end of the connection.
func (ex *Exchange) readHead() (bool, error) {
	line, err := ex.readLine()
	if line == "" {
		return false, nil
	}
	if err != nil && err != io.EOF {
		if err == errBadRequest {
			return true, err
		}
		return false, nil
	}
	parts := strings.Fields(line)
	if len(parts) != 3 || !strings.HasPrefix(parts[2], "HTTP/1.") {
		return true, errBadRequest
	}
	ex.method, ex.target = parts[0], parts[1]
	ex.headers = map[string]string{}
	for i := 0; i < maxHeaders; i++ {
		h, err := ex.readLine()
		if h == "\r\n" || h == "\n" || h == "" {
			return true, nil
		}
		if err == errBadRequest {
			return true, err
		}
		colon := strings.IndexByte(h, ':')
		if colon < 0 {
			return true, errBadRequest
		}
		ex.headers[strings.ToLower(strings.TrimSpace(h[:colon]))] = strings.TrimSpace(h[colon+1:])
	}
	return true, errBadRequest
}

func (ex *Exchange) write(b []byte) {
	if ex.werr != nil {
		panic(connGone{ex.werr})
	}
	if _, err := ex.w.Write(b); err != nil {
		ex.werr = err
		panic(connGone{err})
	}
}

func (ex *Exchange) flush() {
	if ex.werr != nil {
		panic(connGone{ex.werr})
	}
	if err := ex.w.Flush(); err != nil {
		ex.werr = err
		panic(connGone{err})
	}
}

// refuseBare answers a request the loop cannot read or route with an empty body, then closes:
// a peer that already went away is no error of the agent's.
func (ex *Exchange) refuseBare(status int) {
	ex.closeConn = true
	defer func() { recover() }()
	ex.sendResponse(status)
	ex.sendHeader("Content-Length", "0")
	ex.endHeaders()
	ex.flush()
}

func (ex *Exchange) sendResponse(status int) {
	reason, ok := reasons[status]
	if !ok {
		reason = "Unknown"
	}
	ex.head = []string{fmt.Sprintf("HTTP/1.1 %d %s", status, reason), fmt.Sprintf("Server: hutch-agent/%d", Version)}
}

func (ex *Exchange) sendHeader(name, value string) { ex.head = append(ex.head, name+": "+value) }

func (ex *Exchange) endHeaders() {
	if ex.closeConn {
		ex.head = append(ex.head, "Connection: close")
	}
	ex.headSent = true
	ex.write([]byte(strings.Join(ex.head, "\r\n") + "\r\n\r\n"))
}

// route is the request target's path (no percent-decoding, as urlsplit does none).
func (ex *Exchange) route() string {
	t := ex.target
	if i := strings.IndexAny(t, "?#"); i >= 0 {
		t = t[:i]
	}
	return t
}

// query: each name's last non-blank value (parse_qs).
func (ex *Exchange) query() map[string]string {
	out := map[string]string{}
	t := ex.target
	if i := strings.IndexByte(t, '#'); i >= 0 {
		t = t[:i]
	}
	i := strings.IndexByte(t, '?')
	if i < 0 {
		return out
	}
	for _, pair := range strings.Split(t[i+1:], "&") {
		if pair == "" {
			continue
		}
		k, v := pair, ""
		if eq := strings.IndexByte(pair, '='); eq >= 0 {
			k, v = pair[:eq], pair[eq+1:]
		} else {
			continue // parse_qs drops a name without '='
		}
		k, err1 := url.QueryUnescape(k)
		v, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil || v == "" {
			continue
		}
		out[k] = v
	}
	return out
}

// pathArg: the query's `path`, an absolute box path (else refused).
func (ex *Exchange) pathArg() string {
	path := ex.query()["path"]
	if problem := pathProblem(path); problem != "" {
		refuse(ErrBadPath, "%s", problem)
	}
	return path
}

// --- bodies -------------------------------------------------------------------------------------

type bodyReader struct {
	ex        *Exchange
	chunked   bool
	remaining int64
	done      bool
	err       error
}

// Body is this request's body reader (one per request: a handler that stops midway and answers has
// the rest discarded from where it stopped).
func (ex *Exchange) Body() *bodyReader {
	if ex.body == nil {
		ex.body = &bodyReader{ex: ex}
		if strings.ToLower(ex.headers["transfer-encoding"]) == "chunked" {
			ex.body.chunked = true
		} else {
			n := int64(0)
			if cl := ex.headers["content-length"]; cl != "" {
				v, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64)
				if err != nil || v < 0 {
					panic(fmt.Errorf("ValueError"))
				}
				n = v
			}
			ex.body.remaining = n
			if n == 0 {
				ex.body.finish()
			}
		}
	}
	return ex.body
}

func (b *bodyReader) finish() {
	b.done = true
	b.ex.bodyLeft = false
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.done {
		return 0, io.EOF
	}
	if b.chunked && b.remaining == 0 {
		line, err := b.ex.readLine()
		if err != nil && line == "" {
			b.err = errBodyEnded
			return 0, b.err
		}
		field := strings.TrimSpace(strings.SplitN(strings.TrimRight(line, "\r\n"), ";", 2)[0])
		size := int64(0)
		if field != "" {
			size, err = strconv.ParseInt(field, 16, 64)
			if err != nil || size < 0 {
				b.err = fmt.Errorf("bad chunk size")
				return 0, b.err
			}
		}
		if size == 0 {
			for {
				l, err := b.ex.readLine()
				if l == "\r\n" || l == "\n" || l == "" || err != nil {
					break
				}
			}
			b.finish()
			return 0, io.EOF
		}
		b.remaining = size
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	if len(p) > chunkSize {
		p = p[:chunkSize]
	}
	n, err := b.ex.r.Read(p)
	b.remaining -= int64(n)
	if n == 0 && err != nil {
		b.err = errBodyEnded
		return 0, b.err
	}
	if b.remaining == 0 {
		if b.chunked {
			b.ex.readLine() // the chunk's CRLF
		} else {
			b.finish()
		}
	}
	return n, nil
}

// readAll reads the whole body; a body ended early is the connection's end.
func (ex *Exchange) readAll() []byte {
	data, err := io.ReadAll(ex.Body())
	if err == errBodyEnded {
		panic(connGone{err})
	}
	if err != nil {
		panic(err)
	}
	return data
}

func (ex *Exchange) discardBody() {
	if !ex.bodyLeft {
		return
	}
	if _, err := io.Copy(io.Discard, ex.Body()); err != nil {
		ex.closeConn = true
	}
}

// jsonBody: the body, a JSON object (else an error).
func (ex *Exchange) jsonBody() (map[string]interface{}, error) {
	return parseObject(ex.readAll())
}

func parseObject(data []byte) (map[string]interface{}, error) {
	var v interface{}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("extra data")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("extra data")
	}
	obj, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("a JSON object is needed")
	}
	return obj, nil
}

// --- answers ------------------------------------------------------------------------------------

func (ex *Exchange) answerJSON(body interface{}) { ex.sendJSON(200, body) }

// refuseWith answers an error: its status is the code's.
func (ex *Exchange) refuseWith(code, message string) {
	ex.discardBody() // the host is still sending it, and waits to finish before it reads
	ex.sendJSON(ErrorStatus[code], map[string]string{"code": code, "message": message})
}

func (ex *Exchange) sendJSON(status int, body interface{}) {
	data, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	ex.sendResponse(status)
	ex.sendHeader("Content-Type", "application/json")
	ex.sendHeader("Content-Length", strconv.Itoa(len(data)))
	ex.endHeaders()
	ex.write(data)
	ex.flush()
}

func (ex *Exchange) startChunked(contentType string) {
	ex.sendResponse(200)
	ex.sendHeader("Content-Type", contentType)
	ex.sendHeader("Transfer-Encoding", "chunked")
	ex.endHeaders()
}

func (ex *Exchange) chunk(data []byte) {
	if len(data) > 0 {
		ex.write([]byte(strconv.FormatInt(int64(len(data)), 16) + "\r\n"))
		ex.write(data)
		ex.write([]byte("\r\n"))
	}
}

func (ex *Exchange) endChunked() {
	ex.write([]byte("0\r\n\r\n"))
	ex.flush()
}

// EventStream: NDJSON events to the host, as the answer; a host that went away stops the writes,
// not the command.
type EventStream struct {
	ex    *Exchange
	alive bool
}

func newEventStream(ex *Exchange) *EventStream {
	ex.startChunked("application/x-ndjson")
	ex.flush()
	return &EventStream{ex: ex, alive: true}
}

func (s *EventStream) try(f func()) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(connGone); !ok {
				panic(r)
			}
			s.alive = false
			s.ex.closeConn = true
		}
	}()
	f()
}

func (s *EventStream) Send(ev Ev) {
	if !s.alive {
		return
	}
	data := ev.JSON()
	s.try(func() {
		s.ex.chunk(append(data, '\n'))
		s.ex.flush()
	})
}

func (s *EventStream) Close() {
	if s.alive {
		s.try(func() { s.ex.endChunked() })
	}
}

// --- events ---------------------------------------------------------------------------------------

type kv struct {
	k string
	v interface{}
}

// Ev is one event: "t" first, then its fields in order (as the Python agent's dicts), "s" last.
type Ev struct {
	T      string
	D      string // stdout / stderr text
	Fields []kv
	S      int
	HasS   bool
}

func (e Ev) JSON() []byte {
	var b strings.Builder
	b.WriteString(`{"t": `)
	b.Write(mustJSON(e.T))
	if e.T == EvStdout || e.T == EvStderr {
		b.WriteString(`, "d": `)
		b.Write(mustJSON(e.D))
	}
	for _, f := range e.Fields {
		b.WriteString(", ")
		b.Write(mustJSON(f.k))
		b.WriteString(": ")
		b.Write(mustJSON(f.v))
	}
	if e.HasS {
		b.WriteString(`, "s": `)
		b.WriteString(strconv.Itoa(e.S))
	}
	b.WriteString("}")
	return []byte(b.String())
}

func mustJSON(v interface{}) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

// --- one connection -------------------------------------------------------------------------------

// serveConn answers each request on a connection in turn (http1.Handler.handle).
func serveConn(c *Channel, conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 64*1024)
	w := bufio.NewWriterSize(conn, 64*1024)
	closeConn := false
	for !closeConn {
		ex := &Exchange{conn: conn, r: r, w: w, srv: c}
		more, err := ex.readHead()
		if !more {
			return
		}
		if err != nil {
			ex.refuseBare(400)
			return
		}
		if ex.method != "GET" && ex.method != "PUT" && ex.method != "POST" {
			ex.refuseBare(405)
			return
		}
		cl, hasCL := ex.headers["content-length"]
		_, hasTE := ex.headers["transfer-encoding"]
		ex.bodyLeft = (hasCL && cl != "0") || hasTE
		if !handle(ex) {
			return
		}
		if ex.bodyLeft || strings.ToLower(ex.headers["connection"]) == "close" {
			ex.closeConn = true
		}
		closeConn = ex.closeConn
	}
}

// handle runs the request's route; false if the connection must end at once.
func handle(ex *Exchange) (ok bool) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if _, gone := r.(connGone); gone {
			ok = false
			return
		}
		ex.closeConn = true
		ok = false
		if !ex.headSent {
			func() {
				defer func() { recover() }()
				name := "Exception" // what it was, in a word or a line: never a long reply
				if e, isErr := r.(error); isErr {
					name = e.Error()
				}
				if len(name) > 200 {
					name = name[:200]
				}
				ex.sendJSON(ErrorStatus[ErrAgent], map[string]string{"code": ErrAgent, "message": name})
			}()
		}
	}()
	dispatch(ex)
	return true
}

type jsonNumber = json.Number

// parseAny: any JSON value, numbers kept as written.
func parseAny(data []byte) (interface{}, error) {
	var v interface{}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("extra data")
	}
	return v, nil
}

func sortedKeys(m map[string]interface{}) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
