package uiauth

import (
	"errors"
	"testing"
	"time"
)

func TestCodeOnceAndExpiry(t *testing.T) {
	now := time.Date(2025, 4, 1, 12, 0, 0, 0, time.UTC)
	s := New(Options{Now: func() time.Time { return now }})
	c, err := s.NewCode()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Code) != 43 || !c.ExpiresAt.Equal(now.Add(DefaultCodeTTL)) {
		t.Errorf("code %q expires %v: want 43 characters (256 bits), in %v", c.Code, c.ExpiresAt, DefaultCodeTTL)
	}
	sess, err := s.Redeem(c.Code)
	if err != nil {
		t.Fatalf("Redeem a fresh code: %v", err)
	}
	if _, err := s.Redeem(c.Code); !errors.Is(err, ErrInvalidCode) {
		t.Errorf("Redeem the same code again: %v, want ErrInvalidCode", err)
	}
	if err := s.Check(sess.ID, sess.Key); err != nil {
		t.Errorf("Check the new session: %v", err)
	}
	for name, idKey := range map[string][2]string{
		"wrong key": {sess.ID, sess.Key + "x"}, "key as id": {sess.Key, sess.ID}, "empty key": {sess.ID, ""},
	} {
		if err := s.Check(idKey[0], idKey[1]); !errors.Is(err, ErrNoSession) {
			t.Errorf("Check with %s: %v, want ErrNoSession", name, err)
		}
	}

	old, _ := s.NewCode()
	now = now.Add(DefaultCodeTTL)
	if _, err := s.Redeem(old.Code); !errors.Is(err, ErrInvalidCode) {
		t.Errorf("Redeem an expired code: %v, want ErrInvalidCode", err)
	}
	now = sess.ExpiresAt
	if err := s.Check(sess.ID, sess.Key); !errors.Is(err, ErrNoSession) {
		t.Errorf("Check an expired session: %v, want ErrNoSession", err)
	}
}

func TestBoundsDropTheOldest(t *testing.T) {
	now := time.Date(2025, 4, 1, 12, 0, 0, 0, time.UTC)
	s := New(Options{Now: func() time.Time { return now }, MaxCodes: 2, MaxSessions: 2})
	var codes []Code
	for range 3 {
		c, _ := s.NewCode()
		codes = append(codes, c)
		now = now.Add(time.Millisecond)
	}
	if _, err := s.Redeem(codes[0].Code); !errors.Is(err, ErrInvalidCode) {
		t.Errorf("the oldest code survived past the bound: %v", err)
	}
	first, err := s.Redeem(codes[1].Code)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Millisecond)
	second, _ := s.Redeem(codes[2].Code)
	now = now.Add(time.Millisecond)
	third, _ := s.NewSession()
	if s.Check(first.ID, first.Key) == nil {
		t.Error("the oldest session survived past the bound")
	}
	if s.Check(second.ID, second.Key) != nil || s.Check(third.ID, third.Key) != nil {
		t.Error("a newer session was dropped")
	}
	s.End(third.ID)
	if s.Check(third.ID, third.Key) == nil {
		t.Error("an ended session still checks")
	}
}

// TestDefaultBounds: zero bounds mean the defaults, DefaultMaxCodes codes
// and DefaultMaxSessions sessions live at once, not none.
func TestDefaultBounds(t *testing.T) {
	now := time.Date(2025, 4, 1, 12, 0, 0, 0, time.UTC)
	s := New(Options{Now: func() time.Time { return now }})
	codes := make([]Code, DefaultMaxCodes+1)
	for i := range codes {
		codes[i], _ = s.NewCode()
		now = now.Add(time.Millisecond)
	}
	if _, err := s.Redeem(codes[0].Code); !errors.Is(err, ErrInvalidCode) {
		t.Errorf("code 1 of %d: %v, want it dropped past the default bound", len(codes), err)
	}
	if _, err := s.Redeem(codes[1].Code); err != nil {
		t.Errorf("code 2 of %d: %v, want it live within the default bound", len(codes), err)
	}
	s = New(Options{Now: func() time.Time { return now }}) // no session from the redeem above
	sessions := make([]Session, DefaultMaxSessions+1)
	for i := range sessions {
		sessions[i], _ = s.NewSession()
		now = now.Add(time.Millisecond)
	}
	if s.Check(sessions[0].ID, sessions[0].Key) == nil {
		t.Errorf("session 1 of %d still checks past the default bound", len(sessions))
	}
	if err := s.Check(sessions[1].ID, sessions[1].Key); err != nil {
		t.Errorf("session 2 of %d: %v, want it live within the default bound", len(sessions), err)
	}
}
