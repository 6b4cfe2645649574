// Package controlplane runs Kubernetes' own kube-apiserver,
// kube-controller-manager and kube-scheduler, with embedded etcd, in one
// process on loopback; it adds only the wiring: certificates, kubeconfigs and
// readiness.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
)

// Config is what the controlplane command is told.
type Config struct {
	// DataDir holds etcd's data, the PKI, the kubeconfigs and cluster.json.
	DataDir string
	// Port is the API server's HTTPS port on 127.0.0.1.
	Port int
	// Kubeconfig is where the admin kubeconfig is written once ready ("" for
	// only DataDir/admin.kubeconfig).
	Kubeconfig string
	// FeatureGates is passed alike to all three components ("" for defaults).
	FeatureGates string
	// ReadyTimeout bounds the wait for readiness.
	ReadyTimeout time.Duration
	// StopTimeout bounds the wait for the components to stop.
	StopTimeout time.Duration
}

// Validate says what is wrong with c.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required"))
	}
	if c.Port < 1 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port must be between 1 and 65535, not %d", c.Port))
	}
	if c.ReadyTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--ready-timeout must be positive, not %s", c.ReadyTimeout))
	}
	return errors.Join(errs...)
}

// Server is the API server's URL.
func (c Config) Server() string { return fmt.Sprintf("https://127.0.0.1:%d", c.Port) }

func init() {
	// The three components share one process and one logging configuration;
	// applying the same configuration again is not an error.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
}

// firstError forwards the first error any of chans delivers.
func firstError(chans ...<-chan error) <-chan error {
	out := make(chan error, len(chans))
	for _, ch := range chans {
		go func(ch <-chan error) {
			if err, ok := <-ch; ok && err != nil {
				out <- err
			}
		}(ch)
	}
	return out
}

// Run starts the control plane, writes the kubeconfigs and cluster.json once
// it is ready, prints "READY <server-url>" on out, and serves until ctx ends
// or a component fails. It stops everything it started before returning.
func Run(ctx context.Context, c Config, out io.Writer) error {
	started := time.Now()
	if err := c.Validate(); err != nil {
		return err
	}
	dataDir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("resolving --data-dir: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("creating the data directory: %w", err)
	}
	files := NewFiles(dataDir)
	if err := EnsurePKI(files, started); err != nil {
		return fmt.Errorf("preparing certificates in %s: %w", files.Dir, err)
	}
	server := c.Server()
	kcmKubeconfig := filepath.Join(dataDir, "controller-manager.kubeconfig")
	schedKubeconfig := filepath.Join(dataDir, "scheduler.kubeconfig")
	adminKubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	for _, kc := range []struct{ path, cert, key string }{
		{kcmKubeconfig, files.ControllerManagerCert, files.ControllerManagerKey},
		{schedKubeconfig, files.SchedulerCert, files.SchedulerKey},
	} {
		cfg, err := kubeconfigFor(server, files.CACert, kc.cert, kc.key)
		if err != nil {
			return err
		}
		if err := writeKubeconfig(kc.path, cfg); err != nil {
			return err
		}
	}
	admin, err := kubeconfigFor(server, files.CACert, files.AdminCert, files.AdminKey)
	if err != nil {
		return err
	}

	etcd, etcdURL, err := startEtcd(ctx, dataDir)
	if err != nil {
		return err
	}
	defer etcd.Close()

	compCtx, stopComponents := context.WithCancel(ctx)
	var stopped []<-chan error
	defer func() {
		stopComponents()
		waitStopped(stopped, c.StopTimeout)
	}()
	apiDone, err := runAPIServer(compCtx, apiserverArgs(c, files, etcdURL))
	if err != nil {
		return err
	}
	stopped = append(stopped, apiDone)
	kcmDone, err := runControllerManager(compCtx, controllerManagerArgs(c, files, kcmKubeconfig))
	if err != nil {
		return err
	}
	stopped = append(stopped, kcmDone)
	schedDone, err := runScheduler(compCtx, schedulerArgs(c, schedKubeconfig))
	if err != nil {
		return err
	}
	stopped = append(stopped, schedDone)
	failed := firstError(apiDone, kcmDone, schedDone, etcdErrors(etcd.Err()))

	restCfg, err := clientcmd.NewDefaultClientConfig(*admin, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("admin client config: %w", err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	// The ready timeout counts from the start of Run, as a caller waiting for
	// the READY line counts it.
	if err := waitReady(ctx, client, c.ReadyTimeout-time.Since(started), c.ReadyTimeout, failed); err != nil {
		return reportBeforeStop(err)
	}

	if err := writeKubeconfig(adminKubeconfig, admin); err != nil {
		return err
	}
	if c.Kubeconfig != "" {
		if err := writeKubeconfig(c.Kubeconfig, admin); err != nil {
			return err
		}
	}
	info := newClusterInfo(server, adminKubeconfig, files)
	if err := writeClusterInfo(filepath.Join(dataDir, ClusterInfoFile), info); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "gpuspawner-cluster: ready in %.1fs\n", time.Since(started).Seconds())
	if _, err := fmt.Fprintf(out, "READY %s\n", server); err != nil {
		return fmt.Errorf("announcing readiness: %w", err)
	}

	select {
	case <-ctx.Done():
		return nil
	case err := <-failed:
		return reportBeforeStop(err)
	}
}

// reportBeforeStop logs err at once: stopping kube-apiserver while a post-start
// hook still runs ends the process from inside kube-apiserver (klog.Fatal),
// before Run's caller could say why it stopped.
func reportBeforeStop(err error) error {
	klog.ErrorS(err, "gpuspawner-cluster: stopping the control plane")
	klog.Flush()
	return err
}

// etcdErrors turns etcd's error channel into one that closes without a value
// when etcd stops cleanly.
func etcdErrors(in <-chan error) <-chan error {
	out := make(chan error, 1)
	go func() {
		if err, ok := <-in; ok && err != nil {
			out <- fmt.Errorf("embedded etcd: %w", err)
		}
		close(out)
	}()
	return out
}

// waitStopped waits for every component's channel to close, at most timeout in all.
func waitStopped(chans []<-chan error, timeout time.Duration) {
	deadline := time.After(timeout)
	for _, ch := range chans {
		select {
		case <-ch:
		case <-deadline:
			klog.InfoS("gpuspawner-cluster: components still stopping, leaving them", "timeout", timeout)
			return
		}
	}
}
