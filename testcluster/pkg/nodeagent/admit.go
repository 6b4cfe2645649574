package nodeagent

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"
)

// RejectedPrefix starts the status message of a pod its node's kubelet
// rejected (Kubelet.rejectPod in k8s.io/kubernetes/pkg/kubelet/kubelet.go).
const RejectedPrefix = "Pod was rejected: "

// Admitter runs a kubelet's pod admission for every node of the agent: the
// kubelet's own predicate admit handler (k8s.io/kubernetes/pkg/kubelet/lifecycle)
// against the node as the API server has it and the pods already admitted to
// it. A pod that does not fit (OutOfnvidia.com/gpu, OutOfcpu, ...) is
// rejected, as a real node rejects it.
type Admitter struct {
	nodes corelisters.NodeLister

	mu     sync.Mutex
	onNode map[string]*admitted
}

// admitted is what one node runs: its admission is one pod at a time, as in
// a kubelet's pod loop.
type admitted struct {
	mu   sync.Mutex
	pods map[types.UID]*corev1.Pod
}

// NewAdmitter admits pods to the nodes that nodes lists.
func NewAdmitter(nodes corelisters.NodeLister) *Admitter {
	return &Admitter{nodes: nodes, onNode: map[string]*admitted{}}
}

func (a *Admitter) node(name string) *admitted {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.onNode[name]
	if !ok {
		n = &admitted{pods: map[types.UID]*corev1.Pod{}}
		a.onNode[name] = n
	}
	return n
}

// Running counts a pod that already runs on its node (one its cluster file
// or an earlier agent started) for the pods admitted after it.
func (a *Admitter) Running(pod *corev1.Pod) {
	n := a.node(pod.Spec.NodeName)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pods[pod.UID] = pod
}

// Forget stops counting a pod that ended or is gone.
func (a *Admitter) Forget(pod *corev1.Pod) {
	n := a.node(pod.Spec.NodeName)
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.pods, pod.UID)
}

// Admits reports whether pod has been admitted to its node.
func (a *Admitter) Admits(pod *corev1.Pod) bool {
	n := a.node(pod.Spec.NodeName)
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.pods[pod.UID]
	return ok
}

// Admit decides whether pod may run on its node, next to the pods admitted
// there before it; an admitted pod counts for the next ones.
func (a *Admitter) Admit(ctx context.Context, pod *corev1.Pod) lifecycle.PodAdmitResult {
	n := a.node(pod.Spec.NodeName)
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.pods[pod.UID]; ok {
		return lifecycle.PodAdmitResult{Admit: true}
	}
	others := make([]*corev1.Pod, 0, len(n.pods))
	for _, p := range n.pods {
		others = append(others, p)
	}
	getNode := func(context.Context, bool) (*corev1.Node, error) {
		node, err := a.nodes.Get(pod.Spec.NodeName)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", pod.Spec.NodeName, err)
		}
		// the handler writes the kubernetes.io/os label into the node it gets
		return node.DeepCopy(), nil
	}
	// The device plugins' allocatable is the node's own here: nothing to update.
	noPluginResources := func(*schedulerframework.NodeInfo, *lifecycle.PodAdmitAttributes) error { return nil }
	handler := lifecycle.NewPredicateAdmitHandler(getNode, lifecycle.NewAdmissionFailureHandlerStub(), noPluginResources)
	result := handler.Admit(ctx, &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: others, Operation: lifecycle.AddOperation})
	if result.Admit {
		n.pods[pod.UID] = pod
	}
	return result
}

// RejectedStatus is the status a kubelet posts for a pod it did not admit
// (Kubelet.rejectPod): Failed with the admission's reason and message, the
// pod's QoS class and the conditions the kubelet does not own kept.
func RejectedStatus(pod *corev1.Pod, result lifecycle.PodAdmitResult) corev1.PodStatus {
	status := corev1.PodStatus{
		Phase:    corev1.PodFailed,
		Reason:   result.Reason,
		Message:  RejectedPrefix + result.Message,
		QOSClass: pod.Status.QOSClass,
	}
	for _, c := range pod.Status.Conditions {
		if !kubetypes.PodConditionByKubelet(c.Type) {
			status.Conditions = append(status.Conditions, c)
		}
	}
	return status
}
