package main

// Filesystem operations (fsops.py): read, stat, list, mkdir -p, move, remove and watch. Two ways of
// acting, each safe against a box user who swaps path components for links while a call runs:
//   - For the box user, the calling thread takes the user's effective uid and gid (raw setresuid,
//     setresgid and setgroups change only the calling thread's credentials; the goroutine is locked
//     to it). The kernel then checks every step with the user's rights. Real and saved ids stay root.
//   - As root, a path is walked one name at a time from "/" with openat, following only links owned
//     by root; the last name is acted on relative to its directory without following it.

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

const (
	maxListEntries = 10000
	maxListBytes   = 8 << 20
	maxDepth       = 16
	maxWatches     = 4096
	namesFileLimit = 4 << 20
	keepID         = 0xFFFFFFFF

	oPath             = 0x200000 // O_PATH
	atRemovedir       = 0x200
	atSymlinkNofollow = 0x100
	readFlags         = syscall.O_RDONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC // O_NONBLOCK: a FIFO must not wait
)

const (
	kindErrno = iota
	kindUnsafe
	kindTooMany
)

// fsErr is an fsops error beyond a bare errno: a path through a link the box's user made, a
// listing past the caps, or an errno with a message of its own (Python's OSError(errno, message)).
type fsErr struct {
	errno syscall.Errno
	msg   string
	kind  int
}

func (e *fsErr) Error() string { return e.msg }

func unsafePath(part string) error { return &fsErr{kind: kindUnsafe, msg: part} }

// errCredentialsLost: the thread could not take root back (it is not given back to the runtime).
var errCredentialsLost = errors.New("could not take root back")

func rawIDs(nr uintptr, a, b, c uintptr) error {
	if _, _, e := syscall.RawSyscall(nr, a, b, c); e != 0 {
		return e
	}
	return nil
}

// actingAs runs fn with this thread's effective ids (and no supplementary groups) the user's.
func actingAs(uid, gid int, fn func()) {
	if uid == 0 {
		fn()
		return
	}
	runtime.LockOSThread()
	groups, _ := syscall.Getgroups()
	restore := func() {
		err := rawIDs(syscall.SYS_SETRESUID, keepID, 0, keepID)
		if err == nil {
			err = rawIDs(syscall.SYS_SETRESGID, keepID, 0, keepID)
		}
		if err == nil {
			g := make([]uint32, len(groups))
			for i, x := range groups {
				g[i] = uint32(x)
			}
			var ptr uintptr
			if len(g) > 0 {
				ptr = uintptr(unsafe.Pointer(&g[0]))
			}
			err = rawIDs(syscall.SYS_SETGROUPS, uintptr(len(g)), ptr, 0)
		}
		if err != nil {
			panic(errCredentialsLost) // the thread stays locked: it ends with its goroutine
		}
		runtime.UnlockOSThread()
	}
	if err := rawIDs(syscall.SYS_SETGROUPS, 0, 0, 0); err != nil {
		runtime.UnlockOSThread()
		panic(err)
	}
	defer restore()
	if err := rawIDs(syscall.SYS_SETRESGID, keepID, uintptr(gid), keepID); err != nil {
		panic(err)
	}
	if err := rawIDs(syscall.SYS_SETRESUID, keepID, uintptr(uid), keepID); err != nil {
		panic(err)
	}
	fn()
}

// --- syscalls the syscall package lacks -------------------------------------------------------------

func readlinkat(dirfd int, name string) (string, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	n, _, e := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		return "", e
	}
	return string(buf[:n]), nil
}

func unlinkat(dirfd int, name string, flags int) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	if _, _, e := syscall.Syscall(syscall.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(flags)); e != 0 {
		return e
	}
	return nil
}

func lstatAt(dirfd int, name string) (syscall.Stat_t, error) {
	var st syscall.Stat_t
	if name == "" {
		name = "."
	}
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return st, err
	}
	if _, _, e := syscall.Syscall6(sysFstatat, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&st)),
		atSymlinkNofollow, 0, 0); e != 0 {
		return st, e
	}
	return st, nil
}

func llistxattr(path string) ([]string, error) {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 65536)
	n, _, e := syscall.Syscall(syscall.SYS_LLISTXATTR, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if e != 0 {
		return nil, e
	}
	var names []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	return names, nil
}

