package libvirt

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"github.com/crimux/crimux/vmtypes"
	"strings"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
)

// fakeDomain is a domain of fakeLibvirt: its <metadata> content as
// libvirt would format it, and its state.
type fakeDomain struct {
	metaXML string
	state   golibvirt.DomainState
	// flags of the last DomainSetMetadata.
	setFlags golibvirt.DomainModificationImpact
}

// fakeLibvirt is the part of libvirtd gc_foreign.go uses, in memory.
type fakeLibvirt struct {
	doms     map[string]*fakeDomain
	metaSets int
}

func (f *fakeLibvirt) ConnectListAllDomains(int32, golibvirt.ConnectListAllDomainsFlags) ([]golibvirt.Domain, uint32, error) {
	var out []golibvirt.Domain
	for n := range f.doms {
		out = append(out, golibvirt.Domain{Name: n})
	}
	return out, uint32(len(out)), nil
}

func (f *fakeLibvirt) DomainLookupByName(n string) (golibvirt.Domain, error) {
	if f.doms[n] == nil {
		return golibvirt.Domain{}, golibvirt.Error{Code: uint32(golibvirt.ErrNoDomain), Message: "Domain not found: '" + n + "'"}
	}
	return golibvirt.Domain{Name: n}, nil
}

func (f *fakeLibvirt) DomainGetXMLDesc(d golibvirt.Domain, _ golibvirt.DomainXMLFlags) (string, error) {
	md := ""
	if x := f.doms[d.Name].metaXML; x != "" {
		md = "<metadata>" + x + "</metadata>"
	}
	return fmt.Sprintf("<domain type='qemu'><name>%s</name>%s</domain>", d.Name, md), nil
}

func (f *fakeLibvirt) DomainGetState(d golibvirt.Domain, _ uint32) (int32, int32, error) {
	return int32(f.doms[d.Name].state), 0, nil
}

func (f *fakeLibvirt) DomainIsActive(d golibvirt.Domain) (int32, error) {
	if f.doms[d.Name].state == golibvirt.DomainShutoff {
		return 0, nil
	}
	return 1, nil
}

func (f *fakeLibvirt) DomainIsPersistent(golibvirt.Domain) (int32, error) { return 1, nil }

// DomainSetMetadata replaces the element as libvirt does: it puts the
// given XML (no namespace of its own) into uri under the prefix key.
func (f *fakeLibvirt) DomainSetMetadata(d golibvirt.Domain, typ int32, md, key, uri golibvirt.OptString, flags golibvirt.DomainModificationImpact) error {
	if typ != int32(golibvirt.DomainMetadataElement) || len(md) != 1 || key[0] != "crimux" || uri[0] != metadataNS {
		return fmt.Errorf("DomainSetMetadata(%d, %q, %q, %q)", typ, md, key, uri)
	}
	if strings.Contains(md[0], "xmlns") {
		return fmt.Errorf("metadata %q declares a namespace of its own", md[0])
	}
	x := strings.Replace(md[0], "<crimux>", `<crimux:crimux xmlns:crimux="`+uri[0]+`">`, 1)
	f.doms[d.Name].metaXML = strings.Replace(x, "</crimux>", "</crimux:crimux>", 1)
	f.doms[d.Name].setFlags = flags
	f.metaSets++
	return nil
}

