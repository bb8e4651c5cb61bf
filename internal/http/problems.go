package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/cluster/status"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/files"
	"github.com/dshd/dshd/internal/http/api"
	"github.com/dshd/dshd/internal/limits"
	"github.com/dshd/dshd/internal/mcp"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/shellenv"
	"github.com/dshd/dshd/internal/tools"
	"github.com/dshd/dshd/internal/workspace"
)

// problemContentType is the media type of RFC 9457 problem details.
const problemContentType = "application/problem+json"

// errorCodes maps domain errors to HTTP statuses and machine-readable codes.
// It is the only place that knows how a domain error looks on the wire; the
// first entry whose error matches (errors.Is) wins.
var errorCodes = []struct {
	err    error
	status int
	code   string
	title  string
}{
	{shellenv.ErrDuplicateContributor, http.StatusConflict, "duplicate_contributor", "Contributor already exists"},
	{shellenv.ErrKeyOwned, http.StatusConflict, "key_owned", "Key is owned by another contributor"},
	{shellenv.ErrReservedKey, http.StatusUnprocessableEntity, "reserved_key", "Key is reserved"},
	{shellenv.ErrInvalidDeclaration, http.StatusUnprocessableEntity, "invalid_declaration", "Invalid declaration"},
	{shellenv.ErrPluginNotFound, http.StatusNotFound, "plugin_not_found", "Plugin not found"},
	{shellenv.ErrContributorNotFound, http.StatusNotFound, "contributor_not_found", "Contributor not found"},
	{shellenv.ErrBuiltinContributor, http.StatusConflict, "builtin_contributor", "Built-in contributors cannot be removed"},
	{shellenv.ErrInvalidPlugin, http.StatusUnprocessableEntity, "invalid_plugin", "Invalid plugin"},
	{shellenv.ErrStoreUnavailable, http.StatusServiceUnavailable, "cluster_unavailable", "The cluster's shared registry could not store the change"},
	{shellenv.ErrResolution, http.StatusBadGateway, "env_resolution_failed", "Managed environment could not be collected"},
	{sandbox.ErrLooser, http.StatusUnprocessableEntity, "sandbox_looser", "Sandbox policy looser than allowed"},
	{sandbox.ErrUnavailable, http.StatusUnprocessableEntity, "sandbox_unavailable", "Sandbox policy cannot be enforced on this host"},
	{sandbox.ErrInvalid, http.StatusUnprocessableEntity, "invalid_sandbox", "Invalid sandbox policy"},
	{workspace.ErrUnavailable, http.StatusUnprocessableEntity, "workspace_snapshot_unavailable", "Snapshot workspaces are unavailable on this host"},
	{workspace.ErrNotFound, http.StatusNotFound, "workspace_not_found", "The agent has no snapshot workspace"},
	{workspace.ErrBusy, http.StatusConflict, "workspace_busy", "The workspace is in use"},
	{workspace.ErrDropped, http.StatusConflict, "workspace_dropped", "The agent's workspace was dropped"},
	{workspace.ErrConflict, http.StatusConflict, "workspace_conflict", "Changes conflict with the target's since the fork"},
	{workspace.ErrInvalid, http.StatusUnprocessableEntity, "invalid_workspace", "Invalid workspace request"},
	{workspace.ErrCheckpointNotFound, http.StatusNotFound, "checkpoint_not_found", "No checkpoint holds that call"},
	{workspace.ErrCheckpointCompacted, http.StatusGone, "checkpoint_compacted", "That view was compacted into a later checkpoint"},
	{workspace.ErrOverBudget, http.StatusInsufficientStorage, "workspace_budget_exceeded", "Snapshot workspaces use their whole disk budget"},
	{limits.ErrLooser, http.StatusUnprocessableEntity, "limits_looser", "Limits looser than allowed"},
	{limits.ErrInvalid, http.StatusUnprocessableEntity, "invalid_limits", "Invalid limits"},
	{exec.ErrJobNotFound, http.StatusNotFound, "job_not_found", "Job not found"},
	{status.ErrOwnerUnavailable, http.StatusServiceUnavailable, "job_owner_unavailable", "The replica that runs this job is not available"},
	{status.ErrClaimUnavailable, http.StatusServiceUnavailable, "cluster_unavailable", "The cluster's shared store could not claim the idempotency key"},
	{status.ErrAgentHomeUnavailable, http.StatusServiceUnavailable, "agent_home_unavailable", "The replica that holds this agent is not available"},
	{status.ErrSessionHomeUnavailable, http.StatusServiceUnavailable, "session_home_unavailable", "The replica that holds this MCP session is not available"},
	{status.ErrAgentStoreUnavailable, http.StatusServiceUnavailable, "cluster_unavailable", "The cluster's shared store of agents and transcripts could not be reached"},
	{agents.ErrConflict, http.StatusServiceUnavailable, "agent_store_busy", "The agent's transcript kept changing under this write"},
	{exec.ErrTooManyJobs, http.StatusTooManyRequests, "too_many_jobs", "Too many running jobs"},
	{exec.ErrIdempotencyKeyReused, http.StatusUnprocessableEntity, "idempotency_key_reused", "Idempotency key reused for a different request"},
	{exec.ErrIdempotencyKeyInUse, http.StatusConflict, "idempotency_key_in_use", "The first request with this idempotency key is still being started"},
	{exec.ErrIdempotencyJobGone, http.StatusGone, "idempotency_key_expired_job", "The job of this idempotency key is no longer recorded"},
	{exec.ErrInvalidCwd, http.StatusUnprocessableEntity, "invalid_cwd", "Invalid working directory"},
	{exec.ErrManagedKeyInEnv, http.StatusBadRequest, "managed_key_in_env", "Managed names cannot be set through env"},
	{exec.ErrInvalidInput, http.StatusBadRequest, "invalid_input", "Invalid input"},
	{exec.ErrTooLarge, http.StatusRequestEntityTooLarge, "argument_too_large", "Command or environment too large to run"},
	{exec.ErrTimeoutTooLong, http.StatusUnprocessableEntity, "timeout_too_long", "Timeout exceeds the maximum"},
	{exec.ErrJobEnded, http.StatusConflict, "job_not_running", "The job is not running"},
	{exec.ErrInputNotOpen, http.StatusConflict, "input_not_open", "The job's input is not open"},
	{exec.ErrInputBlocked, http.StatusConflict, "input_blocked", "The program did not take the input in time"},
	{exec.ErrNotTerminal, http.StatusConflict, "not_a_terminal", "The job has no terminal"},
	{exec.ErrSignalNotAllowed, http.StatusUnprocessableEntity, "signal_not_allowed", "Signal not allowed"},
	{exec.ErrClosed, http.StatusServiceUnavailable, "shutting_down", "The server is shutting down"},
	{agents.ErrNotFound, http.StatusNotFound, "agent_not_found", "Agent not found"},
	{agents.ErrInvalidCwd, http.StatusUnprocessableEntity, "invalid_cwd", "Invalid working directory"},
	{agents.ErrInvalidBoundary, http.StatusUnprocessableEntity, "invalid_boundary", "Invalid fork boundary"},
	{agents.ErrDepthExceeded, http.StatusUnprocessableEntity, "depth_exceeded", "Maximum agent depth exceeded"},
	{tools.ErrUnknownTool, http.StatusNotFound, "tool_not_found", "Tool not found"},
	{tools.ErrInvalidArguments, http.StatusUnprocessableEntity, "invalid_arguments", "Invalid tool arguments"},
	{tools.ErrUnknownFormat, http.StatusBadRequest, "invalid_format", "Unknown tool format"},
	{mcp.ErrAgentConflict, http.StatusBadRequest, "bad_request", "Bad request"},
	{files.ErrInvalidPath, http.StatusUnprocessableEntity, "invalid_path", "Invalid path"},
	{files.ErrNotFound, http.StatusNotFound, "path_not_found", "No such file or directory"},
	{files.ErrNotWritable, http.StatusForbidden, "path_not_writable", "Not writable under the agent's sandbox"},
	{files.ErrProtected, http.StatusForbidden, "path_protected", "Protected path"},
	{files.ErrHidden, http.StatusForbidden, "path_hidden", "Hidden path"},
	{files.ErrThroughLink, http.StatusForbidden, "path_through_link", "The path goes through a symbolic link"},
	{files.ErrNotDir, http.StatusConflict, "not_a_directory", "Not a directory"},
	{files.ErrIsDir, http.StatusConflict, "is_a_directory", "Is a directory"},
	{files.ErrNotEmpty, http.StatusConflict, "directory_not_empty", "Directory not empty"},
	{files.ErrExists, http.StatusConflict, "path_exists", "Already exists"},
	{files.ErrNotRegular, http.StatusUnprocessableEntity, "not_a_regular_file", "Neither a regular file nor a directory"},
	{files.ErrInvalidArchive, http.StatusUnprocessableEntity, "invalid_archive", "Invalid archive"},
	{files.ErrCrossDevice, http.StatusConflict, "cross_device", "The two paths are on different file systems"},
	{files.ErrWatchLimit, http.StatusServiceUnavailable, "watch_limit", "The host cannot start another watch now"},
	{syscall.ENOSPC, http.StatusInsufficientStorage, "insufficient_storage", "Not enough disk space"},
	{syscall.EDQUOT, http.StatusInsufficientStorage, "insufficient_storage", "Not enough disk space"},
	{errBadRequest, http.StatusBadRequest, "bad_request", "Bad request"},
	{errBodyTimeout, http.StatusRequestTimeout, "body_timeout", "Request body not received in time"},
	{errHostNotAllowed, http.StatusMisdirectedRequest, "host_not_allowed", "Host not served here"},
	{errForwardRefused, http.StatusMisdirectedRequest, "forward_refused", "Request forwarded between replicas refused"},
	{errUnauthorized, http.StatusUnauthorized, "unauthorized", "Missing or wrong bearer token"},
	{errNotFound, http.StatusNotFound, "not_found", "No such route"},
	{errMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed", "Method not allowed"},
	{errBodyTooLarge, http.StatusRequestEntityTooLarge, "body_too_large", "Request body too large"},
}

// Errors raised by the HTTP layer itself.
var (
	errBadRequest       = errors.New("bad request")
	errUnauthorized     = errors.New("unauthorized")
	errNotFound         = errors.New("not found")
	errMethodNotAllowed = errors.New("method not allowed")
	errBodyTooLarge     = errors.New("request body too large")
	errInvalidJSON      = fmt.Errorf("%w: the body is not exactly one valid JSON value", errBadRequest)
	errBodyTimeout      = errors.New("request body not received in time")
	errHostNotAllowed   = errors.New("host not allowed")
)

// problemFor turns err into problem details. Details of 4xx errors are the
// domain's own message, written for the caller; a 5xx never carries the
// error's text (the cause is logged instead), except for the structured
// contributor and reason of an env_resolution_failed, which the caller needs.
func problemFor(err error) api.Problem {
	p := api.Problem{
		Type:   "about:blank",
		Status: http.StatusInternalServerError,
		Code:   "internal",
		Title:  "Internal error",
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			p.Status, p.Code, p.Title = int32(e.status), e.code, e.title
			break
		}
	}
	if p.Status < 500 {
		p.Detail = ptr(err.Error())
	}
	var owned *shellenv.KeyOwnedError
	if errors.As(err, &owned) {
		p.Key, p.Owner = ptr(owned.Key), ptr(owned.Owner)
	}
	var decl *shellenv.DeclarationError
	if errors.As(err, &decl) {
		p.Errors = ptr(append([]string(nil), decl.Problems...))
	}
	var down *status.UnavailableError
	if errors.As(err, &down) {
		if down.MayHaveRun {
			p.Detail = ptr(down.Error())
		} else {
			p.Detail = ptr(fmt.Sprintf("replica %q is not available, nothing ran: %s", down.Replica, down.Error()))
		}
	}
	var conflict *workspace.ConflictError
	if errors.As(err, &conflict) {
		p.Paths = ptr(append([]string(nil), conflict.Paths...))
	}
	var wsDown *workspace.UnavailableError
	if errors.As(err, &wsDown) {
		p.Reason = ptr(wsDown.Reason)
	}
	var res *shellenv.ResolutionError
	if errors.As(err, &res) {
		p.Contributor, p.Reason = ptr(res.Contributor), ptr(res.Reason)
		p.Detail = ptr("contributor " + res.Contributor + ": " + res.Reason)
	}
	return p
}

