package template

import (
	"strings"

	"github.com/crimux/crimux/converter/vm"
)

// A template is made by booting its image once in a VM of no pod's: a
// domain named Domain(key), known to the runtime only while it is being
// made (package instant).

// DomainPrefix starts the name of a template's domain; the rest is the
// template's key. It is a crimux domain name (the qemu wrapper and the
// placement server serve it) that no container ID can take.
var DomainPrefix = vm.DomainName("template-")

// Domain is the domain name of template key while it is made.
func Domain(key string) string { return DomainPrefix + key }

// KeyOfDomain is the key of a template's domain name.
func KeyOfDomain(domain string) (string, bool) {
	return strings.CutPrefix(domain, DomainPrefix)
}