// stamp is crimux's metadata as it defines a domain.
func stamp(t *testing.T, instance, sandboxID, containerID string) string {
	t.Helper()
	b, err := xml.Marshal(vm.Metadata{Instance: instance, PodName: "web", PodNamespace: "ns", SandboxID: sandboxID, ContainerID: containerID})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// foreignRuntime is a runtime of instance "i" with a pod network, a
// VM of its own ("mine", whose domain carries a foreign stamp: the record
// wins), and libvirt holding: crimux-mine; crimux-own (stamped "i", no
// record: the collector's); crimux-a (another instance's, running);
// crimux-b (no stamp, shut off); crimux-c (stamp naming another
// container); vanilla (not crimux's).
func foreignRuntime(t *testing.T) (*Runtime, *fakeLibvirt, *fakeNet) {
	t.Helper()
	r, n := netRuntime(t)
	r.opts.Instance = "i"
	putVM(t, r, 0, "")
	if err := r.store.putContainer(&containerRecord{ID: "mine", SandboxID: "sb1", Removing: true,
		Config: &runtimeapi.ContainerConfig{}}); err != nil {
		t.Fatal(err)
	}
	l := &fakeLibvirt{doms: map[string]*fakeDomain{
		"crimux-mine": {metaXML: stamp(t, "other", "sbM", "mine"), state: golibvirt.DomainRunning},
		"crimux-own":  {metaXML: stamp(t, "i", "sbO", "own"), state: golibvirt.DomainRunning},
		"crimux-a":    {metaXML: stamp(t, "other", "sbA", "a"), state: golibvirt.DomainRunning},
		"crimux-b":    {state: golibvirt.DomainShutoff},
		"crimux-c":    {metaXML: stamp(t, "other", "sbC", "elsewhere"), state: golibvirt.DomainShutoff},
		"vanilla":     {state: golibvirt.DomainRunning},
	}}
	n.own = map[string]string{"dup": "/run/test/netns/i_dup"}
	n.foreign = []string{"other_sbA", "other_orphan", "other_dup", "other_sb1", "cni-1234"}
	return r, l, n
}

func TestListForeign(t *testing.T) {
	r, l, _ := foreignRuntime(t)
	got, err := r.listForeign(l)
	if err != nil {
		t.Fatal(err)
	}
	want := []vmtypes.ForeignResource{
		{Kind: vmtypes.ForeignDomain, Name: "crimux-a", Instance: "other", State: "running", Detail: "pod ns/web, sandbox sbA"},
		{Kind: vmtypes.ForeignDomain, Name: "crimux-b", Instance: "", State: "shutoff", Detail: "no crimux metadata"},
		{Kind: vmtypes.ForeignDomain, Name: "crimux-c", Instance: "other", State: "shutoff", Detail: "pod ns/web, sandbox sbC"},
		{Kind: vmtypes.ForeignNetns, Name: "other_sbA", Instance: "other", State: "", Detail: "sandbox sbA, the network of domain crimux-a"},
		{Kind: vmtypes.ForeignNetns, Name: "other_orphan", Instance: "other", State: "", Detail: "sandbox orphan"},
		{Kind: vmtypes.ForeignNetns, Name: "other_dup", Instance: "other", State: "", Detail: "sandbox dup"},
		{Kind: vmtypes.ForeignNetns, Name: "other_sb1", Instance: "other", State: "", Detail: "sandbox sb1"},
		{Kind: vmtypes.ForeignNetns, Name: "cni-1234", Instance: "", State: "", Detail: `namespace "cni-1234" is not named <instance>_<sandbox ID>: its pod is unknown`},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("listForeign:\n%v\nwant\n%v", got, want)
	}
	if _, err := r.ListForeign(context.Background()); !errdefs.IsUnavailable(err) {
		t.Fatalf("ListForeign without libvirtd: %v, want Unavailable", err)
	}
}

// TestAdoptForeignDomain: the stamp is rewritten to this instance (live
// and persistent for a running domain) and parses back; nothing else of
// the domain changes. Once the collector has taken the VM in (adopt), its
// pod's namespace is adopted and given to the pod.
func TestAdoptForeignDomain(t *testing.T) {
	r, l, n := foreignRuntime(t)
	m, err := r.adoptForeignDomain(l, "crimux-a")
	if err != nil {
		t.Fatal(err)
	}
	got, stamped, err := readMetadata(l, golibvirt.Domain{Name: "crimux-a"})
	want := vm.Metadata{XMLName: got.XMLName, Instance: "i", PodName: "web", PodNamespace: "ns", SandboxID: "sbA", ContainerID: "a"}
	if err != nil || !stamped || got != want {
		t.Fatalf("metadata after adoption: %+v, %v, %v; want %+v", got, stamped, err, want)
	}
	if f := l.doms["crimux-a"].setFlags; f != golibvirt.DomainAffectConfig|golibvirt.DomainAffectLive {
		t.Fatalf("metadata set with flags %d, want config and live", f)
	}
	if _, err := r.adoptForeignDomain(l, "crimux-a"); errdefs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("adopting it again: %v, want FailedPrecondition (it is ours now)", err)
	}

	m2 := m
	m2.Instance = "i"
	if err := r.adopt("crimux-a", m2); err != nil { // what the collector does with it
		t.Fatal(err)
	}
	r.adoptPodNamespace(l, m)
	sb, err := r.store.sandbox("sbA")
	if len(n.adoptedNS) != 1 || n.adoptedNS[0] != "other_sbA" || err != nil || sb.Net == nil || sb.Net.NetNS != "/run/test/netns/i_sbA" {
		t.Fatalf("pod namespace: adopted %v, record %+v (%v)", n.adoptedNS, sb, err)
	}

	// A stopped one: its namespace waits until the collector removed it.
	l.doms["crimux-z"] = &fakeDomain{metaXML: stamp(t, "other", "sbZ", "z"), state: golibvirt.DomainShutoff}
	n.foreign = append(n.foreign, "other_sbZ")
	mz, err := r.adoptForeignDomain(l, "crimux-z")
	if err != nil || l.doms["crimux-z"].setFlags != golibvirt.DomainAffectConfig {
		t.Fatalf("adopting a stopped domain: %v, flags %d; want config only", err, l.doms["crimux-z"].setFlags)
	}
	r.adoptPodNamespace(l, mz)
	if len(n.adoptedNS) != 1 {
		t.Fatalf("the namespace of a VM neither recorded nor removed was adopted: %v", n.adoptedNS)
	}
	delete(l.doms, "crimux-z")
	r.adoptPodNamespace(l, mz)
	if len(n.adoptedNS) != 2 || n.own["sbZ"] == "" {
		t.Fatalf("the namespace of a removed VM was not adopted: %v", n.adoptedNS)
	}
}

