package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/cluster"
	"github.com/dshd/dshd/internal/cluster/natstest"
	"github.com/dshd/dshd/internal/shellenv"
)

// replica is one shared registry on its own NATS connection.
type replica struct {
	node *cluster.Node
	reg  *shellenv.Registry
	stop context.CancelFunc
}

// startReplica connects to url and follows the registry until the test
// ends (or kill).
func startReplica(t *testing.T, id, url string) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	node, err := cluster.Connect(ctx, cluster.Config{URLs: []string{url}, ReplicaID: id})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	reg, err := shellenv.New(shellenv.Options{Home: filepath.Join(t.TempDir(), "home"), Store: node.RegistryStore()})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.FollowRegistry(ctx, reg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reg.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("registry not loaded within 30s")
	}
	r := &replica{node: node, reg: reg, stop: cancel}
	t.Cleanup(r.kill)
	return r
}

func (r *replica) kill() { r.stop(); r.node.Close() }

func startThree(t *testing.T) (*natstest.Cluster, []*replica) {
	nc := natstest.Start(t, 3)
	var rs []*replica
	for i, u := range nc.URLs {
		rs = append(rs, startReplica(t, fmt.Sprintf("r%d", i), u))
	}
	return nc, rs
}

func declared(r *shellenv.Registry, key string) *shellenv.Declaration {
	for _, d := range r.Declarations() {
		if d.Key == key {
			return &d
		}
	}
	return nil
}

// waitFor polls cond every millisecond for at most d.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return cond()
}

func staticSpec(name, plugin, key, value string) shellenv.Spec {
	return shellenv.Spec{
		Name: name, Plugin: plugin,
		Keys:     []shellenv.KeySpec{{Key: key, Description: "test fact"}},
		Resolver: shellenv.ResolverSpec{Kind: shellenv.KindStatic, Values: map[string]string{key: value}},
	}
}

func TestSharedRegistryPropagates(t *testing.T) {
	_, rs := startThree(t)
	ctx := context.Background()
	start := time.Now()
	if _, err := rs[0].reg.Register(ctx, staticSpec("team.repo", "", "DSH_REPO", "acme/widgets")); err != nil {
		t.Fatal(err)
	}
	written := time.Since(start)
	if declared(rs[0].reg, "DSH_REPO") == nil {
		t.Fatal("the registering replica does not list its own contributor after Register returned")
	}
	for i, r := range rs[1:] {
		if !waitFor(10*time.Second, func() bool { return declared(r.reg, "DSH_REPO") != nil }) {
			t.Fatalf("replica %d never saw DSH_REPO", i+1)
		}
		t.Logf("replica %d: DSH_REPO declared %s after the write began (write took %s)", i+1, time.Since(start), written)
		ov, err := r.reg.Collect(ctx, shellenv.Execution{JobID: "job_x"})
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := ov.Get("DSH_REPO"); !ok || v != "acme/widgets" {
			t.Fatalf("replica %d overlay DSH_REPO = %q, %v", i+1, v, ok)
		}
	}
	// Disposal propagates too, and the name is free again everywhere.
	if err := rs[2].reg.Unregister(ctx, "team.repo"); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if !waitFor(10*time.Second, func() bool { return declared(r.reg, "DSH_REPO") == nil }) {
			t.Fatalf("replica %d still declares DSH_REPO after disposal", i)
		}
	}
	if _, err := rs[1].reg.Register(ctx, staticSpec("team.repo", "", "DSH_REPO", "again")); err != nil {
		t.Fatalf("re-register after disposal: %v", err)
	}
	// Every replica built the same registry.
	if !waitFor(10*time.Second, func() bool {
		return rs[0].reg.Revision() == rs[1].reg.Revision() && rs[1].reg.Revision() == rs[2].reg.Revision()
	}) {
		t.Fatalf("revisions differ: %d %d %d", rs[0].reg.Revision(), rs[1].reg.Revision(), rs[2].reg.Revision())
	}
}

