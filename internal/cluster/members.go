package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MembersBucket records every replica id that ever joined the cluster (one
// key per id, kept for good), so that an id naming a replica that never
// existed is told apart from one naming a replica that is down.
const MembersBucket = "dshd_members"

// memberLookupTimeout bounds the look-up of an id this replica has not
// seen join.
const memberLookupTimeout = time.Second

func (n *Node) membersBucket(ctx context.Context) error {
	var err error
	n.members, err = n.createKV(ctx, "members bucket", jetstream.KeyValueConfig{
		Bucket:      MembersBucket,
		Description: "dshd replica ids that ever joined the cluster",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.StoreReplicas,
	})
	return err
}

// join records this replica in MembersBucket.
func (n *Node) join(ctx context.Context) error {
	if _, err := n.members.Put(ctx, n.cfg.ReplicaID, []byte(n.self.URL)); err != nil {
		return fmt.Errorf("cluster: record this replica in %s: %w", MembersBucket, err)
	}
	n.sawMember(n.cfg.ReplicaID)
	return nil
}

func (n *Node) sawMember(id string) {
	n.view.mu.Lock()
	n.view.known[id] = true
	n.view.mu.Unlock()
}

// member reports whether replica id ever joined the cluster. When that
// cannot be known now (NATS unreachable, the look-up times out) it
// answers true: the caller then answers "unavailable", which is retried,
// rather than "does not exist".
func (n *Node) member(id string) bool {
	n.view.mu.Lock()
	known := n.view.known[id]
	n.view.mu.Unlock()
	if known {
		return true
	}
	if !n.Online() {
		return true
	}
	ctx, cancel := context.WithTimeout(n.ctx, memberLookupTimeout)
	defer cancel()
	_, err := n.members.Get(ctx, id)
	switch {
	case err == nil:
		n.sawMember(id)
		return true
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false
	default:
		return true
	}
}
