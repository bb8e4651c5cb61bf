package shellenv

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// A shared registry (cluster mode) keeps its contributors and plugins in a
// Store that several dshd replicas follow. Every change is written to the
// store on the condition that the store has not moved since the state it
// was checked against, so registration rules (duplicate names, key
// ownership) hold across replicas: of concurrent registrations of one name
// or key, exactly one is stored. Snapshots are built only from the store's
// ordered changes (Load, then Apply), so every replica builds the same
// snapshots and collecting an overlay still does no I/O.
//
// Records: a durable contributor is the value of "c.<name, base64url>"; a
// plugin with all its contributors is the one value of "p.<plugin id>",
// written with a time to live equal to the rest of its lease, so the store
// itself removes an expired plugin, whichever replica opened it.

// Store is the shared, ordered store of a clustered registry. Revisions
// grow with every change of the whole store.
type Store interface {
	// Write sets key to value (value nil: deletes key) if the last record
	// in the store is at revision after. A ttl above zero makes the store
	// remove the record that much later. It returns the revision of the
	// change; an error wrapping ErrStoreConflict when the store moved past
	// after; any other error means the store could not be reached.
	Write(ctx context.Context, key string, value []byte, ttl time.Duration, after uint64) (uint64, error)
	// Last returns the revision of the last record still in the store.
	Last(ctx context.Context) (uint64, error)
}

// Change is one change of a Store, in store order.
type Change struct {
	Key      string
	Value    []byte // nil when Deleted
	Deleted  bool   // deleted, purged or removed by its time to live
	Revision uint64
}

var (
	// ErrStoreConflict is wrapped by Store.Write when the store has moved
	// past the revision the write was conditioned on.
	ErrStoreConflict = errors.New("shellenv: shared store moved on")
	// ErrStoreUnavailable: a shared registry could not write a change
	// (the store is unreachable, or too many concurrent writes collided).
	// Nothing changed.
	ErrStoreUnavailable = errors.New("shellenv: shared registry store unavailable")
)

// maxWriteAttempts bounds the retries of one change under contention.
const maxWriteAttempts = 64

// Shared reports whether the registry keeps its state in a Store.
func (r *Registry) Shared() bool { return r.store != nil }

// Revision returns the store revision the current snapshot reflects (0
// for a registry that is not shared, or has seen no record).
func (r *Registry) Revision() uint64 { return r.snap.Load().rev }

// Ready is closed once Load has built the first snapshot of a shared
// registry (it is closed at once for a registry that is not shared).
func (r *Registry) Ready() <-chan struct{} { return r.ready }

