package migproxy

import (
	"io"
	"strings"
	"testing"
)

func TestNewTokenIsValidAndFresh(t *testing.T) {
	a, b := NewToken(), NewToken()
	if !validToken(a) || !validToken(b) || a == b {
		t.Errorf("NewToken: %q, %q", a, b)
	}
}

func TestHeaderRoundTripLeavesTheStream(t *testing.T) {
	token := NewToken()
	var b strings.Builder
	if err := writeHeader(&b, token, "disk"); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReader(b.String() + "NBDMAGIC")
	gotToken, gotChannel, err := readHeader(r)
	if err != nil || gotToken != token || gotChannel != "disk" {
		t.Fatalf("readHeader = %q, %q, %v", gotToken, gotChannel, err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "NBDMAGIC" {
		t.Errorf("stream after header: %q, want NBDMAGIC", rest)
	}
}

func TestReadHeaderRefuses(t *testing.T) {
	token := NewToken()
	for name, line := range map[string]string{
		"empty":            "",
		"no newline":       headerMagic + " " + token + " mem",
		"too long":         headerMagic + " " + token + " " + strings.Repeat("m", 200) + "\n",
		"uppercase token":  headerMagic + " " + strings.ToUpper(token) + " mem\n",
		"non-hex token":    headerMagic + " " + strings.Repeat("g", 32) + " mem\n",
		"long token":       headerMagic + " " + token + "0 mem\n",
		"wrong protocol":   "crimux-migration/0 " + token + " mem\n",
		"two spaces":       headerMagic + "  " + token + " mem\n",
		"no channel":       headerMagic + " " + token + "\n",
		"empty channel":    headerMagic + " " + token + " \n",
		"channel with dot": headerMagic + " " + token + " ../mem\n",
		"long channel":     headerMagic + " " + token + " " + strings.Repeat("m", 33) + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			if tok, ch, err := readHeader(strings.NewReader(line)); err == nil {
				t.Errorf("readHeader(%q) = %q, %q, want an error", line, tok, ch)
			}
		})
	}
}

func TestWriteHeaderRefusesWhatReadHeaderWould(t *testing.T) {
	if err := writeHeader(io.Discard, "ABC", "mem"); err == nil {
		t.Error("bad token written")
	}
	if err := writeHeader(io.Discard, NewToken(), "m em"); err == nil {
		t.Error("bad channel written")
	}
}
