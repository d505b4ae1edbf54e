package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/version"
)

func TestRunCommandLine(t *testing.T) {
	noClient := func(options) (clients, string, error) { return clients{}, "", errors.New("no cluster here") }
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"version"}, 0, "kubectl-crimux " + version.Version + "\n", ""},
		{[]string{"--version"}, 0, "kubectl-crimux " + version.Version + "\n", ""},
		{[]string{"--help"}, 0, "kubectl crimux migrate POD [--to NODE]", ""},
		{[]string{"--help"}, 0, "kubectl crimux migrate POD --cancel", ""},
		{[]string{"help"}, 0, "Usage:", ""},
		{nil, 1, "", "Usage:"},
		{[]string{"frobnicate"}, 1, "", `kubectl-crimux: unknown command "frobnicate"`},
		{[]string{"migrate", "vm1"}, 1, "", "kubectl-crimux: no cluster here\n"}, // --to is optional
		{[]string{"migrate", "vm1", "--cancel", "--to", "n2"}, 1, "", "kubectl-crimux: migrate --cancel takes no --to"},
		{[]string{"migrate", "--cancel"}, 1, "", "migrate takes one pod, got 0 arguments"},
		{[]string{"migrate", "--to", "n2"}, 1, "", "migrate takes one pod, got 0 arguments"},
		{[]string{"migrate", "vm1", "vm2", "--to", "n2"}, 1, "", "migrate takes one pod, got 2 arguments"},
		{[]string{"migrate", "vm1", "--to", "n2", "--timeout", "0s"}, 2, "", `kubectl-crimux: --timeout "0s": want a positive duration`},
		{[]string{"stop", "vm1", "--timeout", "soon"}, 2, "", `kubectl-crimux: --timeout "soon": want a positive duration`},
		{[]string{"--timeout=-1m", "snapshot", "list", "vm1"}, 2, "", `kubectl-crimux: --timeout "-1m": want a positive duration`},
		{[]string{"--help"}, 0, "--timeout is how long a command waits at most before it gives up", ""},
		{[]string{"migrate", "vm1", "--bogus"}, 1, "", "kubectl-crimux: flag provided but not defined: -bogus"},
		{[]string{"migrate", "vm1", "--to", "n2"}, 1, "", "kubectl-crimux: no cluster here\n"},
	} {
		out, errOut := &syncBuffer{}, &syncBuffer{}
		code := run(context.Background(), tc.args, out, errOut, noClient)
		if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errOut.String(), tc.stderr) ||
			tc.stdout == "" && out.String() != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
		}
	}
}

func TestParseArgs(t *testing.T) {
	o, pos, err := parseArgs([]string{"-n", "ns1", "migrate", "vm1", "--to=n2", "--kubeconfig", "/k", "--", "-odd"})
	if err != nil {
		t.Fatal(err)
	}
	if o.namespace != "ns1" || o.to != "n2" || o.kubeconfig != "/k" || o.timeout != 15*time.Minute || o.timeoutSet || o.cancel {
		t.Errorf("options %+v", o)
	}
	if o, pos, err := parseArgs([]string{"migrate", "--cancel", "vm1"}); err != nil || !o.cancel || strings.Join(pos, " ") != "migrate vm1" {
		t.Errorf("--cancel: %+v %q, %v", o, pos, err)
	}
	if o, _, err := parseArgs([]string{"reboot", "vm1", "--timeout", "90s"}); err != nil || o.timeout != 90*time.Second || !o.timeoutSet {
		t.Errorf("--timeout 90s: %+v, %v", o, err)
	}
	if strings.Join(pos, " ") != "migrate vm1 -odd" {
		t.Errorf("arguments %q", pos)
	}
	if o, _, _ := parseArgs([]string{"--namespace", "ns2"}); o.namespace != "ns2" {
		t.Errorf("--namespace: %+v", o)
	}
}

// newClient honours --kubeconfig, --context and -n as kubectl does.
func TestNewClientKubeconfig(t *testing.T) {
	path := t.TempDir() + "/config"
	config := `apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u1
  user: {token: "t"}
contexts:
- name: one
  context: {cluster: c1, user: u1, namespace: ns-one}
- name: two
  context: {cluster: c1, user: u1, namespace: ns-two}
current-context: one
`
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", "/nonexistent")
	for _, tc := range []struct {
		o    options
		want string
	}{
		{options{kubeconfig: path}, "ns-one"},
		{options{kubeconfig: path, context: "two"}, "ns-two"},
		{options{kubeconfig: path, context: "two", namespace: "mine"}, "mine"},
	} {
		c, ns, err := newClient(tc.o)
		if err != nil || c.kube == nil || c.dyn == nil || ns != tc.want {
			t.Errorf("%+v: namespace %q, %v; want %q", tc.o, ns, err, tc.want)
		}
	}
	t.Setenv("KUBECONFIG", path)
	if _, ns, err := newClient(options{context: "two"}); err != nil || ns != "ns-two" {
		t.Errorf("KUBECONFIG: namespace %q, %v", ns, err)
	}
	if _, _, err := newClient(options{kubeconfig: path, context: "three"}); err == nil {
		t.Error("an unknown context is no error")
	}
}
