package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuspawner/gpuspawner/testcluster/pkg/nodeagent"
)

type nodesConfig struct {
	cluster, kubeconfig string
	leaseInterval       time.Duration
	workers             int
	parentDeath         bool
}

func parseNodesFlags(args []string, stderr io.Writer) (nodesConfig, error) {
	fs := flag.NewFlagSet("gpuspawner-cluster nodes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c nodesConfig
	fs.StringVar(&c.cluster, "cluster", "", "the cluster file: Nodes, Pods and DRA objects as YAML or JSON manifests (required)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "an admin kubeconfig of the control plane (required)")
	fs.DurationVar(&c.leaseInterval, "lease-interval", nodeagent.LeaseDuration/4, "how often the nodes' leases are renewed")
	fs.IntVar(&c.workers, "workers", 16, "requests to the API server at once")
	fs.BoolVar(&c.parentDeath, "parent-death", true, "stop when the process that started this one dies (Linux PR_SET_PDEATHSIG)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if c.cluster == "" {
		errs = append(errs, errors.New("--cluster is required"))
	}
	if c.kubeconfig == "" {
		errs = append(errs, errors.New("--kubeconfig is required"))
	}
	if c.leaseInterval <= 0 || c.leaseInterval >= nodeagent.LeaseDuration {
		errs = append(errs, fmt.Errorf("--lease-interval must be positive and under %s, not %s", nodeagent.LeaseDuration, c.leaseInterval))
	}
	if c.workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, not %d", c.workers))
	}
	return c, errors.Join(errs...)
}

func nodeAgentClients(kubeconfig string, workers int) (nodeagent.Clients, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nodeagent.Clients{}, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	// Thousands of nodes register and renew at once: the client's own rate
	// limit follows the number of workers.
	cfg.QPS, cfg.Burst = float32(50*workers), 100*workers
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nodeagent.Clients{}, fmt.Errorf("API client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nodeagent.Clients{}, fmt.Errorf("dynamic API client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nodeagent.Clients{}, fmt.Errorf("discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	return nodeagent.Clients{Kube: kube, Dynamic: dyn, Mapper: mapper}, nil
}

func runNodes(args []string) int {
	c, err := parseNodesFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuspawner-cluster nodes: %v\n", err)
		return 2
	}
	if c.parentDeath {
		if err := dieWithParent(); err != nil {
			fmt.Fprintf(os.Stderr, "gpuspawner-cluster nodes: %v\n", err)
			return 1
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if err := serveNodes(ctx, c, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "gpuspawner-cluster nodes: %v\n", err)
		return 1
	}
	return 0
}

func serveNodes(ctx context.Context, c nodesConfig, out io.Writer) error {
	started := time.Now()
	objs, err := nodeagent.ReadFile(c.cluster)
	if err != nil {
		return err
	}
	clients, err := nodeAgentClients(c.kubeconfig, c.workers)
	if err != nil {
		return err
	}
	// each node gets its lease when it is registered and is renewed from then
	// on, not once the whole file is applied (thousands of nodes and pods take
	// minutes)
	leased := &nodeagent.NodeSet{}
	go nodeagent.RenewLeases(ctx, clients.Kube, leased, c.leaseInterval, c.workers)
	nodes, err := nodeagent.Apply(ctx, clients, objs, c.workers, metav1.Now(), func(name string) {
		leased.Register(ctx, clients.Kube, name)
	})
	if err != nil {
		return err
	}
	podsDone := make(chan error, 1)
	go func() { podsDone <- nodeagent.RunPods(ctx, clients.Kube, nodes, nodeagent.NewPodIPs(), c.workers) }()
	fmt.Fprintf(os.Stderr, "gpuspawner-cluster nodes: %d objects, %d nodes applied in %.1fs\n", len(objs), len(nodes), time.Since(started).Seconds())
	if _, err := fmt.Fprintf(out, "READY %d nodes\n", len(nodes)); err != nil {
		return fmt.Errorf("announcing readiness: %w", err)
	}
	return <-podsDone
}
