package reporter

// The reporter's client of the agent's HTTP server: GET /report, GET /held,
// and PUT /required and PUT /sets, which the agent takes only with its token.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/holdfast-project/holdfast/internal/report"
)

// fetch reads /report?after=N. When the agent's journal is behind the
// cursor, the agent started again: its journal is read from the start.
func (r *Reporter) fetch(ctx context.Context) (*report.Report, error) {
	rep, err := r.get(ctx, r.after)
	if err != nil {
		return nil, err
	}
	if rep.Next == 0 || rep.Next-1 < r.after || (!r.journal.IsZero() && !rep.Started.Equal(r.journal)) {
		r.log.Info("the agent's journal starts again (the agent restarted)", "cursor", r.after, "next", rep.Next)
		r.after = 0
		if rep, err = r.get(ctx, 0); err != nil {
			return nil, err
		}
	}
	r.journal = rep.Started
	if len(rep.Events) > 0 && rep.Events[0].Seq > r.after+1 {
		r.log.Warn("journal events dropped by the agent before they were read", "from", r.after+1, "to", rep.Events[0].Seq-1)
	}
	return rep, nil
}

func (r *Reporter) get(ctx context.Context, after uint64) (*report.Report, error) {
	body, u, err := r.getAgent(ctx, "/report?after="+url.QueryEscape(fmt.Sprint(after)), 4<<20)
	if err != nil {
		return nil, err
	}
	var rep report.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, fmt.Errorf("GET %s: decoding: %w", u, err)
	}
	return &rep, nil
}

// getAgent GETs path from the agent: the body (at most limit bytes) of a
// 200, and the URL asked, for errors.
func (r *Reporter) getAgent(ctx context.Context, path string, limit int64) (body []byte, u string, err error) {
	u = strings.TrimSuffix(r.cfg.Agent, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, u, fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, u, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, u, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, u, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, u, nil
}

// getHeld reads the agent's GET /held.
func (r *Reporter) getHeld(ctx context.Context) (report.Held, error) {
	body, u, err := r.getAgent(ctx, "/held", 64<<20)
	if err != nil {
		return nil, err
	}
	held, err := report.ParseHeld(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	return held, nil
}

// putRequired sends the agent at agent the set of required images (body,
// report.RequiredSet as JSON): PUT /required, which answers 204.
func putRequired(ctx context.Context, hc *http.Client, agent string, tok *agentToken, body []byte) error {
	return putAgent(ctx, hc, agent, "/required", tok, body)
}

// putAgent PUTs body to the agent's path, which answers 204. It sends the
// agent's token; when the agent answers 401, the token file is read again
// (the agent may have made a new one when it started) and body sent once
// more.
func putAgent(ctx context.Context, hc *http.Client, agent, path string, tok *agentToken, body []byte) error {
	u := strings.TrimSuffix(agent, "/") + path
	for again := false; ; again = true {
		token, err := tok.get(again)
		if err != nil {
			return fmt.Errorf("PUT %s: %w", u, err)
		}
		code, err := putOnce(ctx, hc, u, token, body)
		if code == http.StatusUnauthorized && !again && tok.path != "" {
			continue
		}
		return err
	}
}

// putOnce PUTs body to u with token (none when empty): the status code, and
// an error unless it is 204.
func putOnce(ctx context.Context, hc *http.Client, u, token string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("PUT %s: %w", u, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusNoContent {
		return resp.StatusCode, fmt.Errorf("PUT %s: %s: %s", u, resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp.StatusCode, nil
}

// agentToken is the token the agent takes from its own reporter alone, read
// from the file the agent keeps it in (its --token-file; the reporter's
// --token-file names the same file). No path: no token is sent.
type agentToken struct {
	path string

	mu    sync.Mutex
	value string
	read  bool
}

// maxToken bounds the token file's read; the agent refuses larger ones.
const maxToken = 4 << 10

// get is the token, read from the file the first time and again when asked.
func (t *agentToken) get(again bool) (string, error) {
	if t == nil || t.path == "" {
		return "", nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.read && !again {
		return t.value, nil
	}
	f, err := os.Open(t.path)
	if err != nil {
		return "", fmt.Errorf("reading the agent's token: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxToken))
	if err != nil {
		return "", fmt.Errorf("reading the agent's token %s: %w", t.path, err)
	}
	t.value, t.read = strings.TrimSpace(string(data)), true
	return t.value, nil
}
