package faultproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// The headers of kube-apiserver's request-header authentication
// (--requestheader-username-headers, --requestheader-group-headers,
// --requestheader-extra-headers-prefix), as the control plane configures it.
const (
	userHeader        = "X-Remote-User"
	groupHeader       = "X-Remote-Group"
	extraHeaderPrefix = "X-Remote-Extra-"
)

type identityKey struct{}

// Proxy passes requests on to one API server, applying Faults on the way.
//
// A client that presents a certificate of the cluster's CA is passed on as
// itself through request-header authentication: the proxy connects with the
// front proxy's client certificate and names the user and groups of the
// client's certificate (what kube-apiserver's aggregator does). Any other
// request goes on with its own Authorization header (a bearer token) or none.
type Proxy struct {
	Faults *Faults

	info    *request.RequestInfoFactory
	reverse *httputil.ReverseProxy

	mu      sync.Mutex
	watches map[chan struct{}]struct{}
}

// New makes a proxy to upstream: asFrontProxy connects with the front proxy's
// certificate, plain with no client certificate; both trust the API server.
func New(upstream *url.URL, asFrontProxy, plain *tls.Config, faults *Faults) *Proxy {
	p := &Proxy{
		Faults: faults,
		info: &request.RequestInfoFactory{
			APIPrefixes:          sets.NewString("api", "apis"),
			GrouplessAPIPrefixes: sets.NewString("api"),
		},
		watches: map[chan struct{}]struct{}{},
	}
	transport := func(c *tls.Config) *http.Transport {
		// HTTP/1.1 only upstream: the upgrades of exec, attach and port-forward need it
		return &http.Transport{
			TLSClientConfig:     c,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
		}
	}
	byIdentity, anonymous := transport(asFrontProxy), transport(plain)
	p.reverse = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			for name := range pr.Out.Header {
				if strings.EqualFold(name, userHeader) || strings.EqualFold(name, groupHeader) ||
					strings.HasPrefix(strings.ToLower(name), strings.ToLower(extraHeaderPrefix)) {
					pr.Out.Header.Del(name)
				}
			}
			if id, ok := pr.In.Context().Value(identityKey{}).(identity); ok {
				pr.Out.Header.Set(userHeader, id.user)
				for _, g := range id.groups {
					pr.Out.Header.Add(groupHeader, g)
				}
			}
		},
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if _, ok := r.Context().Value(identityKey{}).(identity); ok {
				return byIdentity.RoundTrip(r)
			}
			return anonymous.RoundTrip(r)
		}),
		ModifyResponse: modifyResponse,
		FlushInterval:  -1, // watches and logs stream
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			writeStatus(w, r, apierrors.NewServiceUnavailable("the fault proxy cannot reach the API server: "+err.Error()))
		},
	}
	return p
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type identity struct {
	user   string
	groups []string
}

// ServeHTTP applies the faults to one request and passes it on.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		leaf := r.TLS.VerifiedChains[0][0]
		r = r.WithContext(context.WithValue(r.Context(), identityKey{},
			identity{user: leaf.Subject.CommonName, groups: leaf.Subject.Organization}))
	}
	info, err := p.info.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		p.reverse.ServeHTTP(w, r)
		return
	}
	resource := info.Resource
	if info.Subresource != "" {
		resource += "/" + info.Subresource
	}
	watch := info.Verb == "watch"
	var ended chan struct{}
	if watch {
		ended = p.openWatch()
		defer p.closeWatch(ended)
	}
	stall, fail := p.Faults.Take(info.Verb, resource)
	if stall != nil {
		timer := time.NewTimer(stall.For)
		select {
		case <-r.Context().Done():
			timer.Stop()
			return
		case <-ended:
			// a held watch that is cut ends as the API server ends a watch: 200, no event
			timer.Stop()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			return
		case <-stall.Released:
			timer.Stop()
		case <-timer.C:
		}
	}
	if fail != nil {
		injectFailure(w, r, info, fail, watch)
		return
	}
	if watch {
		r = r.WithContext(context.WithValue(r.Context(), endKey{}, (<-chan struct{})(ended)))
	} else if !streams(r) && p.Faults.TakeCut(info.Verb, resource) {
		p.cutReply(w, r)
		return
	}
	p.reverse.ServeHTTP(w, r)
}

// streams says whether the reply to r is a stream with no end to cut short:
// a followed log, or a connection upgraded for exec, attach or port-forward.
func streams(r *http.Request) bool {
	if r.Header.Get("Upgrade") != "" {
		return true
	}
	follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
	return follow
}

// heldReply keeps the reply the reverse proxy copies from the API server.
type heldReply struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (h *heldReply) Header() http.Header { return h.header }

func (h *heldReply) WriteHeader(code int) {
	if h.code == 0 && code >= 200 { // 1xx answers are not the reply
		h.code = code
	}
}

func (h *heldReply) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return h.body.Write(b)
}

// Flush is called by the reverse proxy after each write; the reply is kept whole.
func (h *heldReply) Flush() {}

