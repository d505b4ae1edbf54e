package gc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/runtimes/libvirt/virt/virtfake"
	"github.com/crimux/crimux/vmtypes"
)

// IDs of the foreign VMs that get adopted: crimux mints 32 hex digits
// and adopts nothing else.
const (
	ctrA = "0000000000000000000000000000000a"
	sbA  = "1000000000000000000000000000000a"
	domA = "crimux-" + ctrA
	ctrZ = "0000000000000000000000000000000f"
	sbZ  = "1000000000000000000000000000000f"
	domZ = "crimux-" + ctrZ
)

// foreignEnv is a runtime of instance "i" with a pod network, a VM of its
// own (c1 of pod sb1, created) and a record "mine" being removed (whose
// domain carries a foreign stamp: the record wins), and libvirt holding:
// crimux-c1; crimux-mine; crimux-own (stamped "i", no record: the
// collector's); crimux-<ctrA> (another instance's, running); crimux-b (no
// stamp, shut off); crimux-c (stamp naming another container); vanilla
// (not crimux's).
func foreignEnv(t *testing.T) (*env, *virtfake.Libvirt, *coretest.Net) {
	t.Helper()
	e := newEnv(t)
	e.PutPod(t, "sb1", nil)
	e.PutVM(t, "sb1", "c1", runtimeapi.ContainerState_CONTAINER_CREATED, "")
	if err := e.R.Store.PutContainer(&store.Container{ID: "mine", SandboxID: "sb1", Removing: true,
		Config: &runtimeapi.ContainerConfig{}}); err != nil {
		t.Fatal(err)
	}
	e.putDomain("crimux-mine", stamp(t, "other", "sbM", "mine"), virt.StateRunning)
	e.putDomain("crimux-own", stamp(t, "i", "sbO", "own"), virt.StateRunning)
	e.putDomain(domA, stamp(t, "other", sbA, ctrA), virt.StateRunning)
	e.putDomain("crimux-b", "", virt.StateShutoff)
	e.putDomain("crimux-c", stamp(t, "other", "sbC", "elsewhere"), virt.StateShutoff)
	e.putDomain("vanilla", "", virt.StateRunning)
	e.Net.Own = map[string]string{"dup": "/run/test/netns/i_dup"}
	e.Net.Foreign = []string{"other_" + sbA, "other_orphan", "other_dup", "other_sb1", "cni-1234"}
	return e, e.Libvirt, e.Net
}

func TestListForeign(t *testing.T) {
	t.Parallel()
	e, l, _ := foreignEnv(t)
	r := e.gc
	got, err := r.listForeign(l)
	if err != nil {
		t.Fatal(err)
	}
	want := []vmtypes.ForeignResource{
		{Kind: vmtypes.ForeignDomain, Name: domA, Instance: "other", State: "running", Detail: "pod ns/web, sandbox " + sbA},
		{Kind: vmtypes.ForeignDomain, Name: "crimux-b", Instance: "", State: "shutoff", Detail: "no crimux metadata"},
		{Kind: vmtypes.ForeignDomain, Name: "crimux-c", Instance: "other", State: "shutoff", Detail: "pod ns/web, sandbox sbC"},
		{Kind: vmtypes.ForeignNetns, Name: "other_" + sbA, Instance: "other", State: "", Detail: "sandbox " + sbA + ", the network of domain " + domA},
		{Kind: vmtypes.ForeignNetns, Name: "other_orphan", Instance: "other", State: "", Detail: "sandbox orphan"},
		{Kind: vmtypes.ForeignNetns, Name: "other_dup", Instance: "other", State: "", Detail: "sandbox dup"},
		{Kind: vmtypes.ForeignNetns, Name: "other_sb1", Instance: "other", State: "", Detail: "sandbox sb1"},
		{Kind: vmtypes.ForeignNetns, Name: "cni-1234", Instance: "", State: "", Detail: `namespace "cni-1234" is not named <instance>_<sandbox ID>: its pod is unknown`},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("listForeign:\n%v\nwant\n%v", got, want)
	}
	if pub, err := r.ListForeign(context.Background()); err != nil || fmt.Sprint(pub) != fmt.Sprint(want) {
		t.Fatalf("ListForeign = %v, %v; want what listForeign said", pub, err)
	}
	l.SetDown(fmt.Errorf("libvirtd at /nonexistent: not connected yet: %w", errdefs.ErrUnavailable))
	if _, err := r.ListForeign(context.Background()); !errdefs.IsUnavailable(err) {
		t.Fatalf("ListForeign without libvirtd: %v, want Unavailable", err)
	}
}

