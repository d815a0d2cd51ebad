package main

// The agent's filesystem calls that need no box (tests/unit/test_guest_fsops.py's ground): a watch
// sees a write made the agent's way as the file's own, E2B's metadata xattrs, a link's end, and
// the box user's rights on its thread alone.

import (
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

func agentWrite(t *testing.T, path string, data []byte, meta map[string]string) error {
	_, existed := os.Lstat(path)
	tmp := filepath.Join(filepath.Dir(path), tempName(filepath.Base(path), existed == nil))
	fd, err := syscall.Open(tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Write(fd, data)
	syscall.Fchmod(fd, 0o644)
	for k, v := range meta {
		if err := fsetxattr(fd, MetadataPrefix+k, []byte(v)); err != nil {
			syscall.Close(fd)
			os.Remove(tmp)
			return err
		}
	}
	syscall.Close(fd)
	return os.Rename(tmp, path)
}

func events(w *Watch, enough int) []fsEvent {
	var got []fsEvent
	for i := 0; i < 50 && len(got) < enough; i++ {
		got = append(got, w.read(100*time.Millisecond)...)
	}
	return got
}

func TestAWriteIsSeenAsTheFilesOwnNeverItsTempFile(t *testing.T) {
	tmp := t.TempDir()
	os.Mkdir(filepath.Join(tmp, "sub"), 0o755)
	w, err := newWatch(tmp, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	agentWrite(t, filepath.Join(tmp, "new.txt"), []byte("one"), nil)
	want := []fsEvent{{"new.txt", "create"}, {"new.txt", "chmod"}, {"new.txt", "write"}}
	if got := events(w, 3); !reflect.DeepEqual(got, want) {
		t.Fatalf("%v", got)
	}
	agentWrite(t, filepath.Join(tmp, "new.txt"), []byte("two"), nil)
	agentWrite(t, filepath.Join(tmp, "sub", "x.txt"), []byte("x"), nil)
	want = []fsEvent{{"new.txt", "chmod"}, {"new.txt", "write"}, {"sub/x.txt", "create"}, {"sub/x.txt", "chmod"}, {"sub/x.txt", "write"}}
	if got := events(w, 5); !reflect.DeepEqual(got, want) {
		t.Fatalf("%v", got)
	}
	os.WriteFile(filepath.Join(tmp, ".a.txt.hutch-1-2-c"), nil, 0o644) // another pid's: the box's own file
	if got := events(w, 1); len(got) == 0 || got[0] != (fsEvent{".a.txt.hutch-1-2-c", "create"}) {
		t.Fatalf("%v", got)
	}
	if e := w.entry("sub/x.txt"); e == nil || e.Path != tmp+"/sub/x.txt" || e.Size != 1 {
		t.Fatalf("%+v", e)
	}
	if w.entry("sub/gone.txt") != nil {
		t.Fatal("an entry for nothing")
	}
	os.RemoveAll(tmp)
	for i := 0; i < 20 && !w.ended; i++ {
		w.read(100 * time.Millisecond)
	}
	if !w.ended {
		t.Fatal("the watch did not end with its directory")
	}
}

func TestMetadataIsWrittenOnTheNewFileAndReadBack(t *testing.T) {
	tmp := t.TempDir()
	target := filepath.Join(tmp, "m.txt")
	if err := agentWrite(t, target, []byte("x"), map[string]string{"author": "mish"}); err != nil {
		if err == syscall.ENOTSUP || err == syscall.EOPNOTSUPP {
			t.Skip("this filesystem keeps no user xattrs")
		}
		t.Fatal(err)
	}
	if got := readMetadata(target); !reflect.DeepEqual(got, map[string]string{"author": "mish"}) {
		t.Fatalf("%v", got)
	}
	e, _ := statPath(target, true)
	if !reflect.DeepEqual(e.Metadata, map[string]string{"author": "mish"}) {
		t.Fatalf("%v", e.Metadata)
	}
	syscall.Setxattr(target, "user.other", []byte("not ours"), 0)
	syscall.Setxattr(target, "user.e2b.bin", []byte("\xff"), 0) // not UTF-8: left out, as envd does
	if got := readMetadata(target); !reflect.DeepEqual(got, map[string]string{"author": "mish"}) {
		t.Fatalf("%v", got)
	}
	agentWrite(t, target, []byte("y"), nil) // an overwrite without metadata leaves none
	if e, _ := statPath(target, true); len(e.Metadata) != 0 {
		t.Fatalf("%v", e.Metadata)
	}
}

func TestALinksEndIsResolvedThroughEveryLink(t *testing.T) {
	tmp, _ := filepath.EvalSymlinks(t.TempDir())
	os.Mkdir(filepath.Join(tmp, "d"), 0o755)
	os.WriteFile(filepath.Join(tmp, "d", "t.txt"), []byte("hi"), 0o644)
	os.Symlink("d", filepath.Join(tmp, "dl"))
	os.Symlink("dl/t.txt", filepath.Join(tmp, "l"))
	os.Symlink("nowhere", filepath.Join(tmp, "dangling"))
	link, err := statPath(filepath.Join(tmp, "l"), true)
	if err != nil || link.Type != "symlink" || *link.Target != "dl/t.txt" || link.Link == nil ||
		link.Link.Path != tmp+"/d/t.txt" || link.Link.Type != "file" {
		t.Fatalf("%+v %v", link, err)
	}
	if e, _ := statPath(filepath.Join(tmp, "dangling"), true); e.Link != nil {
		t.Fatalf("%+v", e.Link)
	}
	if e, _ := statPath(filepath.Join(tmp, "d"), true); e.Link != nil || e.Permissions != "drwxr-xr-x" {
		t.Fatalf("%+v", e)
	}
}

func TestRootsWalkRefusesALinkTheBoxUserMade(t *testing.T) {
	needsRoot(t)
	tmp := t.TempDir()
	os.Mkdir(filepath.Join(tmp, "real"), 0o755)
	os.WriteFile(filepath.Join(tmp, "real", "f"), []byte("x"), 0o644)
	os.Symlink("real", filepath.Join(tmp, "theirs"))
	os.Lchown(filepath.Join(tmp, "theirs"), BoxUID, BoxGID)
	os.Symlink("real", filepath.Join(tmp, "ours"))
	if _, err := openFile(filepath.Join(tmp, "theirs", "f"), false); refusalOf(err, "root", "x").Code != ErrUnsafePath {
		t.Fatalf("%v", err)
	}
	fd, err := openFile(filepath.Join(tmp, "ours", "f"), false)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	os.Symlink(filepath.Join(tmp, "real", "f"), filepath.Join(tmp, "last"))
	os.Lchown(filepath.Join(tmp, "last"), BoxUID, BoxGID)
	if _, err := openFile(filepath.Join(tmp, "last"), false); refusalOf(err, "root", "x").Code != ErrUnsafePath {
		t.Fatalf("%v", err)
	}
}

func TestTheBoxUsersRightsAreTakenOnItsThreadAlone(t *testing.T) {
	needsRoot(t)
	tmp := t.TempDir()
	secret := filepath.Join(tmp, "secret")
	os.WriteFile(secret, []byte("x"), 0o600)
	os.Chmod(tmp, 0o755)
	var err error
	actingAs(BoxUID, BoxGID, func() {
		_, err = openFile(secret, true)
		if os.Geteuid() != BoxUID {
			t.Error("the thread does not act as the box user")
		}
	})
	if refusalOf(err, "", secret).Code != ErrPermission {
		t.Fatalf("%v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("root was not taken back")
	}
	if _, err := openFile(secret, false); err != nil {
		t.Fatal(err)
	}
}

func TestFilemodeIsPythons(t *testing.T) {
	cases := map[uint32]string{syscall.S_IFREG | 0o644: "-rw-r--r--", syscall.S_IFDIR | 0o1777: "drwxrwxrwt",
		syscall.S_IFREG | 0o4755: "-rwsr-xr-x", syscall.S_IFREG | 0o2644: "-rw-r-Sr--", syscall.S_IFLNK | 0o777: "lrwxrwxrwx"}
	for mode, want := range cases {
		if got := filemode(mode); got != want {
			t.Errorf("%o: %s, not %s", mode, got, want)
		}
	}
}

func TestAUserFileThatIsAFIFOIsReadAsNoNames(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "passwd")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// a writer that never writes: a blocking read would wait for it for ever
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	done := make(chan map[uint32]string, 1)
	go func() { done <- (&names{path: fifo}).read() }()
	select {
	case got := <-done:
		if len(got) != 0 {
			t.Fatalf("names from a FIFO: %v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading the names blocked on a FIFO")
	}
}

func TestATimeoutNoClockReachesIsNoDeadline(t *testing.T) {
	for _, v := range []interface{}{1e10, 1e300, "inf"} {
		if got := timeoutOf(v); got != 0 {
			t.Fatalf("timeoutOf(%v) = %v, want no deadline", v, got)
		}
	}
	if got := timeoutOf(1.5); got != 1500*time.Millisecond {
		t.Fatalf("timeoutOf(1.5) = %v", got)
	}
}
