package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/vmtypes"
)

func open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctr(id, sb string, edit func(*Container)) *Container {
	c := &Container{ID: id, SandboxID: sb, Domain: "crimux-" + id, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "vm-" + id}}}
	if edit != nil {
		edit(c)
	}
	return c
}

func putC(t *testing.T, s *Store, cs ...*Container) {
	t.Helper()
	for _, c := range cs {
		if err := s.PutContainer(c); err != nil {
			t.Fatal(err)
		}
	}
}

func ids(cs []*Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	slices.Sort(out)
	return out
}

// TestSandboxRoundTrip: every field comes back, the config through its
// protobuf bytes; Sandboxes lists every record, whatever its intent.
func TestSandboxRoundTrip(t *testing.T) {
	t.Parallel()
	s := open(t)
	in := &Sandbox{ID: "sb1", Handler: "vm", CreatedAt: 42, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
		ContainerID: "c1", NetDown: true, Creating: true,
		Net:    &podnet.Attachment{NetNS: "/run/netns/i_sb1", GuestMAC: "52:54:00:00:00:01", Ready: true},
		Config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "u"}, Hostname: "web-0"}}
	in.Net.IP, in.Net.PrefixLen = "10.0.0.2", 24
	if err := s.PutSandbox(in); err != nil {
		t.Fatal(err)
	}
	got, err := s.Sandbox("sb1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "sb1" || got.Handler != "vm" || got.CreatedAt != 42 || got.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY ||
		got.ContainerID != "c1" || !got.NetDown || !got.Creating || got.Removing {
		t.Fatalf("sandbox read back: %+v", got)
	}
	if got.Net == nil || got.Net.NetNS != "/run/netns/i_sb1" || got.Net.GuestMAC != "52:54:00:00:00:01" || !got.Net.Ready ||
		got.Net.IP != "10.0.0.2" || got.Net.PrefixLen != 24 {
		t.Fatalf("network read back: %+v", got.Net)
	}
	if got.Config.GetMetadata().GetName() != "web" || got.Config.GetMetadata().GetNamespace() != "ns" || got.Config.GetHostname() != "web-0" {
		t.Fatalf("config read back: %v", got.Config)
	}
	if err := s.PutSandbox(&Sandbox{ID: "sb2", Removing: true}); err != nil { // no config
		t.Fatal(err)
	}
	sb2, err := s.Sandbox("sb2")
	if err != nil || sb2.Config == nil || sb2.Config.GetMetadata() != nil || !sb2.Removing {
		t.Fatalf("sandbox without config: %+v, %v; want an empty config", sb2, err)
	}
	all, err := s.Sandboxes()
	if err != nil || len(all) != 2 || all[0].ID != "sb1" || all[1].ID != "sb2" || all[0].Config.GetMetadata().GetName() != "web" {
		t.Fatalf("Sandboxes = %v, %v; want sb1 (Creating) and sb2 (Removing) with their configs", all, err)
	}

	// An update replaces the record.
	got.State, got.Creating = runtimeapi.PodSandboxState_SANDBOX_READY, false
	if err := s.PutSandbox(got); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Sandbox("sb1"); again.State != runtimeapi.PodSandboxState_SANDBOX_READY || again.Creating {
		t.Fatalf("update lost: %+v", again)
	}

	if err := s.DeleteSandbox("sb1"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Sandbox("sb1")
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), `pod sandbox "sb1"`) {
		t.Fatalf("deleted sandbox: %v, want NotFound naming pod sandbox \"sb1\"", err)
	}
	if err := s.DeleteSandbox("sb1"); err != nil {
		t.Fatalf("deleting a missing sandbox: %v, want nil", err)
	}
}

