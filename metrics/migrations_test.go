package metrics

import (
	"strings"
	"testing"
	"time"
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

// TestMigrationDurations: every role and result of the duration is
// exported from the start; a migration's time and its switch-over's
// downtime land in their buckets.
func TestMigrationDurations(t *testing.T) {
	m := New(Options{})
	wantLines(t, scrape(t, m),
		`crimux_migration_duration_seconds_count{result="failed",role="incoming"} 0`,
		`crimux_migration_duration_seconds_count{result="succeeded",role="outgoing"} 0`,
		`crimux_migration_downtime_seconds_count 0`)
	m.MigrationTook(MigrationOutgoing, MigrationSucceeded, 42*time.Second)
	m.MigrationTook(MigrationIncoming, MigrationFailed, 3*time.Second)
	m.MigrationDowntime(80 * time.Millisecond)
	wantLines(t, scrape(t, m),
		`crimux_migration_duration_seconds_bucket{result="succeeded",role="outgoing",le="30"} 0`,
		`crimux_migration_duration_seconds_bucket{result="succeeded",role="outgoing",le="60"} 1`,
		`crimux_migration_duration_seconds_sum{result="succeeded",role="outgoing"} 42`,
		`crimux_migration_duration_seconds_count{result="failed",role="incoming"} 1`,
		`crimux_migration_duration_seconds_count{result="succeeded",role="incoming"} 0`,
		`crimux_migration_downtime_seconds_bucket{le="0.05"} 0`,
		`crimux_migration_downtime_seconds_bucket{le="0.1"} 1`,
		`crimux_migration_downtime_seconds_count 1`)
}
