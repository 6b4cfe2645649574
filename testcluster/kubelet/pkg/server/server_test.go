package server

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	utilexec "k8s.io/utils/exec"

	"github.com/gpuspawner/gpuspawner/testcluster/kubelet/pkg/agent"
	"github.com/gpuspawner/gpuspawner/testcluster/kubelet/pkg/certs"
)

// fakeAgent answers each request with reply and then body, and records the requests.
func fakeAgent(t *testing.T, reply, body string) (string, <-chan agent.Request) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan agent.Request, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadBytes('\n')
			var req agent.Request
			json.Unmarshal(line, &req)
			got <- req
			io.WriteString(c, reply+"\n"+body)
			c.Close()
		}
	}()
	return path, got
}

func get(t *testing.T, url string, client *http.Client) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// tlsServer serves h as the kubelet API serves (its certificate issued by
// package certs, client certificates verified against a CA); it returns a
// client with a certificate of that CA, as the API server's, and one without.
func tlsServer(t *testing.T, h http.Handler) (srv *httptest.Server, withCert, anonymous *http.Client) {
	t.Helper()
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	now := time.Now()
	ca, caKey, err := certs.LoadOrCreateCA(p("ca.crt"), p("ca.key"), now)
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.Issue(ca, caKey, p("srv.crt"), p("srv.key"), "n", []net.IP{net.ParseIP("127.0.0.1")}, now); err != nil {
		t.Fatal(err)
	}
	serving, err := tls.LoadX509KeyPair(p("srv.crt"), p("srv.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "kube-apiserver-kubelet-client"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srv = httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	anonymous = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	withCert = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}}}
	return srv, withCert, anonymous
}

func TestRequestsWithoutAVerifiedClientCertificateGet401(t *testing.T) {
	sock, _ := fakeAgent(t, `{}`, "line 0\n")
	srv, withCert, anonymous := tlsServer(t, New(sock).Handler())
	if code, _ := get(t, srv.URL+"/containerLogs/ns/p/c", anonymous); code != http.StatusUnauthorized {
		t.Errorf("without a client certificate: %d, want 401", code)
	}
	if code, body := get(t, srv.URL+"/containerLogs/ns/p/c", withCert); code != http.StatusOK || body != "line 0\n" {
		t.Errorf("with the client certificate: %d %q, want 200 and the log", code, body)
	}
}

func TestLogsAskTheAgentWithTheOptions(t *testing.T) {
	sock, got := fakeAgent(t, `{}`, "a\nb\n")
	srv, withCert, _ := tlsServer(t, New(sock).Handler())
	code, body := get(t, srv.URL+"/containerLogs/ns1/pod1/c1?tailLines=2&timestamps=true", withCert)
	if code != http.StatusOK || body != "a\nb\n" {
		t.Fatalf("got %d %q", code, body)
	}
	req := <-got
	if req.Op != agent.OpLogs || req.Namespace != "ns1" || req.Pod != "pod1" || req.Container != "c1" ||
		*req.TailLines != 2 || !req.Timestamps {
		t.Errorf("the agent got %+v", req)
	}
}

func TestRefusalsKeepTheAgentsStatusAndWords(t *testing.T) {
	tests := []struct {
		name, path, reply string
		code              int
		words             string
	}{
		{"no pod", "/containerLogs/ns/p/c", `{"error":"pod \"p\" does not exist","code":404}`, 404, `pod "p" does not exist`},
		{"not running", "/exec/ns/p/c?command=true&output=1", `{"error":"container not found (\"c\")","code":500}`, 500,
			`container not found ("c")`},
		{"no streams", "/exec/ns/p/c?command=true", `{}`, 400, "you must specify at least 1 of stdin, stdout, stderr"},
		{"no command", "/exec/ns/p/c?output=1", `{}`, 400, "missing command"},
		{"bad option", "/containerLogs/ns/p/c?limitBytes=-3", `{}`, 400, "limitBytes=-3: must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock, _ := fakeAgent(t, tt.reply, "")
			srv, withCert, _ := tlsServer(t, New(sock).Handler())
			code, body := get(t, srv.URL+tt.path, withCert)
			if code != tt.code || !strings.Contains(body, tt.words) {
				t.Errorf("got %d %q, want %d with %q", code, body, tt.code, tt.words)
			}
		})
	}
}

func TestExitErrorIsWhatTheStreamingServerReports(t *testing.T) {
	tests := []struct {
		name, payload string
		code          int // -1: no error; 0: another error
	}{
		{"success", `{"exitCode":0}`, -1},
		{"no code", `{}`, -1},
		{"failed", `{"exitCode":3}`, 3},
		{"could not run", `{"error":"boom"}`, 0},
		{"garbage", `nope`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := exitError([]byte(tt.payload))
			var exit utilexec.CodeExitError
			switch {
			case tt.code == -1 && err != nil:
				t.Errorf("got %v, want none", err)
			case tt.code > 0 && (!errors.As(err, &exit) || exit.ExitStatus() != tt.code):
				t.Errorf("got %v, want exit status %d", err, tt.code)
			case tt.code == 0 && (err == nil || errors.As(err, &exit)):
				t.Errorf("got %v, want an error that is not an exit status", err)
			}
		})
	}
}
