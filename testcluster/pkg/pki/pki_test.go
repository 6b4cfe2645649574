package pki

import (
	"crypto/x509"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestIssuedCertificatesVerifyAgainstTheirCA(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("test-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	server, _, err := ca.Issue(Request{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes.default.svc"},
		IPs:        []net.IP{net.ParseIP("127.0.0.1")},
		Usage:      ServerAuth,
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	client, _, err := ca.Issue(Request{CommonName: "admin", Organization: []string{"system:masters"}, Usage: ClientAuth}, now)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cert    *x509.Certificate
		host    string
		usage   x509.ExtKeyUsage
		wantErr bool
	}{
		{"server by IP", server, "127.0.0.1", x509.ExtKeyUsageServerAuth, false},
		{"server by service name", server, "kubernetes.default.svc", x509.ExtKeyUsageServerAuth, false},
		{"server by localhost", server, "localhost", x509.ExtKeyUsageServerAuth, false},
		{"server for a name it lacks", server, "example.com", x509.ExtKeyUsageServerAuth, true},
		{"server cert used as a client", server, "", x509.ExtKeyUsageClientAuth, true},
		{"client cert", client, "", x509.ExtKeyUsageClientAuth, false},
		{"client cert used as a server", client, "", x509.ExtKeyUsageServerAuth, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cert.Verify(x509.VerifyOptions{
				DNSName: tc.host, Roots: pool, KeyUsages: []x509.ExtKeyUsage{tc.usage}, CurrentTime: now,
			})
			if (err != nil) != tc.wantErr {
				t.Errorf("Verify() error = %v, want error %v", err, tc.wantErr)
			}
		})
	}
	if got := client.Subject.Organization; len(got) != 1 || got[0] != "system:masters" {
		t.Errorf("client organization = %q, want [system:masters]", got)
	}
}

func TestWrittenPairsLoadBack(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("test-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := WritePair(certPath, keyPath, ca.Cert, ca.Key); err != nil {
		t.Fatal(err)
	}
	cert, key, err := LoadPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.Equal(ca.Cert) {
		t.Error("loaded certificate differs from the written one")
	}
	// The loaded key still signs certificates that verify against the CA.
	loaded := &CA{Cert: cert, Key: key}
	leaf, _, err := loaded.Issue(Request{CommonName: "x", Usage: ClientAuth}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.CheckSignatureFrom(ca.Cert); err != nil {
		t.Errorf("leaf signed with the loaded key: %v", err)
	}
}

func TestLoadPairRejectsFilesThatAreNotPEM(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := WriteFile(bad, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadPair(bad, bad); err == nil {
		t.Fatal("LoadPair accepted a file without PEM blocks")
	}
	if _, _, err := LoadPair(filepath.Join(dir, "missing.crt"), bad); err == nil {
		t.Fatal("LoadPair accepted a missing file")
	}
}
