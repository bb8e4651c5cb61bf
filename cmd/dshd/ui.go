package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// uiURL is the UI's address on the startup line: no credential, ever (see
// dshd ui for the way in).
func uiURL(base string) string {
	if strings.HasPrefix(base, "unix:") {
		return "none (a browser needs a TCP address)"
	}
	return base + "/ui/ (a login link: dshd ui)"
}

const uiUsageHead = `Usage: dshd ui [flags]

Prints a one-time login URL of the diagnostics UI of the dshd running at
--addr: open it in a browser within 60 seconds; it works once. The token is
read from the file the server uses (--token-file, else <home>/server.token)
and sent only to the server.

Flags:
`

// uiOptions are the flags of dshd ui.
type uiOptions struct {
	addr, home, config, tokenFile string
	timeout                       time.Duration
}

// runUI is dshd ui: it asks the running server for a login URL (POST
// /ui/login-codes with the token) and prints it on stdout.
func runUI(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseUIFlags(args, stdout, stderr)
	if errors.Is(err, errExit) {
		return nil
	}
	if err != nil {
		return err
	}
	hostPort, err := uiHostPort(o.addr)
	if err != nil {
		return err
	}
	tokenPath := o.tokenFile
	if tokenPath == "" {
		cfg, err := loadConfig(o.config)
		if err != nil {
			return err
		}
		home, err := resolveHome(options{home: o.home}, cfg, getenv)
		if err != nil {
			return err
		}
		tokenPath = filepath.Join(home, "server.token")
	}
	token, err := readTokenFile(tokenPath)
	if err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	url, expiresAt, err := requestLoginURL(ctx, hostPort, token, o.addr, tokenPath)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, url)
	fmt.Fprintf(stderr, "Open this URL within %s; it works once.\n", time.Until(expiresAt).Round(time.Second))
	return nil
}

// parseUIFlags parses the flags of dshd ui; errExit after -h, which
// prints the usage on stdout.
func parseUIFlags(args []string, stdout, stderr io.Writer) (uiOptions, error) {
	var o uiOptions
	fs := flag.NewFlagSet("dshd ui", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.addr, "addr", "127.0.0.1:7433", "the server's address (host:port)")
	fs.StringVar(&o.home, "home", "", "the server's home (default: config dshHome, else $DSH_HOME, else ~/.dsh)")
	fs.StringVar(&o.config, "config", "", "the server's configuration file (for its dshHome)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the bearer token (default: <home>/server.token)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for the server")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, uiUsageHead)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return o, errExit
		}
		fmt.Fprint(stderr, uiUsageHead)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("ui: unexpected arguments: %q", fs.Args())
	}
	return o, nil
}

// uiHostPort is where dshd ui reaches the server at addr: a TCP address,
// its host 127.0.0.1 when the server listens on every interface.
func uiHostPort(addr string) (string, error) {
	if strings.HasPrefix(addr, "unix:") {
		return "", errors.New("ui: --addr is a Unix socket, which no browser reaches; run dshd on a TCP address to use the UI")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("ui: --addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // a server on every interface answers here
	}
	return net.JoinHostPort(host, port), nil
}

// requestLoginURL asks the server at hostPort for a one-time login URL
// with token; addr and tokenPath name, in its errors, where the server and
// the token were looked for.
func requestLoginURL(ctx context.Context, hostPort, token, addr, tokenPath string) (string, time.Time, error) {
	endpoint := "http://" + hostPort + "/ui/login-codes"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("ui: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("ui: is dshd running at %s? %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("ui: read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		var p struct{ Title, Detail string }
		_ = json.Unmarshal(body, &p)
		what := p.Detail
		if what == "" {
			what = p.Title
		}
		if resp.StatusCode == http.StatusUnauthorized {
			what += fmt.Sprintf(" (is %s the token file of the server at %s?)", tokenPath, addr)
		}
		return "", time.Time{}, fmt.Errorf("ui: the server answered %s: %s", resp.Status, what)
	}
	var lc struct {
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expiresAt"`
	}
	if err := json.Unmarshal(body, &lc); err != nil || lc.URL == "" {
		return "", time.Time{}, fmt.Errorf("ui: unexpected answer from %s: %.200s", endpoint, body)
	}
	return lc.URL, lc.ExpiresAt, nil
}

// readTokenFile reads a token file, refusing it like the server does when
// it is too short.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no token file at %s: start dshd first, or give --home or --token-file as the server has them", path)
	}
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	return checkToken(path, b)
}
