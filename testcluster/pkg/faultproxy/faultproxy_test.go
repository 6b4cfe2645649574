package faultproxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		name           string
		m              Match
		verb, resource string
		want           bool
	}{
		{"any", Match{}, "watch", "pods", true},
		{"verb", Match{Verb: "watch"}, "list", "pods", false},
		{"resource and its subresources", Match{Resource: "pods"}, "get", "pods/log", true},
		{"not a prefix of another plural", Match{Resource: "pod"}, "get", "pods", false},
		{"subresource only", Match{Resource: "pods/status"}, "patch", "pods", false},
		{"both", Match{Verb: "list", Resource: "nodes"}, "list", "nodes", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.m.Matches(c.verb, c.resource); got != c.want {
				t.Fatalf("%+v.Matches(%q, %q) = %v, want %v", c.m, c.verb, c.resource, got, c.want)
			}
		})
	}
}

func TestRulesRefusedWithWhatToFix(t *testing.T) {
	zero := 0
	cases := []struct {
		name string
		add  func(f *Faults) error
		want string
	}{
		{"unknown verb", func(f *Faults) error { return f.Fail(Match{Verb: "fetch"}, 503, 1, 1) }, `unknown verb "fetch"`},
		{"a pattern for a resource", func(f *Faults) error { return f.Fail(Match{Resource: "pods*"}, 503, 1, 1) }, "not a resource name"},
		{"code", func(f *Faults) error { return f.Fail(Match{}, 200, 1, 1) }, "code 200 cannot be injected"},
		{"count", func(f *Faults) error { return f.Fail(Match{}, 503, 0, 1) }, "count must be at least 1"},
		{"retry after", func(f *Faults) error { return f.Fail(Match{}, 429, 1, -1) }, "retryAfter must be"},
		{"stall seconds", func(f *Faults) error { return f.Stall(Match{}, 0, nil) }, "seconds must be a positive"},
		{"stall count", func(f *Faults) error { return f.Stall(Match{}, 1, &zero) }, "count must be at least 1"},
		{"refuse connections", func(f *Faults) error { return f.Refuse(true, 0, -1) }, "connections must be"},
		{"cut verb", func(f *Faults) error { return f.Cut(Match{Verb: "post"}, 1) }, `unknown verb "post"`},
		{"cut a watch", func(f *Faults) error { return f.Cut(Match{Verb: "watch"}, 1) }, `verb "watch" cannot be cut`},
		{"cut resource", func(f *Faults) error { return f.Cut(Match{Resource: "/pods"}, 1) }, "not a resource name"},
		{"cut count", func(f *Faults) error { return f.Cut(Match{}, 0) }, "count must be at least 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := NewFaults(nil)
			err := c.add(f)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			if s := f.State(); len(s.Fail)+len(s.Stall)+len(s.Cut) != 0 || s.RefusingConnections {
				t.Fatalf("a refused rule was kept: %+v", s)
			}
		})
	}
}

func TestFailRuleIsUsedUpAndCounted(t *testing.T) {
	f := NewFaults(nil)
	if err := f.Fail(Match{Verb: "list", Resource: "pods"}, 503, 2, 3); err != nil {
		t.Fatal(err)
	}
	var codes []int
	for _, verb := range []string{"list", "watch", "list", "list"} {
		_, rule := f.Take(verb, "pods")
		if rule != nil {
			codes = append(codes, rule.Code)
		} else {
			codes = append(codes, 0)
		}
	}
	if want := []int{503, 0, 503, 0}; !equal(codes, want) {
		t.Fatalf("answers %v, want %v", codes, want)
	}
	if got := f.Counts(); len(got) != 2 || got[0] != (Counter{"list", "pods", 3}) || got[1] != (Counter{"watch", "pods", 1}) {
		t.Fatalf("counts %+v", got)
	}
}

