// Package faultproxy is a TLS proxy in front of a Kubernetes API server that
// injects faults into what it passes on: error answers, refused connections,
// stalled requests, cut watches and replies cut in the middle of their body,
// chosen by verb and resource at runtime.
package faultproxy

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Verbs are the request verbs of Kubernetes' RequestInfo (the audit log's)
// that a rule may name.
var Verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// Codes are the HTTP statuses a fail rule may answer with.
var Codes = []int{403, 410, 429, 500, 502, 503, 504}

// Match picks requests by verb and resource; an empty field matches any.
// Resource is a plural, with its subresource after a slash ("pods/status");
// a plain plural also matches its subresources ("pods" matches "pods/log").
type Match struct {
	Verb     string `json:"verb,omitempty"`
	Resource string `json:"resource,omitempty"`
}

// Matches says whether a request of verb on resource (with "/sub") is picked.
func (m Match) Matches(verb, resource string) bool {
	if m.Verb != "" && m.Verb != verb {
		return false
	}
	if m.Resource != "" && m.Resource != resource && !strings.HasPrefix(resource, m.Resource+"/") {
		return false
	}
	return true
}

func (m Match) validate() error {
	if m.Verb != "" && !slices.Contains(Verbs, m.Verb) {
		return fmt.Errorf("unknown verb %q: use one of %s", m.Verb, strings.Join(Verbs, ", "))
	}
	if strings.ContainsAny(m.Resource, " *?") || strings.HasPrefix(m.Resource, "/") || strings.HasSuffix(m.Resource, "/") {
		return fmt.Errorf("resource %q is not a resource name: use a plural such as \"pods\" or \"pods/status\"", m.Resource)
	}
	return nil
}

// FailRule answers the next Remaining matching requests with Code.
type FailRule struct {
	Match
	Code       int `json:"code"`
	Remaining  int `json:"remaining"`
	RetryAfter int `json:"retryAfter"`
}

// StallRule holds matching requests for Seconds (or until the rule is
// cleared) before passing them on; Remaining nil holds every one.
type StallRule struct {
	Match
	Seconds   float64 `json:"seconds"`
	Remaining *int    `json:"remaining"`

	released chan struct{}
}

// CutRule passes the next Remaining matching requests on to the API server
// and cuts the client's connection in the middle of each reply.
type CutRule struct {
	Match
	Remaining int `json:"remaining"`
}

// Stall is what a held request waits for: its time, or the rule's release.
type Stall struct {
	For      time.Duration
	Released <-chan struct{}
}

// Counter is the number of requests served for one verb and resource.
type Counter struct {
	Verb     string `json:"verb"`
	Resource string `json:"resource"`
	Count    int    `json:"count"`
}

// Faults are the rules in force and the counts of requests seen; safe for
// concurrent use.
type Faults struct {
	mu          sync.Mutex
	now         func() time.Time
	fail        []*FailRule
	stall       []*StallRule
	cut         []*CutRule
	spent       []chan struct{} // releases of used-up stall rules whose requests may still be held
	refuseUntil time.Time       // zero: not refusing by time
	refuseCount int
	counts      map[[2]string]int
}

// NewFaults has no rule in force.
func NewFaults(now func() time.Time) *Faults {
	if now == nil {
		now = time.Now
	}
	return &Faults{now: now, counts: map[[2]string]int{}}
}