func TestContainerRoundTrip(t *testing.T) {
	t.Parallel()
	s := open(t)
	in := ctr("c1", "sb1", func(c *Container) {
		c.ImageRef, c.Dir, c.LogPath, c.VCPUs, c.MemoryMiB, c.Accel = "sha256:x", "/v/c1", "/log/c1", 2, 512, "kvm"
		c.CreatedAt, c.StartedAt, c.FinishedAt, c.ExitCode = 1, 2, 3, 137
		c.CgroupParent, c.Adopted, c.Reason, c.Message, c.PowerState = "/kubepods/x", true, "Killed", "m", vmtypes.PowerPaused
	})
	putC(t, s, in)
	got, err := s.Container("c1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := got.Config
	want := *in
	want.Config, want.ConfigPB, got.Config, got.ConfigPB = nil, nil, nil, nil
	if fmt.Sprintf("%+v", *got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("container read back:\n got %+v\nwant %+v", *got, want)
	}
	if cfg.GetMetadata().GetName() != "vm-c1" {
		t.Fatalf("config read back: %v", cfg)
	}
	if err := s.DeleteContainer("c1"); err != nil {
		t.Fatal(err)
	}
	for name, get := range map[string]func(string) (*Container, error){"Container": s.Container, "AnyContainer": s.AnyContainer} {
		_, err := get("c1")
		if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), `container "c1"`) {
			t.Errorf("%s of a deleted record: %v, want NotFound naming container \"c1\"", name, err)
		}
	}
}

// TestIntentHidesRecords: a record being created or removed is gone for
// CRI (Container, LiveContainers, ContainersOf) and still there for the
// collector (AnyContainer, Containers).
func TestIntentHidesRecords(t *testing.T) {
	t.Parallel()
	s := open(t)
	putC(t, s,
		ctr("live1", "sb1", nil),
		ctr("live2", "sb2", nil),
		ctr("creating", "sb1", func(c *Container) { c.Creating = true }),
		ctr("removing", "sb1", func(c *Container) { c.Removing = true }),
	)
	for _, id := range []string{"creating", "removing"} {
		_, err := s.Container(id)
		if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), `container "`+id+`"`) {
			t.Errorf("Container(%s) = %v, want NotFound naming it", id, err)
		}
		c, err := s.AnyContainer(id)
		if err != nil || c.ID != id || c.Config.GetMetadata().GetName() != "vm-"+id {
			t.Errorf("AnyContainer(%s) = %+v, %v", id, c, err)
		}
	}
	if c, err := s.Container("live1"); err != nil || c.ID != "live1" {
		t.Fatalf("Container(live1) = %+v, %v", c, err)
	}
	for _, tc := range []struct {
		name string
		list func() ([]*Container, error)
		want string
	}{
		{"Containers", s.Containers, "[creating live1 live2 removing]"},
		{"LiveContainers", s.LiveContainers, "[live1 live2]"},
		{"ContainersOf(sb1)", func() ([]*Container, error) { return s.ContainersOf("sb1") }, "[live1]"},
		{"ContainersOf(sb2)", func() ([]*Container, error) { return s.ContainersOf("sb2") }, "[live2]"},
		{"ContainersOf(none)", func() ([]*Container, error) { return s.ContainersOf("none") }, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := tc.list()
			if err != nil {
				t.Fatal(err)
			}
			if got := "[" + strings.Join(ids(cs), " ") + "]"; got != tc.want {
				t.Fatalf("%s = %s, want %s", tc.name, got, tc.want)
			}
			for _, c := range cs {
				if c.Config.GetMetadata().GetName() != "vm-"+c.ID {
					t.Fatalf("%s: config of %s not decoded: %v", tc.name, c.ID, c.Config)
				}
			}
		})
	}
}

