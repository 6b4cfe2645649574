package controlplane

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmconfig "k8s.io/kubernetes/cmd/kube-controller-manager/app/config"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

// controllerManagerArgs are kube-controller-manager's command-line flags for
// this control plane.
func controllerManagerArgs(c Config, f Files, kubeconfig string) []string {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--profiling=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + f.ServiceAccountKey,
		"--root-ca-file=" + f.CACert,
		"--cluster-signing-cert-file=" + f.CACert,
		"--cluster-signing-key-file=" + f.CAKey,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--controllers=*",
	}
	if c.FeatureGates != "" {
		args = append(args, "--feature-gates="+c.FeatureGates)
	}
	return args
}

// newControllerManagerConfig parses args into kube-controller-manager's own
// options, as its command does, and makes its config.
func newControllerManagerConfig(ctx context.Context, args []string) (*kcmconfig.Config, error) {
	s, err := options.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager options: %w", err)
	}
	all, disabled, aliases := app.KnownControllers(), app.ControllersDisabledByDefault(), app.ControllerAliases()
	named := s.Flags(all, disabled, aliases)
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	s.ParsedFlags = &named
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, fmt.Errorf("kube-controller-manager feature gates: %w", err)
	}
	c, err := s.Config(ctx, all, disabled, aliases)
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager config: %w", err)
	}
	return c, nil
}

// runControllerManager runs kube-controller-manager from args until ctx ends;
// its result arrives on the returned channel.
func runControllerManager(ctx context.Context, args []string) (<-chan error, error) {
	c, err := newControllerManagerConfig(ctx, args)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		err := app.Run(ctx, c.Complete())
		if err != nil && ctx.Err() == nil {
			done <- fmt.Errorf("kube-controller-manager: %w", err)
		}
		close(done)
	}()
	return done, nil
}
