package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Uploads to the file routes (PUT /agents/{id}/files/… and …/archive/…)
// are forwarded as they arrive, not held in memory to be signed: the
// signature in forwardedSigHeader covers everything but the body (a MAC of
// its own domain, streamedMAC), and the body is proven by a trailer,
// bodySigHeader: an HMAC over that signature and the SHA-256 of the bytes
// sent, which the sender knows once it has sent them. The target admits
// the request on the header signature (its time, target and nonce, as for
// any forward), and reads the body through verifyingBody, which fails the
// last read when the trailer is missing or does not verify. The upload
// routes commit nothing before their body's end (a file is renamed into
// place, an archive unpacked, only after it), so a body changed on the way
// is refused with nothing written, as a changed buffered body is.
const bodySigHeader = "Dsh-Forwarded-Body-Sig"

// streamsBody reports whether r is an upload forwarded as it arrives.
func streamsBody(r *http.Request) bool {
	return r.Method == http.MethodPut && isFilesPath(r.URL.Path)
}

// streamedMAC is the header signature of a forward whose body follows with
// its own proof (bodySigHeader).
func streamedMAC(key []byte, method, uri, by, to string, unixMilli int64, nonce string, h http.Header) []byte {
	m := hmac.New(sha256.New, key)
	field(m, "dshd forward v2 streamed body")
	for _, f := range []string{method, uri, by, to, strconv.FormatInt(unixMilli, 10), nonce} {
		field(m, f)
	}
	signHeaders(m, h)
	return m.Sum(nil)
}

// bodyMAC proves the body whose SHA-256 is sum was sent under the header
// signature headerMAC.
func bodyMAC(key, headerMAC, sum []byte) []byte {
	m := hmac.New(sha256.New, key)
	field(m, "dshd forward body v1")
	field(m, hex.EncodeToString(headerMAC))
	field(m, hex.EncodeToString(sum))
	return m.Sum(nil)
}

// signPeerStreamed signs out, a forward of an upload, and sends its body
// chunked with the trailer that proves it.
func signPeerStreamed(out *http.Request, key []byte, by, to, method, uri string, now time.Time) {
	ms := now.UnixMilli()
	nonce := newNonce()
	out.Header.Set(forwardedHeader, by)
	out.Header.Set(forwardedToHeader, to)
	mac := streamedMAC(key, method, uri, by, to, ms, nonce, out.Header)
	out.Header.Set(forwardedSigHeader, strconv.FormatInt(ms, 10)+"."+nonce+"."+hex.EncodeToString(mac))
	// The transport sends the trailer's value once the body has ended:
	// the same map, filled by the body's last read.
	trailer := http.Header{bodySigHeader: nil}
	out.Trailer = trailer
	out.Header.Del("Content-Length")
	out.ContentLength = -1
	body := out.Body
	if body == nil {
		body = http.NoBody
	}
	out.Body = &signingBody{rc: body, h: sha256.New(), done: func(sum []byte) {
		trailer.Set(bodySigHeader, hex.EncodeToString(bodyMAC(key, mac, sum)))
	}}
}

// signingBody hashes a body as it is read, and hands the sum over at its end.
type signingBody struct {
	rc   io.ReadCloser
	h    hash.Hash
	done func(sum []byte)
}

func (b *signingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.h.Write(p[:n])
	if err == io.EOF && b.done != nil {
		b.done(b.h.Sum(nil))
		b.done = nil
	}
	return n, err
}

func (b *signingBody) Close() error { return b.rc.Close() }

// declaresBodySig reports whether r says a trailer proves its body.
func declaresBodySig(r *http.Request) bool {
	_, ok := r.Trailer[bodySigHeader]
	return ok
}

// errBodyUnverified: a streamed forward's body whose trailer is missing or
// does not verify.
var errBodyUnverified = fmt.Errorf("%w: the body's signature (trailer %s) is missing or does not verify: it was changed or cut on the way", errForwardRefused, bodySigHeader)

// verifyPeerStreamed checks the header signature of r, a forwarded upload
// whose body is proven by its trailer; on success r's body is read through
// a verifyingBody. What it returns is as for verifyPeer.
func verifyPeerStreamed(r *http.Request, key []byte, now time.Time) (signedPeer, error) {
	by, to := r.Header.Get(forwardedHeader), r.Header.Get(forwardedToHeader)
	parts := strings.Split(r.Header.Get(forwardedSigHeader), ".")
	if by == "" || to == "" || len(parts) != 3 || len(parts[1]) != 32 || !declaresBodySig(r) {
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
	mac := streamedMAC(key, r.Method, r.URL.RequestURI(), by, to, ms, parts[1], r.Header)
	got, err := hex.DecodeString(parts[2])
	if err != nil || !hmac.Equal(got, mac) {
		return signedPeer{}, errPeerUnverified
	}
	r.Body = &verifyingBody{rc: r.Body, h: sha256.New(), r: r, key: key, mac: mac}
	return signedPeer{by: by, to: to, at: at, nonce: parts[1]}, nil
}

// verifyingBody reads a streamed forward's body, and fails its last read
// (errBodyUnverified, never io.EOF) unless the trailer proves the bytes
// read.
type verifyingBody struct {
	rc       io.ReadCloser
	h        hash.Hash
	r        *http.Request
	key, mac []byte
	err      error
}

func (b *verifyingBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	b.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		// The server fills r.Trailer once the body has been read to its end.
		got, derr := hex.DecodeString(b.r.Trailer.Get(bodySigHeader))
		if derr != nil || !hmac.Equal(got, bodyMAC(b.key, b.mac, b.h.Sum(nil))) {
			b.err = errBodyUnverified
			return n, b.err
		}
	}
	return n, err
}

func (b *verifyingBody) Close() error { return b.rc.Close() }
