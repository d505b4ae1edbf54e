package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

func (f *fakeVMService) ListForeign(_ context.Context, r *vmv1.ListForeignRequest) (*vmv1.ListForeignResponse, error) {
	f.got(r)
	return &vmv1.ListForeignResponse{Resources: []*vmv1.ForeignResource{
		{Kind: "domain", Name: "crimux-abc", Instance: "crimux-0123", State: "running", Detail: "pod ns/web, sandbox sb9"},
		{Kind: "netns", Name: "crimux-0123_sb9", Instance: "crimux-0123", Detail: "sandbox sb9"},
	}}, nil
}

func (f *fakeVMService) CollectForeign(_ context.Context, r *vmv1.CollectForeignRequest) (*vmv1.CollectForeignResponse, error) {
	f.got(r)
	if r.GetName() == "crimux-nope" {
		return nil, status.Error(codes.NotFound, `domain/crimux-nope: domain "crimux-nope": libvirt has no domain of that name: not found`)
	}
	return &vmv1.CollectForeignResponse{}, nil
}

// TestGCRequests: gc lists; --adopt and --delete send the action, kind
// and name asked for.
func TestGCRequests(t *testing.T) {
	f, ep := serveFake(t)
	adopt, del := vmv1.ForeignAction_FOREIGN_ACTION_ADOPT, vmv1.ForeignAction_FOREIGN_ACTION_DELETE
	for _, tc := range []struct {
		args []string
		want proto.Message
		out  string
	}{
		{[]string{"gc"}, &vmv1.ListForeignRequest{}, "domain/crimux-abc"},
		{[]string{"gc", "--adopt", "domain/crimux-abc"}, &vmv1.CollectForeignRequest{Action: adopt, Kind: "domain", Name: "crimux-abc"}, "domain/crimux-abc: adopted"},
		{[]string{"gc", "--delete=netns/crimux-1234_abcd"}, &vmv1.CollectForeignRequest{Action: del, Kind: "netns", Name: "crimux-1234_abcd"}, "netns/crimux-1234_abcd: deleted"},
	} {
		code, out, errOut := runCLI(append([]string{"--endpoint", ep}, tc.args...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d, stderr %s", tc.args, code, errOut)
		}
		if !proto.Equal(f.lastRequest(), tc.want) {
			t.Fatalf("%v: request %v, want %v", tc.args, f.lastRequest(), tc.want)
		}
		if !strings.Contains(out, tc.out) {
			t.Fatalf("%v: output lacks %q:\n%s", tc.args, tc.out, out)
		}
	}
}

// TestGCOutput: the table names kind/name, instance, state and detail;
// -o json has the .proto's field names.
func TestGCOutput(t *testing.T) {
	_, ep := serveFake(t)
	_, out, _ := runCLI("--endpoint", ep, "gc")
	for _, w := range []string{"KIND/NAME", "INSTANCE", "domain/crimux-abc", "crimux-0123", "running", "pod ns/web", "netns/crimux-0123_sb9"} {
		if !strings.Contains(out, w) {
			t.Fatalf("gc lacks %q:\n%s", w, out)
		}
	}
	_, out, _ = runCLI("--endpoint", ep, "gc", "-o", "json")
	var list struct {
		Resources []struct{ Kind, Name, Instance, State string } `json:"resources"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Resources) != 2 ||
		list.Resources[0].Kind != "domain" || list.Resources[1].Name != "crimux-0123_sb9" || list.Resources[1].State != "" {
		t.Fatalf("gc JSON %s (%v)", out, err)
	}
	code, out, _ := runCLI("--endpoint", ep, "-o", "json", "gc", "--delete", "domain/crimux-abc")
	if code != exitOK || strings.TrimSpace(out) != "{}" {
		t.Fatalf("gc --delete JSON: exit %d, %q", code, out)
	}
}

// TestGCExitCodes: bad KIND/NAME and both actions are usage errors (2,
// nothing sent); a refused call is 1 with its code and message.
func TestGCExitCodes(t *testing.T) {
	f, ep := serveFake(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"gc", "--adopt", "crimux-abc"}, exitUsage, "want KIND/NAME"},
		{[]string{"gc", "--adopt", "disk/x"}, exitUsage, "domain or netns"},
		{[]string{"gc", "--delete", "domain/"}, exitUsage, `"domain/"`},
		{[]string{"gc", "--delete", "netns/a/b"}, exitUsage, "want KIND/NAME"},
		{[]string{"gc", "--adopt", "domain/a", "--delete", "domain/b"}, exitUsage, "one of --adopt and --delete"},
		{[]string{"gc", "domain/crimux-abc"}, exitUsage, "want 0 argument"},
		{[]string{"gc", "--adopt"}, exitUsage, "flag needs an argument"},
		{[]string{"gc", "-o", "xml"}, exitUsage, `-o "xml": want table, json or yaml`},
		{[]string{"gc", "--adopt", "domain/crimux-nope"}, exitCall, `NotFound: domain/crimux-nope: domain "crimux-nope"`},
	} {
		f.got(nil)
		code, _, errOut := runCLI(append([]string{"--endpoint", ep}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.stderr)
		}
		if tc.code == exitUsage && f.lastRequest() != nil {
			t.Errorf("%v: a usage error sent %v", tc.args, f.lastRequest())
		}
	}
}

func TestGCHelp(t *testing.T) {
	for _, args := range [][]string{{"gc", "--help"}, {"gc", "-h", "--adopt", "domain/x"}} {
		code, out, _ := runCLI(args...)
		if code != exitOK {
			t.Errorf("%v: exit %d", args, code)
		}
		for _, w := range []string{"-adopt", "-delete", "KIND/NAME", "domain/crimux-<id>", "netns/<instance>_<sandbox ID>", "never touches"} {
			if !strings.Contains(out, w) {
				t.Errorf("%v: help lacks %q:\n%s", args, w, out)
			}
		}
	}
	if _, out, _ := runCLI("--help"); !strings.Contains(out, "gc ") || !strings.Contains(out, "--adopt") {
		t.Errorf("crimuxctl --help does not mention gc:\n%s", out)
	}
}
