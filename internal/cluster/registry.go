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
}

var _ shellenv.Store = (*RegistryStore)(nil)

// RegistryStore returns the registry bucket as a shellenv.Store.
func (n *Node) RegistryStore() *RegistryStore {
	return &RegistryStore{js: n.js, strm: n.regStrm, prefix: "$KV." + RegistryBucket + "."}
}

// Write publishes key's new value (or its delete marker) on the condition
// that the last record of the whole bucket is at revision after: the
// expected-last-subject-sequence check runs against the bucket's wildcard
// subject, so any change that landed in between makes this one fail with
// shellenv.ErrStoreConflict and nothing is written.
func (s *RegistryStore) Write(ctx context.Context, key string, value []byte, ttl time.Duration, after uint64) (uint64, error) {
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

// FollowRegistry watches the registry bucket until ctx ends: the current
// records go to reg.Load once, then every later change to reg.Apply, in
// bucket order. The watch is an ordered consumer, which resumes where it
// stopped after a lost connection. It returns an error only when the
// watch cannot start.
func (n *Node) FollowRegistry(ctx context.Context, reg Applier) error {
	w, err := n.registry.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("cluster: watch registry: %w", err)
	}
	go func() {
		defer w.Stop()
		var initial []shellenv.Change
		index := map[string]int{}
		var rev uint64
		loaded := false
		for e := range w.Updates() {
			if e == nil {
				if !loaded {
					reg.Load(initial, rev)
					initial, index, loaded = nil, nil, true
				}
				continue
			}
			c := shellenv.Change{Key: e.Key(), Revision: e.Revision(), Deleted: e.Operation() != jetstream.KeyValuePut}
			if !c.Deleted {
				c.Value = e.Value()
			}
			if loaded {
				reg.Apply(c)
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
	}()
	return nil
}
