package config

import (
	"strings"
	"testing"
	"time"
)

// TestTemplateDefaults: templates serve one namespace, one is made at a
// time, eight are kept, a failed one waits ten minutes, a template's VM
// gets one CPU.
func TestTemplateDefaults(t *testing.T) {
	l := Default().Libvirt
	if l.TemplateShareAcrossNamespaces || l.TemplateMaxMaking != 1 || l.TemplateMaxKept != 8 ||
		l.TemplateRetryAfter.Duration != 10*time.Minute || l.TemplateCPUMillis != 1000 {
		t.Fatalf("template defaults: %+v", l)
	}
}

// TestValidateTemplates: the template bounds are checked.
func TestValidateTemplates(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Libvirt)
		want string
	}{
		"no making":       {func(l *Libvirt) { l.TemplateMaxMaking = 0 }, "libvirt.template_max_making"},
		"none kept":       {func(l *Libvirt) { l.TemplateMaxKept = 0 }, "libvirt.template_max_kept"},
		"no retry wait":   {func(l *Libvirt) { l.TemplateRetryAfter = Duration{} }, "libvirt.template_retry_after"},
		"negative quota":  {func(l *Libvirt) { l.TemplateCPUMillis = -1 }, "libvirt.template_cpu_millis"},
		"a huge quota":    {func(l *Libvirt) { l.TemplateCPUMillis = 1 << 40 }, "libvirt.template_cpu_millis"},
		"too many making": {func(l *Libvirt) { l.TemplateMaxMaking = 1000 }, "libvirt.template_max_making"},
	} {
		c := Default()
		tc.edit(&c.Libvirt)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, tc.want)
		}
	}
	c := Default()
	c.Libvirt.TemplateCPUMillis, c.Libvirt.TemplateShareAcrossNamespaces = 0, true
	if err := c.Validate(); err != nil {
		t.Errorf("no CPU quota, shared templates: %v", err)
	}
}
