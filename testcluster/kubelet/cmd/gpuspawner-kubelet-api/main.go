// Command gpuspawner-kubelet-api serves the kubelet API (logs, exec, attach,
// port-forward) for the simulated nodes of a node agent, over HTTPS with
// client certificates, as a kubelet serves it to the API server.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gpuspawner/gpuspawner/testcluster/kubelet/pkg/certs"
	"github.com/gpuspawner/gpuspawner/testcluster/kubelet/pkg/server"
)

type options struct {
	listen, cert, key, clientCA, agentSocket string
	issueCACert, issueCAKey, node            string
}

func main() {
	var o options
	flag.StringVar(&o.listen, "listen", "127.0.0.1:10250", "host:port to serve on")
	flag.StringVar(&o.cert, "cert", "", "the serving certificate (PEM)")
	flag.StringVar(&o.key, "key", "", "the serving certificate's key (PEM)")
	flag.StringVar(&o.clientCA, "client-ca", "", "CA bundle that client certificates must be signed by (the API server's kubelet client CA)")
	flag.StringVar(&o.agentSocket, "agent-socket", "", "the node agent's Unix socket")
	flag.StringVar(&o.issueCACert, "issue-ca-cert", "", "if set, write --cert and --key first, signed by this CA (made if missing)")
	flag.StringVar(&o.issueCAKey, "issue-ca-key", "", "the key of --issue-ca-cert")
	flag.StringVar(&o.node, "node-name", "nodes", "the node name the issued certificate names (system:node:<name>)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "gpuspawner-kubelet-api: %v\n", err)
		os.Exit(1)
	}
}

func (o options) check() error {
	var missing []string
	for _, f := range []struct{ name, value string }{{"--cert", o.cert}, {"--key", o.key},
		{"--client-ca", o.clientCA}, {"--agent-socket", o.agentSocket}} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("give %s", strings.Join(missing, ", "))
	}
	if (o.issueCACert == "") != (o.issueCAKey == "") {
		return errors.New("give both --issue-ca-cert and --issue-ca-key, or neither")
	}
	return nil
}

func run(o options) error {
	if err := o.check(); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: give host:port: %w", o.listen, err)
	}
	if o.issueCACert != "" {
		if err := issue(o, host); err != nil {
			return err
		}
	}
	tlsConfig, err := serverTLS(o.cert, o.key, o.clientCA)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.listen, err)
	}
	srv := &http.Server{
		Handler:           server.New(o.agentSocket).Handler(),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 30 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errs := make(chan error, 1)
	go func() { errs <- srv.ServeTLS(ln, "", "") }()
	fmt.Printf("kubelet-api listening on %s\n", ln.Addr())
	select {
	case err := <-errs:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown) //nolint:errcheck // hijacked streams end with the process
	return nil
}

func issue(o options, host string) error {
	ip := net.ParseIP(host)
	if ip == nil {
		return fmt.Errorf("--listen host %q: give an IP address to issue a certificate for", host)
	}
	now := time.Now()
	caCert, caKey, err := certs.LoadOrCreateCA(o.issueCACert, o.issueCAKey, now)
	if err != nil {
		return err
	}
	return certs.Issue(caCert, caKey, o.cert, o.key, o.node, []net.IP{ip}, now)
}

// serverTLS verifies a client certificate when one is given; a request
// without one is refused by server.RequireClientCert.
func serverTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading serving certificate: %w", err)
	}
	pem, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("reading --client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--client-ca %s holds no PEM certificate", clientCAFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}, nil
}
