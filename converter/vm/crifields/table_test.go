package crifields

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestEveryFieldDecided walks the CRI descriptors from the requests a VM
// pod receives: a field with no decision (a new CRI release's) fails it,
// and so does a decision for no field, or one of the wrong shape.
func TestEveryFieldDecided(t *testing.T) {
	for _, p := range Decisions().Problems() {
		t.Error(p)
	}
	if t.Failed() {
		t.Log("decide each field in converter/vm/crifields (honoured, mapped, ignored with why, or refused with why), then go test -update")
	}
}

// TestRemovedDecisionIsCaught: the walk reports every decision taken out
// of the table, one at a time, as a field with no decision.
func TestRemovedDecisionIsCaught(t *testing.T) {
	full := Decisions()
	names := slices.Sorted(maps.Keys(full))
	for i, name := range names {
		less := maps.Clone(full)
		delete(less, name)
		problems := less.Problems()
		want := string(name) + ": no decision"
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("without the decision on %s, the walk reports %q", name, problems)
		}
		if i == 0 {
			t.Logf("without %s: %q", name, problems)
		}
	}
}

// TestNewFieldIsCaught: a field the table has never seen (what a new CRI
// release brings) is reported, found through a message already decided.
func TestNewFieldIsCaught(t *testing.T) {
	less := Decisions()
	delete(less, "runtime.v1.ContainerConfig.stop_signal") // the newest field of ContainerConfig
	got := less.Problems()
	if len(got) != 1 || !strings.Contains(got[0], "runtime.v1.ContainerConfig.stop_signal: no decision (runtime.v1.Signal)") {
		t.Fatalf("problems %q, want stop_signal's alone", got)
	}
}

// TestShapeProblems: decisions that cannot mean what they say.
func TestShapeProblems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field protoreflect.FullName
		d     Decision
		words string
	}{
		{"nested scalar", "runtime.v1.ContainerConfig.working_dir", nested, "holds no message"},
		{"nested map", "runtime.v1.ContainerConfig.labels", nested, "holds no message"},
		{"no reason", "runtime.v1.ContainerConfig.tty", Decision{Kind: Ignored}, "without saying"},
		{"no kind", "runtime.v1.ContainerConfig.tty", Decision{How: "x"}, "no decision"},
		{"condition on an ignored field", "runtime.v1.NamespaceOption.ipc", Decision{Kind: Ignored, How: "x", When: &Condition{}}, "refuses nothing"},
		{"condition of another enum", "runtime.v1.NamespaceOption.ipc",
			refusedWhen(oneOf(runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL), "x"), "does not hold"},
		{"condition on a string", "runtime.v1.ContainerConfig.working_dir",
			refusedWhen(oneOf(runtimeapi.NamespaceMode_NODE), "x"), "does not hold"},
		{"misspelt", "runtime.v1.ContainerConfig.comand", refused("x"), "no VM pod request reaches"},
		{"below a whole decision", "runtime.v1.KeyValue.key", ignored("x"), "no VM pod request reaches"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := Decisions()
			tab[tc.field] = tc.d
			got := tab.Problems()
			if len(got) != 1 || !strings.HasPrefix(got[0], string(tc.field)+": ") || !strings.Contains(got[0], tc.words) {
				t.Fatalf("problems %q, want one on %s saying %q", got, tc.field, tc.words)
			}
		})
	}
}

// TestRefusalsNeverHitKubeletDefaults: no refused field is one kubelet
// fills on every pod (its defaults are accepted by TestRefuseAccepts;
// this keeps the list of refusals to what a user sets).
func TestRefusalsNeverHitKubeletDefaults(t *testing.T) {
	everyPod := []protoreflect.FullName{ // what kubelet sets on an ordinary pod
		"runtime.v1.ContainerConfig.envs", "runtime.v1.ContainerConfig.mounts", "runtime.v1.ContainerConfig.stdin",
		"runtime.v1.LinuxContainerSecurityContext.masked_paths", "runtime.v1.LinuxContainerSecurityContext.readonly_paths",
		"runtime.v1.LinuxContainerSecurityContext.seccomp", "runtime.v1.LinuxContainerSecurityContext.apparmor",
		"runtime.v1.LinuxContainerSecurityContext.no_new_privs", "runtime.v1.LinuxContainerSecurityContext.run_as_user",
		"runtime.v1.LinuxSandboxSecurityContext.seccomp", "runtime.v1.NamespaceOption.userns_options",
		"runtime.v1.LinuxContainerResources.oom_score_adj", "runtime.v1.LinuxContainerResources.hugepage_limits",
		"runtime.v1.LinuxContainerResources.unified", "runtime.v1.LinuxContainerResources.cpuset_cpus",
		"runtime.v1.DNSConfig.options", "runtime.v1.Mount.selinux_relabel", "runtime.v1.LinuxPodSandboxConfig.overhead",
		"runtime.v1.LinuxPodSandboxConfig.resources",
	}
	tab := Decisions()
	for _, name := range everyPod {
		if d := tab[name]; d.Kind == Refused {
			t.Errorf("%s is refused, but kubelet sets it on every pod", name)
		}
	}
}
