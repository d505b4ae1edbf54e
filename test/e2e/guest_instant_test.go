package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/testutil"
)

// TestVMGuestInstant (make e2e-guest-instant): the Debian guest's
// template is made once (crimuxctl template warm), then two VM pods are
// restored from it, one by RuntimeClass vm-instant, one by the annotation
// crimux.io/start: template. Each answers crictl exec within 3 s of its
// StartContainer returning, and is a machine of its own: its pod's
// hostname and address, its own machine ID, SSH host keys and random
// numbers, the host's clock, its user-data run, and ssh with its pod's
// key through crictl port-forward. A pod with a virtio-fs share that asks
// for the template boots and says why; the template goes with its image.
func TestVMGuestInstant(t *testing.T) {
	c := startGuestCrimux(t, "e2e-guest-instant")
	ctl := ctlBin(t)
	began := time.Now()
	// Templates are per namespace: warmed for the namespace of the
	// clones' pods (instantPodJSON's).
	warm := ctlLong(t, c, ctl, 15*time.Minute, "template", "warm", debianImage, "--cpus", "2", "--memory", "1Gi",
		"--namespace", "crimux-e2e")
	if !strings.Contains(warm, ": ready") || !strings.Contains(warm, "namespace crimux-e2e") {
		t.Fatalf("crimuxctl template warm: %s", warm)
	}
	t.Logf("template made in %v: %s", time.Since(began).Round(time.Second), warm)
	t.Logf("crimuxctl template list:\n%s", c.ctlOK(t, ctl, "template", "list"))
	checkTemplateFiles(t, c)

	a := startClone(t, c, "instant-a", "--runtime", "vm-instant")
	b := startClone(t, c, "instant-b", "--runtime", "vm", "annotation")
	for _, v := range []*clone{a, b} {
		v.check(t, c)
	}
	for _, what := range []string{"machine_id", "host_key", "urandom"} {
		if a.facts[what] == b.facts[what] {
			t.Errorf("both clones have the same %s: %q", what, a.facts[what])
		}
	}
	sharedPodBootsCold(t, c)
	otherNamespaceBootsCold(t, c, a)

	// The template goes with its image.
	for _, v := range []*clone{a, b} {
		c.crictl("rmp", "-f", v.podID)
	}
	c.crictl("rmi", debianImage)
	testutil.Eventually(t, 2*time.Minute, "the template removed with its image", func() error {
		if out := c.ctlOK(t, ctl, "template", "list"); !strings.Contains(out, "No templates.") {
			return fmt.Errorf("%s", out)
		}
		return nil
	})
}

// criLogs is crictl logs of a container, both streams: crimux's own
// lines are on stderr, the console on stdout.
func criLogs(t *testing.T, c *crimux, id string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(bed.testbed, "bin", "crictl"), "--runtime-endpoint", c.endpoint,
		"logs", id).CombinedOutput()
	if err != nil {
		t.Fatalf("crictl logs %s: %v\n%s", id, err, out)
	}
	return string(out)
}

// ctlLong runs crimuxctl with a deadline of its own, failing the test
// unless it exits 0.
func ctlLong(t *testing.T, c *crimux, bin string, d time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--endpoint", c.endpoint, "--timeout", d.String()}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("crimuxctl %s: %v\n%s\ncrimux:\n%s", strings.Join(args, " "), err, out.String(), tail(c.logs.String(), 60))
	}
	return strings.TrimSpace(out.String())
}

// checkTemplateFiles: a made template's files are root's alone.
func checkTemplateFiles(t *testing.T, c *crimux) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(c.stateDir, "templates", "*"))
	if len(dirs) != 1 {
		t.Fatalf("templates: %v, want one", dirs)
	}
	for _, f := range []string{"", "state", "disk.qcow2", "cidata.iso", "template.json"} {
		fi, err := os.Stat(filepath.Join(dirs[0], f))
		if err != nil {
			t.Fatal(err)
		}
		if uid := statUID(fi); uid != 0 || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: uid %d mode %v, want root's alone", filepath.Join(dirs[0], f), uid, fi.Mode().Perm())
		}
	}
}

// statUID is a file's owner.
func statUID(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return 1<<32 - 1
}

// clone is one VM pod restored from the template.
type clone struct {
	name, podID, ctrID, key string
	facts                   map[string]string
}

