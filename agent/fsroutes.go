package main

// The filesystem routes (routes_fs.py): stat, list, mkdir, move, remove and watch, and asUser, which
// runs an fsops call for the acting user and turns its error into the catalogue's code.

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
)

// asUser runs fn(trustAll) as the box user (links followed, the kernel checking the user's rights)
// or, for user "root", as root (only root's links followed); an error is refused as the code that
// names it; what is the path (or paths) it is about.
func asUser(fn func(trust bool) error, user, what string) {
	var err error
	if user == "root" {
		err = fn(false)
	} else {
		actingAs(BoxUID, BoxGID, func() { err = fn(true) })
	}
	if err != nil {
		panic(refusalOf(err, user, what))
	}
}

func refusalOf(err error, user, what string) *Refusal {
	var fe *fsErr
	class := errnoOf(err)
	text := ""
	if errors.As(err, &fe) {
		switch fe.kind {
		case kindUnsafe:
			return &Refusal{ErrUnsafePath, fmt.Sprintf("%s goes through a link the box's user made (%s)", what, fe.msg)}
		case kindTooMany:
			return &Refusal{ErrTooManyEntries, fmt.Sprintf("%s: %s; list a smaller depth or a subdirectory", what, fe.msg)}
		}
		class, text = fe.errno, fe.msg
	}
	if text == "" {
		text = strerror(class)
	}
	switch class {
	case syscall.ENOENT:
		return &Refusal{ErrNotFound, "no such file or directory: " + what}
	case syscall.ENOTDIR:
		return &Refusal{ErrNotDir, fmt.Sprintf("not a directory: %s (or one of its parents)", what)}
	case syscall.EISDIR:
		return &Refusal{ErrIsDir, what + ": " + text}
	case syscall.EEXIST:
		return &Refusal{ErrExists, what + ": " + text}
	case syscall.EACCES, syscall.EPERM:
		who := BoxUser
		if user == "root" {
			who = "root"
		}
		return &Refusal{ErrPermission, what + ": permission denied to " + who}
	case syscall.ENOTEMPTY:
		return &Refusal{ErrExists, what + ": the destination is a directory that is not empty"}
	case syscall.EXDEV:
		return &Refusal{ErrIO, what + ": source and destination are on different filesystems"}
	}
	return &Refusal{ErrIO, what + ": " + text}
}

func fsStat(ex *Exchange) {
	path := ex.pathArg()
	var e *Entry
	asUser(func(trust bool) (err error) { e, err = statPath(path, trust); return }, ex.query()["user"], path)
	ex.answerJSON(e)
}

func fsList(ex *Exchange) {
	path := ex.pathArg()
	query := ex.query()
	depth := query["depth"]
	if depth == "" {
		depth = "1"
	}
	d, err := strconv.Atoi(depth)
	if !isDigits(depth) || err != nil || d < 1 || d > maxDepth {
		refuse(ErrBadRequest, "depth must be 1-%d", maxDepth)
	}
	var entries []*Entry
	asUser(func(trust bool) (err error) { entries, err = listDir(path, d, trust); return }, query["user"], path)
	ex.answerJSON(map[string]interface{}{"entries": entries})
}

// fsWatch streams a directory's changes until the host goes or the directory does, with a ping
// every 10 s of quiet. Watches as root, through root's links only.
func fsWatch(ex *Exchange) {
	path := ex.pathArg()
	query := ex.query()
	recursive := query["recursive"] == "true"
	entries := query["entries"] == "true"
	var w *Watch
	asUser(func(bool) (err error) { w, err = newWatch(path, recursive); return }, "root", path)
	defer w.close()
	stream := newEventStream(ex)
	for stream.alive && !w.ended {
		events := w.read(pingEvery)
		for _, e := range events {
			fields := []kv{{"name", e.name}, {"type", e.kind}}
			if entries && (e.kind == "create" || e.kind == "write" || e.kind == "chmod") {
				if entry := w.entry(e.name); entry != nil {
					fields = append(fields, kv{"entry", entry})
				}
			}
			stream.Send(Ev{T: EvFs, Fields: fields})
		}
		if len(events) == 0 {
			stream.Send(Ev{T: EvPing})
		}
	}
	stream.Close()
}

// changeRequest: the body's paths, in the order named (each refused unless an absolute box path),
// and its user.
func changeRequest(ex *Exchange, names ...string) ([]string, string) {
	req, err := ex.jsonBody()
	if err != nil {
		refuse(ErrBadRequest, "bad request: %v", err)
	}
	var paths []string
	for _, name := range names {
		path, ok := req[name].(string)
		problem := "a string is needed"
		if ok {
			problem = pathProblem(path)
		}
		if problem != "" {
			refuse(ErrBadPath, "%s: %s", name, problem)
		}
		paths = append(paths, path)
	}
	user, _ := req["user"].(string)
	return paths, user
}

func fsMkdir(ex *Exchange) {
	paths, user := changeRequest(ex, "path")
	owner := [2]int{BoxUID, BoxGID}
	if user == "root" {
		owner = [2]int{0, 0}
	}
	var e *Entry
	var created bool
	asUser(func(trust bool) (err error) { e, created, err = makeDir(paths[0], trust, owner); return }, user, paths[0])
	ex.answerJSON(map[string]interface{}{"entry": e, "created": created})
}

func fsMove(ex *Exchange) {
	paths, user := changeRequest(ex, "source", "destination")
	var e *Entry
	asUser(func(trust bool) (err error) { e, err = move(paths[0], paths[1], trust); return }, user, paths[0]+" -> "+paths[1])
	ex.answerJSON(e)
}

func fsRemove(ex *Exchange) {
	paths, user := changeRequest(ex, "path")
	asUser(func(trust bool) error { return remove(paths[0], trust) }, user, paths[0])
	ex.answerJSON(map[string]interface{}{})
}
