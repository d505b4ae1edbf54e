package instant

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/testutil"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
)

// fakeBoot stands for a template VM's boot and save: it counts the
// makings at once, holds each until hold is closed (nil: none), and
// fails while fail is set.
type fakeBoot struct {
	mu              sync.Mutex
	now, most, made int
	fail            error
	hold            chan struct{}
}

func (f *fakeBoot) boot(ctx context.Context, _ Request, p template.Paths, _ string) (int64, *store.VMIdentity, error) {
	f.mu.Lock()
	f.now++
	f.most = max(f.most, f.now)
	hold, fail := f.hold, f.fail
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.now--
		f.made++
		f.mu.Unlock()
	}()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
	if fail != nil {
		return 0, nil, fail
	}
	for _, f := range []string{p.State, p.Disk, p.CIData} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			return 0, nil, err
		}
	}
	return 4096, nil, nil
}

func (f *fakeBoot) counts() (now, most, made int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now, f.most, f.made
}

func newMaker(t *testing.T, f *fakeBoot) (*Maker, *coretest.Env) {
	e := coretest.New(t)
	return &Maker{R: CoreOf(e.R), Store: template.Store{Dir: filepath.Join(e.Dir, "templates")}, boot: f.boot}, e
}

func request(ns string, memMiB uint64) Request {
	return Request{Image: "img", Namespace: ns, Layout: core.ImageLayout{Digest: "sha256:d1", DiskPath: "/images/d1/disk.qcow2", DiskFormat: "qcow2"},
		Shape: template.Shape{VCPUs: 1, MaxVCPUs: 2, MemoryMiB: memMiB, MaxMemoryMiB: 2 * memMiB, Accel: "tcg"}}
}

// waitIdle waits until no template is being made.
func waitIdle(t *testing.T, m *Maker) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "no making", func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.making) > 0 {
			return fmt.Errorf("%d being made", len(m.making))
		}
		return nil
	})
}

// TestKeyPerNamespace: two namespaces' requests for one image and shape
// have two keys, their templates two metas; with templates shared
// across namespaces, one key, whose meta names no namespace.
func TestKeyPerNamespace(t *testing.T) {
	f := &fakeBoot{}
	m, _ := newMaker(t, f)
	a, b := request("ns-a", 512), request("ns-b", 512)
	if m.Key(a) == m.Key(b) {
		t.Fatalf("ns-a and ns-b: the same key %s", m.Key(a))
	}
	ma, err := m.Make(t.Context(), a)
	if err != nil || ma.Namespace != "ns-a" || ma.State != template.Ready {
		t.Fatalf("ns-a's template: %+v, %v", ma, err)
	}
	if _, err := m.Get(b); !errdefs.IsNotFound(err) {
		t.Fatalf("ns-b's template before it is made: %v, want NotFound", err)
	}
	if _, err := m.Make(t.Context(), request("", 512)); errdefs.Code(err).String() != "InvalidArgument" || !strings.HasPrefix(err.Error(), "namespace: ") {
		t.Fatalf("a template of no namespace, templates per namespace: %v, want InvalidArgument naming namespace", err)
	}

	shared, _ := newMaker(t, f)
	shared.ShareAcrossNamespaces = true
	if shared.Key(a) != shared.Key(b) {
		t.Fatalf("shared templates: ns-a's key %s, ns-b's %s", shared.Key(a), shared.Key(b))
	}
	ms, err := shared.Make(t.Context(), a)
	if err != nil || ms.Namespace != "" {
		t.Fatalf("a shared template: %+v, %v", ms, err)
	}
	if got, err := shared.Get(b); err != nil || got.Key != ms.Key {
		t.Fatalf("ns-b, shared: %+v, %v; want template %s", got, err, ms.Key)
	}
	if got, err := shared.Make(t.Context(), request("", 512)); err != nil || got.Key != ms.Key {
		t.Fatalf("no namespace, shared: %+v, %v; want template %s", got, err, ms.Key)
	}
}

