package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// vmClient is a VM API client of crimux c.
func (c *crimux) vmClient() vmv1.VMServiceClient { return vmv1.NewVMServiceClient(c.dial()) }

// requireForgedSourceRefused: node two's crimux refuses a description of
// node one's VM that node one did not seal as it is (the host's root
// directory added as a share, or no seal at all), naming source.seal,
// and its target still waits for the genuine one. Through kubectl
// crimux migrate such descriptions travel in annotations a tenant can
// write.
func (g *migrationRig) requireForgedSourceRefused(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := g.n1.vmClient().GetMigrationSource(ctx, &vmv1.GetMigrationSourceRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: g.ctr1}}})
	if err != nil {
		t.Fatalf("GetMigrationSource on node one: %v", err)
	}
	if len(resp.GetSource().GetSeal().GetSignature()) == 0 {
		t.Fatal("node one's description of its VM is not sealed")
	}
	share := forgedWith(resp.GetSource(), func(s *vmv1.MigrationSource) {
		s.DomainXml = strings.Replace(s.DomainXml, "</devices>",
			"<filesystem type='mount' accessmode='passthrough'><source dir='/'/><target dir='host'/></filesystem></devices>", 1)
	})
	unsealed := forgedWith(resp.GetSource(), func(s *vmv1.MigrationSource) { s.Seal = nil })
	target := g.n2.vmClient()
	for name, src := range map[string]*vmv1.MigrationSource{"the host's / added": share, "unsealed": unsealed} {
		_, err := target.PrepareMigration(ctx, &vmv1.PrepareMigrationRequest{Vm: &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: g.ctr2}}, Source: src})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "source.seal") {
			t.Fatalf("node two: PrepareMigration of a forged description (%s): %v; want InvalidArgument naming source.seal", name, err)
		}
	}
	if r := containerStateReason(t, g.n2, g.ctr2); r != "CONTAINER_RUNNING" {
		t.Fatalf("node two: the target is %q after the forged descriptions, want CONTAINER_RUNNING (waiting)", r)
	}
}

// forgedWith is a copy of s, edited.
func forgedWith(s *vmv1.MigrationSource, edit func(*vmv1.MigrationSource)) *vmv1.MigrationSource {
	out := proto.Clone(s).(*vmv1.MigrationSource)
	edit(out)
	return out
}
