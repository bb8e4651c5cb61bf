package httpapi

import (
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/dshd/dshd/internal/cluster/status"
)

// jobRouter says where a job runs (cluster mode only; *cluster.Node).
type jobRouter interface {
	// JobOwner returns the base URL of the replica that runs job id, or
	// nil when this replica does (or the id names no replica). Errors
	// wrap status.ErrOwnerUnavailable.
	JobOwner(id string) (*url.URL, error)
}

// forwardedHeader marks a request one replica forwarded to another. A
// request carrying it is served where it lands, never forwarded again: a
// request takes at most one hop.
const forwardedHeader = "Dsh-Forwarded-By"

// headersSetHere are the response headers this replica's middleware has
// already set on a forwarded request's answer; the owner's copies are
// dropped so each appears once.
var headersSetHere = []string{"X-Content-Type-Options", "Referrer-Policy", "X-Frame-Options", "Content-Security-Policy", "X-Request-Id"}

// jobIDFromPath returns the job id of /jobs/{id} and /jobs/{id}/…, or "".
func jobIDFromPath(p string) string {
	rest, ok := strings.CutPrefix(p, "/jobs/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// newForwarder returns the middleware that sends every request for a job
// another replica runs (/jobs/{id} and everything under it: state,
// long-polls, SSE and raw output, stdin, cancel) to that replica in one
// hop, streaming both ways and flushing as the owner writes. It runs after
// authentication (the owner checks the same token again) and before the
// contract's validator (the owner validates). A job whose owner is not
// available is answered 503 job_owner_unavailable here, and is not run
// elsewhere.
func (s *Server) newForwarder(router jobRouter, self string) func(http.Handler) http.Handler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // replicas talk directly, whatever the proxy variables say
	tr.MaxIdleConnsPerHost = 64
	proxy := &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1, // every write of the owner reaches the client at once
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := pr.In.Context().Value(forwardTargetKey).(*url.URL)
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Header.Set(forwardedHeader, self)
			pr.Out.Header.Set("X-Request-ID", requestIDFrom(pr.In.Context()))
		},
		ModifyResponse: func(resp *http.Response) error {
			for _, h := range headersSetHere {
				resp.Header.Del(h)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left
			}
			s.writeError(w, r, errors.Join(status.ErrOwnerUnavailable, err))
		},
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := jobIDFromPath(r.URL.Path)
			if id == "" || r.Header.Get(forwardedHeader) != "" {
				next.ServeHTTP(w, r)
				return
			}
			target, err := router.JobOwner(id)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if target == nil {
				next.ServeHTTP(w, r)
				return
			}
			proxy.ServeHTTP(w, r.WithContext(withForwardTarget(r.Context(), target)))
		})
	}
}
