//go:build soak

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// soakMetrics are the agent's own figures sampled during a soak.
var soakMetrics = []string{"process_resident_memory_bytes", "go_goroutines", "process_open_fds"}

// soakSample is one reading of soakMetrics, at a time since the start.
type soakSample struct {
	At     time.Duration
	Values map[string]float64
}

// soakRead reads soakMetrics from the agent's /metrics.
func soakRead(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	out := map[string]float64{}
	for _, name := range soakMetrics {
		fam, ok := fams[name]
		if !ok || len(fam.GetMetric()) == 0 {
			return nil, fmt.Errorf("/metrics has no %s", name)
		}
		out[name] = fam.GetMetric()[0].GetGauge().GetValue()
	}
	return out, nil
}

// soakSlope is the least-squares slope of metric over the samples taken at
// or after from, per minute.
func soakSlope(samples []soakSample, metric string, from time.Duration) (slope float64, n int) {
	var sx, sy, sxx, sxy float64
	for _, s := range samples {
		if s.At < from {
			continue
		}
		x, y := s.At.Minutes(), s.Values[metric]
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		n++
	}
	if n < 2 {
		return 0, n
	}
	fn := float64(n)
	den := fn*sxx - sx*sx
	if den == 0 {
		return 0, n
	}
	return (fn*sxy - sx*sy) / den, n
}

