package shellenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDurableRoundTrip(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "home", "contributors.json")
	r, clock := mustNew(t, Options{StatePath: path})

	mustRegister(t, r, staticSpec("plain", "DSH_PLAIN", "p"))
	clock.Advance(time.Second)
	mustRegister(t, r, Spec{
		Name: "tmpl", Keys: []KeySpec{{"DSH_TMPL", "the agent"}},
		Resolver: ResolverSpec{Kind: KindTemplate, Values: map[string]string{"DSH_TMPL": "a={agent.id}"}},
	})
	hook := hookSpec("hook", "http://127.0.0.1:1/hook", "DSH_HOOK")
	hook.Resolver.Timeout = 1500 * time.Millisecond
	mustRegister(t, r, hook)
	mustRegister(t, r, staticSpec("gone", "DSH_GONE", "g"))
	if err := r.Unregister(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	p, err := r.OpenPlugin(ctx, "scope", 0)
	if err != nil {
		t.Fatal(err)
	}
	scoped := staticSpec("scoped", "DSH_SCOPED", "s")
	scoped.Plugin = p.ID
	mustRegister(t, r, scoped)

	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("state file mode = %v, want 0600", mode)
	}
	if dir, _ := os.Stat(filepath.Dir(path)); dir.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode = %v, want 0700", dir.Mode().Perm())
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*.tmp"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}

	var want []Contributor
	for _, c := range r.Contributors() {
		if c.Plugin == "" {
			want = append(want, c)
		}
	}

	restarted, _ := mustNew(t, Options{StatePath: path})
	// Built-ins are recreated at start; compare without their CreatedAt.
	got := restarted.Contributors()
	for i := range got {
		if got[i].Builtin {
			got[i].CreatedAt = want[i].CreatedAt
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("contributors after restart (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"hook", "plain", "tmpl"}, contributorNames(restarted)); diff != "" {
		t.Errorf("durable names after restart (-want +got):\n%s", diff)
	}
	// Remove the webhook so Collect does no I/O, then check the values.
	if err := restarted.Unregister(ctx, "hook"); err != nil {
		t.Fatal(err)
	}
	o := mustCollect(t, restarted, Execution{Agent: &Agent{ID: "agt_1"}})
	wantValue(t, o, "DSH_PLAIN", "p")
	wantValue(t, o, "DSH_TMPL", "a=agt_1")
	wantValue(t, o, "DSH_SCOPED", "")

	again, _ := mustNew(t, Options{StatePath: path})
	if diff := cmp.Diff([]string{"plain", "tmpl"}, contributorNames(again)); diff != "" {
		t.Errorf("names after unregister and restart (-want +got):\n%s", diff)
	}
}

func TestCollectWebhookTimeoutRestored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "contributors.json")
	r, _ := mustNew(t, Options{StatePath: path})
	hook := hookSpec("hook", "https://example.invalid/x", "DSH_HOOK")
	hook.Resolver.Timeout = 250 * time.Millisecond
	mustRegister(t, r, hook)
	r2, _ := mustNew(t, Options{StatePath: path})
	c, err := r2.Contributor("hook")
	if err != nil {
		t.Fatal(err)
	}
	if c.Resolver.Timeout != 250*time.Millisecond || c.Resolver.URL != hook.Resolver.URL {
		t.Errorf("restored resolver = %+v", c.Resolver)
	}
}

func TestNewRejectsBadStateFile(t *testing.T) {
	tests := []struct {
		name     string
		contents string
		wantErr  error
		wantText string
	}{
		{name: "not JSON", contents: "{not json", wantText: "corrupt"},
		{name: "wrong version", contents: `{"version": 99, "contributors": []}`, wantText: "version 99"},
		{
			name:     "reserved key",
			contents: `{"version":1,"contributors":[{"name":"x","keys":[{"key":"DSH_HOME","description":"d"}],"resolver":{"kind":"static"}}]}`,
			wantErr:  ErrReservedKey,
		},
		{
			name:     "unknown kind",
			contents: `{"version":1,"contributors":[{"name":"x","keys":[{"key":"DSH_X","description":"d"}],"resolver":{"kind":"magic"}}]}`,
			wantErr:  ErrInvalidDeclaration,
		},
		{
			name: "duplicate name",
			contents: `{"version":1,"contributors":[
				{"name":"x","keys":[{"key":"DSH_X","description":"d"}],"resolver":{"kind":"static"}},
				{"name":"x","keys":[{"key":"DSH_Y","description":"d"}],"resolver":{"kind":"static"}}]}`,
			wantErr: ErrDuplicateContributor,
		},
		{
			name: "shared key",
			contents: `{"version":1,"contributors":[
				{"name":"x","keys":[{"key":"DSH_X","description":"d"}],"resolver":{"kind":"static"}},
				{"name":"y","keys":[{"key":"DSH_X","description":"d"}],"resolver":{"kind":"static"}}]}`,
			wantErr: ErrKeyOwned,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "contributors.json")
			if err := os.WriteFile(path, []byte(tt.contents), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := New(Options{Home: testHome, StatePath: path})
			if err == nil {
				t.Fatal("New succeeded")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("New() error = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("New() error %q does not name %s and %q", err, path, tt.wantText)
			}
		})
	}
}

func TestPersistFailureStoresNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	r, _ := mustNew(t, Options{StatePath: filepath.Join(dir, "contributors.json")})
	// The state file's directory becomes a regular file, so every write fails.
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	before := r.Declarations()
	if _, err := r.Register(context.Background(), staticSpec("c", "DSH_C", "v")); err == nil {
		t.Fatal("Register succeeded without a writable state file")
	}
	if diff := cmp.Diff(before, r.Declarations()); diff != "" {
		t.Errorf("declarations changed (-want +got):\n%s", diff)
	}
	// Plugin contributors are not persisted, so they still register.
	p, err := r.OpenPlugin(context.Background(), "scope", 0)
	if err != nil {
		t.Fatal(err)
	}
	s := staticSpec("c", "DSH_C", "v")
	s.Plugin = p.ID
	mustRegister(t, r, s)
}
