package metrics

import (
	"strings"
	"testing"
)

// TestMigrations: every role and result is exported from the start at 0;
// a leaving VM's progress is a series of its own while it leaves and
// goes when its migration ends.
func TestMigrations(t *testing.T) {
	m := New(Options{})
	wantLines(t, scrape(t, m),
		`crimux_migrations_total{result="failed",role="incoming"} 0`,
		`crimux_migrations_total{result="succeeded",role="outgoing"} 0`)
	m.MigrationProgress("abc", 1<<20, 4096)
	wantLines(t, scrape(t, m),
		`crimux_migration_remaining_bytes{container="abc"} 1.048576e+06`,
		`crimux_migration_dirty_rate_bytes{container="abc"} 4096`)
	m.MigrationEnded("abc", MigrationOutgoing, MigrationSucceeded)
	text := scrape(t, m)
	wantLines(t, text, `crimux_migrations_total{result="succeeded",role="outgoing"} 1`)
	if strings.Contains(text, `container="abc"`) {
		t.Errorf("an ended migration's progress is still exported:\n%s", text)
	}
}
