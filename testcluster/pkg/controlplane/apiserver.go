package controlplane

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// apiserverArgs are kube-apiserver's command-line flags for this control plane.
func apiserverArgs(c Config, f Files, etcdURL string) []string {
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", c.Port),
		"--tls-cert-file=" + f.ServingCert,
		"--tls-private-key-file=" + f.ServingKey,
		"--client-ca-file=" + f.CACert,
		"--service-account-key-file=" + f.ServiceAccountPub,
		"--service-account-signing-key-file=" + f.ServiceAccountKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--allow-privileged=true",
		// No kube-proxy or real endpoints here: the kubernetes Service keeps no endpoints.
		"--endpoint-reconciler-type=none",
		"--kubelet-client-certificate=" + f.KubeletClientCert,
		"--kubelet-client-key=" + f.KubeletClientKey,
		"--kubelet-certificate-authority=" + f.KubeletCACert,
		"--kubelet-preferred-address-types=InternalIP",
		// Aggregated APIs (such as Kueue's visibility API) are reached through the front proxy.
		"--requestheader-client-ca-file=" + f.FrontProxyCACert,
		"--requestheader-allowed-names=" + frontProxyClientUser,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f.FrontProxyClientCert,
		"--proxy-client-key-file=" + f.FrontProxyClientKey,
		"--profiling=false",
	}
	if c.FeatureGates != "" {
		args = append(args, "--feature-gates="+c.FeatureGates)
	}
	return args
}

// newAPIServerOptions parses args into kube-apiserver's own options, as its
// command does, and completes and validates them.
func newAPIServerOptions(ctx context.Context, args []string) (options.CompletedOptions, error) {
	s := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return options.CompletedOptions{}, fmt.Errorf("kube-apiserver flags: %w", err)
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return options.CompletedOptions{}, fmt.Errorf("kube-apiserver feature gates: %w", err)
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		return options.CompletedOptions{}, fmt.Errorf("completing kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return options.CompletedOptions{}, fmt.Errorf("kube-apiserver options: %w", utilerrors.NewAggregate(errs))
	}
	return completed, nil
}

// runAPIServer builds kube-apiserver's server chain (aggregator, kube API,
// extensions) from args and serves until ctx ends. It returns once the
// server listens; its result arrives on the returned channel.
func runAPIServer(ctx context.Context, args []string) (<-chan error, error) {
	opts, err := newAPIServerOptions(ctx, args)
	if err != nil {
		return nil, err
	}
	if opts.InformerName == nil {
		name, err := cache.NewInformerName("kube-apiserver")
		if err != nil {
			return nil, fmt.Errorf("naming kube-apiserver's informers: %w", err)
		}
		opts.InformerName = name
	}
	cfg, err := app.NewConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver config: %w", err)
	}
	completed, err := cfg.Complete()
	if err != nil {
		return nil, fmt.Errorf("completing kube-apiserver config: %w", err)
	}
	server, err := app.CreateServerChain(completed)
	if err != nil {
		return nil, fmt.Errorf("creating kube-apiserver's server chain: %w", err)
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return nil, fmt.Errorf("preparing kube-apiserver: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		if err := prepared.Run(ctx); err != nil {
			done <- fmt.Errorf("kube-apiserver: %w", err)
		}
		close(done)
	}()
	return done, nil
}