// TestAdoptForeignDomain: the stamp is rewritten to this instance and
// parses back; nothing else of the domain changes. Once the collector has
// taken the VM in (adopt), its pod's namespace is adopted and given to
// the pod.
//
// The old fake of go-libvirt also checked the flags of DomainSetMetadata
// (config and live for a running domain, config for a stopped one); they
// are remote.go's business now (virt.SetMetadata), which virtfake does
// not model.
func TestAdoptForeignDomain(t *testing.T) {
	t.Parallel()
	e, l, n := foreignEnv(t)
	r := e.gc
	m, err := r.adoptForeignDomain(l, domA)
	if err != nil {
		t.Fatal(err)
	}
	got, stamped, err := readMetadata(l, virt.Domain{Name: domA})
	want := vm.Metadata{XMLName: got.XMLName, Instance: "i", PodName: "web", PodNamespace: "ns", SandboxID: sbA, ContainerID: ctrA}
	if err != nil || !stamped || got != want {
		t.Fatalf("metadata after adoption: %+v, %v, %v; want %+v", got, stamped, err, want)
	}
	if got.XMLName.Space != metadataNS {
		t.Fatalf("stamp in namespace %q, want %q", got.XMLName.Space, metadataNS)
	}
	d, _ := l.Domain(domA)
	if !strings.Contains(d.XML, "<name>"+domA+"</name><memory unit='KiB'>131072</memory><metadata>") || d.State != virt.StateRunning {
		t.Fatalf("the rest of the domain changed: %s (%v)", d.XML, d.State)
	}
	if m.Instance != "other" {
		t.Fatalf("adoptForeignDomain returned %+v, want the metadata as it was", m)
	}
	if _, err := r.adoptForeignDomain(l, domA); errdefs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("adopting it again: %v, want FailedPrecondition (it is ours now)", err)
	}

	m2 := m
	m2.Instance = "i"
	if err := r.adopt(domA, m2); err != nil { // what the collector does with it
		t.Fatal(err)
	}
	r.adoptPodNamespace(l, m)
	sb, err := r.Store.Sandbox(sbA)
	if len(n.AdoptedNS) != 1 || n.AdoptedNS[0] != "other_"+sbA || err != nil || sb.Net == nil || sb.Net.NetNS != "/run/test/netns/i_"+sbA {
		t.Fatalf("pod namespace: adopted %v, record %+v (%v)", n.AdoptedNS, sb, err)
	}

	// A stopped one: its namespace waits until the collector removed it.
	e.putDomain(domZ, stamp(t, "other", sbZ, ctrZ), virt.StateShutoff)
	n.Foreign = append(n.Foreign, "other_"+sbZ)
	mz, err := r.adoptForeignDomain(l, domZ)
	if err != nil {
		t.Fatalf("adopting a stopped domain: %v", err)
	}
	if z, _, _ := readMetadata(l, virt.Domain{Name: domZ}); z.Instance != "i" {
		t.Fatalf("stopped domain's stamp: %+v, want instance i", z)
	}
	r.adoptPodNamespace(l, mz)
	if len(n.AdoptedNS) != 1 {
		t.Fatalf("the namespace of a VM neither recorded nor removed was adopted: %v", n.AdoptedNS)
	}
	if err := l.Undefine(virt.Domain{Name: domZ}); err != nil {
		t.Fatal(err)
	}
	r.adoptPodNamespace(l, mz)
	if len(n.AdoptedNS) != 2 || n.Own[sbZ] == "" {
		t.Fatalf("the namespace of a removed VM was not adopted: %v", n.AdoptedNS)
	}
}

func TestStampXMLHasNoNamespace(t *testing.T) {
	t.Parallel()
	x, err := stampXML(vm.Metadata{Instance: "old", ContainerID: "c"}, "new")
	if err != nil || strings.Contains(x, "xmlns") || !strings.HasPrefix(x, "<crimux><instance>new</instance>") {
		t.Fatalf("stampXML = %s, %v", x, err)
	}
}

