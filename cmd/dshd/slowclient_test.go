package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// slowConfig makes the server's read deadlines short enough to test.
const slowConfig = "http:\n  headerTimeoutMs: 500\n  bodyTimeoutMs: 500\n"

// TestSlowClientsAreCutOff holds connections open the ways a local process
// could to pin file descriptors: headers never finished, a body announced
// and never sent (on an open route too), a body sent a byte at a time, a
// chunked body that stops. Each is answered or closed within the configured
// deadlines.
func TestSlowClientsAreCutOff(t *testing.T) {
	s := startServer(t, withConfig(slowConfig))
	auth := "Authorization: Bearer " + s.Token + "\r\n"
	const limit = 5 * time.Second

	t.Run("open route, body never sent", func(t *testing.T) {
		// No GET takes a body: it is answered without waiting for one, and
		// the connection closed.
		c := dialServer(t, s)
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n")
		resp, body, closed := readAnswer(t, c, limit)
		if resp.StatusCode != 200 || !closed {
			t.Errorf("= %d %s, closed=%v; want 200 and the connection closed", resp.StatusCode, body, closed)
		}
	})
	t.Run("route that takes a body, body never sent", func(t *testing.T) {
		c := dialServer(t, s)
		io.WriteString(c, "POST /agents/agt_x/resume HTTP/1.1\r\nHost: 127.0.0.1\r\n"+auth+"Content-Length: 10\r\n\r\n")
		resp, body, closed := readAnswer(t, c, limit)
		if resp.StatusCode != 408 || !strings.Contains(body, `"code":"body_timeout"`) || !closed {
			t.Errorf("= %d %s, closed=%v; want 408 body_timeout and the connection closed", resp.StatusCode, body, closed)
		}
	})
	t.Run("body a byte at a time", func(t *testing.T) {
		c := dialServer(t, s)
		payload := `{"command":"echo slow client ran"}`
		io.WriteString(c, "POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\n"+auth+
			"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(payload))+"\r\n\r\n")
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for i := 0; i < len(payload); i++ {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := c.Write([]byte{payload[i]}); err != nil {
					return
				}
			}
		}()
		resp, body, _ := readAnswer(t, c, limit)
		if resp.StatusCode != 408 || !strings.Contains(body, `"code":"body_timeout"`) {
			t.Errorf("= %d %s, want 408 body_timeout", resp.StatusCode, body)
		}
	})
	t.Run("chunked body that stops", func(t *testing.T) {
		c := dialServer(t, s)
		io.WriteString(c, "POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\n"+auth+
			"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"co\r\n")
		resp, body, closed := readAnswer(t, c, limit)
		if resp.StatusCode != 408 || !closed {
			t.Errorf("= %d %s, closed=%v; want 408 and the connection closed", resp.StatusCode, body, closed)
		}
	})
	t.Run("refused before the body is read", func(t *testing.T) {
		c := dialServer(t, s)
		io.WriteString(c, "POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
		resp, _, closed := readAnswer(t, c, limit)
		if resp.StatusCode != 401 || !closed {
			t.Errorf("= %d, closed=%v; want 401 and the connection closed", resp.StatusCode, closed)
		}
	})
	t.Run("headers never finished", func(t *testing.T) {
		c := dialServer(t, s)
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
		_ = c.SetReadDeadline(time.Now().Add(limit))
		if _, err := io.ReadAll(c); err != nil {
			t.Errorf("connection with unfinished headers not closed within %v: %v", limit, err)
		}
	})

	var jobs []job
	s.DoJSON(t, "GET", "/jobs", nil, &jobs)
	if len(jobs) != 0 {
		t.Errorf("%d jobs ran from bodies that never arrived", len(jobs))
	}
}

// TestLongResponsesOutliveReadDeadlines checks that the body deadline does
// not cut what legitimately takes long: an SSE stream, a long-poll and a
// slowly read raw download, each lasting several times the deadline.
func TestLongResponsesOutliveReadDeadlines(t *testing.T) {
	s := startServer(t, withConfig(slowConfig))

	var sse, poll, big job
	s.DoJSON(t, "POST", "/exec", map[string]any{"command": "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.3; done", "background": true}, &sse)
	s.DoJSON(t, "POST", "/exec", map[string]any{"command": "sleep 2", "background": true}, &poll)
	s.DoJSON(t, "POST", "/exec", map[string]any{"command": "head -c 8000000 /dev/zero"}, &big)
	if sse.ID == "" || poll.ID == "" || big.State != "exited" {
		t.Fatalf("jobs not started: %+v %+v %+v", sse, poll, big)
	}

	done := make(chan string, 3)
	go func() {
		resp := s.DoWith(t, "GET", "/jobs/"+sse.ID+"/output", nil, map[string]string{"Authorization": "Bearer " + s.Token})
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			done <- "SSE stream cut: " + err.Error()
			return
		}
		events, err := parseEvents(body)
		if err != nil || len(events) == 0 || events[len(events)-1].Event != "exit" {
			done <- fmt.Sprintf("SSE stream ended without its exit event (%v)", err)
			return
		}
		done <- ""
	}()
	go func() {
		var j job
		if st := s.DoJSON(t, "GET", "/jobs/"+poll.ID+"?waitMs=10000", nil, &j); st != 200 || j.State != "exited" {
			done <- "long-poll answered " + strconv.Itoa(st) + " " + j.State + ", want 200 exited"
			return
		}
		done <- ""
	}()
	go func() {
		resp := s.Do(t, "GET", "/jobs/"+big.ID+"/output?stream=stdout", nil)
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
