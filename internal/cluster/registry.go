package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dshd/dshd/internal/shellenv"
)

// Header names of the JetStream publish protocol (server constants).
const (
	hdrExpectedLastSubjSeqSubj = "Nats-Expected-Last-Subject-Sequence-Subject"
	hdrKVOperation             = "KV-Operation"
)

// RegistryStore is the registry bucket as a shellenv.Store.
type RegistryStore struct {
	js     jetstream.JetStream
	strm   jetstream.Stream
	prefix string // "$KV.<bucket>."
	online func() bool
}

var _ shellenv.Store = (*RegistryStore)(nil)

// RegistryStore returns the registry bucket as a shellenv.Store.
func (n *Node) RegistryStore() *RegistryStore {
	return &RegistryStore{js: n.js, strm: n.regStrm, prefix: "$KV." + RegistryBucket + ".", online: n.Online}
}

// Write publishes key's new value (or its delete marker) on the condition
// that the last record of the whole bucket is at revision after: the
// expected-last-subject-sequence check runs against the bucket's wildcard
// subject, so any change that landed in between makes this one fail with
// shellenv.ErrStoreConflict and nothing is written.
func (s *RegistryStore) Write(ctx context.Context, key string, value []byte, ttl time.Duration, after uint64) (uint64, error) {
	if !s.online() {
		return 0, fmt.Errorf("write registry record %s: %w", key, ErrNotConnected)
	}
	m := nats.NewMsg(s.prefix + key)
	m.Data = value
	if value == nil {
		m.Header.Set(hdrKVOperation, "DEL")
	}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(after, 10))
	m.Header.Set(hdrExpectedLastSubjSeqSubj, s.prefix+">")
	var opts []jetstream.PublishOpt
	if ttl > 0 {
		opts = append(opts, jetstream.WithMsgTTL(ttl))
	}
	ack, err := s.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return 0, fmt.Errorf("%w: %w", shellenv.ErrStoreConflict, err)
		}
		return 0, fmt.Errorf("write registry record %s: %w", key, err)
	}
	return ack.Sequence, nil
}

// Last returns the revision of the bucket's last record, 0 when it holds
// none.
func (s *RegistryStore) Last(ctx context.Context) (uint64, error) {
	if !s.online() {
		return 0, fmt.Errorf("last registry record: %w", ErrNotConnected)
	}
	msg, err := s.strm.GetLastMsgForSubject(ctx, s.prefix+">")
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("last registry record: %w", err)
	}
	return msg.Sequence, nil
}

// Applier is what FollowRegistry feeds: *shellenv.Registry.
type Applier interface {
	Load(changes []shellenv.Change, rev uint64)
	Apply(c shellenv.Change)
}

// registryStall is how long the registry watch may stay behind the
// bucket without delivering anything before it is started again. An
// ordered consumer lives on one NATS node; when that node dies, the
// client notices only after missed idle heartbeats, which took longer
// than a replica should go without the registry's changes.
const registryStall = 3 * time.Second

// FollowRegistry watches the registry bucket until ctx ends: the current
// records go to reg.Load once, then every later change to reg.Apply, in
// bucket order. The watch is an ordered consumer; when the connection to
// NATS is back after being lost, a new watch resumes from the next
// revision at once (the ordered consumer would find out only after missing
// its idle heartbeats, seconds later), and when it stays behind the
// bucket for registryStall without delivering (its consumer was on a NATS
// node that died), likewise. It returns an error only when the watch
// cannot start.
func (n *Node) FollowRegistry(ctx context.Context, reg Applier) error {
	w, err := n.registry.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("cluster: watch registry: %w", err)
	}
	go n.followRegistry(ctx, reg, w)
	return nil
}

// followRegistry feeds reg from w, and from the watches that replace it.
func (n *Node) followRegistry(ctx context.Context, reg Applier, w jetstream.KeyWatcher) {
	f := &registryFollow{n: n, ctx: ctx, reg: reg, w: w, index: map[string]int{}}
	defer func() { f.w.Stop() }()
	check := time.NewTicker(time.Second)
	defer check.Stop()
	back := n.link.reconnected()
	for {
		select {
		case <-ctx.Done():
			return
		case <-back:
			back = n.link.reconnected()
			if f.loaded {
				f.restart("reconnected to NATS")
			}
		case <-check.C:
			if f.stalled() {
				f.restart("stalled behind the bucket")
			}
		case e, ok := <-f.w.Updates():
			if !ok {
				return
			}
			f.deliver(e)
		}
	}
}

// registryFollow is the state of followRegistry's loop.
type registryFollow struct {
	n       *Node
	ctx     context.Context
	reg     Applier
	w       jetstream.KeyWatcher
	initial []shellenv.Change
	index   map[string]int
	rev     uint64    // the last revision given to reg
	loaded  bool      // reg has had its first snapshot
	behind  time.Time // since when the bucket is ahead of rev with no delivery
}

// restart watches again from the revision after rev.
func (f *registryFollow) restart(why string) {
	nw, err := f.n.registry.WatchAll(f.ctx, jetstream.ResumeFromRevision(f.rev+1))
	if err != nil {
		f.n.logger.Warn("registry watch not restarted", "why", why, "revision", f.rev, "err", err)
		f.behind = time.Now()
		return
	}
	f.n.logger.Info("registry watch restarted from the next revision", "why", why, "revision", f.rev)
	f.w.Stop()
	f.w, f.behind = nw, time.Time{}
}

// stalled reports, at each check, whether the watch has stayed behind the
// bucket for registryStall without delivering.
func (f *registryFollow) stalled() bool {
	if !f.loaded {
		return false
	}
	if !f.n.registryBehind(f.ctx, f.rev) {
		f.behind = time.Time{}
		return false
	}
	if f.behind.IsZero() {
		f.behind = time.Now()
		return false
	}
	return time.Since(f.behind) >= registryStall
}

// deliver gives reg one entry of the watch: before the first snapshot it
// is gathered (nil marks the snapshot's end, loaded then), after it
// applied, unless a restarted watch delivers it again.
func (f *registryFollow) deliver(e jetstream.KeyValueEntry) {
	if e == nil {
		if !f.loaded {
			f.reg.Load(f.initial, f.rev)
			f.initial, f.index, f.loaded = nil, nil, true
		}
		return
	}
	if f.loaded && e.Revision() <= f.rev {
		return // delivered again by a restarted watch
	}
	f.behind = time.Time{}
	c := shellenv.Change{Key: e.Key(), Revision: e.Revision(), Deleted: e.Operation() != jetstream.KeyValuePut}
	if !c.Deleted {
		c.Value = e.Value()
	}
	if f.loaded {
		f.reg.Apply(c)
		f.rev = c.Revision
		return
	}
	// Before the first snapshot, a key may come twice (a change landing
	// during the initial delivery): keep its last value.
	if i, ok := f.index[c.Key]; ok {
		f.initial[i].Deleted = true
	}
	f.index[c.Key] = len(f.initial)
	f.initial = append(f.initial, c)
	f.rev = c.Revision
}

// registryBehind reports whether the bucket holds a record after rev. An
// error (NATS unreachable) counts as not behind: a new watch could not
// start either.
func (n *Node) registryBehind(ctx context.Context, rev uint64) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	last, err := n.RegistryStore().Last(ctx)
	return err == nil && last > rev
}
