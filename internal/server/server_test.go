package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// deadline is generous: tests check outcomes, not speed.
const deadline = 30 * time.Second

var client = &http.Client{Timeout: deadline}

// start listens on a free loopback port and serves until the test ends; it
// returns the base URL and a channel that yields Run's result.
func start(t *testing.T, s *Server) (context.CancelFunc, string, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Listen(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		done <- s.Run(ctx)
		close(stopped)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(deadline):
			t.Error("server did not stop")
		}
	})
	return cancel, "http://" + s.Addr(), done
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	var failing atomic.Pointer[error]
	health := func(ctx context.Context) error {
		if err := failing.Load(); err != nil {
			return *err
		}
		return ctx.Err()
	}
	_, base, _ := start(t, New("127.0.0.1:0", nil, health, nil))

	if code, body := get(t, base+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	err := errors.New("containerd: connection refused")
	failing.Store(&err)
	if code, body := get(t, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "containerd: connection refused") {
		t.Errorf("/healthz = %d %q, want 503 with the error", code, body)
	}
	failing.Store(nil)
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after recovery = %d, want 200", code)
	}
}

func TestHealthzTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	ended := make(chan error, 1)
	returned := make(chan struct{})
	// A check that ignores its ctx and hangs: the probe must still answer.
	// An observer beside it reports how the check's ctx ended.
	health := func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			ended <- ctx.Err()
		}()
		<-release
		close(returned)
		return nil
	}
	_, base, _ := start(t, New("127.0.0.1:0", nil, health, nil))

	code, body := get(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no answer within 2s") {
		t.Errorf("/healthz = %d %q, want 503 naming the timeout", code, body)
	}
	select {
	case <-returned:
		t.Error("the hung check returned before the probe answered")
	default:
	}
	// The answer came from the check's deadline, not from an early cancel.
	select {
	case err := <-ended:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the check's ctx ended with %v, want its deadline", err)
		}
	case <-time.After(deadline):
		t.Fatal("the check's ctx never ended")
	}
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ok, reason := false, "first pass not done: 2 of 5 sources applied"
	ready := func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return ok, reason
	}
	_, base, _ := start(t, New("127.0.0.1:0", nil, nil, ready))

	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || strings.TrimSpace(body) != reason {
		t.Errorf("/readyz = %d %q, want 503 %q", code, body, reason)
	}
	mu.Lock()
	reason = ""
	mu.Unlock()
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || strings.TrimSpace(body) != "not ready" {
		t.Errorf("/readyz without a reason = %d %q, want 503 \"not ready\"", code, body)
	}
	mu.Lock()
	ok = true
	mu.Unlock()
	if code, body := get(t, base+"/readyz"); code != http.StatusOK || strings.TrimSpace(body) != "ready" {
		t.Errorf("/readyz = %d %q, want 200 ready", code, body)
	}
	// nil checks always pass
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with a nil check = %d, want 200", code)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "holdfast_test_total", Help: "A test counter."}, []string{"result"})
	reg.MustRegister(c)
	c.WithLabelValues("ok").Add(3)
	_, base, _ := start(t, New("127.0.0.1:0", reg, nil, nil))

	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics = %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	mf, ok := fams["holdfast_test_total"]
	if !ok || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetCounter().GetValue() != 3 {
		t.Errorf("holdfast_test_total not exposed as 3: %v", mf)
	}
}

func TestMethodsAndPaths(t *testing.T) {
	t.Parallel()
	_, base, _ := start(t, New("127.0.0.1:0", nil, nil, nil))
	resp, err := client.Post(base+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d, want 405", resp.StatusCode)
	}
	req, err := http.NewRequest(http.MethodHead, base+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /readyz = %d, want 200", resp.StatusCode)
	}
	if code, _ := get(t, base+"/"); code != http.StatusNotFound {
		t.Errorf("GET / = %d, want 404", code)
	}
}

func TestShutdownOnCancel(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	release := make(chan struct{})
	var runReturned atomic.Bool
	runEarly := make(chan bool, 1)
	// readyz calls its check on the request's goroutine: while it blocks,
	// the request is in flight.
	ready := func() (bool, string) {
		close(entered)
		<-release
		runEarly <- runReturned.Load()
		return true, ""
	}
	s := New("127.0.0.1:0", nil, nil, ready)
	// The request is let go only once the shutdown has begun.
	s.http.RegisterOnShutdown(func() { close(release) })
	cancel, base, done := start(t, s)
	returned := make(chan error, 1)
	go func() {
		err := <-done
		runReturned.Store(true)
		returned <- err
	}()

	// A request in flight when ctx ends is let finish.
	inflight := make(chan int, 1)
	go func() {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			inflight <- 0
			return
		}
		resp.Body.Close()
		inflight <- resp.StatusCode
	}()
	<-entered
	cancel()
	var runErr error
	select {
	case early := <-runEarly:
		if early {
			t.Error("Run returned while a request was in flight")
		}
		select {
		case runErr = <-returned:
		case <-time.After(deadline):
			t.Fatal("Run did not return after cancel")
		}
	case runErr = <-returned:
		// The check signals before it returns: if it has not, Run did not
		// wait for the request.
		select {
		case <-runEarly:
		default:
			t.Fatal("Run returned while a request was in flight")
		}
	case <-time.After(deadline):
		t.Fatal("the shutdown neither let the request finish nor returned")
	}
	if runErr != nil {
		t.Errorf("Run after cancel: %v", runErr)
	}
	if code := <-inflight; code != http.StatusOK {
		t.Errorf("in-flight request got %d, want 200", code)
	}
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Error("still accepting connections after shutdown")
	}
}

// TestShutdownCutsHungRequest: a request that never finishes holds Run only
// until the shutdown deadline; then it is cut and Run says so.
func TestShutdownCutsHungRequest(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	ready := func() (bool, string) {
		close(entered)
		<-release
		return true, ""
	}
	s := New("127.0.0.1:0", nil, nil, ready)
	cancel, base, done := start(t, s)

	inflight := make(chan error, 1)
	go func() {
		resp, err := client.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		inflight <- err
	}()
	<-entered
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "shutting down "+s.Addr()) {
			t.Errorf("Run with a hung request = %v, want an error naming the shutdown", err)
		}
	case <-time.After(deadline):
		t.Fatal("Run did not return after cancel")
	}
	select {
	case err := <-inflight:
		if err == nil {
			t.Error("the hung request got an answer, want it cut")
		}
	case <-time.After(deadline):
		t.Fatal("the hung request was not cut")
	}
}

func TestRunListensItself(t *testing.T) {
	t.Parallel()
	s := New("127.0.0.1:0", nil, nil, nil)
	if got := s.Addr(); got != "127.0.0.1:0" {
		t.Errorf("Addr before listening = %q", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stop := time.Now().Add(deadline)
	for s.Addr() == "127.0.0.1:0" && time.Now().Before(stop) {
		time.Sleep(10 * time.Millisecond)
	}
	if code, _ := get(t, "http://"+s.Addr()+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestListenErrors(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	s := New(addr, nil, nil, nil)
	if err := s.Listen(context.Background()); err == nil || !strings.Contains(err.Error(), "listening on "+addr) {
		t.Errorf("Listen on a busy port: %v", err)
	}
	if err := s.Run(context.Background()); err == nil {
		t.Error("Run on a busy port returned nil")
	}

	s = New("127.0.0.1:0", nil, nil, nil)
	if err := s.Listen(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(context.Background()); err == nil {
		t.Error("listening twice returned nil")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil { // releases the listener
		t.Errorf("Run with an ended ctx: %v", err)
	}
}
