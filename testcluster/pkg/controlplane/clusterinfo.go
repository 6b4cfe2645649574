package controlplane

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/gpuspawner/gpuspawner/testcluster/pkg/pki"
)

// ClusterInfoFile is the name of the file, in the data directory, that tells
// the node agent and other add-ons where the control plane is and which
// certificates they need.
const ClusterInfoFile = "cluster.json"

// ClusterInfo is the content of cluster.json.
type ClusterInfo struct {
	// Server is the API server's URL.
	Server string `json:"server"`
	// CAFile is the cluster CA's certificate (it signed the API server's serving certificate).
	CAFile string `json:"ca_file"`
	// AdminKubeconfig reaches the API server as a cluster administrator.
	AdminKubeconfig string `json:"admin_kubeconfig"`
	// KubeletClientCertFile and KubeletClientKeyFile are what the API server
	// presents to a kubelet; a kubelet trusts clients signed by CAFile.
	KubeletClientCertFile string `json:"kubelet_client_cert_file"`
	KubeletClientKeyFile  string `json:"kubelet_client_key_file"`
	// KubeletCAFile and KubeletCAKeyFile are the CA the API server checks a
	// kubelet's serving certificate against; a node agent signs with it.
	KubeletCAFile    string `json:"kubelet_ca_file"`
	KubeletCAKeyFile string `json:"kubelet_ca_key_file"`
	// FrontProxyCAFile signs the identity the API server presents to aggregated APIs.
	FrontProxyCAFile string `json:"front_proxy_ca_file"`
	// ServiceCIDR is the range of Service cluster IPs.
	ServiceCIDR string `json:"service_cidr"`
}

func newClusterInfo(server, adminKubeconfig string, f Files) ClusterInfo {
	return ClusterInfo{
		Server:                server,
		CAFile:                f.CACert,
		AdminKubeconfig:       adminKubeconfig,
		KubeletClientCertFile: f.KubeletClientCert,
		KubeletClientKeyFile:  f.KubeletClientKey,
		KubeletCAFile:         f.KubeletCACert,
		KubeletCAKeyFile:      f.KubeletCAKey,
		FrontProxyCAFile:      f.FrontProxyCACert,
		ServiceCIDR:           ServiceCIDR,
	}
}

func writeClusterInfo(path string, info ClusterInfo) error {
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return pki.WriteFile(path, append(data, '\n'), 0o644)
}

// ReadClusterInfo reads a cluster.json written by a running control plane.
func ReadClusterInfo(path string) (ClusterInfo, error) {
	var info ClusterInfo
	data, err := os.ReadFile(path)
	if err != nil {
		return info, fmt.Errorf("reading cluster info: %w", err)
	}
	if err := json.Unmarshal(data, &info); err != nil {
		return info, fmt.Errorf("%s is not a cluster.json written by gpuspawner-cluster controlplane: %w", path, err)
	}
	if info.Server == "" || info.CAFile == "" {
		return info, fmt.Errorf("%s lacks \"server\" or \"ca_file\"", path)
	}
	return info, nil
}
