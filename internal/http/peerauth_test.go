package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPeerSignature: a request signed by a replica verifies with the same
// key; another key, method, URI, sender, target, body, nonce or signed
// header (Idempotency-Key, the agent, the MCP session), or a time out of
// the window, does not.
func TestPeerSignature(t *testing.T) {
	key := PeerKeyFromToken(strings.Repeat("c", 64))
	now := time.Now()
	body := []byte(`{"command":"true"}`)
	req := func() *http.Request {
		r := httptest.NewRequest("POST", "/exec?x=1", nil)
		r.Header.Set("Idempotency-Key", "k1")
		signPeer(r.Header, key, "replica-0", "replica-1", "POST", "/exec?x=1", body, now)
		return r
	}
	if p, err := verifyPeer(req(), key, body, now); err != nil || p.by != "replica-0" || p.to != "replica-1" || len(p.nonce) != 32 {
		t.Fatalf("a signed request: %+v %v", p, err)
	}
	if a, b := req().Header.Get(forwardedSigHeader), req().Header.Get(forwardedSigHeader); a == b {
		t.Fatal("two signatures of one request share a nonce")
	}
	for name, bad := range map[string]func(*http.Request) ([]byte, []byte, time.Time){
		"other key":  func(*http.Request) ([]byte, []byte, time.Time) { return PeerKeyFromToken("other"), body, now },
		"other body": func(*http.Request) ([]byte, []byte, time.Time) { return key, []byte(`{"command":"rm"}`), now },
		"other path": func(r *http.Request) ([]byte, []byte, time.Time) {
			r.URL.Path = "/jobs"
			return key, body, now
		},
		"other method": func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Method = "PUT"
			return key, body, now
		},
		"other sender": func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Set(forwardedHeader, "replica-2")
			return key, body, now
		},
		"other target": func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Set(forwardedToHeader, "replica-2")
			return key, body, now
		},
		"other nonce": func(r *http.Request) ([]byte, []byte, time.Time) {
			ts, rest, _ := strings.Cut(r.Header.Get(forwardedSigHeader), ".")
			_, mac, _ := strings.Cut(rest, ".")
			r.Header.Set(forwardedSigHeader, ts+"."+strings.Repeat("0", 32)+"."+mac)
			return key, body, now
		},
		"other Idempotency-Key": func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Set("Idempotency-Key", "k2")
			return key, body, now
		},
		"Idempotency-Key dropped": func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Del("Idempotency-Key")
			return key, body, now
		},
		"agent header added": func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Set("Dsh-Agent-Id", "agt_replica-2_x")
			return key, body, now
		},
		"MCP session added": func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Set("Mcp-Session-Id", "mcp_replica-2.x")
			return key, body, now
		},
		"too old": func(*http.Request) ([]byte, []byte, time.Time) {
			return key, body, now.Add(peerSigMaxAge + 2*time.Second)
		},
		"no signature": func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Del(forwardedSigHeader)
			return key, body, now
		},
		"no target": func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Del(forwardedToHeader)
			return key, body, now
		},
	} {
		r := req()
		k, b, at := bad(r)
		if _, err := verifyPeer(r, k, b, at); !errors.Is(err, errPeerUnverified) {
			t.Errorf("%s: %v, want it unverified", name, err)
		}
	}
}

// TestPeerGateNonces: a nonce is admitted once while its signature lives,
// forgotten after, and the gate keeps at most maxPeerNonces.
func TestPeerGateNonces(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	g := newPeerGate(nil, "replica-1", start)
	now := start.Add(time.Second)
	if err := g.once("n1", now.Add(peerSigMaxAge), now); err != nil {
		t.Fatal(err)
	}
	if err := g.once("n1", now.Add(peerSigMaxAge), now.Add(peerSigMaxAge)); !errors.Is(err, errPeerReplayed) {
		t.Fatalf("the nonce again within its lifetime: %v", err)
	}
	later := now.Add(peerSigMaxAge + 3*time.Second)
	if err := g.once("n2", later.Add(peerSigMaxAge), later); err != nil || len(g.nonces) != 1 {
		t.Fatalf("after n1's lifetime: %v, %d nonces kept, want 1", err, len(g.nonces))
	}
	// After a long idle while (or a clock jump) everything expired goes.
	idle := later.Add(72 * time.Hour)
	if err := g.once("n4", idle.Add(peerSigMaxAge), idle); err != nil || len(g.nonces) != 1 || len(g.expires) != 1 {
		t.Fatalf("after a long idle while: %v, %d nonces in %d seconds kept, want 1 in 1", err, len(g.nonces), len(g.expires))
	}
	if err := g.once("n4", idle.Add(peerSigMaxAge), idle.Add(time.Second)); !errors.Is(err, errPeerReplayed) {
		t.Fatalf("n4 again: %v", err)
	}
	later = idle
	for i := len(g.nonces); i < maxPeerNonces; i++ {
		g.nonces["filler-"+strconv.Itoa(i)] = struct{}{}
	}
	if err := g.once("n3", later.Add(peerSigMaxAge), later); !errors.Is(err, errPeerBusy) || len(g.nonces) != maxPeerNonces {
		t.Fatalf("a full gate: %v, %d nonces", err, len(g.nonces))
	}
}
