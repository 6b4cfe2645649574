package multicall

import (
	"reflect"
	"testing"
)

func TestResolve(t *testing.T) {
	programs := []string{"kubectl", "controlplane"}
	tests := []struct {
		name     string
		argv     []string
		wantProg string
		wantArgs []string
	}{
		{"symlink named kubectl", []string{"/venv/bin/kubectl", "get", "pods"}, "kubectl", []string{"get", "pods"}},
		{"subcommand kubectl", []string{"/x/gpuspawner-cluster", "kubectl", "version"}, "kubectl", []string{"version"}},
		{"subcommand controlplane", []string{"gpuspawner-cluster", "controlplane", "--port", "6443"}, "controlplane", []string{"--port", "6443"}},
		{"unknown subcommand is returned for the caller to reject", []string{"gpuspawner-cluster", "nope"}, "nope", []string{}},
		{"no subcommand", []string{"gpuspawner-cluster"}, "", nil},
		{"empty argv", nil, "", nil},
		{"windows suffix", []string{`kubectl.exe`, "get"}, "kubectl", []string{"get"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prog, args := Resolve(tc.argv, programs)
			if prog != tc.wantProg || !reflect.DeepEqual(args, tc.wantArgs) {
				t.Errorf("Resolve(%q) = %q, %q; want %q, %q", tc.argv, prog, args, tc.wantProg, tc.wantArgs)
			}
		})
	}
}
