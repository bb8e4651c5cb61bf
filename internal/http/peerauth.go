package httpapi

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dshd/dshd/internal/mcp"
)

// Forwarding headers. A replica that forwards a request (or asks another
// for its own list) names itself in forwardedHeader, the replica the
// request is for in forwardedToHeader, and proves both in
// forwardedSigHeader: "<unix milliseconds>.<nonce>.<hex HMAC-SHA256>"
// keyed with the cluster's peer key over the method, the request URI, the
// sender, the target, the time, the nonce, the SHA-256 of the body and
// every header that changes what the request does (peerSignedHeaders).
// The target serves it only when the signature verifies, it is the
// target, the time is within peerSigMaxAge of its clock and after it
// started, and it has not seen the nonce; anything else is refused (421
// forward_refused) and never routed on.
const (
	forwardedHeader    = "Dsh-Forwarded-By"
	forwardedToHeader  = "Dsh-Forwarded-To"
	forwardedSigHeader = "Dsh-Forwarded-Sig"
	peerSigMaxAge      = time.Minute
)

// peerSignedHeaders are the request headers a forward's signature covers:
// those that say which request is retried (Idempotency-Key), which agent
// or MCP session it is for, how its body or answer is read (Content-Type,
// Accept, Prefer) and where a stream resumes (Last-Event-ID). A tool
// call's id is in its body, which is covered whole.
var peerSignedHeaders = []string{"Idempotency-Key", mcp.AgentHeader, mcpSessionHeader, "Content-Type", "Accept", "Prefer", "Last-Event-ID"}

// PeerKeyFromToken derives the peer key from the token every replica
// shares, for clusters that configure no peer secret of their own. A client
// holding the token could derive it too: a cluster whose clients are not
// all trusted to route configures a separate secret (cluster.peerSecretFile).
func PeerKeyFromToken(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("dshd cluster peer key v1"))
	return m.Sum(nil)
}

// field writes one length-prefixed field of a MAC's input, so that no two
// different requests give the same input.
func field(m hash.Hash, s string) {
	m.Write([]byte(strconv.Itoa(len(s))))
	m.Write([]byte{':'})
	m.Write([]byte(s))
}

// peerMAC is the signature of one forwarded request.
func peerMAC(key []byte, method, uri, by, to string, unixMilli int64, nonce string, h http.Header, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, key)
	field(m, "dshd forward v2")
	for _, f := range []string{method, uri, by, to, strconv.FormatInt(unixMilli, 10), nonce, hex.EncodeToString(sum[:])} {
		field(m, f)
	}
	signHeaders(m, h)
	return m.Sum(nil)
}

// signHeaders writes the signed headers of h into m, each with its count of
// values, so that no header's values can pass for another's.
func signHeaders(m hash.Hash, h http.Header) {
	for _, name := range peerSignedHeaders {
		vs := h.Values(name)
		field(m, name)
		field(m, strconv.Itoa(len(vs)))
		for _, v := range vs {
			field(m, v)
		}
	}
}

// newNonce returns 128 random bits, in hex.
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// signPeer marks h as sent by replica by to replica to, for a request
// with method, uri and body (h holds the request's other headers already:
// those of peerSignedHeaders are signed).
func signPeer(h http.Header, key []byte, by, to, method, uri string, body []byte, now time.Time) {
	ms := now.UnixMilli()
	nonce := newNonce()
	h.Set(forwardedHeader, by)
	h.Set(forwardedToHeader, to)
	h.Set(forwardedSigHeader, strconv.FormatInt(ms, 10)+"."+nonce+"."+hex.EncodeToString(peerMAC(key, method, uri, by, to, ms, nonce, h, body)))
}

// hasPeerHeaders reports whether r says it was sent by a replica.
func hasPeerHeaders(r *http.Request) bool {
	return r.Header.Get(forwardedHeader) != "" || r.Header.Get(forwardedToHeader) != "" || r.Header.Get(forwardedSigHeader) != ""
}

// errForwardRefused is wrapped by every reason a forward is refused.
var errForwardRefused = errors.New("forward refused")

// Why a forward is refused. Only errPeerUnverified says nothing about the
// sender: the others are for requests signed with the peer key.
var (
	errPeerUnverified = fmt.Errorf("%w: its signature does not verify with this replica's peer secret (not sent by a replica of this cluster, changed on the way, signed with another peer secret, or older than %s: replicas' clocks must agree within that)", errForwardRefused, peerSigMaxAge)
	errPeerReplayed   = fmt.Errorf("%w: this replica has already served a forward with its nonce (a replayed forward is never run twice)", errForwardRefused)
	errPeerBeforeBoot = fmt.Errorf("%w: it was signed before this replica started (its predecessor may have served it)", errForwardRefused)
	errPeerBusy       = fmt.Errorf("%w: this replica holds as many unexpired forwards as it keeps; retry in a moment", errForwardRefused)
)

// signedPeer is what a verified signature says.
type signedPeer struct {
	by, to string
	at     time.Time
	nonce  string
}

