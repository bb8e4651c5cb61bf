package limits

import (
	"errors"
	"math"
	"testing"
)

func TestWithin(t *testing.T) {
	tests := []struct {
		name       string
		l, outer   Limits
		wantWithin bool
	}{
		{"nothing within nothing", Limits{}, Limits{}, true},
		{"anything within nothing", Limits{Pids: 1000, MemoryBytes: 1 << 40, CPU: 64}, Limits{}, true},
		{"equal", Limits{Pids: 64, MemoryBytes: 1 << 30, CPU: 1}, Limits{Pids: 64, MemoryBytes: 1 << 30, CPU: 1}, true},
		{"tighter on every axis", Limits{Pids: 8, MemoryBytes: 1 << 20, CPU: 0.25}, Limits{Pids: 64, MemoryBytes: 1 << 30, CPU: 1}, true},
		{"more pids", Limits{Pids: 65}, Limits{Pids: 64}, false},
		{"more memory", Limits{Pids: 64, MemoryBytes: 2 << 30}, Limits{Pids: 64, MemoryBytes: 1 << 30}, false},
		{"more cpu", Limits{CPU: 1.5}, Limits{CPU: 1}, false},
		{"dropping a limit is looser", Limits{MemoryBytes: 1 << 20}, Limits{Pids: 64}, false},
		{"adding a limit is tighter", Limits{Pids: 64, CPU: 0.5}, Limits{Pids: 64}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.Within(tt.outer); got != tt.wantWithin {
				t.Errorf("%v.Within(%v) = %v, want %v", tt.l, tt.outer, got, tt.wantWithin)
			}
			err := tt.l.CheckWithin(tt.outer, "agent agt_x")
			if (err == nil) != tt.wantWithin || (err != nil && !errors.Is(err, ErrLooser)) {
				t.Errorf("CheckWithin = %v, want ErrLooser iff not within", err)
			}
		})
	}
}

func TestOrInheritsWhatIsNotGiven(t *testing.T) {
	parent := Limits{Pids: 64, MemoryBytes: 1 << 30}
	got := Limits{Pids: 16, CPU: 0.5}.Or(parent)
	want := Limits{Pids: 16, MemoryBytes: 1 << 30, CPU: 0.5}
	if got != want {
		t.Errorf("Or = %+v, want %+v", got, want)
	}
	if !got.Within(parent) {
		t.Errorf("a child completed by its parent is not within it")
	}
}

func TestValidate(t *testing.T) {
	for _, l := range []Limits{{Pids: -1}, {MemoryBytes: -1}, {CPU: -0.5}, {CPU: math.NaN()}, {CPU: math.Inf(1)}} {
		if err := l.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", l, err)
		}
	}
	if err := (Limits{Pids: 1, MemoryBytes: 1 << 20, CPU: 0.01}).Validate(); err != nil {
		t.Errorf("Validate of positive limits = %v", err)
	}
}

func TestString(t *testing.T) {
	if got := (Limits{}).String(); got != "none" {
		t.Errorf("String of no limits = %q", got)
	}
	if got := (Limits{Pids: 64, CPU: 0.5}).String(); got != "pids 64, cpu 0.5" {
		t.Errorf("String = %q", got)
	}
}
