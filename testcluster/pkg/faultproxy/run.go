package faultproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"github.com/gpuspawner/gpuspawner/testcluster/pkg/controlplane"
	"github.com/gpuspawner/gpuspawner/testcluster/pkg/pki"
)

// Config says which control plane to stand in front of and where to listen.
type Config struct {
	// DataDir is the control plane's data directory: its cluster.json names
	// the API server; its pki holds the CA and the front proxy's client.
	DataDir string
	// Port and ControlPort are on 127.0.0.1; 0 picks a free one.
	Port, ControlPort int
}

// tlsConfigs are the proxy's serving configuration (a certificate of the
// cluster's CA; client certificates of that CA verified when given) and its
// two client configurations towards the API server.
func tlsConfigs(dataDir string, now time.Time) (serving, asFrontProxy, plain *tls.Config, server *url.URL, err error) {
	info, err := controlplane.ReadClusterInfo(filepath.Join(dataDir, controlplane.ClusterInfoFile))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	server, err = url.Parse(info.Server)
	if err != nil || server.Scheme != "https" || server.Host == "" {
		return nil, nil, nil, nil, fmt.Errorf("cluster.json names server %q, not an https:// URL", info.Server)
	}
	f := controlplane.NewFiles(dataDir)
	caCert, caKey, err := pki.LoadPair(f.CACert, f.CAKey)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("the cluster CA (the proxy signs its serving certificate with it): %w", err)
	}
	cert, key, err := (&pki.CA{Cert: caCert, Key: caKey}).Issue(pki.Request{
		CommonName: "gpuspawner-fault-proxy", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Usage: pki.ServerAuth,
	}, now)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	fpCert, fpKey, err := pki.LoadPair(f.FrontProxyClientCert, f.FrontProxyClientKey)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("the front proxy's client certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	serving = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
	}
	plain = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	asFrontProxy = plain.Clone()
	asFrontProxy.Certificates = []tls.Certificate{{Certificate: [][]byte{fpCert.Raw}, PrivateKey: fpKey, Leaf: fpCert}}
	return serving, asFrontProxy, plain, server, nil
}

// Run serves the proxy and its control endpoint until ctx ends, printing
// "READY https://127.0.0.1:PORT" on out once both listen.
func Run(ctx context.Context, c Config, out io.Writer) error {
	serving, asFrontProxy, plain, server, err := tlsConfigs(c.DataDir, time.Now())
	if err != nil {
		return err
	}
	faults := NewFaults(nil)
	proxy := New(server, asFrontProxy, plain, faults)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.Port))
	if err != nil {
		return fmt.Errorf("listening for the proxy: %w", err)
	}
	controlLn, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.ControlPort))
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("listening for the control endpoint: %w", err)
	}
	srv := &http.Server{Handler: proxy, TLSConfig: serving, ReadHeaderTimeout: 30 * time.Second}
	control := &http.Server{Handler: Control(proxy), ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- srv.ServeTLS(RefusingListener{Listener: ln, Faults: faults}, "", "") }()
	go func() { errs <- control.Serve(controlLn) }()
	if _, err := fmt.Fprintf(out, "READY https://%s\n", ln.Addr()); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	proxy.CloseWatches()
	faults.Clear()
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = control.Shutdown(stop)
	if e := srv.Shutdown(stop); e != nil && !errors.Is(e, context.DeadlineExceeded) {
		return e
	}
	_ = srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