func TestStampXMLHasNoNamespace(t *testing.T) {
	x, err := stampXML(vm.Metadata{Instance: "old", ContainerID: "c"}, "new")
	if err != nil || strings.Contains(x, "xmlns") || !strings.HasPrefix(x, "<crimux><instance>new</instance>") {
		t.Fatalf("stampXML = %s, %v", x, err)
	}
}

// removals is what r counted as removed of a kind.
func removals(r *Runtime, kind string) int {
	c := r.counters.(*countingCounters)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removed[kind]
}

// TestDeleteForeign: a foreign domain (stamped or not) is removed and
// counted; a namespace gets DEL and is counted; failures say so.
func TestDeleteForeign(t *testing.T) {
	r, l, n := foreignRuntime(t)
	domains := removals(r, "foreign_domain")
	var removed []string
	remove := func(name string) error { removed = append(removed, name); return nil }
	for _, name := range []string{"crimux-a", "crimux-b", "crimux-c"} {
		if err := r.deleteForeignDomain(l, name, remove); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(removed) != "[crimux-a crimux-b crimux-c]" || removals(r, "foreign_domain") != domains+3 {
		t.Fatalf("removed %v, counter %v (was %v)", removed, removals(r, "foreign_domain"), domains)
	}
	err := r.deleteForeignDomain(l, "crimux-a", func(string) error { return errors.New("libvirt: operation failed") })
	if err == nil || !strings.Contains(err.Error(), `delete domain "crimux-a"`) {
		t.Fatalf("failing removal: %v", err)
	}

	ctx := context.Background()
	netns := removals(r, "foreign_netns")
	n.failDel = errors.New("plugin bridge: exec: not found")
	if err := r.DeleteForeign(ctx, vmtypes.ForeignNetns, "other_orphan"); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "other_orphan") {
		t.Fatalf("DEL failing: %v, want Unavailable naming the namespace", err)
	}
	n.failDel = nil
	if err := r.DeleteForeign(ctx, vmtypes.ForeignNetns, "other_orphan"); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(n.deletedNS) != "[other_orphan]" || removals(r, "foreign_netns") != netns+1 {
		t.Fatalf("deleted %v", n.deletedNS)
	}
}

// TestAdoptForeignNetns: the namespace becomes this instance's (the
// collector then removes it unless a pod owns it); a pod of this crimux
// with that sandbox ID and no network gets it.
func TestAdoptForeignNetns(t *testing.T) {
	r, l, n := foreignRuntime(t)
	if err := r.adoptForeignNetns(l, "other_orphan"); err != nil {
		t.Fatal(err)
	}
	putNetSandbox(t, r, "sbX", func(sb *sandboxRecord) { sb.Net = nil })
	n.foreign = append(n.foreign, "other_sbX")
	if err := r.adoptForeignNetns(l, "other_sbX"); err != nil {
		t.Fatal(err)
	}
	sb, _ := r.store.sandbox("sbX")
	if fmt.Sprint(n.adoptedNS) != "[other_orphan other_sbX]" || n.own["orphan"] == "" || sb.Net == nil {
		t.Fatalf("adopted %v, own %v, pod network %+v", n.adoptedNS, n.own, sb.Net)
	}
}

