package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	contract "github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/cluster/status"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/run"
)

// recordingPipeline is failing, recording every POST /exec it is asked to
// run (and answering it 400 invalid_input: whether a request reached the
// pipeline is all these tests need to know).
type recordingPipeline struct {
	*failing
	mu  sync.Mutex
	ran []string // "<Idempotency-Key> <agent> <command>"
}

func (p *recordingPipeline) Exec(_ context.Context, req run.ExecRequest) (*exec.Job, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ran = append(p.ran, req.IdempotencyKey+" "+req.AgentID+" "+req.Command)
	return nil, exec.ErrInvalidInput
}

func (p *recordingPipeline) runs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ran...)
}

// idRouter routes by the replica an id names: this replica's ids are
// served here, every other replica is at elsewhere. Keys in owners are
// claimed by the replica named; any other key by this one. It records the
// keys claimed.
type idRouter struct {
	self      string
	elsewhere *url.URL
	owners    map[string]string // Idempotency-Key → replica that claimed it first
	mu        sync.Mutex
	claimed   []string
}

func (r *idRouter) at(owner string) *url.URL {
	if owner == "" || owner == r.self {
		return nil
	}
	return r.elsewhere
}
func (r *idRouter) JobOwner(id string) (*url.URL, error)  { return r.at(status.JobOwner(id)), nil }
func (r *idRouter) AgentHome(id string) (*url.URL, error) { return r.at(status.AgentOwner(id)), nil }
func (r *idRouter) SessionHome(id string) (*url.URL, error) {
	return r.at(status.MCPSessionOwner(id)), nil
}
func (r *idRouter) ClaimKey(_ context.Context, key string) (*url.URL, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claimed = append(r.claimed, key)
	if o, ok := r.owners[key]; ok && o != r.self {
		return r.elsewhere, o, nil
	}
	return nil, "", nil
}

// fixedCluster reports a fixed set of replicas.
type fixedCluster struct{ st status.Status }

func (c fixedCluster) Status() status.Status { return c.st }

