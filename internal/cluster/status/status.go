// Package status holds what a dshd replica reports of its cluster: plain
// values, so that packages reporting them need not import NATS.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package status

import (
	"errors"
	"strings"
	"time"
)

// Status is one replica's view of its cluster.
type Status struct {
	ReplicaID    string
	AdvertiseURL string
	Connected    bool      // the NATS connection is up
	DownSince    time.Time // when the NATS connection went down; zero while up
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
	// ViewFrozenSince is set while this replica's own heartbeats do not
	// come back through the replicas bucket (NATS electing a leader, or
	// this replica cut off from NATS): Replicas is then the last view
	// known, kept as it was since that time.
	ViewFrozenSince time.Time
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

// ErrOwnerUnavailable: a request names a job whose owning replica this
// replica has not heard from within the heartbeat TTL (it died, left, or
// is cut off), or which could not be reached. The job is never run
// elsewhere.
var ErrOwnerUnavailable = errors.New("cluster: the replica that owns the job is not available")

// JobIDPrefix is the prefix of the job ids replica makes: "job_<replica>.".
func JobIDPrefix(replica string) string { return "job_" + replica + "." }

// JobOwner returns the replica named by a cluster job id
// ("job_<replica>.<ulid>"), or "" for an id that names none (a job of a
// dshd running alone).
func JobOwner(id string) string { return ownerBeforeDot(id, "job_") }

// ownerBeforeDot returns the replica of an id "<prefix><replica>.<rest>",
// or "" when id has another shape. Replica ids have no '.'.
func ownerBeforeDot(id, prefix string) string {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok {
		return ""
	}
	owner, _, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	return owner
}

// ErrAgentHomeUnavailable: a request names an agent whose home replica
// (the one that created it, which holds its transcript) this replica has
// not heard from within the heartbeat TTL, or could not reach.
var ErrAgentHomeUnavailable = errors.New("cluster: the replica that holds the agent is not available")

// ulidLen is the length of the ULID that ends every id.
const ulidLen = 26

// AgentIDPrefix is the prefix of the agent ids replica makes:
// "agt_<replica>_". Agent ids are file names, which take no '.', so the
// replica is found by the fixed length of the ULID that follows it.
func AgentIDPrefix(replica string) string { return "agt_" + replica + "_" }

// AgentOwner returns the replica named by a cluster agent id
// ("agt_<replica>_<ulid>"), or "" for an id that names none.
func AgentOwner(id string) string {
	rest, ok := strings.CutPrefix(id, "agt_")
	if !ok || len(rest) < ulidLen+2 || rest[len(rest)-ulidLen-1] != '_' {
		return ""
	}
	return rest[:len(rest)-ulidLen-1]
}

// ErrClaimUnavailable: an Idempotency-Key could not be claimed in the
// cluster's shared store (NATS unreachable, no quorum). Nothing ran.
var ErrClaimUnavailable = errors.New("cluster: the idempotency key could not be claimed in the shared store")

// ErrAgentStoreUnavailable: the cluster's shared store of agents and
// transcripts could not be read or written (NATS unreachable, no quorum).
// An append that failed with it may still have been stored: read the
// transcript before retrying.
var ErrAgentStoreUnavailable = errors.New("cluster: the shared store of agents and transcripts could not be reached")

// ErrSessionHomeUnavailable: a request names an MCP session (its
// Mcp-Session-Id) whose replica has not been heard from within the
// heartbeat TTL, or could not be reached. The agent the session ran as is
// not affected; a new session naming it goes to the agent's home.
var ErrSessionHomeUnavailable = errors.New("cluster: the replica that holds the MCP session is not available")

// MCPSessionPrefix is the prefix of the MCP session ids replica makes:
// "mcp_<replica>.".
func MCPSessionPrefix(replica string) string { return "mcp_" + replica + "." }

// MCPSessionOwner returns the replica named by a cluster MCP session id
// ("mcp_<replica>.<random>"), or "" for an id that names none.
func MCPSessionOwner(id string) string { return ownerBeforeDot(id, "mcp_") }

// ErrUnknownReplica: an id names a replica that never joined the cluster
// (no replica with that id ever announced itself), so what it names does
// not exist anywhere: the answer is 404, not a retryable 503.
var ErrUnknownReplica = errors.New("cluster: no replica with this id ever joined the cluster")

// UnavailableError names the replica a request needs and cannot reach. It
// wraps the reason (ErrOwnerUnavailable, ErrAgentHomeUnavailable, …).
type UnavailableError struct {
	Replica string
	// MayHaveRun: the request reached the replica before it was lost, so
	// what it asked may have been done (Err says how to find out).
	MayHaveRun bool
	Err        error
}

func (e *UnavailableError) Error() string { return e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }
