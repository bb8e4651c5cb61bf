package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Forwarding headers. A replica that forwards a request (or asks another
// for its own list) names itself in forwardedHeader and proves it in
// forwardedSigHeader: "<unix seconds>.<hex HMAC-SHA256>" over the method,
// the request URI, the forwarding replica's id, the time and the SHA-256
// of the body, keyed with the cluster's peer key. A request whose
// signature does not verify (a client's, a replayed one older than
// peerSigMaxAge, one whose body or path was changed) loses both headers
// and is routed like any client request.
const (
	forwardedHeader    = "Dsh-Forwarded-By"
	forwardedSigHeader = "Dsh-Forwarded-Sig"
	peerSigMaxAge      = time.Minute
)

// PeerKeyFromToken derives the peer key from the token every replica
// shares, for clusters that configure no peer secret of their own. A client
// holding the token could derive it too: a cluster whose clients are not
// all trusted to route configures a separate secret (cluster.peerSecretFile).
func PeerKeyFromToken(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("dshd cluster peer key v1"))
	return m.Sum(nil)
}

// peerMAC is the signature of one forwarded request.
func peerMAC(key []byte, method, uri, by string, unix int64, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(method + "\n" + uri + "\n" + by + "\n" + strconv.FormatInt(unix, 10) + "\n"))
	m.Write([]byte(hex.EncodeToString(sum[:])))
	return m.Sum(nil)
}

// signPeer marks h as sent by replica by, for a request with method, uri
// and body.
func signPeer(h http.Header, key []byte, by, method, uri string, body []byte, now time.Time) {
	unix := now.Unix()
	h.Set(forwardedHeader, by)
	h.Set(forwardedSigHeader, strconv.FormatInt(unix, 10)+"."+hex.EncodeToString(peerMAC(key, method, uri, by, unix, body)))
}

// verifyPeer reports whether r (with body, already read) was sent by a
// replica holding key within peerSigMaxAge of now.
func verifyPeer(r *http.Request, key []byte, body []byte, now time.Time) bool {
	by := r.Header.Get(forwardedHeader)
	ts, sig, ok := strings.Cut(r.Header.Get(forwardedSigHeader), ".")
	if by == "" || !ok {
		return false
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	if age := now.Sub(time.Unix(unix, 0)); age > peerSigMaxAge || age < -peerSigMaxAge {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	return hmac.Equal(got, peerMAC(key, r.Method, r.URL.RequestURI(), by, unix, body))
}
