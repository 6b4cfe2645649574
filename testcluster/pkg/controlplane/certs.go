package controlplane

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuspawner/gpuspawner/testcluster/pkg/pki"
)

// Identities the control plane's own components authenticate as. The RBAC
// bootstrap policy of kube-apiserver grants each of them its rights.
const (
	adminUser             = "gpuspawner-admin"
	controllerManagerUser = "system:kube-controller-manager"
	schedulerUser         = "system:kube-scheduler"
	kubeletClientUser     = "kube-apiserver-kubelet-client"
	frontProxyClientUser  = "front-proxy-client"
)

// ServiceCIDR is the range Service cluster IPs come from.
const ServiceCIDR = "10.96.0.0/16"

// Files are the paths of everything the control plane's PKI holds.
type Files struct {
	Dir string

	CACert, CAKey                               string
	ServingCert, ServingKey                     string
	AdminCert, AdminKey                         string
	ControllerManagerCert, ControllerManagerKey string
	SchedulerCert, SchedulerKey                 string
	KubeletClientCert, KubeletClientKey         string
	KubeletCACert, KubeletCAKey                 string
	FrontProxyCACert, FrontProxyCAKey           string
	FrontProxyClientCert, FrontProxyClientKey   string
	ServiceAccountKey, ServiceAccountPub        string
}

// NewFiles names the PKI files under dataDir/pki.
func NewFiles(dataDir string) Files {
	d := filepath.Join(dataDir, "pki")
	p := func(name string) string { return filepath.Join(d, name) }
	return Files{
		Dir:    d,
		CACert: p("ca.crt"), CAKey: p("ca.key"),
		ServingCert: p("apiserver.crt"), ServingKey: p("apiserver.key"),
		AdminCert: p("admin.crt"), AdminKey: p("admin.key"),
		ControllerManagerCert: p("controller-manager.crt"), ControllerManagerKey: p("controller-manager.key"),
		SchedulerCert: p("scheduler.crt"), SchedulerKey: p("scheduler.key"),
		KubeletClientCert: p("apiserver-kubelet-client.crt"), KubeletClientKey: p("apiserver-kubelet-client.key"),
		KubeletCACert: p("kubelet-ca.crt"), KubeletCAKey: p("kubelet-ca.key"),
		FrontProxyCACert: p("front-proxy-ca.crt"), FrontProxyCAKey: p("front-proxy-ca.key"),
		FrontProxyClientCert: p("front-proxy-client.crt"), FrontProxyClientKey: p("front-proxy-client.key"),
		ServiceAccountKey: p("sa.key"), ServiceAccountPub: p("sa.pub"),
	}
}

// loadOrCreateCA loads the CA at certPath/keyPath, or makes and writes a new
// one. fresh says a new one was made (its old leaves are then stale).
func loadOrCreateCA(name, certPath, keyPath string, now time.Time) (ca *pki.CA, fresh bool, err error) {
	ok, err := pki.Exists(certPath, keyPath)
	if err != nil {
		return nil, false, err
	}
	if ok {
		cert, key, err := pki.LoadPair(certPath, keyPath)
		if err != nil {
			return nil, false, fmt.Errorf("loading CA %q: %w", name, err)
		}
		return &pki.CA{Cert: cert, Key: key}, false, nil
	}
	ca, err = pki.NewCA(name, now)
	if err != nil {
		return nil, false, err
	}
	if err := pki.WritePair(certPath, keyPath, ca.Cert, ca.Key); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// ensureLeaf writes a certificate signed by ca unless a valid one is there
// and its CA is not new.
func ensureLeaf(ca *pki.CA, caFresh bool, certPath, keyPath string, req pki.Request, now time.Time) error {
	ok, err := pki.Exists(certPath, keyPath)
	if err != nil {
		return err
	}
	if ok && !caFresh {
		return nil
	}
	cert, key, err := ca.Issue(req, now)
	if err != nil {
		return err
	}
	return pki.WritePair(certPath, keyPath, cert, key)
}

// EnsurePKI makes every certificate and key the control plane needs that is
// not already in f.Dir, so a data directory can be started again.
func EnsurePKI(f Files, now time.Time) error {
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", f.Dir, err)
	}
	ca, caFresh, err := loadOrCreateCA("gpuspawner-cluster-ca", f.CACert, f.CAKey, now)
	if err != nil {
		return err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}
	leaves := []struct {
		cert, key string
		req       pki.Request
	}{
		{f.ServingCert, f.ServingKey, pki.Request{
			CommonName: "kube-apiserver",
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"},
			IPs: loopback, Usage: pki.ServerAuth,
		}},
		{f.AdminCert, f.AdminKey, pki.Request{CommonName: adminUser, Organization: []string{"system:masters"}, Usage: pki.ClientAuth}},
		{f.ControllerManagerCert, f.ControllerManagerKey, pki.Request{CommonName: controllerManagerUser, Usage: pki.ClientAuth}},
		{f.SchedulerCert, f.SchedulerKey, pki.Request{CommonName: schedulerUser, Usage: pki.ClientAuth}},
		// The kubelet API of the simulated nodes authorizes this identity.
		{f.KubeletClientCert, f.KubeletClientKey, pki.Request{CommonName: kubeletClientUser, Organization: []string{"system:masters"}, Usage: pki.ClientAuth}},
	}
	for _, l := range leaves {
		if err := ensureLeaf(ca, caFresh, l.cert, l.key, l.req, now); err != nil {
			return err
		}
	}
	// The CA that signs the simulated kubelets' serving certificates; the node
	// agent reads its key from cluster.json.
	if _, _, err := loadOrCreateCA("gpuspawner-kubelet-ca", f.KubeletCACert, f.KubeletCAKey, now); err != nil {
		return err
	}
	fpCA, fpFresh, err := loadOrCreateCA("gpuspawner-front-proxy-ca", f.FrontProxyCACert, f.FrontProxyCAKey, now)
	if err != nil {
		return err
	}
	if err := ensureLeaf(fpCA, fpFresh, f.FrontProxyClientCert, f.FrontProxyClientKey,
		pki.Request{CommonName: frontProxyClientUser, Usage: pki.ClientAuth}, now); err != nil {
		return err
	}
	return ensureServiceAccountKey(f)
}

func ensureServiceAccountKey(f Files) error {
	ok, err := pki.Exists(f.ServiceAccountKey, f.ServiceAccountPub)
	if err != nil || ok {
		return err
	}
	key, err := pki.NewKey()
	if err != nil {
		return err
	}
	keyPEM, err := pki.KeyPEM(key)
	if err != nil {
		return err
	}
	pubPEM, err := pki.PublicKeyPEM(key)
	if err != nil {
		return err
	}
	if err := pki.WriteFile(f.ServiceAccountKey, keyPEM, 0o600); err != nil {
		return err
	}
	return pki.WriteFile(f.ServiceAccountPub, pubPEM, 0o644)
}
