package main

// The sudo service (tests/unit/test_guest_sudo.py's ground): the command on the caller's stdio with
// its exit answered, a caller the kernel does not vouch for refused, a request that is not one
// starting nothing.

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func sudoService(t *testing.T, allowed map[int]bool) string {
	name := "@hutch-sudo-test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s := &SudoService{name: name, allowed: allowed, max: 4}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	return name
}

func askSudo(t *testing.T, service string, req interface{}, uid int, stdio []int) (*net.UnixConn, [][2]int) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: service, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(req)
	payload := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(payload, uint32(len(body)))
	copy(payload[4:], body)
	oob := syscall.UnixRights(stdio...)
	oob = append(oob, syscall.UnixCredentials(&syscall.Ucred{Pid: int32(os.Getpid()), Uid: uint32(uid), Gid: uint32(uid)})...)
	if _, _, err := conn.WriteMsgUnix(payload, oob, nil); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var answers [][2]int
	buf := make([]byte, 5)
	for {
		if _, err := readFull(conn, buf); err != nil {
			break
		}
		answers = append(answers, [2]int{int(buf[0]), int(int32(binary.BigEndian.Uint32(buf[1:])))})
		if buf[0] != sudoPID {
			break
		}
	}
	return conn, answers
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestTheServiceRunsTheCommandOnTheCallersStdioAndAnswersItsExit(t *testing.T) {
	needsRoot(t)
	service := sudoService(t, map[int]bool{0: true, BoxUID: true})
	r, w, _ := os.Pipe()
	null, _ := os.Open(os.DevNull)
	req := map[string]interface{}{"argv": []string{"sh", "-c", "id -u; exit 7"}, "env": map[string]string{"PATH": defaultPath},
		"cwd": "/", "uid": 0, "gid": 0, "groups": []int{}}
	conn, answers := askSudo(t, service, req, 0, []int{int(null.Fd()), int(w.Fd()), int(w.Fd())})
	conn.Close()
	w.Close()
	out := make([]byte, 100)
	n, _ := r.Read(out)
	if len(answers) != 2 || answers[0][0] != sudoPID || answers[1] != [2]int{sudoExit, 7} || string(out[:n]) != "0\n" {
		t.Fatalf("%v %q", answers, out[:n])
	}
	req["cwd"] = "/no/such/dir"
	conn, answers = askSudo(t, service, req, 0, []int{int(null.Fd()), int(null.Fd()), int(null.Fd())})
	conn.Close()
	if len(answers) != 1 || answers[0] != [2]int{sudoCwdErrno, int(syscall.ENOENT)} {
		t.Fatalf("%v", answers)
	}
}

func TestACallerNotAllowedIsRefusedAndARequestThatIsNotOneStartsNothing(t *testing.T) {
	needsRoot(t)
	service := sudoService(t, map[int]bool{BoxUID: true}) // root itself is not allowed here
	null, _ := os.Open(os.DevNull)
	fds := []int{int(null.Fd()), int(null.Fd()), int(null.Fd())}
	req := map[string]interface{}{"argv": []string{"true"}, "env": map[string]string{}, "cwd": "/", "uid": 0, "gid": 0, "groups": []int{}}
	conn, answers := askSudo(t, service, req, 0, fds)
	conn.Close()
	if len(answers) != 1 || answers[0][0] != sudoRefused {
		t.Fatalf("%v", answers)
	}
	for _, bad := range []map[string]interface{}{
		{"argv": []string{}, "env": map[string]string{}, "cwd": "/", "uid": 0, "gid": 0, "groups": []int{}},
		{"argv": []string{"true"}, "env": map[string]string{"A=B": "c"}, "cwd": "/", "uid": 0, "gid": 0, "groups": []int{}},
		{"argv": []string{"true"}, "env": map[string]string{}, "cwd": "rel", "uid": 0, "gid": 0, "groups": []int{}},
		{"argv": []string{"true"}, "env": map[string]string{}, "cwd": "/", "uid": -1, "gid": 0, "groups": []int{}},
		{"argv": []string{"true"}, "env": map[string]string{}, "cwd": "/", "uid": 1.5, "gid": 0, "groups": []int{}},
	} {
		data, _ := json.Marshal(bad)
		if _, err := checkSudoRequest(data); err == nil {
			t.Errorf("accepted %s", data)
		}
	}
}
