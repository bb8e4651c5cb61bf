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
	defer func() { w.Stop() }()
	var (
		initial []shellenv.Change
		index   = map[string]int{}
		rev     uint64 // the last revision given to reg
		loaded  bool
		behind  time.Time // since when the bucket is ahead of rev with no delivery
	)
	check := time.NewTicker(time.Second)
	defer check.Stop()
	back := n.link.reconnected()
	// restart watches again from the revision after rev.
	restart := func(why string) {
		nw, err := n.registry.WatchAll(ctx, jetstream.ResumeFromRevision(rev+1))
		if err != nil {
			n.logger.Warn("registry watch not restarted", "why", why, "revision", rev, "err", err)
			behind = time.Now()
			return
		}
		n.logger.Info("registry watch restarted from the next revision", "why", why, "revision", rev)
		w.Stop()
		w, behind = nw, time.Time{}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-back:
			back = n.link.reconnected()
			if loaded {
				restart("reconnected to NATS")
			}
		case <-check.C:
			if !loaded {
				continue
			}
			if !n.registryBehind(ctx, rev) {
				behind = time.Time{}
				continue
			}
			if behind.IsZero() {
				behind = time.Now()
				continue
			}
			if time.Since(behind) < registryStall {
				continue
			}
			restart("stalled behind the bucket")
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				if !loaded {
					reg.Load(initial, rev)
					initial, index, loaded = nil, nil, true
				}
				continue
			}
			if loaded && e.Revision() <= rev {
				continue // delivered again by a restarted watch
			}
			behind = time.Time{}
			c := shellenv.Change{Key: e.Key(), Revision: e.Revision(), Deleted: e.Operation() != jetstream.KeyValuePut}
			if !c.Deleted {
				c.Value = e.Value()
			}
			if loaded {
				reg.Apply(c)
				rev = c.Revision
				continue
			}
			// Before the first snapshot, a key may come twice (a change
			// landing during the initial delivery): keep its last value.
			if i, ok := index[c.Key]; ok {
				initial[i].Deleted = true
			}
			index[c.Key] = len(initial)
			initial = append(initial, c)
			rev = c.Revision
		}
	}
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
