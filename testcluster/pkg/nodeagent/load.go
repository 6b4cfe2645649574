// Package nodeagent stands in for what a real node gets from outside the
// control plane (its kubelet, device plugins, GPU Feature Discovery, the DRA
// driver): it registers a cluster file's Nodes, keeps their leases fresh,
// publishes their objects and admits the pods bound to them as their kubelet
// does, reporting them running or rejected.
package nodeagent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Object is one object of a cluster file and where it was found.
type Object struct {
	Where  string
	Object *unstructured.Unstructured
}

// ReadFile reads a cluster file: multi-document YAML, or JSON, where a
// kind: List (what kubectl get -o yaml prints) counts as its items.
func ReadFile(path string) ([]Object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster file: %w", err)
	}
	return Parse(data, path)
}

// Parse reads the objects of data (named source in errors).
func Parse(data []byte, source string) ([]Object, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bufio.NewReader(bytes.NewReader(data)), 4096)
	var out []Object
	for doc := 1; ; doc++ {
		var raw map[string]interface{}
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: document %d is not valid YAML or JSON: %w", source, doc, err)
		}
		if raw == nil {
			continue
		}
		where := fmt.Sprintf("%s: document %d", source, doc)
		kind, _ := raw["kind"].(string)
		if kind == "List" || strings.HasSuffix(kind, "List") {
			items, ok := raw["items"].([]interface{})
			if !ok {
				return nil, fmt.Errorf("%s: a %s needs an \"items\" list", where, kind)
			}
			for i, item := range items {
				m, ok := item.(map[string]interface{})
				if !ok {
					return nil, fmt.Errorf("%s, item %d: not an object", where, i)
				}
				obj, err := checked(fmt.Sprintf("%s, item %d", where, i), m)
				if err != nil {
					return nil, err
				}
				out = append(out, obj)
			}
			continue
		}
		obj, err := checked(where, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
}

func checked(where string, m map[string]interface{}) (Object, error) {
	u := &unstructured.Unstructured{Object: m}
	if u.GetAPIVersion() == "" || u.GetKind() == "" {
		return Object{}, fmt.Errorf("%s: every object needs apiVersion and kind", where)
	}
	if u.GetName() == "" {
		return Object{}, fmt.Errorf("%s (%s): every object needs metadata.name", where, u.GetKind())
	}
	return Object{Where: fmt.Sprintf("%s (%s %s)", where, u.GetKind(), u.GetName()), Object: u}, nil
}
