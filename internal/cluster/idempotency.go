package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dshd/dshd/internal/cluster/status"
)

// IdempotencyBucket holds one claim per Idempotency-Key of requests that
// name no agent: the replica that first received the key. (A request
// naming an agent always runs on the agent's replica, which keeps its keys.)
const IdempotencyBucket = "dshd_idempotency"

// DefaultIdempotencyWindow is how long a claim is kept when the
// configuration does not say (the jobs' idempotency window).
const DefaultIdempotencyWindow = 24 * time.Hour

func (n *Node) idempotencyBucket(ctx context.Context) error {
	window := n.cfg.IdempotencyWindow
	if window <= 0 {
		window = DefaultIdempotencyWindow
	}
	var err error
	n.idem, err = n.createKV(ctx, "idempotency bucket", jetstream.KeyValueConfig{
		Bucket:      IdempotencyBucket,
		Description: "dshd Idempotency-Key claims of requests without an agent: key hash → replica id",
		History:     1,
		TTL:         window,
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.StoreReplicas,
	})
	return err
}

// ClaimKey claims an Idempotency-Key of a request that names no agent,
// before anything runs: the first replica to claim it serves every request
// with that key for the idempotency window. It returns nil when this
// replica holds the claim (it was free, or this replica took it before),
// else the base URL and the id of the replica that does. Errors wrap
// status.ErrOwnerUnavailable when that replica is not available, or
// status.ErrClaimUnavailable when the claim cannot be read or written.
func (n *Node) ClaimKey(ctx context.Context, key string) (*url.URL, string, error) {
	if !n.Online() {
		return nil, "", fmt.Errorf("claim idempotency key: %w: %w", status.ErrClaimUnavailable, ErrNotConnected)
	}
	sum := sha256.Sum256([]byte(key))
	k := hex.EncodeToString(sum[:])
	ctx, cancel := context.WithTimeout(ctx, StoreTimeout)
	defer cancel()
	_, err := n.idem.Create(ctx, k, []byte(n.cfg.ReplicaID))
	if err == nil {
		return nil, "", nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, "", fmt.Errorf("claim idempotency key: %w: %w", status.ErrClaimUnavailable, err)
	}
	e, err := n.idem.Get(ctx, k)
	if err != nil {
		return nil, "", fmt.Errorf("read idempotency key claim: %w: %w", status.ErrClaimUnavailable, err)
	}
	owner := string(e.Value())
	if owner == n.cfg.ReplicaID {
		return nil, "", nil
	}
	u, err := n.route("idempotency key of", "request", owner, status.ErrOwnerUnavailable)
	return u, owner, err
}
