package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestStreamedForwardBody: an upload forwarded as it arrives is admitted
// on its header signature, and its body verifies at its end only when it
// is the body signed: one changed, cut or sent without its trailer fails
// the last read (the upload routes commit nothing before it), and a
// signature made for another request, or for the body held whole, does not
// admit it.
func TestStreamedForwardBody(t *testing.T) {
	key := PeerKeyFromToken(testToken)
	now := time.Now()
	type result struct {
		admitted bool
		body     []byte
		err      error
	}
	results := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := verifyPeerStreamed(r, key, now); err != nil {
			results <- result{err: err}
			return
		}
		b, err := io.ReadAll(r.Body)
		results <- result{admitted: true, body: b, err: err}
	}))
	defer srv.Close()
	const uri = "/agents/agt_replica-a_1/files/big.bin"
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB

	// sign returns a request to send, and the trailer value the honest
	// body ends with (read by sending it once).
	sign := func() (*http.Request, string) {
		req, _ := http.NewRequest("PUT", srv.URL+uri, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/octet-stream")
		signPeerStreamed(req, key, "replica-b", "replica-a", "PUT", uri, now)
		return req, ""
	}
	send := func(req *http.Request) result {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return <-results
	}
	req, _ := sign()
	honest := send(req)
	if !honest.admitted || honest.err != nil || !bytes.Equal(honest.body, body) {
		t.Fatalf("the honest forward: admitted %v, err %v, %d bytes", honest.admitted, honest.err, len(honest.body))
	}
	trailerOf := func() (http.Header, string) {
		req, _ := sign()
		_, _ = io.Copy(io.Discard, req.Body)
		return req.Header, req.Trailer.Get(bodySigHeader)
	}
	// resend sends the headers and trailer of a signed forward with
	// another body.
	resend := func(h http.Header, trailer string, b []byte, declare bool) result {
		req, _ := http.NewRequest("PUT", srv.URL+uri, io.NopCloser(bytes.NewReader(b)))
		req.Header = h.Clone()
		req.ContentLength = -1
		if declare {
			req.Trailer = http.Header{bodySigHeader: {trailer}}
		}
		return send(req)
	}
	h, trailer := trailerOf()
	if r := resend(h, trailer, body, true); !r.admitted || r.err != nil {
		t.Fatalf("the same forward sent again by hand: %+v", r.err)
	}
	changed := bytes.Clone(body)
	changed[len(changed)/2] ^= 1
	for name, c := range map[string]struct {
		b       []byte
		trailer string
		declare bool
	}{
		"a byte changed":   {changed, trailer, true},
		"cut":              {body[:len(body)-1], trailer, true},
		"a byte added":     {append(bytes.Clone(body), 'x'), trailer, true},
		"no trailer value": {body, "", true},
		"a forged trailer": {body, strings.Repeat("0", 64), true},
	} {
		r := resend(h, c.trailer, c.b, c.declare)
		if !r.admitted || !errors.Is(r.err, errBodyUnverified) {
			t.Errorf("%s: admitted %v, err %v; want the last read to fail with errBodyUnverified", name, r.admitted, r.err)
		}
	}
	if r := resend(h, trailer, body, false); r.admitted || !errors.Is(r.err, errPeerUnverified) {
		t.Errorf("no trailer declared: admitted %v, err %v", r.admitted, r.err)
	}
	// Another path, or the buffered signature of the same request.
	other := h.Clone()
	req2, _ := http.NewRequest("PUT", srv.URL+uri+"x", bytes.NewReader(body))
	req2.Header = other
	req2.ContentLength = -1
	req2.Trailer = http.Header{bodySigHeader: {trailer}}
	if r := send(req2); r.admitted || !errors.Is(r.err, errPeerUnverified) {
		t.Errorf("another path: admitted %v, err %v", r.admitted, r.err)
	}
	buffered := http.Header{}
	buffered.Set("Content-Type", "application/octet-stream")
	signPeer(buffered, key, "replica-b", "replica-a", "PUT", uri, body, now)
	if r := resend(buffered, trailer, body, true); r.admitted || !errors.Is(r.err, errPeerUnverified) {
		t.Errorf("the buffered signature: admitted %v, err %v", r.admitted, r.err)
	}
}
