package nodeagent

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// LeaseDuration is how long a node lease holds, as the kubelet's default
// (nodeLeaseDurationSeconds); the agent renews at a quarter of it, as a kubelet does.
const LeaseDuration = 40 * time.Second

// newLease is a node's lease in kube-node-lease, owned by its Node.
func newLease(node *corev1.Node, now time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      node.Name,
			Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(node.Name),
			LeaseDurationSeconds: ptr.To(int32(LeaseDuration / time.Second)),
			RenewTime:            &metav1.MicroTime{Time: now},
		},
	}
}

// renewLease creates the node's lease or moves its renew time to now.
func renewLease(ctx context.Context, kube kubernetes.Interface, name string, now time.Time) error {
	leases := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		_, err = leases.Create(ctx, newLease(node, now), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the lease of node %s: %w", name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the lease of node %s: %w", name, err)
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renewing the lease of node %s: %w", name, err)
	}
	return nil
}

// NodeSet is the names of the nodes whose leases are renewed; nodes join it
// as they register. Safe for concurrent use.
type NodeSet struct {
	mu    sync.Mutex
	names []string
}

// Add puts a node in the set.
func (s *NodeSet) Add(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names = append(s.names, name)
}

// Register gives a node just registered its lease at once, as a kubelet
// creates it on registering, and puts it in the set.
func (s *NodeSet) Register(ctx context.Context, kube kubernetes.Interface, name string) {
	if err := renewLease(ctx, kube, name, time.Now()); err != nil && ctx.Err() == nil {
		klog.ErrorS(err, "node lease not created", "node", name)
	}
	s.Add(name)
}

// List returns the nodes in the set now.
func (s *NodeSet) List() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.names...)
}

// RenewLeases renews every node's lease now and then every interval until
// ctx ends, workers at a time; a failed renewal is logged and tried again
// next round. Each round renews the nodes in the set at its start: a node
// registered while thousands of others still are gets its lease within an
// interval, before the node lifecycle controller's grace period ends (it
// marks a node Unknown 40-50 s after its last heartbeat, and only a
// kubelet's status post would make it Ready again).
func RenewLeases(ctx context.Context, kube kubernetes.Interface, nodes *NodeSet, interval time.Duration, workers int) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		now := time.Now()
		_ = forEach(nodes.List(), workers, func(name string) error {
			if err := renewLease(ctx, kube, name, now); err != nil && ctx.Err() == nil {
				klog.ErrorS(err, "node lease not renewed", "node", name)
			}
			return nil
		})
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
