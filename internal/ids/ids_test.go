package ids

import (
	"regexp"
	"sync"
	"testing"
	"time"
)

func TestNewIsPrefixedURLSafeAndIncreasing(t *testing.T) {
	fixed := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s := NewSource(func() time.Time { return fixed }) // one millisecond: monotonic entropy must order them
	urlSafe := regexp.MustCompile(`^job_[0-9a-z]{26}$`)
	prev := ""
	for range 1000 {
		id := s.New("job_")
		if !urlSafe.MatchString(id) {
			t.Fatalf("id %q is not job_ + 26 lowercase base32 characters", id)
		}
		if id <= prev {
			t.Fatalf("id %q does not sort after %q", id, prev)
		}
		prev = id
	}
}

func TestNewConcurrentUnique(t *testing.T) {
	s := NewSource(nil)
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				id := s.New("")
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate id %s", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != 4000 {
		t.Errorf("%d distinct ids, want 4000", len(seen))
	}
}
