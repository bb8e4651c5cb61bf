package tests

import (
	"io"
	"strconv"
	"testing"
	"time"
)

// slowConfig makes the server's read deadlines short enough to test.
const slowConfig = "http:\n  headerTimeoutMs: 500\n  bodyTimeoutMs: 500\n"

// TestLongResponsesOutliveReadDeadlines checks that the body deadline does
// not cut what legitimately takes long: an SSE stream, a long-poll and a
// slowly read raw download, each lasting several times the deadline.
func TestLongResponsesOutliveReadDeadlines(t *testing.T) {
	s := startServer(t, withConfig(slowConfig))

	var sse, poll, big job
	s.doJSON(t, "POST", "/exec", map[string]any{"command": "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.3; done", "background": true}, &sse)
	s.doJSON(t, "POST", "/exec", map[string]any{"command": "sleep 2", "background": true}, &poll)
	s.doJSON(t, "POST", "/exec", map[string]any{"command": "head -c 8000000 /dev/zero"}, &big)
	if sse.ID == "" || poll.ID == "" || big.State != "exited" {
		t.Fatalf("jobs not started: %+v %+v %+v", sse, poll, big)
	}

	done := make(chan string, 3)
	go func() {
		resp := s.doWith(t, "GET", "/jobs/"+sse.ID+"/output", nil, map[string]string{"Authorization": "Bearer " + s.Token})
		defer resp.Body.Close()
		events := readEvents(t, resp.Body, -1)
		if len(events) == 0 || events[len(events)-1].name != "exit" {
			done <- "SSE stream ended without its exit event"
			return
		}
		done <- ""
	}()
	go func() {
		var j job
		if st := s.doJSON(t, "GET", "/jobs/"+poll.ID+"?waitMs=10000", nil, &j); st != 200 || j.State != "exited" {
			done <- "long-poll answered " + strconv.Itoa(st) + " " + j.State + ", want 200 exited"
			return
		}
		done <- ""
	}()
	go func() {
		resp := s.do(t, "GET", "/jobs/"+big.ID+"/output?stream=stdout", nil)
		defer resp.Body.Close()
		var n int
		buf := make([]byte, 1<<20)
		for {
			m, err := io.ReadFull(resp.Body, buf)
			n += m
			if err != nil {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if n != 8000000 {
			done <- "slow raw download got " + strconv.Itoa(n) + " bytes, want 8000000"
			return
		}
		done <- ""
	}()
	for range 3 {
		select {
		case msg := <-done:
			if msg != "" {
				t.Error(msg)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a long response did not finish within 30s")
		}
	}
}
