// Command gpuspawner-cluster is the test cluster's one program: the real
// Kubernetes control plane ("controlplane") and kubectl of the same version
// ("kubectl", or started through a symlink named kubectl), and a fault
// proxy in front of the API server ("faultproxy").
package main

import (
	"fmt"
	"os"

	"github.com/gpuspawner/gpuspawner/testcluster/pkg/multicall"
)

const usage = `usage: gpuspawner-cluster COMMAND [FLAGS]

commands:
  controlplane   run etcd, kube-apiserver, kube-controller-manager and kube-scheduler
                 on 127.0.0.1 (see gpuspawner-cluster controlplane --help)
  kubectl        kubectl of the same Kubernetes version (also when started as "kubectl")
  nodes          register a cluster file's nodes with a running control plane, keep their
                 leases fresh and report the pods bound to them as running
  faultproxy     a TLS proxy in front of a running control plane's API server that
                 injects error answers, refused connections and stalled watches,
                 switched through its control endpoint
`

func main() {
	prog, args := multicall.Resolve(os.Args, []string{"kubectl"})
	switch prog {
	case "kubectl":
		runKubectl(args)
	case "controlplane":
		os.Exit(runControlPlane(args))
	case "nodes":
		os.Exit(runNodes(args))
	case "faultproxy":
		os.Exit(runFaultProxy(args))
	case "", "help", "-h", "--help":
		fmt.Fprint(os.Stderr, usage)
		if prog == "" {
			os.Exit(2)
		}
	default:
		fmt.Fprintf(os.Stderr, "gpuspawner-cluster: unknown command %q\n\n%s", prog, usage)
		os.Exit(2)
	}
}