// TestDeleteForeign: a foreign domain (stamped or not) is removed and
// counted; a namespace gets DEL and is counted; failures say so.
func TestDeleteForeign(t *testing.T) {
	t.Parallel()
	e, l, n := foreignEnv(t)
	r := e.gc
	domains := e.Counters.Removed("foreign_domain")
	var removed []string
	remove := func(name string) error { removed = append(removed, name); return nil }
	for _, name := range []string{domA, "crimux-b", "crimux-c"} {
		if err := r.deleteForeignDomain(l, name, remove); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(removed) != "["+domA+" crimux-b crimux-c]" || e.Counters.Removed("foreign_domain") != domains+3 {
		t.Fatalf("removed %v, counter %v (was %v)", removed, e.Counters.Removed("foreign_domain"), domains)
	}
	err := r.deleteForeignDomain(l, domA, func(string) error { return errors.New("libvirt: operation failed") })
	if err == nil || !strings.Contains(err.Error(), `delete domain "`+domA+`"`) {
		t.Fatalf("failing removal: %v", err)
	}

	ctx := context.Background()
	netns := e.Counters.Removed("foreign_netns")
	n.FailDel = errors.New("plugin bridge: exec: not found")
	if err := r.DeleteForeign(ctx, vmtypes.ForeignNetns, "other_orphan"); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "other_orphan") {
		t.Fatalf("DEL failing: %v, want Unavailable naming the namespace", err)
	}
	n.FailDel = nil
	if err := r.DeleteForeign(ctx, vmtypes.ForeignNetns, "other_orphan"); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(n.DeletedNS) != "[other_orphan]" || e.Counters.Removed("foreign_netns") != netns+1 {
		t.Fatalf("deleted %v", n.DeletedNS)
	}
}

// TestDeleteForeignDomainThroughLibvirt: DeleteForeign destroys and
// undefines a running foreign domain, undefines a stopped one, and leaves
// everything else alone.
func TestDeleteForeignDomainThroughLibvirt(t *testing.T) {
	t.Parallel()
	e, l, _ := foreignEnv(t)
	ctx := context.Background()
	for _, name := range []string{domA, "crimux-b"} {
		if err := e.gc.DeleteForeign(ctx, vmtypes.ForeignDomain, name); err != nil {
			t.Fatal(err)
		}
		if _, ok := e.hasDomain(name); ok {
			t.Fatalf("%s still defined", name)
		}
	}
	if l.Calls("Destroy") != 1 || l.Calls("Undefine") != 2 {
		t.Fatalf("Destroy %d, Undefine %d; want 1 (the running one), 2", l.Calls("Destroy"), l.Calls("Undefine"))
	}
	if got := fmt.Sprint(l.Names()); got != "[crimux-c crimux-c1 crimux-mine crimux-own vanilla]" {
		t.Fatalf("domains left: %s", got)
	}
	l.Fail("Undefine", boom)
	wantCode(t, e.gc.DeleteForeign(ctx, vmtypes.ForeignDomain, "crimux-c"), codes.Unknown, `delete domain "crimux-c": libvirt: internal error: boom`)
	if e.Counters.Removed("foreign_domain") != 2 {
		t.Fatalf("foreign domains counted: %d, want 2", e.Counters.Removed("foreign_domain"))
	}
}

// TestAdoptForeignNetns: the namespace becomes this instance's (the
// collector then removes it unless a pod owns it); a pod of this crimux
// with that sandbox ID and no network gets it.
func TestAdoptForeignNetns(t *testing.T) {
	t.Parallel()
	e, l, n := foreignEnv(t)
	r := e.gc
	if err := r.adoptForeignNetns(l, "other_orphan"); err != nil {
		t.Fatal(err)
	}
	e.PutPod(t, "sbX", func(sb *store.Sandbox) { sb.Net = nil })
	n.Foreign = append(n.Foreign, "other_sbX")
	if err := r.adoptForeignNetns(l, "other_sbX"); err != nil {
		t.Fatal(err)
	}
	sb, _ := r.Store.Sandbox("sbX")
	if fmt.Sprint(n.AdoptedNS) != "[other_orphan other_sbX]" || n.Own["orphan"] == "" || sb.Net == nil {
		t.Fatalf("adopted %v, own %v, pod network %+v", n.AdoptedNS, n.Own, sb.Net)
	}
}