// TestForeignRefusals: what is not foreign, not there or not
// understood is refused with its code and name, and nothing is touched.
func TestForeignRefusals(t *testing.T) {
	r, l, n := foreignRuntime(t)
	bare := newTestRuntime(t)
	ctx := context.Background()
	noop := func(string) error { t.Fatal("a refused domain was removed"); return nil }
	adoptDom := func(name string) error { _, err := r.adoptForeignDomain(l, name); return err }
	for _, tc := range []struct {
		name  string
		err   error
		code  codes.Code
		words string
	}{
		{"bad kind", r.AdoptForeign(ctx, "disk", "x"), codes.InvalidArgument, `kind: "disk"`},
		{"no kind", r.DeleteForeign(ctx, "", "x"), codes.InvalidArgument, "kind"},
		{"our VM", adoptDom("crimux-mine"), codes.FailedPrecondition, `"crimux-mine" is this crimux's VM`},
		{"our stamp", adoptDom("crimux-own"), codes.FailedPrecondition, `"crimux-own" carries this crimux's identity`},
		{"our stamp, delete", r.deleteForeignDomain(l, "crimux-own", noop), codes.FailedPrecondition, "not foreign"},
		{"our VM, delete", r.deleteForeignDomain(l, "crimux-mine", noop), codes.FailedPrecondition, "not foreign"},
		{"unstamped", adoptDom("crimux-b"), codes.FailedPrecondition, "no crimux metadata"},
		{"another container", adoptDom("crimux-c"), codes.FailedPrecondition, `names container "elsewhere"`},
		{"no such domain", adoptDom("crimux-gone"), codes.NotFound, `"crimux-gone"`},
		{"not crimux's", r.deleteForeignDomain(l, "vanilla", noop), codes.InvalidArgument, `name: domain "vanilla"`},
		{"libvirtd down", r.AdoptForeign(ctx, vmtypes.ForeignDomain, "crimux-a"), codes.Unavailable, "libvirtd"},
		{"libvirtd down, delete", r.DeleteForeign(ctx, vmtypes.ForeignDomain, "crimux-a"), codes.Unavailable, "libvirtd"},
		{"our netns", r.adoptForeignNetns(l, "i_sb1"), codes.FailedPrecondition, `"i_sb1" carries this crimux's identity`},
		{"no such netns", r.DeleteForeign(ctx, vmtypes.ForeignNetns, "other_nope"), codes.NotFound, `"other_nope"`},
		{"path", r.adoptForeignNetns(l, "../x"), codes.InvalidArgument, "name"},
		{"unnamed netns", r.DeleteForeign(ctx, vmtypes.ForeignNetns, "cni-1234"), codes.FailedPrecondition, "remove it by hand"},
		{"taken sandbox", r.adoptForeignNetns(l, "other_dup"), codes.FailedPrecondition, "sandbox dup already"},
		{"a foreign VM's netns", r.adoptForeignNetns(l, "other_sbA"), codes.FailedPrecondition, "network of domain crimux-a"},
		{"libvirtd down, netns", r.AdoptForeign(ctx, vmtypes.ForeignNetns, "other_orphan"), codes.Unavailable, "cannot tell"},
		{"our pod's sandbox", r.DeleteForeign(ctx, vmtypes.ForeignNetns, "other_sb1"), codes.FailedPrecondition, "adopt the namespace instead"},
		{"no pod network", bare.adoptForeignNetns(l, "other_x"), codes.FailedPrecondition, "no pod network"},
	} {
		if errdefs.Code(tc.err) != tc.code || !strings.Contains(tc.err.Error(), tc.words) {
			t.Errorf("%s: %v (%s), want %s saying %q", tc.name, tc.err, errdefs.Code(tc.err), tc.code, tc.words)
		}
	}
	if l.metaSets != 0 || len(n.adoptedNS)+len(n.deletedNS) != 0 {
		t.Fatalf("refused calls touched something: %d metadata sets, adopted %v, deleted %v", l.metaSets, n.adoptedNS, n.deletedNS)
	}
}

// TestReadMetadataOfAnUnstampedDomain: no metadata is no stamp, no error.
func TestReadMetadataOfAnUnstampedDomain(t *testing.T) {
	l := &fakeLibvirt{doms: map[string]*fakeDomain{"crimux-x": {metaXML: "<other xmlns='urn:x'/>"}}}
	if _, ok, err := readMetadata(l, golibvirt.Domain{Name: "crimux-x"}); ok || err != nil {
		t.Fatalf("readMetadata = %v, %v", ok, err)
	}
}
