package shellenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentCollectSeesWholeSnapshots registers and disposes
// contributors while many Collects run, and checks that every overlay is
// internally consistent: the keys of one contributor (and of one plugin)
// are all present with the same version, or all absent.
func TestConcurrentCollectSeesWholeSnapshots(t *testing.T) {
	const (
		rounds    = 200
		readers   = 8
		perReader = 500
	)
	ctx := context.Background()
	r, _ := mustNew(t, Options{})
	// Unrelated contributors so that snapshots have some size.
	for i := range 50 {
		mustRegister(t, r, staticSpec(fmt.Sprintf("bg-%02d", i), fmt.Sprintf("DSH_BG_%02d", i), "x"))
	}

	var wg sync.WaitGroup
	wg.Go(func() {
		for v := range rounds {
			val := strconv.Itoa(v)
			mustRegister(t, r, staticSpec("c", "DSH_C_A", val, "DSH_C_B", val))
			p, err := r.OpenPlugin(ctx, "scope", time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			s1 := Spec{Name: "p1", Plugin: p.ID, Keys: []KeySpec{{"DSH_P_A", "d"}},
				Resolver: ResolverSpec{Kind: KindTemplate, Values: map[string]string{"DSH_P_A": val + "-{job.id}"}}}
			s2 := staticSpec("p2", "DSH_P_B", val+"-job")
			s2.Plugin = p.ID
			mustRegister(t, r, s1)
			mustRegister(t, r, s2)
			if err := r.Unregister(ctx, "c"); err != nil {
				t.Error(err)
				return
			}
			if _, err := r.RenewPlugin(ctx, p.ID, 2*time.Hour); err != nil {
				t.Error(err)
				return
			}
			if err := r.ClosePlugin(ctx, p.ID); err != nil {
				t.Error(err)
				return
			}
		}
	})

	var with, without atomic.Int64 // overlays with and without contributor c
	errc := make(chan error, readers)
	for range readers {
		wg.Go(func() {
			for range perReader {
				o, err := r.Collect(ctx, Execution{JobID: "job"})
				if err != nil {
					errc <- err
					return
				}
				if _, ok := o.Get("DSH_C_A"); ok {
					with.Add(1)
				} else {
					without.Add(1)
				}
				if err := checkOverlay(o); err != nil {
					errc <- err
					return
				}
				if err := checkDeclarations(r.Declarations()); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	t.Logf("overlays with contributor c: %d, without: %d", with.Load(), without.Load())
}

func checkOverlay(o Overlay) error {
	kvs := o.All()
	if !slices.IsSortedFunc(kvs, func(a, b KV) int { return cmpString(a.Key, b.Key) }) {
		return errors.New("overlay not sorted")
	}
	if o.Len() < 52 {
		return fmt.Errorf("overlay has %d entries, want at least the built-ins and background", o.Len())
	}
	a, aok := o.Get("DSH_C_A")
	b, bok := o.Get("DSH_C_B")
	if aok != bok || a != b {
		return fmt.Errorf("torn contributor: DSH_C_A=%q (%v) DSH_C_B=%q (%v)", a, aok, b, bok)
	}
	pa, paok := o.Get("DSH_P_A")
	pb, pbok := o.Get("DSH_P_B")
	// p2 registers after p1, and the plugin's close and renewal replace
	// both at once, so DSH_P_B never appears without DSH_P_A.
	if pbok && (!paok || pa != pb) {
		return fmt.Errorf("torn plugin: DSH_P_A=%q (%v) DSH_P_B=%q (%v)", pa, paok, pb, pbok)
	}
	return nil
}

func checkDeclarations(ds []Declaration) error {
	has := map[string]bool{}
	for _, d := range ds {
		has[d.Key] = true
	}
	if has["DSH_C_A"] != has["DSH_C_B"] || has["DSH_P_B"] && !has["DSH_P_A"] {
		return fmt.Errorf("torn declarations: %v", has)
	}
	return nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
