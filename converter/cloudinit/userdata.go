package cloudinit

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"
)

const cloudConfigHeader = "#cloud-config"

// CheckUserData refuses user-data cloud-init would not run: larger than
// MaxUserData, not UTF-8, or neither a cloud-config (a YAML mapping after
// "#cloud-config"), a script ("#!") nor a MIME multipart document.
func CheckUserData(ud []byte) error {
	switch {
	case len(ud) > MaxUserData:
		return fmt.Errorf("is %d bytes, more than %d", len(ud), MaxUserData)
	case !utf8.Valid(ud):
		return fmt.Errorf("is not UTF-8 text")
	case bytes.HasPrefix(ud, []byte("#!")):
		return nil
	case bytes.HasPrefix(ud, []byte("Content-Type: multipart/")):
		return nil
	case !bytes.HasPrefix(ud, []byte(cloudConfigHeader)):
		return fmt.Errorf("must start with %q (YAML), \"#!\" (a script) or a MIME multipart header", cloudConfigHeader)
	}
	_, err := parseCloudConfig(ud)
	return err
}

// parseCloudConfig reads a cloud-config into a mapping.
func parseCloudConfig(ud []byte) (map[string]any, error) {
	var m map[string]any
	if err := yaml.Unmarshal(ud, &m); err != nil {
		return nil, fmt.Errorf("is not valid cloud-config YAML: %v", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// ParseSSHKeys reads authorized keys, one per line (blank lines and lines
// starting with # are skipped); every line must be an SSH public key.
func ParseSSHKeys(text string) ([]string, error) {
	if len(text) > maxKeysText {
		return nil, fmt.Errorf("is %d bytes, more than %d", len(text), maxKeysText)
	}
	var keys []string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err != nil {
			return nil, fmt.Errorf("line %d is not an SSH public key: %v", i+1, err)
		}
		keys = append(keys, line)
	}
	if len(keys) > MaxSSHKeys {
		return nil, fmt.Errorf("holds %d keys, more than %d", len(keys), MaxSSHKeys)
	}
	return keys, nil
}

// mergeUserData adds keys to the user's user-data: into a cloud-config's
// ssh_authorized_keys; next to a script as a
// cloud-config part of a multipart document; alone as a cloud-config. A
// multipart user-data is refused with keys: it should carry them itself.
func mergeUserData(ud []byte, keys []string) ([]byte, error) {
	if len(keys) == 0 {
		if len(ud) == 0 {
			return []byte(cloudConfigHeader + "\n{}\n"), nil
		}
		return ud, nil
	}
	if len(ud) == 0 || bytes.HasPrefix(ud, []byte(cloudConfigHeader)) {
		m, err := parseCloudConfig(ud)
		if err != nil {
			return nil, err
		}
		existing, _ := m["ssh_authorized_keys"].([]any)
		for _, k := range keys {
			existing = append(existing, k)
		}
		m["ssh_authorized_keys"] = existing
		out, err := yaml.Marshal(m)
		if err != nil {
			return nil, err
		}
		return append([]byte(cloudConfigHeader+"\n"), out...), nil
	}
	if !bytes.HasPrefix(ud, []byte("#!")) {
		return nil, fmt.Errorf("a multipart user-data is not merged with SSH keys: put the keys in its cloud-config part")
	}
	keysPart, err := yaml.Marshal(map[string]any{"ssh_authorized_keys": keys})
	if err != nil {
		return nil, err
	}
	return multipartOf(ud, append([]byte(cloudConfigHeader+"\n"), keysPart...))
}

// multipartOf makes a MIME multipart user-data of the user's script and
// crimux's cloud-config part.
func multipartOf(script, keys []byte) ([]byte, error) {
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	for _, p := range []struct {
		typ  string
		data []byte
	}{{"text/x-shellscript", script}, {"text/cloud-config", keys}} {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", p.typ+`; charset="utf-8"`)
		pw, err := w.CreatePart(h)
		if err != nil {
			return nil, err
		}
		if _, err := pw.Write(p.data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	head := fmt.Sprintf("Content-Type: multipart/mixed; boundary=%q\nMIME-Version: 1.0\n\n", w.Boundary())
	return append([]byte(head), body.Bytes()...), nil
}
