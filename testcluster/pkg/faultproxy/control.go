package faultproxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
)

// Control is the proxy's control endpoint (plain HTTP, loopback only):
//
//	GET    /faults                the rules in force
//	DELETE /faults                remove every rule (held requests go on)
//	POST   /faults/fail           {"code": 503, "count": 1, "verb": "list", "resource": "pods", "retryAfter": 1}
//	POST   /faults/stall          {"seconds": 3600, "verb": "watch", "resource": "pods", "count": null}
//	POST   /faults/cut            {"verb": "create", "resource": "pods", "count": 1}
//	POST   /faults/refuse         {"refuse": true, "seconds": 30} or {"connections": 3} or {"refuse": false}
//	POST   /faults/close-watches  end every open watch; answers {"closed": N}
//	GET    /counters              {"counts": [{"verb", "resource", "count"}]}
//	DELETE /counters              forget them
//
// Bad input gets 400 and {"error": "..."} saying what to fix.
func Control(p *Proxy) http.Handler {
	mux := http.NewServeMux()
	f := p.Faults
	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, f.State()) })
	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, r *http.Request) {
		f.Clear()
		writeJSON(w, 200, f.State())
	})
	mux.HandleFunc("POST /faults/fail", func(w http.ResponseWriter, r *http.Request) {
		body := struct {
			Match
			Code       *int `json:"code"`
			Count      *int `json:"count"`
			RetryAfter *int `json:"retryAfter"`
		}{}
		if !readJSON(w, r, &body) {
			return
		}
		code, count, retryAfter := or(body.Code, 500), or(body.Count, 1), or(body.RetryAfter, 1)
		answer(w, f, f.Fail(body.Match, code, count, retryAfter))
	})
	mux.HandleFunc("POST /faults/stall", func(w http.ResponseWriter, r *http.Request) {
		body := struct {
			Match
			Seconds *float64 `json:"seconds"`
			Count   *int     `json:"count"`
		}{}
		if !readJSON(w, r, &body) {
			return
		}
		if body.Seconds == nil {
			writeJSON(w, 400, map[string]string{"error": `"seconds" is required: how long to hold each matching request`})
			return
		}
		answer(w, f, f.Stall(body.Match, *body.Seconds, body.Count))
	})
	mux.HandleFunc("POST /faults/cut", func(w http.ResponseWriter, r *http.Request) {
		body := struct {
			Match
			Count *int `json:"count"`
		}{}
		if !readJSON(w, r, &body) {
			return
		}
		answer(w, f, f.Cut(body.Match, or(body.Count, 1)))
	})
	mux.HandleFunc("POST /faults/refuse", func(w http.ResponseWriter, r *http.Request) {
		body := struct {
			Refuse      *bool    `json:"refuse"`
			Seconds     *float64 `json:"seconds"`
			Connections *int     `json:"connections"`
		}{}
		if !readJSON(w, r, &body) {
			return
		}
		answer(w, f, f.Refuse(or(body.Refuse, true), or(body.Seconds, 0), or(body.Connections, 0)))
	})
	mux.HandleFunc("POST /faults/close-watches", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]int{"closed": p.CloseWatches()})
	})
	mux.HandleFunc("GET /counters", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"counts": f.Counts()})
	})
	mux.HandleFunc("DELETE /counters", func(w http.ResponseWriter, r *http.Request) {
		f.ResetCounts()
		writeJSON(w, 200, map[string]any{"counts": []Counter{}})
	})
	return mux
}

func or[T any](v *T, dflt T) T {
	if v == nil {
		return dflt
	}
	return *v
}

func answer(w http.ResponseWriter, f *Faults, err error) {
	if err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, 200, f.State())
}

// readJSON decodes an optional JSON object body with no unknown field.
func readJSON(w http.ResponseWriter, r *http.Request, into any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil && err != io.EOF {
		writeJSON(w, 400, map[string]string{"error": fmt.Sprintf("the body must be a JSON object of the fields documented for %s: %v", r.URL.Path, err)})
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// RefusingListener closes the connections the faults say to refuse as soon
// as they are accepted, with a reset (the client sees its connection refused
// or reset before any byte of TLS).
type RefusingListener struct {
	net.Listener
	Faults *Faults
}

// Accept returns the next connection that is not refused.
func (l RefusingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.Faults.RefuseConnection() {
			return c, nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}
