// Package uiauth is the browser UI's way in that never puts the bearer token
// where a command could read it (a log, a startup line, a URL in a browser's
// history): one-time login codes, minted on demand by a token holder, each
// exchanged once for a session kept in memory.
//
// A session has two secrets: an id, which the server sends as an HttpOnly
// cookie, and a key, which the page keeps and sends in a header. Browsers
// send a host's cookies to every port of that host, so a page another
// program serves on the same host (a dev server a command started, say)
// receives the cookie; it never sees the key, which the browser keeps per
// origin (scheme, host and port).
//
// Secrets are stored and looked up by their SHA-256 digest, so neither a
// memory dump nor the timing of a lookup tells anything about a live
// secret; keys are compared in constant time.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package uiauth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultCodeTTL     = 60 * time.Second
	DefaultSessionTTL  = 12 * time.Hour
	DefaultMaxCodes    = 64
	DefaultMaxSessions = 256
)

// Errors.
var (
	// ErrInvalidCode is returned by Redeem for a code that was never
	// minted, was used already or has expired.
	ErrInvalidCode = errors.New("login code unknown, used or expired")
	// ErrNoSession is returned by Check for an unknown or expired session,
	// or a key that is not the session's.
	ErrNoSession = errors.New("no such session, or it has expired")
)

// Options configure a Store. Zero values take the defaults.
type Options struct {
	Now         func() time.Time
	CodeTTL     time.Duration // how long a login code may be redeemed
	SessionTTL  time.Duration // how long a session lasts from its creation
	MaxCodes    int           // codes held at once; minting more drops the oldest
	MaxSessions int           // sessions held at once; more drop the oldest
}

// Code is a login code and when it expires.
type Code struct {
	Code      string
	ExpiresAt time.Time
}

// Session is a new session's id (for the cookie), its key (for the page)
// and when it expires.
type Session struct {
	ID        string
	Key       string
	ExpiresAt time.Time
}

type digest = [sha256.Size]byte

type session struct {
	key     digest
	expires time.Time
}

// Store holds login codes and sessions in memory. It is safe for
// concurrent use. A restart of dshd ends every session.
type Store struct {
	now                   func() time.Time
	codeTTL, sessionTTL   time.Duration
	maxCodes, maxSessions int

	mu       sync.Mutex
	codes    map[digest]time.Time // code digest → expiry
	sessions map[digest]session   // id digest → session
}

// New returns an empty store.
func New(o Options) *Store {
	s := &Store{
		now:         o.Now,
		codeTTL:     o.CodeTTL,
		sessionTTL:  o.SessionTTL,
		maxCodes:    o.MaxCodes,
		maxSessions: o.MaxSessions,
		codes:       map[digest]time.Time{},
		sessions:    map[digest]session{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.codeTTL <= 0 {
		s.codeTTL = DefaultCodeTTL
	}
	if s.sessionTTL <= 0 {
		s.sessionTTL = DefaultSessionTTL
	}
	if s.maxCodes <= 0 {
		s.maxCodes = DefaultMaxCodes
	}
	if s.maxSessions <= 0 {
		s.maxSessions = DefaultMaxSessions
	}
	return s
}

// SessionTTL is how long a session lasts.
func (s *Store) SessionTTL() time.Duration { return s.sessionTTL }

// NewCode mints a login code (256 random bits) that Redeem accepts once,
// within the code lifetime.
func (s *Store) NewCode() (Code, error) {
	code, err := secret()
	if err != nil {
		return Code{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	if len(s.codes) >= s.maxCodes {
		dropOldest(s.codes, func(t time.Time) time.Time { return t })
	}
	exp := now.Add(s.codeTTL)
	s.codes[sum(code)] = exp
	return Code{Code: code, ExpiresAt: exp}, nil
}

// Redeem exchanges a login code for a new session. The code is spent
// whatever happens next. It returns ErrInvalidCode for a code that is
// unknown, spent or expired.
func (s *Store) Redeem(code string) (Session, error) {
	s.mu.Lock()
	d := sum(code)
	exp, ok := s.codes[d]
	delete(s.codes, d)
	now := s.now()
	s.mu.Unlock()
	if !ok || !now.Before(exp) {
		return Session{}, ErrInvalidCode
	}
	return s.NewSession()
}

// NewSession starts a session, for a caller that proved it holds the token.
func (s *Store) NewSession() (Session, error) {
	id, err := secret()
	if err != nil {
		return Session{}, err
	}
	key, err := secret()
	if err != nil {
		return Session{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	if len(s.sessions) >= s.maxSessions {
		dropOldest(s.sessions, func(v session) time.Time { return v.expires })
	}
	exp := now.Add(s.sessionTTL)
	s.sessions[sum(id)] = session{key: sum(key), expires: exp}
	return Session{ID: id, Key: key, ExpiresAt: exp}, nil
}

// Check returns nil when id names a live session and key is its key, and
// ErrNoSession otherwise.
func (s *Store) Check(id, key string) error {
	if id == "" || key == "" {
		return ErrNoSession
	}
	s.mu.Lock()
	v, ok := s.sessions[sum(id)]
	now := s.now()
	s.mu.Unlock()
	k := sum(key)
	if !ok || !now.Before(v.expires) || subtle.ConstantTimeCompare(v.key[:], k[:]) != 1 {
		return ErrNoSession
	}
	return nil
}

// End ends the session id names, if any.
func (s *Store) End(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, sum(id))
}

// sweep drops what has expired. The caller holds s.mu.
func (s *Store) sweep(now time.Time) {
	for d, exp := range s.codes {
		if !now.Before(exp) {
			delete(s.codes, d)
		}
	}
	for d, v := range s.sessions {
		if !now.Before(v.expires) {
			delete(s.sessions, d)
		}
	}
}

// dropOldest deletes the entry of m that expires first.
func dropOldest[V any](m map[digest]V, expires func(V) time.Time) {
	var oldest digest
	var first time.Time
	found := false
	for d, v := range m {
		if e := expires(v); !found || e.Before(first) {
			oldest, first, found = d, e, true
		}
	}
	if found {
		delete(m, oldest)
	}
}

// secret returns 256 random bits, URL-safe base64 without padding.
func secret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("uiauth: random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func sum(s string) digest { return sha256.Sum256([]byte(s)) }
