package shellenv

import (
	"slices"
	"strings"
	"time"
)

// slotKind says how Collect computes one declared key.
type slotKind uint8

const (
	slotAbsent   slotKind = iota // declared, never set by this resolver
	slotStatic                   // value is fixed
	slotTemplate                 // tmpl over execution facts
	slotSession                  // the agent's id
	slotWebhook                  // from the contributor's webhook response
)

// slot is one declared key with the recipe for its value. A snapshot keeps
// its slots sorted by key, so Collect emits a sorted overlay without sorting.
type slot struct {
	key   string
	e     *entry
	kind  slotKind
	value string
	tmpl  *template
	di    int // index of the key's declaration in e.decls
}

// entry is one registered contributor with everything Collect and
// Declarations need precomputed. Entries are immutable once built; a change
// of lease builds new ones.
type entry struct {
	pub         Contributor // canonical public form; never handed out uncopied
	expiresNano int64       // plugin lease end in Unix ns; 0 = none
	slots       []slot      // sorted by key
	decls       []Declaration
	keys        []string // sorted declared keys, sent to webhooks
	templates   map[string]*template
}

func (e *entry) expired(nowNano int64) bool {
	return e.expiresNano != 0 && nowNano >= e.expiresNano
}

// newEntry builds the entry for c. templates holds the parsed templates of
// a template contributor.
func newEntry(c Contributor, templates map[string]*template) *entry {
	e := &entry{pub: c, templates: templates}
	if c.ExpiresAt != nil {
		e.expiresNano = c.ExpiresAt.UnixNano()
	}
	e.slots = make([]slot, len(c.Keys))
	e.decls = make([]Declaration, len(c.Keys))
	e.keys = make([]string, len(c.Keys))
	var webhookURL string
	if c.Kind == KindWebhook {
		webhookURL = RedactURL(c.Resolver.URL)
	}
	for i, k := range c.Keys {
		s := slot{key: k.Key, e: e, di: i}
		switch c.Kind {
		case KindStatic:
			if v, ok := c.Resolver.Values[k.Key]; ok {
				s.kind, s.value = slotStatic, v
			}
		case KindTemplate:
			if t, ok := templates[k.Key]; ok {
				if v, ok := t.constant(); ok {
					s.kind, s.value = slotStatic, v
				} else {
					s.kind, s.tmpl = slotTemplate, t
				}
			}
		case KindWebhook:
			s.kind = slotWebhook
		}
		e.slots[i] = s
		e.decls[i] = Declaration{
			Key: k.Key, Description: k.Description, Contributor: c.Name,
			Builtin: c.Builtin, Plugin: c.Plugin, ExpiresAt: c.ExpiresAt,
			Kind: c.Kind, WebhookURL: webhookURL,
		}
		if c.Kind == KindTemplate {
			e.decls[i].Template = c.Resolver.Values[k.Key]
		}
		e.keys[i] = k.Key
	}
	return e
}

// builtinEntries returns the built-in contributors for a registry whose home
// is home.
func builtinEntries(home string, created time.Time) []*entry {
	mk := func(name, key, desc string, kind slotKind, value string) *entry {
		e := newEntry(Contributor{
			Name: name, Kind: KindBuiltin, Builtin: true,
			Keys:      []KeySpec{{Key: key, Description: desc}},
			CreatedAt: created,
		}, nil)
		e.slots[0].kind, e.slots[0].value = kind, value
		return e
	}
	return []*entry{
		mk("dsh.home", KeyHome, "Absolute path of the dshd home directory.", slotStatic, home),
		mk("dsh.session", KeySessionID, "Id of the agent session running the command; absent when the command runs for no agent.", slotSession, ""),
		mk("dsh.shell", KeyShell, "Always 1 inside a command run by dshd.", slotStatic, "1"),
	}
}

// pluginState is one open plugin as stored in a snapshot. Immutable.
type pluginState struct {
	pub         Plugin
	expiresNano int64
}

// snapshot is the whole registry state at one instant. It is never modified
// after being published; every change derives a new one.
type snapshot struct {
	entries  []*entry       // sorted by name, built-ins included
	slots    []slot         // every declared key, sorted by key
	decls    []Declaration  // parallel to slots
	webhooks []*entry       // webhook contributors, sorted by name
	plugins  []*pluginState // sorted by id
	// earliestNano is the earliest plugin lease end (0 = no plugins). Until
	// then, readers need not check expiry per item.
	earliestNano int64
	kinds        map[string]int // contributor count by kind
	// rev is the store revision a shared registry's snapshot reflects.
	rev uint64
}

