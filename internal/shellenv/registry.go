package shellenv

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dshd/dshd/internal/ids"
)

// Defaults applied by New.
const (
	// DefaultWebhookTimeout bounds all webhook calls of one Collect.
	DefaultWebhookTimeout = 2 * time.Second
	// DefaultExpiryInterval is how often Run disposes expired plugins.
	DefaultExpiryInterval = time.Second
	// DefaultStoreTimeout bounds one change of a shared registry.
	DefaultStoreTimeout = 10 * time.Second
	// MaxWebhookResponse is the largest webhook response body accepted.
	MaxWebhookResponse = 1 << 20
)

// Options configures a Registry.
type Options struct {
	Home           string           // absolute; the DSH_HOME value
	StatePath      string           // durable contributors file, e.g. <home>/contributors.json; "" = keep them in memory only
	Now            func() time.Time // nil = time.Now; drives plugin leases
	WebhookTimeout time.Duration    // default 2s; one deadline for all webhooks of one Collect
	HTTPClient     *http.Client     // nil = a client that ignores proxy variables and follows no redirects
	Logger         *slog.Logger     // nil = discard
	Registerer     prometheus.Registerer
	ExpiryInterval time.Duration // how often Run disposes expired plugins; default 1s
	// Store, when set, makes the registry shared (cluster mode): its
	// contributors and plugins live in the store, StatePath is not used,
	// and snapshots are built by Load and Apply from the store's changes.
	Store Store
	// StoreTimeout bounds one change of a shared registry, catching up
	// with the store included; default 10s.
	StoreTimeout time.Duration
}

// Registry is the registry of environment contributors and plugins. It is
// safe for concurrent use. Create it with New.
type Registry struct {
	mu   sync.Mutex // serialises writers; readers never take it
	snap atomic.Pointer[snapshot]

	// Shared registries only (see shared.go).
	store        Store
	applyMu      sync.Mutex    // serialises Load and Apply
	applied      chan struct{} // closed and replaced at every applied change
	ready        chan struct{} // closed by Load
	readyOnce    sync.Once
	storeTimeout time.Duration

	home           string
	statePath      string
	now            func() time.Time
	webhookTimeout time.Duration
	expiryInterval time.Duration
	client         *http.Client
	logger         *slog.Logger
	metrics        *metrics
	ids            *ids.Source
}

