package config

import (
	"bytes"
	"fmt"
	"reflect"
	"regexp"
	"strings"
)

// ReferencePath is the configuration reference, generated from Config's
// keys and DefaultTOML's comments (ReferenceMarkdown; go test ./config
// -update rewrites it).
const ReferencePath = "docs/config.md"

// LiveKeys are the keys a reload (SIGHUP, systemctl reload crimux)
// applies to the running crimux; a reload leaves every other key as crimux
// started with it, and logs the ones it ignored (cmd/crimux/reload.go).
var LiveKeys = map[string]bool{"log_level": true, "runtime": true,
	"libvirt.agent_calls_per_vm": true, "libvirt.agent_calls_per_node": true, "libvirt.guest_boot_timeout": true,
	"libvirt.max_snapshots_per_vm": true, "libvirt.gc_interval": true,
	"libvirt.template_max_making": true, "libvirt.template_max_kept": true,
	"libvirt.template_retry_after": true, "libvirt.template_cpu_millis": true,
	"libvirt.migration.bandwidth_mib": true, "libvirt.migration.completion_timeout_per_gib": true,
	"libvirt.migration.progress_timeout": true, "libvirt.migration.target_timeout": true,
	"containerd.call_timeout": true}

// RefKey is one key of the configuration as the reference gives it.
type RefKey struct {
	// Name is the key's dotted path ("libvirt.migration.address"); a
	// [[runtime]] entry's keys are "runtime.name" and so on.
	Name string
	// Type is its TOML type, as an operator writes it.
	Type string
	// Default is its value in DefaultTOML, as written there.
	Default string
	// Doc is DefaultTOML's comment above it (shared by keys written
	// together under one comment).
	Doc string
	// Live: a reload applies it.
	Live bool
}

var (
	sectionLine = regexp.MustCompile(`^\[\[?([a-z_.]+)\]\]?$`)
	keyLine     = regexp.MustCompile(`^([a-z_0-9]+) = (.*)$`)
)

// Reference is every key of Config, in DefaultTOML's order, with its
// documentation. A key of Config that DefaultTOML does not write, or
// writes without a comment, is an error naming it.
func Reference() ([]RefKey, error) { return referenceOf(DefaultTOML) }

// referenceOf is Reference of the commented defaults text.
func referenceOf(text string) ([]RefKey, error) {
	types := keyTypes(reflect.TypeOf(Config{}), "")
	var keys []RefKey
	seen := map[string]bool{}
	section, doc, lastDoc := "", []string{}, ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch m, k := sectionLine.FindStringSubmatch(line), keyLine.FindStringSubmatch(line); {
		case strings.HasPrefix(line, "#") && types[section+commentedKey(line)] != "":
			// A key left unset, written commented out under its comment.
			name := section + commentedKey(line)
			if !seen[name] {
				seen[name] = true
				keys = append(keys, RefKey{Name: name, Type: types[name], Default: "unset", Doc: strings.Join(doc, " "), Live: live(name)})
			}
			doc = nil
		case strings.HasPrefix(line, "#"):
			doc = append(doc, strings.TrimSpace(strings.TrimPrefix(line, "#")))
		case m != nil:
			section, doc, lastDoc = m[1]+".", nil, ""
		case k != nil:
			name := section + k[1]
			if len(doc) > 0 {
				lastDoc, doc = strings.Join(doc, " "), nil
			}
			if seen[name] {
				continue // a second [[runtime]]
			}
			seen[name] = true
			typ, ok := types[name]
			if !ok {
				return nil, fmt.Errorf("DefaultTOML writes %s, which Config has not", name)
			}
			keys = append(keys, RefKey{Name: name, Type: typ, Default: k[2], Doc: lastDoc, Live: live(name)})
		default:
			// A blank line ends a comment that documents no key, and a
			// group of keys under one comment.
			doc, lastDoc = nil, ""
		}
	}
	var missing []string
	for name := range types {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	for _, k := range keys {
		if k.Doc == "" {
			missing = append(missing, k.Name+" (no comment)")
		}
	}
	if len(missing) > 0 {
		return keys, fmt.Errorf("keys of Config not documented in DefaultTOML: %s", strings.Join(missing, ", "))
	}
	return keys, nil
}

// IsLive says whether a reload applies key (a [[runtime]] entry's keys
// are live as a whole).
func IsLive(key string) bool { return live(key) }

// live: a reload applies key (itself, or its whole table, is live).
func live(key string) bool {
	return LiveKeys[key] || LiveKeys[strings.SplitN(key, ".", 2)[0]]
}

// commentedKey is the key a comment line writes commented out ("#
// endpoint = ..."), or "".
func commentedKey(line string) string {
	if k := keyLine.FindStringSubmatch(strings.TrimSpace(strings.TrimPrefix(line, "#"))); k != nil {
		return k[1]
	}
	return ""
}

// keyTypes maps each key of struct t (its toml tags) under prefix to its
// TOML type.
func keyTypes(t reflect.Type, prefix string) map[string]string {
	out := map[string]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("toml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		name := prefix + tag
		ft := f.Type
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(Duration{}) {
			for k, v := range keyTypes(ft, name+".") {
				out[k] = v
			}
			continue
		}
		out[name] = tomlType(ft)
	}
	return out
}

func tomlType(t reflect.Type) string {
	switch {
	case t == reflect.TypeOf(Duration{}):
		return "duration (a string: \"90s\", \"10m\")"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "integer"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return "array of strings"
	}
	return t.String()
}

// ReferenceMarkdown is docs/config.md: each section's keys with their
// type, default, whether a reload applies them, and what they do.
func ReferenceMarkdown() ([]byte, error) {
	keys, err := Reference()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("Generated from crimux's config (`config/config.go`) and the comments of\n")
	b.WriteString("`crimux config default` (`config/default.go`) by `go test ./config -update`;\n")
	b.WriteString("a test fails when this page and the code differ, or a key has no comment.\n")
	b.WriteString("crimux reads `/etc/crimux/config.toml` (`--config`); flags override the keys\n")
	b.WriteString("they name ([node.md](node.md)). **Reload**: *live* keys change on\n")
	b.WriteString("`systemctl reload crimux` (SIGHUP); every other key keeps the value crimux\n")
	b.WriteString("started with until it restarts, and the reload logs the keys it ignored.\n")
	section := "-"
	for _, k := range keys {
		if s := sectionOf(k.Name); s != section {
			section = s
			fmt.Fprintf(&b, "\n## %s\n", sectionTitle(s))
		}
		reload := "restart"
		if k.Live {
			reload = "live"
		}
		fmt.Fprintf(&b, "\n### `%s`\n\n%s; default `%s`; reload: %s.\n\n%s\n", k.Name, k.Type, k.Default, reload, k.Doc)
	}
	return b.Bytes(), nil
}

func sectionOf(name string) string {
	if i := strings.LastIndex(name, "."); i >= 0 {
		return name[:i]
	}
	return ""
}

func sectionTitle(s string) string {
	switch s {
	case "":
		return "Top level"
	case "runtime":
		return "`[[runtime]]` (one table per runtime)"
	}
	return "`[" + s + "]`"
}
