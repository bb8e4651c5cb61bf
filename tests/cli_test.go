package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCLIFirstContact runs the built binary the way a new user does first:
// --help, --version and ui --help answer on stdout and exit 0.
func TestCLIFirstContact(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		arg  string
		want string
	}{
		{"--help", "Usage: dshd [flags]"},
		{"--version", "dshd "},
		{"ui --help", "Usage: dshd ui [flags]"},
	} {
		t.Run(tt.arg, func(t *testing.T) {
			out, err := exec.Command(serverBinary, strings.Fields(tt.arg)...).Output()
			if err != nil {
				t.Fatalf("dshd %s: %v", tt.arg, err)
			}
			if !strings.HasPrefix(string(out), tt.want) {
				t.Errorf("dshd %s printed %q, want it to start with %q", tt.arg, out, tt.want)
			}
		})
	}
}
