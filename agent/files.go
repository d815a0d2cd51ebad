package main

// The file routes (routes_files.py): read a file, write one (with its metadata), zip a tree.

import (
	"archive/zip"
	"compress/flate"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

func utf8Valid(b []byte) bool { return utf8.Valid(b) }

// readFile: the file's bytes, read as the box user unless user=root.
func readFile(ex *Exchange) {
	path := ex.pathArg()
	var fd int
	asUser(func(trust bool) (err error) { fd, err = openFile(path, trust); return }, ex.query()["user"], path)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		panic(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			refuse(ErrIsDir, "is a directory: %s", path)
		}
		refuse(ErrNotRegular, "not a regular file: %s", path) // may never end
	}
	syscall.SetNonblock(fd, false)
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	buf := make([]byte, chunkSize)
	if st.Size == 0 { // /proc and /sys files say 0 and still have content: read to EOF
		ex.startChunked("application/octet-stream")
		for {
			n, err := f.Read(buf)
			if n > 0 {
				ex.chunk(buf[:n])
			}
			if err != nil || n == 0 {
				break
			}
		}
		ex.endChunked()
		return
	}
	ex.sendResponse(200)
	ex.sendHeader("Content-Type", "application/octet-stream")
	ex.sendHeader("Content-Length", strconv.FormatInt(st.Size, 10))
	ex.endHeaders()
	remaining := st.Size // a file growing meanwhile must not break the framing
	for remaining > 0 {
		want := int64(len(buf))
		if remaining < want {
			want = remaining
		}
		n, err := f.Read(buf[:want])
		if n > 0 {
			ex.write(buf[:n])
			remaining -= int64(n)
		}
		if err != nil || n == 0 {
			break
		}
	}
	ex.flush()
	if remaining > 0 { // it shrank: the declared length cannot be honoured
		ex.closeConn = true
	}
}

// orderedMeta is a metadata set in the order its JSON gave it.
type orderedMeta struct {
	keys []string
	vals map[string]string
	bad  bool // not an object of strings
}

func parseMetadata(text string) *orderedMeta {
	m := &orderedMeta{vals: map[string]string{}}
	dec := json.NewDecoder(strings.NewReader(text))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		m.bad = true
		return m
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			m.bad = true
			return m
		}
		var v interface{}
		if err := dec.Decode(&v); err != nil {
			m.bad = true
			return m
		}
		s, ok := v.(string)
		if !ok {
			m.bad = true
			return m
		}
		key := k.(string)
		if _, seen := m.vals[key]; !seen {
			m.keys = append(m.keys, key)
		}
		m.vals[key] = s
	}
	if _, err := dec.Token(); err != nil {
		m.bad = true
	}
	if _, err := dec.Token(); err != io.EOF {
		m.bad = true
	}
	return m
}

func printable(s string) bool {
	for _, c := range s {
		if c < ' ' || c > '~' {
			return false
		}
	}
	return true
}

// metadataProblem: why a metadata set cannot be stored (envd's rules), or "".
func metadataProblem(m *orderedMeta) string {
	if m.bad {
		return "metadata must map names to strings"
	}
	total := 0
	for _, key := range m.keys {
		value := m.vals[key]
		klen := utf8.RuneCountInString(key)
		if klen == 0 || len(MetadataPrefix)+klen > 255 {
			return "a metadata key must be 1-246 bytes"
		}
		if !printable(key) || !printable(value) {
			shown := key
			if r := []rune(shown); len(r) > 64 {
				shown = string(r[:64])
			}
			return "metadata key " + pyRepr(shown) + " or its value is not printable ASCII"
		}
		total += len(MetadataPrefix) + klen + utf8.RuneCountInString(value)
	}
	if total > MaxMetadataBytes {
		return "metadata is limited to " + strconv.Itoa(MaxMetadataBytes) + " bytes"
	}
	return ""
}

// pyRepr: roughly Python's repr of a string.
func pyRepr(s string) string {
	q := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, "\"") {
		q = "\""
	}
	var b strings.Builder
	b.WriteString(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString("\\\\")
		case string(r) == q:
			b.WriteString("\\" + q)
		case r == '\n':
			b.WriteString("\\n")
		case r == '\r':
			b.WriteString("\\r")
		case r == '\t':
			b.WriteString("\\t")
		case r < 0x20 || r == 0x7f:
			b.WriteString("\\x" + strconv.FormatInt(int64(r)|0x100, 16)[1:])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(q)
	return b.String()
}

