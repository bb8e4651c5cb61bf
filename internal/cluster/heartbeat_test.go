package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/cluster"
	"github.com/dshd/dshd/internal/cluster/natstest"
)

func ids(n *cluster.Node) []string {
	var out []string
	for _, r := range n.Status().Replicas {
		out = append(out, r.ID)
	}
	return out
}

func TestHeartbeats(t *testing.T) {
	nc := natstest.Start(t, 3)
	var nodes []*cluster.Node
	for i, u := range nc.URLs {
		n, err := cluster.Connect(context.Background(), cluster.Config{URLs: []string{u}, ReplicaID: fmt.Sprintf("r%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		rev := uint64(i)
		if err := n.StartHeartbeats(fmt.Sprintf("http://127.0.0.1:%d", 7000+i), func() uint64 { return rev }); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	for i, n := range nodes {
		if !waitFor(10*time.Second, func() bool { return len(n.Status().Replicas) == 3 }) {
			t.Fatalf("node %d sees %v, want r0 r1 r2", i, ids(n))
		}
		st := n.Status()
		if st.ReplicaID != fmt.Sprintf("r%d", i) || !st.Connected || st.DuplicateID {
			t.Fatalf("node %d status %+v", i, st)
		}
		for _, r := range st.Replicas {
			if r.Self != (r.ID == st.ReplicaID) || r.URL == "" {
				t.Fatalf("node %d: replica %+v", i, r)
			}
		}
		if !waitFor(5*time.Second, func() bool { return !n.Status().SampledAt.IsZero() }) {
			t.Fatalf("node %d never sampled the registry", i)
		}
	}
	if r, ok := nodes[0].Replica("r2"); !ok || r.URL != "http://127.0.0.1:7002" {
		t.Fatalf("Replica(r2) = %+v, %v", r, ok)
	}

	// A replica that leaves says goodbye: gone at once.
	nodes[2].Close()
	left := time.Now()
	if !waitFor(2*time.Second, func() bool { return len(nodes[0].Status().Replicas) == 2 }) {
		t.Fatalf("a replica that left is still listed: %v", ids(nodes[0]))
	}
	t.Logf("replica that left unlisted after %s", time.Since(left).Round(time.Millisecond))

	// A replica that crashes is unlisted when its heartbeat is too old.
	nodes[1].Crash()
	crashed := time.Now()
	if !waitFor(cluster.HeartbeatTTL+3*time.Second, func() bool { return len(nodes[0].Status().Replicas) == 1 }) {
		t.Fatalf("a crashed replica is still listed %s later: %v", time.Since(crashed), ids(nodes[0]))
	}
	if d := time.Since(crashed); d < cluster.HeartbeatTTL-2*cluster.HeartbeatInterval {
		t.Fatalf("a crashed replica was unlisted after %s, before its heartbeat could be stale", d)
	}
	t.Logf("crashed replica unlisted after %s", time.Since(crashed).Round(time.Millisecond))

	// A second process with the same id is reported on both sides.
	dup, err := cluster.Connect(context.Background(), cluster.Config{URLs: []string{nc.URLs[0]}, ReplicaID: "r0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dup.Close)
	if err := dup.StartHeartbeats("http://127.0.0.1:7999", func() uint64 { return 0 }); err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool { return nodes[0].Status().DuplicateID && dup.Status().DuplicateID }) {
		t.Fatalf("duplicate replica id not reported: %+v / %+v", nodes[0].Status(), dup.Status())
	}
}

// TestHeartbeatsRideOutLeaderCrash: nats-server processes, and SIGKILL of
// the node that leads the replicas bucket, then of the JetStream meta
// leader (each restarted after): while NATS elects, no replica stops
// seeing the others, which are all alive, and the view moves again after.
func TestHeartbeatsRideOutLeaderCrash(t *testing.T) {
	nc := natstest.StartProcs(t, 3)
	var nodes []*cluster.Node
	for i := range nc.URLs {
		urls := append([]string{nc.URLs[i]}, append(append([]string(nil), nc.URLs[:i]...), nc.URLs[i+1:]...)...)
		n, err := cluster.Connect(context.Background(), cluster.Config{URLs: urls, ReplicaID: fmt.Sprintf("r%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		if err := n.StartHeartbeats(fmt.Sprintf("http://127.0.0.1:%d", 7000+i), func() uint64 { return 0 }); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	for i, n := range nodes {
		if !waitFor(10*time.Second, func() bool { return len(n.Status().Replicas) == 3 }) {
			t.Fatalf("node %d sees %v, want r0 r1 r2", i, ids(n))
		}
	}
	for _, kind := range []string{"replicas bucket leader", "meta leader"} {
		victim := nc.MetaLeader()
		if kind == "replicas bucket leader" {
			victim = nc.StreamLeader("KV_" + cluster.ReplicasBucket)
		}
		if victim < 0 {
			t.Fatalf("no %s", kind)
		}
		nc.Kill(victim)
		killed := time.Now()
		frozen := time.Duration(0)
		for time.Since(killed) < 15*time.Second {
			for i, n := range nodes {
				st := n.Status()
				if len(st.Replicas) != 3 {
					t.Fatalf("%s (nats-%d) killed: %s later node %d sees only %v (view frozen since %v)", kind, victim, time.Since(killed).Round(time.Millisecond), i, ids(n), st.ViewFrozenSince)
				}
				if !st.ViewFrozenSince.IsZero() {
					frozen = max(frozen, time.Since(killed))
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s (nats-%d) SIGKILLed: every node saw all three replicas throughout; a view was frozen until %s after the kill", kind, victim, frozen.Round(time.Millisecond))
		nc.Restart(t, victim)
		nc.WaitJetStream(t, 60*time.Second)
	}
	// The views move: a replica that crashes now is unlisted.
	nodes[2].Crash()
	if !waitFor(cluster.HeartbeatTTL+5*time.Second, func() bool { return len(nodes[0].Status().Replicas) == 2 }) {
		t.Fatalf("a crashed replica is still listed after the elections: %v", ids(nodes[0]))
	}
}

// TestRestartIsNotADuplicate: a replica that crashed (its last heartbeat
// left in the bucket) and is started again at once recognises its
// predecessor's heartbeat and never reports a duplicate id; a second
// process that is alive with the id is reported (the baseline: same
// check, same node).
func TestRestartIsNotADuplicate(t *testing.T) {
	nc := natstest.Start(t, 3)
	cfg := cluster.Config{URLs: nc.URLs[:1], ReplicaID: "r0"}
	first, err := cluster.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.StartHeartbeats("http://127.0.0.1:7000", func() uint64 { return 0 }); err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool { return len(first.Status().Replicas) == 1 }) {
		t.Fatal("the first process does not see itself")
	}
	first.Crash()
	again, err := cluster.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Close)
	if err := again.StartHeartbeats("http://127.0.0.1:7001", func() uint64 { return 0 }); err != nil {
		t.Fatal(err)
	}
	// Its own heartbeat comes through the watch after what the bucket
	// held when the watch started, and twice means a beat later.
	for range 2 {
		seen := again.Status().Replicas
		if !waitFor(5*time.Second, func() bool {
			r := again.Status().Replicas
			return len(r) == 1 && r[0].URL == "http://127.0.0.1:7001" && (len(seen) == 0 || r[0].LastSeen.After(seen[0].LastSeen))
		}) {
			t.Fatalf("the restarted process sees %+v", again.Status().Replicas)
		}
		if st := again.Status(); st.DuplicateID {
			t.Fatalf("the restarted process reports its predecessor as a duplicate: %+v", st)
		}
	}

	dup, err := cluster.Connect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dup.Close)
	if err := dup.StartHeartbeats("http://127.0.0.1:7002", func() uint64 { return 0 }); err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool { return again.Status().DuplicateID && dup.Status().DuplicateID }) {
		t.Fatalf("a live second process with the id is not reported: %+v / %+v", again.Status(), dup.Status())
	}
}