func contributorKey(name string) string {
	return "c." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

func pluginKey(id string) string { return "p." + id }

// storedPlugin is the value of a plugin record.
type storedPlugin struct {
	ID           string             `json:"id"`
	Name         string             `json:"name"`
	LeaseMs      int64              `json:"leaseMs"`
	CreatedAt    time.Time          `json:"createdAt"`
	ExpiresAt    time.Time          `json:"expiresAt"`
	Contributors []stateContributor `json:"contributors"`
}

// fromStateContributor compiles a stored contributor into an entry of
// plugin (or durable when plugin is "").
func fromStateContributor(sc stateContributor, plugin string, expires *time.Time) (*entry, error) {
	cp, problems, _ := compileSpec(sc.spec(plugin))
	if len(problems) > 0 {
		return nil, &DeclarationError{Problems: problems}
	}
	cp.c.CreatedAt = sc.CreatedAt
	cp.c.ExpiresAt = expires
	return newEntry(cp.c, cp.templates), nil
}

// pluginRecord is the stored form of plugin p with the contributors of s
// that belong to it, plus extra (nil to leave out drop).
func pluginRecord(s *snapshot, p Plugin, extra *Contributor, drop string) ([]byte, error) {
	sp := storedPlugin{
		ID: p.ID, Name: p.Name, LeaseMs: p.Lease.Milliseconds(),
		CreatedAt: p.CreatedAt, ExpiresAt: p.ExpiresAt, Contributors: []stateContributor{},
	}
	for _, e := range s.entries {
		if e.pub.Plugin == p.ID && e.pub.Name != drop {
			sp.Contributors = append(sp.Contributors, toStateContributor(e.pub))
		}
	}
	if extra != nil {
		sp.Contributors = append(sp.Contributors, toStateContributor(*extra))
	}
	slices.SortFunc(sp.Contributors, func(a, b stateContributor) int { return strings.Compare(a.Name, b.Name) })
	return json.Marshal(sp)
}

// decodePlugin reads a plugin record into its state and entries.
func decodePlugin(value []byte) (*pluginState, []*entry, error) {
	var sp storedPlugin
	if err := json.Unmarshal(value, &sp); err != nil {
		return nil, nil, err
	}
	exp := sp.ExpiresAt
	p := &pluginState{
		pub: Plugin{
			ID: sp.ID, Name: sp.Name, Lease: time.Duration(sp.LeaseMs) * time.Millisecond,
			CreatedAt: sp.CreatedAt, ExpiresAt: exp, Contributors: []string{},
		},
		expiresNano: exp.UnixNano(),
	}
	var entries []*entry
	for _, sc := range sp.Contributors {
		e, err := fromStateContributor(sc, sp.ID, &exp)
		if err != nil {
			return nil, nil, fmt.Errorf("contributor %q: %w", sc.Name, err)
		}
		entries = append(entries, e)
		p.pub.Contributors = append(p.pub.Contributors, sc.Name)
	}
	slices.Sort(p.pub.Contributors)
	return p, entries, nil
}

// Load builds the first snapshot of a shared registry from the store's
// current records (in store order) and closes Ready. rev is the revision
// of the last change read. Records that cannot be read, or that clash
// with an earlier record, are logged and left out.
func (r *Registry) Load(changes []Change, rev uint64) {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	cur := r.snap.Load()
	var add []*entry
	var plugins []*pluginState
	names := map[string]bool{}
	owners := map[string]string{}
	for _, e := range cur.entries {
		names[e.pub.Name] = true
		for _, k := range e.pub.Keys {
			owners[k.Key] = e.pub.Name
		}
	}
	fits := func(es []*entry) bool {
		seen := map[string]bool{}
		for _, e := range es {
			if names[e.pub.Name] || seen[e.pub.Name] {
				return false
			}
			seen[e.pub.Name] = true
			for _, k := range e.pub.Keys {
				if _, ok := owners[k.Key]; ok {
					return false
				}
			}
		}
		return true
	}
	claim := func(es []*entry) {
		for _, e := range es {
			names[e.pub.Name] = true
			for _, k := range e.pub.Keys {
				owners[k.Key] = e.pub.Name
			}
		}
	}
	for _, c := range changes {
		if c.Deleted {
			continue
		}
		p, es, err := r.decodeRecord(c)
		if err != nil {
			r.logger.Warn("skipping unreadable registry record", "key", c.Key, "revision", c.Revision, "err", err)
			continue
		}
		if !fits(es) {
			r.logger.Warn("skipping registry record that clashes with an earlier one", "key", c.Key, "revision", c.Revision)
			continue
		}
		claim(es)
		add = append(add, es...)
		if p != nil {
			plugins = append(plugins, p)
		}
	}
	slices.SortFunc(plugins, cmpPlugin)
	next := cur.change(nil, add, plugins)
	next.rev = rev
	r.publishApplied(next)
	r.readyOnce.Do(func() { close(r.ready) })
	r.logger.Info("shared registry loaded", "contributors", len(add), "plugins", len(plugins), "revision", rev)
}

// decodeRecord reads one record: a plugin (with its entries) or a durable
// contributor (p nil).
func (r *Registry) decodeRecord(c Change) (*pluginState, []*entry, error) {
	switch {
	case strings.HasPrefix(c.Key, "p."):
		p, es, err := decodePlugin(c.Value)
		if err != nil {
			return nil, nil, err
		}
		if pluginKey(p.pub.ID) != c.Key {
			return nil, nil, fmt.Errorf("plugin %q stored under %q", p.pub.ID, c.Key)
		}
		return p, es, nil
	case strings.HasPrefix(c.Key, "c."):
		var sc stateContributor
		if err := json.Unmarshal(c.Value, &sc); err != nil {
			return nil, nil, err
		}
		if contributorKey(sc.Name) != c.Key {
			return nil, nil, fmt.Errorf("contributor %q stored under %q", sc.Name, c.Key)
		}
		e, err := fromStateContributor(sc, "", nil)
		if err != nil {
			return nil, nil, err
		}
		return nil, []*entry{e}, nil
	}
	return nil, nil, fmt.Errorf("unknown record key %q", c.Key)
}

// Apply applies one change of the store, in store order, after Load: the
// next snapshot replaces the record's previous contributors (and plugin)
// with its new ones, or drops them when it was deleted. A record that
// cannot be read or clashes with another is logged and left out.
func (r *Registry) Apply(c Change) {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	cur := r.snap.Load()
	if c.Revision <= cur.rev {
		return // already seen (a watcher restarted from an earlier point)
	}
	var drop func(*entry) bool
	plugins := cur.plugins
	var pluginID, name string
	switch {
	case strings.HasPrefix(c.Key, "p."):
		pluginID = strings.TrimPrefix(c.Key, "p.")
		drop = func(e *entry) bool { return e.pub.Plugin == pluginID }
		plugins = slices.DeleteFunc(slices.Clone(cur.plugins), func(p *pluginState) bool { return p.pub.ID == pluginID })
	case strings.HasPrefix(c.Key, "c."):
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(c.Key, "c."))
		if err != nil {
			r.logger.Warn("skipping registry record with a malformed key", "key", c.Key)
			r.advance(cur, c.Revision)
			return
		}
		name = string(raw)
		drop = func(e *entry) bool { return !e.pub.Builtin && e.pub.Plugin == "" && e.pub.Name == name }
	default:
		r.logger.Warn("skipping registry record with an unknown key", "key", c.Key)
		r.advance(cur, c.Revision)
		return
	}
	var add []*entry
	if !c.Deleted {
		p, es, err := r.decodeRecord(c)
		if err != nil {
			r.logger.Warn("skipping unreadable registry record", "key", c.Key, "revision", c.Revision, "err", err)
		} else if clash := clashes(cur, es, drop); clash != "" {
			r.logger.Warn("skipping registry record that clashes with a stored one", "key", c.Key, "revision", c.Revision, "clash", clash)
		} else {
			add = es
			if p != nil {
				plugins = mergeSorted(plugins, []*pluginState{p}, cmpPlugin)
			}
		}
	}
	next := cur.change(drop, add, plugins)
	next.rev = c.Revision
	r.publishApplied(next)
	if pluginID != "" && c.Deleted {
		r.logger.Info("plugin removed from the shared registry", "plugin", pluginID, "revision", c.Revision)
	}
}

