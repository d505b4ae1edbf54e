package vmapi_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/vmtypes"
)

func foreignVMs() *fakeVMs {
	vms := newVMs()
	vms.foreign = []vmtypes.ForeignResource{
		{Kind: "domain", Name: "crimux-abc", Instance: "crimux-0123", State: "running", Detail: "pod ns/web, sandbox sb9"},
		{Kind: "netns", Name: "crimux-0123_sb9", Instance: "crimux-0123", Detail: "sandbox sb9"},
	}
	return vms
}

// TestForeign: ListForeign converts what the runtime reports;
// CollectForeign reaches the runtime's adopt or delete with kind and name.
func TestForeign(t *testing.T) {
	ctx := context.Background()
	vms := foreignVMs()
	c := newClient(t, vms)
	list, err := c.ListForeign(ctx, &vmv1.ListForeignRequest{})
	if err != nil || len(list.Resources) != 2 {
		t.Fatalf("ListForeign = %v, %v", list, err)
	}
	if r := list.Resources[0]; r.Kind != "domain" || r.Name != "crimux-abc" || r.Instance != "crimux-0123" || r.State != "running" || r.Detail == "" {
		t.Fatalf("ListForeign resource = %v", r)
	}
	for _, tc := range []struct {
		req  *vmv1.CollectForeignRequest
		call string
	}{
		{&vmv1.CollectForeignRequest{Action: vmv1.ForeignAction_FOREIGN_ACTION_ADOPT, Kind: "domain", Name: "crimux-abc"}, "AdoptForeign domain crimux-abc"},
		{&vmv1.CollectForeignRequest{Action: vmv1.ForeignAction_FOREIGN_ACTION_DELETE, Kind: "netns", Name: "crimux-0123_sb9"}, "DeleteForeign netns crimux-0123_sb9"},
	} {
		if _, err := c.CollectForeign(ctx, tc.req); err != nil {
			t.Fatalf("CollectForeign(%v): %v", tc.req, err)
		}
		if got := vms.lastCall(); got != tc.call {
			t.Fatalf("CollectForeign(%v) called %q, want %q", tc.req, got, tc.call)
		}
	}
}

// TestForeignBadInput: each error names its field; nothing invalid
// reaches the runtime; the runtime's NotFound names the resource.
func TestForeignBadInput(t *testing.T) {
	vms := foreignVMs()
	c := newClient(t, vms)
	adopt, del := vmv1.ForeignAction_FOREIGN_ACTION_ADOPT, vmv1.ForeignAction_FOREIGN_ACTION_DELETE
	for _, tc := range []struct {
		req   *vmv1.CollectForeignRequest
		code  codes.Code
		words []string
	}{
		{&vmv1.CollectForeignRequest{Kind: "domain", Name: "crimux-abc"}, codes.InvalidArgument, []string{"action", "FOREIGN_ACTION_UNSPECIFIED"}},
		{&vmv1.CollectForeignRequest{Action: 9, Kind: "domain", Name: "crimux-abc"}, codes.InvalidArgument, []string{"action"}},
		{&vmv1.CollectForeignRequest{Action: adopt, Kind: "disk", Name: "x"}, codes.InvalidArgument, []string{"kind", `"disk"`, "domain or netns"}},
		{&vmv1.CollectForeignRequest{Action: del, Kind: "netns"}, codes.InvalidArgument, []string{"name", "empty"}},
		{&vmv1.CollectForeignRequest{Action: del, Kind: "netns", Name: "../etc"}, codes.InvalidArgument, []string{"name", `"../etc"`}},
		{&vmv1.CollectForeignRequest{Action: del, Kind: "netns", Name: "a\nb"}, codes.InvalidArgument, []string{"name", "control"}},
		{&vmv1.CollectForeignRequest{Action: del, Kind: "domain", Name: strings.Repeat("x", 300)}, codes.InvalidArgument, []string{"name", "300 bytes"}},
		{&vmv1.CollectForeignRequest{Action: adopt, Kind: "domain", Name: "crimux-nope"}, codes.NotFound, []string{"domain/crimux-nope", `"crimux-nope"`}},
	} {
		vms.calls = nil
		_, err := c.CollectForeign(context.Background(), tc.req)
		st := status.Convert(err)
		if st.Code() != tc.code {
			t.Fatalf("CollectForeign(%v) = %v, want code %s", tc.req, err, tc.code)
		}
		for _, w := range tc.words {
			if !strings.Contains(st.Message(), w) {
				t.Fatalf("CollectForeign(%v): message %q does not name %q", tc.req, st.Message(), w)
			}
		}
		if tc.code == codes.InvalidArgument && vms.lastCall() != "" {
			t.Fatalf("invalid request reached the runtime: %s", vms.lastCall())
		}
	}
}
