package store

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestFormatVersion: a store says which format it is in; a crimux opening
// a store of a newer format refuses it, naming the file and both versions,
// and leaves every byte as it was. An older store (no version) is read and
// marked with this one.
func TestFormatVersion(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutSandbox(&Sandbox{ID: "0123456789abcdef0123456789abcdef"}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	path := filepath.Join(dir, "vm.db")
	setFormat(t, path, "99")
	before, _ := os.ReadFile(path)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "format 99") ||
		!strings.Contains(err.Error(), "newer crimux") {
		t.Fatalf("open a format-99 store: %v; want a refusal naming the file and the format", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("the refused store was rewritten")
	}

	setFormat(t, path, "") // a store of crimux before formats: no key
	st, err = Open(dir)
	if err != nil {
		t.Fatalf("open a store without a format: %v", err)
	}
	defer st.Close()
	if _, err := st.Sandbox("0123456789abcdef0123456789abcdef"); err != nil {
		t.Fatalf("its record: %v", err)
	}
	var got string
	st.db.View(func(tx *bolt.Tx) error { got = string(tx.Bucket(bucketMeta).Get(keyFormat)); return nil })
	if got != strconv.Itoa(FormatVersion) {
		t.Fatalf("format after open = %q, want %d", got, FormatVersion)
	}
}

func setFormat(t *testing.T, path, v string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if v == "" {
			return b.Delete(keyFormat)
		}
		return b.Put(keyFormat, []byte(v))
	})
	if err != nil {
		t.Fatal(err)
	}
}
