package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/gpuspawner/gpuspawner/testcluster/kubelet/pkg/agent"
)

// session is one exec, attach or port-forward request: the streaming
// server's Executor, Attacher and PortForwarder for one pod.
type session struct {
	agent     *agent.Client
	namespace string
	pod       string
	uid       string
	container string
	podIP     string
}

func (s *Server) session(r *http.Request) *session {
	return &session{agent: s.Agent, namespace: r.PathValue("namespace"), pod: r.PathValue("pod"),
		uid: r.PathValue("uid"), container: r.PathValue("container")}
}

// check asks the agent whether the pod (and the container, able to run cmd
// when one is given) is there, before the connection is upgraded, and learns
// the pod's uid and IP.
func (ss *session) check(r *http.Request, op string, cmd []string) error {
	c, err := ss.agent.Do(r.Context(), agent.Request{Op: op, Namespace: ss.namespace, Pod: ss.pod, UID: ss.uid,
		Container: ss.container, Command: cmd})
	if err != nil {
		return err
	}
	c.Close()
	ss.uid, ss.podIP = c.Reply.UID, c.Reply.PodIP
	return nil
}

// ExecInContainer runs cmd in the container through the agent.
func (ss *session) ExecInContainer(ctx context.Context, _ string, _ string, container string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	req := agent.Request{Op: agent.OpExec, Namespace: ss.namespace, Pod: ss.pod, UID: ss.uid, Container: container,
		Command: cmd, Stdin: in != nil, TTY: tty}
	return ss.stream(ctx, req, in, out, errOut, resize)
}

// AttachContainer joins the container's stdio through the agent.
func (ss *session) AttachContainer(ctx context.Context, _ string, _ string, container string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	req := agent.Request{Op: agent.OpAttach, Namespace: ss.namespace, Pod: ss.pod, UID: ss.uid, Container: container,
		Stdin: in != nil, TTY: tty}
	return ss.stream(ctx, req, in, out, errOut, resize)
}

// PortForward copies between stream and the pod's port on its pod IP.
func (ss *session) PortForward(ctx context.Context, _ string, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	if ss.podIP == "" {
		return fmt.Errorf("pod %s/%s has no IP yet", ss.namespace, ss.pod)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ss.podIP, strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("failed to connect to port %d in pod %s/%s: %w", port, ss.namespace, ss.pod, err)
	}
	defer conn.Close()
	// the client's end of input half-closes the pod's connection; the forward
	// ends when the pod's side is done, its answer sent
	go func() {
		if _, err := io.Copy(conn, stream); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
		} else {
			conn.Close()
		}
	}()
	if _, err := io.Copy(stream, conn); err != nil && ctx.Err() == nil {
		return fmt.Errorf("copying from port %d of pod %s/%s: %w", port, ss.namespace, ss.pod, err)
	}
	return nil
}

// stream runs one exec or attach over the agent's socket: stdin and resizes
// go to the agent as frames, stdout and stderr come back, then the exit.
func (ss *session) stream(ctx context.Context, req agent.Request, in io.Reader, out, errOut io.WriteCloser,
	resize <-chan remotecommand.TerminalSize) error {
	conn, err := ss.agent.Do(ctx, req)
	if err != nil {
		return err
	}
	defer conn.Close()
	var wmu sync.Mutex
	send := func(kind byte, payload []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return agent.WriteFrame(conn, kind, payload)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
			conn.Close()
		case <-stop:
		}
	}()
	if in != nil {
		go copyStdin(in, send)
	}
	if resize != nil {
		go func() {
			for {
				select {
				case size, ok := <-resize:
					if !ok {
						return
					}
					data, _ := json.Marshal(size)
					if send(agent.FrameResize, data) != nil {
						return
					}
				case <-stop:
					return
				}
			}
		}()
	}
	return relayOutput(conn, out, errOut)
}

func copyStdin(in io.Reader, send func(byte, []byte) error) {
	buf := make([]byte, 32*1024)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if send(agent.FrameStdin, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			send(agent.FrameStdinClose, nil)
			return
		}
	}
}

// relayOutput writes the agent's output frames to out and errOut until its
// exit frame, and turns that into what the streaming server reports.
func relayOutput(conn *agent.Conn, out, errOut io.Writer) error {
	for {
		kind, payload, err := agent.ReadFrame(conn.Reader)
		if err != nil {
			return fmt.Errorf("the node agent ended the stream: %w", err)
		}
		var w io.Writer
		switch kind {
		case agent.FrameStdout:
			w = out
		case agent.FrameStderr:
			w = errOut
		case agent.FrameExit:
			return exitError(payload)
		default:
			return fmt.Errorf("the node agent sent a frame of unknown kind %d", kind)
		}
		if w == nil {
			continue
		}
		if _, err := w.Write(payload); err != nil {
			// the client left: closing the agent's side stops the stream
			return fmt.Errorf("writing to the client: %w", err)
		}
	}
}

func exitError(payload []byte) error {
	var exit agent.Exit
	if err := json.Unmarshal(payload, &exit); err != nil {
		return fmt.Errorf("decoding the node agent's exit %q: %w", payload, err)
	}
	if exit.Error != "" {
		return fmt.Errorf("%s", exit.Error)
	}
	if exit.ExitCode != nil && *exit.ExitCode != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", *exit.ExitCode),
			Code: *exit.ExitCode}
	}
	return nil
}