func TestRefusalByCountAndByTime(t *testing.T) {
	now := time.Unix(1000, 0)
	f := NewFaults(func() time.Time { return now })
	_ = f.Refuse(true, 0, 2)
	got := []bool{f.RefuseConnection(), f.RefuseConnection(), f.RefuseConnection()}
	if !equal(got, []bool{true, true, false}) {
		t.Fatalf("by count: %v", got)
	}
	_ = f.Refuse(true, 5, 0)
	first := f.RefuseConnection()
	now = now.Add(6 * time.Second)
	if !first || f.RefuseConnection() {
		t.Fatal("refusing for 5 s: refused at first, then not after 6 s")
	}
	_ = f.Refuse(true, 0, 0)
	_ = f.Refuse(false, 0, 0)
	if f.RefuseConnection() {
		t.Fatal("refuse=false stops refusing")
	}
}

func TestClearReleasesHeldRequests(t *testing.T) {
	f := NewFaults(nil)
	_ = f.Stall(Match{Verb: "watch"}, 3600, nil)
	stall, _ := f.Take("watch", "pods")
	if stall == nil || stall.For != time.Hour {
		t.Fatalf("stall %+v", stall)
	}
	f.Clear()
	select {
	case <-stall.Released:
	case <-time.After(time.Second):
		t.Fatal("Clear did not release the held request")
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// upstream is an API server stand-in: pod watches send one event and then
// wait; everything else echoes the X-Remote-User header it got.
func upstream(t *testing.T) (*Proxy, *httptest.Server) {
	t.Helper()
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "1" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"type":"ADDED","object":{}}`+"\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, "user="+r.Header.Get(userHeader))
	}))
	t.Cleanup(api.Close)
	u, _ := url.Parse(api.URL)
	trust := api.Client().Transport.(*http.Transport).TLSClientConfig
	p := New(u, trust, trust.Clone(), NewFaults(nil))
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return p, front
}

func TestInjected429CarriesRetryAfter(t *testing.T) {
	p, front := upstream(t)
	_ = p.Faults.Fail(Match{Verb: "list", Resource: "pods"}, 429, 1, 7)
	r, err := http.Get(front.URL + "/api/v1/namespaces/ns/pods")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var status struct {
		Kind    string
		Code    int
		Reason  string
		Details struct{ RetryAfterSeconds int }
	}
	_ = json.NewDecoder(r.Body).Decode(&status)
	if r.StatusCode != 429 || r.Header.Get("Retry-After") != "7" || status.Kind != "Status" ||
		status.Reason != "TooManyRequests" || status.Details.RetryAfterSeconds != 7 {
		t.Fatalf("got %d Retry-After=%q %+v", r.StatusCode, r.Header.Get("Retry-After"), status)
	}
	// used up: the next one goes through
	r2, err := http.Get(front.URL + "/api/v1/namespaces/ns/pods")
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 200 {
		t.Fatalf("the second list got %d", r2.StatusCode)
	}
}

func TestAClientCannotNameItsOwnUser(t *testing.T) {
	_, front := upstream(t)
	req, _ := http.NewRequest("GET", front.URL+"/api/v1/nodes", nil)
	req.Header.Set("X-Remote-User", "system:admin")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(body) != "user=" {
		t.Fatalf("the API server was told %q", body)
	}
}

func TestStalledWatchDeliversNothingUntilCut(t *testing.T) {
	p, front := upstream(t)
	_ = p.Faults.Stall(Match{Verb: "watch"}, 3600, nil)
	got := make(chan *http.Response, 1)
	go func() {
		r, err := http.Get(front.URL + "/api/v1/pods?watch=1&allowWatchBookmarks=true")
		if err == nil {
			got <- r
		}
	}()
	select {
	case <-got:
		t.Fatal("a stalled watch was answered")
	case <-time.After(300 * time.Millisecond):
	}
	if n := p.CloseWatches(); n != 1 {
		t.Fatalf("closed %d watches, want 1", n)
	}
	select {
	case r := <-got:
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || len(body) != 0 {
			t.Fatalf("a cut stalled watch ends with 200 and no event, got %d %q", r.StatusCode, body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cut watch did not end")
	}
}

func TestCutWatchEndsCleanly(t *testing.T) {
	p, front := upstream(t)
	r, err := http.Get(front.URL + "/api/v1/pods?watch=1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	line, err := bufio.NewReader(r.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, "ADDED") {
		t.Fatalf("first event %q, %v", line, err)
	}
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(r.Body); done <- err }()
	time.Sleep(100 * time.Millisecond)
	p.CloseWatches()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the watch ended with %v, not cleanly", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch was not cut")
	}
}

func TestWatchTold410GetsAnErrorEvent(t *testing.T) {
	p, front := upstream(t)
	_ = p.Faults.Fail(Match{Verb: "watch"}, 410, 1, 0)
	r, err := http.Get(front.URL + "/api/v1/pods?watch=1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var ev struct {
		Type   string
		Object struct{ Code int }
	}
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil || r.StatusCode != 200 || ev.Type != "ERROR" || ev.Object.Code != 410 {
		t.Fatalf("got %d %+v %v", r.StatusCode, ev, err)
	}
}

func TestCutRuleIsUsedUpShownAndCleared(t *testing.T) {
	f := NewFaults(nil)
	if err := f.Cut(Match{Verb: "create", Resource: "pods"}, 2); err != nil {
		t.Fatal(err)
	}
	if s := f.State(); len(s.Cut) != 1 || s.Cut[0] != (CutRule{Match{"create", "pods"}, 2}) {
		t.Fatalf("state %+v", s.Cut)
	}
	var got []bool
	for _, req := range [][2]string{{"get", "pods"}, {"create", "pods"}, {"create", "pods/binding"}, {"create", "pods"}} {
		got = append(got, f.TakeCut(req[0], req[1]))
	}
	if want := []bool{false, true, true, false}; !equal(got, want) {
		t.Fatalf("cuts %v, want %v", got, want)
	}
	if s := f.State(); len(s.Cut) != 0 {
		t.Fatalf("a used-up cut rule is still shown: %+v", s.Cut)
	}
	_ = f.Cut(Match{}, 1)
	f.Clear()
	if f.TakeCut("create", "pods") {
		t.Fatal("Clear did not remove the cut rule")
	}
}

// cutUpstream is an API server stand-in that records the requests it carries
// out and answers each with body: with its Content-Length, or in two flushed
// halves (chunked) when the query says chunked=1. A followed log streams.
type cutUpstream struct {
	body []byte

	mu   sync.Mutex
	seen []string
}

func (u *cutUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.seen = append(u.seen, r.Method+" "+r.URL.Path)
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("chunked") != "1" {
		w.Header().Set("Content-Length", fmt.Sprint(len(u.body)))
	}
	w.WriteHeader(http.StatusCreated)
	half := len(u.body) / 2
	_, _ = w.Write(u.body[:half])
	w.(http.Flusher).Flush()
	_, _ = w.Write(u.body[half:])
}

func (u *cutUpstream) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

// cutProxy is a proxy in front of a cutUpstream, serving TLS to its clients
// over HTTP/1.1 or, with h2, HTTP/2 (what client-go negotiates).
func cutProxy(t *testing.T, h2 bool) (*Proxy, *cutUpstream, *httptest.Server) {
	t.Helper()
	u := &cutUpstream{body: []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns"},"spec":{}}`)}
	api := httptest.NewTLSServer(u)
	t.Cleanup(api.Close)
	apiURL, _ := url.Parse(api.URL)
	trust := api.Client().Transport.(*http.Transport).TLSClientConfig
	p := New(apiURL, trust, trust.Clone(), NewFaults(nil))
	front := httptest.NewUnstartedServer(p)
	front.EnableHTTP2 = h2
	front.StartTLS()
	t.Cleanup(front.Close)
	return p, u, front
}