// TestMismatchNotUsed: a stored meta at a request's key whose digest,
// shape or namespace differ from the request's is neither used (Get,
// Make, Serves) nor replaced (Start).
func TestMismatchNotUsed(t *testing.T) {
	for name, change := range map[string]func(*template.Meta){
		"digest":    func(m *template.Meta) { m.ImageDigest = "sha256:other" },
		"shape":     func(m *template.Meta) { m.Shape.VCPUs = 4 },
		"namespace": func(m *template.Meta) { m.Namespace = "ns-b" },
		"version":   func(m *template.Meta) { m.Version = "0.0.1/t1" },
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeBoot{}
			m, _ := newMaker(t, f)
			req := request("ns-a", 512)
			meta, err := m.Make(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			change(&meta)
			if err := m.Store.Put(meta); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Get(req); !errors.Is(err, ErrOtherTemplate) {
				t.Fatalf("Get: %v, want ErrOtherTemplate", err)
			}
			if _, err := m.Make(t.Context(), req); !errors.Is(err, ErrOtherTemplate) {
				t.Fatalf("Make: %v, want ErrOtherTemplate", err)
			}
			if err := m.Serves(meta.Key, req); !errors.Is(err, ErrOtherTemplate) {
				t.Fatalf("Serves: %v, want ErrOtherTemplate", err)
			}
			if err := m.Start(req, ""); !errors.Is(err, ErrOtherTemplate) {
				t.Fatalf("Start: %v, want ErrOtherTemplate", err)
			}
			if _, _, made := f.counts(); made != 1 {
				t.Fatalf("%d makings, want the first alone", made)
			}
		})
	}
}

// TestMakingsCapped: Start for ten shapes makes no more than MaxMaking
// at once; the others are refused (ErrBusy), not queued; once those end,
// another may start.
func TestMakingsCapped(t *testing.T) {
	for _, limit := range []int{0, 2} { // 0: the default, one
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			f := &fakeBoot{hold: make(chan struct{})}
			m, _ := newMaker(t, f)
			m.Limits.MaxMaking = limit
			want := max(limit, DefaultMaxMaking)
			started, busy := 0, 0
			for i := range 10 {
				switch err := m.Start(request("ns", uint64(256+64*i)), ""); {
				case err == nil:
					started++
				case errors.Is(err, ErrBusy):
					busy++
				default:
					t.Fatalf("Start %d: %v", i, err)
				}
			}
			if started != want || busy != 10-want {
				t.Fatalf("%d started, %d refused; want %d started", started, busy, want)
			}
			testutil.Eventually(t, 5*time.Second, "the makings", func() error {
				if now, _, _ := f.counts(); now != want {
					return fmt.Errorf("%d making", now)
				}
				return nil
			})
			close(f.hold)
			waitIdle(t, m)
			if _, most, made := f.counts(); most > want || made != want {
				t.Fatalf("%d made at once, %d in all; want at most %d", most, made, want)
			}
			if err := m.Start(request("ns", 4096), ""); err != nil {
				t.Fatalf("Start once the makings ended: %v", err)
			}
			waitIdle(t, m)
		})
	}
}

// TestMakeWaitsItsTurn: Make (a warm) waits for a turn among MaxMaking,
// or gives up with its context.
func TestMakeWaitsItsTurn(t *testing.T) {
	f := &fakeBoot{hold: make(chan struct{})}
	m, _ := newMaker(t, f)
	if err := m.Start(request("ns", 256), ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := m.Make(ctx, request("ns", 512)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Make while another is made: %v, want it to wait", err)
	}
	close(f.hold)
	if meta, err := m.Make(t.Context(), request("ns", 512)); err != nil || meta.State != template.Ready {
		t.Fatalf("Make once the other ended: %+v, %v", meta, err)
	}
	if _, most, _ := f.counts(); most > 1 {
		t.Fatalf("%d made at once", most)
	}
}

// TestSetLimitsWhileMaking: a reload raising MaxMaking lets a warm that
// waits for a turn through at once, and a pod's making start; lowering
// it again starts no other until the makings under way end.
func TestSetLimitsWhileMaking(t *testing.T) {
	f := &fakeBoot{hold: make(chan struct{})}
	m, _ := newMaker(t, f)
	if err := m.Start(request("ns", 256), ""); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(request("ns", 384), ""); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second Start at the default cap: %v, want ErrBusy", err)
	}
	warmed := make(chan error, 1)
	go func() {
		_, err := m.Make(t.Context(), request("ns", 512))
		warmed <- err
	}()
	m.SetLimits(Limits{MaxMaking: 3})
	testutil.Eventually(t, 5*time.Second, "the warm making beside the first", func() error {
		if now, _, _ := f.counts(); now != 2 {
			return fmt.Errorf("%d making", now)
		}
		return nil
	})
	if err := m.Start(request("ns", 384), ""); err != nil {
		t.Fatalf("Start after the cap was raised to 3: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "three makings", func() error {
		if now, _, _ := f.counts(); now != 3 {
			return fmt.Errorf("%d making", now)
		}
		return nil
	})
	m.SetLimits(Limits{MaxMaking: 1})
	if err := m.Start(request("ns", 640), ""); !errors.Is(err, ErrBusy) {
		t.Fatalf("Start with 3 making and the cap lowered to 1: %v, want ErrBusy", err)
	}
	close(f.hold)
	if err := <-warmed; err != nil {
		t.Fatalf("the warm: %v", err)
	}
	waitIdle(t, m)
	if _, most, made := f.counts(); most != 3 || made != 3 {
		t.Fatalf("%d made at once, %d in all; want 3 and 3", most, made)
	}
}

