package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/cluster/natstest"
)

// startCluster starts a three-node NATS JetStream cluster in this process
// and three dshd replicas (the real binary) against it, sharing one token.
// Replica i connects to NATS node i first.
func startCluster(t testing.TB) (*natstest.Cluster, []*testServer) {
	t.Helper()
	clusterSlot(t)
	nc := natstest.Start(t, 3)
	return nc, startReplicas(t, nc, func(i int) []string {
		return append([]string{nc.URLs[i]}, append(append([]string(nil), nc.URLs[:i]...), nc.URLs[i+1:]...)...)
	})
}

// clusterSlots bounds the clusters that parallel tests run at once: each
// is three JetStream nodes in this process and three servers with the race
// detector, and more than two at once on a 2-core machine starve their
// elections past the servers' startup deadline.
var clusterSlots = make(chan struct{}, 2)

// clusterSlot waits for one of clusterSlots and frees it when t ends,
// after its servers and NATS nodes have stopped (cleanups run last first).
func clusterSlot(t testing.TB) {
	t.Helper()
	clusterSlots <- struct{}{}
	t.Cleanup(func() { <-clusterSlots })
}

// startReplicas starts three replicas against nc; replica i connects to
// the NATS URLs urls(i).
func startReplicas(t testing.TB, nc *natstest.Cluster, urls func(i int) []string) []*testServer {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(strings.Repeat("c", 64)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var rs []*testServer
	for i := range 3 {
		urls := urls(i)
		cfg := fmt.Sprintf("cluster:\n  replicaId: replica-%d\n  urls: [%s]\n", i, strings.Join(urls, ", "))
		rs = append(rs, startServer(t, withConfig(cfg), withArgs("--token-file", tokenFile)))
	}
	return rs
}

type declarationList struct {
	Declarations []struct {
		Key         string  `json:"key"`
		Contributor string  `json:"contributor"`
		Plugin      *string `json:"plugin"`
	} `json:"declarations"`
}

// declaredBy returns the contributor declaring key on s, or "".
func (s *testServer) declaredBy(t *testing.T, key string) string {
	t.Helper()
	var d declarationList
	if st := s.DoJSON(t, "GET", "/env/declarations", nil, &d); st != 200 {
		t.Fatalf("declarations: %d", st)
	}
	for _, x := range d.Declarations {
		if x.Key == key {
			return x.Contributor
		}
	}
	return ""
}

func staticContributor(name, key, value string) map[string]any {
	return map[string]any{
		"name":     name,
		"keys":     []map[string]string{{"key": key, "description": "A fact shared by the cluster."}},
		"resolver": map[string]any{"kind": "static", "values": map[string]string{key: value}},
	}
}

// TestClusterRegistry: a contributor registered on one replica is in the
// declarations and in children's environment on all three; of concurrent
// registrations of one name (or one key) on all three, exactly one wins;
// a plugin's lease expires through the store after its replica is killed.
func TestClusterRegistry(t *testing.T) {
	t.Parallel()
	_, rs := startCluster(t)

	start := time.Now()
	if st := rs[0].DoJSON(t, "POST", "/contributors", staticContributor("team.repo", "DSH_REPO", "acme/widgets"), nil); st != 201 {
		t.Fatalf("register: %d", st)
	}
	written := time.Since(start)
	for i, s := range rs {
		for s.declaredBy(t, "DSH_REPO") != "team.repo" {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("replica %d does not declare DSH_REPO 10s after it was registered", i)
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("replica %d declares DSH_REPO %s after the POST began (the POST took %s)", i, time.Since(start).Round(time.Microsecond), written.Round(time.Microsecond))
	}
	for i, s := range rs {
		var j job
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": `printf %s "$DSH_REPO"`}, &j); st != 200 {
			t.Fatalf("replica %d exec: %d", i, st)
		}
		if j.Stdout.Text != "acme/widgets" || j.ManagedEnv["DSH_REPO"] != "acme/widgets" {
			t.Fatalf("replica %d child saw DSH_REPO=%q (managedEnv %v)", i, j.Stdout.Text, j.ManagedEnv)
		}
	}

	for round, sameName := range []bool{true, false, true, false} {
		key := fmt.Sprintf("DSH_RACE_%d", round)
		codes := make([]int, len(rs))
		probs := make([]problem, len(rs))
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i, s := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("race.%d", round)
				if !sameName {
					name = fmt.Sprintf("race.%d.replica%d", round, i)
				}
				<-gate
				codes[i] = s.DoJSON(t, "POST", "/contributors", staticContributor(name, key, fmt.Sprint(i)), &probs[i])
			}()
		}
		close(gate)
		wg.Wait()
		wins := 0
		for i, c := range codes {
			switch {
			case c == 201:
				wins++
			case c == 409 && sameName && probs[i].Code == "duplicate_contributor":
			case c == 409 && !sameName && probs[i].Code == "key_owned":
			default:
				t.Fatalf("round %d (same name %v): replica %d answered %d %+v", round, sameName, i, c, probs[i])
			}
		}
		if wins != 1 {
			t.Fatalf("round %d (same name %v): %d registrations succeeded (%v), want exactly one", round, sameName, wins, codes)
		}
		owner := rs[0].declaredBy(t, key)
		for i, s := range rs {
			deadline := time.Now().Add(10 * time.Second)
			for s.declaredBy(t, key) != owner && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if got := s.declaredBy(t, key); got != owner || owner == "" {
				t.Fatalf("round %d: replica %d says %s is declared by %q, replica 0 by %q", round, i, key, got, owner)
			}
		}
	}

	// A plugin opened on replica 0, which then dies: its lease ends on the
	// store's clock, not that replica's.
	var p struct {
		ID string `json:"id"`
	}
	if st := rs[0].DoJSON(t, "POST", "/plugins", map[string]any{"name": "doomed", "leaseSeconds": 2}, &p); st != 201 {
		t.Fatalf("open plugin: %d", st)
	}
	c := staticContributor("doomed.fact", "DSH_DOOMED", "x")
	c["plugin"] = p.ID
	if st := rs[0].DoJSON(t, "POST", "/contributors", c, nil); st != 201 {
		t.Fatalf("register under plugin: %d", st)
	}
	rs[0].crash(t)
	killed := time.Now()
	var pr problem
	for i, s := range rs[1:] {
		if by := s.declaredBy(t, "DSH_DOOMED"); by != "doomed.fact" && time.Since(killed) < time.Second {
			t.Fatalf("replica %d: DSH_DOOMED declared by %q before the lease passed", i+1, by)
		}
	}
	// The key is free for registration once the store removed the plugin.
	for {
		st := rs[1].DoJSON(t, "POST", "/contributors", staticContributor("durable.fact", "DSH_DOOMED", "y"), &pr)
		if st == 201 {
			break
		}
		if st != 409 || pr.Code != "key_owned" || time.Since(killed) > 15*time.Second {
			t.Fatalf("register the expired plugin's key %s after the replica died: %d %+v", time.Since(killed), st, pr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the dead replica's plugin was removed by the store %s after the kill (lease 2s)", time.Since(killed).Round(time.Millisecond))
	for i, s := range rs[1:] {
		deadline := time.Now().Add(10 * time.Second)
		for s.declaredBy(t, "DSH_DOOMED") != "durable.fact" && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := s.declaredBy(t, "DSH_DOOMED"); got != "durable.fact" {
			t.Fatalf("replica %d: DSH_DOOMED declared by %q, want durable.fact", i+1, got)
		}
		if st := s.DoJSON(t, "GET", "/plugins/"+p.ID, nil, nil); st != 404 {
			t.Fatalf("replica %d: expired plugin answers %d", i+1, st)
		}
	}
}

// TestClusterConfigRefused: a cluster section that cannot work stops dshd
// at start, naming the problem, and never falls back to running alone.
func TestClusterConfigRefused(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]string{
		"no urls":              "cluster:\n  replicaId: a\n",
		"bad replica":          "cluster:\n  replicaId: 'a b'\n  urls: [nats://127.0.0.1:1]\n",
		"relative creds":       "cluster:\n  replicaId: a\n  urls: [nats://127.0.0.1:1]\n  credentialsFile: user.creds\n",
		"relative peer secret": "cluster:\n  replicaId: a\n  urls: [nats://127.0.0.1:1]\n  peerSecretFile: peer.secret\n",
		"no NATS":              "cluster:\n  replicaId: a\n  urls: [nats://127.0.0.1:1]\n",
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			out := refuseToStart(t, t.TempDir(), "--config", p)
			if !strings.Contains(out, "cluster") {
				t.Fatalf("refusal does not name the cluster section: %s", out)
			}
		})
	}
}

