package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// readyPoll is how often readiness is checked while the control plane starts.
const readyPoll = 100 * time.Millisecond

// readinessCheck says what is not ready yet, or "" when the check passes.
type readinessCheck struct {
	name  string
	check func(ctx context.Context, c kubernetes.Interface) (string, error)
}

// failingChecks names the checks a verbose /readyz answer marks failed
// ("[-]etcd failed: ..." lines), or gives the answer itself when it has none.
func failingChecks(body string) string {
	var failed []string
	for _, line := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "[-]"); ok {
			failed = append(failed, strings.TrimSuffix(strings.Fields(name)[0], ":"))
		}
	}
	if len(failed) == 0 {
		return strings.TrimSpace(body)
	}
	return strings.Join(failed, ", ") + " not ready"
}

func notFoundAsPending(what string, err error) (string, error) {
	if err == nil {
		return "", nil
	}
	if apierrors.IsNotFound(err) {
		return what + " does not exist yet", nil
	}
	return what + ": " + err.Error(), nil
}

// readinessChecks are what "ready" means: every /readyz check passes and the
// default namespace has what a workload there expects (its service account
// and the root CA config map that kube-controller-manager publishes).
var readinessChecks = []readinessCheck{
	{"readyz", func(ctx context.Context, c kubernetes.Interface) (string, error) {
		var status int
		res := c.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		if status == http.StatusOK {
			return "", nil
		}
		body, _ := res.Raw()
		return fmt.Sprintf("/readyz (%d): %s", status, failingChecks(string(body))), nil
	}},
	{"namespace", func(ctx context.Context, c kubernetes.Interface) (string, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		return notFoundAsPending("namespace default", err)
	}},
	{"serviceaccount", func(ctx context.Context, c kubernetes.Interface) (string, error) {
		_, err := c.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return notFoundAsPending("service account default/default", err)
	}},
	{"root-ca", func(ctx context.Context, c kubernetes.Interface) (string, error) {
		_, err := c.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return notFoundAsPending("config map default/kube-root-ca.crt", err)
	}},
}

// pending runs the checks in order and says what the first failing one waits for.
func pending(ctx context.Context, c kubernetes.Interface) string {
	for _, rc := range readinessChecks {
		reason, err := rc.check(ctx, c)
		if err != nil {
			return rc.name + ": " + err.Error()
		}
		if reason != "" {
			return reason
		}
	}
	return ""
}

// waitReady polls until every readiness check passes, a component fails
// (failed), or left passes (checking at least once); the error then says
// what was still missing after the whole timeout.
func waitReady(ctx context.Context, c kubernetes.Interface, left, timeout time.Duration, failed <-chan error) error {
	deadline := time.NewTimer(max(left, 0))
	defer deadline.Stop()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	last := "nothing checked yet"
	for {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = pending(callCtx, c)
		cancel()
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped before ready (waiting for %s): %w", last, ctx.Err())
		case err := <-failed:
			return fmt.Errorf("a component failed before ready (waiting for %s): %w", last, err)
		case <-deadline.C:
			return fmt.Errorf("not ready within %s: still waiting for %s", timeout, last)
		case <-tick.C:
		}
	}
}
