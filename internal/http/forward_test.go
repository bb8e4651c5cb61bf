package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	contract "github.com/dshd/dshd/api"
)

// homeRouter sends every agent's calls to home.
type homeRouter struct{ home *url.URL }

func (h homeRouter) JobOwner(string) (*url.URL, error)    { return nil, nil }
func (h homeRouter) AgentHome(string) (*url.URL, error)   { return h.home, nil }
func (h homeRouter) SessionHome(string) (*url.URL, error) { return nil, nil }
func (h homeRouter) ClaimKey(context.Context, string) (*url.URL, string, error) {
	return nil, "", nil
}

// TestForwardLostAfterSending: a tool call forwarded to its agent's home,
// which takes it and loses the connection before answering, is answered
// 503 saying it may have run, with its call id (set on the way when the
// caller gave none) and a Retry-After; the home got that call id and a
// signature that verifies.
func TestForwardLostAfterSending(t *testing.T) {
	type seen struct {
		CallID string `json:"callId"`
		signed bool
	}
	seenCh := make(chan seen, 1)
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var s seen
		_ = json.Unmarshal(body, &s)
		p, err := verifyPeer(r, PeerKeyFromToken(testToken), body, time.Now())
		s.signed = err == nil && p.by == "replica-a" && p.to == "replica-b"
		seenCh <- s
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close() // ran, then lost
		}
	}))
	defer home.Close()
	u, _ := url.Parse(home.URL)
	f := &failing{}
	h, err := NewServer(Deps{
		Logger: discardLogger(), Token: testToken, Spec: contract.OpenAPI,
		Env: f, Jobs: f, Pipeline: f, Agents: f, Hooks: f, Skills: skillsFailing{f}, MCP: f, JobRouter: homeRouter{u}, ReplicaID: "replica-a",
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/agents/agt_replica-b_01m8rk3468mk6yta9t5hevkezw/tools/bash", strings.NewReader(`{"arguments":{"command":"true"}}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p)
	got := <-seenCh
	if got.CallID == "" || !got.signed {
		t.Fatalf("the home got call id %q, signature verified: %v", got.CallID, got.signed)
	}
	if resp.StatusCode != 503 || p.Code != "agent_home_unavailable" || !strings.Contains(p.Detail, "may have run") || !strings.Contains(p.Detail, got.CallID) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("answer: %d %+v Retry-After %q, want 503 saying it may have run, naming %s", resp.StatusCode, p, resp.Header.Get("Retry-After"), got.CallID)
	}
}
