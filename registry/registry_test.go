package registry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/idcodec"
)

// fakeBackend counts its Close calls.
type fakeBackend struct {
	key    string
	codec  *idcodec.Codec
	mu     sync.Mutex
	closed int
}

func (b *fakeBackend) Runtime() runtimeapi.RuntimeServiceClient { return nil }
func (b *fakeBackend) Images() runtimeapi.ImageServiceClient    { return nil }
func (b *fakeBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed++
	return nil
}

func (b *fakeBackend) closeCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// fakeFactory keys backends by endpoint (or name when unset) and records
// what it made. failFor makes New fail for that runtime name.
type fakeFactory struct {
	failFor string
	made    []*fakeBackend
}

func (f *fakeFactory) Key(rt config.Runtime) string {
	if rt.Endpoint != "" {
		return rt.Endpoint
	}
	return rt.Name
}

func (f *fakeFactory) New(_ context.Context, rt config.Runtime, codec *idcodec.Codec) (Backend, error) {
	if rt.Name == f.failFor {
		return nil, errors.New("cannot connect")
	}
	b := &fakeBackend{key: f.Key(rt), codec: codec}
	f.made = append(f.made, b)
	return b, nil
}

func cfgOf(rts ...config.Runtime) config.Config {
	cfg := config.Default()
	cfg.Runtimes = rts
	return cfg
}

var (
	containerdRT = config.Runtime{Name: "containerd", Type: config.TypeContainer, Handlers: []string{"runc"}, Primary: true, Endpoint: "unix:///c.sock"}
	vmRT         = config.Runtime{Name: "vm", Type: config.TypeVM, Handlers: []string{"vm", "kvm"}}
)

// newTwo builds the usual registry: containerd (primary) and vm.
func newTwo(t *testing.T) (*Registry, *fakeFactory, *fakeFactory) {
	t.Helper()
	cf, vf := &fakeFactory{}, &fakeFactory{}
	r, err := New(context.Background(), cfgOf(containerdRT, vmRT), map[string]Factory{config.TypeContainer: cf, config.TypeVM: vf})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(r.Close)
	return r, cf, vf
}

