package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

func gpuNode(name string, gpus, cpu, pods string) *corev1.Node {
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse(pods),
		"nvidia.com/gpu":      resource.MustParse(gpus),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nvidia.com/gpu.product": "A100"}},
		Status:     corev1.NodeStatus{Capacity: alloc, Allocatable: alloc},
	}
}

func boundPod(name, node string, requests map[corev1.ResourceName]string) *corev1.Pod {
	list := corev1.ResourceList{}
	limits := corev1.ResourceList{}
	for r, q := range requests {
		list[r] = resource.MustParse(q)
		if r == "nvidia.com/gpu" {
			limits[r] = resource.MustParse(q)
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "notebook", Image: "jupyter/base", Resources: corev1.ResourceRequirements{Requests: list, Limits: limits},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func nodeLister(t *testing.T, nodes ...*corev1.Node) corelisters.NodeLister {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := indexer.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewNodeLister(indexer)
}

func TestAdmit(t *testing.T) {
	gpu := func(n string) map[corev1.ResourceName]string {
		return map[corev1.ResourceName]string{"nvidia.com/gpu": n}
	}
	cpu := func(n string) map[corev1.ResourceName]string {
		return map[corev1.ResourceName]string{corev1.ResourceCPU: n}
	}
	tests := []struct {
		name        string
		node        *corev1.Node
		running     []*corev1.Pod
		forgotten   []*corev1.Pod
		pod         *corev1.Pod
		wantReason  string // "" when admitted
		wantMessage string
	}{
		{
			name:    "a pod that fits beside the running ones is admitted",
			node:    gpuNode("a", "4", "8", "110"),
			running: []*corev1.Pod{boundPod("r1", "a", gpu("2"))},
			pod:     boundPod("p", "a", gpu("2")),
		},
		{
			name:        "a node out of GPUs rejects the pod as the kubelet does",
			node:        gpuNode("a", "4", "8", "110"),
			running:     []*corev1.Pod{boundPod("r1", "a", gpu("3")), boundPod("r2", "a", gpu("1"))},
			pod:         boundPod("p", "a", gpu("1")),
			wantReason:  "OutOfnvidia.com/gpu",
			wantMessage: "Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 4, capacity: 4",
		},
		{
			name:        "CPU is counted in millicores",
			node:        gpuNode("a", "4", "8", "110"),
			running:     []*corev1.Pod{boundPod("r1", "a", cpu("7"))},
			pod:         boundPod("p", "a", cpu("1500m")),
			wantReason:  "OutOfcpu",
			wantMessage: "Node didn't have enough resource: cpu, requested: 1500, used: 7000, capacity: 8000",
		},
		{
			name:        "a full node rejects one pod more",
			node:        gpuNode("a", "4", "8", "1"),
			running:     []*corev1.Pod{boundPod("r1", "a", nil)},
			pod:         boundPod("p", "a", nil),
			wantReason:  "OutOfpods",
			wantMessage: "Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1",
		},
		{
			name:      "a pod that ended gives its GPUs back",
			node:      gpuNode("a", "4", "8", "110"),
			running:   []*corev1.Pod{boundPod("r1", "a", gpu("4"))},
			forgotten: []*corev1.Pod{boundPod("r1", "a", gpu("4"))},
			pod:       boundPod("p", "a", gpu("4")),
		},
		{
			name:    "pods on other nodes do not count",
			node:    gpuNode("a", "4", "8", "110"),
			running: []*corev1.Pod{boundPod("r1", "b", gpu("4"))},
			pod:     boundPod("p", "a", gpu("4")),
		},
		{
			name:        "a node the API server does not have admits nothing",
			node:        gpuNode("b", "4", "8", "110"),
			pod:         boundPod("p", "a", gpu("1")),
			wantReason:  "InvalidNodeInfo",
			wantMessage: "Kubelet cannot get node info.",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAdmitter(nodeLister(t, tc.node))
			for _, p := range tc.running {
				a.Running(p)
			}
			for _, p := range tc.forgotten {
				a.Forget(p)
			}
			got := a.Admit(context.Background(), tc.pod)
			if tc.wantReason == "" {
				if !got.Admit {
					t.Fatalf("Admit() = %+v, want the pod admitted", got)
				}
				if !a.Admits(tc.pod) {
					t.Errorf("an admitted pod is not counted on its node")
				}
				return
			}
			if got.Admit || got.Reason != tc.wantReason || got.Message != tc.wantMessage {
				t.Errorf("Admit() = %+v, want rejected with %q: %q", got, tc.wantReason, tc.wantMessage)
			}
			if a.Admits(tc.pod) {
				t.Errorf("a rejected pod is counted on its node")
			}
		})
	}
}

func TestAdmittedPodsCountForTheNextOnes(t *testing.T) {
	a := NewAdmitter(nodeLister(t, gpuNode("a", "4", "8", "110")))
	gpus := map[corev1.ResourceName]string{"nvidia.com/gpu": "2"}
	var reasons []string
	for _, name := range []string{"p1", "p2", "p3"} {
		reasons = append(reasons, a.Admit(context.Background(), boundPod(name, "a", gpus)).Reason)
	}
	if strings.Join(reasons, ",") != ",,OutOfnvidia.com/gpu" {
		t.Errorf("reasons = %q, want the first two admitted and the third out of GPUs", reasons)
	}
}

func TestRejectedStatus(t *testing.T) {
	pod := boundPod("p", "a", nil)
	pod.Status.QOSClass = corev1.PodQOSBestEffort
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue},
	}
	s := RejectedStatus(pod, lifecycle.PodAdmitResult{Reason: "OutOfnvidia.com/gpu", Message: "Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 4, capacity: 4"})
	if s.Phase != corev1.PodFailed || s.Reason != "OutOfnvidia.com/gpu" || s.QOSClass != corev1.PodQOSBestEffort {
		t.Errorf("status = %+v", s)
	}
	if want := "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 4, capacity: 4"; s.Message != want {
		t.Errorf("message = %q, want %q", s.Message, want)
	}
	if len(s.Conditions) != 1 || s.Conditions[0].Type != corev1.DisruptionTarget {
		t.Errorf("conditions = %v, want only the one the kubelet does not own", s.Conditions)
	}
}