func lgetxattr(path, attr string) ([]byte, error) {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return nil, err
	}
	a, err := syscall.BytePtrFromString(attr)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 65536)
	n, _, e := syscall.Syscall6(syscall.SYS_LGETXATTR, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(a)),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		return nil, e
	}
	return buf[:n], nil
}

func fsetxattr(fd int, attr string, value []byte) error {
	a, err := syscall.BytePtrFromString(attr)
	if err != nil {
		return err
	}
	var v unsafe.Pointer
	if len(value) > 0 {
		v = unsafe.Pointer(&value[0])
	} else {
		var empty [1]byte
		v = unsafe.Pointer(&empty[0])
	}
	if _, _, e := syscall.Syscall6(syscall.SYS_FSETXATTR, uintptr(fd), uintptr(unsafe.Pointer(a)), uintptr(v),
		uintptr(len(value)), 0, 0); e != 0 {
		return e
	}
	return nil
}

// readNames lists a directory's names (a descriptor opened for reading, left open).
func readNames(fd int) ([]string, error) {
	// close-on-exec from the start: a command forked meanwhile must not inherit a root-opened directory
	dup, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return nil, e
	}
	f := os.NewFile(dup, "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, errnoOf(err)
	}
	sort.Strings(names)
	return names, nil
}

// --- walking a path ------------------------------------------------------------------------------------