// TestForeignRefusals: what is not foreign, not there or not
// understood is refused with its code and name, and nothing is touched.
func TestForeignRefusals(t *testing.T) {
	t.Parallel()
	e, l, n := foreignEnv(t)
	r := e.gc
	bare := newEnv(t, coretest.Options{NoNetwork: true})
	// The collector's connection is down; l, the fake itself, answers.
	l.SetDown(fmt.Errorf("libvirtd at /nonexistent: not connected yet: %w", errdefs.ErrUnavailable))
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
		{"libvirtd down", r.AdoptForeign(ctx, vmtypes.ForeignDomain, domA), codes.Unavailable, "libvirtd"},
		{"libvirtd down, delete", r.DeleteForeign(ctx, vmtypes.ForeignDomain, domA), codes.Unavailable, "libvirtd"},
		{"our netns", r.adoptForeignNetns(l, "i_sb1"), codes.FailedPrecondition, `"i_sb1" carries this crimux's identity`},
		{"no such netns", r.DeleteForeign(ctx, vmtypes.ForeignNetns, "other_nope"), codes.NotFound, `"other_nope"`},
		{"path", r.adoptForeignNetns(l, "../x"), codes.InvalidArgument, "name"},
		{"unnamed netns", r.DeleteForeign(ctx, vmtypes.ForeignNetns, "cni-1234"), codes.FailedPrecondition, "remove it by hand"},
		{"taken sandbox", r.adoptForeignNetns(l, "other_dup"), codes.FailedPrecondition, "sandbox dup already"},
		{"a foreign VM's netns", r.adoptForeignNetns(l, "other_"+sbA), codes.FailedPrecondition, "network of domain " + domA},
		{"libvirtd down, netns", r.AdoptForeign(ctx, vmtypes.ForeignNetns, "other_orphan"), codes.Unavailable, "cannot tell"},
		{"our pod's sandbox", r.DeleteForeign(ctx, vmtypes.ForeignNetns, "other_sb1"), codes.FailedPrecondition, "adopt the namespace instead"},
		{"no pod network", bare.gc.adoptForeignNetns(l, "other_x"), codes.FailedPrecondition, "no pod network"},
	} {
		if errdefs.Code(tc.err) != tc.code || !strings.Contains(tc.err.Error(), tc.words) {
			t.Errorf("%s: %v (%s), want %s saying %q", tc.name, tc.err, errdefs.Code(tc.err), tc.code, tc.words)
		}
	}
	if l.Calls("SetMetadata") != 0 || len(n.AdoptedNS)+len(n.DeletedNS) != 0 {
		t.Fatalf("refused calls touched something: %d metadata sets, adopted %v, deleted %v", l.Calls("SetMetadata"), n.AdoptedNS, n.DeletedNS)
	}
	if l.Calls("Destroy")+l.Calls("Undefine") != 0 {
		t.Fatalf("refused calls removed domains: %v", l.Names())
	}
}

// TestReadMetadataOfAnUnstampedDomain: no metadata is no stamp, no error.
func TestReadMetadataOfAnUnstampedDomain(t *testing.T) {
	t.Parallel()
	l := virtfake.New()
	l.Put("crimux-x", virtfake.Domain{XML: domainXML("crimux-x", "<other xmlns='urn:x'/>")})
	if _, ok, err := readMetadata(l, virt.Domain{Name: "crimux-x"}); ok || err != nil {
		t.Fatalf("readMetadata = %v, %v", ok, err)
	}
}

// TestReadMetadataFails: an unreadable or unparsable domain is an error
// naming it.
func TestReadMetadataFails(t *testing.T) {
	t.Parallel()
	l := virtfake.New()
	l.Put("crimux-x", virtfake.Domain{XML: "<domain"})
	if _, _, err := readMetadata(l, virt.Domain{Name: "crimux-x"}); err == nil || !strings.Contains(err.Error(), `domain "crimux-x": parse its XML`) {
		t.Fatalf("readMetadata of broken XML: %v", err)
	}
	l.Fail("XML", boom)
	if _, _, err := readMetadata(l, virt.Domain{Name: "crimux-x"}); !errors.Is(err, boom) || !strings.Contains(err.Error(), "read its XML") {
		t.Fatalf("readMetadata with XML failing: %v", err)
	}
}