// TestRunPods runs the agent's pod loop against a fake API server: of two pods
// bound to a node with one GPU, one runs and the other is rejected; a pod
// being deleted goes.
func TestRunPods(t *testing.T) {
	deleting := boundPod("deleting", "a", nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleting.Finalizers = nil
	kube := fake.NewClientset(
		gpuNode("a", "1", "8", "110"),
		boundPod("p1", "a", map[corev1.ResourceName]string{"nvidia.com/gpu": "1"}),
		boundPod("p2", "a", map[corev1.ResourceName]string{"nvidia.com/gpu": "1"}),
		deleting,
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunPods(ctx, kube, []string{"a"}, NewPodIPs(), 2) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var phases map[corev1.PodPhase][]corev1.PodStatus
	deadline := time.Now().Add(10 * time.Second)
	for {
		phases = map[corev1.PodPhase][]corev1.PodStatus{}
		pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			phases[p.Status.Phase] = append(phases[p.Status.Phase], p.Status)
		}
		if len(pods.Items) == 2 && len(phases[corev1.PodRunning]) == 1 && len(phases[corev1.PodFailed]) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods = %+v, want one running, one rejected, the deleted one gone", pods.Items)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rejected := phases[corev1.PodFailed][0]
	want := "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 1, capacity: 1"
	if rejected.Reason != "OutOfnvidia.com/gpu" || rejected.Message != want {
		t.Errorf("rejected status = %q: %q, want OutOfnvidia.com/gpu: %q", rejected.Reason, rejected.Message, want)
	}
}

// BenchmarkAdmit admits a pod to a node already running 30 (the benchmarks'
// 150,000 pods on 5,000 nodes).
func BenchmarkAdmit(b *testing.B) {
	node := gpuNode("a", "8", "256", "110")
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(node); err != nil {
		b.Fatal(err)
	}
	a := NewAdmitter(corelisters.NewNodeLister(indexer))
	for i := range 30 {
		a.Running(boundPod(fmt.Sprintf("r%d", i), "a", map[corev1.ResourceName]string{corev1.ResourceCPU: "1"}))
	}
	pod := boundPod("p", "a", map[corev1.ResourceName]string{"nvidia.com/gpu": "1", corev1.ResourceCPU: "1"})
	b.ResetTimer()
	for range b.N {
		if !a.Admit(context.Background(), pod).Admit {
			b.Fatal("not admitted")
		}
		a.Forget(pod)
	}
}
