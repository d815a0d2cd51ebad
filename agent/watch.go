package main

// inotify on a directory (fsops.Watch) and, recursively, the directories that are or come to be
// under it, opened as root through openDir (only root's links followed). Subdirectories are opened
// one name at a time from the watched one without following links, and watched through their
// descriptor (/proc/self/fd), so a link swapped in cannot point the watch elsewhere. No descriptor is
// held between events: a held directory is not deleted, and its IN_DELETE_SELF would never come.

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const watchMask = syscall.IN_MODIFY | syscall.IN_ATTRIB | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO |
	syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF

// what each inotify event is called (fsnotify's words, which E2B's clients know)
var watchKinds = []struct {
	bits uint32
	kind string
}{{syscall.IN_CREATE | syscall.IN_MOVED_TO, "create"}, {syscall.IN_MODIFY, "write"},
	{syscall.IN_DELETE, "remove"}, {syscall.IN_MOVED_FROM, "rename"}, {syscall.IN_ATTRIB, "chmod"}}

type fsEvent struct{ name, kind string }

type Watch struct {
	parts     []string
	recursive bool
	fd        int
	f         *os.File
	dirs      map[int32][]string // watch descriptor -> the directory, relative to the root
	writes    map[uint32]string  // rename cookie -> "w"/"c", of a temp file moved away
	ended     bool
	dev, ino  uint64
}

func newWatch(path string, recursive bool) (*Watch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	w := &Watch{parts: partsOf(path), recursive: recursive, fd: fd, dirs: map[int32][]string{},
		writes: map[uint32]string{}}
	root, err := openDir(w.parts, false, nil)
	if err != nil {
		syscall.Close(fd)
		return nil, err
	}
	defer syscall.Close(root)
	var st syscall.Stat_t
	if err := syscall.Fstat(root, &st); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		syscall.Close(fd)
		return nil, syscall.ENOTDIR
	}
	w.dev, w.ino = uint64(st.Dev), st.Ino
	if err := w.add(root, nil, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if recursive {
		w.addTree(root, nil, nil)
	}
	w.f = os.NewFile(uintptr(fd), "inotify")
	return w, nil
}

func (w *Watch) add(dirfd int, rel []string, top bool) error {
	if len(w.dirs) >= maxWatches {
		return nil
	}
	wd, err := syscall.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(dirfd), watchMask|syscall.IN_ONLYDIR)
	if err != nil {
		if top {
			return err
		}
		return nil // unreadable, or gone: not followed
	}
	w.dirs[int32(wd)] = rel
	return nil
}

// addTree watches the subdirectories under dirfd, depth first; with found, the names already there
// are added to it (they came before the watch did).
func (w *Watch) addTree(dirfd int, rel []string, found *[]string) {
	rfd, err := syscall.Openat(dirfd, ".", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer syscall.Close(rfd)
	names, err := readNames(rfd)
	if err != nil {
		return
	}
	for _, name := range names {
		sub := append(append([]string(nil), rel...), name)
		if found != nil {
			*found = append(*found, strings.Join(sub, "/"))
		}
		w.addSub(rfd, sub, found)
	}
}

func (w *Watch) addSub(parent int, rel []string, found *[]string) {
	sub, err := syscall.Openat(parent, rel[len(rel)-1], oPath|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return // not a directory, a link, or gone
	}
	defer syscall.Close(sub)
	w.add(sub, rel, false)
	w.addTree(sub, rel, found)
}

// openRel: the watched directory's subdirectory rel, if the path still leads to the watched one.
func (w *Watch) openRel(rel []string) int {
	fd, err := openDir(w.parts, false, nil)
	if err != nil {
		return -1
	}
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || uint64(st.Dev) != w.dev || st.Ino != w.ino {
		syscall.Close(fd)
		return -1
	}
	for _, name := range rel {
		next, err := syscall.Openat(fd, name, oPath|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		syscall.Close(fd)
		if err != nil {
			return -1
		}
		fd = next
	}
	return fd
}

// read: the events of the next `timeout` at most, as (name relative to the root, kind).
func (w *Watch) read(timeout time.Duration) []fsEvent {
	buf := make([]byte, 64*1024)
	w.f.SetReadDeadline(time.Now().Add(timeout))
	n, err := w.f.Read(buf)
	if err != nil || n <= 0 {
		return nil
	}
	data := buf[:n]
	var out []fsEvent
	pos := 0
	for pos+syscall.SizeofInotifyEvent <= len(data) {
		wd := int32(binary.LittleEndian.Uint32(data[pos:]))
		mask := binary.LittleEndian.Uint32(data[pos+4:])
		cookie := binary.LittleEndian.Uint32(data[pos+8:])
		size := int(binary.LittleEndian.Uint32(data[pos+12:]))
		start := pos + syscall.SizeofInotifyEvent
		end := start + size
		if end > len(data) {
			end = len(data)
		}
		raw := data[start:end]
		pos = start + size
		if i := strings.IndexByte(string(raw), 0); i >= 0 {
			raw = raw[:i]
		}
		name := string(raw)
		rel, ok := w.dirs[wd]
		if !ok {
			continue
		}
		if mask&syscall.IN_IGNORED != 0 {
			delete(w.dirs, wd)
			w.ended = w.ended || len(rel) == 0 // the watched directory itself is gone
			continue
		}
		if len(rel) == 0 && mask&(syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF) != 0 {
			w.ended = true
			continue
		}
		if name == "" {
			continue
		}
		full := strings.Join(append(append([]string(nil), rel...), name), "/")
		if write := tempWrite(name); write != "" { // our temp file: its rename becomes the write
			if mask&syscall.IN_MOVED_FROM != 0 {
				if len(w.writes) >= 1024 {
					w.writes = map[uint32]string{}
				}
				w.writes[cookie] = write
			}
			continue
		}
		if mask&syscall.IN_MOVED_TO != 0 {
			if write := w.writes[cookie]; write != "" {
				delete(w.writes, cookie)
				kinds := []string{"chmod", "write"}
				if write == "c" {
					kinds = []string{"create", "chmod", "write"}
				}
				for _, k := range kinds {
					out = append(out, fsEvent{full, k})
				}
				continue
			}
		}
		for _, k := range watchKinds {
			if mask&k.bits != 0 {
				out = append(out, fsEvent{full, k.kind})
			}
		}
		if w.recursive && mask&syscall.IN_ISDIR != 0 && mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0 {
			if parent := w.openRel(rel); parent >= 0 {
				var found []string
				w.addSub(parent, append(append([]string(nil), rel...), name), &found)
				syscall.Close(parent)
				for _, n := range found {
					out = append(out, fsEvent{n, "create"})
				}
			}
		}
	}
	for i := range out {
		out[i].name = strings.ToValidUTF8(out[i].name, "\uFFFD")
	}
	return out
}

// entry: what is at name (relative to the root) now, as root sees it; nil if nothing is.
func (w *Watch) entry(name string) *Entry {
	e, err := statPath(join(append(append([]string(nil), w.parts...), partsOf(name)...)), false)
	if err != nil {
		return nil
	}
	return e
}

func (w *Watch) close() {
	if w.f != nil {
		w.f.Close()
	}
}
