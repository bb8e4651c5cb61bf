package shellenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func declaredKeys(r *Registry) []string {
	var keys []string
	for _, d := range r.Declarations() {
		if !d.Builtin {
			keys = append(keys, d.Key)
		}
	}
	return keys
}

func contributorNames(r *Registry) []string {
	var names []string
	for _, c := range r.Contributors() {
		if !c.Builtin {
			names = append(names, c.Name)
		}
	}
	return names
}

func wantValue(tb testing.TB, o Overlay, key, want string) {
	tb.Helper()
	got, ok := o.Get(key)
	switch {
	case want == "" && ok:
		tb.Errorf("%s = %q, want absent", key, got)
	case want != "" && got != want:
		tb.Errorf("%s = %q (present %v), want %q", key, got, ok, want)
	}
}

func TestDisposal(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// setup registers contributors declaring DSH_C_A and DSH_C_B with the
		// value "v1" and returns a func that disposes them.
		setup func(t *testing.T, r *Registry, clock *fakeClock) (dispose func())
		// reregister registers the same names again with "v2".
		reregister func(t *testing.T, r *Registry)
	}{
		{
			name: "unregister",
			setup: func(t *testing.T, r *Registry, _ *fakeClock) func() {
				mustRegister(t, r, staticSpec("c", "DSH_C_A", "v1", "DSH_C_B", "v1"))
				return func() {
					if err := r.Unregister(ctx, "c"); err != nil {
						t.Fatal(err)
					}
				}
			},
			reregister: func(t *testing.T, r *Registry) {
				mustRegister(t, r, staticSpec("c", "DSH_C_A", "v2", "DSH_C_B", "v2"))
			},
		},
		{
			name: "unregister plugin contributor",
			setup: func(t *testing.T, r *Registry, _ *fakeClock) func() {
				p, err := r.OpenPlugin(ctx, "scope", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				s := staticSpec("c", "DSH_C_A", "v1", "DSH_C_B", "v1")
				s.Plugin = p.ID
				mustRegister(t, r, s)
				return func() {
					if err := r.Unregister(ctx, "c"); err != nil {
						t.Fatal(err)
					}
					got, err := r.Plugin(p.ID)
					if err != nil {
						t.Fatal(err)
					}
					if len(got.Contributors) != 0 {
						t.Errorf("plugin still lists %v", got.Contributors)
					}
				}
			},
			reregister: func(t *testing.T, r *Registry) {
				mustRegister(t, r, staticSpec("c", "DSH_C_A", "v2", "DSH_C_B", "v2"))
			},
		},
		{
			name: "close plugin",
			setup: func(t *testing.T, r *Registry, _ *fakeClock) func() {
				p, err := r.OpenPlugin(ctx, "scope", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				a, b := staticSpec("c", "DSH_C_A", "v1"), staticSpec("d", "DSH_C_B", "v1")
				a.Plugin, b.Plugin = p.ID, p.ID
				mustRegister(t, r, a)
				mustRegister(t, r, b)
				got, err := r.Plugin(p.ID)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]string{"c", "d"}, got.Contributors); diff != "" {
					t.Errorf("plugin contributors (-want +got):\n%s", diff)
				}
				return func() {
					if err := r.ClosePlugin(ctx, p.ID); err != nil {
						t.Fatal(err)
					}
					if _, err := r.Plugin(p.ID); !errors.Is(err, ErrPluginNotFound) {
						t.Errorf("Plugin after close = %v, want ErrPluginNotFound", err)
					}
					if err := r.ClosePlugin(ctx, p.ID); !errors.Is(err, ErrPluginNotFound) {
						t.Errorf("second ClosePlugin = %v, want ErrPluginNotFound", err)
					}
				}
			},
			reregister: func(t *testing.T, r *Registry) {
				p, err := r.OpenPlugin(ctx, "scope", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				a, b := staticSpec("c", "DSH_C_A", "v2"), staticSpec("d", "DSH_C_B", "v2")
				a.Plugin, b.Plugin = p.ID, p.ID
				mustRegister(t, r, a)
				mustRegister(t, r, b)
			},
		},
		{
			name: "lease expiry",
			setup: func(t *testing.T, r *Registry, clock *fakeClock) func() {
				p, err := r.OpenPlugin(ctx, "scope", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				s := staticSpec("c", "DSH_C_A", "v1", "DSH_C_B", "v1")
				s.Plugin = p.ID
				mustRegister(t, r, s)
				return func() {
					clock.Advance(time.Minute) // the lease ends now; no ExpireLeases yet
					if _, err := r.Plugin(p.ID); !errors.Is(err, ErrPluginNotFound) {
						t.Errorf("Plugin after expiry = %v, want ErrPluginNotFound", err)
					}
					if n := len(r.Plugins()); n != 0 {
						t.Errorf("Plugins() lists %d after expiry", n)
					}
				}
			},
			reregister: func(t *testing.T, r *Registry) {
				mustRegister(t, r, staticSpec("c", "DSH_C_A", "v2", "DSH_C_B", "v2"))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, clock := mustNew(t, Options{})
			dispose := tt.setup(t, r, clock)
			x := Execution{JobID: "job_1"}
			before := mustCollect(t, r, x)
			wantValue(t, before, "DSH_C_A", "v1")
			wantValue(t, before, "DSH_C_B", "v1")

			dispose()

			after := mustCollect(t, r, x)
			wantValue(t, after, "DSH_C_A", "")
			wantValue(t, after, "DSH_C_B", "")
			wantValue(t, after, KeyShell, "1")
			if keys := declaredKeys(r); len(keys) != 0 {
				t.Errorf("Declarations() still lists %v", keys)
			}
			if names := contributorNames(r); len(names) != 0 {
				t.Errorf("Contributors() still lists %v", names)
			}
			if _, err := r.Contributor("c"); !errors.Is(err, ErrContributorNotFound) {
				t.Errorf("Contributor(c) = %v, want ErrContributorNotFound", err)
			}
			// The earlier overlay keeps its snapshot.
			wantValue(t, before, "DSH_C_A", "v1")
			wantValue(t, before, "DSH_C_B", "v1")

			tt.reregister(t, r)
			again := mustCollect(t, r, x)
			wantValue(t, again, "DSH_C_A", "v2")
			wantValue(t, again, "DSH_C_B", "v2")
			wantValue(t, after, "DSH_C_A", "")
			wantValue(t, before, "DSH_C_A", "v1")
		})
	}
}

func TestLeaseRenewAndRun(t *testing.T) {
	ctx := context.Background()
	r, clock := mustNew(t, Options{ExpiryInterval: time.Millisecond})
	p, err := r.OpenPlugin(ctx, "scope", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Lease != DefaultLease || !p.ExpiresAt.Equal(clock.Now().Add(DefaultLease)) || p.Name != "scope" {
		t.Errorf("OpenPlugin() = %+v, want the default lease from now", p)
	}
	if p.ID[:4] != "plg_" {
		t.Errorf("plugin id %q lacks the plg_ prefix", p.ID)
	}
	s := staticSpec("c", "DSH_C", "v")
	s.Plugin = p.ID
	c := mustRegister(t, r, s)
	if c.ExpiresAt == nil || !c.ExpiresAt.Equal(p.ExpiresAt) || c.Plugin != p.ID {
		t.Errorf("contributor %+v does not carry the plugin lease", c)
	}

	clock.Advance(4 * time.Minute)
	renewed, err := r.RenewPlugin(ctx, p.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().Add(DefaultLease); !renewed.ExpiresAt.Equal(want) {
		t.Errorf("renewed ExpiresAt = %v, want %v", renewed.ExpiresAt, want)
	}
	for _, d := range r.Declarations() {
		if d.Key == "DSH_C" && (d.ExpiresAt == nil || !d.ExpiresAt.Equal(renewed.ExpiresAt) || d.Plugin != p.ID) {
			t.Errorf("declaration %+v does not carry the renewed lease", d)
		}
	}
	clock.Advance(2 * time.Minute) // past the original expiry
	wantValue(t, mustCollect(t, r, Execution{}), "DSH_C", "v")

	if _, err := r.RenewPlugin(ctx, p.ID, time.Millisecond); !errors.Is(err, ErrInvalidPlugin) {
		t.Errorf("RenewPlugin(1ms) = %v, want ErrInvalidPlugin", err)
	}
	if _, err := r.RenewPlugin(ctx, "plg_nope", 0); !errors.Is(err, ErrPluginNotFound) {
		t.Errorf("RenewPlugin(unknown) = %v, want ErrPluginNotFound", err)
	}

	clock.Advance(time.Hour)
	if _, err := r.RenewPlugin(ctx, p.ID, 0); !errors.Is(err, ErrPluginNotFound) {
		t.Errorf("RenewPlugin after expiry = %v, want ErrPluginNotFound", err)
	}

	// Run disposes expired plugins in the background.
	p2, err := r.OpenPlugin(ctx, "second", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s2 := staticSpec("c2", "DSH_C2", "v")
	s2.Plugin = p2.ID
	mustRegister(t, r, s2)
	clock.Advance(2 * time.Minute)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.Run(runCtx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(r.snap.Load().plugins) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("Run did not dispose the expired plugin")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if n := len(r.snap.Load().entries); n != 3 {
		t.Errorf("%d entries after expiry, want the 3 built-ins", n)
	}
}

func TestOpenPluginRejects(t *testing.T) {
	tests := []struct {
		name  string
		pname string
		lease time.Duration
	}{
		{"blank name", "  ", 0},
		{"control character", "a\nb", 0},
		{"long name", string(make([]byte, MaxPluginNameLen+1)), 0},
		{"lease too short", "p", 10 * time.Millisecond},
		{"negative lease", "p", -time.Second},
		{"lease too long", "p", 25 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := mustNew(t, Options{})
			if _, err := r.OpenPlugin(context.Background(), tt.pname, tt.lease); !errors.Is(err, ErrInvalidPlugin) {
				t.Errorf("OpenPlugin() = %v, want ErrInvalidPlugin", err)
			}
			if n := len(r.Plugins()); n != 0 {
				t.Errorf("%d plugins stored", n)
			}
		})
	}
}

func TestExpiredKeysCanBeTakenByOthers(t *testing.T) {
	ctx := context.Background()
	r, clock := mustNew(t, Options{})
	p, err := r.OpenPlugin(ctx, "scope", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s := staticSpec("old", "DSH_K", "old")
	s.Plugin = p.ID
	mustRegister(t, r, s)
	if _, err := r.Register(ctx, staticSpec("new", "DSH_K", "new")); !errors.Is(err, ErrKeyOwned) {
		t.Fatalf("Register while owned = %v, want ErrKeyOwned", err)
	}
	clock.Advance(time.Minute)
	mustRegister(t, r, staticSpec("new", "DSH_K", "new"))
	wantValue(t, mustCollect(t, r, Execution{}), "DSH_K", "new")
}