// Fail adds a rule answering the next count requests matching m with code.
func (f *Faults) Fail(m Match, code, count, retryAfter int) error {
	if err := m.validate(); err != nil {
		return err
	}
	if !slices.Contains(Codes, code) {
		return fmt.Errorf("code %d cannot be injected: use one of %v", code, Codes)
	}
	if count < 1 {
		return fmt.Errorf("count must be at least 1, not %d", count)
	}
	if retryAfter < 0 {
		return fmt.Errorf("retryAfter must be a number of seconds >= 0, not %d", retryAfter)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = append(f.fail, &FailRule{Match: m, Code: code, Remaining: count, RetryAfter: retryAfter})
	return nil
}

// Stall adds a rule holding requests matching m for seconds (the next count,
// or all of them when count is nil).
func (f *Faults) Stall(m Match, seconds float64, count *int) error {
	if err := m.validate(); err != nil {
		return err
	}
	if math.IsNaN(seconds) || seconds <= 0 || seconds > 1e6 {
		return fmt.Errorf("seconds must be a positive number of seconds up to 1e6, not %v", seconds)
	}
	if count != nil && *count < 1 {
		return fmt.Errorf("count must be at least 1, not %d", *count)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stall = append(f.stall, &StallRule{Match: m, Seconds: seconds, Remaining: count, released: make(chan struct{})})
	return nil
}

// Cut adds a rule passing the next count requests matching m on to the API
// server and cutting the client's connection in the middle of their replies.
func (f *Faults) Cut(m Match, count int) error {
	if err := m.validate(); err != nil {
		return err
	}
	if m.Verb == "watch" {
		return fmt.Errorf("verb %q cannot be cut: a watch's reply has no end to cut short; end watches with close-watches, or hold them with stall", m.Verb)
	}
	if count < 1 {
		return fmt.Errorf("count must be at least 1, not %d", count)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = append(f.cut, &CutRule{Match: m, Remaining: count})
	return nil
}

// Refuse makes the listener close new connections: for seconds (0: until
// told otherwise), or the next connections ones when connections > 0;
// on=false stops refusing.
func (f *Faults) Refuse(on bool, seconds float64, connections int) error {
	if math.IsNaN(seconds) || seconds < 0 {
		return fmt.Errorf("seconds must be a number of seconds >= 0, not %v", seconds)
	}
	if connections < 0 {
		return fmt.Errorf("connections must be >= 0, not %d", connections)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuseUntil, f.refuseCount = time.Time{}, 0
	switch {
	case !on:
	case connections > 0:
		f.refuseCount = connections
	case seconds > 0:
		f.refuseUntil = f.now().Add(time.Duration(seconds * float64(time.Second)))
	default:
		f.refuseUntil = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return nil
}

// Clear removes every rule; the requests they hold go on to the API server.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.stall {
		close(r.released)
	}
	for _, ch := range f.spent {
		close(ch)
	}
	f.fail, f.stall, f.cut, f.spent = nil, nil, nil, nil
	f.refuseUntil, f.refuseCount = time.Time{}, 0
}

// RefuseConnection says whether a connection accepted now is to be closed.
func (f *Faults) RefuseConnection() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuseCount > 0 {
		f.refuseCount--
		return true
	}
	return !f.refuseUntil.IsZero() && f.now().Before(f.refuseUntil)
}

// Take counts a request and returns the stall and the failure it gets (the
// longest matching stall; the first matching fail rule), using them up.
func (f *Faults) Take(verb, resource string) (*Stall, *FailRule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[[2]string{verb, resource}]++
	var stall *Stall
	kept := f.stall[:0]
	for _, r := range f.stall {
		if r.Matches(verb, resource) {
			d := time.Duration(r.Seconds * float64(time.Second))
			if stall == nil || d > stall.For {
				stall = &Stall{For: d, Released: r.released}
			}
			if r.Remaining != nil {
				*r.Remaining--
				if *r.Remaining <= 0 {
					f.spent = append(f.spent, r.released) // used up; Clear still releases what it holds
					continue
				}
			}
		}
		kept = append(kept, r)
	}
	f.stall = kept
	for i, r := range f.fail {
		if r.Matches(verb, resource) {
			taken := *r
			r.Remaining--
			if r.Remaining <= 0 {
				f.fail = slices.Delete(f.fail, i, i+1)
			}
			return stall, &taken
		}
	}
	return stall, nil
}

// TakeCut says whether the reply to a request of verb on resource, passed on
// to the API server, is to be cut, using the first matching cut rule up. It
// does not count the request: Take has.
func (f *Faults) TakeCut(verb, resource string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.cut {
		if r.Matches(verb, resource) {
			r.Remaining--
			if r.Remaining <= 0 {
				f.cut = slices.Delete(f.cut, i, i+1)
			}
			return true
		}
	}
	return false
}

// State is the rules in force, as the control endpoint shows them.
type State struct {
	Fail                []FailRule  `json:"fail"`
	Stall               []StallRule `json:"stall"`
	Cut                 []CutRule   `json:"cut"`
	RefusingConnections bool        `json:"refusingConnections"`
}

// State returns a copy of the rules in force.
func (f *Faults) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := State{Fail: []FailRule{}, Stall: []StallRule{}, Cut: []CutRule{}}
	for _, r := range f.fail {
		s.Fail = append(s.Fail, *r)
	}
	for _, r := range f.stall {
		c := StallRule{Match: r.Match, Seconds: r.Seconds}
		if r.Remaining != nil {
			n := *r.Remaining
			c.Remaining = &n
		}
		s.Stall = append(s.Stall, c)
	}
	for _, r := range f.cut {
		s.Cut = append(s.Cut, *r)
	}
	s.RefusingConnections = f.refuseCount > 0 || (!f.refuseUntil.IsZero() && f.now().Before(f.refuseUntil))
	return s
}

// Counts returns the requests seen, sorted by verb and resource.
func (f *Faults) Counts() []Counter {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Counter, 0, len(f.counts))
	for k, n := range f.counts {
		out = append(out, Counter{Verb: k[0], Resource: k[1], Count: n})
	}
	slices.SortFunc(out, func(a, b Counter) int {
		if c := strings.Compare(a.Verb, b.Verb); c != 0 {
			return c
		}
		return strings.Compare(a.Resource, b.Resource)
	})
	return out
}

// ResetCounts forgets the requests seen.
func (f *Faults) ResetCounts() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.counts)
}
