package main

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestUnreadBodyClosesAtOnce: a request whose declared body never comes,
// and that is answered without it (a GET, which takes no body; a request
// refused before its body is read), is answered at once and its connection
// closed right after, with the default body deadline (30 s) in force: the
// server does not sit on the connection waiting for a body it will not
// use. A request whose body was read keeps its connection.
func TestUnreadBodyClosesAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t) // http.bodyTimeoutMs: the default 30 s
	// Far below the body deadline, far above a loaded machine's delays.
	const limit = 8 * time.Second
	auth := "Authorization: Bearer " + s.Token + "\r\n"
	tests := []struct {
		name, request string
		status        int
	}{
		{"GET of an open route", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n", 200},
		{"GET of a route with a token", "GET /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "Content-Length: 10\r\n\r\n", 200},
		{"DELETE of an unknown job", "DELETE /jobs/job_nope HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "Content-Length: 10\r\n\r\n", 404},
		{"POST without a token", "POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", 401},
		{"POST to a host not served", "POST /exec HTTP/1.1\r\nHost: example.com\r\n" + auth + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n", 421},
		{"POST over the body limit", "POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + "Content-Type: application/json\r\nContent-Length: 99999999\r\n\r\n", 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := dialServer(t, s)
			start := time.Now()
			if _, err := io.WriteString(c, tt.request); err != nil {
				t.Fatal(err)
			}
			resp, body, closed := readAnswer(t, c, limit)
			if resp.StatusCode != tt.status || !closed {
				t.Errorf("= %d %s, closed=%v after %v; want %d and the connection closed within %v",
					resp.StatusCode, body, closed, time.Since(start).Round(time.Millisecond), tt.status, limit)
			}
			if !resp.Close {
				t.Error("the answer does not say Connection: close")
			}
		})
	}

	t.Run("body read, connection kept", func(t *testing.T) {
		t.Parallel()
		c := dialServer(t, s)
		_ = c.SetDeadline(time.Now().Add(limit))
		br := bufio.NewReader(c)
		payload := `{"command":"true"}`
		for i := range 2 {
			if _, err := io.WriteString(c, "POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\n"+auth+
				"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(payload))+"\r\n\r\n"+payload); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d on one connection: %v", i, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Close {
				t.Fatalf("request %d = %d, close=%v; want 200 and the connection kept", i, resp.StatusCode, resp.Close)
			}
		}
	})
}