func cmpEntry(a, b *entry) int { return strings.Compare(a.pub.Name, b.pub.Name) }
func cmpSlot(a, b slot) int    { return strings.Compare(a.key, b.key) }

// mayExpire reports whether some item of s may have expired at nowNano.
func (s *snapshot) mayExpire(nowNano int64) bool {
	return s.earliestNano != 0 && nowNano >= s.earliestNano
}

// entry returns the entry named name, or nil.
func (s *snapshot) entry(name string) *entry {
	i, ok := slices.BinarySearchFunc(s.entries, name, func(e *entry, n string) int { return strings.Compare(e.pub.Name, n) })
	if !ok {
		return nil
	}
	return s.entries[i]
}

// owner returns the entry that declares key, or nil.
func (s *snapshot) owner(key string) *entry {
	i, ok := slices.BinarySearchFunc(s.slots, key, func(sl slot, k string) int { return strings.Compare(sl.key, k) })
	if !ok {
		return nil
	}
	return s.slots[i].e
}

// plugin returns the plugin with the id, or nil.
func (s *snapshot) plugin(id string) *pluginState {
	i, ok := slices.BinarySearchFunc(s.plugins, id, func(p *pluginState, id string) int { return strings.Compare(p.pub.ID, id) })
	if !ok {
		return nil
	}
	return s.plugins[i]
}

// change derives a new snapshot from s: entries for which drop reports true
// are removed, add (in any order) is merged in, and plugins replaces the
// plugin list. Keys of add must not clash with kept entries. Cost is linear
// in the size of s plus sorting add.
func (s *snapshot) change(drop func(*entry) bool, add []*entry, plugins []*pluginState) *snapshot {
	if drop == nil {
		drop = func(*entry) bool { return false }
	}
	add = slices.Clone(add)
	slices.SortFunc(add, cmpEntry)

	n := &snapshot{plugins: plugins, kinds: make(map[string]int, 4)}

	// Entries and webhooks: filter, then merge the sorted additions.
	kept := make([]*entry, 0, len(s.entries)+len(add))
	for _, e := range s.entries {
		if !drop(e) {
			kept = append(kept, e)
		}
	}
	n.entries = mergeSorted(kept, add, cmpEntry)
	for _, e := range n.entries {
		n.kinds[e.pub.Kind]++
		if e.pub.Kind == KindWebhook {
			n.webhooks = append(n.webhooks, e)
		}
	}

	// Slots and declarations, in lockstep.
	var addSlots []slot
	for _, e := range add {
		addSlots = append(addSlots, e.slots...)
	}
	slices.SortFunc(addSlots, cmpSlot)
	total := len(s.slots) + len(addSlots)
	n.slots = make([]slot, 0, total)
	n.decls = make([]Declaration, 0, total)
	i, j := 0, 0
	for i < len(s.slots) || j < len(addSlots) {
		if i < len(s.slots) && drop(s.slots[i].e) {
			i++
			continue
		}
		var sl slot
		if j >= len(addSlots) || i < len(s.slots) && s.slots[i].key < addSlots[j].key {
			sl = s.slots[i]
			n.decls = append(n.decls, s.decls[i])
			i++
		} else {
			sl = addSlots[j]
			n.decls = append(n.decls, sl.e.decls[sl.di])
			j++
		}
		n.slots = append(n.slots, sl)
	}

	for _, p := range plugins {
		if n.earliestNano == 0 || p.expiresNano < n.earliestNano {
			n.earliestNano = p.expiresNano
		}
	}
	return n
}

// withPlugins returns a copy of s with the plugin list replaced. Entries
// and keys are shared, which is safe because snapshots are immutable.
func (s *snapshot) withPlugins(plugins []*pluginState) *snapshot {
	n := *s
	n.plugins = plugins
	n.earliestNano = 0
	for _, p := range plugins {
		if n.earliestNano == 0 || p.expiresNano < n.earliestNano {
			n.earliestNano = p.expiresNano
		}
	}
	return &n
}

// withExpiry returns a copy of e whose lease ends at t.
func (e *entry) withExpiry(t time.Time) *entry {
	c := e.pub
	c.ExpiresAt = &t
	return newEntry(c, e.templates)
}

// mergeSorted merges two slices sorted by cmp into a new one.
func mergeSorted[T any](a, b []T, cmp func(T, T) int) []T {
	if len(b) == 0 {
		return a
	}
	out := make([]T, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if cmp(a[i], b[j]) <= 0 {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}
