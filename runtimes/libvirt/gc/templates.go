package gc

import (
	"slices"

	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// collectTemplateDomain removes a template's domain of this crimux that
// no making owns: one left by a crimux that stopped while making it (its
// template is failed: instant.Maker.Recover). Its qemu runs as a uid
// crimux no longer knows, so it goes in the first pass, before any pod
// may get that uid. Another crimux's (another instance on the same
// libvirtd, making its own template right now) is foreign: left alone.
func (r *Collector) collectTemplateDomain(l virt.Libvirt, d virt.Domain, rep *GCReport) {
	if r.Making != nil && r.Making.IsMakingTemplate(d.Name) {
		return
	}
	if meta, ok := domainMetadata(l, d); !ok || meta.Instance != r.Opts.Instance {
		rep.Foreign = append(rep.Foreign, d.Name)
		return
	}
	if err := core.DestroyAndUndefine(l, d.Name); err != nil {
		rep.Pending++
		r.Log.Warn("a template's domain left by an earlier crimux not removed", "domain", d.Name, "err", err)
		return
	}
	rep.Domains++
	r.Log.Info("a template's domain left by an earlier crimux removed", "domain", d.Name)
}

// collectTemplates removes the templates of the images whose cache
// entries were removed (their images gone from containerd).
func (r *Collector) collectTemplates(digests []string) {
	if r.Templates == nil {
		return
	}
	all, err := r.Templates.List()
	if err != nil {
		r.Log.Warn("list the VM templates", "err", err)
		return
	}
	for _, t := range all {
		if t.State == template.Making || !slices.Contains(digests, t.ImageDigest) {
			continue
		}
		if err := r.Templates.Remove(t.Key); err != nil {
			r.Log.Warn("a template of a removed image not removed", "template", t.Key, "err", err)
			continue
		}
		r.Log.Info("template removed with its image", "template", t.Key, "image", t.Image)
	}
}