func TestCutReplyIsCarriedOutThenEndsShort(t *testing.T) {
	cases := []struct {
		name    string
		h2      bool
		query   string
		wantErr string
	}{
		{"HTTP/1.1 with Content-Length", false, "", "unexpected EOF"},
		{"HTTP/1.1 chunked", false, "?chunked=1", "unexpected EOF"},
		{"HTTP/2", true, "", "INTERNAL_ERROR"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, u, front := cutProxy(t, c.h2)
			if err := p.Faults.Cut(Match{Verb: "create", Resource: "pods"}, 1); err != nil {
				t.Fatal(err)
			}
			client := front.Client()
			post := func() (*http.Response, []byte, error) {
				r, err := client.Post(front.URL+"/api/v1/namespaces/ns/pods"+c.query, "application/json", strings.NewReader("{}"))
				if err != nil {
					return nil, nil, err
				}
				defer r.Body.Close()
				body, err := io.ReadAll(r.Body)
				return r, body, err
			}
			r, body, err := post()
			if r == nil {
				t.Fatalf("the cut reply's status line and headers did not arrive: %v", err)
			}
			if got := r.ProtoMajor; got != map[bool]int{false: 1, true: 2}[c.h2] {
				t.Fatalf("served over HTTP/%d", got)
			}
			wantLength := int64(len(u.body))
			if c.query != "" {
				wantLength = -1 // chunked, as the API server sent it
			}
			if r.StatusCode != http.StatusCreated || r.ContentLength != wantLength || r.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("got %d, length %d, %v; want the API server's 201, length %d", r.StatusCode, r.ContentLength, r.Header, wantLength)
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("reading the cut body: %v, want an error containing %q", err, c.wantErr)
			}
			if !bytes.Equal(body, u.body[:len(u.body)/2]) {
				t.Fatalf("the client got %q, want the first half of %q", body, u.body)
			}
			if got := u.requests(); !equal(got, []string{"POST /api/v1/namespaces/ns/pods"}) {
				t.Fatalf("the API server got %v", got)
			}
			// used up: the next one is answered whole
			if r, body, err := post(); err != nil || r.StatusCode != http.StatusCreated || !bytes.Equal(body, u.body) {
				t.Fatalf("the next create: %v %q %v", r, body, err)
			}
			if s := p.Faults.State(); len(s.Cut) != 0 {
				t.Fatalf("the rule is still shown: %+v", s.Cut)
			}
		})
	}
}