func TestSharedRegistryOneWinner(t *testing.T) {
	_, rs := startThree(t)
	ctx := context.Background()
	for round := range 5 {
		// Same name on all three, then different names claiming one key.
		for _, sameName := range []bool{true, false} {
			key := fmt.Sprintf("DSH_RACE_%d_%s", round, map[bool]string{true: "NAME", false: "KEY"}[sameName])
			var wg sync.WaitGroup
			errs := make([]error, len(rs))
			start := make(chan struct{})
			for i, r := range rs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("race.%d.name", round)
					if !sameName {
						name = fmt.Sprintf("race.%d.key.%d", round, i)
					}
					<-start
					_, errs[i] = r.reg.Register(ctx, staticSpec(name, "", key, fmt.Sprint(i)))
				}()
			}
			close(start)
			wg.Wait()
			wins := 0
			for i, err := range errs {
				switch {
				case err == nil:
					wins++
				case sameName && errors.Is(err, shellenv.ErrDuplicateContributor):
				case !sameName && errors.Is(err, shellenv.ErrKeyOwned):
				default:
					t.Fatalf("round %d sameName=%v replica %d: unexpected error %v", round, sameName, i, err)
				}
			}
			if wins != 1 {
				t.Fatalf("round %d sameName=%v: %d winners (errors %v), want exactly 1", round, sameName, wins, errs)
			}
			// Every replica agrees on the owner.
			var owner string
			for i, r := range rs {
				if !waitFor(10*time.Second, func() bool { return declared(r.reg, key) != nil }) {
					t.Fatalf("replica %d never saw %s", i, key)
				}
				d := declared(r.reg, key)
				if owner == "" {
					owner = d.Contributor
				} else if d.Contributor != owner {
					t.Fatalf("replica %d says %s is owned by %q, another says %q", i, key, d.Contributor, owner)
				}
			}
		}
	}
}

func TestSharedPluginLeaseExpiresWithoutItsReplica(t *testing.T) {
	_, rs := startThree(t)
	ctx := context.Background()
	p, err := rs[0].reg.OpenPlugin(ctx, "ephemeral", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs[0].reg.Register(ctx, staticSpec("eph.fact", p.ID, "DSH_EPH", "1")); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs[1:] {
		if !waitFor(10*time.Second, func() bool { return declared(r.reg, "DSH_EPH") != nil }) {
			t.Fatalf("replica %d never saw the plugin's contributor", i+1)
		}
	}
	// A contributor under the plugin, registered from another replica,
	// is part of the same value.
	if _, err := rs[1].reg.Register(ctx, staticSpec("eph.other", p.ID, "DSH_EPH2", "2")); err != nil {
		t.Fatal(err)
	}
	rs[0].kill() // the replica that opened the plugin is gone
	killed := time.Now()
	for i, r := range rs[1:] {
		// Readers hide the plugin at its lease on their clock; the store
		// removes the record itself (its time to live), which frees the
		// name and keys for registration.
		if !waitFor(15*time.Second, func() bool {
			_, err := r.reg.Register(ctx, staticSpec("eph.fact", "", "DSH_EPH", "durable now"))
			return err == nil || errors.Is(err, shellenv.ErrDuplicateContributor) && i == 1
		}) {
			t.Fatalf("replica %d: the expired plugin's contributor still holds its name %s after the replica died", i+1, time.Since(killed))
		}
	}
	t.Logf("plugin record removed by the store %s after its replica died", time.Since(killed))
	for i, r := range rs[1:] {
		if !waitFor(10*time.Second, func() bool {
			d := declared(r.reg, "DSH_EPH")
			return d != nil && d.Plugin == "" && declared(r.reg, "DSH_EPH2") == nil
		}) {
			t.Fatalf("replica %d: declarations after expiry: %+v", i+1, r.reg.Declarations())
		}
		if _, err := r.reg.Plugin(p.ID); !errors.Is(err, shellenv.ErrPluginNotFound) {
			t.Fatalf("replica %d: plugin after expiry: %v", i+1, err)
		}
	}
}
