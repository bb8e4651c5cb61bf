package shellenv

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for leases.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const testHome = "/srv/dsh-home"

// mustNew returns a registry with a fake clock and no state file unless
// opts sets one.
func mustNew(tb testing.TB, opts Options) (*Registry, *fakeClock) {
	tb.Helper()
	clock := newFakeClock()
	if opts.Home == "" {
		opts.Home = testHome
	}
	if opts.Now == nil {
		opts.Now = clock.Now
	}
	r, err := New(opts)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return r, clock
}

func mustRegister(tb testing.TB, r *Registry, s Spec) Contributor {
	tb.Helper()
	c, err := r.Register(context.Background(), s)
	if err != nil {
		tb.Fatalf("Register(%q): %v", s.Name, err)
	}
	return c
}

func mustCollect(tb testing.TB, r *Registry, x Execution) Overlay {
	tb.Helper()
	o, err := r.Collect(context.Background(), x)
	if err != nil {
		tb.Fatalf("Collect: %v", err)
	}
	return o
}

func staticSpec(name string, kv ...string) Spec {
	s := Spec{Name: name, Resolver: ResolverSpec{Kind: KindStatic, Values: map[string]string{}}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.Keys = append(s.Keys, KeySpec{Key: kv[i], Description: "test key " + kv[i]})
		s.Resolver.Values[kv[i]] = kv[i+1]
	}
	return s
}

// builtinOverlay is what a registry with no contributors collects.
func builtinOverlay(agentID string) map[string]string {
	m := map[string]string{KeyHome: testHome, KeyShell: "1"}
	if agentID != "" {
		m[KeySessionID] = agentID
	}
	return m
}