const tempMark = ".hutch-"

var tempSeq int64

// tempName: a write's file beside its target. Its name says which agent wrote it and whether the
// target was there before, so a watch shows the write as envd would, and nothing of the temp file.
func tempName(name string, existed bool) string {
	if r := []rune(name); len(r) > 200 {
		name = string(r[:200])
	}
	kind := "c"
	if existed {
		kind = "w"
	}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10) + strconv.FormatInt(atomic.AddInt64(&tempSeq, 1)%1000+1000, 10)[1:]
	return "." + name + tempMark + strconv.Itoa(os.Getpid()) + "-" + stamp + "-" + kind
}

// tempWrite: for one of this agent's temp names, "w" (it replaces a file) or "c" (it makes one).
func tempWrite(name string) string {
	at := strings.LastIndex(name, tempMark)
	if !strings.HasPrefix(name, ".") || at < 1 {
		return ""
	}
	rest := name[at+len(tempMark):]
	parts := strings.SplitN(rest, "-", 3)
	if len(parts) != 3 || parts[0] != strconv.Itoa(os.Getpid()) || !isDigits(parts[1]) || (parts[2] != "w" && parts[2] != "c") {
		return ""
	}
	return parts[2]
}

// writeFile: the body becomes the file, whole or not at all (written beside it, then renamed over
// it), owned by the box user unless user=root; metadata (a JSON object) is stored with it.
func writeFile(ex *Exchange) {
	path := ex.pathArg()
	query := ex.query()
	owner := [2]int{BoxUID, BoxGID}
	if query["user"] == "root" {
		owner = [2]int{0, 0}
	}
	metaText := query["metadata"]
	if metaText == "" {
		metaText = "{}"
	}
	meta := parseMetadata(metaText)
	if problem := metadataProblem(meta); problem != "" { // refused before anything is made
		refuse(ErrBadRequest, "%s", problem)
	}
	dirfd, name, err := openParent(path, false, &owner)
	if err != nil {
		var fe *fsErr
		if errors.As(err, &fe) && fe.kind == kindUnsafe {
			refuse(ErrUnsafePath, "%s goes through a link the box's user made (%s)", path, fe.msg)
		}
		if errnoOf(err) == syscall.ENOTDIR {
			refuse(ErrNotDir, "a parent of %s is not a directory", path)
		}
		refuse(ErrIO, "%s: %s", path, errText(err))
	}
	defer syscall.Close(dirfd)
	size, err := replaceFile(ex, dirfd, name, path, owner, meta)
	if err != nil {
		if err == errBodyEnded { // the host went away mid-body: nobody to answer
			ex.closeConn = true
			panic(connGone{err})
		}
		e := errnoOf(err)
		if e == syscall.ENOTDIR {
			refuse(ErrNotDir, "a parent of %s is not a directory", path)
		}
		if e == syscall.ENOTSUP || e == syscall.EOPNOTSUPP {
			refuse(ErrIO, "%s: this filesystem does not keep metadata (xattrs)", path)
		}
		refuse(ErrIO, "%s: %s", path, errText(err))
	}
	ex.answerJSON(map[string]interface{}{"path": path, "size": size, "metadata": len(meta.keys)})
}

func errText(err error) string {
	var fe *fsErr
	if errors.As(err, &fe) {
		return fe.msg
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return strerror(e)
	}
	return err.Error()
}

func replaceFile(ex *Exchange, dirfd int, name, path string, owner [2]int, meta *orderedMeta) (int64, error) {
	existed := false
	st, err := lstatAt(dirfd, name)
	if err == nil {
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			refuse(ErrIsDir, "is a directory: %s", path)
		}
		existed = true
	} else if err != syscall.ENOENT {
		return 0, err
	}
	tmp := tempName(name, existed)
	fd, err := syscall.Openat(dirfd, tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() {
		if !ok {
			unlinkat(dirfd, tmp, 0)
		}
	}()
	f := os.NewFile(uintptr(fd), tmp)
	defer f.Close()
	buf := make([]byte, chunkSize)
	var size int64
	body := ex.Body()
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := f.Write(buf[:n]); err != nil {
				return size, errnoOf(err)
			}
			size += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return size, rerr
		}
	}
	if err := syscall.Fchown(fd, owner[0], owner[1]); err != nil {
		return size, err
	}
	if err := syscall.Fchmod(fd, 0o644); err != nil {
		return size, err
	}
	for _, k := range meta.keys { // on the new inode: an overwrite drops the old set
		if err := fsetxattr(fd, MetadataPrefix+k, []byte(meta.vals[k])); err != nil {
			return size, err
		}
	}
	if err := syscall.Renameat(dirfd, tmp, dirfd, name); err != nil { // readers never see half a file
		return size, err
	}
	ok = true
	return size, nil
}

