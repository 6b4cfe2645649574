package pinned

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	visibility "sigs.k8s.io/kueue/apis/visibility/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/constants"
)

// repo is the repository's root, from this package's directory (testcluster/kueue/pinned).
const repo = "../../.."

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, path))
	if err != nil {
		t.Fatalf("%v", err)
	}
	return string(b)
}

// pythonString is the string literal assigned to name in a Python module (NAME = "value").
func pythonString(t *testing.T, path, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` = "([^"]*)"`).FindStringSubmatch(read(t, path))
	if m == nil {
		t.Fatalf("%s: no %s = \"...\" line", path, name)
	}
	return m[1]
}

// kueueVersion is the version of sigs.k8s.io/kueue that ../go.mod requires (the one compiled in).
func kueueVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*sigs\.k8s\.io/kueue (v[0-9.]+)\b`).FindStringSubmatch(read(t, "testcluster/kueue/go.mod"))
	if m == nil {
		t.Fatal("testcluster/kueue/go.mod requires no sigs.k8s.io/kueue")
	}
	return m[1]
}

func TestTheDocsNameThePinnedVersion(t *testing.T) {
	v := kueueVersion(t) // v0.17.0
	minor := v[:strings.LastIndex(v, ".")]
	for path, want := range map[string]string{
		"docs/kueue.md":                     "`sigs.k8s.io/kueue` " + v,
		"README.md":                         "Kueue (" + minor + ",",
		"tests/testcluster/test_kueue.py":   "Kueue (" + v + ",",
		"gpuspawner/doctor/checks/kueue.py": "Install Kueue " + minor + " ",
	} {
		if !strings.Contains(read(t, path), want) {
			t.Errorf("%s does not say %q: the pinned module is sigs.k8s.io/kueue %s", path, want, v)
		}
	}
}

func TestThePythonSideWritesKueuesOwnNames(t *testing.T) {
	for _, c := range []struct{ path, name, want string }{
		{"gpuspawner/queue/rules.py", "QUEUE_LABEL", constants.QueueLabel},
		{"gpuspawner/queue/rules.py", "PRIORITY_LABEL", constants.WorkloadPriorityClassLabel},
		{"gpuspawner/queue/rules.py", "JOB_UID_LABEL", constants.JobUIDLabel},
		{"gpuspawner/queue/kube.py", "VISIBILITY", visibility.GroupVersion.String()},
	} {
		if got := pythonString(t, c.path, c.name); got != c.want {
			t.Errorf("%s: %s = %q, Kueue %s says %q", c.path, c.name, got, kueueVersion(t), c.want)
		}
	}
	m := regexp.MustCompile(`(?m)^GROUP, VERSION = "([^"]*)", "([^"]*)"`).FindStringSubmatch(
		read(t, "gpuspawner/queue/kube.py"))
	if m == nil || m[1]+"/"+m[2] != kueue.GroupVersion.String() {
		t.Errorf("gpuspawner/queue/kube.py: GROUP, VERSION = %q, Kueue %s serves %s", m, kueueVersion(t),
			kueue.GroupVersion.String())
	}
}
