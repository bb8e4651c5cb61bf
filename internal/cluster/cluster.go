// Package cluster runs dshd in cluster mode: several replicas share, through
// NATS JetStream, the registry of contributors and plugins (a key-value
// bucket every replica follows), the claims of Idempotency-Keys, and the
// agents with their transcripts (a stream, see Journal), and announce
// themselves with heartbeats, by which each routes requests to the replica
// that runs a job, is an agent's home or holds an MCP session.
// It owns the NATS connection; nothing else in dshd imports NATS, and
// nothing here runs unless the configuration file has a cluster section.
//
// Floor 3 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Bucket names. Every replica of one cluster uses the same ones.
const (
	RegistryBucket = "dshd_registry"
)

// Defaults applied by Connect.
const (
	DefaultStoreReplicas  = 3
	DefaultConnectTimeout = 10 * time.Second
	// markerTTL is how long the registry bucket keeps the marker the
	// server writes when a record's time to live passes. A replica that
	// is cut off longer than this misses the marker and keeps hiding the
	// plugin by its lease on its own clock (see shellenv).
	markerTTL = time.Hour
)

// pingInterval is how often the client pings its NATS server; two
// unanswered pings mark the connection dead (a silent link is found
// within 2 to 3 s, after which every call fails at once).
const pingInterval = time.Second

// StoreTimeout bounds one call to the shared stores made for a request
// (a transcript append or read, an Idempotency-Key claim, a registry
// change). With the lock wait handshakeTimeout allows and the time the
// link takes to be found dead, a request answers within its 10 s deadline
// however the link to NATS fails.
const StoreTimeout = 6 * time.Second

// handshakeTimeout bounds one attempt to connect to a NATS server (dial,
// INFO, CONNECT and PONG). The client holds its connection's lock during
// a reconnect attempt, and every publish or request waits on that lock
// whatever its context says; a short attempt keeps that wait short when a
// link stalls (a server reachable by TCP that answers nothing).
const handshakeTimeout = 1500 * time.Millisecond

// ErrNotConnected: the NATS connection is down (being re-established);
// nothing was sent. It is wrapped with the caller's "unavailable" error.
var ErrNotConnected = errors.New("cluster: not connected to NATS")

// ErrInvalidConfig is wrapped by Config.Validate.
var ErrInvalidConfig = errors.New("cluster: invalid configuration")

// replicaIDRe is what a replica id may be: it names keys and subjects.
var replicaIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Config is the cluster section of the configuration file.
type Config struct {
	URLs            []string // NATS server URLs, nats://host:port
	CredentialsFile string   // NATS credentials (.creds) file; "" = none
	ReplicaID       string   // this replica's id, unique in the cluster
	AdvertiseURL    string   // where other replicas reach this one; "" = the listen address
	StoreReplicas   int      // JetStream replicas of the buckets; 0 = DefaultStoreReplicas
	ConnectTimeout  time.Duration
	Logger          *slog.Logger
	Registerer      prometheus.Registerer // takes the cluster metrics; nil = none
	// IdempotencyWindow is how long an Idempotency-Key claim is kept; 0 =
	// DefaultIdempotencyWindow. Every replica must use the same.
	IdempotencyWindow time.Duration
}

// Validate reports every problem of c, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	var problems []string
	if len(c.URLs) == 0 {
		problems = append(problems, "urls: at least one NATS URL is required")
	}
	for _, u := range c.URLs {
		if strings.TrimSpace(u) == "" || strings.ContainsAny(u, ", ") {
			problems = append(problems, fmt.Sprintf("urls: %q is not one URL", u))
		}
	}
	if !replicaIDRe.MatchString(c.ReplicaID) {
		problems = append(problems, fmt.Sprintf("replicaId: %q must be 1-64 letters, digits, '-' or '_'", c.ReplicaID))
	}
	if c.StoreReplicas < 0 || c.StoreReplicas > 5 {
		problems = append(problems, fmt.Sprintf("storeReplicas: %d is outside 1-5", c.StoreReplicas))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}

// Node is this replica's connection to the cluster.
type Node struct {
	cfg      Config
	logger   *slog.Logger
	nc       *nats.Conn
	link     *linkState
	js       jetstream.JetStream
	registry jetstream.KeyValue
	regStrm  jetstream.Stream
	replicas jetstream.KeyValue
	idem     jetstream.KeyValue
	members  jetstream.KeyValue

	// ctx ends at Close: heartbeats and watches stop.
	ctx    context.Context
	cancel context.CancelFunc

	self             heartbeat
	registryRevision func() uint64
	view             view
}

