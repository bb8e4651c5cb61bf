package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// createAttempts and createPause bound how long a replica keeps trying to
// create a bucket or stream: 20 attempts, 100 ms apart (within the
// connection's ConnectTimeout).
const (
	createAttempts = 20
	createPause    = 100 * time.Millisecond
)

// createWithRetry runs create, a JetStream create-or-update of a bucket or
// stream, until it succeeds: at most createAttempts times, createPause
// apart, and not past ctx. Several replicas may start at once, and a meta
// leader may still be elected: creating with the same configuration is
// idempotent, so a retry after a collision or a timeout succeeds. The error
// names what (the bucket or stream) and wraps the last attempt's.
func createWithRetry[T any](ctx context.Context, what string, create func(context.Context) (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for attempt := 1; ; attempt++ {
		if v, err = create(ctx); err == nil {
			return v, nil
		}
		if attempt == createAttempts {
			break
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("cluster: %s: %w", what, err)
		case <-time.After(createPause):
		}
	}
	return v, fmt.Errorf("cluster: %s: %w", what, err)
}

// createKV creates (or updates to cfg) a key-value bucket, retrying as
// createWithRetry does.
func (n *Node) createKV(ctx context.Context, what string, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return createWithRetry(ctx, what, func(ctx context.Context) (jetstream.KeyValue, error) {
		return n.js.CreateOrUpdateKeyValue(ctx, cfg)
	})
}
