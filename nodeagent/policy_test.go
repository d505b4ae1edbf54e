package nodeagent

import (
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/crimux/crimux/kubeapi"
)

// TestPolicyAdmitsEveryResult: the admission policy shipped with the
// agent's RBAC lets its credentials change only the annotations in its
// "results" list (test/e2e TestClusterNodeAgentCredentialsAreNarrow shows it on
// an API server). The list must be exactly what the agent writes: a result
// missing there is refused on every pod, a request there could be set by
// a node.
func TestPolicyAdmitsEveryResult(t *testing.T) {
	want := []string{kubeapi.AnnotationObservedPowerState, kubeapi.AnnotationPowerStateError, kubeapi.AnnotationSnapshots}
	for _, k := range requestKinds {
		want = append(want, k.result)
	}
	want = append(want, kubeapi.MigrationAnnotations...)
	slices.Sort(want)

	got := policyVariable(t, "../systemd/crimux-node-agent-policy.yaml", "crimux-node-agent-pods", "results")
	var keys []string
	for _, m := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(got, -1) {
		keys = append(keys, m[1])
	}
	slices.Sort(keys)
	if !slices.Equal(keys, want) {
		t.Errorf("the policy's results are %q, the agent writes %q", keys, want)
	}
	for _, k := range requestAnnotations {
		if slices.Contains(keys, k) {
			t.Errorf("the policy's results hold the request %s: a node could set it", k)
		}
	}
	if !slices.Contains(requestAnnotations, kubeapi.AnnotationSnapshotDeleteRequest) {
		t.Errorf("requestAnnotations %q lack %s: a pod carrying it alone is never looked at", requestAnnotations, kubeapi.AnnotationSnapshotDeleteRequest)
	}
}

// policyVariable is the expression of the variable name of the
// ValidatingAdmissionPolicy policy in the manifest file.
func policyVariable(t *testing.T, file, policy, name string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	type manifest struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     struct {
			Variables []struct{ Name, Expression string }
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var m manifest
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if m.Kind != "ValidatingAdmissionPolicy" || m.Metadata.Name != policy {
			continue
		}
		for _, v := range m.Spec.Variables {
			if v.Name == name {
				return v.Expression
			}
		}
	}
	t.Fatalf("%s: no variable %s in policy %s", file, name, policy)
	return ""
}
