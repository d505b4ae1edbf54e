package vmtypes

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/crimux/crimux/internal/errdefs"
)

func TestValidateSnapshotName(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ok    bool
		words string
	}{
		{"before-upgrade", true, ""},
		{"v1.2_3", true, ""},
		{strings.Repeat("a", MaxSnapshotNameLen), true, ""},
		{"", false, "must not be empty"},
		{strings.Repeat("a", 300), false, "300 bytes long"},
		{"../x", false, `"/"`},
		{"a/b", false, `"/"`},
		{"a..b", false, `".."`},
		{"..", false, `".."`},
		{"bad\x00name", false, "control characters"},
		{"tab\there", false, "control characters"},
		{"new\nline", false, "control characters"},
		{"\xff", false, "control characters"},
		{"snap shot", false, "not allowed"},
		{"é", false, "not allowed"},
		{"-flag", false, "start with a letter or a digit"},
		{".hidden", false, "start with a letter or a digit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateSnapshotName(tc.name)
			if tc.ok {
				if err != nil {
					t.Fatalf("ValidateSnapshotName(%q) = %v, want nil", tc.name, err)
				}
				return
			}
			if errdefs.Code(err) != codes.InvalidArgument {
				t.Fatalf("ValidateSnapshotName(%q) = %v, want InvalidArgument", tc.name, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "snapshot_name") || !strings.Contains(msg, tc.words) {
				t.Fatalf("error %q does not name snapshot_name and %q", msg, tc.words)
			}
			if len(err.Error()) > 200 {
				t.Fatalf("error message is %d bytes: long names must be shortened", len(err.Error()))
			}
		})
	}
}

// TestValidateSnapshotNameShortensLongNames: the name in the message is
// cut to 40 bytes and marked so.
func TestValidateSnapshotNameShortensLongNames(t *testing.T) {
	name := strings.Repeat("b", 41) + "/"
	err := ValidateSnapshotName(name)
	if err == nil || !strings.Contains(err.Error(), strings.Repeat("b", 40)+`..."`) || strings.Contains(err.Error(), strings.Repeat("b", 41)) {
		t.Fatalf("error %v does not show the name cut to 40 bytes", err)
	}
}

func TestPowerState(t *testing.T) {
	for _, tc := range []struct {
		p               PowerState
		valid, guestOff bool
	}{
		{PowerRunning, true, false},
		{PowerPaused, true, false},
		{PowerShutdown, true, true},
		{PowerHibernate, true, true},
		{"", false, false},
		{"running", false, false}, // names are case-sensitive
		{"Sleeping", false, false},
	} {
		t.Run(string(tc.p), func(t *testing.T) {
			if got := tc.p.Valid(); got != tc.valid {
				t.Errorf("%q.Valid() = %v, want %v", tc.p, got, tc.valid)
			}
			if got := tc.p.GuestOff(); got != tc.guestOff {
				t.Errorf("%q.GuestOff() = %v, want %v", tc.p, got, tc.guestOff)
			}
		})
	}
}

func TestBeforeAct(t *testing.T) {
	if err := BeforeAct(context.Background()); err != nil {
		t.Fatalf("BeforeAct without a hook: %v", err)
	}
	calls := 0
	ctx := WithBeforeAct(context.Background(), func() error { calls++; return errors.New("record not written") })
	if err := BeforeAct(ctx); err == nil || calls != 1 {
		t.Fatalf("BeforeAct = %v after %d calls; want the hook's error, once", err, calls)
	}
}