type clusterHealth struct {
	Details struct {
		Cluster *struct {
			ReplicaID        string `json:"replicaId"`
			Connected        bool   `json:"connected"`
			RegistryRevision int64  `json:"registryRevision"`
			StoreRevision    *int64 `json:"storeRevision"`
			RegistryLag      int64  `json:"registryLag"`
			Replicas         []struct {
				ID   string `json:"id"`
				URL  string `json:"url"`
				Self bool   `json:"self"`
			} `json:"replicas"`
		} `json:"cluster"`
	} `json:"details"`
}

// TestClusterHealth: /healthz and /metrics report the replica's id, the
// replicas it sees (heartbeats) and its lag behind the registry; a replica
// that dies drops out of the others' view.
func TestClusterHealth(t *testing.T) {
	t.Parallel()
	_, rs := startCluster(t)
	if st := rs[0].DoJSON(t, "POST", "/contributors", staticContributor("health.fact", "DSH_HEALTH", "1"), nil); st != 201 {
		t.Fatalf("register: %d", st)
	}
	health := func(s *testServer) clusterHealth {
		var h clusterHealth
		if st := s.DoJSON(t, "GET", "/healthz", nil, &h); st != 200 || h.Details.Cluster == nil {
			t.Fatalf("healthz: %d %+v", st, h)
		}
		return h
	}
	for i, s := range rs {
		want := fmt.Sprintf("replica-%d", i)
		deadline := time.Now().Add(15 * time.Second)
		for {
			c := health(s).Details.Cluster
			ok := c.ReplicaID == want && c.Connected && len(c.Replicas) == 3 && c.RegistryLag == 0 &&
				c.StoreRevision != nil && *c.StoreRevision >= 1 && c.RegistryRevision >= *c.StoreRevision
			if ok {
				for j, r := range c.Replicas {
					if r.ID != fmt.Sprintf("replica-%d", j) || r.Self != (j == i) || r.URL != rs[j].URL {
						t.Fatalf("replica %d lists %+v at %d, want replica-%d at %s", i, r, j, j, rs[j].URL)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d health: %+v", i, c)
			}
			time.Sleep(50 * time.Millisecond)
		}
		resp := s.Do(t, "GET", "/metrics", nil)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, m := range []string{`dshd_cluster_replica_info{replica="` + want + `"} 1`, "dshd_cluster_replicas 3", "dshd_cluster_connected 1", "dshd_cluster_registry_lag 0"} {
			if !strings.Contains(string(body), m) {
				t.Fatalf("replica %d /metrics lacks %q", i, m)
			}
		}
	}
	rs[2].crash(t)
	crashed := time.Now()
	for health(rs[0]).Details.Cluster.Replicas[len(health(rs[0]).Details.Cluster.Replicas)-1].ID == "replica-2" {
		if time.Since(crashed) > 15*time.Second {
			t.Fatal("a killed replica is still listed 15s later")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("killed replica unlisted by the others after %s", time.Since(crashed).Round(time.Millisecond))
}

// TestClusterJobRouting: a job's id names the replica that runs it; any
// replica forwards the job's requests (state, SSE and raw output, cancel)
// to it in one hop, streaming as the owner writes; when the owner is gone
// the answer is 503 job_owner_unavailable, never a run elsewhere.
func TestClusterJobRouting(t *testing.T) {
	t.Parallel()
	_, rs := startCluster(t)
	// Replicas learn each other's URLs from heartbeats.
	for i, s := range rs {
		deadline := time.Now().Add(15 * time.Second)
		for {
			var h clusterHealth
			s.DoJSON(t, "GET", "/healthz", nil, &h)
			if h.Details.Cluster != nil && len(h.Details.Cluster.Replicas) == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d does not see the others", i)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	var j job
	if st := rs[0].DoJSON(t, "POST", "/exec", map[string]any{"command": "echo first; sleep 1.5; echo second; echo err >&2", "background": true}, &j); st != 202 {
		t.Fatalf("exec: %d", st)
	}
	if !strings.HasPrefix(j.ID, "job_replica-0.") {
		t.Fatalf("job id %q does not name its replica", j.ID)
	}
	// Live over SSE through replica 2: the first event arrives while the
	// job still runs (the hop flushes as the owner writes).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := rs[2].openEvents(t, ctx, j.ID, "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("SSE through replica 2: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if n := len(resp.Header.Values("Content-Security-Policy")); n != 1 {
		t.Fatalf("forwarded answer has %d Content-Security-Policy headers, want 1", n)
	}
	first, err := readStream(t, resp.Body, [2]int64{}, 1)
	if err != nil || first.out.String() != "first\n" {
		t.Fatalf("first event through the hop: %q, %v", first.out.String(), err)
	}
	var mid job
	if st := rs[1].DoJSON(t, "GET", "/jobs/"+j.ID, nil, &mid); st != 200 || mid.State != "running" {
		t.Fatalf("job through replica 1 while the first event arrived: %d %q (the hop buffered?)", st, mid.State)
	}
	rest, err := readStream(t, resp.Body, [2]int64{6, 0}, -1)
	resp.Body.Close()
	if rest.exit == nil || rest.out.String() != "second\n" || rest.err.String() != "err\n" {
		t.Fatalf("rest of the stream through replica 2: %q %q exit=%v err=%v", rest.out.String(), rest.err.String(), rest.exit != nil, err)
	}
	// Long-poll, state and raw output through replica 1.
	var done job
	if st := rs[1].DoJSON(t, "GET", "/jobs/"+j.ID+"?waitMs=5000", nil, &done); st != 200 || done.State != "exited" || done.Stdout.Text != "first\nsecond\n" {
		t.Fatalf("job through replica 1: %d %+v", st, done)
	}
	if raw := rs[1].rawOutput(t, j.ID); string(raw) != "first\nsecond\n" {
		t.Fatalf("raw output through replica 1: %q", raw)
	}
	// Cancel through replica 2.
	var long job
	if st := rs[0].DoJSON(t, "POST", "/exec", map[string]any{"command": "sleep 30", "background": true}, &long); st != 202 {
		t.Fatalf("exec: %d", st)
	}
	if st := rs[2].DoJSON(t, "DELETE", "/jobs/"+long.ID, nil, nil); st != 200 && st != 202 {
		t.Fatalf("cancel through replica 2: %d", st)
	}
	var cancelled job
	if st := rs[0].DoJSON(t, "GET", "/jobs/"+long.ID+"?waitMs=10000", nil, &cancelled); st != 200 || cancelled.State != "cancelled" {
		t.Fatalf("cancelled job on its owner: %d %q", st, cancelled.State)
	}
	// An Idempotency-Key (no agent) is claimed by the first replica that
	// gets it: the same request through another replica finds that job and
	// runs nothing; another body with the key is refused there.
	runs := filepath.Join(t.TempDir(), "runs")
	idem := map[string]any{"command": "echo once >> " + runs + "; sleep 1", "background": true}
	var k0, k2 job
	if st, _, _ := rs[0].idemExecAny(t, "cluster-key-1", idem, &k0); st != 202 {
		t.Fatalf("exec with a key through replica 0: %d", st)
	}
	if st, _, _ := rs[2].idemExecAny(t, "cluster-key-1", idem, &k2); st != 202 || k2.ID != k0.ID {
		t.Fatalf("same key through replica 2: %d job %q, want replica 0's %q", st, k2.ID, k0.ID)
	}
	idem["command"] = "echo other"
	if st, code, _ := rs[1].idemExecAny(t, "cluster-key-1", idem, nil); st != 422 || code != "idempotency_key_reused" {
		t.Fatalf("other body with the key through replica 1: %d %s", st, code)
	}
	var k0done job
	if st := rs[2].DoJSON(t, "GET", "/jobs/"+k0.ID+"?waitMs=10000", nil, &k0done); st != 200 || k0done.State != "exited" {
		t.Fatalf("keyed job through replica 2: %d %q", st, k0done.State)
	}
	if b, err := os.ReadFile(runs); err != nil || string(b) != "once\n" {
		t.Fatalf("the keyed command ran %q times (%v), want once", b, err)
	}

	// A client's forwarding header proves nothing: the request is refused,
	// not served nor routed (see TestClusterForgedForwarding).
	r := rs[2].DoWith(t, "GET", "/jobs/"+j.ID, nil, map[string]string{"Authorization": "Bearer " + rs[2].Token, "Dsh-Forwarded-By": "replica-1"})
	r.Body.Close()
	if r.StatusCode != 421 {
		t.Fatalf("a request with a client's forwarding header: %d, want 421", r.StatusCode)
	}
	// The token is checked before anything is forwarded.
	r = rs[2].DoWith(t, "GET", "/jobs/"+j.ID, nil, map[string]string{"Authorization": "Bearer wrong"})
	r.Body.Close()
	if r.StatusCode != 401 {
		t.Fatalf("wrong token through a hop: %d", r.StatusCode)
	}

	// The owner dies: its jobs answer 503 job_owner_unavailable, with the
	// reason, and nothing runs elsewhere.
	rs[0].crash(t)
	killed := time.Now()
	for {
		var p problem
		st := rs[2].DoJSON(t, "GET", "/jobs/"+j.ID, nil, &p)
		if st == 503 && p.Code == "job_owner_unavailable" {
			break
		}
		if time.Since(killed) > 15*time.Second {
			t.Fatalf("job of a dead replica answers %d %+v", st, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("job of the killed replica answers job_owner_unavailable %s after the kill", time.Since(killed).Round(time.Millisecond))
	// The 503 names the replica and says when to retry.
	resp = rs[2].Do(t, "GET", "/jobs/"+j.ID, nil)
	var p503 problem
	_ = json.NewDecoder(resp.Body).Decode(&p503)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(p503.Detail, `"replica-0"`) {
		t.Fatalf("job of a dead replica: %d Retry-After %q detail %q, want 503 naming replica-0 with a Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), p503.Detail)
	}
	// Ids naming a replica that never joined name nothing: 404, logged
	// below ERROR.
	for path, code := range map[string]string{
		"/jobs/job_zzz.x": "job_not_found",
		"/agents/agt_zzz_01m8rk3468mk6yta9t5hevkezw/tools/bash": "agent_not_found",
	} {
		var p problem
		method, body := "GET", any(nil)
		if strings.HasSuffix(path, "/bash") {
			method, body = "POST", map[string]any{"arguments": map[string]any{"command": "true"}}
		}
		if st := rs[1].DoJSON(t, method, path, body, &p); st != 404 || p.Code != code {
			t.Fatalf("%s %s naming a replica that never existed: %d %+v, want 404 %s", method, path, st, p, code)
		}
	}
	for _, line := range strings.Split(rs[1].stderr.String(), "\n") {
		if strings.Contains(line, "zzz") && strings.Contains(line, "ERROR") {
			t.Fatalf("an unknown replica's id was logged as an error: %s", line)
		}
	}
	var list []job
	for i, s := range rs[1:] {
		if st := s.DoJSON(t, "GET", "/jobs", nil, &list); st != 200 || len(list) != 0 {
			t.Fatalf("replica %d lists %d jobs after the owner died; nothing may run elsewhere", i+1, len(list))
		}
	}
}

// TestClusterAgents: an agent's id names its home replica; tool calls,
// /exec, fork and spawn sent to any replica run there (one hop), so the
// agent created on replica 0 and called through 1 and 2 has one gap-free
// transcript, the same bytes from every replica. Agents and transcripts are
// in the shared store: when the home is gone, calls answer 503
// agent_home_unavailable, and the agent, its lineage and its transcript are
// still read, unchanged, through the others.
func TestClusterAgents(t *testing.T) {
	t.Parallel()
	_, rs := startCluster(t)
	for i, s := range rs {
		deadline := time.Now().Add(15 * time.Second)
		for {
			var h clusterHealth
			s.DoJSON(t, "GET", "/healthz", nil, &h)
			if h.Details.Cluster != nil && len(h.Details.Cluster.Replicas) == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d does not see the others", i)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var a agent
	if st := rs[0].DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent: %d", st)
	}
	if !strings.HasPrefix(a.ID, "agt_replica-0_") {
		t.Fatalf("agent id %q does not name its replica", a.ID)
	}
	for round := range 3 {
		for i, s := range rs {
			r := s.callTool(t, a.ID, "bash", map[string]any{"command": fmt.Sprintf(`echo "$DSH_SESSION_ID %d.%d"`, round, i)})
			if want := fmt.Sprintf("%s %d.%d", a.ID, round, i); r.IsError || r.Text != want {
				t.Fatalf("tool call through replica %d: %+v, want text %q", i, r, want)
			}
			if !strings.HasPrefix(r.JobID, "job_replica-0.") {
				t.Fatalf("tool call through replica %d ran job %q, not on the agent's replica", i, r.JobID)
			}
		}
	}
	var j job
	if st := rs[2].DoJSON(t, "POST", "/exec", map[string]any{"command": `printf %s "$DSH_SESSION_ID"`, "agentId": a.ID}, &j); st != 200 || j.Stdout.Text != a.ID || !strings.HasPrefix(j.ID, "job_replica-0.") {
		t.Fatalf("/exec for the agent through replica 2: %d %q on %s", st, j.Stdout.Text, j.ID)
	}
	var fork, child agent
	if st := rs[1].DoJSON(t, "POST", "/agents/"+a.ID+"/fork", map[string]any{}, &fork); st != 201 || fork.ParentID == nil || *fork.ParentID != a.ID || !strings.HasPrefix(fork.ID, "agt_replica-0_") {
		t.Fatalf("fork through replica 1: %d %+v", st, fork)
	}
	if st := rs[2].DoJSON(t, "POST", "/agents/"+a.ID+"/spawn", map[string]any{}, &child); st != 201 || child.Depth != 1 || !strings.HasPrefix(child.ID, "agt_replica-0_") {
		t.Fatalf("spawn through replica 2: %d %+v", st, child)
	}
	// One transcript, gap-free, the same bytes from every replica.
	var first []byte
	for i, s := range rs {
		resp := s.Do(t, "GET", "/agents/"+a.ID+"/transcript", nil)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("transcript through replica %d: %d %v", i, resp.StatusCode, err)
		}
		if i == 0 {
			first = b
			continue
		}
		if !bytes.Equal(b, first) {
			t.Fatalf("transcript through replica %d differs from replica 0's", i)
		}
	}
	if n := checkTranscriptBytes(t, first); n < 2*3*3 {
		t.Fatalf("transcript has %d events, want at least %d (a call and a result per tool call)", n, 2*3*3)
	}

	rs[0].crash(t)
	killed := time.Now()
	for {
		var p problem
		st := rs[1].DoJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"arguments": map[string]any{"command": "echo must not run"}}, &p)
		if st == 503 && p.Code == "agent_home_unavailable" {
			break
		}
		if time.Since(killed) > 15*time.Second {
			t.Fatalf("tool call for an agent whose replica died: %d %+v", st, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var p problem
	if st := rs[2].DoJSON(t, "POST", "/exec", map[string]any{"command": "echo must not run", "agentId": a.ID}, &p); st != 503 || p.Code != "agent_home_unavailable" {
		t.Fatalf("/exec for an agent whose replica died: %d %+v", st, p)
	}
	for i, s := range rs[1:] {
		resp := s.Do(t, "GET", "/agents/"+a.ID+"/transcript", nil)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(b, first) {
			t.Fatalf("transcript through replica %d with the home dead: %d %v, same bytes as before: %t", i+1, resp.StatusCode, err, bytes.Equal(b, first))
		}
		var got agent
		if st := s.DoJSON(t, "GET", "/agents/"+child.ID, nil, &got); st != 200 || got.ParentID == nil || *got.ParentID != a.ID || got.RootID != a.ID || got.Depth != 1 {
			t.Fatalf("spawned child through replica %d with the home dead: %d %+v", i+1, st, got)
		}
		var all []agent
		if st := s.DoJSON(t, "GET", "/agents", nil, &all); st != 200 {
			t.Fatalf("list agents through replica %d: %d", i+1, st)
		}
		listed := map[string]bool{}
		for _, x := range all {
			listed[x.ID] = true
		}
		if !listed[a.ID] || !listed[fork.ID] || !listed[child.ID] {
			t.Fatalf("replica %d lists %v, want %s, %s and %s among them", i+1, all, a.ID, fork.ID, child.ID)
		}
	}
	var list []job
	for i, s := range rs[1:] {
		if st := s.DoJSON(t, "GET", "/jobs", nil, &list); st != 200 || len(list) != 0 {
			t.Fatalf("replica %d ran %d jobs for the agent of a dead replica", i+1, len(list))
		}
	}
}

// TestClusterNATSNodeLoss: losing one of three NATS nodes loses nothing.
// The replica connected to it reconnects to another node; the registry's
// buckets (three replicas) keep their quorum, so registrations go on and
// reach every replica.
func TestClusterNATSNodeLoss(t *testing.T) {
	nc, rs := startCluster(t)
	if st := rs[1].DoJSON(t, "POST", "/contributors", staticContributor("before.loss", "DSH_BEFORE", "1"), nil); st != 201 {
		t.Fatalf("register: %d", st)
	}
	nc.Kill(0) // replica 0's first server
	lost := time.Now()
	// While the connection moves and the buckets elect new leaders, a
	// registration may answer 503 cluster_unavailable; one that answered
	// it may still have been stored (docs/cluster.md says: read before
	// retrying), so a retry may find its own contributor.
	var p problem
	unavailable := false
	for {
		p = problem{}
		st := rs[0].DoJSON(t, "POST", "/contributors", staticContributor("after.loss", "DSH_AFTER", "1"), &p)
		t.Logf("%s after the loss: %d %s", time.Since(lost).Round(time.Millisecond), st, p.Code)
		if st == 201 || st == 409 && p.Code == "duplicate_contributor" && unavailable {
			break
		}
		if st != 503 || p.Code != "cluster_unavailable" || time.Since(lost) > 60*time.Second {
			t.Fatalf("register through the replica whose NATS node died (%s later): %d %+v", time.Since(lost), st, p)
		}
		unavailable = true
	}
	t.Logf("replica 0 registered again %s after its NATS node died", time.Since(lost).Round(time.Millisecond))
	for i, s := range rs {
		deadline := time.Now().Add(15 * time.Second)
		for s.declaredBy(t, "DSH_AFTER") != "after.loss" || s.declaredBy(t, "DSH_BEFORE") != "before.loss" {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d lacks a contributor after the NATS node loss", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
		var h clusterHealth
		if st := s.DoJSON(t, "GET", "/healthz", nil, &h); st != 200 || !h.Details.Cluster.Connected {
			t.Fatalf("replica %d after the NATS node loss: %d %+v", i, st, h.Details.Cluster)
		}
	}
}

// idemExecAny sends POST /exec with an Idempotency-Key and decodes a job
// (into out, when not nil) or a problem; it returns the status and code.
func (s *testServer) idemExecAny(t *testing.T, key string, body map[string]any, out *job) (int, string, error) {
	t.Helper()
	resp := s.DoWith(t, "POST", "/exec", body, map[string]string{"Authorization": "Bearer " + s.Token, "Idempotency-Key": key})
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	var p problem
	if resp.StatusCode >= 300 {
		_ = json.Unmarshal(data, &p)
	} else if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("decode %q: %v", data, err)
		}
	}
	return resp.StatusCode, p.Code, nil
}

// TestClusterReplicaRestart: a replica killed with a running job and
// started again on the same home reports the job lost, through any
// replica, and its agent is reachable again.
func TestClusterReplicaRestart(t *testing.T) {
	nc, rs := startCluster(t)
	waitViews := func() {
		for i, s := range rs {
			deadline := time.Now().Add(15 * time.Second)
			for {
				var h clusterHealth
				s.DoJSON(t, "GET", "/healthz", nil, &h)
				if h.Details.Cluster != nil && len(h.Details.Cluster.Replicas) == 3 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("replica %d does not see the others", i)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	waitViews()
	var a agent
	if st := rs[0].DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent: %d", st)
	}
	var j job
	if st := rs[1].DoJSON(t, "POST", "/exec", map[string]any{"command": "sleep 30", "agentId": a.ID, "background": true}, &j); st != 202 || !strings.HasPrefix(j.ID, "job_replica-0.") {
		t.Fatalf("background job for the agent through replica 1: %d %q", st, j.ID)
	}
	rs[0].crash(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(rs[0].Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("cluster:\n  replicaId: replica-0\n  urls: [%s]\n", strings.Join(nc.URLs, ", "))
	rs[0] = startServer(t, withHome(rs[0].Home), withConfig(cfg), withArgs("--token-file", tokenFile))
	waitViews()
	var got job
	if st := rs[2].DoJSON(t, "GET", "/jobs/"+j.ID, nil, &got); st != 200 || got.State != "lost" {
		t.Fatalf("the killed replica's running job through replica 2 after its restart: %d %q, want lost", st, got.State)
	}
	r := rs[1].callTool(t, a.ID, "bash", map[string]any{"command": "echo back"})
	if r.IsError || r.Text != "back" {
		t.Fatalf("the agent after its replica restarted: %+v", r)
	}
}

// waitForReplicas waits until every replica sees all of them.
func waitForReplicas(t *testing.T, rs []*testServer) {
	t.Helper()
	for i, s := range rs {
		deadline := time.Now().Add(15 * time.Second)
		for {
			var h clusterHealth
			s.DoJSON(t, "GET", "/healthz", nil, &h)
			if h.Details.Cluster != nil && len(h.Details.Cluster.Replicas) == len(rs) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d does not see the others", i)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestClusterMCP: an MCP session naming an agent, opened through any
// replica, lives on the agent's home, and every request of the session
// reaches it there (one hop): the commands run at the home and the calls
// are in the agent's one transcript. A session naming no agent lives where
// it was opened. When the session's replica dies, its requests answer 503
// session_home_unavailable.
func TestClusterMCP(t *testing.T) {
	t.Parallel()
	_, rs := startCluster(t)
	waitForReplicas(t, rs)
	var a agent
	if st := rs[0].DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent: %d", st)
	}
	c := startMCPClient(t)
	viaB := c.connect(rs[1], "b", "?agentId="+a.ID, nil)
	if viaB.AgentID != a.ID || !strings.HasPrefix(viaB.SessionID, "mcp_replica-0.") {
		t.Fatalf("session naming replica 0's agent, opened through replica 1: %+v", viaB)
	}
	if r := c.call("b", "bash", map[string]any{"command": `printf '%s %s' "$DSH_SESSION_ID" "$DSH_HOME"`}); r.Result.IsError || r.text() != a.ID+" "+rs[0].Home {
		t.Fatalf("bash over the forwarded session = %q, want the agent and replica 0's home %s", r.text(), rs[0].Home)
	}
	own := c.connect(rs[2], "c", "", nil)
	if !strings.HasPrefix(own.SessionID, "mcp_replica-2.") || !strings.HasPrefix(own.AgentID, "agt_replica-2_") {
		t.Fatalf("session naming no agent, opened through replica 2: %+v", own)
	}
	if r := c.call("c", "bash", map[string]any{"command": `printf %s "$DSH_HOME"`}); r.Result.IsError || r.text() != rs[2].Home {
		t.Fatalf("bash over replica 2's own session = %q, want %s", r.text(), rs[2].Home)
	}
	resp := rs[2].Do(t, "GET", "/agents/"+a.ID+"/transcript", nil)
	tr, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !bytes.Contains(tr, []byte(`"type":"tool/call"`)) {
		t.Fatalf("transcript of the agent through replica 2: %d %v\n%s", resp.StatusCode, err, tr)
	}
	checkTranscriptBytes(t, tr)

	rs[0].crash(t)
	raw := string(c.try(map[string]any{"op": "call", "session": "b", "name": "bash", "arguments": map[string]any{"command": "echo must not run"}}))
	if !strings.Contains(raw, "503") || !strings.Contains(raw, "session_home_unavailable") {
		t.Fatalf("a call on the session of a dead replica answered %s", raw)
	}
	if r := c.call("c", "bash", map[string]any{"command": "echo still here"}); r.Result.IsError || r.text() != "still here" {
		t.Fatalf("replica 2's own session after replica 0 died = %q", r.text())
	}
}

// TestClusterPartition cuts replica 2 off from NATS (its only way there
// is a proxy, which drops every connection) while it stays reachable over
// HTTP, then heals the cut, and checks what the README says of a
// partition: the cut-off replica keeps running its jobs and refuses
// registry changes and its agents' calls (their transcripts cannot be
// written) with 503 cluster_unavailable, running nothing; the others stop
// routing to it once its heartbeat lapses (503 job_owner_unavailable,
// never a re-run) and go on registering; after the heal it catches up
// with what changed meanwhile, and everything is reachable again.
func TestClusterPartition(t *testing.T) {
	nc := natstest.StartWith(t, 3, natstest.Options{NoAdvertise: true})
	proxy := natstest.NewProxy(t, nc.URLs[2])
	rs := startReplicas(t, nc, func(i int) []string {
		if i == 2 {
			return []string{proxy.URL}
		}
		return []string{nc.URLs[i]}
	})
	waitForReplicas(t, rs)
	var a agent
	if st := rs[2].DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent on replica 2: %d", st)
	}
	if r := rs[2].callTool(t, a.ID, "bash", map[string]any{"command": "echo before"}); r.Text != "before" {
		t.Fatalf("tool call before the cut: %+v", r)
	}
	var j job
	if st := rs[0].DoJSON(t, "POST", "/exec", map[string]any{"command": "sleep 0.5; echo done", "background": true, "agentId": a.ID}, &j); st != 202 || !strings.HasPrefix(j.ID, "job_replica-2.") {
		t.Fatalf("background job for replica 2's agent: %d %+v", st, j)
	}

	proxy.Cut()
	cut := time.Now()
	// The cut-off replica: registry changes are refused once its
	// connection is found gone.
	for {
		var p problem
		st := rs[2].DoJSON(t, "POST", "/contributors", staticContributor("cut.off", "DSH_CUT_OFF", "1"), &p)
		if st == 503 && p.Code == "cluster_unavailable" {
			break
		}
		if time.Since(cut) > 30*time.Second {
			t.Fatalf("registration on the cut-off replica: %d %+v", st, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("replica 2 refused a registration %s after the cut", time.Since(cut).Round(time.Millisecond))
	marker := filepath.Join(t.TempDir(), "ran")
	var p problem
	if st := rs[2].DoJSON(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"arguments": map[string]any{"command": "touch " + marker}}, &p); st != 503 || p.Code != "cluster_unavailable" {
		t.Fatalf("tool call on the cut-off replica: %d %+v", st, p)
	}
	var h clusterHealth
	if st := rs[2].DoJSON(t, "GET", "/healthz", nil, &h); st != 200 || h.Details.Cluster.Connected {
		t.Fatalf("health of the cut-off replica: %d %+v", st, h.Details.Cluster)
	}
	// Its job ran to its end meanwhile, on its own.
	var ended job
	if st := rs[2].DoJSON(t, "GET", "/jobs/"+j.ID+"?waitMs=10000", nil, &ended); st != 200 || ended.State != "exited" || ended.Stdout.Text != "done\n" {
		t.Fatalf("the cut-off replica's job: %d %+v", st, ended)
	}
	// The others: once its heartbeat lapses they stop routing to it.
	for {
		var p problem
		st := rs[0].DoJSON(t, "GET", "/jobs/"+j.ID, nil, &p)
		if st == 503 && p.Code == "job_owner_unavailable" {
			break
		}
		if st != 200 || time.Since(cut) > 30*time.Second {
			t.Fatalf("the cut-off replica's job through replica 0: %d %+v", st, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := rs[1].DoJSON(t, "POST", "/contributors", staticContributor("during.cut", "DSH_DURING_CUT", "1"), nil); st != 201 {
		t.Fatalf("registration on the majority side: %d", st)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused tool call ran: %v", err)
	}

	proxy.Heal()
	healed := time.Now()
	for rs[2].declaredBy(t, "DSH_DURING_CUT") != "during.cut" {
		if time.Since(healed) > 30*time.Second {
			t.Fatal("replica 2 did not catch up with the registry after the heal")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("replica 2 caught up %s after the heal", time.Since(healed).Round(time.Millisecond))
	waitForReplicas(t, rs)
	var again job
	if st := rs[0].DoJSON(t, "GET", "/jobs/"+j.ID, nil, &again); st != 200 || again.Stdout.Text != "done\n" {
		t.Fatalf("the job through replica 0 after the heal: %d %+v", st, again)
	}
	for {
		st := rs[2].DoJSON(t, "POST", "/contributors", staticContributor("after.cut", "DSH_AFTER_CUT", "1"), nil)
		if st == 201 {
			break
		}
		if time.Since(healed) > 30*time.Second {
			t.Fatalf("registration on replica 2 after the heal: %d", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := rs[1].callTool(t, a.ID, "bash", map[string]any{"command": "echo after"}); r.IsError || r.Text != "after" {
		t.Fatalf("tool call after the heal: %+v", r)
	}
	resp := rs[0].Do(t, "GET", "/agents/"+a.ID+"/transcript", nil)
	tr, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("transcript after the heal: %d %v", resp.StatusCode, err)
	}
	checkTranscriptBytes(t, tr)
	// What was refused during the cut was not stored later either.
	if bytes.Contains(tr, []byte(marker)) {
		t.Fatalf("the refused tool call is in the transcript:\n%s", tr)
	}
	for i, r := range rs {
		if by := r.declaredBy(t, "DSH_CUT_OFF"); by != "" {
			t.Fatalf("the refused registration is declared on replica %d", i)
		}
	}
}

// TestClusterJobList: GET /jobs through any replica lists the jobs of
// every replica, sorted by id, filtered by state on each; naming an agent
// asks the agent's home. A replica that does not answer is named in
// Dsh-Unavailable-Replicas, and the others' jobs are still listed.
func TestClusterJobList(t *testing.T) {
	t.Parallel()
	_, rs := startCluster(t)
	waitForReplicas(t, rs)
	var want []string
	var running job
	for i, s := range rs {
		var j job
		if st := s.DoJSON(t, "POST", "/exec", map[string]any{"command": "true"}, &j); st != 200 || !strings.HasPrefix(j.ID, fmt.Sprintf("job_replica-%d.", i)) {
			t.Fatalf("exec on replica %d: %d %+v", i, st, j)
		}
		want = append(want, j.ID)
	}
	if st := rs[1].DoJSON(t, "POST", "/exec", map[string]any{"command": "sleep 30", "background": true}, &running); st != 202 {
		t.Fatalf("background job on replica 1: %d", st)
	}
	want = append(want, running.ID)
	var a agent
	if st := rs[2].DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent: %d", st)
	}
	var agentJob job
	if st := rs[0].DoJSON(t, "POST", "/exec", map[string]any{"command": "true", "agentId": a.ID}, &agentJob); st != 200 || !strings.HasPrefix(agentJob.ID, "job_replica-2.") {
		t.Fatalf("exec for replica 2's agent through replica 0: %d %+v", st, agentJob)
	}
	want = append(want, agentJob.ID)
	slices.Sort(want)
	ids := func(jobs []job) []string {
		var out []string
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	for i, s := range rs {
		resp := s.Do(t, "GET", "/jobs", nil)
		var list []job
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /jobs through replica %d: %d %v", i, resp.StatusCode, err)
		}
		resp.Body.Close()
		if got := ids(list); !slices.Equal(got, want) || resp.Header.Get("Dsh-Unavailable-Replicas") != "" {
			t.Fatalf("GET /jobs through replica %d = %v (unavailable %q), want %v", i, got, resp.Header.Get("Dsh-Unavailable-Replicas"), want)
		}
		var list2 []job
		if st := s.DoJSON(t, "GET", "/jobs?state=running", nil, &list2); st != 200 || !slices.Equal(ids(list2), []string{running.ID}) {
			t.Fatalf("running jobs through replica %d: %d %v", i, st, ids(list2))
		}
		if st := s.DoJSON(t, "GET", "/jobs?agentId="+a.ID, nil, &list2); st != 200 || !slices.Equal(ids(list2), []string{agentJob.ID}) {
			t.Fatalf("the agent's jobs through replica %d: %d %v", i, st, ids(list2))
		}
	}

	// Cancelled through replica 2 first: a crashed replica leaves its
	// processes to its next start, and replica 1 is not started again.
	if st := rs[2].DoJSON(t, "DELETE", "/jobs/"+running.ID, nil, &running); st != 200 || running.State != "cancelled" {
		t.Fatalf("cancel replica 1's job through replica 2: %d %+v", st, running)
	}
	rs[1].crash(t)
	resp := rs[0].Do(t, "GET", "/jobs", nil)
	var list []job
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /jobs with replica 1 dead: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	var others []string
	for _, id := range want {
		if !strings.HasPrefix(id, "job_replica-1.") {
			others = append(others, id)
		}
	}
	if got := ids(list); !slices.Equal(got, others) || resp.Header.Get("Dsh-Unavailable-Replicas") != "replica-1" {
		t.Fatalf("GET /jobs with replica 1 dead = %v (unavailable %q), want %v and replica-1 named", got, resp.Header.Get("Dsh-Unavailable-Replicas"), others)
	}
}

// TestClusterUISession: a UI session lives in the memory of the replica it
// signed in on; its requests for another replica's job are forwarded there
// with the shared token, so the UI sees and streams every replica's jobs.
func TestClusterUISession(t *testing.T) {
	t.Parallel()
	_, rs := startCluster(t)
	var j job
	if st := rs[1].DoJSON(t, "POST", "/exec", map[string]any{"command": "echo on-replica-1", "background": true}, &j); st != http.StatusAccepted {
		t.Fatalf("POST /exec on replica 1 = %d", st)
	}
	resp, body := rawRequest(t, "POST", rs[0].URL+"/ui/session", `{"token":"`+rs[0].Token+`"}`, nil)
	if resp.StatusCode != http.StatusCreated || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in on replica 0 = %d: %s", resp.StatusCode, body)
	}
	var session struct{ Key string }
	decodeBody(t, body, &session)
	c := resp.Cookies()[0]
	h := map[string]string{"Cookie": c.Name + "=" + c.Value, "X-Dshd-UI-Key": session.Key, "Sec-Fetch-Site": "same-origin"}

	resp, body = rawRequest(t, "GET", rs[0].URL+"/jobs/"+j.ID+"?waitMs=5000", "", h)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"id":"`+j.ID+`"`) {
		t.Fatalf("GET replica 1's job through replica 0 with the UI session = %d: %s", resp.StatusCode, body)
	}
	h["Accept"] = "text/event-stream"
	resp, body = rawRequest(t, "GET", rs[0].URL+"/jobs/"+j.ID+"/output", "", h)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "on-replica-1") {
		t.Errorf("output of replica 1's job through replica 0 with the UI session = %d:\n%s", resp.StatusCode, body)
	}
	// The session is replica 0's: replica 1 does not take it directly.
	delete(h, "Accept")
	if resp, body := rawRequest(t, "GET", rs[1].URL+"/jobs", "", h); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("replica 1 took replica 0's UI session: %d %s", resp.StatusCode, body)
	}
}

// TestClusterForgedForwarding: forwarding headers sent by a client (no
// signature, or a signature that does not verify) are refused, 421
// forward_refused, and nothing runs or is routed on: a forged forward for
// an agent's call does not reach its home, and a keyed POST /exec with
// forged headers neither runs nor takes the key, which then runs once when
// sent plainly through any replica. The baseline: the same requests
// without the headers run at the agent's home.
func TestClusterForgedForwarding(t *testing.T) {
	t.Parallel()
	_, rs := startCluster(t)
	waitForReplicas(t, rs)
	var a agent
	if st := rs[0].DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent: %d", st)
	}
	forged := []map[string]string{
		{"Dsh-Forwarded-By": "x"},
		{"Dsh-Forwarded-By": "replica-0", "Dsh-Forwarded-To": "replica-1", "Dsh-Forwarded-Sig": fmt.Sprintf("%d.%s.%s", time.Now().UnixMilli(), strings.Repeat("ab", 16), strings.Repeat("ab", 32))},
		{"Dsh-Forwarded-Sig": "1.00"},
		{"Dsh-Forwarded-To": "replica-0"},
	}
	marker := filepath.Join(t.TempDir(), "forged")
	for i, h := range forged {
		h["Authorization"] = "Bearer " + rs[1].Token
		var p problem
		resp := rs[1].DoWith(t, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"arguments": map[string]any{"command": "echo tool >> " + marker}}, h)
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 421 || p.Code != "forward_refused" {
			t.Fatalf("forged header %d: tool call through replica 1: %d %+v %v", i, resp.StatusCode, p, err)
		}
		resp.Body.Close()
		resp = rs[2].DoWith(t, "POST", "/exec", map[string]any{"command": "echo exec >> " + marker, "agentId": a.ID}, h)
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 421 || p.Code != "forward_refused" {
			t.Fatalf("forged header %d: /exec for replica 0's agent through replica 2: %d %+v %v", i, resp.StatusCode, p, err)
		}
		resp.Body.Close()
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a forged forward ran: %v", err)
	}
	if r := rs[1].callTool(t, a.ID, "bash", map[string]any{"command": "echo hi"}); !strings.HasPrefix(r.JobID, "job_replica-0.") || r.Text != "hi" {
		t.Fatalf("baseline: the tool call without forged headers ran %q (%q), not at the agent's home", r.JobID, r.Text)
	}

	runs := filepath.Join(t.TempDir(), "runs")
	body := map[string]any{"command": "echo once >> " + runs}
	for via := range rs {
		h := map[string]string{"Authorization": "Bearer " + rs[via].Token, "Idempotency-Key": "forged-1", "Dsh-Forwarded-By": "replica-0"}
		resp := rs[via].DoWith(t, "POST", "/exec", body, h)
		var p problem
		err := json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 421 || p.Code != "forward_refused" {
			t.Fatalf("keyed /exec with a forged header through replica %d: %d %+v %v", via, resp.StatusCode, p, err)
		}
	}
	for _, via := range []int{1, 2, 0} {
		var j job
		st, code, err := rs[via].idemExecAny(t, "forged-1", body, &j)
		if err != nil || st != 200 || !strings.HasPrefix(j.ID, "job_replica-1.") {
			t.Fatalf("keyed /exec through replica %d: %d %q %q %v", via, st, code, j.ID, err)
		}
	}
	if b, err := os.ReadFile(runs); err != nil || string(b) != "once\n" {
		t.Fatalf("the keyed command ran %q (%v), want once", b, err)
	}
}

// TestClusterWorkspaceRefusalNamesHome: a snapshot spawn or fork of an
// agent, sent through a replica that is not its home, is answered by the
// home: 422 workspace_snapshot_unavailable, its reason naming the home
// replica, and no agent made; a shared fork works through any replica.
func TestClusterWorkspaceRefusalNamesHome(t *testing.T) {
	t.Parallel()
	_, rs := startCluster(t)
	waitForReplicas(t, rs)
	var a agent
	if st := rs[0].DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent on replica 0: %d", st)
	}
	for _, op := range []string{"spawn", "fork"} {
		var p wsProblem
		if st := rs[1].DoJSON(t, "POST", "/agents/"+a.ID+"/"+op, map[string]any{"workspace": "snapshot"}, &p); st != 422 || p.Code != "workspace_snapshot_unavailable" || !strings.Contains(p.Reason, `replica "replica-0", the home of the agent`) {
			t.Errorf("snapshot %s of replica 0's agent through replica 1: %d %+v", op, st, p)
		}
	}
	var list []agent
	if st := rs[2].DoJSON(t, "GET", "/agents", nil, &list); st != 200 || len(list) != 1 {
		t.Errorf("refused snapshot forks made agents: %d, %d agents", st, len(list))
	}
	var c agent
	if st := rs[2].DoJSON(t, "POST", "/agents/"+a.ID+"/fork", map[string]any{"workspace": "shared"}, &c); st != 201 || !strings.HasPrefix(c.ID, "agt_replica-0_") {
		t.Errorf("shared fork through replica 2: %d %+v", st, c)
	}
}
