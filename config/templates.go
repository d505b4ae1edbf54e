package config

import (
	"fmt"
	"time"
)

// Upper bounds of the template options: more template VMs at once than
// this is a typo (each is a VM no pod is charged for), and a template's
// VM is no bigger than a large pod's.
const (
	maxTemplateMaking    = 64
	maxTemplateKept      = 4096
	maxTemplateCPUMillis = 64000
)

// validateTemplates checks the bounds on VM templates: how many are made
// at once and kept, when a failed one is made again, their VMs' CPU.
func validateTemplates(l Libvirt) []error {
	var errs []error
	if l.TemplateMaxMaking < 1 || l.TemplateMaxMaking > maxTemplateMaking {
		errs = append(errs, fmt.Errorf("libvirt.template_max_making: %d must be between 1 and %d", l.TemplateMaxMaking, maxTemplateMaking))
	}
	if l.TemplateMaxKept < 1 || l.TemplateMaxKept > maxTemplateKept {
		errs = append(errs, fmt.Errorf("libvirt.template_max_kept: %d must be between 1 and %d", l.TemplateMaxKept, maxTemplateKept))
	}
	if l.TemplateRetryAfter.Duration < time.Second {
		errs = append(errs, fmt.Errorf("libvirt.template_retry_after: %s is less than a second", l.TemplateRetryAfter.Duration))
	}
	if l.TemplateCPUMillis < 0 || l.TemplateCPUMillis > maxTemplateCPUMillis {
		errs = append(errs, fmt.Errorf("libvirt.template_cpu_millis: %d must be between 0 (no quota) and %d", l.TemplateCPUMillis, maxTemplateCPUMillis))
	}
	return errs
}
