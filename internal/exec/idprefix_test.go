package exec

import (
	"errors"
	"strings"
	"testing"
)

// TestIDPrefix: cluster mode names the replica in every job id; a prefix
// that would not make a routable job id is refused.
func TestIDPrefix(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.IDPrefix = "job_replica-a." })
	if id := e.NewID(); !strings.HasPrefix(id, "job_replica-a.") || len(id) <= len("job_replica-a.") {
		t.Fatalf("NewID() = %q", id)
	}
	if id := newTestExecutor(t, nil).NewID(); !strings.HasPrefix(id, "job_") || strings.Contains(id, ".") {
		t.Fatalf("default NewID() = %q", id)
	}
	for _, bad := range []string{"x_", "job_a/", "job_a?"} {
		if _, err := New(Options{IDPrefix: bad, Environ: testEnviron(), DefaultCwd: t.TempDir()}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("IDPrefix %q: err %v, want ErrInvalidOptions", bad, err)
		}
	}
}