// New returns a Registry holding the built-in contributors and the durable
// contributors restored from opts.StatePath. Temporary files of a save that
// a crash interrupted (".<state file>.*.tmp") are removed first. It returns an error if
// opts.Home is not absolute, if the metrics cannot be registered, or if the
// state file cannot be read or is corrupt (the error names the file).
func New(opts Options) (*Registry, error) {
	if !filepath.IsAbs(opts.Home) {
		return nil, fmt.Errorf("shellenv: home %q is not an absolute path", opts.Home)
	}
	r := &Registry{
		home:           filepath.Clean(opts.Home),
		statePath:      opts.StatePath,
		now:            opts.Now,
		webhookTimeout: opts.WebhookTimeout,
		expiryInterval: opts.ExpiryInterval,
		client:         opts.HTTPClient,
		logger:         opts.Logger,
		store:          opts.Store,
		storeTimeout:   opts.StoreTimeout,
		applied:        make(chan struct{}),
		ready:          make(chan struct{}),
	}
	if r.storeTimeout <= 0 {
		r.storeTimeout = DefaultStoreTimeout
	}
	if r.store != nil {
		r.statePath = "" // the store holds the durable contributors
	} else {
		close(r.ready)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.webhookTimeout <= 0 {
		r.webhookTimeout = DefaultWebhookTimeout
	}
	if r.expiryInterval <= 0 {
		r.expiryInterval = DefaultExpiryInterval
	}
	if r.client == nil {
		r.client = defaultHTTPClient()
	}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	r.ids = ids.NewSource(r.now)

	var err error
	if r.metrics, err = newMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	entries := builtinEntries(r.home, r.now())
	if r.statePath != "" {
		removeStaleTemps(r.statePath, r.logger)
		restored, err := loadState(r.statePath)
		if err != nil {
			return nil, err
		}
		entries = append(entries, restored...)
		r.logger.Info("restored durable contributors", "count", len(restored), "path", r.statePath)
	}
	r.publish((&snapshot{}).change(nil, entries, nil))
	return r, nil
}

// defaultHTTPClient ignores HTTP_PROXY and friends, so that a webhook on
// localhost is never routed through a proxy, and does not follow redirects,
// so that a webhook answers for itself.
func defaultHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// publish makes s the current snapshot. Callers hold r.mu (or own r).
func (r *Registry) publish(s *snapshot) {
	r.snap.Store(s)
	r.metrics.setKinds(s.kinds)
}

// Register validates s and adds the contributor it describes. A contributor
// without a plugin is durable: it is written to the state file before
// Register returns. On any error nothing is stored. Errors, in the order
// they are checked (see the package documentation):
//   - *DeclarationError matching ErrInvalidDeclaration or ErrReservedKey,
//     listing every problem in s;
//   - ErrPluginNotFound when s.Plugin names no open plugin;
//   - ErrDuplicateContributor when the name is taken;
//   - *KeyOwnedError (ErrKeyOwned) when another contributor owns a key;
//   - the I/O error when the state file cannot be written;
//   - ctx.Err() when ctx is already done.
func (r *Registry) Register(ctx context.Context, s Spec) (Contributor, error) {
	if err := ctx.Err(); err != nil {
		return Contributor{}, err
	}
	cp, problems, onlyReserved := compileSpec(s)
	if len(problems) > 0 {
		de := &DeclarationError{Problems: problems, Err: ErrInvalidDeclaration}
		if onlyReserved {
			de.Err = ErrReservedKey
		}
		return Contributor{}, fmt.Errorf("register contributor %q: %w", s.Name, de)
	}
	if r.store != nil {
		return r.sharedRegister(ctx, s, cp)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	cur := r.expireLocked(now)

	plugins := cur.plugins
	if s.Plugin != "" {
		i := slices.IndexFunc(cur.plugins, func(p *pluginState) bool { return p.pub.ID == s.Plugin })
		if i < 0 {
			return Contributor{}, fmt.Errorf("register contributor %q under plugin %q: %w", s.Name, s.Plugin, ErrPluginNotFound)
		}
		p := *cur.plugins[i]
		names := make([]string, 0, len(p.pub.Contributors)+1)
		names = append(names, p.pub.Contributors...)
		names = append(names, s.Name)
		slices.Sort(names)
		p.pub.Contributors = names
		plugins = slices.Clone(cur.plugins)
		plugins[i] = &p
		exp := p.pub.ExpiresAt
		cp.c.ExpiresAt = &exp
	}
	if cur.entry(s.Name) != nil {
		return Contributor{}, fmt.Errorf("register contributor %q: %w", s.Name, ErrDuplicateContributor)
	}
	for _, k := range cp.c.Keys {
		if o := cur.owner(k.Key); o != nil {
			return Contributor{}, fmt.Errorf("register contributor %q: %w", s.Name, &KeyOwnedError{Key: k.Key, Owner: o.pub.Name})
		}
	}

	cp.c.CreatedAt = now
	e := newEntry(cp.c, cp.templates)
	next := cur.change(nil, []*entry{e}, plugins)
	if s.Plugin == "" {
		if err := r.persist(next); err != nil {
			return Contributor{}, fmt.Errorf("register contributor %q: %w", s.Name, err)
		}
	}
	r.publish(next)
	r.logger.Info("contributor registered", "contributor", s.Name, "kind", cp.c.Kind, "plugin", s.Plugin, "keys", len(cp.c.Keys))
	return e.pub.clone(), nil
}

// persist writes the durable contributors of s to the state file, if any.
func (r *Registry) persist(s *snapshot) error {
	if r.statePath == "" {
		return nil
	}
	data, err := encodeState(s)
	if err != nil {
		return fmt.Errorf("encode contributors: %w", err)
	}
	if err := writeFileAtomic(r.statePath, data, 0o600); err != nil {
		return fmt.Errorf("write contributors file: %w", err)
	}
	return nil
}

// Unregister disposes the named contributor: every later Collect lacks its
// keys, overlays already collected keep them, and the name and keys become
// free. It returns ErrContributorNotFound, ErrBuiltinContributor, the I/O
// error when the state file cannot be written (nothing changes then), or
// ctx.Err() when ctx is already done.
func (r *Registry) Unregister(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.store != nil {
		return r.sharedUnregister(ctx, name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.expireLocked(r.now())
	e := cur.entry(name)
	if e == nil {
		return fmt.Errorf("unregister contributor %q: %w", name, ErrContributorNotFound)
	}
	if e.pub.Builtin {
		return fmt.Errorf("unregister contributor %q: %w", name, ErrBuiltinContributor)
	}
	plugins := cur.plugins
	if e.pub.Plugin != "" {
		plugins = make([]*pluginState, len(cur.plugins))
		for i, p := range cur.plugins {
			if p.pub.ID == e.pub.Plugin {
				q := *p
				q.pub.Contributors = slices.DeleteFunc(slices.Clone(p.pub.Contributors), func(n string) bool { return n == name })
				p = &q
			}
			plugins[i] = p
		}
	}
	next := cur.change(func(x *entry) bool { return x == e }, nil, plugins)
	if e.pub.Plugin == "" {
		if err := r.persist(next); err != nil {
			return fmt.Errorf("unregister contributor %q: %w", name, err)
		}
	}
	r.publish(next)
	r.logger.Info("contributor unregistered", "contributor", name)
	return nil
}

// Contributor returns the named contributor (a copy). It returns
// ErrContributorNotFound when there is none or its plugin's lease has
// passed.
func (r *Registry) Contributor(name string) (Contributor, error) {
	s := r.snap.Load()
	e := s.entry(name)
	if e == nil || e.expiresNano != 0 && e.expired(r.now().UnixNano()) {
		return Contributor{}, fmt.Errorf("contributor %q: %w", name, ErrContributorNotFound)
	}
	return e.pub.clone(), nil
}

// Contributors returns every contributor, built-ins included, sorted by
// name. Contributors of plugins whose lease has passed are left out even
// before they are disposed.
func (r *Registry) Contributors() []Contributor {
	s := r.snap.Load()
	check, nowNano := r.expiryCheck(s)
	out := make([]Contributor, 0, len(s.entries))
	for _, e := range s.entries {
		if check && e.expired(nowNano) {
			continue
		}
		out = append(out, e.pub.clone())
	}
	return out
}

// Declarations returns every declared key, built-ins included, sorted by
// key. It never runs a resolver. Keys of plugins whose lease has passed are
// left out even before they are disposed. The returned slice is the
// caller's; the ExpiresAt values it points to are shared and must not be
// modified.
func (r *Registry) Declarations() []Declaration {
	s := r.snap.Load()
	if check, nowNano := r.expiryCheck(s); check {
		out := make([]Declaration, 0, len(s.decls))
		for i := range s.slots {
			if !s.slots[i].e.expired(nowNano) {
				out = append(out, s.decls[i])
			}
		}
		return out
	}
	return slices.Clone(s.decls)
}

// expiryCheck reads the clock only when s holds plugins, and reports whether
// some of them may have expired by now.
func (r *Registry) expiryCheck(s *snapshot) (check bool, nowNano int64) {
	if s.earliestNano == 0 {
		return false, 0
	}
	nowNano = r.now().UnixNano()
	return s.mayExpire(nowNano), nowNano
}
