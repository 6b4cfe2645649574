package nodeagent

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// eventRecorders record events as each node's kubelet does: from the
// "kubelet" component on that host.
type eventRecorders struct {
	broadcaster record.EventBroadcaster

	mu     sync.Mutex
	byNode map[string]record.EventRecorder
}

func newEventRecorders(kube kubernetes.Interface) *eventRecorders {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return &eventRecorders{broadcaster: b, byNode: map[string]record.EventRecorder{}}
}

func (e *eventRecorders) forNode(node string) record.EventRecorder {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.byNode[node]
	if !ok {
		r = e.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: node})
		e.byNode[node] = r
	}
	return r
}

func (e *eventRecorders) shutdown() { e.broadcaster.Shutdown() }