// verifyPeer checks the signature of r (with body, already read) against
// key and now, and returns what it says; errPeerUnverified when it does
// not verify. Whether this replica is the target and has not seen the
// nonce is the caller's (peerGate.admit).
func verifyPeer(r *http.Request, key []byte, body []byte, now time.Time) (signedPeer, error) {
	by, to := r.Header.Get(forwardedHeader), r.Header.Get(forwardedToHeader)
	parts := strings.Split(r.Header.Get(forwardedSigHeader), ".")
	if by == "" || to == "" || len(parts) != 3 || len(parts[1]) != 32 {
		return signedPeer{}, errPeerUnverified
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return signedPeer{}, errPeerUnverified
	}
	at := time.UnixMilli(ms)
	if age := now.Sub(at); age > peerSigMaxAge || age < -peerSigMaxAge {
		return signedPeer{}, errPeerUnverified
	}
	got, err := hex.DecodeString(parts[2])
	if err != nil || !hmac.Equal(got, peerMAC(key, r.Method, r.URL.RequestURI(), by, to, ms, parts[1], r.Header, body)) {
		return signedPeer{}, errPeerUnverified
	}
	return signedPeer{by: by, to: to, at: at, nonce: parts[1]}, nil
}

// maxPeerNonces bounds the nonces a replica keeps: each for the
// signature's lifetime (until peerSigMaxAge after its time, at most twice
// that from now), so at most maxPeerNonces/(2·peerSigMaxAge), about 2,000
// forwards a second, are served; more are refused until some expire.
// About 100 bytes each: 26 MiB at most (measured).
const maxPeerNonces = 1 << 18

// peerGate admits the forwards this replica serves: each verified, for
// this replica, signed after it started, and served once.
type peerGate struct {
	key   []byte
	self  string
	start time.Time

	mu      sync.Mutex
	nonces  map[string]struct{}
	expires map[int64][]string // second at which they expire → nonces
	swept   int64              // every second before this one is swept

	logMu  sync.Mutex
	logged map[string]refusalLog // sender → when its refusals were last logged
}

// refusalLog is how often one sender's forwards were refused since its
// last log line.
type refusalLog struct {
	at      time.Time
	refused int
}

func newPeerGate(key []byte, self string, start time.Time) *peerGate {
	return &peerGate{key: key, self: self, start: start, nonces: map[string]struct{}{}, expires: map[int64][]string{}, swept: start.Unix(), logged: map[string]refusalLog{}}
}

// admit says whether r (with body) is a forward this replica serves: nil,
// or an error wrapping errForwardRefused that says why not.
func (g *peerGate) admit(r *http.Request, body []byte, now time.Time) (signedPeer, error) {
	p, err := verifyPeer(r, g.key, body, now)
	if err != nil {
		return p, err
	}
	return p, g.check(p, now)
}

// check says whether a forward whose signature verified, saying p, is one
// this replica serves: for it, signed after it started, nonce not seen.
func (g *peerGate) check(p signedPeer, now time.Time) error {
	if p.to != g.self {
		return fmt.Errorf("%w: it is for replica %q, not this one (%q); a forward is served only by the replica it was signed for", errForwardRefused, p.to, g.self)
	}
	if p.at.UnixMilli() < g.start.UnixMilli() {
		return errPeerBeforeBoot
	}
	return g.once(p.nonce, p.at.Add(peerSigMaxAge), now)
}

// once records nonce until exp, or says it was seen (or that no more can
// be kept now).
func (g *peerGate) once(nonce string, exp, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if sec := now.Unix(); sec-g.swept > int64(len(g.expires)) {
		// Fewer seconds holding nonces than seconds to walk (an idle
		// while, or the clock moved): walk those.
		for s, ns := range g.expires {
			if s < sec {
				for _, n := range ns {
					delete(g.nonces, n)
				}
				delete(g.expires, s)
			}
		}
		g.swept = sec
	}
	for ; g.swept < now.Unix(); g.swept++ {
		for _, n := range g.expires[g.swept] {
			delete(g.nonces, n)
		}
		delete(g.expires, g.swept)
	}
	if _, ok := g.nonces[nonce]; ok {
		return errPeerReplayed
	}
	if len(g.nonces) >= maxPeerNonces {
		return errPeerBusy
	}
	g.nonces[nonce] = struct{}{}
	sec := exp.Unix() + 1 // kept until the second after it expires
	g.expires[sec] = append(g.expires[sec], nonce)
	return nil
}

// peerLogInterval is how often the refusals of one sender are logged.
const peerLogInterval = time.Minute

// maxPeerLogSenders bounds the senders whose last log line is kept (the
// sender's name is whatever the request says): past it, all are forgotten.
const maxPeerLogSenders = 256

// shouldLog says whether a refusal of a forward from sender is logged now
// (once per sender per peerLogInterval), and how many were refused since
// the last line.
func (g *peerGate) shouldLog(sender string, now time.Time) (bool, int) {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	l, ok := g.logged[sender]
	if ok && now.Sub(l.at) < peerLogInterval {
		l.refused++
		g.logged[sender] = l
		return false, 0
	}
	if !ok && len(g.logged) >= maxPeerLogSenders {
		clear(g.logged)
	}
	g.logged[sender] = refusalLog{at: now}
	return true, l.refused
}
