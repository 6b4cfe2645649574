package nodeagent

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A node's lease is renewed from the moment it is registered: Apply tells
// the set each node it registers, and RenewLeases takes the nodes that join
// the set after it started (a file of thousands of nodes and pods takes
// minutes to apply, longer than the node lifecycle controller waits).
func TestApplyTellsEachNodeAsItIsRegistered(t *testing.T) {
	objs, err := Parse([]byte("apiVersion: v1\nkind: List\nitems:\n"+
		"- {apiVersion: v1, kind: Node, metadata: {name: a}, status: {capacity: {cpu: 8, pods: 110, nvidia.com/gpu: 4}}}\n"+
		"- {apiVersion: v1, kind: Node, metadata: {name: b}, status: {capacity: {cpu: 8, pods: 110}}}\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	var told NodeSet
	nodes, err := Apply(context.Background(), Clients{Kube: fake.NewSimpleClientset(), Mapper: mapper}, objs, 2,
		metav1.Now(), told.Add)
	if err != nil {
		t.Fatal(err)
	}
	got := told.List()
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) || len(nodes) != 2 {
		t.Fatalf("told %v, returned %v; want both nodes a and b", got, nodes)
	}
}

func TestRegisterGivesTheNodeItsLeaseAtOnce(t *testing.T) {
	kube := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u1"}})
	var set NodeSet
	set.Register(context.Background(), kube, "n")
	lease, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), "n", metav1.GetOptions{})
	if err != nil || *lease.Spec.HolderIdentity != "n" {
		t.Fatalf("no lease held by the node right after Register: %v %+v", err, lease)
	}
	if got := set.List(); !slices.Equal(got, []string{"n"}) {
		t.Fatalf("set = %v, want [n]", got)
	}
}

func TestRenewLeasesTakesNodesThatJoinAfterItStarted(t *testing.T) {
	kube := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "late", UID: "u1"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var set NodeSet
	go RenewLeases(ctx, kube, &set, 10*time.Millisecond, 1)
	time.Sleep(30 * time.Millisecond) // a few rounds with no node
	set.Add("late")
	deadline := time.Now().Add(5 * time.Second)
	for {
		lease, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "late", metav1.GetOptions{})
		if err == nil {
			if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].Name != "late" {
				t.Fatalf("the lease is not owned by its node: %+v", lease.OwnerReferences)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node that joined got no lease within 5 s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
