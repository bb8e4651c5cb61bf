package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestPeerSignature: a request signed by a replica verifies with the same
// key; another key, method, URI, sender or body, or a time out of the
// window, does not.
func TestPeerSignature(t *testing.T) {
	key := PeerKeyFromToken(strings.Repeat("c", 64))
	now := time.Now()
	body := []byte(`{"command":"true"}`)
	req := func() *httptestReq {
		r := httptest.NewRequest("POST", "/exec?x=1", nil)
		signPeer(r.Header, key, "replica-0", "POST", "/exec?x=1", body, now)
		return &httptestReq{r}
	}
	if !verifyPeer(req().Request, key, body, now) {
		t.Fatal("a signed request does not verify")
	}
	for name, bad := range map[string]func(*httptestReq) ([]byte, []byte, time.Time){
		"other key":  func(*httptestReq) ([]byte, []byte, time.Time) { return PeerKeyFromToken("other"), body, now },
		"other body": func(*httptestReq) ([]byte, []byte, time.Time) { return key, []byte(`{"command":"rm"}`), now },
		"other path": func(r *httptestReq) ([]byte, []byte, time.Time) {
			r.URL.Path = "/jobs"
			return key, body, now
		},
		"other method": func(r *httptestReq) ([]byte, []byte, time.Time) {
			r.Method = "PUT"
			return key, body, now
		},
		"other sender": func(r *httptestReq) ([]byte, []byte, time.Time) {
			r.Header.Set(forwardedHeader, "replica-1")
			return key, body, now
		},
		"too old": func(*httptestReq) ([]byte, []byte, time.Time) {
			return key, body, now.Add(peerSigMaxAge + 2*time.Second)
		},
		"no header": func(r *httptestReq) ([]byte, []byte, time.Time) {
			r.Header.Del(forwardedSigHeader)
			return key, body, now
		},
	} {
		r := req()
		k, b, at := bad(r)
		if verifyPeer(r.Request, k, b, at) {
			t.Errorf("%s: verifies", name)
		}
	}
}

type httptestReq struct{ *http.Request }
