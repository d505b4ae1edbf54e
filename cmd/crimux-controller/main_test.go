package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestParse: the defaults, and each bad value refused naming its flag.
func TestParse(t *testing.T) {
	f, err := parse(nil, io.Discard)
	if err != nil || f.caps.PerCluster != 5 || f.caps.PerNode != 2 || f.timeout != 30*time.Minute || !f.leaderElect ||
		f.leaseDuration != 15*time.Second || f.eviction != "" || f.runtimeClasses != "vm,vm-instant" {
		t.Fatalf("defaults %+v, %v", f, err)
	}
	for args, want := range map[string]string{
		"--eviction=evict":       `--eviction "evict"`,
		"--max-migrations=0":     "--max-migrations",
		"--lease-duration=1s":    "--lease-duration",
		"--migration-timeout=0s": "--migration-timeout",
	} {
		if _, err := parse([]string{args}, io.Discard); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", args, err, want)
		}
	}
}
