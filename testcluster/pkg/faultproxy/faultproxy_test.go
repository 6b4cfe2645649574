package faultproxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := NewFaults(nil)
			err := c.add(f)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			if s := f.State(); len(s.Fail)+len(s.Stall) != 0 || s.RefusingConnections {
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
