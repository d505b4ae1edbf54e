package e2e

import (
	"regexp"
	"testing"
)

// TestConsoleParsing checks the harness's reading of a guest's console
// without a guest: virtlogd's log may end in the middle of a line, and
// a value read from that half line is cut short (seen in CI: a disk
// marker "pow" for "power-d5ccefef", a serial "dev-" for "dev-xvdb").
func TestConsoleParsing(t *testing.T) {
	disk := regexp.MustCompile(`(?m)^CRIMUX-DISK: (\S+)`)
	for _, tc := range []struct{ log, want string }{
		{"CRIMUX-VM-BOOTED\r\nCRIMUX-DISK: pow", ""},
		{"CRIMUX-VM-BOOTED\r\nCRIMUX-DISK: power-d5ccefef\r\n", "power-d5ccefef"},
		{"CRIMUX-DISK: power-d5ccefef\r\nCRIMUX-UPT", "power-d5ccefef"},
	} {
		got := ""
		if m := disk.FindStringSubmatch(completeLines(tc.log)); m != nil {
			got = m[1]
		}
		if got != tc.want {
			t.Errorf("disk marker in %q: %q, want %q", tc.log, got, tc.want)
		}
	}
	re := resultPattern([]string{"ab12", "cd34"})
	for _, tc := range []struct{ log, want string }{
		{"CRIMUX-R-ab12:0:dev-", ""},                                     // cut short
		{"CRIMUX-R-ab12:0:dev-xvdb:ab12", ""},                            // no newline yet
		{"CRIMUX-R-ab12:0:dev-xvdb:ab12\r\n", "0:dev-xvdb"},              // whole
		{"CRIMUX-R-cd34:1::cd34\r\n", "1:"},                              // a later typing's
		{"CRIMUX-R-ab12:0:deO=; echo \"CRIMUX-R\"\"-cd34\r\n", ""},       // mixed with an echo
		{"/ # O=; cat x; echo \"CRIMUX-R\"\"-ab12:$?:$O:ab12\"\r\n", ""}, // the typed line's echo
		{"CRIMUX-R-ef56:0:x:ef56\r\n", ""},                               // another guestRun's
	} {
		if got := resultLine(tc.log, re); got != tc.want {
			t.Errorf("result in %q: %q, want %q", tc.log, got, tc.want)
		}
	}
}