func TestForNewPod(t *testing.T) {
	r, _, _ := newTwo(t)
	tests := []struct {
		name        string
		handler     string
		annotations map[string]string
		want        string   // runtime name
		wantErr     []string // substrings of an InvalidArgument error
	}{
		{name: "empty handler, no annotation: primary", want: "containerd"},
		{name: "handler runc", handler: "runc", want: "containerd"},
		{name: "handler vm", handler: "vm", want: "vm"},
		{name: "second handler of vm", handler: "kvm", want: "vm"},
		{name: "annotation vm", annotations: map[string]string{WorkloadTypeAnnotation: "vm"}, want: "vm"},
		{name: "annotation container", annotations: map[string]string{WorkloadTypeAnnotation: "container"}, want: "containerd"},
		{name: "handler wins over annotation", handler: "runc", annotations: map[string]string{WorkloadTypeAnnotation: "vm"}, want: "containerd"},
		{name: "other annotations: primary", annotations: map[string]string{"io.kubernetes.pod.name": "x"}, want: "containerd"},
		{
			name: "unknown handler", handler: "kata",
			wantErr: []string{`runtime_handler "kata"`, `"runc"`, `"vm"`},
		},
		{
			name: "unknown annotation value", annotations: map[string]string{WorkloadTypeAnnotation: "gpu"},
			wantErr: []string{WorkloadTypeAnnotation, `"gpu"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, err := r.ForNewPod(tt.handler, tt.annotations)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("ForNewPod = %s, want an error", rt.Name)
				}
				if errdefs.Code(err) != codes.InvalidArgument {
					t.Errorf("code = %v, want InvalidArgument", errdefs.Code(err))
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ForNewPod: %v", err)
			}
			if rt.Name != tt.want {
				t.Errorf("ForNewPod = %s, want %s", rt.Name, tt.want)
			}
		})
	}
}

// A runtime may claim the empty handler; pods without a handler or
// annotation then go to it instead of the primary.
func TestForNewPodEmptyHandlerClaimed(t *testing.T) {
	vm := vmRT
	vm.Handlers = []string{""}
	cfg := cfgOf(config.Runtime{Name: "containerd", Type: config.TypeContainer, Primary: true}, vm)
	r, err := New(context.Background(), cfg, map[string]Factory{config.TypeContainer: &fakeFactory{}, config.TypeVM: &fakeFactory{}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if rt, _ := r.ForNewPod("", nil); rt.Name != "vm" {
		t.Errorf("ForNewPod(\"\") = %s, want vm", rt.Name)
	}
	if rt, _ := r.ForHandler(""); rt.Name != "vm" {
		t.Errorf("ForHandler(\"\") = %s, want vm", rt.Name)
	}
}

func TestForID(t *testing.T) {
	r, _, _ := newTwo(t)
	tests := []struct{ id, want string }{
		{"4f2c9e0b1d", "containerd"},
		{"vm--4f2c9e0b1d", "vm"},
		{"kata--4f2c9e0b1d", "containerd"}, // unknown prefix: the primary's
		{"vm-4f2c", "containerd"},
		{"", "containerd"},
	}
	for _, tt := range tests {
		if got := r.ForID(tt.id).Name; got != tt.want {
			t.Errorf("ForID(%q) = %s, want %s", tt.id, got, tt.want)
		}
	}
}

func TestPrefixesAndCodecs(t *testing.T) {
	r, cf, vf := newTwo(t)
	if p := r.Primary(); p.Name != "containerd" || p.Prefix != "" {
		t.Errorf("primary = %s prefix %q, want containerd with no prefix", p.Name, p.Prefix)
	}
	if len(cf.made) != 1 || cf.made[0].codec != nil {
		t.Fatalf("the primary's backend must get no codec; made %d", len(cf.made))
	}
	if len(vf.made) != 1 || vf.made[0].codec == nil {
		t.Fatalf("the vm backend must get a codec; made %d", len(vf.made))
	}
	if got := vf.made[0].codec.Encode("x"); got != "vm--x" {
		t.Errorf("vm codec Encode(x) = %q, want vm--x", got)
	}
	if vm := r.ForID("vm--x"); vm.Prefix != "vm" {
		t.Errorf("vm prefix = %q, want vm", vm.Prefix)
	}
}

// Runtimes whose factory Key is equal share one backend, made once, and
// appear once in Backends(); the primary's backend comes first whatever
// the order of the config, so a runtime sharing it shares its (empty)
// prefix too.
func TestSharedBackends(t *testing.T) {
	kata := config.Runtime{Name: "kata", Type: config.TypeContainer, Handlers: []string{"kata"}, Endpoint: containerdRT.Endpoint}
	other := config.Runtime{Name: "other", Type: config.TypeContainer, Handlers: []string{"other"}, Endpoint: "unix:///other.sock"}
	cf, vf := &fakeFactory{}, &fakeFactory{}
	// Primary listed last on purpose.
	r, err := New(context.Background(), cfgOf(vmRT, kata, other, containerdRT), map[string]Factory{config.TypeContainer: cf, config.TypeVM: vf})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if len(cf.made) != 2 || len(vf.made) != 1 {
		t.Fatalf("made %d container and %d vm backends, want 2 and 1", len(cf.made), len(vf.made))
	}
	var names []string
	for _, rt := range r.Backends() {
		names = append(names, rt.Name)
	}
	if got := strings.Join(names, ","); got != "containerd,vm,other" {
		t.Errorf("Backends() = %s, want containerd,vm,other", got)
	}
	var all []string
	for _, rt := range r.Runtimes() {
		all = append(all, rt.Name)
	}
	if got := strings.Join(all, ","); got != "containerd,vm,kata,other" {
		t.Errorf("Runtimes() = %s, want containerd,vm,kata,other (primary first)", got)
	}
	k, err := r.ForNewPod("kata", nil)
	if err != nil {
		t.Fatal(err)
	}
	if k.Backend != r.Primary().Backend || k.Prefix != "" {
		t.Errorf("kata: backend shared = %v, prefix %q; want the primary's backend and no prefix", k.Backend == r.Primary().Backend, k.Prefix)
	}
	o, _ := r.ForNewPod("other", nil)
	if o.Prefix != "other" || r.ForID("other--x") != o {
		t.Errorf("other: prefix %q, ForID(other--x) = %s; want its own prefix", o.Prefix, r.ForID("other--x").Name)
	}
	// Close closes each backend once, shared or not.
	r.Close()
	for _, b := range append(cf.made, vf.made...) {
		if n := b.closeCount(); n != 1 {
			t.Errorf("backend %s closed %d times, want 1", b.key, n)
		}
	}
}

func TestNewClosesBackendsOnError(t *testing.T) {
	tests := []struct {
		name     string
		cfg      config.Config
		vm       *fakeFactory // nil: no vm factory in this build
		wantErr  []string
		wantCode codes.Code // OK: not checked
		wantMade int        // container backends made (and closed)
	}{
		{
			name:     "factory fails",
			cfg:      cfgOf(containerdRT, vmRT),
			vm:       &fakeFactory{failFor: "vm"},
			wantErr:  []string{`runtime "vm"`, "cannot connect"},
			wantMade: 1,
		},
		{
			name:     "type not in this build",
			cfg:      cfgOf(containerdRT, vmRT),
			wantErr:  []string{`runtime "vm"`, `type "vm"`},
			wantMade: 1,
			wantCode: codes.InvalidArgument,
		},
		{
			name:     "no primary",
			cfg:      cfgOf(config.Runtime{Name: "containerd", Type: config.TypeContainer}),
			wantErr:  []string{"no primary"},
			wantMade: 1,
			wantCode: codes.InvalidArgument,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cf := &fakeFactory{}
			factories := map[string]Factory{config.TypeContainer: cf}
			if tt.vm != nil {
				factories[config.TypeVM] = tt.vm
			}
			r, err := New(context.Background(), tt.cfg, factories)
			if err == nil {
				r.Close()
				t.Fatal("New succeeded, want an error")
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if tt.wantCode != codes.OK && errdefs.Code(err) != tt.wantCode {
				t.Errorf("code = %v, want %v", errdefs.Code(err), tt.wantCode)
			}
			if len(cf.made) != tt.wantMade {
				t.Fatalf("made %d backends, want %d", len(cf.made), tt.wantMade)
			}
			for _, b := range cf.made {
				if n := b.closeCount(); n != 1 {
					t.Errorf("backend %s closed %d times after a failed New, want 1", b.key, n)
				}
			}
		})
	}
}
