package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpuspawner/gpuspawner/testcluster/kubelet/pkg/agent"
)

// logRequest turns the query of GET containerLogs into the agent's request,
// checked as PodLogOptions' validation checks it.
func logRequest(q url.Values) (agent.Request, error) {
	var req agent.Request
	var err error
	if req.Follow, err = boolParam(q, "follow"); err != nil {
		return req, err
	}
	if req.Previous, err = boolParam(q, "previous"); err != nil {
		return req, err
	}
	if req.Timestamps, err = boolParam(q, "timestamps"); err != nil {
		return req, err
	}
	if req.TailLines, err = intParam(q, "tailLines", 0); err != nil {
		return req, err
	}
	if req.LimitBytes, err = intParam(q, "limitBytes", 1); err != nil {
		return req, err
	}
	if req.SinceSeconds, err = intParam(q, "sinceSeconds", 1); err != nil {
		return req, err
	}
	if s := q.Get("sinceTime"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return req, fmt.Errorf("sinceTime %q: give an RFC 3339 time: %w", s, err)
		}
		req.SinceTime = t.UTC().Format(time.RFC3339Nano)
	}
	if req.SinceSeconds != nil && req.SinceTime != "" {
		return req, fmt.Errorf("at most one of sinceTime or sinceSeconds may be specified")
	}
	return req, nil
}

func boolParam(q url.Values, name string) (bool, error) {
	s := q.Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%s=%q: give true or false: %w", name, s, err)
	}
	return b, nil
}

func intParam(q url.Values, name string, least int64) (*int64, error) {
	s := q.Get(name)
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: give a whole number: %w", name, s, err)
	}
	if n < least {
		return nil, fmt.Errorf("%s=%d: must be at least %d", name, n, least)
	}
	return &n, nil
}

// serveLogs streams a container's log from the agent; with follow, each
// chunk is flushed as it comes.
func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request) {
	req, err := logRequest(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Op = agent.OpLogs
	req.Namespace, req.Pod, req.Container = r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	conn, err := s.Agent.Do(r.Context(), req)
	if err != nil {
		writeAgentError(w, err)
		return
	}
	defer conn.Close()
	go func() {
		<-r.Context().Done() // the client left: the agent stops following
		conn.Close()
	}()
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32*1024)
	for {
		n, err := conn.Reader.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil { // io.EOF: the agent sent all
			return
		}
	}
}