// clashes names what of es conflicts with the entries of cur that drop
// keeps, or "" when nothing does.
func clashes(cur *snapshot, es []*entry, drop func(*entry) bool) string {
	for _, e := range es {
		if o := cur.entry(e.pub.Name); o != nil && !drop(o) {
			return "name " + e.pub.Name
		}
		for _, k := range e.pub.Keys {
			if o := cur.owner(k.Key); o != nil && !drop(o) {
				return "key " + k.Key
			}
		}
	}
	return ""
}

// advance records that the store reached rev without a change of state.
func (r *Registry) advance(cur *snapshot, rev uint64) {
	n := *cur
	n.rev = rev
	r.publishApplied(&n)
}

// publishApplied publishes s and wakes the writers waiting for a revision.
// Callers hold r.applyMu.
func (r *Registry) publishApplied(s *snapshot) {
	r.publish(s)
	close(r.applied)
	r.applied = make(chan struct{})
}

// waitRevision waits until the snapshot reflects rev, or ctx ends.
func (r *Registry) waitRevision(ctx context.Context, rev uint64) error {
	for {
		r.applyMu.Lock()
		ch := r.applied
		r.applyMu.Unlock()
		if r.snap.Load().rev >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for the registry to reach revision %d: %w: %w", rev, ErrStoreUnavailable, ctx.Err())
		}
	}
}

