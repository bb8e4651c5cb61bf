// Package ids makes the identifiers dshd hands out: opaque, URL-safe and
// sortable by creation time (ULIDs in Crockford base32, lower-cased).
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package ids

import (
	"crypto/rand"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// Source makes identifiers. The zero value is not usable; use NewSource.
// A Source is safe for concurrent use, and identifiers from one Source are
// strictly increasing even within one millisecond.
type Source struct {
	mu      sync.Mutex
	now     func() time.Time
	entropy *ulid.MonotonicEntropy
}

// NewSource returns a Source reading time from now (time.Now when nil).
func NewSource(now func() time.Time) *Source {
	if now == nil {
		now = time.Now
	}
	return &Source{now: now, entropy: ulid.Monotonic(rand.Reader, 0)}
}

// New returns a new identifier with the given prefix, such as "job_".
func (s *Source) New(prefix string) string {
	s.mu.Lock()
	id := ulid.MustNew(ulid.Timestamp(s.now()), s.entropy)
	s.mu.Unlock()
	return prefix + strings.ToLower(id.String())
}
