package vmapi

import (
	"context"
	"fmt"
	"strings"
	"unicode"

	"github.com/crimux/crimux/internal/errdefs"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/vmtypes"
)

// maxForeignNameLen bounds a foreign resource's name (a file name).
const maxForeignNameLen = 255

// ListForeign lists the resources of another crimux identity every VM
// runtime sees.
func (s *Server) ListForeign(ctx context.Context, _ *vmv1.ListForeignRequest) (*vmv1.ListForeignResponse, error) {
	resp := &vmv1.ListForeignResponse{}
	for _, rt := range vmRuntimes(s.routed(ctx)) {
		res, err := rt.vms.ListForeign(ctx)
		if err != nil {
			return nil, fmt.Errorf("runtime %q: list foreign resources: %w", rt.name, err)
		}
		for _, f := range res {
			resp.Resources = append(resp.Resources, &vmv1.ForeignResource{
				Kind: f.Kind, Name: f.Name, Instance: f.Instance, State: f.State, Detail: f.Detail,
			})
		}
	}
	return resp, nil
}

// CollectForeign adopts or deletes one foreign resource. With several VM
// runtimes (there is one per crimux), the first that knows the resource
// acts on it.
func (s *Server) CollectForeign(ctx context.Context, req *vmv1.CollectForeignRequest) (*vmv1.CollectForeignResponse, error) {
	reg := s.routed(ctx)
	if err := validateForeign(req); err != nil {
		return nil, err
	}
	rts := vmRuntimes(reg)
	if len(rts) == 0 {
		return nil, fmt.Errorf("%s/%s: no VM runtime is configured: %w", req.GetKind(), req.GetName(), errdefs.ErrFailedPrecondition)
	}
	var err error
	for _, rt := range rts {
		if req.GetAction() == vmv1.ForeignAction_FOREIGN_ACTION_ADOPT {
			err = rt.vms.AdoptForeign(ctx, req.GetKind(), req.GetName())
		} else {
			err = rt.vms.DeleteForeign(ctx, req.GetKind(), req.GetName())
		}
		if !errdefs.IsNotFound(err) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", req.GetKind(), req.GetName(), err)
	}
	return &vmv1.CollectForeignResponse{}, nil
}

// validateForeign checks a CollectForeign request before any runtime
// sees it.
func validateForeign(req *vmv1.CollectForeignRequest) error {
	switch a := req.GetAction(); a {
	case vmv1.ForeignAction_FOREIGN_ACTION_ADOPT, vmv1.ForeignAction_FOREIGN_ACTION_DELETE:
	default:
		return errdefs.Invalid("action", "%s: want FOREIGN_ACTION_ADOPT or FOREIGN_ACTION_DELETE", a)
	}
	if k := req.GetKind(); k != vmtypes.ForeignDomain && k != vmtypes.ForeignNetns {
		return errdefs.Invalid("kind", "%q: want %s or %s", k, vmtypes.ForeignDomain, vmtypes.ForeignNetns)
	}
	name := req.GetName()
	switch {
	case name == "":
		return errdefs.Invalid("name", "must not be empty")
	case len(name) > maxForeignNameLen:
		return errdefs.Invalid("name", "is %d bytes long, more than %d", len(name), maxForeignNameLen)
	case name == "." || name == ".." || strings.Contains(name, "/"):
		return errdefs.Invalid("name", "%q is not a domain or namespace name", name)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) >= 0:
		return errdefs.Invalid("name", "%q has a control or space character", name)
	}
	return nil
}
