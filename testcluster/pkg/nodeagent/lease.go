package nodeagent

import (
	"context"
	"fmt"
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

// RenewLeases renews every node's lease now and then every interval until
// ctx ends, workers at a time; a failed renewal is logged and tried again
// next round.
func RenewLeases(ctx context.Context, kube kubernetes.Interface, nodes []string, interval time.Duration, workers int) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		now := time.Now()
		_ = forEach(nodes, workers, func(name string) error {
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