// Connect connects to NATS and makes sure the buckets exist (creating
// them with cfg.StoreReplicas replicas when they do not). It fails when
// no server answers within cfg.ConnectTimeout, or JetStream is not
// enabled there.
func Connect(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.StoreReplicas == 0 {
		cfg.StoreReplicas = DefaultStoreReplicas
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	link := &linkState{}
	opts := []nats.Option{
		nats.Name("dshd " + cfg.ReplicaID),
		nats.Timeout(min(cfg.ConnectTimeout, handshakeTimeout)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// While the connection is down a write fails at once instead of
		// waiting in the client's buffer to be sent after the reconnect:
		// a change this replica refused (503) must not be applied later.
		nats.ReconnectBufSize(-1),
		// Find a dead connection (a partition that drops packets without
		// a reset) within seconds, not the default minutes.
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			link.down()
			logger.Warn("disconnected from NATS", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			link.up()
			logger.Info("reconnected to NATS", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(*nats.Conn) { link.down() }),
	}
	if cfg.CredentialsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredentialsFile))
	}
	nc, err := nats.Connect(strings.Join(cfg.URLs, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to NATS: %w", err)
	}
	link.up()
	n := &Node{cfg: cfg, logger: logger, nc: nc, link: link, view: view{peers: map[string]seen{}, known: map[string]bool{}, others: map[string]uint64{}}}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if err := n.setup(ctx); err != nil {
		n.cancel()
		nc.Close()
		return nil, err
	}
	if err := n.registerMetrics(cfg.Registerer); err != nil {
		n.cancel()
		nc.Close()
		return nil, err
	}
	logger.Info("joined cluster", "replica", cfg.ReplicaID, "server", nc.ConnectedUrlRedacted())
	return n, nil
}

func (n *Node) setup(ctx context.Context) error {
	js, err := jetstream.New(n.nc)
	if err != nil {
		return fmt.Errorf("cluster: JetStream: %w", err)
	}
	n.js = js
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ConnectTimeout)
	defer cancel()
	n.registry, err = n.createKV(ctx, "registry bucket", jetstream.KeyValueConfig{
		Bucket:         RegistryBucket,
		Description:    "dshd registry: durable contributors (c.<name>) and plugins with their contributors (p.<id>)",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       n.cfg.StoreReplicas,
		LimitMarkerTTL: markerTTL,
	})
	if err != nil {
		return err
	}
	n.regStrm, err = js.Stream(ctx, "KV_"+RegistryBucket)
	if err != nil {
		return fmt.Errorf("cluster: registry stream: %w", err)
	}
	n.replicas, err = n.createKV(ctx, "replicas bucket", jetstream.KeyValueConfig{
		Bucket:      ReplicasBucket,
		Description: "dshd replica heartbeats, one key per replica id",
		History:     1,
		TTL:         HeartbeatTTL,
		Storage:     jetstream.MemoryStorage,
		Replicas:    n.cfg.StoreReplicas,
	})
	if err != nil {
		return err
	}
	if err := n.membersBucket(ctx); err != nil {
		return err
	}
	return n.idempotencyBucket(ctx)
}

// ReplicaID returns this replica's id.
func (n *Node) ReplicaID() string { return n.cfg.ReplicaID }

// Close removes this replica's heartbeat (so the others see it leave at
// once), stops heartbeats and watches, and closes the NATS connection.
func (n *Node) Close() {
	n.leave()
	n.cancel()
	n.nc.Close()
}

// linkState is whether the NATS connection is up, as the client's
// handlers last said: read without the client's lock, which a reconnect
// attempt holds (nats.Conn.IsConnected waits on it).
type linkState struct {
	downSince atomic.Int64 // unix nanoseconds; 0 while up

	mu   sync.Mutex
	back chan struct{} // closed when the connection is up again
}

func (l *linkState) up() {
	l.downSince.Store(0)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.back != nil {
		close(l.back)
	}
	l.back = make(chan struct{})
}

// reconnected returns a channel closed at the next reconnect.
func (l *linkState) reconnected() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.back == nil {
		l.back = make(chan struct{})
	}
	return l.back
}

func (l *linkState) down() {
	l.downSince.CompareAndSwap(0, time.Now().UnixNano())
}

// since returns when the connection went down, or zero while it is up.
func (l *linkState) since() time.Time {
	if ns := l.downSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Online reports whether the NATS connection is up, without waiting on
// the client's lock. Request paths check it before every call to NATS and
// fail at once while it is down.
func (n *Node) Online() bool { return n.link.since().IsZero() }
