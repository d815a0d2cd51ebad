// Package main is hutch's guest agent: PID 1 of every box. It speaks the channel protocol that
// hutch/guest/protocol.py defines (the single source of its routes, codes and shapes) over
// HTTP/1.1 on the box's Unix socket. Standard library only.
package main

import "fmt"

const (
	Version = 1

	GuestRoot        = "/.hutch"
	ChannelDir       = GuestRoot + "/chan"
	TrustDir         = GuestRoot + "/ca"
	CACert           = TrustDir + "/ca.crt"
	CABundle         = TrustDir + "/bundle.crt"
	SocketName       = "agent.sock"
	EgressSocket     = "egress.sock"
	ProxyPort        = 3128
	SudoSocket       = "@hutch-sudo" // Go's spelling of the abstract name "\0hutch-sudo"
	WakeFile         = "wake"
	BoxUser          = "user"
	BoxUID           = 1000
	BoxGID           = 1000
	BoxHome          = "/home/user"
	MetadataPrefix   = "user.e2b."
	MaxMetadataBytes = 4096

	RouteHealth   = "/v1/health"
	RouteExec     = "/v1/exec"
	RouteFiles    = "/v1/files"
	RouteDirZip   = "/v1/dir-zip"
	RouteProcs    = "/v1/procs"
	RouteTunnel   = "/v1/tunnel"
	RouteQuiesce  = "/v1/quiesce"
	RouteFsStat   = "/v1/fs/stat"
	RouteFsList   = "/v1/fs/list"
	RouteFsMkdir  = "/v1/fs/mkdir"
	RouteFsMove   = "/v1/fs/move"
	RouteFsRemove = "/v1/fs/remove"
	RouteFsWatch  = "/v1/fs/watch"

	ProcEvents     = "events"
	ProcStdin      = "stdin"
	ProcStdinClose = "stdin-close"
	ProcSignal     = "signal"
	ProcResize     = "resize"

	EvStart   = "start"
	EvStdout  = "stdout"
	EvStderr  = "stderr"
	EvExit    = "exit"
	EvError   = "error"
	EvPing    = "ping"
	EvFs      = "fs"
	EvDropped = "dropped"

	ErrBadPath        = "invalid_path"
	ErrNotFound       = "file_not_found"
	ErrIsDir          = "is_a_directory"
	ErrNotDir         = "not_a_directory"
	ErrNotRegular     = "not_a_regular_file"
	ErrUnsafePath     = "unsafe_path"
	ErrBadRequest     = "invalid_request"
	ErrNoRoute        = "no_such_route"
	ErrBodyTooLarge   = "body_too_large"
	ErrBadCwd         = "invalid_cwd"
	ErrStartFailed    = "command_start_failed"
	ErrIO             = "io_error"
	ErrNoProcess      = "process_not_found"
	ErrNotTTY         = "not_a_terminal"
	ErrStdinClosed    = "stdin_closed"
	ErrStdinFull      = "stdin_full"
	ErrTooManyProcs   = "too_many_processes"
	ErrPortClosed     = "port_not_listening"
	ErrPermission     = "permission_denied"
	ErrExists         = "already_exists"
	ErrTooManyEntries = "too_many_entries"
	ErrAgent          = "agent_error"
)

// ErrorStatus: each code's one status (protocol.ERROR_STATUS).
var ErrorStatus = map[string]int{
	ErrBadPath: 400, ErrNotFound: 404, ErrIsDir: 400, ErrNotDir: 400, ErrNotRegular: 400,
	ErrUnsafePath: 400, ErrBadRequest: 400, ErrNoRoute: 404, ErrBodyTooLarge: 413, ErrBadCwd: 400,
	ErrStartFailed: 503, ErrIO: 400, ErrNoProcess: 404, ErrNotTTY: 400, ErrStdinClosed: 409,
	ErrStdinFull: 409, ErrTooManyProcs: 429, ErrPortClosed: 502, ErrPermission: 403, ErrExists: 409,
	ErrTooManyEntries: 400, ErrAgent: 500,
}

// Refusal is an error answer of the agent's: raised (panicked) where it is found, answered by the channel.
type Refusal struct{ Code, Message string }

func (r *Refusal) Error() string { return r.Code + ": " + r.Message }

func refuse(code string, format string, args ...interface{}) {
	panic(&Refusal{code, fmt.Sprintf(format, args...)})
}

// pathProblem: why a box path is unacceptable, or "": absolute, no '..' segment, no NUL.
func pathProblem(path string) string {
	if len(path) == 0 || path[0] != '/' {
		return "path must be absolute"
	}
	for i := 0; i < len(path); i++ {
		if path[i] == 0 {
			return "path must not contain NUL"
		}
	}
	start := 0
	for i := 0; i <= len(path); i++ {
		if i == len(path) || path[i] == '/' {
			if path[start:i] == ".." {
				return "path must not contain '..' segments"
			}
			start = i + 1
		}
	}
	if len(path) > 4096 {
		return "path is longer than 4096 bytes"
	}
	return ""
}
