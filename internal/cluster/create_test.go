package cluster

import (
	"context"
	"errors"
	"testing"
)

// TestCreateWithRetry: a create that fails is tried again until it
// succeeds, at most createAttempts times, and never past its context; the
// error names what was created and wraps the last attempt's.
func TestCreateWithRetry(t *testing.T) {
	t.Parallel()
	errBusy := errors.New("meta leader not elected")
	failing := func(fails int, calls *int) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			*calls++
			if *calls <= fails {
				return "", errBusy
			}
			return "bucket", nil
		}
	}

	t.Run("succeeds after failures", func(t *testing.T) {
		t.Parallel()
		calls := 0
		v, err := createWithRetry(context.Background(), "test bucket", failing(2, &calls))
		if err != nil || v != "bucket" || calls != 3 {
			t.Errorf("= %q, %v after %d calls; want the bucket after 3", v, err, calls)
		}
	})
	t.Run("gives up", func(t *testing.T) {
		t.Parallel()
		calls := 0
		_, err := createWithRetry(context.Background(), "test bucket", failing(createAttempts+5, &calls))
		if !errors.Is(err, errBusy) || err.Error() != "cluster: test bucket: "+errBusy.Error() || calls != createAttempts {
			t.Errorf("= %v after %d calls; want the last error, named, after %d", err, calls, createAttempts)
		}
	})
	t.Run("context ended", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		_, err := createWithRetry(ctx, "test bucket", func(context.Context) (string, error) {
			calls++
			cancel()
			return "", errBusy
		})
		if !errors.Is(err, errBusy) || calls != 1 {
			t.Errorf("= %v after %d calls; want the first error, and no second call", err, calls)
		}
	})
}
