package certs

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestIssuedCertificateVerifiesAgainstTheCA(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	now := time.Now()
	ca, key, err := LoadOrCreateCA(p("ca.crt"), p("ca.key"), now)
	if err != nil {
		t.Fatal(err)
	}
	if err := Issue(ca, key, p("k.crt"), p("k.key"), "n1", []net.IP{net.ParseIP("127.0.0.1")}, now); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(p("k.crt"), p("k.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	// the CA read back from disk, as the API server reads --kubelet-certificate-authority
	again, _, err := LoadOrCreateCA(p("ca.crt"), p("ca.key"), now)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(again)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1",
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the serving certificate does not verify for 127.0.0.1: %v", err)
	}
	if leaf.Subject.CommonName != "system:node:n1" {
		t.Errorf("common name %q, want system:node:n1", leaf.Subject.CommonName)
	}
}

func TestALeafIsNotTakenAsACA(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	ca, key, err := LoadOrCreateCA(p("ca.crt"), p("ca.key"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := Issue(ca, key, p("k.crt"), p("k.key"), "n1", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(p("k.crt"), p("k.key"), time.Now()); err == nil {
		t.Error("a serving certificate was accepted as a CA")
	}
}

func TestAHalfPresentCAIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), time.Now()); err == nil {
		t.Error("a CA certificate without its key: want an error, not a new CA")
	}
}
