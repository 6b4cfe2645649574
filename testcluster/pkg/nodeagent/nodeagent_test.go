package nodeagent

import (
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		data      string
		wantNames []string
		wantErr   string
	}{
		{"multi-document yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", []string{"a", "p"}, ""},
		{"a List is its items", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: a}}\n- {apiVersion: v1, kind: Node, metadata: {name: b}}\n", []string{"a", "b"}, ""},
		{"json", `{"apiVersion": "v1", "kind": "NodeList", "items": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}}]}`, []string{"a"}, ""},
		{"empty documents are skipped", "---\n---\napiVersion: v1\nkind: Node\nmetadata: {name: a}\n", []string{"a"}, ""},
		{"no kind", "apiVersion: v1\nmetadata: {name: a}\n", nil, "document 1: every object needs apiVersion and kind"},
		{"no name", "apiVersion: v1\nkind: Node\n", nil, "document 1 (Node): every object needs metadata.name"},
		{"List without items", "apiVersion: v1\nkind: List\n", nil, `a List needs an "items" list`},
		{"item that is not an object", "apiVersion: v1\nkind: List\nitems: [3]\n", nil, "document 1, item 0: not an object"},
		{"not yaml", "a: [\n", nil, "document 1 is not valid YAML or JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Parse([]byte(tc.data), "f.yaml")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, o := range objs {
				names = append(names, o.Object.GetName())
			}
			if strings.Join(names, ",") != strings.Join(tc.wantNames, ",") {
				t.Errorf("names = %v, want %v", names, tc.wantNames)
			}
		})
	}
}

func parseNode(t *testing.T, yaml string) Object {
	t.Helper()
	objs, err := Parse([]byte("apiVersion: v1\nkind: Node\n"+yaml), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return objs[0]
}

func TestNodeFromFile(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tests := []struct {
		name    string
		yaml    string
		check   func(t *testing.T, n *corev1.Node)
		wantErr string
	}{
		{
			name: "allocatable defaults to capacity, Ready is added, quantities may be numbers",
			yaml: "metadata: {name: a, labels: {nvidia.com/gpu.product: A100}}\nspec: {taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}\nstatus: {capacity: {cpu: 8, memory: 32Gi, pods: 110, nvidia.com/gpu: 4}}\n",
			check: func(t *testing.T, n *corev1.Node) {
				if got := n.Status.Allocatable["nvidia.com/gpu"]; got.Cmp(resource.MustParse("4")) != 0 {
					t.Errorf("allocatable GPUs = %s, want 4", got.String())
				}
				if n.Labels["nvidia.com/gpu.product"] != "A100" || len(n.Spec.Taints) != 1 {
					t.Errorf("labels or taints lost: %v %v", n.Labels, n.Spec.Taints)
				}
				if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Type != corev1.NodeReady || n.Status.Conditions[0].Status != corev1.ConditionTrue {
					t.Errorf("conditions = %v, want Ready=True", n.Status.Conditions)
				}
				if n.Status.Addresses[0] != (corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}) {
					t.Errorf("addresses = %v", n.Status.Addresses)
				}
				if n.Status.NodeInfo.KubeletVersion != KubeletVersion {
					t.Errorf("kubelet version = %q", n.Status.NodeInfo.KubeletVersion)
				}
			},
		},
		{
			name: "a NotReady node stays NotReady",
			yaml: "metadata: {name: a}\nstatus: {allocatable: {pods: '10'}, conditions: [{type: Ready, status: 'False'}]}\n",
			check: func(t *testing.T, n *corev1.Node) {
				if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Status != corev1.ConditionFalse {
					t.Errorf("conditions = %v, want only Ready=False", n.Status.Conditions)
				}
				if !n.Status.Conditions[0].LastHeartbeatTime.Equal(&now) {
					t.Errorf("heartbeat not stamped")
				}
			},
		},
		{
			name: "images are kept",
			yaml: "metadata: {name: a}\nstatus: {allocatable: {pods: '10'}, images: [{names: [jupyter/base:1], sizeBytes: 100}]}\n",
			check: func(t *testing.T, n *corev1.Node) {
				if len(n.Status.Images) != 1 || n.Status.Images[0].Names[0] != "jupyter/base:1" {
					t.Errorf("images = %v", n.Status.Images)
				}
			},
		},
		{"no pods", "metadata: {name: a}\nstatus: {allocatable: {cpu: '8'}}\n", nil, "status.allocatable.pods is missing"},
		{"bad taint effect", "metadata: {name: a}\nspec: {taints: [{key: k, effect: Never}]}\nstatus: {allocatable: {pods: '1'}}\n", nil, `spec.taints[0].effect "Never"`},
		{"bad quantity", "metadata: {name: a}\nstatus: {allocatable: {pods: lots}}\n", nil, "f.yaml: document 1 (Node a)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := NodeFromFile(parseNode(t, tc.yaml), now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("NodeFromFile() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, n)
		})
	}
}

func TestPodIPsAreStableDistinctAndSkipNetworkAndBroadcastAddresses(t *testing.T) {
	ips := NewPodIPs()
	seen := map[string]bool{}
	var first net.IP
	for i := 0; i < 600; i++ {
		ip, err := ips.For(string(rune('a'+i%26)) + strings.Repeat("x", i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ip
		}
		if seen[ip.String()] {
			t.Fatalf("%s handed out twice", ip)
		}
		seen[ip.String()] = true
		if last := ip.To4()[3]; last == 0 || last == 255 {
			t.Fatalf("handed out %s", ip)
		}
		if !ip.IsLoopback() {
			t.Fatalf("%s is not on loopback", ip)
		}
	}
	again, _ := ips.For("a")
	if !again.Equal(first) {
		t.Errorf("the same pod got %s, then %s", first, again)
	}
}

func TestRunningStatus(t *testing.T) {
	now := metav1.Now()
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "jupyter/base"}}}}
	s := RunningStatus(pod, net.ParseIP("127.1.0.1"), now)
	if s.Phase != corev1.PodRunning || s.PodIP != "127.1.0.1" || s.HostIP != NodeIP {
		t.Errorf("status = %+v", s)
	}
	if len(s.ContainerStatuses) != 1 || s.ContainerStatuses[0].State.Running == nil || !s.ContainerStatuses[0].Ready {
		t.Errorf("container statuses = %+v", s.ContainerStatuses)
	}
	ready := false
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		t.Errorf("no Ready=True condition: %v", s.Conditions)
	}
}