// sharedWrite runs one change of a shared registry: plan checks the change
// against a snapshot and returns the record to write (value nil: delete;
// ttl; or an error that ends the attempt). The write is conditioned on the
// snapshot's revision; when another change landed first, the registry
// catches up and plans again. It returns the snapshot that holds the
// change. Callers hold r.mu.
func (r *Registry) sharedWrite(ctx context.Context, plan func(cur *snapshot) (key string, value []byte, ttl time.Duration, err error)) (*snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, r.storeTimeout)
	defer cancel()
	cur := r.snap.Load()
	after := cur.rev
	for attempt := 0; ; attempt++ {
		key, value, ttl, err := plan(cur)
		if err != nil {
			return nil, err
		}
		rev, err := r.store.Write(ctx, key, value, ttl, after)
		if err == nil {
			if err := r.waitRevision(ctx, rev); err != nil {
				return nil, err
			}
			return r.snap.Load(), nil
		}
		if !errors.Is(err, ErrStoreConflict) {
			return nil, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
		}
		if attempt+1 >= maxWriteAttempts {
			return nil, fmt.Errorf("%w: %d writes collided with others", ErrStoreUnavailable, maxWriteAttempts)
		}
		// Another change landed first. The store's last record tells how
		// far to catch up; records between it and what this replica has
		// seen are gone from the store (expired), so they change nothing.
		last, err := r.store.Last(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
		}
		if err := r.waitRevision(ctx, last); err != nil {
			return nil, err
		}
		cur = r.snap.Load()
		after = last
		if attempt > 0 {
			// Concurrent writers collide on the same condition: spread them.
			time.Sleep(time.Duration(rand.IntN(1000*(attempt+1))) * time.Microsecond)
		}
	}
}

