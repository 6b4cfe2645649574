package nodeagent

import (
	"context"
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Clients are what the agent talks to the API server with.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
}

// rank orders a cluster file's objects for creation: namespaces first, then
// other cluster-scoped objects (device classes before the slices that name
// them), nodes, namespaced objects, and pods last.
func rank(u *unstructured.Unstructured, namespaced bool) int {
	switch {
	case u.GetAPIVersion() == "v1" && u.GetKind() == "Namespace":
		return 0
	case IsNode(u):
		return 2
	case u.GetAPIVersion() == "v1" && u.GetKind() == "Pod":
		return 4
	case namespaced:
		return 3
	default:
		return 1
	}
}

// forEach runs fn on every item with at most workers at once and returns the
// first error.
func forEach[T any](items []T, workers int, fn func(T) error) error {
	if workers < 1 {
		workers = 1
	}
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	work := make(chan T)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				if err := fn(it); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
	return first
}

// Apply creates the objects of a cluster file: the namespaces they use, then
// each object in rank order; a Node is registered with its status, a pod
// bound in the file keeps the status it has there. Objects that exist are
// left as they are. It returns the names of the nodes; registered (when not
// nil) is told each one as soon as it is registered.
func Apply(ctx context.Context, c Clients, objs []Object, workers int, now metav1.Time, registered func(string)) ([]string, error) {
	type placed struct {
		Object
		mapping    *meta.RESTMapping
		namespaced bool
	}
	var all []placed
	namespaces := map[string]bool{}
	for _, o := range objs {
		gvk := o.Object.GroupVersionKind()
		m, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("%s: the API server does not serve %s: %w", o.Where, gvk, err)
		}
		namespaced := m.Scope.Name() == meta.RESTScopeNameNamespace
		if namespaced {
			if o.Object.GetNamespace() == "" {
				o.Object.SetNamespace(metav1.NamespaceDefault)
			}
			namespaces[o.Object.GetNamespace()] = true
		}
		all = append(all, placed{o, m, namespaced})
	}
	for ns := range namespaces {
		_, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		return rank(all[i].Object.Object, all[i].namespaced) < rank(all[j].Object.Object, all[j].namespaced)
	})
	var nodes []string
	for start := 0; start < len(all); {
		r := rank(all[start].Object.Object, all[start].namespaced)
		end := start
		for end < len(all) && rank(all[end].Object.Object, all[end].namespaced) == r {
			end++
		}
		err := forEach(all[start:end], workers, func(p placed) error {
			if IsNode(p.Object.Object) {
				if err := registerNode(ctx, c.Kube, p.Object, now); err != nil {
					return err
				}
				if registered != nil {
					registered(p.Object.Object.GetName())
				}
				return nil
			}
			return create(ctx, c.Dynamic, p.mapping, p.namespaced, p.Object)
		})
		if err != nil {
			return nil, err
		}
		for _, p := range all[start:end] {
			if IsNode(p.Object.Object) {
				nodes = append(nodes, p.Object.Object.GetName())
			}
		}
		start = end
	}
	return nodes, nil
}

// registerNode creates a Node and posts its status, as a kubelet registering does.
func registerNode(ctx context.Context, kube kubernetes.Interface, obj Object, now metav1.Time) error {
	node, err := NodeFromFile(obj, now)
	if err != nil {
		return err
	}
	status := node.Status
	current, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		current, err = kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("%s: registering the node: %w", obj.Where, err)
	}
	// Controllers annotate and taint a new node at once: on a conflict the
	// status is posted again on the node as it is now.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current.Status = status
		_, err := kube.CoreV1().Nodes().UpdateStatus(ctx, current, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if fresh, getErr := kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); getErr == nil {
				current = fresh
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: posting the node's status: %w", obj.Where, err)
	}
	return nil
}

// create creates one object, and then its status where the file gives one
// (a claim's allocation, a bound pod's phase).
func create(ctx context.Context, dyn dynamic.Interface, m *meta.RESTMapping, namespaced bool, obj Object) error {
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if namespaced {
		ri = dyn.Resource(m.Resource).Namespace(obj.Object.GetNamespace())
	}
	u := obj.Object.DeepCopy()
	for _, f := range []string{"resourceVersion", "uid", "selfLink", "generation", "managedFields", "creationTimestamp"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	status, hasStatus, _ := unstructured.NestedFieldCopy(u.Object, "status")
	created, err := ri.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", obj.Where, err)
	}
	if !hasStatus {
		return nil
	}
	if err := unstructured.SetNestedField(created.Object, status, "status"); err != nil {
		return fmt.Errorf("%s: status: %w", obj.Where, err)
	}
	if _, err := ri.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: setting its status: %w", obj.Where, err)
	}
	return nil
}
