// Package limits holds the resource limits a harness sets on the jobs it
// starts (processes, memory, CPU) and the rule between enclosing limits:
// the server's defaults, an agent's limits set at its creation, a child
// agent's (fork, spawn) and an execution's of an agent may each only
// tighten the one around them. The model never sets a limit. How a limit is
// enforced on a host is package exec's business (cgroup controllers, dshd's
// watcher, rlimits).
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package limits

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Errors.
var (
	// ErrInvalid: a negative or non-finite limit.
	ErrInvalid = errors.New("invalid limits")
	// ErrLooser: a limit looser than the one it must stay within (a child
	// agent's against its parent's, an execution's against its agent's).
	ErrLooser = errors.New("limits looser than allowed")
)

// Limits bound what one job may use. A zero field means "not set": no
// limit once nothing encloses it, else the enclosing limit (see Or).
type Limits struct {
	// Pids is the most processes the job may have at once.
	Pids int64 `json:"pids,omitempty"`
	// MemoryBytes is the most memory the job may use.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// CPU is the share of one CPU the job may use (0.5: half a CPU).
	CPU float64 `json:"cpu,omitempty"`
}

// IsZero reports whether no limit is set.
func (l Limits) IsZero() bool { return l == Limits{} }

// Validate fails with ErrInvalid for a negative field or a CPU share that
// is not a finite number.
func (l Limits) Validate() error {
	switch {
	case l.Pids < 0:
		return fmt.Errorf("%w: pids %d is negative", ErrInvalid, l.Pids)
	case l.MemoryBytes < 0:
		return fmt.Errorf("%w: memoryBytes %d is negative", ErrInvalid, l.MemoryBytes)
	case l.CPU < 0 || math.IsNaN(l.CPU) || math.IsInf(l.CPU, 0):
		return fmt.Errorf("%w: cpu %v is not a non-negative number", ErrInvalid, l.CPU)
	}
	return nil
}

// Or returns l with the fields it leaves zero taken from def.
func (l Limits) Or(def Limits) Limits {
	if l.Pids == 0 {
		l.Pids = def.Pids
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = def.MemoryBytes
	}
	if l.CPU == 0 {
		l.CPU = def.CPU
	}
	return l
}

// Within reports whether every limit outer sets is set by l too, no higher.
func (l Limits) Within(outer Limits) bool {
	within := func(v, o float64) bool { return o == 0 || (v > 0 && v <= o) }
	return within(float64(l.Pids), float64(outer.Pids)) &&
		within(float64(l.MemoryBytes), float64(outer.MemoryBytes)) &&
		within(l.CPU, outer.CPU)
}

// CheckWithin returns ErrLooser, naming both, when l is not Within outer.
// what names outer ("agent agt_x").
func (l Limits) CheckWithin(outer Limits, what string) error {
	if l.Within(outer) {
		return nil
	}
	return fmt.Errorf("%w: %s allows at most %s, requested %s", ErrLooser, what, outer, l)
}

// String lists the limits set ("pids 64, memoryBytes 134217728"), or "none".
func (l Limits) String() string {
	var parts []string
	if l.Pids > 0 {
		parts = append(parts, "pids "+strconv.FormatInt(l.Pids, 10))
	}
	if l.MemoryBytes > 0 {
		parts = append(parts, "memoryBytes "+strconv.FormatInt(l.MemoryBytes, 10))
	}
	if l.CPU > 0 {
		parts = append(parts, "cpu "+strconv.FormatFloat(l.CPU, 'g', -1, 64))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
