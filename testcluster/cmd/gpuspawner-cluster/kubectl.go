package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // client auth plugins, as kubectl's own main loads them
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

// runKubectl runs kubectl with args, as Kubernetes' cmd/kubectl does; it exits
// the process with kubectl's status.
func runKubectl(args []string) {
	// kubectl reads os.Args itself (verbosity, plugins, cobra's arguments).
	os.Args = append([]string{"kubectl"}, args...)
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck // as kubectl's main does
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
	os.Exit(0)
}
