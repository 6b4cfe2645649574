package controlplane

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"

	"github.com/gpuspawner/gpuspawner/testcluster/pkg/pki"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{DataDir: "/tmp/x", Port: 6443, ReadyTimeout: time.Second}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"valid", func(*Config) {}, ""},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "--data-dir is required"},
		{"port zero", func(c *Config) { c.Port = 0 }, "--port must be between 1 and 65535, not 0"},
		{"port too high", func(c *Config) { c.Port = 70000 }, "--port must be between 1 and 65535, not 70000"},
		{"no ready timeout", func(c *Config) { c.ReadyTimeout = 0 }, "--ready-timeout must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// The flags given to each component are accepted and validated by that
// component's own options, as its binary would parse them.
func TestComponentFlagsAreAcceptedByTheComponents(t *testing.T) {
	dir := t.TempDir()
	f := NewFiles(dir)
	if err := EnsurePKI(f, time.Now()); err != nil {
		t.Fatal(err)
	}
	c := Config{DataDir: dir, Port: 6443, ReadyTimeout: time.Second}
	kubeconfig := filepath.Join(dir, "component.kubeconfig")
	cfg, err := kubeconfigFor(c.Server(), f.CACert, f.ControllerManagerCert, f.ControllerManagerKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeKubeconfig(kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	opts, err := newAPIServerOptions(ctx, apiserverArgs(c, f, "http://127.0.0.1:2379"))
	if err != nil {
		t.Fatalf("kube-apiserver rejects its flags: %v", err)
	}
	if got := opts.Authorization.Modes; strings.Join(got, ",") != "Node,RBAC" {
		t.Errorf("authorization modes = %q, want Node,RBAC", got)
	}
	if opts.SecureServing.BindPort != 6443 || opts.SecureServing.BindAddress.String() != "127.0.0.1" {
		t.Errorf("serving on %s:%d, want 127.0.0.1:6443", opts.SecureServing.BindAddress, opts.SecureServing.BindPort)
	}

	if _, err := newControllerManagerConfig(ctx, controllerManagerArgs(c, f, kubeconfig)); err != nil {
		t.Fatalf("kube-controller-manager rejects its flags: %v", err)
	}
	sched, err := newSchedulerOptions(schedulerArgs(c, kubeconfig))
	if err != nil {
		t.Fatalf("kube-scheduler rejects its flags: %v", err)
	}
	// As kube-scheduler's Setup does before it validates.
	if sched.ComponentConfig, err = latest.Default(); err != nil {
		t.Fatal(err)
	}
	if errs := sched.Validate(); len(errs) > 0 {
		t.Fatalf("kube-scheduler options invalid: %v", errs)
	}
}

func TestClusterInfoRoundTrip(t *testing.T) {
	dir := t.TempDir()
	f := NewFiles(dir)
	path := filepath.Join(dir, ClusterInfoFile)
	want := newClusterInfo("https://127.0.0.1:6443", filepath.Join(dir, "admin.kubeconfig"), f)
	if err := writeClusterInfo(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadClusterInfo(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("read %+v, want %+v", got, want)
	}
}

func TestReadClusterInfoSaysWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content, wantErr string
	}{
		{"not json", "server: x", "is not a cluster.json"},
		{"no server", `{"ca_file": "/ca"}`, `lacks "server"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".json")
			if err := writeFileForTest(path, tc.content); err != nil {
				t.Fatal(err)
			}
			_, err := ReadClusterInfo(path)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ReadClusterInfo() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func writeFileForTest(path, content string) error {
	return pki.WriteFile(path, []byte(content), 0o644)
}

func TestFailingChecks(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"two failing", "[+]ping ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n[+]etcd ok\n[-]autoregister-completion failed: reason withheld\nreadyz check failed\n",
			"poststarthook/rbac/bootstrap-roles, autoregister-completion not ready"},
		{"no check lines", "forbidden\n", "forbidden"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := failingChecks(tc.body); got != tc.want {
				t.Errorf("failingChecks() = %q, want %q", got, tc.want)
			}
		})
	}
}
