// Package agent is the client side of the node agent's socket: what only the
// node agent knows about a pod (its log, its running containers, its IP).
//
// Each request is one connection to the agent's Unix socket. The client writes
// one JSON line (a Request); the agent answers one JSON line (a Reply). A logs
// request is then followed by the log's bytes until the agent closes; exec and
// attach are followed by Frames both ways until the agent sends an exit Frame.
package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
)

// Operations a Request may ask for.
const (
	OpLogs   = "logs"
	OpExec   = "exec"
	OpAttach = "attach"
	OpPod    = "pod"
	// OpCheck asks whether the container runs, before a stream is upgraded.
	OpCheck = "check"
)

// Frame kinds on an exec or attach connection.
const (
	FrameStdin      byte = 0 // client to agent: bytes for the process's stdin
	FrameStdout     byte = 1 // agent to client
	FrameStderr     byte = 2 // agent to client
	FrameExit       byte = 3 // agent to client: an Exit as JSON, the last frame
	FrameResize     byte = 4 // client to agent: {"Width":w,"Height":h}
	FrameStdinClose byte = 5 // client to agent: end of stdin
)

// MaxFrame is the largest payload a frame may carry.
const MaxFrame = 1 << 20

// Request is what the kubelet API asks the agent.
type Request struct {
	Op        string   `json:"op"`
	Namespace string   `json:"namespace"`
	Pod       string   `json:"pod"`
	UID       string   `json:"uid,omitempty"`
	Container string   `json:"container,omitempty"`
	Command   []string `json:"command,omitempty"`
	Stdin     bool     `json:"stdin,omitempty"`
	TTY       bool     `json:"tty,omitempty"`

	// Log options (OpLogs), as PodLogOptions names them.
	Follow       bool   `json:"follow,omitempty"`
	Previous     bool   `json:"previous,omitempty"`
	Timestamps   bool   `json:"timestamps,omitempty"`
	TailLines    *int64 `json:"tailLines,omitempty"`
	LimitBytes   *int64 `json:"limitBytes,omitempty"`
	SinceSeconds *int64 `json:"sinceSeconds,omitempty"`
	SinceTime    string `json:"sinceTime,omitempty"`
}

// Reply is the agent's first answer.
type Reply struct {
	// Error is set when the agent refuses; Code is the HTTP status to answer with.
	Error string `json:"error,omitempty"`
	Code  int    `json:"code,omitempty"`
	// UID is the pod's uid; PodIP its IP (OpPod); TTY whether the attached container has a terminal.
	UID   string `json:"uid,omitempty"`
	PodIP string `json:"podIP,omitempty"`
	TTY   bool   `json:"tty,omitempty"`
}

// Exit is the payload of the last frame of an exec or attach.
type Exit struct {
	ExitCode *int   `json:"exitCode,omitempty"`
	Error    string `json:"error,omitempty"`
}

// RefusedError is an agent's refusal of a request.
type RefusedError struct {
	Code    int
	Message string
}

func (e *RefusedError) Error() string { return e.Message }

// Client reaches the agent at Socket.
type Client struct {
	Socket string
}

// Conn is one request's connection after the agent's Reply.
type Conn struct {
	net.Conn
	Reader *bufio.Reader
	Reply  Reply
}

// Do sends req and reads the agent's Reply. A refusal is a *RefusedError.
func (c *Client) Do(ctx context.Context, req Request) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return nil, fmt.Errorf("reaching the node agent at %s: %w", c.Socket, err)
	}
	line, err := json.Marshal(req)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	if _, err := nc.Write(append(line, '\n')); err != nil {
		nc.Close()
		return nil, fmt.Errorf("writing to the node agent: %w", err)
	}
	conn := &Conn{Conn: nc, Reader: bufio.NewReader(nc)}
	answer, err := conn.Reader.ReadBytes('\n')
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("reading the node agent's reply: %w", err)
	}
	if err := json.Unmarshal(answer, &conn.Reply); err != nil {
		nc.Close()
		return nil, fmt.Errorf("decoding the node agent's reply %q: %w", answer, err)
	}
	if conn.Reply.Error != "" {
		nc.Close()
		return nil, &RefusedError{Code: conn.Reply.Code, Message: conn.Reply.Error}
	}
	return conn, nil
}

// WriteFrame writes one frame to w.
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("frame of %d bytes: at most %d", len(payload), MaxFrame)
	}
	hdr := make([]byte, 5, 5+len(payload))
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(append(hdr, payload...)); err != nil {
		return fmt.Errorf("writing frame: %w", err)
	}
	return nil
}

// ReadFrame reads one frame from r.
func ReadFrame(r io.Reader) (kind byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes: at most %d", n, MaxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("reading frame: %w", err)
	}
	return hdr[0], payload, nil
}

// IsRefused reports whether err is the agent's refusal, and returns it.
func IsRefused(err error) (*RefusedError, bool) {
	var r *RefusedError
	ok := errors.As(err, &r)
	return r, ok
}
