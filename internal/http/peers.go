package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dshd/dshd/internal/http/api"
)

// peerListTimeout bounds how long a listing waits for the other replicas.
const peerListTimeout = 5 * time.Second

// peerLister collects what the other replicas list (cluster mode): each is
// asked with signed forwarding headers, so it answers with its own.
type peerLister struct {
	client  *http.Client
	cluster clusterReporter
	self    string
	token   string
	key     []byte // signs the requests (signPeer)
}

func newPeerLister(cluster clusterReporter, self, token string, key []byte) *peerLister {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // replicas talk directly, whatever the proxy variables say
	return &peerLister{client: &http.Client{Transport: tr}, cluster: cluster, self: self, token: token, key: key}
}

// jobs returns the jobs (in state, when not empty) of every other replica
// heard from, and the ids of those that did not answer in time, sorted.
func (p *peerLister) jobs(ctx context.Context, state string) ([]api.Job, []string) {
	ctx, cancel := context.WithTimeout(ctx, peerListTimeout)
	defer cancel()
	var (
		mu     sync.Mutex
		all    []api.Job
		failed []string
		wg     sync.WaitGroup
	)
	for _, r := range p.cluster.Status().Replicas {
		if r.Self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobs, err := p.listJobs(ctx, r.ID, r.URL, state)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, r.ID)
				return
			}
			all = append(all, jobs...)
		}()
	}
	wg.Wait()
	slices.Sort(failed)
	return all, failed
}

// listJobs asks the replica id at base for its own jobs.
func (p *peerLister) listJobs(ctx context.Context, id, base, state string) ([]api.Job, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("replica URL %q is not an HTTP URL", base)
	}
	u = u.JoinPath("jobs")
	if state != "" {
		u.RawQuery = url.Values{"state": {state}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	signPeer(req.Header, p.key, p.self, id, req.Method, req.URL.RequestURI(), nil, time.Now())
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
	}
	var jobs []api.Job
	if err := json.NewDecoder(resp.Body).Decode(&jobs); err != nil {
		return nil, fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	return jobs, nil
}

// servedForPeerKey marks the context of a request another replica sent
// (admitted by peerGate): it is answered with this replica's own state
// only, never fanned out again.
type servedForPeerKey struct{}

func servedForPeer(ctx context.Context) bool {
	v, _ := ctx.Value(servedForPeerKey{}).(bool)
	return v
}

// joinIDs is ids as a header value.
func joinIDs(ids []string) string { return strings.Join(ids, ",") }
