package migrate

import (
	"errors"
	"fmt"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/migration"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/vmtypes"
)

// A migration's descriptions are sealed by the node that makes them and
// opened by the node that acts on them (migration.Node.Seal): a source
// description names the domain the target's libvirtd defines, a target's
// answer the domain the source's libvirtd sends there and where. Each
// is bound to its pod's namespace: a description made for one tenant's
// pod is nothing to another's.

// SealSource and SealTarget are the purposes a source description and a
// target's answer are sealed for.
const (
	SealSource = "crimux migration source v1"
	SealTarget = "crimux migration target v1"
)

// SourcePayload is what the seal of s, made for a pod of namespace,
// covers.
func SourcePayload(namespace string, s vmtypes.MigrationSource) []byte {
	return migration.Payload(namespace, s.DomainXML, s.GuestMAC, s.ImageDigest)
}

// TargetPayload is what the seal of t, prepared for a pod of namespace,
// covers.
func TargetPayload(namespace string, t vmtypes.MigrationTarget) []byte {
	return migration.Payload(append([]string{namespace, t.LibvirtURI, t.Address, t.Token, t.DomainXML, t.DomainName}, t.Disks...)...)
}

// namespaceOf is the namespace of container c's pod.
func (r *Room) namespaceOf(c *store.Container) (string, error) {
	sb, err := r.Store.Sandbox(c.SandboxID)
	if err != nil {
		return "", fmt.Errorf("the pod of %s: %w", c.ID, err)
	}
	return sb.Config.GetMetadata().GetNamespace(), nil
}

// sealSourceOf seals src, made for container c's pod.
func (r *Room) sealSourceOf(c *store.Container, src *vmtypes.MigrationSource) error {
	ns, err := r.namespaceOf(c)
	if err != nil {
		return err
	}
	src.Seal, err = r.MigrationNode().Seal(SealSource, SourcePayload(ns, *src))
	return err
}

// openSource checks src was sealed by a node of the cluster for a pod
// of container c's namespace, unchanged.
func (r *Room) openSource(c *store.Container, src vmtypes.MigrationSource) error {
	ns, err := r.namespaceOf(c)
	if err != nil {
		return err
	}
	err = r.MigrationNode().Open(SealSource, SourcePayload(ns, src), src.Seal)
	if errors.Is(err, migration.ErrSeal) {
		return errdefs.Invalid("source.seal", "the source's description is refused: %v: only what a node's crimux made (GetMigrationSource), unchanged, for a pod of namespace %q is acted on", err, ns)
	}
	return err // nil, or migration off on this node
}

// sealTargetOf seals t, prepared for container c's pod.
func (r *Room) sealTargetOf(c *store.Container, t *vmtypes.MigrationTarget) error {
	ns, err := r.namespaceOf(c)
	if err != nil {
		return err
	}
	t.Seal, err = r.MigrationNode().Seal(SealTarget, TargetPayload(ns, *t))
	return err
}

// openTarget checks t was sealed by a node of the cluster for a pod of
// container c's namespace, unchanged.
func (r *Room) openTarget(c *store.Container, t vmtypes.MigrationTarget) error {
	ns, err := r.namespaceOf(c)
	if err != nil {
		return err
	}
	err = r.MigrationNode().Open(SealTarget, TargetPayload(ns, t), t.Seal)
	if errors.Is(err, migration.ErrSeal) {
		return errdefs.Invalid("target.seal", "the target's answer is refused: %v: only what a node's crimux prepared (PrepareMigration), unchanged, for a pod of namespace %q is acted on", err, ns)
	}
	return err // nil, or migration off on this node
}