func partsOf(path string) []string {
	var out []string
	for _, c := range strings.Split(path, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

func openRoot() (int, error) {
	return syscall.Open("/", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
}

// openDir: an O_PATH descriptor of the directory the names lead to from "/". Links are followed only
// if owned by root, or any with trustAll (when the thread acts with the user's own rights). With
// make, missing directories are made and given to that uid and gid (mkdir -p).
func openDir(parts []string, trustAll bool, make *[2]int) (int, error) {
	queue := append([]string(nil), parts...)
	fd, err := openRoot()
	if err != nil {
		return -1, err
	}
	links := 0
	for len(queue) > 0 {
		part := queue[0]
		queue = queue[1:]
		if part == "." {
			continue
		}
		st, err := lstatAt(fd, part)
		if err == syscall.ENOENT {
			if make == nil {
				syscall.Close(fd)
				return -1, err
			}
			if err := syscall.Mkdirat(fd, part, 0o755); err != nil {
				syscall.Close(fd)
				return -1, err
			}
			if err := syscall.Fchownat(fd, part, make[0], make[1], atSymlinkNofollow); err != nil {
				syscall.Close(fd)
				return -1, err
			}
		} else if err != nil {
			syscall.Close(fd)
			return -1, err
		} else if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			links++
			if st.Uid != 0 && !trustAll {
				syscall.Close(fd)
				return -1, unsafePath(part)
			}
			if links > 40 {
				syscall.Close(fd)
				return -1, &fsErr{errno: syscall.ELOOP, msg: "too many levels of links"}
			}
			target, err := readlinkat(fd, part)
			if err != nil {
				syscall.Close(fd)
				return -1, err
			}
			var more []string
			for _, c := range strings.Split(target, "/") {
				if c != "" {
					more = append(more, c)
				}
			}
			queue = append(more, queue...)
			if strings.HasPrefix(target, "/") {
				syscall.Close(fd)
				if fd, err = openRoot(); err != nil {
					return -1, err
				}
			}
			continue
		}
		// O_NOFOLLOW: a name swapped for a link since the check fails here instead of being followed
		next, err := syscall.Openat(fd, part, oPath|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		syscall.Close(fd)
		if err != nil {
			if err == syscall.ELOOP && !trustAll {
				return -1, unsafePath(part)
			}
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// openParent: the directory that holds path (an O_PATH descriptor) and the last name ("" for "/").
func openParent(path string, trustAll bool, make *[2]int) (int, string, error) {
	parts := partsOf(path)
	if len(parts) == 0 {
		fd, err := openRoot()
		return fd, "", err
	}
	fd, err := openDir(parts[:len(parts)-1], trustAll, make)
	return fd, parts[len(parts)-1], err
}

// openFile: a descriptor to read what path leads to (the caller looks with fstat). With trustAll
// the kernel follows every link with the user's rights; else the walk follows only root's links.
func openFile(path string, trustAll bool) (int, error) {
	if trustAll {
		return syscall.Open(path, readFlags, 0)
	}
	parts := partsOf(path)
	for i := 0; i < 40; i++ {
		if len(parts) == 0 {
			return syscall.Open("/", readFlags, 0)
		}
		last := parts[len(parts)-1]
		fd, err := openDir(parts[:len(parts)-1], false, nil)
		if err != nil {
			return -1, err
		}
		st, err := lstatAt(fd, last)
		if err != nil {
			syscall.Close(fd)
			return -1, err
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			out, err := syscall.Openat(fd, last, readFlags|syscall.O_NOFOLLOW, 0)
			syscall.Close(fd)
			if err == syscall.ELOOP {
				return -1, unsafePath(last)
			}
			return out, err
		}
		if st.Uid != 0 {
			syscall.Close(fd)
			return -1, unsafePath(last)
		}
		target, err := readlinkat(fd, last)
		syscall.Close(fd)
		if err != nil {
			return -1, err
		}
		if strings.HasPrefix(target, "/") {
			parts = partsOf(target)
		} else {
			parts = append(append([]string(nil), parts[:len(parts)-1]...), partsOf(target)...)
		}
	}
	return -1, &fsErr{errno: syscall.ELOOP, msg: "too many levels of links"}
}

// openTree: the directory path leads to, opened for listing, walked as openDir walks.
func openTree(path string, trustAll bool) (int, error) {
	top, err := openDir(partsOf(path), trustAll, nil)
	if err != nil {
		return -1, err
	}
	defer syscall.Close(top)
	return syscall.Openat(top, ".", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
}

// --- entries ---------------------------------------------------------------------------------------------

// names maps uid (or gid) to its name from the box's /etc/passwd (or /etc/group), read again when it
// changes; a number without a name is itself.
type names struct {
	path  string
	mu    sync.Mutex
	key   [2]int64
	known bool
	names map[uint32]string
}

var (
	userNames  = &names{path: "/etc/passwd"}
	groupNames = &names{path: "/etc/group"}
)

func (n *names) get(id uint32) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Stat(n.path, &st); err != nil {
		n.known, n.names = false, nil
	} else if key := [2]int64{st.Mtim.Sec*1e9 + st.Mtim.Nsec, st.Size}; !n.known || key != n.key {
		n.key, n.known, n.names = key, true, n.read()
	}
	if name, ok := n.names[id]; ok {
		return name
	}
	return strconv.FormatUint(uint64(id), 10)
}

func (n *names) read() map[uint32]string {
	out := map[uint32]string{}
	// non-blocking, and a regular file only: root in the box may make it a FIFO whose writer never
	// writes, and a blocked read here would hold every later stat, list and watch
	fd, err := syscall.Open(n.path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return out
	}
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return out
	}
	f := os.NewFile(uintptr(fd), n.path)
	defer f.Close()
	buf := make([]byte, 0, 64*1024)
	for len(buf) < namesFileLimit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		k, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil || k == 0 {
			break
		}
	}
	if len(buf) > namesFileLimit {
		buf = buf[:namesFileLimit]
	}
	text := strings.ToValidUTF8(string(buf), "\uFFFD")
	for _, line := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == '\r' }) {
		fields := strings.Split(line, ":")
		if len(fields) >= 3 && isDigits(fields[2]) && fields[0] != "" {
			id, err := strconv.ParseUint(fields[2], 10, 32)
			if err != nil {
				continue
			}
			if _, ok := out[uint32(id)]; !ok {
				name := fields[0]
				if r := []rune(name); len(r) > 64 {
					name = string(r[:64])
				}
				out[uint32(id)] = name
			}
		}
	}
	return out
}

func kindOf(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "file"
	case syscall.S_IFDIR:
		return "dir"
	case syscall.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// filemode is Python's stat.filemode.
func filemode(mode uint32) string {
	b := []byte("----------")
	switch mode & syscall.S_IFMT {
	case syscall.S_IFLNK:
		b[0] = 'l'
	case syscall.S_IFSOCK:
		b[0] = 's'
	case syscall.S_IFDIR:
		b[0] = 'd'
	case syscall.S_IFBLK:
		b[0] = 'b'
	case syscall.S_IFCHR:
		b[0] = 'c'
	case syscall.S_IFIFO:
		b[0] = 'p'
	case syscall.S_IFREG:
		b[0] = '-'
	default:
		b[0] = '?'
	}
	rwx := "rwxrwxrwx"
	for i := 0; i < 9; i++ {
		if mode&(1<<uint(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	special := func(pos int, bit uint32, on, off byte) {
		if mode&bit != 0 {
			if b[pos] == 'x' {
				b[pos] = on
			} else {
				b[pos] = off
			}
		}
	}
	special(3, syscall.S_ISUID, 's', 'S')
	special(6, syscall.S_ISGID, 's', 'S')
	special(9, syscall.S_ISVTX, 't', 'T')
	return string(b)
}

type LinkInfo struct {
	Path string `json:"path"`
	Type string `json:"type"`
	Mode uint32 `json:"mode"`
}

// Entry is a file's description, in the Python agent's field order.
type Entry struct {
	Name        string            `json:"name"`
	Path        string            `json:"path"`
	Type        string            `json:"type"`
	Size        int64             `json:"size"`
	Mode        uint32            `json:"mode"`
	Permissions string            `json:"permissions"`
	Owner       string            `json:"owner"`
	Group       string            `json:"group"`
	Mtime       float64           `json:"mtime"`
	Target      *string           `json:"target"`
	Link        *LinkInfo         `json:"link"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

func makeEntry(dirfd int, name, path string, st syscall.Stat_t) *Entry {
	e := &Entry{Name: name, Path: path, Type: kindOf(st.Mode), Size: st.Size, Mode: st.Mode & 0o7777,
		Permissions: filemode(st.Mode), Owner: userNames.get(st.Uid), Group: groupNames.get(st.Gid),
		Mtime: float64(st.Mtim.Sec) + float64(st.Mtim.Nsec)/1e9}
	if name == "" {
		e.Name = "/"
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		if target, err := readlinkat(dirfd, name); err == nil {
			e.Target = &target
		}
		e.Link = resolveLink(path)
	} else { // user.* xattrs are not allowed on links
		where := "/proc/self/fd/" + strconv.Itoa(dirfd)
		if name != "" {
			where += "/" + name
		}
		if meta := readMetadata(where); len(meta) > 0 {
			e.Metadata = meta
		}
	}
	return e
}

// resolveLink: where a link leads with every link on the way resolved, and what is there; nil if it
// leads nowhere. Only read (readlink and stat), with the acting thread's rights.
func resolveLink(path string) *LinkInfo {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil
	}
	var st syscall.Stat_t
	if syscall.Stat(resolved, &st) != nil {
		return nil
	}
	return &LinkInfo{resolved, kindOf(st.Mode), st.Mode & 0o7777}
}

// readMetadata: the user.e2b.* attributes of a file or directory (not followed if a link), prefix
// stripped. What is not UTF-8, or past MaxMetadataBytes, is left out.
func readMetadata(where string) map[string]string {
	attrs, err := llistxattr(where)
	if err != nil {
		return nil
	}
	sort.Strings(attrs)
	meta := map[string]string{}
	total := 0
	for _, attr := range attrs {
		if !strings.HasPrefix(attr, MetadataPrefix) {
			continue
		}
		raw, err := lgetxattr(where, attr)
		if err != nil || !utf8Valid(raw) || !utf8Valid([]byte(attr)) {
			continue
		}
		total += len([]rune(attr)) + len(raw)
		if total > MaxMetadataBytes {
			break
		}
		meta[attr[len(MetadataPrefix):]] = string(raw)
	}
	return meta
}

func join(parts []string) string { return "/" + strings.Join(parts, "/") }

// --- the operations ------------------------------------------------------------------------------------------

func statPath(path string, trustAll bool) (*Entry, error) {
	fd, name, err := openParent(path, trustAll, nil)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	st, err := lstatAt(fd, name)
	if err != nil {
		return nil, err
	}
	return makeEntry(fd, name, join(partsOf(path)), st), nil
}

// listDir: the entries under path, depth levels down, sorted by name in each directory, parents
// before their children. Links inside are listed, never followed; subdirectories that cannot be read
// are listed but not entered.
func listDir(path string, depth int, trustAll bool) ([]*Entry, error) {
	parts := partsOf(path)
	top, err := openDir(parts, trustAll, nil)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(top)
	out := []*Entry{}
	weight := 0
	var walk func(dirfd int, prefix []string, level int) error
	walk = func(dirfd int, prefix []string, level int) error {
		rfd, err := syscall.Openat(dirfd, ".", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(rfd)
		names, err := readNames(rfd)
		if err != nil {
			return err
		}
		for _, name := range names {
			st, err := lstatAt(rfd, name)
			if err != nil {
				continue // gone meanwhile
			}
			sub := append(append([]string(nil), prefix...), name)
			e := makeEntry(rfd, name, join(sub), st)
			out = append(out, e)
			data, _ := json.Marshal(e)
			weight += len(data) + 2
			if len(out) > maxListEntries || weight > maxListBytes {
				return &fsErr{kind: kindTooMany, errno: syscall.E2BIG,
					msg: "more than " + strconv.Itoa(maxListEntries) + " entries (or " + strconv.Itoa(maxListBytes) + " bytes)"}
			}
			if st.Mode&syscall.S_IFMT == syscall.S_IFDIR && level < depth {
				sfd, err := syscall.Openat(rfd, name, oPath|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
				if err != nil {
					continue
				}
				err = walk(sfd, sub, level+1)
				syscall.Close(sfd)
				if err != nil && err != syscall.EACCES && err != syscall.EPERM { // listed, not entered
					return err
				}
			}
		}
		return nil
	}
	if err := walk(top, parts, 1); err != nil {
		return nil, err
	}
	return out, nil
}

// makeDir is mkdir -p; false if it was a directory already. An existing non-directory: EEXIST.
func makeDir(path string, trustAll bool, owner [2]int) (*Entry, bool, error) {
	fd, name, err := openParent(path, trustAll, &owner)
	if err != nil {
		return nil, false, err
	}
	defer syscall.Close(fd)
	created := false
	if name != "" {
		exists, err := lstatAt(fd, name)
		if err == syscall.ENOENT {
			err = syscall.Mkdirat(fd, name, 0o755)
			if err == nil {
				if err := syscall.Fchownat(fd, name, owner[0], owner[1], atSymlinkNofollow); err != nil {
					return nil, false, err
				}
				created = true
			} else if err == syscall.EEXIST { // made meanwhile
				if exists, err = lstatAt(fd, name); err != nil {
					return nil, false, err
				}
			} else {
				return nil, false, err
			}
		} else if err != nil {
			return nil, false, err
		}
		if !created && exists.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return nil, false, &fsErr{errno: syscall.EEXIST, msg: path + " exists and is not a directory"}
		}
	}
	st, err := lstatAt(fd, name)
	if err != nil {
		return nil, false, err
	}
	return makeEntry(fd, name, join(partsOf(path)), st), created, nil
}

func move(source, destination string, trustAll bool) (*Entry, error) {
	if len(partsOf(source)) == 0 || len(partsOf(destination)) == 0 {
		return nil, &fsErr{errno: syscall.EISDIR, msg: "/ cannot be moved or replaced"}
	}
	sfd, sname, err := openParent(source, trustAll, nil)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(sfd)
	dfd, dname, err := openParent(destination, trustAll, nil)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(dfd)
	if _, err := lstatAt(sfd, sname); err != nil { // a missing source is about the source
		return nil, err
	}
	if err := syscall.Renameat(sfd, sname, dfd, dname); err != nil {
		return nil, err
	}
	st, err := lstatAt(dfd, dname)
	if err != nil {
		return nil, err
	}
	return makeEntry(dfd, dname, join(partsOf(destination)), st), nil
}

// remove: a file or link (never what it points to), or a directory and everything in it.
func remove(path string, trustAll bool) error {
	fd, name, err := openParent(path, trustAll, nil)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if name == "" {
		return &fsErr{errno: syscall.EISDIR, msg: "/ cannot be removed"}
	}
	st, err := lstatAt(fd, name) // looked at first: a missing name is 404 even where the user may not write
	if err != nil {
		return err
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return removeTree(fd, name)
	}
	return unlinkat(fd, name, 0)
}

// removeTree removes a directory and what is in it, each directory opened relative to the last
// without following links: links inside are removed, never followed.
func removeTree(parent int, name string) error {
	fd, err := syscall.Openat(parent, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := readNames(fd)
	if err != nil {
		syscall.Close(fd)
		return err
	}
	for _, n := range names {
		st, err := lstatAt(fd, n)
		if err == syscall.ENOENT {
			continue
		}
		if err != nil {
			syscall.Close(fd)
			return err
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			err = removeTree(fd, n)
		} else {
			err = unlinkat(fd, n, 0)
		}
		if err != nil && err != syscall.ENOENT {
			syscall.Close(fd)
			return err
		}
	}
	syscall.Close(fd)
	return unlinkat(parent, name, atRemovedir)
}