// cutReply passes r on to the API server, which carries it out, and waits for
// the whole reply; then it sends the client the reply's status line and
// headers (its Content-Length, or chunked encoding where the API server sent
// none) and the first half of its body, and cuts the connection short of the
// rest. Over HTTP/1.1 the connection is closed with no TLS close_notify; over
// HTTP/2, which has no hijacking, the handler aborts and the stream is reset
// (RST_STREAM INTERNAL_ERROR), the connection's other streams going on.
func (p *Proxy) cutReply(w http.ResponseWriter, r *http.Request) {
	held := &heldReply{header: http.Header{}}
	p.reverse.ServeHTTP(held, r)
	if held.code == 0 { // the client went away before the API server answered
		panic(http.ErrAbortHandler)
	}
	maps.Copy(w.Header(), held.header)
	w.WriteHeader(held.code)
	body := held.body.Bytes()
	_, _ = w.Write(body[:len(body)/2])
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		panic(http.ErrAbortHandler)
	}
	if r.ProtoMajor != 1 {
		panic(http.ErrAbortHandler)
	}
	conn, buf, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = buf.Flush() // holds nothing: the reply went out with rc.Flush
	closeAbruptly(conn)
}

// closeAbruptly closes conn without ending its TLS session (no close_notify),
// as a process or a load balancer that dies does.
func closeAbruptly(conn net.Conn) {
	if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = tc.NetConn()
	}
	_ = conn.Close()
}

type endKey struct{}

// modifyResponse wraps a watch's body so that CloseWatches ends it cleanly,
// as the API server ends a watch at its timeout.
func modifyResponse(res *http.Response) error {
	ended, ok := res.Request.Context().Value(endKey{}).(<-chan struct{})
	if !ok || res.StatusCode != http.StatusOK {
		return nil
	}
	res.Body = newEndableBody(res.Body, ended)
	return nil
}

// endableBody reads body until ended is closed, then reports its end.
type endableBody struct {
	body  io.ReadCloser
	ended <-chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newEndableBody(body io.ReadCloser, ended <-chan struct{}) *endableBody {
	b := &endableBody{body: body, ended: ended, done: make(chan struct{})}
	go func() {
		select {
		case <-ended:
			_ = body.Close() // unblocks a Read waiting for the next event
		case <-b.done:
		}
	}()
	return b
}

func (b *endableBody) Read(buf []byte) (int, error) {
	n, err := b.body.Read(buf)
	if err != nil {
		select {
		case <-b.ended:
			return n, io.EOF
		default:
		}
	}
	return n, err
}

func (b *endableBody) Close() error {
	b.once.Do(func() { close(b.done) })
	return b.body.Close()
}

func (p *Proxy) openWatch() chan struct{} {
	ch := make(chan struct{})
	p.mu.Lock()
	p.watches[ch] = struct{}{}
	p.mu.Unlock()
	return ch
}

func (p *Proxy) closeWatch(ch chan struct{}) {
	p.mu.Lock()
	delete(p.watches, ch)
	p.mu.Unlock()
}

// CloseWatches ends every watch open through the proxy, held or streaming,
// and returns how many it ended.
func (p *Proxy) CloseWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.watches)
	for ch := range p.watches {
		close(ch)
		delete(p.watches, ch)
	}
	return n
}

// injectFailure answers as kube-apiserver answers with that status; a watch
// told 410 gets it as an ERROR event, as the watch cache sends it.
func injectFailure(w http.ResponseWriter, r *http.Request, info *request.RequestInfo, rule *FailRule, watch bool) {
	what := info.Resource
	if info.Subresource != "" {
		what += "/" + info.Subresource
	}
	var status *apierrors.StatusError
	switch rule.Code {
	case http.StatusForbidden:
		status = apierrors.NewForbidden(schemaResource(info), info.Name, errors.New("injected by the fault proxy"))
	case http.StatusGone:
		status = apierrors.NewResourceExpired("The resourceVersion for the provided list is too old.")
	case http.StatusTooManyRequests:
		status = apierrors.NewTooManyRequests("Too many requests, please try again later.", rule.RetryAfter)
	case http.StatusServiceUnavailable:
		status = apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
	default:
		status = apierrors.NewGenericServerResponse(rule.Code, info.Verb, schemaResource(info), info.Name,
			"injected by the fault proxy for "+what, rule.RetryAfter, true)
	}
	if rule.Code == http.StatusTooManyRequests || rule.Code == http.StatusServiceUnavailable {
		status.ErrStatus.Details = nonNilDetails(status.ErrStatus.Details)
		status.ErrStatus.Details.RetryAfterSeconds = int32(rule.RetryAfter)
		w.Header().Set("Retry-After", strconv.Itoa(rule.RetryAfter))
	}
	if watch && rule.Code == http.StatusGone {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		s := status.ErrStatus
		s.Kind, s.APIVersion = "Status", "v1"
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "ERROR", "object": s})
		return
	}
	writeStatus(w, r, status)
}

func nonNilDetails(d *metav1.StatusDetails) *metav1.StatusDetails {
	if d == nil {
		return &metav1.StatusDetails{}
	}
	return d
}

// writeStatus writes a Status object with its code, as the API server does.
func writeStatus(w http.ResponseWriter, _ *http.Request, err *apierrors.StatusError) {
	s := err.ErrStatus
	s.Kind, s.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(s.Code))
	_ = json.NewEncoder(w).Encode(s)
}

func schemaResource(info *request.RequestInfo) schema.GroupResource {
	return schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
}
