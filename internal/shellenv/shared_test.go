package shellenv

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// memStore is a behaving in-memory Store: an ordered log whose writes are
// conditioned on its last revision, fed synchronously to every follower.
// (internal/cluster tests the NATS store against real servers.)
type memStore struct {
	mu        sync.Mutex
	rev       uint64
	followers []*Registry
	// conflicts makes the next writes fail as if another change landed.
	conflicts int
}

func (m *memStore) Write(_ context.Context, key string, value []byte, _ time.Duration, after uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conflicts > 0 {
		m.conflicts--
		return 0, ErrStoreConflict
	}
	if after != m.rev {
		return 0, ErrStoreConflict
	}
	m.rev++
	for _, f := range m.followers {
		f.Apply(Change{Key: key, Value: value, Deleted: value == nil, Revision: m.rev})
	}
	return m.rev, nil
}

func (m *memStore) Last(context.Context) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rev, nil
}

func sharedPair(t *testing.T) (*memStore, *Registry, *Registry) {
	t.Helper()
	m := &memStore{}
	a, _ := mustNew(t, Options{Store: m})
	b, _ := mustNew(t, Options{Store: m})
	for _, r := range []*Registry{a, b} {
		select {
		case <-r.Ready():
			t.Fatal("a shared registry is ready before Load")
		default:
		}
		r.Load(nil, 0)
		<-r.Ready()
		m.followers = append(m.followers, r)
	}
	return m, a, b
}

func TestSharedRegistryRules(t *testing.T) {
	m, a, b := sharedPair(t)
	ctx := context.Background()
	spec := Spec{Name: "team.repo", Keys: []KeySpec{{Key: "DSH_REPO", Description: "d"}},
		Resolver: ResolverSpec{Kind: KindStatic, Values: map[string]string{"DSH_REPO": "v"}}}
	if _, err := a.Register(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Contributor("team.repo"); err != nil {
		t.Fatalf("b does not see a's contributor: %v", err)
	}
	if _, err := b.Register(ctx, spec); !errors.Is(err, ErrDuplicateContributor) {
		t.Fatalf("same name on b: %v", err)
	}
	other := spec
	other.Name = "team.other"
	if _, err := b.Register(ctx, other); !errors.Is(err, ErrKeyOwned) {
		t.Fatalf("same key on b: %v", err)
	}
	// A write that collides is checked again and retried.
	m.conflicts = 2
	other.Keys = []KeySpec{{Key: "DSH_OTHER", Description: "d"}}
	other.Resolver.Values = map[string]string{"DSH_OTHER": "v"}
	if _, err := b.Register(ctx, other); err != nil {
		t.Fatalf("register after two collisions: %v", err)
	}
	// Plugins: one value with their contributors; closing removes both.
	p, err := a.OpenPlugin(ctx, "scope", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ps := Spec{Name: "scoped", Plugin: p.ID, Keys: []KeySpec{{Key: "DSH_SCOPED", Description: "d"}},
		Resolver: ResolverSpec{Kind: KindStatic, Values: map[string]string{"DSH_SCOPED": "v"}}}
	if _, err := b.Register(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Plugin(p.ID); len(got.Contributors) != 1 {
		t.Fatalf("plugin on a: %+v", got)
	}
	if err := b.ClosePlugin(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Contributor("scoped"); !errors.Is(err, ErrContributorNotFound) {
		t.Fatalf("contributor of a closed plugin: %v", err)
	}
	if a.Revision() != b.Revision() || a.Revision() != m.rev {
		t.Fatalf("revisions a %d b %d store %d", a.Revision(), b.Revision(), m.rev)
	}
	// A store that cannot be reached changes nothing.
	m.conflicts = maxWriteAttempts
	if _, err := a.Register(ctx, ps); !errors.Is(err, ErrStoreUnavailable) && !errors.Is(err, ErrPluginNotFound) {
		t.Fatalf("register with a store that keeps colliding: %v", err)
	}
	ps.Plugin = ""
	m.conflicts = maxWriteAttempts
	if _, err := a.Register(ctx, ps); !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("register with a store that keeps colliding: %v", err)
	}
	if _, err := a.Contributor("scoped"); !errors.Is(err, ErrContributorNotFound) {
		t.Fatal("a refused registration was stored")
	}
	m.conflicts = 0
}

// TestSharedLoadSkipsClashes: Load builds the snapshot from the store's
// records in order; a record that clashes with an earlier one (which a
// conditioned writer never stores) is left out, the same on every replica.
func TestSharedLoadSkipsClashes(t *testing.T) {
	r, _ := mustNew(t, Options{Store: &memStore{}})
	rec := func(name, key string) []byte {
		return []byte(`{"name":"` + name + `","keys":[{"key":"` + key + `","description":"d"}],"resolver":{"kind":"static","values":{"` + key + `":"v"}},"createdAt":"2026-01-02T03:04:05Z"}`)
	}
	r.Load([]Change{
		{Key: contributorKey("first"), Value: rec("first", "DSH_X"), Revision: 1},
		{Key: contributorKey("second"), Value: rec("second", "DSH_X"), Revision: 2},
		{Key: contributorKey("third"), Value: rec("third", "DSH_Y"), Revision: 3},
		{Key: contributorKey("wrongkey"), Value: rec("other", "DSH_Z"), Revision: 4},
		{Key: "p.plg_bad", Value: []byte("{"), Revision: 5},
	}, 5)
	var got []string
	for _, c := range r.Contributors() {
		if !c.Builtin {
			got = append(got, c.Name)
		}
	}
	if len(got) != 2 || got[0] != "first" || got[1] != "third" || r.Revision() != 5 {
		t.Fatalf("loaded %v at revision %d, want [first third] at 5", got, r.Revision())
	}
	// Apply ignores changes already seen.
	r.Apply(Change{Key: contributorKey("first"), Deleted: true, Revision: 3})
	if _, err := r.Contributor("first"); err != nil {
		t.Fatal("an old change was applied again")
	}
	r.Apply(Change{Key: contributorKey("first"), Deleted: true, Revision: 6})
	if _, err := r.Contributor("first"); !errors.Is(err, ErrContributorNotFound) {
		t.Fatal("a delete was not applied")
	}
}