// --- zip ------------------------------------------------------------------------------------------------

type chunkWriter struct {
	ex  *Exchange
	buf []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if len(w.buf) >= chunkSize {
		w.flushAll()
	}
	return len(p), nil
}

func (w *chunkWriter) flushAll() {
	w.ex.chunk(w.buf)
	w.buf = w.buf[:0]
}

// zipDir: a zip of the directory's tree as the box user sees it (walked with the user's rights: what
// the user may not read is left out) unless user=root; links are never followed.
func zipDir(ex *Exchange) {
	path := ex.pathArg()
	user := ex.query()["user"]
	var top int
	asUser(func(trust bool) (err error) { top, err = openTree(path, trust); return }, user, path)
	defer syscall.Close(top)
	uid, gid := BoxUID, BoxGID
	if user == "root" {
		uid, gid = 0, 0
	}
	actingAs(uid, gid, func() {
		ex.startChunked("application/zip")
		out := &chunkWriter{ex: ex}
		zw := zip.NewWriter(out)
		zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, 1) })
		buf := make([]byte, chunkSize)
		walkFiles(top, "", func(name string, fd int, st syscall.Stat_t) {
			isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR
			h := &zip.FileHeader{Name: name, Method: zip.Deflate}
			when := time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
			if when.Year() < 1980 {
				when = time.Date(1980, 1, 1, 0, 0, 0, 0, time.Local)
			}
			h.Modified = when
			h.ExternalAttrs = (st.Mode & 0xFFFF) << 16
			h.CreatorVersion = 3<<8 | 20
			if isDir {
				h.Name += "/"
				h.Method = zip.Store
				h.ExternalAttrs |= 0x10
			} else {
				h.UncompressedSize64 = uint64(st.Size)
			}
			w, err := zw.CreateHeader(h)
			if err != nil {
				panic(err)
			}
			if fd >= 0 {
				f := os.NewFile(uintptr(fd), name)
				io.CopyBuffer(w, f, buf)
				f.Close()
			}
		})
		if err := zw.Close(); err != nil {
			panic(err)
		}
		out.flushAll()
		ex.endChunked()
	})
}

// walkFiles calls fn for everything under the directory dirfd, parents first, sorted by name: a
// directory with fd -1, a regular file with a descriptor fn closes. Nothing is followed: each
// directory is opened relative to its parent with O_NOFOLLOW, each file too, so a link swapped in
// anywhere leads nowhere. What cannot be opened, links, devices and pipes are left out.
func walkFiles(dirfd int, rel string, fn func(string, int, syscall.Stat_t)) {
	names, err := readNames(dirfd)
	if err != nil {
		return
	}
	if rel != "" {
		var st syscall.Stat_t
		if syscall.Fstat(dirfd, &st) == nil {
			fn(rel, -1, st)
		}
	}
	var dirs []string
	for _, name := range names {
		st, err := lstatAt(dirfd, name)
		if err != nil {
			continue
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			dirs = append(dirs, name)
			continue
		}
		fd, err := syscall.Openat(dirfd, name, readFlags|syscall.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		var fst syscall.Stat_t
		if syscall.Fstat(fd, &fst) != nil || fst.Mode&syscall.S_IFMT != syscall.S_IFREG {
			syscall.Close(fd)
			continue
		}
		syscall.SetNonblock(fd, false)
		fn(joinRel(rel, name), fd, fst)
	}
	sort.Strings(dirs)
	for _, name := range dirs {
		sub, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		walkFiles(sub, joinRel(rel, name), fn)
		syscall.Close(sub)
	}
}

func joinRel(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}
