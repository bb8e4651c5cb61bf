package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/shellenv"

	"github.com/dshd/dshd/internal/golden"
)

// TestProblemGolden pins the problem+json body of each kind of error.
func TestProblemGolden(t *testing.T) {
	s := &Server{}
	s.logger = discardLogger()
	tests := []struct {
		name string
		err  error
	}{
		{"key_owned", fmt.Errorf("register acme.b: %w", &shellenv.KeyOwnedError{Key: "DSH_REPO", Owner: "acme.a"})},
		{"invalid_declaration", fmt.Errorf("register: %w", &shellenv.DeclarationError{
			Err:      shellenv.ErrInvalidDeclaration,
			Problems: []string{`name "Bad Name" is not lowercase letters, digits, '.', '_' or '-'`, `key "DSH_x": not ^DSH_[A-Z][A-Z0-9_]*$`},
		})},
		{"env_resolution_failed", fmt.Errorf("collect: %w", &shellenv.ResolutionError{Contributor: "acme.ticket", Reason: "timeout after 2s"})},
		{"too_many_jobs", fmt.Errorf("start: %w", &exec.TooManyJobsError{Limit: "agent", Max: 10, RetryAfter: 2 * time.Second})},
		{"agent_not_found", fmt.Errorf("get agt_x: %w", agents.ErrNotFound)},
		{"internal", errors.New("open /secret/path: permission denied")},
		{"insufficient_storage", fmt.Errorf("append to agt_x: %w", &fs.PathError{Op: "write", Path: "/secret/sessions/agt_x.jsonl", Err: syscall.ENOSPC})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/exec", nil)
			req = req.WithContext(withRequestID(req.Context(), "req_test"))
			rec := httptest.NewRecorder()
			s.writeError(rec, req, tt.err)
			got := fmt.Sprintf("%d %s Retry-After=%q\n%s", rec.Code, rec.Header().Get("Content-Type"), rec.Header().Get("Retry-After"), rec.Body.String())
			golden.Compare(t, filepath.Join("testdata", "problem_"+tt.name+".golden"), []byte(got))
		})
	}
}

// TestClientGoneIsNotAnError: a request that failed because its client went
// away is logged at INFO, not as a server error.
func TestClientGoneIsNotAnError(t *testing.T) {
	var logs bytes.Buffer
	s := &Server{logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest(http.MethodPost, "/agents/agt_1/tools/bash", nil).WithContext(ctx)
	s.writeError(httptest.NewRecorder(), req, fmt.Errorf("run hooks: %w", context.Canceled))
	if got := logs.String(); !strings.Contains(got, "level=INFO") || !strings.Contains(got, "client went away") || strings.Contains(got, "level=ERROR") {
		t.Errorf("logged %q, want one INFO line saying the client went away", got)
	}
	logs.Reset()
	s.writeError(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/exec", nil), errors.New("disk on fire"))
	if !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a server error logged %q, want ERROR", logs.String())
	}
}