// TestSoak runs `holdfast run` for HOLDFAST_SOAK (a duration) under random
// churn: archives added, replaced, renamed and deleted; records removed with
// crictl and with containerd's client; pin labels stripped; containerd killed
// or stopped and started again. After every step it waits for a pass that
// began after the step, then checks the invariants (invCheck), again for up
// to a minute while they do not hold yet: violations still there then fail.
// Every 10 s it samples the agent's RSS, goroutines and open files; their
// least-squares slopes over the last two thirds of the run must show no
// growth (RSS < 1 MiB/min, goroutines and fds < 1/min). HOLDFAST_SOAK_REPORT
// names a file for the figures (JSON).
func TestSoak(t *testing.T) {
	requireRoot(t)
	total, err := time.ParseDuration(os.Getenv("HOLDFAST_SOAK"))
	if err != nil || total <= 0 {
		t.Fatalf("HOLDFAST_SOAK=%q: want a duration (make soak DURATION=30m)", os.Getenv("HOLDFAST_SOAK"))
	}
	seed := crashEnvInt(t, "HOLDFAST_CRASH_SEED", time.Now().UnixNano()&0x7fffffff)
	t.Logf("soak of %v, seed %d", total, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))

	s, imagesDir, dataDir, slots := crashScene(t)
	for _, sl := range slots {
		crashPlace(t, sl, 0, filepath.Join(imagesDir, sl.base+".tar"))
	}
	agent := startAgent(t, s.d, dataDir, []string{imagesDir})
	eventually(t, "/readyz to turn 200", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })

	// Sampling, every 10 s, aside.
	start := time.Now()
	var (
		mu       sync.Mutex
		samples  []soakSample
		sampErrs int
	)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			v, err := soakRead(agent.addr)
			mu.Lock()
			if err != nil {
				sampErrs++
			} else {
				samples = append(samples, soakSample{At: time.Since(start), Values: v})
			}
			mu.Unlock()
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	wantedNames := func() []string {
		var names []string
		for _, imgs := range crashSources(slots) {
			for _, img := range imgs {
				names = append(names, img.Names...)
			}
		}
		sort.Strings(names)
		return names
	}
	steps := map[string]int{}
	transient, violations := 0, 0
	for i := 0; time.Since(start) < total; i++ {
		names := wantedNames()
		kind := []string{"churn", "churn", "churn", "crictl-rmi", "ctr-rm", "strip-pins", "restart"}[rng.IntN(7)]
		if len(names) == 0 && kind != "restart" {
			kind = "churn"
		}
		var what string
		switch kind {
		case "churn":
			what = crashChurn(t, rng, imagesDir, slots)
		case "crictl-rmi":
			name := names[rng.IntN(len(names))]
			s.d.crictl(t, "rmi", name)
			what = "crictl rmi " + name
		case "ctr-rm":
			name := names[rng.IntN(len(names))]
			if err := s.d.Client.ImageService().Delete(s.d.ctx(), name, images.SynchronousDelete()); err != nil && !strings.Contains(err.Error(), "not found") {
				t.Fatalf("deleting %s: %v", name, err)
			}
			what = "ctr images rm --sync " + name
		case "strip-pins":
			name := names[rng.IntN(len(names))]
			rec, ok := s.d.record(t, name)
			if !ok {
				what = "strip pins of " + name + " (no record)"
				break
			}
			delete(rec.Labels, invCRIPinned)
			delete(rec.Labels, invPinned)
			if _, err := s.d.Client.ImageService().Update(s.d.ctx(), rec, "labels."+invCRIPinned, "labels."+invPinned); err != nil {
				t.Fatalf("stripping the pins of %s: %v", name, err)
			}
			what = "strip pins of " + name
		case "restart":
			if rng.IntN(2) == 0 {
				if err := syscall.Kill(s.p.PID(), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				what = "containerd killed and started again"
			} else {
				what = "containerd stopped and started again"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = s.p.Stop(ctx)
			cancel()
			s.start()
		}
		steps[kind]++

		// Settle: a pass that began after the step, ready, then the check;
		// again, for up to a minute, while it does not hold.
		var bad []string
		deadline := time.Now().Add(time.Minute)
		for attempt := 0; ; attempt++ {
			select {
			case err := <-agent.exited:
				t.Fatalf("holdfast run exited during the soak (step %d, %s): %v\n%s", i, what, err, tail(agent.dump(), 40))
			default:
			}
			eventually(t, "/readyz to turn 200", func() bool { code, _ := agent.get(t, "/readyz"); return code == 200 })
			gapScanned(t, agent, imagesDir)
			crashRemoveMarks(t, imagesDir)
			bad = invCheck(t, s.d, dataDir, []string{imagesDir}, crashSources(slots))
			if len(bad) == 0 {
				break
			}
			if attempt == 0 {
				transient++
				t.Logf("step %d (%s): not settled at the first check (%d): %s", i, what, len(bad), bad[0])
			}
			if time.Now().After(deadline) {
				violations += len(bad)
				t.Errorf("step %d (%s): invariants still broken a minute later:\n%s", i, what, strings.Join(bad, "\n"))
				break
			}
			time.Sleep(time.Second)
		}
		if i%10 == 0 {
			t.Logf("%v: step %d: %s", time.Since(start).Round(time.Second), i, what)
		}
	}
	close(stopSampling)
	<-sampled

	mu.Lock()
	defer mu.Unlock()
	from := total / 3
	bounds := map[string]float64{"process_resident_memory_bytes": 1 << 20, "go_goroutines": 1, "process_open_fds": 1}
	report := map[string]any{"duration": total.String(), "seed": seed, "steps": steps, "violations": violations,
		"stepsNotSettledAtFirstCheck": transient, "samples": len(samples), "sampleErrors": sampErrs}
	slopes := map[string]float64{}
	for _, m := range soakMetrics {
		slope, n := soakSlope(samples, m, from)
		slopes[m] = slope
		first, last := samples[0].Values[m], samples[len(samples)-1].Values[m]
		lo, hi := first, first
		for _, sm := range samples {
			lo, hi = min(lo, sm.Values[m]), max(hi, sm.Values[m])
		}
		report[m] = map[string]any{"slopePerMin": slope, "samplesInFit": n, "first": first, "last": last, "min": lo, "max": hi}
		t.Logf("%s: first %.0f, last %.0f, min %.0f, max %.0f; slope over the last 2/3 (%d samples) %.3f/min (bound %.0f)", m, first, last, lo, hi, n, slope, bounds[m])
		if slope >= bounds[m] {
			t.Errorf("%s grows: %.3f/min over the last two thirds, bound %.0f/min", m, slope, bounds[m])
		}
	}
	t.Logf("steps %v; %d violations; %d steps not settled at the first check; %d samples (%d failed)", steps, violations, transient, len(samples), sampErrs)
	if path := os.Getenv("HOLDFAST_SOAK_REPORT"); path != "" {
		data, _ := json.MarshalIndent(report, "", "  ")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Errorf("writing %s: %v", path, err)
		}
	}
}
