package controlplane

import (
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpuspawner/gpuspawner/testcluster/pkg/pki"
)

// contextName names the cluster, user and context of every kubeconfig written here.
const contextName = "gpuspawner-cluster"

// kubeconfigFor builds a kubeconfig that reaches server as the client whose
// certificate and key are at certPath and keyPath; everything is embedded so
// the file can be copied anywhere.
func kubeconfigFor(server, caPath, certPath, keyPath string) (*clientcmdapi.Config, error) {
	ca, err := os.ReadFile(caPath)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA: %w", err)
	}
	cert, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("reading a client certificate: %w", err)
	}
	key, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("reading a client key: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[contextName] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: contextName}
	cfg.CurrentContext = contextName
	return cfg, nil
}

// writeKubeconfig writes cfg to path at once (a reader never sees half of it).
func writeKubeconfig(path string, cfg *clientcmdapi.Config) error {
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig %s: %w", path, err)
	}
	return pki.WriteFile(path, data, 0o600)
}
