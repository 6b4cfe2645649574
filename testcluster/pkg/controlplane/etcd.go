package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// etcdStartTimeout bounds how long embedded etcd may take to become ready.
const etcdStartTimeout = 30 * time.Second

// freeLoopbackPort asks the kernel for a TCP port on 127.0.0.1 nobody uses now.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startEtcd starts a one-member etcd in dataDir/etcd listening on loopback
// ports of its own and returns it with the URL its clients use.
func startEtcd(ctx context.Context, dataDir string) (*embed.Etcd, string, error) {
	clientPort, err := freeLoopbackPort()
	if err != nil {
		return nil, "", err
	}
	peerPort, err := freeLoopbackPort()
	if err != nil {
		return nil, "", err
	}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}

	cfg := embed.NewConfig()
	cfg.Name = "gpuspawner-cluster"
	cfg.Dir = filepath.Join(dataDir, "etcd")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	// A test cluster's data need not survive a power cut; skipping fsync keeps
	// writes fast on shared disks.
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("starting embedded etcd in %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, clientURL.String(), nil
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-time.After(etcdStartTimeout):
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd was not ready within %s", etcdStartTimeout)
	case <-ctx.Done():
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd: %w", ctx.Err())
	}
}
