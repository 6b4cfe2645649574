package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuspawner/gpuspawner/testcluster/pkg/faultproxy"
)

func runFaultProxy(args []string) int {
	fs := flag.NewFlagSet("gpuspawner-cluster faultproxy", flag.ContinueOnError)
	var c faultproxy.Config
	fs.StringVar(&c.DataDir, "data-dir", "", "the control plane's data directory (its cluster.json and pki; required)")
	fs.IntVar(&c.Port, "port", 0, "the proxy's HTTPS port on 127.0.0.1 (0: any free one)")
	fs.IntVar(&c.ControlPort, "control-port", 0, "the control endpoint's HTTP port on 127.0.0.1 (0: any free one)")
	parentDeath := fs.Bool("parent-death", true, "stop when the process that started this one dies (Linux PR_SET_PDEATHSIG)")
	stdinEOF := fs.Bool("exit-on-stdin-close", false, "stop when standard input is closed")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err == nil && c.DataDir == "" {
		err = errors.New("--data-dir is required: the data directory of a running gpuspawner-cluster controlplane")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpuspawner-cluster faultproxy: %v\n", err)
		return 2
	}
	if *parentDeath {
		if err := dieWithParent(); err != nil {
			fmt.Fprintf(os.Stderr, "gpuspawner-cluster faultproxy: %v\n", err)
			return 1
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if *stdinEOF {
		stopOnStdinClose(cancel)
	}
	if err := faultproxy.Run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "gpuspawner-cluster faultproxy: %v\n", err)
		return 1
	}
	return 0
}
