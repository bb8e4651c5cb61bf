package shellenv

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Plugin lease bounds.
const (
	DefaultLease = 5 * time.Minute // lease of OpenPlugin(…, 0)
	MinLease     = time.Second     // shortest lease accepted
	MaxLease     = 24 * time.Hour  // longest lease accepted
	// MaxPluginNameLen is the longest plugin name OpenPlugin accepts.
	MaxPluginNameLen = 128
)

// Plugin is an owner scope for contributors. Closing it, or letting its
// lease pass, disposes all of its contributors at once.
type Plugin struct {
	ID           string
	Name         string
	Lease        time.Duration
	CreatedAt    time.Time
	ExpiresAt    time.Time
	Contributors []string // names, sorted
}

func (p Plugin) clone() Plugin {
	p.Contributors = slices.Clone(p.Contributors)
	if p.Contributors == nil {
		p.Contributors = []string{}
	}
	return p
}

// checkLease returns lease, or def when lease is 0, and an error wrapping
// ErrInvalidPlugin when it is outside [MinLease, MaxLease].
func checkLease(lease, def time.Duration) (time.Duration, error) {
	if lease == 0 {
		lease = def
	}
	if lease < MinLease || lease > MaxLease {
		return 0, fmt.Errorf("%w: lease %s is outside [%s, %s]", ErrInvalidPlugin, lease, MinLease, MaxLease)
	}
	return lease, nil
}

