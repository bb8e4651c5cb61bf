package httpapi

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	contract "github.com/dshd/dshd/api"
	"github.com/dshd/dshd/internal/cluster/status"
	"github.com/dshd/dshd/internal/files"
	"github.com/dshd/dshd/internal/sandbox"
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

// dirFiles gives every agent the scope of one directory, unrestricted.
type dirFiles struct{ dir string }

func (d dirFiles) FileScope(context.Context, string) (*files.Scope, func(), error) {
	return &files.Scope{Cwd: d.dir, ViewFD: -1, FS: sandbox.Unrestricted}, func() {}, nil
}
func (dirFiles) OnViewRemount(string, func(int)) func() { return func() {} }

// TestStreamedForwardCommitsNothingUnproven drives the upload routes of
// replica-a with streamed forwards: the one signed is written; the same
// headers and trailer with a body changed on the way are 421
// forward_refused, and neither the file nor a temporary one is left, for
// a file and for an archive.
func TestStreamedForwardCommitsNothingUnproven(t *testing.T) {
	dir := t.TempDir()
	f := &failing{}
	h, err := NewServer(Deps{
		Logger: discardLogger(), Token: testToken, Spec: contract.OpenAPI,
		Env: f, Jobs: f, Pipeline: f, Agents: f, Hooks: f, Skills: skillsFailing{f}, MCP: f,
		Files: dirFiles{dir}, JobRouter: &idRouter{self: "replica-a", elsewhere: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}}, ReplicaID: "replica-a",
		Cluster: fixedCluster{status.Status{ReplicaID: "replica-a"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	key := PeerKeyFromToken(testToken)
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	payload := bytes.Repeat([]byte("x"), 2<<20)
	_ = tw.WriteHeader(&tar.Header{Name: "pkg/f", Mode: 0o644, Size: int64(len(payload)), Typeflag: tar.TypeReg})
	_, _ = tw.Write(payload)
	_ = tw.Close()
	for _, c := range []struct {
		uri, ctype, made string
		body             []byte
	}{
		{"/agents/agt_replica-a_1/files/up.bin", "application/octet-stream", "up.bin", payload},
		{"/agents/agt_replica-a_1/archive/unpacked?parents=true", "application/x-tar", "unpacked/pkg/f", tarBuf.Bytes()},
	} {
		sign := func(body []byte) *http.Request {
			req, _ := http.NewRequest("PUT", srv.URL+c.uri, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			req.Header.Set("Content-Type", c.ctype)
			signPeerStreamed(req, key, "replica-b", "replica-a", "PUT", c.uri, time.Now())
			return req
		}
		do := func(req *http.Request) (int, string) {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var p struct{ Code string }
			_ = json.NewDecoder(resp.Body).Decode(&p)
			return resp.StatusCode, p.Code
		}
		// Tampered: the headers and trailer of a signed forward, with a
		// byte of the body changed.
		honest := sign(c.body)
		_, _ = io.Copy(io.Discard, honest.Body)
		changed := bytes.Clone(c.body)
		changed[len(changed)-600] ^= 1
		req, _ := http.NewRequest("PUT", srv.URL+c.uri, io.NopCloser(bytes.NewReader(changed)))
		req.Header = honest.Header.Clone()
		req.ContentLength = -1
		req.Trailer = http.Header{bodySigHeader: {honest.Trailer.Get(bodySigHeader)}}
		if st, code := do(req); st != 421 || code != "forward_refused" {
			t.Errorf("%s with its body changed = %d %q, want 421 forward_refused", c.uri, st, code)
		}
		if _, err := os.Lstat(filepath.Join(dir, c.made)); err == nil {
			t.Errorf("%s: %s was written from a changed body", c.uri, c.made)
		}
		if st, code := do(sign(c.body)); st != 200 {
			t.Errorf("%s signed = %d %q", c.uri, st, code)
		}
		if got, err := os.ReadFile(filepath.Join(dir, c.made)); err != nil || !bytes.Equal(got, payload) {
			t.Errorf("%s: %s holds %d bytes, %v", c.uri, c.made, len(got), err)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".dshd-tmp-") {
			t.Errorf("a temporary file was left: %s", e.Name())
		}
	}
}