// TestAdoptForeignEndToEnd: AdoptForeign takes a running foreign domain
// into the store through a collector pass, with its pod and its pod's
// namespace; a foreign namespace of no VM becomes this crimux's orphan and
// the collector removes it.
func TestAdoptForeignEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.putDomain(domA, stamp(t, "other", sbA, ctrA), virt.StateRunning)
	e.Net.Foreign = []string{"other_" + sbA, "other_orphan"}

	if err := e.gc.AdoptForeign(ctx, vmtypes.ForeignDomain, domA); err != nil {
		t.Fatal(err)
	}
	c, err := e.R.Store.Container(ctrA)
	if err != nil || !c.Adopted || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || c.SandboxID != sbA || c.Domain != domA {
		t.Fatalf("adopted VM record: %+v, %v", c, err)
	}
	sb, err := e.R.Store.Sandbox(sbA)
	if err != nil || sb.Net == nil || sb.Net.NetNS != "/run/test/netns/i_"+sbA || sb.ContainerID != ctrA {
		t.Fatalf("adopted pod: %+v, %v; want it with the adopted namespace", sb, err)
	}
	if fmt.Sprint(e.Net.AdoptedNS) != "[other_"+sbA+"]" || len(e.Net.Collected) != 0 {
		t.Fatalf("namespaces adopted %v, collected %v", e.Net.AdoptedNS, e.Net.Collected)
	}
	if foreign, err := e.gc.ListForeign(ctx); err != nil || fmt.Sprint(foreign) != "[{netns other_orphan other  sandbox orphan}]" {
		t.Fatalf("foreign after adoption: %v, %v", foreign, err)
	}

	if err := e.gc.AdoptForeign(ctx, vmtypes.ForeignNetns, "other_orphan"); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(e.Net.Collected) != "[orphan]" || e.Counters.Removed("network") != 1 {
		t.Fatalf("the adopted orphan namespace: collected %v, counted %d", e.Net.Collected, e.Counters.Removed("network"))
	}
}

// TestAdoptForeignDomainFails: a pod of this crimux with the domain's
// sandbox ID, and a metadata rewrite libvirt refuses.
func TestAdoptForeignDomainFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.putDomain(domA, stamp(t, "other", sbA, ctrA), virt.StateRunning)
	e.PutPod(t, sbA, nil)
	wantCode(t, e.gc.AdoptForeign(ctx, vmtypes.ForeignDomain, domA), codes.FailedPrecondition, "its pod sandbox "+sbA+" is one of this crimux's")
	if err := e.R.Store.DeleteSandbox(sbA); err != nil {
		t.Fatal(err)
	}
	e.Libvirt.Fail("SetMetadata", boom)
	wantCode(t, e.gc.AdoptForeign(ctx, vmtypes.ForeignDomain, domA), codes.Unknown, "rewrite its crimux metadata")
	e.Libvirt.Fail("Lookup", boom)
	wantCode(t, e.gc.AdoptForeign(ctx, vmtypes.ForeignDomain, domA), codes.Unknown, `domain "`+domA+`": libvirt`)
	e.Libvirt.Put(domA, virtfake.Domain{XML: "<domain", State: virt.StateRunning})
	wantCode(t, e.gc.AdoptForeign(ctx, vmtypes.ForeignDomain, domA), codes.Unknown, "parse its XML")
	for _, name := range []string{"crimux-", "crimux-a/b", "x"} {
		wantCode(t, e.gc.AdoptForeign(ctx, vmtypes.ForeignDomain, name), codes.InvalidArgument, "is not a crimux domain")
	}
	if _, err := e.R.Store.AnyContainer(ctrA); !errdefs.IsNotFound(err) {
		t.Fatalf("a refused adoption recorded the VM: %v", err)
	}
}