// hits counts the requests a server got, by path.
type hits struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hits) get(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[path]
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// replicaUnderTest is one replica's server over a recording pipeline.
type replicaUnderTest struct {
	url    string
	runs   *recordingPipeline
	router *idRouter
	logs   *lockedBuffer
}

func startReplicaUnderTest(t *testing.T, id string, elsewhere *url.URL, owners map[string]string) *replicaUnderTest {
	t.Helper()
	f := &failing{}
	p := &recordingPipeline{failing: f}
	rt := &idRouter{self: id, elsewhere: elsewhere, owners: owners}
	logs := &lockedBuffer{}
	h, err := NewServer(Deps{
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Token: testToken, Spec: contract.OpenAPI,
		Env: f, Jobs: f, Pipeline: p, Agents: f, Hooks: f, Skills: skillsFailing{f}, MCP: f, JobRouter: rt, ReplicaID: id,
		Cluster: fixedCluster{status.Status{ReplicaID: id, Replicas: []status.Replica{{ID: id, Self: true}, {ID: "replica-c", URL: elsewhere.String()}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &replicaUnderTest{url: srv.URL, runs: p, router: rt, logs: logs}
}

// captured is a request as it went over the wire between replicas.
type captured struct {
	method, uri string
	header      http.Header
	body        []byte
}

// send sends c (with changes to its headers) to the server at base and
// returns the status and problem code.
func (c captured) send(t *testing.T, base string, change func(http.Header)) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(c.method, base+c.uri, bytes.NewReader(c.body))
	req.Header = c.header.Clone()
	if change != nil {
		change(req.Header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct{ Code string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p.Code
}

// signed is a request signed as replica by sends it to replica to, at now.
func signed(method, uri, by, to string, header map[string]string, body string, now time.Time) captured {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+testToken)
	h.Set("Content-Type", "application/json")
	for k, v := range header {
		h.Set(k, v)
	}
	signPeer(h, PeerKeyFromToken(testToken), by, to, method, uri, []byte(body), now)
	return captured{method: method, uri: uri, header: h, body: []byte(body)}
}

// TestForwardAdmission drives the forwarder of replica-b (and of
// replica-c) with forwards captured between replicas and altered: a
// forward runs once, at the replica it was signed for, with the headers it
// was signed with; a replayed, re-targeted, header-swapped, forged or
// pre-boot one is refused 421 forward_refused and runs nothing, and a
// refused forward is never routed on. A forwarded keyed request claims its
// key, and one whose key another replica holds is refused, not forwarded
// again. A listing asked by a replica is answered locally (a client's is
// fanned out: the baseline). The refusals of one sender are logged once.
func TestForwardAdmission(t *testing.T) {
	var elsewhereHits = &hits{n: map[string]int{}}
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereHits.mu.Lock()
		elsewhereHits.n[r.URL.Path]++
		elsewhereHits.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/jobs" {
			_, _ = io.WriteString(w, "[]")
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	defer elsewhere.Close()
	elsewhereURL, _ := url.Parse(elsewhere.URL)
	owners := map[string]string{"k-of-c": "replica-c"}
	b := startReplicaUnderTest(t, "replica-b", elsewhereURL, owners)
	c := startReplicaUnderTest(t, "replica-c", elsewhereURL, owners)

	// Replica a forwards a keyed POST /exec for replica b's agent; the
	// wire between them is tapped.
	tapped := make(chan captured, 4)
	tap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tapped <- captured{method: r.Method, uri: r.URL.RequestURI(), header: r.Header.Clone(), body: body}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer tap.Close()
	tapURL, _ := url.Parse(tap.URL)
	f := &failing{}
	ha, err := NewServer(Deps{
		Logger: discardLogger(), Token: testToken, Spec: contract.OpenAPI,
		Env: f, Jobs: f, Pipeline: f, Agents: f, Hooks: f, Skills: skillsFailing{f}, MCP: f, JobRouter: homeRouter{tapURL}, ReplicaID: "replica-a",
	})
	if err != nil {
		t.Fatal(err)
	}
	a := httptest.NewServer(ha)
	defer a.Close()
	agentB := "agt_replica-b_01m8rk3468mk6yta9t5hevkezw"
	capture := func(key string) captured {
		t.Helper()
		req, _ := http.NewRequest("POST", a.URL+"/exec", strings.NewReader(`{"command":"echo hi","agentId":"`+agentB+`"}`))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return <-tapped
	}
	refused := func(what string, st int, code string) {
		t.Helper()
		if st != http.StatusMisdirectedRequest || code != "forward_refused" {
			t.Errorf("%s: %d %q, want 421 forward_refused", what, st, code)
		}
	}

	first := capture("k1")
	if st, code := first.send(t, b.url, nil); st == http.StatusMisdirectedRequest || len(b.runs.runs()) != 1 || b.runs.runs()[0] != "k1 "+agentB+" echo hi" {
		t.Fatalf("the captured forward at its target: %d %q, ran %q, want it run once", st, code, b.runs.runs())
	}
	st, code := first.send(t, b.url, nil)
	refused("replayed to its target", st, code)
	st, code = first.send(t, c.url, nil)
	refused("replayed to another replica", st, code)
	st, code = first.send(t, c.url, func(h http.Header) { h.Set(forwardedToHeader, "replica-c") })
	refused("re-targeted to another replica", st, code)

	// One that c would serve as its own (a key nobody holds) still runs
	// only at the replica it was signed for.
	st, code = signed("POST", "/exec", "replica-a", "replica-b", map[string]string{"Idempotency-Key": "k-away"}, `{"command":"echo away"}`, time.Now()).send(t, c.url, nil)
	refused("a keyless-agent forward for b sent to c", st, code)

	second := capture("k2")
	st, code = second.send(t, b.url, func(h http.Header) { h.Set("Idempotency-Key", "k3") })
	refused("with another Idempotency-Key", st, code)
	st, code = second.send(t, b.url, func(h http.Header) { h.Del("Idempotency-Key") })
	refused("with its Idempotency-Key removed", st, code)
	st, code = second.send(t, b.url, func(h http.Header) { h.Set("Dsh-Agent-Id", "agt_replica-c_01m8rk3468mk6yta9t5hevkezw") })
	refused("with an agent header added", st, code)
	// The refusals spent nothing: the forward as signed runs, once.
	if st, _ := second.send(t, b.url, nil); st == http.StatusMisdirectedRequest {
		t.Fatalf("the second captured forward, unaltered: %d", st)
	}
	if got := b.runs.runs(); len(got) != 2 || got[1] != "k2 "+agentB+" echo hi" {
		t.Fatalf("replica b ran %q, want the two captured forwards once each", got)
	}
	if got := c.runs.runs(); len(got) != 0 {
		t.Fatalf("replica c ran %q, want nothing", got)
	}

	// Forged: not signed with the peer key, or signed before the replica
	// started. A forged forward for replica c's agent is not routed there
	// either (the baseline: the same request without the headers is).
	agentC := "agt_replica-c_01m8rk3468mk6yta9t5hevkezw"
	execC := `{"command":"echo forged","agentId":"` + agentC + `"}`
	forged := signed("POST", "/exec", "replica-a", "replica-b", nil, execC, time.Now())
	for name, change := range map[string]func(http.Header){
		"a made-up signature": func(h http.Header) {
			h.Set(forwardedSigHeader, strings.Repeat("1", 13)+"."+strings.Repeat("ab", 16)+"."+strings.Repeat("ab", 32))
		},
		"no signature":   func(h http.Header) { h.Del(forwardedSigHeader) },
		"only a sender":  func(h http.Header) { h.Del(forwardedSigHeader); h.Del(forwardedToHeader) },
		"only a target":  func(h http.Header) { h.Del(forwardedSigHeader); h.Del(forwardedHeader) },
		"another sender": func(h http.Header) { h.Set(forwardedHeader, "replica-c") },
	} {
		st, code := forged.send(t, b.url, change)
		refused(name, st, code)
	}
	wrongKey := captured{method: "POST", uri: "/exec", header: http.Header{"Authorization": {"Bearer " + testToken}, "Content-Type": {"application/json"}}, body: []byte(execC)}
	signPeer(wrongKey.header, PeerKeyFromToken("another cluster's token"), "replica-a", "replica-b", "POST", "/exec", wrongKey.body, time.Now())
	st, code = wrongKey.send(t, b.url, nil)
	refused("signed with another peer key", st, code)
	st, code = signed("POST", "/exec", "replica-a", "replica-b", nil, execC, time.Now().Add(-2*time.Second)).send(t, b.url, nil)
	refused("signed before the replica started", st, code)
	if n := elsewhereHits.get("/exec"); n != 0 {
		t.Fatalf("refused forwards were routed on: %d requests reached replica c", n)
	}
	if st, _ := (captured{method: "POST", uri: "/exec", header: wrongKey.header.Clone(), body: []byte(execC)}).send(t, b.url, func(h http.Header) {
		h.Del(forwardedHeader)
		h.Del(forwardedToHeader)
		h.Del(forwardedSigHeader)
	}); st != http.StatusOK || elsewhereHits.get("/exec") != 1 {
		t.Fatalf("baseline: a client's request for replica c's agent through b: %d, %d requests reached c", st, elsewhereHits.get("/exec"))
	}
	// A verified forward that belongs elsewhere is refused, not forwarded
	// again.
	st, code = signed("POST", "/exec", "replica-a", "replica-b", nil, execC, time.Now()).send(t, b.url, nil)
	refused("a forward for another replica's agent", st, code)
	if n := elsewhereHits.get("/exec"); n != 1 {
		t.Fatalf("a forward was forwarded again: %d requests reached replica c", n)
	}

	// Keyed, without agent: the target claims the key like any request.
	if st, _ := signed("POST", "/exec", "replica-a", "replica-b", map[string]string{"Idempotency-Key": "k-free"}, `{"command":"echo keyed"}`, time.Now()).send(t, b.url, nil); st == http.StatusMisdirectedRequest {
		t.Fatalf("a keyed forward whose key is free: %d", st)
	}
	st, code = signed("POST", "/exec", "replica-a", "replica-b", map[string]string{"Idempotency-Key": "k-of-c"}, `{"command":"echo keyed"}`, time.Now()).send(t, b.url, nil)
	refused("a keyed forward whose key replica c holds", st, code)
	b.router.mu.Lock()
	claimed := append([]string(nil), b.router.claimed...)
	b.router.mu.Unlock()
	if strings.Join(claimed, ",") != "k-free,k-of-c" {
		t.Errorf("replica b claimed %q, want k-free,k-of-c", claimed)
	}
	if got := b.runs.runs(); len(got) != 3 || got[2] != "k-free  echo keyed" {
		t.Fatalf("replica b ran %q, want the keyed forward whose key was free, once", got)
	}
	if n := elsewhereHits.get("/exec"); n != 1 {
		t.Fatalf("a keyed forward was forwarded again: %d requests reached replica c", n)
	}

	// Listings: a client's is fanned out to the other replicas, a
	// replica's is answered from this one's own jobs.
	if st, _ := signed("GET", "/jobs", "replica-a", "replica-b", nil, "", time.Now()).send(t, b.url, nil); st != http.StatusOK || elsewhereHits.get("/jobs") != 0 {
		t.Fatalf("a listing asked by a replica: %d, %d requests to replica c", st, elsewhereHits.get("/jobs"))
	}
	if st, _ := (captured{method: "GET", uri: "/jobs", header: http.Header{"Authorization": {"Bearer " + testToken}}}).send(t, b.url, nil); st != http.StatusOK || elsewhereHits.get("/jobs") != 1 {
		t.Fatalf("baseline: a client's listing: %d, %d requests to replica c", st, elsewhereHits.get("/jobs"))
	}

	// Refusals are logged once per sender and interval.
	if n := strings.Count(b.logs.String(), "by=replica-a"); n != 1 {
		t.Errorf("replica b logged %d lines for replica a's refused forwards, want 1:\n%s", n, b.logs.String())
	}
}