// TestFailedRetriedAfter: a failed template stays failed for RetryAfter
// (Start refuses it, FailedPrecondition), then is made again.
func TestFailedRetriedAfter(t *testing.T) {
	f := &fakeBoot{fail: errors.New("no agent")}
	m, _ := newMaker(t, f)
	m.Limits.RetryAfter = time.Hour
	req := request("ns", 512)
	meta, err := m.Make(t.Context(), req)
	if err == nil || meta.State != template.Failed || meta.FailedAt == 0 {
		t.Fatalf("a failing making: %+v, %v", meta, err)
	}
	if err := m.Start(req, ""); errdefs.Code(err).String() != "FailedPrecondition" {
		t.Fatalf("Start of a template that failed just now: %v, want FailedPrecondition", err)
	}
	if wait := m.RetryIn(meta); wait < 59*time.Minute {
		t.Fatalf("RetryIn %s, want about an hour", wait)
	}
	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	meta.FailedAt = time.Now().Add(-2 * time.Hour).UnixNano()
	if err := m.Store.Put(meta); err != nil {
		t.Fatal(err)
	}
	if m.RetryIn(meta) != 0 {
		t.Fatal("a template failed two hours ago still waits")
	}
	if err := m.Start(req, ""); err != nil {
		t.Fatalf("Start after RetryAfter: %v", err)
	}
	waitIdle(t, m)
	if got, err := m.Get(req); err != nil || got.State != template.Ready || got.Error != "" {
		t.Fatalf("made again: %+v, %v", got, err)
	}
}

