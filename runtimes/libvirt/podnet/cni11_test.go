package podnet

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// fakeCNI is libcni as the manager sees it: DEL blocks until released
// when delGate is set, GC records the lists it is given and blocks until
// released when gcGate is set, STATUS answers statusErr.
type fakeCNI struct {
	delStarted, gcStarted chan string
	delGate, gcGate       chan struct{}
	statusErr             error

	mu       sync.Mutex
	calls    []string // "DEL id", "GC" in order
	gcLists  [][]types.GCAttachment
	statuses int
}

func (f *fakeCNI) note(s string) { f.mu.Lock(); f.calls = append(f.calls, s); f.mu.Unlock() }

func (f *fakeCNI) AddNetworkList(context.Context, *libcni.NetworkConfigList, *libcni.RuntimeConf) (types.Result, error) {
	return nil, errors.New("not used")
}

func (f *fakeCNI) DelNetworkList(_ context.Context, _ *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	if f.delStarted != nil {
		f.delStarted <- rt.ContainerID
	}
	if f.delGate != nil {
		<-f.delGate
	}
	f.note("DEL " + rt.ContainerID)
	return nil
}

func (f *fakeCNI) GCNetworkList(_ context.Context, _ *libcni.NetworkConfigList, args *libcni.GCArgs) error {
	f.mu.Lock()
	f.gcLists = append(f.gcLists, args.ValidAttachments)
	f.mu.Unlock()
	if f.gcStarted != nil {
		f.gcStarted <- "GC"
	}
	if f.gcGate != nil {
		<-f.gcGate
	}
	f.note("GC")
	return nil
}

func (f *fakeCNI) GetStatusNetworkList(context.Context, *libcni.NetworkConfigList) error {
	f.mu.Lock()
	f.statuses++
	f.mu.Unlock()
	return f.statusErr
}

const conflist11 = `{"cniVersion":"1.1.0","name":"pods","plugins":[
 {"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}}]}`

func fakeManager(t *testing.T, conflist string, cni *fakeCNI) *Manager {
	t.Helper()
	dir := t.TempDir()
	writeConf(t, dir, "10-pods.conflist", conflist)
	return newManager(Config{ConfDir: dir, NetnsDir: t.TempDir(), Instance: "me"}, cni, testLogger(t))
}

func live(ids ...string) func(context.Context) ([]string, error) {
	return func(context.Context) ([]string, error) { return ids, nil }
}

func names(l []types.GCAttachment) string {
	var out []string
	for _, a := range l {
		out = append(out, a.ContainerID+"/"+a.IfName)
	}
	return strings.Join(out, ",")
}

// teardownAsync runs a pod's Teardown (its DEL) in the background.
func teardownAsync(m *Manager, id string) chan error {
	done := make(chan error, 1)
	go func() {
		done <- m.Teardown(context.Background(), &Pod{SandboxID: id},
			&Attachment{NetNS: filepath.Join(m.cfg.NetnsDir, "absent"), Conf: []byte(conflist11)})
	}()
	return done
}

// TestGCNamesAnAttachmentWhoseDelIsInFlight: a pod the store no longer
// lists while its DEL runs is still on the GC list.
func TestGCNamesAnAttachmentWhoseDelIsInFlight(t *testing.T) {
	cni := &fakeCNI{delStarted: make(chan string, 1), delGate: make(chan struct{})}
	m := fakeManager(t, conflist11, cni)
	done := teardownAsync(m, "going")
	<-cni.delStarted
	if _, err := m.GC(context.Background(), live("kept")); err != nil {
		t.Fatal(err)
	}
	close(cni.delGate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := names(cni.gcLists[0]); got != "going/eth0,kept/eth0" {
		t.Fatalf("GC list = %s, want the pod whose DEL is in flight and the live one", got)
	}
}

// TestAddOrDelWaitsForAGCRound: a DEL (or ADD: the same registry) asked
// for while a GC round runs starts only once it is over, so no plugin
// call of a pod the round omits overlaps it.
func TestAddOrDelWaitsForAGCRound(t *testing.T) {
	cni := &fakeCNI{gcStarted: make(chan string, 1), gcGate: make(chan struct{})}
	m := fakeManager(t, conflist11, cni)
	gcDone := make(chan error, 1)
	go func() { _, err := m.GC(context.Background(), live("kept")); gcDone <- err }()
	<-cni.gcStarted
	done := teardownAsync(m, "late")
	select {
	case err := <-done:
		t.Fatalf("DEL ran during the GC round (err %v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(cni.gcGate)
	if err := <-gcDone; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cni.calls, ";"); got != "GC;DEL late" {
		t.Fatalf("calls = %s, want the GC round finished before the DEL", got)
	}
}

// TestGCSkippedWhenTheLiveListFails: a short list would release live
// addresses, so none is sent.
func TestGCSkippedWhenTheLiveListFails(t *testing.T) {
	cni := &fakeCNI{}
	m := fakeManager(t, conflist11, cni)
	_, err := m.GC(context.Background(), func(context.Context) ([]string, error) { return nil, errors.New("containerd down") })
	if err == nil || !strings.Contains(err.Error(), "containerd down") || len(cni.gcLists) != 0 {
		t.Fatalf("err = %v, GC calls %d; want the round skipped, naming why", err, len(cni.gcLists))
	}
}

// TestOlderCNIVersionsAsBefore: a 1.0.0 network gets no GC and no
// STATUS, and is ready; it is logged once.
func TestOlderCNIVersionsAsBefore(t *testing.T) {
	cni := &fakeCNI{statusErr: errors.New("would fail")}
	m := fakeManager(t, testConflist, cni)
	for i := 0; i < 3; i++ {
		if err := m.Status(context.Background()); err != nil {
			t.Fatalf("Status of a 1.0.0 network: %v, want ready", err)
		}
		if n, err := m.GC(context.Background(), live("a")); err != nil || n != 0 {
			t.Fatalf("GC of a 1.0.0 network: %d, %v", n, err)
		}
	}
	if len(cni.gcLists) != 0 || cni.statuses != 0 {
		t.Fatalf("GC calls %d, STATUS calls %d; want none", len(cni.gcLists), cni.statuses)
	}
	if len(m.oldNetworks) != 1 {
		t.Fatalf("old networks noted: %v", m.oldNetworks)
	}
}

// TestStatusCarriesThePluginsMessage: a failing STATUS is not ready,
// naming the network and the plugin's words.
func TestStatusCarriesThePluginsMessage(t *testing.T) {
	cni := &fakeCNI{statusErr: errors.New(`plugin type="bridge" failed (status): no IPAM`)}
	m := fakeManager(t, conflist11, cni)
	err := m.Status(context.Background())
	if !errors.Is(err, ErrNetworkNotReady) || !strings.Contains(err.Error(), "network pods: plugin bridge: ") || !strings.Contains(err.Error(), "no IPAM") {
		t.Fatalf("Status = %v", err)
	}
	cni.statusErr = nil
	if err := m.Status(context.Background()); err != nil {
		t.Fatalf("recovered Status = %v", err)
	}
	m2 := fakeManager(t, conflist11, cni)
	m2.cfg.ConfDir = t.TempDir()
	if err := m2.Status(context.Background()); !errors.Is(err, ErrNetworkNotReady) || !errors.Is(err, ErrNoConfig) && !strings.Contains(err.Error(), "no CNI network config") {
		t.Fatalf("Status without a config = %v", err)
	}
}