func TestPower(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state runtimeapi.ContainerState
		power vmtypes.PowerState
		want  vmtypes.PowerState
	}{
		{runtimeapi.ContainerState_CONTAINER_RUNNING, "", vmtypes.PowerRunning},
		{runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerPaused, vmtypes.PowerPaused},
		{runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerShutdown, vmtypes.PowerShutdown},
		{runtimeapi.ContainerState_CONTAINER_RUNNING, vmtypes.PowerHibernate, vmtypes.PowerHibernate},
		{runtimeapi.ContainerState_CONTAINER_CREATED, "", ""},
		{runtimeapi.ContainerState_CONTAINER_EXITED, vmtypes.PowerShutdown, ""},
		{runtimeapi.ContainerState_CONTAINER_UNKNOWN, vmtypes.PowerRunning, ""},
	} {
		t.Run(tc.state.String()+"/"+string(tc.power), func(t *testing.T) {
			c := &Container{State: tc.state, PowerState: tc.power}
			if got := c.Power(); got != tc.want {
				t.Fatalf("Power() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRecordsSurviveReopen: the store is on disk.
func TestRecordsSurviveReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	putC(t, s, ctr("c1", "sb1", nil))
	if err := s.PutSandbox(&Sandbox{ID: "sb1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Container("c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sandbox("sb1"); err != nil {
		t.Fatal(err)
	}
}

func TestOpenFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "open VM store") {
		t.Fatalf("Open of a missing dir: %v, want open VM store error", err)
	}
	// A database file that is not bbolt's.
	if err := os.WriteFile(filepath.Join(dir, "vm.db"), []byte(strings.Repeat("not a bolt db ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir); err == nil {
		s.Close()
		t.Fatal("Open of a corrupt file succeeded")
	}
}

// TestCorruptRecords: a record that does not decode is an error, not a
// NotFound, and lists fail with it.
func TestCorruptRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		value string
	}{
		{"bad json", "{"},
		{"bad config", `{"id":"x","config":"/w=="}`}, // 0xff: not protobuf
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			err := s.db.Update(func(tx *bolt.Tx) error {
				for _, b := range [][]byte{bucketSandboxes, bucketContainers} {
					if err := tx.Bucket(b).Put([]byte("x"), []byte(tc.value)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]func() error{
				"Sandbox":      func() error { _, err := s.Sandbox("x"); return err },
				"Sandboxes":    func() error { _, err := s.Sandboxes(); return err },
				"Container":    func() error { _, err := s.Container("x"); return err },
				"AnyContainer": func() error { _, err := s.AnyContainer("x"); return err },
				"Containers":   func() error { _, err := s.Containers(); return err },
			}
			for name, call := range calls {
				if err := call(); err == nil || errdefs.IsNotFound(err) {
					t.Errorf("%s of a corrupt record: %v, want a decoding error", name, err)
				}
			}
		})
	}
}

func TestWrapNotFound(t *testing.T) {
	t.Parallel()
	other := errors.New("disk on fire")
	if got := wrapNotFound("container", "c", other); got != other {
		t.Fatalf("wrapNotFound of another error = %v, want it unchanged", got)
	}
}

// TestPutFails: a config protobuf cannot encode (invalid UTF-8 in a
// string) and a closed store are errors, and nothing is written.
func TestPutFails(t *testing.T) {
	t.Parallel()
	s := open(t)
	bad := ctr("c1", "sb1", func(c *Container) { c.Config.Metadata.Name = "\xff" })
	if err := s.PutContainer(bad); err == nil {
		t.Fatal("PutContainer of an unencodable config succeeded")
	}
	if err := s.PutSandbox(&Sandbox{ID: "sb1", Config: &runtimeapi.PodSandboxConfig{Hostname: "\xff"}}); err == nil {
		t.Fatal("PutSandbox of an unencodable config succeeded")
	}
	if _, err := s.AnyContainer("c1"); !errdefs.IsNotFound(err) {
		t.Fatalf("a failed put wrote a container: %v", err)
	}
	if _, err := s.Sandbox("sb1"); !errdefs.IsNotFound(err) {
		t.Fatalf("a failed put wrote a sandbox: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.PutContainer(ctr("c2", "sb1", nil)); err == nil {
		t.Fatal("PutContainer on a closed store succeeded")
	}
}

// TestPutRawContainer: bytes written as they are; a record this version
// cannot decode is an error, never a NotFound (unknown is not absent).
func TestPutRawContainer(t *testing.T) {
	t.Parallel()
	s := open(t)
	if err := s.PutRawContainer("x", []byte(`{"id": 5}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AnyContainer("x"); err == nil || errdefs.IsNotFound(err) {
		t.Fatalf("AnyContainer of an undecodable record: %v, want a decoding error", err)
	}
	if err := s.PutRawContainer("y", []byte(`{"id":"y","sandbox_id":"sb","state":1}`)); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Container("y"); err != nil || c.SandboxID != "sb" || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("Container of a raw record: %+v, %v", c, err)
	}
}