// TestKeptBounded: beyond MaxKept, the failed templates go first, then
// the least recently used ready one that no clone needs; a template a
// clone was just planned from, or that an unstarted clone's record
// names, stays; with every one needed, none is made.
func TestKeptBounded(t *testing.T) {
	f := &fakeBoot{}
	m, e := newMaker(t, f)
	m.Limits.MaxKept = 3
	makeOf := func(mem uint64) template.Meta {
		t.Helper()
		meta, err := m.Make(t.Context(), request("ns", mem))
		if err != nil {
			t.Fatal(err)
		}
		return meta
	}
	age := func(key string, ago time.Duration) {
		t.Helper()
		at := time.Now().Add(-ago)
		if err := os.Chtimes(m.Store.Paths(key).Meta, at, at); err != nil {
			t.Fatal(err)
		}
	}
	kept := func() map[string]bool {
		t.Helper()
		all, err := m.Store.List()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, t := range all {
			out[t.Key] = true
		}
		return out
	}
	a, b := makeOf(256), makeOf(512)
	f.mu.Lock()
	f.fail = errors.New("boom")
	f.mu.Unlock()
	failed, _ := m.Make(t.Context(), request("ns", 768))
	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	age(a.Key, 3*time.Hour)
	age(b.Key, 2*time.Hour)
	m.Used(a.Key) // a: now the most recently used, and needed a while
	age(a.Key, time.Hour)

	c := makeOf(1024)
	if k := kept(); k[failed.Key] || !k[a.Key] || !k[b.Key] || !k[c.Key] || len(k) != 3 {
		t.Fatalf("kept %v: want the failed one removed first", k)
	}
	d := makeOf(1280)
	if k := kept(); k[b.Key] || !k[a.Key] || !k[c.Key] || !k[d.Key] {
		t.Fatalf("kept %v: want b (least recently used) removed, a (just planned) kept", k)
	}
	// c: named by a clone created, not started; d: just used.
	cs := &store.Container{ID: "c1", SandboxID: "s1", Dir: t.TempDir(), Clone: &store.Clone{Key: c.Key}}
	if err := e.R.Store.PutContainer(cs); err != nil {
		t.Fatal(err)
	}
	m.Used(d.Key)
	if _, err := m.Make(t.Context(), request("ns", 1536)); errdefs.Code(err).String() != "ResourceExhausted" {
		t.Fatalf("a making with every kept template needed: %v, want ResourceExhausted", err)
	}
	if k := kept(); len(k) != 3 || !k[a.Key] || !k[c.Key] || !k[d.Key] {
		t.Fatalf("kept %v after a refused making", k)
	}
	// Once c's clone started, c is no longer needed.
	cs.StartedAt = time.Now().UnixNano()
	if err := e.R.Store.PutContainer(cs); err != nil {
		t.Fatal(err)
	}
	age(c.Key, 4*time.Hour)
	g := makeOf(1536)
	if k := kept(); k[c.Key] || !k[g.Key] || len(k) != 3 {
		t.Fatalf("kept %v: want c removed once its clone started", k)
	}
}

// TestTemplateCgroup: a template's VM is limited to its memory and,
// with CPUMillis, to that much CPU (cpu.max quota over a 100ms period).
func TestTemplateCgroup(t *testing.T) {
	m, _ := newMaker(t, &fakeBoot{})
	req := request("ns", 512)
	cg := m.cgroup(req, "crimux-vm-template-0123456789abcdef")
	if cg.Parent != DefaultParent || cg.CPUQuota != 0 || cg.MemoryLimit < 512<<20 {
		t.Fatalf("no CPU quota set: %+v", cg)
	}
	m.Limits.CPUMillis, m.Parent = 1500, "/elsewhere"
	cg = m.cgroup(req, "crimux-vm-template-0123456789abcdef")
	if cg.Parent != "/elsewhere" || cg.CPUQuota != 150000 || cg.CPUPeriod != 100000 {
		t.Fatalf("1.5 CPUs: %+v, want quota 150000 of period 100000", cg)
	}
}

// TestBackgroundMakingCancelledWhenNoPodAsks: a template made in the
// background goes on while a pod that asked for it is there; once the
// last is forgotten (stopped), its making is cancelled and leaves
// nothing: no VM, no meta (not even a failed one: the next pod that asks
// makes it at once), and its turn is free for another.
func TestBackgroundMakingCancelledWhenNoPodAsks(t *testing.T) {
	f := &fakeBoot{hold: make(chan struct{})}
	defer close(f.hold)
	m, _ := newMaker(t, f)
	req := request("ns", 256)
	if err := m.Start(req, "pod-a"); err != nil {
		t.Fatal(err)
	}
	m.Asks(req, "pod-b")
	testutil.Eventually(t, 5*time.Second, "the making", func() error {
		if now, _, _ := f.counts(); now != 1 {
			return fmt.Errorf("%d making", now)
		}
		return nil
	})
	m.Forget("pod-a")
	m.Forget("pod-other")
	time.Sleep(100 * time.Millisecond)
	if now, _, _ := f.counts(); now != 1 {
		t.Fatal("the making was cancelled while pod-b still asks for it")
	}
	m.Forget("pod-b")
	waitIdle(t, m)
	if _, err := m.Store.Get(m.Key(req)); !errdefs.IsNotFound(err) {
		t.Fatalf("a cancelled making left its meta: %v", err)
	}
	if err := m.Start(request("ns", 512), "pod-c"); err != nil {
		t.Fatalf("Start after the cancelled making: %v, want its turn free", err)
	}
	m.Forget("pod-c")
	waitIdle(t, m)
}
