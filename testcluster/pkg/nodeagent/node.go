package nodeagent

import (
	"fmt"
	"runtime"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	runtimeconv "k8s.io/apimachinery/pkg/runtime"
)

// KubeletVersion is what the simulated nodes report as their kubelet's
// version: the control plane's own.
const KubeletVersion = "v1.37.2"

// NodeIP is every simulated node's InternalIP: its pods run on this machine.
const NodeIP = "127.0.0.1"

var taintEffects = map[corev1.TaintEffect]bool{
	corev1.TaintEffectNoSchedule: true, corev1.TaintEffectPreferNoSchedule: true, corev1.TaintEffectNoExecute: true,
}

// NodeFromFile turns a cluster file's Node into the Node to create (labels,
// annotations, taints, unschedulable) and the status its kubelet would post
// (capacity, allocatable, conditions, addresses, node info, images), filling
// what a real node always has. now stamps the conditions.
func NodeFromFile(obj Object, now metav1.Time) (*corev1.Node, error) {
	var in corev1.Node
	if err := runtimeconv.DefaultUnstructuredConverter.FromUnstructured(obj.Object.Object, &in); err != nil {
		return nil, fmt.Errorf("%s: %w", obj.Where, err)
	}
	for i, t := range in.Spec.Taints {
		if !taintEffects[t.Effect] {
			return nil, fmt.Errorf("%s: spec.taints[%d].effect %q is not NoSchedule, PreferNoSchedule or NoExecute", obj.Where, i, t.Effect)
		}
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        in.Name,
			Labels:      in.Labels,
			Annotations: in.Annotations,
		},
		Spec: corev1.NodeSpec{Taints: in.Spec.Taints, Unschedulable: in.Spec.Unschedulable, ProviderID: in.Spec.ProviderID},
	}
	status := in.Status
	if len(status.Allocatable) == 0 {
		status.Allocatable = status.Capacity.DeepCopy()
	}
	if len(status.Capacity) == 0 {
		status.Capacity = status.Allocatable.DeepCopy()
	}
	if _, ok := status.Allocatable[corev1.ResourcePods]; !ok {
		return nil, fmt.Errorf("%s: status.allocatable.pods is missing: say how many pods the node takes, e.g. '110'", obj.Where)
	}
	hasReady := false
	for i := range status.Conditions {
		c := &status.Conditions[i]
		if c.Type == corev1.NodeReady {
			hasReady = true
		}
		c.LastHeartbeatTime, c.LastTransitionTime = now, now
	}
	if !hasReady {
		status.Conditions = append(status.Conditions, corev1.NodeCondition{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		})
	}
	// The API server reaches a node's kubelet at its InternalIP (it is told to
	// prefer that address type).
	status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: NodeIP},
		{Type: corev1.NodeHostName, Address: in.Name},
	}
	info := &status.NodeInfo
	if info.KubeletVersion == "" {
		info.KubeletVersion = KubeletVersion
	}
	if info.OperatingSystem == "" {
		info.OperatingSystem = runtime.GOOS
	}
	if info.Architecture == "" {
		info.Architecture = runtime.GOARCH
	}
	if info.ContainerRuntimeVersion == "" {
		info.ContainerRuntimeVersion = "gpuspawner-cluster://" + KubeletVersion
	}
	if info.OSImage == "" {
		info.OSImage = "gpuspawner-cluster simulated node"
	}
	node.Status = status
	return node, nil
}

// IsNode reports whether u is a core/v1 Node.
func IsNode(u *unstructured.Unstructured) bool {
	return u.GetAPIVersion() == "v1" && u.GetKind() == "Node"
}
