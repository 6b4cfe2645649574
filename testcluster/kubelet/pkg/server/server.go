// Package server serves the kubelet API paths the API server calls for the
// pods of simulated nodes: containerLogs, exec, attach and portForward.
//
// The streaming protocols (SPDY and WebSocket) are Kubernetes' own streaming
// server (k8s.io/cri-streaming); what only the node agent knows comes from it
// over its socket (package agent).
package server

import (
	"fmt"
	"net/http"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/gpuspawner/gpuspawner/testcluster/kubelet/pkg/agent"
)

// Defaults of the kubelet's streaming server (KubeletConfiguration
// streamingConnectionIdleTimeout, and the CRI streaming server's stream
// creation timeout).
const (
	DefaultIdleTimeout           = 4 * time.Hour
	DefaultStreamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

// Server answers the kubelet API for every node of one node agent.
type Server struct {
	Agent                 *agent.Client
	IdleTimeout           time.Duration
	StreamCreationTimeout time.Duration
}

// New returns a Server asking the node agent at socket.
func New(socket string) *Server {
	return &Server{
		Agent:                 &agent.Client{Socket: socket},
		IdleTimeout:           DefaultIdleTimeout,
		StreamCreationTimeout: DefaultStreamCreationTimeout,
	}
}

// Handler routes the kubelet's paths, each only for an authenticated client
// (see RequireClientCert).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.serveLogs)
	for _, p := range []string{"/exec/{namespace}/{pod}/{container}", "/exec/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("GET "+p, s.serveExec)
		mux.HandleFunc("POST "+p, s.serveExec)
	}
	for _, p := range []string{"/attach/{namespace}/{pod}/{container}", "/attach/{namespace}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("GET "+p, s.serveAttach)
		mux.HandleFunc("POST "+p, s.serveAttach)
	}
	for _, p := range []string{"/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"} {
		mux.HandleFunc("GET "+p, s.servePortForward)
		mux.HandleFunc("POST "+p, s.servePortForward)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "ok")
	})
	return RequireClientCert(mux)
}

// RequireClientCert answers 401 to a request without a client certificate
// that the TLS handshake verified against the client CA: the kubelet's x509
// authenticator with anonymous authentication off.
func RequireClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeAgentError answers as the kubelet does when the pod or container is
// not there, or the agent cannot be reached.
func writeAgentError(w http.ResponseWriter, err error) {
	if r, ok := agent.IsRefused(err); ok {
		code := r.Code
		if code == 0 {
			code = http.StatusInternalServerError
		}
		http.Error(w, r.Message, code)
		return
	}
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

func (s *Server) serveExec(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		http.Error(w, "missing command: give at least one command parameter", http.StatusBadRequest)
		return
	}
	sess := s.session(r)
	if err := sess.check(r, agent.OpCheck, cmd); err != nil {
		writeAgentError(w, err)
		return
	}
	remotecommand.ServeExec(w, r, sess, sess.pod, sess.uid, r.PathValue("container"), cmd, opts,
		s.IdleTimeout, s.StreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (s *Server) serveAttach(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sess := s.session(r)
	if err := sess.check(r, agent.OpCheck, nil); err != nil {
		writeAgentError(w, err)
		return
	}
	remotecommand.ServeAttach(w, r, sess, sess.pod, sess.uid, r.PathValue("container"), opts,
		s.IdleTimeout, s.StreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request) {
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sess := s.session(r)
	if err := sess.check(r, agent.OpPod, nil); err != nil {
		writeAgentError(w, err)
		return
	}
	portforward.ServePortForward(w, r, sess, sess.pod, sess.uid, opts,
		s.IdleTimeout, s.StreamCreationTimeout, portforward.SupportedProtocols)
}
