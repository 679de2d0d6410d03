// Package server serves the agent's HTTP endpoints: /metrics (Prometheus),
// /healthz (liveness: can holdfast reach containerd), /readyz (readiness:
// has the first pass applied), /report and /held (the summary, journal and
// held images the Kubernetes reporter reads), PUT /required (the images
// the node's workloads need) and PUT /sets (the ImageSets), which only the
// node's own reporter may send (auth.go). It listens on loopback by default.
package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/holdfast-project/holdfast/internal/report"
)

// DefaultAddr is the address the CLI listens on unless told otherwise.
const DefaultAddr = "127.0.0.1:9747"

const (
	// HealthTimeout bounds one health check; a slower check is a failure.
	HealthTimeout = 2 * time.Second
	// shutdownTimeout bounds the graceful shutdown once ctx ends.
	shutdownTimeout = 5 * time.Second
)

// Server is the HTTP server of the agent. It serves once: after Run returns it
// cannot be run again.
type Server struct {
	addr string
	http *http.Server
	mux  *http.ServeMux

	mu    sync.Mutex
	ln    net.Listener
	owner [sha256.Size]byte // the hash of the owner's token (see Owner)
	owned bool              // Owner was called
}

// New builds a server for addr. gatherer is exposed on /metrics; health is
// called (with a 2 s deadline) for /healthz; ready reports readiness and, when
// not ready, why, for /readyz. A nil gatherer exposes nothing; a nil health or
// ready always passes. New does not listen: call Listen, or let Run do it.
func New(addr string, gatherer prometheus.Gatherer, health func(context.Context) error, ready func() (bool, string)) *Server {
	if gatherer == nil {
		gatherer = prometheus.NewRegistry()
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("GET /healthz", healthz(health))
	mux.HandleFunc("GET /readyz", readyz(ready))
	return &Server{
		addr: addr,
		mux:  mux,
		http: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       60 * time.Second,
			MaxHeaderBytes:    16 << 10,
		},
	}
}

// Report serves GET /report?after=N from report: the agent's summary and the
// journal's events with a sequence number above N (0 when absent). Call it
// before Run.
func (s *Server) Report(report func(after uint64) report.Report) {
	s.mux.HandleFunc("GET /report", func(w http.ResponseWriter, r *http.Request) {
		var after uint64
		if v := r.URL.Query().Get("after"); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				noCache(w)
				http.Error(w, fmt.Sprintf("after=%q: not a sequence number", v), http.StatusBadRequest)
				return
			}
			after = n
		}
		body, err := json.Marshal(report(after))
		if err != nil {
			noCache(w)
			http.Error(w, fmt.Sprintf("encoding the report: %v", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(body, '\n'))
	})
}

