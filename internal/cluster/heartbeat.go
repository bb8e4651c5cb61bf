package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dshd/dshd/internal/cluster/status"
)

// ReplicasBucket holds one heartbeat per replica, keyed by replica id.
const ReplicasBucket = "dshd_replicas"

// Heartbeat timing: a replica writes its heartbeat every HeartbeatInterval;
// the bucket forgets a heartbeat HeartbeatTTL after it was written, and a
// replica counts another as alive while its last heartbeat is younger
// than HeartbeatTTL.
const (
	HeartbeatInterval = time.Second
	HeartbeatTTL      = 5 * HeartbeatInterval
)

// heartbeat is the value of a replica's key in ReplicasBucket.
type heartbeat struct {
	ID               string    `json:"id"`
	URL              string    `json:"url"`
	Instance         string    `json:"instance"` // random per process: tells two processes with one id apart
	StartedAt        time.Time `json:"startedAt"`
	RegistryRevision uint64    `json:"registryRevision"`
}

// seen is a heartbeat with the time it arrived here.
type seen struct {
	hb heartbeat
	at time.Time
}

// view is what this replica knows of the others.
type view struct {
	mu        sync.Mutex
	peers     map[string]seen
	known     map[string]bool // replica ids known to have joined (MembersBucket, heartbeats)
	dupAt     time.Time       // last heartbeat of another process with this id
	storeRev  uint64
	sampledAt time.Time
}

func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// StartHeartbeats announces this replica (reachable at url, the advertise
// URL when configured) every HeartbeatInterval, follows the others'
// heartbeats, and samples how far the registry bucket is ahead of
// registryRevision (the revision this replica's snapshot reflects). It
// runs until Close. It returns an error only when the watch cannot start.
func (n *Node) StartHeartbeats(url string, registryRevision func() uint64) error {
	if n.cfg.AdvertiseURL != "" {
		url = n.cfg.AdvertiseURL
	}
	n.self = heartbeat{ID: n.cfg.ReplicaID, URL: url, Instance: newInstance(), StartedAt: time.Now().UTC()}
	n.registryRevision = registryRevision
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ConnectTimeout)
	err := n.join(ctx)
	cancel()
	if err != nil {
		return err
	}
	w, err := n.replicas.WatchAll(n.ctx)
	if err != nil {
		return fmt.Errorf("cluster: watch replicas: %w", err)
	}
	go func() {
		defer w.Stop()
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			n.seeHeartbeat(e)
		}
	}()
	n.beat() // announce at once, before the first tick
	go func() {
		t := time.NewTicker(HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-n.ctx.Done():
				return
			case <-t.C:
				n.beat()
			}
		}
	}()
	return nil
}

// seeHeartbeat records one change of the replicas bucket.
func (n *Node) seeHeartbeat(e jetstream.KeyValueEntry) {
	n.view.mu.Lock()
	defer n.view.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(n.view.peers, e.Key()) // a replica that left, or whose heartbeat expired
		return
	}
	var hb heartbeat
	if err := json.Unmarshal(e.Value(), &hb); err != nil || hb.ID != e.Key() {
		n.logger.Warn("ignoring a malformed heartbeat", "key", e.Key())
		return
	}
	if hb.ID == n.self.ID && hb.Instance != n.self.Instance {
		if n.view.dupAt.IsZero() {
			n.logger.Error("another process heartbeats with this replica's id: give every replica its own cluster.replicaId", "replica", hb.ID, "url", hb.URL)
		}
		n.view.dupAt = time.Now()
	}
	n.view.peers[hb.ID] = seen{hb: hb, at: time.Now()}
	n.view.known[hb.ID] = true
}

// beat writes this replica's heartbeat and samples the registry's last
// revision. Failures are logged; the next tick tries again.
func (n *Node) beat() {
	ctx, cancel := context.WithTimeout(n.ctx, HeartbeatInterval)
	defer cancel()
	hb := n.self
	hb.RegistryRevision = n.registryRevision()
	v, _ := json.Marshal(hb)
	if _, err := n.replicas.Put(ctx, hb.ID, v); err != nil && n.ctx.Err() == nil {
		n.logger.Warn("heartbeat not written", "err", err)
	}
	last, err := n.RegistryStore().Last(ctx)
	if err != nil {
		return
	}
	n.view.mu.Lock()
	n.view.storeRev, n.view.sampledAt = last, time.Now()
	n.view.mu.Unlock()
}

// leave deletes this replica's heartbeat, so the others see it gone at
// once rather than when the heartbeat expires.
func (n *Node) leave() {
	if n.self.ID == "" || !n.nc.IsConnected() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = n.replicas.Delete(ctx, n.self.ID)
}

