package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"testing"
)

func TestFramesRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		kind    byte
		payload []byte
	}{
		{"empty stdin close", FrameStdinClose, nil},
		{"stdout", FrameStdout, []byte("hello\n")},
		{"largest", FrameStderr, bytes.Repeat([]byte("x"), MaxFrame)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteFrame(&buf, tt.kind, tt.payload); err != nil {
				t.Fatal(err)
			}
			kind, payload, err := ReadFrame(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if kind != tt.kind || !bytes.Equal(payload, tt.payload) {
				t.Errorf("got kind %d and %d bytes, want kind %d and %d bytes", kind, len(payload), tt.kind, len(tt.payload))
			}
		})
	}
}

func TestFramesOverTheLimitAreRefused(t *testing.T) {
	if err := WriteFrame(&bytes.Buffer{}, FrameStdin, make([]byte, MaxFrame+1)); err == nil {
		t.Error("writing a frame over MaxFrame: want an error")
	}
	hdr := []byte{FrameStdout, 0xff, 0xff, 0xff, 0xff}
	if _, _, err := ReadFrame(bytes.NewReader(hdr)); err == nil {
		t.Error("reading a frame announcing 4 GiB: want an error")
	}
}

// serveOnce answers one request on a Unix socket with reply and records the request.
func serveOnce(t *testing.T, reply string) (string, <-chan Request) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan Request, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		var req Request
		json.Unmarshal(line, &req)
		got <- req
		c.Write([]byte(reply + "\n"))
	}()
	return path, got
}

func TestDoSendsTheRequestAndReadsTheReply(t *testing.T) {
	path, got := serveOnce(t, `{"uid":"u1","podIP":"127.0.0.5"}`)
	c := &Client{Socket: path}
	conn, err := c.Do(context.Background(), Request{Op: OpPod, Namespace: "ns", Pod: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if conn.Reply.UID != "u1" || conn.Reply.PodIP != "127.0.0.5" {
		t.Errorf("reply %+v", conn.Reply)
	}
	if req := <-got; req.Op != OpPod || req.Namespace != "ns" || req.Pod != "p" {
		t.Errorf("the agent got %+v", req)
	}
}

func TestDoReturnsTheAgentsRefusal(t *testing.T) {
	path, _ := serveOnce(t, `{"error":"pod does not exist","code":404}`)
	_, err := (&Client{Socket: path}).Do(context.Background(), Request{Op: OpCheck})
	r, ok := IsRefused(err)
	if !ok || r.Code != 404 || r.Message != "pod does not exist" {
		t.Errorf("got %v, want the agent's 404 refusal", err)
	}
}

func TestDoWithoutAnAgentSaysWhere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.sock")
	_, err := (&Client{Socket: path}).Do(context.Background(), Request{Op: OpPod})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(path)) {
		t.Errorf("got %v, want an error naming %s", err, path)
	}
	if _, ok := IsRefused(err); ok {
		t.Error("an unreachable agent is not a refusal")
	}
}