// ttlFor is the time to live of a plugin record expiring at exp: at least
// a second (the store's resolution), rounded up.
func ttlFor(exp, now time.Time) time.Duration {
	d := exp.Sub(now)
	if d < time.Second {
		return time.Second
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// livePlugin returns the plugin of cur with the id, or nil when there is
// none or its lease has passed on this replica's clock (the store removes
// it within its resolution of a second).
func (r *Registry) livePlugin(cur *snapshot, id string, now time.Time) *pluginState {
	p := cur.plugin(id)
	if p == nil || now.UnixNano() >= p.expiresNano {
		return nil
	}
	return p
}

func (r *Registry) sharedRegister(ctx context.Context, s Spec, cp compiled) (Contributor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var made Contributor
	snap, err := r.sharedWrite(ctx, func(cur *snapshot) (string, []byte, time.Duration, error) {
		now := r.now()
		c := cp.c
		c.CreatedAt = now
		var p *pluginState
		if s.Plugin != "" {
			if p = r.livePlugin(cur, s.Plugin, now); p == nil {
				return "", nil, 0, fmt.Errorf("register contributor %q under plugin %q: %w", s.Name, s.Plugin, ErrPluginNotFound)
			}
			exp := p.pub.ExpiresAt
			c.ExpiresAt = &exp
		}
		if cur.entry(s.Name) != nil {
			return "", nil, 0, fmt.Errorf("register contributor %q: %w", s.Name, ErrDuplicateContributor)
		}
		for _, k := range c.Keys {
			if o := cur.owner(k.Key); o != nil {
				return "", nil, 0, fmt.Errorf("register contributor %q: %w", s.Name, &KeyOwnedError{Key: k.Key, Owner: o.pub.Name})
			}
		}
		made = c
		if p == nil {
			v, err := json.Marshal(toStateContributor(c))
			return contributorKey(s.Name), v, 0, err
		}
		v, err := pluginRecord(cur, p.pub, &c, "")
		return pluginKey(p.pub.ID), v, ttlFor(p.pub.ExpiresAt, now), err
	})
	if err != nil {
		return Contributor{}, wrapShared(fmt.Sprintf("register contributor %q", s.Name), err)
	}
	r.logger.Info("contributor registered", "contributor", s.Name, "kind", made.Kind, "plugin", s.Plugin, "keys", len(made.Keys), "revision", snap.rev)
	if e := snap.entry(s.Name); e != nil {
		return e.pub.clone(), nil
	}
	return made, nil
}

// wrapShared adds context to err unless it already says what failed.
func wrapShared(what string, err error) error {
	if errors.Is(err, ErrStoreUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return err
}

func (r *Registry) sharedUnregister(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := r.sharedWrite(ctx, func(cur *snapshot) (string, []byte, time.Duration, error) {
		e := cur.entry(name)
		if e == nil {
			return "", nil, 0, fmt.Errorf("unregister contributor %q: %w", name, ErrContributorNotFound)
		}
		if e.pub.Builtin {
			return "", nil, 0, fmt.Errorf("unregister contributor %q: %w", name, ErrBuiltinContributor)
		}
		if e.pub.Plugin == "" {
			return contributorKey(name), nil, 0, nil
		}
		now := r.now()
		p := r.livePlugin(cur, e.pub.Plugin, now)
		if p == nil {
			return "", nil, 0, fmt.Errorf("unregister contributor %q: %w", name, ErrContributorNotFound)
		}
		v, err := pluginRecord(cur, p.pub, nil, name)
		return pluginKey(p.pub.ID), v, ttlFor(p.pub.ExpiresAt, now), err
	})
	if err != nil {
		return wrapShared(fmt.Sprintf("unregister contributor %q", name), err)
	}
	r.logger.Info("contributor unregistered", "contributor", name)
	return nil
}

func (r *Registry) sharedOpenPlugin(ctx context.Context, name string, lease time.Duration) (Plugin, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var made Plugin
	_, err := r.sharedWrite(ctx, func(cur *snapshot) (string, []byte, time.Duration, error) {
		now := r.now()
		made = Plugin{
			ID: r.ids.New("plg_"), Name: name, Lease: lease,
			CreatedAt: now, ExpiresAt: now.Add(lease), Contributors: []string{},
		}
		v, err := pluginRecord(cur, made, nil, "")
		return pluginKey(made.ID), v, ttlFor(made.ExpiresAt, now), err
	})
	if err != nil {
		return Plugin{}, wrapShared(fmt.Sprintf("open plugin %q", name), err)
	}
	r.logger.Info("plugin opened", "plugin", made.ID, "name", name, "lease", lease)
	return made.clone(), nil
}

func (r *Registry) sharedRenewPlugin(ctx context.Context, id string, lease time.Duration) (Plugin, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var made Plugin
	_, err := r.sharedWrite(ctx, func(cur *snapshot) (string, []byte, time.Duration, error) {
		now := r.now()
		p := r.livePlugin(cur, id, now)
		if p == nil {
			return "", nil, 0, fmt.Errorf("renew plugin %q: %w", id, ErrPluginNotFound)
		}
		l, err := checkLease(lease, p.pub.Lease)
		if err != nil {
			return "", nil, 0, fmt.Errorf("renew plugin %q: %w", id, err)
		}
		made = p.pub.clone()
		made.Lease, made.ExpiresAt = l, now.Add(l)
		v, err := pluginRecord(cur, made, nil, "")
		return pluginKey(id), v, ttlFor(made.ExpiresAt, now), err
	})
	if err != nil {
		return Plugin{}, wrapShared(fmt.Sprintf("renew plugin %q", id), err)
	}
	r.logger.Debug("plugin renewed", "plugin", id, "expires_at", made.ExpiresAt)
	return made, nil
}

func (r *Registry) sharedClosePlugin(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int
	_, err := r.sharedWrite(ctx, func(cur *snapshot) (string, []byte, time.Duration, error) {
		p := r.livePlugin(cur, id, r.now())
		if p == nil {
			return "", nil, 0, fmt.Errorf("close plugin %q: %w", id, ErrPluginNotFound)
		}
		n = len(p.pub.Contributors)
		return pluginKey(id), nil, 0, nil
	})
	if err != nil {
		return wrapShared(fmt.Sprintf("close plugin %q", id), err)
	}
	r.logger.Info("plugin closed", "plugin", id, "contributors", n)
	return nil
}
