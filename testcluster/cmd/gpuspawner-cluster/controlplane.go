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

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpuspawner/gpuspawner/testcluster/pkg/controlplane"
)

// forcedExitAfter bounds a stop: whatever has not stopped by then is ended
// with the process.
const forcedExitAfter = 15 * time.Second

// parseControlPlaneFlags reads the controlplane command's flags.
func parseControlPlaneFlags(args []string, stderr io.Writer) (controlplane.Config, bool, bool, error) {
	fs := flag.NewFlagSet("gpuspawner-cluster controlplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c controlplane.Config
	fs.StringVar(&c.DataDir, "data-dir", "", "directory for etcd's data, certificates, kubeconfigs and cluster.json (required)")
	fs.IntVar(&c.Port, "port", 6443, "the API server's HTTPS port on 127.0.0.1")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "where to write the admin kubeconfig once ready (always also DATA-DIR/admin.kubeconfig)")
	fs.StringVar(&c.FeatureGates, "feature-gates", "", "feature gates for all three components, as kube-apiserver takes them (A=true,B=false)")
	fs.DurationVar(&c.ReadyTimeout, "ready-timeout", 90*time.Second, "give up when not ready after this long")
	fs.DurationVar(&c.StopTimeout, "stop-timeout", 10*time.Second, "how long the components may take to stop")
	parentDeath := fs.Bool("parent-death", true, "stop when the process that started this one dies (Linux PR_SET_PDEATHSIG)")
	stdinEOF := fs.Bool("exit-on-stdin-close", false, "stop when standard input is closed (a launcher keeps a pipe open while it lives)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "log verbosity of the Kubernetes components")
	if err := fs.Parse(args); err != nil {
		return c, false, false, err
	}
	if fs.NArg() > 0 {
		return c, false, false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, *parentDeath, *stdinEOF, c.Validate()
}

// dieWithParent asks the kernel to send SIGTERM when the parent dies, and
// returns an error when it already has (between the fork and now).
func dieWithParent() error {
	parent := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0); err != nil {
		return fmt.Errorf("setting the parent-death signal: %w", err)
	}
	if os.Getppid() != parent || parent == 1 {
		return errors.New("the parent process is gone")
	}
	return nil
}

// stopOnStdinClose cancels when standard input reaches its end.
func stopOnStdinClose(cancel context.CancelFunc) {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		klog.InfoS("gpuspawner-cluster: standard input closed, stopping")
		cancel()
	}()
}

func runControlPlane(args []string) int {
	c, parentDeath, stdinEOF, err := parseControlPlaneFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuspawner-cluster controlplane: %v\n", err)
		return 2
	}
	if parentDeath {
		if err := dieWithParent(); err != nil {
			fmt.Fprintf(os.Stderr, "gpuspawner-cluster controlplane: %v\n", err)
			return 1
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if stdinEOF {
		stopOnStdinClose(cancel)
	}
	go func() {
		<-ctx.Done()
		// A second signal, or a stop that hangs, ends the process at once.
		again := make(chan os.Signal, 1)
		signal.Notify(again, syscall.SIGTERM, syscall.SIGINT)
		select {
		case <-again:
		case <-time.After(forcedExitAfter):
			fmt.Fprintf(os.Stderr, "gpuspawner-cluster controlplane: not stopped after %s, exiting\n", forcedExitAfter)
		}
		os.Exit(1)
	}()
	if err := controlplane.Run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "gpuspawner-cluster controlplane: %v\n", err)
		return 1
	}
	klog.Flush()
	return 0
}
