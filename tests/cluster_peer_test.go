package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dshd/dshd/internal/cluster/natstest"
)

// tappedRequest is a request as one replica sent it to another.
type tappedRequest struct {
	method, uri string
	header      http.Header
	body        []byte
}

// replay sends r to the server at base as it was captured, with change
// applied to its headers; it returns the status and problem code.
func (r tappedRequest) replay(t *testing.T, base string, change func(http.Header)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(r.method, base+r.uri, bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = r.header.Clone()
	if change != nil {
		change(req.Header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p problem
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p.Code
}

// TestClusterForwardReplay: three replicas against three nats-server
// processes; replica 1 advertises itself through a tap that
// records what the other replicas send it. A keyed POST /exec for replica
// 1's agent sent through replica 0 is forwarded there and runs once; the
// captured forward replayed to replica 1, to replica 2, re-targeted to
// replica 2, and with another Idempotency-Key, is refused 421
// forward_refused every time, and the command ran once in all. The same
// for a keyed POST /exec without agent whose key replica 1 claimed: the
// replay with another key neither runs nor claims that key, which then
// runs once through any replica.
func TestClusterForwardReplay(t *testing.T) {
	t.Parallel()
	clusterSlot(t)
	nc := natstest.StartProcs(t, 3)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(strings.Repeat("c", 64)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var target atomic.Pointer[url.URL]
	var mu sync.Mutex
	var tapped []tappedRequest
	tap := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			body, _ := io.ReadAll(pr.In.Body)
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			if pr.In.Header.Get("Dsh-Forwarded-By") != "" && pr.In.Method == "POST" {
				mu.Lock()
				tapped = append(tapped, tappedRequest{method: pr.In.Method, uri: pr.In.URL.RequestURI(), header: pr.In.Header.Clone(), body: body})
				mu.Unlock()
			}
			pr.SetURL(target.Load())
			pr.Out.Host = pr.In.Host
		},
		FlushInterval: -1,
	})
	defer tap.Close()
	var rs []*testServer
	for i := range 3 {
		cfg := fmt.Sprintf("cluster:\n  replicaId: replica-%d\n  urls: [%s]\n", i, nc.URLs[i])
		if i == 1 {
			cfg += "  advertiseUrl: " + tap.URL + "\n"
		}
		rs = append(rs, startServer(t, withConfig(cfg), withArgs("--token-file", tokenFile)))
		if i == 1 {
			u, _ := url.Parse(rs[1].URL)
			target.Store(u)
		}
	}
	waitForReplicas(t, rs)
	last := func() tappedRequest {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(tapped) == 0 {
			t.Fatal("nothing was forwarded to replica 1")
		}
		return tapped[len(tapped)-1]
	}
	refused := func(what string, st int, code string) {
		t.Helper()
		if st != http.StatusMisdirectedRequest || code != "forward_refused" {
			t.Errorf("%s: %d %q, want 421 forward_refused", what, st, code)
		}
	}

	var a agent
	if st := rs[1].DoJSON(t, "POST", "/agents", map[string]any{}, &a); st != 201 {
		t.Fatalf("create agent on replica 1: %d", st)
	}
	runs := filepath.Join(t.TempDir(), "runs")
	body := map[string]any{"command": "echo agent >> " + runs, "agentId": a.ID}
	var j job
	if st, code, err := rs[0].idemExecAny(t, "replay-agent", body, &j); err != nil || st != 200 || !strings.HasPrefix(j.ID, "job_replica-1.") {
		t.Fatalf("keyed /exec for replica 1's agent through replica 0: %d %q %q %v", st, code, j.ID, err)
	}
	fwd := last()
	st, code := fwd.replay(t, rs[1].URL, nil)
	refused("the forward replayed to its target", st, code)
	st, code = fwd.replay(t, rs[2].URL, nil)
	refused("the forward replayed to replica 2", st, code)
	st, code = fwd.replay(t, rs[2].URL, func(h http.Header) { h.Set("Dsh-Forwarded-To", "replica-2") })
	refused("the forward re-targeted to replica 2", st, code)
	st, code = fwd.replay(t, rs[1].URL, func(h http.Header) { h.Set("Idempotency-Key", "replay-agent-2") })
	refused("the forward with another Idempotency-Key", st, code)
	if b, err := os.ReadFile(runs); err != nil || string(b) != "agent\n" {
		t.Fatalf("the agent's keyed command ran %q (%v), want once", b, err)
	}

	keyed := map[string]any{"command": "echo keyed >> " + runs}
	if st, code, err := rs[1].idemExecAny(t, "replay-key", keyed, &j); err != nil || st != 200 || !strings.HasPrefix(j.ID, "job_replica-1.") {
		t.Fatalf("keyed /exec through replica 1: %d %q %q %v", st, code, j.ID, err)
	}
	var again job
	if st, code, err := rs[2].idemExecAny(t, "replay-key", keyed, &again); err != nil || st != 200 || again.ID != j.ID {
		t.Fatalf("the key again through replica 2: %d %q %q %v, want job %s", st, code, again.ID, err, j.ID)
	}
	fwd = last()
	if fwd.header.Get("Idempotency-Key") != "replay-key" {
		t.Fatalf("the tapped forward has key %q", fwd.header.Get("Idempotency-Key"))
	}
	st, code = fwd.replay(t, rs[1].URL, func(h http.Header) { h.Set("Idempotency-Key", "replay-key-2") })
	refused("the keyed forward with another key", st, code)
	st, code = fwd.replay(t, rs[0].URL, nil)
	refused("the keyed forward replayed to replica 0", st, code)
	for _, via := range []int{0, 2, 1} {
		var k2 job
		if st, code, err := rs[via].idemExecAny(t, "replay-key-2", keyed, &k2); err != nil || st != 200 || !strings.HasPrefix(k2.ID, "job_replica-0.") {
			t.Fatalf("the other key through replica %d: %d %q %q %v, want replica 0's job (it claimed the key first)", via, st, code, k2.ID, err)
		}
	}
	if b, err := os.ReadFile(runs); err != nil || string(b) != "agent\nkeyed\nkeyed\n" {
		t.Fatalf("the commands ran %q (%v), want the agent's once and each key once", b, err)
	}
}
