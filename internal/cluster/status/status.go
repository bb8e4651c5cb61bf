// Package status holds what a dshd replica reports of its cluster: plain
// values, so that packages reporting them need not import NATS.
package status

import "time"

// Status is one replica's view of its cluster.
type Status struct {
	ReplicaID    string
	AdvertiseURL string
	Connected    bool      // the NATS connection is up
	Replicas     []Replica // replicas whose heartbeat is recent, this one included, sorted by id
	// RegistryRevision is the registry bucket revision this replica's
	// snapshot reflects; StoreRevision the bucket's last revision when
	// last sampled (at SampledAt); Lag their difference, in changes.
	RegistryRevision uint64
	StoreRevision    uint64
	Lag              uint64
	SampledAt        time.Time // zero: never sampled
	// DuplicateID is set when another process heartbeats with this
	// replica's id: the configuration is wrong, and routing by id is not
	// safe until it is fixed.
	DuplicateID bool
}

// Replica is one replica as seen through its heartbeats.
type Replica struct {
	ID               string
	URL              string
	StartedAt        time.Time
	LastSeen         time.Time // this replica's clock, when the heartbeat arrived
	RegistryRevision uint64    // the revision that replica's snapshot reflected
	Self             bool
}
