package controlplane

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// schedulerArgs are kube-scheduler's command-line flags for this control plane.
func schedulerArgs(c Config, kubeconfig string) []string {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		// Its own HTTPS endpoint (metrics, healthz) is not served: several
		// control planes may run on one machine.
		"--secure-port=0",
		"--profiling=false",
	}
	if c.FeatureGates != "" {
		args = append(args, "--feature-gates="+c.FeatureGates)
	}
	return args
}

// newSchedulerOptions parses args into kube-scheduler's own options, as its
// command does.
func newSchedulerOptions(args []string) (*options.Options, error) {
	opts := options.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("kube-scheduler flags: %w", err)
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, fmt.Errorf("kube-scheduler feature gates: %w", err)
	}
	name, err := cache.NewInformerName("kube-scheduler")
	if err != nil {
		return nil, fmt.Errorf("naming kube-scheduler's informers: %w", err)
	}
	opts.InformerName = name
	return opts, nil
}

// runScheduler sets kube-scheduler up from args and runs it until ctx ends;
// its result arrives on the returned channel.
func runScheduler(ctx context.Context, args []string) (<-chan error, error) {
	opts, err := newSchedulerOptions(args)
	if err != nil {
		return nil, err
	}
	cc, sched, err := app.Setup(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("setting up kube-scheduler: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		// Without leader election Run returns only once ctx ends.
		err := app.Run(ctx, cc, sched)
		if err != nil && ctx.Err() == nil {
			done <- fmt.Errorf("kube-scheduler: %w", err)
		}
		close(done)
	}()
	return done, nil
}
