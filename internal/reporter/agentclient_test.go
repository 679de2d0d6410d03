package reporter

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-project/holdfast/internal/report"
	"github.com/holdfast-project/holdfast/internal/server"
)

// TestPutRequiredToken: the reporter's PUT /required against the agent's
// real server: without the token it is refused (401) and nothing is taken;
// with the token file the agent made, taken; after the agent made a new
// token (it started again), the reporter reads the file again on the 401 and
// the set is taken with the new one.
func TestPutRequiredToken(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	token, err := server.LoadToken(tokenFile, false)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		taken []report.RequiredSet
	)
	srv := server.New("127.0.0.1:0", nil, nil, nil)
	srv.Owner(token)
	srv.Required(func(_ context.Context, set report.RequiredSet) error {
		mu.Lock()
		defer mu.Unlock()
		taken = append(taken, set)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Listen(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	agent := "http://" + srv.Addr()
	hc := &http.Client{Timeout: 30 * time.Second}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(taken) }
	body := []byte(`{"images":[{"ref":"docker.io/library/nginx:1.27"}]}`)

	err = putRequired(ctx, hc, agent, &agentToken{}, body)
	if err == nil || !strings.Contains(err.Error(), "401") || count() != 0 {
		t.Fatalf("without a token: %v, %d sets taken; want 401 and none", err, count())
	}
	tok := &agentToken{path: tokenFile}
	if err := putRequired(ctx, hc, agent, tok, body); err != nil || count() != 1 {
		t.Fatalf("with the token file: %v, %d sets taken", err, count())
	}
	// The agent starts again with a new token: the file is rewritten.
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	fresh, err := server.LoadToken(tokenFile, false)
	if err != nil || fresh == token {
		t.Fatalf("a new token: %q, %v", fresh, err)
	}
	srv.Owner(fresh)
	if err := putRequired(ctx, hc, agent, tok, body); err != nil || count() != 2 {
		t.Fatalf("after the agent's new token: %v, %d sets taken; want the file read again", err, count())
	}
	// A file that is gone is an error naming it; nothing is sent.
	missing := &agentToken{path: filepath.Join(t.TempDir(), "none")}
	if err := putRequired(ctx, hc, agent, missing, body); err == nil || !strings.Contains(err.Error(), "none") || count() != 2 {
		t.Errorf("a missing token file: %v, %d sets taken", err, count())
	}
}
