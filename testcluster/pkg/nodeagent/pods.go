package nodeagent

import (
	"context"
	"fmt"
	"net"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// PodIPs hands out pod IPs from 127.0.0.0/8 past 127.0.0.1: every one is on
// this machine's loopback, where the pods' processes will listen.
type PodIPs struct {
	mu   sync.Mutex
	next uint32
	used map[string]net.IP
}

// NewPodIPs starts handing out at 127.1.0.1.
func NewPodIPs() *PodIPs {
	return &PodIPs{next: 127<<24 | 1<<16 | 1, used: map[string]net.IP{}}
}

// For returns the IP of the pod with this UID, the same one every time.
func (p *PodIPs) For(uid string) (net.IP, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ip, ok := p.used[uid]; ok {
		return ip, nil
	}
	for byte(p.next) == 0 || byte(p.next) == 255 { // no .0 or .255 addresses
		p.next++
	}
	if p.next >= 128<<24 {
		return nil, fmt.Errorf("no pod IPs left in 127.0.0.0/8")
	}
	ip := net.IPv4(byte(p.next>>24), byte(p.next>>16), byte(p.next>>8), byte(p.next))
	p.next++
	p.used[uid] = ip
	return ip, nil
}

// RunningStatus is the status a kubelet reports for a pod whose containers
// all started at now: Running, its IP, every condition true.
func RunningStatus(pod *corev1.Pod, ip net.IP, now metav1.Time) corev1.PodStatus {
	status := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    NodeIP,
		HostIPs:   []corev1.HostIP{{IP: NodeIP}},
		PodIP:     ip.String(),
		PodIPs:    []corev1.PodIP{{IP: ip.String()}},
		StartTime: &now,
		QOSClass:  pod.Status.QOSClass,
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodScheduled, corev1.ContainersReady, corev1.PodReady} {
		status.Conditions = append(status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{
			Name:    c.Name,
			Image:   c.Image,
			ImageID: c.Image,
			Ready:   true,
			Started: ptr.To(true),
			State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return status
}

// RunPods runs the kubelet's part for the pods bound to one of nodes, until
// ctx ends: it admits each pending pod as the kubelet does (see Admitter) and
// reports it running, or rejected when it does not fit; it completes the
// deletion of a pod being deleted (its processes are gone at once). workers
// status updates go to the API server at once (a cluster file of 150,000 pods
// is reported in minutes, not an hour).
func RunPods(ctx context.Context, kube kubernetes.Interface, nodes []string, ips *PodIPs, workers int) error {
	ours := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		ours[n] = true
	}
	// keys, not pods: each pod is synced by one worker at a time, from its newest version
	queue := workqueue.NewTyped[cache.ObjectName]()
	factory := informers.NewSharedInformerFactory(kube, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	admitter := NewAdmitter(factory.Core().V1().Nodes().Lister())
	events := newEventRecorders(kube)
	defer events.shutdown()
	handle := func(obj interface{}) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !ours[pod.Spec.NodeName] {
			return
		}
		switch {
		case pod.DeletionTimestamp != nil:
			admitter.Forget(pod)
			queue.Add(cache.MetaObjectToName(pod))
		case pod.Status.Phase == corev1.PodPending:
			queue.Add(cache.MetaObjectToName(pod))
		case pod.Status.Phase == corev1.PodRunning:
			admitter.Running(pod)
		default: // Succeeded or Failed: it holds nothing on its node
			admitter.Forget(pod)
		}
	}
	registration, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj interface{}) { handle(obj) },
		DeleteFunc: func(obj interface{}) {
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok && ours[pod.Spec.NodeName] {
				admitter.Forget(pod)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	factory.Start(ctx.Done())
	// Every pod already running is counted before the first one is admitted.
	factory.WaitForCacheSync(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), registration.HasSynced)
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, shutdown := queue.Get()
				if shutdown {
					return
				}
				obj, exists, err := podInformer.GetIndexer().GetByKey(key.String())
				if pod, ok := obj.(*corev1.Pod); err == nil && exists && ok {
					if err := syncPod(ctx, kube, admitter, events, pod, ips); err != nil && ctx.Err() == nil {
						klog.ErrorS(err, "pod not synced", "pod", klog.KObj(pod), "node", pod.Spec.NodeName)
					}
				}
				queue.Done(key)
			}
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
	factory.Shutdown()
	wg.Wait()
	return nil
}

// syncPod completes a pod's deletion, or admits a pending pod and reports it
// running, or rejected.
func syncPod(ctx context.Context, kube kubernetes.Interface, admitter *Admitter, events *eventRecorders, pod *corev1.Pod, ips *PodIPs) error {
	if pod.DeletionTimestamp != nil {
		return finishDeletion(ctx, kube, pod)
	}
	if pod.Status.Phase != corev1.PodPending {
		return nil // reported already
	}
	result := admitter.Admit(ctx, pod)
	if !result.Admit {
		events.forNode(pod.Spec.NodeName).Eventf(pod, corev1.EventTypeWarning, result.Reason, "%s", result.Message)
		return updateStatus(ctx, kube, pod, RejectedStatus(pod, result))
	}
	ip, err := ips.For(string(pod.UID))
	if err != nil {
		return err
	}
	return updateStatus(ctx, kube, pod, RunningStatus(pod, ip, metav1.Now()))
}

func updateStatus(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, status corev1.PodStatus) error {
	updated := pod.DeepCopy()
	updated.Status = status
	_, err := kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // a newer version (or none) comes through the watch
	}
	if err != nil {
		return fmt.Errorf("posting the status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// finishDeletion removes a pod being deleted, as its kubelet does once the
// pod's containers have stopped: here they stop at once.
func finishDeletion(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) error {
	err := kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