// startClone runs a VM pod asking for the template (by its runtime
// handler, or by annotation when how says so), starts its VM, and checks
// that it answers crictl exec within 3 s of StartContainer returning.
func startClone(t *testing.T, c *crimux, name, runtimeFlag, handler string, how ...string) *clone {
	t.Helper()
	key, pub := sshKey(t)
	annotations := map[string]string{
		"crimux.io/cloud-init-user-data": "#cloud-config\nwrite_files:\n  - path: /etc/ssh-marker\n    content: " + guestMarker + "-" + name + "\n",
		"crimux.io/ssh-authorized-keys":  pub,
	}
	if len(how) > 0 {
		annotations["crimux.io/start"] = "template"
	}
	pod := instantPodJSON(t, name, annotations)
	v := &clone{name: name, key: key, facts: map[string]string{}}
	v.podID = c.crictl("runp", runtimeFlag, handler, pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", v.podID) })
	var err error
	if v.ctrID, err = c.crictlTimeout(5*time.Minute, "create", v.podID, instantContainerJSON(t, nil), pod); err != nil {
		t.Fatalf("crictl create %s: %v\n%s", name, err, v.ctrID)
	}
	began := time.Now()
	c.crictl("start", v.ctrID)
	started := time.Now()
	if out, err := c.crictlErr("exec", "--sync", "--timeout", "3", v.ctrID, "true"); err != nil || time.Since(started) > 3*time.Second {
		t.Fatalf("%s: crictl exec %v after StartContainer returned: %v %s\nlog:\n%s\ncrimux:\n%s", name, time.Since(started), err, out,
			tail(c.crictl("logs", v.ctrID), 20), tail(c.logs.String(), 40))
	}
	t.Logf("%s: StartContainer took %v; crictl exec answered %v after it returned", name,
		started.Sub(began).Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	if log := criLogs(t, c, v.ctrID); !strings.Contains(log, "restored from template") {
		t.Fatalf("%s: its log does not say it was restored from its template:\n%s", name, tail(log, 20))
	}
	return v
}

// check asks clone v who it is.
func (v *clone) check(t *testing.T, c *crimux) {
	t.Helper()
	run := func(args ...string) string { return c.crictl(append([]string{"exec", v.ctrID}, args...)...) }
	if got := run("hostname"); got != v.name {
		t.Errorf("%s: hostname %q, want its pod's", v.name, got)
	}
	ip := podIP(t, c, v.podID)
	if got := run("ip", "-4", "-o", "addr", "show", "scope", "global"); !strings.Contains(got, " "+ip+"/") {
		t.Errorf("%s: the guest's addresses %q lack its pod's IP %s", v.name, got, ip)
	}
	before := time.Now()
	guest, _ := strconv.ParseFloat(run("date", "+%s.%N"), 64)
	after := time.Now()
	host := float64(before.UnixNano()+after.UnixNano()) / 2e9
	if d := guest - host; d > 1+after.Sub(before).Seconds()/2 || d < -1-after.Sub(before).Seconds()/2 {
		t.Errorf("%s: the guest's clock is %.2f s off the host's", v.name, d)
	}
	v.facts["machine_id"] = run("cat", "/etc/machine-id")
	v.facts["boot_id"] = run("cat", "/proc/sys/kernel/random/boot_id")
	v.facts["stext"] = run("sh", "-c", "grep -m1 ' _stext$' /proc/kallsyms")
	v.facts["urandom"] = run("sh", "-c", "head -c32 /dev/urandom | od -An -tx1 | tr -d ' \\n'")
	t.Logf("%s: ip %s, machine-id %s, urandom %s", v.name, ip, v.facts["machine_id"], v.facts["urandom"])
	testutil.Eventually(t, 5*time.Minute, v.name+"'s user-data written", func() error {
		if got, err := c.crictlErr("exec", v.ctrID, "cat", "/etc/ssh-marker"); err != nil || got != guestMarker+"-"+v.name {
			return fmt.Errorf("/etc/ssh-marker: %q %v", got, err)
		}
		return nil
	})
	// A port-forward ends at its first refused connection (client-go's
	// forwarder), and the clone's sshd is down until its new host keys
	// are made: each try forwards anew.
	testutil.Eventually(t, 3*time.Minute, v.name+": ssh through crictl port-forward", func() error {
		local := portForward(t, c, v.podID, 22)
		out, err := exec.Command("ssh", "-i", v.key, "-p", strconv.Itoa(local), "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
			"-o", "LogLevel=ERROR", debianUser+"@127.0.0.1", "hostname").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != v.name {
			return fmt.Errorf("ssh: %v: %s", err, out)
		}
		return nil
	})
	v.facts["host_key"] = run("cat", "/etc/ssh/ssh_host_ed25519_key.pub")
}

// sharedPodBootsCold: a pod asking for the template with a virtio-fs
// share (qemu cannot save one) boots, and its log says why.
func sharedPodBootsCold(t *testing.T, c *crimux) {
	t.Helper()
	pod := instantPodJSON(t, "instant-shared", map[string]string{"crimux.io/start": "template"})
	podID := c.crictl("runp", "--runtime", "vm", pod)
	defer c.crictlErr("rmp", "-f", podID)
	ctrID, err := c.crictlTimeout(5*time.Minute, "create", podID, instantContainerJSON(t, []string{t.TempDir()}), pod)
	if err != nil {
		t.Fatalf("crictl create: %v\n%s", err, ctrID)
	}
	c.crictl("start", ctrID)
	if log := criLogs(t, c, ctrID); !strings.Contains(log, "boots instead of starting from its template") || !strings.Contains(log, "virtio-fs") {
		t.Fatalf("the shared pod's log does not say why it boots:\n%s", tail(log, 20))
	}
	if xml := virsh(t, "dumpxml", domainOf(ctrID)); !strings.Contains(xml, "<boot dev='hd'/>") {
		t.Fatalf("the shared pod's VM is not a booted one:\n%s", xml)
	}
}

// instantPodJSON is a VM pod of the template's shape, named and
// hostnamed name.
func instantPodJSON(t *testing.T, name string, annotations map[string]string) string {
	return instantPodJSONIn(t, "crimux-e2e", name, annotations)
}

// instantPodJSONIn is instantPodJSON in namespace ns.
func instantPodJSONIn(t *testing.T, ns, name string, annotations map[string]string) string {
	var ann []string
	for k, v := range annotations {
		ann = append(ann, fmt.Sprintf("%q: %q", k, v))
	}
	return writeJSON(t, name+"-pod.json", fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": %q, "uid": "%s-uid-%d", "attempt": 0},
  "hostname": %q,
  "dns_config": {"servers": ["10.96.0.10"], "searches": ["%s.svc.cluster.local"]},
  "log_directory": %q,
  "annotations": {%s},
  "linux": {"cgroup_parent": %q}
}`, name, ns, name, time.Now().UnixNano(), name, ns, t.TempDir(), strings.Join(ann, ", "), testCgroupParent(t)))
}

// instantContainerJSON: the template's shape (2 vCPUs, 1 GiB), with
// shares mounted read-only at /srv/shareN.
func instantContainerJSON(t *testing.T, shares []string) string {
	var mounts []string
	for i, s := range shares {
		mounts = append(mounts, fmt.Sprintf(`{"container_path": "/srv/share%d", "host_path": %q, "readonly": true}`, i, s))
	}
	return writeJSON(t, fmt.Sprintf("instant-ctr-%d.json", time.Now().UnixNano()), fmt.Sprintf(`{
  "metadata": {"name": "vm"},
  "image": {"image": %q},
  "log_path": "vm.log",
  "mounts": [%s],
  "linux": {"resources": {"cpu_period": 100000, "cpu_quota": 200000, "memory_limit_in_bytes": %d}}
}`, debianImage, strings.Join(mounts, ", "), guestMemory))
}

// otherNamespaceBootsCold: a pod of another namespace asking for the
// template is not restored from it (a template serves its own namespace:
// its clones share its kernel's boot-time secrets and layout), boots,
// and is another kernel: its boot_id and its kernel's addresses differ
// from the clones'.
func otherNamespaceBootsCold(t *testing.T, c *crimux, of *clone) {
	t.Helper()
	defer removeTemplatesOf(t, c, "crimux-e2e-b")
	pod := instantPodJSONIn(t, "crimux-e2e-b", "instant-other-ns", nil)
	podID := c.crictl("runp", "--runtime", "vm-instant", pod)
	defer c.crictlErr("rmp", "-f", podID)
	ctrID, err := c.crictlTimeout(5*time.Minute, "create", podID, instantContainerJSON(t, nil), pod)
	if err != nil {
		t.Fatalf("crictl create: %v\n%s", err, ctrID)
	}
	c.crictl("start", ctrID)
	if log := criLogs(t, c, ctrID); !strings.Contains(log, "boots instead of starting from its template") {
		t.Fatalf("the pod of namespace crimux-e2e-b was not told it boots:\n%s", tail(log, 20))
	}
	var bootID, stext string
	testutil.Eventually(t, 5*time.Minute, "the other namespace's VM answering exec", func() error {
		var err error
		if bootID, err = c.crictlErr("exec", ctrID, "cat", "/proc/sys/kernel/random/boot_id"); err != nil {
			return err
		}
		stext, err = c.crictlErr("exec", ctrID, "sh", "-c", "grep -m1 ' _stext$' /proc/kallsyms")
		return err
	})
	t.Logf("namespace crimux-e2e: boot_id %s, %s; namespace crimux-e2e-b: boot_id %s, %s", of.facts["boot_id"], of.facts["stext"], bootID, stext)
	if bootID == of.facts["boot_id"] {
		t.Errorf("the VMs of two namespaces share boot_id %s", bootID)
	}
	if stext == of.facts["stext"] {
		t.Errorf("the VMs of two namespaces share the kernel's layout: %s", stext)
	}
}

// removeTemplatesOf removes namespace ns's templates once none is being
// made (a pod asking for one it lacks starts its making).
func removeTemplatesOf(t *testing.T, c *crimux, ns string) {
	t.Helper()
	ctl := ctlBin(t)
	var keys []string
	testutil.Eventually(t, 10*time.Minute, "namespace "+ns+"'s template made", func() error {
		keys = nil
		out := c.ctlOK(t, ctl, "template", "list")
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 5 || f[1] != ns {
				continue
			}
			if strings.Contains(line, " making ") {
				return fmt.Errorf("still being made:\n%s", out)
			}
			keys = append(keys, f[0])
		}
		return nil
	})
	for _, k := range keys {
		c.ctlOK(t, ctl, "template", "rm", k)
	}
}