func TestCutSendsHeadersAndHalfTheBodyThenCloses(t *testing.T) {
	p, u, front := cutProxy(t, false)
	_ = p.Faults.Cut(Match{}, 1)
	conf := front.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	conn, err := tls.Dial("tcp", front.Listener.Addr().String(), conf)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /api/v1/namespaces/ns/pods HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the connection was not closed: %v", err)
	}
	head, body, _ := strings.Cut(string(got), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 201 Created\r\n") || !strings.Contains(head, fmt.Sprintf("\r\nContent-Length: %d", len(u.body))) ||
		body != string(u.body[:len(u.body)/2]) {
		t.Fatalf("got %q, want the 201 with its Content-Length and the first half of %q", got, u.body)
	}
}

func TestCutLeavesStreamsWhole(t *testing.T) {
	p, u, front := cutProxy(t, false)
	_ = p.Faults.Cut(Match{Resource: "pods"}, 1)
	r, err := front.Client().Get(front.URL + "/api/v1/namespaces/ns/pods/p/log?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil || !bytes.Equal(body, u.body) {
		t.Fatalf("a followed log: %q %v", body, err)
	}
	if s := p.Faults.State(); len(s.Cut) != 1 || s.Cut[0].Remaining != 1 {
		t.Fatalf("a followed log used the rule up: %+v", s.Cut)
	}
}