// clusterRetryAfter is the Retry-After, in seconds, of a 503 for an
// unavailable replica or shared store: two heartbeats, time for a replica
// that is back to be seen again.
const clusterRetryAfter = 2

// isClusterUnavailable reports whether err says a replica or the cluster's
// shared store could not be reached, or that the store's transcript kept
// changing under a write (its retries spent): worth a retry in a moment.
func isClusterUnavailable(err error) bool {
	for _, e := range []error{status.ErrOwnerUnavailable, status.ErrAgentHomeUnavailable, status.ErrSessionHomeUnavailable,
		status.ErrClaimUnavailable, status.ErrAgentStoreUnavailable, shellenv.ErrStoreUnavailable, agents.ErrConflict} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// writeError writes err as problem+json. It is the single error writer of the
// server: the validator, the strict request and response error handlers, the
// parameter binder, auth and the body limit all end here.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p := s.redact(problemFor(err))
	if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
		// The client went away and the request ended with it: the client's
		// doing, and no one reads the answer.
		s.logger.InfoContext(r.Context(), "client went away", "method", r.Method, "path", r.URL.Path, "err", err)
		writeProblem(w, r, p)
		return
	}
	if p.Status >= 500 && p.Code != "env_resolution_failed" {
		s.logger.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	} else {
		s.logger.DebugContext(r.Context(), "request rejected", "method", r.Method, "path", r.URL.Path, "code", p.Code, "err", err)
	}
	var tooMany *exec.TooManyJobsError
	if errors.As(err, &tooMany) {
		secs := int(tooMany.RetryAfter.Seconds() + 0.5)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	}
	if p.Status == http.StatusServiceUnavailable && isClusterUnavailable(err) {
		w.Header().Set("Retry-After", strconv.Itoa(clusterRetryAfter))
	}
	writeProblem(w, r, p)
}

// redact takes the token out of p's texts: an error may quote what the
// client sent (an unknown field's name, say), and no answer carries the
// token. The problem's instance is the path the client sent, left as is.
func (s *Server) redact(p api.Problem) api.Problem {
	tok := string(s.token)
	if tok == "" {
		return p
	}
	if p.Detail != nil && strings.Contains(*p.Detail, tok) {
		p.Detail = ptr(strings.ReplaceAll(*p.Detail, tok, "[token]"))
	}
	if p.Errors != nil {
		errs := make([]string, len(*p.Errors))
		for i, e := range *p.Errors {
			errs[i] = strings.ReplaceAll(e, tok, "[token]")
		}
		p.Errors = &errs
	}
	return p
}

// writeProblem writes p with the request id of r.
func writeProblem(w http.ResponseWriter, r *http.Request, p api.Problem) {
	if id := requestIDFrom(r.Context()); id != "" {
		p.RequestId = ptr(id)
	}
	p.Instance = ptr(r.URL.Path)
	w.Header().Set("Content-Type", problemContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(p.Status))
	// An encoding error here means the client has gone; there is no one to tell.
	_ = json.NewEncoder(w).Encode(p)
}

func ptr[T any](v T) *T { return &v }
