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

// heartbeatStale is how long this replica's own heartbeat may take to
// come back through the watch before the view counts as frozen: the
// bucket is not taking or not delivering heartbeats (NATS electing a
// leader, this replica cut off), so silence from the others says nothing
// about them, and time stops counting against them until it moves again.
// heartbeatStall is how long own heartbeats may be written without being
// delivered before the watch is started again (its consumer was on a NATS
// node that died).
const (
	heartbeatStale = 2 * HeartbeatInterval
	heartbeatStall = 3 * HeartbeatInterval
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
	mu    sync.Mutex
	peers map[string]seen
	known map[string]bool // replica ids known to have joined (MembersBucket, heartbeats)
	dupAt time.Time       // last heartbeat of another process with this id
	// firstRev is the bucket revision of this process's first heartbeat;
	// others holds the last revision seen of each other process
	// heartbeating with this id. A heartbeat of another process counts as
	// a duplicate only when it was written after firstRev, or after one
	// already seen from it: a predecessor killed before this process
	// started (its last heartbeat still in the bucket) never is.
	firstRev  uint64
	others    map[string]uint64
	ownSeen   time.Time // when this replica's own heartbeat last came through the watch
	ownPut    time.Time // when this replica's own heartbeat was last written
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
	// Announce at once, before watching: the watch then starts from this
	// process's own heartbeat, not from a predecessor's left in the
	// bucket, and firstRev is known before anything is delivered.
	n.beat()
	w, err := n.replicas.WatchAll(n.ctx)
	if err != nil {
		return fmt.Errorf("cluster: watch replicas: %w", err)
	}
	go n.followHeartbeats(w)
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

// followHeartbeats feeds the view from w, and from the watches that
// replace it when the connection to NATS is back after being lost, or
// when it stalls: when this replica's own heartbeats are written but do
// not come back for heartbeatStall, or w ends, a new watch follows the
// updates from then on (the view keeps what it knows).
func (n *Node) followHeartbeats(w jetstream.KeyWatcher) {
	defer func() { w.Stop() }()
	check := time.NewTicker(HeartbeatInterval)
	defer check.Stop()
	updates := w.Updates()
	back := n.link.reconnected()
	for {
		reconnected := false
		select {
		case <-n.ctx.Done():
			return
		case <-back:
			back, reconnected = n.link.reconnected(), true
		case <-check.C:
		case e, ok := <-updates:
			if !ok {
				updates = nil // restarted at the next check
				continue
			}
			if e != nil {
				n.seeHeartbeat(e)
			}
			continue
		}
		n.view.mu.Lock()
		stalled := n.view.ownPut.Sub(n.view.ownSeen) > heartbeatStall
		n.view.mu.Unlock()
		if !stalled && updates != nil && !reconnected {
			continue
		}
		nw, err := n.replicas.WatchAll(n.ctx, jetstream.UpdatesOnly())
		if err != nil {
			n.logger.Warn("heartbeat watch stalled and not restarted", "err", err)
			continue
		}
		if reconnected {
			n.logger.Info("reconnected to NATS; watching heartbeats again")
		} else {
			n.logger.Warn("heartbeat watch stalled; watching again")
		}
		w.Stop()
		w, updates = nw, nw.Updates()
		n.view.mu.Lock()
		n.view.ownPut = n.view.ownSeen // give the new watch its own time
		n.view.mu.Unlock()
	}
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
	now := time.Now()
	if hb.ID == n.self.ID && hb.Instance == n.self.Instance {
		// The view moves again after being frozen: the time it was frozen
		// does not count against the others.
		if gap := now.Sub(n.view.ownSeen); !n.view.ownSeen.IsZero() && gap > heartbeatStale {
			shift := gap - HeartbeatInterval
			for id, p := range n.view.peers {
				if p.at = p.at.Add(shift); p.at.After(now) {
					p.at = now
				}
				n.view.peers[id] = p
			}
		}
		n.view.ownSeen = now
	}
	if hb.ID == n.self.ID && hb.Instance != n.self.Instance {
		prev, seenBefore := n.view.others[hb.Instance]
		if len(n.view.others) >= 64 {
			clear(n.view.others) // bounded: ids of processes are whatever the bucket says
		}
		n.view.others[hb.Instance] = e.Revision()
		if !(n.view.firstRev != 0 && e.Revision() > n.view.firstRev) && !(seenBefore && e.Revision() > prev) {
			// Written before this process's first heartbeat, and not since:
			// the last heartbeat of a predecessor with this id that died
			// (or of a process started before this one that has not
			// written again yet; a live one writes within a second).
			n.logger.Info("ignoring the last heartbeat of an earlier process with this replica's id", "replica", hb.ID, "instance", hb.Instance, "startedAt", hb.StartedAt)
			return
		}
		if n.view.dupAt.IsZero() {
			n.logger.Error("another process heartbeats with this replica's id: give every replica its own cluster.replicaId", "replica", hb.ID, "url", hb.URL)
		}
		n.view.dupAt = time.Now()
	}
	n.view.peers[hb.ID] = seen{hb: hb, at: now}
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
	if rev, err := n.replicas.Put(ctx, hb.ID, v); err != nil {
		if n.ctx.Err() == nil {
			n.logger.Warn("heartbeat not written", "err", err)
		}
	} else {
		n.view.mu.Lock()
		n.view.ownPut = time.Now()
		if n.view.firstRev == 0 {
			n.view.firstRev = rev
		}
		n.view.mu.Unlock()
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
	if n.self.ID == "" || !n.Online() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = n.replicas.Delete(ctx, n.self.ID)
}

// frozen reports whether this replica's own heartbeat has not come back
// through the watch for heartbeatStale (v.mu held).
func (v *view) frozen(now time.Time) bool {
	return !v.ownSeen.IsZero() && now.Sub(v.ownSeen) > heartbeatStale
}

// alive reports whether the replica of s counts as alive (v.mu held): its
// last heartbeat is younger than HeartbeatTTL, not counting the time the
// view has been frozen (the clock of the view stops heartbeatStale after
// this replica's own heartbeat last came back).
func (v *view) alive(s seen, now time.Time) bool {
	ref := now
	if v.frozen(now) {
		ref = v.ownSeen.Add(heartbeatStale)
	}
	return ref.Sub(s.at) < HeartbeatTTL
}

// Status returns this replica's view of the cluster.
func (n *Node) Status() status.Status {
	now := time.Now()
	n.view.mu.Lock()
	defer n.view.mu.Unlock()
	st := status.Status{
		ReplicaID:     n.cfg.ReplicaID,
		AdvertiseURL:  n.self.URL,
		Connected:     n.Online(),
		DownSince:     n.link.since(),
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
	if n.view.frozen(now) {
		st.ViewFrozenSince = n.view.ownSeen
	}
	for id, s := range n.view.peers {
		if !n.view.alive(s, now) {
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
	if !ok || !n.view.alive(s, time.Now()) {
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