// Status returns this replica's view of the cluster.
func (n *Node) Status() status.Status {
	now := time.Now()
	n.view.mu.Lock()
	defer n.view.mu.Unlock()
	st := status.Status{
		ReplicaID:     n.cfg.ReplicaID,
		AdvertiseURL:  n.self.URL,
		Connected:     n.nc.IsConnected(),
		StoreRevision: n.view.storeRev,
		SampledAt:     n.view.sampledAt,
		DuplicateID:   !n.view.dupAt.IsZero() && now.Sub(n.view.dupAt) < HeartbeatTTL,
	}
	if n.registryRevision != nil {
		st.RegistryRevision = n.registryRevision()
	}
	if st.StoreRevision > st.RegistryRevision {
		st.Lag = st.StoreRevision - st.RegistryRevision
	}
	for id, s := range n.view.peers {
		if now.Sub(s.at) >= HeartbeatTTL {
			continue
		}
		st.Replicas = append(st.Replicas, status.Replica{
			ID: id, URL: s.hb.URL, StartedAt: s.hb.StartedAt, LastSeen: s.at,
			RegistryRevision: s.hb.RegistryRevision, Self: id == n.self.ID,
		})
	}
	slices.SortFunc(st.Replicas, func(a, b status.Replica) int { return strings.Compare(a.ID, b.ID) })
	return st
}

// Replica returns the replica with the id as this replica sees it, and
// whether its heartbeat is recent.
func (n *Node) Replica(id string) (status.Replica, bool) {
	n.view.mu.Lock()
	defer n.view.mu.Unlock()
	s, ok := n.view.peers[id]
	if !ok || time.Since(s.at) >= HeartbeatTTL {
		return status.Replica{}, false
	}
	return status.Replica{ID: id, URL: s.hb.URL, StartedAt: s.hb.StartedAt, LastSeen: s.at, RegistryRevision: s.hb.RegistryRevision, Self: id == n.self.ID}, true
}

// registerMetrics exposes the view on reg: replica id, connection, live
// replicas, registry revision and lag.
func (n *Node) registerMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	gauge := func(name, help string, f func(status.Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(n.Status()) })
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dshd_cluster_replica_info", Help: "1, labelled with this replica's id.",
			ConstLabels: prometheus.Labels{"replica": n.cfg.ReplicaID},
		}, func() float64 { return 1 }),
		gauge("dshd_cluster_connected", "1 while the NATS connection is up.", func(s status.Status) float64 { return b2f(s.Connected) }),
		gauge("dshd_cluster_replicas", "Replicas with a recent heartbeat, this one included.", func(s status.Status) float64 { return float64(len(s.Replicas)) }),
		gauge("dshd_cluster_registry_revision", "Registry bucket revision this replica's snapshot reflects.", func(s status.Status) float64 { return float64(s.RegistryRevision) }),
		gauge("dshd_cluster_registry_lag", "Changes of the registry bucket this replica had not applied when last sampled.", func(s status.Status) float64 { return float64(s.Lag) }),
		gauge("dshd_cluster_duplicate_replica_id", "1 while another process heartbeats with this replica's id.", func(s status.Status) float64 { return b2f(s.DuplicateID) }),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("cluster: register metrics: %w", err)
		}
	}
	return nil
}

// JobOwner returns the base URL of the replica that runs job id, or nil
// when the job is this replica's or its id names no replica. It returns an
// error wrapping status.ErrOwnerUnavailable when the owner has not been
// heard from within HeartbeatTTL, or advertises no HTTP URL.
func (n *Node) JobOwner(id string) (*url.URL, error) {
	return n.route("job", id, status.JobOwner(id), status.ErrOwnerUnavailable)
}

// AgentHome returns the base URL of the replica that holds agent id (the
// one that created it), or nil when this replica does or the id names no
// replica. It returns an error wrapping status.ErrAgentHomeUnavailable
// when that replica has not been heard from within HeartbeatTTL, or
// advertises no HTTP URL.
func (n *Node) AgentHome(id string) (*url.URL, error) {
	return n.route("agent", id, status.AgentOwner(id), status.ErrAgentHomeUnavailable)
}

// SessionHome returns the base URL of the replica that holds MCP session
// id, or nil when this replica does (or the id names no replica). Errors
// wrap status.ErrSessionHomeUnavailable.
func (n *Node) SessionHome(id string) (*url.URL, error) {
	return n.route("MCP session", id, status.MCPSessionOwner(id), status.ErrSessionHomeUnavailable)
}

func (n *Node) route(what, id, owner string, unavailable error) (*url.URL, error) {
	if owner == "" || owner == n.cfg.ReplicaID {
		return nil, nil
	}
	r, ok := n.Replica(owner)
	if !ok {
		if !n.member(owner) {
			return nil, fmt.Errorf("%s %s: replica %q: %w", what, id, owner, status.ErrUnknownReplica)
		}
		return nil, &status.UnavailableError{Replica: owner, Err: fmt.Errorf("%s %s: replica %q has not been heard from for %s: %w", what, id, owner, HeartbeatTTL, unavailable)}
	}
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &status.UnavailableError{Replica: owner, Err: fmt.Errorf("%s %s: replica %q advertises %q, not an HTTP URL (set cluster.advertiseUrl): %w", what, id, owner, r.URL, unavailable)}
	}
	return u, nil
}