// TestListForeignFails: libvirt's and the pod network's failures.
func TestListForeignFails(t *testing.T) {
	t.Parallel()
	e, l, _ := foreignEnv(t)
	l.Fail("ListAll", boom)
	if _, err := e.gc.ListForeign(context.Background()); !errors.Is(err, boom) || !strings.Contains(err.Error(), "list libvirt domains") {
		t.Fatalf("ListForeign with ListAll failing: %v", err)
	}
	// A domain whose state or XML libvirt cannot give is listed, saying so.
	l.Fail("State", boom)
	l.Fail("XML", boom)
	got, err := e.gc.ListForeign(context.Background())
	if err != nil || len(got) == 0 || got[0].Name != domA || got[0].State != "unknown" || !strings.Contains(got[0].Detail, "read its XML") {
		t.Fatalf("ListForeign with State and XML failing: %v, %v", got, err)
	}
	e.setNet(failingNet{e.Net})
	if _, err := e.gc.ListForeign(context.Background()); err == nil || !strings.Contains(err.Error(), "list VM pod namespaces") {
		t.Fatalf("ListForeign with the namespaces unreadable: %v", err)
	}
	// Without a pod network there are no namespaces to list.
	bare := newEnv(t, coretest.Options{NoNetwork: true})
	bare.putDomain(domA, stamp(t, "other", sbA, ctrA), virt.StateRunning)
	if got, err := bare.gc.ListForeign(context.Background()); err != nil || len(got) != 1 {
		t.Fatalf("ListForeign without a pod network: %v, %v", got, err)
	}
}

// TestForeignNetnsFails: the namespaces cannot be listed, podnet refuses
// an adoption, libvirt cannot tell who uses a namespace.
func TestForeignNetnsFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, l, _ := foreignEnv(t)
	e.setNet(failingNet{e.Net})
	wantCode(t, e.gc.DeleteForeign(ctx, vmtypes.ForeignNetns, "other_orphan"), codes.Unknown, "list VM pod namespaces")
	e.setNet(refusingNet{e.Net, fmt.Errorf("rename: %w", errExist)})
	wantCode(t, e.gc.AdoptForeign(ctx, vmtypes.ForeignNetns, "other_orphan"), codes.FailedPrecondition, `adopt netns "other_orphan": rename`)
	e.setNet(e.Net)
	l.Fail("ListAll", boom)
	wantCode(t, e.gc.adoptForeignNetns(l, "other_orphan"), codes.Unknown, `netns "other_orphan": list libvirt domains`)
	if len(e.Net.AdoptedNS) != 0 {
		t.Fatalf("failed adoptions adopted %v", e.Net.AdoptedNS)
	}
}

func TestNetnsError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("open: %w", errNotExist), codes.NotFound},
		{fmt.Errorf("rename: %w", errExist), codes.FailedPrecondition},
		{fmt.Errorf("conf: %w", podnet.ErrNoConfig), codes.FailedPrecondition},
		{errors.New("plugin bridge failed"), codes.Unavailable},
	} {
		err := netnsError("n", "adopt", tc.err)
		if errdefs.Code(err) != tc.code || !strings.Contains(err.Error(), `adopt netns "n": `+tc.err.Error()) {
			t.Errorf("netnsError(%v) = %v (%s), want %s", tc.err, err, errdefs.Code(err), tc.code)
		}
	}
}

// TestAdoptPodNamespaceLeavesAlone: nothing is adopted for metadata
// without an instance, without a pod network, when the namespaces cannot
// be listed, or when the pod's namespace is not a foreign one.
func TestAdoptPodNamespaceLeavesAlone(t *testing.T) {
	t.Parallel()
	m := vm.Metadata{Instance: "other", SandboxID: sbA, ContainerID: ctrA}
	for _, tc := range []struct {
		name  string
		setup func(*env) vm.Metadata
	}{
		{"no instance", func(*env) vm.Metadata { m := m; m.Instance = ""; return m }},
		{"namespaces unreadable", func(e *env) vm.Metadata { e.setNet(failingNet{e.Net}); return m }},
		{"not foreign", func(e *env) vm.Metadata { e.Net.Foreign = []string{"other_orphan"}; return m }},
		{"adoption refused", func(e *env) vm.Metadata { e.Net.Own[sbA] = "/x/i_" + sbA; return m }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, l, n := foreignEnv(t)
			if err := l.Undefine(virt.Domain{Name: domA}); err == nil {
				t.Fatal("undefined a running domain")
			}
			l.Edit(domA, func(d *virtfake.Domain) { d.State = virt.StateShutoff })
			if err := l.Undefine(virt.Domain{Name: domA}); err != nil {
				t.Fatal(err)
			}
			e.gc.adoptPodNamespace(l, tc.setup(e))
			if len(n.AdoptedNS) != 0 {
				t.Fatalf("adopted %v", n.AdoptedNS)
			}
		})
	}
	bare := newEnv(t, noNetwork)
	bare.gc.adoptPodNamespace(bare.Libvirt, m) // no pod network: nothing to do, no panic
}