// OpenPlugin opens a plugin scope named name whose lease ends lease from
// now (0 = DefaultLease). Its id has the prefix "plg_". It returns an error
// wrapping ErrInvalidPlugin when name is blank, longer than
// MaxPluginNameLen or holds control characters, or when lease is outside
// [MinLease, MaxLease]; ctx.Err() when ctx is already done.
func (r *Registry) OpenPlugin(ctx context.Context, name string, lease time.Duration) (Plugin, error) {
	if err := ctx.Err(); err != nil {
		return Plugin{}, err
	}
	switch {
	case strings.TrimSpace(name) == "":
		return Plugin{}, fmt.Errorf("open plugin: %w: name is required", ErrInvalidPlugin)
	case len(name) > MaxPluginNameLen:
		return Plugin{}, fmt.Errorf("open plugin: %w: name is longer than %d bytes", ErrInvalidPlugin, MaxPluginNameLen)
	case strings.ContainsFunc(name, unicode.IsControl):
		return Plugin{}, fmt.Errorf("open plugin: %w: name contains control characters", ErrInvalidPlugin)
	}
	lease, err := checkLease(lease, DefaultLease)
	if err != nil {
		return Plugin{}, fmt.Errorf("open plugin %q: %w", name, err)
	}
	if r.store != nil {
		return r.sharedOpenPlugin(ctx, name, lease)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	cur := r.expireLocked(now)
	exp := now.Add(lease)
	p := &pluginState{
		pub: Plugin{
			ID: r.ids.New("plg_"), Name: name, Lease: lease,
			CreatedAt: now, ExpiresAt: exp, Contributors: []string{},
		},
		expiresNano: exp.UnixNano(),
	}
	plugins := mergeSorted(cur.plugins, []*pluginState{p}, cmpPlugin)
	r.publish(cur.withPlugins(plugins))
	r.logger.Info("plugin opened", "plugin", p.pub.ID, "name", name, "lease", lease)
	return p.pub.clone(), nil
}

func cmpPlugin(a, b *pluginState) int { return strings.Compare(a.pub.ID, b.pub.ID) }

// Plugin returns the plugin with the id. It returns ErrPluginNotFound when
// there is none or its lease has passed.
func (r *Registry) Plugin(id string) (Plugin, error) {
	s := r.snap.Load()
	p := s.plugin(id)
	if p == nil || r.now().UnixNano() >= p.expiresNano {
		return Plugin{}, fmt.Errorf("plugin %q: %w", id, ErrPluginNotFound)
	}
	return p.pub.clone(), nil
}

// Plugins returns the open plugins sorted by id, leaving out those whose
// lease has passed.
func (r *Registry) Plugins() []Plugin {
	s := r.snap.Load()
	check, nowNano := r.expiryCheck(s)
	out := make([]Plugin, 0, len(s.plugins))
	for _, p := range s.plugins {
		if check && nowNano >= p.expiresNano {
			continue
		}
		out = append(out, p.pub.clone())
	}
	return out
}

// RenewPlugin extends the plugin's lease to end lease from now (0 = the
// plugin's own lease) and makes lease its lease from then on. It returns
// ErrPluginNotFound when there is no such plugin or its lease has already
// passed, an error wrapping ErrInvalidPlugin when lease is outside
// [MinLease, MaxLease], or ctx.Err() when ctx is already done.
func (r *Registry) RenewPlugin(ctx context.Context, id string, lease time.Duration) (Plugin, error) {
	if err := ctx.Err(); err != nil {
		return Plugin{}, err
	}
	if r.store != nil {
		return r.sharedRenewPlugin(ctx, id, lease)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	cur := r.expireLocked(now)
	i := slices.IndexFunc(cur.plugins, func(p *pluginState) bool { return p.pub.ID == id })
	if i < 0 {
		return Plugin{}, fmt.Errorf("renew plugin %q: %w", id, ErrPluginNotFound)
	}
	old := cur.plugins[i]
	lease, err := checkLease(lease, old.pub.Lease)
	if err != nil {
		return Plugin{}, fmt.Errorf("renew plugin %q: %w", id, err)
	}
	exp := now.Add(lease)
	p := &pluginState{pub: old.pub, expiresNano: exp.UnixNano()}
	p.pub.Lease, p.pub.ExpiresAt = lease, exp
	plugins := slices.Clone(cur.plugins)
	plugins[i] = p

	var renewed []*entry
	for _, e := range cur.entries {
		if e.pub.Plugin == id {
			renewed = append(renewed, e.withExpiry(exp))
		}
	}
	var next *snapshot
	if len(renewed) == 0 {
		next = cur.withPlugins(plugins)
	} else {
		next = cur.change(func(e *entry) bool { return e.pub.Plugin == id }, renewed, plugins)
	}
	r.publish(next)
	r.logger.Debug("plugin renewed", "plugin", id, "expires_at", exp)
	return p.pub.clone(), nil
}

// ClosePlugin disposes the plugin and all its contributors in one step:
// later overlays lack all of their keys, and earlier overlays keep them. It
// returns ErrPluginNotFound when there is no such plugin (or its lease has
// passed, in which case it was already disposed), or ctx.Err() when ctx is
// already done.
func (r *Registry) ClosePlugin(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.store != nil {
		return r.sharedClosePlugin(ctx, id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.expireLocked(r.now())
	p := cur.plugin(id)
	if p == nil {
		return fmt.Errorf("close plugin %q: %w", id, ErrPluginNotFound)
	}
	r.publish(r.dropPlugins(cur, map[string]bool{id: true}))
	r.logger.Info("plugin closed", "plugin", id, "contributors", len(p.pub.Contributors))
	return nil
}

// dropPlugins derives a snapshot without the plugins in ids and their
// contributors.
func (r *Registry) dropPlugins(cur *snapshot, ids map[string]bool) *snapshot {
	plugins := make([]*pluginState, 0, len(cur.plugins))
	hasEntries := false
	for _, p := range cur.plugins {
		if ids[p.pub.ID] {
			hasEntries = hasEntries || len(p.pub.Contributors) > 0
			continue
		}
		plugins = append(plugins, p)
	}
	if !hasEntries {
		return cur.withPlugins(plugins)
	}
	return cur.change(func(e *entry) bool { return e.pub.Plugin != "" && ids[e.pub.Plugin] }, nil, plugins)
}

// ExpireLeases disposes every plugin whose lease has passed, with all its
// contributors, in one snapshot swap. Readers already ignore expired plugins;
// this frees their names and keys. Writers call it too before every change.
// A shared registry leaves expiry to its store, which removes a plugin
// record when its time to live passes; ExpireLeases does nothing then.
func (r *Registry) ExpireLeases() {
	if r.store != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked(r.now())
}

// expireLocked disposes the plugins expired at now and returns the current
// snapshot. Callers hold r.mu.
func (r *Registry) expireLocked(now time.Time) *snapshot {
	cur := r.snap.Load()
	nowNano := now.UnixNano()
	if !cur.mayExpire(nowNano) {
		return cur
	}
	expired := map[string]bool{}
	for _, p := range cur.plugins {
		if nowNano >= p.expiresNano {
			expired[p.pub.ID] = true
			r.logger.Info("plugin lease expired", "plugin", p.pub.ID, "name", p.pub.Name, "contributors", len(p.pub.Contributors))
		}
	}
	next := r.dropPlugins(cur, expired)
	r.publish(next)
	return next
}

// Run disposes expired plugins every Options.ExpiryInterval until ctx is
// done.
func (r *Registry) Run(ctx context.Context) {
	t := time.NewTicker(r.expiryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.ExpireLeases()
		}
	}
}