// Held serves GET /held from held: what the node holds, a line per image
// record (report.Held's text form); 503 before the agent first judged the
// required images, which is when it first lists them for this.
func (s *Server) Held(held func() ([]byte, bool)) {
	s.mux.HandleFunc("GET /held", func(w http.ResponseWriter, r *http.Request) {
		noCache(w)
		text, ok := held()
		if !ok {
			http.Error(w, "no required set yet: the node's reporter sends one (PUT /required), and the held images are listed with it", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(text)
	})
}

// maxRequired bounds the body of PUT /required: 2,000 images of a few
// hundred bytes each fit many times over.
const maxRequired = 8 << 20

// Required serves PUT /required from the node's reporter, in the same pod
// or on the same host: the set of images the node's workloads need
// (report.RequiredSet as JSON), handed to set. It changes what the node
// keeps (with --pull-required, what it pulls), so it takes only the owner's
// requests (see Owner). The body is one JSON object with an "images" list
// (empty, not null or absent) and nothing after it; one that is not, or that
// set refuses, is 400 with the cause; 204 else.
func (s *Server) Required(set func(context.Context, report.RequiredSet) error) {
	s.change("PUT /required", func(w http.ResponseWriter, r *http.Request) {
		noCache(w)
		body, err := decodeRequired(http.MaxBytesReader(w, r.Body, maxRequired))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := set(r.Context(), body); err != nil {
			http.Error(w, fmt.Sprintf("the required set: %v", err), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// decodeRequired reads exactly one required set from r: a JSON object with
// an "images" list and no other field, then nothing but white space.
func decodeRequired(r io.Reader) (report.RequiredSet, error) {
	var body report.RequiredSet
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return body, fmt.Errorf("decoding the required set: %w", err)
	}
	if body.Images == nil {
		return body, errors.New(`decoding the required set: no images list (an empty set is {"images":[]})`)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("another JSON value")
		}
		return body, fmt.Errorf("decoding the required set: more after the required set: %w", err)
	}
	return body, nil
}

// maxSets bounds the body of PUT /sets: report.MaxSets sets of
// report.MaxSetImages references, each named twice (images and mayPull),
// fit at some 160 bytes a reference.
const maxSets = 32 << 20

// Sets serves PUT /sets from the node's reporter: every ImageSet it knows
// (report.StageSets as JSON), handed to set. It changes what the node keeps,
// so it takes only the owner's requests (see Owner), as PUT /required. The
// body is one JSON object with a "sets" list (empty, not null or absent) of
// at most report.MaxSets sets of at most report.MaxSetImages images each,
// and nothing after it; one that is not, or that set refuses (a set name
// that is no DNS subdomain name), is 400 with the cause; 204 else.
func (s *Server) Sets(set func(context.Context, report.StageSets) error) {
	s.change("PUT /sets", func(w http.ResponseWriter, r *http.Request) {
		noCache(w)
		body, err := decodeSets(http.MaxBytesReader(w, r.Body, maxSets))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := set(r.Context(), body); err != nil {
			http.Error(w, fmt.Sprintf("the image sets: %v", err), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// decodeSets reads exactly one body of PUT /sets from r, within its bounds.
func decodeSets(r io.Reader) (report.StageSets, error) {
	var body report.StageSets
	if err := decodeOne(r, &body, "the image sets"); err != nil {
		return body, err
	}
	if body.Sets == nil {
		return body, errors.New(`decoding the image sets: no sets list (no sets is {"sets":[]})`)
	}
	if len(body.Sets) > report.MaxSets {
		return body, fmt.Errorf("decoding the image sets: %d sets, more than %d", len(body.Sets), report.MaxSets)
	}
	for _, set := range body.Sets {
		if n := max(len(set.Images), len(set.MayPull)); n > report.MaxSetImages {
			return body, fmt.Errorf("decoding the image sets: set %q: %d images, more than %d", set.Name, n, report.MaxSetImages)
		}
	}
	return body, nil
}

// decodeOne reads exactly one JSON object into v from r, with no field v
// lacks, then nothing but white space; what names v in the errors.
func decodeOne(r io.Reader, v any, what string) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding %s: %w", what, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("another JSON value")
		}
		return fmt.Errorf("decoding %s: more after the body: %w", what, err)
	}
	return nil
}

// Listen binds the server's address, so that Addr reports the real one (with
// port 0, the port the kernel chose) before Run serves. Listening twice is an
// error.
func (s *Server) Listen(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return fmt.Errorf("listening on %s: already listening on %s", s.addr, s.ln.Addr())
	}
	return s.listenLocked(ctx)
}

func (s *Server) listenLocked(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.addr, err)
	}
	s.ln = ln
	return nil
}

// Addr is the address the server listens on once Listen (or Run) has bound
// it, else the address it was given.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.addr
}

// Run serves until ctx ends, then shuts down gracefully: in-flight requests get
// a few seconds to finish, and the rest are cut. It listens first unless
// Listen already did. It returns nil when stopped by ctx.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.ln == nil {
		if err := s.listenLocked(ctx); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	ln := s.ln
	s.mu.Unlock()
	addr := ln.Addr().String()

	served := make(chan error, 1)
	go func() { served <- s.http.Serve(ln) }()

	select {
	case err := <-served:
		// Serve only returns early on a listener failure.
		return fmt.Errorf("serving %s: %w", addr, err)
	case <-ctx.Done():
	}

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	shutdownErr := s.http.Shutdown(sctx)
	if shutdownErr != nil {
		// Requests still running past the deadline: cut them.
		_ = s.http.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving %s: %w", addr, err)
	}
	if shutdownErr != nil {
		return fmt.Errorf("shutting down %s: %w", addr, shutdownErr)
	}
	return nil
}

func healthz(health func(context.Context) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		noCache(w)
		if health == nil {
			_, _ = fmt.Fprintln(w, "ok")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), HealthTimeout)
		defer cancel()
		// A check that ignores its ctx must not hold the probe past the
		// deadline: run it aside and stop waiting when the deadline passes.
		done := make(chan error, 1)
		go func() { done <- health(ctx) }()
		var err error
		select {
		case err = <-done:
		case <-ctx.Done():
			err = fmt.Errorf("health check: no answer within %s", HealthTimeout)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	}
}

func readyz(ready func() (bool, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		noCache(w)
		if ready != nil {
			if ok, reason := ready(); !ok {
				if reason == "" {
					reason = "not ready"
				}
				http.Error(w, reason, http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = fmt.Fprintln(w, "ready")
	}
}

func noCache(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
}
